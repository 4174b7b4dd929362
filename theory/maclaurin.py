r"""Closed forms for Macformer (``004_803b6fd9a1d4a879.txt``): Maclaurin coefficients, Rademacher moments, the
moments of random Maclaurin features (RMF), the delta-method bias and variance of RMFA, and the ppSBN algebra.

Coefficients (Table 1)
    :func:`derived_coefficients` expands each printed ``f`` with sympy (exact rationals);
    :func:`cauchy_coefficients` computes them independently by the trapezoidal rule on a circle of radius
    ``ρ < R_f`` in mpmath (``a_N = (2π)^{-1}∮ f(ρe^{iθ}) e^{-iNθ} dθ / ρ^N``); :func:`printed_coefficients`
    evaluates Table 1's formulas exactly (``None`` where undefined).

Rademacher moments (register ``derived.rademacher_moments``)
    For ``ω`` uniform on ``{±1}^d``: ``E[⟨ω,a⟩⟨ω,b⟩] = a·b`` and
    ``E[⟨ω,a⟩⟨ω,b⟩⟨ω,c⟩⟨ω,e⟩] = (a·b)(c·e) + (a·c)(b·e) + (a·e)(b·c) - 2 Σ_k a_k b_k c_k e_k``
    (:func:`rademacher_moment4`); every joint moment ``E[u^i v^j]`` of ``u = ⟨ω,x⟩, v = ⟨ω,y⟩`` exactly by a
    recursion over coordinates (:func:`rademacher_joint_moments`).

RMF moments (``derived.rmf_feature_moments``)
    One feature ``Z = φ(x)φ(y)``: ``E[Z^k] = Σ_n π_n c_n^{2k} E[(uv)^k]^n`` (independent ``ω_j``). The
    coefficient series ``b_n = π_n c_n^{2k}`` has radius ``R_f^k / p^{k-1}`` in ``s = E[(uv)^k]`` under every
    (law, weight) reading, and on the circle it converges iff ``k α > 1`` where ``a_n ~ C n^{-α} R_f^{-n}``.
    Divergent series return ``inf`` (:func:`coefficient_series`).

RMFA delta method (``derived.rmfa_ratio_bias``, ``derived.rmfa_ratio_mse``)
    With ``κ(s) = Σ π_n c_n² s^n``, ``μ_a = Σ_{j∈I_a} κ(x_aj)``, ``attn^κ_a = Σ_i κ(x_ai) V_i / μ_a`` and
    ``G_a(i,j) = Σ_n π_n c_n⁴ (E⟨ω,q̃_a⟩²⟨ω,k̃_i⟩⟨ω,k̃_j⟩)^n``:
    ``E[RMFA_ac] = attn^κ_ac + b_ac/D + O(D^{-2})`` with ``b_ac = -Σ_ij (V_ic - attn^κ_ac) G_a(i,j)/μ_a²`` and
    ``Var[RMFA_ac] = v_ac/D + O(D^{-2})``, ``v_ac = Σ_ij (V_ic - attn^κ_ac)(V_jc - attn^κ_ac) G_a(i,j)/μ_a²``
    (second-order delta method for a ratio of means of iid pairs).

ppSBN algebra (Algorithm 1, Theorem 3)
    :func:`presbn_argument` — the softmax argument that attention on pre-SBN outputs sees, with ``μ_K`` cancelled
    under matrix norms (``derived.presbn_exp_attention``); :func:`theorem3_r`, :func:`theorem3_t` — Theorem 3's
    ``r`` and ``t`` as printed (scalar readings), :func:`theorem3_rhs` — ``(1/t)·attn^{1/r}``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from rfkit.base.maclaurin import MACLAURIN_KERNELS, get_maclaurin_kernel, log_degree_mass, log_weight_squared
from rfkit.base.numerics import signed_power

__all__ = [
    "derived_coefficients", "general_term_sign", "cauchy_coefficients", "printed_coefficients", "coefficient_values",
    "series_growth", "truncation_bias", "rademacher_moment2", "rademacher_moment4", "rademacher_joint_moments",
    "coefficient_series", "feature_moment", "kappa", "RMFMoments", "rmf_moments", "StratifiedMoments",
    "stratified_moments", "expected_degree", "fourth_moment_matrix", "RatioDelta", "rmfa_delta_method",
    "nmse_prediction", "presbn_argument", "theorem3_r", "theorem3_t", "theorem3_rhs",
]

# ------------------------------------------------------------------------------------ coefficients


@functools.cache
def _sympy_series(kernel: str, n_max: int) -> tuple[Fraction, ...]:
    import sympy

    t = sympy.Symbol("t")
    f = sympy.sympify(MACLAURIN_KERNELS[kernel].expression, locals=dict(t=t))
    poly = sympy.Poly(sympy.series(f, t, 0, n_max + 1).removeO(), t)
    coeffs = [poly.coeff_monomial(t**n) for n in range(n_max + 1)]
    return tuple(Fraction(int(c.p), int(c.q)) for c in coeffs)


def derived_coefficients(kernel: str, n_max: int) -> tuple[Fraction, ...]:
    """Exact ``a_0..a_{n_max}`` of the printed ``f`` (``f^{(N)}(0)/N!``) by sympy's series expansion.

    Expansions are cached per process at ``N_max`` rounded up to 50 or 200 (a few tenths of a second each).
    """
    name = get_maclaurin_kernel(kernel).name
    bucket = next((b for b in (50, 200) if n_max <= b), n_max)
    return _sympy_series(name, bucket)[: n_max + 1]


def cauchy_coefficients(kernel: str, n_max: int, radius: float, *, dps: int = 50, points: int | None = None):
    """``a_0..a_{n_max}`` by the trapezoidal rule for Cauchy's integral on ``|t| = radius`` (mpmath, ``dps`` digits).

    With ``M`` points the rule returns ``a_N + Σ_{j>=1} a_{N+jM} ρ^{jM}`` (aliasing). By default ``M`` is large enough
    that the aliased terms are below the working precision: ``(ρ/R_f)^M <= 10^{-dps}`` for a finite radius of
    convergence (``R_f = 1``), and ``M >= max(4(n_max + 1), 256)`` always. Returns a list of ``mpmath.mpf``.
    """
    import mpmath

    spec = get_maclaurin_kernel(kernel)
    if points is None:
        points = max(4 * (n_max + 1), 256)
        if math.isfinite(spec.radius):
            if not radius < spec.radius:
                raise ValueError(f"the contour radius must be below R_f = {spec.radius}, got {radius}")
            points = max(points, n_max + 1 + math.ceil(dps * math.log(10) / math.log(spec.radius / radius)))
    with mpmath.workdps(dps):
        rho = mpmath.mpf(radius)
        roots = [mpmath.expjpi(mpmath.mpf(2 * j) / points) for j in range(points)]
        f = _mp_function(spec.name)
        values = [f(rho * w) for w in roots]
        out = []
        for n in range(n_max + 1):
            total = mpmath.fsum(values[j] * mpmath.conj(roots[(j * n) % points]) for j in range(points))
            out.append(mpmath.re(total) / (points * rho**n))
        return out


def _mp_function(name: str):
    import mpmath

    return {"exp": mpmath.exp, "inv": lambda t: 1 / (1 - t), "log": lambda t: 1 - mpmath.log(1 - t),
            "trigh": lambda t: mpmath.sinh(t) + mpmath.cosh(t), "sqrt": lambda t: 2 - mpmath.sqrt(1 - t)}[name]


@functools.cache
def general_term_sign(kernel: str) -> Callable[[int], float]:
    """``N -> sign(a_N)`` (``N >= 1``) from sympy's formal power series of the printed ``f`` (its symbolic general
    term), evaluated in mpmath; the constant's ``Coeff(c, t, k)`` terms vanish for ``k >= 1``."""
    import mpmath
    import sympy
    from sympy.series.formal import Coeff

    t = sympy.Symbol("t")
    f = sympy.sympify(get_maclaurin_kernel(kernel).expression, locals=dict(t=t))
    series = sympy.fps(f, t)
    k = series.ak.variables[0]
    formula = series.ak.formula.replace(lambda e: isinstance(e, Coeff), lambda e: sympy.Integer(0))
    evaluate = sympy.lambdify(k, formula, modules="mpmath")
    return lambda n: float(mpmath.sign(evaluate(mpmath.mpf(n))))


