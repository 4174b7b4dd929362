"""Sequential cells in the engine: early stopping, budget extension, stated validity, reproducibility.

Each toy claim draws Gaussian replicates whose law is known, so verdicts are predictable. Seeds are fixed;
the statistical outcomes asserted hold with probability > 1 - 1e-3 over seeds (level alpha = 1e-3 per
claim, and the planted effects are > 10 confidence radii from the tolerance).
"""

from __future__ import annotations

import numpy as np

from rfkit.validation import validate
from rfkit.validation.cells import MAX_EXTENSION, RESERVE
from rfkit.validation.model import Claim
from rfkit.validation.stats import exact_test


def _normal_cell(ctx):
    sd = ctx.params["sd"]
    return ctx.mean(lambda rng, n: rng.normal(ctx.params["mu"], sd, n), 0.0, sd=sd)


def _claim(grid, replicates=20_000, **kw):
    return Claim(id="core.toy.sequential", paper="core", source="test", statement="E X = 0", kind="expectation",
                 hypotheses="toy", tolerance=0.05, cell=_normal_cell, grid={"smoke": grid, "quick": grid},
                 replicates=replicates, **kw)


def test_easy_cells_stop_early_and_hard_cells_get_the_unspent_budget():
    # sd 0.2: decided within a few thousand replicates; sd 3.0 needs ~ (5.3 * 3 / 0.05)^2 ≈ 1e5 > 2e4 planned
    claim = _claim(dict(mu=[0.0], sd=[0.2, 0.21, 0.22, 3.0]))
    result = validate([claim], tier="quick", seed=0, progress=False).claims[0]
    evs = [o.evidence for o in result.outcomes]
    easy, hard = evs[:3], evs[3]
    assert all(e.extra["status"].startswith("decided") and e.n < 20_000 for e in easy)
    assert hard.extra["budget"] > 20_000  # extended by the engine
    assert hard.extra["budget"] <= MAX_EXTENSION * 20_000
    pool = 4 * 20_000 * (1 + RESERVE["quick"]) - sum(e.n for e in easy) - 20_000
    assert hard.extra["budget"] <= 20_000 + pool + 1
    assert result.verdict == "supported"
    assert result.validity == "non-asymptotic"
    assert "validity: non-asymptotic" in result.reason


def test_the_reserve_extends_only_readings_that_decide():
    """A reading reported beside the verdict never changes it, so its undecided cells keep their planned budget;
    the deciding reading's undecided cell is extended. Planted: without the filter (both readings deciding) the
    other cell is extended too."""
    from rfkit.validation.domain import Choice, Reading

    domain = dict(mu=Choice("the mean", (0.0,)), sd=Choice("the spread", (0.2, 3.0)))
    readings = dict(literal=Reading("the statement"), other=Reading("another quantity", beside=True))
    claim = _claim(dict(mu=[0.0], sd=[0.2, 3.0]), readings=readings, domain=domain)
    outcomes = validate([claim], tier="quick", seed=0, progress=False).claims[0].outcomes
    budgets = {(o.spec.variant, o.spec.params["sd"]): o.evidence.extra["budget"] for o in outcomes}
    assert budgets[("literal", 3.0)] > 20_000 and budgets[("other", 3.0)] == 20_000
    both = _claim(dict(mu=[0.0], sd=[0.2, 3.0]), readings=dict(literal=Reading("the statement"),
                                                                  other=Reading("the statement, too")),
                  domain=domain)
    outcomes = validate([both], tier="quick", seed=0, progress=False).claims[0].outcomes
    assert all(o.evidence.extra["budget"] > 20_000 for o in outcomes if o.spec.params["sd"] == 3.0)


