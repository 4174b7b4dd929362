r"""RFA (RA/LARA paper Eq 2; EVA §2.2 Eq 4) on torch tensors: the torch execution of
:func:`rfkit.estimators.rfa.rfa_attention`, with its signature, forms, feature maps, shapes and errors.

.. math::  \mathrm{RFA}_ρ(q_n) = \frac{\sum_s r(ω_s)\, ξ(q_n,ω_s)^T \sum_m ξ(k_m,ω_s) v_m^T}
                                     {\sum_s r(ω_s)\, ξ(q_n,ω_s)^T \sum_m ξ(k_m,ω_s)}.

Forms (the reference's, formula for formula, every exponential in log space or max-shifted):

* ``softmax`` (positive map): ``y_n = Σ_s softmax_s(ω_s·q_n + log Den_s + log r_s) F_s`` with the key statistics
  ``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)`` and ``F_s = Σ_m softmax_m(·) v_m`` (a query's own factor cancels);
* ``features``: Eq 2 as linear attention (:func:`rfkit.gpu.attention.linear_attention`) on footnote-3 features,
  causal by prefix sums;
* ``double_sum``: the first form of Eq 2, ``Σ_{s,m}`` per query in signed log space (``O(NMS)``); with
  ``per_query`` samples ``omega (..., N, S, D)`` a joint log-sum-exp over ``(s, m)`` (EVA App A);
* ``algorithm``: Algorithm 2's sums ``N_s, D_s`` (shifted by ``c_s = max_m log ξ(k_m, ω_s)``) and
  ``N/D = Σ_s ξ(q_n,ω_s) N_s / Σ_s ξ(q_n,ω_s) D_s``, vectorised over ``s`` and ``n``.

The option checks are the reference's own (:func:`rfkit.estimators.rfa._check_options`), except the computation
dtype: every torch form runs in float64 or float32 (``dtype=None`` keeps the inputs' dtype).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rfkit.base.checks import check_choice, check_positive_int
from rfkit.estimators.proposals import log_ratio as proposal_log_ratio
from rfkit.estimators.rfa import (
    FRAMES,
    RFA_FORMS,
    XI_MAPS,
    RFAStats,
    _check_options,
    _default_form,
    record_gemm,
)

from ._core import TorchFeatures, as_generator, as_tensor, check_qkv
from .favor import hyperbolic_features, linear_attention, trig_features

__all__ = ["rfa_attention"]

_LOG_2 = math.log(2.0)


def _half_sq(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (x * x).sum(dim=-1)


def _key_statistics(k: torch.Tensor, v: torch.Tensor, omega: torch.Tensor):
    """``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)`` and ``F_s = Σ_m softmax_m(·) v_m`` for ``omega (..., D)``."""
    logits = omega @ k.mT - _half_sq(k)
    return torch.logsumexp(logits, dim=-1), torch.softmax(logits, dim=-1) @ v


def _log_features(x: torch.Tensor, omega: torch.Tensor, log_ratio: torch.Tensor | None = None) -> TorchFeatures:
    """Positive features ``exp(log ξ(x, ω_s) [+ log r_s])``, ``log ξ = ω_s·x - ‖x‖²/2``, factored per row."""
    lf = x @ omega.mT - _half_sq(x)[..., None]
    if log_ratio is not None:
        lf = lf + log_ratio[..., None, :]
    top = lf.detach().amax(dim=-1)
    return TorchFeatures(torch.exp(lf - top[..., None]), top)


def _rf_features(x: torch.Tensor, w: torch.Tensor, feature_map: str, phase) -> TorchFeatures:
    """Footnote-3 features of the signed maps (:func:`rfkit.estimators.rfa.rf_features`)."""
    if feature_map == "hyperbolic":
        return hyperbolic_features(x, w)
    if feature_map == "trig_sincos":
        return trig_features(x, w)
    values = math.sqrt(2.0 / w.shape[0]) * torch.cos(x @ w.mT + phase)
    return TorchFeatures(values, _half_sq(x))


def _pair_log_kernel(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, feature_map: str, phase):
    """``ξ(q_n, ω_s)ᵀ ξ(k_m, ω_s)`` in signed log form ``(N, S, M)`` for shared ``w (S, D)``
    (the closed forms of :func:`rfkit.estimators.rfa.pair_log_kernel`)."""
    wq = (q @ w.mT)[..., None]                                                # (N, S, 1)
    wk = (w @ k.mT)[None]                                                     # (1, S, M)
    half = _half_sq(q)[:, None, None] + _half_sq(k)[None, None, :]
    if feature_map == "positive":
        log_abs = wq + wk - half
        return torch.ones_like(log_abs), log_abs
    if feature_map == "hyperbolic":
        t = wq + wk
        log_abs = torch.logaddexp(t, -t) - _LOG_2 - half
        return torch.ones_like(log_abs), log_abs
    if feature_map == "trig_sincos":
        vals, extra = torch.cos(wq - wk), half
    else:
        vals = torch.cos(wq + phase[None, :, None]) * torch.cos(wk + phase[None, :, None])
        extra = half + _LOG_2
    return torch.sign(vals), torch.log(torch.abs(vals)) + extra


def _softmax_form(q, k, v, w, log_ratio, gemms):
    log_den, f = _key_statistics(k, v, w)
    record_gemm(gemms, "key_logits", w.shape[0], k.shape[1], k.shape[0])
    record_gemm(gemms, "key_values", w.shape[0], k.shape[0], v.shape[1])
    logits = q @ w.mT + log_den
    record_gemm(gemms, "query_logits", q.shape[0], q.shape[1], w.shape[0])
    record_gemm(gemms, "output", q.shape[0], w.shape[0], v.shape[1])
    if log_ratio is not None:
        logits = logits + log_ratio
    weights = torch.softmax(logits, dim=-1)
    return weights @ f, (weights.sum(-1) ** 2) / (weights * weights).sum(-1)


def _double_sum(q, k, v, w, feature_map, phase):
    """``Σ_m Σ_s ξ(q_n,ω_s)ᵀξ(k_m,ω_s) v_m / Σ_m Σ_s (·)``, shifted by each query's maximum over ``(s, m)``."""
    sign, log_abs = _pair_log_kernel(q, k, w, feature_map, phase)
    shift = log_abs.detach().amax(dim=(-2, -1), keepdim=True)
    gram = (sign * torch.exp(log_abs - shift)).sum(dim=-2)                     # Σ_s, (N, M)
    dens = gram.sum(dim=-1)
    return gram @ v / dens[:, None], dens


