"""rfkit.theory.eva against independent references: mpmath at high precision, scipy quadrature, numerical
optimisation, exact enumeration, and seeded Monte Carlo (each with its false-failure rate stated)."""

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, optimize, stats

from rfkit.estimators import proposals as proposals_est
from rfkit.estimators import softmax_attention
from rfkit.estimators.eva import (
    EXACT,
    GaussianProposal,
    control_variate_terms,
    eva_practical,
    practical_partition,
    rfa_attention,
)
from rfkit.theory import cost
from rfkit.theory import eva as th
from rfkit.validation.testing import assert_moment_matches

SEED = 1_846_236_519_730_228_047


@pytest.fixture
def problem():
    rng = np.random.default_rng(SEED)
    d, m, dv = 2, 4, 2
    return rng, rng.normal(scale=0.5, size=d), rng.normal(scale=0.5, size=(m, d)), rng.normal(size=(m, dv))


def test_gaussian_product_against_mpmath(problem):
    rng, q, k, _ = problem
    mp.mp.dps = 40
    omega = rng.normal(size=(5, 2)) * 3
    lhs, rhs = th.gaussian_product_sides(q, k[0], omega)
    for i, w in enumerate(omega):
        wq = [mp.mpf(float(t)) for t in w]
        x, y = [mp.mpf(float(t)) for t in q], [mp.mpf(float(t)) for t in k[0]]
        dot = lambda a, b: mp.fsum(ai * bi for ai, bi in zip(a, b, strict=True))  # noqa: E731
        normal = mp.exp(-dot(wq, wq) / 2) / (2 * mp.pi)
        left = normal * mp.exp(dot(wq, x) - dot(x, x) / 2) * mp.exp(dot(wq, y) - dot(y, y) / 2)
        assert abs(float(mp.log(left)) - lhs[i]) < 1e-13
        u = [a + b for a, b in zip(x, y, strict=True)]
        right = mp.exp(dot(x, y)) * mp.exp(-dot([a - b for a, b in zip(wq, u, strict=True)],
                                                [a - b for a, b in zip(wq, u, strict=True)]) / 2) / (2 * mp.pi)
        assert abs(float(mp.log(right)) - rhs[i]) < 1e-13


def test_target_density_integrates_to_one_and_is_the_mixture(problem):
    _, q, k, _ = problem
    q1, k1 = q[:1], k[:, :1]                                            # d = 1: p_n is a density (Eq 2-3)
    total, _ = integrate.quad(lambda x: math.exp(th.log_target_density(np.array([[x]]), q1, k1)[0]), -30, 30,
                              epsabs=1e-13, limit=200)
    assert abs(total - 1) < 1e-10
    omega = np.random.default_rng(1).normal(size=(20, 2)) * 2
    assert np.allclose(th.log_target_density(omega, q, k), th.log_target_mixture_density(omega, q, k), rtol=0,
                       atol=1e-13)


@pytest.mark.parametrize("tau", [0.75, 0.8, 1.0, 1.7, 3.0])
def test_ratio_integral_against_quadrature(tau):
    a, b, mu = np.array([0.3, -0.2]), np.array([-0.7, 0.4]), np.array([0.4, 0.1])
    value = 0.0
    for ai, bi, mi in zip(a, b, mu, strict=True):  # the densities factorise over coordinates
        f = lambda t, ai=ai, bi=bi, mi=mi: math.exp(stats.norm.logpdf(t, ai) + stats.norm.logpdf(t, bi)  # noqa: E731
                                                    - stats.norm.logpdf(t, mi, tau))
        value += math.log(integrate.quad(f, -40, 40, points=[0], limit=400, epsabs=0, epsrel=1e-12)[0])
    assert abs(th.log_gaussian_ratio_integral(a, b, mu, tau) - value) < 1e-9
    assert th.log_gaussian_ratio_integral(a, b, mu, 0.7) == math.inf    # τ² <= 1/2: the integral diverges
    assert math.isfinite(th.log_gaussian_ratio_integral(a, b, mu, 0.71))


