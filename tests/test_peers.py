"""Cross-check against performer-pytorch (the ``peers`` extra): same projection, same outputs.

performer-pytorch (``performer_pytorch/performer_pytorch.py``) transcribes the authors' JAX code. Its FAVOR+
differs from rfkit's default estimator by three documented terms, each matched or accounted for exactly here:

* ``softmax_kernel(data, projection_matrix=W, is_query, eps=1e-4)`` is
  ``m^{-1/2}·(exp(ωᵀx - ‖x‖²/2 - shift) + eps)`` with ``x = d^{-1/4}·data`` and ``shift`` the row maximum of
  ``ωᵀx`` (queries) or the maximum over all keys and features of one (batch, head) (keys). rfkit's
  ``favor_features(..., jax_stabilizer=eps)`` is that map; with ``eps = 0`` it is rfkit's unbiased positive
  map times ``exp(-shift)``, a constant that cancels in attention's ratio.
* ``FastAttention`` (bidirectional) feeds these features (``eps = 1e-4``) to a plain ratio ``Q'(K'ᵀV) /
  Q'(K'ᵀ1)``: equal to ``favor_attention(..., omega=W, jax_stabilizer=1e-4)``.
* ``FastAttention(causal=True)`` without the CUDA extension uses ``causal_linear_attention_noncuda``, whose
  renormaliser is ``φ(q_i)ᵀ(Σ_{j<=i} φ(k_j) + 1e-6·1)``: one extra key ``1e-6·1`` with value 0 seen by every
  query. rfkit's causal attention with that pseudo-token prepended equals it.

Its projection sampler ``gaussian_orthogonal_random_matrix`` takes QR factors without the sign fix, so its
orthogonal blocks are not Haar: row ``i`` of a block has a biased ``i``-th coordinate (tested below). The
equality tests therefore pass the *same* projection matrix to both libraries.

Everything here runs in float64 (performer-pytorch casts the projection to the data's dtype).
"""

import warnings

import numpy as np
import pytest

pytest.importorskip("performer_pytorch")
torch = pytest.importorskip("torch")

with warnings.catch_warnings():  # distutils.LooseVersion and torch.cuda.amp deprecations inside the peer
    warnings.simplefilter("ignore")
    from performer_pytorch import FastAttention
    from performer_pytorch import performer_pytorch as peer

from rfkit.estimators import (  # noqa: E402
    linear_attention,
    linear_attention_buffers,
    orthogonal_projection,
    positive_features,
)
from rfkit.estimators.favor import favor_attention, favor_features  # noqa: E402
from rfkit.validation import bench  # noqa: E402

pytestmark = pytest.mark.peers

#: performer-pytorch's defaults: ``softmax_kernel``'s ``eps`` and ``causal_linear_attention*``'s ``eps``.
KERNEL_EPS, CAUSAL_EPS = 1e-4, 1e-6
BATCH, HEADS, LENGTH, D, M = 2, 4, 50, 16, 24
#: float64 round-off through a few exponentials and sums of <= 50 terms; attention outputs near 0 (values of
#: both signs cancel) are compared on the scale of the whole output.
RTOL = 1e-10


def assert_close(actual, desired):
    np.testing.assert_allclose(actual, desired, rtol=RTOL, atol=RTOL * np.abs(desired).max())


@pytest.fixture
def inputs():
    rng = np.random.default_rng(8_390_161_272_301_554_712)
    q, k, v = (rng.normal(size=(BATCH, HEADS, LENGTH, D)) for _ in range(3))
    omega = orthogonal_projection(M, D, rng=rng)
    return q, k, v, omega


def _t(a):
    return torch.as_tensor(a, dtype=torch.float64)


def _peer_kernel(x, omega, *, is_query, eps=KERNEL_EPS):
    return peer.softmax_kernel(_t(x), projection_matrix=_t(omega), is_query=is_query, eps=eps).numpy()


def _fast_attention(omega, *, causal):
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        module = FastAttention(dim_heads=omega.shape[1], nb_features=omega.shape[0], causal=causal)
    module.projection_matrix = _t(omega)  # the buffer, replaced by the shared projection in float64
    return module


@pytest.mark.parametrize("is_query", [True, False])
def test_softmax_kernel_equals_jax_stabilized_features(inputs, is_query):
    q, _, _, omega = inputs
    ours = favor_features(q * D ** -0.25, omega, kind="positive", is_query=is_query, jax_stabilizer=KERNEL_EPS)
    np.testing.assert_allclose(ours.dense(), _peer_kernel(q, omega, is_query=is_query), rtol=RTOL, atol=0)


@pytest.mark.parametrize("is_query", [True, False])
def test_stabilizer_without_eps_is_a_constant_factor(inputs, is_query):
    """eps = 0: performer-pytorch's map is rfkit's unbiased map times exp(-shift), shift computed here."""
    x = inputs[0] * D ** -0.25
    omega = inputs[3]
    projections = x @ omega.T
    shift = projections.max(axis=-1, keepdims=True) if is_query else projections.max(axis=(-2, -1), keepdims=True)
    expected = positive_features(x, omega).dense() * np.exp(-shift)
    np.testing.assert_allclose(_peer_kernel(inputs[0], omega, is_query=is_query, eps=0.0), expected, rtol=RTOL)


