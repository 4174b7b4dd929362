"""Macformer theory (rfkit.theory.maclaurin, rfkit.theory.cost additions) against independent references: sympy and
mpmath, exact enumeration of Rademacher signs and of RMF degrees, closed forms, and seeded Monte Carlo (false-
failure rates stated where used)."""

import itertools
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS, kernel_values
from rfkit.estimators.rmf import draw_rmf, rmf_features, rmfa
from rfkit.theory import cost
from rfkit.theory import maclaurin as T

KERNELS = tuple(MACLAURIN_KERNELS)
#: Exact Maclaurin coefficients from textbook series (independent of sympy and of the registry's closed forms).
TEXTBOOK = {
    "exp": lambda n: Fraction(1, math.factorial(n)),
    "trigh": lambda n: Fraction(1, math.factorial(n)),
    "inv": lambda n: Fraction(1),
    "log": lambda n: Fraction(1) if n == 0 else Fraction(1, n),
    "sqrt": lambda n: Fraction(1) if n == 0 else -Fraction(math.prod(Fraction(1, 2) - j for j in range(n)),
                                                            math.factorial(n)) * (-1) ** n,
}


@pytest.mark.parametrize("kernel", KERNELS)
def test_derived_coefficients_match_textbook_series(kernel):
    derived = T.derived_coefficients(kernel, 30)
    assert list(derived) == [TEXTBOOK[kernel](n) for n in range(31)]


