"""Full-tier budgets of the performer MSE claims and the load-robust Eq 1 timing (issue 13): the Monte Carlo
routes keep every d and every m of the full grid, and the best-of-blocks slope fit still refutes a faster growth."""

import pytest

from rfkit.validation.cells import plan
from rfkit.validation.claims.performer import attention, common, moments, regimes


@pytest.mark.parametrize("claim", [moments.MSE_TRIG, moments.MSE_POS, moments.MSE_HYP, moments.RELATIVE_MSE,
                                   regimes.HYP_VS_POS_2M], ids=lambda c: c.id)
def test_full_monte_carlo_route_keeps_every_d_and_m(claim):
    mc = [s.params for s in plan(claim, tier="full", seed=0) if s.kind == "grid" and s.params["route"] == "mc"]
    bound = regimes.HYP_MC_WORK if claim is regimes.HYP_VS_POS_2M else moments.MC_MSE_WORK
    assert all(p["m"] * p["d"] <= bound for p in mc)
    assert {p["m"] for p in mc} == set(common.G_M)
    assert {p["d"] for p in mc} >= set(common.G_D) - {1}


def test_full_renormalizer_grid_keeps_every_axis_value_and_the_largest_m_for_trig():
    claim = attention.TRIG_NONPOSITIVE_RENORMALIZER
    cells = [s.params for s in plan(claim, tier="full", seed=0) if s.kind == "grid"]
    assert all(p["L"] * p["m"] * p["d"] <= attention.RENORMALIZER_WORK for p in cells)
    assert {p["regime"] for p in cells} == {"i1", "sphere", "obtuse"}
    assert {p["scale"] for p in cells} == {0.1, 0.25, 0.5, 1.0, 2.0, 3.0}
    for regime in ("i1", "sphere", "obtuse"):
        mine = [p for p in cells if p["regime"] == regime]
        assert {p["L"] for p in mine} >= {64, 256} and {p["m"] for p in mine} == {16, 64, 256}  # I1: m = 256 at L = 1
        assert {p["d"] for p in mine} == {16, 64}
    # the I3 regimes (trig asserted in the obtuse one): m = 256 (trig's rarest instability) at every norm, and L = 256
    for regime in attention.I3_REGIMES:
        for scale in (2.0, 3.0):
            mine = [p for p in cells if p["regime"] == regime and p["scale"] == scale]
            assert any(p["m"] == 256 for p in mine) and any(p["L"] == 256 for p in mine)
            assert any(p["d"] == 64 and p["L"] == 256 for p in mine)


def _hyp_mc_spec(tier: str, norm_z: float = 0.5, m: int = 16, d: int = 2, implementations=None):
    return next(s for s in plan(regimes.HYP_VS_POS_2M, tier=tier, seed=0, implementations=implementations)
                if s.kind == "grid" and s.params["route"] == "mc" and s.params["norm_z"] == norm_z
                and s.params["m"] == m and s.params["d"] == d)


def test_hyp_vs_pos_monte_carlo_cell_is_sized_at_the_predicted_gap_and_decides():
    spec = _hyp_mc_spec("full")
    ctx = spec.context()
    ev = spec.claim.cell(ctx)
    assert 2_000 <= ev.n <= 20_000 < ctx.replicates  # ~140 000 when sized for a gap of 0
    assert ev.upper <= ctx.tolerance and not ev.flags


def test_hyp_vs_pos_monte_carlo_cell_refutes_a_hyperbolic_map_without_antithetic_rows():
    # planted: SM^hyp+_m computed as SM⁺_m (m iid rows, no ±ω pairing): MSE = 2 MSE(SM⁺_{2m}), gap -1 relative
    from rfkit.estimators import positive_features

    spec = _hyp_mc_spec("full", implementations={"feature_map.hyperbolic": positive_features})
    ctx = spec.context()
    ev = spec.claim.cell(ctx)
    assert ev.effect > ctx.tolerance and ev.p_value < ctx.alpha


# ------------------------------------------------ shared Monte Carlo MSE cells and the exact mean4 m-tuple (issue 14)