def _algorithm(q, k, v, w):
    """Algorithm 2 (G.1): ``N_s, D_s`` over the keys (divided by ``exp(c_s)``), then per query ``N/D``."""
    logits = w @ k.mT - _half_sq(k)                                           # (S, M)
    log_c = logits.detach().amax(dim=-1)
    e_k = torch.exp(logits - log_c[:, None])
    num_s, den_s = e_k @ v, e_k.sum(dim=-1)
    lq = q @ w.mT - _half_sq(q)[:, None] + log_c                              # (N, S)
    e_q = torch.exp(lq - lq.detach().amax(dim=-1, keepdim=True))
    return (e_q @ num_s) / (e_q @ den_s)[:, None]


def _rfa_matrix(q, k, v, w, phase, log_ratio, feature_map, form, causal, gemms):
    """One head: ``q (N, D)``, ``k (M, D)``, ``v (M, D_v)``, shared ``w (S, D)``; ``(out, RFAStats)``.

    ``causal`` reaches the features form's linear attention (prefix sums), the only shared-sample causal form."""
    ess = torch.full((q.shape[0],), math.nan, dtype=q.dtype, device=q.device)
    nonpositive, min_den = 0, math.nan
    if form == "softmax":
        out, ess = _softmax_form(q, k, v, w, log_ratio, gemms)
    elif form == "algorithm":
        out = _algorithm(q, k, v, w)
    elif form == "double_sum":
        out, dens = _double_sum(q, k, v, w, feature_map, phase)
        nonpositive, min_den = int((dens <= 0).sum()), float(dens.min())
    else:
        if feature_map == "positive":
            fq, fk = _log_features(q, w, log_ratio), _log_features(k, w)
        else:
            fq, fk = _rf_features(q, w, feature_map, phase), _rf_features(k, w, feature_map, phase)
        out, att = linear_attention(fq, fk, v, causal=causal, return_stats=True)
        nonpositive, min_den = att.n_nonpositive, att.min_denominator
    return out, RFAStats(ess, nonpositive, min_den)