def test_the_reserve_skips_readings_already_refuted():
    """In a reading that one cell refutes (Bonferroni, so Holm's rejection stands whatever the other cells show), an
    undecided cell cannot change the reading's verdict: it keeps its planned budget, while the same undecided cell
    in a reading not yet refuted is extended. Planted: without the filter, the refuted reading's cell is extended."""
    from rfkit.validation import engine
    from rfkit.validation.domain import Choice, Reading

    def cell(ctx):   # reading "bad": mean 0.5 at sd 0.2, far beyond the 0.05 tolerance
        mu = 0.5 if ctx.variant == "bad" and ctx.params["sd"] == 0.2 else 0.0
        return ctx.mean(lambda rng, n: rng.normal(mu, ctx.params["sd"], n), 0.0, sd=ctx.params["sd"])

    domain = dict(sd=Choice("the spread", (0.2, 3.0)))
    claim = Claim(id="core.toy.refuted", paper="core", source="test", statement="E X = 0", kind="expectation",
                  hypotheses="toy", tolerance=0.05, cell=cell, grid={"smoke": dict(sd=[0.2, 3.0])},
                  replicates=20_000, domain=domain,
                  readings=dict(bad=Reading("the statement"), good=Reading("the statement, read otherwise")))
    result = validate([claim], tier="quick", seed=0, progress=False).claims[0]
    budgets = {(o.spec.variant, o.spec.params["sd"]): o.evidence.extra["budget"] for o in result.outcomes}
    assert result.variants["bad"].verdict == "refuted"
    assert budgets[("bad", 3.0)] == 20_000 and budgets[("good", 3.0)] > 20_000
    assert engine.refuted_readings(result.outcomes, 1e-3) == {"bad"}
    original = engine.refuted_readings
    try:
        engine.refuted_readings = lambda outcomes, alpha: set()
        planted = validate([claim], tier="quick", seed=0, progress=False).claims[0]
    finally:
        engine.refuted_readings = original
    assert all(o.evidence.extra["budget"] > 20_000 for o in planted.outcomes if o.spec.params["sd"] == 3.0)


def test_the_reserve_skips_cells_whose_tail_index_more_replicates_cannot_lift():
    """Student t replicates with 2.5 degrees of freedom (tail index 2.5 < 3): Hill's flag is a property of the law,
    so the cell keeps its planned budget; the underpowered normal cell beside it is extended. Planted: without the
    rule the t cell is extended too (its flag would stay)."""
    from rfkit.validation import cells

    def cell(ctx):
        if ctx.params["law"] == "t":
            return ctx.mean(lambda rng, n: rng.standard_t(2.5, n), 0.0, scale=1.0)
        return ctx.mean(lambda rng, n: rng.normal(0.0, 3.0, n), 0.0, sd=3.0)

    claim = Claim(id="core.toy.tails", paper="core", source="test", statement="E X = 0", kind="expectation",
                  hypotheses="toy", tolerance=0.05, cell=cell, grid={"smoke": dict(law=["t", "normal"])},
                  replicates=20_000)
    outcomes = {o.spec.params["law"]: o.evidence for o in validate([claim], tier="quick", seed=0,
                                                                   progress=False).claims[0].outcomes}
    assert any(f.startswith("heavy tails (tail index") for f in outcomes["t"].flags)
    assert outcomes["t"].extra["budget"] == 20_000 and outcomes["normal"].extra["budget"] > 20_000
    planted = [cells.run_cell(spec) for spec in cells.plan(claim, tier="quick", seed=0)]   # the first rounds
    original = cells.NOT_EXTENDED
    try:
        cells.NOT_EXTENDED = original[:-1]
        assert len(cells.extensions(planted)) == 2
    finally:
        cells.NOT_EXTENDED = original
    assert len(cells.extensions(planted)) == 1


def test_smoke_tier_has_no_reserve_but_moves_unspent_budget():
    claim = _claim(dict(mu=[0.0], sd=[0.2, 0.21, 0.22, 3.0]))
    result = validate([claim], tier="smoke", seed=0, progress=False).claims[0]
    hard = result.outcomes[3].evidence
    assert 20_000 < hard.extra["budget"] <= 4 * 20_000


def test_violation_is_refuted_early_with_a_witness():
    claim = _claim(dict(mu=[0.0, 0.5], sd=[1.0]))
    result = validate([claim], tier="quick", seed=0, progress=False).claims[0]
    assert result.verdict == "refuted"
    assert result.witness["params"]["mu"] == 0.5
    assert result.outcomes[1].evidence.n < 20_000