def _old_mse_points(claim, kinds):
    """The (kind, pair, d, m) points the full tier's one-point Monte Carlo cells tested before sharing."""
    return {(kind, name, d, m) for name, (nx, ny, a) in moments.MSE_PAIRS.items() for kind in kinds
            for d in common.G_D for m in common.G_M
            if m * d <= moments.MC_MSE_WORK
            and moments._mse_point_kept(kind, dict(norm_x=nx, norm_y=ny, angle=a, d=d, m=m))}


@pytest.mark.parametrize("claim, kinds", [(moments.RELATIVE_MSE, common.KINDS), (moments.MSE_HYP, ("hyperbolic",)),
                                          (moments.MSE_TRIG, ("trig",)), (moments.MSE_POS, ("positive",))],
                         ids=lambda c: getattr(c, "id", ""))
def test_shared_monte_carlo_cells_test_every_point_of_the_one_point_design(claim, kinds):
    mc = [s.params for s in plan(claim, tier="full", seed=0) if s.kind == "grid" and s.params["route"] == "mc"]
    assert all(moments._is_mse_zipped(p) for p in mc)
    assert len({(p["d"], p["m"]) for p in mc}) == len(mc)  # one cell per (d, m)
    points = {(kind, name, p["d"], p["m"]) for p in mc for kind, name in moments._shared_points(kinds, p["d"], p["m"])}
    assert points == _old_mse_points(claim, kinds)
    exact = [s.params for s in plan(claim, tier="full", seed=0) if s.kind == "grid" and s.params["route"] == "exact"]
    assert all(not moments._is_mse_zipped(p) and isinstance(p.get("kind", "x"), str) for p in exact)
    assert len(exact) == len(common.G_D) * len(common.G_M) * len(kinds)


def _shared_spec(claim, d, m, implementations=None):
    return next(s for s in plan(claim, tier="full", seed=0, implementations=implementations)
                if s.kind == "grid" and s.params["route"] == "mc" and s.params["d"] == d and s.params["m"] == m)


def test_shared_relative_mse_cell_decides_every_point():
    ctx = _shared_spec(moments.RELATIVE_MSE, 8, 4).context()
    ev = moments.RELATIVE_MSE.cell(ctx)
    assert ev.extra["points"] == 13 and ev.upper <= ctx.tolerance and not ev.flags


def test_shared_relative_mse_cell_refutes_a_hyperbolic_map_without_antithetic_rows():
    # planted: SM^hyp+_m computed as SM⁺_m: its MSE is the positive one, (e^{s} - 1)/m vs (2/m) sinh²(s/2) relative
    from rfkit.estimators import positive_features

    spec = _shared_spec(moments.RELATIVE_MSE, 8, 4, implementations={"feature_map.hyperbolic": positive_features})
    ctx = spec.context()
    ev = spec.claim.cell(ctx)
    assert ev.effect > ctx.tolerance and ev.p_value < ctx.alpha
    assert ev.extra["worst"]["kind"] == "hyperbolic"


def test_exact_mean4_cell_sweeps_every_m_and_refutes_a_wrong_formula_at_the_largest(monkeypatch):
    from rfkit.theory import softmax as theory

    cells = [s for s in plan(moments.SINGLE_TERM_MOMENTS, tier="full", seed=0) if s.kind == "grid"
             and s.params["route"] == "exact" and s.params["moment"] == "mean4"]
    assert len(cells) == 2 * len(common.KINDS) and all(s.params["m"] == (1, 4, 16, 64, 256) for s in cells)
    spec = next(s for s in cells if s.params["kind"] == "trig" and s.params["d"] == 1)
    assert moments.SINGLE_TERM_MOMENTS.cell(spec.context()).upper <= spec.context().tolerance
    true = theory.mean_central_moment
    monkeypatch.setattr(theory, "mean_central_moment",
                        lambda kind, x, y, m, k, **kw: true(kind, x, y, m, k, **kw) * (1.5 if m == 256 else 1.0))
    assert moments.SINGLE_TERM_MOMENTS.cell(spec.context()).effect > spec.context().tolerance