def test_bidirectional_fast_attention_equals_favor(inputs):
    q, k, v, omega = inputs
    with torch.no_grad():
        theirs = _fast_attention(omega, causal=False)(_t(q), _t(k), _t(v)).numpy()
    ours = favor_attention(q, k, v, omega=omega, jax_stabilizer=KERNEL_EPS)
    assert_close(ours, theirs)


def test_eps_free_peer_attention_equals_unbiased_favor(inputs):
    """Without eps the stabilizer shifts cancel exactly: the peer's pipeline gives rfkit's default FAVOR+."""
    q, k, v, omega = inputs
    qf = peer.softmax_kernel(_t(q), projection_matrix=_t(omega), is_query=True, eps=0.0)
    kf = peer.softmax_kernel(_t(k), projection_matrix=_t(omega), is_query=False, eps=0.0)
    theirs = peer.linear_attention(qf, kf, _t(v)).numpy()
    assert_close(favor_attention(q, k, v, omega=omega), theirs)


def _jax_features(x, omega, is_query):
    """performer-pytorch's ``softmax_kernel`` as rfkit computes it (inputs scaled by ``d^{-1/4}`` here)."""
    return favor_features(x * x.shape[-1] ** -0.25, omega, kind="positive", is_query=is_query,
                          jax_stabilizer=KERNEL_EPS).dense()


def _with_pseudo_key(qf, kf, v, eps):
    """Prepend a token with key features ``eps·1``, value 0 (and any query): adds ``eps·Σφ(q)`` to every D̂."""
    return _prepend_row(qf, 1.0), _prepend_row(kf, eps), _prepend_row(v, 0.0)


def _prepend_row(a, value):
    return np.concatenate([np.full(a.shape[:-2] + (1, a.shape[-1]), value), a], axis=-2)


def test_causal_fast_attention_equals_favor_with_its_eps_key(inputs):
    q, k, v, omega = inputs
    module = _fast_attention(omega, causal=True)
    assert module.causal_linear_fn is peer.causal_linear_attention_noncuda  # CPU: no fast_transformers kernel
    with torch.no_grad():
        theirs = module(_t(q), _t(k), _t(v)).numpy()
    qf, kf = _jax_features(q, omega, True), _jax_features(k, omega, False)
    ours = linear_attention(*_with_pseudo_key(qf, kf, v, CAUSAL_EPS), causal=True)[..., 1:, :]
    assert_close(ours, theirs)


def test_causal_difference_is_exactly_the_eps_term(inputs):
    """performer-pytorch's causal output = rfkit's · D̂/(D̂ + eps·Σ_r φ(q)_r), with D̂ rfkit's renormaliser."""
    q, k, v, omega = inputs
    qf, kf = _jax_features(q, omega, True), _jax_features(k, omega, False)
    ours = linear_attention(qf, kf, v, causal=True)
    buf, log_ref = linear_attention_buffers(qf, kf, v, causal=True)
    den = buf[..., -1] * np.exp(log_ref)
    expected = ours * (den / (den + CAUSAL_EPS * qf.sum(axis=-1)))[..., None]
    theirs = peer.causal_linear_attention_noncuda(_t(qf), _t(kf), _t(v)).numpy()
    assert_close(theirs, expected)
    assert np.abs(theirs - ours).max() > 1e3 * RTOL * np.abs(ours).max()  # the term is not negligible here


def test_peer_orthogonal_blocks_are_not_haar():
    """QR without the sign fix: the first row of every block has a negative first coordinate.

    Under the Haar law (rfkit's R-ORF) that coordinate is symmetric, so 200 draws all negative has probability
    2^-200; rfkit's sampler, run alongside, gives both signs (false-failure rate 2·2^-200).
    """
    torch.manual_seed(0)
    peer_first = np.array([peer.orthogonal_matrix_chunk(D)[0, 0].item() for _ in range(200)])
    rng = np.random.default_rng(8_118_962_035_441_713_223)
    ours_first = orthogonal_projection(D, D, rng=rng, size=200)[:, 0, 0]
    assert (peer_first < 0).all()
    assert (ours_first < 0).any() and (ours_first > 0).any()


@pytest.mark.parametrize("causal", [False, True])
def test_bench_favor_rows_use_the_same_projection(causal):
    """``rfkit bench``'s peer rows time what they say: rfkit's unbiased FAVOR+ with a projection drawn inside the
    call, and performer-pytorch's FastAttention with the projection its own sampler drew inside the call (its eps
    terms accounted for as above)."""
    length, d, m = 64, 64, 256
    cases = {c.name.split(" (")[0]: c for c in bench.peer_cases([length], d=d, m=m) if c.params["causal"] == causal}
    q, k, v = bench._peer_qkv(length, d, np.float64)
    ours = cases["peer rfkit numpy favor+"].setup()()
    assert_close(ours, favor_attention(q, k, v, m=m, rng=np.random.default_rng(2), causal=causal))
    call = cases["peer performer FastAttention"].setup()
    theirs = call()[0].numpy()
    omega = call.module.projection_matrix.double().numpy()
    qf, kf = _jax_features(q, omega, True), _jax_features(k, omega, False)
    if causal:
        expected = linear_attention(*_with_pseudo_key(qf, kf, v, CAUSAL_EPS), causal=True)[..., 1:, :]
    else:
        expected = linear_attention(qf, kf, v)
    assert_close(theirs, expected)
