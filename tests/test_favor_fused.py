"""The fused stabiliser-and-exponent pass of the positive feature maps (issue 16 item 1).

The reference is the unfused formula: per row, ``shift = max_j log_phi_j`` where the row is unsafe
(``row_bound`` above ``_SAFE_EXPONENT``) else 0, values ``exp(log_phi - shift)`` and log-scale
``shift - row_offset``. The fused pass must agree bit for bit, across block boundaries, for safe and
unsafe rows mixed in one block.
"""

import numpy as np
import pytest

from rfkit.estimators import features as fe


def _reference(log_phi, row_offset, row_bound):
    unsafe = row_bound > fe._SAFE_EXPONENT[log_phi.dtype]
    shift = np.where(unsafe, log_phi.max(axis=-1), 0.0).astype(log_phi.dtype)
    t = log_phi - shift[..., None]  # the argument in the working dtype, as the fused pass forms it
    return np.exp(t.astype(np.float64)).astype(log_phi.dtype), shift - row_offset


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("block_bytes", [1, 3 * 8 * 5, 1 << 18])
def test_fused_exp_rows_matches_unfused(monkeypatch, dtype, block_bytes):
    """float64 bit for bit (numpy's exp is correctly rounded there); float32 within 1 ulp of the correctly rounded
    exp (the compiled kernel), 0 where that is subnormal. Rows honour ``row_bound`` (the contract): safe rows have
    ``|log_phi| <= row_bound <= _SAFE_EXPONENT``."""
    monkeypatch.setattr(fe, "_ROW_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(0)
    safe_rows = rng.random((2, 3, 37)) < 0.5  # safe and unsafe mixed
    scale = np.where(safe_rows, 4.0, 40.0)[..., None]
    log_phi = np.clip(rng.standard_normal((2, 3, 37, 5)) * scale, -19.0, None).astype(dtype)
    log_phi = np.where(safe_rows[..., None], np.clip(log_phi, -19.0, 19.0), log_phi).astype(dtype)
    log_phi[..., 0] = np.where(safe_rows, log_phi[..., 0], 2 * fe._SAFE_EXPONENT[np.dtype(dtype)])  # beyond the bound
    row_offset = rng.standard_normal((2, 3, 37)).astype(dtype)
    row_bound = np.abs(log_phi).max(axis=-1).astype(dtype)
    want_values, want_log_scale = _reference(log_phi, row_offset, row_bound)
    got = fe._exp_rows(log_phi.copy(), row_offset, True, row_bound)
    np.testing.assert_array_equal(got.log_scale, want_log_scale)
    if dtype == np.float64:
        np.testing.assert_array_equal(got.values, want_values)
    else:
        normal = want_values >= np.finfo(dtype).tiny
        assert np.max(np.abs(got.values - want_values)[normal] / np.spacing(want_values[normal])) <= 1.0
        assert (got.values[~normal] == 0).all()
    unsafe = row_bound > fe._SAFE_EXPONENT[log_phi.dtype]
    assert unsafe.any() and (~unsafe).any() and (got.values[unsafe] <= 1.0).all()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_positive_features_fused_equals_formula(dtype):
    """positive_features against Lemma 1 computed directly: exp(ωᵀx - ‖x‖²/2)/√m (float64 reference)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 300, 16)) * 1.5  # large enough that rows are unsafe in float32
    omega = rng.standard_normal((64, 16))
    f = fe.positive_features(x, omega, dtype=dtype)
    want = np.exp(x @ omega.T - 0.5 * (x ** 2).sum(-1, keepdims=True)) / np.sqrt(64)
    got = f.values.astype(np.float64) * np.exp(f.log_scale.astype(np.float64))[..., None]
    tol = 1e-12 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(got, want, rtol=tol)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["positive", "trig"])
def test_favor_attention_in_blocks_of_heads_matches_one_block(monkeypatch, causal, kind):
    """Bidirectional favor_attention runs independent heads in blocks below _BLOCK_BYTES (one 33.5 MiB feature matrix
    was mapped and zeroed afresh per call: float32 at B·H = 8, L = 4096 went 56 -> 48 ms); causal runs whole. Every
    block size gives the one-block output to round-off, heads in their places (a block written one head off would
    differ: the heads' outputs do), and keys broadcast over the heads (the one-block path) give what the same keys
    copied to every head give in blocks."""
    from rfkit.estimators import favor

    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 3, 2, 16, 4))
    v = rng.normal(size=(3, 2, 16, 2))
    kwargs = dict(kind=kind, m=8, causal=causal)
    whole = favor.favor_attention(q, k, v, rng=0, **kwargs)
    for block in (1, 16 * 16 * 8 * 3, 1 << 40):   # one head a block, three heads, all
        monkeypatch.setattr(favor, "_BLOCK_BYTES", block)
        np.testing.assert_allclose(favor.favor_attention(q, k, v, rng=0, **kwargs), whole, rtol=1e-12, atol=1e-12)
    assert not np.allclose(np.roll(whole.reshape(6, 16, 2), 1, axis=0).reshape(whole.shape), whole)
    monkeypatch.setattr(favor, "_BLOCK_BYTES", 1)
    shared_k = favor.favor_attention(q, k[0, 0], v, rng=0, **kwargs)   # keys broadcast over the heads
    copied_k = favor.favor_attention(q, np.broadcast_to(k[0, 0], q.shape), v, rng=0, **kwargs)
    np.testing.assert_allclose(shared_k, copied_k, rtol=1e-12, atol=1e-12)
