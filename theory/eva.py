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
* **Asymptotics**: :func:`snis_asymptotics` (``S·MSE → σ²_RFA``, ``S·bias → b``), :func:`eva13_asymptotics`
  (shared and per-chunk sampling), :func:`eq16_large_s_limit` (``EVA16*``, the ``S → ∞`` limit of the
  multi-sample practical estimator).
* **Cost**: :func:`eva_practical_gemms` (the matrix products of
  :func:`rfkit.estimators.eva.eva_practical` / :func:`~rfkit.estimators.eva.eva_causal`) for the benchmark.

Numerics: everything is in log space; a quantity that diverges (``τ² <= 1/2``, overflowing ``Γ``) is
``inf``, never a silent overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from rfkit.estimators.eva import EXACT, EXCLUDED, eva_practical, log_standard_normal, log_xi

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
    "eva13_asymptotics",
    "eq16_large_s_limit",
    "eva_practical_gemms",
]

_LOG_2PI = math.log(2 * math.pi)


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
    lhs = log_standard_normal(omega) + log_xi(x[None], omega)[0] + log_xi(y[None], omega)[0]
    rhs = float(x @ y) + log_standard_normal(omega - (x + y))
    return lhs, rhs


def log_target_density(omega, q, k) -> np.ndarray:
    r"""``log p_n(ω)`` from its definition (EVA Eq 3): ``N(ω;0,I) Σ_m ξ(q,ω)ξ(k_m,ω) / Z``.

    ``omega`` ``(S, d)``, ``q`` ``(d,)``, ``k`` ``(M, d)`` (a subset of the keys gives App C's ``p_c``).
    """
    omega, q, k = _vec(omega, "omega"), _vec(q, "q"), _vec(k, "k")
    log_z = logsumexp(k @ q)
    pair = log_xi(q[None], omega)[0] + log_xi(k, omega)                   # (M, S)
    return log_standard_normal(omega) + logsumexp(pair, axis=0) - log_z


def log_mixture_components(omega, q, k) -> np.ndarray:
    r"""``log(w_m N(ω_s; q + k_m, I))`` ``(M, S)``: the components of ``p_n`` as a Gaussian mixture, so that
    ``W(ω) = Σ_m w_m N(ω; u_m, I)/ρ(ω)`` and ``W(ω) f_n(ω) = Σ_m w_m v_m N(ω; u_m, I)/ρ(ω)``."""
    omega, q, k = _vec(omega, "omega"), _vec(q, "q"), _vec(k, "k")
    log_w = k @ q - logsumexp(k @ q)
    return log_w[:, None] + log_standard_normal(omega[None, :, :] - (q + k)[:, None, :])


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


def eq16_large_s_limit(q, k, v, **options) -> np.ndarray:
    r"""``EVA16*``: Eq 16 with ``β̂_c`` replaced by the local softmax ``β*_c(q_n)``, the ``S → ∞`` limit of the
    multi-sample practical estimator (``eva.derived.eq16_large_s_limit``). ``options`` are those of
    :func:`~rfkit.estimators.eva.eva_practical` (``coefficient`` and ``mode`` are fixed here)."""
    options = dict(options, coefficient="oracle", mode="eval")
    return eva_practical(q, k, v, **options)


def eva_practical_gemms(n: int, d: int, dv: int, block: int, num_chunks: int) -> tuple:
    """Matrix products of practical (or causal) EVA with ``n`` tokens, blocks of ``block`` and ``num_chunks``
    chunks (``(n, k, p, count)`` as :mod:`rfkit.theory.cost`): local logits and outputs, chunk logits and
    outputs, chunk key features and coefficients. The implementation batches the per-block and per-chunk
    products; each batch is listed as the single GEMM with the same flop count (the benchmark's roofline
    then times one large product instead of many small ones)."""
    return ((n, d, block, 1), (n, block, dv, 1), (n, d, num_chunks, 1), (n, num_chunks, dv, 1), (1, d, n, 1),
            (1, n, dv, 1)) if num_chunks else ((n, d, block, 1), (n, block, dv, 1))
