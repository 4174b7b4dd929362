r"""Scatterbrain as written in EVA App G.5 (Zheng et al., ICLR 2023; ``002_b2e9d84e2f6b65de.txt``; Eqs 29-30).

:func:`scatterbrain_attention`: exact logits on ``E = Supp_n(S)``, positive random features outside it,
normalised (Eq 30) or not (Eq 29), in a direct (theory reference) or a linear-cost form;
:class:`ScatterbrainParts` (numerator, denominator and their common log scale).

Numerics: exponentials in log space with a row shift that cancels in the ratio. Randomness: ``omega`` only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import as_float_array, check_choice, check_positive_int, check_qkv, compute_dtype
from rfkit.base.numerics import exp_or_raise

from ..rfa import _in_frame, _log_features, log_xi


@dataclass(frozen=True)
class ScatterbrainParts:
    """Eq 29's ``y'_n = numerator·exp(log_scale)`` and Eq 30's ``Ẑ_n = denominator·exp(log_scale)``."""

    numerator: np.ndarray
    denominator: np.ndarray
    log_scale: np.ndarray


def _block_mask(n: int, m: int, block_size: int) -> np.ndarray:
    if n != m:
        raise ValueError(f"block_size needs self-attention (N == M), got N={n}, M={m}")
    b = check_positive_int(block_size, "block_size")
    pos = np.arange(n) // b
    return pos[:, None] == pos[None, :]


def scatterbrain_attention(q, k, v, *, omega, exact=None, block_size: int | None = None, normalize: bool = True,
                           method: str = "direct", return_parts: bool = False, frame: str = "theory",
                           dtype=np.float64):
    r"""Scatterbrain as written in EVA App G.5 (Eqs 29-30).

    .. math::  y'_n = \sum_{m∉E} φ(q_n,ω)^⊤φ(k_m,ω) v_m + \sum_{m∈E} e_m v_m,\qquad
               y_n = y'_n/\hat Z_n,\quad \hat Z_n = \sum_{m∉E} φ(q_n,ω)^⊤φ(k_m,ω) + \sum_{m∈E} e_m,

    ``E = Supp_n(S)``, ``φ(x, ω) = S^{-1/2}[ξ(x, ω_1), ..., ξ(x, ω_S)]`` with ``ω_s ~ N(0, I)``.

    Parameters
    ----------
    q, k, v : array_like ``(..., N, d)``, ``(..., M, d)``, ``(..., M, d_v)``
    omega : array_like ``(S, d)``
    exact : bool array broadcastable to ``(..., N, M)``, optional
        ``E`` per query (True = exact). Or ``block_size``: ``E^n`` the contiguous block of ``n`` (``N = M``).
    normalize : bool
        Eq 30 (default) or Eq 29's ``y'_n`` (raises :class:`NumericalError` if it overflows).
    method : {"direct", "linear"}
        ``direct``: the out-of-window feature sum formed directly (no cancellation; ``O(NM(S + d))``,
        the theory reference); ``linear`` (``block_size`` only): global feature sums minus the in-window
        ones, ``O(S(N + M)(d + d_v) + N|E|(d + d_v))`` (the efficient form).
    return_parts : bool
        Return :class:`ScatterbrainParts` instead.

    Notes
    -----
    Randomness: ``omega`` only. App G.5 shows ``y'_n/Z`` is EVA with a shared coefficient on ``[M] \ E``
    whatever that coefficient is.
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    q, k = _in_frame(q, k, frame)
    omega = as_float_array(omega, "omega", dtype=dt, ndim=2)
    check_choice(method, "method", ("direct", "linear"))
    if (exact is None) == (block_size is None):
        raise TypeError("give exactly one of exact= (a mask) or block_size=")
    if method == "linear":
        if block_size is None:
            raise ValueError("method='linear' is implemented for block_size= exact sets")
        num, den, log_scale = _scatterbrain_linear(q, k, v, omega, block_size)
    else:
        mask = _block_mask(q.shape[-2], k.shape[-2], block_size) if block_size is not None else \
            np.asarray(exact)
        if mask.dtype != np.bool_:
            raise TypeError(f"exact must be a boolean mask (True = exact), got dtype {mask.dtype}")
        num, den, log_scale = _scatterbrain_direct(q, k, v, omega, mask)
    if return_parts:
        return ScatterbrainParts(num, den, log_scale)
    if normalize:
        return num / den[..., None]
    return num * exp_or_raise(log_scale, "Eq 29's unnormalised output")[..., None]


def _scatterbrain_direct(q, k, v, omega, mask):
    sign, log_feat = _log_features(q, omega).kernel(_log_features(k, omega), log=True)
    logits = np.where(mask, q @ np.swapaxes(k, -1, -2), log_feat - math.log(omega.shape[0]))
    top = logits.max(axis=-1)
    weights = np.exp(logits - top[..., None])
    return weights @ v, weights.sum(axis=-1), top


def _scatterbrain_linear(q, k, v, omega, block_size):
    n = q.shape[-2]
    inside = _block_mask(n, k.shape[-2], block_size)
    lq, lk = log_xi(q, omega), log_xi(k, omega)
    ref = lk.max(axis=-2, keepdims=True)                                # key shift c_s (bidirectional)
    vo = np.concatenate([v, np.ones(v.shape[:-1] + (1,))], axis=-1)
    kw = np.exp(lk - ref)                                               # (..., M, S)
    total = np.swapaxes(kw, -1, -2) @ vo                                # (..., S, d_v + 1)
    b = block_size
    n_blocks = -(-n // b)
    pad = n_blocks * b - n
    kw_b = np.concatenate([kw, np.zeros(kw.shape[:-2] + (pad, kw.shape[-1]))], axis=-2)
    vo_b = np.concatenate([vo, np.zeros(vo.shape[:-2] + (pad, vo.shape[-1]))], axis=-2)
    kw_b = kw_b.reshape(kw.shape[:-2] + (n_blocks, b, kw.shape[-1]))
    vo_b = vo_b.reshape(vo.shape[:-2] + (n_blocks, b, vo.shape[-1]))
    per_block = np.swapaxes(kw_b, -1, -2) @ vo_b                        # (..., nB, S, d_v + 1)
    outside = total[..., None, :, :] - per_block
    a = lq + ref - math.log(omega.shape[0])                             # (..., N, S)
    exact_logits = np.where(inside, q @ np.swapaxes(k, -1, -2), -np.inf)
    top = np.maximum(a.max(axis=-1), exact_logits.max(axis=-1))
    block_of = np.arange(n) // b
    feat = np.einsum("...ns,...nsv->...nv", np.exp(a - top[..., None]), outside[..., block_of, :, :])
    buf = feat + np.exp(exact_logits - top[..., None]) @ vo
    return buf[..., :-1], buf[..., -1], top
