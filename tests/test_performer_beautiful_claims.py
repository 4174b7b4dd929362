"""Claims on beautiful functions: smoke run, independent confirmation of every refutation, planted bugs."""

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import integrate, optimize

from rfkit.estimators import positive_features
from rfkit.estimators.beautiful import IsotropicLaw, Maclaurin, beautiful_terms
from rfkit.theory import beautiful as bt
from rfkit.validation.claims import claims_in
from rfkit.validation.claims.performer import beautiful as claims
from rfkit.validation.engine import validate

BY_ID = {c.id.removeprefix("performer."): c for c in claims_in(claims)}


def run(*names, **options):
    result = validate([BY_ID[n] for n in names], tier="smoke", progress=False, **options)
    return {c.claim.id.removeprefix("performer."): c for c in result.claims}


def test_registered_ids_are_the_assignment():
    assert sorted(BY_ID) == sorted([
        "remark1.softmax_beautiful", "eq39.ort_estimator_unbiased", "lemma4.iid_chernoff", "thm5.ort_tail",
        "eq43.mgf_ordering", "eq68.mgf_gap_bound", "eq54.orf_moment_factorization", "eq62.mixed_moment_gap",
        "lemma5.normalized_moments", "lemma6.tau_bound", "lemma6.tau_argmax", "thm6.ort_mse_beautiful",
        "eq73.mse_difference_identity", "derived.gaussian_prf_mgf", "thm3.iid_tail", "thm3.ort_tail",
        "thm3.ort_sharper", "derived.smreg_term_mgf", "derived.orf_projection_law"])


@pytest.mark.parametrize("name", sorted(BY_ID))
def test_quick_tier_covers_the_declared_domain(name):
    # every claim declares its statement's domain; the quick cells (and the search, over the `searched` axes)
    # cover it for every reading, so a supported verdict at quick is not a verdict on a sub-domain
    from rfkit.validation.domain import domain_coverage

    claim = BY_ID[name]
    assert claim.domain
    for variant in claim.variants:
        covered, text = domain_coverage(claim.reading_domain(variant), claim.cells("quick", variant),
                                        claim.searched if claim.n_restarts("quick") else ())
        assert covered, (variant, text)


@pytest.mark.parametrize("name", sorted(BY_ID))
def test_smoke_tier_runs_without_failing_cells(name):
    result = run(name)[name]
    assert not [o.error for o in result.outcomes if o.error]
    assert result.verdict in ("supported", "refuted", "inconclusive")


def test_smoke_refutations_are_exact_negative_bounds():
    # decided without Monte Carlo: a right-hand side below 0 (or a gap below Jensen's bound)
    smoke = run("thm5.ort_tail", "thm3.ort_tail", "eq68.mgf_gap_bound", "thm3.ort_sharper")
    for name in ("thm5.ort_tail", "thm3.ort_tail", "eq68.mgf_gap_bound"):
        witness = smoke[name].witness
        assert smoke[name].verdict == "refuted" and witness["p_value"] == 0.0, name
    assert smoke["thm3.ort_sharper"].variants["bound_level"].verdict == "refuted"


# ---------------------------------------------------------------- independent confirmation of refutations

def mgf_d2(lam, c, theta):
    """mpmath: M_X(θ) for X = λ·exp(c·cos α), α uniform (Ω_reg in d = 2, c = √2‖z‖)."""
    mp.mp.dps = 40
    return mp.quad(lambda a: mp.exp(theta * lam * mp.exp(c * mp.cos(a))), [0, mp.pi, 2 * mp.pi]) / (2 * mp.pi)


def ort_mgf_d2(lam, c, theta):
    """mpmath: E exp(θλ(e^{c cos α} + e^{c sin α})): an orthogonal pair in d = 2 projects to (cos α, ±sin α)."""
    mp.mp.dps = 40
    f = lambda a: mp.exp(theta * lam * (mp.exp(c * mp.cos(a)) + mp.exp(c * mp.sin(a))))  # noqa: E731
    return mp.quad(f, [0, mp.pi / 2, mp.pi, 3 * mp.pi / 2, 2 * mp.pi]) / (2 * mp.pi)


