"""RA and LARA benchmark rows: present at the right lengths, measured side by side with exact attention."""

from rfkit.validation import bench

RA = "ra S=1 (bidirectional, sampling included)"
LARA = "lara C=16 eq34/eq9 (bidirectional, sampling included)"


def test_default_cases_have_ra_and_lara_rows():
    quick = bench.default_cases(quick=True)
    assert {c.params["L"] for c in quick if c.name == RA} == {1024, 4096}   # quadratic: capped in quick mode
    assert {c.params["L"] for c in quick if c.name == LARA} == {1024, 4096, 16384}
    full = bench.default_cases(quick=False)
    assert {c.params["L"] for c in full if c.name == RA} == {c.params["L"] for c in full if c.name == LARA}


def test_ra_and_lara_rows_run_against_exact_attention():
    cases = [c for c in bench.default_cases(quick=True, lengths=[64]) if c.name in (RA, LARA)
             or c.name == "exact softmax (bidirectional)"]
    rows = bench.run_cases(cases, quick=True)
    by_name = {r["name"]: r for r in rows}
    for name in (RA, LARA):
        row = by_name[name]
        assert row["seconds"] > 0 and row["peak_bytes"] > 0 and row["flops"] > 0
        assert row["speedup_vs_exact"] is not None and row["memory_vs_exact"] is not None
