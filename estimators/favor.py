r"""FAVOR+ attention end to end: Performer Algorithm 1 (``003_4855bc6ab225d7a6.txt``, App. B, Eqs 4 and 11).

:func:`favor_attention` composes the primitives: a projection sampler
(:mod:`~rfkit.estimators.projections`, :mod:`~rfkit.estimators.structured`), a feature map
(:mod:`~rfkit.estimators.features`, :mod:`~rfkit.estimators.generalized`) and the FA part
:func:`favor_from_features`, which computes Algorithm 1's buffers

.. math::  C = [V\ 1_L],\quad \mathrm{Buf}_1 = (K')^\top C,\quad \mathrm{Buf}_2 = Q'\mathrm{Buf}_1
           = [\mathrm{Buf}_3\ \mathrm{buf}_4],\quad \widehat{\mathrm{Att}} = \mathrm{diag}(\mathrm{buf}_4)^{-1}
           \mathrm{Buf}_3,

and causally (Eq 11) row ``i`` of ``Buf_2`` is ``(G^PS_i)ᵀQ'_i`` with ``G^PS_i = Σ_{j<=i} K'_j C_jᵀ``.

Causal implementations (``causal_impl``), all exact (they agree with the masked quadratic oracle to
round-off) and causal (output row ``i`` is bit-for-bit independent of tokens ``> i``):

* ``"chunked"`` (default): :func:`~rfkit.estimators.attention.linear_attention`'s chunked prefix sums,
  ``O(L(r + d_v) + b² + r·d_v)`` memory;
* ``"scan"``: one token at a time with the carried state ``S ∈ R^{r×(d_v+1)}`` (B.3's "simple (though
  non-parallel in L) aggregation", a Numba loop), ``O(r·d_v)`` state;
* ``"parallel"``: ``G^PS`` materialised by a work-efficient parallel prefix scan
  (:func:`parallel_prefix_scan`, Blelloch's up-sweep/down-sweep: ``O(L)`` combines in ``O(log L)``
  rounds), ``O(L·r·d_v)`` memory as B.3 states.

Stabilisation. Features are factored (:class:`~rfkit.estimators.features.Features`): a row's
``log_scale`` is never exponentiated. Query scales cancel in the ratio; key scales are taken relative
to the running maximum over ``j <= i`` (past and present only), and a prefix state is rescaled when the
maximum grows: the combine of the scan is ``(a, S_a) ⊕ (b, S_b) = (M, e^{a-M}S_a + e^{b-M}S_b)``,
``M = max(a, b)``, which is associative, so every implementation computes the same exact sums.

Reproduction options (off by default):

* ``jax_stabilizer=eps``: the positive features of the authors' public JAX code,
  ``ratio·(exp(ωᵀx - ‖x‖²/2 - shift) + eps)`` with ``ratio = 1/√m``, ``shift`` the row maximum of
  ``ωᵀx`` for queries and the maximum over all keys and features for keys (A.3: ``eps = 10⁻⁶``). With
  ``eps > 0`` the shifts no longer cancel, and in causal mode the key shift depends on future tokens.
* ``denominator_guard=eps``: ``D̂ ← D̂ + 2·eps·1(|D̂| <= eps)`` on the true scale of ``D̂``.
* ``renormalize=False``: return ``Buf_3`` itself (the D.3 ablation), on its true scale.

Cost (B.3): features ``O(Lmd)`` (``O(Lm log d)`` with H/G-ORFs), buffers ``O(L·r·d_v)``; memory
``O(md + Ld + Lr)`` (plus ``O(L·r·d_v)`` for ``"parallel"``). Randomness: only the projection, drawn
from ``rng`` (or given as ``omega``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from rfkit.base.checks import (
    NumericalError,
    as_float_array,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_rng,
    compute_dtype,
)

from .attention import (
    DEFAULT_CHUNK_SIZE,
    AttentionStats,
    _as_features,
    _normalize,
    _with_ones,
    linear_attention,
    linear_attention_buffers,
)
from .features import FEATURE_MAPS, Features, _half_sq_norm, project
from .generalized import generalized_features
from .projections import gaussian_projection, orthogonal_projection, spherical_projection
from .structured import givens_projection, hadamard_projection

__all__ = [
    "FEATURE_KINDS",
    "PROJECTION_KINDS",
    "CAUSAL_IMPLS",
    "FavorStats",
    "ScanStats",
    "draw_projection",
    "favor_features",
    "parallel_prefix_scan",
    "prefix_sum_states",
    "favor_from_features",
    "favor_attention",
    "sm_trig",
    "sm_pos",
    "sm_hyp",
    "smreg_pos",
    "sm_ort_trig",
    "sm_ort_pos",
    "sm_ort_hyp",
    "smreg_ort_pos",
    "generalized_attention",
]

#: Feature maps: the softmax estimators of Sec 2.3 / Lemma 1 and generalized attention (Sec 2.2).
FEATURE_KINDS = ("trig", "positive", "hyperbolic", "generalized")
#: Projection samplers: iid (Gaussian, or spherical with ``norms="sqrt_d"``), R-ORF, H-ORF, G-ORF, and
#: ``none`` (the deterministic generalized features ``f(x) + ε``).
PROJECTION_KINDS = ("iid", "orthogonal", "hadamard", "givens", "none")
#: Causal implementations (module docstring).
CAUSAL_IMPLS = ("chunked", "scan", "parallel")
#: Bytes of one block of heads' feature matrices in :func:`favor_attention`: heads are independent, and blocks below
#: glibc's largest mmap threshold (32 MiB) reuse their temporaries from the heap, where one 33.5 MiB feature matrix
#: (B·H = 8, L = 4096, m = 256, float32) was mapped and zeroed by the kernel afresh in every call (bidirectional
#: float32 56 -> 48 ms on this machine; the torch backend on the CPU 62 -> 42 ms).
_BLOCK_BYTES = 8 << 20


def _heads_per_block(length: int, features: int, itemsize: int) -> int:
    """Heads whose ``length × features`` feature matrices fit in :data:`_BLOCK_BYTES` (at least one)."""
    return max(1, _BLOCK_BYTES // max(1, length * features * itemsize))


@dataclass(frozen=True)
class ScanStats:
    """Work and depth of one :func:`parallel_prefix_scan`: combines performed and sequential rounds."""

    combines: int
    rounds: int


@dataclass(frozen=True)
class FavorStats:
    """Diagnostics of one :func:`favor_from_features` call.

    ``min_denominator``, ``n_nonpositive``, ``n_rows``: as :class:`~rfkit.estimators.attention.AttentionStats`
    (renormalisers ``D̂_ii`` on their true scale, after the guard if any). ``state_bytes``: size of the
    prefix-sum state the implementation holds (``Buf_1``, the carried ``S``, or the materialised ``G^PS``),
    see :func:`rfkit.theory.cost.favor_state_bytes`. ``scan``: work and depth of the parallel scan.
    """

    min_denominator: float
    n_nonpositive: int
    n_rows: int
    state_bytes: int
    scan: ScanStats | None = None


# ------------------------------------------------------------------------------------ projections


def draw_projection(kind: str, m: int, d: int, *, rng, norms: str = "chi", k: int = 3,
                    rotations: int | None = None, dtype=np.float64):
    """Draw ``W`` (``m×d``) by sampler name: an array, or a structured operator for H/G-ORF.

    ``iid`` gives Gaussian rows (``norms="chi"``) or rows uniform on ``√d S^{d-1}`` (``"sqrt_d"``, the
    SMREG law); ``orthogonal`` R-ORF blocks; ``hadamard`` / ``givens`` H/G-ORF (``k`` factors, ``rotations``
    per block). Randomness: ``rng`` only.
    """
    kind = check_choice(kind, "projection", PROJECTION_KINDS[:-1])
    if kind == "iid":
        check_choice(norms, "norms", ("chi", "sqrt_d"))
        sampler = gaussian_projection if norms == "chi" else spherical_projection
        return sampler(m, d, rng=rng, dtype=dtype)
    if kind == "orthogonal":
        return orthogonal_projection(m, d, rng=rng, norms=norms, dtype=dtype)
    if kind == "hadamard":
        return hadamard_projection(m, d, rng=rng, k=k, norms=norms)
    return givens_projection(m, d, rng=rng, rotations=rotations, norms=norms)


# --------------------------------------------------------------------------------------- features


def _jax_features(kind: str, x: np.ndarray, omega, is_query: bool, eps: float, dtype) -> Features:
    """``ratio·(exp(ωᵀx - ‖x‖²/2 - shift) + eps)`` as in the authors' JAX code (module docstring)."""
    if kind not in ("positive", "hyperbolic"):
        raise ValueError(f"jax_stabilizer applies to positive and hyperbolic features, not {kind!r}")
    x, proj, m = project(x, omega, dtype=dtype)
    if kind == "hyperbolic":
        proj, m = np.concatenate([proj, -proj], axis=-1), 2 * m
    axes = (-1,) if is_query else (-2, -1)
    shift = proj.max(axis=axes, keepdims=True)
    with np.errstate(under="ignore"):
        values = (np.exp(proj - _half_sq_norm(x)[..., None] - shift) + eps) / math.sqrt(m)
    return Features.plain(values, dtype=dtype)


