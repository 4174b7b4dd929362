"""Full tier of performer.b2.block_orf (issue 13): one Monte Carlo cell per (d, m) sweeps every estimator at every
named pair on common R-ORF frames, at the Bonferroni sub-level, and still refutes a biased sampler."""

import dataclasses

import numpy as np

from rfkit.estimators import orthogonal_projection
from rfkit.validation.cells import plan, run_cell
from rfkit.validation.claims.performer import orf
from rfkit.validation.engine import coverage_table


def _shared(d=2, rule="4d", implementations=None):
    return next(s for s in plan(orf.BLOCK_ORF, tier="full", seed=0, implementations=implementations)
                if s.kind == "grid" and isinstance(s.params["estimator"], tuple) and s.params["d"] == d
                and s.params["m_rule"] == rule)


def test_full_grid_has_one_shared_monte_carlo_cell_per_d_and_m_and_keeps_coverage():
    cells = [s.params for s in plan(orf.BLOCK_ORF, tier="full", seed=0) if s.kind == "grid"]
    mc = [p for p in cells if p["route"] == "mc" and p["estimator"] != "law"]
    assert all(p["estimator"] == orf.MC_SHARED and orf._is_zipped(p) for p in mc)
    assert sorted((p["d"], p["m_rule"]) for p in mc) == sorted(
        (d, r) for d in (2, 4, 16, 64) for r in orf.BLOCK_RULES)
    # the exact and law routes are unchanged: every estimator and law there
    assert {p["estimator"] for p in cells if p["route"] == "exact"} == set(orf.MC_SHARED)
    full = coverage_table(orf.BLOCK_ORF)["full"]["default"]
    assert full["covered"], full["coverage"]
    # the quick tier keeps its one-point cells (its verdicts are unchanged)
    assert not any(isinstance(s.params["estimator"], tuple) for s in plan(orf.BLOCK_ORF, tier="quick", seed=0))


def test_shared_cell_tests_every_estimator_pair_point_and_decides():
    spec = _shared()
    out = run_cell(spec)
    assert out.error is None
    ev = out.evidence
    assert ev.extra["points"] == 17  # 6 estimators x 3 pairs, trig without the pair beyond its cap
    assert ev.effect < orf.BLOCK_ORF.tolerance and ev.extra["status"].startswith("decided")


def test_planted_scaled_rows_are_refuted_by_the_shared_cell():
    """Rows 1.15 times too long (every frame): the exp/ReLU estimators are biased, sgn is not."""
    def scaled(m, d, *, rng, norms="chi", size=None, dtype=np.float64):
        return 1.15 * orthogonal_projection(m, d, rng=rng, norms=norms, size=size, dtype=dtype)
    spec = _shared(implementations={"orthogonal_projection": scaled})
    ev = run_cell(dataclasses.replace(spec, budget=20_000)).evidence
    assert ev.effect > orf.BLOCK_ORF.tolerance and ev.p_value < spec.alpha


def test_row_law_cells_are_sized_for_the_tolerance_and_batched():
    """The full tier's 200 000 ensembles of 1024 x 64 rows were ~100 GiB in one array: the block claim draws what
    the KS test needs for half the tolerance (DKW), in batches; the m <= d claim keeps the tier's count."""
    spec = next(s for s in plan(orf.BLOCK_ORF, tier="full", seed=0)
                if s.params["estimator"] == "law" and s.params["d"] == 64 and s.params["m_rule"] == "16d")
    ctx = spec.context()
    alpha = ctx.sub_test(6)["alpha"]
    n = orf._law_replicates(ctx, alpha, True)
    assert n < ctx.replicates
    from scipy import stats
    assert stats.kstwo.isf(alpha, n) <= orf.BLOCK_ORF.tolerance / 2
    assert orf._law_replicates(ctx, alpha, False) == ctx.replicates
    assert orf.LAW_CHUNK // (1024 * 64) * 1024 * 64 * 8 < 2**30
