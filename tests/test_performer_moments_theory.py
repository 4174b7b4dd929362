"""rfkit.theory.softmax (Performer moments) against independent references.

References: scipy quadrature (1-D over the Gaussian argument ``ωᵀz``/``ωᵀΔ``, tensor Gauss–Hermite for sums
of two iid terms), mpmath at high precision (₁F₁, series), direct Lemma 2 algebra, and a seeded Monte Carlo
with the orthogonal sampler. Every test here is deterministic.
"""

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, special, stats

from rfkit.estimators import orthogonal_projection
from rfkit.theory import softmax as T

PAIRS = [(np.array([0.3, -0.2, 0.1]), np.array([0.5, 0.4, -0.3])),
         (np.array([1.0, 0.0, 0.2]), np.array([-0.7, 0.2, 0.0])),
         (np.array([0.05, 0.02, 0.0]), np.array([0.01, -0.04, 0.03]))]


def _term(kind, x, y):
    """The single term as a function of a standard normal g, and the sd of its Gaussian argument."""
    lam = math.exp(-(x @ x + y @ y) / 2)
    if kind == "trig":
        sd = math.sqrt((x - y) @ (x - y))
        return (lambda g: np.cos(sd * g) / lam), sd
    sd = math.sqrt((x + y) @ (x + y))
    return ((lambda g: lam * np.exp(sd * g)) if kind == "positive" else (lambda g: lam * np.cosh(sd * g))), sd


def _quad(f):
    val, _ = integrate.quad(lambda g: f(g) * stats.norm.pdf(g), -14, 14, limit=400, epsabs=0, epsrel=1e-13)
    return val


# ---------------------------------------------------------------------------------- Lemma 2, RelMSE


@pytest.mark.parametrize("kind", T.ESTIMATORS)
@pytest.mark.parametrize("pair", range(len(PAIRS)))
@pytest.mark.parametrize("m", [1, 3, 64])
def test_lemma2_matches_quadrature_and_raw_moments(kind, pair, m):
    x, y = PAIRS[pair]
    f, _ = _term(kind, x, y)
    sm = math.exp(x @ y)
    reference = _quad(lambda g: (f(g) - sm) ** 2) / m
    np.testing.assert_allclose(T.lemma2_mse(kind, x, y, m), reference, rtol=1e-8)
    np.testing.assert_allclose(T.mean_central_moment(kind, x, y, m, 2), reference, rtol=1e-8)
    np.testing.assert_allclose(T.relative_mse(kind, x, y, m) * sm**2, reference, rtol=1e-8)
    np.testing.assert_allclose(math.exp(T.lemma2_mse(kind, x, y, m, log=True)), reference, rtol=1e-8)


def test_relative_mse_printed_forms():
    x, y = PAIRS[0]
    s, t = (x + y) @ (x + y), (x - y) @ (x - y)
    np.testing.assert_allclose(T.relative_mse("trig", x, y, 5), 2 / 5 * math.sinh(t / 2) ** 2, rtol=1e-13)
    np.testing.assert_allclose(T.relative_mse("positive", x, y, 5), math.expm1(s) / 5, rtol=1e-13)
    np.testing.assert_allclose(T.relative_mse("hyperbolic", x, y, 5), 2 / 5 * math.sinh(s / 2) ** 2, rtol=1e-13)


def test_lemma2_hyperbolic_relation_and_zero_cases():
    x, y = PAIRS[1]
    s = (x + y) @ (x + y)
    np.testing.assert_allclose(T.lemma2_mse("hyperbolic", x, y, 4),
                               0.5 * -math.expm1(-s) * T.lemma2_mse("positive", x, y, 4), rtol=1e-13)
    assert T.lemma2_mse("positive", x, -x, 3) == 0.0  # z = 0: the positive estimator is exact
    assert T.lemma2_mse("trig", x, x, 3) == 0.0  # Δ = 0: the trig estimator is exact
    assert T.lemma2_mse("positive", x, -x, 3, log=True) == -math.inf


def test_lemma2_overflow_is_inf_and_log_is_finite():
    x = np.array([30.0, 0.0])
    assert T.lemma2_mse("positive", x, x, 2) == math.inf
    assert math.isfinite(T.lemma2_mse("positive", x, x, 2, log=True))
    assert T.lemma2_mse("trig", x, -x, 2) == math.inf


# -------------------------------------------------------------------------------- higher moments


