"""Closed forms and quadrature of rfkit.theory.generalized and the cost models of rfkit.theory.cost, against
independent references (scipy/mpmath quadrature, Cho & Saul's arc-cosine kernels, hand counts)."""

import math

import mpmath
import numpy as np
import pytest
from scipy import integrate

from rfkit.estimators.generalized import GENERALIZED_FUNCTIONS
from rfkit.theory import cost
from rfkit.theory import generalized as g

PAIRS = [(1.0, 1.0, 0.0), (0.5, 2.0, 1.0), (1.5, 0.3, math.pi), (2.0, 2.0, 2.5), (0.7, 1.1, math.pi / 2)]


def _gaussian_pair_expectation(fn, a, b, theta):
    """E fn(u, v) for (u, v) = (a g1, b(cos θ g1 + sin θ g2)), g ~ N(0, I_2), by scipy dblquad (independent)."""
    def integrand(g2, g1):
        return fn(a * g1, b * (math.cos(theta) * g1 + math.sin(theta) * g2)) * math.exp(-(g1 * g1 + g2 * g2) / 2)

    value, _ = integrate.dblquad(integrand, -12, 0, -12, 12, epsabs=1e-12, epsrel=1e-10)
    upper, _ = integrate.dblquad(integrand, 0, 12, -12, 12, epsabs=1e-12, epsrel=1e-10)  # split at the kink
    value += upper
    return value / (2 * math.pi)


@pytest.mark.parametrize(("a", "b", "theta"), PAIRS[:3])
@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_relu_kernel_against_scipy_dblquad(a, b, theta, eps):
    def fn(u, v):
        return (max(u, 0.0) + eps) * (max(v, 0.0) + eps)

    assert g.relu_kernel(a, b, theta, epsilon=eps) == pytest.approx(_gaussian_pair_expectation(fn, a, b, theta),
                                                                    rel=1e-7, abs=1e-10)


def test_relu_kernel_against_mpmath_at_high_precision():
    # θ = π/2: u, v independent, E ReLU(u)ReLU(v) = (E ReLU(u))(E ReLU(v)) = ab/(2π); E ReLU(u) by mpmath
    mpmath.mp.dps = 30
    mean = mpmath.quad(lambda t: t * mpmath.npdf(t), [0, mpmath.inf])
    assert float(mean) == pytest.approx(g.relu_mean(1.0), rel=1e-15)
    assert g.relu_kernel(1.3, 0.4, math.pi / 2) == pytest.approx(float(1.3 * 0.4 * mean * mean), rel=1e-14)


def test_angular_kernel_against_seeded_monte_carlo():
    # 10⁶ sign products (sd <= 1): standard error <= 1e-3, so |error| > 5e-3 has probability < 1e-6.
    rng = np.random.default_rng(5_190_482_337_018_226_411)
    g1, g2 = rng.standard_normal((2, 1_000_000))
    for theta in (0.3, 1.2, 2.9):
        sample = np.mean(np.sign(g1) * np.sign(math.cos(theta) * g1 + math.sin(theta) * g2))
        assert g.angular_kernel(theta) == pytest.approx(sample, abs=5e-3)


def _closed_forms(a, b, theta):
    rho = math.cos(theta)
    s, t = a * a + b * b + 2 * a * b * rho, a * a + b * b - 2 * a * b * rho
    j2 = 3 * math.sin(theta) * rho + (math.pi - theta) * (1 + 2 * rho * rho)  # Cho & Saul (2009), order 2
    return {
        ("relu", 1): g.relu_kernel(a, b, theta),
        ("relu", 2): a * a * b * b * j2 / (2 * math.pi),
        ("abs", 1): 2 / math.pi * a * b * (math.sqrt(max(1 - rho * rho, 0)) + rho * math.asin(rho)),
        ("exp", 1): math.exp(s / 2),
        ("exp", 2): math.exp(2 * s),
        ("cos", 1): 0.5 * (math.exp(-t / 2) + math.exp(-s / 2)),
        ("identity", 1): a * b * rho,
        ("identity", 2): a * a * b * b * (1 + 2 * rho * rho),  # Isserlis
    }


