r"""Pre-post scaling batch normalisation (ppSBN, Macformer Algorithm 1) around RMFA.

Algorithm 1 (``004_803b6fd9a1d4a879.txt``):

1. ``Q, K ← (Q - μ_Q)/sqrt(σ_Q + ε), (K - μ_K)/sqrt(σ_K + ε)`` (batch-norm statistics, ``σ`` a variance);
2. ``Q, K ← Q/‖Q‖₂, K/‖K‖₂``;
3. ``att ← RMFA_K(Q, K, V)``;
4. ``att ← (γ·att)^β`` with trainable ``γ, β``.

The paper leaves open which axes the statistics reduce and which norm ``‖·‖₂`` of a matrix is meant; every
reading of the Macformer register is an option (:data:`BN_STATS`, :data:`VAR_ESTIMATORS`, :data:`NORM_READINGS`,
:data:`POWER_SIGNS`). Inputs are ``(n, d)`` (one matrix) or ``(B, H, n, d)``.

Design notes
------------
* Paper-faithful: the only guard is the ``ε`` inside the square root. A zero norm or an undefined statistic
  (``n = 1`` with the unbiased variance, constant rows) divides anyway; :class:`PreSBN` counts the non-finite
  values instead of hiding them. Statistics are taken from the current call (train mode).
* Statistics reduced over the sequence axis mix positions: in a causal model later tokens then influence
  earlier outputs. The scope used is recorded in :class:`PreSBN` (``bn_stats``).
* The spectral norm is an exact SVD (``numpy.linalg.norm(·, 2)``), ``O(n·d·min(n, d))``; a matrix with
  non-finite entries gets a ``nan`` norm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import as_float_array, check_choice, check_positive_float
from rfkit.base.numerics import POWER_SIGNS, signed_power

__all__ = ["BN_STATS", "VAR_ESTIMATORS", "NORM_READINGS", "NORM_SCOPES", "POWER_SIGNS", "PreSBN",
           "batch_norm_stats", "matrix_norm", "presbn", "signed_power", "postsbn", "ppsbn_rmfa"]

#: Reduction of the batch-norm statistics, for ``(B, H, n, d)`` inputs (Macformer register ``bn_stats``).
BN_STATS = {
    "feature_batch": (0, 2),            # per head and feature, over batch and positions (default)
    "feature_batch_pooled": (0, 1, 2),  # per feature, over batch, heads and positions
    "feature_seq": (2,),                # per (b, h) matrix and feature, over positions
    "scalar_matrix": (2, 3),            # one mean/variance per (b, h) matrix
    "scalar_batch": (0, 2, 3),          # one per head over the batch
    "scalar_batch_pooled": (0, 1, 2, 3),  # one for the whole tensor
}
VAR_ESTIMATORS = {"biased": 0, "unbiased": 1}
NORM_READINGS = ("row", "fro", "spec")
NORM_SCOPES = ("matrix", "tensor")


def _as_tensor(x, name: str) -> tuple[np.ndarray, bool]:
    """``(B, H, n, d)`` view of an ``(n, d)`` or ``(B, H, n, d)`` input, and whether it was 2-D."""
    x = as_float_array(x, name, min_ndim=2)
    if x.ndim == 2:
        return x[None, None], True
    if x.ndim != 4:
        raise ValueError(f"{name} must have shape (n, d) or (B, H, n, d), got {x.shape}")
    return x, False


def batch_norm_stats(x: np.ndarray, bn_stats: str = "feature_batch", var_estimator: str = "biased"):
    """Mean and variance of ``x (B, H, n, d)`` over the axes of reading ``bn_stats`` (kept for broadcasting).

    The unbiased variance of a single value is ``nan`` (``0/0``), as the paper-faithful mode requires.
    """
    axes = BN_STATS[check_choice(bn_stats, "bn_stats", BN_STATS)]
    ddof = VAR_ESTIMATORS[check_choice(var_estimator, "var_estimator", VAR_ESTIMATORS)]
    mean = x.mean(axis=axes, keepdims=True)
    count = int(np.prod([x.shape[a] for a in axes]))
    with np.errstate(divide="ignore", invalid="ignore"):
        var = ((x - mean) ** 2).sum(axis=axes, keepdims=True) / np.float64(count - ddof)
    return mean, var


def matrix_norm(x: np.ndarray, norm_reading: str = "row", norm_scope: str = "matrix") -> np.ndarray:
    """``‖X‖₂`` of every ``(n, d)`` matrix of ``x (..., n, d)``, broadcastable against ``x``.

    ``row``: each row's Euclidean norm ``(..., n, 1)``; ``fro``: Frobenius ``(..., 1, 1)`` (``norm_scope="tensor"``:
    one over the whole tensor); ``spec``: largest singular value ``(..., 1, 1)``.
    """
    norm_reading = check_choice(norm_reading, "norm_reading", NORM_READINGS)
    norm_scope = check_choice(norm_scope, "norm_scope", NORM_SCOPES)
    if norm_scope == "tensor" and norm_reading != "fro":
        raise ValueError("norm_scope='tensor' is defined for the Frobenius reading only")
    if norm_reading == "row":
        return np.sqrt((x * x).sum(axis=-1, keepdims=True))
    if norm_reading == "fro":
        axes = tuple(range(x.ndim)) if norm_scope == "tensor" else (-2, -1)
        return np.sqrt((x * x).sum(axis=axes, keepdims=True))
    out = np.full(x.shape[:-2] + (1, 1), np.nan)
    finite = np.isfinite(x).all(axis=(-2, -1))
    out[finite, 0, 0] = np.linalg.norm(x[finite], ord=2, axis=(-2, -1))
    return out


@dataclass(frozen=True)
class PreSBN:
    """Outputs of Algorithm 1 steps 1–2 and everything used to compute them (shapes broadcast against inputs).

    ``q``, ``k`` (and ``v`` if it was processed): step-2 outputs; ``q_bn``, ``k_bn``: step-1 outputs;
    ``mean_*``, ``var_*``: the statistics; ``norm_q``, ``norm_k``: the step-2 divisors; ``n_nonfinite``: count of
    non-finite output entries; ``bn_stats``, ``norm_reading``: the readings used.
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray | None
    q_bn: np.ndarray
    k_bn: np.ndarray
    mean_q: np.ndarray
    var_q: np.ndarray
    mean_k: np.ndarray
    var_k: np.ndarray
    norm_q: np.ndarray
    norm_k: np.ndarray
    eps: float
    n_nonfinite: int
    bn_stats: str
    norm_reading: str


