"""lara statistical claims in the v2 declaration (domain, readings, routes, coverage): the design covers the
statement's domain at quick, the exact routes are accurate where the v2 grids newly reach (IS at distance 6, E_q[w²]
at D = 4 and distance 2), and planted bugs there are refuted."""

import dataclasses

import numpy as np
import pytest
from scipy.special import logsumexp, softmax

from rfkit.estimators import is_estimate
from rfkit.estimators import ra as ra_est
from rfkit.validation.claims.lara import statistical as st
from rfkit.validation.claims.lara.inputs import attention_inputs, unit_vectors
from rfkit.validation.engine import coverage_table, validate
from rfkit.validation.model import CellContext

PORTED = [st.IS_UNBIASED, st.RA_UNBIASED, st.EQ30_SAMPLER, st.MIXTURE_MOMENTS, st.IS_WEIGHT_SECOND_MOMENT]


def _run(claim, tier="smoke", **options):
    return validate([claim], tier=tier, seed=0, progress=False, **options).claims[0]


def _ctx(claim, params, tier="quick"):
    return CellContext(claim.id, claim.variants[0], params, tier, 1_000, 1e-3, 0.8, claim.tolerance,
                       np.random.default_rng(0))


@pytest.mark.parametrize("claim", PORTED, ids=lambda c: c.id)
def test_domain_is_covered_at_quick_and_full(claim):
    assert claim.domain is not None
    table = coverage_table(claim)
    for tier in ("quick", "full"):
        for variant, row in table[tier].items():
            assert row["covered"], (tier, variant, row["coverage"])


def test_ra_literal_reading_decides_and_the_fast_path_is_beside():
    assert st.RA_UNBIASED.deciding() == ["literal"]
    assert st.RA_UNBIASED.beside("simplified")


@pytest.mark.parametrize("d", [1, 2])
def test_is_quadrature_is_exact_at_every_distance(d):
    """E_q[w f·u] and E_q[w] by Gauss-Hermite under q = N(μ, I) equal μ_n·u and 1 to round-off up to distance 6."""
    rng = np.random.default_rng(d)
    for M in (1, 8, 196):
        q, k, v = attention_inputs("gauss", rng, M, M, d, None, 0.5)
        u = unit_vectors(rng, 1, v.shape[1])[0]
        target = float(st._softmax_rows(q[:1], k, v)[0] @ u)
        mean = ra_est.attention_mixture(q[:1], k).mean()[0]
        ctx = _ctx(st.IS_UNBIASED, dict(proposal="shifted"))
        for t in st.IS_DISTANCES:
            g, b = st._is_quadrature(ctx, q, k, v, u, mean + t * unit_vectors(rng, 1, d)[0])
            assert abs(g - target) <= 1e-12 * np.abs(v).max() and abs(b - 1.0) <= 1e-12, (M, t)


def test_is_cells_route_as_declared():
    cells = st.IS_UNBIASED.cells("quick", "default")
    exact = [c for c in cells if c["route"] == "exact"]
    assert {c["d"] for c in exact} == {1, 2} and all(c["S"] == 1 for c in exact)
    assert any(c["proposal"] == "shifted" and c["distance"] == st.IS_DISTANCES for c in exact)
    assert not any(c["proposal"] == "eq34" and c["M"] == 1 for c in cells)
    assert all((c["proposal"] == "shifted") == (c["distance"] is not None) for c in cells)
    assert {c["d"] for c in cells if c["route"] == "mc"} == {1, 8, 64}


def test_planted_is_bias_is_refuted_by_the_exact_route():
    def biased(values, *, weights=None, log_weights=None, **kw):
        return 1.1 * is_estimate(values, weights=weights, log_weights=log_weights, **kw)

    assert _run(st.IS_UNBIASED, implementations={"is_estimate": biased}).verdict == "refuted"


def test_ra_identical_keys_and_one_key_are_judged_exactly():
    for params in (dict(N=16, d=16, S=1, logit_std=1.0, inputs="identical_keys"),
                   dict(N=1, d=4, S=4, logit_std=1.0, inputs="gauss")):
        ev = st._ra_unbiased_cell(_ctx(st.RA_UNBIASED, params))
        assert ev.effect <= 1e-9 and not ev.flags, (params, ev.flags)