def _rfa_direct(q, k, v, omega, log_ratio, causal):
    """Query-dependent samples ``omega (..., N, S, d)``: joint log-sum-exp over ``(s, m)`` (EVA App A)."""
    if omega.ndim < 3 or omega.shape[-3] != q.shape[-2]:
        raise ValueError(f"per_query omega must have shape (..., N, S, d) with N = {q.shape[-2]}, "
                         f"got {tuple(omega.shape)}")
    lq = torch.einsum("...nd,...nsd->...ns", q, omega) - _half_sq(q)[..., None] + log_ratio
    lk = torch.einsum("...md,...nsd->...nsm", k, omega) - _half_sq(k)[..., None, None, :]
    log_lam = lq[..., None] + lk
    if causal:
        allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        log_lam = log_lam.masked_fill(~allowed[:, None, :], -math.inf)
    weights = torch.exp(log_lam - log_lam.detach().amax(dim=(-2, -1), keepdim=True)).sum(dim=-2)
    return (weights @ v) / weights.sum(dim=-1, keepdim=True)


def _draw(num_samples, d, lead, rng, feature_map, proposal, q):
    """``(omega, phase)``: the proposal's draws (numpy, from a numpy generator seeded by ``rng``) or
    ``N(0, I)`` draws ``lead + (S, d)`` (and phases ``b ~ U(0, 2π)``, ``lead + (S,)``) from a torch generator."""
    if proposal is not None:
        if isinstance(rng, torch.Generator):
            rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=rng, device=rng.device)))
        return proposal.sample(rng, num_samples), None
    s = check_positive_int(num_samples, "num_samples")
    gen = as_generator(rng, q.device)
    omega = torch.randn(tuple(lead) + (s, d), generator=gen, device=q.device, dtype=q.dtype)
    if feature_map != "trig_cos_phase":
        return omega, None
    return omega, 2 * math.pi * torch.rand(tuple(lead) + (s,), generator=gen, device=q.device, dtype=q.dtype)


def _phase(phase, feature_map: str, n_samples: int, like: torch.Tensor):
    """The phases of ``trig_cos_phase`` (``(..., S)``), with the reference's errors; ``None`` for other maps."""
    if feature_map != "trig_cos_phase":
        return None
    if phase is None:
        raise ValueError("the trig_cos_phase map needs phase= (one b ~ U(0, 2π) per sample; draw_rfa_samples)")
    b = as_tensor(phase, "phase", dtype=like.dtype, device=like.device, min_ndim=1)
    if b.shape[-1] != n_samples:
        raise ValueError(f"phase must have one entry per sample ({n_samples}), got {b.shape[-1]}")
    return b


