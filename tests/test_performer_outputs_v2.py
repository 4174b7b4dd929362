"""performer outputs claims (v2 declarations): the exact median test of the Fig 4 claims, the mean reading decided by
theory, the unidirectional output of sec5.unbiased_output, and the Fig 4 refutation re-derived without the claim."""

import math

import numpy as np
import pytest
from scipy import stats

from rfkit.estimators import softmax_attention
from rfkit.validation.claims.performer import outputs
from rfkit.validation.model import CellContext
from rfkit.validation.reproductions.performer import fig4_inputs, fig4_output_mse


def _ctx(claim_id, variant, params, replicates, seed=3):
    return CellContext(claim_id, variant, params, "smoke", replicates, 1e-3, 0.8, 0.05, np.random.default_rng(seed))


# ----------------------------------------------------------------------------------------------- median test


def test_median_test_p_value_is_the_sign_test():
    x = np.random.default_rng(0).standard_cauchy(301) - 0.02
    ev = outputs.median_test(x, alpha=0.01, tolerance=0.05)
    below = int(np.sum(x < -0.05))
    assert ev.statistic == below
    assert ev.p_value == pytest.approx(stats.binomtest(below, 301, 0.5, alternative="greater").pvalue, rel=1e-9)
    assert ev.effect == pytest.approx(-np.median(x)) and ev.validity == "exact"


def test_median_lower_bound_covers_at_its_level_for_cauchy_tails():
    """The order-statistic bound is exact whatever the tails: 4000 Cauchy samples of 51, coverage >= 1 - alpha
    (binomial: the observed miss rate stays below alpha + 4 sd)."""
    rng = np.random.default_rng(1)
    alpha, misses, trials = 0.05, 0, 4000
    for _ in range(trials):
        ev = outputs.median_test(rng.standard_cauchy(51), alpha=alpha, tolerance=0.05)
        misses += ev.upper < 0.0  # the true median 0 has violation 0: the bound must not fall below it
    assert misses / trials <= alpha + 4 * math.sqrt(alpha * (1 - alpha) / trials)


@pytest.mark.parametrize(("shift", "decided"), [(0.5, "supported"), (-0.5, "refuted"), (-0.04, "undecided")])
def test_median_test_decides_a_shift_and_names_the_pairs_it_needs(shift, decided):
    x = np.random.default_rng(2).standard_normal(400) * 0.5 + shift
    ev = outputs.median_test(x, alpha=1e-3, tolerance=0.05)
    if decided == "supported":
        assert ev.upper <= 0.05 and not ev.flags
    elif decided == "refuted":
        assert ev.p_value < 1e-3 and not ev.flags
    else:
        assert ev.upper > 0.05 and ev.p_value > 1e-3 and ev.flags[0].startswith("underpowered")
        assert "pairs" in ev.flags[0]


# ----------------------------------------------------------------------------------------------- Fig 4 cells


def test_pos_vs_trig_mean_reading_is_decided_by_theory_without_sampling():
    """E MSE_trig = ∞ > E MSE_pos (finite): supported exactly, no replicate drawn, for every budget and projection."""
    for budget in ("same_m", "same_features"):
        params = dict(projection="orthogonal", budget=budget, m=4, d=16, c=2.0, L=64)
        ev = outputs._fig4_pos_trig_cell(_ctx("performer.fig4.pos_vs_trig", "mean", params, 16))
        assert ev.n == 0 and ev.validity == "exact" and ev.upper <= 0 and not ev.flags


def test_orf_vs_iid_mean_reading_narrows_to_positive_features():
    claim = outputs.FIG4_ORF_VS_IID
    assert claim.narrowed("mean") and not claim.narrowed("median")
    assert all(p["feature"] == "positive" for t in ("smoke", "quick", "full") for p in claim.cells(t, "mean"))
    ev = outputs._fig4_orf_cell(_ctx(claim.id, "mean", dict(feature="trig", m=16, d=16, c=0.5, L=64), 16))
    assert ev.n == 0 and ev.p_value == 1.0 and ev.flags[0].startswith("infinite mean")


