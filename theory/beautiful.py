r"""Exact theory of beautiful functions and orthogonal ensembles (Performer ``003_4855bc6ab225d7a6.txt``, F.4).

Notation (register ``performer.md``): ``Ω`` is an isotropic law, ``ω = R·u`` with ``u`` uniform on
``S^{d-1}`` and an independent radius ``R`` (:class:`~rfkit.base.laws.IsotropicLaw`); ``g(u) =
Σ a_s u^s`` with ``a_s >= 0`` (:class:`~rfkit.base.laws.Maclaurin`); ``Y = ωᵀz``, ``X = g(Y)``,
``s = ‖z‖²``; ``F = F_{Ω,g}(z) = E X``; ``μ_d(j) = E‖g‖^j = 2^{j/2}Γ((d+j)/2)/Γ(d/2)`` (chi moments);
an orthogonal ensemble has a Haar ``m``-frame of directions and independent radii (Eq 53).

What is here, each with its source:

* moments — :func:`log_chi_moment` (``μ_d``), :func:`log_radial_moment` (``E R^j``),
  :func:`log_projection_moment` (``E Y^j = E R^j s^{j/2} E r^j / μ_d(j)``, Eqs 54-56 with ``m = 1``),
  :func:`normalized_gaussian_moment` (Lemma 5, Eq 57), :func:`frame_moment` (``E Π (u_iᵀẑ)^{k_i}`` for a Haar
  frame by a recursion of Beta integrals — a derivation independent of Lemma 5);
* :func:`tau` (Eqs 63, 65), :func:`log_mixed_moment_factor` (``L``, Eq 61), :func:`mixed_moment_gap`
  (``Δ̂ = L(1 - τ)``, Eq 62), and the two sides :func:`mixed_moment` (iid, Eq 56; ort, Eqs 54-55);
* series in ``(a_s)``: :func:`beautiful_value` (``F``), :func:`term_variance`, :func:`ort_pair_moment`
  (``E X_1X_2`` for an orthogonal pair), :func:`ort_pair_gap` (``F² - E X_1X_2`` without cancellation),
  :func:`mse` (iid and ort, Eqs 69-73), :func:`mse_gap_series`
  (Eq 74), :func:`thm6_improvement` (the bound of Theorem 6, Eq 42);
* closed forms: ``F_{N(0,I),exp}(z) = e^{s/2}`` and :func:`log_sphere_exp_mean`
  (``F_{Ω_reg,exp}(z) = ₀F₁(; d/2; d s/4)``, the SMREG/Λ ratio of Remark 1 and Eq 30);
* the ORF projection law (derived.orf_projection_law): :func:`coordinate_logpdf`, :func:`frame_logpdf`,
  :func:`frame_rule` (a tensor quadrature rule for the frame's projections) and :func:`frame_expectation`;
* moment generating functions: :func:`log_mgf` (``log M_X(θ)``; ``inf`` where it diverges, detected
  analytically for Gaussian ``Ω``: derived.gaussian_prf_mgf) and :func:`log_mgf_ort`
  (``log E e^{θ(X_1+...+X_m)}`` for an orthogonal ensemble, ``m <= 3``, by quadrature of the projection law);
* tail bounds: :func:`lemma4_log_bound` (Eq 40, both printed signs), :func:`log_orf_gap_bound`
  (the right-hand side of Eq 68 and the correction of Theorem 5), :func:`thm5_bound` (Eq 41),
  :func:`thm3_log_correction` (Theorem 3's correction as printed) and :func:`minimize_over_theta`.

Design notes
------------
* Everything is computed in log space; sums of non-negative terms use log-sum-exp. Series are truncated
  adaptively (the length doubles until the last terms are below ``1e-20`` of the largest) and are exact
  for polynomials. Differences of two positive quantities that are equal to leading order (variances,
  ``E X_1X_2^{iid} - E X_1X_2^{ort}``) are expanded into series of non-negative terms first, so that
  no cancellation occurs (``E Y^{t+u} - E Y^t E Y^u >= 0`` and ``1 - τ >= 0`` termwise).
* Quadrature uses the tanh-sinh (double exponential) rule: it integrates the algebraic endpoint
  weights ``(1 - t²)^{(d-3)/2}`` of the projection law exactly in form, and its nodes crowd the
  endpoints doubly exponentially, which resolves the boundary layer of ``exp(θ g(c t))`` at ``t = 1``
  that large ``θ`` creates. Rules are self-normalised (weights of the density sum to one).
* A divergent quantity is ``inf``, never a large finite number or ``nan``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from rfkit.base.laws import IsotropicLaw, Maclaurin
from rfkit.theory.smreg import log_hyp0f1

__all__ = [
    "log_chi_moment", "log_gaussian_moment", "log_radial_moment", "log_projection_moment",
    "normalized_gaussian_moment", "frame_moment", "tau", "log_tau", "log_mixed_moment_factor",
    "mixed_moment", "mixed_moment_gap", "beautiful_value", "log_beautiful_value", "log_sphere_exp_mean",
    "term_variance", "ort_pair_moment", "ort_pair_gap", "ort_pair_moment_quadrature", "mse", "mse_gap_series",
    "thm6_improvement", "term_range", "coordinate_logpdf", "frame_logpdf", "frame_rule", "frame_expectation",
    "mgf_diverges", "log_mgf", "log_mgf_ort", "ORT_CHECK_STEPS", "gaussian_mgf_lower_bound",
    "truncated_mgf_gaussian", "SignedLog", "lemma4_log_bound", "log_orf_gap_bound", "thm5_bound",
    "thm3_log_correction", "minimize_over_theta",
]

_LOG_EPS = -46.0  # log(1e-20): relative size below which a series' tail is negligible
_MAX_TERMS = 1 << 13
_CHUNK = 1 << 21  # quadrature points evaluated at once

# ------------------------------------------------------------------------------------------ moments


def log_chi_moment(d: int, j) -> np.ndarray:
    """``log μ_d(j)``, ``μ_d(j) = E‖g‖^j = 2^{j/2} Γ((d+j)/2)/Γ(d/2)`` for ``g ~ N(0, I_d)`` (Lemma 6)."""
    j = np.asarray(j, dtype=np.float64)
    return 0.5 * j * math.log(2.0) + special.gammaln((d + j) / 2) - special.gammaln(d / 2)


def log_gaussian_moment(j) -> np.ndarray:
    """``log E r^j`` for ``r ~ N(0, 1)``: ``log (j-1)!!`` for even ``j``, ``-inf`` for odd ``j``."""
    j = np.asarray(j)
    out = 0.5 * j * math.log(2.0) + special.gammaln((j + 1) / 2) - special.gammaln(0.5)  # exactly 0 at j = 0
    return np.where(j % 2 == 0, out, -np.inf)


def log_radial_moment(law: IsotropicLaw, j) -> np.ndarray:
    """``log E R^j`` of the radial law (``j >= 0``)."""
    j = np.asarray(j, dtype=np.float64)
    if law.radial == "chi":
        return log_chi_moment(law.d, j)
    out = j * math.log(law.radius)
    return out - np.log1p(j) if law.radial == "uniform" else out


def _j_log_norm(j: np.ndarray, z_norm: float) -> np.ndarray:
    """``j·log‖z‖`` with ``0·log 0 = 0``."""
    if z_norm > 0:
        return j * math.log(z_norm)
    return np.where(j == 0, 0.0, -np.inf)


def log_projection_moment(law: IsotropicLaw, z_norm: float, j) -> np.ndarray:
    """``log E (ωᵀz)^j`` (``-inf`` for odd ``j``): ``E R^j ‖z‖^j E r^j / μ_d(j)`` (Eq 56 with ``m = 1``)."""
    j = np.asarray(j)
    return (log_radial_moment(law, j) + _j_log_norm(j, z_norm) + log_gaussian_moment(j)
            - log_chi_moment(law.d, j))


def normalized_gaussian_moment(d: int, ks: Sequence[int]) -> float:
    """Lemma 5's right-hand side ``Π E g_i^{k_i} / E‖g‖^{Σk}`` (Eq 57), ``= E Π g_i^{k_i}/‖g‖^{Σk}``."""
    ks = np.asarray(ks)
    return float(np.exp(log_gaussian_moment(ks).sum() - log_chi_moment(d, ks.sum())))


