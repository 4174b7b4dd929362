"""theory.lara against independent references: quadrature (scipy), mpmath at high precision, exact enumeration,
and seeded Monte Carlo with stated false-failure rates."""

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import softmax

from rfkit.estimators import mis as mis_est
from rfkit.estimators import ra as ra_est
from rfkit.estimators import rfa as rfa_est
from rfkit.theory import lara as theory

mp.mp.dps = 40


def test_mixture_moments_by_quadrature():
    q, k = np.array([[0.3]]), np.array([[-1.0], [0.5], [2.0]])
    mean, cov = theory.mixture_moments(q, k)
    mix = ra_est.attention_mixture(q, k)
    pdf = lambda x: math.exp(mix.logpdf_cross(np.array([[x]]))[0, 0])  # noqa: E731
    m1 = integrate.quad(lambda x: x * pdf(x), -np.inf, np.inf, epsabs=1e-13)[0]
    m2 = integrate.quad(lambda x: (x - m1) ** 2 * pdf(x), -np.inf, np.inf, epsabs=1e-13)[0]
    assert mean[0, 0] == pytest.approx(m1, abs=1e-10)
    assert cov[0, 0, 0] == pytest.approx(m2, abs=1e-10)


def test_mixture_moments_match_the_sampler():
    # seeded: 200,000 draws per query; |error| < 6 standard errors (false failure < 1e-8 per entry)
    rng = np.random.default_rng(3_995_130_224_783_905_163)
    q, k = rng.normal(size=(2, 2)), rng.normal(size=(5, 2))
    mean, cov = theory.mixture_moments(q, k)
    draws = ra_est.attention_mixture(q, k).sample(rng, 200_000)
    se = np.sqrt(np.diagonal(cov, axis1=1, axis2=2) / 200_000)
    assert (np.abs(draws.mean(1) - mean) < 6 * se).all()


def test_is_weight_second_moment_by_grid_quadrature():
    rng = np.random.default_rng(1)
    q, k = 0.5 * rng.normal(size=(2, 2)), 0.5 * rng.normal(size=(3, 2))
    mu = np.array([0.3, -0.2])
    x = np.linspace(-14, 14, 561)
    h = x[1] - x[0]
    pts = np.stack(np.meshgrid(x, x), -1).reshape(-1, 2)
    log_p = ra_est.attention_mixture(q, k).logpdf_cross(pts)
    quad = np.exp(2 * log_p - rfa_est.log_normal(pts, mu)[:, None]).sum(0) * h * h
    np.testing.assert_allclose(theory.is_weight_second_moment(q, k, mu), quad, rtol=1e-9)


@pytest.mark.parametrize("fmap", rfa_est.XI_MAPS)
def test_kernel_relative_variance_by_gauss_hermite(fmap):
    x, y = np.array([0.7]), np.array([-0.4])
    nodes, weights = np.polynomial.hermite_e.hermegauss(120)
    weights = weights / math.sqrt(2 * math.pi)
    phases = np.linspace(0, 2 * math.pi, 64, endpoint=False) + math.pi / 64  # exact for trigonometric polynomials
    vals = []
    for b in phases if fmap == "trig_cos_phase" else [None]:
        phase = None if b is None else np.full(nodes.size, b)
        sx, lx = rfa_est.xi(x[None], nodes[:, None], feature_map=fmap, phase=phase)
        sy, ly = rfa_est.xi(y[None], nodes[:, None], feature_map=fmap, phase=phase)
        vals.append((sx * sy * np.exp(lx + ly)).sum(-1)[0])
    vals = np.array(vals)
    mean = (vals @ weights).mean()
    var = ((vals**2) @ weights).mean() - mean**2
    assert mean == pytest.approx(math.exp(float(x @ y)), rel=1e-12)
    assert theory.kernel_relative_variance(x, y, fmap, S=3) == pytest.approx(var / math.exp(2 * x @ y) / 3, rel=1e-9)