def printed_coefficients(kernel: str, n_max: int) -> tuple[Fraction | None, ...]:
    """Table 1's ``a_N`` evaluated literally in exact arithmetic (``None`` where the formula has no value)."""
    spec = get_maclaurin_kernel(kernel)
    return tuple(spec.printed(n) for n in range(n_max + 1))


def coefficient_values(kernel: str, n_max: int, source: str = "derived",
                       printed_fallback: float | None = None) -> np.ndarray:
    """Float ``a_0..a_{n_max}`` from a source (``derived`` or ``printed``; undefined printed values -> fallback,
    default ``f(0)``)."""
    if source == "derived":
        return np.array([float(c) for c in derived_coefficients(kernel, n_max)])
    spec = get_maclaurin_kernel(kernel)
    fallback = float(spec.closed_form(np.float64(0.0))) if printed_fallback is None else printed_fallback
    return np.array([fallback if c is None else float(c) for c in printed_coefficients(kernel, n_max)])


#: (radius, boundary decay α) of the *printed* coefficient sequences where they differ from the true ones:
#: log's printed a_N = 1 (N >= 1) grows like inv's; sqrt's printed max(1, 2N-3)/(2^N N!) is entire.
_PRINTED_GROWTH = {"log": (1.0, 0.0), "sqrt": (math.inf, math.inf)}


