"""`rfkit bench` torch-CPU rows: present at every length, both directions, timed like the numpy rows."""

import pytest

pytest.importorskip("torch")

from rfkit.validation import bench  # noqa: E402


def test_default_cases_include_torch_rows_at_every_length():
    names = [(c.name, c.params["L"]) for c in bench.default_cases(quick=True, lengths=[256, 512])]
    for length in (256, 512):
        for direction in ("bidirectional", "causal"):
            assert (f"rfkit torch-CPU favor+ positive ORF ({direction})", length) in names


@pytest.mark.slow  # times three cases and their rooflines: ~6 s on the shared 2-core machine
def test_torch_rows_run_and_compare_with_exact():
    cases = [bench._exact_case(64, 16, False, "float64")] + bench.torch_cpu_cases([64], d=16, m=32)
    rows = bench.run_cases(cases, quick=True)
    torch_rows = [r for r in rows if r["name"].startswith("rfkit torch-CPU")]
    assert len(torch_rows) == 2
    for row in torch_rows:
        assert row["seconds"] > 0 and row["memory_note"] == bench.TORCH_MEMORY_NOTE
    assert torch_rows[0]["speedup_vs_exact"] is not None  # bidirectional: exact ran at the same L