def favor_features(x, omega, *, kind: str, is_query: bool = True, function: str = "relu",
                   kernel_epsilon: float = 0.0, jax_stabilizer: float | None = None, dtype=np.float64) -> Features:
    """Feature rows ``φ(x_i)`` of FAVOR for any projection (dense array, H/G-ORF operator, or None).

    ``kind`` is one of :data:`FEATURE_KINDS`; ``generalized`` uses ``function`` and ``kernel_epsilon``
    (``omega=None``: the deterministic ``f(x) + ε``). ``jax_stabilizer`` selects the authors' stabilised
    positive features (``is_query`` chooses the query or key shift). Inputs are taken as given (no
    ``d^{-1/4}`` scaling here).
    """
    kind = check_choice(kind, "kind", FEATURE_KINDS)
    if kind == "generalized":
        return generalized_features(x, omega, function=function, kernel_epsilon=kernel_epsilon, dtype=dtype)
    if omega is None:
        raise ValueError(f"kind={kind!r} needs a projection omega")
    if jax_stabilizer is not None:
        eps = check_positive_float(jax_stabilizer, "jax_stabilizer", allow_zero=True)
        return _jax_features(kind, x, omega, is_query, eps, dtype)
    return FEATURE_MAPS[kind](x, omega, dtype=dtype)


