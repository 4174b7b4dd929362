r"""Uniform convergence of trigonometric random features and the number of features (Performer Thms 4, 7).

Source: ``003_4855bc6ab225d7a6.txt`` (Choromanski et al., ICLR 2021), Theorem 4 (Sec 3), Theorem 7 and its
proof (App F.5, Eqs 76-77), F.6. Notation as in the claims register (``../shared/claims/performer.md``).

Theorem 4 (softmax attention, trigonometric ORF features). Rows of ``Q`` and ``K`` lie in the ball ``B(R)``;
the scaled rows ``x = q/d^{1/4}`` then lie in ``B(l)`` with

.. math::  l = R\,d^{-1/4}, \qquad h^* = e^{l^2/2}, \qquad δ = ε/(h^*)^2,

and ``m = Θ((d/δ²)·log(4 d^{3/4} R/δ))`` projections give ``‖Â - A‖_∞ <= ε`` with any constant probability.

Theorem 7 (general form). ``A_ij = g(q_i) K(q_i/d^{1/4}, k_j/d^{1/4}) h(k_j)`` with an RBF kernel ``K`` whose
spectral law is ``Ω``; ``g* = max_{B(l)} |g|``, ``h* = max_{B(l)} |h|``, ``δ = ε/(g* h*)``, ``σ = E_Ω ωᵀω`` and

.. math::  m = Ω\Big(\frac{d}{δ^2}\log\frac{4σR}{δ\,d^{1/4}}\Big),

which for the softmax case (Gaussian ``K``, ``σ = d``, ``g = h = exp(‖·‖²/2)``) is Theorem 4's expression.
The proof bounds ``‖B̂ - B‖_∞ <= δ`` (Eq 76, ``diam = 4R/d^{1/4}``) and then
``‖D_Q(B̂ - B)D_K‖_∞ <= ‖D_Q‖_∞ ‖B̂ - B‖_∞ ‖D_K‖_∞ <= δ g* h*`` (Eq 77).

Design notes
------------
* Everything that can overflow is returned as a logarithm (``log_g_star``, ``log_precision``); the predicted
  number of features is ``inf`` where it diverges (``δ -> 0``) and a ``ValueError`` where the formula has no
  meaning: the logarithm's argument ``4σR/(δ d^{1/4})`` must exceed 1, otherwise the "number of features" is
  zero or negative.
* The matrix ∞-norm is not defined in the paper. :func:`matrix_inf_norm` implements both readings of the
  register: ``"E"`` (entrywise maximum) and ``"R"`` (induced ∞-norm, the largest absolute row sum). Both are
  sub-multiplicative for the diagonal scalings of Eq 77.
* Spectral laws: the Gaussian kernel ``exp(-‖z‖²/2)`` has ``Ω = N(0, I_d)``; the Matérn kernel with
  smoothness ``ν`` and unit length-scale, ``k(r) = 2^{1-ν}/Γ(ν) (√(2ν) r)^ν K_ν(√(2ν) r)``, has the
  multivariate Student-t law with ``2ν`` degrees of freedom and identity scale, ``ω = g/√(χ²_{2ν}/(2ν))``,
  so ``σ = E‖g‖² · E[2ν/χ²_{2ν}] = d·ν/(ν - 1)`` for ``ν > 1`` (infinite for ``ν <= 1``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

__all__ = [
    "NORM_READINGS",
    "PREFACTORS",
    "RBF_KERNELS",
    "scaled_radius",
    "log_ball_max",
    "log_precision",
    "spectral_second_moment",
    "predicted_features",
    "predicted_features_softmax",
    "log_prefactor",
    "matern_kernel",
    "matrix_inf_norm",
]

#: Readings of the paper's matrix ∞-norm: entrywise maximum (E) or induced ∞-norm (R).
NORM_READINGS = ("E", "R")

#: Row prefactors ``g``/``h`` of Theorem 7: ``exp(‖x‖²/2)`` (softmax) or the constant 1 (plain RBF kernel).
PREFACTORS = ("exp", "one")

#: RBF kernels of Theorem 7 with their Matérn smoothness (``None``: Gaussian).
RBF_KERNELS = {"gaussian": None, "matern32": 1.5, "matern52": 2.5}


def scaled_radius(R: float, d: int) -> float:
    """``l = R·d^{-1/4}``: the radius of the ball holding the scaled rows ``q/d^{1/4}`` (Theorem 4)."""
    if not R > 0 or not d >= 1:
        raise ValueError(f"need R > 0 and d >= 1, got R={R}, d={d}")
    return R * d ** -0.25


def log_prefactor(kind: str, sq_norm):
    """``log g(x)`` for a prefactor of :data:`PREFACTORS`, given ``‖x‖²`` (array or float)."""
    if kind == "exp":
        return 0.5 * np.asarray(sq_norm, dtype=np.float64)
    if kind == "one":
        return np.zeros_like(np.asarray(sq_norm, dtype=np.float64))
    raise ValueError(f"unknown prefactor {kind!r}; expected one of {PREFACTORS}")


def log_ball_max(kind: str, radius: float) -> float:
    """``log max_{‖x‖<=radius} |g(x)|`` for a prefactor of :data:`PREFACTORS` (``log g*``, ``log h*``).

    ``exp(‖x‖²/2)`` is radial and increasing, so its maximum is at ``‖x‖ = radius``: ``log h* = l²/2``.
    """
    if not radius >= 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    return float(log_prefactor(kind, radius * radius))


def log_precision(epsilon: float, log_g_star: float, log_h_star: float) -> float:
    """``log δ = log ε - log g* - log h*`` (Theorem 7; Theorem 4 has ``g* = h* = h*``)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    return math.log(epsilon) - log_g_star - log_h_star


