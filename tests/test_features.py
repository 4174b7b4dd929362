"""Feature maps: each kernel estimate is unbiased (seeded tests with stated power), planted bugs are
caught, stabilisation is exact and overflow-free.

Unbiasedness tests: R = 40000 replicates per cell (fresh projections each), z test with the exact
variance (iid projections, rfkit.theory.softmax) or batch means (orthogonal projections), each at level
1e-6, so the file's false-failure rate is below 3e-5. Power: each test must establish unbiasedness to
within a relative bias of 5% (``tolerance``: resolution and the upper confidence bound <= 0.05).
"""

import numpy as np
import pytest

from rfkit.estimators import (
    FEATURE_MAPS,
    NumericalError,
    hyperbolic_features,
    orthogonal_projection,
    positive_features,
    random_features,
    softmax_kernel,
    trig_features,
)
from rfkit.estimators import projections as proj_mod
from rfkit.theory.softmax import estimator_moments, orthogonal_mse
from rfkit.validation.harness import controlled_pair, kernel_estimates, replicate_projections
from rfkit.validation.testing import assert_unbiased

ALPHA = 1e-6
R = 40_000
KINDS = ("positive", "hyperbolic", "trig")
PAIRS = {  # (‖x‖, ‖y‖, angle) placed in a random 2-D subspace of R^4
    "small": (0.5, 0.5, np.pi / 3),
    "obtuse": (0.8, 0.6, 2 * np.pi / 3),
}


def kernel_replicates(kind, x, y, m, projection, seed, feature=None):
    """R kernel estimates, each with its own projection matrix (drawn together, see harness)."""
    rng = np.random.default_rng(seed)
    omega = replicate_projections(projection, R, m, len(x), rng)
    return kernel_estimates(feature or FEATURE_MAPS[kind], x, y, omega, R)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pair", PAIRS)
def test_iid_kernel_estimate_unbiased(kind, pair):
    d, m = 4, 4
    x, y = controlled_pair(*PAIRS[pair], d, np.random.default_rng(1))
    target = float(np.exp(x @ y))
    sd = estimator_moments(kind, x, y, m)["sd"]
    samples = kernel_replicates(kind, x, y, m, "iid", seed=2_318_006_417_331_912_121)
    assert_unbiased(samples, target, alpha=ALPHA, tolerance=0.05, sd=sd)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("pair", PAIRS)
def test_orthogonal_kernel_estimate_unbiased(kind, pair):
    d, m = 4, 6  # one full block and one partial block
    x, y = controlled_pair(*PAIRS[pair], d, np.random.default_rng(1))
    samples = kernel_replicates(kind, x, y, m, "orthogonal", seed=7_725_219_941_500_133_018)
    assert_unbiased(samples, float(np.exp(x @ y)), alpha=ALPHA, tolerance=0.05)


def test_planted_bug_wrong_hyperbolic_normalisation_is_caught():
    # 1/sqrt(m) instead of 1/sqrt(2m): every estimate doubles
    d, m = 4, 4
    x, y = controlled_pair(*PAIRS["small"], d, np.random.default_rng(1))

    def buggy(v, w):
        f = hyperbolic_features(v, w)
        return type(f)(f.values, f.log_scale + 0.5 * np.log(2))

    samples = kernel_replicates("hyperbolic", x, y, m, "iid", seed=3, feature=buggy)
    with pytest.raises(AssertionError, match="violated"):
        assert_unbiased(samples, float(np.exp(x @ y)), alpha=ALPHA, sd=estimator_moments("hyperbolic", x, y, m)["sd"])


def test_planted_bug_missing_sign_fix_biases_orf_positive_features(monkeypatch):
    monkeypatch.setattr(proj_mod, "_sign_fix", lambda q, r: q)
    m = 4
    x = np.array([1.2, 0.0, 0.0, 0.0])  # along e_1, where unfixed QR rows are skewed
    y = np.array([0.8, 0.0, 0.0, 0.0])
    samples = kernel_replicates("positive", x, y, m, "orthogonal", seed=4)
    # the exact sd of the correct R-ORF estimate: a non-asymptotic sequence (these exp features are too
    # heavy-tailed for the asymptotic one, which would flag the sample instead of deciding)
    sd = float(np.sqrt(orthogonal_mse("positive", x, y, m)))
    with pytest.raises(AssertionError, match="violated"):
        assert_unbiased(samples, float(np.exp(x @ y)), alpha=ALPHA, sd=sd)


