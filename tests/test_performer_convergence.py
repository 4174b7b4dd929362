"""Theory of Performer Theorems 4 and 7 (``rfkit.theory.convergence``) and the m* measurement of the claims.

Independent references: mpmath at 50 digits for the closed forms, scipy quadrature for the spectral laws, and
brute-force Monte Carlo (fresh draws per ``m``, the public estimator API only) for the nested error curves.
Seeded Monte Carlo tests state their false-failure rate next to the assertion.
"""

import math

import mpmath
import numpy as np
import pytest
from scipy import integrate, special, stats

from rfkit.estimators import orthogonal_projection, softmax_kernel, trig_features
from rfkit.theory import convergence as theory
from rfkit.validation.claims.performer import convergence as conv
from rfkit.validation.model import CellContext

mpmath.mp.dps = 50


def _ctx(seed: int, *, replicates: int = 200, tier: str = "quick", implementations=None) -> CellContext:
    # the cap on m is a cell's grid parameter (the quick tier's, as the claims' grids give it)
    return CellContext("test", "E/s", {"m_cap": conv._M_CAP[tier]}, tier, replicates, 1e-3, 0.8, 0.25,
                       np.random.default_rng(seed), implementations or {})


# ---------------------------------------------------------------------------------------------- theory


@pytest.mark.parametrize(("d", "R", "delta"), [(4, 1.414, 0.3), (64, 2.0, 0.01), (1, 0.5, 0.1), (128, 8.0, 0.03)])
def test_predicted_features_matches_mpmath(d, R, delta):
    want = mpmath.mpf(d) / mpmath.mpf(delta) ** 2 * mpmath.log(4 * mpmath.mpf(d) ** 0.75 * mpmath.mpf(R) / delta)
    assert theory.predicted_features_softmax(d, R, delta) == pytest.approx(float(want), rel=1e-12)


def test_softmax_case_is_the_general_case_with_sigma_d():
    # Theorem 7 with σ = d: log(4σR/(δ d^{1/4})) = log(4 d^{3/4} R/δ)
    assert theory.predicted_features(16, 2.0, 0.1, 16.0) == pytest.approx(
        theory.predicted_features_softmax(16, 2.0, 0.1), rel=1e-14)


def test_predicted_features_diverges_to_inf_and_rejects_meaningless_arguments():
    assert theory.predicted_features_softmax(4, 1.0, 1e-300) == math.inf
    with pytest.raises(ValueError, match="not positive"):
        theory.predicted_features_softmax(1, 0.01, 0.3)  # 4 d^{3/4} R / δ < 1
    for bad in [dict(d=0, R=1.0, delta=0.1), dict(d=4, R=-1.0, delta=0.1), dict(d=4, R=1.0, delta=0.0)]:
        with pytest.raises(ValueError):
            theory.predicted_features(sigma=1.0, **bad)


def test_constants_of_theorem_4():
    l = theory.scaled_radius(2.0, 16)
    assert l == pytest.approx(1.0)
    assert theory.log_ball_max("exp", l) == pytest.approx(0.5)  # h* = e^{l²/2}
    assert theory.log_ball_max("one", 3.0) == 0.0
    # δ = ε/(h*)² in logs, checked against mpmath
    want = mpmath.log(mpmath.mpf("0.2") / mpmath.e ** (2 * mpmath.mpf("0.5")))
    assert theory.log_precision(0.2, 0.5, 0.5) == pytest.approx(float(want), rel=1e-14)
    with pytest.raises(ValueError):
        theory.log_prefactor("cosh", 1.0)
    with pytest.raises(ValueError):
        theory.scaled_radius(0.0, 4)


