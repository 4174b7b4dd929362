r"""Closed forms and derived predictions for RFA, RA and LARA (register ``lara.derived.*``, App D).

Seed text ``000_d62fa2cae7f5a446.txt``; register ``../shared/claims/lara.md`` ("Derived predictions to
verify"). Merged coordinates, identity-covariance Gaussians, positive map unless stated. Estimators live
in :mod:`rfkit.estimators.rfa`, :mod:`~rfkit.estimators.ra`, :mod:`~rfkit.estimators.mis` and
:mod:`~rfkit.estimators.lara`; this module states what they should equal or how they should behave.

Predictions, by register id:

* ``mixture_moments`` — :func:`mixture_moments`: ``E_{p_n}[ω] = q_n + K^Tπ_n``,
  ``Cov = I + Σ_m π_nm (k_m - K^Tπ_n)(k_m - K^Tπ_n)^T``.
* ``is_weight_second_moment`` — :func:`log_is_weight_second_moment`:
  ``E_{N(μ,I)}[(p_n/q)²] = Σ_{m,m'} π_nm π_nm' exp((q_n + k_m - μ)·(q_n + k_m' - μ))`` (from
  ``∫ N(a)N(b)/N(c) = exp((a-c)·(b-c))``).
* IS / MIS second moments (``lara.sec2_3.is_unbiased``, ``lara.eq8.mis_unbiased``, ``lara.eq9.*``) —
  :func:`is_second_moment` (exact: ``p_n f_n = Σ_m π_nm N(q_n + k_m, I) v_m`` is a Gaussian mixture, so
  ``E_q[(p_n f_n·u/q)²]`` is a sum of Gaussian-ratio integrals), :func:`mis_second_moment_bound` and
  :func:`mis_variance_bound` (exact or proven upper bounds per weighting family: constant, balance, Eq 9, Eq 37,
  bounded partitions of unity; Gaussian or Eq 32 mixture proposals), :func:`mis_group_variance_sd_bound` (fourth
  moments: the sd of a group's sample trace variance).
* ``kernel_relative_variance`` — :func:`kernel_relative_variance` (reuses
  :func:`rfkit.theory.softmax.relative_mse`; adds the random-phase map ``2 sinh²(t/2) + e^t/2``).
* ``snis_delta_bias_variance``, ``unnormalised_mis_variance``, ``ra_mse_decomposition`` — plug-in
  evaluations of the leading-order/exact formulas from (large) samples per proposal:
  :func:`snis_delta_bias_variance`, :func:`unnormalised_mis_variance`, :func:`ra_mse`; the leading-order regime's
  diagnostic :func:`snis_linearisation_factor`.
* ``eq8.mis_unbiased`` (change of measure) — :func:`proposal_log_density` (every ``q_c`` at common points).
* ``gaussian_density_ratio`` — :func:`log_density_ratio_standard` (``-ω·μ + ‖μ‖²/2 = -log ξ(μ, ω)``) and
  :func:`gaussian_balance_heuristic` (``softmax_c(ω·μ_c - ‖μ_c‖²/2)``).
* ``query_cancellation`` — :func:`cancelled_integrand` (``Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m``).
* ``hyperbolic_symmetry`` — :func:`hyperbolic_integrand` (the cosh form; even in ``ω``) and
  :func:`hyperbolic_target_log_density` (Corollary C.1's mixture).
* Lemma A.1 — :func:`tilted_gaussian_log_density`; ``rank_bound`` — :func:`output_rank_bound`.
* ``rfa_softmax_form`` / ``lara_softmax_form`` — these *are* the estimators' default (stable) paths
  (``rfa_attention(form="softmax")``, ``lara_attention(form="softmax")``); identity claims compare them
  with Eq 2 and Eq 10 computed independently, so they are not re-implemented here.
* App D, ``D = 1`` — :func:`appd_d1_solution` solves the printed ``C×C`` linear system of the optimal weights by
  quadrature and returns ``α*`` (Eq 27) with the Eq 23/26 quantities; :func:`appd_grid_solution` solves the
  stationarity conditions on a grid for ``D <= 2`` and any ``D_v`` (the fixed point ``r = ∫α*(r) g``, which is
  linear in ``r``, solved directly) and evaluates the Eq 20 objective for any weights.
* Cost models (matrix products as implemented) for the benchmark: :func:`ra_gemms`, :func:`lara_gemms`.

Numerics: log space throughout (``log_*`` functions return logs; their exponentials are ``inf`` rather than
overflowing silently, via :func:`_exp_or_inf`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import softmax

from rfkit.base.numerics import log_normal, logsumexp
from rfkit.theory.importance import gram_fourth_power_integral, mixture_square_integral, signed_sum_upper
from rfkit.theory.softmax import relative_mse

__all__ = [
    "mixture_moments",
    "log_is_weight_second_moment",
    "is_weight_second_moment",
    "log_is_weight_moment",
    "kernel_relative_variance",
    "ra_mse",
    "snis_delta_bias_variance",
    "snis_linearisation_factor",
    "rfa_delta_variance",
    "proposal_log_density",
    "unnormalised_mis_variance",
    "log_density_ratio_standard",
    "gaussian_balance_heuristic",
    "cancelled_integrand",
    "hyperbolic_integrand",
    "hyperbolic_target_log_density",
    "tilted_gaussian_log_density",
    "output_rank_bound",
    "AppDSolution",
    "appd_d1_solution",
    "AppDGridSolution",
    "appd_grid_solution",
    "ra_gemms",
    "lara_gemms",
    "is_second_moment",
    "MIS_WEIGHT_FAMILIES",
    "mis_second_moment_bound",
    "mis_variance_bound",
    "mis_group_variance_sd_bound",
    "rfa_gemms",
    "proposal_flops",
]

_KERNEL_KINDS = {"positive": "positive", "trig_sincos": "trig", "hyperbolic": "hyperbolic"}


def _exp_or_inf(log_value):
    with np.errstate(over="ignore"):
        return np.exp(log_value)


def log_softmax_weights(q, k) -> np.ndarray:
    """``log π_nm = q_n·k_m - LSE_m(q_n·k_m)`` (RA Eq 5's mixture weights): ``(N, M)``."""
    logits = np.asarray(q, dtype=np.float64) @ np.asarray(k, dtype=np.float64).T
    return logits - logsumexp(logits, axis=-1)[:, None]


def target_log_density(query, keys, omega) -> np.ndarray:
    r"""``log p_n(ω) = log Σ_m π_nm N(ω; q_n + k_m, I)`` (RA Eq 5) for one query ``(D,)`` at points
    ``omega (..., D)`` -> ``(...)``."""
    q, k = np.asarray(query, dtype=np.float64), np.asarray(keys, dtype=np.float64)
    log_pi = log_softmax_weights(q[None], k)[0]
    return logsumexp(log_pi + log_normal(np.asarray(omega, dtype=np.float64)[..., None, :], q + k), axis=-1)


def _half_sq(x):
    return 0.5 * np.einsum("...i,...i->...", x, x)


# --------------------------------------------------------------------------- mixtures and weights


def mixture_moments(q, k) -> tuple[np.ndarray, np.ndarray]:
    r"""Mean ``(N, D)`` and covariance ``(N, D, D)`` of ``p_n`` (Eq 5): ``q_n + K^Tπ_n`` and
    ``I + Σ_m π_nm (k_m - K^Tπ_n)(k_m - K^Tπ_n)^T``. Cost ``O(NMD²)``."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    pi = np.exp(log_softmax_weights(q, k))
    kbar = pi @ k
    centered = k[None, :, :] - kbar[:, None, :]
    cov = np.einsum("nm,nmi,nmj->nij", pi, centered, centered) + np.eye(q.shape[1])
    return q + kbar, cov


def log_is_weight_second_moment(q, k, mu) -> np.ndarray:
    r"""``log E_{N(μ, I)}[(p_n(ω)/q(ω))²] = LSE_{m,m'}(log π_nm + log π_nm' + a_m·a_m')``, ``a_m = q_n + k_m - μ``.

    ``mu`` is ``(D,)`` (one proposal for all queries; ``0`` for RFA) or ``(N, D)``. Shape ``(N,)``;
    ``O(NM²D)``. (Infinite second moments do not occur: Gaussian proposals with equal covariance.)
    """
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    log_pi = log_softmax_weights(q, k)
    a = q[:, None, :] + k[None, :, :] - np.broadcast_to(np.asarray(mu, dtype=np.float64), q.shape)[:, None, :]
    gram = np.einsum("nmd,npd->nmp", a, a)
    return logsumexp(log_pi[:, :, None] + log_pi[:, None, :] + gram, axis=(1, 2))


def log_is_weight_moment(q, k, mu, power: int) -> np.ndarray:
    r"""``log E_{N(μ, I)}[(p_n(ω)/q(ω))^j]`` for ``j = power`` in ``{1, ..., 6}``, shape ``(N,)``.

    ``∫ Π_{i=1}^j N(ω; a_i, I) / N(ω; 0, I)^{j-1} dω = exp(Σ_{i<i'} a_i·a_{i'})`` (complete the square), with
    ``a_i = q_n + k_{m_i} - μ``; summing over the ``M^j`` index tuples with weights ``Π π_{n m_i}`` gives
    ``LSE_{m_1..m_j}(Σ_i log π_{n m_i} + Σ_{i<i'} a_{m_i}·a_{m_i'})``. ``j = 2`` is
    :func:`log_is_weight_second_moment`; the fourth and sixth moments give the standard deviation and skewness
    of squared weights. Cost ``O(N·M^j + N·M²D)``.
    """
    if power not in range(1, 7):
        raise ValueError(f"power must be an integer in 1..6, got {power}")
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    log_pi = log_softmax_weights(q, k)                                           # (N, M)
    a = q[:, None, :] + k[None, :, :] - np.broadcast_to(np.asarray(mu, dtype=np.float64), q.shape)[:, None, :]
    gram = np.einsum("nmd,npd->nmp", a, a)                                       # (N, M, M)
    n, m = log_pi.shape
    total = np.zeros((n,) + (m,) * power)
    for i in range(power):
        total = total + log_pi.reshape((n,) + (1,) * i + (m,) + (1,) * (power - 1 - i))
        for j in range(i + 1, power):
            shape = [n] + [1] * power
            shape[1 + i], shape[1 + j] = m, m
            total = total + gram.reshape(shape)
    return logsumexp(total.reshape(n, -1), axis=-1)


def is_weight_second_moment(q, k, mu) -> np.ndarray:
    """``E_q[(p_n/q)²]`` (``inf`` where it exceeds float64), from :func:`log_is_weight_second_moment`."""
    return _exp_or_inf(log_is_weight_second_moment(q, k, mu))


def kernel_relative_variance(x, y, feature_map: str, S: int = 1) -> float:
    r"""``Var[(1/S) Σ_s ξ(x,ω_s)ᵀξ(y,ω_s)] / exp(2x·y)`` for ``ω_s ~ N(0, I)`` iid.

    positive ``e^{‖x+y‖²} - 1``; hyperbolic ``cosh(‖x+y‖²) - 1``; trig_sincos ``2 sinh²(‖x-y‖²/2)``;
    trig_cos_phase ``2 sinh²(t/2) + e^{t}/2`` (``t = ‖x-y‖²``: the phase adds ``cos(ω·(x+y) + 2b)``, of
    mean 0 and variance ½, uncorrelated with ``cos ω·(x-y)``); all divided by ``S``.
    """
    if feature_map in _KERNEL_KINDS:
        return relative_mse(_KERNEL_KINDS[feature_map], x, y, S)
    if feature_map != "trig_cos_phase":
        raise ValueError(f"unknown feature_map {feature_map!r}")
    t = float(np.sum((np.asarray(x, float) - np.asarray(y, float)) ** 2))
    return (relative_mse("trig", x, y, 1) + 0.5 * math.exp(t)) / S


def ra_mse(mean_f, trace_cov: float, mu, S: int) -> float:
    r"""``MSE_n(S) = ‖E_{p_n}[f_n] - μ_n‖² + tr Cov_{p_n}(f_n) / S`` (RA or biased RA with its own law)."""
    bias = np.asarray(mean_f, dtype=np.float64) - np.asarray(mu, dtype=np.float64)
    return float(bias @ bias + trace_cov / S)


def _expectation(x: np.ndarray, weights) -> np.ndarray:
    """``E`` along axis 1 (the draws or nodes of each proposal): a plain mean, or ``Σ_i W_ci x_ci`` for quadrature
    weights ``W (C, R)`` (or ``(R,)``) that sum to one per proposal."""
    if weights is None:
        return x.mean(axis=1)
    w = np.broadcast_to(np.asarray(weights, dtype=np.float64), x.shape[:2])
    return np.einsum("cr,cr...->c...", w, x)


def snis_delta_bias_variance(aw, f, g, S_c, weights=None) -> tuple[np.ndarray, float]:
    r"""Leading-order (``1/S_c``) bias vector and trace variance of self-normalised MIS, plug-in form.

    ``aw[c]`` ``(R,)``: values of ``α_nc(ω) w_c(ω)`` (``w_c = p_n/q_c`` normalised) at ``R`` draws
    ``ω ~ q_c``; ``f[c]`` ``(R, D_v)``: ``f_n`` there; ``g = E_{p_n}[f_n]``; ``S_c`` per proposal (scalar or
    ``(C,)``). ``weights`` (optional, ``(C, R)`` or ``(R,)``, summing to one per proposal): quadrature weights of
    the points instead of a plain average (Gauss-Hermite nodes under ``q_c``). Returns (register
    ``lara.derived.snis_delta_bias_variance``)

    ``bias = -Σ_c (1/S_c)(E[α²w²(f-g)] - E[αw] E[αw(f-g)])``,
    ``tr Var = Σ_c (1/S_c)(E[α²w²‖f-g‖²] - ‖E[αw(f-g)]‖²)``.

    RFA is ``C = 1``, ``α = 1``, ``q = N(0, I)``.
    """
    aw = np.asarray(aw, dtype=np.float64)
    diff = np.asarray(f, dtype=np.float64) - np.asarray(g, dtype=np.float64)
    s = np.broadcast_to(np.asarray(S_c, dtype=np.float64), aw.shape[:1])
    e_aw = _expectation(aw, weights)
    e_awd = _expectation(aw[..., None] * diff, weights)
    e_a2w2d = _expectation((aw**2)[..., None] * diff, weights)
    e_a2w2d2 = _expectation((aw**2) * (diff**2).sum(-1), weights)
    bias = -((e_a2w2d - e_aw[:, None] * e_awd) / s[:, None]).sum(axis=0)
    var = float(((e_a2w2d2 - (e_awd**2).sum(-1)) / s).sum())
    return bias, var


def snis_linearisation_factor(aw, f, g, S_c, weights=None) -> float:
    r"""How much of the leading-order variance survives the normaliser's response to single draws (arguments as
    :func:`snis_delta_bias_variance`):

    ``κ = Σ_c E_{q_c}[α²w²‖f-g‖² / (1 + (αw - m_c)/S_c)²] / Σ_c E_{q_c}[α²w²‖f-g‖²]``, ``m_c = E_{q_c}[αw]``.

    The delta method linearises ``1/Ẑ`` around 1. One draw whose ``αw`` departs from its mean by a share comparable
    to ``S_c`` moves the normaliser ``Ẑ`` by that share, and the self-normalised estimate responds to it as
    ``αw(f-g)/(S_c + αw - m_c)`` rather than ``αw(f-g)/S_c``. ``κ`` weighs that damping (or, for signed weights,
    amplification) by each draw's share of the leading-order second moment. It tends to 1 as ``S_c → ∞`` where the
    second moment is finite; where it is far from 1 the draws that carry the leading-order variance are the ones the
    linearisation misdescribes, and ``S_c`` is not yet in the leading-order regime. A diagnostic of the regime
    (single-draw, first order in the departure), not a correction of the prediction.
    """
    aw = np.asarray(aw, dtype=np.float64)
    d2 = ((np.asarray(f, dtype=np.float64) - np.asarray(g, dtype=np.float64)) ** 2).sum(-1)
    s = np.broadcast_to(np.asarray(S_c, dtype=np.float64), aw.shape[:1])[:, None]
    second = aw**2 * d2
    damped = second / (1.0 + (aw - _expectation(aw, weights)[:, None]) / s) ** 2
    total = float(_expectation(second, weights).sum())
    return float(_expectation(damped, weights).sum()) / total if total > 0 else 1.0


def unnormalised_mis_variance(aw, f, S_c, weights=None) -> float:
    r"""Exact trace variance of unnormalised MIS (Eq 8), plug-in form:
    ``Σ_c (1/S_c)(E_{q_c}[α²w²‖f‖²] - ‖E_{q_c}[αwf]‖²)`` (arguments as :func:`snis_delta_bias_variance`)."""
    aw = np.asarray(aw, dtype=np.float64)
    f = np.asarray(f, dtype=np.float64)
    s = np.broadcast_to(np.asarray(S_c, dtype=np.float64), aw.shape[:1])
    second = _expectation((aw**2) * (f**2).sum(-1), weights)
    first = (_expectation(aw[..., None] * f, weights) ** 2).sum(-1)
    return float(((second - first) / s).sum())


# ------------------------------------------------------------------------------ pointwise identities


def log_density_ratio_standard(omega, mu) -> np.ndarray:
    """``log N(ω; 0, I)/N(ω; μ, I) = -ω·μ + ‖μ‖²/2 = -log ξ(μ, ω)`` (positive map); ``omega (..., D)``."""
    w = np.asarray(omega, dtype=np.float64)
    m = np.asarray(mu, dtype=np.float64)
    return -(w * m).sum(axis=-1) + _half_sq(m)


def gaussian_balance_heuristic(omega, means) -> np.ndarray:
    """``BH_c(ω) = softmax_c(ω·μ_c - ‖μ_c‖²/2)`` for unit-covariance Gaussians: ``omega (..., D)`` -> ``(..., C)``."""
    w = np.asarray(omega, dtype=np.float64)
    mu = np.asarray(means, dtype=np.float64)
    return softmax(w @ mu.T - _half_sq(mu), axis=-1)


def cancelled_integrand(k, v, omega) -> np.ndarray:
    r"""The query-free integrand ``Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m`` (``lara.derived.query_cancellation``);
    ``omega (..., D)`` -> ``(..., D_v)``. Computed here from its definition (the claims compare it with
    :func:`rfkit.estimators.rfa.key_statistics`'s ``F``, which must not be its source)."""
    k, v, w = (np.asarray(a, dtype=np.float64) for a in (k, v, omega))
    return softmax(w @ k.T - _half_sq(k), axis=-1) @ v


def hyperbolic_integrand(q, k, v, omega) -> np.ndarray:
    r"""``f_n^hyp(ω) = Σ_m e^{-‖k_m‖²/2} cosh(ω·(q_n + k_m)) v_m / Σ_m e^{-‖k_m‖²/2} cosh(ω·(q_n + k_m))``.

    ``omega (S, D)``; returns ``(N, S, D_v)``. Even in ``ω`` (cosh is), and dependent on ``q_n``. The log of
    cosh is ``|t| + log1p(e^{-2|t|}) - log 2``, so any ``ω`` works.
    """
    q, k, v, w = (np.asarray(a, dtype=np.float64) for a in (q, k, v, omega))
    t = (w @ q.T).T[:, :, None] + (w @ k.T)[None, :, :]                  # (N, S, M)
    a = np.abs(t)
    logits = a + np.log1p(np.exp(-2 * a)) - _half_sq(k)[None, None, :]
    weights = softmax(logits, axis=-1)
    return weights @ v


def hyperbolic_target_log_density(omega, q, k) -> np.ndarray:
    r"""Corollary C.1's target ``log ½Σ_m π_nm [N(ω; q_n+k_m, I) + N(ω; -q_n-k_m, I)]``: ``omega (N, S, D)``
    (each query at its own points) -> ``(N, S)``."""
    q, k, w = (np.asarray(a, dtype=np.float64) for a in (q, k, omega))
    centers = q[:, None, :] + k[None, :, :]                                     # (N, M, D)
    log_pi = log_softmax_weights(q, k)[:, None, :]                              # (N, 1, M)
    plus = log_normal(w[:, :, None, :], centers[:, None])                       # (N, S, M)
    minus = log_normal(w[:, :, None, :], -centers[:, None])
    return logsumexp(log_pi + np.logaddexp(plus, minus), axis=-1) - math.log(2.0)


def tilted_gaussian_log_density(omega, q, k) -> np.ndarray:
    """Lemma A.1: ``q(ω) ξ(q,ω) ξ(k,ω) / exp(q·k)`` is ``N(ω; q + k, I)``; returns its log at ``omega (..., D)``."""
    return log_normal(omega, np.asarray(q, dtype=np.float64) + np.asarray(k, dtype=np.float64))


def output_rank_bound(n_draws: int, d_v: int) -> int:
    """Largest rank of ``Y`` for RFA (``n_draws = S``), LARA or unnormalised MIS (``n_draws = C·S_c``):
    rows are (affine or linear) combinations of ``n_draws`` query-free vectors ``F``, so ``rank <= min``."""
    return int(min(n_draws, d_v))


# ------------------------------------------------------------------------------------ App D, D = 1


@dataclass(frozen=True)
class AppDSolution:
    r"""App D's optimal weights for one query in ``D = D_v = 1``, on a quadrature grid.

    ``grid (G,)``, ``weights (G,)`` (trapezoid); ``log_q (G, C)`` proposal log densities; ``g (G,)`` is
    ``p_n(ω)(f_n(ω) - μ_n)``; ``A[c', c] = ∫ q_{c'} q_c / Σ q``, ``b[c'] = ∫ q_{c'} g / Σ q`` and ``r`` solves
    ``A r = b`` (the printed system; least squares, minimum norm, where coinciding proposals make ``A``
    singular). ``mu`` is ``μ_n``; ``query``, ``keys``, ``values`` and ``means`` are kept to evaluate ``g`` and
    ``α*`` elsewhere.
    """

    grid: np.ndarray
    weights: np.ndarray
    log_q: np.ndarray
    g: np.ndarray
    A: np.ndarray
    b: np.ndarray
    r: np.ndarray
    mu: float
    query: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    means: np.ndarray

    def alpha_times_g(self) -> np.ndarray:
        r"""``α*_c(ω) g(ω) = BH_c g + q_c (r_c - Σ_{c''} BH_{c''} r_{c''})`` on the grid, ``(G, C)`` (no ``1/g``)."""
        bh = softmax(self.log_q, axis=-1)
        return bh * self.g[:, None] + np.exp(self.log_q) * (self.r[None, :] - (bh @ self.r)[:, None])

    def r_functions(self, omega) -> np.ndarray:
        r"""``r_nc(ω) = r_c / g(ω)`` (App D, ``D = 1``) at points ``omega (...,)``: shape ``(..., C)``."""
        g = self.g_at(omega)
        with np.errstate(divide="ignore"):
            return self.r / g[..., None]

    def g_at(self, omega) -> np.ndarray:
        """``g(ω) = p_n(ω)(f_n(ω) - μ_n)`` at scalar points ``omega (...,)``."""
        w = np.asarray(omega, dtype=np.float64)
        pts = w.reshape(-1, 1)
        p = np.exp(target_log_density(self.query, self.keys, pts))
        f = cancelled_integrand(self.keys, self.values, pts)[:, 0]
        return (p * (f - self.mu)).reshape(w.shape)


def appd_d1_solution(query, keys, values, means, *, step: float = 0.05, margin: float = 12.0) -> AppDSolution:
    r"""Solve App D's ``D = 1`` system for the optimal weights of one query (register ``lara.appd.d1_linear_system``).

    For every ``c'``: ``Σ_c r_c ∫ q_{c'} q_c / Σ_{c''} q_{c''} dω = ∫ q_{c'} p_n (f_n - μ_n) / Σ_{c''} q_{c''} dω``,
    ``q_c = N(μ_c, 1)``. Integrals by the trapezoid rule on ``[min - margin, max + margin]`` of every mean
    (``step`` 0.05: the integrands are analytic with Gaussian tails, for which the rule converges
    geometrically in ``1/step``). The densities enter as ``BH_c = q_c/Σ q`` (softmax of log densities), so
    nothing underflows. Cost ``O(G(C + M))``.
    """
    q = np.asarray(query, dtype=np.float64).reshape(1)
    k = np.asarray(keys, dtype=np.float64).reshape(-1, 1)
    v = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    mu_c = np.asarray(means, dtype=np.float64).reshape(-1)
    centers = np.concatenate([mu_c, q + k[:, 0], [0.0]])
    grid = np.arange(centers.min() - margin, centers.max() + margin + step, step)
    weights = np.full(grid.size, step)
    weights[[0, -1]] = step / 2
    log_q = log_normal(grid[:, None, None], mu_c[None, :, None])               # (G, C)
    log_pi = log_softmax_weights(q[None], k)
    mu = float(np.exp(log_pi[0]) @ v[:, 0])
    sol = AppDSolution(grid, weights, log_q, np.zeros(grid.size), np.zeros((mu_c.size,) * 2), np.zeros(mu_c.size),
                       np.zeros(mu_c.size), mu, q, k, v, mu_c[:, None])
    g = sol.g_at(grid)
    bh = softmax(log_q, axis=-1)
    A = (bh * weights[:, None]).T @ np.exp(log_q)
    b = (bh * (weights * g)[:, None]).sum(axis=0)
    r = np.linalg.lstsq(A, b, rcond=None)[0]  # A is singular when proposals coincide (then b = 0 and r = 0)
    return AppDSolution(grid, weights, log_q, g, A, b, r, mu, q, k, v, mu_c[:, None])


def _tensor_grid(centers: np.ndarray, step: float, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoid tensor grid covering every center ± margin in each axis: points ``(G, D)``, weights ``(G,)``."""
    axes, weights = [], []
    for j in range(centers.shape[1]):
        axis = np.arange(centers[:, j].min() - margin, centers[:, j].max() + margin + step, step)
        w = np.full(axis.size, step)
        w[[0, -1]] = step / 2
        axes.append(axis)
        weights.append(w)
    points = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, centers.shape[1])
    total = weights[0]
    for w in weights[1:]:
        total = np.outer(total, w).ravel()
    return points, total


@dataclass(frozen=True)
class AppDGridSolution:
    r"""App D's optimal weights for one query with ``ω ∈ R^D`` (``D <= 2``) and values in ``R^{D_v}``, on a grid.

    ``points (G, D)``, ``weights (G,)`` (trapezoid); ``log_q (G, C)``; ``g (G, D_v) = p_n(ω)(f_n(ω) - μ_n)``;
    ``r (C, D_v)`` the ``r_ncd`` of Eq 23 solving ``r_cd = ∫ α*_c g_d`` with ``α*`` of Eq 27 and
    ``r_c(ω) = g(ω)·r_c/‖g(ω)‖²``; ``mu (D_v,)``; ``query``, ``keys``, ``values``, ``means`` to evaluate ``α*``
    elsewhere (:meth:`alpha_at`).
    """

    points: np.ndarray
    weights: np.ndarray
    log_q: np.ndarray
    g: np.ndarray
    r: np.ndarray
    mu: np.ndarray
    query: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    means: np.ndarray

    def g_at(self, omega) -> np.ndarray:
        """``g(ω) = p_n(ω)(f_n(ω) - μ_n)`` at points ``omega (..., D)``: shape ``(..., D_v)``."""
        w = np.asarray(omega, dtype=np.float64)
        pts = w.reshape(-1, self.query.size)
        p = np.exp(target_log_density(self.query, self.keys, pts))[:, None]
        f = cancelled_integrand(self.keys, self.values, pts)
        return (p * (f - self.mu)).reshape(w.shape[:-1] + (self.values.shape[1],))

    def alpha_at(self, omega) -> np.ndarray:
        r"""``α*_c(ω)`` (Eq 27) at points ``omega (..., D)``: shape ``(..., C)`` (balance heuristic where ``g = 0``)."""
        w = np.asarray(omega, dtype=np.float64)
        g = self.g_at(w)
        log_q = log_normal(w[..., None, :], self.means)
        bh = softmax(log_q, axis=-1)
        norm2 = (g**2).sum(-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = np.where(norm2 > 0, (g @ self.r.T) / norm2, 0.0)
        return bh + np.exp(log_q) * (rho - (bh * rho).sum(-1, keepdims=True))

    def projector(self) -> np.ndarray:
        """``g gᵀ/‖g‖²`` at every point, ``(G, D_v, D_v)`` (0 where ``g = 0``)."""
        norm2 = (self.g**2).sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = self.g[:, :, None] * self.g[:, None, :] / norm2[:, None, None]
        return np.where(norm2[:, None, None] > 0, out, 0.0)

    def alpha_times_g(self) -> np.ndarray:
        r"""``α*_c(ω) g(ω)``, ``(G, C, D_v)``: ``BH_c g + q_c (P r_c - Σ_{c''} BH_{c''} P r_{c''})``,
        ``P = ggᵀ/‖g‖²`` (no division by ``g``)."""
        bh = softmax(self.log_q, axis=-1)
        pr = np.einsum("gde,ce->gcd", self.projector(), self.r)                  # P r_c
        inner = np.einsum("gc,gcd->gd", bh, pr)
        return bh[:, :, None] * self.g[:, None, :] + np.exp(self.log_q)[:, :, None] * (pr - inner[:, None, :])

    def alpha(self) -> np.ndarray:
        """``α*_c(ω)`` on the grid, ``(G, C)``."""
        return self.alpha_at(self.points)

    def eq20_first_term(self, alpha_g: np.ndarray) -> tuple[float, float]:
        r"""The first term of Eq 20, ``Σ_c ∫ ‖α_c g‖²/q_c dω``, on the grid (``alpha_g`` as in :meth:`eq20_objective`),
        and the share of it on the grid's outermost points (a large share: the integral is cut short by the grid)."""
        q = np.exp(self.log_q)
        with np.errstate(invalid="ignore", divide="ignore"):
            density = np.where(q > 0, (alpha_g**2).sum(-1) / q, 0.0).sum(-1)
        edge = ((self.points == self.points.min(axis=0)) | (self.points == self.points.max(axis=0))).any(axis=1)
        total = float(self.weights @ density)
        return total, float(self.weights[edge] @ density[edge]) / total if total > 0 else 0.0

    def eq20_objective(self, alpha_g: np.ndarray) -> float:
        r"""App D's Eq 20 for weights given as ``α_c(ω) g(ω)`` on the grid ``(G, C, D_v)``:
        ``Σ_c [∫ ‖α_c g‖²/q_c dω - Σ_d (∫ α_c g_d dω)²]`` (the delta-method trace variance, one draw per proposal)."""
        second = np.einsum("g,gcd->cd", self.weights, alpha_g)
        return self.eq20_first_term(alpha_g)[0] - float((second**2).sum())


def appd_grid_solution(query, keys, values, means, *, step: float = 0.1, margin: float = 9.0) -> AppDGridSolution:
    r"""Optimal MIS weights of App D for one query, ``ω ∈ R^D`` with ``D <= 2``, by solving the stationarity conditions.

    With ``α*_c = BH_c + q_c(ρ_c - Σ_{c''} BH_{c''} ρ_{c''})`` (Eq 27), ``ρ_c(ω) = g·r_c/‖g‖²`` and
    ``g = p_n(f_n - μ_n)``, the defining condition ``r_cd = ∫ α*_c g_d dω`` is linear in ``r``:
    ``r_cd - Σ_{d'} ∫ q_c P_{dd'} r_cd' + Σ_{c'',d'} ∫ q_c BH_{c''} P_{dd'} r_{c''d'} = ∫ BH_c g_d`` with
    ``P = ggᵀ/‖g‖²``; it is solved directly (least squares, minimum norm) rather than by fixed-point iteration.
    For ``D = D_v = 1`` it is App D's printed system. Trapezoid grid of ``step`` over every mean ± ``margin``;
    ``query (D,)``, ``keys (M, D)``, ``values (M, D_v)``, ``means (C, D)``. Cost ``O(G·C²·D_v²)``.
    """
    q = np.atleast_1d(np.asarray(query, dtype=np.float64))
    k = np.asarray(keys, dtype=np.float64).reshape(-1, q.size)
    v = np.asarray(values, dtype=np.float64).reshape(k.shape[0], -1)
    mu_c = np.asarray(means, dtype=np.float64).reshape(-1, q.size)
    if q.size > 2:
        raise ValueError(f"grid quadrature needs D <= 2, got D = {q.size}")
    points, weights = _tensor_grid(np.vstack([mu_c, q + k, np.zeros((1, q.size))]), step, margin)
    log_q = log_normal(points[:, None, :], mu_c[None])                                  # (G, C)
    mu = np.exp(log_softmax_weights(q[None], k)[0]) @ v
    g = np.exp(target_log_density(q, k, points))[:, None] * (cancelled_integrand(k, v, points) - mu)
    sol = AppDGridSolution(points, weights, log_q, g, np.zeros((mu_c.shape[0], v.shape[1])), mu, q, k, v, mu_c)
    n_c, n_v = sol.r.shape
    bh, qc, proj = softmax(log_q, axis=-1), np.exp(log_q), sol.projector()
    m1 = np.einsum("g,gc,gde->cde", weights, qc, proj)
    m2 = np.einsum("g,gc,gk,gde->cdke", weights, qc, bh, proj)
    system = m2.reshape(n_c * n_v, n_c * n_v)
    for c in range(n_c):
        block = slice(c * n_v, (c + 1) * n_v)
        system[block, block] += np.eye(n_v) - m1[c]
    b = np.einsum("g,gc,gd->cd", weights, bh, g).ravel()
    r = np.linalg.lstsq(system, b, rcond=None)[0].reshape(n_c, n_v)
    return AppDGridSolution(points, weights, log_q, g, r, mu, q, k, v, mu_c)


# ------------------------------------------------------------------------------------- cost models


def ra_gemms(n: int, m: int, d: int, dv: int, S: int = 1) -> tuple:
    """RA's matrix products as implemented: ``QKᵀ`` (``π``), then per sample ``ΩKᵀ`` and ``softmax·V``:
    ``O(S·N·M·(D + D_v))`` (quadratic)."""
    return ((n, d, m, 1), (n * S, d, m, 1), (n * S, m, dv, 1))


def lara_gemms(n: int, m: int, c: int, d: int, dv: int, S_c: int = 1) -> tuple:
    """LARA's matrix products (softmax form, Gaussian proposals): key statistics ``ΩKᵀ`` and ``softmax·V``,
    cross densities ``Ω μᵀ``, ``r' = Q Q̃ᵀ``, query logits ``Q Ωᵀ`` and the output ``a·F``: linear in N, M."""
    r = c * S_c
    return ((r, d, m, 1), (r, m, dv, 1), (r, d, c, 1), (n, d, c, 1), (n, d, r, 1), (n, r, dv, 1))


def rfa_gemms(n: int, m: int, S: int, d: int, dv: int) -> tuple:
    """RFA's matrix products (softmax form): key statistics ``ΩKᵀ`` and ``softmax·V``, query logits ``QΩᵀ`` and the
    output ``softmax·F``: ``O(S(N + M)(D + D_v))``, linear in ``N`` and ``M`` (§2.2)."""
    return ((S, d, m, 1), (S, m, dv, 1), (n, d, S, 1), (n, S, dv, 1))


def proposal_flops(family: str, c: int, m: int, d: int, *, eq35_reading: str = "landmark_attention") -> int:
    """Flops of the proposal means of G.3.1 as :func:`rfkit.estimators.lara.proposal_means` computes them (landmarks
    given): eq33 ``Q̃Kᵀ`` and ``softmax·K`` (``4CMD``, plus ``CD``); eq34 ``q̃_c + k̃_c`` (``CD``); eq35
    ``landmark_attention`` ``K̃K̃ᵀ`` and ``softmax·K̃`` (``4C²D + CD``); ``printed_C`` ``K̃K̃ᵀ`` and a scaled add
    (``2C²D + 2CD``); ``printed_M`` adds ``K̃Kᵀ`` (``2CMD``). Softmax/exponential evaluations are not counted."""
    if family == "eq33":
        return 4 * c * m * d + c * d
    if family == "eq34":
        return c * d
    if family != "eq35":
        raise ValueError(f"unknown proposal family {family!r}")
    if eq35_reading == "landmark_attention":
        return 4 * c * c * d + c * d
    if eq35_reading == "printed_C":
        return 2 * c * c * d + 2 * c * d
    if eq35_reading == "printed_M":
        return 2 * c * c * d + 2 * c * m * d + 2 * c * d
    raise ValueError(f"unknown eq35 reading {eq35_reading!r}")


# ------------------------------------------------------ second moments of IS / MIS estimates (closed forms)
#
# The integrand of every estimate here is a signed Gaussian mixture: by Eq 5-6, p_n(ω) f_n(ω) =
# Σ_m π_nm N(ω; q_n + k_m, I) v_m, so along a direction u, h(ω) := p_n(ω) f_n(ω)·u = Σ_m π_nm (v_m·u)
# N(ω; q_n + k_m, I), and with all coefficients 1, h = p_n. An IS replicate under q is h/q, and
# E_q[(h/q)²] = ∫ h²/q: a sum of Gaussian-ratio integrals (rfkit.theory.importance), exact for a Gaussian q.
# For the unnormalised MIS estimate (Eq 8) with one draw per proposal, ĝ = Σ_c X_c, X_c = α_c(ω_c) h(ω_c)/q_c(ω_c),
# ω_c ~ q_c independent: Var ĝ = Σ_c (E X_c² - (E X_c)²) <= Σ_c E X_c² - H²/C (Cauchy-Schwarz on Σ_c E X_c = H,
# H = ∫h), and Σ_c E X_c² is exact or bounded per weighting family (see mis_second_moment_bound).


def _target_terms(q_row, k, coef=None) -> tuple[np.ndarray, np.ndarray]:
    """``(β, a)``: ``h = Σ_m β_m N(ω; a_m, I)`` with ``β_m = π_nm coef_m`` and ``a_m = q_n + k_m`` (``coef`` 1 by
    default: ``h = p_n``). Computed here from the logits (no estimator code)."""
    q_row = np.asarray(q_row, dtype=np.float64).ravel()
    k = np.asarray(k, dtype=np.float64).reshape(-1, q_row.size)
    logits = k @ q_row
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    c = np.ones(k.shape[0]) if coef is None else np.asarray(coef, dtype=np.float64).ravel()
    return pi * c, q_row[None, :] + k


def is_second_moment(q_row, k, mu, coef) -> float:
    r"""``E_{N(μ, I)}[(h/q)²] = ∫ h²/N(μ, I) = Σ_{m,m'} β_m β_m' exp((a_m - μ)·(a_m' - μ))`` (exact; ``h`` as in
    :func:`_target_terms` with ``coef = V u``: the IS replicate of ``μ_n·u``; the weight ``p_n/q`` alone is
    :func:`is_weight_second_moment`). The per-replicate variance is this minus ``(Σ β)²``."""
    beta, a = _target_terms(q_row, k, coef)
    return mixture_square_integral(beta, a, divide=np.asarray(mu, dtype=np.float64).ravel())


def rfa_delta_variance(q_row, k, v) -> float:
    r"""RFA's leading-order trace variance, ``lim_{S→∞} S·E‖RFA_S(q_n) - μ_n‖²`` (positive map, ``ω ~ N(0, I)``).

    RFA is self-normalised IS of ``f_n`` under ``p_n = Σ_m π_nm N(a_m, I)`` (``a_m = q_n + k_m``) from ``N(0, I)``;
    the delta method gives ``S·MSE → E_{N(0,I)}[w²‖f_n - μ_n‖²]`` with ``w f_n - w μ_n = Σ_m π_nm
    e^{ω·a_m - ‖a_m‖²/2}(v_m - μ_n)``, so (``∫ N(a)N(b)/N(0) = e^{a·b}``)
    ``= Σ_{m,m'} π_nm π_nm' e^{a_m·a_m'} (v_m - μ_n)·(v_m' - μ_n)`` (exact; a signed sum bounded above to round-off
    by :func:`~rfkit.theory.importance.signed_sum_upper`; ``inf`` beyond float64). ``O(M²(D + D_v))``.
    """
    pi, a = _target_terms(q_row, k)
    v = np.asarray(v, dtype=np.float64).reshape(pi.size, -1)
    centred = v - pi @ v
    gram = (pi[:, None] * centred) @ (pi[:, None] * centred).T                       # β_m·β_m', β_m = π_m (v_m - μ)
    with np.errstate(divide="ignore"):
        return signed_sum_upper(np.log(np.abs(gram)) + a @ a.T, np.sign(gram))


def _proposal_components(means, log_weights=None) -> tuple[np.ndarray, np.ndarray]:
    """Proposals as ``(C, J, D)`` component means and ``(C, J)`` weights (``J = 1``: Gaussian proposals)."""
    b = np.asarray(means, dtype=np.float64)
    if b.ndim == 2:
        b = b[:, None, :]
    rho = np.ones(b.shape[:2]) if log_weights is None else np.exp(np.asarray(log_weights, dtype=np.float64))
    return b, rho / rho.sum(axis=1, keepdims=True)


def proposal_log_density(omega, means, log_weights=None) -> np.ndarray:
    r"""``log q_c(ω)`` of every proposal at common points ``omega (..., D)`` -> ``(C, ...)``: ``q_c = N(μ_c, I)``
    (``means (C, D)``) or the mixture ``Σ_j ρ_cj N(b_cj, I)`` (``means (C, J, D)``, ``log_weights (C, J)``; Eq 32),
    computed here from the definition (the claims compare it with the proposals' own ``logpdf``)."""
    b, rho = _proposal_components(means, log_weights)
    w = np.asarray(omega, dtype=np.float64)[..., None, None, :]                      # (..., 1, 1, D)
    out = logsumexp(np.log(rho) + log_normal(w, b), axis=-1)                         # (..., C)
    return np.moveaxis(out, -1, 0)


def _inverse_density_bound(b: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, float]:
    r"""Weighted AM-GM for a mixture ``Σ_j ρ_j N(ω; b_j, I) >= Π_j N(ω; b_j, I)^{ρ_j} = N(ω; b̄, I) e^{-s/2}``,
    ``b̄ = Σ ρ_j b_j``, ``s = Σ ρ_j ‖b_j - b̄‖²``: returns ``(b̄, s)``, so ``1/q <= e^{s/2}/N(ω; b̄, I)``."""
    center = rho @ b
    return center, float(rho @ ((b - center) ** 2).sum(-1))


def _ratio_moment(beta, a, b, rho) -> float:
    """``∫ h²/q`` for one proposal ``q = Σ_j ρ_j N(b_j, I)``: exact for ``J = 1``, else the AM-GM upper bound."""
    if b.shape[0] == 1:
        return mixture_square_integral(beta, a, divide=b[0])
    center, spread = _inverse_density_bound(b, rho)
    return math.exp(0.5 * spread) * mixture_square_integral(beta, a, divide=center)


MIS_WEIGHT_FAMILIES = ("single", "constant", "bounded", "balance", "eq9", "eq37")


def mis_second_moment_bound(q_row, k, proposal_means, proposal_log_weights=None, *, weights: str, coef=None,
                            kappa=None, delta=None, rprime=None, alpha_max: float = 1.0) -> float:
    r"""An upper bound on ``Σ_c E_{q_c}[X_c²]``, ``X_c = α_c(ω) h(ω)/q_c(ω)``, for the one-draw-per-proposal MIS
    estimate (Eq 8) of ``∫ h`` (``h`` as in :func:`_target_terms`), exact where stated. ``Var ĝ`` is at most this
    minus ``(∫h)²/C`` (:func:`mis_variance_bound`).

    Proposals ``q_c = Σ_j ρ_cj N(b_cj, I)``: ``proposal_means (C, D)`` (Gaussian) or ``(C, J, D)`` with
    ``proposal_log_weights (C, J)`` (Eq 32 mixtures). With ``I_c = ∫ h²/q_c`` (exact for a Gaussian ``q_c``; for a
    mixture bounded by weighted AM-GM, ``q_c >= N(b̄_c) e^{-s_c/2}``), ``T = ∫ h²/Σ_c q_c`` and ``J_c = ∫ q_c h²``:

    * ``single`` (``C = 1``, ``α = 1``): ``I_1``;
    * ``constant`` (``α_c = κ_c``): ``Σ_c κ_c² I_c`` (exact for Gaussian proposals);
    * ``bounded`` (any ``|α_c| <= alpha_max``, e.g. random partitions of unity): ``alpha_max² Σ_c I_c``;
    * ``balance`` (``α_c = q_c/Σq``): ``Σ_c E X_c² = Σ_c ∫ q_c h²/(Σq)² = T`` exactly, and ``T`` is bounded by
      the smallest of ``min_c I_c`` (``Σq >= q_c``), ``Σ_c I_c / C²`` (harmonic <= arithmetic mean) and
      ``e^{s/2} ∫ h²/N(b̄) / C`` (AM-GM on the equal mixture of all components, centre ``b̄``, spread ``s``);
      Veach & Guibas' bound is not needed: these are sharper here;
    * ``eq9`` (``α_c = BH_c + δ_c``, constants ``δ_c = β(r'_c - mean r')`` summing to 0): the cross terms
      ``2δ_c T`` cancel, so ``Σ_c E X_c² = T + Σ_c δ_c² I_c`` (``T`` bounded as for ``balance``);
    * ``eq37`` outer (``α_c = BH_c + q_c(ω)(r_c - Σ_c'' BH_c''(ω) r_c'')``, ``q_c`` normalised): the cross terms
      cancel (``Σ_c q_c (r_c - ρ̄) = 0``) and ``Σ_c q_c (r_c - ρ̄)² = Σq·Var_BH(r) <= Σq·Δ²/4`` (Popoviciu,
      ``Δ = max r - min r``), so ``Σ_c E X_c² <= T + (Δ²/4) Σ_c J_c``.
    """
    beta, a = _target_terms(q_row, k, coef)
    b, rho = _proposal_components(proposal_means, proposal_log_weights)
    n_c = b.shape[0]
    if weights not in MIS_WEIGHT_FAMILIES:
        raise ValueError(f"unknown weights {weights!r}; expected one of {MIS_WEIGHT_FAMILIES}")
    moments = np.array([_ratio_moment(beta, a, b[c], rho[c]) for c in range(n_c)])
    if weights == "single":
        if n_c != 1:
            raise ValueError("weights='single' needs one proposal")
        return float(moments[0])
    if weights == "constant":
        kap = np.full(n_c, 1.0 / n_c) if kappa is None else np.asarray(kappa, dtype=np.float64).ravel()
        return float((kap**2 * moments).sum())
    if weights == "bounded":
        return float(alpha_max**2 * moments.sum())
    center, spread = _inverse_density_bound(b.reshape(-1, b.shape[-1]), (rho / n_c).ravel())
    total = min(float(moments.min()), float(moments.sum()) / n_c**2,
                math.exp(0.5 * spread) * mixture_square_integral(beta, a, divide=center) / n_c)
    if weights == "balance":
        return total
    if weights == "eq9":
        d = np.asarray(delta, dtype=np.float64).ravel()
        if abs(float(d.sum())) > 1e-9 * max(1.0, float(np.abs(d).sum())):
            raise ValueError("eq9 corrections delta must sum to 0")
        return total + float((d**2 * moments).sum())
    r = np.asarray(rprime, dtype=np.float64).ravel()
    spread_r = float(r.max() - r.min())
    j = sum(rho[c, i] * mixture_square_integral(beta, a, multiply=b[c, i]) for c in range(n_c)
            for i in range(b.shape[1]))
    return total + 0.25 * spread_r**2 * float(j)


def mis_variance_bound(q_row, k, proposal_means, proposal_log_weights=None, **options) -> float:
    r"""An upper bound on ``Var ĝ`` of the one-draw-per-proposal MIS estimate of ``∫h`` (see
    :func:`mis_second_moment_bound`, same arguments): ``Σ_c E X_c² - (∫h)²/C``, clipped at 0."""
    beta, _ = _target_terms(q_row, k, options.get("coef"))
    n_c = np.asarray(proposal_means).shape[0]
    second = mis_second_moment_bound(q_row, k, proposal_means, proposal_log_weights, **options)
    return max(second - float(beta.sum()) ** 2 / n_c, 0.0)


def _weight_sup(weights: str, n_c: int, d: int, *, kappa=None, delta=None, rprime=None, alpha_max=1.0) -> np.ndarray:
    """``A_c >= sup_ω |α_c(ω)|`` per weighting family (see :func:`mis_group_variance_sd_bound`)."""
    if weights in ("single", "balance"):
        return np.ones(n_c)
    if weights == "constant":
        return np.abs(np.full(n_c, 1.0 / n_c) if kappa is None else np.asarray(kappa, dtype=np.float64).ravel())
    if weights == "bounded":
        return np.full(n_c, float(alpha_max))
    if weights == "eq9":
        dl = np.asarray(delta, dtype=np.float64).ravel()
        return np.maximum(np.abs(dl), np.abs(1.0 + dl))
    r = np.asarray(rprime, dtype=np.float64).ravel()
    return np.full(n_c, 1.0 + (2 * math.pi) ** (-d / 2) * float(r.max() - r.min()))


def mis_group_variance_sd_bound(q_row, k, values, proposal_means, proposal_log_weights=None, *, weights: str,
                                group: int, **family) -> float:
    r"""An upper bound on the sd of the sample trace variance ``s² = Σ_j ‖ĝ_j - ḡ‖²/(G - 1)`` of ``G = group``
    independent one-draw-per-proposal MIS estimates ``ĝ_j ∈ R^{D_v}`` of ``∫ p_n f_n`` (Eq 8; arguments as
    :func:`mis_second_moment_bound`, ``values (M, D_v)``).

    ``Var s² = (κ - T²)/G + 2 tr(Σ²)/(G(G-1))`` with ``Σ = Cov ĝ``, ``T = tr Σ``, ``κ = E‖ĝ - Eĝ‖⁴``. With
    ``ĝ - Eĝ = Σ_c Z_c`` (independent, mean zero, ``σ_c² = E‖Z_c‖²``), pairing the four factors gives
    ``κ = Σ_c E‖Z_c‖⁴ + Σ_{c≠c'} (σ_c²σ_c'² + 2E(Z_c·Z_c')²) <= Σ_c E‖Z_c‖⁴ + 3T²``, and by Minkowski
    ``E‖Z_c‖⁴ <= ((E‖Y_c‖⁴)^{1/4} + (E‖Y_c‖²)^{1/2})⁴`` for ``Y_c = α_c h/q_c``. Then
    ``E‖Y_c‖⁴ <= A_c⁴ ∫ ‖h‖⁴/q_c³`` (:func:`rfkit.theory.importance.gram_fourth_power_integral`; a mixture
    ``q_c`` through ``1/q_c³ <= e^{3s_c/2}/N(b̄_c)³``), ``E‖Y_c‖² <= A_c² Σ_d I_cd``, ``T <= Σ_d``
    :func:`mis_second_moment_bound` and ``tr Σ² <= T²``, where ``A_c >= sup|α_c|``: 1 (single, balance,
    ``bounded`` with ``alpha_max``), ``κ_c`` (constant), ``max(|δ_c|, |1 + δ_c|)`` (eq9: ``BH ∈ [0, 1]``),
    ``1 + (2π)^{-D/2}(max r - min r)`` (eq37: ``q_c <= (2π)^{-D/2}``).
    """
    v = np.asarray(values, dtype=np.float64)
    v = v.reshape(v.shape[0], -1)
    b, rho = _proposal_components(proposal_means, proposal_log_weights)
    n_c, d = b.shape[0], b.shape[-1]
    pi, a = _target_terms(q_row, k)
    beta = pi[:, None] * v                                                      # (M, D_v): h = Σ_m β_m N(a_m)
    gram = beta @ beta.T
    sup = _weight_sup(weights, n_c, d, **{key: family[key] for key in ("kappa", "delta", "rprime", "alpha_max")
                                          if key in family})
    total_sq = sum(mis_second_moment_bound(q_row, k, proposal_means, proposal_log_weights, weights=weights,
                                           coef=v[:, j], **family) for j in range(v.shape[1]))
    z4 = 0.0
    for c in range(n_c):
        second = sum(_ratio_moment(beta[:, j], a, b[c], rho[c]) for j in range(v.shape[1]))
        center, spread = (b[c, 0], 0.0) if b.shape[1] == 1 else _inverse_density_bound(b[c], rho[c])
        fourth = math.exp(1.5 * spread) * gram_fourth_power_integral(gram, a, divide=center, power=3.0)
        z4 += (sup[c] * fourth**0.25 + sup[c] * math.sqrt(second)) ** 4
    kurt = z4 + 3 * total_sq**2
    return math.sqrt(kurt / group + 2 * total_sq**2 / (group * (group - 1)))
