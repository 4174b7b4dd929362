"""rfkit.gpu FAVOR+ core: parity with the numpy reference on identical draws, projection laws, autograd, bad input.

Parity tolerances: float64 to 1e-10 relative (both paths do the same arithmetic in a different order), float32
to 1e-4 relative on well-conditioned (positive-feature, or small-norm trig) inputs.
"""

import math
import warnings

import numpy as np
import pytest
import scipy.stats

torch = pytest.importorskip("torch")

from rfkit import estimators as est  # noqa: E402
from rfkit import gpu  # noqa: E402
from rfkit.estimators import NumericalError  # noqa: E402
from rfkit.estimators.favor import favor_attention as np_favor_attention  # noqa: E402

KINDS = ("trig", "positive", "hyperbolic")
TOL = {torch.float64: 1e-10, torch.float32: 1e-4}
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: GPU parity runs only on CUDA hosts")


def _rel(got, want) -> float:
    got = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), np.finfo(float).tiny))


def _inputs(rng, length=200, d=8, m=16, dv=3, scale=0.5):
    w = est.orthogonal_projection(m, d, rng=rng)
    q, k = rng.normal(size=(2, length, d)) * scale
    return q, k, rng.normal(size=(length, dv)), w


def _t(a, dtype=torch.float64, device="cpu"):
    return torch.tensor(a, dtype=dtype, device=device)


# ------------------------------------------------------------------------------------ feature maps


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("norm", [0.5, 40.0])  # 40: beyond the safe exponent, the per-row shift branch
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_feature_maps_match_numpy(rng, kind, norm, dtype):
    q, _, _, w = _inputs(rng, length=30, scale=norm / np.sqrt(8))
    ndt = np.float64 if dtype == torch.float64 else np.float32
    want = est.FEATURE_MAPS[kind](q, w, dtype=ndt)
    got = gpu.FEATURE_MAPS[kind](_t(q, dtype), _t(w, dtype))
    assert got.values.dtype == dtype
    assert _rel(got.values, want.values) < TOL[dtype]
    assert _rel(got.log_scale, want.log_scale) < TOL[dtype]


@pytest.mark.parametrize("kind", KINDS)
def test_unstabilized_features_match_numpy_and_raise_on_overflow(rng, kind):
    q, _, _, w = _inputs(rng, length=10)
    want = est.FEATURE_MAPS[kind](q, w, stabilize=False)
    got = gpu.FEATURE_MAPS[kind](_t(q), _t(w), stabilize=False)
    assert _rel(got.values, want.values) < 1e-12
    with pytest.raises(NumericalError):
        gpu.FEATURE_MAPS[kind](_t(q * 100), _t(w), stabilize=False)


def test_features_kernel_is_unbiased_for_softmax_kernel():
    # Seeded MC: 200,000 iid rows; the estimate's relative sd is about 1e-3, the bound 1e-2 is > 9 sd (false-failure
    # rate < 1e-18); deterministic for this seed.
    gen = gpu.make_generator(7, "cpu")
    x, y = torch.tensor([[0.3, -0.2, 0.1]], dtype=torch.float64), torch.tensor([[0.1, 0.4, -0.3]], dtype=torch.float64)
    w = gpu.gaussian_projection(200_000, 3, rng=gen)
    target = float(torch.exp(x @ y.mT))
    for fmap in gpu.FEATURE_MAPS.values():
        est_kernel = float(fmap(x, w).dense() @ fmap(y, w).dense().mT)
        assert abs(est_kernel / target - 1) < 1e-2


# ------------------------------------------------------------------------------------- attention