@pytest.mark.parametrize("feature_map", [positive_features, hyperbolic_features, trig_features])
def test_stabilised_and_plain_features_agree(rng, feature_map):
    w = orthogonal_projection(8, 3, rng=rng)
    x = rng.normal(size=(5, 3))
    a, b = feature_map(x, w), feature_map(x, w, stabilize=False)
    np.testing.assert_allclose(a.dense(), b.dense(), rtol=1e-13)
    np.testing.assert_array_equal(b.log_scale, 0.0)


def test_stabilisation_prevents_overflow(rng):
    w = orthogonal_projection(8, 3, rng=rng)
    x = np.array([[300.0, 0.0, 0.0]])
    f = positive_features(x, w)
    assert np.isfinite(f.values).all() and f.values.max() == 1.0
    with pytest.raises(NumericalError, match="underflow"):
        positive_features(x, w, stabilize=False)  # exp(ωᵀx - ‖x‖²/2) is below 1e-308
    with pytest.raises(NumericalError, match="overflow"):
        trig_features(x, w, stabilize=False)  # exp(‖x‖²/2) is above 1e308
    sign, logk = f.kernel(f, log=True)
    assert np.isfinite(logk).all() and sign[0, 0] == 1.0
    t = trig_features(x, w)
    assert np.isfinite(t.values).all() and np.isfinite(t.log_scale).all()


def test_feature_gram_equals_closed_form(rng):
    # φ(x)ᵀφ(y) = Λ (1/m) Σ exp(ωᵀz) for positive and Λ (1/m) Σ cosh(ωᵀz) for hyperbolic features
    w = rng.normal(size=(5, 3))
    x, y = rng.normal(size=(2, 3)) * 0.7
    lam = np.exp(-(x @ x + y @ y) / 2)
    pos = positive_features(x, w).kernel(positive_features(y, w))[0, 0]
    hyp = hyperbolic_features(x, w).kernel(hyperbolic_features(y, w))[0, 0]
    trig = trig_features(x, w).kernel(trig_features(y, w))[0, 0]
    np.testing.assert_allclose(pos, lam * np.mean(np.exp(w @ (x + y))), rtol=1e-13)
    np.testing.assert_allclose(hyp, lam * np.mean(np.cosh(w @ (x + y))), rtol=1e-13)
    np.testing.assert_allclose(trig, np.exp((x @ x + y @ y) / 2) * np.mean(np.cos(w @ (x - y))), rtol=1e-13)


def test_kernel_of_zero_vectors_is_exact():
    w = np.ones((3, 2))
    for kind in KINDS:
        f = random_features(kind, np.zeros((1, 2)), w)
        np.testing.assert_allclose(f.kernel(f), softmax_kernel(np.zeros((1, 2)), np.zeros((1, 2))))


def test_compiled_sin_cos_is_libm_to_an_ulp_in_every_quadrant():
    from rfkit.base.numerics import SIN_COS_MAX, sin_cos

    rng = np.random.default_rng(3)
    half_pi = np.pi / 2 * np.arange(-40, 41)
    x = np.concatenate([rng.normal(0, 3, 4000), rng.uniform(-1e4, 1e4, 4000), half_pi,
                        np.nextafter(half_pi, np.inf), np.nextafter(half_pi, -np.inf), [0.0, -0.0]])
    out = sin_cos(x[None], np.empty((1, 2 * x.size)))
    np.testing.assert_allclose(out[0, : x.size], np.sin(x), rtol=0, atol=4.5e-16)
    np.testing.assert_allclose(out[0, x.size:], np.cos(x), rtol=0, atol=4.5e-16)
    big = np.array([[1.0, 3 * SIN_COS_MAX]])  # beyond the range reduction: numpy computes every value
    np.testing.assert_array_equal(sin_cos(big, np.empty((1, 4))), np.concatenate([np.sin(big), np.cos(big)], -1))
    nan = sin_cos(np.array([[np.nan, 0.5]]), np.empty((1, 4)))
    assert np.isnan(nan[0, [0, 2]]).all() and np.isfinite(nan[0, [1, 3]]).all()
    with pytest.raises(ValueError, match="C-contiguous"):
        sin_cos(x[None], np.empty((1, 2 * x.size + 1)))


