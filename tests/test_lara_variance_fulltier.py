"""Full-tier budgets of lara.eq10.lara_consistent and lara.derived.snis_delta_bias_variance: the thinned cartesian
products keep every declared value of every axis (domain and regime) and leave quick and smoke untouched."""

from rfkit.validation.claims.lara import variance


def _values(cells, key):
    return {p[key] for p in cells}


def test_eq10_full_keeps_every_value_one_axis_at_a_time():
    claim = variance.LARA_CONSISTENT
    assert [len(claim.cells("quick", v)) for v in ("L1", "L2", "L3")] == [45, 5, 5]  # quick untouched
    assert [len(claim.cells("smoke", v)) for v in ("L1", "L2", "L3")] == [1, 1, 1]
    grid = claim.grid["full"]
    full = {v: claim.cells("full", v) for v in ("L1", "L2", "L3")}
    assert sum(len(c) for c in full.values()) <= 240
    l1 = full["L1"]
    for key in ("weights", "proposal", "d", "C", "N", "logit_std"):
        assert _values(l1, key) == set(grid[key]), key
    # every weighting x proposal at D = 2 at the base regime, and every regime value at D = 2
    base = [p for p in l1 if p["d"] == 2 and all(p[k] == v for k, v in variance.EQ10_BASE.items())]
    assert len({(p["weights"], p["proposal"]) for p in base}) == 36
    # the generic-input Monte Carlo cells: every value of every axis at D = 8 and at D = 64
    for d in (8, 64):
        mc = [p for p in l1 if p["d"] == d and p["route"] == "monte_carlo"]
        assert 0 < len(mc) <= 14
        for key in ("weights", "proposal", "C", "N", "logit_std"):
            assert _values(mc, key) == set(grid[key]), (d, key)
        emb = [p for p in l1 if p["d"] == d and p["route"] == "exact"]
        for key in ("weights", "C", "N", "logit_std"):
            assert _values(emb, key) == {v for v in grid[key] if key != "weights"
                                         or v in variance.EQ10_OTHER_D_WEIGHTS}, (d, key)
    # L2 sweeps C itself, L3 sweeps N (C = N//16): one copy over the axes they do not read, the rest kept
    for v, unused in (("L2", ("C",)), ("L3", ("C", "N"))):
        assert _values(full[v], "weights") == {"balance", "eq9_b1_queries", "eq9_b2_landmarks"}
        assert _values(full[v], "proposal") == {"eq33", "eq34"}
        assert all(len(_values(full[v], key)) == 1 for key in unused)
        assert _values(full[v], "d") == {2, 8, 64} and _values(full[v], "logit_std") == {0.5, 1.0}
    assert _values(full["L2"], "N") == {64, 196}
    # planted: two regime axes off the base at once are dropped (one axis at a time), one off is kept
    cell = dict(weights="eq9_b1_queries", proposal="eq33", C=16, d=2, N=196, logit_std=0.5, route="exact")
    assert not variance._eq10_where(cell, "L1")
    assert variance._eq10_where(dict(cell, proposal="eq34"), "L1") is False  # C and N both off
    assert variance._eq10_where(dict(cell, proposal="eq34", N=64), "L1")


def test_snis_full_keeps_every_regime_value_and_the_former_grid_at_the_base():
    claim = variance.SNIS_DELTA
    assert len(claim.cells("quick", "default")) == 4 and len(claim.cells("smoke", "default")) == 1
    full = claim.cells("full", "default")
    assert len(full) <= 180
    grid = claim.grid["full"]
    for key in ("S_c", "d", "N", "max_norm", "C", "weights", "proposal"):
        assert _values(full, key) == set(grid[key]), key
    base = [p for p in full if all(p[k] == v for k, v in variance.SNIS_BASE.items())]
    combos = {(p["weights"], p["proposal"], p["C"]) for p in base}
    former = {(w, "eq34", C) for w in variance.SNIS_WEIGHTS for C in (4, 16)} | {("constant", "standard", 1)}
    assert former <= combos
    for key, value in (("d", 8), ("N", 196), ("max_norm", 1.0)):  # each regime axis off the base, whole former grid
        off = {(p["weights"], p["proposal"], p["C"]) for p in full if p[key] == value}
        assert {c for c in former if key != "N" or c[2] <= 4} <= off, key  # N = 196: C <= 4 (cost ∝ C·N)
    assert not any(p["N"] == 196 and p["C"] == 16 for p in full)
    planted = dict(variance.SNIS_BASE, N=196, C=16, weights="balance", proposal="eq34")
    assert not variance._snis_regime(planted) and variance._snis_regime(dict(planted, C=4))
    for S_c in (256, 1024):  # RFA and balance at C = 4 reach the largest S_c
        assert {(p["weights"], p["C"]) for p in full if p["S_c"] == S_c} == {("constant", 1), ("balance", 4)}