def _log_coordinate_moment(n: int, a, b) -> np.ndarray:
    """``log E[s^a (1 - s²)^b]`` for ``s`` the first coordinate of a uniform point of ``S^{n-1}`` (vectorised).

    ``n >= 2``: the Beta integral ``B((a+1)/2, (n-1)/2 + b)/B(1/2, (n-1)/2)`` for even ``a`` (``-inf`` for odd
    ``a``); ``n = 1``: ``s = ±1``, so the moment is 1 for ``b = 0`` and 0 otherwise.
    """
    a, b = np.asarray(a), np.asarray(b, dtype=np.float64)
    if n == 1:
        out = np.where(b == 0, 0.0, -np.inf)
    else:
        out = special.betaln((a + 1) / 2, (n - 1) / 2 + b) - special.betaln(0.5, (n - 1) / 2)
    return np.where(a % 2 == 0, out, -np.inf)


def frame_moment(d: int, ks: Sequence[int]) -> float:
    """``E Π_i (u_iᵀẑ)^{k_i}`` for a Haar frame ``u_1..u_m`` (``m = len(ks) <= d``), exactly.

    Derivation independent of Lemma 5: ``(u_iᵀẑ)_i`` are the first ``m`` coordinates of a uniform point
    ``v`` of ``S^{d-1}``; peeling coordinates, ``v_1 = s_1``, ``v_j = s_j Π_{l<j} (1 - s_l²)^{1/2}`` with
    ``s_j`` the first coordinate of a uniform point of ``S^{d-j}``, independent, so the moment is
    ``Π_j E[s_j^{k_j} (1 - s_j²)^{(k_{j+1}+...+k_m)/2}]``, a product of Beta integrals.
    """
    ks = [int(k) for k in ks]
    if len(ks) > d:
        raise ValueError(f"a frame in R^{d} has at most {d} vectors, got {len(ks)} exponents")
    total = 0.0
    for j, k in enumerate(ks):
        total += float(_log_coordinate_moment(d - j, k, sum(ks[j + 1:]) / 2))
        if total == -math.inf:
            return 0.0
    return math.exp(total)


def log_tau(d: int, ks) -> float:
    """``log τ(d_1..d_m) = Σ log μ_d(d_i) - log μ_d(Σ d_i)`` (Eqs 63, 65)."""
    ks = np.asarray(ks)
    return float(log_chi_moment(d, ks).sum() - log_chi_moment(d, ks.sum()))


def tau(d: int, ks) -> float:
    """``τ(d_1..d_m) = Π μ_d(d_i) / μ_d(Σ d_i)`` (Eq 65)."""
    return math.exp(log_tau(d, ks))