# ------------------------------------------------------------------------------------ prefix sums


def _combine(log_a: np.ndarray, state_a: np.ndarray, log_b: np.ndarray, state_b: np.ndarray):
    """``(a, S_a) ⊕ (b, S_b) = (M, e^{a-M} S_a + e^{b-M} S_b)``, ``M = max(a, b)``; ``(-inf, 0)`` is neutral."""
    top = np.maximum(log_a, log_b)
    safe = np.where(np.isfinite(top), top, 0.0)
    expand = (...,) + (None,) * (state_a.ndim - log_a.ndim)
    return top, state_a * np.exp(log_a - safe)[expand] + state_b * np.exp(log_b - safe)[expand]


def parallel_prefix_scan(log_scale, states) -> tuple[np.ndarray, np.ndarray, ScanStats]:
    r"""Inclusive prefix sums with log-scales by a work-efficient parallel scan (Blelloch 1990).

    Returns ``ref_i = max_{j<=i} log_scale_j`` and ``P_i = Σ_{j<=i} exp(log_scale_j - ref_i)·states_j``,
    so that the true prefix sum is ``exp(ref_i)·P_i`` (never overflowing).

    Parameters
    ----------
    log_scale : array_like, shape ``(L, ...)``
        Per-element log scales (the sequence is the first axis).
    states : array_like, shape ``log_scale.shape + (...)``
        Elements to sum.

    Returns
    -------
    ref, prefix, ScanStats
        ``ScanStats`` counts the combines (work) and the rounds of mutually independent combines (depth):
        over the padded length ``L' = 2^⌈log₂ L⌉``, ``2(L' - 1) + L`` combines in ``2 log₂ L' + 1``
        rounds (:func:`rfkit.theory.cost.prefix_scan_counts`). Each round is one vectorised numpy
        operation, a simulation of its parallel execution.

    Notes
    -----
    Up-sweep: a tree of partial sums; down-sweep: each node receives the sum of everything to its left.
    Prefix ``i`` only combines elements ``<= i``, so it does not depend on later elements. Memory
    ``O(L'·size(state))``.

    Examples
    --------
    >>> ref, prefix, stats = parallel_prefix_scan(np.zeros(4), np.array([1.0, 2.0, 3.0, 4.0]))
    >>> prefix, stats.combines, stats.rounds
    (array([ 1.,  3.,  6., 10.]), 10, 5)
    """
    log_scale = np.asarray(log_scale, dtype=np.float64)
    states = np.asarray(states, dtype=np.float64)
    if log_scale.ndim < 1 or states.shape[: log_scale.ndim] != log_scale.shape:
        raise ValueError(f"states of shape {states.shape} must start with log_scale's shape {log_scale.shape}")
    n = log_scale.shape[0]
    size = 1 << max(n - 1, 0).bit_length()
    logs = np.full((size,) + log_scale.shape[1:], -np.inf)
    logs[:n] = log_scale
    acc = np.zeros((size,) + states.shape[1:])
    acc[:n] = states
    combines = rounds = 0
    step = 1
    while step < size:  # up-sweep: node right holds the sum of its block
        right = np.arange(2 * step - 1, size, 2 * step)
        logs[right], acc[right] = _combine(logs[right - step], acc[right - step], logs[right], acc[right])
        combines, rounds, step = combines + right.size, rounds + 1, 2 * step
    logs[size - 1], acc[size - 1] = -np.inf, 0.0
    step = size // 2
    while step >= 1:  # down-sweep: node right receives (sum left of its block) ⊕ (left half)
        right = np.arange(2 * step - 1, size, 2 * step)
        left_log, left_acc = logs[right - step], acc[right - step]
        logs[right - step], acc[right - step] = logs[right], acc[right]
        logs[right], acc[right] = _combine(logs[right], acc[right], left_log, left_acc)
        combines, rounds, step = combines + right.size, rounds + 1, step // 2
    ref, prefix = _combine(logs[:n], acc[:n], log_scale, states)
    return ref, prefix, ScanStats(combines + n, rounds + 1)


