"""Closed-form moments of the softmax-kernel estimators against 1-D quadrature (independent reference)."""

import numpy as np
import pytest
from scipy import integrate, stats

from rfkit.theory.softmax import ESTIMATORS, estimator_moments, term_raw_moment, term_variance

PAIRS = [(np.array([0.3, -0.2]), np.array([0.5, 0.4])), (np.array([1.0, 0.0]), np.array([-0.7, 0.2]))]


def quad_moment(kind, x, y, k):
    lam = np.exp(-(x @ x + y @ y) / 2)
    if kind == "trig":
        sd, f = np.sqrt((x - y) @ (x - y)), lambda u: (np.cos(u) / lam) ** k
    else:
        sd = np.sqrt((x + y) @ (x + y))
        f = (lambda u: (lam * np.exp(u)) ** k) if kind == "positive" else (lambda u: (lam * np.cosh(u)) ** k)
    val, _ = integrate.quad(lambda u: f(u) * stats.norm.pdf(u, scale=sd), -12 * sd - 1, 12 * sd + 1, limit=400)
    return val


@pytest.mark.parametrize("kind", ESTIMATORS)
@pytest.mark.parametrize("pair", range(len(PAIRS)))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_raw_moments_match_quadrature(kind, pair, k):
    x, y = PAIRS[pair]
    np.testing.assert_allclose(term_raw_moment(kind, x, y, k), quad_moment(kind, x, y, k), rtol=1e-8)


@pytest.mark.parametrize("kind", ESTIMATORS)
def test_unbiased_mean_and_variance_closed_form(kind):
    x, y = PAIRS[1]
    mom = estimator_moments(kind, x, y, m=7)
    np.testing.assert_allclose(mom["mean"], np.exp(x @ y), rtol=1e-13)
    raw_var = term_raw_moment(kind, x, y, 2) - term_raw_moment(kind, x, y, 1) ** 2
    np.testing.assert_allclose(term_variance(kind, x, y), raw_var, rtol=1e-10)
    np.testing.assert_allclose(mom["var"] * 7, raw_var, rtol=1e-10)


def test_lemma2_relations():
    # MSE(hyp) = (1 - e^{-s})/2 · MSE(+) (Performer Lemma 2)
    x, y = PAIRS[0]
    s = (x + y) @ (x + y)
    np.testing.assert_allclose(term_variance("hyperbolic", x, y),
                               (1 - np.exp(-s)) / 2 * term_variance("positive", x, y), rtol=1e-12)


def test_overflow_returns_inf():
    x = np.array([30.0, 0.0])
    assert term_variance("positive", x, x) == np.inf
    assert estimator_moments("positive", x, x, 4)["sd"] == np.inf


def test_trig_output_tail_constant_matches_monte_carlo():
    """The Cauchy tail of the renormalised trig output (d = m = 1): t·P(|N̂/D̂| > t) -> c, from an independent
    Monte Carlo of ω ~ N(0, 1) (binomial counts: ~1.5e3 exceedances at t = 200 give ~3% relative error)."""
    from rfkit.theory.softmax import renormalised_output_mean_exists, trig_output_tail_constant

    x, ys, v = 0.3, np.array([-0.5, 0.9]), np.array([1.0, -1.0])
    c = trig_output_tail_constant(x, ys, v)
    assert c > 0  # so E|ô| = ∞: the output MSE of trig features has no finite mean
    w = np.random.default_rng(0).standard_normal(8_000_000)
    weights = np.exp(0.5 * (x * x + ys * ys))
    cos = np.cos(np.multiply.outer(w, x - ys))
    ratio = (cos @ (weights * v)) / (cos @ weights)
    t = 200.0
    count = int((np.abs(ratio) > t).sum())
    assert abs(t * count / w.size - c) < 4 * t * np.sqrt(count) / w.size + 0.02 * c
    assert not renormalised_output_mean_exists("trig")
    assert renormalised_output_mean_exists("positive") and renormalised_output_mean_exists("hyperbolic")


def test_trig_output_tail_constant_vanishes_with_equal_values():
    """Equal values make N̂ = v·D̂: the output is exactly v, no tail (c = 0)."""
    from rfkit.theory.softmax import trig_output_tail_constant

    assert trig_output_tail_constant(0.3, [-0.5, 0.9], [2.0, 2.0]) < 1e-12