def series_growth(kernel: str, source: str = "derived") -> tuple[float, float]:
    """``(R, α)`` with ``a_N ~ C N^{-α} R^{-N}`` for a kernel's coefficient source."""
    spec = get_maclaurin_kernel(kernel)
    if source == "printed" and spec.name in _PRINTED_GROWTH:
        return _PRINTED_GROWTH[spec.name]
    return spec.radius, spec.boundary_decay


def truncation_bias(kernel: str, t: float, n_max: int) -> float:
    """``f(t) - Σ_{N<=n_max} a_N t^N`` (the bias of an RMF map with degrees capped at ``n_max``)."""
    a = coefficient_values(kernel, n_max)
    return float(get_maclaurin_kernel(kernel).closed_form(np.float64(t)) - np.polyval(a[::-1], t))


# ---------------------------------------------------------------------------------- Rademacher moments


def rademacher_moment2(a, b) -> float:
    """``E[⟨ω,a⟩⟨ω,b⟩] = a·b``."""
    return float(np.dot(a, b))


def rademacher_moment4(a, b, c, e) -> float:
    """``E[⟨ω,a⟩⟨ω,b⟩⟨ω,c⟩⟨ω,e⟩] = (a·b)(c·e) + (a·c)(b·e) + (a·e)(b·c) - 2 Σ_k a_k b_k c_k e_k``."""
    a, b, c, e = (np.asarray(z, dtype=np.float64) for z in (a, b, c, e))
    return float(a @ b * (c @ e) + a @ c * (b @ e) + a @ e * (b @ c) - 2.0 * np.sum(a * b * c * e))


def rademacher_joint_moments(x, y, order: int) -> np.ndarray:
    """``E[u^i v^j]`` for ``i, j <= order``, ``u = ⟨ω,x⟩``, ``v = ⟨ω,y⟩``, exactly.

    Adding coordinate ``k`` multiplies the moment generating function by ``cosh(s x_k + t y_k)``; in moments,
    ``E[(u + σa)^i (v + σb)^j] = Σ C(i,r) C(j,s) a^r b^s E[σ^{r+s}] E[u^{i-r} v^{j-s}]`` with ``E[σ^m] = 1[m even]``.
    Cost ``O(d·order⁴)``.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    binom = np.array([[math.comb(i, r) for r in range(order + 1)] for i in range(order + 1)], dtype=np.float64)
    moments = np.zeros((order + 1, order + 1))
    moments[0, 0] = 1.0
    for a, b in zip(x, y, strict=True):
        powers_a, powers_b = a ** np.arange(order + 1), b ** np.arange(order + 1)
        new = np.zeros_like(moments)
        for i in range(order + 1):
            for j in range(order + 1):
                total = 0.0
                for r in range(i + 1):
                    for s in range(j + 1):
                        if (r + s) % 2 == 0:
                            total += binom[i, r] * binom[j, s] * powers_a[r] * powers_b[s] * moments[i - r, j - s]
                new[i, j] = total
        moments = new
    return moments


def fourth_moment_matrix(q: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``M_ij = E[⟨ω,q⟩²⟨ω,k_i⟩⟨ω,k_j⟩]`` for one query ``q (d,)`` and keys ``(n, d)`` (:func:`rademacher_moment4`)."""
    kq = keys @ q
    return (q @ q) * (keys @ keys.T) + 2.0 * np.outer(kq, kq) - 2.0 * (keys * (q * q)) @ keys.T