def spectral_second_moment(kernel: str, d: int) -> float:
    """``σ = E_{ω~Ω} ωᵀω`` for an RBF kernel of :data:`RBF_KERNELS` in dimension ``d``.

    Gaussian: ``d``. Matérn-ν (Student-t with ``2ν`` degrees of freedom): ``d·ν/(ν-1)``, ``inf`` for ``ν <= 1``.
    """
    if kernel not in RBF_KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; expected one of {tuple(RBF_KERNELS)}")
    if not d >= 1:
        raise ValueError(f"d must be >= 1, got {d}")
    nu = RBF_KERNELS[kernel]
    if nu is None:
        return float(d)
    return d * nu / (nu - 1) if nu > 1 else math.inf


def predicted_features(d: int, R: float, delta: float, sigma: float) -> float:
    r"""Theorem 7's number of projections ``(d/δ²)·log(4σR/(δ d^{1/4}))`` (its constant set to 1).

    Returns ``inf`` when ``δ`` underflows the expression; raises ``ValueError`` when the logarithm's
    argument is ``<= 1`` (the formula gives no positive number of features there).
    """
    if not (d >= 1 and R > 0 and delta > 0 and sigma > 0):
        raise ValueError(f"need d >= 1 and R, delta, sigma > 0, got d={d}, R={R}, delta={delta}, sigma={sigma}")
    log_arg = math.log(4.0) + math.log(sigma) + math.log(R) - math.log(delta) - 0.25 * math.log(d)
    if not log_arg > 0:
        raise ValueError(f"log(4σR/(δ d^(1/4))) = {log_arg:.3g} <= 0: the predicted number of features is "
                         "not positive (R too small or δ too large for the formula)")
    log_m = math.log(d) - 2.0 * math.log(delta) + math.log(log_arg)
    return math.exp(log_m) if log_m < 709.0 else math.inf


def predicted_features_softmax(d: int, R: float, delta: float) -> float:
    """Theorem 4's ``m_pred = (d/δ²)·log(4 d^{3/4} R/δ)``: :func:`predicted_features` with ``σ = d``."""
    return predicted_features(d, R, delta, spectral_second_moment("gaussian", d))


def matern_kernel(r, nu: float) -> np.ndarray:
    r"""Matérn kernel with unit length-scale, ``k(r) = 2^{1-ν}/Γ(ν)·(√(2ν) r)^ν K_ν(√(2ν) r)``, ``k(0) = 1``.

    Half-integer smoothness uses the closed forms ``ν = 1/2: e^{-r}``, ``3/2: (1 + √3 r) e^{-√3 r}``,
    ``5/2: (1 + √5 r + 5r²/3) e^{-√5 r}``; other ``ν`` the Bessel form (scipy ``kv``).
    """
    r = np.asarray(r, dtype=np.float64)
    if (r < 0).any() or not np.isfinite(r).all():
        raise ValueError("r must be finite and >= 0")
    if not nu > 0:
        raise ValueError(f"nu must be > 0, got {nu}")
    closed = {0.5: lambda s: np.ones_like(s), 1.5: lambda s: 1 + s, 2.5: lambda s: 1 + s + s * s / 3}
    s = math.sqrt(2 * nu) * r
    if nu in closed:
        return closed[nu](s) * np.exp(-s)
    with np.errstate(invalid="ignore", over="ignore"):
        out = 2 ** (1 - nu) / special.gamma(nu) * s**nu * special.kv(nu, s)
    return np.where(s == 0, 1.0, np.nan_to_num(out, nan=0.0))


def matrix_inf_norm(m, reading: str) -> np.ndarray:
    """The paper's ``‖M‖_∞`` over the last two axes: ``"E"`` ``max_ij |M_ij|``, ``"R"`` ``max_i Σ_j |M_ij|``."""
    a = np.abs(np.asarray(m, dtype=np.float64))
    if a.ndim < 2:
        raise ValueError(f"need a matrix (at least 2 dimensions), got shape {a.shape}")
    if reading == "E":
        return a.max(axis=(-2, -1))
    if reading == "R":
        return a.sum(axis=-1).max(axis=-1)
    raise ValueError(f"unknown norm reading {reading!r}; expected one of {NORM_READINGS}")