def test_extension_is_identical_with_workers():
    claim = _claim(dict(mu=[0.0], sd=[0.2, 3.0]))
    local = validate([claim], tier="quick", seed=3, progress=False).claims[0]
    cluster = validate([claim], tier="quick", seed=3, progress=False, workers=2).claims[0]
    assert [o.evidence for o in local.outcomes] == [o.evidence for o in cluster.outcomes]


def test_weakest_validity_is_reported():
    def mixed(ctx):
        if ctx.params["kind"] == "exact":
            return exact_test([1.0], [1.0], tolerance=ctx.tolerance)
        return ctx.mean(lambda rng, n: rng.normal(0.0, 0.2, n), 0.0)  # no sd: asymptotic

    claim = Claim(id="core.toy.mixed", paper="core", source="test", statement="s", kind="expectation",
                  hypotheses="toy", tolerance=0.05, cell=mixed, grid={"smoke": dict(kind=["exact", "mc"])},
                  replicates=20_000)
    result = validate([claim], tier="smoke", seed=0, progress=False).claims[0]
    assert result.verdict == "supported" and result.validity == "asymptotic"
    assert result.summary()["validity"] == "asymptotic"


def test_underpowered_cause_is_power():
    claim = _claim(dict(mu=[0.0], sd=[50.0]), replicates=1_000)
    result = validate([claim], tier="smoke", seed=0, progress=False).claims[0]
    assert result.verdict == "inconclusive" and result.cause == "power"
    assert "underpowered" in result.reason


def test_frozen_generator_is_not_supported():
    # a frozen generator: the same "random" replicate every time
    def frozen(ctx):
        return ctx.mean(lambda rng, n: np.full(n, 0.01), 0.0, sd=1.0)

    claim = Claim(id="core.toy.frozen", paper="core", source="test", statement="s", kind="expectation",
                  hypotheses="toy", tolerance=0.05, cell=frozen, grid={"smoke": dict(x=[1])}, replicates=10_000)
    result = validate([claim], tier="smoke", seed=0, progress=False).claims[0]
    assert result.verdict == "inconclusive" and "degenerate" in result.reason


def _vector_cell(ctx):
    # two coordinates with exact sd 1 and their own scales; the second is off by ctx.params["bias"] (relative)
    scales = np.array([1.0, 10.0])

    def draw(rng, n):
        return rng.normal(0.0, 1.0, (n, 2)) + np.array([0.0, ctx.params["bias"] * 10.0])

    return ctx.mean_vector(draw, np.zeros(2), scale=scales, sd=np.ones(2))


def test_mean_vector_tests_every_coordinate_at_its_own_scale():
    # seed 0, level 1e-3; the planted bias (0.5 relative) is ~100 radii beyond the tolerance 0.05 at n = 20 000
    grid = dict(bias=[0.0, 0.5])
    claim = Claim(id="core.toy.vector", source="test", statement="E X = 0", kind="expectation", tolerance=0.05,
                  cell=_vector_cell, grid={"smoke": grid, "quick": grid}, replicates=20_000)
    result = validate([claim], tier="smoke", alpha=1e-3, progress=False).claims[0]
    assert result.verdict == "refuted" and "bias=0.5" in result.reason
    only_clean = Claim(id="core.toy.vector", source="test", statement="E X = 0", kind="expectation",
                       tolerance=0.05, cell=_vector_cell, grid={"smoke": dict(bias=[0.0])}, replicates=20_000)
    assert validate([only_clean], tier="smoke", alpha=1e-3, progress=False).claims[0].verdict == "supported"


def test_mean_vector_draws_each_round_once_for_all_coordinates():
    from rfkit.validation.model import CellContext

    calls = []

    def draw(rng, n):
        calls.append(n)
        return rng.normal(0.0, 1.0, (n, 3))

    ctx = CellContext("core.toy.vector", "default", {}, "smoke", 4_000, 1e-3, 0.8, 0.05, np.random.default_rng(0))
    ev = ctx.mean_vector(draw, np.zeros(3), scale=1.0, sd=np.ones(3))
    assert sum(calls) == ev.n  # three coordinates, one draw per round: the cell costs its slowest coordinate
    assert ev.extra["sequential"] and ev.extra["planned"] == 4_000