def test_planted_ra_bias_on_identical_keys_is_refuted():
    def shifted(q, k, v, **kw):
        return ra_est.ra_attention(q, k, v, **kw) + 0.2 * np.abs(v).max()

    ctx = _ctx(st.RA_UNBIASED, dict(N=16, d=4, S=1, logit_std=1.0, inputs="identical_keys"))
    ctx.implementations = {"ra_attention": shifted}
    assert st._ra_unbiased_cell(ctx).effect > 0.1


@pytest.mark.parametrize("d", [1, 4, 8, 64])
def test_weight_second_moment_pairwise_quadrature_in_every_d(d):
    """The one-dimensional rule per pair (m, m') agrees with theory's closed form to 1e-12 in every D (the full
    tier's D = 8, M = 8 cells, Monte Carlo only before, needed up to 3.6e9 replicates and stayed undecided)."""
    for logit_std in (0.5, 1.0):
        for M in (1, 2, 8):
            params = dict(d=d, M=M, distance=2.0, logit_std=logit_std)
            ev = st._weight_moment_cell(_ctx(st.IS_WEIGHT_SECOND_MOMENT, params, tier="full"))
            pred = ev.extra["predicted"]
            assert abs(ev.extra["quadrature"] - pred) <= 1e-12 * pred, (M, logit_std)
            assert ev.upper <= st.IS_WEIGHT_SECOND_MOMENT.tolerance and not ev.flags, (M, logit_std, ev.flags)


def test_weight_second_moment_planted_closed_form_error_is_refuted(monkeypatch):
    """A 1% error in the closed form (the prediction) is refuted by the quadrature alone, at D = 8, M = 8."""
    right = st.theory.is_weight_second_moment
    monkeypatch.setattr(st.theory, "is_weight_second_moment", lambda *a, **kw: 1.01 * right(*a, **kw))
    params = dict(d=8, M=8, distance=1.0, logit_std=1.0)
    ev = st._weight_moment_cell(_ctx(st.IS_WEIGHT_SECOND_MOMENT, params, tier="full"))
    assert ev.p_value < 1e-3 and ev.effect > st.IS_WEIGHT_SECOND_MOMENT.tolerance


def test_sampler_claims_are_linked():
    assert "lara.derived.mixture_moments" in st.EQ30_SAMPLER.related
    assert "lara.eq30.mixture_sampler" in st.MIXTURE_MOMENTS.related
    assert "lara.derived.is_weight_second_moment" in st.IS_UNBIASED.related
    assert "lara.sec2_3.is_unbiased" in st.IS_WEIGHT_SECOND_MOMENT.related


# ------------------------------------------------------------------ lara.prop3_2.softmax_expectation

def test_prop32_domain_is_covered_at_quick_and_full():
    table = coverage_table(st.PROP32)
    for tier in ("quick", "full"):
        for variant, row in table[tier].items():
            assert row["covered"], (tier, variant, row["coverage"])


def test_prop32_identity_route_is_exact_at_d64_m784():
    for inputs in ("gauss", "zero_keys", "identical_keys"):
        params = dict(route="identity", d=64, M=784, logit_std=4.0, values="large", inputs=inputs, design="sparse")
        ev = st._prop32_cell(_ctx(st.PROP32, params))
        assert ev.effect <= 1e-3 and not ev.flags, (inputs, ev.effect, ev.flags)


def test_prop32_identical_keys_are_judged_exactly_by_the_integral_route():
    # f_n is the mean of the values whatever ω when every key is the same: the Monte Carlo route judges it exactly
    # (the full tier's M = 2 cell spent 400,000 replicates of a constant and stayed undecided before)
    for inputs in ("identical_keys", "zero_keys"):
        params = dict(route="integral", d=8, M=2, logit_std=1.0, values="gaussian", inputs=inputs, design="sparse")
        ev = st._prop32_cell(_ctx(st.PROP32, params))
        assert ev.p_value > 1e-3 and ev.effect <= 1e-9 and ev.n <= 1_000 and not ev.flags, (inputs, ev)
    # planted: a bias in F is still seen there (the shortcut does not skip the comparison)
    original = st.rfa_est.key_statistics
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(st.rfa_est, "key_statistics",
                   lambda k, v, omega: dataclasses.replace(original(k, v, omega), F=original(k, v, omega).F + 0.1))
        params = dict(route="integral", d=8, M=2, logit_std=1.0, values="gaussian", inputs="identical_keys",
                      design="sparse")
        assert st._prop32_cell(_ctx(st.PROP32, params)).p_value < 1e-3


