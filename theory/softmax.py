r"""Exact moments of the softmax-kernel random-feature estimators (iid and orthogonal projections).

For a pair ``(x, y)`` let ``z = x + y``, ``Δ = x - y``, ``s = ‖z‖²``, ``t = ‖Δ‖²`` and
``Λ = exp(-(‖x‖²+‖y‖²)/2)`` (Performer ``003_4855bc6ab225d7a6.txt``, Sec 2.3, Lemma 1-2). Inputs are the
*scaled* vectors (attention uses ``q/d^{1/4}``), so the target is ``SM(x, y) = exp(xᵀy) = Λ e^{s/2}``.
One random feature term with ``ω ~ N(0, I_d)`` is

* positive:    ``T = Λ exp(ωᵀz)``,                   ``ωᵀz ~ N(0, s)``;
* hyperbolic:  ``T = Λ cosh(ωᵀz)``;
* trig:        ``T = exp((‖x‖²+‖y‖²)/2) cos(ωᵀΔ)``,   ``ωᵀΔ ~ N(0, t)``;

and the estimator is the mean of ``m`` terms. Raw moments follow from the binomial expansion of
``cosh^k`` and ``cos^k`` and the Gaussian MGF / characteristic function:

.. math::

    E\,e^{kωᵀz} = e^{k^2 s/2},\quad
    E\cosh^k(ωᵀz) = 2^{-k}\sum_j \binom{k}{j} e^{(k-2j)^2 s/2},\quad
    E\cos^k(ωᵀΔ) = 2^{-k}\sum_j \binom{k}{j} e^{-(k-2j)^2 t/2}.

With ``k = 1, 2`` these give Lemma 2's MSEs, e.g. ``MSE(SM⁺_m) = SM²(e^{s} - 1)/m`` and
``MSE(SM^trig_m) = e^{‖x‖²+‖y‖²}(1 - e^{-t})²/(2m)`` (Eqs 8, 14, 18).

What this module provides, by topic:

* **iid moments** — :func:`term_raw_moment`, :func:`term_variance`, :func:`estimator_moments` (mean,
  variance, skewness), :func:`term_central_moment` and :func:`mean_central_moment` (any order, via
  cumulants: ``κ_n(T̄) = κ_n(T)/m^{n-1}``), :func:`squared_error_moments` (mean, sd and skewness of one
  replicate's squared error ``(T̄ - SM)²``: the exact standard errors of sample MSEs),
  :func:`error_power_moments` (the same for ``(T̄ - SM)^k``) and :func:`power_moments` (for ``T^k``).
* **Lemma 2 and relative errors** — :func:`lemma2_mse` (Eq 8 exactly as printed), :func:`relative_mse`
  (``RelMSE = MSE/SM²``: ``(2/m) sinh²(t/2)``, ``(e^s - 1)/m``, ``(2/m) sinh²(s/2)``).
* **Orthogonal features** — :func:`orthogonal_pair_moment` (``₁F₁(d; d/2; v)``),
  :func:`orthogonal_pair_covariance`, :func:`block_sizes`, :func:`orthogonal_mse` (R-ORF with Gaussian
  marginals, one block or B.2's independent blocks) and :func:`theorem2_bound` (Eq 10's right side).
* **Fig 2** — :func:`mse_ratio` (``r(φ, l)``, with its limits) and :func:`critical_angle`.
* **Normalised attention** — :func:`kernel_covariance` and :func:`output_delta_method` (delta-method
  bias and MSE of ``D̂⁻¹ÂV``); :func:`renormalised_output_mean_exists` (trig features: the output MSE has
  an infinite mean, since ``D̂`` has a positive density at 0) with :func:`trig_output_tail_constant` (its
  Cauchy tail constant, exactly, for ``d = m = 1``).

Orthogonal pairs. For ``ω_1 ⊥ ω_2`` with Haar directions and independent ``chi(d)`` norms (each row
marginally ``N(0, I_d)``), ``ω_1 ± ω_2 = ρ v`` with ``ρ² ~ χ²_{2d}`` independent of ``v`` uniform on
``S^{d-1}``. Since ``E_v e^{a vᵀẑ} = ₀F₁(; d/2; a²/4)`` and ``E ρ^{2n} = 2^n (d)_n``,

.. math::

    E[e^{ω_1ᵀz} e^{ω_2ᵀz}] = ₁F₁(d; d/2; s/2),\qquad
    E[\cos(ω_1ᵀΔ)\cos(ω_2ᵀΔ)] = ₁F₁(d; d/2; -t/2).

The positive-feature gap ``e^s - ₁F₁(d; d/2; s/2) = Σ_{n≥2} (s/2)^n/n!·(2^n - (d)_n/(d/2)_n)`` has
non-negative terms (``(d+k)/(d/2+k) <= 2``), so it is summed term by term in log space: no cancellation
at small ``s`` (where it is ``s²/(2(d+2)) + O(s³)``) and no overflow at large ``s``.

Numerics. Closed forms are evaluated in log space (``expm1``/``log1p`` where they cancel) and return
``inf`` rather than overflowing silently. Higher central moments cancel catastrophically in float64
(e.g. ``μ_4 ≈ 3Λ⁴s²`` for small ``s`` from terms of size ``Λ⁴``); they are formed with mpmath at a
precision that grows with the number of digits the cancellation costs, and converted to float at the end.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import mpmath as mp
import numpy as np
from scipy import optimize, special

__all__ = [
    "ESTIMATORS",
    "BUDGETS",
    "pair_quantities",
    "term_raw_moment",
    "term_variance",
    "estimator_moments",
    "term_central_moment",
    "mean_central_moment",
    "error_power_moments",
    "squared_error_moments",
    "power_moments",
    "lemma2_mse",
    "relative_mse",
    "orthogonal_pair_moment",
    "orthogonal_pair_covariance",
    "block_sizes",
    "orthogonal_mse",
    "orthogonal_squared_error_moments",
    "theorem2_bound",
    "mse_ratio",
    "critical_angle",
    "kernel_covariance",
    "output_delta_method",
    "renormalised_output_mean_exists",
    "trig_output_tail_constant",
]

#: Feature kinds with exact iid moments here (names as in :data:`rfkit.estimators.FEATURE_MAPS`).
ESTIMATORS = ("positive", "hyperbolic", "trig")

#: Feature-budget conventions of the Fig 2 ratio: the same number ``m`` of projections for both
#: estimators, or the same feature dimension (trig has ``2m`` features, so it meets SM⁺ with ``2m``).
BUDGETS = ("same_m", "same_features")

#: Decimal digits carried by mpmath beyond those a cancellation costs.
_GUARD_DIGITS = 30


def _check_kind(kind: str) -> None:
    if kind not in ESTIMATORS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {ESTIMATORS}")


def _check_m(m) -> int:
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be an integer >= 1, got {m!r}")
    return int(m)


def _as_pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError(f"x and y must be non-empty 1-D vectors of the same length, got {x.shape} and {y.shape}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("x and y must be finite")
    return x, y


def pair_quantities(x, y) -> dict[str, float]:
    """``s = ‖x+y‖²``, ``t = ‖x-y‖²``, ``log Λ`` and ``log SM = xᵀy`` for one pair of vectors."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return dict(s=float((x + y) @ (x + y)), t=float((x - y) @ (x - y)),
                log_lam=float(-(x @ x + y @ y) / 2), log_sm=float(x @ y))