def test_register_single_term_cos_moments():
    """E c^k for c = cos(ωᵀΔ) as printed in the register, against term_raw_moment (trig) rescaled."""
    x, y = PAIRS[0]
    t = (x - y) @ (x - y)
    scale = math.exp((x @ x + y @ y) / 2)
    printed = {2: (1 + math.exp(-2 * t)) / 2, 3: (3 * math.exp(-t / 2) + math.exp(-4.5 * t)) / 4,
               4: (3 + 4 * math.exp(-2 * t) + math.exp(-8 * t)) / 8}
    for k, value in printed.items():
        np.testing.assert_allclose(T.term_raw_moment("trig", x, y, k) / scale**k, value, rtol=1e-13)
    for j in (1, 2, 3):  # E cos(jωᵀΔ) = e^{-j²t/2}
        np.testing.assert_allclose(_quad(lambda g, j=j: np.cos(j * math.sqrt(t) * g)), math.exp(-j * j * t / 2),
                                   rtol=1e-10)


def _mean_of_two_central_moment(kind, x, y, k, nodes=120):
    """E[((T1 + T2)/2 - SM)^k] by a tensor Gauss–Hermite rule (two iid terms)."""
    f, _ = _term(kind, x, y)
    g, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    vals = f(g)
    mean = (vals[:, None] + vals[None, :]) / 2 - math.exp(x @ y)
    return float(np.einsum("i,j,ij->", w, w, mean**k))


@pytest.mark.parametrize("kind", T.ESTIMATORS)
@pytest.mark.parametrize("k", [3, 4, 5, 6])
def test_mean_central_moments_match_tensor_quadrature(kind, k):
    x, y = PAIRS[0]
    np.testing.assert_allclose(T.mean_central_moment(kind, x, y, 2, k), _mean_of_two_central_moment(kind, x, y, k),
                               rtol=1e-7)


def test_fourth_central_moment_of_mean_formula():
    """Register: the fourth central moment of an m-term mean is κ4/m³ + 3σ⁴/m²."""
    x, y = PAIRS[1]
    for kind in T.ESTIMATORS:
        var = T.term_central_moment(kind, x, y, 2)
        kappa4 = T.term_central_moment(kind, x, y, 4) - 3 * var**2
        for m in (1, 2, 7):
            np.testing.assert_allclose(T.mean_central_moment(kind, x, y, m, 4), kappa4 / m**3 + 3 * var**2 / m**2,
                                       rtol=1e-12)


def test_squared_error_moments_match_quadrature():
    x, y = PAIRS[0]
    for kind in T.ESTIMATORS:
        mu = {k: _mean_of_two_central_moment(kind, x, y, k) for k in (2, 4, 6)}
        sem = T.squared_error_moments(kind, x, y, 2)
        np.testing.assert_allclose(sem["mean"], mu[2], rtol=1e-8)
        np.testing.assert_allclose(sem["var"], mu[4] - mu[2] ** 2, rtol=1e-7)
        np.testing.assert_allclose(sem["skewness"] * sem["var"] ** 1.5, mu[6] - 3 * mu[4] * mu[2] + 2 * mu[2] ** 3,
                                   rtol=1e-6)


def test_central_moments_survive_cancellation():
    """Tiny spreads: float64 raw-moment formulas cancel to noise; the adaptive mpmath path keeps the leading term."""
    x = np.array([1e-5, 0.0])
    y = np.array([1e-5, 0.0])  # s = 4e-10: μ4 ≈ 3Λ⁴s², κ4 = O(s³)
    s = (x + y) @ (x + y)
    lam = math.exp(-(x @ x + y @ y) / 2)
    np.testing.assert_allclose(T.term_central_moment("positive", x, y, 4), 3 * lam**4 * s**2, rtol=1e-6)
    np.testing.assert_allclose(T.estimator_moments("positive", x, y, 1)["skewness"], 3 * math.sqrt(s), rtol=1e-6)
    assert T.term_central_moment("positive", x, -x, 4) == 0.0


@pytest.mark.parametrize("kind", T.ESTIMATORS)
@pytest.mark.parametrize("k", [1, 2, 4])
def test_power_moments_match_quadrature(kind, k):
    x, y = PAIRS[2]
    f, _ = _term(kind, x, y)
    mom = T.power_moments(kind, x, y, k)
    mean = _quad(lambda g: f(g) ** k)
    np.testing.assert_allclose(mom["mean"], mean, rtol=1e-9)
    np.testing.assert_allclose(mom["sd"] ** 2, _quad(lambda g: (f(g) ** k - mean) ** 2), rtol=1e-6)


