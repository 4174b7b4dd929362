"""rfkit.theory.smreg and rfkit.theory.sphere against independent references.

References: mpmath at 40 digits (hypergeometric series, Bessel functions, quadrature of the definitions),
exact rational arithmetic (fractions), scipy quadrature, and seeded Monte Carlo whose false-failure rate
is stated at each test.
"""

import math
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, stats

from rfkit.estimators import orthogonal_projection, positive_features, spherical_projection
from rfkit.theory import smreg as S
from rfkit.theory import sphere

mp.mp.dps = 40


def _mp_log_hyp0f1(b, x):
    b, x = mp.mpf(b), mp.mpf(x)
    if x == 0:
        return mp.mpf(0)
    return mp.loggamma(b) + (1 - b) / 2 * mp.log(x) + mp.log(mp.besseli(b - 1, 2 * mp.sqrt(x)))


def _mp_ratio_by_quadrature(d, s):
    """SMREG/SM = e^{-s/2} E exp(√(d s) u), u ~ c_d (1-u²)^{(d-3)/2}: mpmath quadrature of the definition."""
    a = mp.sqrt(mp.mpf(d) * s)
    c = mp.gamma(mp.mpf(d) / 2) / (mp.sqrt(mp.pi) * mp.gamma(mp.mpf(d - 1) / 2))
    integral = mp.quad(lambda u: mp.exp(a * u) * (1 - u * u) ** (mp.mpf(d - 3) / 2), [-1, 0, 1])
    return mp.exp(-mp.mpf(s) / 2) * c * integral


# ----------------------------------------------------------------------------------- ₀F₁, SMREG


@pytest.mark.parametrize("d", [1, 2, 3, 8, 64, 1024, 10**6])
@pytest.mark.parametrize("s", [0.0, 1e-9, 1e-3, 0.5, 3.0, 50.0, 1e4])
def test_log_hyp0f1_matches_mpmath(d, s):
    b, x = d / 2, d * s / 4
    ref = float(_mp_log_hyp0f1(b, x))
    assert S.log_hyp0f1(b, x) == pytest.approx(ref, rel=1e-13, abs=1e-13 * (1 + b * math.log1p(b)))


def test_log_hyp0f1_is_vectorised_and_validates():
    x = np.array([[0.0, 1.0], [4.0, 9.0]])
    out = S.log_hyp0f1(1.5, x)
    assert out.shape == (2, 2)
    assert out[0, 1] == pytest.approx(S.log_hyp0f1(1.5, 1.0))
    with pytest.raises(ValueError, match="x must be finite"):
        S.log_hyp0f1(1.0, -1.0)
    with pytest.raises(ValueError, match="b must be > 0"):
        S.log_hyp0f1(0.0, 1.0)


@pytest.mark.parametrize("d", [2, 3, 8])
@pytest.mark.parametrize("s", [0.1, 2.0, 20.0])
def test_smreg_ratio_matches_quadrature_of_the_definition(d, s):
    assert S.smreg_ratio(d, s) == pytest.approx(float(_mp_ratio_by_quadrature(d, s)), rel=1e-12)


def test_smreg_ratio_in_dimension_one_is_cosh():
    s = np.array([0.0, 0.3, 4.0, 100.0])
    assert np.allclose(S.smreg_ratio(1, s), np.exp(-s / 2) * np.cosh(np.sqrt(s)), rtol=1e-13)


