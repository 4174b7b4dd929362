"""rfkit.theory.eva.snis_finite_mse and snis_finite_bias (the exact finite-S MSE and bias of SNIS by a Laplace
transform and Gauss–Hermite quadrature) against computations that share none of their steps: adaptive quadrature
of the defining integrals (S = 1, 2 in d = 1), a large Monte Carlo of the self-normalised estimate written from its
mixture form (d = 4, light and very heavy weights), their S → ∞ limits σ²_RFA and b
(eva.derived.snis_asymptotics), and a finer node rule on heavy weights."""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.special import logsumexp

from rfkit.theory import eva as theory


def _weights(q, k):
    logits = k @ q
    return np.exp(logits - logsumexp(logits))


def _snis_error_1d(omegas, q, k, v, mu):
    """β̂ - β for the draws ``omegas`` (1-D), from the definitions: W_m(ω) = w_m N(ω; q + k_m, 1)/N(ω; μ, 1)."""
    w = _weights(q, k)
    u = q[0] + k[:, 0]
    parts = np.array([[w[m] * math.exp(-0.5 * (x - u[m]) ** 2 + 0.5 * (x - mu[0]) ** 2) for m in range(len(w))]
                      for x in omegas])                                       # (S, M)
    return (parts.sum(axis=0) @ v) / parts.sum() - w @ v


def _density(x, mu):
    return math.exp(-0.5 * (x - mu) ** 2) / math.sqrt(2 * math.pi)


CASE_1D = (np.array([0.4]), np.array([[0.3], [-0.5], [0.9]]), np.array([[1.0, -0.5], [-0.3, 0.8], [0.6, 0.2]]),
           np.array([0.2]))


def test_one_sample_matches_adaptive_quadrature():
    """S = 1: MSE = E_ρ‖f(ω) - β‖² (f the posterior mean of the values), one adaptive integral."""
    q, k, v, mu = CASE_1D
    want = integrate.quad(lambda x: float(np.sum(_snis_error_1d([x], q, k, v, mu) ** 2)) * _density(x, mu[0]),
                          -30, 30, limit=400, epsabs=0, epsrel=1e-11)[0]
    assert theory.snis_finite_mse(q, k, v, mu, [1])[0] == pytest.approx(want, rel=3e-3)     # default lattice
    assert theory.snis_finite_mse(q, k, v, mu, [1], step=0.01)[0] == pytest.approx(want, rel=1e-4)


def test_bias_matches_adaptive_quadrature_and_its_limit():
    """E β̂ - β at S = 1 (one integral) and S = 2 (a double integral), and S·bias → b at S = 2^30."""
    q, k, v, mu = CASE_1D
    m0 = mu[0]
    for j in range(v.shape[1]):
        one = integrate.quad(lambda x, j=j: float(_snis_error_1d([x], q, k, v, mu)[j]) * _density(x, m0),
                             -30, 30, limit=400, epsabs=0, epsrel=1e-11)[0]
        two = integrate.dblquad(
            lambda y, x, j=j: float(_snis_error_1d([x, y], q, k, v, mu)[j]) * _density(x, m0) * _density(y, m0),
            m0 - 12, m0 + 12, m0 - 12, m0 + 12, epsabs=1e-12, epsrel=1e-8)[0]
        got = theory.snis_finite_bias(q, k, v, mu, [1, 2], step=0.01)[:, j]
        assert got == pytest.approx([one, two], rel=1e-4)
    _, b = theory.snis_asymptotics(q, k, v, mu)
    assert 2.0**30 * theory.snis_finite_bias(q, k, v, mu, [2**30])[0] == pytest.approx(b, rel=1e-6)