def test_prop32_monte_carlo_rounds_are_sized_by_theory_and_still_see_a_bias():
    """The stratified estimate's sd is at most ‖π‖₂(max v·u - min v·u)/2: the rounds are planned for 4x what that
    needs, not the budget (at M = 784 the budget's first round took 500-1,300 s); a planted bias of 5% of max|v|
    in F (2.5x the threshold) is still refuted."""
    params = dict(route="integral", d=8, M=196, logit_std=1.0, values="gaussian", inputs="gauss", design="sparse")
    ctx = dataclasses.replace(_ctx(st.PROP32, params), replicates=400_000)
    ev = st._prop32_cell(ctx)
    assert ev.extra["planned"] < 400_000 / 4 and ev.n < 12_500 and ev.upper <= 1.0 and ev.p_value > 1e-3
    assert ev.extra["sd_bound"] > 0
    original = st.rfa_est.key_statistics
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(st.rfa_est, "key_statistics", lambda k, v, omega: dataclasses.replace(
            original(k, v, omega), F=original(k, v, omega).F + 0.05 * np.abs(v).max()))
        assert st._prop32_cell(dataclasses.replace(ctx, rng=np.random.default_rng(0))).p_value < 1e-3


def test_prop32_planted_f_bug_is_refuted_by_the_identity_route(monkeypatch):
    original = st.rfa_est.key_statistics

    def tilted(k, v, omega):
        stats = original(k, v, omega)
        return dataclasses.replace(stats, F=stats.F * 1.001)

    monkeypatch.setattr(st.rfa_est, "key_statistics", tilted)
    params = dict(route="identity", d=64, M=784, logit_std=1.0, values="gaussian", inputs="gauss", design="sparse")
    assert st._prop32_cell(_ctx(st.PROP32, params)).effect > 1.0


# ------------------------------------------------------------------ lara.eq1.kernel_expectation

def test_eq1_domain_is_covered_at_every_tier():
    table = coverage_table(st.EQ1_KERNEL)
    for tier in ("smoke", "quick", "full"):
        for variant, row in table[tier].items():
            assert row["covered"], (tier, variant, row["coverage"])


def test_eq1_exact_cells_sweep_the_register_grid_at_full():
    exact = [c for c in st.EQ1_KERNEL.cells("full", "default") if c["route"] == "exact"]
    assert len(exact) == len(st.XI_MAPS)
    assert all(len(st._geometries(c)) == len(st.NORMS) ** 2 * len(st.ANGLES) for c in exact)


def test_eq1_exact_sweep_is_exact_for_every_map():
    for fmap in st.XI_MAPS:
        params = dict(route="exact", feature=fmap, d=2, S=1, **st.EQ1_QUICK_SWEEP)
        assert st._eq1_cell(_ctx(st.EQ1_KERNEL, params)).effect <= 1.0, fmap


# ------------------------------------------------------------------ lara.derived.kernel_relative_variance

def test_kernel_variance_covered_and_the_phase_map_is_beside():
    table = coverage_table(st.KERNEL_VARIANCE)
    for tier in ("smoke", "quick", "full"):
        assert table[tier]["literal"]["covered"], (tier, table[tier]["literal"]["coverage"])
    assert st.KERNEL_VARIANCE.deciding() == ["literal"]
    assert st.KERNEL_VARIANCE.beside("phase_map")
    assert "lara.eq1.kernel_expectation" in st.KERNEL_VARIANCE.related
    assert "lara.derived.kernel_relative_variance" in st.EQ1_KERNEL.related


def test_kernel_variance_planted_formula_error_is_refuted(monkeypatch):
    original = st.theory.kernel_relative_variance
    monkeypatch.setattr(st.theory, "kernel_relative_variance", lambda *a, **k: 1.01 * original(*a, **k))
    params = dict(route="exact", feature="positive", d=2, S=1, **st.VARIANCE_QUICK_SWEEP)
    assert st._kernel_variance_cell(_ctx(st.KERNEL_VARIANCE, params)).effect > 1.0


# ------------------------------------------------------------------ lara.sec3_1.rfa_biased / rfa_consistent

def test_rfa_biased_existential_reading_decides_and_every_input_is_beside():
    assert st.RFA_BIASED.deciding() == ["exists"]
    assert st.RFA_BIASED.beside("every")
    assert "lara.sec3_1.rfa_consistent" in st.RFA_BIASED.related
    assert "lara.sec3_1.rfa_biased" in st.RFA_CONSISTENT.related
    table = coverage_table(st.RFA_BIASED)
    for tier in ("quick", "full"):
        assert table[tier]["exists"]["covered"], (tier, table[tier]["exists"]["coverage"])