@pytest.mark.parametrize("kernel", KERNELS)
def test_registry_log_coefficients_match_exact_expansion(kernel):
    n = np.arange(31)
    exact = np.array([math.log(c) for c in T.derived_coefficients(kernel, 30)])
    np.testing.assert_allclose(MACLAURIN_KERNELS[kernel].log_coefficient(n), exact, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kernel,radius", [("exp", 1.0), ("trigh", 1.0), ("inv", 0.9), ("log", 0.5), ("sqrt", 0.9)])
def test_cauchy_route_matches_exact_coefficients(kernel, radius):
    numeric = T.cauchy_coefficients(kernel, 20, radius, dps=60)
    exact = T.derived_coefficients(kernel, 20)
    with mpmath.workdps(60):
        for a, c in zip(numeric, exact, strict=True):
            assert abs(a - mpmath.mpf(c.numerator) / c.denominator) <= mpmath.mpf(10) ** -35 * abs(a)


def test_printed_coefficients_as_printed():
    assert T.printed_coefficients("log", 3) == (None, 1, 1, 1)  # 1/min(1, 0) has no value
    assert T.printed_coefficients("sqrt", 4)[4] == Fraction(5, 384)  # true a_4 = 5/128
    assert T.derived_coefficients("sqrt", 4)[4] == Fraction(5, 128)


@pytest.mark.parametrize("kernel", KERNELS)
def test_general_term_sign_is_positive(kernel):
    sign = T.general_term_sign(kernel)
    assert all(sign(n) == 1.0 for n in (1, 2, 7, 50, 10**5))


def test_truncation_bias_against_mpmath():
    with mpmath.workdps(30):
        tail = mpmath.nsum(lambda n: 1 / mpmath.factorial(n) * mpmath.mpf("0.7") ** n, [6, mpmath.inf])
    assert T.truncation_bias("exp", 0.7, 5) == pytest.approx(float(tail), rel=1e-10)


def _signs(d):
    return np.array(list(itertools.product((-1.0, 1.0), repeat=d)))


def test_rademacher_moments_by_enumeration():
    rng = np.random.default_rng(6011239471113301432)
    a, b, c, e = rng.standard_normal((4, 5))
    s = _signs(5)
    pa, pb, pc, pe = (s @ z for z in (a, b, c, e))
    assert np.mean(pa * pb) == pytest.approx(T.rademacher_moment2(a, b), abs=1e-13)
    assert np.mean(pa * pb * pc * pe) == pytest.approx(T.rademacher_moment4(a, b, c, e), abs=1e-12)
    joint = T.rademacher_joint_moments(a, b, 5)
    for i, j in itertools.product(range(6), repeat=2):
        assert joint[i, j] == pytest.approx(np.mean(pa**i * pb**j), rel=1e-11, abs=1e-11)


def test_fourth_moment_matrix_by_enumeration():
    rng = np.random.default_rng(140983321)
    q, keys = rng.standard_normal(4), rng.standard_normal((3, 4))
    s = _signs(4)
    want = np.einsum("w,wi,wj->ij", (s @ q) ** 2, s @ keys.T, s @ keys.T) / len(s)
    np.testing.assert_allclose(T.fourth_moment_matrix(q, keys), want, atol=1e-12)


def _enumerated_feature_moment(x, y, kernel, k, p, n_max=10):
    """E[Z^k] of one feature by enumerating the degree N <= n_max (geom-importance) and all sign patterns."""
    d = x.size
    total = 0.0
    for n in range(n_max + 1):
        pi = (1 - 1 / p) * p**-n
        c2 = float(T.derived_coefficients(kernel, n_max)[n]) / pi
        patterns = _signs(d)
        per = ((patterns @ x) * (patterns @ y)) ** k
        total += pi * c2**k * np.mean(per) ** n if n else pi * c2**k
    return total


@pytest.mark.parametrize("kernel", ["exp", "inv", "sqrt"])
def test_feature_moments_by_enumeration(kernel):
    x, y = np.array([0.2, -0.1, 0.15]), np.array([0.1, 0.25, -0.05])
    for k in (1, 2, 3):
        want = _enumerated_feature_moment(x, y, kernel, k, 2.0, n_max=25)
        assert T.feature_moment(x, y, kernel, k, p=2.0) == pytest.approx(want, rel=1e-9)


def test_kappa_equals_kernel_for_consistent_readings():
    t = np.array([-0.6, -0.1, 0.0, 0.3, 0.7])
    for kernel in KERNELS:
        np.testing.assert_allclose(T.kappa(t, kernel, p=2.0), kernel_values(kernel, t), rtol=1e-10)
        np.testing.assert_allclose(T.kappa(t, kernel, p=3.0, n_law="geom", weight="printed"),
                                   2.0 * kernel_values(kernel, t), rtol=1e-10)


def test_boundary_series_converges_with_tail():
    assert T.kappa(np.array(1.0), "sqrt", p=2.0) == pytest.approx(2.0, rel=1e-6)  # 2 - sqrt(0)
    assert math.isinf(T.kappa(np.array(1.0), "inv", p=2.0))
    assert math.isinf(T.kappa(np.array(1.0), "log", p=2.0))


@pytest.mark.parametrize("p", [1.5, 2.0, 4.0])
def test_inv_second_moment_diverges_iff_pm_at_least_one(p):
    for pm in (0.5, 0.99, 1.01, 3.0):
        x = np.array([(pm / p) ** 0.25])
        assert math.isinf(T.feature_moment(x, x, "inv", 2, p=p)) == (pm >= 1)


def test_rmf_moments_against_seeded_monte_carlo():
    # |mean - E| <= 5 se: false-failure rate 6e-7 (normal approximation of a mean of 2e5 finite-variance draws)
    rng = np.random.default_rng(88231200171)
    x, y = np.array([0.3, 0.2, -0.1, 0.25]), np.array([0.1, 0.4, 0.2, -0.2])
    mom = T.rmf_moments(x, y, "exp", p=2.0)
    draw = draw_rmf(200_000, 4, rng=rng)
    phi = rmf_features(np.stack([x, y]), draw) * math.sqrt(200_000)
    z = phi[0] * phi[1]
    assert abs(z.mean() - mom.mean) <= 5 * mom.sd / math.sqrt(z.size)
    assert z.var() == pytest.approx(mom.variance, rel=0.05)


def test_stratified_moments_add_up_to_kappa():
    x, y = np.array([0.5, 0.3, 0.1, 0.2]), np.array([0.4, 0.5, 0.2, 0.1])
    strata = T.stratified_moments(x, y, "inv", p=1.5)
    assert strata.truncated + strata.tail == pytest.approx(float(T.kappa(x @ y, "inv", p=1.5)), rel=1e-12)
    assert strata.sd > 0 and math.isfinite(strata.skewness)


def test_delta_method_against_enumerated_one_feature_moments():
    """b and v from the closed form G versus the ratio-of-means delta method written from enumerated moments
    E[A], E[B], E[B²], E[AB], E[A²] of one feature (d = 2, degrees <= 9: the omitted terms are below 1e-12)."""
    q = np.array([[0.3, -0.2]])
    k = np.array([[0.2, 0.4], [-0.3, 0.1], [0.1, -0.2]])
    v = np.array([[1.0], [-0.5], [0.25]])
    delta = T.rmfa_delta_method(q, k, v, "exp", p=2.0, scale_inputs=False)
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=2)))  # the 4 Rademacher vectors of R^2
    moments = np.zeros(5)  # E[A], E[B], E[B²], E[AB], E[A²]
    for n in range(10):
        pi = 0.5 * 2.0**-n
        c2 = 1.0 / math.factorial(n) / pi
        w = signs[np.array(list(itertools.product(range(4), repeat=n)), dtype=int).reshape(4**n, n)]  # (4^n, n, 2)
        fq = np.prod(w @ q[0], axis=1)
        fk = np.prod(w @ k.T, axis=1)
        a, b = c2 * fq * (fk @ v[:, 0]), c2 * fq * fk.sum(axis=1)
        moments += pi * np.array([a.mean(), b.mean(), (b * b).mean(), (a * b).mean(), (a * a).mean()])
    ea, eb, ebb, eab, eaa = moments
    ratio = ea / eb
    assert delta.attn_kappa[0, 0] == pytest.approx(ratio, rel=1e-8)
    assert delta.bias[0, 0] == pytest.approx((ratio * ebb - eab) / eb**2, rel=1e-6)
    assert delta.variance[0, 0] == pytest.approx((eaa - 2 * ratio * eab + ratio**2 * ebb) / eb**2, rel=1e-6)