def _gauss_hermite_2d(mu: np.ndarray, n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``(n², 2)`` and weights of a tensor Gauss–Hermite rule for ``N(mu, I_2)``: exact for polynomials
    of degree < 2n in each coordinate, and accurate to round-off for the exponentials of linear forms below."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    gx, gy = np.meshgrid(x, x, indexing="ij")
    return mu + np.stack([gx.ravel(), gy.ravel()], axis=1), np.outer(w, w).ravel() / w.sum() ** 2


def test_weighted_kernel_moments_by_quadrature(problem):
    # the weighted exponential features are log-normal: a Monte Carlo mean cannot decide (heavy tails), a
    # Gauss–Hermite rule over the proposal integrates them to round-off
    _, q, k, _ = problem
    mu = np.array([0.2, -0.1])
    mom = th.weighted_kernel_moments(q, k[0], k[1], mu)
    prop = GaussianProposal(mu)
    omega, w = _gauss_hermite_2d(mu)
    base = proposals_est.log_ratio(prop, omega) - 0.5 * q @ q + omega @ q
    y1 = np.exp(base + omega @ k[0] - 0.5 * k[0] @ k[0])
    y2 = np.exp(base + omega @ k[1] - 0.5 * k[1] @ k[1])
    mean1, mean2 = w @ y1, w @ y2
    assert np.isclose(mean1, mom["mean"], rtol=1e-10) and np.isclose(mean2, mom["mean2"], rtol=1e-10)
    assert np.isclose(w @ ((y1 - mean1) * (y2 - mean2)), mom["cov"], rtol=1e-8)
    at_mode = th.weighted_kernel_moments(q, k[0], k[0], q + k[0])
    assert at_mode["cov"] == 0.0                                        # μ = x + y: zero variance


def test_cv_moments_by_quadrature(problem):
    # one sample (s = 1) integrated exactly over the proposal by Gauss–Hermite; the moments of s samples are
    # checked against s = 1 through the relations below
    _, q, k, v = problem
    mu = q + k.mean(axis=0)
    mom = th.cv_moments(q, k, v, mu, 1)
    prop = GaussianProposal(mu)
    nodes, w = _gauss_hermite_2d(mu)
    omega = nodes[:, None, :]
    t = control_variate_terms(q[None], k, v, omega=omega, log_ratio=proposals_est.log_ratio(prop, omega))
    h = t.h_tokens[:, 0]
    mean_h = w @ h
    np.testing.assert_allclose(mean_h, mom.mean_h, rtol=1e-9)
    centred = h - mean_h
    np.testing.assert_allclose((centred * w[:, None]).T @ centred, mom.cov_h, rtol=1e-7, atol=1e-12)
    total = h.sum(1)
    assert np.isclose(w @ (total - 1) ** 2, mom.var_h, rtol=1e-7)
    g = t.g[:, 0]
    assert np.isclose(w @ ((total - 1) * (g[:, 0] - mean_h @ v[:, 0])), mom.cov_hg[0], rtol=1e-7, atol=1e-12)
    three = th.cv_moments(q, k, v, mu, 3)
    np.testing.assert_allclose(three.mean_h, mom.mean_h)
    np.testing.assert_allclose(three.cov_h, mom.cov_h / 3, rtol=1e-12)
    assert np.isclose(three.ess, 3 / three.omega_sq) and np.isclose(three.var_h, three.cov_h.sum())
    assert np.allclose(three.var_g, v.T @ three.cov_h @ v)


def test_cv_moments_diverge_for_narrow_proposals(problem):
    _, q, k, v = problem
    mom = th.cv_moments(q, k, v, np.zeros(2), 4, tau=0.6)
    assert mom.var_h == math.inf and np.isinf(mom.cov_h).all()


def test_cv_variance_forms_against_exact_enumeration():
    # a three-point law of (h, g) with exact rational moments; β not parallel to Cov[h, g]
    h = np.array([0.0, 1.0, 3.0])
    g = np.array([[1.0, 0.0], [0.0, 2.0], [4.0, 1.0]])
    p = np.array([0.5, 0.25, 0.25])
    mean_h, mean_g = p @ h, p @ g
    var_h = p @ (h - mean_h) ** 2
    cov_hg = p @ ((h - mean_h)[:, None] * (g - mean_g))
    var_g = (g - mean_g).T @ (p[:, None] * (g - mean_g))
    beta = np.array([1.0, -2.0])
    gt = g - h[:, None] * beta
    truth = (gt - p @ gt).T @ (p[:, None] * (gt - p @ gt))
    assert np.allclose(th.cv_variance(var_g, cov_hg, var_h, beta), truth)
    printed = th.cv_variance(var_g, cov_hg, var_h, beta, form="printed")
    assert not np.allclose(printed, truth) and np.isclose(np.trace(printed), np.trace(truth))
    star = th.optimal_cv_coefficient(cov_hg, var_h)
    res = optimize.minimize(lambda b: np.trace(th.cv_variance(var_g, cov_hg, var_h, b)), np.zeros(2))
    assert np.allclose(res.x, star, atol=1e-6)


def test_parabola_functions(problem):
    _, q, k, v = problem
    mom = th.cv_moments(q, k, v, np.zeros(2), 2)
    beta = np.array([0.5, -1.0])
    subset = [1, 3]
    assert np.isclose(th.token_cv_variance(mom.cov_h[1, 1], v[1], beta), th.subset_cv_variance(mom.cov_h, v, beta, [1]))
    best = th.subset_variance_minimiser(mom.cov_h, v, subset)
    res = optimize.minimize(lambda b: th.subset_cv_variance(mom.cov_h, v, b, subset), np.zeros(2), tol=1e-14)
    assert np.allclose(res.x, best, atol=1e-6)


def test_weighted_error_functions_against_optimisation():
    rng = np.random.default_rng(SEED)
    alpha = rng.dirichlet(np.ones(7))
    targets = rng.normal(size=(7, 2))
    labels = np.array([0, 1, 0, 2, 1, 2, 2])
    opt = th.partition_optimal_coefficients(alpha, targets, labels)
    res = optimize.minimize(lambda x: th.weighted_error(alpha, targets, labels, x.reshape(3, 2)), np.zeros(6),
                            tol=1e-14)
    assert np.allclose(res.x.reshape(3, 2), opt, atol=1e-6)
    beta = rng.normal(size=2)
    gap = th.weighted_error(alpha, targets, labels, beta) - th.weighted_error(alpha, targets, labels, opt)
    assert np.isclose(gap, th.pythagoras_gap(alpha, targets, labels, beta))
    dec = th.error_decomposition(alpha, targets, labels, beta)
    assert abs(dec["cross"]) < 1e-14 and np.isclose(dec["total"], dec["between"] + dec["within"])


def test_local_softmax_and_eq13_error(problem):
    rng, q, k, v = problem
    labels = np.array([0, EXACT, 1, 0])
    log_pi, beta = th.local_softmax(q, k, v, labels)
    w = softmax_attention(q[None], k, np.eye(4), scale=1.0)[0]
    assert np.allclose(np.exp(log_pi), [w[0] + w[3], w[2]])
    assert np.allclose(beta[0], (w[0] * v[0] + w[3] * v[3]) / (w[0] + w[3])) and np.allclose(beta[1], v[2])
    assert np.allclose(th.eq13_error(log_pi, beta, beta), 0)


def test_asymptotic_constants_relations(problem):
    _, q, k, v = problem
    mu = np.array([0.1, 0.2])
    sigma2, _ = th.snis_asymptotics(q, k, v, mu)
    assert np.isclose(th.eva13_asymptotics(q, k, v, np.zeros(4, int), mu), sigma2)          # E = ∅, C = 1
    assert th.eva13_asymptotics(q, k, v, np.arange(4), mu) == 0.0                            # singletons
    shared = th.eva13_asymptotics(q, k, v, np.array([0, 0, 1, 1]), mu)
    per_chunk = th.eva13_asymptotics(q, k, v, np.array([0, 0, 1, 1]), np.stack([mu, mu]), sampling="per_chunk")
    assert shared > 0 and per_chunk > 0


@pytest.mark.slow  # ~12 s: 40,000 replicates of S = 2,000 samples
def test_snis_asymptotics_by_monte_carlo(problem):
    rng, q, k, v = problem
    mu = q + k.mean(axis=0)
    sigma2, bias = th.snis_asymptotics(q, k, v, mu)
    s, reps = 2000, 40_000
    prop = GaussianProposal(mu)
    target = softmax_attention(q[None], k, v, scale=1.0)[0]
    sq = []
    for _ in range(10):
        omega = prop.sample(rng, reps // 10 * s).reshape(reps // 10, s, 2)
        est = rfa_attention(q[None], k, v, omega=omega, proposal=prop)[:, 0]
        sq.append(((est - target) ** 2).sum(1) * s)
    # S·MSE at S = 2000 equals σ² up to O(1/S) terms well inside 5%; alpha 1e-4
    assert_moment_matches(np.concatenate(sq), sigma2, alpha=1e-4, tolerance=0.05)
    assert np.isfinite(bias).all()


def test_eq16_limit_is_the_oracle_practical_estimator():
    rng = np.random.default_rng(SEED)
    q, k, v = rng.normal(scale=0.5, size=(8, 3)), rng.normal(scale=0.5, size=(8, 3)), rng.normal(size=(8, 2))
    part = practical_partition(8, block_size=2, num_chunks=2)
    exact = np.zeros((8, 8), dtype=bool)
    for queries, keys in zip(part.queries, part.exact, strict=True):
        exact[np.ix_(queries, keys)] = True
    limit = th.eq16_large_s_limit(q, k, v, exact, part.chunks[0])
    many = eva_practical(q, k, v, block_size=2, num_chunks=2, num_samples=4000, rng=rng)
    # seeded Monte Carlo: at S = 4000 the largest of the 16 output errors is ~0.01 (0.008-0.012 over seeds);
    # 0.03 leaves a wide margin while the S = 1 estimator (errors 0.1-0.25 here) fails
    assert np.abs(many - limit).max() < 0.03
    assert np.allclose(limit, eva_practical(q, k, v, block_size=2, num_chunks=2, coefficient="oracle", mode="eval"))


def test_practical_gemms_flops():
    n, d, block, chunks = 1024, 64, 64, 16
    flops = cost.gemm_flops(th.eva_practical_gemms(n, d, d, block, chunks))
    per_block = 2 * (block * d * block + block * block * d)            # logits and outputs of one block
    per_chunk = 2 * (d * (n // chunks) + (n // chunks) * d)              # features and coefficient of one chunk
    assert flops == (n // block) * per_block + 2 * (n * d * chunks * 2) + chunks * per_chunk
    assert cost.gemm_flops(th.eva_practical_gemms(n, d, d, block, 0)) == (n // block) * per_block