def test_smreg_of_vectors_and_bad_inputs():
    x, y = np.array([0.3, -0.2, 0.1]), np.array([0.5, 0.4, -0.3])
    s = float((x + y) @ (x + y))
    expected = math.exp(-(x @ x + y @ y) / 2) * float(mp.hyp0f1(1.5, 3 * s / 4))
    assert S.smreg(x, y) == pytest.approx(expected, rel=1e-13)
    assert S.smreg(np.zeros(4), np.zeros(4)) == 1.0
    big = np.full(10**6, math.sqrt(800.0) / 1000)  # SM = e^800, SMREG ~ e^797: overflow is reported as inf
    assert S.smreg(big, big) == math.inf and S.log_smreg(big, big) == pytest.approx(797.4, abs=0.5)
    with pytest.raises(ValueError, match="same length"):
        S.smreg(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="d must be an integer"):
        S.log_smreg_ratio(2.5, 1.0)
    with pytest.raises(ValueError, match="s must be finite"):
        S.log_smreg_ratio(2, np.nan)


def test_smreg_matches_the_positive_feature_estimator_by_monte_carlo():
    # 400k iid terms, |z-score| < 5: false-failure rate about 6e-7.
    rng = np.random.default_rng(2_962_101_778_046_101_007)
    x, y = np.array([0.4, -0.1, 0.3, 0.2]), np.array([0.1, 0.5, -0.2, 0.3])
    omega = spherical_projection(400_000, 4, rng=rng)
    terms = positive_features(x, omega).values[0] * positive_features(y, omega).values[0]
    terms *= np.exp(positive_features(x, omega).log_scale[0] + positive_features(y, omega).log_scale[0])
    terms *= omega.shape[0]
    s = float((x + y) @ (x + y))
    sd = math.exp(-(x @ x + y @ y) / 2) * math.sqrt(S.term_variance(4, s))
    assert abs(terms.mean() - S.smreg(x, y)) < 5 * sd / math.sqrt(terms.size)


# --------------------------------------------------------------------------- Eqs 21, 29, 30


def test_log_f_matches_exact_products():
    for d in (1, 2, 5, 64):
        for k in range(8):
            exact = Fraction(d**k, math.prod(d + 2 * j for j in range(k)))
            assert math.exp(S.log_f(k, d)) == pytest.approx(float(exact), rel=1e-14)
    assert S.log_f(0, 7) == 0.0 and S.log_f(1, 7) == pytest.approx(0.0, abs=1e-16)
    big = np.array([100_000.0, 100_001.0])  # the two evaluation paths (terms, Gamma functions) agree
    by_terms = S.log_f(100_000, 10**6)
    by_gamma = S.log_f(big, 10**6)[0]
    assert by_terms == pytest.approx(float(by_gamma), rel=1e-9)
    with pytest.raises(ValueError, match="non-negative integers"):
        S.log_f(1.5, 3)


@pytest.mark.parametrize("d", [1, 2, 7, 128])
@pytest.mark.parametrize("w", [0.0, 1e-6, 0.7, 12.0, 50.0])
def test_series_forms_match_mpmath(d, w):
    ref = float(mp.log(mp.hyp0f1(mp.mpf(d) / 2, mp.mpf(d) * w / 2)) - w) if w else 0.0
    assert S.log_smreg_ratio_eq30(d, w) == pytest.approx(ref, abs=1e-12)
    assert S.log_smreg_ratio_eq21(d, 2 * w) == pytest.approx(ref, abs=1e-12)


def test_ratio_is_strictly_decreasing_in_w():
    # d/dw log ratio = -1 + 0F1(; b+1; dw/2)/0F1(; b; dw/2) < 0 (coefficient-wise comparison), checked in mpmath
    for d in (1, 2, 5, 64):
        for w in (1e-3, 0.5, 3.0, 40.0):
            b, x = mp.mpf(d) / 2, mp.mpf(d) * w / 2
            assert mp.hyp0f1(b + 1, x) / mp.hyp0f1(b, x) - 1 < 0
    w = np.concatenate([[0.0], np.geomspace(1e-6, 500.0, 2000)])
    for d in (1, 2, 16, 1024):  # in float64: non-increasing up to round-off (the decrease is ~w²/d)
        assert np.all(np.diff(S.log_smreg_ratio(d, 2 * w)) < 1e-14)


