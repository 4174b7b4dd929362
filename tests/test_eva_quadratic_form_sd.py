"""rfkit.theory.eva.token_fourth_moments / quadratic_form_sd against Gauss–Hermite quadrature and Monte Carlo.

Independent of the estimators: the per-token terms are written here from their definition
``h_m = w_m exp(z·a_m - ‖a_m‖²/2)``, ``a_m = q + k_m - μ``, ``z ~ N(0, I)``."""

import itertools
import math

import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import softmax

from rfkit.theory import eva as theory


def _problem(seed, m=3, d=2, s=0.3, mu="zero"):
    rng = np.random.default_rng(seed)
    q, k, v = s * rng.standard_normal(d), s * rng.standard_normal((m, d)), rng.standard_normal((m, 2))
    mu = np.zeros(d) if mu == "zero" else q + k.mean(axis=0)
    return q, k, v, mu


def _tokens(q, k, mu, z):
    """``X_m = h_m - w_m`` of one draw per row of ``z (..., d)``."""
    w = softmax(k @ q)
    a = q + k - mu
    return w * np.expm1(z @ a.T - 0.5 * np.sum(a * a, axis=1))


def _forms(v, m):
    u = np.array([0.6, -0.8])
    e01 = np.zeros((m, m))
    e01[0, 1] = 1.0
    return {"var_h": np.ones((m, m)), "cov_h": e01, "cov_hg": np.outer(np.ones(m), v @ u), "var_g": v @ v.T}


def _gh_moments(q, k, mu, form, num_samples, nodes=40):
    """``Var[Xᵀ A X]`` with X the mean of ``num_samples`` draws, by tensor Gauss–Hermite over all draws' z."""
    d = q.size
    x, wt = hermegauss(nodes)
    wt = wt / wt.sum()
    dims = d * num_samples
    grid = np.array(list(itertools.product(range(nodes), repeat=dims)))
    z, weight = x[grid], np.prod(wt[grid], axis=1)
    xs = np.mean([_tokens(q, k, mu, z[:, s * d:(s + 1) * d]) for s in range(num_samples)], axis=0)
    quad = np.einsum("ni,ij,nj->n", xs, form, xs)
    mean = weight @ quad
    return mean, weight @ quad**2 - mean**2, np.einsum("n,ni,nj->ij", weight, xs, xs)


@pytest.mark.parametrize("seed,mu", [(0, "zero"), (1, "q+mean_k"), (2, "zero")])
@pytest.mark.parametrize("moment", ["var_h", "cov_h", "cov_hg", "var_g"])
def test_quadratic_form_sd_matches_quadrature_single_draw(seed, mu, moment):
    q, k, v, mu_vec = _problem(seed, mu=mu)
    form = _forms(v, k.shape[0])[moment]
    mean, var, cov = _gh_moments(q, k, mu_vec, form, 1, nodes=60)
    c, _ = theory.token_fourth_moments(q, k, mu_vec, 1)
    np.testing.assert_allclose(c, cov, rtol=1e-9, atol=1e-14)
    assert theory.quadratic_form_sd(q, k, mu_vec, form, 1) == pytest.approx(math.sqrt(var), rel=1e-7)


@pytest.mark.parametrize("moment", ["var_h", "cov_h", "cov_hg", "var_g"])
def test_quadratic_form_sd_matches_quadrature_two_draws(moment):
    q, k, v, mu = _problem(3, d=1, s=0.5)
    form = _forms(v, k.shape[0])[moment]
    _, var, _ = _gh_moments(q, k, mu, form, 2, nodes=50)
    assert theory.quadratic_form_sd(q, k, mu, form, 2) == pytest.approx(math.sqrt(var), rel=1e-7)


def test_quadratic_form_sd_matches_monte_carlo_eight_draws():
    q, k, v, mu = _problem(4, m=4, d=2, s=0.2)
    rng = np.random.default_rng(5)
    form = v @ v.T
    n, num_samples = 400_000, 8
    xs = _tokens(q, k, mu, rng.standard_normal((n, num_samples, 2))).mean(axis=1)
    quad = np.einsum("ni,ij,nj->n", xs, form, xs)
    sd = theory.quadratic_form_sd(q, k, mu, form, num_samples)
    # the sample variance of 400k replicates: relative error of a few 1e-3 for these light-ish tails
    assert np.std(quad) == pytest.approx(sd, rel=0.05)


def test_var_h_form_matches_weight_moment_formula():
    """``A = 11ᵀ`` gives ``(h - 1)²``: ``μ₄(h) = μ₄(W)/S³ + 3(S - 1)Var[W]²/S³`` with the raw moments of W."""
    q, k, _, mu = _problem(6, m=4, d=2, s=0.4)
    w, a = softmax(k @ q), q + k - mu
    g = a @ a.T
    raw = [sum(np.prod(w[list(idx)]) * math.exp(sum(g[i, j] for i, j in itertools.combinations(idx, 2)))
               for idx in itertools.product(range(4), repeat=p)) for p in (2, 3, 4)]
    var_w, mu4_w = raw[0] - 1.0, raw[2] - 4 * raw[1] + 6 * raw[0] - 3
    for s in (1, 8):
        mu4_h = mu4_w / s**3 + 3 * (s - 1) * var_w**2 / s**3
        expected = math.sqrt(mu4_h - (var_w / s) ** 2)
        assert theory.quadratic_form_sd(q, k, mu, np.ones((4, 4)), s) == pytest.approx(expected, rel=1e-9)
