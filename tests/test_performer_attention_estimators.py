"""FAVOR+ end to end, structured projections and generalized features against brute-force definitions."""

import math
import warnings

import numpy as np
import pytest
from scipy import special
from scipy.linalg import hadamard

from rfkit.estimators import (
    FEATURE_MAPS,
    Features,
    NumericalError,
    gaussian_projection,
    linear_attention_quadratic,
    orthogonal_projection,
    positive_features,
)
from rfkit.estimators.favor import (
    CAUSAL_IMPLS,
    draw_projection,
    favor_attention,
    favor_features,
    favor_from_features,
    generalized_attention,
    parallel_prefix_scan,
    prefix_sum_states,
    sm_hyp,
    sm_ort_pos,
    sm_pos,
    sm_trig,
    smreg_pos,
)
from rfkit.estimators.generalized import GENERALIZED_FUNCTIONS, generalized_features, template_features
from rfkit.estimators.structured import (
    default_givens_rotations,
    fwht,
    givens_projection,
    hadamard_projection,
    next_power_of_two,
)
from rfkit.theory import cost


def naive_attention(qf: np.ndarray, kf: np.ndarray, v: np.ndarray, causal: bool, renormalize: bool = True):
    """Row by row, term by term: Σ_j (q_i·k_j) v_j / Σ_j q_i·k_j (j <= i causally)."""
    out = np.zeros((len(qf), v.shape[1]))
    for i in range(len(qf)):
        num, den = np.zeros(v.shape[1]), 0.0
        for j in range(i + 1 if causal else len(kf)):
            a = float(qf[i] @ kf[j])
            num += a * v[j]
            den += a
        out[i] = num / den if renormalize else num
    return out


def _inputs(rng, length=13, d=4, dv=3, scale=0.5):
    q, k = rng.normal(size=(2, length, d)) * scale
    return q, k, rng.normal(size=(length, dv))


# ------------------------------------------------------------------------------------ structured


@pytest.mark.parametrize("d", [1, 2, 8, 32])
def test_fwht_matches_hadamard_matrix(rng, d):
    x = rng.normal(size=(3, d))
    np.testing.assert_allclose(fwht(x), x @ hadamard(d).T / math.sqrt(d), atol=1e-12)
    np.testing.assert_allclose(fwht(x, normalize=False), x @ hadamard(d).T, atol=1e-11)


@pytest.mark.parametrize(("m", "d"), [(1, 1), (3, 4), (8, 8), (17, 8), (5, 3), (12, 5), (40, 16)])
@pytest.mark.parametrize("norms", ["chi", "sqrt_d", "unit"])
@pytest.mark.parametrize("k", [1, 3])
def test_hadamard_fast_path_equals_dense_oracle(rng, m, d, norms, k):
    op = hadamard_projection(m, d, rng=rng, k=k, norms=norms)
    x = rng.normal(size=(2, 3, d))
    np.testing.assert_allclose(op.apply(x), x @ op.dense().T, rtol=1e-12, atol=1e-12)
    assert op.apply(x).shape == (2, 3, m)


def test_hadamard_blocks_are_orthogonal_with_native_norms(rng):
    w = hadamard_projection(16, 8, rng=rng, norms="sqrt_d").dense()
    for block in (w[:8], w[8:]):
        np.testing.assert_allclose(block @ block.T, 8 * np.eye(8), atol=1e-12)


@pytest.mark.parametrize(("m", "d"), [(2, 2), (3, 3), (8, 8), (19, 8), (5, 6)])
@pytest.mark.parametrize("norms", ["chi", "sqrt_d"])
def test_givens_fast_path_equals_dense_oracle(rng, m, d, norms):
    op = givens_projection(m, d, rng=rng, norms=norms)
    assert op.rotations == default_givens_rotations(d)
    x = rng.normal(size=(4, d))
    np.testing.assert_allclose(op.apply(x), x @ op.dense().T, rtol=1e-12, atol=1e-12)


def test_givens_blocks_are_orthogonal_and_pairs_distinct(rng):
    op = givens_projection(12, 6, rng=rng, norms="unit")
    w = op.dense()
    np.testing.assert_allclose(w[:6] @ w[:6].T, np.eye(6), atol=1e-12)
    assert (op.pairs[..., 0] != op.pairs[..., 1]).all()