def test_ratio_deficit_bound_holds_and_is_tight_for_small_w():
    for d in (1, 3, 27, 10**4):
        w = np.geomspace(1e-4, 100.0, 60)
        deficit = -np.expm1(S.log_smreg_ratio(d, 2 * w))
        assert np.all(deficit <= S.ratio_deficit_bound(d, w) * (1 + 1e-12))
        # 1 - E f(Po(w), d) = w²/(d+2) + O(w³): the bound w²/d is off by the factor (d+2)/d only
        assert deficit[0] == pytest.approx(1e-8 / (d + 2), rel=1e-3)


def test_ratio_tends_to_zero_as_w_grows():
    # W_C(d) = 0 for unbounded admissible w (Theorem 1 claims). Independent bound, no Bessel functions:
    # E f(Po(w), d) <= P[Po(w) <= k] + f(k, d) for every k (f is non-increasing), here with k = w/2.
    for d in (2, 27, 1000, 10**6):
        w = 1e7
        k = mp.mpf(w / 2)
        log_f_k = k * mp.log(mp.mpf(d) / 2) - mp.loggamma(mp.mpf(d) / 2 + k) + mp.loggamma(mp.mpf(d) / 2)
        bound = stats.poisson.cdf(w / 2, w) + float(mp.exp(log_f_k))
        assert bound < 1e-300
        assert S.smreg_ratio(d, 2 * w) <= bound


# --------------------------------------------------------------------------------- proof chain


def test_poisson_tail_matches_mpmath_sum():
    for w, l in [(0.5, 2), (3.0, 3), (9.9, 10), (40.0, 50)]:
        ref = 1 - mp.fsum(mp.exp(-w) * mp.mpf(w) ** k / mp.factorial(k) for k in range(l + 1))
        assert S.poisson_tail(w, l) == pytest.approx(float(ref), rel=1e-12)


def test_proof_l_rounds_cube_roots_exactly():
    assert [S.proof_l(d) for d in (1, 8, 27, 64, 125, 1000, 10**6)] == [1, 2, 3, 4, 5, 10, 100]
    assert (S.proof_l(999_999, "floor"), S.proof_l(999_999, "ceil")) == (99, 100)
    assert (S.proof_l(10, "floor"), S.proof_l(10, "ceil")) == (2, 3)
    assert S.proof_l(10**15) == 10**5
    with pytest.raises(ValueError, match="rounding"):
        S.proof_l(10, "round")


def test_proof_chain_formulas_against_hand_values():
    d, l, w, C = 27, 3, 1.5, math.e
    assert S.eq33_f_lower_bound(d, l) == pytest.approx((1 - 4 / 27) ** 3)
    assert S.eq34_chernoff_bound(w, l) == pytest.approx(math.exp(-1.5 - 3 * (math.log(2) - 1)))
    assert S.eq35_bound(d, C) == pytest.approx((1 - 2 / 3) * (1 - math.e**-2 * (3 / (2 * math.e)) ** -3))
    f_l = 27**3 / (27 * 29 * 31)
    assert S.eq32_lower_bound(d, w, l) == pytest.approx(f_l * stats.poisson.cdf(l, w))
    assert S.w_bound(math.e**2) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="0 < w < l"):
        S.eq34_chernoff_bound(3.0, 3)
    with pytest.raises(ValueError, match="C > 1"):
        S.eq35_bound(27, 1.0)


# ------------------------------------------------------------------------------- moments, MSEs


@pytest.mark.parametrize("d,s", [(2, 1e-4), (4, 0.7), (16, 3.0), (128, 1e-3), (3, 40.0), (8, 300.0)])
def test_variance_and_orthogonal_excess_match_mpmath(d, s):
    b, a = mp.mpf(d) / 2, mp.mpf(d) * s / 4
    var = mp.hyp0f1(b, 4 * a) - mp.hyp0f1(b, a) ** 2
    excess = mp.hyp0f1(b, a) ** 2 - mp.hyp0f1(b, 2 * a)
    assert S.log_term_variance(d, s) == pytest.approx(float(mp.log(var)), abs=1e-11)
    assert S.log_orthogonal_pair_excess(d, s) == pytest.approx(float(mp.log(excess)), abs=1e-9)
    assert S.log_orthogonal_pair_excess(d, 0.0) == -math.inf