def _scale(x, eps, bn_stats, var_estimator, norm_reading, norm_scope):
    mean, var = batch_norm_stats(x, bn_stats, var_estimator)
    with np.errstate(divide="ignore", invalid="ignore"):
        bn = (x - mean) / np.sqrt(var + eps)
        norm = matrix_norm(bn, norm_reading, norm_scope)
        return bn / norm, bn, mean, var, norm


def presbn(q, k, v=None, *, eps: float = 1e-12, bn_stats: str = "feature_batch", var_estimator: str = "biased",
           norm_reading: str = "row", norm_scope: str = "matrix", presbn_on_v: bool = False) -> PreSBN:
    r"""Algorithm 1 steps 1–2 ("pre-SBN"): batch-normalise, then divide by ``‖·‖₂``.

    Parameters
    ----------
    q, k : array_like ``(n, d)`` or ``(B, H, n, d)``
    v : array_like, optional
        Processed the same way only with ``presbn_on_v=True`` (Algorithm 1 leaves ``V`` alone; the toy experiment
        pre-processes "each generated array").
    eps : float
        ``ε > 0`` inside ``sqrt(σ + ε)`` (toy experiment ``1e-12``, LRA ``1e-13``).
    bn_stats, var_estimator, norm_reading, norm_scope
        Readings: :data:`BN_STATS`, :data:`VAR_ESTIMATORS`, :data:`NORM_READINGS`, :data:`NORM_SCOPES`.

    Returns
    -------
    PreSBN
        With 2-D inputs, every array in it is 2-D.

    Notes
    -----
    Cost ``O(n·d)`` (``spec``: an SVD per matrix). Deterministic. No guard against zero norms or variances.

    Examples
    --------
    Row reading: every output row has norm 1.

    >>> out = presbn([[1.0, 0.0], [0.0, 3.0], [2.0, 2.0]], [[1.0, 1.0], [0.0, 2.0]])
    >>> np.linalg.norm(out.q, axis=-1).round(12)
    array([1., 1., 1.])
    """
    eps = check_positive_float(eps, "eps")
    (qt, two_d), (kt, _) = _as_tensor(q, "q"), _as_tensor(k, "k")
    options = (eps, bn_stats, var_estimator, norm_reading, norm_scope)
    q_out, q_bn, mean_q, var_q, norm_q = _scale(qt, *options)
    k_out, k_bn, mean_k, var_k, norm_k = _scale(kt, *options)
    v_out = None
    if presbn_on_v:
        if v is None:
            raise ValueError("presbn_on_v=True needs v")
        v_out = _scale(_as_tensor(v, "v")[0], *options)[0]
    arrays = [q_out, k_out, q_bn, k_bn, mean_q, var_q, mean_k, var_k, norm_q, norm_k]
    if two_d:
        arrays = [a[0, 0] for a in arrays]
        v_out = None if v_out is None else v_out[0, 0]
    bad = int((~np.isfinite(q_out)).sum() + (~np.isfinite(k_out)).sum())
    return PreSBN(arrays[0], arrays[1], v_out, *arrays[2:], eps, bad, bn_stats, norm_reading)


