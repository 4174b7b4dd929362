"""Claims v2: the statement's domain as data, coverage enforced by the engine, where a refuted claim holds.

Every check here is deterministic (exact cells, ``sd=0``), so the tests have no false-failure rate.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from rfkit.validation import validate
from rfkit.validation.domain import Choice, Integers, Range, Reading, coverage, describe, domain_coverage, narrowing
from rfkit.validation.engine import coverage_table
from rfkit.validation.model import Claim, tiers
from rfkit.validation.stats import combine, exact_test, flagged, undecided

# ------------------------------------------------------------------------------------------ axes


def test_range_needs_both_closed_ends_and_every_boundary():
    axis = Range("every z in [0, 1]", 0.0, 1.0, boundaries=(0.5,))
    assert axis.cover("z", [0.0, 0.5, 1.0], False).covered
    cov = axis.cover("z", [0.0, 0.25, 0.9], False)
    assert not cov.covered and "the end 1" in str(cov) and "the boundary 0.5" in str(cov)


def test_open_end_must_be_approached_and_infinite_end_needs_a_declared_limit_or_search():
    open_end = Range("s² > 1/2", 0.5, 4.0, strict=(True, False))
    assert open_end.cover("s2", [0.55, 4.0], False).covered
    assert not open_end.cover("s2", [1.0, 4.0], False).covered  # 0.5 away on a span of 3.5: not near
    unbounded = Range("every norm r > 0", 0.0, math.inf, strict=(True, False))
    assert "unbounded upper end" in str(unbounded.cover("r", [0.01, 5.0], False))
    declared = Range("every norm r > 0", 0.0, math.inf, strict=(True, False), up_to=(None, 8.0),
                     why="exp(r²) overflows float64 beyond")
    cov = declared.cover("r", [0.01, 8.0], False)
    assert cov.covered and "up to 8" in cov.declared
    assert unbounded.cover("r", [], True).covered  # an adversarial search covers the whole axis
    # an open end beside an infinite one is approached relative to the declared practical span: p > 1 up to 4
    p_axis = Range("every p > 1", 1.0, math.inf, strict=(True, False), up_to=(None, 4.0), why="closed forms in p")
    assert p_axis.cover("p", [1.1, 4.0], False).covered          # 0.1 <= 5% of the span 3
    assert not p_axis.cover("p", [1.2, 4.0], False).covered      # 0.2 > 0.15
    with pytest.raises(ValueError, match="why"):
        Range("r", 0.0, math.inf, up_to=(None, 8.0))


def test_integers_need_their_structural_points_and_choices_every_construction():
    m = Integers("every m >= 1, including m = d and d + 1", 1, 64, points=(4, 5))
    assert m.cover("m", [1, 4, 5, 64], False).covered
    assert "the point 5" in str(m.cover("m", [1, 4, 64], False))
    proj = Choice("iid, R-ORF, H-ORF and G-ORF projections", ("iid", "orf", "h-orf", "g-orf"))
    cov = proj.cover("projection", ["iid", "orf"], False)
    assert not cov.covered and cov.missing == ("h-orf", "g-orf")


def test_a_reading_must_lie_inside_the_domain_and_hypotheses_are_generated():
    domain = dict(z=Range("every real z", -2.0, 2.0, boundaries=(0.0,)))
    narrowed = narrowing(domain, Reading("z ≠ 0", dict(z=Range("z > 0", 0.0, 2.0, strict=(True, False)))))
    assert narrowed["z"].lo == 0.0
    with pytest.raises(ValueError, match="not inside"):
        narrowing(domain, Reading("wider", dict(z=Range("z", -3.0, 2.0))))
    with pytest.raises(ValueError, match="does not declare"):
        narrowing(domain, Reading("other", dict(w=Range("w", 0.0, 1.0))))
    assert describe(domain) == "z ∈ [-2, 2], boundary 0 (every real z)"
    ok, text = domain_coverage(domain, [dict(z=-2.0), dict(z=0.0), dict(z=2.0)])
    assert ok and "z: tested [-2, 2]" in text
    assert [c.covered for c in coverage(domain, [dict(z=1.0)])] == [False]


def test_tiers_are_a_base_plus_overrides():
    grid = tiers(dict(m=[16, 64], d=[4]), smoke=dict(m=[16]), full=dict(m=[16, 64, 256]))
    assert grid == {"smoke": dict(m=[16], d=[4]), "quick": dict(m=[16, 64], d=[4]),
                    "full": dict(m=[16, 64, 256], d=[4])}
    with pytest.raises(ValueError, match="unknown tiers"):
        tiers({}, medium={})


# ------------------------------------------------------------------------------------------ engine


def _margin(z: float) -> float:
    """A planted claim "f(z) = |z| > 0 for every real z": exactly true except at its boundary z = 0."""
    return abs(z)


def _strict_cell(ctx):
    # the strict inequality's violation: 1 where f(z) <= 0 (an exact evaluation)
    return exact_test(np.array([0.0 if _margin(ctx.params["z"]) > 0 else 1.0]), 0.0, tolerance=ctx.tolerance)


def _claim(**kw):
    base = dict(id="core.toy.strict", source="test", statement="|z| > 0 for every real z in [-1, 1]",
                kind="inequality", tolerance=0.5, cell=_strict_cell,
                domain=dict(z=Range("every real z in [-1, 1]", -1.0, 1.0, boundaries=(0.0,))),
                grid={"smoke": dict(z=[-1.0, -0.5, 0.5, 1.0])})
    base.update(kw)
    return Claim(**base)


def _verdict(claim):
    return validate([claim], tier="smoke", progress=False).claims[0]


def test_paper_and_hypotheses_come_from_the_declaration():
    claim = _claim()
    assert claim.paper == "core" and claim.hypotheses.startswith("z ∈ [-1, 1], boundary 0")


def test_a_grid_that_skips_the_boundary_cannot_support():
    # the check passes on every tested point, but the strict inequality's boundary z = 0 was never tested:
    # planted uncovered axis -> inconclusive (coverage), never supported
    result = _verdict(_claim())
    assert result.verdict == "inconclusive" and result.cause == "coverage"
    assert "not covered" in result.reason and "the boundary 0" in result.reason


def test_testing_the_boundary_refutes_and_reports_where_the_claim_holds():
    result = _verdict(_claim(grid={"smoke": dict(z=[-1.0, -0.5, 0.0, 0.5, 1.0])}))
    assert result.verdict == "refuted" and result.witness["params"] == {"z": 0.0}
    assert result.holds_on == "z ∈ {-1.0, -0.5, 0.5, 1.0}"
    assert "holds on z ∈" in result.reason


def test_an_undecided_cell_elsewhere_does_not_hide_where_the_claim_holds():
    # planted: z = 1 cannot be decided (a flag), z = 0 violates; before the fix holds_on was empty whenever an
    # undecided cell remained
    def cell(ctx):
        if ctx.params["z"] == 1.0:
            return undecided("heavy tails: planted")
        return _strict_cell(ctx)

    result = _verdict(_claim(cell=cell, grid={"smoke": dict(z=[-1.0, -0.5, 0.0, 0.5, 1.0])}))
    assert result.verdict == "refuted" and result.witness["params"] == {"z": 0.0}
    assert result.holds_on == "z ∈ {-1.0, -0.5, 0.5}"


def test_one_parts_flag_never_hides_another_parts_violation():
    # combine: a flagged (undecidable, p = 1) part beside a part with p = 0 is a rejection, and the cell refutes
    flagged_part = flagged(exact_test(np.zeros(1), 0.0, tolerance=0.5), "heavy tails: planted")
    violating = exact_test(np.array([1.0]), 0.0, tolerance=0.5)
    both = combine([flagged_part, violating])
    assert both.p_value == 0.0 and both.flags == ("heavy tails: planted",)
    result = _verdict(_claim(cell=lambda ctx: combine([flagged_part, violating]),
                             grid={"smoke": dict(z=[-1.0, 0.0, 1.0])}))
    assert result.verdict == "refuted"


def test_a_narrowed_reading_alone_never_supports():
    # planted narrowed reading: "z ≠ 0" tested on its own domain is supported, the statement is not covered
    narrow = Reading("z ≠ 0 (the boundary left out)",
                     dict(z=Range("z in (0, 1]", 0.0, 1.0, strict=(True, False))))
    result = _verdict(_claim(readings={"nonzero": narrow}, grid={"smoke": dict(z=[0.02, 0.5, 1.0])}))
    assert result.variants["nonzero"].verdict == "supported"
    assert result.verdict == "inconclusive" and result.cause == "coverage"
    assert "only narrowed readings" in result.reason and "nonzero" in result.reason
    # a narrowed reading that is itself not covered says what it misses
    alone = _verdict(_claim(readings={"nonzero": narrow}, grid={"smoke": dict(z=[0.5, 1.0])}))
    assert "nonzero: not covered" in alone.reason, alone.reason


def test_a_narrowed_reading_beside_the_statement_is_reported_and_its_violation_refutes():
    narrow = Reading("z ≠ 0", dict(z=Range("z in (0, 1]", 0.0, 1.0, strict=(True, False))))
    full = Reading("as stated")
    claim = _claim(readings={"stated": full, "nonzero": narrow},
                   grid={"smoke": dict(z=[-1.0, 0.0, 0.02, 0.5, 1.0])},
                   where=lambda p, v: v == "stated" or p["z"] > 0)
    result = _verdict(claim)
    assert result.verdict == "refuted" and result.variants["nonzero"].verdict == "supported"
    assert "nonzero" in result.holds_on

    def always_bad(ctx):
        return exact_test(np.array([1.0]), 0.0, tolerance=ctx.tolerance)

    result = _verdict(_claim(cell=always_bad, readings={"stated": full, "nonzero": narrow},
                             grid={"smoke": dict(z=[-1.0, 0.0, 0.02, 0.5, 1.0])},
                             where=lambda p, v: v == "nonzero" and p["z"] > 0))
    assert result.verdict == "refuted" and "sub-domain" in result.reason


def test_a_covered_domain_supports_and_the_coverage_is_shown():
    claim = _claim(cell=lambda ctx: exact_test(np.zeros(1), 0.0, tolerance=ctx.tolerance),
                   grid={"smoke": dict(z=[-1.0, 0.0, 1.0])})
    result = _verdict(claim)
    assert result.verdict == "supported" and "z: tested [-1, 1]" in result.variants["default"].coverage
    table = coverage_table(claim)
    assert table["smoke"]["default"]["covered"] and table["quick"]["default"]["cells"] == 3


def test_a_search_covers_the_axes_it_explores():
    def search(ctx):
        return exact_test(np.zeros(1), 0.0, tolerance=ctx.tolerance)

    claim = _claim(cell=None, search=search, restarts=1, universal=True, grid={}, searched=("z",))
    assert _verdict(claim).verdict == "supported"
    with pytest.raises(ValueError, match="not in its domain"):
        _claim(searched=("w",))


def test_show_json_prints_domain_and_coverage():
    out = subprocess.run([sys.executable, "-m", "rfkit.validation", "show", "core.orf.haar_law", "--json"],
                         capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    assert data["domain"] and set(data["coverage"]) == {"smoke", "quick", "full"}
    assert all("covered" in c for tier in data["coverage"].values() for c in tier.values())


def test_an_axis_swept_inside_a_cell_is_covered_through_its_grid_parameter():
    # a cell that tests N = 0..N_max itself covers every integer up to N_max
    axis = dict(N=Integers("every N >= 0", 0, math.inf, up_to=40, through="N_max", why="exact to 40"))
    ok, text = domain_coverage(axis, [dict(N_max=40)])
    assert ok and "{0..40}" in text
    assert not domain_coverage(axis, [dict(N_max=12)])[0]


def test_a_search_reads_its_tier_settings_from_search_params():
    seen = []

    def search(ctx):
        seen.append(dict(ctx.params))
        return exact_test(np.zeros(1), 0.0, tolerance=ctx.tolerance)

    claim = _claim(cell=None, search=search, restarts=2, universal=True, grid={}, searched=("z",),
                   search_params=tiers(dict(depth=3), smoke=dict(depth=1)))
    assert _verdict(claim).verdict == "supported"
    assert seen == [dict(depth=1), dict(depth=1)]
    assert claim.search_settings("quick") == dict(depth=3) == claim.declaration()["tiers"]["full"]["search_params"]


def test_a_reading_beside_the_verdict_is_reported_but_never_decides():
    def cell(ctx):  # the literal reading holds; the other version fails everywhere
        return exact_test(np.array([0.0 if ctx.variant == "literal" else 1.0]), 0.0, tolerance=ctx.tolerance)

    readings = {"literal": Reading("as written"), "other": Reading("another section's formula", beside=True)}
    result = _verdict(_claim(cell=cell, readings=readings, grid={"smoke": dict(z=[-1.0, 0.0, 1.0])}))
    assert result.verdict == "supported", result.reason
    assert "Fails under the reading other" in result.reason and result.witness is None
    assert "fails at z=" in result.reason  # where the beside reading fails is part of the sentence
    flipped = _verdict(_claim(cell=lambda ctx: cell(replace_variant(ctx)), readings=readings,
                              grid={"smoke": dict(z=[-1.0, 0.0, 1.0])}))
    assert flipped.verdict == "refuted" and "Holds under the reading other" in flipped.reason
    assert flipped.witness["variant"] == "literal"
    with pytest.raises(ValueError, match="cannot narrow"):
        Reading("x", narrows=dict(z=Range("z in [0, 1]", 0.0, 1.0)), beside=True)


def test_a_reading_beside_the_verdict_with_no_cell_at_the_tier_says_it_was_not_run():
    """A beside reading whose cells lie outside this tier's grid was not run: the reason says so (it read
    "Undecided under the reading ...", as if its cells could not decide), and the summary groups it as such."""
    from rfkit.validation.reasons import reason_summary

    def cell(ctx):
        return exact_test(np.zeros(1), 0.0, tolerance=ctx.tolerance)

    readings = {"literal": Reading("as written"), "other": Reading("another section's formula", beside=True)}
    result = _verdict(_claim(cell=cell, readings=readings, grid={"smoke": dict(z=[-1.0, 0.0, 1.0])},
                             where=lambda p, v: v == "literal"))
    assert result.verdict == "supported", result.reason
    assert "Not run at this tier under the reading other" in result.reason and "Undecided" not in result.reason
    summary = reason_summary(result.reason, ["literal", "other"])
    assert summary.endswith("beside the verdict, not run at this tier: other."), summary


def replace_variant(ctx):
    """The context with the two readings' roles swapped (the literal one fails)."""
    return dataclasses.replace(ctx, variant="other" if ctx.variant == "literal" else "literal")


def test_a_tuple_on_a_choice_axis_sweeps_its_members_unless_it_is_a_declared_value():
    kinds = Choice("each kind", ("iid", "orthogonal", "hadamard"))
    swept = coverage(dict(kind=kinds), [dict(kind=("iid", "orthogonal")), dict(kind="hadamard")])[0]
    assert swept.covered
    partial = coverage(dict(kind=kinds), [dict(kind=("iid", "orthogonal"))])[0]
    assert not partial.covered and partial.missing == ("hadamard",)
    shapes = Choice("each shape", ((2, 3), (4, 5)))
    assert not coverage(dict(shape=shapes), [dict(shape=(2, 3))])[0].covered  # the tuple is one value here
    assert coverage(dict(shape=shapes), [dict(shape=(2, 3)), dict(shape=(4, 5))])[0].covered