def test_joint_moments_of_an_orthogonal_frame():
    # E Y_1 Y_2 for a Haar pair: the vector ω̂_1 + ω̂_2 has norm √2 and a uniform direction
    d, s = 5, 1.3
    assert S.log_joint_moment(d, s, [1, 1], orthogonal=True) == pytest.approx(S.log_hyp0f1(d / 2, d * s / 2))
    assert S.log_joint_moment(d, s, [1, 1], orthogonal=False) == pytest.approx(2 * S.log_term_moment(d, s))
    assert S.log_joint_moment(d, s, [2, 1, 0], orthogonal=True) == pytest.approx(S.log_hyp0f1(d / 2, 5 * d * s / 4))
    with pytest.raises(ValueError, match="at most 2 members"):
        S.log_joint_moment(2, s, [1, 1, 1], orthogonal=True)


@pytest.mark.parametrize("d,m,s,orthogonal", [(4, 2, 1.0, False), (4, 4, 1.0, True), (2, 2, 2.0, True)])
def test_estimator_error_moments_match_monte_carlo(d, m, s, orthogonal):
    # 300k replicates; the sample MSE is within 5 exact standard errors (false-failure rate about 6e-7 per
    # case) and the sample sd of the squared error within 5% (its relative se is below 1% here).
    rng = np.random.default_rng(7_340_118_226_590_125_121 + m)
    n = 300_000
    if orthogonal:
        w = orthogonal_projection(m, d, rng=rng, norms="sqrt_d", size=n)
    else:
        w = spherical_projection(m, d, rng=rng, size=n)
    t = np.exp(w[..., 0] * math.sqrt(s)).mean(axis=1)
    squared = (t - math.exp(S.log_term_moment(d, s))) ** 2
    mom = S.estimator_error_moments(d, s, m, orthogonal=orthogonal)
    assert abs(squared.mean() - mom["mse"]) < 5 * mom["sd_squared_error"] / math.sqrt(n)
    assert squared.std() == pytest.approx(mom["sd_squared_error"], rel=0.05)
    assert mom["mse"] == pytest.approx(S.smreg_mse(d, s, m, orthogonal=orthogonal))


def test_smreg_mse_scales_with_lambda_and_validates():
    assert S.smreg_mse(3, 1.0, 2, log_lam=-0.5) == pytest.approx(math.exp(-1.0) * S.smreg_mse(3, 1.0, 2))
    assert S.smreg_mse(3, 0.0, 3, orthogonal=True) == 0.0
    with pytest.raises(ValueError, match="<= d for orthogonal"):
        S.smreg_mse(3, 1.0, 4, orthogonal=True)
    assert S.theorem2_gap_coefficient(8, 4) == pytest.approx(2 * 3 / (4 * 10))


# ------------------------------------------------------------------------------------- sphere


def _exact_coordinate_moment(p: int, d: int) -> Fraction:
    """E u_1^p = (1/2)_{p/2}/(d/2)_{p/2} for even p, by rational arithmetic."""
    k = p // 2
    return math.prod((Fraction(1, 2) + j) / (Fraction(d, 2) + j) for j in range(k))


def test_coordinate_moments_are_exact_and_lemma3_reading_a_holds():
    for d in (1, 2, 3, 8, 64):
        for k in range(6):
            assert sphere.coordinate_moment(2 * k, d) == pytest.approx(float(_exact_coordinate_moment(2 * k, d)),
                                                                       rel=1e-13)
            assert sphere.lemma3_moment(k, d) == pytest.approx(float(_exact_coordinate_moment(2 * k, d)), rel=1e-13)
        assert sphere.coordinate_moment(3, d) == 0.0