def postsbn(att, gamma=1.0, beta=1.0, *, power_sign: str = "real") -> np.ndarray:
    r"""Algorithm 1 step 4 ("post-SBN"): ``(γ·att)^β`` entrywise.

    ``γ`` and ``β`` broadcast against ``att (..., n, d_v)``: a scalar, one per head (``(H, 1, 1)``) or one per
    value feature (``(d_v,)``). ``γ = β = 1`` is the identity. Negative bases follow ``power_sign``. Cost
    ``O(n·d_v)``; deterministic.

    Examples
    --------
    >>> postsbn([[4.0, 9.0]], gamma=1.0, beta=0.5)
    array([[2., 3.]])
    """
    att = as_float_array(att, "att", min_ndim=1, allow_nonfinite=True)
    gamma = as_float_array(gamma, "gamma")
    beta = as_float_array(beta, "beta")
    return signed_power(gamma * att, beta, power_sign)


def ppsbn_rmfa(q, k, v, kernel="exp", *, num_features: int, rng, p: float = 2.0, eps: float = 1e-12,
               gamma=1.0, beta=1.0, bn_stats: str = "feature_batch", var_estimator: str = "biased",
               norm_reading: str = "row", norm_scope: str = "matrix", power_sign: str = "real",
               presbn_on_v: bool = False, **rmfa_options) -> np.ndarray:
    r"""The full Algorithm 1: ``postsbn(RMFA_K(presbn(Q), presbn(K), V))`` (Figure 1).

    ``rmfa_options`` go to :func:`rfkit.estimators.rmf.rmfa` (``coeffs``, ``n_law``, ``weight``, masks,
    ``draw_sharing``, ...). Randomness: the RMF draw only. Cost: pre-SBN ``O(n·d)`` (``spec``: SVD) + RMFA +
    ``O(n·d_v)``. In causal mode the statistics still mix positions (see the module notes).
    """
    from .rmf import rmfa

    pre = presbn(q, k, v, eps=eps, bn_stats=bn_stats, var_estimator=var_estimator, norm_reading=norm_reading,
                 norm_scope=norm_scope, presbn_on_v=presbn_on_v)
    values = pre.v if presbn_on_v else v
    att = rmfa(pre.q, pre.k, values, kernel, num_features=num_features, p=p, rng=rng, **rmfa_options)
    return postsbn(att, gamma, beta, power_sign=power_sign)
