"""The command line: `rfkit list --ids` and `rfkit bench --json` rows; causal linear attention memory."""

import json
import subprocess
import sys
import tracemalloc

import numpy as np

from rfkit.estimators import linear_attention, orthogonal_projection, positive_features

BENCH_FIELDS = {"name", "L", "d", "m", "dtype", "seconds", "gflops", "roofline_fraction", "peak_bytes",
                "speedup_vs_exact", "memory_vs_exact"}


def rfkit(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "rfkit.validation", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_list_ids_runs():
    out = rfkit("list", "--ids")
    assert out.returncode == 0, out.stderr
    assert all(line.count(".") >= 2 for line in out.stdout.splitlines())


def test_bench_json_rows():
    out = rfkit("bench", "--quick", "--json", "--lengths", "128", "256")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert {r["L"] for r in rows} == {128, 256}
    for r in rows:
        assert BENCH_FIELDS <= set(r), r
        assert r["seconds"] > 0 and r["peak_bytes"] > 0 and r["roofline_fraction"] > 0
    favor = [r for r in rows if r["name"].startswith("favor+")]
    assert favor and all(r["speedup_vs_exact"] is not None for r in favor)


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
