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

import numpy as np

__all__ = ["gaussian_weight_moments", "is_variance", "snis_bias_constant", "log_gaussian_product_ratio_integral",
           "signed_sum_upper", "mixture_square_integral", "gram_fourth_power_integral"]


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


# ------------------------------------------------------------- unit-covariance Gaussian products and ratios
#
# Products and ratios of unit-covariance Gaussian densities in R^D integrate in closed form (complete the
# square): with numerator means a_1..a_J and denominator means c_l raised to powers e_l, the exponent is
# -P‖ω‖²/2 + ω·s - Q/2 with the precision P = J - Σ_l e_l, s = Σ_j a_j - Σ_l e_l c_l and
# Q = Σ_j ‖a_j‖² - Σ_l e_l ‖c_l‖², so
#
#     ∫ Π_j N(ω; a_j, I) / Π_l N(ω; c_l, I)^{e_l} dω = (2π)^{-PD/2} (2π/P)^{D/2} exp(‖s‖²/(2P) - Q/2)
#
# for P > 0, and +∞ for P <= 0 (the integrand does not decay). Two numerators and one denominator give
# exp((a_1 - c)·(a_2 - c)); J numerators over N(0, I)^{J-1} give exp(Σ_{i<j} a_i·a_j).

def log_gaussian_product_ratio_integral(num_means, den_means=None, den_powers=None) -> np.ndarray:
    r"""``log ∫ Π_j N(ω; a_j, I) / Π_l N(ω; c_l, I)^{e_l} dω`` (``+inf`` where the precision ``J - Σe <= 0``).

    ``num_means (..., J, D)``; ``den_means (..., L, D)`` and ``den_powers (L,)`` (real, default 1), broadcast
    against the numerator's leading axes. Returns shape ``(...)``. See the formula above.
    """
    a = np.asarray(num_means, dtype=np.float64)
    n_num, d = a.shape[-2], a.shape[-1]
    s = a.sum(axis=-2)
    quad = (a * a).sum(axis=(-2, -1))
    precision = float(n_num)
    if den_means is not None:
        c = np.asarray(den_means, dtype=np.float64)
        e = np.ones(c.shape[-2]) if den_powers is None else np.asarray(den_powers, dtype=np.float64)
        precision -= float(e.sum())
        s = s - np.einsum("l,...ld->...d", e, c)
        quad = quad - np.einsum("l,...l->...", e, (c * c).sum(-1))
    if precision <= 0:
        return np.full(np.broadcast_shapes(s.shape[:-1], np.shape(quad)), np.inf)
    log_2pi = math.log(2 * math.pi)
    return (0.5 * d * (math.log(2 * math.pi / precision) - precision * log_2pi)
            + 0.5 * (s * s).sum(-1) / precision - 0.5 * quad)


def signed_sum_upper(log_abs, signs) -> float:
    r"""An upper bound on ``Σ_i signs_i exp(log_abs_i)`` (a sum known to be ``>= 0``) that covers round-off:
    the max-shifted sum plus ``4·n·ε·Σ|terms|`` (float64 summation error), clipped at ``>= 0``; ``inf`` if any
    term is."""
    la = np.asarray(log_abs, dtype=np.float64).ravel()
    sg = np.asarray(signs, dtype=np.float64).ravel()
    keep = sg != 0
    la, sg = la[keep], sg[keep]
    if la.size == 0:
        return 0.0
    top = float(la.max())
    if not math.isfinite(top):
        return math.inf if top > 0 else 0.0
    scaled = np.exp(la - top)
    total = float((sg * scaled).sum()) + 4 * la.size * np.finfo(float).eps * float(scaled.sum())
    with np.errstate(over="ignore"):
        return max(total, 0.0) * math.exp(top) if total > 0 else 0.0