def test_rfa_bias_witness_reproduces_from_its_seed():
    ctx = _ctx(st.RFA_BIASED, dict(S=4, d=2, inputs="search"))
    ev = st._rfa_biased_cell(ctx)
    assert ev.upper <= st.RFA_BIAS_RESOLUTION and not ev.flags and ev.p_value == 1.0
    w = ev.extra["witness"]
    q, k, v = attention_inputs(w["inputs"], np.random.default_rng(w["seed"]), w["N"], w["M"], 2, None,
                               w["logit_std"])
    mu = st._softmax_rows(q[:1], k, v)[0]
    y = st._rfa_replicates(q[:1], k, v, np.random.default_rng(1).standard_normal((20_000, 4, 2)))[:, 0]
    assert np.linalg.norm(y.mean(axis=0) - mu) > 10 * y.std(axis=0).max() / np.sqrt(len(y))


def test_rfa_bias_without_a_witness_is_undecided_not_a_failure(monkeypatch):
    # identical keys: f_n constant, RFA exact, no candidate can show a bias
    monkeypatch.setattr(st, "RFA_BIAS_CANDIDATES", (("identical_keys", 1.0, 4), ("single_key", 1.0, 4)))
    ev = st._rfa_biased_cell(_ctx(st.RFA_BIASED, dict(S=4, d=2, inputs="search")))
    assert ev.p_value == 1.0 and ev.flags and "no witness" in ev.flags[0]
    assert len(ev.extra["candidates_tried"]) == 2


def test_rfa_is_exact_on_degenerate_inputs_so_the_universal_reading_fails():
    for inputs in ("single_key", "identical_keys"):
        ev = st._rfa_biased_cell(_ctx(st.RFA_BIASED, dict(S=8, d=4, inputs=inputs)))
        assert ev.p_value == 0.0 and ev.extra["max_abs_error"] <= 1e-12, inputs


def test_rfa_consistent_quick_covers_what_it_can_decide_and_full_covers_the_domain():
    table = coverage_table(st.RFA_CONSISTENT)
    assert table["full"]["default"]["covered"], table["full"]["default"]["coverage"]
    assert table["quick"]["default"]["covered"], table["quick"]["default"]["coverage"]
    for params in (dict(inputs="gauss", logit_std=0.0, d=4, N=16), dict(inputs="gauss", logit_std=1.0, d=4, N=1)):
        ev = st._rfa_consistent_cell(_ctx(st.RFA_CONSISTENT, dict(S_max=512, design="sparse", **params)))
        assert ev.validity == "exact" and ev.effect <= 1e-12 and ev.p_value == 1.0, params


@pytest.mark.parametrize("params", [dict(inputs="peaked", logit_std=1.0, d=4, N=16),
                                    dict(inputs="gauss", logit_std=4.0, d=64, N=196)], ids=["peaked", "gauss-4-64"])
def test_rfa_consistent_pre_asymptotic_cell_is_decided_by_the_strong_law(params):
    """E_q[w²] beyond S_max/4 (here ~1e285 and ~1e40): no feasible S reaches the 1/S regime, so the cell checks that
    RFA is the ratio of two sample means of iid terms with finite means (exact, on draws) and the strong law gives
    the limit; an RFA whose keys miss the -‖k_m‖²/2 of the positive map (a biased limit) is refuted."""
    ctx = _ctx(st.RFA_CONSISTENT, dict(S_max=512, design="dense", **params))
    ev = st._rfa_consistent_cell(ctx)
    assert ev.validity == "exact" and ev.p_value == 1.0 and ev.effect <= 1e-13 and ev.extra["route"] == "strong law"
    assert ev.extra["weight_second_moment"] > 1e30

    def no_key_norm(q, k, v, *, omega, **kw):  # ξ(k, ω) = exp(ω·k): keys of larger norm weigh more
        log_t = omega @ k.T                                                                     # (S, M)
        log_w = omega @ q.T + logsumexp(log_t, axis=1)[:, None]                                 # (S, N)
        f = softmax(log_t, axis=1) @ v                                                          # (S, D_v)
        return softmax(log_w, axis=0).T @ f

    bad = st._rfa_consistent_cell(dataclasses.replace(ctx, rng=np.random.default_rng(0),
                                                      implementations={"rfa_attention": no_key_norm}))
    assert bad.p_value < 1e-3 and bad.effect > 1e-6


