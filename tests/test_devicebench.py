"""``rfkit bench --device``: the device rows' structure, failure rows and table, run on the CPU with torch (the CUDA
path differs only in its timer and memory probe, exercised by benchmarks/gpu_check.sh on a GPU)."""

import json

import pytest

torch = pytest.importorskip("torch")

from rfkit.validation import devicebench  # noqa: E402
from rfkit.validation.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    cases = devicebench.device_cases("cpu", [64])
    return devicebench.run_device_cases(cases, "cpu", repeats=1)


def test_rows_cover_every_installed_implementation_in_both_directions(rows):
    impls = {r["impl"] for r in rows} | set(rows[0]["peers_skipped"])
    assert impls == set(devicebench.IMPLEMENTATIONS) - {"rfkit torch favor+ tf32"}  # TF32 rows: CUDA only
    for r in rows:
        assert r["error"] is None and r["seconds"] > 0 and r["roofline_seconds"] > 0 and r["flops"] > 0
        assert r["peak_bytes"] is None and r["device"] == "cpu"  # the device's allocator is read on CUDA only
        assert r["dtype"] == ("bfloat16" if r["impl"].endswith("bf16") else "float32")
        others = {o["impl"] for o in rows if o["causal"] == r["causal"] and o is not r}
        assert set(r["speedup_vs"]) == others
    errors = {r["causal"]: r["error_vs_float64"] for r in rows if r["impl"] == "rfkit torch favor+"}
    assert set(errors) == {False, True} and all(0 <= e < 1e-4 for e in errors.values())  # float32 vs float64


def test_a_failing_call_is_a_row_with_its_error_and_a_dash_in_the_table(monkeypatch, rows):
    def boom(row, device):
        raise RuntimeError("CUDA out of memory. Tried to allocate 64 GiB\nmore text")

    monkeypatch.setattr(devicebench, "_call", boom)
    failed = devicebench.run_device_cases(devicebench.device_cases("cpu", [64])[:1], "cpu", repeats=1)
    assert failed[0]["seconds"] is None and failed[0]["error"] == "RuntimeError: CUDA out of memory. Tried to " \
                                                                 "allocate 64 GiB"
    table = devicebench.device_table(failed + rows[1:])
    assert "| 64 | bidirectional | — |" in table


def test_table_has_a_line_per_length_and_direction_and_rfkits_error(rows):
    table = devicebench.device_table(rows)
    assert "| 64 | bidirectional |" in table and "| 64 | causal |" in table
    assert "rfkit's max relative error against numpy float64" in table
    with pytest.raises(ValueError, match="no device rows"):
        devicebench.device_table([])


def test_cli_device_bench_prints_json_rows(capsys):
    assert main(["bench", "--device", "cpu", "--lengths", "32", "--quick", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert {r["L"] for r in rows} == {32} and all("speedup_vs" in r for r in rows)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a host without CUDA")
def test_cli_refuses_cuda_without_a_device_and_dtype_options(capsys):
    assert main(["bench", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert main(["bench", "--device", "cpu", "--dtype", "float64"]) == 2
