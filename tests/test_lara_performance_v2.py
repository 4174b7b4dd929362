"""v2 declarations of the ported ``lara.*`` cost and Figure 1 claims (validation/claims/lara/performance.py)."""

from __future__ import annotations

import math

import pytest

from rfkit.validation.claims.lara import performance as perf
from rfkit.validation.domain import domain_coverage

PORTED = [perf.RFA_LINEAR, perf.RA_QUADRATIC, perf.LARA_LINEAR, perf.PROPOSAL_COSTS, perf.RA_VS_SOFTMAX,
          perf.LARA_VS_PERFORMER, perf.MSE_ORDERING, perf.RFA_PLATEAU, perf.LARA_DECREASING]
COMPLEXITY = [perf.RFA_LINEAR, perf.RA_QUADRATIC, perf.LARA_LINEAR]


def _covered(claim, tier):
    points = [p for v in claim.deciding() for p in claim.cells(tier, v)]
    return domain_coverage(claim.domain, points)[0]


@pytest.mark.parametrize("claim", PORTED, ids=lambda c: c.id)
def test_ported_claims_declare_a_domain_and_no_tier_reads(claim):
    assert claim.domain and claim.hypotheses  # generated from the domain
    assert set(claim.axes("quick")) >= set(claim.domain)


def test_table6_statements_are_conjunctions_of_time_and_memory():
    for claim in (perf.RA_VS_SOFTMAX, perf.LARA_VS_PERFORMER):
        assert claim.domain["quantity"].values == ("time", "memory")
        assert claim.variants == ("default",) and _covered(claim, "quick")


def test_proposal_costs_test_every_named_equation_and_decide_by_counts():
    claim = perf.PROPOSAL_COSTS
    assert claim.domain["proposal"].values == ("eq33", "eq34", "eq35")
    assert claim.deciding() == ["counts"] and claim.beside("cpu_time")
    assert _covered(claim, "quick")
    # one sweep per cell: C or M for each proposal
    assert len(claim.cells("quick", "counts")) == 6


def test_fig1_claims_run_both_modes_at_the_papers_first_panel():
    # LARA's mode is a reading (the text does not say it), both deciding on ViT-like heads (G-smooth); the other
    # generators, outside the register's hypothesis, are reported beside and never decide
    for claim in (perf.MSE_ORDERING, perf.LARA_DECREASING):
        assert "mode" not in claim.domain and claim.deciding() == ["train", "eval"] and claim.beside("other_inputs")
        assert all(claim.readings[r].words for r in ("train", "eval"))
        for tier in ("quick", "full"):
            for mode in ("train", "eval"):
                cells = claim.cells(tier, mode)
                assert cells and all(p["mode"] == mode and p["generator"] == "smooth" for p in cells), (tier, mode)
        assert {p["generator"] for p in claim.cells("full", "other_inputs")} == {"gauss", "peaked"}
    assert perf.RFA_PLATEAU.deciding() == ["vit_like"]
    assert {p["generator"] for p in perf.RFA_PLATEAU.cells("full", "vit_like")} == {"smooth"}
    for claim in (perf.MSE_ORDERING, perf.RFA_PLATEAU, perf.LARA_DECREASING):
        assert claim.axes("quick")["N"] == [196] and claim.domain["N"].values == (196, 576, 784)
        assert not _covered(claim, "quick") and _covered(claim, "full")


def test_fig1_pair_is_a_conjunction():
    assert perf.MSE_ORDERING.domain["pair"].values == ("ra_below_lara", "lara_below_rfa")


@pytest.mark.parametrize("claim", COMPLEXITY, ids=lambda c: c.id)
def test_complexity_claims_are_decided_by_counts_and_memory_with_cpu_time_beside(claim):
    # exact flop counts (time) and traced peak memory (space) decide; CPU time, which load bends, is reported beside
    assert claim.deciding() == ["counts"] and claim.beside("cpu_time")
    assert len(claim.domain["quantity"].values) == 2  # "time and space/memory": a conjunction, both tested
    assert _covered(claim, "quick") and _covered(claim, "full")
    timed = claim.cells("quick", "cpu_time")
    assert timed and all(p["quantity"] == "time" for p in timed)


def test_rfa_claims_linearity_in_sequence_length_only():
    # "linear in sequence length" with S fixed: N = M is swept at several fixed S, S itself is never swept
    claim = perf.RFA_LINEAR
    assert set(claim.domain) == {"N", "quantity"} and claim.domain["quantity"].values == ("time", "memory")
    cells = claim.cells("quick", "counts")
    assert {p["S"] for p in cells} == set(perf.RFA_S)
    assert all(isinstance(p["N"], (list, tuple)) and not isinstance(p["S"], (list, tuple)) for p in cells)


def test_ra_sweeps_n_equals_m_n_m_and_s_in_time_and_space():
    claim = perf.RA_QUADRATIC
    assert claim.domain["quantity"].values == ("time", "space")
    sweeps = sorted((perf._swept_together(p), perf._ra_claimed(perf._swept_together(p)), p["quantity"])
                    for p in claim.cells("quick", "counts"))
    assert sweeps == sorted((axes, order, q) for axes, order in ((("N", "M"), 2.0), (("N",), 1.0), (("M",), 1.0),
                                                                 (("S",), 1.0)) for q in ("time", "space"))


def test_lara_tests_both_proposals_and_every_cost_part():
    claim = perf.LARA_LINEAR
    assert claim.domain["proposal"].values == ("eq34", "eq35")
    assert len(claim.cells("quick", "counts")) == 16  # 4 sweeps x 2 proposals x time/space
    # the parts' exact orders: eq35's proposals are quadratic in C, key statistics do not grow with N, applying
    # them does not grow with M
    base = dict(perf.LARA_FIXED)

    def slope(part, axis, proposal, lo, hi):
        a, b = (perf._lara_parts(dict(base, **{axis: x}), proposal)[part] for x in (lo, hi))
        return math.log(b / a) / math.log(hi / lo)

    assert slope("proposals", "C", "eq35", 64, 128) == pytest.approx(2.0, abs=0.01)
    assert slope("proposals", "C", "eq34", 64, 128) == pytest.approx(1.0)
    assert slope("key_statistics", "N", "eq34", 4096, 8192) == 0.0
    assert slope("apply", "M", "eq34", 4096, 8192) == 0.0
    assert slope("total", "C", "eq35", 64, 128) < 1 + perf.SLOPE_TOL
