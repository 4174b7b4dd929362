"""Full-tier cost changes of lara/statistical.py: theory-sized plans and the one-pass nested RFA prefixes."""

import math

import numpy as np
import pytest
from scipy.special import softmax

from rfkit.theory import softmax as softmax_theory
from rfkit.validation.claims.lara import statistical as st


@pytest.mark.parametrize("geometry", [(0.3, 0.3, 3 * math.pi / 4), (0.0, 0.5, 0.0), (1.0, 0.5, 1.0)])
@pytest.mark.parametrize("fmap,kind", [("positive", "positive"), ("hyperbolic", "hyperbolic"),
                                       ("trig_sincos", "trig")])
@pytest.mark.parametrize("S", [1, 16, 1024])
def test_squared_error_sd_matches_theory(geometry, fmap, kind, S):
    """The quadrature sd that sizes the random-phase map's plan is the closed form where one exists."""
    x2, y2 = st._plane_pair(*geometry)
    ref = softmax_theory.squared_error_moments(kind, x2, y2, S)["sd"]
    assert st._squared_error_sd(x2, y2, fmap, S) == pytest.approx(ref, rel=1e-8)


class _Ctx:
    def __init__(self, planned):
        self.planned, self.replicates, self.tolerance = planned, planned, 1.0

    def sub_test(self, parts):
        return dict(alpha=1e-5 / parts, power=0.8, tolerance=1.0)


def test_theory_plan_is_clipped():
    assert st._theory_plan(_Ctx(10**6), 1e-6, 2) == st.MIN_PLAN
    assert st._theory_plan(_Ctx(10**6), 1e3, 2) == 10**6
    assert st._theory_plan(_Ctx(10**6), math.inf, 2) == 10**6
    mid = st._theory_plan(_Ctx(10**6), 30.0, 2)
    assert st.MIN_PLAN < mid < 10**6


def test_nested_prefix_equals_softmax(monkeypatch):
    """The consistency cell's one-pass prefixes give the softmax of logits[:, :S] at every size."""
    rng = np.random.default_rng(0)
    n, sizes, dv = 7, [16, 23, 32, 45, 64], 3
    logits = rng.standard_normal((n, 64)) * 5
    F = rng.standard_normal((n, 64, dv))
    top = np.full(n, -np.inf)
    den, num = np.zeros(n), np.zeros((n, dv))
    for lo, hi in zip([0] + sizes[:-1], sizes, strict=True):
        block = logits[:, lo:hi]
        new_top = np.maximum(top, block.max(axis=1))
        keep = np.exp(top - new_top)
        w = np.exp(block - new_top[:, None])
        den = den * keep + w.sum(axis=1)
        num = num * keep[:, None] + np.einsum("rs,rsd->rd", w, F[:, lo:hi])
        top = new_top
        ref = np.einsum("rs,rsd->rd", softmax(logits[:, :hi], axis=-1), F[:, :hi])
        np.testing.assert_allclose(num / den[:, None], ref, rtol=1e-12, atol=1e-14)