def test_structured_storage_matches_cost_model(rng):
    for m, d in [(64, 16), (100, 12), (7, 64)]:
        h = hadamard_projection(m, d, rng=rng, norms="chi")
        assert h.nbytes == cost.projection_bytes("hadamard", m, d, k=3, norms="chi")
        g = givens_projection(m, d, rng=rng, norms="sqrt_d")
        assert g.nbytes == cost.projection_bytes("givens", m, d, rotations=g.rotations, norms="sqrt_d")
    assert cost.projection_bytes("dense", 64, 16) == orthogonal_projection(64, 16, rng=rng).nbytes


def test_structured_bad_inputs(rng):
    with pytest.raises(ValueError, match="power of two"):
        hadamard_projection(4, 6, rng=rng, pad=False)
    with pytest.raises(ValueError, match="d must be >= 2"):
        givens_projection(4, 1, rng=rng)
    with pytest.raises(ValueError, match="m must be >= 1"):
        hadamard_projection(0, 4, rng=rng)
    with pytest.raises(ValueError, match="unknown norms"):
        givens_projection(4, 4, rng=rng, norms="gauss")
    with pytest.raises(TypeError, match="rng is required"):
        hadamard_projection(4, 4, rng=None)
    with pytest.raises(ValueError, match="last dimension d=4"):
        hadamard_projection(4, 4, rng=rng).apply(np.ones((2, 5)))
    with pytest.raises(ValueError, match="power-of-two length"):
        fwht(np.ones(6))
    assert next_power_of_two(1) == 1 and next_power_of_two(5) == 8 and next_power_of_two(8) == 8


# ------------------------------------------------------------------------------------ generalized


def test_generalized_functions_match_definitions():
    u = np.linspace(-3, 3, 13)
    np.testing.assert_allclose(GENERALIZED_FUNCTIONS["gelu"](u), u * 0.5 * (1 + special.erf(u / math.sqrt(2))))
    np.testing.assert_allclose(GENERALIZED_FUNCTIONS["elu_plus_one"](u), np.where(u > 0, u, np.expm1(u)) + 1)
    np.testing.assert_allclose(GENERALIZED_FUNCTIONS["sigmoid"](u), 1 / (1 + np.exp(-u)))
    np.testing.assert_allclose(GENERALIZED_FUNCTIONS["relu"](u), np.maximum(u, 0))


@pytest.mark.parametrize("function", list(GENERALIZED_FUNCTIONS))
def test_generalized_features_brute_force(rng, function):
    x, w = rng.normal(size=(5, 4)), rng.normal(size=(6, 4))
    f = GENERALIZED_FUNCTIONS[function]
    got = generalized_features(x, w, function=function, kernel_epsilon=1e-3).dense()
    want = np.array([[(f(np.array(wi @ xi)) + 1e-3) / math.sqrt(6) for wi in w] for xi in x])
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    det = generalized_features(x, None, function=function, kernel_epsilon=0.5).dense()
    np.testing.assert_allclose(det, f(x) + 0.5, rtol=1e-13)


def test_generalized_exp_stays_finite_and_exact(rng):
    x = np.array([[800.0, -3.0], [0.1, 0.2]])
    f = generalized_features(x, np.eye(2), function="exp", kernel_epsilon=1e-3)
    assert np.isfinite(f.values).all() and np.isfinite(f.log_scale).all()
    small = f.values[1] * np.exp(f.log_scale[1])
    np.testing.assert_allclose(small, (np.exp([0.1, 0.2]) + 1e-3) / math.sqrt(2), rtol=1e-14)


def test_template_block_layout_and_log_h(rng):
    x, w = rng.normal(size=(3, 5)), rng.normal(size=(4, 5))
    f = template_features(x, w, [np.sin, np.cos], log_h=lambda z: 0.5 * (z * z).sum(-1))
    p = x @ w.T
    want = np.exp(0.5 * (x * x).sum(-1))[:, None] / 2 * np.concatenate([np.sin(p), np.cos(p)], axis=1)
    np.testing.assert_allclose(f.dense(), want, rtol=1e-13)
    # with h = exp(|x|²/2) this is SM^trig: the trigonometric map of rfkit.estimators
    np.testing.assert_allclose(f.kernel(f), FEATURE_MAPS["trig"](x, w).kernel(FEATURE_MAPS["trig"](x, w)), rtol=1e-12)


