"""Macformer estimators (RMF features, RMFA, ppSBN, exact kernelized attention) against brute-force loops written
from the paper (Definition 3, the RMFA display, Algorithm 1), a seeded Monte Carlo check of the kernel estimate's
mean (false-failure rate stated), and bad inputs."""

import math
import statistics

import numpy as np
import pytest

from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS, kernel_values, kernelized_attention
from rfkit.estimators.ppsbn import BN_STATS, postsbn, ppsbn_rmfa, presbn
from rfkit.estimators.rmf import RMFDraw, draw_rmf, rmf_features, rmfa, rmfa_replicates
from rfkit.theory import maclaurin as T

KERNELS = tuple(MACLAURIN_KERNELS)
#: (p, n_law, weight) readings of Definition 3 (register est.rmf): every valid pair, p = 2 and p != 2.
LAWS = [(2.0, "geom", "importance"), (3.0, "geom", "importance"), (1.5, "geom", "importance"),
        (2.0, "geom", "printed"), (3.0, "geom", "printed"), (2.0, "defective", "printed"),
        (3.0, "defective", "printed")]
USER_COEFFICIENTS = (0.5, 0.0, 2.0, 0.25)  # a polynomial kernel 0.5 + 2 t^2 + t^3/4


# ------------------------------------------------------------------------------- brute-force references


def _coefficient(kernel, coeffs, n: int) -> float:
    """``a_n`` from the theory module's exact (sympy / rational) values, or a user sequence."""
    if not isinstance(coeffs, str):
        return float(coeffs[n]) if n < len(coeffs) else 0.0
    if coeffs == "derived":
        return float(T.derived_coefficients(kernel, n)[n])
    printed = T.printed_coefficients(kernel, n)[n]
    return float(MACLAURIN_KERNELS[kernel].closed_form(0.0)) if printed is None else float(printed)


def _phi_loop(x, draw: RMFDraw, kernel="exp", coeffs="derived", weight="importance") -> np.ndarray:
    """Definition 3 feature by feature: ``φ_t(x) = c_{N_t} Π_j ⟨ω_{t,j}, x⟩``, ``Φ = φ/√D``."""
    p, out = draw.p, np.zeros(draw.num_features)
    for t, (degree, offset) in enumerate(zip(draw.degrees, draw.offsets, strict=True)):
        if degree < 0:
            continue  # identically-zero feature (defective law)
        mass = (1 - 1 / p) * p ** -degree if draw.n_law == "geom" else p ** -(degree + 1)
        a = _coefficient(kernel, coeffs, int(degree))
        weight_c = math.sqrt(a * p ** (degree + 1)) if weight == "printed" else math.sqrt(a / mass)
        product = 1.0
        for j in range(degree):
            product *= sum(float(s) * float(xc) for s, xc in zip(draw.signs[offset + j], x, strict=True))
        out[t] = weight_c * product
    return out / math.sqrt(draw.num_features)


def _rmfa_loop(q, k, v, keep, draw, kernel="exp", **options):
    """The RMFA display term by term: ``Σ_i M'_ai Φ(q̃_a)·Φ(k̃_i) V_i / Σ_j M'_aj Φ(q̃_a)·Φ(k̃_j)``, ``x̃ = x/d^{1/4}``."""
    scale = q.shape[-1] ** -0.25
    phi_q = [_phi_loop(row * scale, draw, kernel, **options) for row in q]
    phi_k = [_phi_loop(row * scale, draw, kernel, **options) for row in k]
    num, den = np.zeros((len(q), v.shape[1])), np.zeros(len(q))
    for a in range(len(q)):
        for i in range(len(k)):
            if keep[a, i]:
                weight = float(phi_q[a] @ phi_k[i])
                num[a] += weight * v[i]
                den[a] += weight
    return num, den