ALGORITHMS = ("scan", "parallel")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal, algorithm", [(False, "auto"), (True, "scan"), (True, "parallel")])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_linear_attention_matches_numpy(rng, kind, causal, algorithm, dtype):
    q, k, v, w = _inputs(rng, length=203, scale=0.3)
    fmap = est.FEATURE_MAPS[kind]
    want = est.linear_attention(fmap(q, w), fmap(k, w), v, causal=causal, chunk_size=32)
    tfmap = gpu.FEATURE_MAPS[kind]
    got = gpu.linear_attention(tfmap(_t(q, dtype), _t(w, dtype)), tfmap(_t(k, dtype), _t(w, dtype)), _t(v, dtype),
                               causal=causal, chunk_size=32, causal_algorithm=algorithm)
    assert got.dtype == dtype
    assert _rel(got, want) < TOL[dtype]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("step", [25.0, 400.0])
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_causal_scan_with_key_scale_outliers_matches_numpy(rng, chunk, step, algorithm):
    # key log-scales rising by 25 (the parallel path's in-chunk weights; its shift stays within the spread
    # limit for most chunkings) or by hundreds (the scan's exact-weight outlier path; the parallel path falls back)
    length, r = 50, 6
    qv, kv = rng.random((length, r)) + 0.1, rng.random((length, r)) + 0.1
    kls = np.cumsum(rng.choice([0.0, step], size=length, p=[0.8, 0.2]))
    qls = rng.normal(size=length)
    v = rng.normal(size=(length, 2))
    want = est.linear_attention(est.Features(qv, qls), est.Features(kv, kls), v, causal=True, chunk_size=chunk)
    got = gpu.linear_attention(gpu.TorchFeatures(_t(qv), _t(qls)), gpu.TorchFeatures(_t(kv), _t(kls)), _t(v),
                               causal=True, chunk_size=chunk, causal_algorithm=algorithm)
    assert _rel(got, want) < 1e-10


def test_parallel_causal_path_scans_the_chunks_after_its_spread(rng, monkeypatch):
    from rfkit.gpu import favor as gf

    length, r = 96, 5
    qv, kv, v = (_t(rng.random((length, r)) + 0.1), _t(rng.random((length, r)) + 0.1), _t(rng.normal(size=(length, 2))))
    qls = _t(np.zeros(length))
    for top in (250.0, 500.0, 5000.0):  # float64 limit: 300; beyond it from chunk 58 (500) or 6 (5000) of 16 rows
        kls = _t(np.linspace(0.0, top, length))
        want = est.linear_attention(est.Features(qv.numpy(), qls.numpy()), est.Features(kv.numpy(), kls.numpy()),
                                    v.numpy(), causal=True, chunk_size=16)
        got = gpu.linear_attention(gpu.TorchFeatures(qv, qls), gpu.TorchFeatures(kv, kls), v, causal=True,
                                   chunk_size=16, causal_algorithm="parallel")
        assert _rel(got, want) < 1e-12
    # planted: without the spread limit, the shift overflows beyond it (the scanned tail is what keeps it finite)
    monkeypatch.setitem(gf._RANK_ONE_SPREAD, np.dtype(np.float32), 1e9)
    far32 = gpu.TorchFeatures(qv.float(), _t(np.linspace(0.0, 200.0, length)).float())
    out = gf._causal_parallel(gpu.TorchFeatures(qv.float(), torch.zeros(length)), far32, v.float(), 16)
    assert not bool(torch.isfinite(out[0]).all())


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_causal_rows_are_bitwise_independent_of_huge_future_tokens(rng, kind):
    # core.causal.no_future_leak's case: future tokens of norm ~30·√d push the keys' scales past the spread limit,
    # so the parallel path scans the chunks after; a row up to t must not change by one bit
    length, t, d = 300, 62, 8
    w = est.orthogonal_projection(16, d, rng=rng)
    q, k = rng.normal(size=(2, length, d)) * 0.5
    v = rng.normal(size=(length, 3))
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    for x in (q2, k2, v2):
        x[t + 1:] = rng.normal(size=x[t + 1:].shape) * 30.0
    fmap = gpu.FEATURE_MAPS[kind]

    def run(q, k, v, algorithm):
        return gpu.linear_attention(fmap(_t(q), _t(w)), fmap(_t(k), _t(w)), _t(v), causal=True, chunk_size=16,
                                    causal_algorithm=algorithm)[: t + 1]

    assert torch.equal(run(q, k, v, "parallel"), run(q2, k2, v2, "parallel"))
    # planted: the scan's rounding differs from the parallel path's, so switching to it for the whole sequence
    # because of the future (what the parallel path once did) changes these rows and the check above catches it
    assert not torch.equal(run(q, k, v, "parallel"), run(q, k, v, "scan"))


def test_parallel_causal_rows_do_not_read_later_tokens(rng):
    q, k, v, w = _inputs(rng, length=70)
    changed = (k.copy(), v.copy())
    changed[0][50:] *= 3.0
    changed[1][50:] = rng.normal(size=changed[1][50:].shape)
    outs = [gpu.linear_attention(gpu.positive_features(_t(q), _t(w)), gpu.positive_features(_t(kk), _t(w)), _t(vv),
                                 causal=True, chunk_size=16, causal_algorithm="parallel")
            for kk, vv in ((k, v), changed)]
    assert _rel(outs[1][:50], outs[0][:50].numpy()) < 1e-13
    assert _rel(outs[1][50:], outs[0][50:].numpy()) > 1e-3


