r"""Closed forms for EVA (``002_b2e9d84e2f6b65de.txt``) and the register's derived predictions.

Notation (register ``../shared/claims/eva.md``): for one query ``q``, ``e_m = exp(q·k_m)``,
``w_m = e_m/Z``, ``u_m = q + k_m``; samples ``ω ~ ρ``, by default ``ρ = N(μ, I)``.

* **Gaussian product** (``eva.derived.gaussian_product``): for all ``x, y, ω``,
  ``N(ω; 0, I) ξ(x, ω) ξ(y, ω) = exp(x·y) N(ω; x + y, I)`` (:func:`gaussian_product_sides`); hence
  ``p_n(ω) = Σ_m w_m N(ω; u_m, I)`` (:func:`log_target_density` from Eq 3 against
  :func:`log_target_mixture_density`), and for unit-covariance Gaussians
  ``∫ N(ω; a, I) N(ω; b, I)/N(ω; μ, I) dω = exp((a - μ)·(b - μ))``. :func:`log_gaussian_ratio_integral`
  gives the integral for ``ρ = N(μ, τ²I)``: with ``λ = 2 - 1/τ²`` and ``c = a + b - μ/τ²``,

  .. math::  \log ∫ \frac{N(ω;a,I)N(ω;b,I)}{N(ω;μ,τ^2I)}dω = \frac d2\log\frac{τ^2}{λ} + \frac{‖c‖^2}{2λ}
             - \frac{‖a‖^2 + ‖b‖^2}{2} + \frac{‖μ‖^2}{2τ^2}\quad(λ > 0;\ +∞\ \text{for}\ τ^2 <= 1/2).

* **Per-token control-variate moments** (``eva.derived.weighted_kernel_moments``, ``cv_moments``):
  ``Γ_{mm'} = ∫ N(u_m)N(u_{m'})/ρ`` (``= exp((u_m - μ)·(u_{m'} - μ))`` for ``τ = 1``),
  ``Cov[h_m, h_{m'}] = w_m w_{m'} (Γ_{mm'} - 1)/S``, ``Var[h] = (Ω - 1)/S`` with ``Ω = Σ w_m w_{m'} Γ_{mm'}``
  (:func:`cv_moments`); the control-variate variance algebra of App B.1 (:func:`cv_variance`, exact and
  as printed), Eq 20 (:func:`optimal_cv_coefficient`), the parabola in the coefficient
  (:func:`token_cv_variance`, :func:`subset_cv_variance`, :func:`subset_variance_minimiser`).
* **Weighted MSE** ``J`` (Eq 9 / Eq 24; Lemma 3, Prop 2, App B.6): :func:`weighted_error`,
  :func:`partition_optimal_coefficients` (weighted subset means), :func:`pythagoras_gap`
  (``J(β,…,β) - J(β*_1,…,β*_C) = Σ_c A_c ‖β - β*_c‖²``), :func:`error_decomposition` (B.6's terms).
* **Subset masses** (Eq 13): :func:`local_softmax` (``π_c`` in log space and the local softmax
  ``β*_c``), :func:`eq13_error` (``EVA13 - softmax = Σ_c π_c (β̂_c - β*_c)``).
* **Finite S**: :func:`snis_finite_mse` and :func:`snis_finite_bias` (the exact ``MSE(S) = E‖β̂ - β‖²`` and bias
  ``E β̂ - β`` of RFA_ρ at every ``S``, by a Laplace transform and Gauss–Hermite quadrature over the span of
  ``{q + k_m - μ}``, rank <= 4).
* **Asymptotics**: :func:`snis_asymptotics` (``S·MSE → σ²_RFA``, ``S·bias → b``), :func:`eva13_asymptotics`
  (shared and per-chunk sampling), :func:`eq16_large_s_limit` (``EVA16*``, the ``S → ∞`` limit of the
  multi-sample practical estimator).
* **Cost**: :func:`eva_practical_gemms` (the matrix products of
  :func:`rfkit.estimators.eva.eva_practical` / :func:`~rfkit.estimators.eva.eva_causal`) for the benchmark.

Numerics: everything is in log space; a quantity that diverges (``τ² <= 1/2``, overflowing ``Γ``) is
``inf``, never a silent overflow.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy.ndimage import correlate1d
from scipy.special import logsumexp

from rfkit.base.laws import EXACT, EXCLUDED
from rfkit.base.numerics import gauss_hermite_rule, log_normal

__all__ = [
    "gaussian_product_sides",
    "log_target_density",
    "log_target_mixture_density",
    "log_mixture_components",
    "log_gaussian_ratio_integral",
    "weighted_kernel_moments",
    "log_softmax_weights",
    "local_softmax",
    "CVMoments",
    "cv_moments",
    "cv_variance",
    "optimal_cv_coefficient",
    "importance_weight_skewness",
    "token_cv_variance",
    "subset_cv_variance",
    "subset_variance_minimiser",
    "weighted_error",
    "partition_optimal_coefficients",
    "pythagoras_gap",
    "error_decomposition",
    "eq13_error",
    "snis_asymptotics",
    "snis_finite_mse",
    "snis_finite_bias",
    "snis_quadrature_rank",
    "SNIS_QUADRATURE_RANK",
    "eva13_asymptotics",
    "eq16_large_s_limit",
    "eva_practical_gemms",
]



def _log_xi(x, omega) -> np.ndarray:
    r"""``log ξ(x, ω) = ω·x - ‖x‖²/2`` (EVA §2.2, the positive randomized mapping): ``x (..., L, d)``,
    ``omega (S, d)`` -> ``(..., L, S)``."""
    x = np.asarray(x, dtype=np.float64)
    return x @ np.asarray(omega, dtype=np.float64).T - 0.5 * np.einsum("...i,...i->...", x, x)[..., None]


def _vec(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim < 1 or not np.isfinite(arr).all():
        raise ValueError(f"{name} must be a finite array with at least one dimension, got shape {arr.shape}")
    return arr


# --------------------------------------------------------------------------------- Gaussian product


def gaussian_product_sides(x, y, omega) -> tuple[np.ndarray, np.ndarray]:
    r"""Both sides of ``N(ω; 0, I) ξ(x, ω) ξ(y, ω) = exp(x·y) N(ω; x + y, I)`` in log space.

    ``x``, ``y`` ``(d,)``, ``omega`` ``(S, d)``; returns two ``(S,)`` arrays.
    """
    x, y, omega = _vec(x, "x"), _vec(y, "y"), _vec(omega, "omega")
    lhs = log_normal(omega) + _log_xi(x[None], omega)[0] + _log_xi(y[None], omega)[0]
    rhs = float(x @ y) + log_normal(omega - (x + y))
    return lhs, rhs


def log_target_density(omega, q, k) -> np.ndarray:
    r"""``log p_n(ω)`` from its definition (EVA Eq 3): ``N(ω;0,I) Σ_m ξ(q,ω)ξ(k_m,ω) / Z``.

    ``omega`` ``(S, d)``, ``q`` ``(d,)``, ``k`` ``(M, d)`` (a subset of the keys gives App C's ``p_c``).
    """
    omega, q, k = _vec(omega, "omega"), _vec(q, "q"), _vec(k, "k")
    log_z = logsumexp(k @ q)
    pair = _log_xi(q[None], omega)[0] + _log_xi(k, omega)                   # (M, S)
    return log_normal(omega) + logsumexp(pair, axis=0) - log_z


def log_mixture_components(omega, q, k) -> np.ndarray:
    r"""``log(w_m N(ω_s; q + k_m, I))`` ``(M, S)``: the components of ``p_n`` as a Gaussian mixture, so that
    ``W(ω) = Σ_m w_m N(ω; u_m, I)/ρ(ω)`` and ``W(ω) f_n(ω) = Σ_m w_m v_m N(ω; u_m, I)/ρ(ω)``."""
    omega, q, k = _vec(omega, "omega"), _vec(q, "q"), _vec(k, "k")
    log_w = k @ q - logsumexp(k @ q)
    return log_w[:, None] + log_normal(omega[None, :, :] - (q + k)[:, None, :])


def log_target_mixture_density(omega, q, k) -> np.ndarray:
    r"""``log Σ_m w_m N(ω; q + k_m, I)``: ``p_n`` as the Gaussian mixture of the Gaussian product identity."""
    return logsumexp(log_mixture_components(omega, q, k), axis=0)


def log_gaussian_ratio_integral(a, b, mu, tau: float = 1.0) -> np.ndarray:
    r"""``log ∫ N(ω; a, I) N(ω; b, I) / N(ω; μ, τ² I) dω`` (module docstring); ``+inf`` when ``τ² <= 1/2``.

    ``a``, ``b``, ``mu`` broadcast over leading axes (last axis ``d``). For ``τ = 1`` this is
    ``(a - μ)·(b - μ)`` exactly.
    """
    a, b, mu = (np.asarray(t, dtype=np.float64) for t in (a, b, mu))
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if tau == 1.0:
        return np.einsum("...i,...i->...", a - mu, b - mu)
    t2 = tau * tau
    lam = 2.0 - 1.0 / t2
    shape = np.broadcast_shapes(a.shape, b.shape, mu.shape)[:-1]
    if lam <= 0:
        return np.full(shape, np.inf)
    d = a.shape[-1]
    c = a + b - mu / t2
    return (0.5 * d * math.log(t2 / lam) + np.einsum("...i,...i->...", c, c) / (2 * lam)
            - 0.5 * np.einsum("...i,...i->...", a, a) - 0.5 * np.einsum("...i,...i->...", b, b)
            + np.einsum("...i,...i->...", mu, mu) / (2 * t2))


def _signed_expm1_times(log_prefactor, log_gamma):
    """``exp(log_prefactor)·(exp(log_gamma) - 1)`` without overflow in the intermediate (``±inf`` if it
    overflows; exact 0 when ``log_gamma = 0``)."""
    x = np.asarray(log_gamma, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        mag = np.where(x > 0, x + np.log1p(-np.exp(-np.abs(x))), np.log(-np.expm1(np.minimum(x, 0.0))))
        return np.sign(x) * np.exp(log_prefactor + mag)


def weighted_kernel_moments(x, y, y2, mu, tau: float = 1.0) -> dict[str, float]:
    r"""Moments of one weighted kernel term ``Y(x, y) = r(ω) ξ(x, ω) ξ(y, ω)``, ``ω ~ N(μ, τ²I)``.

    ``E[Y(x, y)] = exp(x·y)`` and ``Cov[Y(x, y), Y(x, y2)] = exp(x·y + x·y2)(Γ - 1)``,
    ``Γ = ∫ N(x + y)N(x + y2)/ρ``; in particular ``Var[Y(x, y)] = exp(2x·y)(exp(‖x + y - μ‖²) - 1)`` for
    ``τ = 1`` (0 at ``μ = x + y``). Returns ``mean``, ``mean2`` (of ``Y(x, y2)``), ``cov`` and ``log_gamma``.
    """
    x, y, y2, mu = _vec(x, "x"), _vec(y, "y"), _vec(y2, "y2"), _vec(mu, "mu")
    log_gamma = float(log_gaussian_ratio_integral(x + y, x + y2, mu, tau))
    cov = float(_signed_expm1_times(float(x @ y + x @ y2), log_gamma)) if math.isfinite(log_gamma) else math.inf
    return dict(mean=math.exp(float(x @ y)), mean2=math.exp(float(x @ y2)), cov=cov, log_gamma=log_gamma)


# ------------------------------------------------------------------------------------ subset masses


def log_softmax_weights(q, k) -> np.ndarray:
    """``log w_m = q·k_m - LSE_m(q·k_m)``; ``q`` ``(..., d)``, ``k`` ``(M, d)`` → ``(..., M)``."""
    logits = _vec(q, "q") @ _vec(k, "k").T
    return logits - logsumexp(logits, axis=-1, keepdims=True)


def local_softmax(q, k, v, labels) -> tuple[np.ndarray, np.ndarray]:
    r"""Subset masses and local softmaxes of a partition (EVA Eq 10/13; Prop 2's ``β*_c``).

    ``labels`` ``(M,)``: :data:`~rfkit.estimators.eva.EXACT`, :data:`~rfkit.estimators.eva.EXCLUDED` or
    subset indices ``0..C-1``. Returns ``log π_c = LSE_{m∈P_c}(q·k_m) - LSE_{m attended}(q·k_m)``
    ``(..., C)`` and ``β*_c = Σ_{m∈P_c} e_m v_m / Σ_{m∈P_c} e_m`` ``(..., C, d_v)``; an empty subset has
    ``log π_c = -inf`` and ``β*_c = 0``.
    """
    logits = _vec(q, "q") @ _vec(k, "k").T
    v = _vec(v, "v")
    labels = np.asarray(labels)
    log_z = logsumexp(np.where(labels != EXCLUDED, logits, -np.inf), axis=-1)
    n_sub = int(labels.max(initial=-1)) + 1
    log_pi = np.full(logits.shape[:-1] + (n_sub,), -np.inf)
    beta = np.zeros(logits.shape[:-1] + (n_sub, v.shape[-1]))
    for c in range(n_sub):
        idx = np.flatnonzero(labels == c)
        if idx.size:
            sub = logits[..., idx]
            lse = logsumexp(sub, axis=-1)
            log_pi[..., c] = lse - log_z
            beta[..., c, :] = np.exp(sub - lse[..., None]) @ v[idx]
    return log_pi, beta


def eq13_error(log_pi, beta_hat, beta_star) -> np.ndarray:
    r"""``Σ_c π_c (β̂_c - β*_c)``: EVA13's error against softmax when ``E`` and the subsets cover the keys."""
    return np.einsum("...c,...cv->...v", np.exp(np.asarray(log_pi)), np.asarray(beta_hat) - np.asarray(beta_star))


# ---------------------------------------------------------------------------- control-variate moments


@dataclass(frozen=True)
class CVMoments:
    r"""Exact moments of the per-token control variates of one query (``S`` iid draws from ``ρ``).

    Attributes
    ----------
    mean_h : ``(M,)``, ``E[h_m] = w_m``
    cov_h : ``(M, M)``, ``Cov[h_m, h_{m'}] = w_m w_{m'} (Γ_{mm'} - 1)/S``
    var_h : float, ``Var[h] = (Ω - 1)/S``
    cov_hg : ``(d_v,)``, ``Cov[h, g] = Σ_{m,m'} Cov[h_m, h_{m'}] v_{m'}``
    var_g : ``(d_v, d_v)``, ``Var[g] = Σ_{m,m'} Cov[h_m, h_{m'}] v_m v_{m'}ᵀ``
    omega_sq : float, ``Ω = E_ρ[W²] = Σ w_m w_{m'} Γ_{mm'}``
    ess : float, Kish's effective sample size ``≈ S/Ω``
    log_gamma : ``(M, M)``, ``log Γ_{mm'}``
    """

    mean_h: np.ndarray
    cov_h: np.ndarray
    var_h: float
    cov_hg: np.ndarray
    var_g: np.ndarray
    omega_sq: float
    ess: float
    log_gamma: np.ndarray


def _log_gamma(q, k, mu, tau):
    u = q + k
    return log_gaussian_ratio_integral(u[:, None, :], u[None, :, :], mu, tau)


def cv_moments(q, k, v, mu, num_samples: int, tau: float = 1.0) -> CVMoments:
    r"""Closed-form moments of ``h_m``, ``h``, ``g`` for ``S`` iid draws from ``N(μ, τ²I)``
    (``eva.derived.cv_moments``); entries are ``inf`` where ``Γ`` diverges or overflows.

    ``q`` ``(d,)``, ``k`` ``(M, d)``, ``v`` ``(M, d_v)``, ``mu`` ``(d,)``.
    """
    q, k, v, mu = _vec(q, "q"), _vec(k, "k"), _vec(v, "v"), _vec(mu, "mu")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    log_w = log_softmax_weights(q, k)
    log_gamma = _log_gamma(q, k, mu, tau)
    pair = log_w[:, None] + log_w[None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        cov_h = _signed_expm1_times(pair, log_gamma) / num_samples
        omega_sq = float(np.exp(logsumexp(pair + log_gamma)))
        var_h = (omega_sq - 1.0) / num_samples if math.isfinite(omega_sq) else math.inf
        cov_hg = cov_h.sum(axis=0) @ v
        var_g = v.T @ cov_h @ v
    return CVMoments(np.exp(log_w), cov_h, var_h, cov_hg, var_g, omega_sq, num_samples / omega_sq, log_gamma)


#: The 41 edge sets of the complete graph on 4 vertices that touch every vertex (inclusion–exclusion terms of a
#: centred fourth moment of log-normal factors; see :func:`token_fourth_moments`).
_PAIRS4 = tuple(itertools.combinations(range(4), 2))
_COVERS4 = tuple(edges for r in range(1, 7) for edges in itertools.combinations(_PAIRS4, r)
                 if {i for e in edges for i in e} == {0, 1, 2, 3})


def token_fourth_moments(q, k, mu, num_samples: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Centred second and fourth moments of the per-token terms ``X_m = h_m - w_m``, ``S`` iid draws from
    ``N(μ, I)`` (``τ = 1``): ``(C, F)`` with ``C_ij = E[X_i X_j]`` ``(M, M)`` and ``F_ijkl = E[X_i X_j X_k X_l]``
    ``(M, M, M, M)``; entries ``inf``/``nan`` where a moment overflows. Cost ``O(41 M⁴)``.

    Derivation. One draw: ``h_m = w_m r_m`` with ``r_m = N(ω; u_m, I)/N(ω; μ, I) = exp(z·a_m - ‖a_m‖²/2)``,
    ``a_m = u_m - μ``, ``z = ω - μ ~ N(0, I)``, so ``E[Π_{t∈T} r_{m_t}] = exp(Σ_{s<t ∈ T} a_{m_s}·a_{m_t})``
    (a Gaussian moment generating function). With ``e_st = expm1(a_{m_s}·a_{m_t})``,
    ``E[Π_t r_{m_t}] = Π_{s<t}(1 + e_st) = Σ_{E ⊆ pairs} Π_{(s,t)∈E} e_st``, and inclusion–exclusion over the
    subsets of factors gives, exactly and without cancellation,
    ``E[Π_{t=1}^{4} (r_{m_t} - 1)] = Σ_{E covers {1,2,3,4}} Π_{(s,t)∈E} e_st`` (41 edge sets, :data:`_COVERS4`);
    likewise ``E[(r_i - 1)(r_j - 1)] = e_ij``. So one draw's ``Y_m = w_m(r_m - 1)`` has ``C¹_ij = w_i w_j e_ij`` and
    ``F¹_ijkl = w_i w_j w_k w_l Σ_E Π e``. The mean of ``S`` iid draws: in ``S⁻⁴ Σ_{s_1..s_4} E[Y_{s_1 i} ⋯ Y_{s_4 l}]``
    only index patterns where every draw appears at least twice survive (``E Y = 0``): all four equal (``S``
    terms) or two distinct pairs (``S(S - 1)`` per pairing), so
    ``F = F¹/S³ + (S - 1)/S³ (C¹_ij C¹_kl + C¹_ik C¹_jl + C¹_il C¹_jk)`` and ``C = C¹/S``.
    Every moment of a Gaussian–exponential integrand is finite, so ``F`` is finite unless it overflows.
    """
    q, k, mu = _vec(q, "q"), _vec(k, "k"), _vec(mu, "mu")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    w = np.exp(log_softmax_weights(q, k))
    a = q + k - mu
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.expm1(a @ a.T)
        letters = "ijkl"
        f1 = np.zeros((len(w),) * 4)
        for edges in _COVERS4:
            spec = ",".join(letters[s] + letters[t] for s, t in edges) + "->ijkl"
            f1 = f1 + np.einsum(spec, *([e] * len(edges)))
        f1 = f1 * np.einsum("i,j,k,l->ijkl", w, w, w, w)
        c1 = np.outer(w, w) * e
        s = float(num_samples)
        pairs = (np.einsum("ij,kl->ijkl", c1, c1) + np.einsum("ik,jl->ijkl", c1, c1)
                 + np.einsum("il,jk->ijkl", c1, c1))
        return c1 / s, f1 / s**3 + (s - 1.0) / s**3 * pairs


def quadratic_form_sd(q, k, mu, form, num_samples: int) -> float:
    r"""Exact sd of the replicate ``Q = Xᵀ A X`` (``X_m = h_m - w_m``, ``A = form`` ``(M, M)``, any matrix) for
    ``S`` iid draws from ``N(μ, I)``: ``Var Q = Σ A_ij A_kl F_ijkl - (Σ A_ij C_ij)²`` with ``(C, F)`` from
    :func:`token_fourth_moments`. Every second moment of ``eva.derived.cv_moments`` is the mean of such a ``Q``
    (the means are known): ``(h - 1)² = Xᵀ11ᵀX``, ``(h_i - w_i)(h_j - w_j)`` (``A = e_i e_jᵀ``),
    ``(h - 1)(g - β)·u = Xᵀ 1 (Vu)ᵀ X`` and ``‖g - β‖² = Xᵀ V Vᵀ X`` (``g - β = Σ_m X_m v_m`` as
    ``Σ_m w_m v_m = β``). ``inf`` on overflow."""
    c, f = token_fourth_moments(q, k, mu, num_samples)
    form = np.asarray(form, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        var = float(np.einsum("ij,kl,ijkl->", form, form, f)) - float(np.sum(form * c)) ** 2
    if not math.isfinite(var):
        return math.inf
    return math.sqrt(max(var, 0.0))


def cv_variance(var_g, cov_hg, var_h, beta, *, form: str = "exact") -> np.ndarray:
    r"""``Var[g - βh]`` from ``Var[g]``, ``Cov[h, g]``, ``Var[h]`` (App B.1, display before Eq 20).

    ``form="exact"``: ``Var[g] - Cov[h,g]βᵀ - βCov[h,g]ᵀ + Var[h]ββᵀ``; ``form="printed"``: the paper's
    ``Var[g] - 2Cov[h,g]βᵀ + Var[h]ββᵀ`` (``Cov[h,g]βᵀ`` the outer product ``c_i β_j``). The two agree in
    trace, and entrywise only when ``β`` is parallel to ``Cov[h, g]``.
    """
    var_g, c, beta = np.asarray(var_g, float), np.asarray(cov_hg, float), np.asarray(beta, float)
    cross = np.multiply.outer(c, beta)
    if form == "exact":
        return var_g - cross - cross.T + var_h * np.multiply.outer(beta, beta)
    if form == "printed":
        return var_g - 2.0 * cross + var_h * np.multiply.outer(beta, beta)
    raise ValueError(f"unknown form {form!r}; expected 'exact' or 'printed'")


def optimal_cv_coefficient(cov_hg, var_h) -> np.ndarray:
    r"""Eq 20: ``β* = Cov[h, g] / Var[h]`` (minimiser of ``Tr Var[g - βh]`` for ``Var[h] > 0``)."""
    if not var_h > 0:
        raise ValueError(f"Var[h] must be > 0, got {var_h}")
    return np.asarray(cov_hg, float) / var_h


def _skewness_from_moments(log_m2: float, log_m3: float) -> float:
    """Skewness of a positive variable with mean 1 from ``log E[X²]`` and ``log E[X³]`` (``inf`` on overflow)."""
    if not (math.isfinite(log_m2) and math.isfinite(log_m3)):
        return math.inf
    var = math.expm1(log_m2) if log_m2 < 700 else math.inf
    if not var > 0:
        return 0.0
    if not math.isfinite(var):
        return math.inf
    third = math.exp(log_m3) - 3.0 * math.exp(log_m2) + 2.0 if log_m3 < 700 else math.inf
    return third / var**1.5


def importance_weight_skewness(q, k, mu, num_samples: int) -> tuple[float, np.ndarray]:
    r"""Skewness of ``h = (1/S)Σ_s W(ω_s)`` and of each ``h_m`` for ``S`` iid draws from ``N(μ, I)``.

    With ``a_m = q + k_m - μ`` and the unit-covariance Gaussian integral
    ``∫ N(ω; a, I) N(ω; b, I) N(ω; c, I) / N(ω; μ, I)² dω = exp(a'·b' + a'·c' + b'·c')`` (``a' = a - μ``), one draw
    has ``E[W] = 1``, ``E[W²] = Ω = Σ w_m w_m' exp(a_m·a_m')`` and ``E[W³] = Σ_{m,m',m''} w_m w_m' w_m''
    exp(a_m·a_m' + a_m·a_m'' + a_m'·a_m'')``; each token term is log-normal with ``σ² = ‖a_m‖²``, skewness
    ``(e^{σ²} + 2)√(e^{σ²} - 1)``. A mean of ``S`` iid draws has skewness ``γ₁/√S``. Returns ``(γ_h, γ_{h_m})``;
    ``inf`` where a moment overflows, ``0`` where the variance vanishes. Cost ``O(M³ d)``.
    """
    q, k, mu = _vec(q, "q"), _vec(k, "k"), _vec(mu, "mu")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    log_w = log_softmax_weights(q, k)
    a = q + k - mu
    gram = a @ a.T
    log_m2 = float(logsumexp(log_w[:, None] + log_w[None, :] + gram))
    triple = (log_w[:, None, None] + log_w[None, :, None] + log_w[None, None, :]
              + gram[:, :, None] + gram[:, None, :] + gram[None, :, :])
    root = math.sqrt(num_samples)
    sigma2 = np.diag(gram)
    with np.errstate(over="ignore"):
        tokens = np.where(sigma2 > 0, (np.exp(sigma2) + 2.0) * np.sqrt(np.expm1(sigma2)), 0.0)
    return _skewness_from_moments(log_m2, float(logsumexp(triple))) / root, tokens / root


def token_cv_variance(var_h_m: float, v_m, beta) -> float:
    r"""``Tr Var[g_m - β(h_m - w_m)] = Var[h_m] ‖v_m - β‖²`` (since ``g_m = h_m v_m``)."""
    diff = np.asarray(v_m, float) - np.asarray(beta, float)
    return float(var_h_m * (diff @ diff))


def subset_cv_variance(cov_h, v, beta, subset=None) -> float:
    r"""``Tr Var[Σ_{m∈P}(g_m - β(h_m - w_m))] = Σ_{m,m'∈P} Cov[h_m, h_{m'}] (v_m - β)·(v_{m'} - β)``."""
    idx = np.arange(np.shape(cov_h)[0]) if subset is None else np.asarray(subset)
    a = np.asarray(v, float)[idx] - np.asarray(beta, float)
    return float(np.einsum("mn,mi,ni->", np.asarray(cov_h)[np.ix_(idx, idx)], a, a))


def subset_variance_minimiser(cov_h, v, subset=None) -> np.ndarray:
    r"""``β_var,P = Σ_{m,m'∈P} Cov[h_m, h_{m'}] v_{m'} / Σ_{m,m'∈P} Cov[h_m, h_{m'}]`` (Eq 20 for ``G_P, H_P``)."""
    idx = np.arange(np.shape(cov_h)[0]) if subset is None else np.asarray(subset)
    block = np.asarray(cov_h)[np.ix_(idx, idx)]
    total = block.sum()
    if not total > 0:
        raise ValueError(f"Var[H_P] must be > 0, got {total}")
    return block.sum(axis=0) @ np.asarray(v, float)[idx] / total


# ------------------------------------------------------------------------------------ weighted MSE J


def _partition(alpha, targets, labels):
    alpha, targets = np.asarray(alpha, float), np.asarray(targets, float)
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != alpha.shape[-1] or (labels < 0).any():
        raise ValueError("labels must be a 1-D array of subset indices >= 0, one per weight")
    onehot = np.zeros((labels.max(initial=-1) + 1, labels.size))
    onehot[labels, np.arange(labels.size)] = 1.0
    return alpha, targets, labels, onehot


def weighted_error(alpha, targets, labels, coefficients) -> float:
    r"""``J(β_1, …, β_C) = Σ_c Σ_{m∈P_c} α_m ‖β_c - β*_m‖²`` (Eq 24; Eq 9 with ``α`` the softmax over ``U``).

    ``alpha`` ``(M,)``, ``targets`` ``β*_m`` ``(M, p)``, ``labels`` ``(M,)`` in ``0..C-1``, ``coefficients``
    ``(C, p)`` (or ``(p,)``: one shared coefficient).
    """
    alpha, targets, labels, _ = _partition(alpha, targets, labels)
    coef = np.asarray(coefficients, float)
    per_token = coef[labels] if coef.ndim == 2 else coef
    diff = per_token - targets
    return float(alpha @ np.einsum("mi,mi->m", diff, diff))


def partition_optimal_coefficients(alpha, targets, labels) -> np.ndarray:
    r"""Lemma 3 / Prop 2: ``β*_c = Σ_{m∈P_c} α_m β*_m / Σ_{m∈P_c} α_m`` ``(C, p)``."""
    alpha, targets, _, onehot = _partition(alpha, targets, labels)
    mass = onehot @ alpha
    if not (mass > 0).all():
        raise ValueError("every subset needs positive total weight")
    return (onehot * alpha) @ targets / mass[:, None]


def pythagoras_gap(alpha, targets, labels, beta) -> float:
    r"""``Σ_c A_c ‖β - β*_c‖²``, ``A_c = Σ_{m∈P_c} α_m``: equal to ``J(β,…,β) - J(β*_1,…,β*_C)``."""
    alpha, targets, labels, onehot = _partition(alpha, targets, labels)
    diff = np.asarray(beta, float) - partition_optimal_coefficients(alpha, targets, labels)
    return float((onehot @ alpha) @ np.einsum("ci,ci->c", diff, diff))


def error_decomposition(alpha, targets, labels, beta, coefficients=None) -> dict[str, float]:
    r"""App B.6's terms for a shared ``β`` and subset coefficients ``β_c`` (default: the partition optimum
    :func:`partition_optimal_coefficients`; B.6 uses the local softmaxes of :func:`local_softmax`):

    ``total = J(β,…,β)``, ``between = Σ_c Σ_{m∈P_c} α_m ‖β - β_c‖²``, ``within = Σ_c Σ_{m∈P_c} α_m ‖β_c - β*_m‖²``,
    ``cross = Σ_c Σ_{m∈P_c} α_m (β - β_c)·(β_c - β*_m)`` (zero) and ``cross_scale`` = the sum of the cross
    term's absolute summands (its round-off magnitude).
    """
    alpha, targets, labels, _ = _partition(alpha, targets, labels)
    beta = np.asarray(beta, float)
    best = partition_optimal_coefficients(alpha, targets, labels) if coefficients is None else coefficients
    opt = np.asarray(best, float)[labels]
    to_opt, spread = beta - opt, opt - targets
    cross_terms = alpha * np.einsum("mi,mi->m", to_opt, spread)
    return dict(total=weighted_error(alpha, targets, labels, beta),
                between=float(alpha @ np.einsum("mi,mi->m", to_opt, to_opt)),
                within=float(alpha @ np.einsum("mi,mi->m", spread, spread)),
                cross=float(cross_terms.sum()),
                cross_scale=float(alpha @ (np.linalg.norm(to_opt, axis=1) * np.linalg.norm(spread, axis=1))))


# --------------------------------------------------------------------------------------- asymptotics


def _quadratic_form(log_w, log_gamma, a) -> float:
    """``Σ_{m,m'} w_m w_{m'} (a_m·a_{m'}) Γ_{mm'}`` in log space (``inf`` on overflow)."""
    dots = a @ a.T
    with np.errstate(divide="ignore", over="ignore"):
        logs = log_w[:, None] + log_w[None, :] + log_gamma + np.log(np.abs(dots))
        top = np.max(logs, initial=-np.inf)
        if not math.isfinite(top):
            return 0.0 if top == -np.inf else math.inf
        return float(np.sum(np.sign(dots) * np.exp(logs - top)) * math.exp(top))


def snis_asymptotics(q, k, v, mu, tau: float = 1.0) -> tuple[float, np.ndarray]:
    r"""RFA_ρ's large-``S`` constants (``eva.derived.snis_asymptotics``), ``β = SoftmaxAttn(q)``:

    ``σ²_RFA = Σ_{m,m'} w_m w_{m'} (v_m - β)·(v_{m'} - β) Γ_{mm'}`` (``S·MSE → σ²_RFA``) and
    ``b = -Σ_{m,m'} w_m w_{m'} (v_m - β) Γ_{mm'}`` (``S·bias → b``). Pass a subset's keys and values for a
    local coefficient ``β̂_c``.
    """
    q, k, v, mu = _vec(q, "q"), _vec(k, "k"), _vec(v, "v"), _vec(mu, "mu")
    log_w = log_softmax_weights(q, k)
    log_gamma = _log_gamma(q, k, mu, tau)
    a = v - np.exp(log_w) @ v
    sigma2 = _quadratic_form(log_w, log_gamma, a)
    with np.errstate(over="ignore"):
        bias = -np.exp(log_w[:, None] + log_w[None, :] + log_gamma).sum(axis=1) @ a
    return sigma2, bias


#: Largest dimension of ``span{q + k_m - μ}`` for which :func:`snis_finite_mse` integrates (a product rule of
#: ``n^r`` nodes); beyond it the function returns NaN.
SNIS_QUADRATURE_RANK = 4
#: Gauss–Hermite nodes of :func:`snis_finite_mse` along a principal direction of ``{q + k_m - μ}`` with singular
#: value ``σ``: ``clip(4 + 3σ, 6, 40)`` (the integrands vary on a scale ``1/σ`` along it). Measured against
#: rules with ~1.5x the nodes per direction: relative error < 3e-3 of MSE(S), < 7e-3 of log-log slopes, at every
#: quick-tier cell of eva.eq21/eq27 (Ω up to 3e7); the default lattice step 0.1 of ``log t`` adds ~2e-3 (a nearly
#: constant factor, which slopes do not see), ~1e-4 at step 0.01 (``tests/test_eva_snis_quadrature.py``).
_SNIS_NODES = (4.0, 3.0, 6, 40)
#: Largest ``nodes × shifts`` block of :func:`snis_finite_mse` held at once (bounds its memory).
_SNIS_ENTRIES = 4_000_000
#: Fewest nodes per dimension at rank 1, 2, 3, 4 (cheap at low rank; at most the largest count of _SNIS_NODES).
_SNIS_MIN_NODES = {1: 40, 2: 32, 3: 12, 4: 6}
#: Window of ``s = log(t W)`` summed term by term; below it ``e^{-tW} = 1 - tW`` (error ``< e^{2·S_LO}``),
#: above it ``e^{-tW} = 0`` and ``ψ(tW) = 1/(tW)`` (errors ``< exp(-e^{S_HI})``).
_S_LO, _S_HI = -14.0, 4.5



def _laplace_transforms(log_w, weights, tau0: float, tau1: float, step: float):
    r"""``Λ_k(τ) = E[e^{-tW_k}]`` and ``Ψ_k(τ) = E[ψ(tW_k)]``, ``ψ(u) = (1 - e^{-u})/u``, ``t = e^τ``, on
    ``τ_i = τ_0 + i·step``, for the discrete laws ``{log W_k(z_n), weights_n}`` (``log_w`` ``(N, K)``).

    The law of ``log W_k`` is binned on a lattice of spacing ``step`` (linear, "cloud-in-cell" shares: the first
    moment of every node is kept, so the binning error is ``O(step²)``). On the same lattice ``τ_i + ℓ_b`` is a
    lattice point, so each transform is a sum over bins of a fixed kernel: the kernel's transition window is summed
    term by term (a direct correlation, which keeps the relative accuracy of tiny values that large ``t``
    multiplies; an FFT would not), and the bins below and above it by prefix and suffix sums of their masses."""
    _, k = log_w.shape
    lo, hi = float(log_w.min()), float(log_w.max())
    nb = int(math.ceil((hi - lo) / step)) + 2
    pos = (log_w - lo) / step
    i0 = np.floor(pos).astype(np.int64)
    frac = pos - i0
    col = np.arange(k)[None, :] * nb
    mass = (np.bincount((i0 + col).ravel(), (weights[:, None] * (1 - frac)).ravel(), k * nb)
            + np.bincount((i0 + 1 + col).ravel(), (weights[:, None] * frac).ravel(), k * nb)).reshape(k, nb)
    ell = lo + step * np.arange(nb)
    count = int(math.ceil((tau1 - tau0) / step)) + 1
    tau = tau0 + step * np.arange(count)
    s0 = tau0 + lo                                    # lattice s_j = s0 + j·step = τ_i + ℓ_b for j = i + b
    j_lo, j_hi = int(math.ceil((_S_LO - s0) / step)), int(math.floor((_S_HI - s0) / step))
    width = j_hi - j_lo + 1
    e = np.exp(s0 + step * np.arange(j_lo, j_hi + 1))
    kernels = (np.exp(-e), -np.expm1(-e) / e)        # e^{-u} and ψ(u) on the window
    zero = np.zeros((k, 1))
    below = np.concatenate([zero, np.cumsum(mass, 1)], 1)                          # Σ_{b<B} m_b
    below1 = np.concatenate([zero, np.cumsum(mass * np.exp(ell - hi), 1)], 1)      # Σ_{b<B} m_b W_b e^{-hi}
    tail = np.cumsum((mass * np.exp(lo - ell))[:, ::-1], 1)[:, ::-1]
    above = np.concatenate([tail, zero], 1)                                        # Σ_{b>=B} m_b e^{lo}/W_b
    i = np.arange(count)
    b_lo, b_hi = np.clip(j_lo - i, 0, nb), np.clip(j_hi + 1 - i, 0, nb)
    t_hi = np.exp(tau + hi)
    with np.errstate(over="ignore", invalid="ignore"):
        lam = below[:, b_lo] - t_hi * below1[:, b_lo]
        psi = below[:, b_lo] - 0.5 * t_hi * below1[:, b_lo] + np.exp(-tau - lo) * above[:, b_hi]
    padded = np.zeros((k, nb + 2 * width))
    padded[:, width:width + nb] = mass
    where = j_lo - i + width + width // 2             # correlate1d centres its kernel at width // 2
    inside = (where >= 0) & (where < padded.shape[1])
    for acc, kernel in zip((lam, psi), kernels, strict=True):
        acc[:, inside] += correlate1d(padded, kernel, axis=1, mode="constant")[:, where[inside]]
    return tau, np.maximum(lam, 0.0), np.maximum(psi, 0.0)


def snis_quadrature_rank(q, k, mu) -> int:
    """Dimension of ``span{q + k_m - μ}``: the dimension of :func:`snis_finite_mse`'s integrals (NaN beyond
    :data:`SNIS_QUADRATURE_RANK`)."""
    sv = np.linalg.svd((_vec(q, "q") + _vec(k, "k") - _vec(mu, "mu")).T, compute_uv=False)
    return int((sv > 1e-12 * max(float(sv.max(initial=0.0)), 1.0)).sum())


def _snis_sizes(sizes) -> np.ndarray:
    sizes = np.asarray(sizes, dtype=np.float64).ravel()
    if sizes.size == 0 or not (sizes >= 1).all() or not (sizes == np.round(sizes)).all():
        raise ValueError(f"sizes must be integers >= 1, got {sizes}")
    return sizes


def _snis_laplace(q, k, v, mu, largest: float, nodes, refine: float, step: float):
    """``(t, log L(t), φ_2(t), φ_1(t))`` of :func:`snis_finite_mse` on its lattice (``φ_1`` ``(d_v, T)``);
    ``"exact"`` when the estimate has no error, ``None`` when the rank exceeds :data:`SNIS_QUADRATURE_RANK`."""
    q, k, v, mu = _vec(q, "q"), _vec(k, "k"), _vec(v, "v"), _vec(mu, "mu")
    log_w = log_softmax_weights(q, k)
    w = np.exp(log_w)
    a = q + k - mu
    big = v - w @ v
    basis, sv, _ = np.linalg.svd(a.T, full_matrices=False)
    rank = snis_quadrature_rank(q, k, mu)
    if rank == 0 or not np.any(big):
        return "exact"
    if rank > SNIS_QUADRATURE_RANK:
        return None
    coords = a @ basis[:, :rank]
    if nodes is None:
        offset, slope, low, high = _SNIS_NODES
        counts = np.clip(np.ceil(refine * (offset + slope * sv[:rank])), refine * max(low, _SNIS_MIN_NODES[rank]),
                         refine * high)
    else:
        counts = np.full(rank, int(nodes))
    z, weights = gauss_hermite_rule(np.ceil(counts))
    m = k.shape[0]
    gram = a @ a.T
    with np.errstate(over="ignore"):
        ww_gamma = np.outer(w, w) * np.exp(gram)
    # every pair counts: a pair with a small weight Γ_mm' can carry MSE(S) where it is far below σ²_RFA/S (heavy
    # weights at small S), so no pair is dropped for being small against σ²_RFA
    iu = np.triu_indices(m)
    base = log_w - 0.5 * np.diag(gram)
    # log of the coefficients of W(x + c) = Σ_j exp(coef_j + a_j·x): c = 0, c = a_m, c = a_m + a_m' (m <= m')
    log_c = np.vstack([base[None, :], base[None, :] + gram, base[None, :] + gram[iu[0]] + gram[iu[1]]])
    lz = z @ coords.T
    top = lz.max(1, keepdims=True)
    factors = np.exp(lz - top)
    blocks = [slice(i, i + max(1, _SNIS_ENTRIES // z.shape[0])) for i in range(0, log_c.shape[0],
                                                                             max(1, _SNIS_ENTRIES // z.shape[0]))]

    def log_weights(block):                          # log W(z_n + c) for the shifts of one block, (nodes, shifts)
        ctop = log_c[block].max(1, keepdims=True)
        return np.log(factors @ np.exp(log_c[block] - ctop).T) + top + ctop.T

    keep = len(blocks) <= 4                          # hold every block (<= 4 x _SNIS_ENTRIES) or compute twice
    held = [log_weights(block) for block in blocks] if keep else []
    lowest = min(float(x.min()) for x in held) if keep else min(float(log_weights(b).min()) for b in blocks)
    tau0 = math.log(1e-7 / largest)                 # below: t·S <= 1e-7, a contribution O(1e-14) of MSE
    tau1 = 30.0 - lowest                             # above: e^{-tW} = 0 at every node
    parts = [_laplace_transforms(held[i] if keep else log_weights(block), weights, tau0, tau1, step)
             for i, block in enumerate(blocks)]
    tau = parts[0][0]
    lam, psi = np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])
    t = np.exp(tau)
    lam0, lam1, lam2 = lam[0], lam[1:m + 1], lam[m + 1:]
    psi1, psi2 = psi[1:m + 1], psi[m + 1:]
    one_minus_l = t * (w @ psi1)
    with np.errstate(divide="ignore"):
        log_l = np.where(lam0 > 0.5, np.log1p(-np.clip(one_minus_l, 0.0, 0.5)), np.log(lam0))
    pair = np.where(iu[0] == iu[1], 1.0, 2.0)
    phi2 = ((ww_gamma * (big @ big.T))[iu] * pair) @ lam2
    psi_full = np.zeros((m, m, t.size))
    psi_full[iu[0], iu[1]] = psi2
    psi_full[iu[1], iu[0]] = psi2
    tilted = -t * np.einsum("mjt,mj,mv->vt", psi_full, ww_gamma, big)
    direct = np.einsum("m,mv,mt->vt", w, big, lam1)
    phi1 = np.where(lam1.max(0) < 0.5, direct, tilted)
    return t, log_l, phi2, phi1


def snis_finite_mse(q, k, v, mu, sizes, *, nodes: int | None = None, refine: float = 1.0,
                    step: float = 0.1) -> np.ndarray:
    r"""The exact mean squared error ``MSE(S) = E‖β̂(ω) - β‖²`` of RFA_ρ (the SNIS estimate ``β̂ = g/h`` of
    ``β = SoftmaxAttn(q)`` from ``S`` iid draws of ``ρ = N(μ, I)``) at every ``S`` in ``sizes``, by quadrature.

    Write ``ω_s = μ + x_s``, ``a_m = q + k_m - μ``, ``W_m(x) = w_m e^{a_m·x - ‖a_m‖²/2}`` (so ``W = Σ_m W_m`` is
    the importance weight and ``W f - Wβ = Σ_m W_m A_m``, ``A_m = v_m - β``), ``Y = Σ_m W_m A_m``. With
    ``1/D² = ∫_0^∞ t e^{-tD} dt`` and the independence of the draws,

    .. math:: \mathrm{MSE}(S) = ∫_0^∞ t\,[S φ_2(t) L(t)^{S-1} + S(S-1) ‖φ_1(t)‖² L(t)^{S-2}]\,dt,

    ``L(t) = E e^{-tW}``, ``φ_1 = E[Y e^{-tW}]``, ``φ_2 = E[‖Y‖² e^{-tW}]``. The tilting identity
    ``E[e^{c·x - ‖c‖²/2} F(x)] = E[F(x + c)]`` turns every expectation into one of a bounded function of ``x``:
    ``φ_2 = Σ_{m,m'} w_m w_{m'} (A_m·A_{m'}) Γ_{mm'} Λ(t; a_m + a_{m'})`` (``Γ_{mm'} = e^{a_m·a_{m'}}``),
    ``φ_1 = Σ_m w_m A_m Λ(t; a_m) = -t Σ_{m,j} w_m w_j Γ_{mj} A_m Ψ(t; a_m + a_j)`` and
    ``1 - L = t Σ_j w_j Ψ(t; a_j)``, with ``Λ(t; c) = E e^{-tW(x + c)}`` and ``Ψ(t; c) = E ψ(tW(x + c))``,
    ``ψ(u) = (1 - e^{-u})/u`` (the tilted forms are used where ``1 - L`` and ``Λ(t; a_m)`` are near 1, the
    direct ones where they are small, so no difference of near-equal numbers is formed). ``W(x + c)`` depends
    on ``x`` only through its projection on ``span{a_m}`` (rank ``r``): the expectations are product
    Gauss–Hermite rules in ``r`` dimensions along the principal directions of ``{a_m}`` (``nodes`` per dimension,
    default ``clip(4 + 3σ_i, 6, 40)`` for singular value ``σ_i``, at least 40/32/12/6 for ``r`` = 1..4; ``refine``
    multiplies the default counts, for convergence checks), the
    ``t`` integral a sum on a lattice of ``log t`` of spacing ``step``. ``S·MSE(S) → σ²_RFA`` of
    :func:`snis_asymptotics` (the sum of the ``φ_2`` coefficients) as ``S → ∞``.

    Returns ``(len(sizes),)``; NaN when ``r > SNIS_QUADRATURE_RANK`` (an ``r``-dimensional integral), zeros when
    the estimate is exact (all ``A_m = 0`` or all ``a_m = 0``). Cost ``O(n^r M² + M² T)`` for ``T ~ 4000``
    lattice points. ``q`` ``(d,)``, ``k`` ``(M, d)``, ``v`` ``(M, d_v)``, ``mu`` ``(d,)``, ``sizes`` integers >= 1.
    """
    sizes = _snis_sizes(sizes)
    parts = _snis_laplace(q, k, v, mu, float(sizes.max()), nodes, refine, step)
    if parts is None:
        return np.full(sizes.size, np.nan)
    if isinstance(parts, str):
        return np.zeros(sizes.size)
    t, log_l, phi2, phi1 = parts
    phi1_sq = (phi1**2).sum(0)
    out = np.empty(sizes.size)
    with np.errstate(under="ignore", over="ignore", invalid="ignore", divide="ignore"):
        for idx, size in enumerate(sizes):
            first = size * phi2 * np.exp((size - 1) * log_l)
            second = size * (size - 1) * phi1_sq * np.exp((size - 2) * log_l) if size > 1 else 0.0
            out[idx] = step * float(np.nansum(t * t * (first + second)))
    return out


def snis_finite_bias(q, k, v, mu, sizes, *, nodes: int | None = None, refine: float = 1.0,
                     step: float = 0.1) -> np.ndarray:
    r"""The exact bias ``E[β̂(ω)] - β`` of RFA_ρ (SNIS, ``S`` iid draws of ``N(μ, I)``) at every ``S`` in ``sizes``,
    ``(len(sizes), d_v)``, by the quadrature of :func:`snis_finite_mse`: with ``1/D = ∫_0^∞ e^{-tD} dt``,

    .. math:: E[β̂] - β = S ∫_0^∞ φ_1(t) L(t)^{S-1}\,dt,

    ``φ_1(t) = E[Y e^{-tW}]``, ``L(t) = E e^{-tW}`` as there. ``S·bias → b`` of :func:`snis_asymptotics` as
    ``S → ∞``. NaN beyond :data:`SNIS_QUADRATURE_RANK`, zeros when the estimate is exact.
    """
    sizes = _snis_sizes(sizes)
    dv = np.asarray(v).shape[-1]
    parts = _snis_laplace(q, k, v, mu, float(sizes.max()), nodes, refine, step)
    if parts is None:
        return np.full((sizes.size, dv), np.nan)
    if isinstance(parts, str):
        return np.zeros((sizes.size, dv))
    t, log_l, _, phi1 = parts
    out = np.empty((sizes.size, dv))
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        for idx, size in enumerate(sizes):
            out[idx] = size * step * np.nansum(t * phi1 * np.exp((size - 1) * log_l), axis=1)
    return out


def eva13_asymptotics(q, k, v, labels, mu, *, sampling: str = "shared", tau: float = 1.0) -> float:
    r"""``lim S·MSE(EVA13)`` (``eva.derived.eva13_asymptotics``).

    ``shared``: ``Σ_{m,m'∉E} w_m w_{m'} (v_m - β*_{c(m)})·(v_{m'} - β*_{c(m')}) Γ_{mm'}`` with ``mu`` ``(d,)``;
    ``per_chunk``: ``Σ_c Σ_{m,m'∈P_c} w_m w_{m'} (v_m - β*_c)·(v_{m'} - β*_c) Γ^c_{mm'}`` with ``mu`` ``(C, d)``.
    ``labels`` ``(M,)`` as in :func:`local_softmax` (no excluded keys).
    """
    q, k, v, mu = _vec(q, "q"), _vec(k, "k"), _vec(v, "v"), _vec(mu, "mu")
    labels = np.asarray(labels)
    if (labels == EXCLUDED).any():
        raise ValueError("eva13_asymptotics takes a partition of all keys (no EXCLUDED label)")
    log_w = log_softmax_weights(q, k)
    _, beta = local_softmax(q, k, v, labels)
    inside = labels != EXACT
    a = np.where(inside[:, None], v - beta[np.maximum(labels, 0)], 0.0)
    if sampling == "shared":
        return _quadratic_form(log_w, _log_gamma(q, k, mu, tau), a)
    if sampling != "per_chunk":
        raise ValueError(f"unknown sampling {sampling!r}; expected 'shared' or 'per_chunk'")
    total = 0.0
    for c in range(beta.shape[0]):
        idx = np.flatnonzero(labels == c)
        total += _quadratic_form(log_w[idx], _log_gamma(q, k[idx], mu[c], tau), a[idx])
    return total


def eq16_large_s_limit(q, k, v, exact, chunks) -> np.ndarray:
    r"""``EVA16*``: Eq 16 with ``β̂_c`` replaced by the local softmax ``β*_c(q_n)``, the ``S → ∞`` limit of the
    multi-sample practical estimator (App C; ``eva.derived.eq16_large_s_limit``), from its definition:

    ``y_n = (Σ_{m∈E_n} e^{q_n·k_m} v_m + Σ_c e^{q_n·k̃_c} β*_c(q_n)) / (Σ_{m∈E_n} e^{q_n·k_m} + Σ_c e^{q_n·k̃_c})``,
    ``β*_c(q_n) = Σ_{m∈P_c} softmax_m(q_n·k_m) v_m`` and ``k̃_c`` the mean of ``P_c``'s keys (mean pooling, no
    ``σ``). ``exact`` ``(N, M)`` bool marks ``E_n``; ``chunks`` lists the key indices of each ``P_c``.
    """
    q, k, v = _vec(q, "q"), _vec(k, "k"), _vec(v, "v")
    logits = q @ k.T                                                              # (N, M)
    chunks = [np.asarray(idx) for idx in chunks]
    beta = np.stack([_softmax_rows(logits[:, idx]) @ v[idx] for idx in chunks], axis=1)       # (N, C, d_v)
    chunk_logits = q @ np.stack([k[idx].mean(axis=0) for idx in chunks]).T                     # (N, C)
    weights = _softmax_rows(np.concatenate([np.where(exact, logits, -np.inf), chunk_logits], axis=-1))
    m = k.shape[0]
    return weights[:, :m] @ v + np.einsum("nc,ncv->nv", weights[:, m:], beta)


def _softmax_rows(logits: np.ndarray) -> np.ndarray:
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def eva_practical_gemms(n: int, d: int, dv: int, block: int, num_chunks: int) -> tuple:
    """Matrix products of practical (or causal) EVA with ``n`` tokens, blocks of ``block`` and ``num_chunks``
    chunks (``(n, k, p, count)`` as :mod:`rfkit.theory.cost`): local logits and outputs, chunk logits and
    outputs, chunk key features and coefficients. The implementation batches the per-block and per-chunk
    products; each batch is listed as the single GEMM with the same flop count (the benchmark's roofline
    then times one large product instead of many small ones)."""
    return ((n, d, block, 1), (n, block, dv, 1), (n, d, num_chunks, 1), (n, num_chunks, dv, 1), (1, d, n, 1),
            (1, n, dv, 1)) if num_chunks else ((n, d, block, 1), (n, block, dv, 1))