def rfa_attention(q, k, v, *, num_samples: int | None = None, omega=None, rng=None, proposal=None, log_ratio=None,
                  feature_map: str = "positive", phase=None, form: str | None = None, per_query: bool = False,
                  causal: bool = False, frame: str = "theory", dtype=None, return_stats: bool = False,
                  gemms: list | None = None):
    r"""Random feature attention, torch version of :func:`rfkit.estimators.rfa_attention` (RA/LARA Eq 2, EVA Eq 4).

    Same parameters, forms, shapes and errors as the reference: ``q, k, v`` ``(..., N, D)``, ``(..., M, D)``,
    ``(..., M, D_v)`` (leading axes broadcast, with ``omega``'s too); ``omega`` ``(..., S, D)`` or, with
    ``per_query``, ``(..., N, S, D)``; ``log_ratio`` ``omega.shape[:-1]``; ``phase`` ``(..., S)``; ``form`` in
    :data:`~rfkit.estimators.rfa.RFA_FORMS` (default by map, ``per_query`` and ``causal`` as the reference);
    ``return_stats`` gives :class:`~rfkit.estimators.rfa.RFAStats` (``ess`` a tensor; a list for leading axes);
    ``gemms`` records the softmax form's products.

    Torch specifics: ``rng`` is a ``torch.Generator`` or a numpy seed/generator; ``N(0, I)`` samples (and phases)
    are drawn with torch for all heads at once (one ``(…, S, D)`` draw), a ``proposal``'s with numpy (a generator
    seeded from ``rng``). ``dtype=None`` keeps the inputs' float32/float64 dtype for every form.
    Cost ``O(S(N + M)(D + D_v))`` (softmax, features, algorithm), ``O(NMS(D + D_v))`` (double sum).
    """
    check_choice(feature_map, "feature_map", XI_MAPS)
    check_choice(frame, "frame", FRAMES)
    form = check_choice(form or _default_form(feature_map, per_query, causal), "form", RFA_FORMS)
    _check_options(feature_map, form, per_query, causal, proposal is not None or log_ratio is not None, phase,
                   np.dtype(np.float64), return_stats)
    if gemms is not None and (form != "softmax" or per_query):
        raise ValueError(f"gemms= records the softmax form's matrix products, not form={form!r}"
                         + (" with per-query samples" if per_query else ""))
    q, k, v = check_qkv(q, k, v, dtype)
    if frame == "sqrt_d":
        scale = q.shape[-1] ** -0.25
        q, k = q * scale, k * scale
    d = q.shape[-1]
    if proposal is not None and proposal.dim != d:
        raise ValueError(f"the proposal lives in dimension {proposal.dim}, the inputs in {d}")
    if omega is None:
        if num_samples is None or rng is None:
            raise TypeError("give omega=, or num_samples= and rng= to draw the samples")
        if per_query and proposal is None:
            raise ValueError("per-query samples are not drawn here: give omega (..., N, S, D) or a proposal")
        lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        omega, phase = _draw(num_samples, d, lead, rng, feature_map, proposal, q)
    omega = as_tensor(omega, "omega", dtype=q.dtype, device=q.device, min_ndim=2)
    if omega.shape[-1] != d:
        raise ValueError(f"omega must have D = {d} columns (the input dimension), got shape {tuple(omega.shape)}")
    if omega.shape[-2] == 0:
        raise ValueError("omega needs at least one sample (S >= 1)")
    if log_ratio is None and proposal is not None:
        log_ratio = proposal_log_ratio(proposal, omega.detach().cpu().numpy())
    if log_ratio is not None:
        log_ratio = as_tensor(log_ratio, "log_ratio", dtype=q.dtype, device=q.device)
        if tuple(log_ratio.shape) != tuple(omega.shape[:-1]):
            raise ValueError(f"log_ratio must have shape {tuple(omega.shape[:-1])} (omega without its last axis), "
                             f"got {tuple(log_ratio.shape)}")
    if per_query:
        return _rfa_direct(q, k, v, omega, 0.0 if log_ratio is None else log_ratio, causal)
    phase = _phase(phase, feature_map, omega.shape[-2], q)
    if form == "features" and feature_map == "positive" and not return_stats:
        return linear_attention(_log_features(q, omega, log_ratio), _log_features(k, omega), v, causal=causal)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], omega.shape[:-2])
    if not lead:
        out, stats = _rfa_matrix(q, k, v, omega, phase, log_ratio, feature_map, form, causal, gemms)
        return (out, stats) if return_stats else out
    q, k, v = (a.expand(lead + a.shape[-2:]) for a in (q, k, v))
    omega = omega.expand(lead + omega.shape[-2:])
    log_ratio = None if log_ratio is None else log_ratio.expand(lead + log_ratio.shape[-1:])
    phase = None if phase is None else phase.expand(lead + phase.shape[-1:])
    results = [_rfa_matrix(q[i], k[i], v[i], omega[i], None if phase is None else phase[i],
                           None if log_ratio is None else log_ratio[i], feature_map, form, causal, gemms)
               for i in np.ndindex(tuple(lead))]
    out = torch.stack([r[0] for r in results]).reshape(lead + results[0][0].shape)
    return (out, [r[1] for r in results]) if return_stats else out
