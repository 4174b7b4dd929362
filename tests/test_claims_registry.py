"""Registry-wide rules of the v2 declarations: related claims are linked both ways, and readings decide
together only where the statement's words admit each of them."""

from __future__ import annotations

import numpy as np
import pytest

from rfkit.validation import validate
from rfkit.validation.claims import all_claims, get_claim
from rfkit.validation.model import Claim
from rfkit.validation.report import markdown_report
from rfkit.validation.site import claim_page
from rfkit.validation.stats import exact_test

#: Papers whose claims are ported and audited (issues 13-15 add theirs as they land).
AUDITED = ("performer", "lara")


def test_related_claims_exist_and_are_declared_on_both_sides():
    for claim in all_claims():
        for other in claim.related:
            assert claim.id in get_claim(other).related, f"{other} does not link back to {claim.id}"


@pytest.mark.parametrize("paper", AUDITED)
def test_readings_that_decide_together_name_the_words_that_admit_them(paper):
    for claim in (c for c in all_claims() if c.paper == paper):
        deciding = claim.deciding()
        if len(deciding) > 1:
            unnamed = [v for v in deciding if not (claim.readings and claim.readings[v].words)]
            assert not unnamed, f"{claim.id}: readings {unnamed} decide the verdict but name no statement words"


def test_the_report_links_related_claims():
    def holds(ctx):
        return exact_test(np.zeros(1), 0.0, tolerance=ctx.tolerance)

    def toy(name, other):
        return Claim(id=f"core.toy.{name}", source="test", statement="0 = 0", kind="identity", tolerance=0.1,
                     cell=holds, grid={"smoke": dict(z=[0.0])}, related={f"core.toy.{other}": "the same zero"})

    run = validate([toy("a", "b"), toy("b", "a")], tier="smoke", progress=False)
    assert "*Related:* `core.toy.b` (supported): the same zero" in markdown_report(run)
    assert '<a href="core.toy.a.html">core.toy.a</a> (supported): the same zero' in claim_page(run, run.claims[1])