def test_eq9_monte_carlo_cells_keep_every_value_one_axis_at_a_time():
    claim = variance.EQ9_UNBIASED_OR_CONSISTENT
    assert len(claim.cells("quick", "default")) == 124 and len(claim.cells("smoke", "default")) == 4
    full = claim.cells("full", "default")
    grid = claim.grid["full"]
    mc = [p for p in full if p["route"] == "monte_carlo" and p["d"] > variance.MIS_QUADRATURE_MAX_D]
    assert 0 < len(mc) <= 32
    for part in ("unbiased", "consistent"):
        for d in (8, 64):
            at = [p for p in mc if p["d"] == d and p["part"] == part]
            for key in ("proposal", "N", "logit_std"):
                assert _values(at, key) == set(grid[key]), (part, d, key)
    # every exact-route cell is kept
    assert len([p for p in full if p["route"] == "exact"]) == 472
    # planted: two axes off the base at once are dropped
    assert not variance._eq9_where(dict(part="unbiased", weights="eq9_b1_queries", proposal="eq33", C=1, d=8,
                                        N=196, logit_std=0.5, route="monte_carlo"), "default")


def test_unnormalised_variance_monte_carlo_cells_one_axis_at_a_time():
    claim = variance.UNNORMALISED_VARIANCE
    assert len(claim.cells("quick", "default")) == 100 and len(claim.cells("smoke", "default")) == 1
    full = claim.cells("full", "default")
    mc = [p for p in full if p["route"] == "monte_carlo"]
    assert 0 < len(mc) <= 20 and {p["d"] for p in mc} == {8}
    assert _values(mc, "weights") == set(variance.MIS_WEIGHTS)
    assert _values(mc, "proposal") == set(variance.VARIANCE_C4_PROPOSALS)
    assert _values(mc, "C") == {2, 4, 16} and _values(mc, "S_c") == {1, 2, 16}
    assert _values(mc, "N") == {16, 196} and _values(mc, "max_norm") == {0.5, 1.0}
    # the exact routes: every quick cell at the base regime and at each of N = 196, norms <= 1 (not both at once)
    exact = [p for p in full if p["route"] == "exact"]
    quick = claim.cells("quick", "default")
    domain = ("weights", "proposal", "C", "S_c", "d")
    key = lambda p: tuple(p[k] for k in domain)  # noqa: E731
    assert {key(p) for p in exact if p["N"] == 16 and p["max_norm"] == 0.5} == {key(p) for p in quick}
    for off in (dict(N=196, max_norm=0.5), dict(N=16, max_norm=1.0)):
        at = {key(p) for p in exact if p["N"] == off["N"] and p["max_norm"] == off["max_norm"]}
        assert at == {key(p) for p in quick if off["N"] == 16 or not variance._embedded(p) and (
            p["proposal"] != "eq32" or p["weights"] in variance.VARIANCE_FEW_WEIGHTS)}, off
    assert not any(p["N"] == 196 and p["max_norm"] == 1.0 for p in exact)
    assert _values([p for p in exact if p["N"] == 196], "weights") == set(variance.MIS_WEIGHTS)
    assert len(exact) == 284
    for k in domain + ("N", "max_norm"):
        assert _values(full, k) == set(claim.grid["full"][k]) if k in claim.grid["full"] else True, k
    # planted: two axes off the base at once are dropped
    assert not variance._variance_monte_carlo_where(dict(variance.VARIANCE_MC_BASE, weights="constant", N=196))
    assert not variance._variance_regime(dict(route="exact", N=196, max_norm=1.0, proposal="eq34", weights="balance"))
    assert variance._variance_regime(dict(route="exact", N=196, max_norm=0.5, proposal="eq34", weights="constant"))
    assert not variance._variance_regime(dict(route="exact", N=196, max_norm=0.5, proposal="eq32", weights="constant"))
    assert variance._variance_regime(dict(route="exact", N=196, max_norm=0.5, proposal="eq32", weights="balance"))


