r"""The regularized softmax kernel SMREG: closed forms, the Eq 29/30 series, Theorem 1's proof chain, MSEs.

Performer (``003_4855bc6ab225d7a6.txt``), Sec 2.3, Theorem 1 and its proof F.3, Theorem 2 (SMREG
analogue). For ``x, y ∈ R^d`` let ``z = x + y``, ``s = ‖z‖²``, ``w = s/2`` and
``Λ = exp(-(‖x‖²+‖y‖²)/2)``, so that ``SM(x, y) = exp(xᵀy) = Λ e^{w}``. With ``u`` uniform on ``S^{d-1}``

.. math::

    \mathrm{SMREG}(x, y) = Λ\, E\, e^{\sqrt d\,‖z‖\,u_1} = Λ\,{}_0F_1(;\tfrac d2;\tfrac{d s}{4})
      = Λ\,Γ(\tfrac d2)\Big(\tfrac{2}{\sqrt{d s}}\Big)^{d/2-1} I_{d/2-1}(\sqrt{d s}),

    \frac{\mathrm{SMREG}}{\mathrm{SM}} = e^{-w} \sum_{k \ge 0} \frac{w^k}{k!} f(k, d) = E\,f(\mathrm{Po}(w), d),
    \qquad f(k, d) = \frac{d^k}{d(d+2)\cdots(d+2k-2)}   \quad\text{(Eqs 29-30)}.

``f(0, d) = f(1, d) = 1`` and ``f`` is non-increasing in ``k`` (strictly for ``k >= 1``, ``d >= 1``),
hence ``SMREG <= SM`` (Eq 31) and ``SMREG/SM`` strictly decreases in ``w``. A bound used by the Theorem 1
claims: ``1 - f(k, d) <= k(k-1)/d`` (``Π(1+a_j)^{-1} >= 1 - Σ a_j``), so
``1 - SMREG/SM <= E[Po(w)(Po(w)-1)]/d = w²/d`` (:func:`ratio_deficit_bound`).

Moments of one feature term ``X = Λ Y``, ``Y = e^{\sqrt d ω̂ᵀz}`` (``ω̂`` uniform on the sphere): for an
orthonormal family ``ω̂_1..ω̂_m`` the vector ``Σ k_i ω̂_i`` has norm ``‖k‖`` and a uniform direction, so

.. math:: E \prod_i Y_i^{k_i} = {}_0F_1(;\tfrac d2; \tfrac{d s}{4}\textstyle\sum_i k_i^2)
   \quad\text{(orthogonal)},\qquad \prod_i {}_0F_1(;\tfrac d2; \tfrac{d s}{4} k_i^2)\quad\text{(iid)}.

In particular ``E X² = Λ² ₀F₁(; d/2; d s)`` and, for an orthogonal pair, ``E X_1X_2 = Λ² ₀F₁(; d/2; d s/2)``
(register ``performer.derived.smreg_mse``).

Numerics: everything is in log space. ``₀F₁`` is evaluated through ``scipy.special.ive`` (the factor
``e^{2√x}`` restored in logs), and through its power series summed in log space where the Bessel
function under-flows (orders much larger than the argument, e.g. ``d = 10^6``). Differences of ``₀F₁``
values (variances, the orthogonal pair's covariance) use their own power series for small arguments, so
they are free of cancellation.
Functions return ``inf`` instead of overflowing.
"""

from __future__ import annotations

import math
from itertools import combinations_with_replacement

import numpy as np
from scipy import special, stats

from .sphere import log_coordinate_moment

__all__ = [
    "log_hyp0f1",
    "log_smreg_ratio",
    "smreg_ratio",
    "log_smreg",
    "smreg",
    "log_f",
    "log_smreg_ratio_eq30",
    "log_smreg_ratio_eq21",
    "poisson_tail",
    "ratio_deficit_bound",
    "w_bound",
    "proof_l",
    "eq32_lower_bound",
    "eq33_f_lower_bound",
    "eq34_chernoff_bound",
    "eq35_bound",
    "log_term_moment",
    "log_joint_moment",
    "log_term_variance",
    "term_variance",
    "log_orthogonal_pair_excess",
    "theorem2_gap_coefficient",
    "smreg_mse",
    "estimator_error_moments",
]

