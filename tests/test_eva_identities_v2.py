"""eva identity claims in the v2 declaration: domains, coverage at smoke and quick, readings decided by the words,
the swept-tuple cells, and the verdicts that the port changed (smoke, seed 0)."""

import pytest

from rfkit.validation import validate
from rfkit.validation.claims import claims_in, get_claim
from rfkit.validation.claims.eva import identities
from rfkit.validation.testing import assert_readings_cover_domain

IDS = tuple(sorted(c.id for c in claims_in(identities)))


def run(ids, **kw):
    kw.setdefault("tier", "smoke")
    kw.setdefault("progress", False)
    return validate([get_claim(i) for i in ids], **kw)


def test_every_claim_declares_a_domain_on_its_grid_axes():
    assert len(IDS) == 28
    for claim_id in IDS:
        c = get_claim(claim_id)
        assert c.domain, claim_id
        assert set(c.domain) <= set(c.axes("quick")), (claim_id, set(c.domain) - set(c.axes("quick")))
        assert c.hypotheses                                           # generated from the domain


@pytest.mark.parametrize("tier", ["smoke", "quick"])
@pytest.mark.parametrize("claim_id", IDS)
def test_every_deciding_reading_covers_its_domain(claim_id, tier):
    assert_readings_cover_domain(get_claim(claim_id), tier)


def test_readings_split_only_eq4_the_rest_decided_by_the_literal_statement():
    eq4 = get_claim("eva.eq4.snis_equals_rfa")
    assert eq4.deciding() == ["R1", "R2"] and all(eq4.readings[v].words for v in eq4.deciding())
    beside = {"eva.eq20.variance_expansion": (["entrywise"], {"trace"}),
              "eva.appg1.full_exact_set_is_softmax": (["ideal"], {"practical_c0", "practical_all",
                                                                  "practical_complement"}),
              "eva.appg1.singleton_chunks_is_softmax": (["ideal"], {"practical_identity",
                                                                    "practical_ln_identity_init",
                                                                    "practical_ln_random"}),
              "eva.appg1.one_chunk_no_exact_is_rfa": (["ideal"], {"practical_mu_zero", "practical_mu_rule"}),
              "eva.appg5.scatterbrain_special_case": (["c1"], {"c2", "c3"}),
              "eva.appd.causal_no_future_leak": (["alg2"], {"before_own_chunk", "overlapping_window"})}
    for claim_id, (deciding, others) in beside.items():
        c = get_claim(claim_id)
        assert c.deciding() == deciding, claim_id
        assert all(c.beside(v) for v in others), claim_id


def test_related_claims_link_both_ways():
    for claim_id in IDS:
        for other in get_claim(claim_id).related:
            assert claim_id in get_claim(other).related, (claim_id, other)


def test_every_named_construction_is_in_the_domains():
    from rfkit.validation.claims.eva.inputs import GENERATORS, MEANS, VALUE_KINDS
    ratio = get_claim("eva.prop1.ratio_equals_value")                 # "any ρ": means and shapes
    assert set(ratio.domain["mu"].values) == set(MEANS)
    assert set(ratio.domain["rho"].values) == {"unit", "narrow", "wide", "mixture"}
    assert set(ratio.domain["inputs"].values) == set(GENERATORS)
    assert set(ratio.domain["values"].values) == set(VALUE_KINDS)
    assert set(get_claim("eva.eq16.reduction_from_eq13").domain["sigma"].values) == {
        "identity", "ln_identity_init", "ln_random"}
    assert set(get_claim("eva.alg1.implements_eq16").domain["sigma"].values) == {
        "identity", "ln_identity_init", "ln_random"}


def test_swept_tuple_cells_report_the_worst_member():
    c = get_claim("eva.prop1.ratio_equals_value")
    swept = [p for p in c.cells("smoke", "default") if isinstance(p.get("rho"), tuple)]
    assert swept and all(p["d"] == 4 for p in swept)
    result = run(["eva.sec3_1.alpha_constant"])
    assert not result.failed
    tuples = [o for o in result.claims[0].outcomes if isinstance(o.spec.params.get("inputs"), tuple)]
    assert tuples and all("worst" in o.evidence.extra for o in tuples)


def test_smoke_verdicts_after_the_port():
    ids = ["eva.eq4.snis_equals_rfa", "eva.eq20.variance_expansion", "eva.eq6.snis_cv_identity",
           "eva.appg1.full_exact_set_is_softmax", "eva.appg1.singleton_chunks_is_softmax",
           "eva.appg5.scatterbrain_special_case", "eva.prop1.ratio_equals_value"]
    result = run(ids)
    assert not result.failed, [o.error for c in result.claims for o in c.outcomes if o.error]
    got = {c.claim.id: c.verdict for c in result.claims}
    assert got == {"eva.eq4.snis_equals_rfa": "inconclusive",             # R1 supported, R2 refuted
                   "eva.eq20.variance_expansion": "refuted",              # the printed matrix identity; trace beside
                   "eva.eq6.snis_cv_identity": "refuted",                 # the printed chain's line L4
                   "eva.appg1.full_exact_set_is_softmax": "supported",    # Eq 13; practical_all fails beside
                   "eva.appg1.singleton_chunks_is_softmax": "supported",  # Eq 13; LN∘Linear σ fail beside
                   "eva.appg5.scatterbrain_special_case": "supported",    # c1; c2, c3 fail beside
                   "eva.prop1.ratio_equals_value": "supported"}, got
    eq6 = next(c for c in result.claims if c.claim.id == "eva.eq6.snis_cv_identity")
    assert "L3-L4" not in eq6.variants["default"].holds_on and "eq6" in eq6.variants["default"].holds_on
