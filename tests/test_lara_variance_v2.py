"""lara variance claims in the v2 declaration: lara.eq8.mis_unbiased (domain, the exact quadrature route for D <= 2
and a planted bug it must refute), and the ports of trig_negative_density, ra_mse_decomposition,
ra_eval_index_sampling, optimal_weights, eq20.delta_method_variance and snis_delta_bias_variance."""

import dataclasses

import numpy as np
import pytest

from rfkit.estimators import mis
from rfkit.validation.claims.lara import variance
from rfkit.validation.engine import coverage_table
from rfkit.validation.model import CellContext


def _ctx(**params):
    base = dict(weights="balance", proposal="eq34", C=4, d=2, N=16, logit_std=0.5)
    base.update(params)
    return CellContext("lara.eq8.mis_unbiased", "default", base, "quick", 1_000, 0.05, 0.8, 0.05,
                       np.random.default_rng(0))


def test_eq8_domain_and_coverage():
    claim = variance.EQ8_MIS_UNBIASED
    assert set(claim.domain) == {"weights", "proposal", "C", "d"} and not claim.readings
    table = coverage_table(claim)
    assert table["full"]["default"]["covered"]
    # quick covers every weighting, proposal and C by the exact route (D <= 2)
    quick = table["quick"]["default"]
    assert quick["covered"], quick["coverage"]


@pytest.mark.parametrize("weights,proposal,C,d", [("balance", "eq34", 4, 2), ("eq9_b4_queries", "eq34", 16, 1),
                                                  ("random_signed", "custom_2", 2, 2), ("constant", "eq32", 2, 2),
                                                  ("balance", "standard", 1, 2)])
def test_eq8_quadrature_is_exact(weights, proposal, C, d):
    ev = variance._mis_unbiased_route(_ctx(weights=weights, proposal=proposal, C=C, d=d))
    assert ev.extra["route"] == "quadrature"
    assert max(ev.extra["bias_A"] + ev.extra["bias_B"]) < 1e-5


@pytest.mark.parametrize("weights,proposal,d", [("balance", "eq34", 64), ("eq9_b4_queries", "eq32", 8),
                                                ("constant", "eq35_printed_M", 64)])
def test_eq8_embedded_route_is_exact_at_large_d(weights, proposal, d):
    """D > 2: rank-2 inputs in R^D, the 2-D rule lifted to D-dimensional nodes (issue 14: D is a domain axis)."""
    ev = variance._mis_unbiased_route(_ctx(weights=weights, proposal=proposal, d=d, route="exact"))
    assert ev.extra["route"] == "embedded quadrature"
    assert max(ev.extra["bias_A"] + ev.extra["bias_B"]) < 1e-5 and ev.upper <= 0.05


@pytest.mark.parametrize("weights", ["eq37_outer", "random_softmax"])
def test_eq8_blocks_of_nodes_and_replicates_change_nothing(monkeypatch, weights):
    """The quadrature's nodes and the Monte Carlo's replicates run in memory-bounded blocks (full-tier cells peaked
    at 8 GiB): tiny blocks give the same expectations (random weights: one partition of unity for the whole cell)
    and as many replicates of the same law as one block (blocks of 20,000 elements: several per cell; 1,000 took a
    minute of CI)."""
    quad = lambda: variance._mis_unbiased_route(_ctx(weights=weights, proposal="eq32"))  # noqa: E731
    mc = lambda: variance._mis_unbiased_cell(_ctx(weights=weights, proposal="eq32", d=8))  # noqa: E731
    whole_quad, whole_mc = quad(), mc()
    monkeypatch.setattr(variance, "CROSS_BLOCK_ELEMENTS", 20_000)
    blocked_quad, blocked_mc = quad(), mc()
    np.testing.assert_allclose(blocked_quad.extra["bias_A"] + blocked_quad.extra["bias_B"],
                               whole_quad.extra["bias_A"] + whole_quad.extra["bias_B"], rtol=0, atol=1e-12)
    # the Monte Carlo's draws come from the stream in another order: the same number, the same law
    assert blocked_mc.n == whole_mc.n and not blocked_mc.flags
    assert abs(blocked_mc.estimate - whole_mc.estimate) <= 5 * (blocked_mc.stderr + whole_mc.stderr) + 1e-12


