"""Helpers shared by the Macformer claim modules: reading products, capped violations, exact evidence."""

import itertools
from collections.abc import Callable, Sequence

import numpy as np

from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS
from rfkit.validation.domain import Range
from rfkit.validation.model import CellContext
from rfkit.validation.stats import Evidence, exact_test

KERNEL_NAMES = tuple(MACLAURIN_KERNELS)
RESOLUTION = 0.5


def _readings(**axes: Sequence) -> dict[str, dict]:
    """Variant name -> reading dict for the product of reading axes (names join the values with ``|``)."""
    return {"|".join(str(v) for v in combo): dict(zip(axes, combo, strict=True))
            for combo in itertools.product(*axes.values())}


def _capped(values, cap: float = 1.0) -> np.ndarray:
    """Violations with non-finite entries counted as ``cap`` and everything capped at ``cap``."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), np.minimum(values, cap), cap)


def _capped_relative(got, want, scale) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _capped(np.abs(np.asarray(got) - np.asarray(want)) / scale)


def _exact(values, ctx: CellContext, extra: dict | None = None, tolerance: float | None = None) -> Evidence:
    """Exact evidence on capped violations (largest entry), at the claim's or a stricter tolerance."""
    return exact_test(float(_capped(values).max(initial=0.0)), 0.0, tolerance=tolerance or ctx.tolerance, extra=extra)


def _p_range(words: str, why: str) -> Range:
    """An RMF law's ``p > 1`` axis, tested up to the register's largest p (4)."""
    return Range(words, 1.0, strict=(True, False), up_to=(None, 4.0), why=why)


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
