"""Closed-form IS / MIS second moments (rfkit.theory.importance, rfkit.theory.lara) against grid quadrature.

Every reference here is computed from the densities themselves (numpy on a trapezoid grid or scipy's quad), with
no estimator code: the target p_n (Eq 5), the integrand f_n (Eq 6), the proposals and the weighting functions are
written out below. All checks are deterministic.
"""

import math

import numpy as np
import pytest
from scipy import integrate

from rfkit.theory import importance as imp
from rfkit.theory import lara as theory


def _normal(x, mean):
    """``N(x; mean, I)`` for ``x (..., D)``."""
    d = x.shape[-1]
    return np.exp(-0.5 * ((x - mean) ** 2).sum(-1)) / (2 * math.pi) ** (d / 2)


def _grid(d: int, lo: float = -9.0, hi: float = 9.0, step: float = 0.04):
    axis = np.arange(lo, hi + step / 2, step)
    pts = np.stack(np.meshgrid(*([axis] * d), indexing="ij"), axis=-1).reshape(-1, d)
    return pts, step**d


def _target(q_row, k, v, u, x):
    """``p_n(x)`` and ``p_n(x) f_n(x)·u`` from Eq 5-6 directly (softmax over keys of ξ(q,x)ξ(k_m,x))."""
    logits = k @ q_row
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    comps = np.stack([_normal(x, q_row + km) for km in k], axis=-1)     # (P, M)
    p = comps @ pi
    xi = np.exp(x @ (q_row + k).T - 0.5 * (k * k).sum(-1) - 0.5 * q_row @ q_row)  # ξ(q,x)ξ(k_m,x)
    f = (xi / xi.sum(-1, keepdims=True)) @ (v @ u)
    return p, p * f


@pytest.mark.parametrize("num, den, powers", [
    ([[0.3], [-0.4]], [[0.1]], [1.0]),
    ([[0.3], [-0.4], [1.1]], [[0.1]], [2.0]),
    ([[0.5], [0.2], [-0.3]], None, None),
    ([[0.3], [0.7]], [[0.1], [-0.5]], [0.5, 0.5]),
])
def test_log_gaussian_ratio_integral_by_quad(num, den, powers):
    num = np.array(num)
    den_arr = None if den is None else np.array(den)

    def integrand(x):  # in log space: no 0/0 in the tails
        log_n = lambda c: -0.5 * (x - c[0]) ** 2 - 0.5 * math.log(2 * math.pi)  # noqa: E731
        val = sum(log_n(a) for a in num)
        if den_arr is not None:
            val -= sum(e * log_n(c) for c, e in zip(den_arr, powers, strict=True))
        return math.exp(val)

    ref = integrate.quad(integrand, -30, 30, epsabs=0, epsrel=1e-12, limit=200)[0]
    got = math.exp(imp.log_gaussian_product_ratio_integral(num, den_arr, powers))
    assert got == pytest.approx(ref, rel=1e-9)


def test_log_gaussian_ratio_integral_infinite_without_precision():
    # two numerators over a squared denominator: the integrand does not decay
    assert imp.log_gaussian_product_ratio_integral(np.zeros((2, 1)), np.zeros((1, 1)), [2.0]) == np.inf


def test_log_gaussian_ratio_integral_2d_pairwise():
    rng = np.random.default_rng(7)
    a, c = rng.normal(size=(2, 3)), rng.normal(size=3)
    got = imp.log_gaussian_product_ratio_integral(a, c[None])
    assert got == pytest.approx((a[0] - c) @ (a[1] - c), abs=1e-12)


def test_signed_sum_upper_covers_the_sum():
    assert imp.signed_sum_upper([0.0, 0.0], [1, -1]) >= 0.0
    assert imp.signed_sum_upper([math.log(3.0), 0.0], [1, -1]) == pytest.approx(2.0, rel=1e-12)
    assert imp.signed_sum_upper([math.log(3.0), 0.0], [1, -1]) >= 2.0
    assert imp.signed_sum_upper([np.inf], [1]) == np.inf


def _inputs(d, m, seed, scale=0.6):
    rng = np.random.default_rng(seed)
    return rng.normal(0, scale, d), rng.normal(0, scale, (m, d)), rng.normal(size=(m, 2)), rng.normal(size=2)


