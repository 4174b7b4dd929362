r"""Macformer's random Maclaurin features and RMFA on torch tensors, given a draw.

The draw (:class:`~rfkit.estimators.rmf.RMFDraw`: integer degrees and Rademacher signs) and everything that
depends on it alone (the weights ``c_{N_t}``, the mask routes) come from :mod:`rfkit.estimators.rmf`; this
module executes the data-dependent part on tensors: the projections ``X Ωᵀ``, the per-degree segment products
and the RMFA buffers (those of :func:`rfkit.gpu.linear_attention`, with zero log-scales). No safeguard on the
denominator, as in the reference.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from rfkit.base.checks import check_choice, check_positive_int
from rfkit.estimators.attention import DEFAULT_CHUNK_SIZE
from rfkit.estimators.rmf import (
    WEIGHTS,
    RMFAResult,
    RMFDraw,
    _feature_weights,
    _mask_route,
    as_coefficients,
    check_law,
    draw_rmf,
)

from ._core import TorchFeatures, as_tensor
from .favor import _buffers as _linear_buffers
from .favor import _with_ones

__all__ = ["rmf_features", "rmfa", "rmfa_replicates"]


def _segment_products(projections: torch.Tensor, draw: RMFDraw) -> torch.Tensor:
    """``Π_{j < N_t} P[..., offset_t + j]`` per feature (1 for ``N_t <= 0``), one gather per distinct degree."""
    out = torch.ones(projections.shape[:-1] + (draw.num_features,), dtype=projections.dtype,
                     device=projections.device)
    for degree in np.unique(draw.degrees[draw.degrees > 0]):
        features = np.flatnonzero(draw.degrees == degree)
        columns = torch.as_tensor(draw.offsets[features][:, None] + np.arange(degree), device=projections.device)
        out[..., torch.as_tensor(features, device=projections.device)] = projections[..., columns].prod(dim=-1)
    return out


def rmf_features(x, draw: RMFDraw, kernel="exp", *, coeffs="derived", weight: str = "importance",
                 dtype=None) -> torch.Tensor:
    r"""Random Maclaurin features ``Φ(x) = D^{-1/2} [c_{N_t} Π_j ⟨ω_{t,j}, x⟩]_t`` (Macformer Definition 3): torch
    version of :func:`rfkit.estimators.rmf.rmf_features`.

    ``x`` ``(..., d)`` (tensor or array; ``dtype=None`` keeps a float tensor's dtype); returns ``(..., D)``.
    Cost ``O(|x|·d·W + |x|·W)``; deterministic given the draw.
    """
    x = as_tensor(x, "x", dtype=dtype, min_ndim=1)
    if x.shape[-1] != draw.d:
        raise ValueError(f"x has last dimension {x.shape[-1]} but the draw was made for d = {draw.d}")
    weight = check_choice(weight, "weight", WEIGHTS)
    check_law(draw.p, draw.n_law, weight)
    weights = _feature_weights(draw, as_coefficients(kernel, coeffs), weight) / math.sqrt(draw.num_features)
    projections = x @ torch.as_tensor(draw.signs, dtype=x.dtype, device=x.device).mT
    return _segment_products(projections, draw) * torch.as_tensor(weights, dtype=x.dtype, device=x.device)


def _inputs(q, k, v, scale_inputs: bool, dtype):
    q = as_tensor(q, "q", dtype=dtype, min_ndim=2)
    k = as_tensor(k, "k", dtype=q.dtype, device=q.device, min_ndim=2)
    v = as_tensor(v, "v", dtype=q.dtype, device=q.device, min_ndim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of rows, got {k.shape[-2]} and {v.shape[-2]}")
    if scale_inputs:
        scale = q.shape[-1] ** -0.25
        q, k = q * scale, k * scale
    return q, k, v


def _buffers(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, route: str, keep, chunk_size):
    """``[numerator | denominator]`` by the route of :func:`rfkit.estimators.rmf._mask_route`."""
    if route == "general":
        keep = torch.as_tensor(keep, device=phi_q.device)
        return ((phi_q @ phi_k.mT) * keep) @ _with_ones(v)
    if route == "padding":
        phi_k = phi_k * torch.as_tensor(keep, device=phi_k.device)[..., None]
    chunk = DEFAULT_CHUNK_SIZE if chunk_size is None else check_positive_int(chunk_size, "chunk_size")
    buf, _ = _linear_buffers(TorchFeatures.plain(phi_q), TorchFeatures.plain(phi_k), v, route == "causal", chunk)
    return buf


def _result(buf: torch.Tensor, width: int, draws: tuple) -> RMFAResult:
    """:class:`~rfkit.estimators.rmf.RMFAResult` holding tensors (``gemms`` are not recorded on torch)."""
    num, den = buf[..., :-1], buf[..., -1]
    out = num / den[..., None]
    with torch.no_grad():
        min_abs = float(den.abs().min()) if den.numel() else math.inf
        return RMFAResult(out, num, den, int((den <= 0).sum()), min_abs, int((~torch.isfinite(out)).sum()),
                          width, (), draws)


def rmfa(q, k, v, kernel="exp", *, draw: RMFDraw, coeffs="derived", weight: str = "importance", mask=None,
         key_padding=None, causal: bool = False, scale_inputs: bool = True, chunk_size: int | None = None,
         return_details: bool = False, dtype=None):
    r"""Random Maclaurin Feature Attention given one shared draw: torch version of
    :func:`rfkit.estimators.rmf.rmfa` (``draw_sharing="shared"``).

    ``Φ(q̃_a)ᵀ Σ_i M'_ai Φ(k̃_i) ⊗ V_i / Φ(q̃_a)ᵀ Σ_j M'_aj Φ(k̃_j)`` with ``q̃ = q/d^{1/4}``; ``mask`` (general,
    quadratic), ``key_padding`` or ``causal`` (chunked prefix sums) as in the reference. Returns the output
    tensor, or :class:`~rfkit.estimators.rmf.RMFAResult` holding tensors with ``return_details``.
    Cost ``O(n·d·W + n·D·d_v)``; randomness: none (the draw is given).
    """
    if not isinstance(draw, RMFDraw):
        raise TypeError(f"draw must be one RMFDraw (the torch RMFA shares one draw), got {type(draw).__name__}")
    q, k, v = _inputs(q, k, v, scale_inputs, dtype)
    weight = check_choice(weight, "weight", WEIGHTS)
    check_law(draw.p, draw.n_law, weight)
    lead = tuple(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    route, keep = _mask_route(q.shape[-2], k.shape[-2], lead, mask, key_padding, causal)
    phi_q, phi_k = (rmf_features(x, draw, kernel, coeffs=coeffs, weight=weight) for x in (q, k))
    result = _result(_buffers(phi_q, phi_k, v, route, keep, chunk_size), draw.width, (draw,))
    return result if return_details else result.out


def rmfa_replicates(q, k, v, kernel="exp", *, replicates: int, num_features: int, rng, p: float = 2.0,
                    coeffs="derived", n_law: str = "geom", weight: str = "importance", mask=None, key_padding=None,
                    causal: bool = False, scale_inputs: bool = True, chunk_size: int | None = None,
                    dtype=None) -> RMFAResult:
    """``replicates`` independent RMFA estimates (torch version of :func:`rfkit.estimators.rmf.rmfa_replicates`).

    One draw of ``replicates·D`` features from ``rng`` (:func:`~rfkit.estimators.rmf.draw_rmf`, the same draws as
    the reference for the same ``rng``), whose blocks of ``D`` are the replicates; features and buffers on
    tensors with the replicate as a leading axis. Inputs ``(n, d)``; results ``(replicates, n_q, d_v)``.
    """
    replicates = check_positive_int(replicates, "replicates")
    num_features = check_positive_int(num_features, "num_features")
    q, k, v = _inputs(q, k, v, scale_inputs, dtype)
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError("rmfa_replicates takes one (n, d) query, key and value matrix")
    route, keep = _mask_route(q.shape[0], k.shape[0], (), mask, key_padding, causal)
    big = draw_rmf(replicates * num_features, q.shape[-1], rng=rng, p=p, n_law=n_law)
    feats = rmf_features(torch.cat([q, k]), big, kernel, coeffs=coeffs, weight=weight)
    feats = feats.reshape(-1, replicates, num_features).transpose(0, 1) * math.sqrt(replicates)
    phi_q, phi_k = feats[:, : q.shape[0]], feats[:, q.shape[0]:]
    return _result(_buffers(phi_q, phi_k, v, route, keep, chunk_size), big.width, (big,))


def result_to_numpy(result: RMFAResult) -> RMFAResult:
    """The same result with its tensors moved to numpy arrays."""
    arrays = {name: getattr(result, name).detach().cpu().numpy() for name in ("out", "numerator", "denominator")}
    return dataclasses.replace(result, **arrays)
