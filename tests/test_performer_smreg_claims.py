"""performer.* claims on SMREG, Theorem 1 and Lemma 3: smoke runs, planted bugs, and the refutations'
independent confirmations.

Verdicts are deterministic (engine seed 0). Planted bugs are passed through ``implementations=`` (estimator
roles) or ``monkeypatch`` (theory functions) and must turn the claim ``refuted``.
"""

import dataclasses
import math

import mpmath as mp
import numpy as np
import pytest
from scipy import stats

from rfkit.estimators import positive_features
from rfkit.theory import smreg as S
from rfkit.theory import sphere
from rfkit.validation.claims import claims_in, get_claim
from rfkit.validation.claims.performer import smreg as M
from rfkit.validation.engine import validate

mp.mp.dps = 40


def _run(claim, tier="smoke", **options):
    result = validate([claim], tier=tier, progress=False, **options).claims[0]
    assert not result.failed, [o.error for o in result.outcomes if o.error]
    return result


def _only(claim, **grid):
    """The claim's check on a smoke grid of a few points (without its search, and without its declared domain: these
    tests exercise the check, not the design's coverage)."""
    return dataclasses.replace(claim, grid={"smoke": grid}, search=None, universal=False, domain=None, readings=None)


# --------------------------------------------------------------------------------- registration


def test_every_register_id_is_registered_once():
    ids = ["performer.sec2_3.smreg_unbiased", "performer.sec3.smreg_proxy", "performer.thm1.lower_bound",
           "performer.thm1.upper_bound", "performer.thm1.smreg_le_sm_universal", "performer.eq30.smreg_series",
           "performer.thm1.proof_w_bound", "performer.eq32_35.proof_chain", "performer.lemma3.sphere_even_moments",
           "performer.lemma3.proof_recursions", "performer.thm2.orf_mse_smreg", "performer.derived.smreg_closed_form",
           "performer.derived.smreg_mse"]
    assert sorted(c.id for c in claims_in(M)) == sorted(ids)
    by_id = {c.id: c for c in claims_in(M)}
    assert all(get_claim(i) is by_id[i] for i in ids)
    assert M.THM1_LOWER.variants == M.THM1_UPPER.variants == M.THM1_W_BOUND.variants == ("E", "R")
    assert M.SPHERE_EVEN_MOMENTS.variants == ("a", "b")


# ------------------------------------------------------------------------------ smoke verdicts


@pytest.mark.parametrize("name", ["SMREG_SERIES", "PROOF_RECURSIONS", "SMREG_LE_SM", "PROOF_CHAIN", "THM2_ORF_SMREG",
                                  "THM1_UPPER"])
def test_exact_claims_are_supported_at_smoke(name):
    assert _run(getattr(M, name)).verdict == "supported"


@pytest.mark.parametrize("name", ["SMREG_UNBIASED", "SMREG_CLOSED_FORM", "SMREG_MSE"])
def test_monte_carlo_claims_are_supported_at_smoke(name):
    assert _run(getattr(M, name)).verdict == "supported"


def test_lemma3_depends_on_the_reading():
    result = _run(M.SPHERE_EVEN_MOMENTS)
    assert result.verdict == "inconclusive"
    assert {k: v.verdict for k, v in result.variants.items()} == {"a": "supported", "b": "refuted"}


@pytest.mark.parametrize("name", ["THM1_LOWER", "THM1_W_BOUND", "SMREG_PROXY"])
def test_refuted_claims_at_smoke(name):
    result = _run(getattr(M, name))
    assert result.verdict == "refuted"
    assert result.witness is not None


# ------------------------------------------------------------------------------- planted bugs


def _unnormalised_positive_features(x, omega):
    """Planted bug: forgets the 1/√m of Eq 5 (estimates m·SMREG)."""
    f = positive_features(x, omega)
    return dataclasses.replace(f, log_scale=f.log_scale + 0.5 * math.log(omega.shape[0]))


def test_unnormalised_features_refute_unbiasedness():
    claim = _only(M.SMREG_UNBIASED, d=[4], norm_x=[0.5], norm_y=[0.5], angle=[1.0], m=[4])
    assert _run(claim, implementations={"feature_map.positive": _unnormalised_positive_features}).verdict == "refuted"


def test_wrong_closed_form_is_caught_by_monte_carlo(monkeypatch):
    original = S.log_term_moment
    monkeypatch.setattr(S, "log_term_moment", lambda d, s, k=1: original(d, 2 * np.asarray(s), k))
    claim = _only(M.SMREG_CLOSED_FORM, check=["mc"], d=[4], norm_z=[1.0])
    assert _run(claim).verdict == "refuted"