def log_mixed_moment_factor(law: IsotropicLaw, z_norm: float, ks) -> float:
    """``log L(d_1..d_m)`` (Eq 61): ``Π E‖ω‖^{d_i} · ‖z‖^{Σd} · Π E g_i^{d_i} / Π μ_d(d_i)``; ``-inf`` if a ``d_i``
    is odd."""
    ks = np.asarray(ks)
    return float((log_radial_moment(law, ks) + log_gaussian_moment(ks) - log_chi_moment(law.d, ks)).sum()
                 + _j_log_norm(ks.sum(), z_norm))


def mixed_moment(law: IsotropicLaw, z_norm: float, ks, *, orthogonal: bool) -> float:
    """``E Π_i (ω_iᵀz)^{d_i}`` for iid rows (Eq 56) or an orthogonal ensemble (Eqs 54-55).

    Both from the radial moments; the orthogonal side's direction moment is :func:`frame_moment` (not
    Lemma 5), so ``mixed_moment(iid) - mixed_moment(ort)`` is an independent route to Eq 62.
    """
    ks = np.asarray(ks)
    if not orthogonal:
        return float(np.exp(log_projection_moment(law, z_norm, ks).sum()))
    direction = frame_moment(law.d, ks)
    if direction == 0:
        return 0.0
    return float(np.exp(log_radial_moment(law, ks).sum() + _j_log_norm(ks.sum(), z_norm)) * direction)


def mixed_moment_gap(law: IsotropicLaw, z_norm: float, ks) -> float:
    """``Δ̂(d_1..d_m) = L(d_1..d_m)(1 - τ(d_1..d_m))`` (Eq 62); 0 if some ``d_i`` is odd."""
    log_l = log_mixed_moment_factor(law, z_norm, ks)
    if log_l == -math.inf:
        return 0.0
    return math.exp(log_l) * -math.expm1(log_tau(law.d, ks))


# ------------------------------------------------------------------------------------------- series


def _series_length(terms: Callable[[int], np.ndarray], start: int) -> int:
    """Smallest doubling of ``start`` whose last terms (log, 1-D or 2-D) are negligible against the largest."""
    n = start
    while n < _MAX_TERMS:
        t = terms(n)
        edge = np.concatenate([t[..., -4:].ravel(), t[-4:, ...].ravel()]) if t.ndim == 2 else t[-4:]
        top = t.max()
        if top == -np.inf or edge.max() < top + _LOG_EPS:
            return n
        n *= 2
    raise ArithmeticError(f"series did not converge within {_MAX_TERMS} terms")


def _start_length(g: Maclaurin) -> int:
    return g.degree + 1 if g.degree is not None else 64


def _fixed_length(g: Maclaurin) -> bool:
    return g.degree is not None


def _single_terms(g: Maclaurin, law: IsotropicLaw, z_norm: float, n: int) -> np.ndarray:
    return g.log_coefficients(n) + log_projection_moment(law, z_norm, np.arange(n))


