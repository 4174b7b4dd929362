"""Measurement helpers shared by claim checks: batched replicates of estimators, controlled inputs, and the small
wrappers every paper's checks use (:func:`quiet`, :func:`single_threaded`).

Checks draw all replicates of a cell at once (one projection matrix holding every replicate's rows) so
that a cell costs a few matrix products, and chunk replicates to bound memory.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator

import numpy as np

from rfkit.estimators import Features, gaussian_projection, orthogonal_projection, spherical_projection
from rfkit.validation.timing import single_threaded_blas

__all__ = ["controlled_pair", "replicate_projections", "kernel_estimates", "gram_estimates", "as_features", "chunks",
           "condition_scale", "quiet", "single_threaded", "shared"]

#: Replicates drawn per batch inside a cell (bounds memory at about chunk · m · d doubles).
CHUNK = 20_000


#: Results :func:`shared` keeps (the engine runs a grid point's readings one after another).
SHARED_SLOTS = 4
_SHARED: dict = {}


def shared(key, compute: Callable[[], object]):
    """``compute()``, computed once for the readings of a grid point that share it: ``key`` must name everything the
    result depends on (the cell's point and the :meth:`~rfkit.validation.model.CellContext.shared_rng` labels it
    draws from, the implementation and the budget). Keeps the last :data:`SHARED_SLOTS` results of this process."""
    if key in _SHARED:
        _SHARED[key] = _SHARED.pop(key)  # most recent last
        return _SHARED[key]
    value = compute()
    _SHARED[key] = value
    while len(_SHARED) > SHARED_SLOTS:
        _SHARED.pop(next(iter(_SHARED)))
    return value


def quiet(fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` with warnings and floating-point notices silenced: checks measure what estimators
    warn about (a renormaliser <= 0 of signed features, an overflow a cell reports as its outcome)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def single_threaded(check: Callable) -> Callable:
    """A cell running ``check(ctx)`` with BLAS on one thread: small products on a shared machine lose more to
    idle BLAS workers spinning against other processes than they gain (results are identical)."""
    @functools.wraps(check)
    def cell(ctx):
        with single_threaded_blas():
            return check(ctx)

    return cell


def chunks(total: int, size: int = CHUNK) -> Iterator[int]:
    """Batch sizes summing to ``total``."""
    while total > 0:
        yield min(size, total)
        total -= size


def controlled_pair(norm_x: float, norm_y: float, angle: float, d: int, rng: np.random.Generator):
    """Vectors of prescribed norms and angle, placed in a uniformly random 2-D subspace of R^d (I2).

    For ``d = 1`` the angle must be 0 or π.
    """
    if d == 1:
        if not (np.isclose(angle, 0) or np.isclose(angle, np.pi)):
            raise ValueError("in d = 1 the angle between two vectors is 0 or pi")
        sign = 1.0 if np.isclose(angle, 0) else -1.0
        return np.array([norm_x]), np.array([sign * norm_y])
    basis, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    x = norm_x * basis[:, 0]
    y = norm_y * (np.cos(angle) * basis[:, 0] + np.sin(angle) * basis[:, 1])
    return x, y


def replicate_projections(kind: str, replicates: int, m: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """``(replicates·m, d)`` rows: ``replicates`` independent projection matrices of ``m`` rows each.

    ``kind``: ``iid`` (Gaussian), ``spherical`` (iid on √d·S^{d-1}), ``orthogonal`` (ORF, chi norms) or
    ``orthogonal_sqrt_d`` (ORF, √d norms).
    """
    samplers = {"iid": (gaussian_projection, {}), "spherical": (spherical_projection, {}),
                "orthogonal": (orthogonal_projection, dict(norms="chi")),
                "orthogonal_sqrt_d": (orthogonal_projection, dict(norms="sqrt_d"))}
    if kind not in samplers:
        raise ValueError(f"unknown projection kind {kind!r}; expected one of {tuple(samplers)}")
    sampler, options = samplers[kind]
    return sampler(m, d, rng=rng, size=replicates, **options).reshape(replicates * m, d)


def as_features(f) -> Features:
    """Accept a :class:`Features` or a dense ``(..., L, r)`` array from a third-party feature map."""
    return f if isinstance(f, Features) else Features.plain(np.asarray(f, dtype=np.float64))


def kernel_estimates(feature_map: Callable, x: np.ndarray, y: np.ndarray, omega: np.ndarray,
                     replicates: int) -> np.ndarray:
    """``φ(x)ᵀφ(y)`` for each of ``replicates`` projection matrices stacked in ``omega``.

    Works for every map of the Eq 5 form ``φ(x) = h(x)/√M · [f_1(Wx) | ... | f_l(Wx)]``: with
    ``M = replicates·m`` rows, replicate ``j`` owns columns ``j·m..(j+1)·m`` of each block, and its own
    ``1/√m`` normalisation is restored by a factor ``replicates``.
    """
    f = as_features(feature_map(np.stack([x, y]), omega))
    total = omega.shape[0]
    m = total // replicates
    blocks = f.values.shape[-1] // total
    vals = f.values.reshape(2, blocks, replicates, m)
    dots = np.einsum("lrm,lrm->r", vals[0], vals[1])
    return dots * replicates * np.exp(f.log_scale[0] + f.log_scale[1])


def gram_estimates(feature_map: Callable, xs: np.ndarray, ys: np.ndarray, omega: np.ndarray,
                   replicates: int) -> np.ndarray:
    """``(replicates, N, M)`` estimated Gram matrices ``φ(x_i)ᵀφ(y_j)``, one per stacked projection matrix.

    The matrix version of :func:`kernel_estimates` (same ``1/√m`` bookkeeping).
    """
    f = as_features(feature_map(np.concatenate([xs, ys]), omega))
    n_x, total = xs.shape[0], omega.shape[0]
    m = total // replicates
    blocks = f.values.shape[-1] // total
    vals = f.values.reshape(-1, blocks, replicates, m).transpose(2, 0, 1, 3).reshape(replicates, -1, blocks * m)
    gram = vals[:, :n_x] @ np.swapaxes(vals[:, n_x:], -1, -2)
    return gram * replicates * np.exp(f.log_scale[:n_x, None] + f.log_scale[None, n_x:])


def condition_scale(qf: Features, kf: Features, v: np.ndarray, out: np.ndarray, causal: bool) -> np.ndarray:
    """Per-entry magnitude that bounds round-off: (Σ|Â_ij||v_j| + |out_i| Σ|Â_ij|) / |D̂_i| (log-space Â)."""
    sign, logabs = qf.kernel(kf, log=True)
    if causal:
        logabs = np.where(np.tri(*logabs.shape[-2:], dtype=bool), logabs, -np.inf)
    a = np.exp(logabs - logabs.max(axis=-1, keepdims=True))
    den = np.abs((sign * a).sum(axis=-1))
    return (a @ np.abs(v) + np.abs(out) * a.sum(axis=-1, keepdims=True)) / den[..., None]