@pytest.mark.parametrize("kernel", ["matern32", "matern52"])
def test_spectral_second_moment_by_quadrature(kernel):
    # ω = g·sqrt(2ν/χ²_{2ν}): E‖ω‖² = d·E[2ν/χ²_{2ν}], the expectation by quadrature of the chi-square density
    nu, d = theory.RBF_KERNELS[kernel], 5
    inverse, _ = integrate.quad(lambda x: 2 * nu / x * stats.chi2.pdf(x, 2 * nu), 0, np.inf)
    assert theory.spectral_second_moment(kernel, d) == pytest.approx(d * inverse, rel=1e-7)
    assert theory.spectral_second_moment("gaussian", d) == d


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5, 1.2])
def test_matern_kernel_against_bessel_form_in_mpmath(nu):
    for r in [0.0, 0.3, 1.0, 2.7]:
        s = mpmath.sqrt(2 * mpmath.mpf(nu)) * r
        want = 1 if r == 0 else 2 ** (1 - mpmath.mpf(nu)) / mpmath.gamma(nu) * s**nu * mpmath.besselk(nu, s)
        assert float(theory.matern_kernel(r, nu)) == pytest.approx(float(want), rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("kernel", ["matern32", "matern52"])
def test_matern_kernel_is_the_characteristic_function_of_its_spectral_law(kernel):
    # E cos(ωᵀz) with ωᵀz/‖z‖ ~ Student t_{2ν}: quadrature of the univariate t density
    nu = theory.RBF_KERNELS[kernel]
    for r in [0.2, 0.9, 2.0]:
        half, _ = integrate.quad(lambda t: stats.t.pdf(t, 2 * nu), 0, np.inf, weight="cos", wvar=r)
        assert float(theory.matern_kernel(r, nu)) == pytest.approx(2 * half, abs=1e-8)  # even integrand


def test_matern_kernel_rejects_bad_input():
    with pytest.raises(ValueError):
        theory.matern_kernel(-1.0, 1.5)
    with pytest.raises(ValueError):
        theory.matern_kernel(1.0, 0.0)
    with pytest.raises(ValueError):
        theory.spectral_second_moment("cauchy", 3)
    assert theory.spectral_second_moment("matern32", 2) == pytest.approx(6.0)


def test_matrix_norm_readings(rng):
    m = rng.standard_normal((3, 5, 4))
    assert np.allclose(theory.matrix_inf_norm(m, "E"), np.abs(m).max(axis=(1, 2)))
    assert np.allclose(theory.matrix_inf_norm(m, "R"), [np.linalg.norm(a, np.inf) for a in m])
    with pytest.raises(ValueError):
        theory.matrix_inf_norm(m, "F")
    with pytest.raises(ValueError):
        theory.matrix_inf_norm(np.ones(3), "E")


# ------------------------------------------------------------------------------------ the m* pipeline


def test_grid_and_stages():
    grid = conv._m_grid(2**10)
    assert grid[0] == 1 and grid[-1] == 1024 and (np.diff(grid) > 0).all()
    assert set(range(1, 7)) <= set(grid.tolist())
    ends = conv._stage_ends(6, 1000)
    assert all(e % 6 == 0 for e in ends) and ends[-1] >= 1000 and ends[0] >= 32


def test_quantile_ranks_cover_the_quantile():
    # The ±1 s.e. order statistics bracket the true p-quantile of uniform errors with probability ≈ 0.68;
    # 2000 seeded repetitions: the frequency lies within ±0.05 of 0.68 except with probability < 1e-6.
    rng = np.random.default_rng(5_318_008_117_221_931_561)
    hits = 0
    for _ in range(2000):
        curve = conv._Curve(np.array([1]), rng.random((200, 1)), 0.9, 1)
        _, lo, hi = curve.quantiles()[:, 0]
        hits += lo <= 0.9 <= hi
    assert abs(hits / 2000 - 0.683) < 0.05


def test_crossing_interpolates_in_log_log():
    m = np.array([1.0, 4.0, 16.0])
    curve = 1.0 / np.sqrt(m)  # δ = 1/√m exactly
    assert conv._crossing(m, curve, 0.35) == pytest.approx(1 / 0.35**2, rel=1e-12)
    assert conv._crossing(m, curve, 2.0) == 1.0
    assert conv._crossing(m, curve, 0.01) == math.inf


class _Recorder:
    """An ``orthogonal_projection`` role that records what it hands out."""

    def __init__(self):
        self.draws = []

    def __call__(self, m, d, *, rng, size):
        w = orthogonal_projection(m, d, rng=rng, size=size)
        self.draws.append(w)
        return w


def _direct_error(x, y, omega, norm: str) -> float:
    """The (E) or (R) error of trig features with rows ``omega`` fed to the public API, in units of e^{1.2²}."""
    diff = (trig_features(x, omega).kernel(trig_features(y, omega)) - np.exp(x @ y.T)) / math.exp(1.2**2)
    return np.abs(diff).max() if norm == "E" else np.abs(diff).sum(axis=1).max()


@pytest.mark.parametrize("norm", ["E", "R"])
def test_nested_sums_equal_the_estimator_called_directly(norm):
    # The prefix of m rows of a redraw, fed to trig_features and Features.kernel, gives the same error
    recorder = _Recorder()
    ctx = _ctx(11, replicates=3, implementations={"orthogonal_projection": recorder})
    problem = conv._sphere_problem(ctx, "sphere", 3, 1.2, 5, norm)
    grid = conv._m_grid(64)
    errors = conv._NestedSums(ctx, problem, 3).advance(12, grid)
    omega = np.concatenate(recorder.draws, axis=1)
    marks = grid[grid <= 12]
    for r in range(3):
        for g, m in enumerate(marks):
            want = _direct_error(problem.x, problem.y, omega[r, :m], norm)
            assert errors[r, g] == pytest.approx(want, rel=1e-10)


@pytest.mark.parametrize("norm", ["E", "R"])
def test_prefix_errors_are_the_errors_of_the_leading_rows(norm):
    # The nested L axis of thm4.no_l_dependence: the errors of the leading k×k block of one pass equal those of the
    # first k rows fed to the public estimator API with the same projections (independent of the running sums).
    recorder = _Recorder()
    ctx = _ctx(12, replicates=3, implementations={"orthogonal_projection": recorder})
    problem = conv._sphere_problem(ctx, "sphere", 3, 1.2, 6, norm)
    grid = conv._m_grid(64)
    prefixes = (2, 4, 6)
    errors = conv._NestedSums(ctx, problem, 3, prefixes).advance(12, grid)
    assert errors.shape == (3, int((grid <= 12).sum()), len(prefixes))
    omega = np.concatenate(recorder.draws, axis=1)
    for r in range(3):
        for g, m in enumerate(grid[grid <= 12]):
            for i, k in enumerate(prefixes):
                want = _direct_error(problem.x[:k], problem.y[:k], omega[r, :m], norm)
                assert errors[r, g, i] == pytest.approx(want, rel=1e-10)


def test_prefix_curves_match_the_whole_problem_and_grow_monotonically_in_e():
    # The largest prefix is the whole problem; under (E) a leading block's error never exceeds the whole one's.
    ctx = _ctx(13)
    problem = conv._sphere_problem(ctx, "ball", 2, 1.0, 16, "E")
    curves = conv._error_curves(ctx, problem, 0.3, 0.9, (4, 8, 16))
    assert all((c.m == curves[-1].m).all() for c in curves)
    assert (curves[0].errors <= curves[1].errors + 1e-15).all() and (curves[1].errors <= curves[2].errors + 1e-15).all()
    m_star = [c.m_star(0.3)[0] for c in curves]
    assert m_star == sorted(m_star)


def test_short_curves_are_tested_for_decay_at_block_aligned_m():
    # A curve ending below 8d records its errors at m = d, 2d, ..., and the decay test fits exactly those points
    # (full ORF blocks: the mean of k independent block estimates); a long curve uses the factor-2 points.
    d = 16
    ctx = _ctx(14)
    problem = conv._sphere_problem(ctx, "sphere", d, 1.0, 8, "E")
    curve = conv._error_curve(ctx, problem, 0.3, 0.9)  # stage ends 32, 48, 80: it reaches 5d, not 8d
    assert 5 * d <= curve.block_m[-1] and curve.m[-1] < conv._BLOCKS * d
    assert curve.block_errors.shape == (200, curve.block_m.size)
    assert (curve.block_m == d * np.arange(1, curve.block_m.size + 1)).all()
    ev = conv._decay(curve, dict(alpha=1e-3, tolerance=0.25))
    assert ev.extra["m"] == curve.block_m.tolist() and ev.extra["block_aligned"]
    # the block-aligned columns are the grid's columns where both exist (the same redraws)
    for m in (16, 32, 64):
        np.testing.assert_array_equal(curve.block_errors[:, m // d - 1], curve.errors[:, list(curve.m).index(m)])
    long = conv._Curve(np.arange(1, 200), np.ones((10, 199)) / np.sqrt(np.arange(1, 200)), 0.9, 2,
                       np.ones((10, 8)))
    assert "block_aligned" not in conv._decay(long, dict(alpha=1e-3, tolerance=0.25)).extra


def test_censored_m_star_at_one_feature_flags_the_trend():
    # m* <= 1 (one feature already meets δ) is censored below: the slope through it would be meaningless.
    x = np.array([2.0, 3.0, 4.0, 6.0, 8.0])
    data = conv._AxisData("d", x, np.array([1.0, 2.0, 3.0, 4.0, 5.0]), np.ones(5), np.full(5, 6.0), np.ones(5), ())
    ev = conv._trend(data, "high", x=x, divisor=np.ones(5), predicted=1.0, alternative="less",
                     test=dict(alpha=1e-3, tolerance=0.25), label="m* against d")
    assert ev.flags and "censored below" in ev.flags[0] and ev.p_value == 1.0


def test_end_points_with_a_span_take_every_point_of_the_end_range():
    x = np.array([4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 11.0, 13.0, 16.0])
    data = conv._AxisData("d", x, x, x, x, x, ())
    assert conv._end_points(data, "high").tolist() == [4, 5, 6, 7, 8]
    assert conv._end_points(data, "high", span=4.0).tolist() == list(range(9))
    assert conv._end_points(data, "high", span=2.0).tolist() == [4, 5, 6, 7, 8]  # at least five


def _brute_success(x, y, l, d, m, delta, redraws, rng, norm="E"):
    """P(‖Â - A‖ <= δ (h*)²) from fresh ORF draws of m rows, through the public estimator API only."""
    hits = 0
    for _ in range(redraws):
        w = orthogonal_projection(m, d, rng=rng)
        err = np.abs(trig_features(x, w).kernel(trig_features(y, w)) - softmax_kernel(x, y))
        value = err.max() if norm == "E" else err.sum(axis=1).max()
        hits += value <= delta * math.exp(l * l)
    return hits / redraws


def test_m_star_agrees_with_brute_force_monte_carlo():
    # At ⌈m*⌉ the independent estimate of the success probability is ≈ p = 0.9, at m*/3 clearly below.
    # 600 fresh redraws: sd of the frequency ≈ 0.012; the bands below fail with probability < 1e-5.
    ctx = _ctx(2_024)
    problem = conv._sphere_problem(ctx, "sphere", 4, 1.0, 8, "E")
    m_star, lo, hi = conv._error_curve(ctx, problem, 0.2, 0.9).m_star(0.2)
    assert lo <= m_star <= hi
    rng = np.random.default_rng(9_912_734_001_263_771_409)
    at = _brute_success(problem.x, problem.y, 1.0, 4, math.ceil(hi), 0.2, 600, rng)
    below = _brute_success(problem.x, problem.y, 1.0, 4, max(1, int(lo / 3)), 0.2, 600, rng)
    assert at >= 0.85
    assert below <= 0.75


def test_sampler_gives_student_t_rows_with_orthogonal_directions(rng):
    # Matérn-3/2: ‖ω‖²/d ~ F(d, 2ν); KS at level 1e-6 (false failure rate 1e-6). Directions orthogonal in blocks.
    ctx = _ctx(7)
    w = conv._sampler(ctx, "matern32")(8, 4, 4000)
    directions = w / np.linalg.norm(w, axis=-1, keepdims=True)
    gram = directions[:, :4] @ np.swapaxes(directions[:, :4], 1, 2)
    assert np.allclose(gram, np.eye(4), atol=1e-12)
    stat = stats.kstest((w[:, 0] ** 2).sum(-1) / 4, stats.f(4, 3).cdf)
    assert stat.pvalue > 1e-6


def test_eq77_reading_b_violates_the_bound_by_the_exact_factor():
    # Reading b: g(q) = exp(‖q‖²/2) with ‖q‖ = R > l, so ‖D_Q‖ / g* = exp((R² - l²)/2) for every row;
    # log of g(R)h(R)/(g*h*) = R² - l² = (√d - 1) l², in mpmath
    d, l = 4, 1.0
    R = mpmath.mpf(l) * mpmath.mpf(d) ** 0.25
    want = float(R**2 - mpmath.mpf(l) ** 2)
    ctx = _ctx(3)
    point = dict(d=d, l=l, L=6, kernel="gaussian", gh="exp")
    ev = conv._eq77_evidence(ctx, point, "E", "b")
    assert ev.extra["log_margin"] == pytest.approx(-want, rel=1e-9)
    assert ev.p_value == 0.0
    ev_a = conv._eq77_evidence(_ctx(3), point, "E", "a")
    assert ev_a.extra["log_margin"] >= -1e-12 and ev_a.p_value == 1.0


def test_adversarial_rows_are_antipodal_pairs_on_the_sphere(rng):
    x, y = conv._rows("adversarial", 6, 3, 0.7, rng)
    assert np.allclose(np.linalg.norm(x, axis=-1), 0.7) and np.allclose(x, -y)
    xb, yb = conv._rows("ball", 500, 3, 0.7, rng)
    assert (np.linalg.norm(xb, axis=-1) <= 0.7).all()
    # radii of uniform points in the 3-ball: P(r <= 0.7 u) = u³; KS at 1e-6
    assert stats.kstest(np.linalg.norm(xb, axis=-1) / 0.7, lambda u: np.clip(u, 0, 1) ** 3).pvalue > 1e-6
    with pytest.raises(ValueError):
        conv._rows("grid", 4, 3, 1.0, rng)


def test_gaussian_entries_problem_uses_the_largest_row_norm():
    ctx = _ctx(1)
    problem = conv._gaussian_entries_problem(ctx, 9, 5, 1.0, "E")
    radius = max(np.linalg.norm(problem.x, axis=-1).max(), np.linalg.norm(problem.y, axis=-1).max()) * 9**0.25
    assert problem.log_scale == pytest.approx(2 * theory.log_ball_max("exp", theory.scaled_radius(radius, 9)))
    assert np.allclose(problem.target, softmax_kernel(problem.x, problem.y))


def test_matern_gram_uses_the_closed_form(rng):
    x, y = rng.standard_normal((2, 3, 4))
    dist = np.linalg.norm(x[:, None] - y[None], axis=-1)
    assert np.allclose(conv._rbf_gram("matern52", x, y), theory.matern_kernel(dist, 2.5))
    assert np.allclose(conv._rbf_gram("gaussian", x, y), np.exp(-dist**2 / 2))
    assert special.kv(2.5, 1.0) > 0  # scipy's Bessel function is what the generic branch uses