def test_eq8_embedded_route_refutes_a_dimension_bug(monkeypatch):
    """A planted dimension bug (q_c's log density off by D/100, as a wrong normalising constant would be) shifts
    E[B] by e^{D/100} at D = 64 and is refuted; the route checks its ξ⊥-invariance."""
    weights = variance._weights
    monkeypatch.setattr(variance, "_weights", lambda kind, props, q, lm, omega, **k:
                        weights(kind, props, q, lm, omega, **k) * np.exp(omega.shape[-1] / 100))
    ev = variance._mis_unbiased_route(_ctx(d=64, route="exact"))
    assert ev.effect > 0.5 and ev.p_value == 0.0


def _generic(**params):
    # the full tier's undecidable Monte Carlo cell: E_q[w²] of the far custom Gaussians at D = 64 put theory's variance
    # bound at a Catoni radius of 8.7e34 for 2.4e6 replicates
    return _ctx(**dict(dict(weights="balance", proposal="custom_2", d=64, route="monte_carlo"), **params))


def test_eq8_change_of_measure_decides_where_monte_carlo_cannot():
    ev = variance._mis_unbiased_cell(_generic())
    assert ev.extra["route"] == "change of measure" and max(ev.extra["gap_B"]) < 1e-10
    assert ev.upper <= 0.05 and ev.p_value > 0.05 and not ev.flags

    # where the bound lets the budget decide (a radius at most half the tolerance), the proposals' own samples are used
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(variance, "required_replicates", lambda *a, **k: 0.0)
        assert "route" not in variance._mis_unbiased_cell(_generic(weights="constant", proposal="eq34", d=8)).extra


def test_eq8_change_of_measure_refutes_planted_bugs(monkeypatch):
    # seeded (rng 0), 10,000 draws per query; the betting test's level is the cell's (0.05 here): f_n pulled halfway
    # to one value is biased by 0.29 max|v| here (tolerance 0.05, resolution 0.004)
    monkeypatch.setattr(variance, "CHANGE_OF_MEASURE_DRAWS", 10_000)
    weights, key_statistics = variance._weights, variance.rfa_est.key_statistics
    with monkeypatch.context() as mp:  # the weights sum to 1.1: E[B] = 1.1, exactly
        mp.setattr(variance, "_weights", lambda *a, **k: 1.1 * weights(*a, **k))
        ev = variance._mis_unbiased_cell(_generic())
        assert ev.p_value == 0.0 and ev.effect >= 0.1 - 1e-6
    with monkeypatch.context() as mp:  # sum to 1 + 1e-6: B within tolerance, and A is still tested (f_n biased)
        mp.setattr(variance, "_weights", lambda *a, **k: (1 + 1e-6) * weights(*a, **k))
        mp.setattr(variance.rfa_est, "key_statistics", lambda k, v, omega: dataclasses.replace(
            key_statistics(k, v, omega), F=0.5 * key_statistics(k, v, omega).F + 0.5 * v[0]))
        ev = variance._mis_unbiased_cell(_generic())
        assert ev.p_value < 0.05 and ev.effect > 0.2
    with monkeypatch.context() as mp:  # f_n pulled halfway to the first value: still in the values' hull, biased
        mp.setattr(variance.rfa_est, "key_statistics", lambda k, v, omega: dataclasses.replace(
            key_statistics(k, v, omega), F=0.5 * key_statistics(k, v, omega).F + 0.5 * v[0]))
        assert variance._mis_unbiased_cell(_generic()).p_value < 0.05
    with monkeypatch.context() as mp:  # f_n outside the values' hull: Y unbounded, never supported
        mp.setattr(variance.rfa_est, "key_statistics", lambda k, v, omega: dataclasses.replace(
            key_statistics(k, v, omega), F=key_statistics(k, v, omega).F + np.abs(v).max()))
        ev = variance._mis_unbiased_cell(_generic())
        assert ev.method == "undecided" and "hull" in ev.flags[0]
    with monkeypatch.context() as mp:  # a density ratio that is wrong by a factor varying with ω: never supported
        original = mis.GaussianProposals.logpdf
        mp.setattr(mis.GaussianProposals, "logpdf", lambda self, omega: original(self, omega) + 0.01 * omega[..., 0])
        ev = variance._mis_unbiased_cell(_generic())
        assert ev.method == "undecided" and "varies with ω" in ev.flags[0]


