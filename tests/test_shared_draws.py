"""Common random numbers across the readings of a grid point: CellContext.shared_rng, harness.shared, and the plan's
grouping of a point's readings (so the shared work is still cached when the next reading runs)."""

import numpy as np

from rfkit.validation import harness
from rfkit.validation.cells import plan, run_cell
from rfkit.validation.claims.macformer import ppsbn
from rfkit.validation.model import CellContext


def _ctx(variant="a", params=None, seed=0, restart=None):
    return CellContext("core.x", variant, dict(params or {"n": 3}), "quick", 10, 1e-3, 0.8, 0.1,
                       np.random.default_rng(99), restart=restart, seed=seed)


def test_shared_rng_is_the_same_for_every_reading_of_a_point_and_differs_otherwise():
    draw = lambda ctx, label="": ctx.shared_rng(label).standard_normal(4)  # noqa: E731
    assert np.array_equal(draw(_ctx("a")), draw(_ctx("b")))
    for other in (_ctx(params={"n": 4}), _ctx(seed=1), _ctx(restart=2)):
        assert not np.array_equal(draw(_ctx()), draw(other))
    assert not np.array_equal(draw(_ctx(), "x"), draw(_ctx(), "y"))


def test_shared_computes_once_per_key_and_keeps_the_last_slots():
    calls = []

    def compute(tag):
        calls.append(tag)
        return tag

    for tag in ("a", "a", "b", "a"):
        assert harness.shared(("test", tag), lambda t=tag: compute(t)) == tag
    assert calls == ["a", "b"]
    for i in range(harness.SHARED_SLOTS):
        harness.shared(("fill", i), lambda: None)
    harness.shared(("test", "a"), lambda: compute("a"))
    assert calls == ["a", "b", "a"]  # evicted by the newer results, computed again


def test_plan_groups_the_readings_of_a_point():
    specs = [s for s in plan(ppsbn.THM3_SCALE_RESTORATION, tier="quick", seed=0) if s.kind == "grid"]
    order = [tuple(sorted(s.params.items())) for s in specs]
    assert len({p for p in order}) == 2 and order[: len(order) // 2] == [order[0]] * (len(order) // 2)


def test_scale_restoration_draws_rmfa_once_per_norm_and_once_raw_per_point():
    calls = []

    def counting(q, k, v, **kw):
        calls.append(kw["num_features"])
        return ppsbn.rmfa_replicates(q, k, v, **kw)

    specs = [s for s in plan(ppsbn.THM3_SCALE_RESTORATION, tier="quick", seed=0,
                             implementations={"rmfa_replicates": counting}) if s.kind == "grid"]
    point = specs[0].params
    outcomes = [run_cell(s) for s in specs if s.params == point]
    assert len(outcomes) == len(ppsbn.RESTORATION_READINGS) and all(o.error is None for o in outcomes)
    assert len(calls) == len({r["norm"] for r in ppsbn.RESTORATION_READINGS.values()}) + 1
