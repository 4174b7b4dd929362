r"""Practical and causal EVA (Zheng et al. 2023, Eq 16, Algorithm 1, App C/D, Algorithm 2) on torch tensors.

The index structure (the partition :func:`rfkit.estimators.eva.practical_partition`, the causal windows and chunk
masks) and the option validation are the numpy reference's own code; this module executes the data-dependent
part on tensors: chunk representatives, proposal means, samples ``ω_c = μ_c + ε_c``, the query-free
single-sample coefficients ``β̂_c`` and the joint softmax over ``[local ‖ chunk]`` logits. Train-mode noise is
``eps`` (explicit) or drawn with a ``torch.Generator``. One sample per chunk (``S = 1``, the released code and
the default of the reference); no diagnostics (``return_details``) on this path.
"""

from __future__ import annotations

import math

import torch

from rfkit.base.checks import check_choice, check_positive_int
from rfkit.estimators.eva import LinearLayerNorm, practical_partition
from rfkit.estimators.eva.causal import _causal_chunk_mask, _causal_windows
from rfkit.estimators.eva.practical import _options

from ._core import as_generator, as_tensor, check_qkv

__all__ = ["eva_practical", "eva_causal"]





def _flatten_batch(*tensors):
    lead = tuple(torch.broadcast_shapes(*(t.shape[:-2] for t in tensors)))
    return lead, [t.expand(lead + t.shape[-2:]).reshape((-1,) + t.shape[-2:]) for t in tensors]


def _torch_sigma(sigma):
    """A chunk summary map on tensors: identity, a :class:`~rfkit.estimators.eva.LinearLayerNorm` (its parameters,
    torch's ``layer_norm``, the same biased-variance definition), or a callable on tensors."""
    if not isinstance(sigma, LinearLayerNorm):
        return sigma

    def apply(x: torch.Tensor) -> torch.Tensor:
        params = {name: torch.as_tensor(getattr(sigma, name), dtype=x.dtype, device=x.device)
                  for name in ("weight", "bias", "gain", "shift")}
        y = x @ params["weight"].mT + params["bias"]
        return torch.nn.functional.layer_norm(y, y.shape[-1:], params["gain"], params["shift"], sigma.eps)

    return apply


def _pool(x: torch.Tensor, how: str) -> torch.Tensor:
    return x.mean(dim=-2) if how == "mean" else x.amax(dim=-2)


def _proposal_mean(q_tilde: torch.Tensor, k_tilde: torch.Tensor, rule) -> torch.Tensor:
    if not isinstance(rule, str):
        return as_tensor(rule, "mu_rule", dtype=k_tilde.dtype, device=k_tilde.device).expand(k_tilde.shape)
    return {"q+k": lambda: q_tilde + k_tilde, "half": lambda: 0.5 * (q_tilde + k_tilde), "q": lambda: q_tilde,
            "zero": lambda: torch.zeros_like(k_tilde)}[rule]()


def _samples(mu: torch.Tensor, mode: str, rng, eps) -> torch.Tensor:
    """``ω_c = μ_c + ε_c`` (train) or ``μ_c`` (eval); ``eps`` broadcasts to ``mu``'s shape."""
    if mode == "eval":
        return mu
    if eps is None:
        if rng is None:
            raise TypeError("mode='train' needs rng= or eps= (the chunk noise)")
        gen = as_generator(rng, mu.device)
        return mu + torch.randn(mu.shape, generator=gen, device=mu.device, dtype=mu.dtype)
    try:
        return mu + eps.expand(mu.shape)
    except RuntimeError as exc:
        raise ValueError(f"eps must broadcast to {tuple(mu.shape[1:])} (one sample per chunk), got "
                         f"{tuple(eps.shape)}") from exc