def prefix_sum_states(k_features, v) -> tuple[np.ndarray, np.ndarray, ScanStats]:
    r"""``G^PS_i = Σ_{j<=i} K'_j C_jᵀ`` (Performer Eq 11), materialised: ``(ref, G^PS, stats)``.

    ``k_features`` ``(L, r)`` (a :class:`Features`, or a plain array) and ``v`` ``(L, d_v)``; ``C = [V 1]``.
    ``G^PS`` has shape ``(L, r, d_v + 1)`` and the true prefix sum is ``exp(ref_i)·G^PS_i`` (``ref_i`` the
    running maximum of the key log-scales). Memory ``O(L·r·d_v)``.
    """
    kf = _as_features(k_features, "k_features", np.float64)
    v = as_float_array(v, "v", min_ndim=2)
    if kf.values.ndim != 2 or v.ndim != 2 or kf.values.shape[0] != v.shape[0]:
        raise ValueError(f"k_features (L, r) and v (L, d_v) must share L, got {kf.values.shape} and {v.shape}")
    g = kf.values[:, :, None] * _with_ones(v)[:, None, :]
    return parallel_prefix_scan(kf.log_scale, g)


@numba.njit(cache=True)
def _scan_kernel(qv, kv, kls, vo, buf, key_ref, state):
    """Sequential prefix aggregation: row ``j`` of ``buf`` is ``Q'_jᵀ S_j`` with ``S_j`` rescaled to ``key_ref_j``."""
    n_batch, n, r = qv.shape
    p = vo.shape[2]
    for b in range(n_batch):
        state[:, :] = 0.0
        ref = -np.inf
        for j in range(n):
            new = max(ref, kls[b, j])
            if new == -np.inf:
                weight = 0.0
            else:
                if ref != -np.inf and new > ref:
                    state *= math.exp(ref - new)
                weight = math.exp(kls[b, j] - new)
            for i in range(r):
                a = weight * kv[b, j, i]
                for c in range(p):
                    state[i, c] += a * vo[b, j, c]
            for c in range(p):
                total = 0.0
                for i in range(r):
                    total += qv[b, j, i] * state[i, c]
                buf[b, j, c] = total
            key_ref[b, j] = new
            ref = new


def _flat_batch(a: np.ndarray, lead: tuple[int, ...], tail: tuple[int, ...]) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(a, lead + tail).reshape((-1,) + tail), dtype=np.float64)