def test_theorem5_right_hand_side_is_negative_mpmath():
    # Ω_reg, g = 1e-3·exp, d = m = 2, ‖z‖ = 1, θ = 1000: the correction θ⁴m(m-1)/(4d²(d+2))·a_1²·a_0^0·‖z‖⁴
    # ·(E‖ω‖²)² = 1e12·2/64·1e-6·4 = 1.25e5 exceeds M_X(θ)² ≈ 154: Eq 41's bound is negative for every a
    d, m, theta, lam = 2, 2, 1000.0, 1e-3
    correction = theta**4 * m * (m - 1) / (4 * d * d * (d + 2)) * lam**2 * 1.0 * d**2
    assert correction == pytest.approx(1.25e5)
    assert float(mgf_d2(lam, math.sqrt(2), theta)) ** 2 < 200 < correction
    g, law = Maclaurin.exp(lam), IsotropicLaw(2, "sqrt_d")
    rhs = bt.thm5_bound(g, law, 1.0, 1.1 * bt.beautiful_value(g, law, 1.0), theta, m)
    assert rhs.sign == -1


def test_theorem3_orthogonal_bound_is_negative_mpmath():
    # x, y with ‖x‖ = ‖y‖ = 3 at angle 0.9π (SMREG ~ 1.8e-4), d = m = 2, θ = 1/Λ: as printed,
    # e^{-(m/2)(‖x‖²+‖y‖²)}·θ⁴m(m-1)‖z‖⁴/(4(d+2)) = Λ^{-2}·‖z‖⁴/8 ~ 6e6 while M_X(θ)² = O(10)
    sq, s = 18.0, 18.0 * (1 + math.cos(0.9 * math.pi))
    lam = math.exp(-sq / 2)
    theta = 1 / lam
    correction = math.exp(-sq) * theta**4 * 2 / (4 * 4) * s * s
    m2 = float(mgf_d2(lam, math.sqrt(2 * s), theta)) ** 2
    assert m2 < 100 and correction > 1e6
    assert bt.thm3_log_correction(sq, math.sqrt(s), theta, 2, 2) == pytest.approx(math.log(correction), rel=1e-12)


def test_eq68_gap_is_far_below_the_bound_mpmath():
    # Δ = M_X(θ)² - E e^{θ(X_1+X_2)} computed by two independent 1-D mpmath quadratures, against Eq 68
    lam, theta, c = 1e-3, 1000.0, math.sqrt(2)
    delta = mgf_d2(lam, c, theta) ** 2 - ort_mgf_d2(lam, c, theta)
    bound = theta**4 * 2 / (4 * 4 * 4) * lam**2 * 4
    assert 0 < float(delta) < bound / 100
    assert bt.log_mgf_ort(Maclaurin.exp(lam), IsotropicLaw(2, "sqrt_d"), 1.0, theta, 2) == pytest.approx(
        float(mp.log(ort_mgf_d2(lam, c, theta))), rel=1e-10)


@pytest.mark.parametrize("m", [2, 3])
def test_eq68_bound_is_not_scale_invariant(m):
    # X -> λX with θ -> θ/λ leaves E e^{θ ΣX} (hence Δ) unchanged, but Eq 68's right-hand side scales by λ^{m-4}:
    # for m < 4 a small enough λ pushes it above any fixed Δ (the mechanism behind the refutations)
    g, law, zn, theta = Maclaurin.exp(1.0), IsotropicLaw(3, "sqrt_d"), 0.8, 0.7
    for lam in (1e-3, 10.0):
        scaled = Maclaurin.exp(lam)
        assert bt.log_mgf(scaled, law, zn, theta / lam) == pytest.approx(bt.log_mgf(g, law, zn, theta), rel=1e-12)
        assert bt.log_mgf_ort(scaled, law, zn, theta / lam, m) == pytest.approx(
            bt.log_mgf_ort(g, law, zn, theta, m), rel=1e-12)
        shift = bt.log_orf_gap_bound(scaled, law, zn, theta / lam, m) - bt.log_orf_gap_bound(g, law, zn, theta, m)
        assert shift == pytest.approx((m - 4) * math.log(lam), rel=1e-12)