def _half_sq(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (x * x).sum(dim=-1)


def _chunk_stats(q, k, v, chunks: torch.Tensor, opts, rng, eps):
    """``(k̃, β̂)`` per chunk (``(nb, G, C, d)``, ``(nb, G, C, d_v)``) from the chunk's tokens only:
    ``β̂_c = Σ_{m∈P_c} softmax_m(log ξ(k_m, ω_c)) v_m`` (App C, one sample)."""
    kc, qc, vc = k[:, chunks], q[:, chunks], v[:, chunks]
    k_tilde = _torch_sigma(opts.sigma_k)(_pool(kc, opts.pool))
    q_tilde = _torch_sigma(opts.sigma_q)(_pool(qc, opts.pool))
    omega = _samples(_proposal_mean(q_tilde, k_tilde, opts.mu_rule), opts.mode, rng, eps)
    log_feat = (torch.einsum("ngcd,ngcld->ngcl", omega, kc) - _half_sq(kc)) * opts.logit_scale
    inner = torch.softmax(log_feat, dim=-1)
    return k_tilde, (inner[..., None, :] @ vc)[..., 0, :], kc


def _joint_softmax(local: torch.Tensor, chunk: torch.Tensor):
    """One softmax over ``[local ‖ chunk]`` (Eq 16's normaliser), shifted by the largest allowed logit."""
    logits = torch.cat([local, chunk], dim=-1)
    top = logits.detach().amax(dim=-1, keepdim=True)
    if not bool(torch.isfinite(top).all()):
        raise ValueError("a query row has no allowed logit (nothing to attend)")
    weights = torch.exp(logits - top)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights[..., : local.shape[-1]], weights[..., local.shape[-1]:]


def _flat_eps(eps, lead, core: int, dtype, device):
    """Noise as a tensor with the batch axes flattened like the inputs (noise without batch axes broadcasts)."""
    if eps is None:
        return None
    eps = as_tensor(eps, "eps", dtype=dtype, device=device, min_ndim=core)
    if eps.ndim <= core:
        return eps
    return eps.expand(lead + eps.shape[-core:]).reshape((-1,) + eps.shape[-core:])


def _chunk_logits(qb, k_tilde, kc, opts) -> torch.Tensor:
    """``q_n·k̃_c`` (representative) or ``LSE_{m∈P_c} q_n·k_m`` (diagnostic (b)), plus the offset."""
    if opts.chunk_logit == "lse":
        logits = torch.logsumexp(torch.einsum("nbqd,nbcld->nbqcl", qb, kc) * opts.logit_scale, dim=-1)
    else:
        logits = torch.einsum("nbqd,nbcd->nbqc", qb, k_tilde) * opts.logit_scale
    return logits + opts.chunk_logit_offset


def _in_frame(q, k, frame: str):
    if frame == "sqrt_d":
        scale = q.shape[-1] ** -0.25
        return q * scale, k * scale
    return q, k


def eva_practical(q, k, v, *, block_size: int, num_chunks: int, partition_domain: str = "all", layout: str = "1d",
                  grid: tuple[int, int] | None = None, window: str = "block", sigma_q=None, sigma_k=None,
                  pool: str = "mean", mu_rule="q+k", mode: str = "train", rng=None,
                  eps=None, frame: str = "theory", chunk_logit: str = "representative",
                  chunk_logit_offset: float = 0.0, dtype=None) -> torch.Tensor:
    r"""Practical EVA (Eq 16, Algorithm 1, App C), one sample per chunk: torch version of
    :func:`rfkit.estimators.eva.eva_practical`.

    ``y_n = (Σ_{m∈E^n} e_m v_m + Σ_c exp(q_n·k̃_c) β̂_c) / (Σ_{m∈E^n} e_m + Σ_c exp(q_n·k̃_c))`` with
    ``β̂_c = Σ_{m∈P_c} ξ(k_m, ω_c) v_m / Σ_{m'∈P_c} ξ(k_{m'}, ω_c)``, ``k̃_c = σ_k(pool(P_c))``,
    ``ω_c = μ_c + ε_c`` (train) or ``μ_c`` (eval).

    Parameters are those of the reference (``num_samples = 1``, ``coefficient = "sampled"``) except the
    randomness: ``eps`` ``(..., G, C, d)`` explicit, else drawn with ``rng`` (a ``torch.Generator`` or a numpy
    seed/generator). ``sigma_q``/``sigma_k``: None (identity), a :class:`~rfkit.estimators.eva.LinearLayerNorm`,
    or a callable on tensors. Cost ``O(N(|E| + C)(d + d_v) + Md)``; randomness: ``ε`` only.
    """
    q, k, v = check_qkv(q, k, v, dtype, same_length=True)
    n, d = q.shape[-2], q.shape[-1]
    opts = _options(d, sigma_q=sigma_q, sigma_k=sigma_k, pool=pool, mu_rule=mu_rule, num_samples=1, mode=mode,
                    frame=frame, coefficient="sampled", chunk_logit=chunk_logit,
                    chunk_logit_offset=chunk_logit_offset)
    q, k = _in_frame(q, k, frame)
    part = practical_partition(n, block_size=block_size, num_chunks=num_chunks, partition_domain=partition_domain,
                               layout=layout, grid=grid, window=window)
    lead, (q, k, v) = _flatten_batch(q, k, v)
    index = {name: torch.as_tensor(getattr(part, name), device=q.device) for name in ("queries", "exact", "chunks")}
    group = torch.as_tensor(part.chunk_group(), device=q.device)
    qb = q[:, index["queries"]]
    local = torch.einsum("nbqd,nbed->nbqe", qb, k[:, index["exact"]]) * opts.logit_scale
    local = torch.where(torch.as_tensor(part.exact_valid, device=q.device)[None, :, None, :], local, -math.inf)
    if part.num_chunks:
        noise = _flat_eps(eps, lead, 3, q.dtype, q.device)
        k_tilde, beta, kc = _chunk_stats(q, k, v, index["chunks"], opts, rng, noise)
        chunk = _chunk_logits(qb, k_tilde[:, group], kc[:, group], opts)
        a_loc, a_chk = _joint_softmax(local, chunk)
        out = a_loc @ v[:, index["exact"]] + a_chk @ beta[:, group]
    else:
        a_loc, _ = _joint_softmax(local, local[..., :0])
        out = a_loc @ v[:, index["exact"]]
    y = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)
    y[:, index["queries"].reshape(-1)] = out.reshape(out.shape[0], -1, out.shape[-1])
    return y.reshape(lead + y.shape[1:])