def test_gaussian_ratio_and_balance_heuristic_with_mpmath():
    rng = np.random.default_rng(2)
    omega, means = 30 * rng.normal(size=3), 5 * rng.normal(size=(4, 3))
    for mu in means:
        direct = sum(-mp.mpf(w) ** 2 / 2 for w in omega) - sum(-(mp.mpf(w) - mp.mpf(m)) ** 2 / 2
                                                              for w, m in zip(omega, mu, strict=True))
        assert theory.log_density_ratio_standard(omega, mu) == pytest.approx(float(direct), rel=1e-13)
    dens = [mp.exp(sum(-(mp.mpf(w) - mp.mpf(m)) ** 2 / 2 for w, m in zip(omega, mu, strict=True))) for mu in means]
    np.testing.assert_allclose(theory.gaussian_balance_heuristic(omega, means), [float(d / sum(dens)) for d in dens],
                               rtol=1e-12, atol=1e-300)


def _mp_log_normal(w, center, sign=1):
    return -sum((mp.mpf(float(a)) - sign * mp.mpf(float(b))) ** 2 for a, b in zip(w, center, strict=True)) / 2


def test_hyperbolic_integrand_and_target_with_mpmath():
    rng = np.random.default_rng(3)
    q, k, v = rng.normal(size=(2, 2)), rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    omega = 4 * rng.normal(size=(2, 2))
    f = theory.hyperbolic_integrand(q, k, v, omega)
    np.testing.assert_allclose(f, theory.hyperbolic_integrand(q, k, v, -omega), rtol=1e-14)
    logits = q @ k.T
    for n in range(2):
        for s in range(2):
            w = [mp.exp(-mp.mpf(float(km @ km)) / 2) * mp.cosh(mp.mpf(float(omega[s] @ (q[n] + km)))) for km in k]
            want = [float(sum(wi * mp.mpf(float(vm[j])) for wi, vm in zip(w, v, strict=True)) / sum(w))
                    for j in range(2)]
            np.testing.assert_allclose(f[n, s], want, rtol=1e-13)
            pi = [mp.exp(mp.mpf(float(x))) for x in logits[n]]
            dens = sum(p / 2 * (mp.exp(_mp_log_normal(omega[s], c)) + mp.exp(_mp_log_normal(omega[s], c, -1)))
                       for p, c in zip(pi, q[n] + k, strict=True)) / sum(pi) / (2 * mp.pi)
            got = theory.hyperbolic_target_log_density(np.repeat(omega[None, s:s + 1], 2, axis=0), q, k)[n, 0]
            assert got == pytest.approx(float(mp.log(dens)), abs=1e-12)


def test_tilted_gaussian_and_rank_bound():
    rng = np.random.default_rng(4)
    w, q, k = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)
    want = stats.multivariate_normal(mean=q + k, cov=np.eye(3)).logpdf(w)
    assert theory.tilted_gaussian_log_density(w, q, k) == pytest.approx(want, rel=1e-14)
    assert theory.output_rank_bound(4, 32) == 4 and theory.output_rank_bound(40, 32) == 32