def _scan_buffers(qf: Features, kf: Features, v: np.ndarray):
    lead = np.broadcast_shapes(qf.values.shape[:-2], kf.values.shape[:-2], v.shape[:-2])
    n, r, p = qf.values.shape[-2], qf.values.shape[-1], v.shape[-1] + 1
    qv, kv = _flat_batch(qf.values, lead, (n, r)), _flat_batch(kf.values, lead, (n, r))
    kls, vo = _flat_batch(kf.log_scale, lead, (n,)), _flat_batch(_with_ones(v), lead, (n, p))
    buf, key_ref, state = np.empty(vo.shape), np.empty(kls.shape), np.empty((r, p))
    _scan_kernel(qv, kv, kls, vo, buf, key_ref, state)
    return buf.reshape(lead + (n, p)), key_ref.reshape(lead + (n,)), state.nbytes


def _parallel_buffers(qf: Features, kf: Features, v: np.ndarray):
    lead = np.broadcast_shapes(qf.values.shape[:-2], kf.values.shape[:-2], v.shape[:-2])
    n, r, p = qf.values.shape[-2], qf.values.shape[-1], v.shape[-1] + 1
    kv, kls = _flat_batch(kf.values, lead, (n, r)), _flat_batch(kf.log_scale, lead, (n,))
    g = kv[:, :, :, None] * _flat_batch(_with_ones(v), lead, (n, p))[:, :, None, :]  # G_j = K'_j C_jᵀ
    ref, prefix, stats = parallel_prefix_scan(np.swapaxes(kls, 0, 1), np.swapaxes(g, 0, 1))
    qv = np.swapaxes(_flat_batch(qf.values, lead, (n, r)), 0, 1)
    buf = np.einsum("nbr,nbrp->nbp", qv, prefix)
    state_bytes = (1 << max(n - 1, 0).bit_length()) * r * p * prefix.itemsize
    return np.swapaxes(buf, 0, 1).reshape(lead + (n, p)), np.swapaxes(ref, 0, 1).reshape(lead + (n,)), \
        state_bytes, stats


def _buffers(qf: Features, kf: Features, v: np.ndarray, causal: bool, impl: str, chunk: int):
    """``Buf_2 = [Buf_3 | buf_4]`` on a stabilised scale, ``log_ref`` (true = stabilised·e^{log_ref}), stats."""
    r, p = qf.values.shape[-1], v.shape[-1] + 1
    if not causal or impl == "chunked":
        buf, log_ref = linear_attention_buffers(qf, kf, v, causal=causal, chunk_size=chunk)
        carried = r * p if not causal else r * p + min(chunk, qf.values.shape[-2]) ** 2
        return buf, log_ref, carried * buf.itemsize, None
    if impl == "scan":
        buf, key_ref, state_bytes = _scan_buffers(qf, kf, v)
        return buf, qf.log_scale + key_ref, state_bytes, None
    buf, key_ref, state_bytes, stats = _parallel_buffers(qf, kf, v)
    return buf, qf.log_scale + key_ref, state_bytes, stats


def _guard(buf: np.ndarray, log_ref: np.ndarray, eps: float):
    """``D̂ ← D̂ + 2·eps·1(|D̂| <= eps)`` on the true scale; guarded rows move to the reference ``log(2 eps)``."""
    den = buf[..., -1]
    with np.errstate(divide="ignore"):
        small = np.log(np.abs(den)) + log_ref <= math.log(eps)
    if not small.any():
        return buf, log_ref
    new_ref = np.where(small, math.log(2 * eps), log_ref)
    with np.errstate(over="ignore"):
        buf = buf * np.exp(log_ref - new_ref)[..., None]
    buf[..., -1] += small
    return buf, new_ref


def _true_scale_stats(den: np.ndarray, log_ref: np.ndarray) -> AttentionStats:
    with np.errstate(over="ignore", divide="ignore"):
        true_den = np.sign(den) * np.exp(np.log(np.abs(den)) + log_ref)
    return AttentionStats(float(true_den.min()), int(np.count_nonzero(den <= 0)), int(den.size))


# ------------------------------------------------------------------------------------- attention