def _block(big: RMFDraw, index: int, size: int) -> RMFDraw:
    """The ``index``-th block of ``size`` features of a draw, as a draw of its own."""
    degrees = big.degrees[index * size:(index + 1) * size]
    start = int(big.offsets[index * size])
    stop = start + int(np.maximum(degrees, 0).sum())
    return RMFDraw(degrees, big.offsets[index * size:(index + 1) * size] - start, big.signs[start:stop], big.p,
                   big.n_law)


def _bn_loop(x, bn_stats, var_estimator, eps):
    """Algorithm 1 step 1 with explicit loops over the groups of a statistics reading (``statistics`` module)."""
    B, H, n, d = x.shape
    variance = statistics.pvariance if var_estimator == "biased" else statistics.variance
    groups = {
        "feature_batch": [(slice(None), h, slice(None), c) for h in range(H) for c in range(d)],
        "feature_batch_pooled": [(slice(None), slice(None), slice(None), c) for c in range(d)],
        "feature_seq": [(b, h, slice(None), c) for b in range(B) for h in range(H) for c in range(d)],
        "scalar_matrix": [(b, h) for b in range(B) for h in range(H)],
        "scalar_batch": [(slice(None), h) for h in range(H)],
        "scalar_batch_pooled": [(Ellipsis,)],
    }[bn_stats]
    out = np.empty_like(x)
    for index in groups:
        values = [float(e) for e in np.ravel(x[index])]
        mean = statistics.fmean(values)
        out[index] = (x[index] - mean) / math.sqrt(variance(values, mean) + eps)
    return out


def _norm_loop(x, reading, scope):
    """Algorithm 1 step 2: ``X/‖X‖₂`` per row, per (b, h) matrix (Frobenius, spectral) or over the tensor."""
    out = np.empty_like(x)
    for b, h in np.ndindex(x.shape[:2]):
        m = x[b, h]
        if reading == "row":
            out[b, h] = m / np.sqrt((m**2).sum(axis=1, keepdims=True))
        elif reading == "spec":
            out[b, h] = m / np.linalg.svd(m, compute_uv=False)[0]
        elif scope == "matrix":
            out[b, h] = m / math.sqrt(float((m**2).sum()))
        else:
            out[b, h] = m / math.sqrt(float((x**2).sum()))
    return out


def _power_loop(base, exponent, power_sign):
    if power_sign == "abs":
        return abs(base) ** exponent
    if power_sign == "signed":
        return math.copysign(abs(base) ** exponent, base) if base else 0.0
    return math.nan if base < 0 and not float(exponent).is_integer() else base**exponent


def _inputs(rng, n=5, d=3, dv=2, n_k=None):
    n_k = n if n_k is None else n_k
    return rng.standard_normal((n, d)), rng.standard_normal((n_k, d)), rng.standard_normal((n_k, dv))


# ------------------------------------------------------------------------------------------ RMF features


