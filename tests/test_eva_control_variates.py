"""eva control-variate claims (validation/claims/eva/control_variates.py): smoke runs without failing cells and pins
the computed verdicts, planted bugs are refuted, the theory addition matches quadrature, and the refutation of
§4.1's reading R2 is confirmed by a brute-force computation with exact fractions."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate

from rfkit.estimators.control_variates import optimal_coefficient
from rfkit.estimators.eva import contiguous_labels, control_variate_terms, log_xi
from rfkit.estimators.lara import lara_attention
from rfkit.theory import eva as theory
from rfkit.validation import validate
from rfkit.validation.claims import claims_in, get_claim
from rfkit.validation.claims.eva import control_variates as cv

REGISTER_IDS = {
    "eva.eq17.kernel_unbiased", "eva.eq2.softmax_as_expectation", "eva.eq5.cv_unbiased",
    "eva.eq20.optimal_coefficient", "eva.appb1.variance_never_larger", "eva.appb2.importance_weight_mean",
    "eva.appb2.finite_s_bias", "eva.eq21.coefficient_consistency", "eva.eq22.per_token_cv_mean",
    "eva.prop1.optimal_coefficient", "eva.prop1.zero_variance", "eva.sec3_2.coefficient_cost_tradeoff",
    "eva.lemma3.partition_lowers_weighted_mse", "eva.prop2.local_softmax_optimal",
    "eva.prop2.partition_beats_global", "eva.sec4_1.exact_set_lowers_j", "eva.derived.weighted_kernel_moments",
    "eva.derived.cv_moments", "eva.derived.snis_asymptotics", "eva.derived.eva13_asymptotics",
    "eva.appg2.lara_cv_form"}

#: smoke, seed 0: the computed verdicts this test pins per reading (every other claim: supported). Timing and
#: underpowered smoke cells are inconclusive; §4.1's R2 (reported beside: re-chunking with the same C) is refuted
#: (confirmed below by exact fractions), R1 is not covered at smoke.
EXPECTED = {
    "eva.sec4_1.exact_set_lowers_j": {"R1": "inconclusive", "R2": "refuted"},
}
#: claims whose smoke verdict may be inconclusive (smoke resolution / timing noise on shared cores), never refuted
MAY_BE_INCONCLUSIVE = {
    "eva.eq2.softmax_as_expectation", "eva.eq5.cv_unbiased", "eva.appb1.variance_never_larger",
    "eva.appb2.importance_weight_mean", "eva.eq22.per_token_cv_mean", "eva.sec3_2.coefficient_cost_tradeoff",
    "eva.prop2.local_softmax_optimal", "eva.derived.eva13_asymptotics", "eva.derived.cv_moments",
    "eva.derived.weighted_kernel_moments", "eva.derived.snis_asymptotics", "eva.appb2.finite_s_bias",
    "eva.eq21.coefficient_consistency", "eva.eq17.kernel_unbiased",
    # not covered at smoke (the v2 domains: quick covers them)
    "eva.eq20.optimal_coefficient", "eva.prop1.optimal_coefficient", "eva.prop1.zero_variance",
    "eva.lemma3.partition_lowers_weighted_mse", "eva.prop2.partition_beats_global", "eva.appg2.lara_cv_form"}


def run(ids, **kw):
    kw.setdefault("tier", "smoke")
    kw.setdefault("progress", False)
    return validate([get_claim(i) for i in ids], **kw)


def test_register_ids_all_present():
    assert {c.id for c in claims_in(cv)} == REGISTER_IDS
    assert all(c.paper == "eva" for c in claims_in(cv))


@pytest.mark.slow
@pytest.mark.parametrize("group", range(3))
def test_smoke_runs_without_failing_cells_and_pins_verdicts(group):
    result = run(sorted(REGISTER_IDS)[group::3])
    assert not result.failed, [o.error for c in result.claims for o in c.outcomes if o.error]
    for c in result.claims:
        got = {name: v.verdict for name, v in c.variants.items()}
        want = EXPECTED.get(c.claim.id)
        if want is not None:
            assert got == want, (c.claim.id, got)
        elif c.claim.id in MAY_BE_INCONCLUSIVE:
            assert c.verdict in ("supported", "inconclusive"), (c.claim.id, c.reason)
        else:
            assert c.verdict == "supported", (c.claim.id, c.reason)


# ------------------------------------------------------------------------------------- theory addition


def _quadrature_moment(q, k, mu, power: int, token=None) -> float:
    """``E_ρ[W^j]`` (or of one token's term) in d = 1 by adaptive quadrature, ``ρ = N(μ, 1)``."""
    w = np.exp(theory.log_softmax_weights(q, k))
    u = q[0] + k[:, 0]
    idx = range(len(u)) if token is None else [token]

    def integrand(x):
        log_target = math.log(sum(w[m] * math.exp(-0.5 * (x - u[m]) ** 2 + 0.5 * (x - mu[0]) ** 2) for m in idx))
        return math.exp(power * log_target - 0.5 * (x - mu[0]) ** 2) / math.sqrt(2 * math.pi)   # ρ (p/ρ)^j

    return integrate.quad(integrand, -40, 40, limit=400, epsabs=0, epsrel=1e-12)[0]


def _skewness(m1, m2, m3):
    var = m2 - m1 * m1
    return (m3 - 3 * m1 * m2 + 2 * m1**3) / var**1.5


def test_importance_weight_skewness_matches_quadrature():
    q, k, mu = np.array([0.4]), np.array([[0.3], [-0.5], [0.9]]), np.array([0.2])
    gamma_h, gamma_tokens = theory.importance_weight_skewness(q, k, mu, 1)
    moments = [_quadrature_moment(q, k, mu, j) for j in (1, 2, 3)]
    assert moments[0] == pytest.approx(1.0, rel=1e-10)
    assert gamma_h == pytest.approx(_skewness(*moments), rel=1e-8)
    for m in range(3):
        tm = [_quadrature_moment(q, k, mu, j, token=m) for j in (1, 2, 3)]
        assert gamma_tokens[m] == pytest.approx(_skewness(*tm), rel=1e-8)
    gamma_4, tokens_4 = theory.importance_weight_skewness(q, k, mu, 4)
    assert gamma_4 == pytest.approx(gamma_h / 2) and np.allclose(tokens_4, gamma_tokens / 2)


def test_importance_weight_skewness_zero_variance_and_bad_input():
    q, k = np.array([0.5, 0.0]), np.array([[0.1, 0.2]])
    _, tokens = theory.importance_weight_skewness(q, k, q + k[0], 3)      # μ = u_1: h_1 is deterministic
    assert tokens[0] == 0.0
    with pytest.raises(ValueError):
        theory.importance_weight_skewness(q, k, q, 0)


def _var_h_sd(q, k, mu, num_samples: int) -> float:
    """The Var[h] cell's exact replicate sd: the quadratic form (h - 1)² = Xᵀ11ᵀX of theory.quadratic_form_sd."""
    return theory.quadratic_form_sd(q, k, mu, np.ones((len(k), len(k))), num_samples)


def test_var_h_replicate_sd_matches_quadrature():
    """S = 1: Var[(W - 1)²] = μ₄ - Var[W]² from adaptive-quadrature moments of one weight (d = 1)."""
    q, k, mu = np.array([0.4]), np.array([[0.3], [-0.5], [0.9]]), np.array([0.2])
    m2, m3, m4 = (_quadrature_moment(q, k, mu, j) for j in (2, 3, 4))
    var = (m4 - 4 * m3 + 6 * m2 - 3) - (m2 - 1) ** 2
    assert _var_h_sd(q, k, mu, 1) == pytest.approx(math.sqrt(var), rel=1e-8)


def test_var_h_replicate_sd_by_monte_carlo(rng):
    """S = 4 (the mean of S weights): sd of (h - 1)² against 400k simulated replicates; seed from the rng fixture,
    a 10% relative tolerance is > 10 standard errors of the sample sd here (false-failure rate < 1e-6)."""
    q, k, mu = np.array([0.2, -0.1]), np.array([[0.1, 0.3], [-0.2, 0.1], [0.25, -0.2]]), np.zeros(2)
    v = np.ones((3, 1))
    omega = rng.standard_normal((400_000, 4, 2))
    h = control_variate_terms(q[None], k, v, omega=omega, log_ratio=np.zeros(omega.shape[:-1])).h[:, 0]
    assert np.std((h - 1) ** 2) == pytest.approx(_var_h_sd(q, k, mu, 4), rel=0.1)


def test_centred_product_variance_matches_quadrature():
    """Var[(Y - m)(Y' - m')] of the weighted kernel terms (d = 1): ω ~ N(μ, 1), Y = r ξ(x) ξ(y) from the printed
    definitions, integrated by adaptive quadrature."""
    x, y, y2, mu = 0.3, 0.2, -0.25, 0.4

    def term(w, b):
        return math.exp(-w * mu + mu**2 / 2 + w * x - x**2 / 2 + w * b - b**2 / 2)

    def expect(fn):
        return integrate.quad(lambda w: fn(w) * math.exp(-0.5 * (w - mu) ** 2) / math.sqrt(2 * math.pi), -40, 40,
                              limit=400, epsabs=0, epsrel=1e-12)[0]

    m, m2 = math.exp(x * y), math.exp(x * y2)
    cov = expect(lambda w: (term(w, y) - m) * (term(w, y2) - m2))
    second = expect(lambda w: ((term(w, y) - m) * (term(w, y2) - m2)) ** 2)
    got = cv._centred_product_variance(np.array([x + y - mu]), np.array([x + y2 - mu]), m, m2)
    assert got == pytest.approx(second - cov**2, rel=1e-8)


# --------------------------------------------------------------------------- §4.1 R2: independent check


def _brute_force_optimal_j(weights, values, groups) -> Fraction:
    """Eq 9's J with optimal (weighted-mean) coefficients, in exact rational arithmetic from its definition."""
    total = Fraction(0)
    for group in groups:
        mass = sum(weights[m] for m in group)
        centre = sum(weights[m] * values[m] for m in group) / mass
        total += sum(weights[m] * (centre - values[m]) ** 2 for m in group)
    return total


def test_exact_set_r2_counterexample_brute_force():
    """q = 0 (uniform weights), values (0, 0, 1, 1), C = 2, E = {1}: without E the chunks {0,1} {2,3} are pure
    (J = 0); with E the rest {0, 2, 3} is re-chunked into {0, 2} {3} and J = 1/8 > 0, so re-chunking [M]\\E with the
    same C can raise Eq 9's error (§4.1's statement fails in reading R2; R1, a refinement, never does)."""
    weights = [Fraction(1, 4)] * 4
    values = [Fraction(0), Fraction(0), Fraction(1), Fraction(1)]
    assert contiguous_labels(4, 2).tolist() == [0, 0, 1, 1]
    assert contiguous_labels(4, 2, exact=[1]).tolist() == [0, -1, 0, 1]
    j_without = _brute_force_optimal_j(weights, values, [[0, 1], [2, 3]])
    j_with = _brute_force_optimal_j(weights, values, [[0, 2], [3], [1]])
    j_refined = _brute_force_optimal_j(weights, values, [[0], [1], [2, 3]])                   # reading R1
    assert (j_without, j_with, j_refined) == (0, Fraction(1, 8), 0)
    q, k, v = np.zeros((1, 2)), np.random.default_rng(0).normal(size=(4, 2)), np.array([[0.0], [0.0], [1.0], [1.0]])
    margin, scale = cv._exact_set_margin(q[0], k, v, 2, [1], "R2")
    assert margin == pytest.approx(-1 / 8, abs=1e-15) and scale == pytest.approx(1 / 4)
    assert cv._exact_set_margin(q[0], k, v, 2, [1], "R1")[0] == pytest.approx(0.0, abs=1e-15)


def test_set_partitions_enumerates_bell_numbers():
    assert [len(cv._set_partitions(m)) for m in (1, 2, 3, 4)] == [1, 2, 5, 15]


# ------------------------------------------------------------------------------------- planted bugs


def _refuted(claim_id, implementations, variant=None, **kw):
    result = run([claim_id], implementations=implementations, **kw)
    assert not result.failed
    c = result.claims[0]
    return (c.variants[variant].verdict if variant else c.verdict) == "refuted"


def _unweighted_terms(q, k, v, *, omega=None, log_ratio=None, **kw):
    """Planted bug: drops the proposal's density ratio r(ω) (treats every proposal as N(0, I))."""
    return control_variate_terms(q, k, v, omega=omega, log_ratio=np.zeros_like(log_ratio), **kw)


def test_planted_missing_density_ratio_refutes_eq22():
    assert _refuted("eva.eq22.per_token_cv_mean", {"control_variate_terms": _unweighted_terms})


class _OffsetCoefficient:
    """Planted bug: β̂ off by 0.1 in every coordinate (an estimator that converges to the wrong target)."""

    def __init__(self, terms):
        self._terms = terms

    @property
    def coefficient(self):
        return self._terms.coefficient + 0.1


def test_planted_wrong_target_refutes_eq21():
    # the MSE stops shrinking at 2·0.1² while the exact MSE goes on like 1/S: log(MC/exact) climbs (slope ~0.7)
    def offset_terms(q, k, v, **kw):
        return _OffsetCoefficient(control_variate_terms(q, k, v, **kw))
    assert _refuted("eva.eq21.coefficient_consistency", {"control_variate_terms": offset_terms})


def test_planted_missing_norm_term_refutes_eq17():
    def log_xi_without_norm(x, omega):
        return log_xi(x, omega) + 0.5 * np.sum(np.asarray(x) ** 2, axis=-1)[..., None]
    assert _refuted("eva.eq17.kernel_unbiased", {"log_xi": log_xi_without_norm})


def test_planted_wrong_eq20_estimator_is_refuted():
    def half_coefficient(g, h):
        return 0.5 * optimal_coefficient(g, h)
    assert _refuted("eva.eq20.optimal_coefficient", {"optimal_coefficient": half_coefficient})


def test_planted_lara_offset_refutes_cv_form():
    def shifted_lara(*args, **kw):
        return lara_attention(*args, **kw) + 1e-6
    assert _refuted("eva.appg2.lara_cv_form", {"lara_attention": shifted_lara})


def _cost_ctx():
    from rfkit.validation.model import CellContext
    return CellContext("eva.sec3_2.coefficient_cost_tradeoff", "default", {}, "quick", 4, 1e-3, 0.8,
                       cv.SEC3_2_COST.tolerance, np.random.default_rng(0))


def test_coefficient_cost_counts_an_exponential_for_every_query_key_pair():
    """The exps cell decides "requires exp(q_n·k_m) for every query-key pair" exactly: the per-token form evaluates 7
    exponentials per pair at every N (slope 2), the shared form 6 per token (slope 1). Planted: a per-token form
    that evaluates one exponential per query (an O(N) path) is refuted on both counts."""
    sizes = np.array([96, 128, 192, 256, 384])
    calls = [cv._cost_calls(int(n), 4, 2, np.random.default_rng(0)) for n in sizes]
    per_token = cv._exp_count_evidence(_cost_ctx(), sizes, [c[0] for c in calls], per_token=True)
    tol = cv.SEC3_2_COST.tolerance
    assert per_token.upper <= tol and per_token.extra["exps_per_pair"] == [7.0] * 5
    shared_calls = [cv._cost_calls(int(n), 4, 2, np.random.default_rng(0))[1] for n in sizes * 16]
    shared = cv._exp_count_evidence(_cost_ctx(), sizes * 16, shared_calls, per_token=False)
    assert shared.upper <= tol and shared.extra["slope"] == pytest.approx(1.0)
    # the count sees every exponential of the shared path: at least the S features of each query and key
    assert all(count >= 2 * 2 * n for count, n in zip(shared.extra["values"], sizes * 16, strict=True))

    def linear(n):
        return lambda: np.exp(np.zeros(n))
    planted = cv._exp_count_evidence(_cost_ctx(), sizes, [linear(int(n)) for n in sizes], per_token=True)
    assert planted.effect > tol and planted.p_value < 1e-3  # slope 1 against 2, and 1/N exponentials a pair