def exceed_measure(fn, a, points=20_001):
    """Lebesgue measure / 2π of {α in [0, 2π): fn(α) > a}, roots refined by Brent's method."""
    grid = np.linspace(0.0, 2 * math.pi, points)
    values = fn(grid) - a
    total = 0.0
    left = 0.0
    inside = values[0] > 0
    for i in np.flatnonzero(np.sign(values[1:]) != np.sign(values[:-1])):
        root = optimize.brentq(lambda t: fn(np.array(t)) - a, grid[i], grid[i + 1], xtol=1e-14)
        if inside:
            total += root - left
        left, inside = root, not inside
    return (total + (2 * math.pi - left if inside else 0.0)) / (2 * math.pi)


def test_probability_level_ordering_fails_near_f_exactly():
    # d = m = 2, Ω_reg, g = exp, ‖z‖ = 2, a = 1.01 F: exact exceedance probabilities by 1-D integration.
    # ORF: F̂ = (e^{c cos α} + e^{c sin α})/2. iid: F̂ = (e^{c cos α_1} + e^{c cos α_2})/2, and for fixed α_1 the
    # α_2-set is an arc of measure arccos(h)/π with h = log(2a - e^{c cos α_1})/c.
    c = math.sqrt(2) * 2.0
    a = 1.01 * bt.beautiful_value(Maclaurin.exp(), IsotropicLaw(2, "sqrt_d"), 2.0)
    p_ort = exceed_measure(lambda t: 0.5 * (np.exp(c * np.cos(t)) + np.exp(c * np.sin(t))), a)

    def arc(t):
        rest = 2 * a - math.exp(c * math.cos(t))
        return 1.0 if rest <= 0 else math.acos(min(max(math.log(rest) / c, -1.0), 1.0)) / math.pi

    p_iid = integrate.quad(arc, 0, 2 * math.pi, limit=400, points=[math.pi])[0] / (2 * math.pi)
    assert p_ort - p_iid > claims.TAIL_TOLERANCE  # about 0.479 - 0.434: the orthogonal estimator exceeds more often


def test_gaussian_prf_series_diverges_mpmath():
    # Σ_k θ^k Λ^k e^{k² s/2}/k!: its terms grow without bound (s = 2, θΛ = 1e-3), so E exp(θΛe^{ωᵀz}) = +∞
    mp.mp.dps = 30
    term = lambda k: mp.mpf(1e-3) ** k * mp.exp(k * k) / mp.factorial(k)  # noqa: E731
    assert term(40) > term(20) > 1 and term(80) > mp.mpf(10) ** 300


# ----------------------------------------------------------------------------------------- planted bugs


def unit_radius_terms(z, g, law, m, *, rng, orthogonal, size):
    """Bug: orthogonal rows keep unit norms instead of the radial law."""
    unit = IsotropicLaw(law.d, "fixed", 1.0)
    return beautiful_terms(z, g, unit if orthogonal else law, m, rng=rng, orthogonal=orthogonal, size=size)


def independent_terms(z, g, law, m, *, rng, orthogonal, size):
    """Bug: the 'orthogonal' ensemble is iid."""
    return beautiful_terms(z, g, law, m, rng=rng, orthogonal=False, size=size)


def inflated_positive(x, omega):
    """Bug: positive features 5% too large (a wrong normalisation)."""
    f = positive_features(x, omega)
    return type(f)(f.values * 1.05, f.log_scale)


def test_planted_unit_norm_orf_is_refuted():
    result = run("eq39.ort_estimator_unbiased", implementations={"beautiful.terms": unit_radius_terms})
    assert result["eq39.ort_estimator_unbiased"].verdict == "refuted"


def test_planted_iid_in_place_of_orthogonal_is_refuted():
    result = run("thm6.ort_mse_beautiful", "eq73.mse_difference_identity",
                 implementations={"beautiful.terms": independent_terms})
    assert result["thm6.ort_mse_beautiful"].verdict == "refuted"
    assert result["eq73.mse_difference_identity"].verdict == "refuted"


