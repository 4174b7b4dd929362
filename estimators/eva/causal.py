r"""Causal EVA (Zheng et al., ICLR 2023; ``002_b2e9d84e2f6b65de.txt``; §4.2 "Extension to Autoregressive
Modeling", App D, Algorithm 2).

:func:`eva_causal` (in parallel, with Algorithm 2's mask matrices ``M^E`` and ``M^P``) and
:func:`eva_causal_incremental` (token by token, set based: the reference). Chunk statistics, the joint softmax
and the options are practical EVA's (:mod:`rfkit.estimators.eva.practical`), one sample per chunk.

Numerics: row maxima over allowed logits only, so causal rows never look at the future. Randomness: only
``rng`` or ``eps`` (the chunk noise).
"""

from __future__ import annotations

import numpy as np

from rfkit.base.checks import as_float_array, check_choice, check_positive_int, check_qkv, check_rng, compute_dtype
from rfkit.base.numerics import half_sq_norm

from ..rfa import _in_frame
from .practical import (
    EvaDetails,
    _chunk_stats,
    _flatten_batch,
    _joint_softmax,
    _no_chunks,
    _Options,
    _options,
    _pool,
    _proposal_mean,
    _reshape_details,
    _single_sample_coefficients,
)


def _causal_windows(n: int, block: int, window: str):
    """Local key positions ``(nB, e)``, their validity and the intra-window mask ``(nB, b, e)``.

    ``window="block"``: keys ``b^n..n`` (Algorithm 2's ``M^E_{i,j} = 1[i <= j]`` on the block);
    ``"overlapping"``: the whole previous block plus ``b^n..n``.
    """
    n_blocks = -(-n // block)
    starts = np.arange(n_blocks) * block
    tri = np.tri(block, dtype=bool)                                     # query i attends key t <= i
    if window == "block":
        keys = starts[:, None] + np.arange(block)
        mask = np.broadcast_to(tri, (n_blocks, block, block))
    else:
        keys = starts[:, None] + np.arange(-block, block)
        mask = np.broadcast_to(np.concatenate([np.ones((block, block), bool), tri], axis=1),
                               (n_blocks, block, 2 * block))
    valid = (keys >= 0) & (keys < n)
    return np.clip(keys, 0, n - 1), mask & valid[:, None, :]


def _causal_chunk_mask(n: int, block: int, chunk: int, n_chunks: int, rule: str, window: str) -> np.ndarray:
    """Allowed chunks ``(N, C)`` through Algorithm 2's ``M^P_{c,t} = 1[c <= t]``.

    ``t`` is the most recent chunk lying entirely left of the local window (``alg2``: chunks ending at or
    before the window start) or the chunk before ``n``'s own chunk (``before_own_chunk``, the released
    code); ``t = -1`` (first block) allows none.
    """
    pos = np.arange(n)
    start = pos // block * block - (block if window == "overlapping" else 0)
    t = np.maximum(start, 0) // chunk - 1 if rule == "alg2" else pos // chunk - 1
    m_p = np.tri(n_chunks, dtype=bool).T                                 # M^P[c, t] = 1[c <= t]
    allowed = np.zeros((n, n_chunks), bool)
    has = t >= 0
    allowed[has] = m_p[:, t[has]].T
    return allowed


def _causal_options(d, **kw):
    return _options(d, num_samples=1, coefficient="sampled", chunk_logit="representative", chunk_logit_offset=0.0,
                    **kw)


def _causal_setup(q, k, v, block_size, chunk_size, chunk_mask, window, dtype, frame, *, unbatched: bool,
                  **options):
    """The argument checks of :func:`eva_causal` and :func:`eva_causal_incremental`, in one place.

    Returns ``(dtype, q, k, v, block, chunk, opts)``: the compute dtype, the checked inputs already in the
    logit frame (``q·k`` is the logit before ``opts.logit_scale``), the block and chunk sizes and the
    practical-EVA options with one sample per chunk (``options``: ``sigma_q, sigma_k, pool, mu_rule, mode``).
    ``unbatched``: the incremental reference takes ``q, k`` ``(N, d)`` and ``v`` ``(N, d_v)`` only.

    Raises
    ------
    ValueError
        If ``q`` and ``k`` differ in length (causal EVA is self-attention), ``unbatched`` inputs carry batch
        dimensions, ``block_size``/``chunk_size`` are not positive, or ``chunk_mask``/``window`` is unknown
        (``TypeError`` for a non-integer size; the options raise as in :func:`eva_practical`).
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    if unbatched and (q.ndim != 2 or k.shape[0] != q.shape[0]):
        raise ValueError("eva_causal_incremental takes unbatched self-attention inputs q, k (N, d), v (N, d_v)")
    n, d = q.shape[-2], q.shape[-1]
    if k.shape[-2] != n:
        raise ValueError(f"causal EVA is self-attention: q and k need the same length, got {n} and {k.shape[-2]}")
    block = check_positive_int(block_size, "block_size")
    chunk = check_positive_int(chunk_size, "chunk_size")
    check_choice(chunk_mask, "chunk_mask", ("alg2", "before_own_chunk"))
    check_choice(window, "window", ("block", "overlapping"))
    opts = _causal_options(d, frame=frame, **options)
    q, k = _in_frame(q, k, "sqrt_d" if frame == "sqrt_d" else "theory")
    return dt, q, k, v, block, chunk, opts


def eva_causal(q, k, v, *, block_size: int, chunk_size: int, chunk_mask: str = "alg2", window: str = "block",
               sigma_q=None, sigma_k=None, pool: str = "mean", mu_rule="q+k", mode: str = "train", rng=None,
               eps=None, frame: str = "theory", return_details: bool = False, dtype=np.float64):
    r"""Causal EVA (EVA §4.2 "Extension to Autoregressive Modeling", App D, Algorithm 2), in parallel.

    .. math::  y_n = \frac{\sum_{m∈E^n} M^E_{m-b^n, n-b^n} e_m v_m + \sum_c M^P_{c,t} \exp(q_n·\tilde k_c)\hatβ_c}
                          {\sum_{m∈E^n} M^E_{m-b^n, n-b^n} e_m + \sum_c M^P_{c,t} \exp(q_n·\tilde k_c)},

    blocks of ``block_size`` (``b^n`` the first position of ``n``'s block), chunks of ``chunk_size``
    (``C = ⌊N/chunk_size⌋`` complete chunks, the same for every query), ``M^E`` the intra-block lower
    triangle and ``M^P_{c,t} = 1[c <= t]`` with ``t`` the most recent chunk left of ``E^n`` (the printed
    upper limit ``m`` of the ``R_n`` sum is read as ``C``).

    Parameters
    ----------
    q, k, v : array_like ``(..., N, d)``, ``(..., N, d)``, ``(..., N, d_v)``
    block_size, chunk_size : int
        Any ``N`` is allowed: the last block may be partial and an incomplete last chunk is never used.
    chunk_mask : {"alg2", "before_own_chunk"}
        ``alg2``: chunks that end at or before ``b^n``; ``before_own_chunk`` (released code): chunks with a
        smaller index than the chunk of ``n`` (with chunks shorter than blocks these overlap ``E^n``).
    window : {"block", "overlapping"}
        ``overlapping``: ``E^n`` = the previous block plus the current block up to ``n`` (``alg2`` then
        keeps chunks ending before the previous block).
    sigma_q, sigma_k, pool, mu_rule, mode, rng, frame
        As in :func:`eva_practical` (one sample per chunk).
    eps : array_like ``(..., C', d)`` with ``C' >= C``, optional
        Train-mode noise of chunk ``c`` in row ``c`` (so a prefix of the sequence reuses the same noise).
    return_details : bool
        Also return :class:`EvaDetails` (``attention`` is lower triangular).

    Notes
    -----
    Every statistic of chunk ``c`` (``k̃_c``, ``q̃_c``, ``μ_c``, ``ω_c``, ``β̂_c``) uses the tokens of chunk
    ``c`` only, and a query uses a chunk only when all its positions precede the query; row maxima run
    over allowed logits only. Output row ``n`` therefore depends on tokens ``<= n`` only.
    Cost ``O(N(|E| + C)(d + d_v))``, no recurrence over tokens. Randomness: ``ε`` only.
    """
    dt, q, k, v, block, chunk, opts = _causal_setup(
        q, k, v, block_size, chunk_size, chunk_mask, window, dtype, frame, unbatched=False,
        sigma_q=sigma_q, sigma_k=sigma_k, pool=pool, mu_rule=mu_rule, mode=mode)
    n, d = q.shape[-2], q.shape[-1]
    lead, (q, k, v) = _flatten_batch(q, k, v)
    n_chunks = n // chunk
    noise = _chunk_noise(eps, lead, n_chunks, dt)
    keys, local_mask = _causal_windows(n, block, window)
    n_blocks = keys.shape[0]
    pad = n_blocks * block - n
    qp = np.concatenate([q, np.zeros((q.shape[0], pad, d))], axis=1).reshape(q.shape[0], n_blocks, block, d)
    local = np.einsum("nbqd,nbed->nbqe", qp, k[:, keys]) * opts.logit_scale
    local = np.where(local_mask[None], local, -np.inf)
    chunks = np.arange(n_chunks * chunk).reshape(1, n_chunks, chunk)
    if n_chunks:
        stats = _chunk_stats(q, k, v, chunks, opts, rng, noise, dt)
        beta, inner = _single_sample_coefficients(stats)
        chunk_logits = (q @ np.swapaxes(stats.k_tilde[:, 0], -1, -2)) * opts.logit_scale
    else:
        stats = _no_chunks(q.shape[0], d, v.shape[-1], 1)
        beta, inner = np.zeros((q.shape[0], 1, 0, v.shape[-1])), np.zeros((q.shape[0], 1, 0, 0))
        chunk_logits = np.zeros((q.shape[0], n, 0))
    allowed = _causal_chunk_mask(n, block, chunk, n_chunks, chunk_mask, window)
    chunk_logits = np.where(allowed, chunk_logits, -np.inf)
    chunk_logits = np.concatenate([chunk_logits, np.full((q.shape[0], pad, n_chunks), -np.inf)], axis=1)
    chunk_logits = chunk_logits.reshape(q.shape[0], n_blocks, block, n_chunks)
    a_loc, a_chk = _joint_softmax(local, chunk_logits)
    out = a_loc @ v[:, keys] + a_chk @ beta
    y = out.reshape(q.shape[0], n_blocks * block, -1)[:, :n].astype(dt, copy=False)
    y = y.reshape(lead + y.shape[1:])
    if not return_details:
        return y
    attention = _causal_attention(n, keys, a_loc, a_chk, inner, chunks[0])
    details = EvaDetails(None, stats.omega, stats.mu, stats.k_tilde, stats.q_tilde, beta, attention)
    return y, _reshape_details(details, lead)


def _chunk_noise(eps, lead, n_chunks, dtype):
    if eps is None:
        return None
    eps = as_float_array(eps, "eps", dtype=dtype, min_ndim=2)
    if eps.shape[-2] < n_chunks:
        raise ValueError(f"eps must hold at least {n_chunks} chunk rows, got shape {eps.shape}")
    eps = eps[..., :n_chunks, :]
    if eps.ndim > 2:
        eps = np.broadcast_to(eps, lead + eps.shape[-2:]).reshape((-1,) + eps.shape[-2:])
    return eps[..., None, :, :]


def _causal_attention(n, keys, a_loc, a_chk, inner, chunk_positions):
    nb, n_blocks, block = a_loc.shape[:3]
    attention = np.zeros((nb, n_blocks * block, n))
    rows = np.broadcast_to((np.arange(n_blocks)[:, None] * block + np.arange(block))[:, :, None], a_loc.shape[1:])
    cols = np.broadcast_to(keys[:, None, :], a_loc.shape[1:])
    n_chunks = chunk_positions.shape[0]
    if n_chunks:
        contrib = a_chk[..., None] * inner[:, 0][:, None, None]          # (nb, nB, b, C, l)
        chunk_rows = np.broadcast_to(rows[..., :1, None], contrib.shape[1:])
        chunk_cols = np.broadcast_to(chunk_positions, contrib.shape[1:])
    for i in range(nb):
        np.add.at(attention[i], (rows, cols), a_loc[i])
        if n_chunks:
            np.add.at(attention[i], (chunk_rows, chunk_cols), contrib[i])
    return attention[:, :n]


def eva_causal_incremental(q, k, v, *, block_size: int, chunk_size: int, chunk_mask: str = "alg2",
                           window: str = "block", sigma_q=None, sigma_k=None, pool: str = "mean", mu_rule="q+k",
                           mode: str = "train", rng=None, eps=None, frame: str = "theory",
                           dtype=np.float64) -> np.ndarray:
    r"""Causal EVA token by token: the set-based reference of :func:`eva_causal` (App D).

    At step ``n`` the state holds the completed chunks' ``(k̃_c, β̂_c)`` (a chunk's statistics are formed
    when its last token arrives, from its own tokens) and the tokens of the current window; ``y_n`` is one
    softmax over ``{q_n·k_m : m ∈ E^n, m <= n}`` and ``{q_n·k̃_c : c allowed}``, the sets of Algorithm 2
    written out directly. Same parameters as :func:`eva_causal` for unbatched ``q, k`` ``(N, d)``,
    ``v`` ``(N, d_v)``; with ``rng`` the noise is drawn as :func:`eva_causal` draws it (``(C, d)``).
    Cost ``O(N(|E| + C)(d + d_v))`` in a Python loop (a reference, not a fast path).
    """
    dt, q, k, v, block, chunk, opts = _causal_setup(
        q, k, v, block_size, chunk_size, chunk_mask, window, dtype, frame, unbatched=True,
        sigma_q=sigma_q, sigma_k=sigma_k, pool=pool, mu_rule=mu_rule, mode=mode)
    n, d = q.shape
    n_chunks = n // chunk
    if mode == "train" and eps is None:
        if rng is None:
            raise TypeError("mode='train' needs rng= or eps= (the chunk noise)")
        eps = check_rng(rng).standard_normal((n_chunks, d))
    noise = None if mode == "eval" else as_float_array(eps, "eps", dtype=dt, ndim=2)
    completed: list[tuple[np.ndarray, np.ndarray]] = []
    y = np.empty((n, v.shape[1]), dtype=dt)
    for t in range(n):
        if (t + 1) % chunk == 0 and len(completed) < n_chunks:
            completed.append(_one_chunk(q, k, v, t + 1 - chunk, t + 1, opts,
                                        None if noise is None else noise[len(completed)]))
        start = t // block * block - (block if window == "overlapping" else 0)
        keys = np.arange(max(start, 0), t + 1)
        last = (max(start, 0) // chunk if chunk_mask == "alg2" else t // chunk)
        usable = completed[:last]
        logits = np.concatenate([k[keys] @ q[t], [q[t] @ kt for kt, _ in usable]]) * opts.logit_scale
        values = np.concatenate([v[keys], np.array([beta for _, beta in usable]).reshape(-1, v.shape[1])])
        weights = np.exp(logits - logits.max())
        y[t] = weights @ values / weights.sum()
    return y


def _one_chunk(q, k, v, start, stop, opts: _Options, noise):
    """``(k̃_c, β̂_c)`` of the chunk ``start..stop-1`` from its own tokens (single sample)."""
    k_tilde = opts.sigma_k(_pool(k[start:stop], opts.pool))
    q_tilde = opts.sigma_q(_pool(q[start:stop], opts.pool))
    omega = _proposal_mean(q_tilde, k_tilde, opts.mu_rule)
    if noise is not None:
        omega = omega + noise
    log_feat = (k[start:stop] @ omega - half_sq_norm(k[start:stop])) * opts.logit_scale
    inner = np.exp(log_feat - log_feat.max())
    return k_tilde, inner @ v[start:stop] / inner.sum()