def test_generalized_bad_inputs(rng):
    with pytest.raises(ValueError, match="unknown function"):
        generalized_features(np.ones((2, 2)), None, function="softplus")
    with pytest.raises(ValueError, match="kernel_epsilon"):
        generalized_features(np.ones((2, 2)), None, kernel_epsilon=-1.0)
    with pytest.raises(ValueError, match="at least one"):
        template_features(np.ones((2, 2)), np.ones((3, 2)), [])
    with pytest.raises(ValueError, match="share their last dimension"):
        generalized_features(np.ones((2, 3)), np.ones((4, 2)))


# --------------------------------------------------------------------------------- FAVOR buffers


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("impl", CAUSAL_IMPLS)
@pytest.mark.parametrize("length", [1, 2, 7, 33])
def test_favor_from_features_brute_force(rng, causal, impl, length):
    qf, kf = rng.random((length, 5)) + 0.05, rng.random((length, 5)) + 0.05
    v = rng.normal(size=(length, 2))
    got = favor_from_features(qf, kf, v, causal=causal, causal_impl=impl, chunk_size=3, return_stats=True)[0]
    np.testing.assert_allclose(got, naive_attention(qf, kf, v, causal), rtol=1e-12)
    buf3 = favor_from_features(qf, kf, v, causal=causal, causal_impl=impl, renormalize=False)
    np.testing.assert_allclose(buf3, naive_attention(qf, kf, v, causal, renormalize=False), rtol=1e-12)


@pytest.mark.parametrize("impl", CAUSAL_IMPLS)
def test_causal_impls_agree_with_batch_dims_and_factored_scales(rng, impl):
    w = orthogonal_projection(8, 4, rng=rng)
    q, k = rng.normal(size=(2, 2, 3, 20, 4)) * 3  # large norms: per-row log-scales spread widely
    v = rng.normal(size=(3, 20, 2))
    qf, kf = positive_features(q, w), positive_features(k, w)
    want = linear_attention_quadratic(qf, kf, v, causal=True)
    np.testing.assert_allclose(favor_from_features(qf, kf, v, causal=True, causal_impl=impl,
                                                   return_stats=True)[0], want, rtol=1e-10)


@pytest.mark.parametrize("impl", CAUSAL_IMPLS)
def test_causal_impls_are_bit_exactly_causal(rng, impl):
    w = gaussian_projection(8, 4, rng=rng)
    q, k, v = _inputs(rng, 16)
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    q2[9:], k2[9:], v2[9:] = 40 * rng.normal(size=(3, 7, 4))[0], 40 * rng.normal(size=(7, 4)), 9.0
    a = favor_attention(q, k, v, omega=w, causal=True, causal_impl=impl, return_stats=True)[0]
    b = favor_attention(q2, k2, v2, omega=w, causal=True, causal_impl=impl, return_stats=True)[0]
    np.testing.assert_array_equal(a[:9], b[:9])