def favor_from_features(q_features, k_features, v, *, causal: bool = False, causal_impl: str = "chunked",
                        chunk_size: int | None = None, renormalize: bool = True, denominator_guard: float = 0.0,
                        return_stats: bool = False, dtype=np.float64):
    r"""The FA part of FAVOR+ (Performer Eq 4 / Algorithm 1 / Eq 11) from feature matrices ``Q'``, ``K'``.

    Parameters
    ----------
    q_features, k_features : Features or array_like, shapes ``(..., L, r)``
        Rows ``φ(q_i)``, ``φ(k_j)`` (:func:`favor_features`).
    v : array_like, shape ``(..., L, d_v)``
    causal : bool
        Unidirectional (``tril``) attention.
    causal_impl : {"chunked", "scan", "parallel"}
        See the module docstring; ``chunk_size`` applies to ``chunked``.
    renormalize : bool
        ``True``: ``diag(buf_4)⁻¹Buf_3``; ``False``: ``Buf_3`` (true scale).
    denominator_guard : float
        ``eps > 0`` applies ``D̂ ← D̂ + 2·eps·1(|D̂| <= eps)`` (the authors' code); 0 (default) does not.
    return_stats : bool
        Also return :class:`FavorStats`.

    Returns
    -------
    ndarray ``(..., L, d_v)`` (and ``FavorStats``).

    Raises
    ------
    NumericalError
        A zero or non-finite renormaliser, or a ``Buf_3`` that overflows its dtype.

    Examples
    --------
    >>> f = np.ones((3, 2))
    >>> favor_from_features(f, f, [[0.0], [3.0], [6.0]], causal=True, causal_impl="scan")
    array([[0. ],
           [1.5],
           [3. ]])
    """
    dt = compute_dtype(dtype)
    impl = check_choice(causal_impl, "causal_impl", CAUSAL_IMPLS)
    eps = check_positive_float(denominator_guard, "denominator_guard", allow_zero=True)
    chunk = DEFAULT_CHUNK_SIZE if chunk_size is None else check_positive_int(chunk_size, "chunk_size")
    if renormalize and not eps and (not causal or impl == "chunked") and not return_stats:
        return linear_attention(q_features, k_features, v, causal=causal, chunk_size=chunk, dtype=dt)
    qf, kf = _as_features(q_features, "q_features", dt), _as_features(k_features, "k_features", dt)
    v = as_float_array(v, "v", dtype=dt, min_ndim=2)
    _check_shapes(qf, kf, v, causal)
    buf, log_ref, state_bytes, scan = _buffers(qf, kf, v, causal, impl, chunk)
    buf = buf.astype(dt, copy=False)
    if eps:
        buf, log_ref = _guard(buf, log_ref, eps)
    if renormalize:
        out, att = _normalize(buf, log_ref, {"q_features": qf.values, "k_features": kf.values, "v": v})
    else:
        with np.errstate(over="ignore"):
            out = buf[..., :-1] * np.exp(log_ref)[..., None]
        if not np.isfinite(out).all():
            raise NumericalError("Buf_3 (unnormalised attention) overflows; use renormalize=True")
        att = _true_scale_stats(buf[..., -1], log_ref)
    stats = FavorStats(att.min_denominator, att.n_nonpositive, att.n_rows, int(state_bytes), scan)
    return (out, stats) if return_stats else out


def _check_shapes(qf: Features, kf: Features, v: np.ndarray, causal: bool) -> None:
    if qf.values.shape[-1] != kf.values.shape[-1]:
        raise ValueError(f"q_features and k_features must share their last dimension, got "
                         f"{qf.values.shape[-1]} and {kf.values.shape[-1]}")
    if kf.values.shape[-2] != v.shape[-2]:
        raise ValueError(f"k_features and v must have the same number of rows, got {kf.values.shape[-2]} and "
                         f"{v.shape[-2]}")
    if causal and qf.values.shape[-2] != kf.values.shape[-2]:
        raise ValueError(f"causal attention needs as many queries as keys, got N={qf.values.shape[-2]} and "
                         f"M={kf.values.shape[-2]}")


