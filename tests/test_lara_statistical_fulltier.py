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


def _is_ctx(params, tier="full", seed=0, **kw):
    import dataclasses

    from rfkit.validation.model import CellContext

    c = CellContext(st.IS_UNBIASED.id, st.IS_UNBIASED.variants[0], params, tier, 2_000_000, 3e-6, 0.8,
                    st.IS_UNBIASED.tolerance, np.random.default_rng(seed))
    return dataclasses.replace(c, **kw)


def test_is_part_beyond_min_plan_uses_control_variates_and_catches_a_planted_bias():
    """A full-tier Monte Carlo cell whose exact sd needs more than MIN_PLAN raw replicates (but fewer than its 2e6
    plan) is decided by the control-variate residuals in a few MIN_PLAN replicates; a 1.1x estimator is not
    supported there (the residual keeps its mean)."""
    from rfkit.estimators import is_estimate

    params = dict(route="mc", proposal="shifted", distance=2.0, d=8, M=8, S=1, logit_std=0.5, design="dense")
    ev = st._is_cell(_is_ctx(params))
    assert not ev.flags and ev.upper <= st.IS_UNBIASED.tolerance
    assert ev.n <= 4 * st.MIN_PLAN * max(1, st.IS_DRAWS // params["S"])  # not the ~1e6 raw replicates

    def biased(values, *, weights=None, log_weights=None, **kw):
        return 1.1 * is_estimate(values, weights=weights, log_weights=log_weights, **kw)

    # a fifth of the tier's budget refutes it (p ~ 6e-11, ~18 s; the whole budget took ~150 s of CI)
    bad = st._is_cell(_is_ctx(params, implementations={"is_estimate": biased}, replicates=400_000))
    assert (bad.p_value < 1e-3 or bad.flags) and bad.upper > st.IS_UNBIASED.tolerance


@pytest.mark.parametrize("n_keys,d", [(2, 64), (16, 64), (3, 4), (196, 64)])
def test_span_coordinates_keep_the_gram_matrix_and_rfa(n_keys, d):
    """The consistency cell draws ω in span{q_n, k_m}: every inner product and norm is kept (so ω·q, ω·k_m have the
    D-dimensional law), and RFA on the projected draws equals RFA on the D-dimensional ones."""
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal(d) * 0.3, rng.standard_normal((n_keys, d)) * 0.3, rng.standard_normal((n_keys, 3))
    q_r, k_r = st._span_coordinates(q, k)
    assert k_r.shape[1] == min(d, n_keys + 1)
    a, a_r = np.vstack([q, k]), np.vstack([q_r, k_r])
    np.testing.assert_allclose(a_r @ a_r.T, a @ a.T, rtol=1e-12, atol=1e-13)
    if n_keys + 1 < d:
        basis = np.linalg.qr(a.T)[0]
        omega = rng.standard_normal((5, 32, d))
        np.testing.assert_allclose(st._rfa_replicates(q_r[None], k_r, v, omega @ basis),
                                   st._rfa_replicates(q[None], k, v, omega), rtol=1e-10, atol=1e-12)


def test_value_span_coordinates_keep_the_error_norm():
    """The consistency cell rotates V (and μ) into the span of V's rows: ‖RFA - μ‖ is unchanged."""
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((1, 64)) * 0.3, rng.standard_normal((2, 64)) * 0.3, rng.standard_normal((2, 64))
    mu = softmax(k @ q[0]) @ v
    mu_r, v_r = st._span_coordinates(mu, v)
    assert v_r.shape[1] == 3
    omega = rng.standard_normal((4, 16, 64))
    err = ((st._rfa_replicates(q, k, v, omega)[:, 0] - mu) ** 2).sum(-1)
    err_r = ((st._rfa_replicates(q, k, v_r, omega)[:, 0] - mu_r) ** 2).sum(-1)
    np.testing.assert_allclose(err_r, err, rtol=1e-10)