def test_d_is_a_domain_axis_covered_at_quick():
    for claim in (variance.EQ8_MIS_UNBIASED, variance.EQ9_UNBIASED_OR_CONSISTENT, variance.LARA_CONSISTENT,
                  variance.UNNORMALISED_VARIANCE):
        axis = claim.domain["d"]
        assert axis.lo == 1 and axis.up_to == 64 and axis.why
        for variant, row in coverage_table(claim)["quick"].items():
            if variant in ("default", "L1"):
                assert "d: tested {1, 2, 8, 64}" in str(row["coverage"]), (claim.id, row["coverage"])


def test_eq8_quadrature_refutes_weights_not_summing_to_one(monkeypatch):
    weights = variance._weights
    monkeypatch.setattr(variance, "_weights", lambda *a, **k: 1.1 * weights(*a, **k))
    ev = variance._mis_unbiased_route(_ctx())
    assert max(ev.extra["bias_B"]) == pytest.approx(0.1, abs=1e-6)
    assert ev.p_value == 0.0 and ev.effect > 0.05  # a violation beyond the tolerance (exact: decided)


def test_eq9_and_variance_cover_their_domains_at_quick():
    for claim in (variance.EQ9_UNBIASED_OR_CONSISTENT, variance.UNNORMALISED_VARIANCE):
        assert claim.domain is not None and not claim.readings
        row = coverage_table(claim)["quick"]["default"]
        assert row["covered"], (claim.id, row["coverage"])
    assert set(variance.EQ9_UNBIASED_OR_CONSISTENT.domain["part"].values) == {"unbiased", "consistent"}


def _eq9_ctx(**params):
    base = dict(part="consistent", weights="eq9_b2_landmarks", proposal="eq34", C=4, d=2, N=16, logit_std=0.5)
    base.update(params)
    return CellContext("lara.eq9.unbiased_or_consistent", "default", base, "quick", 3_200, 0.05, 0.8, 0.05,
                       np.random.default_rng(0))


def test_eq9_consistency_limit_is_exact_and_refutes_a_biased_denominator(monkeypatch):
    ev = variance._eq9_cell(_eq9_ctx())
    assert ev.extra["route"] == "quadrature limit" and max(ev.extra["limit_error"]) < 1e-6
    assert len(ev.extra["truncated_mse"]) == len(variance.LARA_SC)
    weights = variance._weights
    # weights summing to 1 + 0.5 on the first proposal only: E[A]/E[B] is no longer μ_n
    monkeypatch.setattr(variance, "_weights", lambda *a, **k: weights(*a, **k) * np.array([1.5, 1, 1, 1])[:, None])
    bad = variance._mis_quadrature_cell(_eq9_ctx(part="unbiased"), "eq9_b1_queries")
    assert bad.effect > 0.05


def _variance_ctx(**params):
    base = dict(weights="balance", proposal="eq34", C=4, S_c=1, d=2, N=16, inputs="norm", max_norm=0.5)
    base.update(params)
    return CellContext("lara.derived.unnormalised_mis_variance", "default", base, "quick", 6_000, 0.001, 0.8, 0.1,
                       np.random.default_rng(0))


def test_unnormalised_variance_control_variate_decides():
    ev = variance._unnormalised_variance_cell(_variance_ctx())
    assert ev.upper <= 0.1 and ev.extra["sd_under_claim"] > 0


def test_unnormalised_variance_embedded_route_at_d64():
    ev = variance._unnormalised_variance_cell(_variance_ctx(d=64, route="exact"))
    assert ev.extra["route"].startswith("embedded") and ev.upper <= 0.1