def test_denominator_guard_matches_definition(rng):
    qf, kf = rng.normal(size=(2, 9, 4))
    v = rng.normal(size=(9, 2))
    a = qf @ kf.T
    eps = float(np.median(np.abs(a.sum(1))))  # half the rows are guarded
    den = a.sum(1)
    den = den + 2 * eps * (np.abs(den) <= eps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = favor_from_features(qf, kf, v, denominator_guard=eps)
    np.testing.assert_allclose(got, (a @ v) / den[:, None], rtol=1e-12)


def _jax_softmax_kernel_transformation(data, is_query, projection, eps):
    """Literal numpy translation of the authors' JAX ``softmax_kernel_transformation`` (one head, no batch)."""
    data_normalizer = 1.0 / math.sqrt(math.sqrt(data.shape[-1]))
    ratio = 1.0 / math.sqrt(projection.shape[0])
    data_dash = (data_normalizer * data) @ projection.T
    diag_data = (data * data).sum(-1) / 2.0 * data_normalizer**2
    if is_query:
        return ratio * (np.exp(data_dash - diag_data[:, None] - data_dash.max(-1, keepdims=True)) + eps)
    return ratio * (np.exp(data_dash - diag_data[:, None] - data_dash.max()) + eps)


def test_jax_stabilizer_reproduces_the_authors_features(rng):
    q, k, _ = _inputs(rng, 10, 8)
    w = gaussian_projection(6, 8, rng=rng)
    s = 8 ** -0.25
    for is_query, x in ((True, q), (False, k)):
        got = favor_features(x * s, w, kind="positive", is_query=is_query, jax_stabilizer=1e-6).dense()
        np.testing.assert_allclose(got, _jax_softmax_kernel_transformation(x, is_query, w, 1e-6), rtol=1e-13)


def test_jax_stabilizer_leaks_the_future_in_causal_mode(rng):
    # Independent confirmation of the alg1.unidirectional a3_stabilizer refutation: with the authors' key shift
    # (a maximum over the whole sequence) and eps > 0, past outputs change with a future key; eps = 0 cancels.
    q, k, v = _inputs(rng, 12, 8)
    w = gaussian_projection(16, 8, rng=rng)

    def causal_output(keys, eps):
        qf = _jax_softmax_kernel_transformation(q, True, w, eps)
        kf = _jax_softmax_kernel_transformation(keys, False, w, eps)
        return naive_attention(qf, kf, v, causal=True)

    k2 = k.copy()
    k2[-1] *= 40.0  # a future key that raises the sequence-wide maximum of ωᵀk
    change = np.abs(causal_output(k, 1e-6)[:-1] - causal_output(k2, 1e-6)[:-1]).max()
    assert change > 1e-2  # not round-off (1e-16): the past rows see the future key through the shift
    np.testing.assert_allclose(causal_output(k, 0.0)[:-1], causal_output(k2, 0.0)[:-1], rtol=1e-9)


# ------------------------------------------------------------------------------------ prefix sums


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 13, 64, 100])
def test_parallel_scan_is_cumsum_with_exact_counts(rng, length):
    x = rng.normal(size=(length, 3))
    logs = rng.normal(size=length) * 5
    ref, prefix, stats = parallel_prefix_scan(logs, x)
    np.testing.assert_array_equal(ref, np.maximum.accumulate(logs))
    np.testing.assert_allclose(prefix * np.exp(ref)[:, None], np.cumsum(x * np.exp(logs)[:, None], axis=0),
                               rtol=1e-12, atol=1e-12)
    assert (stats.combines, stats.rounds) == cost.prefix_scan_counts(length)


def test_prefix_sum_states_brute_force(rng):
    kf, v = rng.random((6, 3)), rng.normal(size=(6, 2))
    ref, gps, _ = prefix_sum_states(kf, v)
    c = np.concatenate([v, np.ones((6, 1))], axis=1)
    want = np.array([sum(np.outer(kf[j], c[j]) for j in range(i + 1)) for i in range(6)])
    np.testing.assert_allclose(gps * np.exp(ref)[:, None, None], want, rtol=1e-13)


def test_state_bytes_match_cost_model(rng):
    q, k, v = _inputs(rng, 40, 4, 3)
    for impl, kwargs in (("parallel", {}), ("scan", {}), ("chunked", {"chunk_size": 16})):
        _, stats = favor_attention(q, k, v, m=8, rng=rng, causal=True, causal_impl=impl, return_stats=True, **kwargs)
        assert stats.state_bytes == cost.favor_state_bytes(40, 8, 3, impl=impl, chunk=16)
    _, stats = favor_attention(q, k, v, m=8, rng=rng, return_stats=True)
    assert stats.state_bytes == cost.favor_state_bytes(40, 8, 3, impl="bidirectional")


# ----------------------------------------------------------------------------- features and FAVOR