def test_appd_d1_solution_against_scipy_quadrature():
    q, k, v, means = 0.4, np.array([-0.5, 0.2, 1.1]), np.array([2.0, -1.0, 4.0]), np.array([-1.0, 0.3, 1.8])
    sol = theory.appd_d1_solution(q, k, v, means)
    mix = ra_est.attention_mixture(np.array([[q]]), k[:, None])
    qd = lambda c, w: stats.norm.pdf(w, means[c])  # noqa: E731
    total = lambda w: sum(qd(c, w) for c in range(3))  # noqa: E731
    g = lambda w: math.exp(mix.logpdf_cross(np.array([[w]]))[0, 0]) * (  # noqa: E731
        rfa_est.integrand(np.array([[q]]), k[:, None], v[:, None], np.array([[w]]))[0, 0, 0] - sol.mu)
    for c in range(3):
        for c2 in range(3):
            want = integrate.quad(lambda w, c=c, c2=c2: qd(c, w) * qd(c2, w) / total(w), -15, 15, epsabs=1e-13)[0]
            assert sol.A[c, c2] == pytest.approx(want, abs=1e-11)
        want = integrate.quad(lambda w, c=c: qd(c, w) * g(w) / total(w), -15, 15, epsabs=1e-13, limit=200)[0]
        assert sol.b[c] == pytest.approx(want, abs=1e-11)
    np.testing.assert_allclose(sol.A.sum(1), 1.0, atol=1e-12)  # ∫ q_c = 1
    assert abs(sol.b.sum()) < 1e-12                            # ∫ p (f - μ) = 0
    assert sol.mu == pytest.approx(float(np.exp(q * k - np.log(np.exp(q * k).sum())) @ v))


def test_delta_method_and_unnormalised_variance_plug_ins():
    rng = np.random.default_rng(5)
    aw, f, g = rng.exponential(size=(2, 50)), rng.normal(size=(2, 50, 3)), rng.normal(size=3)
    bias, var = theory.snis_delta_bias_variance(aw, f, g, S_c=np.array([1.0, 4.0]))
    want_bias, want_var = np.zeros(3), 0.0
    for c, s in enumerate((1.0, 4.0)):
        d = f[c] - g
        want_bias -= ((aw[c] ** 2)[:, None] * d).mean(0) / s - aw[c].mean() * (aw[c][:, None] * d).mean(0) / s
        want_var += ((aw[c] ** 2) * (d**2).sum(1)).mean() / s - ((aw[c][:, None] * d).mean(0) ** 2).sum() / s
    np.testing.assert_allclose(bias, want_bias, rtol=1e-12)
    assert var == pytest.approx(want_var, rel=1e-12)
    second = sum(((aw[c] ** 2) * (f[c] ** 2).sum(1)).mean() - ((aw[c][:, None] * f[c]).mean(0) ** 2).sum()
                 for c in range(2))
    assert theory.unnormalised_mis_variance(aw, f, 1) == pytest.approx(second, rel=1e-12)
    assert theory.ra_mse([1.0, 2.0], 3.0, [0.0, 0.0], 3) == pytest.approx(6.0)


def test_snis_linearisation_factor_is_the_damped_second_moment_share():
    rng = np.random.default_rng(6)
    aw, f, g = rng.exponential(size=(2, 40)), rng.normal(size=(2, 40, 3)), rng.normal(size=3)
    S = np.array([2.0, 8.0])
    second = (aw**2) * ((f - g) ** 2).sum(-1)
    damped = second / (1 + (aw - aw.mean(1, keepdims=True)) / S[:, None]) ** 2
    assert theory.snis_linearisation_factor(aw, f, g, S) == pytest.approx(damped.mean(1).sum() / second.mean(1).sum(),
                                                                          rel=1e-12)
    # quadrature weights instead of plain means; the factor tends to 1 as S_c grows; equal weights never move Ẑ
    w = rng.dirichlet(np.ones(40), size=2)
    want = (w * damped).sum() / (w * second).sum()
    damped_w = second / (1 + (aw - (w * aw).sum(1, keepdims=True)) / S[:, None]) ** 2
    assert theory.snis_linearisation_factor(aw, f, g, S, weights=w) == pytest.approx(
        (w * damped_w).sum() / (w * second).sum(), rel=1e-12)
    assert want != pytest.approx((w * damped_w).sum() / (w * second).sum(), rel=1e-6)  # the weights matter
    assert abs(1 - theory.snis_linearisation_factor(aw, f, g, 1e9)) < 1e-7
    assert theory.snis_linearisation_factor(np.full((2, 40), 0.5), f, g, 1) == pytest.approx(1.0, abs=1e-15)
    assert theory.snis_linearisation_factor(aw, np.broadcast_to(g, f.shape), g, 4) == 1.0  # no variance: no regime