def _plug_in_ctx(**params):
    return dataclasses.replace(_variance_ctx(d=8, route="monte_carlo", max_norm=1.0, **params), tier="full",
                               replicates=40_000)


def test_unnormalised_variance_plug_in_cell_is_non_asymptotic_where_theory_bounds_it():
    """Generic inputs at D = 8 (plug-in reference): the replicate's variance is at most 2V² and V at most theory's
    proven bound, so a Catoni sequence decides (seed 0; the full tier's cell at norms <= 1 was flagged 'heavy tails'
    under the asymptotic sequence)."""
    ev = variance._unnormalised_variance_cell(_plug_in_ctx())
    assert ev.validity == "non-asymptotic" and ev.upper <= 0.1 and not ev.flags, ev
    assert ev.extra["variance_bound"] >= ev.extra["predicted"]


def test_eq9_embedded_limit_is_exact_at_d64():
    ev = variance._eq9_cell(_eq9_ctx(d=64, route="exact"))
    assert ev.extra["route"] == "embedded quadrature limit" and max(ev.extra["limit_error"]) < 1e-6
    assert ev.extra["xi_invariance_gap"] < 1e-8


@pytest.mark.parametrize("route,min_effect", [("quadrature", 1.0), ("plug_in", 0.1)])
def test_unnormalised_variance_refutes_shared_draws(monkeypatch, route, min_effect):
    """A planted dependence (one standard-normal draw shared by all proposals) makes the cross terms non-zero: caught
    by the quadrature route (D = 2) and by the plug-in route (D = 8, Catoni at theory's bound)."""
    setup = variance._mis_setup

    class Shared(mis.GaussianProposals):
        def sample(self, rng, size):
            return self.means[:, None, :] + rng.standard_normal((size, self.means.shape[1]))[None]

    def shared_setup(ctx, q, k):
        lp = setup(ctx, q, k)
        return dataclasses.replace(lp, proposals=Shared(**{f.name: getattr(lp.proposals, f.name)
                                                                  for f in dataclasses.fields(lp.proposals)}))

    monkeypatch.setattr(variance, "_mis_setup", shared_setup)
    ev = variance._unnormalised_variance_cell(_variance_ctx() if route == "quadrature" else _plug_in_ctx())
    assert ev.effect > min_effect and ev.upper > 0.1  # beyond the tolerance, never supported


def test_eq10_readings_name_their_words_and_l1_is_exact():
    claim = variance.LARA_CONSISTENT
    assert set(claim.readings) == {"L1", "L2", "L3"}
    assert all(r.words and not r.narrows for r in claim.readings.values())
    assert coverage_table(claim)["quick"]["L1"]["covered"]
    ctx = CellContext(claim.id, "L1", dict(weights="eq9_b2_landmarks", proposal="eq32", C=4, d=2, N=16,
                                           logit_std=0.5), "quick", 8_000, 0.05, 0.8, 0.25, np.random.default_rng(0))
    ev = variance._eq10_cell(ctx)
    assert ev.extra["route"] == "quadrature limit" and ev.effect < 1e-6


# ------------------------------------------------------------------ eq31 (biased RA) and eq36 (balance heuristic)


def test_biased_ra_bias_literal_reading_decides_and_covers_the_generators():
    claim = variance.BIASED_RA_BIAS
    assert set(claim.domain) == {"inputs"} and claim.deciding() == ["train"]
    assert claim.beside("eval")
    table = coverage_table(claim)
    assert table["quick"]["train"]["covered"] and table["quick"]["eval"]["covered"]
    assert "declared threshold" in claim.units


def test_biased_ra_variance_parts_are_a_domain_choice():
    claim = variance.BIASED_RA_VARIANCE
    assert not claim.readings and set(claim.domain["part"].values) == {"reduction", "grows_with_N"}
    assert coverage_table(claim)["quick"]["default"]["covered"]
    assert claim.search_settings("quick") == dict(iterations=40, draws=2_000)


def _grows_ctx():
    params = dict(part="grows_with_N", N=16, d=8, logit_std=1.0, inputs="gauss")
    return CellContext("lara.eq31.biased_ra_variance", "default", params, "quick", 2_000, 1e-3, 0.8, 0.05,
                       np.random.default_rng(0))