def favor_attention(q, k, v, *, kind: str = "positive", projection: str = "orthogonal", m: int = 256,
                    omega=None, rng=None, norms: str = "chi", function: str = "relu", kernel_epsilon: float = 0.0,
                    scale_inputs: bool = True, causal: bool = False, causal_impl: str = "chunked",
                    chunk_size: int | None = None, renormalize: bool = True, jax_stabilizer: float | None = None,
                    denominator_guard: float = 0.0, hadamard_k: int = 3, givens_rotations: int | None = None,
                    return_stats: bool = False, dtype=np.float64):
    r"""FAVOR+ attention, Performer Algorithm 1: features, then :func:`favor_from_features`.

    Parameters
    ----------
    q, k : array_like, shapes ``(..., L, d)``
    v : array_like, shape ``(..., L, d_v)``
    kind : {"trig", "positive", "hyperbolic", "generalized"}
        ``SM^trig``, ``SM⁺`` (FAVOR+, default), ``SM^hyp+``, or generalized attention (``function``,
        ``kernel_epsilon``).
    projection : {"iid", "orthogonal", "hadamard", "givens", "none"}
        Sampler for ``W`` (:func:`draw_projection`; default R-ORF, A.3's ``ortho_features = True``);
        ``none``: deterministic generalized features. Ignored when ``omega`` is given.
    m : int
        Number of projections (A.3/A.4: 256).
    omega : array ``(m, d)`` or structured projection, optional
        Explicit projection (then ``rng`` is not needed).
    rng : numpy Generator or seed
        Required when a projection is drawn.
    norms : {"chi", "sqrt_d", "unit"}
        Radial law of the rows (``chi``: SM, A.3's ``ortho_scaling = 0``; ``sqrt_d``: SMREG).
    scale_inputs : bool
        Use ``q/d^{1/4}``, ``k/d^{1/4}`` (default; Performer's ``A = exp(QKᵀ/√d)``). The authors'
        generalized-attention code does not scale by default; pass ``False`` for that.
    causal, causal_impl, chunk_size, renormalize, denominator_guard, return_stats
        See :func:`favor_from_features`.
    jax_stabilizer : float, optional
        The authors' stabilised positive features with this ``eps`` (module docstring); A.3 uses ``1e-6``.
    hadamard_k, givens_rotations
        H-ORF factors and G-ORF rotations per block.

    Returns
    -------
    ndarray ``(..., L, d_v)`` (and :class:`FavorStats`).

    Notes
    -----
    Bidirectional, where ``q``, ``k`` and ``v`` share their leading (batch, head) axes, the heads run in blocks of
    at most :data:`_BLOCK_BYTES` of feature matrices (the same output to round-off, less memory and no fresh mapping
    of large temporaries per call; without ``return_stats``). Causal attention runs whole: blocks made its float32
    path 5% slower here (its chunk loop runs once per block).

    Examples
    --------
    With ``q = k = 0`` every estimator gives uniform weights: the output is the mean of the values.

    >>> favor_attention(np.zeros((3, 4)), np.zeros((3, 4)), [[0.0], [3.0], [6.0]], m=8, rng=0)
    array([[3.],
           [3.],
           [3.]])
    """
    q = as_float_array(q, "q", dtype=dtype, min_ndim=2)
    k = as_float_array(k, "k", dtype=dtype, min_ndim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension, got {q.shape[-1]} and {k.shape[-1]}")
    d = q.shape[-1]
    if omega is None and projection != "none":
        omega = draw_projection(projection, check_positive_int(m, "m"), d, rng=check_rng(rng), norms=norms,
                                k=hadamard_k, rotations=givens_rotations, dtype=dtype)
    elif projection == "none" and kind != "generalized":
        raise ValueError("projection='none' (deterministic features) needs kind='generalized'")
    scale = d ** -0.25 if scale_inputs else 1.0
    options = dict(kind=kind, function=function, kernel_epsilon=kernel_epsilon, jax_stabilizer=jax_stabilizer,
                   dtype=dtype)

    def attend(qb, kb, vb):
        qf = favor_features(qb * scale, omega, is_query=True, **options)
        kf = favor_features(kb * scale, omega, is_query=False, **options)
        return favor_from_features(qf, kf, vb, causal=causal, causal_impl=causal_impl, chunk_size=chunk_size,
                                   renormalize=renormalize, denominator_guard=denominator_guard,
                                   return_stats=return_stats, dtype=dtype)

    v = as_float_array(v, "v", dtype=dtype, min_ndim=2)
    lead = q.shape[:-2]
    if causal or return_stats or not lead or k.shape[:-2] != lead or v.shape[:-2] != lead:
        return attend(q, k, v)
    # bidirectional: independent heads in blocks whose feature matrices stay under _BLOCK_BYTES
    r = 2 * (omega.m if hasattr(omega, "m") else np.shape(omega)[0] if omega is not None else d)
    heads = int(np.prod(lead))
    step = _heads_per_block(max(q.shape[-2], k.shape[-2]), r, q.itemsize)
    if step >= heads:
        return attend(q, k, v)
    flat = [x.reshape((heads,) + x.shape[-2:]) for x in (q, k, v)]
    out = np.empty((heads, q.shape[-2], v.shape[-1]), dtype=compute_dtype(dtype))
    for s in range(0, heads, step):
        out[s:s + step] = attend(*(x[s:s + step] for x in flat))
    return out.reshape(lead + out.shape[-2:])


# ------------------------------------------------------------------------------ named estimators


def sm_trig(q, k, v, *, m: int = 256, rng=None, **options):
    """``SM^trig_m`` attention (Sec 2.3): trigonometric features, iid Gaussian ``W``; ``r = 2m``, ``D̂`` may be <= 0."""
    return favor_attention(q, k, v, kind="trig", projection="iid", m=m, rng=rng, **options)


def sm_pos(q, k, v, *, m: int = 256, rng=None, **options):
    """``SM⁺_m`` attention (Lemma 1): positive features ``exp(ωᵀx - ‖x‖²/2)/√m``, iid Gaussian ``W``."""
    return favor_attention(q, k, v, kind="positive", projection="iid", m=m, rng=rng, **options)


def sm_hyp(q, k, v, *, m: int = 256, rng=None, **options):
    """``SM^hyp+_m`` attention (Lemma 1): antithetic positive features ``exp(±ωᵀx - ‖x‖²/2)/√(2m)``, iid ``W``."""
    return favor_attention(q, k, v, kind="hyperbolic", projection="iid", m=m, rng=rng, **options)


def smreg_pos(q, k, v, *, m: int = 256, rng=None, **options):
    """``SMREG⁺_m`` attention (Sec 2.3): positive features with rows iid uniform on ``√d S^{d-1}``."""
    return favor_attention(q, k, v, kind="positive", projection="iid", norms="sqrt_d", m=m, rng=rng, **options)


def sm_ort_trig(q, k, v, *, m: int = 256, rng=None, **options):
    """Trigonometric features with R-ORF (chi norms; blocks for ``m > d``, B.2)."""
    return favor_attention(q, k, v, kind="trig", projection="orthogonal", m=m, rng=rng, **options)


def sm_ort_pos(q, k, v, *, m: int = 256, rng=None, **options):
    """``SM^ort+_m`` attention (Theorem 2): positive features with R-ORF (chi norms), FAVOR+'s default."""
    return favor_attention(q, k, v, kind="positive", projection="orthogonal", m=m, rng=rng, **options)


def sm_ort_hyp(q, k, v, *, m: int = 256, rng=None, **options):
    """Hyperbolic positive features with R-ORF (chi norms); not named in the paper (Fig 4 ablation cell)."""
    return favor_attention(q, k, v, kind="hyperbolic", projection="orthogonal", m=m, rng=rng, **options)


def smreg_ort_pos(q, k, v, *, m: int = 256, rng=None, **options):
    """``SMREG^ort+_m`` attention (Theorems 2-3): positive features with R-ORF rows of norm ``√d``."""
    return favor_attention(q, k, v, kind="positive", projection="orthogonal", norms="sqrt_d", m=m, rng=rng,
                           **options)


def generalized_attention(q, k, v, *, function: str = "relu", kernel_epsilon: float = 1e-3,
                          projection: str = "iid", m: int = 256, rng=None, **options):
    """Generalized attention (Sec 2.2, A.4: ReLU, ``kernel_epsilon = 10⁻³``, 256 features).

    ``projection="none"`` gives the deterministic features ``f(x) + ε`` (the authors' code default); with
    ``function="elu_plus_one"`` and ``scale_inputs=False`` that is the Linear Transformer (D.4).
    """
    return favor_attention(q, k, v, kind="generalized", projection=projection, m=m, rng=rng, function=function,
                           kernel_epsilon=kernel_epsilon, **options)
