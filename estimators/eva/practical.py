r"""Practical EVA (Zheng et al., ICLR 2023; ``002_b2e9d84e2f6b65de.txt``; §4.2, Eq 16, Algorithm 1, App C).

:func:`eva_practical`: one joint softmax over the local logits ``q_n·k_m`` (``m ∈ E^n``) and the chunk logits
``q_n·k̃_c``, with the single-sample (query-free) or multi-sample coefficients ``β̂_c`` (App C) and the
register's diagnostic variants (oracle coefficients, LSE chunk logits, logit offsets); the chunk summary map
:class:`LinearLayerNorm` (``σ = LN∘Linear``, Eq 26); proposal means ``μ_c`` (Eq 28, :data:`MU_RULES`);
:class:`EvaDetails` (samples, coefficients, effective attention). The chunk statistics and the joint softmax
here are shared with causal EVA (:mod:`rfkit.estimators.eva.causal`).

Frames: ``"theory"`` (``exp(q·k)``), ``"sqrt_d"`` (``q ← d^{-1/4} q``, ``k ← d^{-1/4} k``) and
``"reference_code"`` (the authors' released code: logits and chunk log-features divided by ``√d``, proposal
means from unscaled ``σ`` outputs). Numerics: exponentials in log space, row maxima over allowed logits only.
Randomness: only ``rng`` or ``eps`` (the chunk noise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import (
    as_float_array,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_qkv,
    check_rng,
    compute_dtype,
)
from rfkit.base.numerics import half_sq_norm, logsumexp

from ..rfa import _in_frame
from .partitions import PracticalPartition, practical_partition

#: Frames of every estimator here (:data:`rfkit.estimators.rfa.FRAMES`); the practical and causal estimators also
#: accept ``"reference_code"``.
PRACTICAL_FRAMES = ("theory", "sqrt_d", "reference_code")
#: Proposal-mean rules of practical EVA: ``q̃_c + k̃_c`` (Eq 28), ``½(q̃_c + k̃_c)``, ``q̃_c``, ``0``.
MU_RULES = ("q+k", "half", "q", "zero")


@dataclass(frozen=True)
class LinearLayerNorm:
    r"""Chunk summary map ``σ(x) = LayerNorm(x Wᵀ + b)`` with gain and shift (EVA Eq 26, App C).

    ``LayerNorm(y) = gain·(y - mean(y))/sqrt(var(y) + eps) + shift`` over the last axis (biased variance,
    as torch). Use :meth:`identity_init` (``W = I``, ``b = 0``, gain 1, shift 0) or :meth:`random_init`
    (xavier-uniform weight with gain ``1/√2``, the authors' released initialisation).
    """

    weight: np.ndarray
    bias: np.ndarray
    gain: np.ndarray
    shift: np.ndarray
    eps: float = 1e-5

    def __post_init__(self):
        w = as_float_array(self.weight, "weight", ndim=2)
        d = w.shape[0]
        if w.shape != (d, d):
            raise ValueError(f"weight must be square (d, d), got {w.shape}")
        for name in ("bias", "gain", "shift"):
            arr = as_float_array(getattr(self, name), name, ndim=1)
            if arr.shape != (d,):
                raise ValueError(f"{name} must have shape ({d},), got {arr.shape}")
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "weight", w)
        check_positive_float(self.eps, "eps")

    @classmethod
    def identity_init(cls, d: int) -> LinearLayerNorm:
        d = check_positive_int(d, "d")
        return cls(np.eye(d), np.zeros(d), np.ones(d), np.zeros(d))

    @classmethod
    def random_init(cls, d: int, *, rng, gain: float = 2 ** -0.5) -> LinearLayerNorm:
        d = check_positive_int(d, "d")
        bound = gain * math.sqrt(6.0 / (2 * d))
        weight = check_rng(rng).uniform(-bound, bound, size=(d, d))
        return cls(weight, np.zeros(d), np.ones(d), np.zeros(d))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.weight.T + self.bias
        centred = y - y.mean(axis=-1, keepdims=True)
        return self.gain * centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + self.eps) + self.shift


@dataclass(frozen=True)
class EvaDetails:
    """What one practical/causal EVA call computed (diagnostics and the effective attention).

    Attributes
    ----------
    partition : PracticalPartition or None (causal)
    omega : ndarray ``(..., G, C, S, d)``, the samples used (``ω_c = μ_c`` in eval mode)
    mu : ndarray ``(..., G, C, d)``, proposal means
    k_tilde, q_tilde : ndarray ``(..., G, C, d)``, chunk representatives ``σ(pool)``
    coefficients : ndarray, ``β̂_c``: ``(..., G, C, d_v)`` (single sample, query-free) or per query
        ``(..., N, C, d_v)``
    attention : ndarray ``(..., N, M)``, effective attention ``A`` with ``Y = A V`` (rows sum to 1)
    """

    partition: PracticalPartition | None
    omega: np.ndarray
    mu: np.ndarray
    k_tilde: np.ndarray
    q_tilde: np.ndarray
    coefficients: np.ndarray
    attention: np.ndarray


@dataclass(frozen=True)
class _Options:
    sigma_q: Callable
    sigma_k: Callable
    pool: str
    mu_rule: object
    num_samples: int
    mode: str
    logit_scale: float
    coefficient: str
    chunk_logit: str
    chunk_logit_offset: float


def _identity(x):
    return x


def _options(d, *, sigma_q, sigma_k, pool, mu_rule, num_samples, mode, frame, coefficient, chunk_logit,
             chunk_logit_offset) -> _Options:
    check_choice(pool, "pool", ("mean", "max"))
    check_choice(mode, "mode", ("train", "eval"))
    check_choice(frame, "frame", PRACTICAL_FRAMES)
    check_choice(coefficient, "coefficient", ("sampled", "oracle"))
    check_choice(chunk_logit, "chunk_logit", ("representative", "lse"))
    if isinstance(mu_rule, str):
        check_choice(mu_rule, "mu_rule", MU_RULES)
    num_samples = check_positive_int(num_samples, "num_samples")
    if frame == "reference_code" and num_samples > 1:
        raise ValueError("frame='reference_code' is the single-sample released code; use num_samples=1")
    for name, fn in (("sigma_q", sigma_q), ("sigma_k", sigma_k)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be None (identity) or a callable on (..., d) arrays")
    offset = float(chunk_logit_offset)
    if not math.isfinite(offset):
        raise ValueError("chunk_logit_offset must be finite")
    return _Options(sigma_q or _identity, sigma_k or _identity, pool, mu_rule, num_samples, mode,
                    d ** -0.5 if frame == "reference_code" else 1.0, coefficient, chunk_logit, offset)


def _pool(x: np.ndarray, how: str) -> np.ndarray:
    return x.mean(axis=-2) if how == "mean" else x.max(axis=-2)


def _proposal_mean(q_tilde, k_tilde, rule) -> np.ndarray:
    if not isinstance(rule, str):
        return np.broadcast_to(as_float_array(rule, "mu_rule"), k_tilde.shape)
    return {"q+k": lambda: q_tilde + k_tilde, "half": lambda: 0.5 * (q_tilde + k_tilde), "q": lambda: q_tilde,
            "zero": lambda: np.zeros_like(k_tilde)}[rule]()


def _chunk_samples(mu, opts: _Options, rng, eps, dtype):
    """``ω_{c,s} = μ_c + ε_{c,s}`` (train) or ``μ_c`` (eval, or oracle coefficients, which use no sample):
    shape ``mu.shape[:-1] + (S, d)``."""
    shape = mu.shape[:-1] + (opts.num_samples, mu.shape[-1])
    if opts.mode == "eval" or opts.coefficient == "oracle":
        return np.broadcast_to(mu[..., None, :], shape)
    if eps is None:
        if rng is None:
            raise TypeError("mode='train' needs rng= or eps= (the chunk noise)")
        return mu[..., None, :] + check_rng(rng).standard_normal(shape)
    eps = as_float_array(eps, "eps", dtype=dtype)
    if opts.num_samples == 1:
        eps = eps[..., None, :]
    try:
        eps = np.broadcast_to(eps, shape)
    except ValueError as exc:
        raise ValueError(f"eps must broadcast to {shape[:-2] + shape[-1:]} (one sample per chunk) or to "
                         f"{shape} (num_samples > 1), got {eps.shape}") from exc
    return mu[..., None, :] + eps


@dataclass(frozen=True)
class _ChunkStats:
    k_tilde: np.ndarray   # (..., G, C, d)
    q_tilde: np.ndarray
    mu: np.ndarray
    omega: np.ndarray     # (..., G, C, S, d)
    log_feat: np.ndarray  # (..., G, C, S, l): log ξ(k_m, ω_{c,s}) (times the logit scale)
    chunk_keys: np.ndarray   # (..., G, C, l, d)
    chunk_values: np.ndarray  # (..., G, C, l, d_v)


def _chunk_stats(q, k, v, chunks, opts: _Options, rng, eps, dtype) -> _ChunkStats:
    """Chunk representatives, proposals, samples and key log-features from the chunk's tokens only."""
    kc, qc, vc = k[..., chunks, :], q[..., chunks, :], v[..., chunks, :]
    k_tilde = opts.sigma_k(_pool(kc, opts.pool))
    q_tilde = opts.sigma_q(_pool(qc, opts.pool))
    mu = _proposal_mean(q_tilde, k_tilde, opts.mu_rule)
    omega = _chunk_samples(mu, opts, rng, eps, dtype)
    log_feat = (np.einsum("...sd,...ld->...sl", omega, kc) - half_sq_norm(kc)[..., None, :]) * opts.logit_scale
    return _ChunkStats(k_tilde, q_tilde, mu, omega, log_feat, kc, vc)


def _no_chunks(nb: int, d: int, dv: int, num_samples: int) -> _ChunkStats:
    """Empty chunk statistics (``C = 0``: local attention only)."""
    empty = np.zeros((nb, 1, 0, d))
    return _ChunkStats(empty, empty, empty, np.zeros((nb, 1, 0, num_samples, d)),
                       np.zeros((nb, 1, 0, num_samples, 0)), np.zeros((nb, 1, 0, 0, d)), np.zeros((nb, 1, 0, 0, dv)))


def _single_sample_coefficients(stats: _ChunkStats):
    """Query-free ``β̂_c = Σ_{m∈P_c} softmax_m(log ξ(k_m, ω_c)) v_m`` (App C) and its inner weights."""
    lf = stats.log_feat[..., 0, :]
    inner = np.exp(lf - lf.max(axis=-1, keepdims=True))
    inner /= inner.sum(axis=-1, keepdims=True)
    return (inner[..., None, :] @ stats.chunk_values)[..., 0, :], inner


def _multi_sample_coefficients(qb, stats: _ChunkStats, group, want_inner: bool):
    """Per-query ``β̂_c(q_n)`` from ``S`` samples per chunk (App C, multi-sample form) and inner weights.

    ``β̂_c(q_n) = Σ_{s,m} softmax_{(s,m)}(log r_c(ω_{c,s}) + log ξ(q_n, ω_{c,s}) + log ξ(k_m, ω_{c,s})) v_m``,
    factored as query weights ``u = r_c ξ(q_n, ·)`` times per-sample key sums ``Σ_m ξ(k_m, ω_{c,s}) v_m``:
    ``O(N C S (d + d_v))`` time and ``O(N C S + C S d_v)`` memory. The inner weights over ``P_c`` (``O(N M)``)
    are formed only when ``want_inner`` (details requested); otherwise ``None``.
    """
    omega, mu = stats.omega[..., group, :, :, :], stats.mu[..., group, :, :]
    log_r = -np.einsum("...csd,...cd->...cs", omega, mu) + half_sq_norm(mu)[..., None]
    lf = stats.log_feat[..., group, :, :, :]
    shift = lf.max(axis=-1)
    key_w = np.exp(lf - shift[..., None])                          # (..., B, C, S, l)
    lq = np.einsum("...bqd,...bcsd->...bqcs", qb, omega) - half_sq_norm(qb)[..., None, None]
    a = lq + (log_r + shift)[..., None, :, :]
    u = np.exp(a - a.max(axis=-1, keepdims=True))                  # (..., B, q, C, S)
    values = stats.chunk_values[..., group, :, :, :]
    numerator = np.einsum("...bqcs,...bcsv->...bqcv", u, key_w @ values)
    denominator = np.einsum("...bqcs,...bcs->...bqc", u, key_w.sum(axis=-1))
    beta = numerator / denominator[..., None]
    if not want_inner:
        return beta, None
    inner = np.einsum("...bqcs,...bcsl->...bqcl", u, key_w)
    return beta, inner / inner.sum(axis=-1, keepdims=True)


def _oracle_coefficients(qb, stats: _ChunkStats, group, scale):
    """``β*_c(q_n)``: the local softmax of ``P_c`` (diagnostic (a); quadratic)."""
    kc, vc = stats.chunk_keys[..., group, :, :, :], stats.chunk_values[..., group, :, :, :]
    logits = np.einsum("...bqd,...bcld->...bqcl", qb, kc) * scale
    inner = np.exp(logits - logits.max(axis=-1, keepdims=True))
    inner /= inner.sum(axis=-1, keepdims=True)
    return np.einsum("...bqcl,...bclv->...bqcv", inner, vc), inner


def _chunk_logits(qb, stats: _ChunkStats, group, opts: _Options):
    if opts.chunk_logit == "lse":
        kc = stats.chunk_keys[..., group, :, :, :]
        logits = logsumexp(np.einsum("...bqd,...bcld->...bqcl", qb, kc) * opts.logit_scale, axis=-1)
    else:
        logits = np.einsum("...bqd,...bcd->...bqc", qb, stats.k_tilde[..., group, :, :]) * opts.logit_scale
    return logits + opts.chunk_logit_offset


def _joint_softmax(local_logits, chunk_logits):
    """Weights of one softmax over ``[local ‖ chunk]`` logits (Eq 16's normaliser), shifted by the row
    maximum of the allowed (finite) logits only."""
    top = np.maximum(local_logits.max(axis=-1, initial=-np.inf), chunk_logits.max(axis=-1, initial=-np.inf))
    if not np.isfinite(top).all():
        raise ValueError("a query row has no allowed logit (nothing to attend)")
    a_loc = np.exp(local_logits - top[..., None])
    a_chk = np.exp(chunk_logits - top[..., None])
    total = a_loc.sum(axis=-1) + a_chk.sum(axis=-1)
    return a_loc / total[..., None], a_chk / total[..., None]


def _flatten_batch(*arrays):
    lead = np.broadcast_shapes(*(a.shape[:-2] for a in arrays))
    return lead, [np.broadcast_to(a, lead + a.shape[-2:]).reshape((-1,) + a.shape[-2:]) for a in arrays]


def eva_practical(q, k, v, *, block_size: int, num_chunks: int, partition_domain: str = "all", layout: str = "1d",
                  grid: tuple[int, int] | None = None, window: str = "block", sigma_q=None, sigma_k=None,
                  pool: str = "mean", mu_rule="q+k", num_samples: int = 1, mode: str = "train", rng=None, eps=None,
                  frame: str = "theory", coefficient: str = "sampled", chunk_logit: str = "representative",
                  chunk_logit_offset: float = 0.0, position_bias=None, return_details: bool = False,
                  dtype=np.float64):
    r"""Practical EVA (EVA §4.2, Eq 16, Algorithm 1, App C).

    .. math::  y_n = \frac{\sum_{m∈E^n} e_m v_m + \sum_c \exp(q_n·\tilde k_c)\,\hatβ_c}
                          {\sum_{m∈E^n} e_m + \sum_c \exp(q_n·\tilde k_c)},\qquad
               \hatβ_c = \sum_{m∈P_c} \frac{ξ(k_m, ω_c)}{\sum_{m'∈P_c} ξ(k_{m'}, ω_c)} v_m,

    one joint softmax over the ``|E^n| + C`` logits ``[q_n·k_m (m ∈ E^n) ‖ q_n·k̃_c]``;
    ``k̃_c = σ_k(pool_{m∈P_c} k_m)``, ``q̃_c = σ_q(pool of the chunk's queries)`` (Eq 26),
    ``ρ_c = N(μ_c, I)`` (Eq 28), ``ω_c = μ_c + ε_c`` (train) or ``μ_c`` (eval: Algorithm 1's
    "set ω_c = E[ω]").

    Parameters
    ----------
    q, k, v : array_like ``(..., N, d)``, ``(..., N, d)``, ``(..., N, d_v)`` (self-attention, leading
        batch/head axes broadcast)
    block_size, num_chunks, partition_domain, layout, grid, window
        The partition (:func:`practical_partition`): ``|E|``, ``C``, ``"all"`` (App C's implementation,
        default) or ``"complement"`` (§4.2's description), ``"1d"`` or ``"2d"`` (``grid=(H, W)``),
        ``"block"`` or ``"overlapping"``.
    sigma_q, sigma_k : callable, optional
        Chunk summary maps on ``(..., d)`` (default identity); e.g. :class:`LinearLayerNorm`.
    pool : {"mean", "max"}
    mu_rule : {"q+k", "half", "q", "zero"} or array
        ``μ_c``: ``q̃_c + k̃_c`` (Eq 28, default), ``½(q̃_c + k̃_c)`` (released bidirectional code), ``q̃_c``,
        ``0``, or a given vector / array broadcastable to ``(..., G, C, d)``.
    num_samples : int
        ``S = 1`` (default): query-free ``β̂_c``, ``O(C d_v)`` memory. ``S > 1``: App C's multi-sample
        per-query coefficient ``β̂_c(q_n)`` (``O(NC d_v)`` memory).
    mode : {"train", "eval"}
    rng, eps
        Train-mode noise: ``eps`` ``(..., G, C, d)`` (or ``(..., G, C, S, d)``), else drawn from ``rng``
        (independently per batch element and head).
    frame : {"theory", "sqrt_d", "reference_code"}
        See the module docstring.
    coefficient : {"sampled", "oracle"}
        Diagnostic (a): ``β̂_c := β*_c(q_n)`` (local softmax; quadratic; no noise is drawn).
    chunk_logit : {"representative", "lse"}
        Diagnostic (b): ``q_n·k̃_c`` replaced by ``LSE_{m∈P_c}(q_n·k_m)`` (quadratic).
    chunk_logit_offset : float
        Diagnostic (c): added to every chunk logit (default 0).
    position_bias : array_like ``(b_q, e)``, optional
        Additive bias on the local logits (T5-style relative positions; default none).
    return_details : bool
        Also return :class:`EvaDetails` (samples, coefficients, effective attention ``A``).

    Returns
    -------
    ndarray ``(..., N, d_v)`` [, EvaDetails]

    Notes
    -----
    Cost: chunk statistics ``O(Md + Cd²)``; logits ``O(N(|E| + C)d)``; outputs ``O(N(|E| + C)d_v)``;
    memory ``O(N(|E| + C))``: linear in ``N`` for fixed ``|E|`` and ``C`` (``"complement"`` computes one
    chunk set per block, ``O(N M d/|E|)``). ``C = 0`` is block-local attention. Randomness: ``ε`` only.

    Examples
    --------
    One block holding every token and no chunk is softmax attention:

    >>> y = eva_practical(np.zeros((3, 2)), np.zeros((3, 2)), [[0.0], [3.0], [6.0]], block_size=3, num_chunks=0)
    >>> y[:, 0]
    array([3., 3., 3.])
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    n, d = q.shape[-2], q.shape[-1]
    if k.shape[-2] != n:
        raise ValueError(f"practical EVA is self-attention: q and k need the same length, got {n} and {k.shape[-2]}")
    opts = _options(d, sigma_q=sigma_q, sigma_k=sigma_k, pool=pool, mu_rule=mu_rule, num_samples=num_samples,
                    mode=mode, frame=frame, coefficient=coefficient, chunk_logit=chunk_logit,
                    chunk_logit_offset=chunk_logit_offset)
    q, k = _in_frame(q, k, "sqrt_d" if frame == "sqrt_d" else "theory")
    part = practical_partition(n, block_size=block_size, num_chunks=num_chunks, partition_domain=partition_domain,
                               layout=layout, grid=grid, window=window)
    lead, (q, k, v) = _flatten_batch(q, k, v)
    bias = None if position_bias is None else as_float_array(position_bias, "position_bias", dtype=dt, ndim=2)
    if bias is not None and bias.shape != (part.queries.shape[1], part.exact.shape[1]):
        raise ValueError(f"position_bias must have shape {(part.queries.shape[1], part.exact.shape[1])}, "
                         f"got {bias.shape}")
    y, details = _practical_core(q, k, v, part, opts, rng, _flat_eps(eps, lead, opts, dt), bias, return_details,
                                 dt)
    y = y.reshape(lead + y.shape[1:])
    return (y, _reshape_details(details, lead)) if return_details else y


def _flat_eps(eps, lead, opts: _Options, dtype):
    """Noise with the batch axes flattened like the inputs (noise without batch axes is broadcast)."""
    if eps is None:
        return None
    eps = as_float_array(eps, "eps", dtype=dtype, min_ndim=3)
    core = 3 if opts.num_samples == 1 else 4
    if eps.ndim <= core:
        return eps
    return np.broadcast_to(eps, lead + eps.shape[-core:]).reshape((-1,) + eps.shape[-core:])


def _practical_core(q, k, v, part: PracticalPartition, opts: _Options, rng, eps, bias, want_details, dtype):
    group = part.chunk_group()
    qb = q[:, part.queries]                                                # (nb, B, bq, d)
    local = np.einsum("nbqd,nbed->nbqe", qb, k[:, part.exact]) * opts.logit_scale
    if bias is not None:
        local = local + bias
    local = np.where(part.exact_valid[None, :, None, :], local, -np.inf)
    if part.num_chunks:
        stats = _chunk_stats(q, k, v, part.chunks, opts, rng, eps, dtype)
        beta, inner = _coefficients(qb, stats, group, opts, want_details)
        chunk = _chunk_logits(qb, stats, group, opts)
    else:
        stats = _no_chunks(q.shape[0], q.shape[-1], v.shape[-1], opts.num_samples)
        beta, inner = np.zeros((q.shape[0], 1, 0, v.shape[-1])), np.zeros((q.shape[0], 1, 0, 0))
        chunk = np.zeros(local.shape[:-1] + (0,))
    a_loc, a_chk = _joint_softmax(local, chunk)
    out = a_loc @ v[:, part.exact]
    if part.num_chunks:
        out = out + (np.einsum("nbqc,nbqcv->nbqv", a_chk, beta) if beta.ndim == 5 else a_chk @ beta[:, group])
    y = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=dtype)
    y[:, part.queries] = out
    if not want_details:
        return y, None
    attention = _effective_attention(q.shape[0], q.shape[1], part, group, a_loc, a_chk, inner)
    return y, EvaDetails(part, stats.omega, stats.mu, stats.k_tilde, stats.q_tilde, beta, attention)


def _coefficients(qb, stats: _ChunkStats, group, opts: _Options, want_inner: bool):
    """``β̂_c`` and its inner weights: query-free ``(nb, G, C, ·)`` (one sample) or ``(nb, B, bq, C, ·)``
    (multi-sample inner weights only when ``want_inner``)."""
    if opts.coefficient == "oracle":
        return _oracle_coefficients(qb, stats, group, opts.logit_scale)
    if opts.num_samples == 1:
        return _single_sample_coefficients(stats)
    return _multi_sample_coefficients(qb, stats, group, want_inner)


def _effective_attention(nb, n, part: PracticalPartition, group, a_loc, a_chk, inner):
    """``A`` with ``Y = A V``: local weights on ``E^n`` plus ``a_c`` times the weights inside ``β̂_c``."""
    attention = np.zeros((nb, n, n))
    rows = np.broadcast_to(part.queries[:, :, None], a_loc.shape[1:])
    cols = np.broadcast_to(part.exact[:, None, :], a_loc.shape[1:])
    local = np.where(part.exact_valid[:, None, :], a_loc, 0.0)
    if part.num_chunks:
        w = inner[:, group][:, :, None] if inner.ndim == 4 else inner        # (nb, B, 1 or bq, C, l)
        contrib = a_chk[..., None] * w
        chunk_rows = np.broadcast_to(part.queries[:, :, None, None], contrib.shape[1:])
        chunk_cols = np.broadcast_to(part.chunks[group][:, None], contrib.shape[1:])
    for i in range(nb):
        np.add.at(attention[i], (rows, cols), local[i])
        if part.num_chunks:
            np.add.at(attention[i], (chunk_rows, chunk_cols), contrib[i])
    return attention


def _reshape_details(details: EvaDetails, lead) -> EvaDetails:
    def back(a):
        return a.reshape(lead + a.shape[1:])

    return EvaDetails(details.partition, back(details.omega), back(details.mu), back(details.k_tilde),
                      back(details.q_tilde), back(details.coefficients), back(details.attention))