# ----------------------------------------------------------------------------- orthogonal features


@pytest.mark.parametrize("d", [2, 3, 7, 16, 64])
@pytest.mark.parametrize("v", [-40.0, -2.5, -1e-3, 0.0, 1e-3, 0.7, 12.0, 300.0])
def test_orthogonal_pair_moment_matches_mpmath(d, v):
    with mp.workdps(40):
        reference = float(mp.hyp1f1(d, mp.mpf(d) / 2, v))
    np.testing.assert_allclose(T.orthogonal_pair_moment(d, v), reference, rtol=1e-12, atol=1e-300)


def test_orthogonal_pair_moment_log_series_beyond_overflow():
    value = T.orthogonal_pair_moment(16, 800.0)
    with mp.workdps(30):
        reference = mp.hyp1f1(16, 8, 800)
    assert value == math.inf if reference > mp.mpf("1.7e308") else np.isclose(value, float(reference), rtol=1e-10)


@pytest.mark.parametrize("d", [2, 5, 12])
@pytest.mark.parametrize("s", [0.3, 2.0])
def test_orthogonal_pair_moment_quadrature_over_the_sum_norm(d, s):
    """ω1 + ω2 = ρv with ρ² ~ χ²_{2d}, v uniform: E e^{ρ vᵀz} = E_ρ ₀F₁(; d/2; ρ² s/4) (1-D quadrature)."""
    law = stats.chi(2 * d)
    top = math.sqrt(2 * d) + 40  # the chi(2d) density is below e^{-700} beyond
    val, _ = integrate.quad(lambda r: special.hyp0f1(d / 2, r * r * s / 4) * law.pdf(r), 0, top, limit=200,
                            epsrel=1e-11)
    np.testing.assert_allclose(T.orthogonal_pair_moment(d, s / 2), val, rtol=1e-8)


def _rayleigh_mgf(c: float) -> float:
    """E e^{rc} for r Rayleigh (chi with 2 degrees of freedom)."""
    return 1 + c * math.exp(c * c / 2) * math.sqrt(math.pi / 2) * (1 + math.erf(c / math.sqrt(2)))


def test_orthogonal_pair_moment_by_direct_quadrature_d2():
    """d = 2: ω1 = r1(cos a, sin a), ω2 = ±r2(-sin a, cos a) with a uniform, r_i Rayleigh and a random sign:
    E e^{ω1ᵀz + ω2ᵀz} = E_a[M(‖z‖cos a)(M(‖z‖sin a) + M(-‖z‖sin a))/2], a 1-D integral of Rayleigh MGFs."""
    z = math.sqrt(0.8)

    def integrand(a):
        return _rayleigh_mgf(z * math.cos(a)) * (_rayleigh_mgf(z * math.sin(a)) + _rayleigh_mgf(-z * math.sin(a))) / 2

    val, _ = integrate.quad(integrand, 0, 2 * math.pi, epsrel=1e-12)
    np.testing.assert_allclose(T.orthogonal_pair_moment(2, 0.4), val / (2 * math.pi), rtol=1e-10)


@pytest.mark.parametrize("d", [2, 3, 8, 100])
@pytest.mark.parametrize("s", [1e-6, 1e-2, 0.5, 5.0, 60.0])
def test_positive_gap_series_against_mpmath(d, s):
    """e^s - ₁F₁(d; d/2; s/2) from the non-negative series (no cancellation) vs mpmath at 60 digits."""
    x = np.array([math.sqrt(s) / 2] + [0.0] * (d - 1))
    lam2 = math.exp(-(x @ x) * 2)
    with mp.workdps(60):
        reference = float(mp.exp(s) - mp.hyp1f1(d, mp.mpf(d) / 2, mp.mpf(s) / 2))
    np.testing.assert_allclose(-T.orthogonal_pair_covariance("positive", x, x) / lam2, reference, rtol=1e-11)