def test_biased_ra_variance_grows_cell_refutes_a_shrinking_reduction(monkeypatch):
    # planted: the relative reduction 1 - ρ is 0.5 at the short sequence and 0.2 at the long one
    monkeypatch.setattr(variance, "_relative_reductions",
                        lambda ctx, n, R: ctx.rng.normal(0.5 if n == variance.SHORT_N else 0.2, 0.1, R))
    ev = variance._biased_variance_cell(_grows_ctx())
    assert ev.extra["ratio"][1] > ev.extra["ratio"][0] and ev.p_value < 1e-6 and ev.effect > 0.05


def test_eq36_tests_signed_weightings_under_the_cited_bound():
    claim = variance.BH_NEAR_OPTIMAL
    assert set(claim.domain["weighting"].values) == {"nonnegative", "signed"}
    assert claim.deciding() == ["R1"] and claim.beside("R2")
    assert coverage_table(claim)["quick"]["R1"]["covered"]
    sol = variance.theory.appd_grid_solution(*variance._nonnegative_problem(np.random.default_rng(1), 3, 5,
                                                                             "separated"))
    signed = variance._bh_competitors(np.random.default_rng(0), sol, 3, "signed")
    assert all(np.allclose(a.sum(axis=1), 1.0) for a in signed) and min(a.min() for a in signed) < 0
    nonneg = variance._bh_competitors(np.random.default_rng(0), sol, 3, "nonnegative")
    assert all(np.allclose(a.sum(axis=1), 1.0) and a.min() >= 0 for a in nonneg)


#: The full tier's witness of eq36 R1 (seed 0, search restart 0): query and keys near +3, proposals at -6, a
#: non-negative softmax partition. Its printed margin, -1.9e42 μ², was round-off and truncation of variances ~1e62 μ².
EQ36_FULL_WITNESS = [2.9979991040498772, 2.996283986963771, -3.0, 4.900992130865184, 3.5801532480028916e-06,
                     -6.0, -6.0, -6.0, 4.0, 4.0, 4.0, 3.999818209591331, 3.999818209342181, 3.9998182158594564,
                     6.193355060380972e-06]


def _eq36_margin(x, step=0.15, margin=8.0, constant=False):
    x = np.asarray(x)
    C, M = 3, 2
    offset = 1 + 2 * M + C
    q, k, v = x[:1], x[1:1 + M].reshape(M, 1), np.abs(x[1 + M:1 + 2 * M]).reshape(M, 1)
    sol = variance.theory.appd_grid_solution(q, k, v, x[1 + 2 * M:offset].reshape(C, 1), step=step, margin=margin)
    alpha = (np.full((sol.points.shape[0], C), 1 / C) if constant else
             variance._signed_partition(sol.points, x[offset:offset + 2 * C], C, float(x[offset + 2 * C])))
    return variance._veach_margin(sol, alpha, float(sol.mu[0]) ** 2, variance.BH_REDUCTION_TOL)


def test_eq36_margin_the_grid_cannot_resolve_is_no_evidence():
    """The full tier refuted R1 by a margin of -1.9e42 μ² that flipped sign with the grid (the Veach–Guibas bound
    holds there: every proposal is the same, so BH = 1/C and Var_BH - Var_α <= (1 - 1/C)μ² by Cauchy–Schwarz).
    Such a margin is now unresolved (NaN): the search looks elsewhere and a cell is undecided, never refuted."""
    for step, margin in [(0.15, 8.0), (0.1, 16.0), (0.05, 24.0)]:
        assert np.isnan(_eq36_margin(EQ36_FULL_WITNESS, step, margin))
    # proposals near the target: BH's integral is whole. Constant weights put mass on a proposal's thin tail (their
    # variance is cut short by the grid): the grid's margin is a lower bound, and already far inside the bound
    near = list(EQ36_FULL_WITNESS)
    near[5:8] = [0.0, 3.0, 6.0]
    assert _eq36_margin(near, constant=True) > 1e10
    ev = variance._bh_evidence([np.nan, 0.3], 0.1)
    assert ev.p_value == 1.0 and ev.flags == (variance.UNRESOLVED,)
    assert variance._bh_evidence([np.nan, -0.5], 0.1).effect == pytest.approx(0.5)  # a resolved violation refutes
    assert variance._bh_evidence([0.2, 0.3], 0.1).upper <= 0.1