def test_causal_algorithm_is_checked():
    with pytest.raises(ValueError, match="causal_algorithm"):
        gpu.linear_attention(np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 1)), causal=True, causal_algorithm="fast")


def test_linear_attention_accepts_numpy_features_plain_arrays_and_batches(rng):
    q, k, v, w = _inputs(rng, length=20)
    qf, kf = est.positive_features(q, w), est.positive_features(k, w)
    want = est.linear_attention(qf, kf, v, causal=True)
    assert _rel(gpu.linear_attention(qf, kf, v, causal=True), want) < 1e-10
    dense = est.linear_attention(qf.dense(), kf.dense(), v)
    assert _rel(gpu.linear_attention(qf.dense(), kf.dense(), v), dense) < 1e-10
    batch = np.stack([q, q[::-1]])
    want_b = est.linear_attention(est.positive_features(batch, w), est.positive_features(batch, w), v, causal=True)
    got_b = gpu.linear_attention(gpu.positive_features(_t(batch), _t(w)), gpu.positive_features(_t(batch), _t(w)),
                                 _t(v), causal=True)
    assert got_b.shape == (2, 20, 3) and _rel(got_b, want_b) < 1e-10


def test_linear_attention_stats_match_numpy(rng):
    q, k, v, w = _inputs(rng, length=40, scale=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, want = est.linear_attention(est.trig_features(q, w), est.trig_features(k, w), v, return_stats=True)
        _, got = gpu.linear_attention(gpu.trig_features(_t(q), _t(w)), gpu.trig_features(_t(k), _t(w)), _t(v),
                                      return_stats=True)
    assert got.n_nonpositive == want.n_nonpositive and got.n_rows == want.n_rows
    assert got.min_denominator == pytest.approx(want.min_denominator, rel=1e-8)


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_attention_matches_numpy(rng, causal):
    q, k, v, _ = _inputs(rng, length=33, scale=2.0)
    want = est.softmax_attention(q, k, v, causal=causal)
    assert _rel(gpu.softmax_attention(_t(q), _t(k), _t(v), causal=causal), want) < 1e-12


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_favor_attention_with_given_projection_matches_numpy(rng, kind, causal):
    q, k, v, w = _inputs(rng, length=70, scale=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = np_favor_attention(q, k, v, kind=kind, omega=w, causal=causal)
        got = gpu.favor_attention(_t(q), _t(k), _t(v), kind=kind, omega=_t(w), causal=causal)
    assert _rel(got, want) < 1e-10


@pytest.mark.parametrize("sampler", ["hadamard", "givens"])
def test_structured_projections_run_as_their_dense_matrix(rng, sampler):
    from rfkit.estimators import structured

    q, k, v, _ = _inputs(rng, length=40, d=8, scale=0.5)
    draw = structured.hadamard_projection if sampler == "hadamard" else structured.givens_projection
    omega = draw(12, 8, rng=0)
    want = np_favor_attention(q, k, v, omega=omega, causal=True)
    assert _rel(gpu.favor_attention(_t(q), _t(k), _t(v), omega=omega, causal=True), want) < 1e-10
    got = gpu.positive_features(_t(q), omega)
    assert _rel(got.values * torch.exp(got.log_scale)[:, None], est.positive_features(q, omega).dense()) < 1e-10


@pytest.mark.parametrize("kind", KINDS)
def test_feature_maps_take_a_stack_of_projections_one_per_batch_row(rng, kind):
    x, omega = rng.normal(size=(3, 10, 4)) * 0.5, rng.normal(size=(3, 6, 4))
    got = gpu.FEATURE_MAPS[kind](_t(x), _t(omega))
    for b in range(3):
        want = est.FEATURE_MAPS[kind](x[b], omega[b]).dense()
        assert _rel(got.values[b] * torch.exp(got.log_scale[b])[:, None], want) < 1e-10


def test_favor_attention_draws_with_the_generator_reproducibly(rng):
    q, k, v, _ = _inputs(rng, length=20)
    a = gpu.favor_attention(q, k, v, m=32, rng=gpu.make_generator(3, "cpu"), causal=True)
    b = gpu.favor_attention(q, k, v, m=32, rng=gpu.make_generator(3, "cpu"), causal=True)
    c = gpu.favor_attention(q, k, v, m=32, rng=gpu.make_generator(4, "cpu"), causal=True)
    assert torch.equal(a, b) and not torch.equal(a, c)


# ----------------------------------------------------------------------------------- projections


def test_orthogonal_projection_blocks_are_orthogonal_and_shaped():
    gen = gpu.make_generator(0, "cpu")
    w = gpu.orthogonal_projection(11, 4, rng=gen, norms="unit", size=3)
    assert w.shape == (3, 11, 4)
    for block in (w[:, :4], w[:, 4:8], w[:, 8:]):
        gram = block @ block.mT
        assert torch.allclose(gram, torch.eye(block.shape[1], dtype=w.dtype).expand_as(gram), atol=1e-12)
    sq = gpu.orthogonal_projection(5, 4, rng=gen, norms="sqrt_d")
    assert torch.allclose(torch.linalg.vector_norm(sq, dim=-1), torch.full((5,), 2.0, dtype=sq.dtype))


def test_orthogonal_projection_laws():
    # Seeded KS tests at level 1e-3 each (false-failure rate 1e-3 per statistic under the true law; deterministic
    # for this seed): chi(d) row norms, and a Haar direction's first coordinate squared ~ Beta(1/2, (d-1)/2).
    d, n = 5, 4000
    w = gpu.orthogonal_projection(d, d, rng=gpu.make_generator(11, "cpu"), size=n // d).reshape(-1, d)
    norms = torch.linalg.vector_norm(w, dim=-1).numpy()
    assert scipy.stats.kstest(norms, scipy.stats.chi(d).cdf).pvalue > 1e-3
    first = (w[:, 0].numpy() / norms) ** 2
    assert scipy.stats.kstest(first, scipy.stats.beta(0.5, (d - 1) / 2).cdf).pvalue > 1e-3
    g = gpu.gaussian_projection(n, 1, rng=gpu.make_generator(12, "cpu")).numpy()[:, 0]
    assert scipy.stats.kstest(g, "norm").pvalue > 1e-3


def test_projection_dtypes_and_reproducibility():
    a = gpu.draw_projection("orthogonal", 6, 3, rng=gpu.make_generator(5, "cpu"), dtype=torch.float32)
    b = gpu.draw_projection("orthogonal", 6, 3, rng=gpu.make_generator(5, "cpu"), dtype=torch.float32)
    assert a.dtype == torch.float32 and torch.equal(a, b)


# -------------------------------------------------------------------------------------- autograd


@pytest.mark.filterwarnings("ignore::rfkit.estimators.NonPositiveDenominatorWarning")  # signed trig features
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal, algorithm", [(False, "auto"), (True, "scan"), (True, "parallel")])
def test_gradcheck_through_features_and_linear_attention(kind, causal, algorithm):
    gen = gpu.make_generator(1, "cpu")
    q = torch.randn(5, 3, generator=gen, dtype=torch.float64).mul(0.5).requires_grad_()
    k = torch.randn(5, 3, generator=gen, dtype=torch.float64).mul(0.5).requires_grad_()
    v = torch.randn(5, 2, generator=gen, dtype=torch.float64).requires_grad_()
    w = gpu.orthogonal_projection(4, 3, rng=gen)
    fmap = gpu.FEATURE_MAPS[kind]

    def attend(q, k, v):
        return gpu.linear_attention(fmap(q, w), fmap(k, w), v, causal=causal, chunk_size=2, causal_algorithm=algorithm)

    assert torch.autograd.gradcheck(attend, (q, k, v))


def test_gradcheck_through_softmax_attention():
    gen = gpu.make_generator(2, "cpu")
    q, k, v = (torch.randn(4, 3, generator=gen, dtype=torch.float64).requires_grad_() for _ in range(3))
    assert torch.autograd.gradcheck(lambda q, k, v: gpu.softmax_attention(q, k, v, causal=True), (q, k, v))


# -------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call, error", [
    (lambda: gpu.positive_features([[np.nan, 0.0]], np.ones((2, 2))), ValueError),
    (lambda: gpu.positive_features([[1.0, 0.0]], np.ones((2, 3))), ValueError),
    (lambda: gpu.positive_features([[1.0, 0.0]], np.ones(2)), ValueError),
    (lambda: gpu.positive_features([[1j, 0.0]], np.ones((2, 2))), TypeError),
    (lambda: gpu.positive_features([[1.0, 0.0]], np.ones((2, 2)), dtype=np.float16), TypeError),
    (lambda: gpu.linear_attention(np.ones((3, 2)), np.ones((3, 2)), np.ones((4, 1))), ValueError),
    (lambda: gpu.linear_attention(np.ones((3, 2)), np.ones((4, 2)), np.ones((4, 1)), causal=True), ValueError),
    (lambda: gpu.linear_attention(np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 1)), chunk_size=0), ValueError),
    (lambda: gpu.linear_attention(np.zeros((3, 2)), np.ones((3, 2)), np.ones((3, 1))), NumericalError),
    (lambda: gpu.linear_attention(np.ones((3, 2)), np.ones((3, 2)), [[1.0], [np.inf], [0.0]]), ValueError),
    (lambda: gpu.favor_attention(np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 1))), ValueError),
    (lambda: gpu.favor_attention(np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 1)), kind="relu"), ValueError),
    (lambda: gpu.orthogonal_projection(3, 2, rng=None), TypeError),
    (lambda: gpu.orthogonal_projection(0, 2, rng=gpu.make_generator(0, "cpu")), ValueError),
    (lambda: gpu.orthogonal_projection(3, 2, rng=gpu.make_generator(0, "cpu"), norms="gamma"), ValueError),
    (lambda: gpu.softmax_attention(np.ones((3, 2)), np.ones((4, 2)), np.ones((4, 1)), causal=True), ValueError),
])
def test_bad_input_raises(call, error):
    with pytest.raises(error):
        call()


