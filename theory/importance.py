r"""Exact importance-sampling moments for a Gaussian target and proposal (closed forms for tests/claims).

Target ``p = N(a, 1)``, proposal ``q = N(0, s²)``, weight ``w = p/q``. Then

.. math::

    \frac{p(x)^2}{q(x)} = \frac{s\,e^{a^2(1/λ - 1)}}{\sqrt{2λ}}\; N\!\left(x;\ \frac{a}{λ},\ \frac{1}{2λ}\right),
    \qquad λ = 1 - \frac{1}{2s^2},

so ``E_q[w²] = s e^{a²(1/λ-1)}/√(2λ)`` and ``E_q[w² x^k]`` are that constant times the moments of
``N(a/λ, 1/(2λ))``. For ``s² <= 1/2`` (``λ <= 0``) the second moment of the weights is infinite.

SNIS bias to leading order (delta method, normalised weights):
``E[μ̂_SNIS] - μ = (μ E_q[w²] - E_q[w² f]) / S + O(S^{-2})``; for ``f(x) = x`` and ``s = 1`` this is
``-a e^{a²} / S``.
"""

from __future__ import annotations

import math

__all__ = ["gaussian_weight_moments", "is_variance", "snis_bias_constant"]


def gaussian_weight_moments(a: float, s: float) -> dict[str, float]:
    """``E_q[w²]``, ``E_q[w² x]``, ``E_q[w² x²]`` for ``p = N(a, 1)``, ``q = N(0, s²)`` (inf if divergent)."""
    if not s > 0:
        raise ValueError(f"s must be > 0, got {s}")
    lam = 1 - 1 / (2 * s * s)
    if lam <= 0:
        return dict(w2=math.inf, w2x=math.inf, w2x2=math.inf)
    c = s * math.exp(a * a * (1 / lam - 1)) / math.sqrt(2 * lam)
    mean, var = a / lam, 1 / (2 * lam)
    return dict(w2=c, w2x=c * mean, w2x2=c * (mean * mean + var))


def is_variance(a: float, s: float, power: int) -> float:
    """Per-sample variance of ``w·f`` under ``q`` for ``f(x) = x^power`` (``power`` in {0, 1}).

    ``Var_q(w f) = E_q[w² f²] - (E_p f)²``: with ``power = 0`` this is ``E_q[w²] - 1``; with ``1``,
    ``E_q[w² x²] - a²``.
    """
    mom = gaussian_weight_moments(a, s)
    if power == 0:
        return mom["w2"] - 1.0
    if power == 1:
        return mom["w2x2"] - a * a
    raise ValueError(f"power must be 0 or 1, got {power}")


def snis_bias_constant(a: float, s: float) -> float:
    """``lim S·(E[μ̂_SNIS] - μ)`` for ``f(x) = x``: ``μ E_q[w²] - E_q[w² x]`` with ``μ = a``."""
    mom = gaussian_weight_moments(a, s)
    return a * mom["w2"] - mom["w2x"]