def test_planted_feature_scale_is_refuted():
    result = run("remark1.softmax_beautiful", implementations={"feature_map.positive": inflated_positive})
    assert result["remark1.softmax_beautiful"].verdict == "refuted"


def test_planted_centred_mgf_is_refuted(monkeypatch):
    # Bug: the MGF of X - E X in place of X's (the bound loses the factor e^{θ m F})
    exact = bt.log_mgf
    monkeypatch.setattr(bt, "log_mgf", lambda g, law, zn, theta, **k: exact(g, law, zn, theta, **k)
                        - theta * bt.beautiful_value(g, law, zn))
    result = run("lemma4.iid_chernoff")
    assert result["lemma4.iid_chernoff"].variants["minus"].verdict == "refuted"


def test_planted_wrong_frame_moment_is_refuted(monkeypatch):
    # Bug: a 10% error in the direction moment of the orthogonal ensemble
    exact = bt.frame_moment
    monkeypatch.setattr(bt, "frame_moment", lambda d, ks: 1.1 * exact(d, ks))
    result = run("eq62.mixed_moment_gap", "lemma5.normalized_moments")
    assert result["eq62.mixed_moment_gap"].verdict == "refuted"
    assert result["lemma5.normalized_moments"].verdict == "refuted"


def test_planted_wrong_tau_constant_is_refuted(monkeypatch):
    # Bug: μ_d(j) with d+2 in place of d (an off-by-two in the chi moments) breaks Lemma 6's maximum
    exact = bt.log_chi_moment
    monkeypatch.setattr(bt, "log_chi_moment", lambda d, j: exact(d + 2, j))
    result = run("lemma6.tau_argmax")
    assert result["lemma6.tau_argmax"].verdict == "refuted"


@pytest.mark.parametrize("d", [1, 2, 5])
@pytest.mark.parametrize("pair", sorted(claims.THM3_PAIRS))
def test_smreg_setting_matches_the_drawn_pair(d, pair):
    # the bound's ‖z‖ and SMREG come from the same (d = 1: collinear) pair the estimator is run on
    x, y = claims._draw_pair(claims.THM3_PAIRS[pair], d, np.random.default_rng(5))
    tail = claims._smreg_tail(claims.THM3_PAIRS[pair], d, 1, 1.0)
    assert tail.z_norm == pytest.approx(np.linalg.norm(x + y), abs=1e-12)
    assert tail.g.scale == pytest.approx(math.exp(-(x @ x + y @ y) / 2), rel=1e-12)


def test_gaussian_prf_domain_excludes_z_zero():
    # d = 1 realises the obtuse equal-norm pair antiparallel: z = 0 is outside "z ≠ 0" (the MGF is then finite)
    cells = BY_ID["derived.gaussian_prf_mgf"].cells("quick", "default")
    assert not [c for c in cells if c["d"] == 1 and c["pair"] == "opposite"]
    assert [c for c in cells if c["d"] == 2 and c["pair"] == "opposite"]


# ------------------------------------------------------------------- deterministic cells (sd = 0)

def _cell_context(claim, params, *, replicates=4_000, implementations=None):
    from rfkit.validation.model import CellContext

    return CellContext(claim_id=claim.id, variant="default", params=params, tier="quick", replicates=replicates,
                       alpha=1e-4, power=0.8, tolerance=claim.tolerance, rng=np.random.default_rng(7),
                       implementations=implementations or {}, planned=replicates)


def test_eq39_full_reg_frame_with_u2_is_deterministic_and_judged_exactly():
    # Ω_reg, a full orthogonal frame, g = u²: Σ_i (ω_iᵀz)² = d‖z‖² for every frame, so the estimate is exact
    params = dict(omega="reg", g="u2", d=3, m="d", z=0.5, estimator="ort")
    ev = BY_ID["eq39.ort_estimator_unbiased"].cell(_cell_context(BY_ID["eq39.ort_estimator_unbiased"], params))
    assert ev.flags == () and ev.method.startswith("exact (deterministic") and ev.upper <= 1e-12