def test_all_finite_settles_in_one_sum_and_falls_back_when_the_sum_overflows():
    from rfkit.gpu._core import all_finite

    big = torch.full((4,), 3e38, dtype=torch.float32)  # finite entries whose float32 sum overflows
    assert all_finite(torch.zeros(3)) and all_finite(big) and all_finite(torch.empty(0))
    for bad in (math.nan, math.inf, -math.inf):
        assert not all_finite(torch.tensor([1.0, bad, 2.0]))
    assert not all_finite(torch.tensor([math.inf, -math.inf]))  # the sum is NaN
    x = torch.ones(3, requires_grad=True)
    assert all_finite(x) and x.grad is None


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
@pytest.mark.parametrize("stabilize", [True, False])
def test_feature_maps_leave_their_inputs_untouched(rng, kind, stabilize):
    """The exponent overwrites the projection in place: never the caller's x or W."""
    x, w = _t(rng.normal(size=(5, 3)) * (8.0 if stabilize else 0.5)), _t(rng.normal(size=(4, 3)))
    x0, w0 = x.clone(), w.clone()
    gpu.FEATURE_MAPS[kind](x, w, stabilize=stabilize)
    assert torch.equal(x, x0) and torch.equal(w, w0)


# ------------------------------------------------------------------------------------------ CUDA


