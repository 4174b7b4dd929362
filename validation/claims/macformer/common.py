"""Helpers shared by the Macformer claim modules: reading products, capped violations, exact evidence, inputs."""

import itertools
from collections.abc import Callable, Sequence

import numpy as np

from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS
from rfkit.estimators.ppsbn import matrix_norm, presbn
from rfkit.validation.domain import Range
from rfkit.validation.model import CellContext
from rfkit.validation.stats import Evidence, exact_test

KERNEL_NAMES = tuple(MACLAURIN_KERNELS)
MASK_KINDS = ("none", "padding", "causal", "general")
RESOLUTION = 0.5


def _readings(**axes: Sequence) -> dict[str, dict]:
    """Variant name -> reading dict for the product of reading axes (names join the values with ``|``)."""
    return {"|".join(str(v) for v in combo): dict(zip(axes, combo, strict=True))
            for combo in itertools.product(*axes.values())}


def _capped(values, cap: float = 1.0) -> np.ndarray:
    """Violations with non-finite entries counted as ``cap`` and everything capped at ``cap``."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), np.minimum(values, cap), cap)


def _rel_error(got, want, scale) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _capped(np.abs(np.asarray(got) - np.asarray(want)) / scale)


def _exact(values, ctx: CellContext, extra: dict | None = None, tolerance: float | None = None) -> Evidence:
    """Exact evidence on capped violations (largest entry), at the claim's or a stricter tolerance."""
    return exact_test(float(_capped(values).max(initial=0.0)), 0.0, tolerance=tolerance or ctx.tolerance, extra=extra)


def _p_range(words: str, why: str, up_to: float = 4.0) -> Range:
    """An RMF law's ``p > 1`` axis, tested up to ``up_to`` (the register's largest p: 4)."""
    return Range(words, 1.0, strict=(True, False), up_to=(None, up_to), why=why)


def _replicate_cap(ctx: CellContext, need: float, share: int = 1) -> tuple[int, bool]:
    """Replicates for a cell needing ``need``, capped at the tier's budget over ``share`` (features per replicate)."""
    cap = ctx.replicates // share
    return int(min(max(need, 2_000), cap)), need > cap


def _jackknife(values: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Tukey's jackknife pseudo-values ``R·θ(x̄) - (R - 1)·θ(x̄_{-r})`` of a smooth ``θ`` (``statistic``: ``(m, k)``
    means to ``(m,)``) of the mean of ``R`` iid vectors ``values (R, k)``: a mean test of them is the (asymptotic)
    jackknife test of ``θ(E x)``; a leave-one-out mean outside ``θ``'s domain gives a non-finite value (flagged)."""
    values = np.asarray(values, dtype=np.float64)
    count, mean = values.shape[0], values.mean(axis=0)
    leave_one_out = (count * mean[None, :] - values) / (count - 1)
    with np.errstate(all="ignore"):
        return count * statistic(mean[None, :])[0] - (count - 1) * statistic(leave_one_out)


def _mask(kind: str, n: int, rng: np.random.Generator) -> np.ndarray | None:
    """``M'`` (True = keep) of a mask type; every row keeps at least one key."""
    if kind in ("none", "causal"):
        return None if kind == "none" else np.tri(n, dtype=bool)
    if kind == "padding":
        keep = rng.random(n) < 0.7
        keep[rng.integers(n)] = True
        return np.broadcast_to(keep, (n, n)).copy()
    keep = rng.random((n, n)) < 0.5
    keep[np.arange(n), rng.integers(n, size=n)] = True
    return keep


def _mask_options(kind: str, keep: np.ndarray | None) -> dict:
    """rmfa's keyword arguments for a mask type with keep-matrix ``keep``: none, key padding, causal or general."""
    return dict(key_padding=keep[0]) if kind == "padding" else dict(mask=keep) if kind == "general" else \
        dict(causal=kind == "causal")


def _route_options(kind: str, n: int, rng: np.random.Generator) -> dict:
    return _mask_options(kind, _mask(kind, n, rng))  # none and causal draw nothing


def _ball_matrix(rng: np.random.Generator, n: int, d: int, reading: str, placement: str,
                 positive: bool = False) -> np.ndarray:
    """A matrix in the unit ball ``ℓ2(0,1)`` of a reading: on its boundary (norm 1) or inside (norm in [0.3, 0.9];
    each row's for ``row``)."""
    x = np.abs(rng.standard_normal((n, d))) if positive else rng.standard_normal((n, d))
    radius = 1.0 if placement == "boundary" else rng.uniform(0.3, 0.9)
    if reading == "row" and placement != "boundary":  # per-row radii (drawn after the scalar: seeds unchanged)
        radius = rng.uniform(0.3, 0.9, size=(n, 1))
    return x * radius / matrix_norm(x, reading)


def _ball_qkv(rng: np.random.Generator, n: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Q, K`` with rows inside the unit ball and standard Gaussian ``V (n, 3)``."""
    q, k = (_ball_matrix(rng, n, d, "row", "interior") for _ in range(2))
    return q, k, rng.standard_normal((n, 3))


def _ball_matrix_like(x: np.ndarray, reading: str) -> np.ndarray:
    """``x`` shrunk into the unit ball of a reading where it lies outside (rows one by one for ``row``)."""
    return x / np.maximum(matrix_norm(x, reading), 1.0)


def _presbn_qk(rng: np.random.Generator, *shape: int, **options) -> tuple[np.ndarray, np.ndarray]:
    """Pre-SBN ``Q^SBN, K^SBN`` of standard Gaussian raw inputs of a shape."""
    out = presbn(rng.standard_normal(shape), rng.standard_normal(shape), **options)
    return out.q, out.k


def _gaussian_qkv(rng: np.random.Generator, n: int, d: int, scale: float = 0.5):
    """Gaussian ``Q, K`` (entries N(0, scale²)) and standard Gaussian ``V``, all ``(n, d)``."""
    return rng.standard_normal((n, d)) * scale, rng.standard_normal((n, d)) * scale, rng.standard_normal((n, d))