def test_eq39_frozen_generator_on_a_random_cell_is_flagged_not_exact():
    frozen = beautiful_terms(np.full(3, 0.5 / math.sqrt(3)), Maclaurin.exp(), IsotropicLaw(3, "chi"), 3,
                             rng=np.random.default_rng(0), orthogonal=True)

    def frozen_terms(z, g, law, m, *, rng, orthogonal=False, size=None):
        return np.broadcast_to(frozen, (size, m)).copy()

    claim = BY_ID["eq39.ort_estimator_unbiased"]
    params = dict(omega="gaussian", g="exp", d=3, m="d", z=0.5, estimator="ort")
    ev = claim.cell(_cell_context(claim, params, implementations={"beautiful.terms": frozen_terms}))
    assert any(f.startswith("degenerate") for f in ev.flags)


def test_smreg_term_mgf_at_z_zero_is_deterministic():
    claim = BY_ID["derived.smreg_term_mgf"]
    ev = claim.cell(_cell_context(claim, dict(pair="opposite", d=1, kappa=1.0, part="single")))
    assert ev.flags == () and ev.upper <= claim.tolerance


# ------------------------------------------------------------------- trials sized by the needed resolution

def _full_specs(name):
    from rfkit.validation.cells import plan

    return [s for s in plan(BY_ID[name], tier="full", seed=0) if s.kind == "grid"]


@pytest.mark.parametrize("bound", [0.0, 1e-3, 0.05, 0.3, 0.6, 0.97])
def test_tail_trials_resolve_half_the_tolerance_and_never_exceed_the_budget(bound):
    # the binomial tail cells draw what a radius of half the tolerance needs at their level, not a flat budget:
    # at that n a cell whose frequency sits at its bound must still be able to support (upper <= tolerance)
    from rfkit.validation.stats import binomial_test

    ctx = _full_specs("lemma4.iid_chernoff")[0].context()
    n = claims._tail_replicates(ctx, bound)
    assert 1_000 <= n <= ctx.replicates
    assert n < ctx.replicates / 5  # the full tier's flat 1e6 is ~10-100x what any cell needs
    ev = binomial_test(round(bound * n), n, bound, **ctx.test)
    assert ev.upper <= 0.6 * ctx.tolerance
    # a violation of twice the tolerance is refuted at that n
    if bound + 2 * ctx.tolerance <= 1:
        bad = binomial_test(round((bound + 2 * ctx.tolerance) * n), n, bound, **ctx.test)
        assert bad.p_value < ctx.alpha


def test_tail_trials_keep_the_tier_budget_where_it_is_smaller():
    from dataclasses import replace

    ctx = _full_specs("lemma4.iid_chernoff")[0].context()
    assert claims._tail_replicates(replace(ctx, replicates=5_000), 0.5) == 5_000


def test_tail_cell_draws_the_sized_number_of_trials():
    # the exceedance count uses the sized n (planted bug: counting ctx.replicates trials, or drawing them)
    for spec in _full_specs("thm3.iid_tail")[::37]:
        ev = spec.claim.cell(spec.context())
        if ev.method.startswith("exact binomial"):
            bound = ev.extra["bound_sign"] * math.exp(ev.extra["log_bound"])
            assert ev.n == claims._tail_replicates(spec.context(), bound) < spec.context().replicates
            return
    pytest.fail("no Monte Carlo cell found")


def test_sharper_probability_cells_draw_what_the_worst_indicator_difference_needs():
    from rfkit.validation.stats import required_replicates

    spec = next(s for s in _full_specs("thm3.ort_sharper") if s.variant == "probability_level"
                and s.params["family"] == "smreg" and s.params["d"] == 2)
    ctx = spec.context()
    k = len(spec.params["mult"])  # the full cell sweeps every mult: each point at the level alpha / k
    need = math.ceil(required_replicates(math.sqrt(0.5), alpha=ctx.alpha / k, tolerance=ctx.tolerance,
                                         power=ctx.power, alternative="less"))
    assert need < ctx.replicates
    ev = spec.claim.cell(ctx)
    assert ev.n == k * need
    assert ev.resolution <= ctx.tolerance