@CUDA
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_matches_numpy(rng, causal):
    q, k, v, w = _inputs(rng, length=300, scale=0.5)
    want = est.linear_attention(est.positive_features(q, w), est.positive_features(k, w), v, causal=causal)
    qt, kt, vt, wt = (_t(a, device="cuda") for a in (q, k, v, w))
    got = gpu.linear_attention(gpu.positive_features(qt, wt), gpu.positive_features(kt, wt), vt, causal=causal)
    assert got.device.type == "cuda" and _rel(got, want) < 1e-10


@CUDA
def test_cuda_generator_draws_on_the_device():
    w = gpu.orthogonal_projection(8, 4, rng=gpu.make_generator(0, "cuda"))
    assert w.device.type == "cuda"


@pytest.mark.parametrize("kind", ["positive", "trig"])
def test_cpu_favor_attention_in_blocks_of_heads_matches_one_block(monkeypatch, kind):
    """On the CPU, bidirectional favor_attention runs independent heads in blocks under _BLOCK_BYTES of features
    (62 -> 42 ms at B·H = 8, L = 4096, float32): every block size gives the one-block output, heads in their
    places; autograd flows through the blocks."""
    from rfkit.estimators import favor as np_favor

    rng = np.random.default_rng(2)
    q, k = (torch.tensor(x, requires_grad=True) for x in rng.normal(size=(2, 3, 2, 16, 4)))
    v = torch.tensor(rng.normal(size=(3, 2, 16, 2)))
    omega = torch.tensor(rng.normal(size=(8, 4)))
    whole = gpu.favor_attention(q, k, v, kind=kind, omega=omega)
    for block in (1, 16 * 16 * 3 * 8, 1 << 40):
        monkeypatch.setattr(np_favor, "_BLOCK_BYTES", block)
        out = gpu.favor_attention(q, k, v, kind=kind, omega=omega)
        torch.testing.assert_close(out, whole, rtol=1e-12, atol=1e-12)
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