def test_wrong_orthogonal_covariance_is_caught_by_monte_carlo(monkeypatch):
    original = S.log_orthogonal_pair_excess
    monkeypatch.setattr(S, "log_orthogonal_pair_excess", lambda d, s: original(d, s) + math.log(0.5))
    claim = _only(M.SMREG_MSE, d=[4], m=[4], s=[1.0], ensemble=["orthogonal"])
    assert _run(claim).verdict == "refuted"


def test_off_by_one_f_refutes_the_series(monkeypatch):
    original = S.log_f
    monkeypatch.setattr(S, "log_f", lambda k, d: original(np.asarray(k) + 1, d))
    assert _run(_only(M.SMREG_SERIES, d=[8], w=[1.0])).verdict == "refuted"


def test_wrong_lemma3_denominator_refutes_reading_a(monkeypatch):
    def shifted(k, d):
        return math.prod((2 * j + 1) / (d + 2 * j + 2) for j in range(k))

    monkeypatch.setattr(sphere, "lemma3_moment", shifted)
    result = _run(_only(M.SPHERE_EVEN_MOMENTS, k=[2], d=[3]))
    assert result.variants["a"].verdict == "refuted"


def test_wrong_recursion_factor_is_refuted(monkeypatch):
    monkeypatch.setattr(sphere, "eq25_factor", lambda k, d: k / (d + 1))
    assert _run(_only(M.PROOF_RECURSIONS, part=["eq25"], d=[4], k=[4])).verdict == "refuted"


def _doubled_argument_ratio(d, s):
    """Planted bug: ₀F₁(; d/2; d s/2) instead of d s/4 (ratio above 1)."""
    return -np.asarray(s) / 2 + S.log_hyp0f1(d / 2, d * np.asarray(s, dtype=float) / 2)


def test_wrong_ratio_refutes_the_universal_and_upper_bounds(monkeypatch):
    monkeypatch.setattr(S, "log_smreg_ratio", _doubled_argument_ratio)
    assert _run(_only(M.SMREG_LE_SM, d=[4], w=[1.0])).verdict == "refuted"
    upper = dataclasses.replace(M.THM1_UPPER, grid={"smoke": dict(d=[4], C=[10.0], L=[2], inputs=["gaussian"])})
    assert _run(upper).verdict == "refuted"


def test_sign_error_in_the_chernoff_bound_is_refuted(monkeypatch):
    # planted: exp(-w - l(t + 1)) instead of exp(-w - l(t - 1))
    monkeypatch.setattr(S, "eq34_chernoff_bound", lambda w, l: np.exp(-w - l * (np.log(l / w) + 1)))
    claim = _only(M.PROOF_CHAIN, part=["iii"], d=[1000], fraction=[0.9], C=[1.01], rounding=["floor"])
    assert _run(claim).verdict == "refuted"


def test_inflated_theorem2_gap_is_refuted(monkeypatch):
    original = S.theorem2_gap_coefficient
    monkeypatch.setattr(S, "theorem2_gap_coefficient", lambda d, m: 1.5 * original(d, m))
    claim = _only(M.THM2_ORF_SMREG, d=[4], m=[4], norm_x=[0.5], norm_y=[0.5], angle=[0.0])
    assert _run(claim).verdict == "refuted"


def test_tied_inputs_satisfy_theorem1_unless_the_ratio_is_wrong(monkeypatch):
    # The proof's bound w <= 2 ln C holds when queries are keys (Q = K): there the lower bound is not
    # refuted; a ratio that decays too fast (a planted factor d) is.
    tied = _only(M.THM1_LOWER, d=[1000, 10**6], C=[math.e], L=[2], domain=["tied"])
    assert _run(tied).verdict != "refuted"
    w_bound = _only(M.THM1_W_BOUND, d=[8], C=[1.0, 10.0], L=[1, 2], inputs=["tied"])
    assert _run(w_bound).verdict == "supported"
    original = S.log_smreg_ratio
    monkeypatch.setattr(S, "log_smreg_ratio", lambda d, s: d * original(d, s))
    assert _run(tied).verdict == "refuted"


def test_a_ratio_without_its_expectation_makes_the_proxy_inaccurate(monkeypatch):
    accurate = _only(M.SMREG_PROXY, compare=["exact"], inputs=["gaussian"], d=[16], L=[64], c=[0.25, 0.5])
    assert _run(accurate).verdict == "supported"
    monkeypatch.setattr(S, "log_smreg_ratio", lambda d, s: -np.asarray(s))  # planted: SMREG = Λ (no ₀F₁)
    assert _run(accurate).verdict == "refuted"