@pytest.mark.parametrize("d", [1, 2])
def test_is_second_moment_by_grid(d):
    q_row, k, v, u = _inputs(d, 4, 11 + d)
    mu = q_row + 0.7 * np.ones(d) / math.sqrt(d)
    x, dx = _grid(d, step=0.02 if d == 1 else 0.05)
    p, h = _target(q_row, k, v, u, x)
    qd = _normal(x, mu)
    assert theory.is_second_moment(q_row, k, mu, coef=v @ u) == pytest.approx((h**2 / qd).sum() * dx, rel=1e-8)
    assert theory.is_weight_second_moment(q_row[None], k, mu)[0] == pytest.approx((p**2 / qd).sum() * dx, rel=1e-8)


@pytest.mark.parametrize("d", [1, 2])
def test_rfa_delta_variance_by_grid(d):
    """``E_{N(0,I)}[w²‖f_n - μ_n‖²]`` on a grid, with ``w = p_n/N(0, I)`` and ``f_n`` from Eq 5-6 (one value
    coordinate at a time: ``‖·‖²`` is the sum over the coordinates)."""
    q_row, k, v, _ = _inputs(d, 4, 21 + d)
    x, dx = _grid(d, step=0.02 if d == 1 else 0.05)
    qd = _normal(x, np.zeros(d))
    mu = np.exp(k @ q_row - (k @ q_row).max()) @ v / np.exp(k @ q_row - (k @ q_row).max()).sum()
    total = 0.0
    for j in range(v.shape[1]):
        p, pf = _target(q_row, k, v, np.eye(v.shape[1])[j], x)
        total += (((pf - p * mu[j]) / qd) ** 2 * qd).sum() * dx
    assert theory.rfa_delta_variance(q_row, k, v) == pytest.approx(total, rel=1e-7)  # the grid: to ~1e-8


def test_rfa_delta_variance_is_the_limit_of_s_times_rfa_mse():
    """S·MSE of RFA at S = 1000 (1,000 replicates, seed 0) within 4 standard errors of the delta method's limit
    (false-failure rate ~6e-5 plus the O(1/S) bias, ~1% here)."""
    from rfkit.estimators.rfa import rfa_attention

    rng = np.random.default_rng(0)
    q_row, k, v, _ = _inputs(2, 5, 3, scale=0.4)
    logits = k @ q_row
    mu = np.exp(logits - logits.max()) @ v / np.exp(logits - logits.max()).sum()
    s = 1_000
    err = np.array([((rfa_attention(q_row[None], k, v, omega=rng.standard_normal((s, 2)))[0] - mu) ** 2).sum()
                    for _ in range(1_000)]) * s
    assert abs(err.mean() - theory.rfa_delta_variance(q_row, k, v)) <= 4 * err.std(ddof=1) / math.sqrt(err.size)


def _mis_exact(kind, q_row, k, v, u, means, x, dx, *, log_rho=None, delta=None, r=None, kappa=None, coef=True):
    """``Σ_c E_{q_c}[X_c²]`` and ``Σ_c (E X_c)²`` on the grid for weighting ``kind`` (all written out here)."""
    p, h = _target(q_row, k, v, u, x)
    h = h if coef else p
    if log_rho is None:
        qs = np.stack([_normal(x, m) for m in means], axis=-1)                         # (P, C)
    else:
        rho = np.exp(log_rho)
        qs = np.stack([sum(rho[c, j] * _normal(x, means[c, j]) for j in range(means.shape[1]))
                       for c in range(means.shape[0])], axis=-1)
    n_c = qs.shape[1]
    bh = qs / qs.sum(-1, keepdims=True)
    if kind == "balance":
        alpha = bh
    elif kind == "constant":
        alpha = np.broadcast_to(kappa, qs.shape)
    elif kind == "eq9":
        alpha = bh + delta
    elif kind == "eq37":
        alpha = bh + qs * (r - (bh * r).sum(-1, keepdims=True))
    else:
        raise ValueError(kind)
    second = ((alpha * h[:, None]) ** 2 / qs).sum(0) * dx                                 # ∫ α_c² h²/q_c
    first = (alpha * h[:, None]).sum(0) * dx
    assert first.sum() == pytest.approx(h.sum() * dx, rel=1e-9, abs=1e-12)              # unbiased (Σ α = 1)
    assert n_c == len(second)
    return float(second.sum()), float((first**2).sum())


def _setup(d, n_c, seed, spread=1.0):
    q_row, k, v, u = _inputs(d, 4, seed)
    rng = np.random.default_rng(seed + 100)
    center = q_row + k.mean(0)
    means = center + spread * rng.normal(size=(n_c, d))
    return q_row, k, v, u, means