def _causal_noise(eps, lead, n_chunks: int, dtype, device):
    """``eps`` ``(..., C', d)``, ``C' >= C``: its first ``C`` rows, batch-flattened, with a group axis."""
    if eps is None:
        return None
    eps = as_tensor(eps, "eps", dtype=dtype, device=device, min_ndim=2)
    if eps.shape[-2] < n_chunks:
        raise ValueError(f"eps must hold at least {n_chunks} chunk rows, got shape {tuple(eps.shape)}")
    eps = eps[..., :n_chunks, :]
    if eps.ndim > 2:
        eps = eps.expand(lead + eps.shape[-2:]).reshape((-1,) + eps.shape[-2:])
    return eps[..., None, :, :]


def eva_causal(q, k, v, *, block_size: int, chunk_size: int, chunk_mask: str = "alg2", window: str = "block",
               sigma_q=None, sigma_k=None, pool: str = "mean", mu_rule="q+k", mode: str = "train",
               rng=None, eps=None, frame: str = "theory", dtype=None) -> torch.Tensor:
    r"""Causal EVA (App D, Algorithm 2), in parallel: torch version of :func:`rfkit.estimators.eva.eva_causal`.

    Blocks of ``block_size`` with the intra-block lower triangle ``M^E``, complete chunks of ``chunk_size`` allowed
    through ``M^P_{c,t} = 1[c <= t]`` (``chunk_mask``, ``window`` as in the reference). Train-mode noise: ``eps``
    ``(..., C', d)`` (row ``c`` for chunk ``c``) or drawn with ``rng``. Output row ``n`` depends on tokens
    ``<= n`` only. Cost ``O(N(|E| + C)(d + d_v))``; randomness: ``ε`` only.
    """
    q, k, v = check_qkv(q, k, v, dtype, same_length=True)
    n, d = q.shape[-2], q.shape[-1]
    block = check_positive_int(block_size, "block_size")
    chunk = check_positive_int(chunk_size, "chunk_size")
    check_choice(chunk_mask, "chunk_mask", ("alg2", "before_own_chunk"))
    check_choice(window, "window", ("block", "overlapping"))
    opts = _options(d, sigma_q=sigma_q, sigma_k=sigma_k, pool=pool, mu_rule=mu_rule, num_samples=1, mode=mode,
                    frame=frame, coefficient="sampled", chunk_logit="representative", chunk_logit_offset=0.0)
    q, k = _in_frame(q, k, frame)
    lead, (q, k, v) = _flatten_batch(q, k, v)
    nb, n_chunks = q.shape[0], n // chunk
    keys, local_mask = (torch.as_tensor(a, device=q.device) for a in _causal_windows(n, block, window))
    n_blocks = keys.shape[0]
    pad = n_blocks * block - n
    qp = torch.cat([q, q.new_zeros(nb, pad, d)], dim=1).reshape(nb, n_blocks, block, d)
    local = torch.where(local_mask[None], torch.einsum("nbqd,nbed->nbqe", qp, k[:, keys]) * opts.logit_scale,
                        -math.inf)
    out_local = v[:, keys]
    if not n_chunks:
        a_loc, _ = _joint_softmax(local, local[..., :0])
        out = a_loc @ out_local
    else:
        chunks = torch.arange(n_chunks * chunk, device=q.device).reshape(1, n_chunks, chunk)
        noise = _causal_noise(eps, lead, n_chunks, q.dtype, q.device)
        k_tilde, beta, _ = _chunk_stats(q, k, v, chunks, opts, rng, noise)
        allowed = torch.as_tensor(_causal_chunk_mask(n, block, chunk, n_chunks, chunk_mask, window), device=q.device)
        logits = torch.where(allowed, (q @ k_tilde[:, 0].mT) * opts.logit_scale, -math.inf)
        logits = torch.cat([logits, logits.new_full((nb, pad, n_chunks), -math.inf)], dim=1)
        a_loc, a_chk = _joint_softmax(local, logits.reshape(nb, n_blocks, block, n_chunks))
        out = a_loc @ out_local + a_chk @ beta
    y = out.reshape(nb, n_blocks * block, -1)[:, :n]
    return y.reshape(lead + y.shape[1:])
