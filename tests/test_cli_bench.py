"""The command line: `rfkit list --ids` and `rfkit bench --json` rows; causal linear attention memory."""

import json
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from rfkit.estimators import linear_attention, orthogonal_projection, positive_features
from rfkit.validation import bench

BENCH_FIELDS = {"name", "L", "d", "m", "dtype", "seconds", "gflops", "roofline_fraction", "peak_bytes",
                "speedup_vs_exact", "memory_vs_exact"}


def rfkit(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "rfkit.validation", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_list_ids_runs():
    out = rfkit("list", "--ids")
    assert out.returncode == 0, out.stderr
    assert all(line.count(".") >= 2 for line in out.stdout.splitlines())


@pytest.mark.slow  # ~20 s: every row is timed for at least 0.3 s
def test_bench_json_rows():
    out = rfkit("bench", "--quick", "--json", "--lengths", "128", "256")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    attention = [r for r in rows if r["L"] is not None]
    assert {r["L"] for r in attention} == {128, 256}
    for r in rows:
        assert BENCH_FIELDS <= set(r), r
        assert r["seconds"] > 0 and r["peak_bytes"] > 0
    assert all(r["roofline_fraction"] > 0 for r in attention)
    favor = [r for r in rows if r["name"].startswith("favor+")]
    assert favor and all(r["speedup_vs_exact"] is not None for r in favor)
    variants = {r["name"] for r in favor if r["L"] == 256}  # quick mode: variant rows at the second length
    for kind in ("trig", "positive", "hyperbolic"):
        for projection in ("iid", "ORF"):
            for direction in ("bidirectional", "causal"):
                assert f"favor+ {kind} {projection} ({direction}, W given)" in variants
    sampling = {r["name"] for r in rows if r["L"] is None}
    assert sampling == {"sampling R-ORF (one-time)", "sampling H-ORF (one-time)", "sampling G-ORF (one-time)"}


def test_default_cases_cover_favor_variants_and_sampling():
    names = [c.name for c in bench.default_cases(quick=True, lengths=[64, 128])]
    for kind in bench.FAVOR_KINDS:
        for label in bench.PROJECTION_LABELS.values():
            assert f"favor+ {kind} {label} (causal, W given)" in names
    assert {n for n in names if n.startswith("sampling")} == {"sampling R-ORF (one-time)",
                                                              "sampling H-ORF (one-time)",
                                                              "sampling G-ORF (one-time)"}


def test_run_cases_rows_for_variants_and_sampling():
    cases = [c for c in bench.default_cases(quick=True, lengths=[32, 64])
             if c.params["L"] in (None, 64) and ("hyperbolic" in c.name or "sampling" in c.name
                                                 or c.name.startswith("exact"))]
    rows = bench.run_cases(cases, quick=True)
    sampling = [r for r in rows if r["L"] is None]
    assert len(sampling) == 3 and all(r["roofline_fraction"] is None and r["seconds"] > 0 for r in sampling)
    favor = [r for r in rows if r["name"].startswith("favor+")]
    assert favor and all(r["speedup_vs_exact"] > 0 and r["roofline_fraction"] > 0 for r in favor)
    assert "sampling H-ORF" in bench.format_table(rows)


def _causal_peak(length, d=16, m=32, dv=8):
    rng = np.random.default_rng(0)
    w = orthogonal_projection(m, d, rng=rng)
    qf = positive_features(rng.normal(size=(length, d)), w)
    kf = positive_features(rng.normal(size=(length, d)), w)
    v = rng.normal(size=(length, dv))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        linear_attention(qf, kf, v, causal=True)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_causal_linear_attention_memory_is_linear_in_length():
    # Peak traced allocation (deterministic, not a timing): 4x the length must cost ~4x the memory,
    # far from the 16x of anything quadratic; O(L·m·d_v) would also be caught by the absolute bound.
    small, large = _causal_peak(4096), _causal_peak(16384)
    assert large / small < 4.5
    assert large < 16384 * (32 + 8 + 1) * 8 * 3  # a few L×(r + d_v) arrays, never L×r×d_v