def test_proposal_log_density_matches_scipy():
    from scipy.stats import multivariate_normal
    rng = np.random.default_rng(8)
    omega, means = rng.normal(size=(5, 3)), rng.normal(size=(2, 3))
    want = np.array([multivariate_normal(m, np.eye(3)).logpdf(omega) for m in means])
    np.testing.assert_allclose(theory.proposal_log_density(omega, means), want, rtol=1e-12)
    comps, log_w = rng.normal(size=(2, 4, 3)), np.log(rng.dirichlet(np.ones(4), size=2))
    mix = np.array([np.log(sum(np.exp(log_w[c, j]) * multivariate_normal(comps[c, j], np.eye(3)).pdf(omega)
                               for j in range(4))) for c in range(2)])
    np.testing.assert_allclose(theory.proposal_log_density(omega, comps, log_w), mix, rtol=1e-12)


def test_unnormalised_mis_variance_matches_monte_carlo():
    # seeded: 4,000 replicates of Eq 8 (C = 2 balance weights); the trace variance's relative error is below 0.15
    # (the sample variance's relative standard error is 0.038 here, measured from 2·10⁶ draws: a false failure
    # needs a 4-sigma excursion, probability below 1e-4)
    # proposals next to p_n's mean keep the importance weights light-tailed (E_q[w²] below 1.2, theory.lara), so
    # that sample variances converge
    rng = np.random.default_rng(9_007_199_254_740_993)
    q, k, v = 0.3 * rng.normal(size=(1, 2)), 0.3 * rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    center = theory.mixture_moments(q, k)[0][0]
    props = mis_est.GaussianProposals(center + np.array([[0.3, 0.0], [-0.2, 0.2]]))
    assert theory.is_weight_second_moment(q, k, props.means[0])[0] < 1.2
    reps = np.array([mis_est.mis_attention(q, k, v, props, rng=rng, weights="balance")[0] for _ in range(4000)])
    big = props.sample(rng, 100_000)
    lq = mis_est.cross_log_density(props, big)
    alpha = mis_est.mis_weights("balance", lq)[0]
    log_w = ra_est.attention_mixture(q, k).logpdf_cross(big)[..., 0] - props.logpdf(big)
    f = rfa_est.integrand(q, k, v, big.reshape(-1, 2))[0].reshape(2, -1, 2)
    predicted = theory.unnormalised_mis_variance(alpha * np.exp(log_w), f, 1)
    assert reps.var(0).sum() == pytest.approx(predicted, rel=0.15)


def test_cost_models_are_linear_and_quadratic():
    flops = lambda g: sum(2 * a * b * c * n for a, b, c, n in g)  # noqa: E731
    ra1, ra2 = flops(theory.ra_gemms(1024, 1024, 64, 64)), flops(theory.ra_gemms(2048, 2048, 64, 64))
    la1, la2 = flops(theory.lara_gemms(1024, 1024, 16, 64, 64)), flops(theory.lara_gemms(2048, 2048, 16, 64, 64))
    assert ra2 / ra1 == pytest.approx(4.0) and la2 / la1 == pytest.approx(2.0, rel=0.05)