@pytest.mark.parametrize("p,n_law,weight", LAWS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_rmf_features_match_definition3_loop(kernel, p, n_law, weight):
    rng = np.random.default_rng(1)
    draw = draw_rmf(12, 3, rng=rng, p=p, n_law=n_law)
    x = rng.standard_normal((4, 3))
    for coeffs in ("derived", "printed"):
        got = rmf_features(x, draw, kernel, coeffs=coeffs, weight=weight)
        want = np.array([_phi_loop(row, draw, kernel, coeffs, weight) for row in x])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("p,n_law,weight", LAWS)
def test_rmf_features_with_user_coefficients(p, n_law, weight):
    rng = np.random.default_rng(2)
    draw = draw_rmf(20, 4, rng=rng, p=p, n_law=n_law)
    x = rng.standard_normal((3, 4))
    got = rmf_features(x, draw, coeffs=list(USER_COEFFICIENTS), weight=weight)
    want = np.array([_phi_loop(row, draw, coeffs=USER_COEFFICIENTS, weight=weight) for row in x])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert (got[:, draw.degrees >= len(USER_COEFFICIENTS)] == 0).all()  # a_N = 0 beyond the sequence


def test_rmf_features_act_on_the_last_axis():
    rng = np.random.default_rng(3)
    draw = draw_rmf(16, 3, rng=rng)
    x = rng.standard_normal((2, 3, 5, 3))
    np.testing.assert_array_equal(rmf_features(x, draw), rmf_features(x.reshape(-1, 3), draw).reshape(2, 3, 5, 16))


def test_rmf_features_of_degree_zero_and_zero_features_only():
    """No projections at all (W = 0): every feature is c_0/√D (geom) or 0 (a dropped feature)."""
    draw = RMFDraw(np.array([0, -1, 0]), np.zeros(3, np.int64), np.zeros((0, 2), np.int8), 3.0, "geom")
    got = rmf_features(np.ones((2, 2)), draw, "inv")
    np.testing.assert_allclose(got, np.broadcast_to([math.sqrt(1.5 / 3), 0.0, math.sqrt(1.5 / 3)], (2, 3)))


def test_draw_structure_and_degree_law():
    """Signs are ±1, segments tile the sign matrix, and the degree frequencies follow the geometric law (chi-square
    at 1e-6: false-failure rate 1e-6)."""
    from scipy import stats

    p, count = 3.0, 20_000
    draw = draw_rmf(count, 2, rng=np.random.default_rng(4), p=p)
    assert set(np.unique(draw.signs)) == {-1, 1} and draw.signs.dtype == np.int8
    np.testing.assert_array_equal(draw.offsets, np.concatenate([[0], np.cumsum(draw.degrees)[:-1]]))
    assert draw.width == draw.degrees.sum()
    observed = np.bincount(np.minimum(draw.degrees, 6), minlength=7)
    expected = np.array([(1 - 1 / p) * p**-n for n in range(6)] + [p**-6]) * count
    assert stats.chisquare(observed, expected).pvalue > 1e-6


def test_defective_law_zeroes_features_with_the_missing_mass():
    """At p = 3 the printed masses sum to 1/2: about half the features are identically 0 (binomial, 6 sd: false-
    failure rate ~2e-9)."""
    count = 20_000
    draw = draw_rmf(count, 2, rng=np.random.default_rng(5), p=3.0, n_law="defective")
    zero = int((draw.degrees < 0).sum())
    assert abs(zero - count / 2) < 6 * math.sqrt(count / 4)
    phi = rmf_features(np.ones((1, 2)), draw, weight="printed")
    assert (phi[0, draw.degrees < 0] == 0).all()


def test_degree_cap_reports_dropped_mass():
    draw = draw_rmf(1000, 2, rng=np.random.default_rng(6), p=2.0, n_max=3)
    assert draw.degrees.max() <= 3 and draw.dropped_mass == pytest.approx(2.0**-4)


@pytest.mark.parametrize("p,n_law,weight", [(2.0, "geom", "importance"), (3.0, "geom", "importance"),
                                            (3.0, "geom", "printed"), (3.0, "defective", "printed")])
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_estimate_mean_seeded_monte_carlo(kernel, p, n_law, weight):
    """``E[Φ(x)·Φ(y)] = κ(x·y) = Σ π_N c_N² (x·y)^N`` (= f(x·y) for the consistent readings), with 100,000 one-
    feature replicates at ‖x‖‖y‖ = 0.36 (every moment finite). |z| < 5 with the exact sd: false-failure rate
    5.7e-7 per case under the normal approximation (Chebyshev bound 0.04 if the CLT were useless)."""
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((2, 4))
    x, y = 0.6 * x / np.linalg.norm(x), 0.6 * y / np.linalg.norm(y)
    replicates = 100_000
    draw = draw_rmf(replicates, 4, rng=rng, p=p, n_law=n_law)
    phi = rmf_features(np.stack([x, y]), draw, kernel, weight=weight) * math.sqrt(replicates)
    mean = float((phi[0] * phi[1]).mean())
    target = T.kappa(float(x @ y), kernel, p=p, n_law=n_law, weight=weight)
    sd = T.rmf_moments(x, y, kernel, p=p, n_law=n_law, weight=weight).sd / math.sqrt(replicates)
    assert abs(mean - target) < 5 * sd
    consistent = weight == "importance" or p == 2 or n_law == "defective" and p == 2
    if consistent:
        assert target == pytest.approx(float(kernel_values(kernel, x @ y)), rel=1e-12)


# ------------------------------------------------------------------------------------------------- RMFA


def _keep(kind, n, rng):
    if kind == "none":
        return np.ones((n, n), dtype=bool)
    if kind == "causal":
        return np.tri(n, dtype=bool)
    if kind == "padding":
        return np.broadcast_to(np.array([True, False, True, True, False][:n]), (n, n))
    keep = rng.random((n, n)) < 0.5
    keep[np.arange(n), np.arange(n)] = True
    return keep


def _mask_options(kind, keep):
    return {"none": {}, "causal": dict(causal=True), "padding": dict(key_padding=keep[0]),
            "general": dict(mask=keep)}[kind]


@pytest.mark.parametrize("mask", ["none", "padding", "causal", "general"])
@pytest.mark.parametrize("kernel,p,n_law,weight,coeffs", [
    ("exp", 2.0, "geom", "importance", "derived"), ("inv", 3.0, "geom", "importance", "derived"),
    ("log", 2.0, "geom", "printed", "printed"), ("sqrt", 3.0, "defective", "printed", "printed"),
    ("trigh", 1.5, "geom", "importance", "derived"), ("exp", 2.0, "geom", "importance", USER_COEFFICIENTS)])
def test_rmfa_matches_the_display_term_by_term(mask, kernel, p, n_law, weight, coeffs):
    rng = np.random.default_rng(8)
    q, k, v = _inputs(rng)
    keep = _keep(mask, 5, rng)
    draw = draw_rmf(24, 3, rng=rng, p=p, n_law=n_law)
    options = dict(coeffs=coeffs, weight=weight)
    got = rmfa(q, k, v, kernel, draw=draw, n_law=n_law, p=p, chunk_size=2, return_details=True,
               **options, **_mask_options(mask, keep))
    num, den = _rmfa_loop(q, k, v, keep, draw, kernel, **options)
    scale = np.abs(num).max() + np.abs(den).max()
    np.testing.assert_allclose(got.numerator, num, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(got.denominator, den, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(got.out, got.numerator / got.denominator[:, None], rtol=1e-15)


def test_causal_rmfa_ignores_future_keys_and_values():
    rng = np.random.default_rng(9)
    q, k, v = _inputs(rng, n=7)
    draw = draw_rmf(32, 3, rng=rng)
    base = rmfa(q, k, v, draw=draw, causal=True, chunk_size=3)
    k2, v2 = k.copy(), v.copy()
    k2[4:], v2[4:] = rng.standard_normal((3, 3)), rng.standard_normal((3, 2))
    changed = rmfa(q, k2, v2, draw=draw, causal=True, chunk_size=3)
    np.testing.assert_array_equal(changed[:4], base[:4])
    assert not np.allclose(changed[4:], base[4:])


def test_causal_rmfa_with_key_padding_matches_loop():
    rng = np.random.default_rng(22)
    q, k, v = _inputs(rng)
    padding = np.array([True, False, True, True, False])
    draw = draw_rmf(16, 3, rng=rng)
    got = rmfa(q, k, v, draw=draw, causal=True, key_padding=padding, return_details=True)
    num, den = _rmfa_loop(q, k, v, np.tri(5, dtype=bool) & padding, draw)
    np.testing.assert_allclose(got.numerator, num, atol=1e-12 * np.abs(num).max())
    np.testing.assert_allclose(got.denominator, den, atol=1e-12 * np.abs(den).max())


def test_rmfa_with_rectangular_inputs_and_padding_matches_loop():
    rng = np.random.default_rng(10)
    q, k, v = _inputs(rng, n=3, n_k=5)
    padding = np.array([True, False, True, True, False])
    draw = draw_rmf(16, 3, rng=rng)
    got = rmfa(q, k, v, draw=draw, key_padding=padding, return_details=True)
    num, den = _rmfa_loop(q, k, v, np.broadcast_to(padding, (3, 5)), draw)
    np.testing.assert_allclose(got.numerator, num, atol=1e-12 * np.abs(num).max())
    np.testing.assert_allclose(got.denominator, den, atol=1e-12 * np.abs(den).max())


@pytest.mark.parametrize("sharing", ["shared", "per_head", "per_batch_head"])
def test_rmfa_draw_sharing_on_batched_heads(sharing):
    rng = np.random.default_rng(11)
    q, k, v = rng.standard_normal((3, 2, 2, 4, 3))[..., :3], rng.standard_normal((2, 2, 4, 3)), \
        rng.standard_normal((2, 2, 4, 2))
    q = q[0]
    count = {"shared": 1, "per_head": 2, "per_batch_head": 4}[sharing]
    draws = [draw_rmf(16, 3, rng=rng) for _ in range(count)]
    got = rmfa(q, k, v, draw=draws if count > 1 else draws[0], draw_sharing=sharing, return_details=True)
    for b, h in np.ndindex(2, 2):
        draw = draws[{"shared": 0, "per_head": h, "per_batch_head": 2 * b + h}[sharing]]
        num, den = _rmfa_loop(q[b, h], k[b, h], v[b, h], np.ones((4, 4), bool), draw)
        np.testing.assert_allclose(got.numerator[b, h], num, atol=1e-12 * np.abs(num).max())
        np.testing.assert_allclose(got.denominator[b, h], den, atol=1e-12 * np.abs(den).max())


@pytest.mark.parametrize("mask", ["none", "causal", "general"])
def test_rmfa_replicates_are_blocks_of_one_big_draw(mask):
    rng = np.random.default_rng(12)
    q, k, v = _inputs(rng)
    keep = _keep(mask, 5, rng)
    result = rmfa_replicates(q, k, v, replicates=3, num_features=8, rng=np.random.default_rng(13),
                             **_mask_options(mask, keep))
    big = draw_rmf(24, 3, rng=np.random.default_rng(13))
    for r in range(3):
        single = rmfa(q, k, v, draw=_block(big, r, 8), return_details=True, **_mask_options(mask, keep))
        np.testing.assert_allclose(result.numerator[r], single.numerator, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(result.denominator[r], single.denominator, rtol=1e-12, atol=1e-14)


def test_rmfa_reports_zero_denominators_instead_of_hiding_them():
    draw = RMFDraw(np.array([1, 1]), np.array([0, 1]), np.array([[1], [-1]], np.int8), 2.0, "geom")
    with np.errstate(all="ignore"):
        result = rmfa(np.zeros((2, 1)), np.ones((2, 1)), np.ones((2, 1)), draw=draw, return_details=True)
    assert result.n_nonpositive == 2 and result.n_nonfinite == 2 and result.min_abs_denominator == 0.0


def test_rmfa_identical_keys_give_the_mean_of_values():
    v = np.array([[0.0], [3.0], [6.0]])
    out = rmfa(np.ones((2, 4)), np.ones((3, 4)), v, "inv", num_features=64, rng=0)
    np.testing.assert_allclose(out, 3.0)


# --------------------------------------------------------------------------------------------- ppSBN


@pytest.mark.parametrize("bn_stats", list(BN_STATS))
@pytest.mark.parametrize("var_estimator", ["biased", "unbiased"])
@pytest.mark.parametrize("norm", [("row", "matrix"), ("fro", "matrix"), ("fro", "tensor"), ("spec", "matrix")])
def test_presbn_matches_algorithm1_loops(bn_stats, var_estimator, norm):
    rng = np.random.default_rng(14)
    q = rng.standard_normal((2, 3, 4, 5)) * 2 + 1
    k = rng.standard_normal((2, 3, 4, 5)) * 0.5 - 3
    out = presbn(q, k, eps=1e-12, bn_stats=bn_stats, var_estimator=var_estimator, norm_reading=norm[0],
                 norm_scope=norm[1])
    for raw, bn, got in ((q, out.q_bn, out.q), (k, out.k_bn, out.k)):
        want_bn = _bn_loop(raw, bn_stats, var_estimator, 1e-12)
        np.testing.assert_allclose(bn, want_bn, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, _norm_loop(want_bn, *norm), rtol=1e-10, atol=1e-12)
    assert out.n_nonfinite == 0


def test_presbn_two_dimensional_inputs_and_v():
    rng = np.random.default_rng(15)
    q, k, v = _inputs(rng, n=6, d=4, dv=4)
    out = presbn(q, k, v, bn_stats="feature_seq", presbn_on_v=True)
    assert out.q.shape == q.shape and out.v.shape == v.shape
    np.testing.assert_allclose(out.v, _norm_loop(_bn_loop(v[None, None], "feature_seq", "biased", 1e-12),
                                                 "row", "matrix")[0, 0], rtol=1e-12)
    assert presbn(q, k, v).v is None


def test_presbn_counts_undefined_statistics_instead_of_hiding_them():
    with np.errstate(all="ignore"):
        out = presbn(np.ones((1, 3)), np.ones((1, 3)), var_estimator="unbiased", bn_stats="feature_seq")
    assert out.n_nonfinite == 6 and np.isnan(out.q).all()


@pytest.mark.parametrize("power_sign", ["real", "signed", "abs"])
def test_postsbn_matches_elementwise_powers(power_sign):
    att = np.array([[-2.0, -0.5, 0.0], [0.3, 1.0, 4.0]])
    gamma, beta = np.array([1.5, 2.0, 0.5]), 0.7
    got = postsbn(att, gamma, beta, power_sign=power_sign)
    want = np.array([[_power_loop(float(g * a), beta, power_sign) for g, a in zip(gamma, row, strict=True)]
                     for row in att])
    np.testing.assert_allclose(got, want, rtol=1e-14, equal_nan=True)
    identity = np.abs(att) if power_sign == "abs" else att  # γ = β = 1 is the identity up to the sign reading
    np.testing.assert_array_equal(postsbn(att, 1.0, 1.0, power_sign=power_sign), identity)


def test_ppsbn_rmfa_is_the_composition_of_algorithm1_steps():
    rng = np.random.default_rng(16)
    q, k, v = rng.standard_normal((3, 1, 2, 6, 4))
    options = dict(bn_stats="feature_batch", norm_reading="fro")
    got = ppsbn_rmfa(q, k, np.abs(v), num_features=32, rng=17, gamma=1.3, beta=0.5, **options)
    pre = presbn(q, k, eps=1e-12, **options)
    att = rmfa(pre.q, pre.k, np.abs(v), num_features=32, rng=17)
    np.testing.assert_allclose(got, postsbn(att, 1.3, 0.5), rtol=1e-14, equal_nan=True)


# ------------------------------------------------------------------------------------ exact attention


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("mask", ["none", "padding", "causal", "general"])
def test_kernelized_attention_matches_definition2_loop(kernel, mask):
    rng = np.random.default_rng(18)
    q, k, v = _inputs(rng, d=4)
    q, k = 0.4 * q / np.linalg.norm(q, axis=1, keepdims=True), 0.4 * k / np.linalg.norm(k, axis=1, keepdims=True)
    keep = _keep(mask, 5, rng)
    got = kernelized_attention(q, k, v, kernel, mask=keep)
    f = MACLAURIN_KERNELS[kernel].closed_form
    want = np.zeros_like(got)
    for a in range(5):
        weights = [float(f(q[a] @ k[i] / 2.0)) if keep[a, i] else 0.0 for i in range(5)]
        want[a] = sum(w * v[i] for i, w in enumerate(weights)) / sum(weights)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_series_mode_converges_to_the_closed_form():
    rng = np.random.default_rng(19)
    q, k, v = _inputs(rng, d=4)
    q, k = 0.5 * q / np.linalg.norm(q, axis=1, keepdims=True), 0.5 * k / np.linalg.norm(k, axis=1, keepdims=True)
    coefficients = [float(c) for c in T.derived_coefficients("log", 60)]
    series = kernelized_attention(q, k, v, "log", mode="series", coefficients=coefficients)
    np.testing.assert_allclose(series, kernelized_attention(q, k, v, "log"), rtol=1e-14)


def test_softmax_reading_of_exp_attention_is_shift_invariant():
    rng = np.random.default_rng(20)
    q, k, v = _inputs(rng, d=4)
    big = kernelized_attention(q * 60, k * 60, v, "exp")  # scores ~ 1e3: exp would overflow without the shift
    assert np.isfinite(big).all()


# ------------------------------------------------------------------------------------------- bad inputs


def _ok():
    rng = np.random.default_rng(21)
    return _inputs(rng)


@pytest.mark.parametrize("call,error,name", [
    (lambda: draw_rmf(0, 3, rng=0), ValueError, "num_features"),
    (lambda: draw_rmf(4, 0, rng=0), ValueError, "d"),
    (lambda: draw_rmf(4, 3, rng=0, p=1.0), ValueError, "p"),
    (lambda: draw_rmf(4, 3, rng=0, p=-2.0), ValueError, "p"),
    (lambda: draw_rmf(4, 3, rng=0, p=1.5, n_law="defective"), ValueError, "defective"),
    (lambda: draw_rmf(4, 3, rng=0, n_law="poisson"), ValueError, "n_law"),
    (lambda: draw_rmf(4, 3, rng=None), TypeError, "rng"),
    (lambda: rmf_features(np.ones((2, 4)), draw_rmf(4, 3, rng=0)), ValueError, "x"),
    (lambda: rmf_features(np.ones((2, 3)) * 1j, draw_rmf(4, 3, rng=0)), TypeError, "x"),
    (lambda: rmf_features(np.full((2, 3), np.nan), draw_rmf(4, 3, rng=0)), ValueError, "x"),
    (lambda: rmf_features(np.ones(3), draw_rmf(4, 3, rng=0), "gauss"), ValueError, "kernel"),
    (lambda: rmf_features(np.ones(3), draw_rmf(4, 3, rng=0), coeffs=[1.0, -1.0]), ValueError, ">= 0"),
    (lambda: rmf_features(np.ones(3), draw_rmf(4, 3, rng=0), coeffs="guessed"), ValueError, "coeffs"),
    (lambda: rmf_features(np.ones(3), draw_rmf(4, 3, rng=0), weight="flat"), ValueError, "weight"),
    (lambda: rmf_features(np.ones(3), draw_rmf(4, 3, rng=0, p=3.0, n_law="defective")), ValueError, "n_law"),
    (lambda: rmfa(*_ok(), num_features=0, rng=0), ValueError, "num_features"),
    (lambda: rmfa(*_ok(), num_features=8, rng=0, p=0.5), ValueError, "p"),
    (lambda: rmfa(*_ok(), "cosh", num_features=8, rng=0), ValueError, "kernel"),
    (lambda: rmfa(_ok()[0][:, :2], *_ok()[1:], num_features=8, rng=0), ValueError, "q and k"),
    (lambda: rmfa(*_ok()[:2], _ok()[2][:3], num_features=8, rng=0), ValueError, "k and v"),
    (lambda: rmfa(_ok()[0].astype(object), *_ok()[1:], num_features=8, rng=0), TypeError, "q"),
    (lambda: rmfa(_ok()[0] * np.inf, *_ok()[1:], num_features=8, rng=0), ValueError, "q"),
    (lambda: rmfa(*_ok(), num_features=8, rng=0, mask=np.ones((2, 2), bool)), ValueError, "mask"),
    (lambda: rmfa(*_ok(), num_features=8, rng=0, key_padding=np.ones(3, bool)), ValueError, "key_padding"),
    (lambda: rmfa(*_ok(), num_features=8, rng=0, causal=True, chunk_size=0), ValueError, "chunk_size"),
    (lambda: rmfa(_ok()[0][:3], *_ok()[1:], num_features=8, rng=0, causal=True), ValueError, "causal"),
    (lambda: rmfa(*_ok(), num_features=8, rng=0, draw_sharing="per_head"), ValueError, "draw_sharing"),
    (lambda: rmfa(*_ok(), num_features=8, rng=None), TypeError, "rng"),
    (lambda: rmfa_replicates(*_ok(), replicates=0, num_features=8, rng=0), ValueError, "replicates"),
    (lambda: kernelized_attention(*_ok(), "inv", scale=1.0), ValueError, "'inv'"),
    (lambda: kernelized_attention(*_ok(), "rbf"), ValueError, "kernel"),
    (lambda: kernelized_attention(*_ok(), mask=np.zeros((5, 5), bool)), ValueError, "keeps no key"),
    (lambda: kernelized_attention(*_ok(), mask_fill="zero", mask=np.ones((5, 5), bool)), ValueError, "mask_fill"),
    (lambda: kernel_values("sqrt", [0.5, 1.5]), ValueError, "'sqrt'"),
    (lambda: kernel_values("log", [1.0]), ValueError, "'log'"),
    (lambda: kernel_values("inv", [np.nan]), ValueError, "nan"),
    (lambda: presbn(*_ok()[:2], eps=0.0), ValueError, "eps"),
    (lambda: presbn(*_ok()[:2], bn_stats="layer"), ValueError, "bn_stats"),
    (lambda: presbn(*_ok()[:2], var_estimator="mle"), ValueError, "var_estimator"),
    (lambda: presbn(*_ok()[:2], norm_reading="nuc"), ValueError, "norm_reading"),
    (lambda: presbn(*_ok()[:2], norm_reading="row", norm_scope="tensor"), ValueError, "norm_scope"),
    (lambda: presbn(np.ones((2, 3, 4)), np.ones((2, 3, 4))), ValueError, "q"),
    (lambda: presbn(*_ok()[:2], presbn_on_v=True), ValueError, "v"),
    (lambda: postsbn(np.ones(3), power_sign="complex"), ValueError, "power_sign"),
])
def test_bad_inputs_raise_naming_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_rmfa_replicates_in_blocks_are_the_blocks_calls_one_after_another(monkeypatch):
    from rfkit.estimators import rmf

    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(5, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    whole = rmf.rmfa_replicates(q, k, v, replicates=5, num_features=4, rng=np.random.default_rng(1))
    monkeypatch.setattr(rmf, "RMFA_FEATURE_BLOCK", 2 * 11 * 4)  # two replicates a block: blocks of 2, 2, 1
    blocked = rmf.rmfa_replicates(q, k, v, replicates=5, num_features=4, rng=np.random.default_rng(1))
    g = np.random.default_rng(1)
    parts = [rmf.rmfa_replicates(q, k, v, replicates=n, num_features=4, rng=g).out for n in (2, 2, 1)]
    assert blocked.out.shape == whole.out.shape == (5, 5, 2) and len(blocked.draws) == 3
    np.testing.assert_allclose(blocked.out, np.concatenate(parts), rtol=1e-12)