def test_two_samples_match_a_double_integral():
    """S = 2: the self-normalised estimate of two draws, integrated over both (scipy dblquad)."""
    q, k, v, mu = CASE_1D
    m0 = mu[0]
    want = integrate.dblquad(
        lambda y, x: float(np.sum(_snis_error_1d([x, y], q, k, v, mu) ** 2)) * _density(x, m0) * _density(y, m0),
        m0 - 12, m0 + 12, m0 - 12, m0 + 12, epsabs=1e-12, epsrel=1e-8)[0]
    assert theory.snis_finite_mse(q, k, v, mu, [2])[0] == pytest.approx(want, rel=3e-3)
    assert theory.snis_finite_mse(q, k, v, mu, [2], step=0.01)[0] == pytest.approx(want, rel=1e-4)


def test_matches_monte_carlo_in_four_dimensions(rng):
    """d = 4, M = 5 (rank 4), Ω ≈ 3: SNIS written from its mixture form, 20k-40k replicates per size (seed from the
    rng fixture). The tolerance is 6 standard errors of the Monte Carlo mean (false-failure rate < 1e-8 per size for
    a normal mean; the replicates are bounded by max‖v_m - β‖²) plus 1% for the quadrature."""
    q = np.array([0.3, -0.2, 0.1, 0.4])
    k = rng.normal(scale=0.5, size=(5, 4))
    v = rng.normal(size=(5, 2))
    mu = np.zeros(4)
    w = _weights(q, k)
    a = q + k - mu
    beta = w @ v
    sizes = [3, 20, 150]
    exact = theory.snis_finite_mse(q, k, v, mu, sizes)
    for size, want in zip(sizes, exact, strict=True):
        reps = 40_000 if size < 100 else 20_000
        x = rng.standard_normal((reps, size, 4))
        log_terms = np.log(w) - 0.5 * np.sum(a * a, axis=1) + x @ a.T              # log W_m(x_s), (R, S, M)
        top = log_terms.max(axis=(1, 2), keepdims=True)
        terms = np.exp(log_terms - top)
        err = np.einsum("rsm,mv->rv", terms, v) / terms.sum(axis=(1, 2))[:, None] - beta
        sq = np.sum(err**2, axis=1)
        se = sq.std(ddof=1) / math.sqrt(reps)
        assert abs(sq.mean() - want) <= 6 * se + 0.01 * want, (size, sq.mean(), want, se)