@pytest.mark.parametrize("kind", ["trig", "positive", "hyperbolic"])
@pytest.mark.parametrize("construction", ["hadamard", "givens"])
def test_structured_feature_path_equals_dense_feature_maps(rng, kind, construction):
    op = draw_projection(construction, 12, 8, rng=rng)
    x = rng.normal(size=(5, 8)) * 2
    got, want = favor_features(x, op, kind=kind), FEATURE_MAPS[kind](x, op.dense())
    np.testing.assert_allclose(got.kernel(got), want.kernel(want), rtol=1e-11)


@pytest.mark.parametrize("kind", ["trig", "positive", "hyperbolic", "generalized"])
@pytest.mark.parametrize("projection", ["iid", "orthogonal", "hadamard", "givens"])
def test_favor_attention_equals_quadratic_form_on_its_features(rng, kind, projection):
    q, k, v = _inputs(rng, 11, 4)
    omega = draw_projection(projection, 6, 4, rng=rng)
    qf = favor_features(q * 4 ** -0.25, omega, kind=kind, kernel_epsilon=1e-3)
    kf = favor_features(k * 4 ** -0.25, omega, kind=kind, is_query=False, kernel_epsilon=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for causal in (False, True):
            got = favor_attention(q, k, v, kind=kind, omega=omega, kernel_epsilon=1e-3, causal=causal)
            np.testing.assert_allclose(got, linear_attention_quadratic(qf, kf, v, causal=causal), rtol=1e-9)


def test_named_estimators_are_compositions(rng):
    q, k, v = _inputs(rng, 7, 4)
    options = dict(m=8, rng=3)
    pairs = [(sm_pos, dict(kind="positive", projection="iid")), (sm_trig, dict(kind="trig", projection="iid")),
             (sm_hyp, dict(kind="hyperbolic", projection="iid")),
             (smreg_pos, dict(kind="positive", projection="iid", norms="sqrt_d")),
             (sm_ort_pos, dict(kind="positive", projection="orthogonal"))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for named, spec in pairs:
            np.testing.assert_array_equal(named(q, k, v, **options), favor_attention(q, k, v, **spec, **options))
        got = generalized_attention(q, k, v, projection="none", scale_inputs=False)
    want = naive_attention(np.maximum(q, 0) + 1e-3, np.maximum(k, 0) + 1e-3, v, causal=False)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_favor_uniform_attention_example():
    out = favor_attention(np.zeros((3, 4)), np.zeros((3, 4)), [[0.0], [3.0], [6.0]], m=8, rng=0, causal=True)
    np.testing.assert_allclose(out, [[0.0], [1.5], [3.0]])


def test_favor_bad_inputs(rng):
    q, k, v = _inputs(rng, 5, 4)
    with pytest.raises(ValueError, match="unknown kind"):
        favor_attention(q, k, v, kind="softmax", rng=rng)
    with pytest.raises(ValueError, match="unknown projection"):
        favor_attention(q, k, v, projection="fastfood", rng=rng)
    with pytest.raises(ValueError, match="unknown causal_impl"):
        favor_attention(q, k, v, rng=rng, causal=True, causal_impl="blelloch")
    with pytest.raises(ValueError, match="needs kind='generalized'"):
        favor_attention(q, k, v, projection="none")
    with pytest.raises(TypeError, match="rng is required"):
        favor_attention(q, k, v)
    with pytest.raises(ValueError, match="as many queries as keys"):
        favor_attention(q[:3], k, v, rng=rng, causal=True, causal_impl="scan")
    with pytest.raises(ValueError, match="jax_stabilizer applies"):
        favor_attention(q, k, v, kind="trig", rng=rng, jax_stabilizer=1e-6)
    with pytest.raises(ValueError, match="non-finite"):
        favor_attention(q * np.nan, k, v, rng=rng)
    with pytest.raises(ValueError, match="denominator_guard"):
        favor_from_features(np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 1)), denominator_guard=-1.0)


def test_zero_renormaliser_raises_and_huge_buf3_raises(rng):
    f = np.zeros((3, 2))
    with pytest.raises(NumericalError, match="renormaliser"):
        favor_from_features(f, f, np.ones((3, 1)), causal=True, causal_impl="parallel")
    huge = Features(np.ones((2, 2)), np.full(2, 400.0))
    with pytest.raises(NumericalError, match="overflows"):
        favor_from_features(huge, huge, np.ones((2, 1)), renormalize=False)
