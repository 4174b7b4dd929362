"""`rfkit bench` measures what users run (issue 16, item 2): float32 and float64, the peers side by side with the
projection drawn inside each call, ``speedup_vs`` per peer, the roofline in the row's dtype, the README table.

Structure only, never speed: timings on a shared machine are measurements, not assertions.
"""

import importlib.util
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from rfkit.validation import bench, cli

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_PERFORMER = HAVE_TORCH and importlib.util.find_spec("performer_pytorch") is not None
FLOAT64_ONLY = ("ra ", "lara ", "rmfa ")


def _cases(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bench.default_cases(quick=True, lengths=[64, 128], **kw)


def test_default_run_has_both_dtypes_and_float64_only_rows_once():
    cases = _cases()
    by_dtype = {dt: {c.name for c in cases if c.params["dtype"] == dt} for dt in bench.DTYPES}
    assert bench.DTYPES == ("float32", "float64")
    for name in ("favor+ positive ORF (causal)", "exact softmax (bidirectional)",
                 "peer rfkit numpy favor+ (causal, bh=8)"):
        assert name in by_dtype["float32"] and name in by_dtype["float64"]
    assert not any(n.startswith(FLOAT64_ONLY) for n in by_dtype["float32"])
    assert any(n.startswith("lara ") for n in by_dtype["float64"])
    sampling = [c for c in cases if c.name.startswith("sampling")]
    assert len(sampling) == 3  # dtype-independent: once
    keys = [(c.name, c.params["L"], c.params["dtype"]) for c in cases]
    assert len(keys) == len(set(keys))  # rows are told apart by dtype


def test_dtype_choice_and_peers_only():
    only32 = _cases(dtypes=["float32"])
    assert {c.params["dtype"] for c in only32} == {"float32"}
    assert not any(c.name.startswith(FLOAT64_ONLY) for c in only32)
    assert any(c.name.startswith("sampling") for c in only32)
    peers = _cases(peers_only=True)
    assert peers and all(c.name.startswith("peer ") for c in peers)
    assert {c.params["dtype"] for c in peers} == set(bench.DTYPES)
    with pytest.raises(ValueError, match="dtypes must be"):
        _cases(dtypes=["float16"])
    with pytest.raises(ValueError, match="dtypes must be"):
        _cases(dtypes=[])


def test_cli_rejects_a_bad_dtype(capsys):
    assert cli.main(["bench", "--dtype", "float16", "--lengths", "16"]) == cli.EXIT_USAGE
    assert "--dtype must be among float32, float64" in capsys.readouterr().err


def test_peer_rows_include_rfkit_torch_and_every_peer():
    impls = {c.extra["impl"] for c in bench.peer_cases([32], d=8, m=16)}
    expected = {"rfkit numpy favor+"} | ({"rfkit torch favor+", "torch sdpa exact"} if HAVE_TORCH else set()) \
        | ({"performer FastAttention"} if HAVE_PERFORMER else set())
    assert impls == expected
    assert set(bench.PEER_LABELS) >= impls


def test_missing_peers_are_skipped_with_a_reason(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.warns(UserWarning, match="bench peer rows skipped"):
        cases = bench.peer_cases([32], d=8, m=16)
    assert {c.extra["impl"] for c in cases} == {"rfkit numpy favor+"}
    skipped = cases[0].extra["peers_skipped"]
    assert set(skipped) == {"torch sdpa exact", "rfkit torch favor+", "performer FastAttention"}
    assert all("not installed" in why for why in skipped.values())


@pytest.mark.parametrize("impl", ["rfkit numpy favor+", "rfkit torch favor+", "performer FastAttention"])
def test_projection_is_drawn_inside_each_call(impl):
    """Two calls of one prepared case differ: each draws its own projection (a fixed W would repeat)."""
    if impl != "rfkit numpy favor+" and not (HAVE_PERFORMER if "performer" in impl else HAVE_TORCH):
        pytest.skip(f"{impl} not installed")
    case = next(c for c in bench.peer_cases([16], d=8, m=16, dtype="float32")
                if c.extra["impl"] == impl and not c.params["causal"])
    call = case.setup()
    first, second = np.asarray(call()), np.asarray(call())
    assert first.dtype == np.float32 and first.shape[-2:] == (16, 8)
    assert np.all(np.isfinite(first)) and not np.array_equal(first, second)


def _row(impl, seconds, *, L=4096, dtype="float32", causal=False, roof=None):
    direction = "causal" if causal else "bidirectional"
    return dict(name=f"peer {impl} ({direction}, bh=8)", impl=impl, L=L, d=64, m=256, dtype=dtype, causal=causal,
                seconds=seconds, batch_heads=8, threads=2, peers_skipped={}, peak_rss_bytes=100,
                reference=f"peer rfkit numpy favor+ ({direction}, bh=8)", roofline_seconds=roof,
                roofline_fraction=roof / seconds if roof else None, roofline_gflops=4.3 / roof if roof else None)


def _synthetic_rows():
    rows = []
    for dtype, scale in (("float32", 1.0), ("float64", 3.0)):
        for causal, times in ((False, dict(performer=0.2, sdpa=0.25, numpy=0.1, torch=0.16)),
                              (True, dict(performer=2.0, sdpa=0.15, numpy=0.16, torch=0.14))):
            roof = 0.035 * scale
            rows += [_row("performer FastAttention", scale * times["performer"], dtype=dtype, causal=causal),
                     _row("torch sdpa exact", scale * times["sdpa"], dtype=dtype, causal=causal),
                     _row("rfkit numpy favor+", scale * times["numpy"], dtype=dtype, causal=causal, roof=roof),
                     _row("rfkit torch favor+", scale * times["torch"], dtype=dtype, causal=causal, roof=roof)]
    return rows


def test_speedup_vs_every_peer_within_dtype_and_direction():
    rows = _synthetic_rows()
    rows[4]["seconds"] = 1.0  # float32 causal performer: only its own group may see this
    bench._add_peer_ratios(rows)
    numpy32 = next(r for r in rows if r["impl"] == "rfkit numpy favor+" and r["dtype"] == "float32"
                   and not r["causal"])
    assert numpy32["speedup_vs"] == pytest.approx({"performer FastAttention": 2.0, "torch sdpa exact": 2.5,
                                                   "rfkit torch favor+": 1.6})
    numpy32c = next(r for r in rows if r["impl"] == "rfkit numpy favor+" and r["dtype"] == "float32" and r["causal"])
    assert numpy32c["speedup_vs"]["performer FastAttention"] == pytest.approx(1.0 / 0.16)
    numpy64c = next(r for r in rows if r["impl"] == "rfkit numpy favor+" and r["dtype"] == "float64" and r["causal"])
    assert numpy64c["speedup_vs"]["performer FastAttention"] == pytest.approx(2.0 / 0.16)
    assert all(len(r["speedup_vs"]) == 3 and r["rfkit_numpy_speedup"] > 0 for r in rows)


def test_performance_table_from_bench_json():
    rows = _synthetic_rows()
    bench._add_peer_ratios(rows)
    rows = bench.read_json_lines(bench.to_json_lines(rows) + "\n\n")
    table = bench.performance_table(rows)
    lines = table.splitlines()
    assert lines[0].startswith("float32, B×H = 8, L = 4096, d = 64, m = 256, projection drawn inside each call")
    assert "| performer-pytorch FastAttention | 200 ms | 2000 ms |" in lines
    assert "| torch SDPA (exact) | 250 ms | 150 ms |" in lines
    assert "| rfkit numpy | 100 ms (2.00×) | 160 ms (12.50×) |" in lines
    assert "| rfkit torch (CPU) | 160 ms (1.25×) | 140 ms (14.29×) |" in lines
    assert "plain float32 GEMMs of the same shapes take 35.0 ms" in table and "rfkit numpy at 35%" in table
    table64 = bench.performance_table(rows, dtype="float64")
    assert "| rfkit numpy | 300 ms (2.00×) | 480 ms (12.50×) |" in table64 and "float64 GEMMs" in table64
    with pytest.raises(ValueError, match="no peer rows"):
        bench.performance_table(rows, length=1024)
    for r in rows:  # rows of a run name its CPU (the same code runs at very different speeds elsewhere)
        r["cpu"] = "Some CPU 9000"
    assert ", 2 thread(s) on Some CPU 9000; brackets" in bench.performance_table(rows).splitlines()[0]
    assert isinstance(bench.cpu_model(), str) and bench.cpu_model()


def test_performance_table_names_skipped_peers():
    rows = [r for r in _synthetic_rows() if r["impl"] != "performer FastAttention" and r["dtype"] == "float32"]
    for r in rows:
        r["peers_skipped"] = {"performer FastAttention": "performer-pytorch is not installed"}
    bench._add_peer_ratios(rows)
    table = bench.performance_table(rows)
    assert "performer-pytorch FastAttention |" not in table and "| rfkit numpy | 100 ms |" in table
    assert "Skipped: performer FastAttention (performer-pytorch is not installed)." in table


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
def test_run_peer_rows_in_float32_with_roofline_in_float32(monkeypatch):
    """A real (tiny) float32 run: every peer row has speedup_vs, and its roofline was timed in float32."""
    seen = []
    real = bench.measure_roofline
    monkeypatch.setattr(bench, "measure_roofline", lambda gemms, **kw: seen.append(kw["dtype"]) or real(gemms, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in bench.peer_cases([16], d=8, m=16, dtype="float32") if not c.params["causal"]]
    rows = bench.run_cases(cases, quick=True)
    assert seen and all(np.dtype(dt) == np.float32 for dt in seen)
    for r in rows:
        assert r["dtype"] == "float32" and set(r["speedup_vs"]) == {o["impl"] for o in rows} - {r["impl"]}
        assert r["roofline_seconds"] > 0 and r["roofline_gflops"] > 0
    assert "| rfkit torch (CPU) |" in bench.performance_table(rows)


def test_kernel_benchmarks_exist_and_stay_out_of_the_default_run():
    root = Path(__file__).resolve().parents[1]
    suite = root / "benchmarks" / "test_kernels.py"
    assert suite.exists() and "def test_favor_attention(benchmark" in suite.read_text()
    line = re.search(r"^testpaths\s*=\s*\[(.*)\]", (root / "pyproject.toml").read_text(), re.MULTILINE)
    assert line, "pyproject.toml must name testpaths (else pytest would collect benchmarks/)"
    assert "benchmarks" not in line.group(1)