@pytest.mark.parametrize(("a", "b", "theta"), PAIRS)
def test_quadrature_equals_closed_forms(a, b, theta):
    for (function, power), want in _closed_forms(a, b, theta).items():
        got = g.feature_moment(function, a, b, theta, power=power)
        assert got == pytest.approx(want, rel=1e-11, abs=1e-13), (function, power)


@pytest.mark.parametrize("function", ["sigmoid", "gelu", "tanh", "elu_plus_one"])
def test_quadrature_of_functions_without_closed_form_against_dblquad(function):
    f = GENERALIZED_FUNCTIONS[function]
    for a, b, theta in PAIRS[1:3]:
        ref = _gaussian_pair_expectation(lambda u, v: float((f(np.array(u)) + 1e-3) * (f(np.array(v)) + 1e-3)),
                                         a, b, theta)
        assert g.feature_kernel(function, a, b, theta, epsilon=1e-3) == pytest.approx(ref, rel=1e-7, abs=1e-10)


def test_term_variance_against_seeded_monte_carlo():
    # 2·10⁶ draws; the sample variance's relative standard error is below 0.5% here, so a 3% tolerance fails
    # with probability far below 1e-6.
    rng = np.random.default_rng(3_721_902_117_450_366_061)
    a, b, theta = 0.8, 1.3, 2.0
    g1, g2 = rng.standard_normal((2, 2_000_000))
    u, v = a * g1, b * (math.cos(theta) * g1 + math.sin(theta) * g2)
    for function in ("relu", "gelu", "elu_plus_one"):
        f = GENERALIZED_FUNCTIONS[function]
        sample = ((f(u) + 1e-3) * (f(v) + 1e-3)).var()
        assert g.term_variance(function, a, b, theta, epsilon=1e-3) == pytest.approx(sample, rel=0.03)


def test_theory_bad_inputs():
    with pytest.raises(ValueError, match="angle"):
        g.relu_kernel(1.0, 1.0, 4.0)
    with pytest.raises(ValueError, match="norms"):
        g.feature_kernel("relu", -1.0, 1.0, 0.5)
    with pytest.raises(ValueError, match="unknown function"):
        g.feature_kernel("softplus", 1.0, 1.0, 0.5)
    assert g.feature_moment("exp", 400.0, 400.0, 0.0, power=2) == math.inf


# ------------------------------------------------------------------------------------- cost models


def test_prefix_scan_counts_by_hand():
    # n = 8: up-sweep 4 + 2 + 1 combines in 3 rounds, down-sweep 1 + 2 + 4 in 3 rounds, then 8 in one round
    assert cost.prefix_scan_counts(8) == (7 + 7 + 8, 3 + 3 + 1)
    assert cost.prefix_scan_counts(5) == (7 + 7 + 5, 7)  # padded to 8
    assert cost.prefix_scan_counts(1) == (1, 1)


def test_state_and_storage_models_by_hand():
    assert cost.favor_state_bytes(100, 16, 3, impl="scan") == 16 * 4 * 8
    assert cost.favor_state_bytes(100, 16, 3, impl="parallel") == 128 * 16 * 4 * 8
    assert cost.favor_state_bytes(100, 16, 3, impl="chunked", chunk=32) == (16 * 4 + 32 * 32) * 8
    assert cost.softmax_attention_bytes(100, 80) == 2 * 100 * 80 * 8
    assert cost.softmax_attention_bytes(100, 80, block=10) == 2 * 10 * 80 * 8
    assert cost.projection_bytes("hadamard", 20, 6, k=3, norms="sqrt_d") == 3 * 3 * 8  # 3 blocks of d' = 8
    assert cost.projection_bytes("givens", 20, 6, rotations=16, norms="chi") == 4 * 16 * 16 + 20 * 8
    assert cost.projection_apply_flops("dense", 20, 6) == 240
    assert cost.projection_apply_flops("hadamard", 8, 8, k=1) == (8 + 8 * 3) + 8 + 8
    assert cost.projection_apply_flops("givens", 8, 8, rotations=24) == 6 * 24 + 8
    with pytest.raises(ValueError, match="unknown impl"):
        cost.favor_state_bytes(4, 4, 4, impl="tree")
    with pytest.raises(ValueError, match="rotations"):
        cost.projection_bytes("givens", 4, 4)
