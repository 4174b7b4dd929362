"""The dataset of a claim whose full-tier design keeps quick-tier points with fewer axes (results.run_axes).

The eva full run at b483649 computed every cell and then raised KeyError in write_run: eva.appb2.finite_s_bias's
full design keeps quick points without its d and s axes. Deterministic (no sampling)."""

from __future__ import annotations

from rfkit.validation.cells import CellOutcome, plan
from rfkit.validation.claims import get_claim
from rfkit.validation.engine import ClaimResult
from rfkit.validation.results import UNSET, run_axes, to_dataset
from rfkit.validation.stats import exact_test


def test_points_without_an_axis_sit_at_unset():
    import numpy as np

    claim = get_claim("eva.appb2.finite_s_bias")
    specs = [s for s in plan(claim, tier="full", seed=0) if s.kind == "grid"]
    short = [s for s in specs if "d" not in s.params]
    assert short, "the full design keeps quick points without d (the case under test)"
    chosen = short[:2] + [s for s in specs if "d" in s.params][:2]
    outcomes = [CellOutcome(s, exact_test(1.0, 1.0, tolerance=0.1), None, 0.0) for s in chosen]
    n = len(outcomes)
    result = ClaimResult(claim, "full", 0, 1e-3, "inconclusive", "", {}, outcomes, np.zeros(n, bool), np.ones(n), 0.0,
                         "", "")
    axes = run_axes(result)
    assert UNSET in axes["d"] and UNSET in axes["s"]
    ds = to_dataset(result)
    assert int((ds["cell_verdict"] != "outside-domain").sum()) == n