#: Power-series terms kept for the cancellation-free differences (arguments a <= max(1, b), see below).
_DIFF_TERMS = 80
#: Terms of width ``_WINDOW·sd`` on each side of a log-concave series' peak are summed.
_WINDOW = 40.0


def _exp_or_inf(log_value):
    """``exp`` that returns ``inf`` (without a warning) where the value exceeds float64."""
    log_value = np.asarray(log_value, dtype=np.float64)
    return np.where(log_value < 709.0, np.exp(np.minimum(log_value, 709.0)), np.inf)


def _check_d(d) -> float:
    d = float(d)
    if not d >= 1 or d != int(d):
        raise ValueError(f"d must be an integer >= 1, got {d}")
    return d


def _check_nonnegative(value, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if not (arr >= 0).all() or not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return arr


def _logsumexp_cumulative(log_ratio: np.ndarray) -> float:
    """``log Σ_n exp(Σ_{j<n} log_ratio_j)`` (``n`` from 0): a power series from its term ratios."""
    log_terms = np.concatenate([[0.0], np.cumsum(log_ratio)])
    return float(special.logsumexp(log_terms))


def _series_peak(b: float, x: float) -> float:
    """Index of the largest term ``x^n/((b)_n n!)`` of ``₀F₁(; b; x)``: the root of ``(b+n)(n+1) = x``."""
    return max(0.0, (-(b + 1) + math.sqrt((b - 1) ** 2 + 4 * x)) / 2)


def _series_window(b: float, x: float) -> tuple[float, float]:
    """Peak index and standard width of the log-concave terms of ``₀F₁(; b; x)``."""
    peak = _series_peak(b, x)
    return peak, 1 / math.sqrt(1 / (b + peak) + 1 / (peak + 1))


def _log_hyp0f1_series(b: float, x: float) -> float:
    peak, width = _series_window(b, x)
    n = np.arange(int(peak + _WINDOW * width + 20))
    return _logsumexp_cumulative(math.log(x) - np.log(b + n) - np.log1p(n))


def _log_hyp0f1_bessel(b: float, x: np.ndarray) -> np.ndarray:
    """``log Γ(b) + (1-b)/2 log x + log ive(b-1, 2√x) + 2√x``; ``nan`` where ``ive`` under- or overflows."""
    t = 2 * np.sqrt(x)
    scaled = special.ive(b - 1, t)
    usable = np.isfinite(scaled) & (scaled > 1e-290)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = special.gammaln(b) + (1 - b) / 2 * np.log(x) + np.log(scaled) + t
    return np.where(usable, out, np.nan)


def _log_hyp0f1_scalar(b: float, x: float) -> float:
    """Scalar fast path of :func:`log_hyp0f1` (the adversarial searches call it thousands of times)."""
    if x == 0:
        return 0.0
    t = 2 * math.sqrt(x)
    scaled = float(special.ive(b - 1, t))
    if not (math.isfinite(scaled) and scaled > 1e-290):
        return _log_hyp0f1_series(b, x)
    return float(special.gammaln(b)) + (1 - b) / 2 * math.log(x) + math.log(scaled) + t


def _log_hyp0f1_fixed_b(b: float, x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    positive = x > 0
    out[positive] = _log_hyp0f1_bessel(b, x[positive])
    for i in np.flatnonzero(positive & ~np.isfinite(out)):
        out[i] = _log_hyp0f1_series(b, float(x[i]))
    return out


def log_hyp0f1(b, x):
    r"""``log ₀F₁(; b; x) = log Σ_n xⁿ/((b)_n n!)`` for ``b > 0`` and ``x >= 0`` (broadcasting arrays).

    The Bessel form ``Γ(b) x^{(1-b)/2} I_{b-1}(2√x)`` with ``I`` from ``scipy.special.ive`` (its factor
    ``e^{2√x}`` restored in logs); where ``ive`` under-flows (order much larger than the argument) the
    power series is summed in log space around its peak (``±40`` standard widths of the log-concave terms).
    Accuracy: about ``1e-16·(1 + b log b)`` absolute in the log (the Gamma prefactors cancel).
    """
    if isinstance(b, (int, float)) and isinstance(x, (int, float)) and b > 0 and 0 <= x < math.inf:
        return _log_hyp0f1_scalar(float(b), float(x))
    b_arr, x_arr = np.broadcast_arrays(np.asarray(b, dtype=np.float64), _check_nonnegative(x, "x"))
    if np.any(b_arr <= 0):
        raise ValueError(f"b must be > 0, got {b}")
    if b_arr.ndim == 0:
        return _log_hyp0f1_scalar(float(b_arr), float(x_arr))
    out = np.empty(b_arr.shape)
    for value in np.unique(b_arr):
        mask = b_arr == value
        out[mask] = _log_hyp0f1_fixed_b(float(value), x_arr[mask])
    return out


def log_smreg_ratio(d, s):
    """``log(SMREG/SM) = -s/2 + log ₀F₁(; d/2; d s/4)`` for dimension ``d`` and ``s = ‖x+y‖²`` (closed form)."""
    d = _check_d(d)
    if isinstance(s, (int, float)) and 0 <= s < math.inf:
        return -s / 2 + _log_hyp0f1_scalar(d / 2, d * s / 4)
    s = _check_nonnegative(s, "s")
    return -s / 2 + log_hyp0f1(d / 2, d * s / 4)


def smreg_ratio(d, s):
    """``SMREG/SM`` as a function of ``d`` and ``s = ‖x+y‖²``; in ``(0, 1]`` (0 where it under-flows)."""
    return np.exp(log_smreg_ratio(d, s))


def _pair(x, y):
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"x and y must be finite vectors of the same length, got shapes {x.shape}, {y.shape}")
    return x, y


def log_smreg(x, y) -> float:
    """``log SMREG(x, y) = log Λ + log ₀F₁(; d/2; d‖x+y‖²/4)`` (Sec 2.3 with ω uniform on ``√d S^{d-1}``)."""
    x, y = _pair(x, y)
    z = x + y
    return float(-(x @ x + y @ y) / 2 + log_hyp0f1(x.size / 2, x.size * (z @ z) / 4))


def smreg(x, y) -> float:
    """``SMREG(x, y)``; ``inf`` if it exceeds float64 (use :func:`log_smreg`)."""
    return float(_exp_or_inf(log_smreg(x, y)))


# ------------------------------------------------------------------------------------ Eqs 21, 29, 30


#: Largest k for which log f(k, d) is summed term by term (beyond it: Gamma functions).
_LOG_F_TERMS = 100_000


def log_f(k, d):
    """``log f(k, d) = log(d^k/(d(d+2)···(d+2k-2))) = -Σ_{j<k} log(1 + 2j/d)`` (Eq 29).

    Summed term by term (``log1p``) for ``k <= 1e5``, exact to round-off for every ``d``; beyond that
    ``k log(d/2) - log Γ(d/2+k) + log Γ(d/2)``.
    """
    d = _check_d(d)
    k = np.asarray(k, dtype=np.float64)
    if np.any(k < 0) or np.any(k != np.round(k)):
        raise ValueError(f"k must be non-negative integers, got {k}")
    top = int(k.max(initial=0))
    if top <= _LOG_F_TERMS:
        cumulative = np.concatenate([[0.0], -np.cumsum(np.log1p(2 * np.arange(top) / d))])
        out = cumulative[k.astype(int)]
    else:
        out = k * math.log(d / 2) - (special.gammaln(d / 2 + k) - special.gammaln(d / 2))
    return float(out) if out.ndim == 0 else out


def _concave_window(peak: float, width: float) -> np.ndarray:
    lo = max(0, int(peak - _WINDOW * width - 20))
    return np.arange(lo, int(peak + _WINDOW * width + 20) + 1, dtype=np.float64)


def _log_eq30_scalar(d: float, w: float) -> float:
    if w == 0:
        return 0.0
    peak = (-d + math.sqrt(d * d + 8 * w * d)) / 4  # root of 2k² + dk - wd = 0: the summand's mode
    k = _concave_window(peak, math.sqrt(peak + 1))
    return float(special.logsumexp(stats.poisson.logpmf(k, w) + log_f(k, d)))


def log_smreg_ratio_eq30(d, w):
    """Eq 30 as written: ``log(e^{-w} Σ_k w^k/k! f(k, d))``, summed in log space to convergence.

    The summand ``Po(w)``-pmf times ``f(k, d)`` is log-concave in ``k``; the terms within 40 standard widths
    (plus 20) of its mode are summed, the rest is below float64 resolution.
    """
    d = _check_d(d)
    w_arr = _check_nonnegative(w, "w")
    out = np.array([_log_eq30_scalar(d, float(v)) for v in w_arr.ravel()]).reshape(w_arr.shape)
    return float(out) if out.ndim == 0 else out


def _log_eq21_scalar(d: float, s: float) -> float:
    if s == 0:
        return 0.0
    k = _concave_window(*_series_window(d / 2, d * s / 4))
    log_terms = k * math.log(s * d) - special.gammaln(2 * k + 1) + log_coordinate_moment(2 * k, int(d))
    return float(-s / 2 + special.logsumexp(log_terms))


def log_smreg_ratio_eq21(d, s):
    """Eq 21 divided by SM: ``log(e^{-s/2} Σ_k ‖z‖^{2k} d^k E[(ω̂ᵀe_1)^{2k}]/(2k)!)`` with the sphere moments.

    The moments come from :func:`rfkit.theory.sphere.log_coordinate_moment` (Gamma form), not from Lemma 3.
    """
    d = _check_d(d)
    s_arr = _check_nonnegative(s, "s")
    out = np.array([_log_eq21_scalar(d, float(v)) for v in s_arr.ravel()]).reshape(s_arr.shape)
    return float(out) if out.ndim == 0 else out


# ----------------------------------------------------------------------------- Theorem 1, proof F.3


def poisson_tail(w, l):
    """``P[Po(w) > l]`` (exact, ``scipy.stats.poisson.sf``)."""
    return stats.poisson.sf(l, w)


def ratio_deficit_bound(d, w):
    """Upper bound ``w²/d`` on ``1 - SMREG/SM`` (module docstring), valid for every ``d >= 1``, ``w >= 0``."""
    d = _check_d(d)
    return _check_nonnegative(w, "w") ** 2 / d


def w_bound(C):
    """The proof's bound ``w <= 2 ln C`` (line before Eq 35), claimed for pairs of a matrix with ``‖A‖∞ <= C``."""
    return 2 * np.log(C)


def proof_l(d: int, rounding: str = "floor") -> int:
    """The proof's ``l = d^{1/3}`` as an integer: exact for cubes, else rounded (``floor`` or ``ceil``)."""
    d = int(_check_d(d))
    if rounding not in ("floor", "ceil"):
        raise ValueError(f"rounding must be 'floor' or 'ceil', got {rounding!r}")
    root = round(d ** (1 / 3))
    root -= root**3 > d  # integer floor of the cube root, robust to the float root's rounding
    root += (root + 1) ** 3 <= d
    return root if root**3 == d or rounding == "floor" else root + 1


def eq32_lower_bound(d, w, l: int):
    """Eq 32: ``f(l, d)·(1 - P[Po(w) > l])``, a lower bound on ``SMREG/SM`` for integer ``l >= 0``."""
    return np.exp(log_f(l, d)) * stats.poisson.cdf(l, w)


def eq33_f_lower_bound(d, l: int):
    """Eq 33's first step: ``(1 - (2l-2)/d)^l``, claimed ``<= f(l, d)``."""
    return (1 - (2 * l - 2) / _check_d(d)) ** l


def eq34_chernoff_bound(w, l):
    """Eqs 33-34: ``P[Po(w) > l] <= exp(-w - l(t - 1))`` with ``t = ln(l/w)``, for ``0 < w < l``."""
    w = np.asarray(w, dtype=np.float64)
    if np.any(w <= 0) or np.any(w >= l):
        raise ValueError(f"Eq 34 needs 0 < w < l (t > 0), got w={w}, l={l}")
    t = np.log(l / w)
    return np.exp(-w - l * (t - 1))


def eq35_bound(d, C):
    """Eq 35 without its ``o(d^{-1/3})`` term: ``(1 - 2/d^{1/3})(1 - C^{-2}(d^{1/3}/(2e ln C))^{-d^{1/3}})``, C > 1."""
    d = _check_d(d)
    C = np.asarray(C, dtype=np.float64)
    if np.any(C <= 1):
        raise ValueError(f"Eq 35 needs C > 1, got {C}")
    l = d ** (1 / 3)
    log_tail = -2 * np.log(C) - l * np.log(l / (2 * math.e * np.log(C)))
    return (1 - 2 / l) * (1 - _exp_or_inf(log_tail))


# ------------------------------------------------------------------------------ moments and MSE


def log_term_moment(d, s, k: int = 1):
    """``log E Y^k = log ₀F₁(; d/2; k² d s/4)`` for one term ``Y = X/Λ = exp(√d ω̂ᵀz)``."""
    d = _check_d(d)
    return log_hyp0f1(d / 2, k * k * d * _check_nonnegative(s, "s") / 4)


def log_joint_moment(d, s, powers, orthogonal: bool) -> float:
    """``log E Π_i Y_i^{k_i}`` for distinct features ``i`` (module docstring); ``orthogonal`` needs ``len <= d``."""
    powers = [int(p) for p in powers if p]
    if orthogonal:
        if len(powers) > d:
            raise ValueError(f"an orthogonal family in R^{d} has at most {d} members, got {len(powers)}")
        return float(log_term_moment(d, s, 1) if not powers else
                     log_hyp0f1(d / 2, sum(p * p for p in powers) * d * s / 4))
    return float(sum(log_term_moment(d, s, p) for p in powers))


def _series_coefficients(b: float) -> np.ndarray:
    n = np.arange(_DIFF_TERMS)
    return np.exp(-(special.gammaln(b + n) - special.gammaln(b)) - special.gammaln(n + 1))


def _power_series(coefficients: np.ndarray, a: float) -> float:
    return float(np.polynomial.polynomial.polyval(a, coefficients))


def _log_positive(value: float) -> float:
    return math.log(value) if value > 0 else -math.inf


def log_term_variance(d, s) -> float:
    """``log Var Y = log(₀F₁(; d/2; d s) - ₀F₁(; d/2; d s/4)²)`` without cancellation (``Var X = Λ² Var Y``)."""
    b, a = _check_d(d) / 2, d * float(_check_nonnegative(s, "s")) / 4
    if a <= max(1.0, b):
        c = _series_coefficients(b)
        return _log_positive(_power_series(4.0 ** np.arange(c.size) * c - np.convolve(c, c)[: c.size], a))
    log_f4, log_f1 = log_hyp0f1(b, 4 * a), log_hyp0f1(b, a)
    return log_f4 + math.log1p(-math.exp(2 * log_f1 - log_f4))


def term_variance(d, s) -> float:
    """``Var Y`` (see :func:`log_term_variance`); ``inf`` if it exceeds float64."""
    return float(_exp_or_inf(log_term_variance(d, s)))


def log_orthogonal_pair_excess(d, s) -> float:
    """``log(E Y_1 E Y_2 - E Y_1Y_2) = log(₀F₁(; d/2; d s/4)² - ₀F₁(; d/2; d s/2))`` for an orthogonal pair.

    The excess is ``-Cov(Y_1, Y_2)``: positive when orthogonality reduces the MSE (``-inf`` at ``s = 0``).
    Computed without cancellation (power series for small arguments, ``log1p`` otherwise).
    """
    b, a = _check_d(d) / 2, d * float(_check_nonnegative(s, "s")) / 4
    if a <= max(1.0, b):
        c = _series_coefficients(b)
        return _log_positive(_power_series(np.convolve(c, c)[: c.size] - 2.0 ** np.arange(c.size) * c, a))
    log_f1, log_f2 = log_hyp0f1(b, a), log_hyp0f1(b, 2 * a)
    return 2 * log_f1 + math.log1p(-math.exp(log_f2 - 2 * log_f1))


def theorem2_gap_coefficient(d, m: int) -> float:
    """Theorem 2's coefficient ``2(m-1)/(m(d+2))`` of ``(SMREG - Λ)²`` (Eq 10 with SM replaced by SMREG)."""
    return 2 * (m - 1) / (m * (_check_d(d) + 2))


def smreg_mse(d, s, m: int, *, orthogonal: bool = False, log_lam: float = 0.0) -> float:
    """MSE of ``SMREGhat^+_m`` (iid rows on ``√d S^{d-1}``) or of its orthogonal version (``m <= d``).

    ``MSE_iid = Λ² Var Y / m``; ``MSE_ort = MSE_iid - ((m-1)/m) Λ² (₀F₁(;d/2;ds/4)² - ₀F₁(;d/2;ds/2))``.
    ``log_lam = log Λ`` (0 gives the Λ-free MSE of ``SMREGhat/Λ``); ``inf`` if it exceeds float64.
    """
    if m < 1 or (orthogonal and m > d):
        raise ValueError(f"need 1 <= m (<= d for orthogonal features), got m={m}, d={d}")
    log_mse = log_term_variance(d, s) - math.log(m) + 2 * log_lam
    if orthogonal and m > 1 and s > 0:
        log_mse += math.log1p(-(m - 1) * math.exp(log_orthogonal_pair_excess(d, s) - log_term_variance(d, s)))
    return float(_exp_or_inf(log_mse))


def _partitions(total: int):
    """Integer partitions of ``total`` (tuples in non-increasing order)."""
    for parts in range(1, total + 1):
        for combo in combinations_with_replacement(range(total, 0, -1), parts):
            if sum(combo) == total:
                yield combo


def _arrangements(partition: tuple[int, ...], m: int) -> float:
    """Number of exponent vectors ``(k_1..k_m)`` whose non-zero entries are ``partition`` (as a multiset)."""
    if len(partition) > m:
        return 0.0
    mult = np.unique(partition, return_counts=True)[1]
    return math.perm(m, len(partition)) / math.prod(math.factorial(int(c)) for c in mult)


def _raw_moment_of_sum(d, s, m: int, j: int, orthogonal: bool) -> float:
    """``E (Σ_{i<=m} Y_i)^j`` by the multinomial expansion grouped by partitions of ``j``."""
    if j == 0:
        return 1.0
    total = 0.0
    for partition in _partitions(j):
        count = _arrangements(partition, m)
        if count:
            multinomial = math.factorial(j) / math.prod(math.factorial(p) for p in partition)
            total += count * multinomial * math.exp(log_joint_moment(d, s, partition, orthogonal))
    return total


def _central_moment(raw: list[float], mu: float, order: int) -> float:
    """``E(T - μ)^order`` from the raw moments ``raw[j] = E T^j``."""
    return sum(math.comb(order, j) * raw[j] * (-mu) ** (order - j) for j in range(order + 1))


def estimator_error_moments(d, s, m: int, *, orthogonal: bool = False) -> dict[str, float]:
    """Mean, sd and skewness of the squared error ``Z = (T - E T)²`` of ``T = SMREGhat^+_m/Λ``.

    ``mse = E Z`` is :func:`smreg_mse` (Λ-free); ``sd_squared_error = sqrt(E(T-μ)^4 - mse²)`` and
    ``skewness_squared_error = (E(T-μ)^6 - 3 mse E(T-μ)^4 + 2 mse³)/sd³`` come from the exact joint moments
    (central moments by the raw-moment expansion: use for ``s`` not too close to 0, where it cancels).
    """
    mu = math.exp(float(log_term_moment(d, s)))
    raw = [_raw_moment_of_sum(d, s, m, j, orthogonal) / m**j for j in range(7)]
    fourth, sixth = _central_moment(raw, mu, 4), _central_moment(raw, mu, 6)
    mse = smreg_mse(d, s, m, orthogonal=orthogonal)
    var_z = max(fourth - mse * mse, 0.0)
    third_z = sixth - 3 * mse * fourth + 2 * mse**3
    skew = third_z / var_z**1.5 if var_z > 0 else math.nan
    return dict(mse=mse, sd_squared_error=math.sqrt(var_z), skewness_squared_error=skew)