def test_weights_skip_the_cross_densities_they_do_not_read(monkeypatch):
    """Constant and random weightings never compute log q_c'(ω_cj) (O(C²·points·M), the dearest part of a quadrature
    cell with an eq32 proposal); the others do. Planted: computing them for every kind is caught."""
    import numpy as np

    from rfkit.estimators import lara as lara_est
    from rfkit.estimators import mis as mis_est
    from rfkit.validation.claims.lara import statistical

    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((16, 2)) * 0.3, rng.standard_normal((16, 2)) * 0.3
    lp = lara_est.lara_proposals(q, k, 4, proposal="eq32", uneven="adaptive")
    omega = lp.proposals.sample(rng, 16)
    calls = []
    real = mis_est.cross_log_density
    monkeypatch.setattr(mis_est, "cross_log_density", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    for name in variance.MIS_WEIGHTS:
        options = variance._weight_options(name)
        kind = options.pop("kind")
        before = len(calls)
        alpha = statistical._weights(kind, lp.proposals, q, lp.q_landmarks, omega, rng=np.random.default_rng(1),
                                     **options)
        assert np.isfinite(alpha).all() and alpha.shape[-2:] == (4, 16)
        assert (len(calls) > before) == (kind not in ("constant", "random_softmax", "random_signed")), name
    const = statistical._weights("constant", lp.proposals, q, lp.q_landmarks, omega)
    want = mis_est.mis_weights("constant", real(lp.proposals, omega), n_queries=16)
    np.testing.assert_array_equal(const, np.broadcast_to(want, const.shape))


def test_ra_mse_single_sample_cells_use_the_known_range():
    """S = 1 (one draw's squared error, heavy upper tail): a betting sequence on [0, max_m ‖v_m - μ_n‖²] (outputs in
    the values' convex hull); S > 1: the asymptotic sequence. A planted 1/S error is refuted at S = 1 too."""
    import numpy as np

    from rfkit.validation.model import CellContext

    def run(S, impl=None):
        params = dict(estimator="ra", S=S, d=4, N=16, logit_std=1.0)
        ctx = CellContext(variance.RA_MSE.id, "default", params, "smoke", 6_000, 1e-3, 0.8, variance.MSE_TOL,
                          np.random.default_rng(0), impl or {})
        return variance._ra_mse_cell(ctx)

    ev = run(1)
    assert ev.extra["sequence"] == "betting (known range)" and ev.extra["replicate_range"] > 0
    assert ev.upper < variance.MSE_TOL
    assert run(16).extra["sequence"] == "asymptotic"
    # planted: an RA pulled halfway towards v_0 (still in the hull, so in range): its MSE is off the prediction
    from rfkit.estimators import ra as ra_est

    def pulled(q, k, v, **kw):
        y = np.asarray(ra_est.ra_attention(q, k, v, **kw))
        return 0.5 * y + 0.5 * v[0]
    bad = run(1, {"ra_attention": pulled})
    assert bad.effect > variance.MSE_TOL


def test_ra_mse_full_varies_the_regime_one_axis_at_a_time():
    claim = variance.RA_MSE
    assert len(claim.cells("quick", "default")) == 8 and len(claim.cells("smoke", "default")) == 4
    full = claim.cells("full", "default")
    grid = claim.grid["full"]
    assert len(full) <= 40
    for key in ("estimator", "S", "d", "N", "logit_std"):
        assert _values(full, key) == set(grid[key]), key
    base = [p for p in full if all(p[k] == v for k, v in variance.RA_MSE_BASE.items())]
    assert {(p["estimator"], p["S"]) for p in base} == {(e, S) for e in grid["estimator"] for S in grid["S"]}
    for key in ("d", "N", "logit_std"):  # every regime value for both estimators at S = 1 and 16
        for value in grid[key]:
            assert {(p["estimator"], p["S"]) for p in full if p[key] == value} >= {
                (e, S) for e in grid["estimator"] for S in (1, 16)}, (key, value)
    assert not variance._ra_mse_where(dict(estimator="ra", S=16, d=64, N=196, logit_std=0.5), "default")


def test_biased_variance_full_varies_the_regime_one_axis_at_a_time():
    claim = variance.BIASED_RA_VARIANCE
    assert len(claim.cells("quick", "default")) == 6 and len(claim.cells("smoke", "default")) == 2
    full = claim.cells("full", "default")
    grid = claim.grid["full"]
    assert len(full) <= 40
    reduction = [p for p in full if p["part"] == "reduction"]
    for key in ("N", "d", "logit_std", "inputs"):
        assert _values(reduction, key) == set(grid[key]), key
    grows = [p for p in full if p["part"] == "grows_with_N"]
    assert _values(grows, "N") == {16}
    for key in ("d", "logit_std", "inputs"):
        assert _values(grows, key) == set(grid[key]), key
    base = [p for p in reduction if all(p[k] == v for k, v in variance.BIASED_VARIANCE_BASE.items())]
    assert _values(base, "N") == set(grid["N"])
    assert not variance._biased_variance_where(dict(part="reduction", N=196, d=64, logit_std=4.0, inputs="gauss"),
                                               "default")


def test_fused_query_replicates_match_lara_replicates():
    """The delta-method cells' fused one-query LARA equals the harness's _lara_replicates (every weighting kind,
    Gaussian and mixture proposals, D = 1, 8; constant weights broadcast from one evaluation)."""
    import numpy as np

    from rfkit.estimators import lara as lara_est
    from rfkit.validation.claims.lara.statistical import _lara_replicates, _weights

    rng = np.random.default_rng(1)
    for d, n, C, name, proposal in ((1, 16, 4, "eq9_b4_queries", "eq34"), (8, 64, 16, "balance", "eq34"),
                                    (2, 16, 1, "constant", "standard"), (1, 16, 4, "random_signed", "eq33"),
                                    (2, 16, 4, "constant", "eq32")):
        q, k, v = rng.standard_normal((n, d)) * 0.3, rng.standard_normal((n, d)) * 0.3, rng.standard_normal((n, d))
        lp = lara_est.lara_proposals(q, k, C, proposal=proposal, uneven="adaptive")
        R, S = 32, 8
        omega = lp.proposals.sample(rng, R * S)
        options = variance._weight_options(name)
        kind = options.pop("kind")
        alpha = _weights(kind, lp.proposals, q, lp.q_landmarks, omega, rng=np.random.default_rng(1), **options)
        want = _lara_replicates(q[:1], k, v, lp, omega, alpha[:1], R)[:, 0]
        got = variance._lara_query_replicates(q[0], k, v, lp, omega, alpha[0], R)
        assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max(), (d, name, proposal)
        if kind == "constant":  # one evaluation, broadcast (what _delta_cell does)
            got = variance._lara_query_replicates(q[0], k, v, lp, omega, alpha[0][:, :1], R)
            assert np.abs(got - want).max() <= 1e-12 * np.abs(want).max()
        # planted: a replicate's draws taken from another replicate's block changes the estimates
        bad = variance._lara_query_replicates(q[0], k, v, lp, omega[:, ::-1], alpha[0], R)
        assert np.abs(bad - want).max() > 1e-6 * np.abs(want).max()


def test_limit_diagnostic_replicates_hold_the_quick_cost():
    assert variance._limit_diagnostic_replicates(4, 16) == variance.LIMIT_DIAGNOSTIC_REPLICATES  # quick untouched
    assert variance._limit_diagnostic_replicates(1, 16) == variance.LIMIT_DIAGNOSTIC_REPLICATES
    assert variance._limit_diagnostic_replicates(16, 196) == variance.LIMIT_DIAGNOSTIC_MIN
    assert variance._limit_diagnostic_replicates(4, 64) == 50 and variance._limit_diagnostic_replicates(2, 16) == 200


def test_eq10_generic_input_limit_is_exact_from_the_partition_of_unity(monkeypatch):
    """D = 8 generic inputs (full tier): LARA → Σ_c ∫α p̃ f / Σ_c ∫α p̃ = μ_n when Σ_c α_nc(ω) = 1, checked exactly
    on draws, with the own-sample weights LARA runs equal to the common-argument table. A planted table 5% off a
    partition of unity (a limit off by up to ~10%, beyond the 0.05 tolerance) is not passed by the exact route:
    the truncated-MSE slope judges it."""
    import numpy as np

    from rfkit.validation.model import CellContext

    params = dict(weights="eq9_b2_landmarks", proposal="eq34", C=4, d=8, N=64, logit_std=0.5, route="monte_carlo")
    ctx = CellContext("lara.eq10.lara_consistent", "L1", params, "full", 400, 1e-3, 0.8, 0.25,
                      np.random.default_rng(0))
    ev = variance._eq10_cell(ctx)
    assert ev.extra["route"] == "partition of unity" and ev.validity == "exact"
    assert ev.p_value == 1.0 and ev.upper <= 1e-14 and ev.extra["own_weight_gap"] == 0.0

    table = variance.mis_est.weight_table
    monkeypatch.setattr(variance.mis_est, "weight_table", lambda *a, **kw: 1.05 * table(*a, **kw))
    off = variance._eq10_cell(CellContext(ctx.claim_id, "L1", params, "full", 400, 1e-3, 0.8, 0.25,
                                          np.random.default_rng(0)))
    assert off.extra["route"].startswith("truncated MSE slope") and off.validity != "exact"
    assert off.extra["partition_error"] > 0.049