def test_eq36_cell_refutes_a_resolved_violation_and_searches_past_unresolved_inputs(monkeypatch):
    """Planted: every competitor beats BH by 0.5 μ² beyond the slack; the cell refutes it. The search's objective
    is +inf (no evidence) where the margin is unresolved."""
    ctx = CellContext(variance.BH_NEAR_OPTIMAL.id, "R1", dict(weighting="nonnegative", C=4, M=5,
                                                              placement="overlapping"),
                      "quick", 0, 1e-3, 0.8, variance.BH_NEAR_OPTIMAL.tolerance, np.random.default_rng(0))
    assert variance._bh_cell(ctx).upper <= variance.BH_NEAR_OPTIMAL.tolerance  # the real margins hold
    monkeypatch.setattr(variance, "_veach_margin", lambda sol, alpha, mu_sq, tolerance: -0.5)
    assert variance._bh_cell(ctx).effect == pytest.approx(0.5)
    seen = []
    monkeypatch.setattr(variance, "minimize_margin", lambda margin, bounds, **kw: seen.append(margin(
        np.asarray(EQ36_FULL_WITNESS))) or type("R", (), dict(margin=0.0, x=np.zeros(1)))())
    monkeypatch.setattr(variance, "_veach_margin", lambda sol, alpha, mu_sq, tolerance: float("nan"))
    variance._bh_search(dataclasses.replace(ctx, params=dict(iterations=1), restart=0))
    assert seen == [float("inf")]


# ------------------------------------------------ lara.appc.trig_negative_density, lara.derived.ra_mse_decomposition


def test_trig_and_ra_mse_domains_are_the_statements_parts_covered_at_quick():
    trig, mse = variance.TRIG_NEGATIVE, variance.RA_MSE
    assert set(trig.domain["map"].values) == {"trig_sincos", "trig_cos_phase", "positive", "hyperbolic"}
    assert set(mse.domain["estimator"].values) == {"ra", "biased_ra"} and mse.domain["S"].up_to == 16
    for claim in (trig, mse):
        assert not claim.readings and claim.paper == "lara"
        for tier in ("smoke", "quick"):
            row = coverage_table(claim)[tier]["default"]
            assert row["covered"], (claim.id, tier, row["coverage"])
    assert trig.search_settings("quick") == dict(iterations=80)


@pytest.mark.parametrize("fmap,negative", [("trig_sincos", True), ("trig_cos_phase", True), ("positive", False),
                                           ("hyperbolic", False)])
def test_trig_cell_per_map(fmap, negative):
    ctx = CellContext(variance.TRIG_NEGATIVE.id, "default", dict(map=fmap, d=2, M=2, logit_std=1.0), "quick", 0,
                      0.05, 0.8, 1e-12, np.random.default_rng(0))
    ev = variance._trig_cell(ctx)
    assert (ev.extra["min_relative_density"] < 0) == negative
    assert ev.effect <= 1e-12  # the statement's part holds for this map


def test_trig_search_takes_its_iterations_from_search_params():
    ctx = CellContext(variance.TRIG_NEGATIVE.id, "default", dict(iterations=5), "full", 0, 0.05, 0.8, 1e-12,
                      np.random.default_rng(0), restart=1)
    ev = variance._trig_search(ctx)
    assert ev.effect <= 1e-12


# ------------------------------------------------------------------------------- lara.g2.ra_eval_index_sampling


def test_eval_index_readings_name_the_undefined_word_and_cover_inputs():
    claim = variance.EVAL_INDEX
    assert set(claim.readings) == {"d1", "d2", "d3"}
    assert all(r.words == variance.EVAL_WORDS and not r.beside for r in claim.readings.values())
    for tier in ("smoke", "quick"):
        table = coverage_table(claim)[tier]
        assert all(table[r]["covered"] for r in claim.readings), (tier, table)
    assert claim.search_settings("smoke") == dict(iterations=45)