def test_small_inputs_favour_orthogonal_trig_over_positive_features_plain_monte_carlo():
    """Behind pos_vs_trig's median refutation (c = 0.5, m = 16, R-ORF, same m): with plain Monte Carlo outside
    the claim, trig features have the lower output MSE in most paired draws (~80% at 2048 pairs). 300 seeded
    pairs; the threshold 0.6 is > 6 binomial sd below the observed share."""
    rng = np.random.default_rng(5)
    lower = 0
    for _ in range(300):
        q, k, v = fig4_inputs(64, 16, 0.5, rng)
        exact = softmax_attention(q, k, v)
        mse = {f: fig4_output_mse(q, k, v, feature=f, projection="orthogonal", m=16, rng=rng, exact=exact)
               for f in ("trig", "positive")}
        lower += mse["trig"] < mse["positive"]
    assert lower / 300 > 0.6


def test_fig4_sizes_are_a_grid_axis_not_the_tier():
    for claim in (outputs.FIG4_ORF_VS_IID, outputs.FIG4_POS_VS_TRIG):
        assert {t: claim.axes(t)["L"] for t in ("smoke", "quick", "full")} == dict(smoke=[64], quick=[64],
                                                                                  full=[1024])


# ----------------------------------------------------------------------------------------------- sec5


def test_unidirectional_output_is_tested_and_biased():
    """sec5.unbiased_output, direction = unidirectional (Eq 2): a cell compares the prefix-sum output with the exact
    causal attention and finds the ratio's bias (m = 4 SM⁺ features, c = 1)."""
    params = dict(kind="positive", projection="iid", direction="unidirectional", L=4, d=2, m=4, inputs="I1(c=1)")
    ev = outputs._unbiased_output_cell(_ctx(outputs.UNBIASED_OUTPUT.id, "output", params, 4000))
    assert ev.p_value < 1e-6


def test_causal_outputs_ignore_future_keys():
    ctx = _ctx(outputs.UNBIASED_OUTPUT.id, "output", {}, 1)
    xs, ys = np.random.default_rng(4).normal(0, 0.3, size=(2, 5, 2))
    v = np.random.default_rng(5).standard_normal((5, 2))
    a = outputs._attention_outputs(ctx, "positive", xs, ys, v, 8, "iid", 3, causal=True)
    ctx = _ctx(outputs.UNBIASED_OUTPUT.id, "output", {}, 1)
    v2 = v.copy()
    v2[-1] += 10.0
    b = outputs._attention_outputs(ctx, "positive", xs, ys, v2, 8, "iid", 3, causal=True)
    np.testing.assert_allclose(a[:, :-1], b[:, :-1], rtol=1e-12)
    assert not np.allclose(a[:, -1], b[:, -1])


def test_sec5_literal_reading_decides_and_the_matrix_is_beside():
    claim = outputs.UNBIASED_OUTPUT
    assert claim.deciding() == ["output"] and claim.beside("matrix")


def test_delta_method_control_variate_is_the_first_order_error():
    # D̂⁻¹ÂV - D⁻¹AV minus the control variate is second order in δA = Â - A: shrinking δA 10x shrinks the
    # residual ~100x (a wrong linearisation, e.g. without the -o·δA1 term, leaves a first-order residual)
    rng = np.random.default_rng(0)
    a = np.exp(rng.normal(0.0, 0.5, (5, 7)))
    v = rng.standard_normal((7, 3))
    exact = (a @ v) / a.sum(axis=-1, keepdims=True)
    direction = rng.standard_normal((5, 7))
    residuals = []
    for eps in (1e-3, 1e-4):
        gram = a + eps * direction
        err = (gram @ v) / gram.sum(axis=-1, keepdims=True) - exact
        residuals.append(np.abs(err - outputs._first_order_error(gram - a, a.sum(axis=-1)[:, None], exact, v)).max())
    assert residuals[1] < residuals[0] / 50


def test_delta_method_bias_is_resolved_with_the_control_variate():
    # quick cell (seed 0): the plain mean of the error along the bias had a relative radius ~0.1 (half the 0.2
    # tolerance); with the first-order control variate it resolves to ~0.02
    from rfkit.validation.cells import plan, run_cell
    from rfkit.validation.claims import get_claim

    spec = plan(get_claim("performer.derived.output_delta_method"), tier="quick", seed=0)[0]
    ev = run_cell(spec).evidence
    assert ev.resolution < 0.05  # the worst of the two parts (bias, MSE)