def _exp_or_inf(log_value: float) -> float:
    return math.exp(log_value) if log_value < 709.0 else math.inf


def _log_or_ninf(value: float) -> float:
    return math.log(value) if value > 0 else -math.inf


def _log_expm1(s: float) -> float:
    """``log(e^s - 1)`` for ``s >= 0`` without overflow."""
    return s + math.log1p(-math.exp(-s)) if s > 30 else _log_or_ninf(math.expm1(s))


def _to_float(value) -> float:
    """mpmath -> float; values beyond float64 become ``±inf`` (never an exception)."""
    return float(value)


# ------------------------------------------------------------------------------------ iid moments


def _spread(kind: str, q: dict) -> float:
    """The variance of the term's Gaussian argument: ``s`` (positive, hyperbolic) or ``t`` (trig)."""
    return q["t"] if kind == "trig" else q["s"]


def _digits_lost(kind: str, q: dict, order: int) -> int:
    """Decimal digits that central moments and cumulants up to ``order`` lose to cancellation.

    As the spread ``u`` (``s`` or ``t``) goes to 0, the order-``n`` cumulant of a term is ``O(u^{n-1})``
    relative to the raw moments it is computed from, so at most ``order·log10(1/u)`` digits are lost.
    """
    u = _spread(kind, q)
    return int(math.ceil(order * max(0.0, -math.log10(u)))) if u > 0 else 0


def _term_raw_moment_mp(kind: str, q: dict, k: int):
    """``E[T^k]`` as an mpmath number (working precision set by the caller)."""
    if kind == "positive":
        return mp.exp(k * mp.mpf(q["log_lam"]) + mp.mpf(k * k) * q["s"] / 2)
    sign = 1 if kind == "hyperbolic" else -1
    u = q["s"] if kind == "hyperbolic" else q["t"]
    log_h = k * mp.mpf(q["log_lam"]) if kind == "hyperbolic" else -k * mp.mpf(q["log_lam"])
    inner = mp.fsum(math.comb(k, j) * mp.exp(sign * mp.mpf((k - 2 * j) ** 2) * u / 2) for j in range(k + 1))
    return mp.exp(log_h) * inner / mp.mpf(2) ** k


def term_raw_moment(kind: str, x, y, k: int) -> float:
    """``E[T^k]`` of one feature term (see module docstring); ``inf`` if it exceeds float64."""
    _check_kind(kind)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    q = pair_quantities(x, y)
    with mp.workdps(_GUARD_DIGITS):
        return _to_float(_term_raw_moment_mp(kind, q, k))


def term_variance(kind: str, x, y) -> float:
    """``Var[T]`` of one term in cancellation-free closed form (Performer Lemma 2, Eqs 14 and 18):

    positive ``Λ² e^s (e^s - 1)``, hyperbolic ``Λ² (e^s - 1)² / 2``, trig ``e^{‖x‖²+‖y‖²}(1 - e^{-t})² / 2``.
    """
    _check_kind(kind)
    q = pair_quantities(x, y)
    if kind == "positive":
        return _exp_or_inf(2 * q["log_lam"] + q["s"] + _log_expm1(q["s"]))
    if kind == "hyperbolic":
        return _exp_or_inf(2 * q["log_lam"] + 2 * _log_expm1(q["s"]) - math.log(2))
    return _exp_or_inf(-2 * q["log_lam"] + 2 * _log_or_ninf(-math.expm1(-q["t"])) - math.log(2))


