"""Every invalid input gets a clear ValueError/TypeError that names the offending argument."""

import numpy as np
import pytest

from rfkit import estimators as E

Q = np.ones((4, 3))
V = np.ones((4, 2))
W = np.ones((5, 3))
NAN = np.full((4, 3), np.nan)

CASES = [
    # (id, call, exception, message pattern)
    ("q 1-D", lambda: E.softmax_attention(np.ones(3), Q, V), ValueError, r"\bq\b.*dimension"),
    ("q complex", lambda: E.softmax_attention(Q + 1j, Q, V), TypeError, r"\bq\b.*real"),
    ("q strings", lambda: E.softmax_attention([["a"]], Q, V), TypeError, r"\bq\b"),
    ("q bool", lambda: E.softmax_attention(Q > 0, Q, V), TypeError, r"\bq\b"),
    ("q/k width", lambda: E.softmax_attention(Q, np.ones((4, 2)), V), ValueError, "q and k"),
    ("k/v rows", lambda: E.softmax_attention(Q, Q, np.ones((3, 2))), ValueError, "k and v"),
    ("v nan", lambda: E.softmax_attention(Q, Q, np.full((4, 2), np.nan)), ValueError, r"\bv\b.*non-finite"),
    ("k inf", lambda: E.softmax_attention(Q, np.full((4, 3), np.inf), V), ValueError, r"\bk\b.*non-finite"),
    ("mask dtype", lambda: E.softmax_attention(Q, Q, V, mask=np.ones((4, 4))), TypeError, "mask"),
    ("mask shape", lambda: E.softmax_attention(Q, Q, V, mask=np.ones((3, 4), bool)), ValueError, "mask"),
    ("causal N!=M", lambda: E.softmax_attention(Q[:2], Q, V, causal=True), ValueError, "causal"),
    ("scale <= 0", lambda: E.softmax_attention(Q, Q, V, scale=-1.0), ValueError, "scale"),
    ("scale type", lambda: E.softmax_attention(Q, Q, V, scale="1"), TypeError, "scale"),
    ("block_size 0", lambda: E.softmax_attention(Q, Q, V, block_size=0), ValueError, "block_size"),
    ("dtype", lambda: E.softmax_attention(Q, Q, V, dtype=np.int64), TypeError, "dtype"),
    ("dtype f16", lambda: E.linear_attention(Q, Q, V, dtype=np.float16), TypeError, "dtype"),
    ("kernel name", lambda: E.kernel_attention(Q, Q, V, "bogus"), ValueError, "kernel"),
    ("kernel type", lambda: E.kernel_attention(Q, Q, V, 3), TypeError, "kernel"),
    ("chunk_size 0", lambda: E.linear_attention(Q, Q, V, causal=True, chunk_size=0), ValueError, "chunk_size"),
    ("chunk_size float", lambda: E.linear_attention(Q, Q, V, causal=True, chunk_size=2.0), TypeError,
     "chunk_size"),
    ("features width", lambda: E.linear_attention(Q, np.ones((4, 2)), V), ValueError, "q_features and k_features"),
    ("features/v rows", lambda: E.linear_attention(Q, Q, np.ones((3, 2))), ValueError, "k_features and v"),
    ("features nan", lambda: E.linear_attention(Q, NAN, V), ValueError, "k_features"),
    ("features causal", lambda: E.linear_attention(Q[:2], Q, V, causal=True), ValueError, "causal"),
    ("oracle nan", lambda: E.linear_attention_quadratic(Q, Q, np.full((4, 2), np.nan)), ValueError, r"\bv\b"),
    ("m = 0", lambda: E.gaussian_projection(0, 3, rng=0), ValueError, r"\bm\b"),
    ("m float", lambda: E.orthogonal_projection(2.5, 3, rng=0), TypeError, r"\bm\b"),
    ("m bool", lambda: E.orthogonal_projection(True, 3, rng=0), TypeError, r"\bm\b"),
    ("d < 1", lambda: E.orthogonal_projection(2, -1, rng=0), ValueError, r"\bd\b"),
    ("norms", lambda: E.orthogonal_projection(2, 3, rng=0, norms="gauss"), ValueError, "norms"),
    ("rng None", lambda: E.gaussian_projection(2, 3, rng=None), TypeError, "rng"),
    ("rng junk", lambda: E.gaussian_projection(2, 3, rng="seed"), TypeError, "rng"),
    ("haar size", lambda: E.haar_orthogonal(3, rng=0, size=0), ValueError, "size"),
    ("projection kind", lambda: E.projection("bogus", 2, 3, rng=0), ValueError, "kind"),
    ("omega 1-D", lambda: E.positive_features(Q, np.ones(3)), ValueError, "omega"),
    ("x/omega width", lambda: E.trig_features(Q, np.ones((5, 2))), ValueError, "x and omega"),
    ("x inf", lambda: E.hyperbolic_features(np.full((2, 3), np.inf), W), ValueError, r"\bx\b"),
    ("feature kind", lambda: E.random_features("relu", Q, W), ValueError, "kind"),
    ("kernel x 1-D", lambda: E.softmax_kernel(np.ones(3), Q), ValueError, r"\bx\b"),
    ("kernel width", lambda: E.gaussian_kernel(Q, np.ones((2, 2))), ValueError, "x and y"),
    ("weights < 0", lambda: E.is_estimate([1.0, 2.0], weights=[1.0, -1.0]), ValueError, "weights"),
    ("log_weights nan", lambda: E.snis_estimate([1.0], log_weights=[np.nan]), ValueError, "log_weights"),
    ("log_weights +inf", lambda: E.snis_estimate([1.0], log_weights=[np.inf]), ValueError, "log_weights"),
    ("values misaligned", lambda: E.is_estimate(np.ones(3), weights=np.ones(4)), ValueError, "values"),
    ("no weights", lambda: E.effective_sample_size(), TypeError, "weights"),
    ("Features shapes", lambda: E.Features(np.ones((3, 2)), np.ones(2)), ValueError, "log_scale"),
]


@pytest.mark.parametrize(("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()