@pytest.mark.parametrize("t", [1e-5, 0.3, 1.9, 2.1, 9.0, 40.0])
@pytest.mark.parametrize("d", [2, 3, 16])
def test_trig_pair_covariance_against_mpmath(t, d):
    x = np.array([math.sqrt(t) / 2] + [0.0] * (d - 1))
    with mp.workdps(60):
        gap = float(mp.hyp1f1(d, mp.mpf(d) / 2, -mp.mpf(t) / 2) - mp.exp(-t))
    np.testing.assert_allclose(T.orthogonal_pair_covariance("trig", x, -x) * math.exp(-2 * (x @ x)), gap,
                               rtol=1e-9, atol=1e-300)


def test_taylor_coefficient_of_the_gap():
    for d in (2, 5, 40):
        s = 1e-4
        x = np.array([math.sqrt(s) / 2] + [0.0] * (d - 1))
        gap = -T.orthogonal_pair_covariance("positive", x, x) / math.exp(-2 * (x @ x))
        np.testing.assert_allclose(gap, s * s / (2 * (d + 2)), rtol=2 * s * d)


def test_orthogonal_mse_blocks_and_limits():
    x, y = PAIRS[0]
    assert T.block_sizes(7, 3) == [3, 3, 1]
    assert T.block_sizes(6, 3) == [3, 3]
    assert T.orthogonal_mse("positive", x, y, 1) == T.term_variance("positive", x, y)
    cov = T.orthogonal_pair_covariance("positive", x, y)
    iid = T.term_variance("positive", x, y)
    np.testing.assert_allclose(T.orthogonal_mse("positive", x, y, 3), iid / 3 + 2 / 3 * cov, rtol=1e-13)
    np.testing.assert_allclose(T.orthogonal_mse("positive", x, y, 6), iid / 6 + (3 - 1) / 6 * cov, rtol=1e-13)
    np.testing.assert_allclose(T.orthogonal_pair_covariance("hyperbolic", x, y), cov, rtol=1e-13)


def test_orthogonal_mse_against_seeded_monte_carlo():
    """R-ORF positive estimator at s = 0.5, d = m = 4: 200k draws; the 6-sd tolerance fails with prob. < 1e-8
    under normality (the squared error has finite moments of every order here)."""
    rng = np.random.default_rng(2_761_098_335_774_112_903)
    d, m, n = 4, 4, 200_000
    x = np.array([0.3535, 0.0, 0.0, 0.0])
    w = orthogonal_projection(m, d, rng=rng, size=n)
    est = np.exp(w @ (x + x) - (x @ x)).mean(axis=1)
    sq = (est - math.exp(x @ x)) ** 2
    pred = T.orthogonal_mse("positive", x, x, m)
    assert abs(sq.mean() - pred) < 6 * sq.std() / math.sqrt(n)
    assert pred < T.term_variance("positive", x, x) / m


def test_theorem2_margin_is_positive_at_high_precision():
    """e^s - ₁F₁(d; d/2; s/2) >= (2/(d+2))(e^{s/2} - 1)² (Theorem 2 in closed form), checked with mpmath."""
    with mp.workdps(50):
        for d in (2, 3, 8, 64):
            for s in (1e-4, 0.1, 1.0, 10.0, 100.0):
                s_ = mp.mpf(s)
                gap = mp.exp(s_) - mp.hyp1f1(d, mp.mpf(d) / 2, s_ / 2)
                assert gap - 2 / mp.mpf(d + 2) * (mp.exp(s_ / 2) - 1) ** 2 > 0
    x, y = np.array([0.4, 0.1, 0.0]), np.array([0.2, 0.3, 0.1])
    assert T.theorem2_bound(x, y, 3) >= T.orthogonal_mse("positive", x, y, 3)


# ------------------------------------------------------------------------------------------ Fig 2


def test_mse_ratio_matches_lemma2_and_has_limits():
    rng = np.random.default_rng(3_140_592_653_589_793_238)
    for _ in range(20):
        phi, length = rng.uniform(0.05, 3.1), rng.uniform(0.1, 2.0)
        x = length * np.array([1.0, 0.0])
        y = length * np.array([math.cos(phi), math.sin(phi)])
        np.testing.assert_allclose(T.mse_ratio(phi, length),
                                   T.lemma2_mse("trig", x, y, 7) / T.lemma2_mse("positive", x, y, 7), rtol=1e-10)
        np.testing.assert_allclose(T.mse_ratio(-phi, -length, "same_features"), 2 * T.mse_ratio(phi, length),
                                   rtol=1e-14)
    grid = T.mse_ratio(np.linspace(-np.pi, np.pi, 41)[None, :], np.linspace(-2, 2, 21)[:, None])
    assert not np.isnan(grid).any()
    assert T.mse_ratio(np.pi, 1.0) == math.inf and T.mse_ratio(-np.pi, 0.3) == math.inf
    assert T.mse_ratio(1.0, 0.0) == 0.0 and T.mse_ratio(np.pi, 0.0) == math.inf
    small = T.mse_ratio(2.0, 1e-4)
    np.testing.assert_allclose(small, 1e-8 * (1 - math.cos(2.0)) ** 2 / (1 + math.cos(2.0)), rtol=1e-3)


