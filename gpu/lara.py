r"""LARA (Zheng, Wang, Kong 2022) on torch tensors, positive map, merged coordinates (footnote 2).

Torch version of :func:`rfkit.estimators.lara.lara_attention` with the default Eq 34 proposals, Eq 9 weights and
the softmax form (RFA and RA: :mod:`rfkit.gpu.rfa`, :mod:`rfkit.gpu.ra`).
Every exponential is formed in log space as in the
reference (key statistics ``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)``, ``F_s = Σ_m softmax_m(·) v_m``; a query's
own factor cancels). Segment bounds come from :func:`rfkit.estimators.lara.segment_bounds`. Inputs are single
``(N, D)`` matrices (the reference loops over heads with ``over_heads``).
"""

from __future__ import annotations

import math

import torch

from rfkit.base.checks import check_choice, check_positive_int
from rfkit.estimators.lara import LARA_FORMS, PROPOSALS, segment_bounds
from rfkit.estimators.mis import RPRIME_AXES, WEIGHTS

from ._core import as_generator, as_tensor, check_qkv
from .rfa import _key_statistics

__all__ = ["lara_attention"]

_LOG_2PI = math.log(2 * math.pi)





def _half_sq(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (x * x).sum(dim=-1)


def _landmarks(x: torch.Tensor, C: int, uneven: str) -> torch.Tensor:
    """Segment means ``x̃_c`` (G.3.1) by prefix sums over :func:`~rfkit.estimators.lara.segment_bounds`."""
    start, end = (torch.as_tensor(a, device=x.device) for a in segment_bounds(x.shape[0], C, uneven=uneven))
    cs = torch.cat([x.new_zeros(1, x.shape[1]), torch.cumsum(x, dim=0)])
    return (cs[end] - cs[start]) / (end - start).to(x.dtype)[:, None]


def _draws(mu: torch.Tensor, mode: str, num_samples: int, omega, rng) -> torch.Tensor:
    """``ω_cj``: given ``(C, S_c, D)``, ``μ_c`` (eval, G.3.3) or ``μ_c + ε`` from ``rng`` (train)."""
    if omega is not None:
        return as_tensor(omega, "omega", dtype=mu.dtype, device=mu.device, ndim=3)
    if mode == "eval":
        return mu[:, None, :]
    if rng is None:
        raise TypeError("mode='train' needs omega= or rng=")
    shape = (mu.shape[0], check_positive_int(num_samples, "num_samples"), mu.shape[1])
    gen = as_generator(rng, mu.device)
    return mu[:, None, :] + torch.randn(shape, generator=gen, device=mu.device, dtype=mu.dtype)


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


def lara_attention(q, k, v, *, C: int, rng=None, omega=None, proposal: str = "eq34", weights: str = "eq9",
                   beta: float = 1.0, rprime_axis: str = "queries", mode: str = "train", num_samples: int = 1,
                   form: str = "softmax", uneven: str = "error", dtype=None) -> torch.Tensor:
    r"""LARA (Eq 10, G.3) with Eq 34 proposals ``N(q̃_c + k̃_c, I)``, Eq 9 weights and the softmax form.

    Parameters
    ----------
    q, k, v : ``(N, D)``, ``(M, D)``, ``(M, D_v)`` (merged coordinates)
    C : int
        Landmarks = proposals (segment means of queries and keys, ``uneven`` as the reference).
    rng : torch.Generator, seed or numpy Generator
        Draws ``num_samples`` per proposal (``mode="train"``) when ``omega`` is not given.
    omega : ``(C, S_c, D)``, optional
        Explicit draws (shareable with the numpy reference); else ``μ_c`` (``mode="eval"``) or ``μ_c + ε``.
    beta, rprime_axis
        Eq 9/38's correction coefficient and the softmax axis of ``r'`` (``queries`` as printed).
    proposal, weights, form
        Only ``"eq34"``, ``"eq9"`` and ``"softmax"``; the other values raise ``NotImplementedError``.

    Notes
    -----
    Cost ``O((N + M)D + C·S_c·(N + M)(D + D_v))``: linear in ``N`` and ``M``. Randomness: ``ω`` only.
    """
    check_choice(mode, "mode", ("train", "eval"))
    check_choice(rprime_axis, "rprime_axis", RPRIME_AXES)
    check_choice(proposal, "proposal", PROPOSALS)
    check_choice(weights, "weights", WEIGHTS)
    check_choice(form, "form", LARA_FORMS)
    given = [f"{name}={value!r}" for name, value, default in (("proposal", proposal, "eq34"),
                                                              ("weights", weights, "eq9"), ("form", form, "softmax"))
             if value != default]
    if given:
        raise NotImplementedError(f"the torch lara_attention runs Eq 34 proposals, Eq 9 weights and the softmax form; "
                                  f"not {', '.join(given)} (use the numpy reference)")
    q, k, v = check_qkv(q, k, v, dtype, matrices=True)
    C = check_positive_int(C, "C")
    q_landmarks = _landmarks(q, C, uneven)
    mu = q_landmarks + _landmarks(k, C, uneven)
    omega = _draws(mu, mode, num_samples, omega, rng)
    if omega.shape[0] != C or omega.shape[2] != q.shape[1]:
        raise ValueError(f"omega must have shape (C={C}, S_c, D={q.shape[1]}), got {tuple(omega.shape)}")
    alpha = _eq9_weights(omega, mu, q, q_landmarks, float(beta), rprime_axis)
    return _mis_softmax_form(q, k, v, omega, mu, alpha)
