r"""Exact attention (the references) and linear attention from feature matrices (the estimator).

Shapes: queries ``(..., N, d)``, keys ``(..., M, d)``, values ``(..., M, d_v)``; leading batch/head
dimensions broadcast. Masks are boolean, ``True`` = *attend*, broadcastable to ``(..., N, M)``. Causal
attention needs ``N == M`` and lets position ``i`` attend to ``j <= i``.

* :func:`softmax_attention` — ``softmax(scale·QKᵀ + mask) V`` with a row-wise log-sum-exp shift taken
  *after* masking, so a causal row's shift uses only ``j <= i``. ``scale = 1/√d`` by default (Performer
  Eq 1-2, ``A = exp(QKᵀ/√d)``). Optionally blocked over queries (``O(block·M)`` memory).
* :func:`kernel_attention` — ``D⁻¹AV`` with ``A_ij = K(q_i, k_j)`` for any kernel (Gram function).
* :func:`linear_attention` — FAVOR's bracketing (Performer Eq 4, Algorithm 1): ``D̂⁻¹(Q'((K')ᵀV))``
  with ``D̂ = diag(Q'((K')ᵀ1))``, never forming an ``N×M`` matrix; causal by chunked prefix sums.
* :func:`linear_attention_quadratic` — the test oracle ``D̂⁻¹(Q'K'ᵀ ⊙ mask)V``, quadratic in ``L``.

Renormalisers: a row whose denominator is exactly 0 or not finite raises :class:`NumericalError`
(no silent nan); a negative one (possible with signed features) is computed, counted in
:class:`AttentionStats` and announced with :class:`NonPositiveDenominatorWarning`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import (
    NonPositiveDenominatorWarning,
    NumericalError,
    as_float_array,
    as_mask,
    check_positive_float,
    check_positive_int,
    check_qkv,
    check_same_last_dim,
    compute_dtype,
)

from .features import Features
from .kernels import get_kernel

__all__ = [
    "AttentionStats",
    "softmax_attention",
    "kernel_attention",
    "linear_attention",
    "linear_attention_buffers",
    "linear_attention_quadratic",
    "DEFAULT_CHUNK_SIZE",
]

#: Default chunk length of the causal prefix-sum scan (intra-chunk work is ``O(L·chunk·(r + d_v))``).
DEFAULT_CHUNK_SIZE = 128


@dataclass(frozen=True)
class AttentionStats:
    """Renormaliser diagnostics of one attention call (Performer App. D.2: signed features).

    ``min_denominator`` is ``min_i D̂_ii`` on the true (unstabilised) scale; it may be ``±inf`` when the
    true scale itself is not representable. ``n_nonpositive`` counts rows with ``D̂_ii <= 0``.
    """

    min_denominator: float
    n_nonpositive: int
    n_rows: int


def _swap(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def _attend_mask(n: int, m: int, causal: bool, mask, lead: tuple[int, ...]) -> np.ndarray | None:
    """Combined boolean mask (True = attend) or None when everything is attended."""
    if causal and n != m:
        raise ValueError(f"causal attention needs as many queries as keys, got N={n} and M={m}")
    out = None
    if mask is not None:
        out = as_mask(mask, "mask", lead + (n, m))
    if causal:
        tri = np.tri(n, m, dtype=bool)
        out = tri if out is None else out & tri
    return out


def _normalize(buf: np.ndarray, log_ref: np.ndarray | None = None,
               inputs: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, AttentionStats]:
    """Split ``buf = [numerator | denominator]`` and divide, checking the result.

    ``log_ref`` (broadcastable to the denominator) is the log of the factor by which the true
    denominators exceed the stabilised ones; it only enters the reported statistics. ``inputs`` are
    searched, only if the result is not finite, for a non-finite input to name in the error.
    """
    num, den = buf[..., :-1], buf[..., -1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = num / den[..., None]
    if not np.isfinite(out).all():
        for name, arr in (inputs or {}).items():
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} contains non-finite values (nan or inf)")
        bad = ~np.isfinite(out).all(axis=-1)
        row = tuple(int(i) for i in np.argwhere(bad)[0])
        raise NumericalError(f"{int(bad.sum())} attention row(s) have a zero or non-finite renormaliser "
                             f"(first at index {row}); the estimate is undefined there")
    nonpos = int(np.count_nonzero(den <= 0))
    if log_ref is None:
        true_den = den
    else:
        with np.errstate(over="ignore", divide="ignore"):
            true_den = np.sign(den) * np.exp(np.log(np.abs(den)) + log_ref)
    stats = AttentionStats(float(true_den.min()), nonpos, int(den.size))
    if nonpos:
        warnings.warn(f"{nonpos} of {den.size} renormalisers are <= 0 (min {stats.min_denominator:.3g}); "
                      "signed features make the estimate unstable", NonPositiveDenominatorWarning,
                      stacklevel=3)
    return out, stats


def softmax_attention(q, k, v, *, scale: float | None = None, causal: bool = False, mask=None,
                      block_size: int | None = None, return_lse: bool = False, dtype=np.float64):
    r"""Exact softmax attention ``softmax(scale·QKᵀ) V``, numerically stable.

    Parameters
    ----------
    q, k, v : array_like, shapes ``(..., N, d)``, ``(..., M, d)``, ``(..., M, d_v)``
    scale : float, optional
        Logit scale; default ``1/√d`` (Performer Eq 1: ``A = exp(QKᵀ/√d)``).
    causal : bool
        Lower-triangular mask (Performer Eq 2), ``N == M``.
    mask : bool array, optional
        Broadcastable to ``(..., N, M)``; True = attend. Combined with ``causal``.
    block_size : int, optional
        Process queries in blocks of this many rows: memory ``O(block·M)`` instead of ``O(N·M)``
        (the "blocked" reference of the complexity claims); the result is identical.
    return_lse : bool
        Also return ``log D_ii = logsumexp_j(scale·q_iᵀk_j)`` over attended ``j`` (the log row sums).
    dtype : float64 (default) or float32

    Returns
    -------
    out : ndarray ``(..., N, d_v)``, and ``lse`` ``(..., N)`` if requested.

    Raises
    ------
    ValueError
        If a row attends to no key (its softmax is undefined).

    Examples
    --------
    >>> softmax_attention(np.zeros((1, 2)), np.zeros((3, 2)), [[0.0], [3.0], [6.0]])
    array([[3.]])
    """
    q, k, v = check_qkv(q, k, v, dtype=dtype)
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else check_positive_float(scale, "scale")
    n, m = q.shape[-2], k.shape[-2]
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    full_mask = _attend_mask(n, m, causal, mask, lead)
    if full_mask is not None:
        empty = ~np.broadcast_to(full_mask, lead + (n, m)).any(axis=-1)
        if empty.any():
            row = tuple(int(i) for i in np.argwhere(empty)[0])
            raise ValueError(f"mask leaves {int(empty.sum())} query row(s) with no key to attend (first {row})")
    step = n if block_size is None else check_positive_int(block_size, "block_size")
    out = np.empty(lead + (n, v.shape[-1]), dtype=q.dtype)
    lse = np.empty(lead + (n,), dtype=q.dtype)
    kt = _swap(k)
    for s in range(0, n, step):
        e = min(s + step, n)
        logits = (q[..., s:e, :] @ kt) * scale
        if full_mask is not None:
            logits = np.where(full_mask[..., s:e, :], logits, -np.inf)
        shift = logits.max(axis=-1, keepdims=True)
        weights = np.exp(logits - shift)
        total = weights.sum(axis=-1, keepdims=True)
        out[..., s:e, :] = (weights @ v) / total
        lse[..., s:e] = (shift + np.log(total))[..., 0]
    return (out, lse) if return_lse else out


def kernel_attention(q, k, v, kernel="softmax", *, causal: bool = False, mask=None,
                     return_stats: bool = False, dtype=np.float64):
    r"""Exact kernelized attention ``D⁻¹AV`` with ``A_ij = K(q_i, k_j)`` and ``D = diag(A1)``.

    Parameters
    ----------
    q, k, v : array_like, shapes ``(..., N, d)``, ``(..., M, d)``, ``(..., M, d_v)``
        Inputs exactly as the kernel sees them (no implicit scaling).
    kernel : str or callable
        A name in :data:`rfkit.estimators.kernels.KERNELS` or a Gram function ``K(x, y) -> (..., N, M)``,
        e.g. :func:`rfkit.estimators.kernels.dot_product_kernel`.
    causal, mask : as in :func:`softmax_attention`.
    return_stats : bool
        Also return :class:`AttentionStats` (signed kernels can give ``D_ii <= 0``).

    Notes
    -----
    Materialises ``A``: ``O(NMd)`` time, ``O(NM)`` memory. ``kernel="softmax"`` is ``exp(q_iᵀk_j)`` with
    no shift; use :func:`softmax_attention` where logits are large.
    """
    q, k, v = check_qkv(q, k, v, dtype=dtype)
    gram = get_kernel(kernel)(q, k, dtype=dtype)
    lead = np.broadcast_shapes(gram.shape[:-2], v.shape[:-2])
    full_mask = _attend_mask(q.shape[-2], k.shape[-2], causal, mask, lead)
    if full_mask is not None:
        gram = np.where(full_mask, gram, 0.0)
    buf = gram @ _with_ones(v)
    out, stats = _normalize(buf)
    return (out, stats) if return_stats else out


def _with_ones(v: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """``[w·V, w]`` (``w = 1`` by default): one product then yields numerator and denominator."""
    lead = v.shape[:-2] if weights is None else np.broadcast_shapes(v.shape[:-2], weights.shape[:-1])
    out = np.empty(lead + v.shape[-2:-1] + (v.shape[-1] + 1,), v.dtype)
    if weights is None:
        out[..., :-1] = v
        out[..., -1] = 1.0
    else:
        np.multiply(v, weights[..., None], out=out[..., :-1])
        out[..., -1] = weights
    return out


def _as_features(f, name: str, dtype) -> Features:
    if isinstance(f, Features):
        values = as_float_array(f.values, f"{name}.values", dtype=dtype, allow_nonfinite=True)
        log_scale = as_float_array(f.log_scale, f"{name}.log_scale", dtype=dtype, allow_nonfinite=True)
        return Features(values, log_scale)
    values = as_float_array(f, name, dtype=dtype, min_ndim=2, allow_nonfinite=True)
    return Features(values, np.zeros(values.shape[:-1], values.dtype))


def linear_attention(q_features, k_features, v, *, causal: bool = False, chunk_size: int | None = None,
                     return_stats: bool = False, dtype=np.float64):
    r"""Linear attention from feature matrices (FAVOR, Performer Eq 4 and Algorithm 1).

    .. math::  \widehat{\mathrm{Att}} = \hat D^{-1} Q'((K')^\top V), \quad
               \hat D = \mathrm{diag}(Q'((K')^\top 1_L)),

    and, causally (Performer Eq 11), row ``i`` uses the prefix sum ``Σ_{j<=i} φ(k_j)[v_j, 1]ᵀ``.

    Parameters
    ----------
    q_features, k_features : Features or array_like, shapes ``(..., N, r)`` and ``(..., M, r)``
        Rows ``φ(q_i)`` and ``φ(k_j)``. A :class:`~rfkit.estimators.features.Features` keeps a per-row
        ``log_scale``; query scales cancel in the ratio and key scales are folded in relative to the
        running maximum, so nothing overflows.
    v : array_like, shape ``(..., M, d_v)``
    causal : bool
        Unidirectional attention, ``N == M``.
    chunk_size : int, optional
        Causal scan chunk (default :data:`DEFAULT_CHUNK_SIZE`): inside a chunk the masked product is
        exact; across chunks a state ``S ∈ R^{r×(d_v+1)}`` is carried, so memory is
        ``O(L(r + d_v) + chunk² + r·d_v)`` and never ``O(L·r·d_v)``. The causal key stabiliser of row ``i``
        is the running maximum of key log-scales over ``j <= i``: it uses past and present tokens only.
    return_stats : bool
        Also return :class:`AttentionStats` (min renormaliser, count of ``D̂_ii <= 0``).

    Notes
    -----
    Cost: ``O(L·r·d_v)`` time bidirectional (two matrix products), plus ``O(L·chunk·(r+d_v))`` causal.

    Examples
    --------
    Three tokens, identical features: attention is the plain mean of the values.

    >>> f = np.ones((3, 2))
    >>> linear_attention(f, f, [[0.0], [3.0], [6.0]], causal=True)
    array([[0. ],
           [1.5],
           [3. ]])
    """
    dt = compute_dtype(dtype)
    qf, kf = _as_features(q_features, "q_features", dt), _as_features(k_features, "k_features", dt)
    v = as_float_array(v, "v", dtype=dt, min_ndim=2, allow_nonfinite=True)
    buf, log_ref = linear_attention_buffers(qf, kf, v, causal=causal, chunk_size=chunk_size, dtype=dt)
    inputs = {"q_features": qf.values, "q_features.log_scale": qf.log_scale,
              "k_features": kf.values, "k_features.log_scale": kf.log_scale, "v": v}
    out, stats = _normalize(buf, log_ref, inputs)
    return (out, stats) if return_stats else out


def linear_attention_buffers(q_features, k_features, v, *, causal: bool = False, chunk_size: int | None = None,
                             dtype=np.float64, gemms: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""Algorithm 1's ``Buf_2 = [Buf_3 | buf_4] = Q'((K')ᵀ[V 1])`` on a stabilised scale, and ``log_ref``.

    The true buffers are ``Buf_2 · exp(log_ref)[..., None]`` (``log_ref`` per query row: the query's
    log-scale plus the key reference). Causal rows use the chunked prefix sums of :func:`linear_attention`.
    Inputs as in :func:`linear_attention`; non-finite inputs are not checked here (they surface in the
    normalisation). ``gemms``: a list to which every matrix product performed is appended as
    ``(n, k, p, count)`` (``count`` products of ``(n×k)·(k×p)``, one per batch entry).
    """
    dt = compute_dtype(dtype)
    qf, kf = _as_features(q_features, "q_features", dt), _as_features(k_features, "k_features", dt)
    v = as_float_array(v, "v", dtype=dt, min_ndim=2, allow_nonfinite=True)
    check_same_last_dim(qf.values, kf.values, "q_features", "k_features")
    if kf.values.shape[-2] != v.shape[-2]:
        raise ValueError(f"k_features and v must have the same number of rows, got "
                         f"{kf.values.shape[-2]} and {v.shape[-2]}")
    if causal:
        if qf.values.shape[-2] != kf.values.shape[-2]:
            raise ValueError("causal attention needs as many queries as keys, got "
                             f"N={qf.values.shape[-2]} and M={kf.values.shape[-2]}")
        chunk = DEFAULT_CHUNK_SIZE if chunk_size is None else check_positive_int(chunk_size, "chunk_size")
        buf, key_ref = _causal_scan(qf, kf, v, chunk, gemms)
    else:
        key_ref = kf.log_scale.max(axis=-1, keepdims=True)
        weights = np.exp(kf.log_scale - key_ref)
        # (K')ᵀ[wV w] computed as ([wV w]ᵀK')ᵀ: the faster BLAS layout for a tall K'
        buf = qf.values @ _swap(_swap(_with_ones(v, weights)) @ kf.values)
        if gemms is not None:
            (n, r), m, dv, batch = qf.values.shape[-2:], kf.values.shape[-2], v.shape[-1], _batch(buf)
            gemms += [(dv + 1, m, r, batch), (n, r, dv + 1, batch)]
    return buf, qf.log_scale + key_ref


