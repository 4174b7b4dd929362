r"""Moments and angles of a uniform unit vector (Performer ``003_4855bc6ab225d7a6.txt``, F.3, Lemma 3).

Let ``u`` be uniform on the unit sphere ``S^{d-1}`` (``u = ω/‖ω‖``, ``ω ~ N(0, I_d)``) and ``θ`` the angle
between ``u`` and ``e_1``, so ``u_1 = cos θ``.

* Coordinate law: ``(1 + u_1)/2 ~ Beta((d-1)/2, (d-1)/2)`` for ``d >= 2``, i.e. the density
  ``c_d (1 - t²)^{(d-3)/2}`` on ``(-1, 1)`` with ``c_d = Γ(d/2)/(√π Γ((d-1)/2))``; for ``d = 1``,
  ``u_1 = ±1`` with probability 1/2 each.
* Moments (Gamma-function form, valid for every ``d >= 1``):

  .. math:: E\,u_1^{2k} = \frac{Γ(k + 1/2)\,Γ(d/2)}{\sqrt{π}\,Γ(k + d/2)},\qquad E\,u_1^{2k+1} = 0.

* Lemma 3 (Eqs 22-23) writes the even moment as the product
  ``A(2k, d) = (2k-1)!!/((d+2k-2)(d+2k-4)···d)``; :func:`lemma3_moment` evaluates that expression as
  the paper writes it, so that claims can compare it with an independent evaluation.
* Angle density (Eq 24): ``p_d(θ) = sin^{d-2}θ / ∫_0^π sin^{d-2}`` on ``[0, π]`` (``d >= 2``).
* ``F(k, d) = ∫_0^π cos^kθ sin^dθ dθ`` (Eq 25) has the Beta-function closed form
  ``B((k+1)/2, (d+1)/2)`` for even ``k`` and 0 for odd ``k``; the proof's recursion
  ``F(k, d) = ((k-1)/(d+1)) F(k-2, d+2)``, its unrolled form (Eq 26) and the sine-power recursion (Eq 27)
  are exposed as the factors the paper states (:func:`eq25_factor`, :func:`eq26_factor`,
  :func:`eq27_factor`).

Everything is computed with ``scipy.special.gammaln`` (log space) and is exact up to round-off.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

__all__ = [
    "log_coordinate_moment",
    "coordinate_moment",
    "lemma3_moment",
    "coordinate_density",
    "angle_density",
    "sine_power_integral",
    "cos_sin_integral",
    "eq25_factor",
    "eq26_factor",
    "eq27_factor",
]


def _check_dimension(d: int, minimum: int = 1) -> int:
    if int(d) != d or d < minimum:
        raise ValueError(f"d must be an integer >= {minimum}, got {d}")
    return int(d)


def _check_order(k: int, name: str = "k") -> int:
    if int(k) != k or k < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {k}")
    return int(k)


def log_coordinate_moment(p, d: int):
    """``log E u_1^p`` for ``u`` uniform on ``S^{d-1}`` (Gamma form, ``p`` may be an array of integers >= 0).

    ``-inf`` for odd ``p`` (the moment is 0).
    """
    d = _check_dimension(d)
    p = np.asarray(p)
    if np.any(p < 0) or np.any(p != np.round(p)):
        raise ValueError(f"p must be non-negative integers, got {p}")
    k = p / 2
    log_even = special.gammaln(k + 0.5) + special.gammaln(d / 2) - 0.5 * math.log(math.pi) - special.gammaln(k + d / 2)
    out = np.where(p % 2 == 0, log_even, -np.inf)
    return float(out) if out.ndim == 0 else out


def coordinate_moment(p, d: int):
    """``E u_1^p`` for ``u`` uniform on ``S^{d-1}``: 0 for odd ``p``, see :func:`log_coordinate_moment`."""
    return np.exp(log_coordinate_moment(p, d))


def lemma3_moment(k: int, d: int) -> float:
    """The paper's Lemma 3 expression ``(2k-1)!!/((d+2k-2)(d+2k-4)···d)`` (``1`` for ``k = 0``).

    Evaluated as written (a product of ``k`` ratios ``(2j+1)/(d+2j)``), without using the Gamma form.
    """
    k, d = _check_order(k), _check_dimension(d)
    j = np.arange(k)
    return float(np.exp(np.sum(np.log(2 * j + 1) - np.log(d + 2 * j))))


def coordinate_density(t, d: int):
    """Density ``c_d (1 - t²)^{(d-3)/2}`` of ``u_1`` on ``(-1, 1)`` (``d >= 2``); 0 outside."""
    d = _check_dimension(d, 2)
    t = np.asarray(t, dtype=np.float64)
    log_c = special.gammaln(d / 2) - 0.5 * math.log(math.pi) - special.gammaln((d - 1) / 2)
    inside = np.abs(t) < 1
    with np.errstate(divide="ignore", invalid="ignore"):
        dens = np.exp(log_c + (d - 3) / 2 * np.log1p(-t * t))
    return np.where(inside, dens, 0.0)


def sine_power_integral(d: int) -> float:
    """``∫_0^π sin^d θ dθ = √π Γ((d+1)/2)/Γ(d/2 + 1)`` for ``d >= 0``."""
    d = _check_order(d, "d")
    return math.exp(0.5 * math.log(math.pi) + special.gammaln((d + 1) / 2) - special.gammaln(d / 2 + 1))


def angle_density(theta, d: int):
    """Eq 24: density ``sin^{d-2}θ / ∫_0^π sin^{d-2}`` of the angle between ``u`` and ``e_1`` (``d >= 2``)."""
    d = _check_dimension(d, 2)
    theta = np.asarray(theta, dtype=np.float64)
    inside = (theta >= 0) & (theta <= np.pi)
    return np.where(inside, np.abs(np.sin(theta)) ** (d - 2) / sine_power_integral(d - 2), 0.0)


def cos_sin_integral(k: int, d: int) -> float:
    """``F(k, d) = ∫_0^π cos^kθ sin^dθ dθ``: ``B((k+1)/2, (d+1)/2)`` for even ``k``, 0 for odd ``k``."""
    k, d = _check_order(k), _check_order(d, "d")
    if k % 2:
        return 0.0
    return math.exp(special.betaln((k + 1) / 2, (d + 1) / 2))


def eq25_factor(k: int, d: int) -> float:
    """The factor of the proof's recursion ``F(k, d) = ((k-1)/(d+1)) F(k-2, d+2)`` (``k >= 2``)."""
    k, d = _check_order(k), _check_order(d, "d")
    if k < 2:
        raise ValueError(f"the recursion needs k >= 2, got {k}")
    return (k - 1) / (d + 1)


def eq26_factor(k: int, d: int) -> float:
    """Eq 26's factor ``(2k-1)!!/((d+1)(d+3)···(d+2k-1))`` in ``F(2k, d) = factor · ∫_0^π sin^{d+2k}``."""
    k, d = _check_order(k), _check_order(d, "d")
    j = np.arange(k)
    return float(np.exp(np.sum(np.log(2 * j + 1) - np.log(d + 2 * j + 1))))


def eq27_factor(d: int) -> float:
    """Eq 27's factor ``(d-1)/d`` in ``∫_0^π sin^d = ((d-1)/d) ∫_0^π sin^{d-2}`` (``d >= 2``)."""
    d = _check_dimension(d, 2)
    return (d - 1) / d