def test_eval_index_search_reads_its_iterations_from_search_params():
    ctx = CellContext(variance.EVAL_INDEX.id, "d3", dict(iterations=5), "full", 0, 0.05, 0.8, 0.05,
                      np.random.default_rng(0), restart=1)
    ev = variance._eval_search(ctx)
    assert len(ev.extra["x"]) == 2 + 3 * 2 + 3


# ------------------------------------------------------------------------------- lara.sec4_1.optimal_weights


def test_optimal_weights_domain_covered_and_search_params():
    claim = variance.OPTIMAL_WEIGHTS
    assert set(claim.domain) == {"C"} and not claim.readings
    for tier in ("smoke", "quick"):
        assert coverage_table(claim)[tier]["default"]["covered"], tier
    ctx = CellContext(claim.id, "default", dict(iterations=5), "full", 0, 0.05, 0.8, 1e-6, np.random.default_rng(0),
                      restart=1)
    assert variance._optimal_search(ctx).effect <= 1e-6


# ------------------------------------------- lara.eq20.delta_method_variance, lara.derived.snis_delta_bias_variance


def test_delta_claims_declare_the_mis_domain_covered_at_full_only():
    eq20, snis = variance.EQ20_DELTA, variance.SNIS_DELTA
    for claim in (eq20, snis):
        assert set(claim.domain) == {"weights", "proposal", "C"} and not claim.readings
        table = coverage_table(claim)
        assert table["full"]["default"]["covered"], (claim.id, table["full"]["default"]["coverage"])
        assert not table["quick"]["default"]["covered"]  # honest: quick runs 3 weightings of 9
    assert snis.id in eq20.related and eq20.id in snis.related


def test_delta_cell_uses_one_random_partition_for_prediction_and_replicates():
    params = dict(weights="random_softmax", proposal="custom_2", C=2, S_c=1, d=1, N=16, inputs="norm",
                  max_norm=0.5)
    ctx = CellContext(variance.EQ20_DELTA.id, "default", params, "full", 200, 0.05, 0.8, 0.25,
                      np.random.default_rng(0))
    ev = variance._delta_cell(ctx)
    assert ev.extra["quadrature"] and ev.extra["predicted"] > 0


def _snis_ctx(replicates=2_000, **params):
    base = dict(weights="balance", proposal="eq34", C=2, S_c=64, d=1, N=16, inputs="norm", max_norm=0.5)
    return CellContext(variance.SNIS_DELTA.id, "default", dict(base, **params), "full", replicates, 1e-3, 0.8, 0.1,
                       np.random.default_rng(7))


def test_snis_delta_cell_runs_in_the_leading_order_regime():
    # seeded (rng 7), budget 2,000 groups of 8; a pre-asymptotic grid S_c (κ = 0.92 at 64, the full tier's rejected
    # cells had κ down to 1e-9) is doubled until |1 - κ| <= 0.05, and the cell decides there
    ev = variance._snis_delta_cell(_snis_ctx())
    assert ev.extra["kappa_at_grid"] < 0.95 <= ev.extra["kappa"] and ev.extra["S_c_run"] == 128
    assert ev.p_value > 1e-3 and ev.effect <= 0.1
    # where the regime lies beyond the cap the cell is undecided and says what S_c it needs
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(variance, "LEADING_ORDER_MAX_DRAWS", 64)
        ev = variance._snis_delta_cell(_snis_ctx())
    assert ev.method == "undecided" and "needs S_c = 128 samples per proposal" in ev.flags[0]


def test_snis_delta_cell_refutes_a_wrong_prediction_in_the_regime(monkeypatch):
    # planted: the leading-order variance 30% too large (false-failure rate of the check: the cell's alpha, 1e-3)
    original = variance.theory.snis_delta_bias_variance
    monkeypatch.setattr(variance.theory, "snis_delta_bias_variance",
                        lambda *a, **k: (original(*a, **k)[0], 1.3 * original(*a, **k)[1]))
    ev = variance._snis_delta_cell(_snis_ctx())
    assert ev.extra["S_c_run"] == 128 and ev.p_value < 1e-3