def _batch(buf: np.ndarray) -> int:
    return int(np.prod(buf.shape[:-2], dtype=np.int64))


#: Largest rise of a key log-scale above its chunk's starting reference for which the key is weighted by
#: the rank-one factors exp(kls_j - ref_s)·exp(ref_s - ref_i) (float64: factors within e^±300).
_RANK_ONE_SPREAD = {np.dtype(np.float64): 300.0, np.dtype(np.float32): 30.0}


def _causal_scan(qf: Features, kf: Features, v: np.ndarray, chunk: int, gemms: list | None = None):
    """Chunked causal prefix sums; returns ``[num | den]`` and the per-row key log reference.

    Row ``i``'s keys are weighted by ``exp(kls_j - ref_i)`` with ``ref_i = max_{j<=i} kls_j`` (past and
    present only). Inside a chunk starting at ``s`` this factorises as
    ``exp(kls_j - ref_s)·exp(ref_s - ref_i)``, a rank-one scaling of the masked ``b×b`` scores. A key
    whose log-scale rises more than :data:`_RANK_ONE_SPREAD` above ``ref_s`` is left out of that product
    and added with its exact weights. Every decision about key ``j`` depends on tokens ``<= j`` only, so
    an output row is bit-for-bit independent of later tokens. Products performed are appended to ``gemms``.
    """
    qv, kv = qf.values, kf.values
    lead = np.broadcast_shapes(qv.shape[:-2], kv.shape[:-2], v.shape[:-2])
    n, dv = qv.shape[-2], v.shape[-1]
    kls = np.broadcast_to(kf.log_scale, lead + (n,))
    buf = np.empty(lead + (n, dv + 1), dtype=qv.dtype)
    key_ref = np.empty(lead + (n,), dtype=qv.dtype)
    tri = np.tri(chunk, dtype=qv.dtype)
    spread_limit = _RANK_ONE_SPREAD[qv.dtype]
    record = [] if gemms is None else gemms
    batch, r = int(np.prod(lead, dtype=np.int64)), qv.shape[-1]
    state = None  # Σ_{j < s} exp(kls_j - c) φ̃(k_j)[v_j, 1]ᵀ, shape lead + (r, dv + 1)
    c = None      # max of kls over the previous chunks, shape lead + (1,)
    for s in range(0, n, chunk):
        e = min(s + chunk, n)
        ls = kls[..., s:e]
        running = np.maximum.accumulate(ls, axis=-1)
        if c is not None:
            running = np.maximum(running, c)
        key_ref[..., s:e] = running
        ref0 = running[..., :1]
        vo = _with_ones(v[..., s:e, :])
        masked = qv[..., s:e, :] @ _swap(kv[..., s:e, :])
        masked *= tri[: e - s, : e - s]  # in place: no second L·chunk temporary
        gap = ls - ref0
        outlier = gap > spread_limit
        block = ((masked @ (vo * np.exp(np.where(outlier, -np.inf, gap))[..., None]))
                 * np.exp(ref0 - running)[..., None])
        if outlier.any():
            expo = np.where(outlier[..., None, :] & (tri[: e - s, : e - s] > 0),
                            ls[..., None, :] - running[..., :, None], -np.inf)
            block += (masked * np.exp(expo)) @ vo
            record.append((e - s, e - s, dv + 1, batch))
        if state is not None:
            block += (qv[..., s:e, :] @ state) * np.exp(c - running)[..., None]
            record.append((e - s, r, dv + 1, batch))
        record += [(e - s, r, e - s, batch), (e - s, e - s, dv + 1, batch), (dv + 1, e - s, r, batch)]
        buf[..., s:e, :] = block
        c_new = ls.max(axis=-1, keepdims=True) if c is None else np.maximum(c, ls.max(axis=-1, keepdims=True))
        update = _swap(_swap(vo * np.exp(ls - c_new)[..., None]) @ kv[..., s:e, :])
        state = update if state is None else state * np.exp(c - c_new)[..., None] + update
        c = c_new
    return buf, key_ref


def linear_attention_quadratic(q_features, k_features, v, *, causal: bool = False, mask=None,
                               dtype=np.float64):
    r"""Test oracle: ``D̂⁻¹(Â ⊙ mask)V`` with ``Â = Q'K'ᵀ`` materialised (quadratic in ``L``).

    ``Â`` is formed in log space and shifted per row by the row's largest attended ``log|Â_ij|``, which
    cancels exactly in the ratio. Same inputs and raising behaviour as :func:`linear_attention`.
    """
    dt = compute_dtype(dtype)
    qf, kf = _as_features(q_features, "q_features", dt), _as_features(k_features, "k_features", dt)
    v = as_float_array(v, "v", dtype=dt, min_ndim=2)
    sign, logabs = qf.kernel(kf, log=True)
    lead = np.broadcast_shapes(logabs.shape[:-2], v.shape[:-2])
    full_mask = _attend_mask(logabs.shape[-2], logabs.shape[-1], causal, mask, lead)
    if full_mask is not None:
        logabs = np.where(full_mask, logabs, -np.inf)
    shift = logabs.max(axis=-1, keepdims=True)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    gram = sign * np.exp(logabs - shift)
    out, _ = _normalize(gram @ _with_ones(v), shift[..., 0])
    return out
