r"""Randomized attention (RA, §3.2) on torch tensors: the torch execution of :func:`rfkit.estimators.ra.ra_attention`
for the positive map, sampled evaluation and the simplified integrand
``f_n(ω) = Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m``. Inputs are single ``(N, D)`` matrices, merged coordinates.
"""

from __future__ import annotations

import torch

from rfkit.base.checks import check_positive_int
from rfkit.estimators.ra import RADraws
from rfkit.estimators.rfa import record_gemm

from ._core import as_generator, as_tensor, check_qkv
from .rfa import _key_statistics

__all__ = ["ra_attention"]


def _draw_ra(q: torch.Tensor, k: torch.Tensor, num_samples: int, generator: torch.Generator):
    """``z ~ Categorical(softmax_m(q_n·k_m))`` and ``ε ~ N(0, I)`` with a ``torch.Generator``."""
    probs = torch.softmax(q.detach() @ k.detach().mT, dim=-1)
    z = torch.multinomial(probs, check_positive_int(num_samples, "num_samples"), replacement=True,
                          generator=generator)
    eps = torch.randn(z.shape + (q.shape[1],), generator=generator, device=q.device, dtype=q.dtype)
    return z, eps


def ra_attention(q, k, v, *, num_samples: int = 1, rng=None, draws: RADraws | None = None,
                 feature_map: str = "positive", eval_mode: str = "sample", f_form: str = "simplified",
                 return_samples: bool = False, gemms: list | None = None, dtype=None) -> torch.Tensor:
    r"""Randomized attention ``RA(q_n) = (1/S) Σ_s f_n(ω_ns)``, ``ω_ns = q_n + k_{z_ns} + ε_ns ~ p_n``.

    Randomness: the given :class:`~rfkit.estimators.ra.RADraws` (``z (N, S)``, ``eps (N, S, D)``) or
    ``num_samples`` draws per query from ``rng`` (a ``torch.Generator`` or a numpy seed/generator). Other feature
    maps, evaluation modes, the literal integrand and ``return_samples`` raise ``NotImplementedError``.
    Cost ``O(NMD + S·N·M·(D + D_v))``: quadratic, like the reference. ``gemms`` records the matrix products this
    implementation performs, under the reference's names (``pi_logits`` only when it draws: given ``draws`` it
    forms no ``QKᵀ``).
    """
    options = dict(feature_map=(feature_map, "positive"), eval_mode=(eval_mode, "sample"),
                   f_form=(f_form, "simplified"), return_samples=(return_samples, False))
    given = [f"{name}={value!r}" for name, (value, default) in options.items() if value != default]
    if given:
        raise NotImplementedError(f"the torch ra_attention runs the positive map's sampled, simplified form; "
                                  f"not {', '.join(given)} (use the numpy reference)")
    q, k, v = check_qkv(q, k, v, dtype, matrices=True)
    if draws is not None:
        if draws.sign is not None:
            raise ValueError("the torch RA covers the positive map (draws without signs)")
        z = torch.as_tensor(draws.z, device=q.device)
        eps = as_tensor(draws.eps, "draws.eps", dtype=q.dtype, device=q.device)
        if tuple(eps.shape) != tuple(z.shape) + (q.shape[1],):
            raise ValueError(f"draws.eps must have shape {tuple(z.shape) + (q.shape[1],)}, got {tuple(eps.shape)}")
    elif rng is not None:
        z, eps = _draw_ra(q, k, num_samples, as_generator(rng, q.device))
        record_gemm(gemms, "pi_logits", q.shape[0], q.shape[1], k.shape[0])
    else:
        raise TypeError("give draws= (RADraws) or rng= (a torch.Generator or a numpy seed/generator)")
    omega = q[:, None, :] + k[z] + eps
    record_gemm(gemms, "key_logits", omega.shape[0] * omega.shape[1], k.shape[1], k.shape[0])
    record_gemm(gemms, "key_values", omega.shape[0] * omega.shape[1], k.shape[0], v.shape[1])
    _, f = _key_statistics(k, v, omega)
    return f.mean(dim=1)