def estimator_moments(kind: str, x, y, m: int) -> dict[str, float]:
    """Mean, variance, standard deviation and skewness of the ``m``-term iid estimator of ``SM(x, y)``.

    The mean equals ``SM(x, y) = exp(xᵀy)`` for every kind (unbiasedness). Skewness is ``nan`` when the
    variance is 0 (e.g. ``x = y`` for trig features, or ``z = 0``); the third central moment is exact
    (:func:`term_central_moment`), so the skewness stays accurate as the variance goes to 0.
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    mu1 = term_raw_moment(kind, x, y, 1)
    var1 = term_variance(kind, x, y)
    if not math.isfinite(var1):
        return dict(mean=mu1, var=math.inf, sd=math.inf, skewness=math.nan)
    third = term_central_moment(kind, x, y, 3)
    skew1 = third / var1**1.5 if var1 > 0 and math.isfinite(third) else math.nan if var1 == 0 else math.inf
    return dict(mean=mu1, var=var1 / m, sd=math.sqrt(var1 / m), skewness=skew1 / math.sqrt(m))


def _central_moments_mp(kind: str, q: dict, order: int) -> list:
    """``[μ_0, ..., μ_order]`` of one term (central), in the current mpmath precision.

    A zero spread (``z = 0`` or ``Δ = 0``) makes the term constant: its central moments are exactly 0.
    """
    if _spread(kind, q) == 0:
        return [mp.mpf(1)] + [mp.mpf(0)] * order
    raw = [_term_raw_moment_mp(kind, q, j) for j in range(order + 1)]
    mean = raw[1]
    return [mp.fsum(math.comb(k, j) * raw[j] * (-mean) ** (k - j) for j in range(k + 1)) for k in range(order + 1)]


def _cumulants_from_central(mu: list) -> list:
    """Cumulants ``κ_1..κ_n`` (``κ_1 = 0``) from central moments: ``κ_n = μ_n - Σ C(n-1,k-1) κ_k μ_{n-k}``."""
    kappa = [mp.mpf(0)] * len(mu)
    for n in range(2, len(mu)):
        kappa[n] = mu[n] - mp.fsum(math.comb(n - 1, k - 1) * kappa[k] * mu[n - k] for k in range(2, n - 1))
    return kappa


def _central_from_cumulants(kappa: list) -> list:
    """Central moments from cumulants (``κ_1 = 0``): ``μ_n = Σ_{k=2}^{n} C(n-1,k-1) κ_k μ_{n-k}``."""
    mu = [mp.mpf(1)] + [mp.mpf(0)] * (len(kappa) - 1)
    for n in range(2, len(kappa)):
        mu[n] = mp.fsum(math.comb(n - 1, k - 1) * kappa[k] * mu[n - k] for k in range(2, n + 1))
    return mu


def _mean_central_moments_mp(kind: str, q: dict, m: int, order: int) -> list:
    """Central moments ``[μ_0..μ_order]`` of the mean of ``m`` iid terms (``κ_n(T̄) = κ_n(T)/m^{n-1}``)."""
    kappa = _cumulants_from_central(_central_moments_mp(kind, q, order))
    return _central_from_cumulants([k / mp.mpf(m) ** (n - 1) if n >= 1 else k for n, k in enumerate(kappa)])


def term_central_moment(kind: str, x, y, k: int) -> float:
    """``E[(T - SM)^k]`` of one feature term, exact (mpmath, precision adapted to the cancellation).

    Examples: ``k = 2`` is :func:`term_variance`; for ``c = cos(ωᵀΔ)`` the raw moments are
    ``E c² = (1 + e^{-2t})/2``, ``E c³ = (3e^{-t/2} + e^{-9t/2})/4``, ``E c⁴ = (3 + 4e^{-2t} + e^{-8t})/8``
    (Performer register, derived single-term moments).
    """
    _check_kind(kind)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    q = pair_quantities(x, y)
    with mp.workdps(_GUARD_DIGITS + _digits_lost(kind, q, k)):
        return _to_float(_central_moments_mp(kind, q, k)[k])


def mean_central_moment(kind: str, x, y, m: int, k: int) -> float:
    """``E[(T̄ - SM)^k]`` of the mean ``T̄`` of ``m`` iid terms, exact.

    Cumulants scale as ``κ_n(T̄) = κ_n(T)/m^{n-1}``; e.g. the fourth central moment is
    ``κ_4/m³ + 3σ⁴/m²`` (``σ² = Var T``, ``κ_4`` the term's fourth cumulant).
    """
    _check_kind(kind)
    m = _check_m(m)
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    q = pair_quantities(x, y)
    with mp.workdps(_GUARD_DIGITS + _digits_lost(kind, q, k)):
        return _to_float(_mean_central_moments_mp(kind, q, m, k)[k])


def _moments_of_power(mu: list, k: int) -> dict[str, float]:
    """Mean, variance and skewness of ``X^k`` from the central moments ``μ_j = E X^j`` (``j <= 3k``) of ``X``."""
    var = mu[2 * k] - mu[k] ** 2
    third = mu[3 * k] - 3 * mu[2 * k] * mu[k] + 2 * mu[k] ** 3
    skew = third / var**1.5 if var > 0 else mp.nan
    out = dict(mean=_to_float(mu[k]), var=_to_float(var), skewness=_to_float(skew))
    out["sd"] = math.sqrt(out["var"]) if math.isfinite(out["var"]) else math.inf
    return out


def error_power_moments(kind: str, x, y, m: int, k: int) -> dict[str, float]:
    """Mean, sd and skewness of ``(T̄ - SM)^k`` for the mean ``T̄`` of ``m`` iid terms (exact).

    From the central moments of ``T̄`` up to order ``3k`` (:func:`mean_central_moment`): mean ``μ_k``,
    variance ``μ_{2k} - μ_k²``, third central moment ``μ_{3k} - 3μ_{2k}μ_k + 2μ_k³``. ``sd = inf`` where the
    moments exceed float64; ``skewness = nan`` where the power is constant.
    """
    _check_kind(kind)
    m = _check_m(m)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    q = pair_quantities(x, y)
    with mp.workdps(_GUARD_DIGITS + _digits_lost(kind, q, 3 * k)):
        return _moments_of_power(_mean_central_moments_mp(kind, q, m, 3 * k), k)


def squared_error_moments(kind: str, x, y, m: int) -> dict[str, float]:
    """Mean, sd and skewness of one replicate's squared error ``e = (T̄ - SM)²`` (iid, ``m`` terms).

    ``mean = μ_2`` (the MSE), ``var = μ_4 - μ_2²``, third central moment ``μ_6 - 3μ_4μ_2 + 2μ_2³``
    (:func:`error_power_moments` with ``k = 2``). These are the exact standard error and skewness a z test
    of a sample MSE needs (estimators with exponential features are heavy tailed, so normal or χ²
    approximations of the sample MSE's spread are not valid).
    """
    return error_power_moments(kind, x, y, m, 2)


def power_moments(kind: str, x, y, k: int) -> dict[str, float]:
    """Mean, sd and skewness of ``T^k`` for one term (from the raw moments of orders ``k``, ``2k``, ``3k``)."""
    _check_kind(kind)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    q = pair_quantities(x, y)
    with mp.workdps(_GUARD_DIGITS + _digits_lost(kind, q, 3 * k)):
        return _moments_of_power([_term_raw_moment_mp(kind, q, j) for j in range(3 * k + 1)], k)


# ------------------------------------------------------------------------ Lemma 2, relative errors


def lemma2_mse(kind: str, x, y, m: int, *, log: bool = False) -> float:
    r"""Lemma 2 (Eq 8), exactly as printed, evaluated in log space.

    .. math::

        MSE(SM^{trig}_m) &= \frac{1}{2m} e^{‖x+y‖²} SM^{-2}(x,y) (1 - e^{-‖x-y‖²})², \\
        MSE(SM^{+}_m) &= \frac{1}{m} e^{‖x+y‖²} SM^{2}(x,y) (1 - e^{-‖x+y‖²}), \\
        MSE(SM^{hyp+}_m) &= \tfrac12 (1 - e^{-‖x+y‖²})\, MSE(SM^{+}_m).

    The hyperbolic estimator uses ``m`` projections (``2m`` features). Returns ``inf`` beyond float64, or
    with ``log=True`` the natural logarithm (``-inf`` where the MSE is 0), which never overflows.
    """
    _check_kind(kind)
    m = _check_m(m)
    x, y = _as_pair(x, y)
    q = pair_quantities(x, y)
    if kind == "trig":
        log_mse = -math.log(2 * m) + q["s"] - 2 * q["log_sm"] + 2 * _log_or_ninf(-math.expm1(-q["t"]))
    else:
        log_mse = -math.log(m) + q["s"] + 2 * q["log_sm"] + _log_or_ninf(-math.expm1(-q["s"]))
        if kind == "hyperbolic":
            log_mse += math.log(0.5) + _log_or_ninf(-math.expm1(-q["s"]))
    return log_mse if log else _exp_or_inf(log_mse)


def _relative_term_covariance(kind: str, u):
    """``Cov(T_a, T_b)/(SM_a SM_b)`` of two terms sharing ``ω``: ``expm1(u)`` (positive, ``u = z_aᵀz_b``) or
    ``cosh(u) - 1 = 2 sinh²(u/2)`` (hyperbolic with ``u = z_aᵀz_b``; trig with ``u = Δ_aᵀΔ_b``).

    With ``a = b`` this is ``m·RelMSE``: ``e^s - 1``, ``2 sinh²(s/2)``, ``2 sinh²(t/2)``.
    """
    u = np.asarray(u, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.expm1(u) if kind == "positive" else 2.0 * np.sinh(u / 2) ** 2


def relative_mse(kind: str, x, y, m: int) -> float:
    """``MSE/SM²`` of the iid estimator (Performer register, derived relative MSE):

    trig ``(2/m) sinh²(t/2)``, positive ``(e^s - 1)/m``, hyperbolic ``(2/m) sinh²(s/2)``. It depends on
    ``(x, y)`` only through ``‖x-y‖`` (trig) or ``‖x+y‖`` (positive, hyperbolic).
    """
    _check_kind(kind)
    m = _check_m(m)
    x, y = _as_pair(x, y)
    q = pair_quantities(x, y)
    return float(_relative_term_covariance(kind, _spread(kind, q))) / m


# --------------------------------------------------------------------------- orthogonal features


@lru_cache(maxsize=64)
def _log_pochhammer_ratio(d: int, n_max: int) -> np.ndarray:
    """``log((d)_n/(d/2)_n)`` for ``n = 0..n_max``."""
    n = np.arange(n_max + 1, dtype=np.float64)
    return (special.gammaln(d + n) - special.gammaln(d) - special.gammaln(d / 2 + n) + special.gammaln(d / 2))


def _series_terms(v: float) -> int:
    """Enough terms of ``Σ v^n/n!·c_n`` (with ``c_n <= 2^n``) for float64 accuracy."""
    w = 2.0 * abs(v)
    return int(w + 12.0 * math.sqrt(w) + 60)


def _check_dimension(d) -> int:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be an integer >= 1, got {d!r}")
    return int(d)


def _log_positive_series(log_coeff: np.ndarray, v: float) -> float:
    """``log Σ_n c_n v^n/n!`` for ``v >= 0`` from ``log c_n`` (terms ``-inf`` allowed)."""
    n = np.arange(log_coeff.size, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_terms = log_coeff + n * math.log(v) - special.gammaln(n + 1)
    return float(special.logsumexp(log_terms))


def orthogonal_pair_moment(d: int, v: float) -> float:
    r"""``₁F₁(d; d/2; v)``: the product moment of an orthogonal pair (see module docstring).

    ``E[e^{ω_1ᵀz}e^{ω_2ᵀz}] = ₁F₁(d; d/2; ‖z‖²/2)`` and ``E[cos(ω_1ᵀΔ) cos(ω_2ᵀΔ)] = ₁F₁(d; d/2; -‖Δ‖²/2)``
    for ``ω_1 ⊥ ω_2`` with Haar directions and independent ``chi(d)`` norms, ``d >= 2``. scipy's
    ``hyp1f1`` (accurate to a few ulp against mpmath for both signs); for large positive ``v`` where it
    overflows, the all-positive series is summed in log space and ``inf`` returned beyond float64.
    """
    d = _check_dimension(d)
    value = float(special.hyp1f1(d, d / 2, v))
    if math.isfinite(value):
        return value
    if v > 0:
        return _exp_or_inf(_log_positive_series(_log_pochhammer_ratio(d, _series_terms(v)), v))
    return _to_float(mp.hyp1f1(d, mp.mpf(d) / 2, v))


def _log_orthogonal_gap_coefficients(d: int, n_max: int) -> np.ndarray:
    """``log(2^n - (d)_n/(d/2)_n)`` (``-inf`` for ``n < 2``, where the coefficient is 0)."""
    n = np.arange(n_max + 1, dtype=np.float64)
    ratio = _log_pochhammer_ratio(d, n_max) - n * math.log(2)
    with np.errstate(divide="ignore"):
        out = n * math.log(2) + np.log1p(-np.exp(np.minimum(ratio, 0.0)))
    out[:2] = -np.inf
    return out


def _log_positive_orthogonal_gap(d: int, s: float) -> float:
    """``log(e^s - ₁F₁(d; d/2; s/2))`` from the non-negative series (module docstring); ``-inf`` at ``s = 0``."""
    if s <= 0:
        return -math.inf
    n_max = _series_terms(s / 2)
    return _log_positive_series(_log_orthogonal_gap_coefficients(d, n_max), s / 2)


def _trig_orthogonal_gap(d: int, t: float) -> float:
    """``₁F₁(d; d/2; -t/2) - e^{-t}``: the series (alternating, small terms) for ``t <= 2``, else scipy."""
    if t <= 2.0:
        n_max = _series_terms(t / 2)
        n = np.arange(n_max + 1, dtype=np.float64)
        coeff = np.exp(_log_orthogonal_gap_coefficients(d, n_max))
        with np.errstate(divide="ignore"):
            log_mag = n * math.log(t / 2) - special.gammaln(n + 1) if t > 0 else np.where(n == 0, 0.0, -np.inf)
        return float(-np.sum(coeff * (-1.0) ** n * np.exp(log_mag)))
    return orthogonal_pair_moment(d, -t / 2) - math.exp(-t)


def orthogonal_pair_covariance(kind: str, x, y) -> float:
    r"""Covariance of the single-term estimates of an orthogonal pair ``ω_1 ⊥ ω_2`` (Gaussian marginals).

    * positive and hyperbolic: ``Λ² (₁F₁(d; d/2; s/2) - e^s) = -Λ²·gap(d, s) <= 0``;
    * trig: ``e^{‖x‖²+‖y‖²} (₁F₁(d; d/2; -t/2) - e^{-t})`` (either sign: positive for large ``t``).

    ``d`` is the length of ``x``; it must be at least 2 (an orthogonal pair needs two dimensions).
    Performer register, derived predictions ``orf_pos_mse``, ``orf_hyp_mse``, ``orf_trig_mse``.
    """
    _check_kind(kind)
    x, y = _as_pair(x, y)
    d = x.size
    if d < 2:
        raise ValueError("an orthogonal pair needs d >= 2")
    q = pair_quantities(x, y)
    if kind == "trig":
        gap = _trig_orthogonal_gap(d, q["t"])
        if gap == 0:
            return 0.0
        return math.copysign(_exp_or_inf(-2 * q["log_lam"] + math.log(abs(gap))), gap)
    return -_exp_or_inf(2 * q["log_lam"] + _log_positive_orthogonal_gap(d, q["s"]))


def block_sizes(m: int, d: int) -> list[int]:
    """Sizes of the independent orthogonal blocks of ``m`` rows in dimension ``d`` (Performer B.2).

    ``⌊m/d⌋`` full blocks of ``d`` rows and one partial block of ``m mod d`` rows (if non-zero); this is
    the layout of :func:`rfkit.estimators.orthogonal_projection`.
    """
    m, d = _check_m(m), _check_dimension(d)
    full, rest = divmod(m, d)
    return [d] * full + ([rest] if rest else [])


def orthogonal_mse(kind: str, x, y, m: int) -> float:
    r"""MSE of the estimator with R-ORF projections (Haar blocks, ``chi(d)`` norms), any ``m``.

    .. math::  MSE_{ort} = MSE_{iid} + \frac{\sum_b b(b-1)}{m^2}\, Cov_{pair},

    with ``Cov_pair`` from :func:`orthogonal_pair_covariance` and blocks from :func:`block_sizes`
    (``(m-1)/m`` for ``m <= d``; ``(d-1)/m`` for ``m = k·d``). Rows in different blocks are independent.
    """
    _check_kind(kind)
    m = _check_m(m)
    x, y = _as_pair(x, y)
    iid = term_variance(kind, x, y) / m
    pairs = sum(b * (b - 1) for b in block_sizes(m, x.size))
    if pairs == 0:
        return iid
    return iid + pairs / m**2 * orthogonal_pair_covariance(kind, x, y)


# ------------------------------------------------- orthogonal features: the squared error's variance


def _set_partition_sizes(j: int) -> list[tuple[int, ...]]:
    """Block sizes of every set partition of ``{1..j}`` (one entry per partition, so sizes repeat)."""
    parts: list[list[int]] = [[]]
    for _ in range(j):
        parts = [p[:i] + [p[i] + 1] + p[i + 1:] for p in parts for i in range(len(p))] + [p + [1] for p in parts]
    return [tuple(p) for p in parts]


def _orthogonal_exp_moment_mp(d: int, groups: tuple, c):
    r"""Humbert's confluent ``Φ₂(b_1, ..., b_k; c; x_1, ..., x_k) = Σ_n Π_i (b_i)_{n_i} x_i^{n_i}/n_i! / (c)_{|n|}``
    for ``groups = ((b_1, x_1), ...)`` with ``x_i >= 0`` (all terms non-negative), by recursion on the first
    variable: ``Φ₂ = Σ_j (b_1)_j x_1^j/(j!(c)_j) Φ₂(b_2..; c + j; x_2..)``; ``Φ₂() = 1``."""
    if not groups:
        return mp.mpf(1)
    (b, x), rest = groups[0], groups[1:]
    if not rest:
        return mp.hyp1f1(b, c, x)
    total, term, j = mp.mpf(0), mp.mpf(1), 0
    while True:
        inc = term * _orthogonal_exp_moment_mp(d, rest, c + j)
        total += inc
        if j > 2 * x + 20 and inc <= total * mp.mpf(10) ** (-mp.mp.dps):
            return total
        term *= (b + j) * x / ((j + 1) * (c + j))
        j += 1


def _orthogonal_exp_moment(d: int, s, coefficients) -> object:
    r"""``E exp(Σ_k c_k ω_kᵀz)`` for orthogonal rows ``ω_k = r_k u_k`` (Haar frame, iid ``chi(d)`` norms),
    ``s = ‖z‖²``: ``Φ₂`` with one variable ``c_k² s/2`` and parameter ``d/2`` per row, ``c = d/2``; rows with
    equal ``c_k²`` merge (a sum of ``g`` iid ``χ²_d`` is ``χ²_{gd}``: parameter ``g·d/2``) and ``c_k = 0`` rows
    drop out."""
    counts: dict[int, int] = {}
    for ck in coefficients:
        if ck:
            counts[ck * ck] = counts.get(ck * ck, 0) + 1
    half = mp.mpf(d) / 2
    groups = tuple((g * half, mp.mpf(c2) * s / 2) for c2, g in sorted(counts.items()))
    return _orthogonal_exp_moment_mp(d, groups, half)


def _orthogonal_relative_product_moment_mp(kind: str, d: int, s, sizes: tuple[int, ...]):
    r"""``E Π_k (T_k/SM)^{a_k}`` for distinct orthogonal rows ``k`` with powers ``a = sizes`` (positive or
    hyperbolic terms; ``T/SM = e^{-s/2} exp(ωᵀz)`` or ``e^{-s/2} cosh(ωᵀz)``)."""
    j = sum(sizes)
    if kind == "positive":
        return mp.exp(-j * s / 2) * _orthogonal_exp_moment(d, s, sizes)
    # cosh^a(v) = 2^{-a} Σ_i C(a, i) e^{(a - 2i)v}: expand every row's power
    total = mp.mpf(0)
    for picks in itertools.product(*(range(a + 1) for a in sizes)):
        weight = math.prod(math.comb(a, i) for a, i in zip(sizes, picks, strict=True))
        total += weight * _orthogonal_exp_moment(d, s, [a - 2 * i for a, i in zip(sizes, picks, strict=True)])
    return mp.exp(-j * s / 2) * total / mp.mpf(2) ** j


def _block_relative_central_moments_mp(kind: str, d: int, s, b: int) -> tuple:
    """``(μ_2, μ_4)`` of ``S/SM - b`` for the sum ``S`` of the ``b`` terms of one orthogonal block."""
    raw = [mp.mpf(1)]
    for j in range(1, 5):
        acc = mp.mpf(0)
        for sizes in _set_partition_sizes(j):
            r = len(sizes)
            if r <= b:
                acc += math.perm(b, r) * _orthogonal_relative_product_moment_mp(kind, d, s, tuple(sorted(sizes)))
        raw.append(acc)
    mu = mp.mpf(b)
    c2 = raw[2] - mu**2
    c4 = raw[4] - 4 * mu * raw[3] + 6 * mu**2 * raw[2] - 3 * mu**4
    return c2, c4


def orthogonal_squared_error_moments(kind: str, x, y, m: int) -> dict[str, float]:
    r"""Mean, variance and sd of one replicate's squared error ``e = (T̄ - SM)²`` with R-ORF projections
    (Haar blocks, ``chi(d)`` norms, :func:`block_sizes`), exactly, for positive and hyperbolic terms.

    ``mean`` is the MSE (it equals :func:`orthogonal_mse`), ``fourth = E(T̄ - SM)⁴`` and ``var = fourth - mean²``
    (``Var e``: the exact per-replicate variance a confidence sequence for a sample ORF MSE needs).

    Derivation. Rows ``k = 1..b`` of one block are ``ω_k = r_k u_k`` with ``(u_k)`` a Haar ``b``-frame and
    ``r_k`` iid ``chi(d)``, independent. By rotation invariance ``(u_1ᵀz, ..., u_bᵀz) = ‖z‖ (v_1, ..., v_b)``
    with ``v`` uniform on ``S^{d-1}``, so ``Σ_k c_k ω_kᵀz = ‖z‖ vᵀρ`` with ``ρ = (c_k r_k)_k``, which has the law
    of ``‖z‖‖ρ‖ v_1``. With ``E e^{a v_1} = ₀F₁(; d/2; a²/4)``, ``‖ρ‖² = Σ c_k² R_k`` (``R_k ~ χ²_d``,
    ``E R^n = 2^n (d/2)_n``) and the multinomial expansion,

    .. math::  E\,e^{Σ_k c_k ω_kᵀz}
               = Φ_2\big(\tfrac d2, …, \tfrac d2;\ \tfrac d2;\ \tfrac{c_1^2 s}{2}, …, \tfrac{c_b^2 s}{2}\big)

    (Humbert's confluent ``Φ₂``; all terms ``>= 0``). Checks: one row gives ``e^{c²s/2}`` (the Gaussian
    MGF), two rows with ``c = 1`` give ``₁F₁(d; d/2; s/2)`` (:func:`orthogonal_pair_moment`). Positive terms
    are ``Λ e^{ωᵀz}``; hyperbolic ``Λ cosh(ωᵀz)`` expands into such exponentials. The raw moments
    ``E S^j`` (``j <= 4``) of a block sum ``S = Σ_k T_k`` are sums over the set partitions of the ``j``
    factors (``b(b-1)...(b-r+1)`` ordered choices of distinct rows for ``r`` parts), giving the block's
    central ``μ_2`` and ``μ_4`` (``E S = b·SM``: Gaussian marginals). Blocks are independent, so with
    ``Y_b`` the centred block sums ``E(Σ_b Y_b)⁴ = Σ_b μ_4(b) + 3[(Σ_b μ_2(b))² - Σ_b μ_2(b)²]`` and
    ``E(T̄ - SM)^k = m^{-k} E(Σ_b Y_b)^k``. iid rows (blocks of size 1) recover ``κ_4/m³ + 3σ⁴/m²``.

    Computed relative to ``SM`` in mpmath at a precision that grows with the cancellation (as
    :func:`mean_central_moment`); ``inf`` beyond float64. Trig terms are bounded and not covered here.
    """
    if kind not in ("positive", "hyperbolic"):
        raise ValueError(f"kind must be 'positive' or 'hyperbolic', got {kind!r}")
    m = _check_m(m)
    x, y = _as_pair(x, y)
    d = x.size
    q = pair_quantities(x, y)
    sizes = block_sizes(m, d)
    with mp.workdps(_GUARD_DIGITS + _digits_lost(kind, q, 4)):
        s = mp.mpf(q["s"])
        moments = {b: _block_relative_central_moments_mp(kind, d, s, b) for b in set(sizes)}
        c2 = [moments[b][0] for b in sizes]
        c4 = [moments[b][1] for b in sizes]
        sum2 = mp.fsum(c2)
        second = sum2 / mp.mpf(m) ** 2
        fourth = (mp.fsum(c4) + 3 * (sum2**2 - mp.fsum(c * c for c in c2))) / mp.mpf(m) ** 4
        var = fourth - second**2
        log_sm = q["log_sm"]
        out = dict(mean=_exp_or_inf(2 * log_sm + _log_or_ninf(float(second))),
                   fourth=_exp_or_inf(4 * log_sm + _log_or_ninf(float(fourth))),
                   var=_exp_or_inf(4 * log_sm + _log_or_ninf(float(var))))
    out["sd"] = math.sqrt(out["var"])
    return out


def theorem2_bound(x, y, m: int) -> float:
    r"""Right side of Theorem 2 (Eq 10) for ``SM⁺`` with orthogonal features:

    .. math::  MSE(SM^{+}_m) - \frac{2(m-1)}{m(d+2)} \big(SM(x,y) - e^{-(‖x‖²+‖y‖²)/2}\big)^2,

    with ``MSE(SM⁺_m)`` from :func:`lemma2_mse` and ``d`` the length of ``x``.
    """
    m = _check_m(m)
    x, y = _as_pair(x, y)
    q = pair_quantities(x, y)
    d = x.size
    reduction = 2 * (m - 1) / (m * (d + 2)) * _exp_or_inf(2 * q["log_lam"] + 2 * _log_or_ninf(math.expm1(q["s"] / 2)))
    return lemma2_mse("positive", x, y, m) - reduction


# ---------------------------------------------------------------------------------------- Fig 2


def mse_ratio(phi, length, budget: str = "same_m"):
    r"""Fig 2's ratio ``r(φ, l) = MSE(SM^trig_m)/MSE(SM⁺_m)`` for ``‖x‖ = ‖y‖ = l`` at angle ``φ``.

    From Lemma 2 with ``t = 4l² sin²(φ/2)`` and ``s = 4l² cos²(φ/2)`` (half-angle forms: no cancellation
    near ``φ = 0`` or ``π``):

    .. math::  r(φ, l) = \frac{(1 - e^{-t})^2}{2 e^{4 l^2 \cos φ} (1 - e^{-s})},

    independent of ``m`` and ``d``; ``budget="same_features"`` compares trig with ``SM⁺_{2m}`` (same
    feature dimension), which doubles ``r``. Vectorised over broadcast ``phi`` and ``length``.

    Limits instead of ``0/0`` or ``x/0``: at ``φ = ±π`` (``s = 0``, ``MSE_+ = 0``) with ``l != 0``,
    ``r = inf``; at ``l = 0`` the value is the limit ``l → 0`` at fixed ``φ``: ``0`` for ``φ != ±π`` (where
    ``r ≈ l²(1 - cos φ)²/(1 + cos φ)``) and ``inf`` at ``φ = ±π``.
    """
    if budget not in BUDGETS:
        raise ValueError(f"unknown budget {budget!r}; expected one of {BUDGETS}")
    phi, length = np.broadcast_arrays(np.asarray(phi, dtype=np.float64), np.asarray(length, dtype=np.float64))
    if not (np.isfinite(phi).all() and np.isfinite(length).all()):
        raise ValueError("phi and length must be finite")
    l2 = length**2
    t = 4 * l2 * np.sin(phi / 2) ** 2
    s = 4 * l2 * np.cos(phi / 2) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        log_r = (2 * np.log(-np.expm1(-t)) - math.log(2) - 4 * l2 * np.cos(phi) - np.log(-np.expm1(-s)))
        r = np.exp(log_r)
    at_pi = (np.abs(phi) == np.pi) | ((s == 0) & (length != 0))  # np.pi stands for π: MSE_+ = 0 there
    r = np.where(length == 0, np.where(at_pi, np.inf, 0.0), np.where(at_pi, np.inf, r))
    r = r * (2.0 if budget == "same_features" else 1.0)
    return r if r.ndim else float(r)


def critical_angle(length: float, budget: str = "same_m") -> float:
    """``φ*(l) = inf{φ ∈ [0, π] : r > 1 on (φ, π]}`` (``r`` increases in ``φ`` on ``[0, π]``).

    ``π`` when ``l = 0`` (``r = 0`` there except the limit at ``π``). ``r(φ → 0) = 0`` for every ``l``, so
    the root of ``log r`` is bracketed by ``(0, π)``.
    """
    length = abs(float(length))
    if length == 0:
        return math.pi
    gap = min(1e-12, 1e-3 * length)  # r(π - δ, l) ≈ 8l²/δ² for small l: the root lies within O(l) of π

    def log_r(p):
        return math.log(mse_ratio(p, length, budget))

    return float(optimize.brentq(log_r, gap, math.pi - gap, xtol=1e-15, rtol=4 * np.finfo(float).eps))


# ----------------------------------------------------------------------- normalised attention


def kernel_covariance(kind: str, x, keys, m: int) -> np.ndarray:
    r"""``Σ[j, k] = Cov(Â_j, Â_k)`` of the iid estimates ``Â_j ≈ SM(x, y_j)`` for one query ``x``.

    All keys share the projections, so ``m Σ[j,k] = SM_j SM_k h(u_jk)`` with
    ``h = expm1``, ``u = z_jᵀz_k`` (positive); ``h = cosh - 1``, ``u = z_jᵀz_k`` (hyperbolic);
    ``h = cosh - 1``, ``u = Δ_jᵀΔ_k`` (trig); ``z_j = x + y_j``, ``Δ_j = x - y_j``. For positive
    features this is the register's ``(1/m)[Λ_jΛ_k exp(‖2x + y_j + y_k‖²/2) - SM_j SM_k]``.

    Parameters
    ----------
    x : (d,) query;  keys : (M, d);  m : projections.
    """
    _check_kind(kind)
    m = _check_m(m)
    x = np.asarray(x, dtype=np.float64)
    keys = np.asarray(keys, dtype=np.float64)
    sm = np.exp(keys @ x)
    return np.outer(sm, sm) * _relative_kernel_covariance(kind, x[None, :], keys)[0] / m


def _relative_kernel_covariance(kind: str, queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``h(u_ijk)`` of shape ``(N, M, M)`` (see :func:`kernel_covariance`)."""
    sign = -1.0 if kind == "trig" else 1.0
    w = queries[:, None, :] + sign * keys[None, :, :]
    return _relative_term_covariance(kind, np.einsum("nja,nka->njk", w, w))


def output_delta_method(kind: str, queries, keys, values, m: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Delta-method bias and MSE of the normalised output ``D̂⁻¹ÂV`` (iid features, ``m`` projections).

    For query ``i`` with exact output ``o_i = Σ_j p_j v_j`` (``p = softmax(x_iᵀy_j)``):

    .. math::

        E[\hat o_i] - o_i &≈ \frac{1}{D_i^2}\sum_{j,k} Σ_i[j,k]\,(o_i - v_j)
                          = \frac1m \sum_{j,k} p_j p_k h_{jk}\,(o_i - v_j),\\
        E[(\hat o_i - o_i)^2] &≈ \frac1m \sum_{j,k} p_j p_k h_{jk}\,(v_j - o_i)(v_k - o_i)

    (elementwise in the value coordinate), with ``Σ_i`` from :func:`kernel_covariance` written through the
    softmax probabilities so that nothing overflows. Both are ``O(1/m)``; the neglected terms are
    ``O(1/m²)``. Inputs are scaled (``x = q/d^{1/4}``).

    Parameters
    ----------
    queries : (N, d);  keys : (M, d);  values : (M, d_v);  m : projections.

    Returns
    -------
    bias, mse : arrays of shape ``(N, d_v)``.
    """
    _check_kind(kind)
    m = _check_m(m)
    queries = np.atleast_2d(np.asarray(queries, dtype=np.float64))
    keys = np.asarray(keys, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    logits = queries @ keys.T
    p = np.exp(logits - special.logsumexp(logits, axis=-1, keepdims=True))
    out = p @ values
    h = _relative_kernel_covariance(kind, queries, keys) * p[:, :, None] * p[:, None, :]
    centred = values[None, :, :] - out[:, None, :]
    with np.errstate(invalid="ignore", over="ignore"):
        bias = -np.einsum("njk,nja->na", h, centred) / m
        mse = np.einsum("njk,nja,nka->na", h, centred, centred) / m
    return bias, mse


def renormalised_output_mean_exists(kind: str) -> bool:
    r"""Whether the renormalised output ``ô_i = N̂_i/D̂_i`` (``N̂_i = Σ_j Â_ij v_j``, ``D̂_i = Σ_j Â_ij``, no
    stabiliser) has a finite mean — and hence whether its MSE, and a mean of output MSEs, is finite — for inputs
    in general position (distinct rows, nonzero differences ``x_i - y_j``).

    * ``positive``, ``hyperbolic``: every ``Â_ij > 0``, so ``ô_i`` is a convex combination of the values,
      ``|ô_ia| <= max_j |v_ja|``: every moment the values have is finite.
    * ``trig``: no. One term of ``D̂_i`` is ``f(ω) = Σ_j c_j cos(ωᵀΔ_ij)`` with ``c_j > 0`` and ``Δ_ij ≠ 0``;
      along any direction ``u`` with ``uᵀΔ_ij ≠ 0`` for every ``j``, ``r ↦ f(ru)`` is almost periodic with
      mean 0 and not identically 0, so it is negative on an open set of ``r``. The projection law (iid
      Gaussian, or R-ORF: Haar directions with independent ``chi(d)`` norms) has a positive density there, so
      ``D̂_i`` takes both signs with positive probability and, being a smooth function of the projections,
      has a density ``p_i(0) > 0`` at 0. Near a zero of ``D̂_i`` where ``N̂_ia ≠ 0`` (general position),
      ``P(|ô_ia| > t) ~ c/t`` with ``c > 0``, so ``E|ô_ia| = ∞`` and ``E(ô_ia - o_ia)² = ∞``: the output MSE of
      trigonometric features has an **infinite mean** for every ``m`` and ``L >= 2``, and the difference of
      two such MSEs (iid vs orthogonal) has no mean at all. (Its logarithm has exponential tails,
      ``P(log MSE > u) ~ c' e^{-u/2}``, so log-scale comparisons have finite moments.)

    :func:`trig_output_tail_constant` computes ``c`` exactly in the smallest case (``d = 1``, ``m = 1``) for
    the tests. ``rfkit.estimators.linear_attention`` counts renormalisers ``<= 0`` in its statistics.
    """
    _check_kind(kind)
    return kind != "trig"


def _trig_renormaliser(x: float, ys: np.ndarray):
    """``D̂(ω) = Σ_j c_j cos(ωΔ_j)`` and its weights for one trig feature in ``d = 1`` (``c_j = e^{(x²+y_j²)/2}``)."""
    delta = x - ys
    log_c = 0.5 * (x * x + ys * ys)
    c = np.exp(log_c - log_c.max())  # a common factor: cancels in N̂/D̂
    return delta, c


def trig_output_tail_constant(x: float, ys, values, *, width: float = 12.0, points: int = 200_001) -> float:
    r"""``c = lim_{t→∞} t·P(|ô - o| > t)`` for one query ``x``, keys ``ys`` and values ``values`` in ``d = 1``
    with one trigonometric feature (``m = 1``, ``ω ~ N(0, 1)``), where ``ô = N̂/D̂``,
    ``D̂(ω) = Σ_j c_j cos(ω(x - y_j))`` and ``N̂(ω) = Σ_j c_j v_j cos(ω(x - y_j))``.

    Near a simple zero ``r`` of ``D̂``, ``|ô| > t`` iff ``|ω - r| < |N̂(r)|/(t|D̂'(r)|)`` to first order, so

    .. math::  c = \sum_{r:\,\hat D(r) = 0} \frac{2\,φ(r)\,|\hat N(r)|}{|\hat D'(r)|}

    (``φ`` the standard normal density); ``c > 0`` means ``E|ô| = ∞`` (see
    :func:`renormalised_output_mean_exists`). Zeros are bracketed by sign changes on ``points`` grid points
    of ``[-width, width]`` (``φ(12) ~ 1e-32``: the rest is negligible) and refined by Brent's method.
    """
    ys = np.atleast_1d(np.asarray(ys, dtype=np.float64))
    values = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if ys.shape != values.shape:
        raise ValueError(f"ys and values must have the same shape, got {ys.shape} and {values.shape}")
    delta, c = _trig_renormaliser(float(x), ys)

    def den(w):
        return np.cos(np.multiply.outer(w, delta)) @ c

    def num(w):
        return np.cos(np.multiply.outer(w, delta)) @ (c * values)

    def den_prime(w):
        return -np.sin(np.multiply.outer(w, delta)) @ (c * delta)

    grid = np.linspace(-width, width, points)
    f = den(grid)
    total = 0.0
    for i in np.flatnonzero(np.sign(f[:-1]) * np.sign(f[1:]) < 0):
        r = optimize.brentq(lambda w: float(den(np.array(w))), grid[i], grid[i + 1], xtol=1e-14)
        slope = abs(float(den_prime(np.array(r))))
        if slope > 0:
            total += 2.0 * math.exp(-0.5 * r * r) / math.sqrt(2 * math.pi) * abs(float(num(np.array(r)))) / slope
    return total