def test_matches_monte_carlo_on_very_heavy_weights(rng):
    """Clustered keys far from μ = 0 (Ω = 1.1e7, S·MSE/σ²_RFA = 2e-6 at S = 16: the MSE is carried by pairs of
    tokens with small Γ_mm', not by σ²_RFA's): MSE and bias at S = 16, 64 against 20k Monte Carlo
    replicates (seed from the rng fixture; 6 standard errors plus 2%, false-failure rate < 1e-8 per value for a
    normal mean: the replicates are bounded)."""
    centres = np.array([[2.2, -1.2, 0.6, 0.3], [-1.6, 1.5, -0.8, 0.4]])
    k = centres[np.arange(8) // 4] + rng.normal(scale=0.15, size=(8, 4))
    q = np.array([1.2, -0.7, 0.4, 0.1])
    v = rng.normal(size=(8, 2))
    mu = np.zeros(4)
    assert theory.cv_moments(q, k, v, mu, 1).omega_sq > 1e6
    w, a = _weights(q, k), q + k - mu
    sizes = [16, 64]
    mse, bias = theory.snis_finite_mse(q, k, v, mu, sizes), theory.snis_finite_bias(q, k, v, mu, sizes)
    for size, want, want_bias in zip(sizes, mse, bias, strict=True):
        x = rng.standard_normal((20_000, size, 4))
        log_terms = np.log(w) - 0.5 * np.sum(a * a, axis=1) + x @ a.T
        terms = np.exp(log_terms - log_terms.max(axis=(1, 2), keepdims=True))
        err = np.einsum("rsm,mv->rv", terms, v) / terms.sum(axis=(1, 2))[:, None] - w @ v
        sq = np.sum(err**2, axis=1)
        assert abs(sq.mean() - want) <= 6 * sq.std(ddof=1) / math.sqrt(sq.size) + 0.02 * want, (size, sq.mean(), want)
        se = err.std(axis=0, ddof=1) / math.sqrt(err.shape[0])
        assert np.all(np.abs(err.mean(axis=0) - want_bias) <= 6 * se + 0.02 * np.abs(want_bias)), (size, want_bias)


def test_tends_to_the_asymptotic_constant():
    """S·MSE(S) → σ²_RFA (eva.derived.snis_asymptotics), from below for these weights."""
    rng = np.random.default_rng(3)
    for d, m in ((2, 3), (4, 8)):
        q, k, v = rng.normal(scale=0.5, size=d), rng.normal(scale=0.5, size=(m, d)), rng.normal(size=(m, 2))
        for mu in (np.zeros(d), q + k.mean(axis=0)):
            sigma2, _ = theory.snis_asymptotics(q, k, v, mu)
            sizes = np.array([2.0**10, 2.0**30, 2.0**50])
            ratio = sizes * theory.snis_finite_mse(q, k, v, mu, sizes) / sigma2
            assert ratio[1] == pytest.approx(1.0, abs=1e-4) and ratio[2] == pytest.approx(1.0, abs=1e-4)
            assert ratio[0] <= 1.0 + 1e-3


def test_default_nodes_on_heavy_weights():
    """A query parallel to a key (near one-hot softmax) and μ = 0: Ω = 2.4e6, S·MSE reaches σ² only at S ~ 1e10.
    The default (anisotropic) rule against twice its nodes per direction: < 1% of MSE(S) and < 0.015 of log-log
    slopes (measured: 0.75% and 0.010)."""
    rng = np.random.default_rng(7)
    k = rng.normal(scale=0.5, size=(6, 4))
    q = 3.0 * k[0] / np.linalg.norm(k[0])
    v = rng.normal(size=(6, 2))
    mu = np.zeros(4)
    assert theory.cv_moments(q, k, v, mu, 1).omega_sq > 1e4
    sizes = np.round(2.0 ** np.arange(2, 61, 2))
    def slopes(m):
        return np.diff(np.log(m)) / np.diff(np.log(sizes))

    default = theory.snis_finite_mse(q, k, v, mu, sizes)
    fine = theory.snis_finite_mse(q, k, v, mu, sizes, refine=2.0)
    assert np.max(np.abs(default / fine - 1)) < 1e-2
    assert np.max(np.abs(slopes(default) - slopes(fine))) < 1.5e-2
    # an isotropic rule (28 nodes along every axis, 0.55% from the refined one itself) on a finer lattice
    iso = theory.snis_finite_mse(q, k, v, mu, sizes, nodes=28, step=0.05)
    assert np.max(np.abs(default / iso - 1)) < 2e-2 and np.max(np.abs(slopes(default) - slopes(iso))) < 2e-2


def test_exact_and_degenerate_cases():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=4), rng.normal(size=(3, 4))
    equal = np.ones((3, 2))
    assert np.array_equal(theory.snis_finite_mse(q, k, equal, np.zeros(4), [1, 10]), [0.0, 0.0])
    one = theory.snis_finite_mse(q, k[:1], rng.normal(size=(1, 2)), np.zeros(4), [5])
    assert one[0] == 0.0
    assert np.array_equal(theory.snis_finite_bias(q, k, equal, np.zeros(4), [3]), [[0.0, 0.0]])
    wide = rng.normal(size=(6, 6))
    assert np.isnan(theory.snis_finite_mse(rng.normal(size=6), wide, rng.normal(size=(6, 2)), np.zeros(6), [4])).all()
    assert np.isnan(theory.snis_finite_bias(rng.normal(size=6), wide, rng.normal(size=(6, 2)), np.zeros(6), [4])).all()
    assert theory.snis_quadrature_rank(q, k, q + k[0]) == 2          # a_1 = 0: span{a_2, a_3}
    with pytest.raises(ValueError):
        theory.snis_finite_mse(q, k, rng.normal(size=(3, 2)), np.zeros(4), [1.5])
    with pytest.raises(ValueError):
        theory.snis_finite_mse(q, k, rng.normal(size=(3, 2)), np.zeros(4), [0])
