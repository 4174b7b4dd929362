"""rfkit plan: cells per tier and a sampled estimate of the time, with a cap that makes it a lower bound."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from rfkit.validation.model import Claim
from rfkit.validation.plan import estimate, plan_table
from rfkit.validation.stats import exact_test


def _sleepy(seconds):
    def cell(ctx):  # busy for `seconds` of CPU (the plan times CPU seconds: a sleep costs none)
        start = time.process_time()
        while time.process_time() - start < seconds * ctx.params["z"]:
            pass
        return exact_test(np.zeros(1), 0.0, tolerance=ctx.tolerance)

    return Claim(id="core.toy.sleepy", source="test", statement="0 = 0", kind="identity", tolerance=0.1,
                 cell=cell, grid={"smoke": dict(z=[1.0]), "quick": dict(z=[1.0, 1.01, 1.02, 1.03])})


def test_the_estimate_extrapolates_the_sampled_cells_to_the_plan():
    [row] = estimate([_sleepy(0.02)], tier="quick", sample=2)
    assert row["cells"] == 4 and row["sampled"] == 2 and not row["lower_bound"]
    assert 0.08 <= row["seconds"] < 0.5  # 4 cells of ~0.02 s CPU (the busy loop is a floor)
    assert "core: 4 cells, 0 restarts" in plan_table([row])


def test_readings_sharing_a_point_are_timed_together_as_a_run_pays_them():
    # two readings of each point share one measurement (harness.shared): a run pays it once a point, and so does
    # the estimate (timing single cells charged each reading the whole measurement)
    from rfkit.validation.domain import Choice, Reading
    from rfkit.validation.harness import shared

    def cell(ctx):
        def measure():
            start = time.process_time()
            while time.process_time() - start < 0.05:
                pass
            return 0.0

        shared(("core.toy.shared", ctx.seed, ctx.params["z"]), measure)
        return exact_test(np.zeros(1), 0.0, tolerance=ctx.tolerance)

    claim = Claim(id="core.toy.shared", source="test", statement="0 = 0", kind="identity", tolerance=0.1, cell=cell,
                  readings={"a": Reading("a"), "b": Reading("b")}, domain=dict(z=Choice("z", (1.0, 2.0, 3.0, 4.0))),
                  grid={"smoke": dict(z=[1.0]), "quick": dict(z=[1.0, 2.0, 3.0, 4.0])})
    [row] = estimate([claim], tier="quick", sample=2)
    assert row["cells"] == 8 and row["points"] == 4 and row["sampled"] == 4
    assert 0.2 <= row["seconds"] < 0.35  # 4 points of one 0.05 s measurement each, not 8 cells of 0.05 s


def test_measured_cells_come_from_a_run_checkpoint_and_the_rest_is_extrapolated(tmp_path):
    import pickle

    from rfkit.validation import validate
    from rfkit.validation.checkpoint import read_records

    claim = _sleepy(0.02)
    path = tmp_path / "cells.ckpt"
    validate([claim], tier="quick", seed=0, checkpoint=path, progress=False)
    header, records, _ = read_records(path)
    spent = sum(r[-1] for r in records)
    [row] = estimate([claim], tier="quick", measured=[path])
    assert row["measured"] == 4 and row["sampled"] == 0 and not row["lower_bound"]
    assert row["seconds"] == pytest.approx(spent)  # read, not run
    # a checkpoint given twice (e.g. one copied to resume from, beside its copy) counts each round once
    [twice] = estimate([claim], tier="quick", measured=[path, path])
    assert twice["measured"] == 4 and twice["seconds"] == pytest.approx(spent)
    # half the cells stored: the other half at their mean
    with path.open("wb") as f:
        for item in (header, *records[:2]):
            pickle.dump(item, f)
    [row] = estimate([claim], tier="quick", measured=[path])
    assert row["measured"] == 2 and row["seconds"] == pytest.approx(2 * sum(r[-1] for r in records[:2]))
    # another tier, or the claim's code changed since (its digest): refused, or not read
    with pytest.raises(ValueError, match="tier"):
        estimate([claim], tier="full", measured=[path])
    with path.open("wb") as f:
        for item in (header, *[(r[0], r[1], "other code", *r[3:]) for r in records]):
            pickle.dump(item, f)
    [row] = estimate([claim], tier="quick", measured=[path])
    assert row["measured"] == 0 and row["lower_bound"] and "0 cell(s) measured" in plan_table([row])
    # a resumed run after the edit appends the rerun cells after the stale ones: the current code's are read
    with path.open("ab") as f:
        for r in records:
            pickle.dump(r, f)
    [row] = estimate([claim], tier="quick", measured=[path])
    assert row["measured"] == 4 and row["seconds"] == pytest.approx(spent)


def test_a_cell_past_the_cap_is_stopped_and_the_estimate_is_a_lower_bound():
    t0 = time.perf_counter()
    [row] = estimate([_sleepy(30.0)], tier="quick", sample=3, cap=1.0)
    assert time.perf_counter() - t0 < 10 and row["lower_bound"] and row["sampled"] == 1
    assert "≥" in plan_table([row])


def test_without_sampling_the_plan_only_counts():
    [row] = estimate([_sleepy(30.0)], tier="quick")
    assert row["seconds"] is None and row["cells"] == 4
    with pytest.raises(ValueError):
        estimate([_sleepy(0.0)], tier="quick", sample=-1)


def test_cli_plan_lists_cells_and_rejects_bad_options():
    run = [sys.executable, "-m", "rfkit.validation", "plan", "--tier", "smoke", "--claim", "core.ess.range"]
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert "core.ess.range" in out and "core:" in out
    bad = subprocess.run(run + ["--sample", "-1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--sample" in bad.stderr
    missing = subprocess.run(run + ["--measured", "no/such/cells.ckpt"], capture_output=True, text=True)
    assert missing.returncode == 2 and "no checkpoint file" in missing.stderr


def test_cli_plan_refuses_a_checkpoint_of_another_tier(tmp_path):
    from rfkit.validation import validate

    path = tmp_path / "cells.ckpt"
    validate([_sleepy(0.0)], tier="smoke", seed=0, checkpoint=path, progress=False)
    run = [sys.executable, "-m", "rfkit.validation", "plan", "--tier", "quick", "--claim", "core.ess.range",
           "--measured", str(path)]
    out = subprocess.run(run, capture_output=True, text=True)
    assert out.returncode == 2 and "tier 'smoke'" in out.stderr
