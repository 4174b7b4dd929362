"""lara identity claims in the v2 declaration: domains, coverage at quick and smoke, readings decided by the words."""

import dataclasses

import pytest

from rfkit.validation import validate
from rfkit.validation.claims import claims_in, get_claim
from rfkit.validation.claims.lara import identities
from rfkit.validation.testing import assert_readings_cover_domain

IDS = ("lara.eq2.rfa_forms", "lara.eq3.snis_normaliser_cancels", "lara.eq4.reverse_engineering",
       "lara.prop3_1.mixture_target", "lara.prop3_1.rfa_is_snis", "lara.lemmaa1.tilted_gaussian",
       "lara.g2.rfa_mean_sample_degenerate", "lara.eq9.weights_sum_to_one", "lara.g3_2.optimal_weights_sum_to_one")


def test_module_registers_its_ids_with_domains():
    claims = claims_in(identities)
    assert {c.id for c in claims} == set(IDS)
    for c in claims:
        assert c.domain, c.id
        assert set(c.domain) <= set(c.axes("quick")), (c.id, set(c.domain) - set(c.axes("quick")))


@pytest.mark.parametrize("tier", ["smoke", "quick"])
@pytest.mark.parametrize("claim_id", IDS)
def test_every_deciding_reading_covers_its_domain(claim_id, tier):
    assert_readings_cover_domain(get_claim(claim_id), tier)


def test_the_coverage_assertion_catches_a_grid_that_misses_part_of_the_domain():
    # plant the bug the coverage test exists for: one feature map of the domain is never run
    claim = get_claim("lara.eq2.rfa_forms")
    assert_readings_cover_domain(claim, "smoke")
    holed = dataclasses.replace(claim, where=lambda p, variant: p["feature"] != "hyperbolic")
    with pytest.raises(AssertionError, match="missing hyperbolic"):
        assert_readings_cover_domain(holed, "smoke")
    with pytest.raises(AssertionError, match="declares no domain"):
        assert_readings_cover_domain(dataclasses.replace(claim, domain=None, readings=None), "smoke")


def test_eq9_is_decided_by_one_argument_and_g3_2_by_its_three_readings():
    eq9 = get_claim("lara.eq9.weights_sum_to_one")
    assert eq9.deciding() == ["A"] and eq9.beside("B")
    g32 = get_claim("lara.g3_2.optimal_weights_sum_to_one")
    assert g32.deciding() == ["A", "B", "C"]
    assert all(g32.readings[v].words for v in g32.deciding())
    assert "lara.g3_2.optimal_weights_sum_to_one" in eq9.related and "lara.eq9.weights_sum_to_one" in g32.related


def test_smoke_verdicts_of_the_weight_sums():
    result = validate([get_claim(i) for i in ("lara.eq9.weights_sum_to_one",
                                              "lara.g3_2.optimal_weights_sum_to_one")],
                      tier="smoke", progress=False)
    assert not result.failed
    eq9, g32 = result.claims
    assert eq9.verdict == "supported", eq9.reason
    assert {k: v.verdict for k, v in eq9.variants.items()} == {"A": "supported", "B": "refuted"}
    assert g32.verdict == "inconclusive", g32.reason
    assert {k: v.verdict for k, v in g32.variants.items()} == {"A": "supported", "B": "refuted", "C": "refuted"}
