"""Claims v2 checks of :mod:`rfkit.validation.claims.lara.forms` (App D, Eq 10, Eq 35, Eq 28, the special cases,
Corollary C.1, Algorithms 1-3 and the derived identities): declared domains covered at quick, the readings that
decide and those reported beside the verdict, and the verdicts the port changed."""

from __future__ import annotations

import inspect

import pytest

from rfkit.validation import validate
from rfkit.validation.claims.lara import forms
from rfkit.validation.domain import domain_coverage
from rfkit.validation.model import Claim

CLAIMS = [c for c in vars(forms).values() if isinstance(c, Claim)]


def _run(claim, tier):
    return validate([claim], tier=tier, seed=0, progress=False).claims[0]


def test_every_claim_is_ported():
    assert len(CLAIMS) == 16
    for claim in CLAIMS:
        assert claim.domain, claim.id
        assert claim.paper == "lara"
        assert set(claim.axes("quick")) >= set(claim.domain), claim.id  # domain axes are grid axes
    source = inspect.getsource(forms)
    assert "per_tier(" not in source and "hypotheses=" not in source and "variant_notes=" not in source


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_domain_is_covered_at_quick(claim):
    for variant in claim.deciding():
        covered, text = domain_coverage(claim.reading_domain(variant), claim.cells("quick", variant), claim.searched)
        assert covered, (claim.id, variant, text)


def test_readings_follow_the_words():
    eq35, rfa, alg3 = forms.EQ35_AGGREGATION, forms.RFA_SPECIAL, forms.ALG3
    # the printed Eq 35 admits two readings of its normaliser; the verbal description's aggregation is beside
    assert eq35.deciding() == ["printed_C", "printed_M"]
    assert all(eq35.readings[r].words == forms._EQ35_PRINTED for r in eq35.deciding())
    assert eq35.beside("landmark_attention")
    # 'constant functions' names no constant: some (K1) and every (K2) both decide
    assert rfa.deciding() == ["K1", "K2"]
    assert all(rfa.readings[r].words == forms._CONSTANT_FUNCTIONS for r in rfa.deciding())
    # α'_nc is defined in §4.3: the garbled line is read by that definition (P1); the other completion is beside
    assert alg3.deciding() == ["P1"] and alg3.beside("P2")


def test_eq35_is_refuted_by_the_printed_formula():
    result = _run(forms.EQ35_AGGREGATION, "quick")
    assert not result.failed
    assert result.verdict == "refuted"
    assert {k: v.verdict for k, v in result.variants.items()} == {
        "printed_C": "refuted", "printed_M": "refuted", "landmark_attention": "supported"}


def test_alg3_is_supported_at_quick_with_p2_beside():
    result = _run(forms.ALG3, "quick")
    assert not result.failed
    assert result.verdict == "supported", result.reason
    assert result.variants["P2"].verdict == "refuted"


def test_rfa_special_case_depends_on_the_reading():
    result = _run(forms.RFA_SPECIAL, "quick")
    assert result.verdict == "inconclusive"
    assert {k: v.verdict for k, v in result.variants.items()} == {"K1": "supported", "K2": "refuted"}


@pytest.mark.parametrize("claim", [forms.APPD_D1, forms.RA_SPECIAL, forms.ALG1, forms.RFA_SOFTMAX_FORM],
                         ids=lambda c: c.id)
def test_new_degenerate_points_are_supported_at_quick(claim):
    """The ports added C = 1 (App D) and cover N = 1, S = 1: exact there too."""
    result = _run(claim, "quick")
    assert not result.failed
    assert result.verdict == "supported", result.reason