@pytest.mark.parametrize("d", [1, 2])
def test_mis_balance_and_eq9_are_exact_identities_plus_bounds(d):
    q_row, k, v, u, means = _setup(d, 3, 21 + d)
    x, dx = _grid(d, step=0.02 if d == 1 else 0.05)
    for coef in (True, False):
        c = v @ u if coef else None
        exact, first = _mis_exact("balance", q_row, k, v, u, means, x, dx, coef=coef)
        bound = theory.mis_second_moment_bound(q_row, k, means, weights="balance", coef=c)
        assert exact <= bound * (1 + 1e-9)
        var = exact - first
        assert var <= theory.mis_variance_bound(q_row, k, means, weights="balance", coef=c) * (1 + 1e-9)
        # eq9: T + Σ δ_c² I_c exactly; compare with T from the grid (the identity) and the bound
        delta = np.array([0.3, -0.1, -0.2])
        exact9, _ = _mis_exact("eq9", q_row, k, v, u, means, x, dx, delta=delta, coef=coef)
        i_c = [theory.is_second_moment(q_row, k, m, coef=c) for m in means]
        assert exact9 == pytest.approx(exact + float((delta**2) @ i_c), rel=1e-8)
        bound9 = theory.mis_second_moment_bound(q_row, k, means, weights="eq9", delta=delta, coef=c)
        assert exact9 <= bound9 * (1 + 1e-9)
        # constant weights: exact
        kappa = np.array([0.5, 0.3, 0.2])
        exact_c, _ = _mis_exact("constant", q_row, k, v, u, means, x, dx, kappa=kappa, coef=coef)
        assert theory.mis_second_moment_bound(q_row, k, means, weights="constant", kappa=kappa, coef=c) == \
            pytest.approx(exact_c, rel=1e-8)
        # eq37 outer: a bound
        r = np.array([0.6, 0.1, 0.3])
        exact37, _ = _mis_exact("eq37", q_row, k, v, u, means, x, dx, r=r, coef=coef)
        assert exact37 <= theory.mis_second_moment_bound(q_row, k, means, weights="eq37", rprime=r, coef=c) * (1 + 1e-9)


def test_mis_balance_bound_is_not_vacuous():
    # the bound is within a small factor of the exact second moment for overlapping proposals
    q_row, k, v, u, means = _setup(2, 4, 5, spread=0.5)
    x, dx = _grid(2, step=0.05)
    exact, _ = _mis_exact("balance", q_row, k, v, u, means, x, dx, coef=False)
    assert theory.mis_second_moment_bound(q_row, k, means, weights="balance") <= 1.6 * exact


@pytest.mark.parametrize("d", [1, 2])
def test_mis_bounds_with_mixture_proposals(d):
    # Eq 32-like mixtures q_c = Σ_j ρ_cj N(q̃_c + k_j, I): AM-GM bounds of 1/q_c
    q_row, k, v, u = _inputs(d, 4, 31 + d)
    rng = np.random.default_rng(41 + d)
    ql = rng.normal(0, 0.6, (3, d))
    logits = ql @ k.T
    log_rho = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    comps = ql[:, None, :] + k[None, :, :]
    x, dx = _grid(d, step=0.02 if d == 1 else 0.05)
    for coef in (True, False):
        c = v @ u if coef else None
        for kind, opts in (("balance", {}), ("eq9", dict(delta=np.array([0.2, -0.3, 0.1]))),
                           ("eq37", dict(r=np.array([0.2, 0.5, 0.3]))), ("constant", dict(kappa=np.full(3, 1 / 3)))):
            exact, first = _mis_exact(kind, q_row, k, v, u, comps, x, dx, log_rho=log_rho, coef=coef, **opts)
            names = dict(delta="delta", r="rprime", kappa="kappa")
            bound = theory.mis_second_moment_bound(q_row, k, comps, log_rho, weights=kind, coef=c,
                                                   **{names[n]: val for n, val in opts.items()})
            assert exact <= bound * (1 + 1e-9), kind
        # |α| <= 1 (random partitions of unity): bounded by Σ_c I_c
        exact, _ = _mis_exact("balance", q_row, k, v, u, comps, x, dx, log_rho=log_rho, coef=coef)
        assert exact <= theory.mis_second_moment_bound(q_row, k, comps, log_rho, weights="bounded", coef=c)


