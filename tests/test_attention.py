"""Exact and linear attention: exactness against the quadratic oracle, causality, masks, stability."""

import numpy as np
import pytest

from rfkit.estimators import (
    Features,
    NonPositiveDenominatorWarning,
    NumericalError,
    hyperbolic_features,
    kernel_attention,
    linear_attention,
    linear_attention_quadratic,
    orthogonal_projection,
    positive_features,
    softmax_attention,
    trig_features,
)


def naive_softmax(q, k, v, scale, mask=None):
    logits = scale * q @ np.swapaxes(k, -1, -2)
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


def naive_linear(qf, kf, v, causal):
    """Q'(K'ᵀ V) / Q'(K'ᵀ 1) computed the plain, quadratic way from dense features."""
    a = qf @ kf.T
    if causal:
        a = np.tril(a)
    return (a @ v) / (a @ np.ones(len(v)))[:, None]


# every L with every chunk size, except chunk 1 at L = 1024 (chunk 16 covers it at 1/16 of the cost)
_L_CHUNK = [(L, c) for L in (1, 2, 17, 1024) for c in (1, 16, 128, 4096) if (L, c) != (1024, 1)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("L", "chunk"), _L_CHUNK)
def test_linear_attention_equals_quadratic_form(rng, L, causal, chunk):
    d, m, dv = 8, 16, 3
    w = orthogonal_projection(m, d, rng=rng)
    q, k = rng.normal(size=(2, L, d)) * 0.5
    v = rng.normal(size=(L, dv))
    qf, kf = positive_features(q, w), positive_features(k, w)
    got = linear_attention(qf, kf, v, causal=causal, chunk_size=chunk)
    want = naive_linear(qf.dense(), kf.dense(), v, causal)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("feature_map", [positive_features, hyperbolic_features])
@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_with_batch_dims_matches_oracle(rng, feature_map, causal):
    d, m, L = 4, 12, 33
    w = orthogonal_projection(m, d, rng=rng)
    q, k = rng.normal(size=(2, 2, 3, L, d))
    v = rng.normal(size=(3, L, 5))  # broadcasts over the leading batch axis
    qf, kf = feature_map(q, w), feature_map(k, w)
    got = linear_attention(qf, kf, v, causal=causal, chunk_size=8)
    want = linear_attention_quadratic(qf, kf, v, causal=causal)
    assert got.shape == (2, 3, L, 5)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_wide_key_scales_take_the_exact_weight_path(rng):
    # Key log-scales spread by > 300 inside one chunk force the b×b exponent path; huge norms would
    # overflow any unstabilised computation.
    L, d, m = 40, 3, 8
    w = orthogonal_projection(m, d, rng=rng)
    q = rng.normal(size=(L, d))
    k = rng.normal(size=(L, d))
    k[::7] *= 40.0
    qf, kf = positive_features(q, w), positive_features(k, w)
    assert np.ptp(kf.log_scale) > 300
    for chunk in (4, 64):
        got = linear_attention(qf, kf, np.eye(L)[:, :4], causal=True, chunk_size=chunk)
        want = linear_attention_quadratic(qf, kf, np.eye(L)[:, :4], causal=True)
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("feature_map", [positive_features, hyperbolic_features, trig_features])
@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_causal_outputs_do_not_depend_on_future_tokens(rng, feature_map, chunk):
    L, d, m, t = 50, 4, 8, 23
    w = orthogonal_projection(m, d, rng=rng)
    q, k = rng.normal(size=(2, L, d))
    v = rng.normal(size=(L, 2))
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    q2[t + 1:] = rng.normal(size=(L - t - 1, d)) * 30  # huge future norms stress the stabilisers
    k2[t + 1:] = rng.normal(size=(L - t - 1, d)) * 30
    v2[t + 1:] = rng.normal(size=(L - t - 1, 2)) * 1e6
    with np.errstate(all="ignore"), pytest.warns() if feature_map is trig_features else _nullctx():
        a = linear_attention(feature_map(q, w), feature_map(k, w), v, causal=True, chunk_size=chunk)
        b = linear_attention(feature_map(q2, w), feature_map(k2, w), v2, causal=True, chunk_size=chunk)
    np.testing.assert_array_equal(a[: t + 1], b[: t + 1])  # bit for bit
    assert not np.array_equal(a[t + 1:], b[t + 1:])


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_causal_softmax_does_not_depend_on_future_tokens(rng):
    L, d, t = 20, 4, 9
    q, k, v = rng.normal(size=(3, L, d))
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    k2[t + 1:] *= 100.0
    v2[t + 1:] += 5.0
    a = softmax_attention(q, k, v, causal=True)
    b = softmax_attention(q2, k2, v2, causal=True)
    np.testing.assert_array_equal(a[: t + 1], b[: t + 1])


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_attention_matches_naive_and_blocks(rng, causal):
    q, k = rng.normal(size=(2, 2, 3, 11, 6))
    v = rng.normal(size=(2, 3, 11, 4))
    mask = np.tril(np.ones((11, 11), bool)) if causal else None
    want = naive_softmax(q, k, v, 6 ** -0.5, mask)
    np.testing.assert_allclose(softmax_attention(q, k, v, causal=causal), want, rtol=1e-13)
    np.testing.assert_allclose(softmax_attention(q, k, v, causal=causal, block_size=4), want, rtol=1e-13)


