r"""RFA, RA and LARA (Zheng, Wang, Kong 2022) on torch tensors, positive map, merged coordinates (footnote 2).

Torch versions of :func:`rfkit.estimators.rfa.rfa_attention` (softmax form), :func:`rfkit.estimators.ra.ra_attention`
(given its draws, or drawn with a ``torch.Generator``) and :func:`rfkit.estimators.lara.lara_attention` with the
default Eq 34 proposals, Eq 9 weights and the softmax form. Every exponential is formed in log space as in the
reference (key statistics ``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)``, ``F_s = Σ_m softmax_m(·) v_m``; a query's
own factor cancels). Segment bounds come from :func:`rfkit.estimators.lara.segment_bounds`. Inputs are single
``(N, D)`` matrices (the reference loops over heads with ``over_heads``).
"""

from __future__ import annotations

import math

import torch

from rfkit.base.checks import check_choice, check_positive_int
from rfkit.estimators.lara import segment_bounds
from rfkit.estimators.mis import RPRIME_AXES
from rfkit.estimators.ra import RADraws

from ._core import as_tensor, check_generator, check_qkv

__all__ = ["rfa_attention", "ra_attention", "lara_attention"]

_LOG_2PI = math.log(2 * math.pi)





def _half_sq(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (x * x).sum(dim=-1)


def _key_statistics(k: torch.Tensor, v: torch.Tensor, omega: torch.Tensor):
    """``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)`` and ``F_s = Σ_m softmax_m(·) v_m`` for ``omega (..., D)``."""
    logits = omega @ k.mT - _half_sq(k)
    return torch.logsumexp(logits, dim=-1), torch.softmax(logits, dim=-1) @ v


def _samples(omega, shape: tuple[int, ...], q: torch.Tensor, name: str) -> torch.Tensor:
    omega = as_tensor(omega, name, dtype=q.dtype, device=q.device)
    if tuple(omega.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(omega.shape)}")
    return omega


def rfa_attention(q, k, v, *, omega, dtype=None) -> torch.Tensor:
    r"""RFA (Eq 2) with shared samples ``omega (S, D)``, positive map, softmax form:
    ``y_n = Σ_s softmax_s(ω_s·q_n + log Den_s) F_s``. Cost ``O(S(N + M)(D + D_v))``; randomness: the given ``ω``."""
    q, k, v = check_qkv(q, k, v, dtype, matrices=True)
    omega = as_tensor(omega, "omega", dtype=q.dtype, device=q.device, ndim=2)
    if omega.shape[1] != q.shape[1] or omega.shape[0] == 0:
        raise ValueError(f"omega must have shape (S >= 1, D = {q.shape[1]}), got {tuple(omega.shape)}")
    log_den, f = _key_statistics(k, v, omega)
    return torch.softmax(q @ omega.mT + log_den, dim=-1) @ f


def _draw_ra(q: torch.Tensor, k: torch.Tensor, S: int, generator: torch.Generator):
    """``z ~ Categorical(softmax_m(q_n·k_m))`` and ``ε ~ N(0, I)`` with a ``torch.Generator``."""
    probs = torch.softmax(q.detach() @ k.detach().mT, dim=-1)
    z = torch.multinomial(probs, check_positive_int(S, "S"), replacement=True, generator=check_generator(generator))
    eps = torch.randn(z.shape + (q.shape[1],), generator=generator, device=q.device, dtype=q.dtype)
    return z, eps


def ra_attention(q, k, v, *, draws: RADraws | None = None, S: int = 1, generator: torch.Generator | None = None,
                 dtype=None) -> torch.Tensor:
    r"""Randomized attention ``RA(q_n) = (1/S) Σ_s f_n(ω_ns)``, ``ω_ns = q_n + k_{z_ns} + ε_ns ~ p_n`` (§3.2, positive
    map, simplified integrand ``f_n(ω) = Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m``).

    Randomness: the given :class:`~rfkit.estimators.ra.RADraws` (``z (N, S)``, ``eps (N, S, D)``) or ``S`` draws
    per query from ``generator``. Cost ``O(NMD + S·N·M·(D + D_v))``: quadratic, like the reference.
    """
    q, k, v = check_qkv(q, k, v, dtype, matrices=True)
    if draws is not None:
        if draws.sign is not None:
            raise ValueError("the torch RA covers the positive map (draws without signs)")
        z = torch.as_tensor(draws.z, device=q.device)
        eps = _samples(draws.eps, tuple(z.shape) + (q.shape[1],), q, "draws.eps")
    elif generator is not None:
        z, eps = _draw_ra(q, k, S, generator)
    else:
        raise TypeError("give draws= (RADraws) or generator= (a torch.Generator)")
    omega = q[:, None, :] + k[z] + eps
    _, f = _key_statistics(k, v, omega)
    return f.mean(dim=1)


def _landmarks(x: torch.Tensor, C: int, uneven: str) -> torch.Tensor:
    """Segment means ``x̃_c`` (G.3.1) by prefix sums over :func:`~rfkit.estimators.lara.segment_bounds`."""
    start, end = (torch.as_tensor(a, device=x.device) for a in segment_bounds(x.shape[0], C, uneven=uneven))
    cs = torch.cat([x.new_zeros(1, x.shape[1]), torch.cumsum(x, dim=0)])
    return (cs[end] - cs[start]) / (end - start).to(x.dtype)[:, None]


def _draws(mu: torch.Tensor, mode: str, S_c: int, omega, generator) -> torch.Tensor:
    """``ω_cj``: given ``(C, S_c, D)``, ``μ_c`` (eval, G.3.3) or ``μ_c + ε`` from ``generator`` (train)."""
    if omega is not None:
        return as_tensor(omega, "omega", dtype=mu.dtype, device=mu.device, ndim=3)
    if mode == "eval":
        return mu[:, None, :]
    if generator is None:
        raise TypeError("mode='train' needs omega= or generator=")
    shape = (mu.shape[0], check_positive_int(S_c, "S_c"), mu.shape[1])
    return mu[:, None, :] + torch.randn(shape, generator=check_generator(generator), device=mu.device, dtype=mu.dtype)


def _eq9_weights(omega: torch.Tensor, mu: torch.Tensor, q: torch.Tensor, q_landmarks: torch.Tensor, beta: float,
                 axis: str) -> torch.Tensor:
    """``α_nc(ω_cj) = BH_c(ω_cj) + β(r'_nc - (1/C)Σ_c' r'_nc')`` (Eq 9/38), shape ``(N, C, S_c)``."""
    log_q_cross = -(_half_sq(omega)[..., None] - omega @ mu.mT + _half_sq(mu)) - 0.5 * mu.shape[1] * _LOG_2PI
    own = torch.arange(mu.shape[0], device=mu.device)
    bh_own = torch.softmax(log_q_cross, dim=-1)[own, :, own]                       # (C, S_c)
    r = torch.softmax(q @ q_landmarks.mT, dim=0 if axis == "queries" else 1)     # (N, C)
    return bh_own[None] + beta * (r - r.mean(dim=-1, keepdim=True))[:, :, None]


def _mis_softmax_form(q, k, v, omega, mu, alpha) -> torch.Tensor:
    """Self-normalised MIS in the softmax form: ``a_ncj ∝ α_ncj exp(log ξ(q_n,ω) + log Den + log N/q_c)``."""
    log_den, f = _key_statistics(k, v, omega)                                     # (C, S_c), (C, S_c, D_v)
    log_ratio = -(omega * mu[:, None, :]).sum(dim=-1) + _half_sq(mu)[:, None]    # log N(ω;0,I)/q_c(ω)
    log_xq = torch.einsum("nd,cjd->ncj", q, omega) - _half_sq(q)[:, None, None]
    lr = log_xq + (log_den + log_ratio)[None]
    a = alpha * torch.exp(lr - lr.detach().amax(dim=(1, 2), keepdim=True))
    return (a.reshape(a.shape[0], -1) @ f.reshape(-1, f.shape[-1])) / a.sum(dim=(1, 2))[:, None]


def lara_attention(q, k, v, *, C: int, omega=None, generator: torch.Generator | None = None, mode: str = "train",
                   S_c: int = 1, beta: float = 1.0, rprime_axis: str = "queries", uneven: str = "error",
                   dtype=None) -> torch.Tensor:
    r"""LARA (Eq 10, G.3) with Eq 34 proposals ``N(q̃_c + k̃_c, I)``, Eq 9 weights and the softmax form.

    Parameters
    ----------
    q, k, v : ``(N, D)``, ``(M, D)``, ``(M, D_v)`` (merged coordinates)
    C : int
        Landmarks = proposals (segment means of queries and keys, ``uneven`` as the reference).
    omega : ``(C, S_c, D)``, optional
        Explicit draws (shareable with the numpy reference); else ``μ_c`` (``mode="eval"``) or ``μ_c + ε`` drawn
        with ``generator``.
    beta, rprime_axis
        Eq 9/38's correction coefficient and the softmax axis of ``r'`` (``queries`` as printed).

    Notes
    -----
    Cost ``O((N + M)D + C·S_c·(N + M)(D + D_v))``: linear in ``N`` and ``M``. Randomness: ``ω`` only.
    """
    check_choice(mode, "mode", ("train", "eval"))
    check_choice(rprime_axis, "rprime_axis", RPRIME_AXES)
    q, k, v = check_qkv(q, k, v, dtype, matrices=True)
    C = check_positive_int(C, "C")
    q_landmarks = _landmarks(q, C, uneven)
    mu = q_landmarks + _landmarks(k, C, uneven)
    omega = _draws(mu, mode, S_c, omega, generator)
    if omega.shape[0] != C or omega.shape[2] != q.shape[1]:
        raise ValueError(f"omega must have shape (C={C}, S_c, D={q.shape[1]}), got {tuple(omega.shape)}")
    alpha = _eq9_weights(omega, mu, q, q_landmarks, float(beta), rprime_axis)
    return _mis_softmax_form(q, k, v, omega, mu, alpha)