def test_single_proposal_is_is():
    q_row, k, v, u = _inputs(2, 4, 3)
    mu = np.array([[0.2, -0.1]])
    assert theory.mis_second_moment_bound(q_row, k, mu, weights="single", coef=v @ u) == \
        pytest.approx(theory.is_second_moment(q_row, k, mu[0], coef=v @ u), rel=1e-12)


# ------------------------------------------------------------------------------- fourth moments (group variance)

@pytest.mark.parametrize("d", [1, 2])
def test_gram_fourth_power_integral_by_grid(d):
    q_row, k, v, _ = _inputs(d, 3, 51 + d)
    logits = k @ q_row
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    beta = pi[:, None] * v                                                           # h = Σ_m β_m N(a_m), vector
    a = q_row + k
    c = q_row + 0.4
    x, dx = _grid(d, lo=-14.0, hi=14.0, step=0.02 if d == 1 else 0.05)  # precision 1: wide tails
    h = np.stack([_normal(x, am) for am in a], axis=-1) @ beta                        # (P, D_v)
    ref = float(((h**2).sum(-1) ** 2 / _normal(x, c) ** 3).sum() * dx)
    got = imp.gram_fourth_power_integral(beta @ beta.T, a, divide=c, power=3.0)
    assert got == pytest.approx(ref, rel=1e-7)


def _mis_draws(rng, q_row, k, v, means, kind, n, delta=None):
    """``n`` one-draw-per-proposal MIS estimates ``(n, D_v)`` of ``∫ p_n f_n`` for Gaussian proposals (written out)."""
    n_c, d = means.shape
    omega = means[:, None, :] + rng.standard_normal((n_c, n, d))                      # (C, n, D)
    logits = k @ q_row
    pi = np.exp(logits - logits.max())
    pi /= pi.sum()
    comps = np.stack([_normal(omega, q_row + km) for km in k], axis=-1)               # (C, n, M)
    h = comps @ (pi[:, None] * v)                                                     # p_n f_n: (C, n, D_v)
    qs = np.stack([_normal(omega, m) for m in means], axis=-1)                        # (C, n, C')
    own = qs[np.arange(n_c), :, np.arange(n_c)]
    if kind == "constant":
        alpha = np.full_like(own, 1.0 / n_c)
    else:
        alpha = own / qs.sum(-1) + (0.0 if delta is None else delta[:, None])
    return (alpha[..., None] * h / own[..., None]).sum(0)


@pytest.mark.parametrize("kind", ["constant", "balance", "eq9"])
def test_group_variance_sd_bound_covers_monte_carlo(kind):
    # seeded: 50,000 groups of 8; the bound must cover the sampled sd of the group variance (a sanity check: the bound
    # is several times the true sd here, far beyond the sampling error of the sample sd)
    q_row, k, v, u, means = _setup(2, 3, 61, spread=0.3)  # E_q[w²] <= ~6: moderate tails, a reliable MC
    delta = np.array([0.2, -0.05, -0.15]) if kind == "eq9" else None
    rng = np.random.default_rng(61)
    g = _mis_draws(rng, q_row, k, v, means, kind, 8 * 50_000, delta).reshape(-1, 8, v.shape[1])
    s2 = ((g - g.mean(1, keepdims=True)) ** 2).sum((1, 2)) / 7
    opts = dict(delta=delta) if kind == "eq9" else {}
    bound = theory.mis_group_variance_sd_bound(q_row, k, v, means, weights=kind, group=8, **opts)
    assert s2.std() <= bound
    # and the group variance is unbiased for the trace variance (the exact second moments, grid quadrature)
    x, dx = _grid(2, step=0.05)
    exact = sum(_mis_exact(kind, q_row, k, v, e, means, x, dx, kappa=np.full(3, 1 / 3), delta=delta)[0]
                - _mis_exact(kind, q_row, k, v, e, means, x, dx, kappa=np.full(3, 1 / 3), delta=delta)[1]
                for e in np.eye(2))
    assert s2.mean() == pytest.approx(exact, rel=0.03)  # 50,000 groups: standard error about 0.7% here (seeded)


# ------------------------------------------------------------- quadrature rules used by the lara claim cells