def test_compiled_float32_exp_is_correctly_rounded_to_an_ulp():
    """Every float32 argument of a dense sweep over the contract's range (2,000,001 values, deterministic): within
    1 ulp of float64 ``exp`` rounded to float32, 0 where float32's exp is subnormal, NaN kept, the shift applied as
    numpy would (``t = x - shift`` in float32)."""
    from rfkit.base.numerics import EXP_ARG_MAX, exp_shifted_rows

    t = np.linspace(-110.0, EXP_ARG_MAX, 2_000_001).astype(np.float32)
    got = exp_shifted_rows(t[None].copy(), np.zeros(1, np.float32))[0]
    exact = np.exp(t.astype(np.float64)).astype(np.float32)
    normal = exact >= np.finfo(np.float32).tiny
    assert np.max(np.abs(got[normal] - exact[normal]) / np.spacing(exact[normal])) <= 1.0
    assert (got[~normal] == 0).all() and normal[t >= -87.3].all()
    x = np.array([[3.5, np.nan, -np.inf, 0.25], [1.0, 2.0, 3.0, 4.0]], np.float32)
    shift = np.array([3.5, 4.0], np.float32)
    out = exp_shifted_rows(x.copy(), shift)
    assert np.isnan(out[0, 1]) and out[0, 2] == 0 and out[0, 0] == 1
    expected = np.exp((x[1] - shift[1]).astype(np.float64)).astype(np.float32)
    assert np.max(np.abs(out[1] - expected) / np.spacing(expected)) <= 1.0
    with pytest.raises(ValueError, match="float32"):
        exp_shifted_rows(x.astype(np.float64), shift)
    with pytest.raises(ValueError, match="float32"):
        exp_shifted_rows(x.T, shift)
    with pytest.raises(ValueError, match="shift"):
        exp_shifted_rows(x.copy(), shift[:1])
    from rfkit.estimators.features import _SAFE_EXPONENT  # unshifted float32 feature rows stay in the contract

    assert _SAFE_EXPONENT[np.dtype(np.float32)] < EXP_ARG_MAX


def test_compiled_float32_exp_takes_flagged_rows_maxima_as_numpy_does():
    """Rows flagged in ``to_max`` are shifted by ``np.max`` of the row (NaN if the row holds one), written into
    ``shift``; the others by the given shift; the values are those of the explicit shift (the same float32 ops)."""
    from rfkit.base.numerics import exp_shifted_rows

    rng = np.random.default_rng(5)
    x = (rng.normal(size=(300, 37)) * 30).astype(np.float32)
    x[7, 3] = np.nan
    x[11, :] = -np.inf
    flags = rng.random(300) < 0.5
    flags[[7, 11]] = True
    given = rng.normal(size=300).astype(np.float32)
    shift = given.copy()
    got = exp_shifted_rows(x.copy(), shift, flags)
    want_shift = np.where(flags, x.max(axis=1), given)
    np.testing.assert_array_equal(shift, want_shift)  # NaN where the row has one, equal positions
    np.testing.assert_array_equal(got, exp_shifted_rows(x.copy(), want_shift))
    assert np.isnan(got[7]).all() and np.isnan(got[11]).all()  # x - NaN; -inf - (-inf)
    with pytest.raises(ValueError, match="writable float32"):
        exp_shifted_rows(x.copy(), given.astype(np.float64), flags)
    with pytest.raises(ValueError, match="to_max"):
        exp_shifted_rows(x.copy(), shift, flags[:5])


def test_float32_positive_features_match_float64_within_float32_rounding(rng):
    """Stabilised float32 rows (compiled exp) against float64: the same log scale, values to float32 rounding of
    the exponent (|ωᵀx| up to ~40 here: a relative error of a few 1e-6)."""
    x, omega = rng.normal(0, 2, (2, 50, 8)), rng.standard_normal((16, 8))
    for kind in ("positive", "hyperbolic"):
        f64 = random_features(kind, x, omega)
        f32 = random_features(kind, x, omega, dtype=np.float32)
        assert f32.values.dtype == np.float32
        full64 = f64.values * np.exp(f64.log_scale - f32.log_scale.astype(np.float64))[..., None]
        np.testing.assert_allclose(f32.values, full64, rtol=2e-5, atol=1e-30)


def test_trig_features_use_the_compiled_kernel_in_float64_only(rng):
    x, omega = rng.normal(0, 2, (3, 7, 5)), rng.standard_normal((6, 5))
    f = trig_features(x, omega)
    proj = x @ omega.T
    np.testing.assert_allclose(f.values, np.concatenate([np.sin(proj), np.cos(proj)], -1), rtol=0, atol=1e-15)
    f32 = trig_features(x, omega, dtype=np.float32)
    assert f32.values.dtype == np.float32
    np.testing.assert_allclose(f32.values, f.values, atol=1e-5)