# ---------------------------------------------------------------- refutations, independently


def _mp_ratio(d: int, w: float):
    """SMREG/SM = e^{-w} ₀F₁(; d/2; d w/2) with mpmath's Bessel function (no scipy)."""
    b, x = mp.mpf(d) / 2, mp.mpf(d) * w / 2
    return mp.exp(-w + mp.loggamma(b) + (1 - b) / 2 * mp.log(x) + mp.log(mp.besseli(b - 1, 2 * mp.sqrt(x))))


def _poisson_upper_bound(d: int, w: float) -> float:
    """E f(Po(w), d) <= P[Po(w) <= w/2] + f(w/2, d) (f non-increasing): no Bessel functions at all."""
    k = int(w // 2)
    log_f = -math.fsum(math.log1p(2 * j / d) for j in range(k))
    return stats.poisson.cdf(k, w) + math.exp(log_f)


@pytest.mark.parametrize("reading", ["E", "R"])
def test_theorem1_counterexample_zero_query_and_long_key(reading):
    # x = 0, y = ρ e_1: A = [[exp(0)]] = [[1]] <= C for every C >= 1 under both readings, w = ρ²/2.
    x, y = np.zeros((1, 2)), np.array([[1000.0, 0.0]])
    config = M._Configuration.dense(x, y)
    assert config.admissible(1.0, reading)
    w = float(config.pair_w().max())
    assert w == pytest.approx(5e5) and w > S.w_bound(1e3)  # the proof's w <= 2 ln C fails
    for d in (27, 1000, 10**6):
        claimed = 1 - 2.5 / d ** (1 / 3)  # the claim at its constant plus the tolerance 0.5
        assert _poisson_upper_bound(d, w) < claimed
    assert float(_mp_ratio(27, 12.5)) < 1 - 2.5 / 3  # already at ρ = 5: ratio(27, 12.5) ≈ 0.057 < 0.167


def test_engine_witness_of_theorem1_is_admissible():
    result = _run(M.THM1_LOWER)
    extra = result.witness["extra"]
    q, k = np.array(extra["queries"]), np.array(extra["keys"])
    counts = np.array(extra["key_count"])
    dense_q = np.repeat(q, np.array(extra["query_count"]).astype(int), axis=0)
    dense_k = np.repeat(k, counts.astype(int), axis=0)
    a = np.exp(np.clip(dense_q @ dense_k.T, -700, 700))
    C = result.witness["params"]["C"]
    assert a.max() <= C and a.sum(axis=1).max() <= C  # admissible under both readings
    w = max(float(np.sum((qi + ki) ** 2) / 2) for qi in q for ki in k)
    assert w == pytest.approx(extra["w_found"])


def test_configuration_norms_match_dense_matrices():
    rng = np.random.default_rng(3_300_201_711_845_991_437)
    q, k = rng.standard_normal((2, 2, 3))
    counts = np.array([1.0, 4.0])
    config = M._Configuration(q, k, counts, counts)
    dense_q, dense_k = np.repeat(q, [1, 4], axis=0), np.repeat(k, [1, 4], axis=0)
    a = np.exp(dense_q @ dense_k.T)
    assert config.log_norm("E") == pytest.approx(math.log(a.max()))
    assert config.log_norm("R") == pytest.approx(math.log(a.sum(axis=1).max()))
    assert np.allclose(config.pair_w(), config.pair_w_from_kernels())
    shrunk = M._shrink_to_admissible(M._Configuration.dense(dense_q, dense_k), 6.0, "R")
    assert shrunk.admissible(6.0, "R") and not shrunk.scaled(1.001).admissible(6.0, "R")


def test_tail_sup_bound_against_a_dense_scan():
    for w_bar in (0.5, 2.0, 13.8):
        for d in (2, 27, 1000):
            scan = np.geomspace(d, 1e9, 20_000)
            brute = np.max(scan ** (1 / 3) * np.minimum(1.0, w_bar**2 / scan))
            assert M._tail_sup_bound(d, w_bar) == pytest.approx(brute, rel=1e-3)
    assert M._tail_sup_bound(8, math.inf) == math.inf


def test_lemma3_reading_b_witness_is_exact():
    result = _run(_only(M.SPHERE_EVEN_MOMENTS, k=[1], d=[2]))
    witness = result.variants["b"].witness
    assert witness["extra"]["quadrature"] == pytest.approx(3 / 8, rel=1e-12)  # E u_1^4 in R^2
    assert witness["extra"]["claimed"] == pytest.approx(1 / 2)


def test_proxy_total_variation_against_mpmath():
    # The exact part's mean row TV recomputed with SMREG from mpmath for every entry (L = 5, d = 16, c = 1).
    rng = np.random.default_rng(6_127_004_377_120_993_431)
    d, L = 16, 5
    x, y = rng.standard_normal((2, L, d)) * d**-0.25
    log_a = x @ y.T
    def log_smreg(xi, yj):
        return float(-((xi @ xi) + (yj @ yj)) / 2 + mp.log(mp.hyp0f1(mp.mpf(d) / 2, d * ((xi + yj) @ (xi + yj)) / 4)))

    log_reg = np.array([[log_smreg(xi, yj) for yj in y] for xi in x])
    p, p_reg = M._row_softmax(log_a), M._row_softmax(log_reg)
    expected = 0.5 * np.abs(p - p_reg).sum(axis=1).mean()
    ctx_params = dict(compare="exact", inputs="gaussian", d=d, L=L, c=1.0)

    class _Ctx:
        params, tolerance = ctx_params, M.PROXY_THRESHOLD

    ev = M._proxy_exact(_Ctx, x, y, rng.standard_normal((L, 3)))
    assert ev.estimate == pytest.approx(expected, rel=1e-10)


def test_smreg_below_sm_by_monte_carlo_and_in_dimension_one():
    # d = 1 lies outside Theorem 1's "d >= 2", yet f(k, 1) = 1/(2k-1)!! <= 1 and the ratio e^{-w}cosh(√(2w)) <= 1.
    w = np.geomspace(1e-6, 1e4, 200)
    assert np.all(S.log_smreg_ratio(1, 2 * w) <= 1e-15)
    # Monte Carlo cross-check of SMREG <= SM at moderate ‖z‖ (d = 4, s = 2): 200k positive-feature terms with
    # spherical rows; the mean is below SM by more than 5 exact standard errors (false-failure rate ~3e-7).
    rng = np.random.default_rng(4_401_377_915_237_010_283)
    x, y = np.array([1.0, 0.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0, 0.0])  # SM = 1, s = 2
    omega = M.replicate_projections("spherical", 200_000, 1, 4, rng)
    terms = M.kernel_estimates(positive_features, x, y, omega, 200_000)
    sd = math.sqrt(S.smreg_mse(4, 2.0, 1, log_lam=-1.0))
    assert terms.mean() + 5 * sd / math.sqrt(terms.size) < 1.0
    assert terms.mean() == pytest.approx(S.smreg(x, y), abs=5 * sd / math.sqrt(terms.size))


def test_smreg_unbiased_opposite_pair_is_judged_exactly():
    # x + y = 0: every feature product is Λ = SMREG, so the cell declares sd = 0 and is decided exactly
    from rfkit.validation.model import CellContext

    params = dict(d=8, norm_x=0.5, norm_y=0.5, angle=math.pi, m=16)
    ctx = CellContext(claim_id=M.SMREG_UNBIASED.id, variant="default", params=params, tier="quick",
                      replicates=20_000, alpha=1e-4, power=0.8, tolerance=0.05, rng=np.random.default_rng(1),
                      planned=20_000)
    ev = M.SMREG_UNBIASED.cell(ctx)
    assert ev.flags == () and ev.method.startswith("exact (deterministic") and ev.upper <= 1e-12


def test_full_tier_affords_the_replicates_its_power_calculation_asks_for():
    # smreg_mse at d = m = 16, s = 3 (relative sd of the squared error ~5.6): quick's 15e6-normal cap gives 58 593
    # replicates (radius ~0.07 > 0.05 at the full tier's level); the full tier's cap gives what power asks for
    from rfkit.validation.cells import plan
    from rfkit.validation.claims.performer import smreg
    from rfkit.validation.model import CellContext

    spec = next(s for s in plan(get_claim("performer.derived.smreg_mse"), tier="full", seed=0)
                if (s.params["d"], s.params["m"], s.params["s"], s.params["ensemble"]) == (16, 16, 3.0, "iid"))
    mom = S.estimator_error_moments(16, 3.0, 16, orthogonal=False)
    rel_sd = mom["sd_squared_error"] / mom["mse"]
    ctxs = {tier: CellContext(spec.claim.id, spec.variant, spec.params, tier, replicates, spec.alpha, 0.8, 0.05,
                              np.random.default_rng(0))
            for tier, replicates in (("quick", 1_000_000), ("full", 10_000_000))}
    counts = {tier: smreg._replicates_for_power(ctx, rel_sd, 16 * 16) for tier, ctx in ctxs.items()}
    need = math.ceil(smreg.required_replicates(rel_sd, **ctxs["full"].test))
    assert counts["quick"] == 15_000_000 // 256 < need <= counts["full"]