def test_critical_angle_is_the_crossing():
    for length in (0.05, 0.5, 1.0, 2.0):
        for budget in T.BUDGETS:
            phi = T.critical_angle(length, budget)
            np.testing.assert_allclose(T.mse_ratio(phi, length, budget), 1.0, rtol=1e-9)
    assert T.critical_angle(0.0) == math.pi


# ------------------------------------------------------------------------------- attention output


def test_kernel_covariance_by_gauss_hermite():
    """Cov(Â_j, Â_k) for one ω (then divided by m) by a 3-D Gauss–Hermite rule over ω ~ N(0, I_3)."""
    x = np.array([0.2, -0.1, 0.3])
    keys = np.array([[0.1, 0.4, -0.2], [-0.3, 0.1, 0.2]])
    g, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / w.sum()
    omega = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    weights = np.einsum("i,j,k->ijk", w, w, w).ravel()
    norms = x @ x + np.sum(keys**2, axis=1)
    sm = np.exp(keys @ x)
    terms = {"positive": np.exp(-norms / 2) * np.exp(omega @ (x + keys).T),
             "hyperbolic": np.exp(-norms / 2) * np.cosh(omega @ (x + keys).T),
             "trig": np.exp(norms / 2) * np.cos(omega @ (x - keys).T)}
    for kind, t in terms.items():
        cov = np.einsum("n,nj,nk->jk", weights, t, t) - np.outer(sm, sm)
        np.testing.assert_allclose(T.kernel_covariance(kind, x, keys, 3), cov / 3, rtol=1e-9)
        np.testing.assert_allclose(np.diag(T.kernel_covariance(kind, x, keys, 3)),
                                   [T.term_variance(kind, x, k) / 3 for k in keys], rtol=1e-10)


def test_output_delta_method_degenerate_cases():
    rng = np.random.default_rng(1_234_567_890_123_456_789)
    xs, ys = rng.normal(size=(2, 3, 2)) * 0.3
    v = rng.normal(size=(3, 2))
    bias, mse = T.output_delta_method("positive", xs, ys, v, 16)
    assert bias.shape == mse.shape == (3, 2) and (mse >= 0).all()
    b1, m1 = T.output_delta_method("positive", xs, ys[:1], v[:1], 16)  # one key: the output is v exactly
    np.testing.assert_allclose(b1, 0.0, atol=1e-15)
    np.testing.assert_allclose(m1, 0.0, atol=1e-15)
    b2, _ = T.output_delta_method("positive", xs, ys, np.ones((3, 2)), 16)  # constant values: no error
    np.testing.assert_allclose(b2, 0.0, atol=1e-14)
    bias32, _ = T.output_delta_method("positive", xs, ys, v, 32)
    np.testing.assert_allclose(bias32 * 32, bias * 16, rtol=1e-12)  # m·bias is constant at leading order


# --------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call", [
    lambda: T.lemma2_mse("gauss", [1.0], [1.0], 1),
    lambda: T.lemma2_mse("trig", [1.0], [1.0], 0),
    lambda: T.lemma2_mse("trig", [1.0, 2.0], [1.0], 2),
    lambda: T.lemma2_mse("trig", [np.nan], [1.0], 2),
    lambda: T.relative_mse("positive", [1.0], [1.0], 1.5),
    lambda: T.mean_central_moment("trig", [1.0], [1.0], 2, -1),
    lambda: T.orthogonal_pair_covariance("positive", [1.0], [1.0]),
    lambda: T.orthogonal_pair_moment(0, 1.0),
    lambda: T.block_sizes(0, 3),
    lambda: T.mse_ratio(1.0, 1.0, "same_r"),
    lambda: T.mse_ratio(np.inf, 1.0),
    lambda: T.power_moments("trig", [1.0], [1.0], 0),
])
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()