def test_group_variances_of_nonnegative_weightings_lie_within_the_hull_bound():
    """With weights non-negative by construction every LARA estimate is a convex combination of the values, so a
    group's sample trace variance is at most group_variance_bound: the known range of the delta cells' replicates
    (a betting sequence on it runs beside the asymptotic one; a replicate outside it would be an error). Checked on
    2,000 groups of sparse convex combinations (seed 3), and by running each such weighting's cell on proposals off
    p_n's bulk (custom_0.5, 400 groups); planted: a group outside the hull exceeds the bound, and Eq 9 (β = 1) is not
    declared non-negative."""
    rng = np.random.default_rng(3)
    v = rng.standard_normal((16, 2))
    bound = variance.group_variance_bound(v, variance.VARIANCE_GROUP)
    for _ in range(2000):
        mix = rng.dirichlet(np.full(16, 0.05), size=variance.VARIANCE_GROUP)
        assert variance._group_variance(mix @ v)[0] <= bound * (1 + 1e-12)
    corners = np.array([v[np.argmax(v[:, 0])], v[np.argmin(v[:, 0])]] * (variance.VARIANCE_GROUP // 2))
    assert variance._group_variance(3.0 * corners)[0] > bound
    assert "eq9_b1_queries" not in variance.NONNEGATIVE_WEIGHTS
    for weights in variance.NONNEGATIVE_WEIGHTS:
        ev = variance._snis_delta_cell(_snis_ctx(replicates=400, weights=weights, proposal="custom_0.5"))
        assert ev.extra["replicate_bound"] > 0 and ev.extra["known_range"][1] >= ev.extra["replicate_bound"]


# ------------------------------------------- full-tier budget: thinned cartesian products keep every declared value


def _values(cells, key):
    return {p[key] for p in cells}


def test_eq8_monte_carlo_cells_keep_every_value_one_axis_at_a_time():
    claim = variance.EQ8_MIS_UNBIASED
    full = claim.cells("full", "default")
    mc = [p for p in full if p.get("route") == "monte_carlo" and p["d"] > variance.MIS_QUADRATURE_MAX_D]
    assert 0 < len(mc) <= 60
    assert len(claim.cells("quick", "default")) == 180  # quick untouched
    grid = claim.grid["full"]
    for d in (8, 64):
        at_d = [p for p in mc if p["d"] == d]
        for key in ("weights", "proposal", "C", "N", "logit_std"):
            assert _values(at_d, key) == set(grid[key]), (d, key)
    # every exact-route cell is kept (only the Monte Carlo product is thinned)
    exact = [p for p in full if p.get("route", "exact") == "exact"]
    assert len(exact) == sum(1 for p in full if variance._mis_unbiased_where(p, "default")
                             and p.get("route", "exact") == "exact")
    # planted: a where that drops a weighting at D > 2 loses that value
    assert not variance._eq8_monte_carlo_where(dict(variance.EQ8_MC_BASE, weights="eq37_outer", C=16))


def test_eq20_full_keeps_every_regime_value_and_the_domain_product():
    claim = variance.EQ20_DELTA
    assert len(claim.cells("quick", "default")) == 12 and len(claim.cells("smoke", "default")) == 1
    full = claim.cells("full", "default")
    assert len(full) <= 300
    grid = claim.grid["full"]
    for key in ("S_c", "d", "N", "max_norm", "C", "weights", "proposal"):
        assert _values(full, key) == set(grid[key]), key
    base = [p for p in full if all(p[k] == v for k, v in variance.EQ20_BASE.items())]
    pairs = {(p["weights"], p["proposal"], p["C"]) for p in base}
    for w in variance.DELTA_FULL_WEIGHTS:
        for prop in variance.DELTA_FULL_PROPOSALS:
            if w in grid["weights"]:
                assert {(w, prop, C) for C in (4, 16, 49)} <= pairs, (w, prop)