def test_lemma3_reading_b_fails_exactly():
    # A(2k, d) read literally is E u_1^{4k}: for k = 1, d = 2 it is 3/8, while the formula gives 1/2
    assert _exact_coordinate_moment(4, 2) == Fraction(3, 8)
    assert sphere.lemma3_moment(1, 2) == pytest.approx(0.5)


def test_coordinate_moments_by_monte_carlo():
    # 10^6 unit vectors in R^5; |z| < 5 with the exact sd of u_1^4: false-failure rate about 6e-7.
    rng = np.random.default_rng(1_190_665_024_318_871_225)
    g = rng.standard_normal((1_000_000, 5))
    u4 = (g[:, 0] / np.linalg.norm(g, axis=1)) ** 4
    sd = math.sqrt(sphere.coordinate_moment(8, 5) - sphere.coordinate_moment(4, 5) ** 2)
    assert abs(u4.mean() - sphere.lemma3_moment(2, 5)) < 5 * sd / 1000


def test_angle_density_matches_the_law_of_monte_carlo_angles():
    # KS test at level 1e-6 of 3000 angles in R^7 against the CDF of the Eq 24 density (false-failure 1e-6).
    rng = np.random.default_rng(5_420_774_991_301_112_367)
    g = rng.standard_normal((3_000, 7))
    theta = np.arccos(g[:, 0] / np.linalg.norm(g, axis=1))

    def cdf(t):
        return np.array([integrate.quad(lambda a: float(sphere.angle_density(a, 7)), 0, v)[0] for v in np.ravel(t)])

    assert stats.kstest(theta, cdf).pvalue > 1e-6
    assert integrate.quad(lambda a: float(sphere.angle_density(a, 2)), 0, math.pi)[0] == pytest.approx(1.0)


def test_integrals_and_recursion_factors():
    for d in (0, 1, 2, 9):
        ref = integrate.quad(lambda t, d=d: math.sin(t) ** d, 0, math.pi)[0]
        assert sphere.sine_power_integral(d) == pytest.approx(ref)
    for k, d in [(0, 3), (2, 2), (4, 7), (3, 4)]:
        ref = integrate.quad(lambda t, k=k, d=d: math.cos(t) ** k * math.sin(t) ** d, 0, math.pi, epsabs=1e-14)[0]
        assert sphere.cos_sin_integral(k, d) == pytest.approx(ref, abs=1e-13)
    # Eq 25-27 factors reproduce the exact closed forms
    for k, d in [(2, 2), (4, 5), (7, 3)]:
        assert sphere.cos_sin_integral(k, d) == pytest.approx(
            sphere.eq25_factor(k, d) * sphere.cos_sin_integral(k - 2, d + 2), abs=1e-15)
    for k, d in [(0, 2), (3, 4), (6, 11)]:
        assert sphere.cos_sin_integral(2 * k, d) == pytest.approx(
            sphere.eq26_factor(k, d) * sphere.sine_power_integral(d + 2 * k), rel=1e-13)
    for d in (2, 3, 30):
        assert sphere.sine_power_integral(d) == pytest.approx(sphere.eq27_factor(d) * sphere.sine_power_integral(d - 2))


def test_sphere_bad_inputs():
    with pytest.raises(ValueError, match="d must be an integer >= 2"):
        sphere.angle_density(0.3, 1)
    with pytest.raises(ValueError, match="k must be a non-negative integer"):
        sphere.lemma3_moment(-1, 3)
    with pytest.raises(ValueError, match="p must be non-negative integers"):
        sphere.log_coordinate_moment(1.5, 3)
    with pytest.raises(ValueError, match="k >= 2"):
        sphere.eq25_factor(1, 3)
    assert np.all(sphere.coordinate_density(np.array([-1.0, 1.5]), 4) == 0.0)