def _lse(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    """``log Σ exp(x)`` along ``axis`` (``-inf`` for an all ``-inf`` slice, ``inf`` if an entry is ``inf``).

    A lean version of :func:`scipy.special.logsumexp` for the quadrature and series hot paths.
    """
    top = np.max(x, axis=axis, keepdims=True)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(np.sum(np.exp(x - shift), axis=axis, keepdims=True)) + shift
    out = np.where(np.isposinf(top), np.inf, out)
    return out.squeeze(axis=axis) if axis is not None else out.reshape(())


def _logsumexp(x: np.ndarray) -> float:
    return float(_lse(x))


def _series(g: Maclaurin, terms: Callable[[int], np.ndarray]) -> float:
    """``log Σ exp(terms)`` of a (double) series in ``g``'s coefficients, truncated adaptively."""
    n = _start_length(g) if _fixed_length(g) else _series_length(terms, _start_length(g))
    return _logsumexp(terms(n))


def log_beautiful_value(g: Maclaurin, law: IsotropicLaw, z_norm: float) -> float:
    """``log F_{Ω,g}(z) = log Σ_t a_t E(ωᵀz)^t`` (the series behind Eq 74's ``F`` line); ``-inf`` if ``F = 0``."""
    return _series(g, lambda n: _single_terms(g, law, z_norm, n))


def beautiful_value(g: Maclaurin, law: IsotropicLaw, z_norm: float) -> float:
    """``F_{Ω,g}(z) = E g(ωᵀz)`` (Definition 1, Eq 36), exactly (series in the Maclaurin coefficients).

    Closed forms it reproduces: ``e^{‖z‖²/2}`` for ``N(0, I_d)`` and ``exp``;
    ``₀F₁(; d/2; d‖z‖²/4)`` (:func:`log_sphere_exp_mean`) for ``Ω_reg`` and ``exp``.
    """
    return math.exp(log_beautiful_value(g, law, z_norm))


def log_sphere_exp_mean(z_norm: float, d: int) -> float:
    """``log E exp(√d ω̂ᵀz) = log ₀F₁(; d/2; d‖z‖²/4)`` for ``ω̂`` uniform on ``S^{d-1}`` (Eq 30).

    This is ``F_{Ω_reg,exp}(z) = SMREG(x, y)/Λ`` (Remark 1); one implementation serves both:
    :func:`rfkit.theory.smreg.log_hyp0f1`.
    """
    return float(log_hyp0f1(d / 2, d * z_norm * z_norm / 4))


def _log1mexp(x: np.ndarray) -> np.ndarray:
    """``log(1 - e^x)`` for ``x <= 0`` (``-inf`` at 0), accurate near both ends."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > -math.log(2), np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _pair_grid(n: int):
    t = np.arange(n)
    return t[:, None], t[None, :]


def _variance_terms(g: Maclaurin, law: IsotropicLaw, z_norm: float, n: int) -> np.ndarray:
    """``log[a_t a_u (E Y^{t+u} - E Y^t E Y^u)]`` (each term ``>= 0``)."""
    t, u = _pair_grid(n)
    la = g.log_coefficients(n)
    ey = log_projection_moment(law, z_norm, np.arange(2 * n))
    joint, prod = ey[t + u], ey[t] + ey[u]
    with np.errstate(invalid="ignore"):  # E Y^{t+u} >= E Y^t E Y^u: clip round-off above 0
        diff = joint + _log1mexp(np.where(np.isfinite(joint), np.minimum(prod - joint, 0.0), -np.inf))
    return la[t] + la[u] + np.where(np.isfinite(joint), diff, -np.inf)


def term_variance(g: Maclaurin, law: IsotropicLaw, z_norm: float) -> float:
    """``Var X = E g(ωᵀz)² - F²`` as a series of non-negative terms ``a_t a_u (E Y^{t+u} - E Y^t E Y^u)``."""
    return math.exp(_series(g, lambda n: _variance_terms(g, law, z_norm, n)))


def _pair_gap_terms(g: Maclaurin, law: IsotropicLaw, z_norm: float, n: int) -> np.ndarray:
    """``log[a_t a_u E Y^t E Y^u (1 - τ(t, u))]`` (Eq 74's summand without ``1 - 1/m``)."""
    t, u = _pair_grid(n)
    la = g.log_coefficients(n)
    ey = log_projection_moment(law, z_norm, np.arange(n))
    lmu = log_chi_moment(law.d, np.arange(2 * n))
    log_tau_tu = lmu[t] + lmu[u] - lmu[t + u]
    return la[t] + la[u] + ey[t] + ey[u] + _log1mexp(np.minimum(log_tau_tu, 0.0))


def mse_gap_series(g: Maclaurin, law: IsotropicLaw, z_norm: float, m: int) -> float:
    r"""Eq 74: ``MSE(F̂^iid_m) - MSE(F̂^ort_m) = (1 - 1/m) Σ_{t,u} a_t a_u ‖z‖^{t+u} E‖ω‖^t E‖ω‖^u
    E r^t E r^u / (μ_d(t) μ_d(u)) · (1 - τ(t, u))``."""
    if m == 1:
        return 0.0
    return (1 - 1 / m) * math.exp(_series(g, lambda n: _pair_gap_terms(g, law, z_norm, n)))


def _ort_pair_terms(g: Maclaurin, law: IsotropicLaw, z_norm: float, n: int) -> np.ndarray:
    """``log[a_t a_u E[(ω_1ᵀz)^t (ω_2ᵀz)^u]]`` for an orthogonal pair, with :func:`frame_moment`'s recursion."""
    t, u = _pair_grid(n)
    la = g.log_coefficients(n)
    lr = log_radial_moment(law, np.arange(n))
    log_dir = _log_coordinate_moment(law.d, t, u / 2) + _log_coordinate_moment(law.d - 1, u, 0 * u)
    return la[t] + la[u] + lr[t] + lr[u] + _j_log_norm(t + u, z_norm) + log_dir


def ort_pair_moment(g: Maclaurin, law: IsotropicLaw, z_norm: float) -> float:
    """``E[X_1 X_2]`` for an orthogonal pair ``ω_1 ⊥ ω_2`` (``d >= 2``), by the frame-moment series.

    ``Σ_{t,u even} a_t a_u E R^t E R^u ‖z‖^{t+u} E[(u_1ᵀẑ)^t (u_2ᵀẑ)^u]`` with the direction moment from the
    Beta-integral recursion of :func:`frame_moment`, independent of Lemma 5 and of ``τ``.
    """
    if law.d < 2:
        raise ValueError("an orthogonal pair needs d >= 2")
    return math.exp(_series(g, lambda n: _ort_pair_terms(g, law, z_norm, n)))


def ort_pair_gap(g: Maclaurin, law: IsotropicLaw, z_norm: float) -> float:
    """``F² - E[X_1 X_2]`` for an orthogonal pair (Eq 73's bracket), without cancellation.

    The terms with ``t = 0`` or ``u = 0`` are equal on both sides (one row's marginal is the iid one), so
    ``F² - E X_1X_2 = (F - a_0)² - Σ_{t,u >= 1} a_t a_u E[(ω_1ᵀz)^t (ω_2ᵀz)^u]``, both ``O(‖z‖⁴)`` at small ``‖z‖``
    and apart by a share ``~2/(d+2)``. ``F²`` and ``E X_1X_2`` (:func:`ort_pair_moment`) are each ``a_0² + O(‖z‖²)``:
    their difference in floating point is round-off once ``‖z‖⁴ < eps·a_0²`` (``‖z‖ ~ 1e-4``). Same frame-moment
    series as :func:`ort_pair_moment`."""
    if law.d < 2:
        raise ValueError("an orthogonal pair needs d >= 2")

    def pair_terms(n: int) -> np.ndarray:
        t, u = _pair_grid(n)
        return np.where((t > 0) & (u > 0), _ort_pair_terms(g, law, z_norm, n), -np.inf)

    return _excess(g, law, z_norm) ** 2 - math.exp(_series(g, pair_terms))


def _excess(g: Maclaurin, law: IsotropicLaw, z_norm: float) -> float:
    """``F_{Ω,g}(z) - a_0``, summed from the terms ``s >= 1`` (no cancellation against ``a_0``)."""
    return math.exp(_series(g, lambda n: np.where(np.arange(n) > 0, _single_terms(g, law, z_norm, n), -np.inf)))


def mse(g: Maclaurin, law: IsotropicLaw, z_norm: float, m: int, *, orthogonal: bool) -> float:
    """``MSE(F̂_m(z)) = Var X / m + (1 - 1/m) Cov(X_1, X_2)`` (Eqs 69-72); ``Cov = 0`` for iid rows.

    The orthogonal covariance is ``E X_1X_2^{ort} - F² = -(Eq 74 summand)``, a series of non-positive terms.
    """
    var = term_variance(g, law, z_norm) / m
    if not orthogonal or m == 1:
        return var
    return var - mse_gap_series(g, law, z_norm, m)


def term_range(g: Maclaurin, law: IsotropicLaw, z_norm: float) -> tuple[float, float]:
    r"""An interval ``[lo, hi]`` that contains every term ``g(ωᵀz)`` for a bounded radial law (``‖ω‖ <= R``).

    With ``L = R‖z‖``, ``|ωᵀz| <= L``, and since every ``a_s >= 0``: ``g(u) <= Σ a_s |u|^s = g(L)``; the even
    part is ``>= a_0`` and the odd part ``>= -Σ_{s odd} a_s L^s = -(g(L) - g(-L))/2``, so
    ``lo = max(-g(L), a_0 - (g(L) - g(-L))/2)`` and ``hi = g(L)``. The estimate ``F̂`` (a mean of terms) and
    ``F = E g(ωᵀz)`` lie in it, hence ``(F̂ - F)² <= max(hi - F, F - lo)²``: a range for a betting sequence
    on squared errors, whatever the dependence between the terms (orthogonal rows included).
    ``g(±L)`` from the Maclaurin parameters (closed forms for ``exp``/``cosh``, the polynomial's sum).
    """
    if not law.bounded:
        raise ValueError("term_range needs a bounded radial law (every law but 'chi')")
    big = float(law.radius) * float(z_norm)

    def value(u: float) -> float:
        if g.kind == "exp":
            return g.scale * math.exp(g.rate * u)
        if g.kind == "cosh":
            return g.scale * math.cosh(g.rate * u)
        return math.fsum(a * u**s for s, a in enumerate(g.coefficients))

    hi, low_end = value(big), value(-big)
    return max(-hi, g.a0 - (hi - low_end) / 2), hi


def thm6_improvement(g: Maclaurin, law: IsotropicLaw, z_norm: float, m: int) -> float:
    """Theorem 6's guaranteed improvement ``(1 - 1/m)·(2/(d+2))·(F_{Ω,g}(z) - a_0)²`` (Eq 42)."""
    return (1 - 1 / m) * 2 / (law.d + 2) * _excess(g, law, z_norm) ** 2


# ------------------------------------------------------------------------------- projection law


def coordinate_logpdf(t, d: int) -> np.ndarray:
    """Log density of ``uᵀẑ`` for ``u`` uniform on ``S^{d-1}`` (``d >= 2``): ``c_d (1 - t²)^{(d-3)/2}``,
    ``c_d = Γ(d/2)/(√π Γ((d-1)/2))`` (derived.orf_projection_law, ``m = 1``); ``-inf`` outside ``(-1, 1)``."""
    if d < 2:
        raise ValueError("the coordinate law has a density only for d >= 2 (d = 1: t = ±1)")
    t = np.asarray(t, dtype=np.float64)
    log_c = special.gammaln(d / 2) - 0.5 * math.log(math.pi) - special.gammaln((d - 1) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = log_c + (d - 3) / 2 * np.log1p(-t * t)
    return np.where(np.abs(t) < 1, out, -np.inf)


def frame_logpdf(t, d: int) -> np.ndarray:
    """Log density of ``(u_1ᵀẑ, ..., u_mᵀẑ)`` for a Haar ``m``-frame, ``m = t.shape[-1] < d``:
    ``Γ(d/2)/(π^{m/2} Γ((d-m)/2)) (1 - ‖t‖²)^{(d-m-2)/2}`` on the open unit ball (derived.orf_projection_law).
    For ``m = d`` the vector is uniform on ``S^{d-1}`` (no density on ``R^m``)."""
    t = np.asarray(t, dtype=np.float64)
    m = t.shape[-1]
    if not 1 <= m < d:
        raise ValueError(f"the frame law has a density on R^m only for 1 <= m < d, got m={m}, d={d}")
    r2 = (t * t).sum(axis=-1)
    log_c = special.gammaln(d / 2) - m / 2 * math.log(math.pi) - special.gammaln((d - m) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = log_c + (d - m - 2) / 2 * np.log1p(-r2)
    return np.where(r2 < 1, out, -np.inf)


def _log_cosh(u: np.ndarray) -> np.ndarray:
    a = np.abs(u)
    return a + np.log1p(np.exp(-2 * a)) - math.log(2)


@functools.lru_cache(maxsize=64)
def _coordinate_rule(n: int, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Tanh-sinh rule for ``E f(s)``, ``s`` the first coordinate of a uniform point of ``S^{n-1}``.

    The step shrinks like ``3/√n`` for ``n > 9`` (the density ``(1 - s²)^{(n-3)/2}`` concentrates in a window of
    width ``~1/√n``). Returns nodes and log weights summing to one (self-normalised). ``n = 1``: the atoms ``±1``.
    """
    if n == 1:
        return np.array([-1.0, 1.0]), np.full(2, -math.log(2))
    step = step * min(1.0, 3.0 / math.sqrt(n))  # the density's width is ~1/√n: refine the centre with n
    x = np.arange(-4.5, 4.5 + step / 2, step)
    u = 0.5 * math.pi * np.sinh(x)
    log_w = np.log(np.cosh(x)) - 2 * _log_cosh(u) + (n - 3) / 2 * (-2 * _log_cosh(u))
    log_w = log_w - _lse(log_w)
    keep = log_w > -800
    return np.tanh(u)[keep], log_w[keep]


@functools.lru_cache(maxsize=16)
def _unit_interval_rule(step: float) -> tuple[np.ndarray, np.ndarray]:
    """Tanh-sinh rule for the uniform law on ``(0, 1)`` (self-normalised)."""
    x = np.arange(-4.5, 4.5 + step / 2, step)
    u = 0.5 * math.pi * np.sinh(x)
    log_w = np.log(np.cosh(x)) - 2 * _log_cosh(u)
    log_w = log_w - _lse(log_w)
    keep = log_w > -800
    return 0.5 * (1 + np.tanh(u))[keep], log_w[keep]


def frame_rule(d: int, m: int, *, step: float | Sequence[float] = 1 / 16) -> tuple[np.ndarray, np.ndarray]:
    """Tensor quadrature rule for ``t = (u_1ᵀẑ, ..., u_mᵀẑ)``, ``u_1..u_m`` a Haar frame, ``1 <= m <= d``.

    Built from the recursion of :func:`frame_moment` (``t_j = s_j (1 - Σ_{l<j} t_l²)^{1/2}``, ``s_j`` a
    coordinate of a uniform point of ``S^{d-j}``), each ``s_j`` with a tanh-sinh rule of step ``step`` (one value,
    or one per coordinate; ``d - j = 1``: the atoms ``±1``, which makes ``m = d`` exact). Returns
    ``(nodes (N, m), log_weights (N,))``.
    """
    if not 1 <= m <= d:
        raise ValueError(f"a frame needs 1 <= m <= d, got m={m}, d={d}")
    steps = [step] * m if np.ndim(step) == 0 else list(step)
    nodes = np.zeros((1, 0))
    log_w = np.zeros(1)
    for j in range(m):
        s, ls = _coordinate_rule(d - j, steps[j])
        rest = np.sqrt(np.maximum(1.0 - (nodes * nodes).sum(axis=1), 0.0))
        new = (rest[:, None] * s[None, :]).reshape(-1, 1)
        nodes = np.concatenate([np.repeat(nodes, s.size, axis=0), new], axis=1)
        log_w = (log_w[:, None] + ls[None, :]).ravel()
    return nodes, log_w


def frame_expectation(fn: Callable[[np.ndarray], np.ndarray], d: int, m: int, *, step: float = 1 / 16) -> float:
    """``E fn(u_1ᵀẑ, ..., u_mᵀẑ)`` for a Haar ``m``-frame by :func:`frame_rule` (``fn`` maps ``(N, m) -> (N,)``)."""
    nodes, log_w = frame_rule(d, m, step=step)
    return float(np.exp(log_w) @ fn(nodes))


# ------------------------------------------------------------------------------------------- MGFs


def mgf_diverges(g: Maclaurin, law: IsotropicLaw, z_norm: float, theta: float) -> bool:
    """Whether ``M_X(θ) = E e^{θ g(ωᵀz)} = +∞`` (decided analytically; derived.gaussian_prf_mgf).

    Bounded radial laws: never. ``N(0, I_d)``: ``ωᵀz ~ N(0, s)``; for ``z ≠ 0`` and ``θ > 0`` the MGF is
    infinite unless ``g`` is a polynomial of degree ``<= 2`` with ``2θ a_2 s < 1`` (for ``exp``, ``cosh`` and
    degree ``>= 3``, ``θ g(u)`` outgrows ``u²/(2s)`` as ``u → ∞``, e.g. ``Σ_k θ^k e^{k² s/2}/k!`` diverges).
    """
    if law.bounded or z_norm == 0 or theta == 0:
        return False
    if g.degree is None or g.degree >= 3:
        return True
    a2 = g.coefficients[2] if g.degree == 2 else 0.0
    return 2 * theta * a2 * z_norm**2 >= 1


def _log_mgf_gaussian_quadratic(g: Maclaurin, z_norm: float, theta: float) -> float:
    """``log E exp(θ(a_0 + a_1 √s ξ + a_2 s ξ²))``, ``ξ ~ N(0, 1)``, for ``2θ a_2 s < 1``."""
    a = list(g.coefficients) + [0.0] * (3 - len(g.coefficients))
    s = z_norm**2
    q = 1 - 2 * theta * a[2] * s
    return theta * a[0] - 0.5 * math.log(q) + (theta * a[1]) ** 2 * s / (2 * q)


def _radial_rule(law: IsotropicLaw, step: float) -> tuple[np.ndarray, np.ndarray]:
    if law.radial == "uniform":
        r, lw = _unit_interval_rule(step)
        return law.radius * r, lw
    return np.array([law.radius]), np.zeros(1)


def _log_phi(g: Maclaurin, law: IsotropicLaw, c: np.ndarray, theta: float, step: float) -> np.ndarray:
    """``log E_R exp(θ g(R c))`` for each entry of ``c`` (bounded radial law), in chunks that bound memory."""
    r, lw = _radial_rule(law, step)
    out = np.empty(c.shape)
    flat, res = c.ravel(), out.ravel()
    size = max(1, _CHUNK // r.size)
    for i in range(0, flat.size, size):
        with np.errstate(over="ignore"):
            expo = theta * g(np.multiply.outer(flat[i:i + size], r))
        res[i:i + size] = _lse(expo + lw, axis=-1)
    return out


def log_mgf(g: Maclaurin, law: IsotropicLaw, z_norm: float, theta: float, *, step: float = 1 / 32) -> float:
    r"""``log M_X(θ) = log E exp(θ g(ωᵀz))``, ``ω ~ Ω`` (Lemma 4; derived.smreg_term_mgf); ``inf`` if divergent.

    Bounded radial laws: ``ωᵀz = R‖z‖t`` with ``t`` the coordinate law ``c_d(1 - t²)^{(d-3)/2}``,

    .. math::  M_X(θ) = E_R\, c_d \int_{-1}^{1} e^{θ g(R‖z‖t)} (1 - t²)^{(d-3)/2}\,dt

    by tanh-sinh quadrature in log space (the maximum ``θ g(R_{max}‖z‖)`` cancels inside log-sum-exp);
    ``d = 1``: ``t = ±1``. ``N(0, I_d)``: closed form for quadratic ``g``, ``inf`` where :func:`mgf_diverges`.
    """
    if theta < 0:
        raise ValueError(f"theta must be >= 0, got {theta}")
    if mgf_diverges(g, law, z_norm, theta):
        return math.inf
    if z_norm == 0 or theta == 0:
        return theta * g.a0
    if not law.bounded:
        return _log_mgf_gaussian_quadratic(g, z_norm, theta)
    t, lw = _coordinate_rule(law.d, step)
    return float(_lse(_log_phi(g, law, z_norm * t, theta, step) + lw))


#: Tanh-sinh steps per frame coordinate for :func:`log_mgf_ort` (fine first level: a large θ puts a boundary
#: layer at ``t_1 = ±1``), and a coarser rule: the change between them is a conservative error estimate.
_ORT_STEPS = {1: (1 / 32,), 2: (1 / 32, 1 / 16), 3: (1 / 32, 1 / 8, 1 / 8)}
ORT_CHECK_STEPS = {1: (1 / 24,), 2: (1 / 24, 1 / 12), 3: (1 / 24, 1 / 6, 1 / 6)}


def log_mgf_ort(g: Maclaurin, law: IsotropicLaw, z_norm: float, theta: float, m: int, *,
                step: Sequence[float] | None = None) -> float:
    """``log E exp(θ(X_1^ort + ... + X_m^ort))`` for an orthogonal ensemble, ``m <= min(3, d)`` (Eq 43).

    ``E_t Π_i φ(t_i)`` with ``φ(t) = E_R e^{θ g(R‖z‖t)}`` (independent radii) and ``t`` the frame's
    projections (:func:`frame_rule`). Bounded radial laws only (the register's ``Ω`` for Eqs 41-43).
    """
    if not 1 <= m <= min(3, law.d):
        raise ValueError(f"log_mgf_ort handles 1 <= m <= min(3, d), got m={m}, d={law.d}")
    if not law.bounded:
        raise ValueError("log_mgf_ort needs a bounded radial law")
    if z_norm == 0 or theta == 0:
        return m * theta * g.a0
    steps = tuple(step) if step is not None else _ORT_STEPS[m]
    nodes, lw = frame_rule(law.d, m, step=steps)
    log_phi = _log_phi(g, law, z_norm * nodes.ravel(), theta, steps[-1]).reshape(nodes.shape)
    return float(_lse(log_phi.sum(axis=1) + lw))


def gaussian_mgf_lower_bound(g: Maclaurin, z_norm: float, theta: float, t: float) -> float:
    """``log`` of ``P(ξ ∈ [t, t+1]) · exp(θ g(‖z‖ t))`` for ``ωᵀz = ‖z‖ξ``, ``ξ ~ N(0, 1)``: a lower bound of
    ``E e^{θ g(ωᵀz)}`` (``g`` increasing on ``[0, ∞)``), ``Ω = N(0, I_d)``. It grows without limit in ``t``
    whenever :func:`mgf_diverges` says so — the certificate of derived.gaussian_prf_mgf."""
    mass = special.log_ndtr(-t) + float(_log1mexp(special.log_ndtr(-t - 1) - special.log_ndtr(-t)))
    with np.errstate(over="ignore"):
        return float(mass + theta * g(z_norm * t))


def truncated_mgf_gaussian(g: Maclaurin, z_norm: float, theta: float, log_cap: float, *, power: int = 1) -> float:
    """``E[min(e^{θX}/C, 1)^power]`` with ``C = e^{log_cap}``, ``X = g(‖z‖ξ)``, ``ξ ~ N(0, 1)`` (``Ω = N(0, I_d)``).

    The truncated MGF in units of the cap (so that nothing overflows). For ``g`` increasing on ``[0, ∞)`` with
    ``g(u) <= g(|u|)`` (every ``g`` here) the cap binds exactly for ``ξ > u_C`` where ``θ g(‖z‖u_C) = log_cap``:
    the integral is adaptive Gauss-Kronrod below ``u_C`` plus ``Φ̄(u_C)``.
    """
    from scipy import integrate

    def integrand(u):
        with np.errstate(over="ignore"):
            expo = min(theta * float(g(z_norm * u)) - log_cap, 0.0)
        return math.exp(power * expo - u * u / 2) / math.sqrt(2 * math.pi)

    def excess(u):
        return theta * float(g(z_norm * u)) - log_cap

    if excess(0.0) >= 0:
        upper = 0.0 if excess(-40.0) >= 0 else optimize.brentq(excess, -40.0, 0.0)
    else:
        upper = optimize.brentq(excess, 0.0, 40.0) if excess(40.0) > 0 else 40.0
    # the uncapped integrand falls steeply below the cap point: break the interval there
    breaks = [b for b in (0.0, upper - 1.0, upper - 0.1, upper - 0.01) if -40.0 < b < upper]
    body = integrate.quad(integrand, -40.0, upper, points=breaks or None, epsabs=0, epsrel=1e-11, limit=400)[0]
    return body + float(special.ndtr(-upper))


# ------------------------------------------------------------------------------------- tail bounds


@dataclass(frozen=True)
class SignedLog:
    """A real number ``sign·exp(log_abs)`` (``sign`` in {-1, 0, 1}) that may be astronomically large."""

    sign: int
    log_abs: float

    @property
    def value(self) -> float:
        return self.sign * math.exp(min(self.log_abs, 709.0)) if self.sign else 0.0

    @classmethod
    def difference(cls, log_a: float, log_b: float) -> SignedLog:
        """``e^{log_a} - e^{log_b}`` without overflow."""
        if log_a == log_b:
            return cls(0, -math.inf)
        if log_a > log_b:
            return cls(1, log_a + float(_log1mexp(log_b - log_a)))
        return cls(-1, log_b + float(_log1mexp(log_a - log_b)))

    def scaled(self, log_factor: float) -> SignedLog:
        """This number times ``e^{log_factor}``."""
        return SignedLog(self.sign, self.log_abs + log_factor) if self.sign else self

    @property
    def key(self) -> float:
        """A monotone real image (``sign·log(1 + |v|)``) for ordering and minimisation."""
        return self.sign * float(np.logaddexp(0.0, self.log_abs)) if self.sign else 0.0


def lemma4_log_bound(log_mgf_value: float, theta: float, m: int, a: float, *, sign: int = -1) -> float:
    """``log[exp(sign·θ m a) M_X(θ)^m]``: Lemma 4's bound with the exponent as printed in Eq 40 (``sign=+1``)
    or as in Theorem 3 / Eq 43 (``sign=-1``, the Chernoff bound)."""
    if sign not in (-1, 1):
        raise ValueError(f"sign must be -1 or +1, got {sign}")
    return sign * theta * m * a + m * log_mgf_value


def log_orf_gap_bound(g: Maclaurin, law: IsotropicLaw, z_norm: float, theta: float, m: int) -> float:
    """``log`` of Eq 68's right-hand side (Theorem 5's correction, reading ``M = m``):
    ``θ⁴ m(m-1)/(4d²(d+2)) · a_0^{m-2} a_1² ‖z‖⁴ (E‖ω‖²)²`` (``0^0 = 1``; ``-inf`` when it vanishes)."""
    d = law.d
    if m < 2 or theta == 0 or z_norm == 0 or g.a1 == 0 or (g.a0 == 0 and m > 2):
        return -math.inf
    log_a0 = (m - 2) * math.log(g.a0) if m > 2 else 0.0
    return (4 * math.log(theta) + math.log(m * (m - 1) / (4 * d * d * (d + 2))) + log_a0
            + 2 * math.log(g.a1) + 4 * math.log(z_norm) + 2 * float(log_radial_moment(law, 2)))


def thm5_bound(g: Maclaurin, law: IsotropicLaw, z_norm: float, a: float, theta: float, m: int) -> SignedLog:
    """Theorem 5's right-hand side ``e^{-θma}(M_X(θ)^m - Eq 68 RHS)`` (Eq 41), possibly negative."""
    diff = SignedLog.difference(m * log_mgf(g, law, z_norm, theta), log_orf_gap_bound(g, law, z_norm, theta, m))
    return diff.scaled(-theta * m * a)


def thm3_log_correction(sq_norms: float, z_norm: float, theta: float, m: int, d: int) -> float:
    """``log`` of Theorem 3's correction as printed: ``exp(-(m/2)(‖x‖²+‖y‖²)) θ⁴ m(m-1)/(4(d+2)) ‖x+y‖⁴``
    (``sq_norms = ‖x‖² + ‖y‖²``); ``-inf`` when it vanishes."""
    if m < 2 or theta == 0 or z_norm == 0:
        return -math.inf
    return (-m / 2 * sq_norms + 4 * math.log(theta) + math.log(m * (m - 1) / (4 * (d + 2)))
            + 4 * math.log(z_norm))


def minimize_over_theta(key: Callable[[float], float], *, lo: float = 1e-6, hi: float = 1e6,
                        points: int = 121) -> tuple[float, float]:
    """``(θ*, key(θ*))`` minimising ``key`` over ``[lo, hi]``: a log-spaced scan, then bounded Brent around
    the best scan point (the scan guards against non-convex keys such as Theorem 5's signed bound)."""
    grid = np.geomspace(lo, hi, points)
    values = np.array([key(float(t)) for t in grid])
    values = np.where(np.isnan(values), np.inf, values)
    i = int(np.argmin(values))
    left, right = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, points - 1)])
    res = optimize.minimize_scalar(lambda lt: key(math.exp(lt)), bounds=(left, right), method="bounded",
                                   options=dict(xatol=1e-10))
    if res.fun < values[i]:
        return math.exp(res.x), float(res.fun)
    return float(grid[i]), float(values[i])


def ort_pair_moment_quadrature(g: Maclaurin, law: IsotropicLaw, z_norm: float, *, step: float = 1 / 8) -> float:
    """``E[X_1 X_2]`` for an orthogonal pair by quadrature of the pair's projection law (bounded radial laws).

    An independent route to :func:`ort_pair_moment` (used by the Eq 73 identity): ``E_t[ψ(t_1) ψ(t_2)]``,
    ``ψ(t) = E_R g(R‖z‖t)``, with :func:`frame_rule` for ``m = 2``.
    """
    if not law.bounded:
        raise ValueError("ort_pair_moment_quadrature needs a bounded radial law")
    nodes, lw = frame_rule(law.d, 2, step=step)
    r, lr = _radial_rule(law, step)
    psi = g(np.multiply.outer(z_norm * nodes, r)) @ np.exp(lr)
    return float(np.exp(lw) @ (psi[:, 0] * psi[:, 1]))
