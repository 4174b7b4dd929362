"""Full-tier economy of the Eq 28 / softmax-form cells of :mod:`rfkit.validation.claims.lara.forms`: the quadratic
Eq 10 reference runs on :data:`~rfkit.validation.claims.lara.forms.REFERENCE_ROWS` selected rows when N is larger,
and a fault confined to rows outside the first ones, to the last row or to the worst-conditioned row is still
caught at the full tier's large cells."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rfkit.estimators import lara as lara_est
from rfkit.validation.cells import plan, run_cell
from rfkit.validation.claims.lara import forms
from rfkit.validation.model import CellContext


def _ctx(seed=0):
    return CellContext("t", "default", {}, "full", 0, 1e-3, 0.8, 1e-9, np.random.default_rng(seed))


def test_reference_rows_are_all_rows_up_to_the_budget():
    q = np.random.default_rng(1).standard_normal((forms.REFERENCE_ROWS, 4))
    assert forms._reference_rows(_ctx(), q, np.ones(len(q))).tolist() == list(range(len(q)))


def test_reference_rows_take_the_ends_the_worst_conditioned_and_the_largest_queries():
    rng = np.random.default_rng(2)
    q, scale = rng.standard_normal((784, 8)), rng.exponential(size=784)
    rows = forms._reference_rows(_ctx(), q, scale)
    assert rows.size == forms.REFERENCE_ROWS == np.unique(rows).size
    assert {0, 783} <= set(rows.tolist())
    assert set(np.argsort(-scale)[: forms.REFERENCE_ROWS // 4].tolist()) <= set(rows.tolist())
    assert set(np.argsort(-(q**2).sum(1))[: forms.REFERENCE_ROWS // 4].tolist()) <= set(rows.tolist())


def _cell(claim, implementations, **want):
    # a point of the full product (the full tier runs a covering design of it, which need not hold this point)
    spec = next(s for s in plan(claim, tier="full", seed=0, implementations=implementations) if s.kind == "grid")
    assert all(want[k] in claim.axes("full")[k] for k in want)
    outcome = run_cell(replace(spec, params={**spec.params, **want}))
    assert outcome.error is None, outcome.error
    return outcome.evidence


def _faulty(rows_of):
    """LARA whose rows ``rows_of(q, out)`` are off by 1e-6 of max|v| (a row-local fault)."""
    def impl(q, k, v, **kw):
        out = np.array(lara_est.lara_attention(q, k, v, **kw))
        out[rows_of(q, out)] += 1e-6 * np.abs(v).max()
        return out
    return impl


@pytest.mark.parametrize("claim", [forms.EQ28_REWRITE, forms.LARA_SOFTMAX_FORM], ids=lambda c: c.id)
def test_the_large_cells_pass_and_catch_row_local_faults(claim):
    where = dict(C=49, N=196, d=8, proposal="eq34", weights="eq9")
    assert _cell(claim, {}, **where).estimate <= 1e-9
    faults = dict(tail=lambda q, out: slice(forms.REFERENCE_ROWS, None),
                  last=lambda q, out: slice(-1, None),
                  largest_query=lambda q, out: np.argmax((q**2).sum(1)))
    for name, rows_of in faults.items():
        evidence = _cell(claim, {"lara_attention": _faulty(rows_of)}, **where)
        assert evidence.extra["rows_compared"] == forms.REFERENCE_ROWS
        assert evidence.estimate > 1e-9, name