@pytest.mark.parametrize("d, nodes", [(3, 40), (4, 20)])
def test_gauss_hermite_tensor_rule_reproduces_the_second_moment(d, nodes):
    # E_q[w²] by the tensor rule of lara.derived.is_weight_second_moment (20 nodes per axis at D = 4) against the closed
    # form: relative error far below the claim's 1e-8 threshold for proposals within distance 1.4 of the mixture mean
    from numpy.polynomial.hermite_e import hermegauss

    rng = np.random.default_rng(71 + d)
    x, w = hermegauss(nodes)
    w = w / math.sqrt(2 * math.pi)
    grid = np.stack(np.meshgrid(*([x] * d), indexing="ij"), axis=-1).reshape(-1, d)
    weights = np.prod(np.stack(np.meshgrid(*([w] * d), indexing="ij"), axis=-1).reshape(-1, d), axis=1)
    for _ in range(3):
        q_row, k = rng.normal(0, 0.84, d), rng.normal(0, 0.84, (4, d))
        direction = rng.normal(size=d)
        mu = q_row + k.mean(0) + 1.0 * direction / np.linalg.norm(direction)
        logits = k @ q_row
        pi = np.exp(logits - logits.max())
        pi /= pi.sum()
        om = mu + grid
        ratio = np.stack([_normal(om, q_row + km) for km in k], axis=-1) @ pi / _normal(om, mu)
        quad = float(weights @ ratio**2)
        assert quad == pytest.approx(theory.is_weight_second_moment(q_row[None], k, mu)[0], rel=1e-10)


def _cell_context(claim_id, **params):
    from rfkit.validation import cells
    from rfkit.validation.claims import get_claim

    specs = [s for s in cells.plan(get_claim(claim_id), tier="quick", seed=0)
             if all(s.params.get(key) == val for key, val in params.items())]
    return specs[0].context()


@pytest.mark.parametrize("proposal", ["eq34", "eq32"])
def test_proposal_quadrature_of_the_register_formulas_has_converged(proposal, monkeypatch):
    # the Gauss-Hermite rules behind the Eq 20 / unnormalised-variance predictions (80 nodes per axis under a Gaussian
    # proposal, 24 per mixture component) agree with finer rules to 1e-7
    from rfkit.validation.claims.lara import variance as va

    ctx = _cell_context("lara.derived.unnormalised_mis_variance", weights="balance", proposal=proposal)
    q, k, v = va._cell_inputs(ctx, ctx.params["N"])
    lp = va._mis_setup(ctx, q, k)

    def predictions():
        aw, f, w = va._proposal_expectations(ctx, q, k, v, lp, "balance")
        mu = va._softmax_rows(q[:1], k, v)[0]
        return (theory.unnormalised_mis_variance(aw, f, 1, weights=w),
                theory.snis_delta_bias_variance(aw, f, mu, 1, w)[1])

    coarse = predictions()
    monkeypatch.setattr(va, "GH_PROPOSAL_NODES", 120)
    monkeypatch.setattr(va, "GH_MIXTURE_NODES", 40)
    fine = predictions()
    assert coarse == pytest.approx(fine, rel=1e-7)


def test_lara_prefix_replicates_match_lara_replicates():
    from rfkit.validation.claims.lara import variance as va

    ctx = _cell_context("lara.eq10.lara_consistent", weights="eq9_b1_queries", proposal="eq34")
    q, k, v = va._cell_inputs(ctx, ctx.params["N"])
    lp = va._mis_setup(ctx, q, k)
    n_c, R, s_max = lp.proposals.n_components, 5, 16
    omega = lp.proposals.sample(np.random.default_rng(0), R * s_max)
    opts = va._weight_options("eq9_b1_queries")
    alpha = va._weights(opts.pop("kind"), lp.proposals, q, lp.q_landmarks, omega, **opts)[:3]
    om4, al4 = omega.reshape(n_c, R, s_max, -1), alpha.reshape(3, n_c, R, s_max)
    for S, y in zip((1, 4, 16), va._lara_prefix_replicates(q[:3], k, v, lp, om4, al4, (1, 4, 16)), strict=True):
        ref = va._lara_replicates(q[:3], k, v, lp, om4[:, :, :S].reshape(n_c, R * S, -1),
                                  al4[..., :S].reshape(3, n_c, R * S), R)
        np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-14)


def test_group_variance_is_unbiased():
    from rfkit.validation.claims.lara import variance as va

    # seeded: 200,000 groups of N(0, diag(1, 4)) vectors; trace variance 5, standard error ~0.006
    y = np.random.default_rng(5).normal(0, [1.0, 2.0], (va.VARIANCE_GROUP * 200_000, 2))
    assert abs(va._group_variance(y).mean() - 5.0) < 0.05