#: A cell the rate route decides at the test context's 1,000 replicates (predicted range share ~0.04).
_RATE_CELL = dict(S_max=512, design="sparse", inputs="gauss", logit_std=0.25, d=16, N=2)


def test_rfa_consistent_rate_route_tests_the_role_not_only_its_own_rfa():
    """The rate route measures the MSE of RFA computed from its definition (nested prefixes); rfa_attention, the
    role, must be that estimator at every measured size: a planted RFA without the keys' -‖k_m‖²/2 (a biased limit)
    fails the cell exactly, where it used to reach only the strong-law cells."""
    ctx = _ctx(st.RFA_CONSISTENT, _RATE_CELL)
    ev = st._rfa_consistent_cell(ctx)
    assert ev.extra["route"] == "rate" and ev.extra["identity_error"] <= 1e-13 and ev.validity == "non-asymptotic"
    assert ev.upper <= st.RFA_CONSISTENT.tolerance

    def no_key_norm(q, k, v, *, omega, **kw):
        log_t = omega @ k.T
        log_w = omega @ q.T + logsumexp(log_t, axis=1)[:, None]
        return softmax(log_w, axis=0).T @ (softmax(log_t, axis=1) @ v)

    bad = st._rfa_consistent_cell(dataclasses.replace(ctx, rng=np.random.default_rng(0),
                                                      implementations={"rfa_attention": no_key_norm}))
    assert bad.validity == "exact" and bad.p_value < 1e-3 and bad.effect > 1e-6


def test_rfa_consistent_rate_route_doubles_its_replicates_until_the_secant_decides(monkeypatch):
    """Undecided looks (planted: the first two report an upper bound of 1) double the replicates; the decision is
    at the third look, whose p-value is reported times RATE_LOOKS (Bonferroni over the looks)."""
    calls, real = [], st.secant_slope_test

    def spy(x, replicates, *args, **kwargs):
        assert kwargs["alpha"] == pytest.approx(1e-3 / st.RATE_LOOKS)
        calls.append((len(replicates), real(x, replicates, *args, **kwargs)))
        return calls[-1][1] if len(calls) == 3 else dataclasses.replace(calls[-1][1], upper=1.0, effect=0.0)

    monkeypatch.setattr(st, "secant_slope_test", spy)
    ev = st._rfa_consistent_cell(_ctx(st.RFA_CONSISTENT, _RATE_CELL))
    assert [n for n, _ in calls] == [1_000, 2_000, 4_000] and ev.extra["looks"] == 3 and ev.upper <= 0.25
    assert ev.p_value == min(1.0, st.RATE_LOOKS * calls[-1][1].p_value)


def test_rfa_consistent_rate_undecided_at_every_look_is_decided_by_the_strong_law_and_reported(monkeypatch):
    """A rate the secant leaves undecided after RATE_LOOKS looks (planted: upper bound 1 at every look) does not
    leave the cell undecided: the strong law decides it exactly, and the undecided rate is reported beside. A
    planted inconsistent estimator is still caught (exactly, by the identity)."""
    real = st.secant_slope_test
    monkeypatch.setattr(st, "secant_slope_test", lambda *a, **kw: dataclasses.replace(real(*a, **kw), upper=1.0,
                                                                                       effect=0.0))
    ev = st._rfa_consistent_cell(_ctx(st.RFA_CONSISTENT, _RATE_CELL))
    assert ev.extra["route"] == "strong law" and ev.validity == "exact" and ev.effect <= 1e-13
    assert ev.extra["rate_undecided"]["upper"] == 1.0 and ev.extra["rate_undecided"]["replicates"] == 8_000


def test_rfa_consistent_routes_cells_the_rate_cannot_resolve_to_the_strong_law_before_any_draw():
    """gauss, logit std 0.25, D = 1, N = 16 at 1,000 replicates: the squared errors' range (max_m ‖v_m - μ‖²)
    over the last look's replicates is ~11 times the delta method's MSE at S = 64 times log(RATE_LOOKS/α), so no
    betting bound can resolve the slope: the cell goes to the strong law, and says how many replicates the rate
    would need."""
    ev = st._rfa_consistent_cell(_ctx(st.RFA_CONSISTENT, dict(_RATE_CELL, d=1, N=16)))
    assert ev.extra["route"] == "strong law" and ev.extra["range_share"] > st.RATE_RANGE_SHARE
    assert ev.extra["replicates_needed"] > 8 * 1_000 * 10


