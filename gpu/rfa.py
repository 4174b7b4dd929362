r"""RFA (RA/LARA paper Eq 2; EVA §2.2 Eq 4) on torch tensors: the torch execution of
:func:`rfkit.estimators.rfa.rfa_attention` for the positive map's softmax form.

``y_n = Σ_s softmax_s(ω_s·q_n + log Den_s + log r_s) F_s`` with the key statistics
``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)`` and ``F_s = Σ_m softmax_m(·) v_m`` (a query's own factor cancels), every
exponential in log space as in the reference. Inputs are single ``(N, D)`` matrices, merged coordinates.
"""

from __future__ import annotations

import torch

from rfkit.base.checks import check_choice, check_positive_int
from rfkit.estimators.rfa import FRAMES, RFA_FORMS, XI_MAPS

from ._core import as_generator, as_tensor, check_qkv

__all__ = ["rfa_attention"]


def _half_sq(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (x * x).sum(dim=-1)


def _key_statistics(k: torch.Tensor, v: torch.Tensor, omega: torch.Tensor):
    """``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)`` and ``F_s = Σ_m softmax_m(·) v_m`` for ``omega (..., D)``."""
    logits = omega @ k.mT - _half_sq(k)
    return torch.logsumexp(logits, dim=-1), torch.softmax(logits, dim=-1) @ v


def _unsupported(options: dict) -> None:
    """``NotImplementedError`` naming the numpy options (``{name: (value, default)}``) the torch path lacks."""
    given = [f"{name}={value!r}" for name, (value, default) in options.items() if value is not default]
    if given:
        raise NotImplementedError(f"the torch rfa_attention runs the positive map's softmax form on shared samples "
                                  f"drawn from N(0, I) or given; not {', '.join(given)} (use the numpy reference)")


def rfa_attention(q, k, v, *, num_samples: int | None = None, omega=None, rng=None, proposal=None, log_ratio=None,
                  feature_map: str = "positive", phase=None, form: str | None = None, per_query: bool = False,
                  causal: bool = False, frame: str = "theory", dtype=None, return_stats: bool = False) -> torch.Tensor:
    r"""RFA with shared samples, positive map, softmax form (torch version of :func:`rfkit.estimators.rfa_attention`).

    ``omega (S, D)`` explicit, or ``num_samples`` draws ``ω ~ N(0, I)`` from ``rng`` (a ``torch.Generator`` or a
    numpy seed/generator); ``log_ratio (S,)`` weights samples from another proposal (EVA's ``r(ω)``); ``frame`` as
    the reference. ``proposal``, ``phase``, other maps and forms, ``per_query``, ``causal`` and ``return_stats``
    raise ``NotImplementedError``. Cost ``O(S(N + M)(D + D_v))``.
    """
    check_choice(feature_map, "feature_map", XI_MAPS)
    check_choice(frame, "frame", FRAMES)
    if form is not None:
        form = None if check_choice(form, "form", RFA_FORMS) == "softmax" else form
    _unsupported(dict(proposal=(proposal, None), phase=(phase, None), form=(form, None),
                      feature_map=(feature_map if feature_map != "positive" else None, None),
                      per_query=(bool(per_query) or None, None), causal=(bool(causal) or None, None),
                      return_stats=(bool(return_stats) or None, None)))
    q, k, v = check_qkv(q, k, v, dtype, matrices=True)
    if frame == "sqrt_d":
        q, k = q * q.shape[1] ** -0.25, k * k.shape[1] ** -0.25
    if omega is None:
        if num_samples is None or rng is None:
            raise TypeError("give omega=, or num_samples= and rng= to draw the samples")
        shape = (check_positive_int(num_samples, "num_samples"), q.shape[1])
        omega = torch.randn(shape, generator=as_generator(rng, q.device), device=q.device, dtype=q.dtype)
    omega = as_tensor(omega, "omega", dtype=q.dtype, device=q.device, ndim=2)
    if omega.shape[1] != q.shape[1] or omega.shape[0] == 0:
        raise ValueError(f"omega must have shape (S >= 1, D = {q.shape[1]}), got {tuple(omega.shape)}")
    log_den, f = _key_statistics(k, v, omega)
    logits = q @ omega.mT + log_den
    if log_ratio is not None:
        log_ratio = as_tensor(log_ratio, "log_ratio", dtype=q.dtype, device=q.device, ndim=1)
        if log_ratio.shape[0] != omega.shape[0]:
            raise ValueError(f"log_ratio must have shape ({omega.shape[0]},), got {tuple(log_ratio.shape)}")
        logits = logits + log_ratio
    return torch.softmax(logits, dim=-1) @ f