def test_rmfa_cost_model_matches_recorded_products():
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((3, 20, 6)) * 0.3
    for route, options in (("none", {}), ("causal", dict(causal=True)), ("general", dict(mask=np.tri(20) > 0)),
                           ("padding", dict(key_padding=np.arange(20) % 3 > 0))):
        result = rmfa(q, k, v, num_features=12, rng=rng, chunk_size=8, return_details=True, **options)
        model = cost.rmfa_gemms(20, 6, 6, result.width, 12, route=route, chunk=8)
        assert cost.gemm_flops(result.gemms) == cost.gemm_flops(model)
        if route == "none":
            assert cost.gemm_flops(model) == cost.rmfa_flop_model(20, 6, 6, result.width, 12)


def test_flop_ratio_is_about_n_over_2d():
    ratio = cost.softmax_rmfa_flop_ratio(4096, 64, 64, 128)
    assert ratio == pytest.approx(4096 / 256 * 128 / 129, rel=1e-12)
    assert cost.rmfa_expected_width(100, 1.5, "geom") == pytest.approx(200.0)
    assert cost.rmfa_expected_width(100, 3.0, "defective") == pytest.approx(25.0)


def test_theorem3_r_and_rhs_shapes():
    r = T.theorem3_r(2.0, 3.0, 0.5, 1.5, 0.0)
    assert r == pytest.approx(6.0 * math.sqrt(0.75))
    rng = np.random.default_rng(2)
    k, v = rng.standard_normal((5, 3)), rng.uniform(0.1, 1, (5, 2))
    t = T.theorem3_t(0.3, k, v, r, "real")
    assert t.shape == (5, 2) and np.isfinite(t).all()


def test_delta_method_outside_the_kernel_radius_is_inf_not_nan():
    # inv/log/sqrt have a finite radius: at unit-scale inputs κ or G diverges for some queries; the prediction
    # must say so with inf (the claims skip non-finite predictions), never the nan of inf - inf, and warn nothing
    import warnings

    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2))
    for kernel in ("inv", "log", "sqrt"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            d = T.rmfa_delta_method(q, k, v, kernel, p=2.0)
        assert not any(np.isnan(a).any() for a in (d.attn_kappa, d.bias, d.variance))
        assert np.isinf(d.bias).any()