@pytest.mark.slow
def test_rfa_consistent_full_tier_cell_once_falsely_refuted_is_not_refuted():
    """The full tier's cell (seed 0) smooth inputs, logit std 1, D = 1, N = 196: its sample MSE is flat at ~3e-5
    over S = 16..64 while the delta method's is ~2.5e-3 at 64 (rare draws carry it), and a normal quantile on the
    sample refuted consistency (p = 4.5e-13). The bounded secant is undecided and the strong law decides (~30 s)."""
    from rfkit.validation.cells import plan

    spec = next(c for c in plan(st.RFA_CONSISTENT, tier="full", seed=0)
                if (c.params["inputs"], c.params["logit_std"], c.params["d"], c.params["N"]) == ("smooth", 1.0, 1, 196))
    ev = st._rfa_consistent_cell(spec.context())
    assert ev.p_value == 1.0 and ev.extra["route"] == "strong law" and ev.extra["rate_undecided"]["upper"] > 0.25


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_is_heavy_weight_cell_is_decided_by_control_variates_and_a_planted_bias_is_not_hidden(seed):
    """N(0, I) at D = 8 (E_q[w²] ~ 1e1-1e2: theory's sd needs more than the plan): the control variates of known
    mean decide the cell at any seed, and a 1.1x estimator is not supported (its residual varies, so the raw replicate
    with theory's sd judges it: undecided at this budget)."""
    params = dict(route="mc", proposal="standard", distance=None, d=8, M=8, S=16, logit_std=0.5, design="sparse")

    def ctx(**kw):
        c = _ctx(st.IS_UNBIASED, params)
        return dataclasses.replace(c, rng=np.random.default_rng(seed), **kw)

    ev = st._is_cell(ctx())
    assert not ev.flags and ev.upper <= st.IS_UNBIASED.tolerance and ev.p_value > 1e-3

    def biased(values, *, weights=None, log_weights=None, **kw):
        return 1.1 * is_estimate(values, weights=weights, log_weights=log_weights, **kw)

    bad = st._is_cell(ctx(implementations={"is_estimate": biased}))
    assert bad.upper > st.IS_UNBIASED.tolerance and bad.validity != "exact"  # refuted or undecided, never supported


@pytest.mark.parametrize("params", [dict(d=64, M=1, S=1, logit_std=1.0), dict(d=8, M=1, S=16, logit_std=2.0)],
                         ids=["D64-M1-S1", "D8-M1-S16"])
def test_is_control_variate_residual_constant_to_round_off_is_judged_exactly(params):
    """Full-tier cells where the reference's residual Y - Σ_m c_m (X_m - 1) is constant to round-off (M = 1 or
    large logits): its mean is that constant, judged exactly; the Catoni sequence of equal replicates carried the
    'frozen generator' flag there and left 12 of the full tier's 312 cells undecided. A 1.1x estimator's residual
    is not constant: it goes to the sequence, judged with its own heavy-tailed spread, and is not supported."""
    params = dict(route="mc", proposal="standard", distance=None, design="dense", **params)
    ctx = _ctx(st.IS_UNBIASED, params, tier="full")
    ev = st._is_cell(ctx)
    assert not ev.flags and ev.p_value == 1.0 and ev.upper <= 1e-6, (ev.flags, ev.upper)
    assert ev.validity == "exact"  # both parts by the constant residual

    def biased(values, *, weights=None, log_weights=None, **kw):
        return 1.1 * is_estimate(values, weights=weights, log_weights=log_weights, **kw)

    bad = st._is_cell(dataclasses.replace(ctx, implementations={"is_estimate": biased}))
    assert bad.upper > st.IS_UNBIASED.tolerance and bad.validity != "exact"  # not supported: its own spread


def test_cross_log_mixture_in_blocks_equals_one_pass(monkeypatch):
    """The blocked cross density (memory bounded: a full-tier cell asked for 2.6 GiB at once) is the one-pass one,
    including a last short block; its layout is (N, ...) of omega's leading axes."""
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    omega = rng.standard_normal((2, 7, 4))
    whole = ra_est.attention_mixture(q, k).logpdf_cross(omega.reshape(-1, 4)).T.reshape(3, 2, 7)
    monkeypatch.setattr(st, "CROSS_BLOCK_ELEMENTS", 4 * 3 * 5)  # four points per block: 14 = 4 + 4 + 4 + 2
    np.testing.assert_array_equal(st.cross_log_mixture(q, k, omega), whole)
