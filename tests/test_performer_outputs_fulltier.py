"""performer outputs claims at the full tier: the batched Fig 4 pairs agree with the per-replicate reference, the
coupled batch keeps coupled_projections' construction, the looks still refute a planted reversal, the full grids
cover their domains with one m-tuple per cell, and the m-scaled budgets."""

import numpy as np

from rfkit.estimators import FEATURE_MAPS, linear_attention, softmax_attention
from rfkit.validation.claims.performer import outputs
from rfkit.validation.engine import coverage_table
from rfkit.validation.model import CellContext
from rfkit.validation.reproductions.performer import fig4_output_mse


def _ctx(claim_id, variant, params, replicates, tier="full", seed=5, alpha=1e-3):
    return CellContext(claim_id, variant, params, tier, replicates, alpha, 0.8, 0.05, np.random.default_rng(seed))


def test_batched_rows_match_per_replicate_features():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(0, 0.5, (3, 4, 12, 8))
    omega = rng.standard_normal((4, 6, 8))
    exact = softmax_attention(q, k, v)
    for feature in ("positive", "trig"):
        fmap = FEATURE_MAPS[feature]
        op = outputs._BatchedRows(omega)
        scale = 8**-0.25
        batched = np.mean((linear_attention(fmap(q * scale, op), fmap(k * scale, op), v) - exact) ** 2, axis=(-2, -1))
        loop = [fig4_output_mse(q[b], k[b], v[b], feature=feature, projection="iid", m=6, rng=rng, exact=exact[b],
                                omega=omega[b]) for b in range(4)]
        np.testing.assert_allclose(batched, loop, rtol=1e-10)


def test_coupled_batch_is_coupled_projections_construction():
    g, ort = outputs._coupled_batch(5, 17, 8, np.random.default_rng(1))
    np.testing.assert_allclose(np.linalg.norm(ort, axis=-1), np.linalg.norm(g, axis=-1))
    for block in (slice(0, 8), slice(8, 16)):
        unit = ort[:, block] / np.linalg.norm(ort[:, block], axis=-1, keepdims=True)
        np.testing.assert_allclose(unit @ np.swapaxes(unit, -1, -2), np.broadcast_to(np.eye(8), (5, 8, 8)),
                                   atol=1e-12)
        np.testing.assert_allclose(ort[:, block.start], g[:, block.start], atol=1e-12)  # first row of a block is g
    np.testing.assert_allclose(ort[:, 16], g[:, 16], atol=1e-12)  # a one-row block is its g row


def test_looks_refute_a_planted_reversal_and_support_the_claim():
    """Positive features at small inputs: ORF beats iid by a wide margin at m = d. Swapping the estimators (the bug
    a reversed comparison would be) must be refuted through the looks; the claim itself supported."""
    params = dict(feature="positive", m=(8, 9), d=8, c=0.5, L=32)
    ms = params["m"]
    iid = [dict(feature="positive", projection="iid", m=m) for m in ms]
    ort = [dict(feature="positive", projection="orthogonal", m=m) for m in ms]
    claim = outputs.FIG4_ORF_VS_IID
    good = outputs._fig4_test(_ctx(claim.id, "median", params, 512), "median", iid, ort, coupled=True)
    bad = outputs._fig4_test(_ctx(claim.id, "median", params, 512), "median", ort, iid, coupled=True)
    assert good.p_value > 0.5 and good.upper <= 0.05 and not good.flags
    assert bad.p_value < 1e-3
    assert bad.extra["parts"] == 2 and bad.n < 2 * 512  # a part decided before the last look (n: both parts' pairs)


def test_full_grids_cover_their_domains_with_m_tuples():
    for claim in (outputs.FIG4_ORF_VS_IID, outputs.FIG4_POS_VS_TRIG, outputs.UNBIASED_OUTPUT,
                  outputs.UNBIASED_ATTENTION_MATRIX):
        table = coverage_table(claim)["full"]
        assert all(row["covered"] for row in table.values()), (claim.id, table)
    assert outputs.FIG4_ORF_VS_IID.axes("full")["m"] == outputs.FIG4_FULL_M


def test_full_budgets_scale_with_m_and_quick_is_flat():
    claim = outputs.UNBIASED_OUTPUT
    full = {m: outputs._replicates(_ctx(claim.id, "output", {}, 200_000), m) for m in (1, 4, 16, 64, 256)}
    assert full == {1: 200_000, 4: 200_000, 16: 50_000, 64: 12_500, 256: 12_500}
    assert outputs._replicates(_ctx(claim.id, "output", {}, 20_000, tier="quick"), 256) == 20_000


def test_entry_draws_are_the_gram_entries():
    rng = np.random.default_rng(2)
    xs, ys = rng.normal(0, 0.3, (2, 5, 4))
    rows, cols = np.array([0, 3, 4]), np.array([1, 1, 4])
    for kind, projection in (("positive", "orthogonal"), ("trig", "iid"), ("hyperbolic", "hadamard")):
        a = outputs._entry_draws(_ctx("x", "default", {}, 1, seed=7), kind, xs, ys, 6, projection, 9, rows, cols)
        g = outputs._gram_draws(_ctx("x", "default", {}, 1, seed=7), kind, xs, ys, 6, projection, 9)
        np.testing.assert_allclose(a, g[:, rows, cols], rtol=1e-12)


def test_matrix_looks_stop_early_when_clear_and_refute_a_planted_bias():
    """Full-tier matrix cells look at n/4 then n: a clear cell stops at n/4; an estimate 10% too large (twice the
    tolerance: the bug a mis-normalised feature map would be) is refuted."""
    from rfkit.estimators import FEATURE_MAPS
    from rfkit.estimators.features import Features
    claim = outputs.UNBIASED_ATTENTION_MATRIX
    params = dict(kind="positive", projection="iid", d=4, m=16, L=4, inputs="I1(c=0.25)")
    good = outputs._unbiased_matrix_cell(_ctx(claim.id, "default", params, 40_000))
    assert good.upper <= 0.05 and good.extra["looks"] == [2_500]  # m = 16: n = 40 000·4/16, first look n/4

    def biased(x, omega):
        f = FEATURE_MAPS["positive"](x, omega)
        return Features(f.values, f.log_scale + 0.5 * np.log(1.1))

    ctx = CellContext(claim.id, "default", params, "full", 40_000, 1e-3, 0.8, 0.05, np.random.default_rng(5),
                      implementations={"feature_map.positive": biased})
    bad = outputs._unbiased_matrix_cell(ctx)
    assert bad.p_value < 1e-3
