"""Covering designs of the full tier's grids (rfkit.validation.design): every pair of values of two axes that
occurs in the product occurs in the design, the quick tier's points are kept, ``where`` is respected, and the
construction is deterministic."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rfkit.validation.design import PRODUCT_LIMIT, covering_rows, tier_points
from rfkit.validation.model import Claim
from rfkit.validation.stats import exact_test


def _pairs(codes: np.ndarray) -> set:
    return {(i, j, a[i], a[j]) for a in map(tuple, codes) for i, j in itertools.combinations(range(codes.shape[1]), 2)}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), st.integers(0, 2**31 - 1), st.floats(0.2, 1.0))
def test_covering_rows_cover_every_pair_that_occurs(sizes, seed, keep):
    rng = np.random.default_rng(seed)
    full = np.array(list(itertools.product(*(range(s) for s in sizes))))
    codes = full[rng.random(len(full)) < keep]  # a `where` removes some combinations
    if len(codes) == 0:
        return
    chosen = rng.choice(len(codes), size=min(3, len(codes)), replace=False)
    rows = covering_rows(codes, chosen)
    assert set(chosen) <= set(rows.tolist())
    if codes.shape[1] >= 2:
        assert _pairs(codes[rows]) == _pairs(codes)
    else:
        assert set(codes[rows, 0]) == set(codes[:, 0])


def test_covering_rows_are_far_fewer_than_the_product():
    codes = np.array(list(itertools.product(range(6), range(5), range(4), range(4), range(3))))
    rows = covering_rows(codes)
    assert _pairs(codes[rows]) == _pairs(codes)
    assert 30 <= len(rows) <= 45  # at least 6 x 5 rows; greedy stays near it (1440 points in the product)


def test_covering_rows_refuse_bad_input():
    with pytest.raises(ValueError, match="codes must be"):
        covering_rows(np.arange(4))
    with pytest.raises(ValueError, match="chosen rows"):
        covering_rows(np.zeros((2, 2), dtype=int), [5])


AXES = dict(a=list(range(10)), b=list(range(8)), c=[0.5, 1.0, 2.0], d=["x", "y", "z"], e=[1, 2])


def test_small_products_and_smaller_tiers_run_whole():
    small = dict(a=[1, 2], b=[3, 4, 5])
    points, text = tier_points(small, lambda p: True, tier="full")
    assert len(points) == 6 and text == "product of 6 points"
    points, _ = tier_points(AXES, lambda p: True, tier="quick")
    assert len(points) == 10 * 8 * 3 * 3 * 2


def test_full_tier_design_keeps_quick_points_respects_where_and_is_deterministic():
    keep = lambda p: not (p["a"] > 7 and p["d"] == "z")  # noqa: E731 - a `where` that removes pairs
    seeds = [dict(a=0, b=0, c=0.5, d="x", e=1), dict(a=99, b=0, c=0.5, d="x", e=1)]  # the 2nd: outside, run
    points, text = tier_points(AXES, keep, tier="full", seeds=seeds)
    product = [p for p in (dict(zip(AXES, v, strict=True)) for v in itertools.product(*AXES.values())) if keep(p)]
    assert len(product) > PRODUCT_LIMIT and len(points) < len(product) / 10
    assert all(s in points for s in seeds) and all(keep(p) for p in points)
    for x, y in itertools.combinations(AXES, 2):
        assert {(p[x], p[y]) for p in product} <= {(p[x], p[y]) for p in points}
    assert "pairwise covering design" in text and f"of {len(product)} product points" in text
    assert tier_points(AXES, keep, tier="full", seeds=seeds)[0] == points


def test_a_claims_full_cells_are_its_design_and_its_declaration_says_so():
    claim = Claim(id="core.test.design", source="test", statement="s", kind="identity", hypotheses="none",
                  tolerance=1e-9, grid={"smoke": dict(a=[0]), "quick": dict(a=[0, 1], b=[0]), "full": AXES},
                  cell=lambda ctx: exact_test(np.zeros(2), np.zeros(2), tolerance=1e-9))
    full = claim.cells("full", "default")
    assert {"a": 0, "b": 0} in full and len(full) < 200  # a quick point outside the full product runs as it is
    design = claim.declaration()["tiers"]["full"]["design"]["default"]
    assert design.startswith("pairwise covering design")
    assert claim.declaration()["tiers"]["quick"]["design"]["default"] == "product of 2 points"


def test_rfkit_show_states_a_covering_design(capsys):
    from rfkit.validation.cli import main

    assert main(["show", "performer.eq43.mgf_ordering"]) == 0
    full = capsys.readouterr().out.split("tier full", 1)[1].splitlines()
    assert full[1].strip().startswith("pairwise covering design:") and "product points" in full[1]