# -------------------------------------------------------------------------------------- RMF moments


def _log_b(n: np.ndarray, log_a: np.ndarray, p: float, n_law: str, weight: str, k: int) -> np.ndarray:
    """``log(π_n c_n^{2k})``."""
    return log_degree_mass(n, p, n_law) + k * log_weight_squared(n, log_a, p, n_law, weight)


def _log_a(kernel: str, source: str, n: np.ndarray) -> np.ndarray:
    spec = get_maclaurin_kernel(kernel)
    if source == "derived":
        return spec.log_coefficient(n)
    a = coefficient_values(kernel, int(n.max()), "printed")
    with np.errstate(divide="ignore"):
        return np.log(a[n])


#: Terms summed before the geometric tail bound; enough for |s|/radius <= 0.999 to reach double precision.
_TERMS = 40_000


def coefficient_series(log_b: Callable, s, radius: float, decay: float) -> np.ndarray:
    """``Σ_n b_n s^n`` elementwise (``b_n = exp(log_b(n)) >= 0``); ``inf`` where it diverges.

    Divergence: ``|s| > radius``, or ``|s| = radius`` with ``decay <= 1`` (``b_n ~ n^{-decay} radius^{-n}``). Inside,
    terms are summed until they are below ``1e-18`` of the running absolute sum; on the circle a tail estimate
    (integral for ``s = R``, half a term for the alternating ``s = -R``) is added.
    """
    s = np.asarray(s, dtype=np.float64)
    out = np.full(s.shape, np.inf)
    if math.isinf(radius):
        inside = np.ones(s.shape, dtype=bool)
    else:
        rel = np.abs(s) / radius
        inside = (rel < 1) | ((rel == 1) & (decay > 1))
    if not inside.any():
        return out
    values = s[inside]
    n_terms = _terms_needed(np.abs(values).max(), radius)
    n = np.arange(n_terms)
    log_b_n = log_b(n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_abs = np.log(np.abs(values))[:, None] * n[None, :]
        log_abs[:, 0] = 0.0
        terms = np.exp(log_b_n[None, :] + log_abs) * np.where(values[:, None] < 0, (-1.0) ** n[None, :], 1.0)
    terms = np.where(np.isfinite(log_b_n)[None, :], terms, 0.0)
    total = terms.sum(axis=1)
    if not math.isinf(radius):
        # on the circle the tail decays only like n^{-decay}: add Σ_{n>N} C n^{-α} ≈ C (N+1/2)^{1-α}/(α-1) for s = R
        # (midpoint rule, relative error O(N^-2)), and half the next term for the alternating series at s = -R
        last, big_n = terms[:, -1], float(n_terms - 1)
        tail_pos = last * big_n**decay * (big_n + 0.5) ** (1.0 - decay) / (decay - 1.0) if decay > 1 else 0.0
        on_circle = np.abs(values) / radius == 1
        total = total + np.where(on_circle, np.where(values > 0, tail_pos, -0.5 * last), 0.0)
    out[inside] = total
    return out


def _terms_needed(largest: float, radius: float) -> int:
    if math.isinf(radius) or largest == 0:
        return max(64, int(4 * largest) + 200)
    rel = largest / radius
    if rel >= 0.999:
        return _TERMS
    return min(_TERMS, int(math.ceil(45.0 / -math.log(rel))) + 64)


def _moment_series(kernel: str, source: str, p: float, n_law: str, weight: str, k: int, s):
    radius, decay = series_growth(kernel, source)
    radius_s = radius**k / p ** (k - 1) if math.isfinite(radius) else math.inf
    return coefficient_series(lambda n: _log_b(n, _log_a(kernel, source, n), p, n_law, weight, k), s,
                              radius_s, k * decay)


def feature_moment(x, y, kernel: str, order: int, *, p: float, n_law: str = "geom", weight: str = "importance",
                   coeffs: str = "derived") -> float:
    """``E[Z^k]`` of one feature product ``Z = φ(x)φ(y)``: ``Σ_n π_n c_n^{2k} E[(⟨ω,x⟩⟨ω,y⟩)^k]^n`` (``inf`` where the
    coefficient series diverges; for odd ``k`` the signed series, absolutely convergent inside its radius)."""
    moments = rademacher_joint_moments(x, y, order)
    return float(_moment_series(kernel, coeffs, p, n_law, weight, order, moments[order, order]))


def kappa(s, kernel: str, *, p: float, n_law: str = "geom", weight: str = "importance", coeffs: str = "derived"):
    """``κ(s) = Σ_n π_n c_n² s^n``, the function the features estimate in expectation (``inf`` if divergent)."""
    return _moment_series(kernel, coeffs, p, n_law, weight, 1, s)


def expected_degree(p: float, n_law: str = "geom") -> float:
    """``E[N]`` counting zero features as 0: ``1/(p-1)`` (geom) or ``1/(p-1)²`` (defective)."""
    return 1.0 / (p - 1.0) if n_law == "geom" else 1.0 / (p - 1.0) ** 2


@dataclass(frozen=True)
class RMFMoments:
    """Exact moments of ``k̂ = Φ(x)·Φ(y)`` with ``D`` features (``inf`` where a series diverges).

    ``mean = E[Z]``; ``second = E[Z²]``; ``variance`` and ``sd`` of ``k̂`` (``(E[Z²] - E[Z]²)/D``); ``skewness``
    of ``k̂`` (``nan`` when the third moment is not established finite); ``abs_mean_finite``: ``E|Z| < ∞``
    (``None`` when undecided).
    """

    mean: float
    second: float
    variance: float
    sd: float
    skewness: float
    abs_mean_finite: bool | None


def rmf_moments(x, y, kernel: str, *, p: float, n_law: str = "geom", weight: str = "importance",
                coeffs: str = "derived", num_features: int = 1) -> RMFMoments:
    """Moments of the RMF kernel estimate ``Φ(x)·Φ(y)`` (register ``derived.rmf_feature_moments``)."""
    moments = rademacher_joint_moments(x, y, 4)
    series = functools.partial(_moment_series, kernel, coeffs, p, n_law, weight)
    mean = float(series(1, moments[1, 1]))
    second = float(series(2, moments[2, 2]))
    # E[Z²] - E[Z]² >= 0 exactly; round-off can leave it a few ulps below 0 where Z is (nearly) constant
    variance = max(second - mean * mean, 0.0) / num_features if math.isfinite(second) else math.inf
    radius, decay = series_growth(kernel, coeffs)
    radius3 = radius**3 / p**2 if math.isfinite(radius) else math.inf
    skew = math.nan
    if math.isfinite(second) and moments[4, 4] ** 0.75 < radius3 and variance > 0:
        third = float(series(3, moments[3, 3]))
        central = third - 3 * mean * second + 2 * mean**3
        skew = central / (variance**1.5 * num_features**2)
    return RMFMoments(mean, second, variance, math.sqrt(variance), skew, _abs_mean_finite(x, y, radius, decay))


def _abs_mean_finite(x, y, radius: float, decay: float) -> bool | None:
    """``E|Z| < ∞`` iff ``Σ a_n μ1^n < ∞`` with ``|x·y| <= μ1 = E|⟨ω,x⟩⟨ω,y⟩| <= ‖x‖‖y‖``."""
    if math.isinf(radius):
        return True
    upper = float(np.linalg.norm(x) * np.linalg.norm(y))
    lower = abs(float(np.dot(x, y)))
    if upper < radius or (upper == radius and decay > 1):
        return True
    if lower > radius:
        return False
    return None


@dataclass(frozen=True)
class StratifiedMoments:
    """Moments of the degree-stratified estimate ``Y = Σ_{n<=n_max} π_n Z_n`` (``Z_n``: one feature of degree ``n``,
    independent across ``n``) of ``E[Φ(x)·Φ(y)]``: ``E[Y] = Σ_{n<=n_max} π_n c_n² t^n`` (``truncated``), the
    remaining ``tail = Σ_{n>n_max} π_n c_n² t^n``, and the exact ``sd`` and ``skewness`` of ``Y``.

    Every ``Z_n`` has all moments finite, so ``Y`` can be averaged with a normal-theory test even where the plain
    estimate has infinite variance.
    """

    truncated: float
    tail: float
    sd: float
    skewness: float
    n_max: int
    log_mass: np.ndarray


def stratified_moments(x, y, kernel: str, *, p: float, n_law: str = "geom", weight: str = "importance",
                       coeffs: str = "derived", relative_tail: float = 1e-6) -> StratifiedMoments:
    """:class:`StratifiedMoments` with ``n_max`` the first degree whose series tail (in ``|t|``) is below
    ``relative_tail`` of the sum (at most 400)."""
    moments = rademacher_joint_moments(x, y, 3)
    t, m2, s3 = moments[1, 1], moments[2, 2], moments[3, 3]
    n = np.arange(401)
    log_a = _log_a(kernel, coeffs, n)
    log_c2 = log_weight_squared(n, log_a, p, n_law, weight)
    log_mass = log_degree_mass(n, p, n_law)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        b1 = np.exp(log_mass + log_c2) * np.abs(t) ** n
        c2 = np.exp(log_c2)
    b1 = np.where(np.isfinite(log_a), b1, 0.0)
    c2 = np.where(np.isfinite(log_a), c2, 0.0)
    tails = np.cumsum(b1[::-1])[::-1]
    n_max = int(np.argmax(tails <= relative_tail * max(b1.sum(), np.finfo(float).tiny))) if (
        tails <= relative_tail * b1.sum()).any() else 400
    k = n[: n_max + 1]
    pi, c = np.exp(log_mass[: n_max + 1]), c2[: n_max + 1]
    mean_n = c * t**k
    var_n = c**2 * (m2**k - t ** (2 * k))
    third_n = c**3 * (s3**k - 3 * t**k * m2**k + 2 * t ** (3 * k))
    variance = float((pi**2 * var_n).sum())
    third = float((pi**3 * third_n).sum())
    tail = float(kappa(t, kernel, p=p, n_law=n_law, weight=weight, coeffs=coeffs) - (pi * mean_n).sum())
    skew = third / variance**1.5 if variance > 0 else 0.0
    return StratifiedMoments(float((pi * mean_n).sum()), tail, math.sqrt(variance), skew, n_max,
                             log_mass[: n_max + 1])


# ------------------------------------------------------------------------------------ RMFA delta method


@dataclass(frozen=True)
class RatioDelta:
    """Delta-method prediction for RMFA: ``attn_kappa (n, d_v)``, ``bias`` ``b``, ``variance`` ``v`` (both ``(n,
    d_v)``, per ``1/D``), ``mu (n,)`` (``Σ_j κ(x_aj)``)."""

    attn_kappa: np.ndarray
    bias: np.ndarray
    variance: np.ndarray
    mu: np.ndarray


def rmfa_delta_method(q, k, v, kernel: str = "exp", *, p: float = 2.0, n_law: str = "geom",
                      weight: str = "importance", coeffs: str = "derived", keep=None,
                      scale_inputs: bool = True) -> RatioDelta:
    """``attn^κ``, ``b`` and ``v`` of RMFA at inputs ``q (n_q, d)``, ``k (n_k, d)``, ``v (n_k, d_v)`` (module doc).

    ``keep`` is ``M'`` (``(n_q, n_k)`` bool, default all). Cost ``O(n_q n_k² d)``. A query whose second-moment
    series diverges at a kept key (``G = ∞``) gets ``bias = variance = inf``; one whose ``κ`` series diverges
    also ``attn_kappa = inf``.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    if scale_inputs:
        q, k = q * q.shape[-1] ** -0.25, k * k.shape[-1] ** -0.25
    keep = np.ones((q.shape[0], k.shape[0]), dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    series = functools.partial(_moment_series, kernel, coeffs, p, n_law, weight)
    kap = np.where(keep, series(1, q @ k.T), 0.0)
    # a query whose κ or second-moment series diverges at a kept key (outside the kernel's radius) has no
    # delta-method value: inf, never the nan of inf - inf
    diverged = ~np.isfinite(kap).all(axis=1)
    mu = kap.sum(axis=1)
    attn = np.where(diverged[:, None], 0.0, kap) @ v / np.where(diverged, 1.0, mu)[:, None]
    attn[diverged] = np.inf
    bias, var = np.empty_like(attn), np.empty_like(attn)
    for a in range(q.shape[0]):
        kept = np.flatnonzero(keep[a])
        g = series(2, fourth_moment_matrix(q[a], k[kept])) if not diverged[a] else None
        if g is None or not np.isfinite(g).all():
            bias[a] = var[a] = np.inf
            continue
        centred = v[kept] - attn[a]
        bias[a] = -(g @ centred).sum(axis=0) / mu[a] ** 2
        var[a] = np.einsum("ic,ij,jc->c", centred, g, centred) / mu[a] ** 2
    return RatioDelta(attn, bias, var, mu)


def nmse_prediction(delta: RatioDelta, target: np.ndarray, num_features: int) -> float:
    """``Σ [v/D + (attn^κ - T + b/D)²] / Σ T²`` (register ``derived.rmfa_ratio_mse``)."""
    err = delta.attn_kappa - target + delta.bias / num_features
    return float((delta.variance / num_features + err**2).sum() / (target**2).sum())


# ----------------------------------------------------------------------------------- ppSBN algebra


def presbn_argument(q: np.ndarray, k: np.ndarray, *, mean_q, var_q, mean_k, var_k, norm_q, norm_k, eps: float,
                    norm_reading: str) -> np.ndarray:
    r"""The softmax argument of ``attn_exp(Q^SBN, K^SBN, V)`` written through the raw inputs of one ``(n, d)`` pair
    (register ``derived.presbn_exp_attention``), with ``Λ = diag((σ + ε)^{-1/2})`` (statistics broadcast against
    ``(n, d)``; ``norm_q``, ``norm_k`` the step-2 divisors):

    * matrix norms (``fro``, ``spec``): ``(q_a - μ_Q)ᵀ Λ_Q Λ_K k_i / (ν_Q ν_K √d)`` — the ``μ_K`` term is constant
      in ``i`` and cancels in the softmax;
    * ``row``: ``(q_a - μ_Q)ᵀ Λ_Q Λ_K (k_i - μ_K) / (ν_{Q,a} ν_{K,i} √d)``.
    """
    d = q.shape[-1]
    scaled_q = (q - mean_q) / np.sqrt(var_q + eps) / np.sqrt(var_k + eps)
    if norm_reading == "row":
        norms = np.asarray(norm_q).reshape(-1, 1) * np.asarray(norm_k).reshape(1, -1)
        return (scaled_q @ (k - mean_k).T) / (norms * math.sqrt(d))
    return (scaled_q @ k.T) / (float(np.asarray(norm_q).ravel()[0]) * float(np.asarray(norm_k).ravel()[0])
                               * math.sqrt(d))


def theorem3_r(norm_q: float, norm_k: float, var_q: float, var_k: float, eps: float) -> float:
    """Theorem 3's ``r = ‖Q‖₂ ‖K‖₂ sqrt((σ_Q + ε)(σ_K + ε))`` (scalar readings)."""
    return float(norm_q * norm_k * math.sqrt((var_q + eps) * (var_k + eps)))


def theorem3_t(mean_q: float, k: np.ndarray, v: np.ndarray, r: float, power_sign: str) -> np.ndarray:
    """Theorem 3's ``t = Softmax(μ_Q Kᵀ/√d)^{1/r} / V^{(r-1)/r}``, reading ``matmul``:
    ``P_μ^{∘1/r}·(V^{∘(r-1)/r})^{∘-1}`` with ``μ_Q`` unsqueezed to ``n×d`` (every row of ``P_μ`` equal)."""
    n, d = k.shape
    scores = np.full((n, d), mean_q) @ k.T / math.sqrt(d)
    p_mu = np.exp(scores - scores.max(axis=1, keepdims=True))
    p_mu /= p_mu.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return signed_power(p_mu, 1.0 / r, power_sign) @ (1.0 / signed_power(v, (r - 1.0) / r, power_sign))


def theorem3_rhs(attn: np.ndarray, t, r: float, power_sign: str) -> np.ndarray:
    """``(1/t) ⊙ attn^{∘1/r}`` (entrywise)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return signed_power(attn, 1.0 / r, power_sign) / t