def mixture_square_integral(coef, means, *, divide=None, multiply=None) -> float:
    r"""``∫ h(ω)² N(ω; e, I) / N(ω; c, I) dω`` for the signed mixture ``h = Σ_m coef_m N(ω; means_m, I)``.

    ``divide`` is ``c (D,)`` (no denominator if ``None``), ``multiply`` is ``e (D,)`` (no extra factor if
    ``None``). The pairwise terms are :func:`log_gaussian_product_ratio_integral`; the signed sum is bounded above
    with :func:`signed_sum_upper` (it is the integral of a non-negative function, so ``>= 0``). ``inf`` when
    the precision is not positive (``divide`` without ``multiply`` is fine: precision 1). ``O(M²D)``.
    """
    b = np.asarray(coef, dtype=np.float64)
    a = np.asarray(means, dtype=np.float64)
    m, d = a.shape
    pairs = np.stack(np.broadcast_arrays(a[:, None, :], a[None, :, :]), axis=-2)         # (M, M, 2, D)
    if multiply is not None:
        extra = np.broadcast_to(np.asarray(multiply, dtype=np.float64), (m, m, 1, d))
        pairs = np.concatenate([pairs, extra], axis=-2)
    den = None if divide is None else np.asarray(divide, dtype=np.float64).reshape(1, d)
    log_terms = log_gaussian_product_ratio_integral(pairs, den)
    with np.errstate(divide="ignore"):
        log_coef = np.log(np.abs(b))
    return signed_sum_upper(log_coef[:, None] + log_coef[None, :] + log_terms, np.sign(b)[:, None] * np.sign(b)[None])


def gram_fourth_power_integral(gram, means, *, divide, power: float = 3.0) -> float:
    r"""``∫ ‖h(ω)‖⁴ / N(ω; c, I)^{power} dω`` for a vector signed mixture ``h = Σ_m β_m N(ω; a_m, I)``
    (``β_m ∈ R^{D_v}``), given the Gram matrix ``gram[m, m'] = β_m·β_m'``:
    ``‖h‖⁴ = Σ_{m1..m4} G_{m1m2} G_{m3m4} Π_i N(a_mi)``, so the integral is the signed sum of
    ``G_{m1m2} G_{m3m4} · ∫ Π_{i=1}^4 N(a_mi)/N(c)^{power}`` (finite iff ``power < 4``), bounded above with
    :func:`signed_sum_upper`. ``O(M⁴ D)`` time; the terms are formed one first index at a time (``O(M³ D)``
    memory) and summed in two passes (the largest term, then the shifted sum)."""
    g = np.asarray(gram, dtype=np.float64)
    a = np.asarray(means, dtype=np.float64)
    m, d = a.shape
    den = np.asarray(divide, dtype=np.float64).reshape(1, d)
    rest = np.stack(np.meshgrid(*([np.arange(m)] * 3), indexing="ij"), axis=-1).reshape(-1, 3)

    def terms(first: int):
        idx = np.column_stack([np.full(len(rest), first), rest])
        coef = g[first, idx[:, 1]] * g[idx[:, 2], idx[:, 3]]
        with np.errstate(divide="ignore"):
            log_abs = np.log(np.abs(coef)) + log_gaussian_product_ratio_integral(a[idx], den, [power])
        keep = coef != 0
        return log_abs[keep], np.sign(coef[keep])

    # signed_sum_upper over all M⁴ terms, streamed: max-shifted sum plus the float64 summation allowance
    top, count = -math.inf, 0
    for first in range(m):
        log_abs, _ = terms(first)
        if log_abs.size:
            top, count = max(top, float(log_abs.max())), count + log_abs.size
    if count == 0:
        return 0.0
    if not math.isfinite(top):
        return math.inf if top > 0 else 0.0
    total = magnitude = 0.0
    for first in range(m):
        log_abs, signs = terms(first)
        scaled = np.exp(log_abs - top)
        total += float((signs * scaled).sum())
        magnitude += float(scaled.sum())
    total += 4 * count * np.finfo(float).eps * magnitude
    with np.errstate(over="ignore"):
        return max(total, 0.0) * math.exp(top) if total > 0 else 0.0
