"""`rfkit bench` peer rows: which rows exist, that they compute what they claim to time, and their fields.

Structure only, never speed: timings on a shared machine are measurements, not assertions.
"""

import importlib.util
import json
import warnings

import numpy as np
import pytest

from rfkit.estimators import softmax_attention
from rfkit.validation import bench

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_PERFORMER = HAVE_TORCH and importlib.util.find_spec("performer_pytorch") is not None
needs_performer = pytest.mark.skipif(not HAVE_PERFORMER, reason="performer-pytorch (the peers extra) not installed")
IMPLS = ["rfkit numpy favor+"] + (["rfkit torch favor+", "torch sdpa exact"] if HAVE_TORCH else []) + \
    (["performer FastAttention"] if HAVE_PERFORMER else [])
PEER_FIELDS = {"batch_heads", "threads", "reference", "rfkit_numpy_speedup", "peak_rss_bytes", "memory_vs_rfkit_numpy",
               "peak_method"}


def _peer_names(length_set_cases):
    return {(c.name, c.params["L"]) for c in length_set_cases if c.name.startswith("peer ")}


def _expected(lengths):
    return {(f"peer {impl} ({direction}, bh=8)", length) for impl in IMPLS for length in lengths
            for direction in ("bidirectional", "causal")}


@pytest.mark.parametrize("quick, lengths", [(True, [1024, 4096]), (False, [1024, 4096, 16384])])
def test_default_cases_have_peer_rows_at_issue_lengths(quick, lengths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = bench.default_cases(quick=quick)
    assert _peer_names(cases) == _expected(lengths)
    peers = [c for c in cases if c.name.startswith("peer ")]
    assert all(c.params["d"] == 64 and c.extra["batch_heads"] == 8 for c in peers)
    assert all(c.params["m"] == 256 for c in peers if "sdpa" not in c.name)
    assert all(c.extra["threads"] == bench.blas_threads() for c in peers)


def test_missing_performer_skips_its_rows_with_a_warning(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "performer_pytorch"
                        else real(name, *a))
    with pytest.warns(UserWarning, match="performer-pytorch is not installed"):
        cases = bench.peer_cases([64])
    assert cases and not any("performer" in c.name for c in cases)


def _call(case):
    return np.asarray(case.setup()())


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_row_computes_exact_softmax_attention(causal):
    case = next(c for c in bench.peer_cases([64]) if "sdpa" in c.name and c.params["causal"] == causal)
    q, k, v = bench._peer_qkv(64, 64, np.float64)
    np.testing.assert_allclose(_call(case)[0], softmax_attention(q, k, v, causal=causal), rtol=1e-10, atol=1e-12)


@needs_performer
def test_performer_construction_prints_nothing(capsys):
    bench.performer_fast_attention(np.eye(4), causal=True)
    assert capsys.readouterr().out == ""


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
def test_resident_peak_sees_torch_allocations():
    import torch

    size = 64 * 2**20
    resident = bench.rss_peak_bytes(lambda: torch.ones(size // 8, dtype=torch.float64))
    if resident is None:
        pytest.skip("no resident high-water mark on this system")
    assert 0.9 * size <= resident <= 1.5 * size


def test_run_cases_peer_rows_fields():
    """Bidirectional peer rows at L = 32: every field present, ratios against rfkit's row, valid JSON."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [c for c in bench.peer_cases([32], d=8, m=16) if not c.params["causal"]]
    rows = bench.run_cases(cases, quick=True)
    assert len(rows) == len(IMPLS)
    for r in rows:
        assert PEER_FIELDS <= set(r), r
        assert r["seconds"] > 0 and r["peak_bytes"] > 0 and r["roofline_fraction"] > 0
        assert r["reference"] == "peer rfkit numpy favor+ (bidirectional, bh=8)"
        assert r["rfkit_numpy_speedup"] > 0
    reference, *torch_rows = rows
    assert reference["rfkit_numpy_speedup"] == 1.0 and reference["peak_method"] == bench.TRACEMALLOC_METHOD
    resident_ok = reference["peak_rss_bytes"] is not None
    for r in torch_rows:
        assert r["peak_method"] == (bench.RSS_METHOD if resident_ok else bench.RSS_UNAVAILABLE_METHOD)
        assert (r["peak_bytes"] == r["peak_rss_bytes"]) == resident_ok
    assert [json.loads(line)["name"] for line in bench.to_json_lines(rows).splitlines()] == [r["name"] for r in rows]
    assert "peer performer FastAttention" in bench.format_table(rows) or not HAVE_PERFORMER


def test_peer_memory_without_resident_peak_keeps_tracemalloc(monkeypatch):
    """No VmHWM (not Linux): torch rows keep tracemalloc's peak and say it misses torch's allocations."""
    monkeypatch.setattr(bench, "rss_peak_bytes", lambda fn: None)
    torch_case = bench.Case("peer x", {}, lambda: None, (), extra=dict(torch_row=True))
    numpy_case = bench.Case("peer y", {}, lambda: None, (), extra=dict(torch_row=False))
    assert bench._peer_memory(torch_case, None, 123) == dict(peak_rss_bytes=None, peak_bytes=123,
                                                             peak_method=bench.RSS_UNAVAILABLE_METHOD)
    assert bench._peer_memory(numpy_case, None, 123) == dict(peak_rss_bytes=None, peak_method=bench.TRACEMALLOC_METHOD)
    assert bench._peer_memory(bench.Case("exact", {}, lambda: None, ()), None, 123) == {}