def test_softmax_attention_general_mask_and_lse(rng):
    q, k, v = rng.normal(size=(3, 7, 5))
    mask = rng.random((7, 7)) < 0.6
    mask[:, 0] = True
    out, lse = softmax_attention(q, k, v, mask=mask, scale=0.3, return_lse=True)
    np.testing.assert_allclose(out, naive_softmax(q, k, v, 0.3, mask), rtol=1e-13)
    logits = np.where(mask, 0.3 * q @ k.T, -np.inf)
    np.testing.assert_allclose(lse, np.log(np.exp(logits).sum(-1)), rtol=1e-13)


def test_softmax_attention_is_stable_for_huge_logits():
    q = np.array([[1000.0, 0.0]])
    k = np.array([[1.0, 0.0], [0.999, 0.0]])
    out = softmax_attention(q, k, [[1.0], [0.0]], scale=1.0)
    assert np.isfinite(out).all() and out[0, 0] > 0.5


def test_softmax_attention_rejects_a_row_with_nothing_to_attend(rng):
    q, k, v = rng.normal(size=(3, 3, 2))
    mask = np.ones((3, 3), bool)
    mask[1] = False
    with pytest.raises(ValueError, match="no key to attend"):
        softmax_attention(q, k, v, mask=mask)


def test_kernel_attention_softmax_equals_softmax_attention(rng):
    q, k, v = rng.normal(size=(3, 9, 4)) * 0.5
    np.testing.assert_allclose(kernel_attention(q, k, v, "softmax", causal=True),
                               softmax_attention(q, k, v, causal=True, scale=1.0), rtol=1e-13)


def test_linear_attention_three_token_example():
    # Identical features give the plain (prefix) mean of the values.
    f = np.ones((3, 2))
    v = np.array([[0.0], [3.0], [6.0]])
    np.testing.assert_allclose(linear_attention(f, f, v), [[3.0]] * 3)
    np.testing.assert_allclose(linear_attention(f, f, v, causal=True), [[0.0], [1.5], [3.0]])


def test_signed_features_report_nonpositive_renormalisers():
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    k = np.array([[1.0, 1.0], [-2.0, 1.0]])  # D̂ = (-1, 2)
    with pytest.warns(NonPositiveDenominatorWarning, match="1 of 2"):
        out, stats = linear_attention(q, k, [[1.0], [2.0]], return_stats=True)
    assert stats.n_nonpositive == 1 and stats.min_denominator == -1.0
    np.testing.assert_allclose(out, [[3.0], [1.5]])


def test_zero_renormaliser_raises_not_nan():
    q = np.array([[1.0, -1.0]])
    k = np.array([[1.0, 1.0]])
    with pytest.raises(NumericalError, match="renormaliser"):
        linear_attention(q, k, [[1.0]])


def test_nonfinite_inputs_are_named():
    f = np.ones((3, 2))
    bad = f.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="k_features"):
        linear_attention(f, bad, np.ones((3, 1)))
    with pytest.raises(ValueError, match=r"\bv\b"):
        linear_attention(f, f, np.array([[1.0], [np.inf], [0.0]]))


def test_stats_report_true_scale_min_denominator(rng):
    w = orthogonal_projection(6, 3, rng=rng)
    x = rng.normal(size=(5, 3))
    qf, kf = positive_features(x, w), positive_features(x, w)
    _, stats = linear_attention(qf, kf, np.ones((5, 1)), return_stats=True)
    dense = qf.dense() @ kf.dense().sum(0)
    np.testing.assert_allclose(stats.min_denominator, dense.min(), rtol=1e-12)
    assert stats.n_nonpositive == 0 and stats.n_rows == 5


def test_float32_option(rng):
    w = orthogonal_projection(16, 4, rng=rng)
    q, k = rng.normal(size=(2, 30, 4)) * 0.5
    v = rng.normal(size=(30, 3))
    for causal in (False, True):
        out32 = linear_attention(positive_features(q, w, dtype=np.float32), positive_features(k, w, dtype=np.float32),
                                 v, causal=causal, dtype=np.float32)
        out64 = linear_attention(positive_features(q, w), positive_features(k, w), v, causal=causal)
        assert out32.dtype == np.float32
        np.testing.assert_allclose(out32, out64, rtol=2e-5, atol=2e-6)
    assert softmax_attention(q, k, v, dtype=np.float32).dtype == np.float32


def test_features_plain_wraps_arrays():
    f = Features.plain([[1.0, 2.0]])
    assert f.log_scale.shape == (1,) and f.num_features == 2