def test_appd_grid_solution_reduces_to_the_printed_system_and_is_stationary():
    q, k, v, means = 0.4, np.array([-0.5, 0.2, 1.1]), np.array([2.0, -1.0, 4.0]), np.array([-1.0, 0.3, 1.8])
    printed = theory.appd_d1_solution(q, k, v, means)
    grid = theory.appd_grid_solution(q, k[:, None], v[:, None], means[:, None], step=0.05, margin=12.0)
    np.testing.assert_allclose(grid.r[:, 0], printed.r, rtol=1e-9, atol=1e-13)
    rng = np.random.default_rng(21)
    sol = theory.appd_grid_solution(0.5 * rng.normal(size=2), 0.5 * rng.normal(size=(4, 2)), rng.normal(size=(4, 2)),
                                    rng.normal(size=(3, 2)))
    ag = sol.alpha_times_g()
    np.testing.assert_allclose(np.einsum("g,gcd->cd", sol.weights, ag), sol.r, atol=1e-14)  # r = ∫ α* g
    np.testing.assert_allclose(sol.alpha().sum(axis=1), 1.0, atol=1e-9)                      # Σ_c α* = 1
    optimum = sol.eq20_objective(ag)
    bh = np.exp(sol.log_q - np.logaddexp.reduce(sol.log_q, axis=1)[:, None])
    assert optimum <= sol.eq20_objective(bh[:, :, None] * sol.g[:, None, :])
    for t in (1e-2, 1e-1, 1.0):  # admissible perturbations (Σ_c h_c = 0) never lower Eq 20 (a convex quadratic)
        h = rng.normal(size=(sol.points.shape[0], 3))
        h -= h.mean(axis=1, keepdims=True)
        assert sol.eq20_objective(ag + t * h[:, :, None] * sol.g[:, None, :]) >= optimum


def test_eq20_first_term_and_its_edge_share():
    """Σ_c ∫ ‖α_c g‖²/q_c on the grid from its definition; Eq 20 is it less the squared means; a proposal far outside
    the grid's centre puts its mass on the edge."""
    rng = np.random.default_rng(3)
    sol = theory.appd_grid_solution(0.5 * rng.normal(size=1), 0.5 * rng.normal(size=(3, 1)), rng.normal(size=(3, 1)),
                                    rng.normal(size=(2, 1)))
    ag = softmax(sol.log_q, axis=-1)[:, :, None] * sol.g[:, None, :]
    total, share = sol.eq20_first_term(ag)
    brute = sum(sol.weights[i] * (ag[i] ** 2).sum(-1) @ np.exp(-sol.log_q[i]) for i in range(len(sol.weights)))
    assert total == pytest.approx(brute, rel=1e-12) and 0 <= share < 1e-6
    squares = (np.einsum("g,gcd->cd", sol.weights, ag) ** 2).sum()
    assert sol.eq20_objective(ag) == pytest.approx(total - squares, rel=1e-12)
    edge = np.zeros_like(ag)
    edge[0] = 1.0  # all the integrand on the grid's first point
    assert sol.eq20_first_term(edge)[1] == pytest.approx(1.0)


def test_appd_grid_alpha_matches_the_grid_values():
    rng = np.random.default_rng(22)
    sol = theory.appd_grid_solution(0.5 * rng.normal(size=1), 0.5 * rng.normal(size=(3, 1)), rng.normal(size=(3, 1)),
                                    rng.normal(size=(2, 1)))
    pick = sol.points[::97]
    np.testing.assert_allclose(sol.alpha_at(pick), sol.alpha()[::97], rtol=1e-12, atol=1e-14)
    ag = sol.alpha_times_g()[::97, :, 0]
    np.testing.assert_allclose(sol.alpha_at(pick) * sol.g[::97], ag, rtol=1e-8, atol=1e-14)


def test_cancelled_integrand_is_written_from_its_definition_and_matches_the_estimator():
    # theory computes Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m itself (it must not call the estimator it predicts);
    # rfkit.estimators.rfa.key_statistics's F is an independent implementation of the same quantity
    import inspect

    from rfkit.estimators.rfa import key_statistics
    from rfkit.theory.lara import cancelled_integrand

    rng = np.random.default_rng(0)
    k, v, omega = rng.normal(size=(7, 3)), rng.normal(size=(7, 2)), 3 * rng.normal(size=(5, 4, 3))
    np.testing.assert_allclose(cancelled_integrand(k, v, omega), key_statistics(k, v, omega).F, rtol=1e-12,
                               atol=1e-14)
    assert "key_statistics(" not in inspect.getsource(cancelled_integrand).split('"""')[-1]
