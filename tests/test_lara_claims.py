"""lara identity claims: smoke runs without failing cells, planted bugs are refuted, and every refutation is
confirmed by an independent computation (mpmath at high precision or explicit loops)."""

import math

import mpmath as mp
import numpy as np
import pytest

from rfkit.estimators import is_estimate
from rfkit.estimators import lara as lara_est
from rfkit.estimators import mis as mis_est
from rfkit.estimators import ra as ra_est
from rfkit.estimators import rfa as rfa_est
from rfkit.theory import lara as theory
from rfkit.validation import validate
from rfkit.validation.claims import claims_in, get_claim
from rfkit.validation.claims.lara import forms, identities

mp.mp.dps = 50

REGISTER_IDS = {
    "lara.eq2.rfa_forms", "lara.eq3.snis_normaliser_cancels", "lara.eq4.reverse_engineering",
    "lara.prop3_1.mixture_target", "lara.prop3_1.rfa_is_snis", "lara.lemmaa1.tilted_gaussian",
    "lara.g2.rfa_mean_sample_degenerate", "lara.eq9.weights_sum_to_one", "lara.appd.d1_linear_system",
    "lara.g3_2.optimal_weights_sum_to_one", "lara.eq10.normaliser_free", "lara.eq35.landmark_aggregation",
    "lara.eq28.rfa_like_rewrite", "lara.sec4_3.rfa_special_case", "lara.sec4_3.ra_special_case",
    "lara.corc1.hyperbolic_target", "lara.alg1.ra_algorithm", "lara.alg2.rfa_algorithm", "lara.alg3.lara_algorithm",
    "lara.derived.query_cancellation", "lara.derived.rank_bound", "lara.derived.rfa_softmax_form",
    "lara.derived.lara_softmax_form", "lara.derived.gaussian_density_ratio", "lara.derived.hyperbolic_symmetry",
}
#: The identities refuted at smoke (the printed Eq 35: both readings of its normaliser fail). The others are supported
#: or, where the smoke grid stops short of the declared domain, "not covered" or split between admitted readings;
#: the readings' verdicts are pinned at the quick tier in tests/test_lara_identities_v2.py and test_lara_forms_v2.py.
REFUTED_AT_SMOKE = {"lara.eq35.landmark_aggregation"}


def run(ids, **kw):
    kw.setdefault("tier", "smoke")
    kw.setdefault("progress", False)
    return validate([get_claim(i) for i in ids], **kw)


def test_identity_module_registers_exactly_its_ids():
    assert {c.id for c in claims_in(identities) + claims_in(forms)} == REGISTER_IDS
    assert all(c.kind == "identity" for c in claims_in(identities) + claims_in(forms))


@pytest.mark.parametrize("part", [0, 1, 2])
def test_smoke_runs_without_failing_cells(part):
    ids = sorted(REGISTER_IDS)
    result = run(ids[part::3])
    assert not result.failed, [o.error for c in result.claims for o in c.outcomes if o.error]
    for c in result.claims:
        assert (c.verdict == "refuted") == (c.claim.id in REFUTED_AT_SMOKE), (c.claim.id, c.reason)
        assert c.verdict != "inconclusive" or c.cause in ("coverage", "reading"), (c.claim.id, c.reason)


# ------------------------------------------------------------------------------------- planted bugs


def _verdict(claim_id, implementations, variant=None):
    result = run([claim_id], implementations=implementations).claims[0]
    assert not result.failed, [o.error for o in result.outcomes if o.error]
    return result.variants[variant].verdict if variant else result.verdict


def test_planted_key_scale_in_rfa_is_refuted():
    def keys_off_by_one_percent(q, k, v, **kw):
        return rfa_est.rfa_attention(q, 1.01 * np.asarray(k), v, **kw)

    impl = {"rfa_attention": keys_off_by_one_percent}
    for claim_id in ("lara.eq2.rfa_forms", "lara.prop3_1.rfa_is_snis", "lara.derived.rfa_softmax_form"):
        assert _verdict(claim_id, impl) == "refuted", claim_id
    assert _verdict("lara.sec4_3.rfa_special_case", impl, "K1") == "refuted"


def test_planted_missing_density_ratio_in_lara_is_refuted():
    def without_alpha_prime(q, k, v, *, proposals, omega, alpha, form="softmax", **kw):
        standard = lara_est.LaraProposals(mis_est.GaussianProposals(np.zeros_like(proposals.proposals.mean())),
                                          proposals.q_landmarks, None)
        return lara_est.lara_attention(q, k, v, proposals=standard, omega=omega, alpha=alpha, form=form, **kw)

    impl = {"lara_attention": without_alpha_prime}
    assert _verdict("lara.eq28.rfa_like_rewrite", impl) == "refuted"
    assert _verdict("lara.derived.lara_softmax_form", impl) == "refuted"
    assert _verdict("lara.eq10.normaliser_free", impl) == "refuted"


def test_planted_uncentred_correction_is_refuted():
    def uncentred(kind, log_q_cross, *, rprime=None, beta=1.0, **kw):
        table = mis_est.weight_table(kind, log_q_cross, rprime=rprime, beta=beta, **kw)
        return table + beta * rprime.mean(axis=-1)[:, None, None, None] if kind == "eq9" else table

    assert _verdict("lara.eq9.weights_sum_to_one", {"weight_table": uncentred}, "A") == "refuted"


def test_planted_wrong_norm_factor_in_xi_is_refuted():
    def half_missing(x, omega, **kw):
        sign, logs = rfa_est.xi(x, omega, **kw)
        return sign, logs - 0.5 * np.sum(np.asarray(x) ** 2, axis=-1)[:, None, None]  # exp(ω·x - ‖x‖²)

    assert _verdict("lara.lemmaa1.tilted_gaussian", {"xi": half_missing}) == "refuted"


def test_planted_sampler_and_loop_bugs_are_refuted():
    def no_noise(q, k, v, z, eps):
        return ra_est.ra_algorithm1(q, k, v, z, np.zeros_like(eps))

    def shifted_samples(q, k, v, omega):
        return rfa_est.rfa_algorithm2(q, k, v, np.asarray(omega) + 0.01)

    def density_sign_flip(q, k, v, omega, alpha, log_q_own, *, reading="P1"):
        return lara_est.lara_algorithm3(q, k, v, omega, alpha, -np.asarray(log_q_own), reading=reading)

    def next_component(q, k, v, *, draws, **kw):
        moved = ra_est.RADraws((draws.z + 1) % np.asarray(k).shape[0], draws.eps, draws.sign)
        return ra_est.ra_attention(q, k, v, draws=moved, **kw)

    assert _verdict("lara.alg1.ra_algorithm", {"ra_algorithm1": no_noise}) == "refuted"
    assert _verdict("lara.alg2.rfa_algorithm", {"rfa_algorithm2": shifted_samples}) == "refuted"
    assert _verdict("lara.alg3.lara_algorithm", {"lara_algorithm3": density_sign_flip}, "P1") == "refuted"
    assert _verdict("lara.sec4_3.ra_special_case", {"ra_attention": next_component}) == "refuted"


def test_planted_formula_bugs_are_refuted():
    def uniform_mixture(q, k, **kw):
        mix = ra_est.attention_mixture(q, k, **kw)
        uniform = np.full(mix.log_weights.shape, -math.log(mix.log_weights.shape[1]))
        return ra_est.GaussianMixtures(mix.base, mix.offsets, uniform, mix.symmetric)

    def key_norm_dropped(q, k, v, omega, **kw):
        return rfa_est.integrand(q, 1.02 * np.asarray(k), v, omega, **kw)

    def unnormalised(values, *, log_weights):  # plain IS where SNIS belongs: Z no longer cancels
        return is_estimate(values, log_weights=log_weights)

    def eq34_for_eq35(family, ql, kl=None, k=None, **kw):
        return lara_est.proposal_means("eq34", ql, kl, k)

    def unweighted_inner(log_q, r, *, argument="common"):  # Σ_c'' BH_c'' r_c'' replaced by the plain mean of r
        bh = mis_est.balance_heuristic(log_q)
        return bh + np.exp(log_q) * (r - r.mean(axis=-1, keepdims=True))

    def scaled_rhs(query, keys, values, means, **kw):
        sol = theory.appd_d1_solution(query, keys, values, means, **kw)
        return theory.AppDSolution(sol.grid, sol.weights, sol.log_q, sol.g, sol.A, sol.b, 1.01 * sol.r + 0.01,
                                   sol.mu, sol.query, sol.keys, sol.values, sol.means)

    assert _verdict("lara.eq4.reverse_engineering", {"attention_mixture": uniform_mixture}) == "refuted"
    assert _verdict("lara.derived.query_cancellation", {"integrand": key_norm_dropped}) == "refuted"
    assert _verdict("lara.eq3.snis_normaliser_cancels", {"snis_estimate": unnormalised}) == "refuted"
    assert _verdict("lara.eq35.landmark_aggregation", {"proposal_means": eq34_for_eq35},
                    "landmark_attention") == "refuted"
    assert _verdict("lara.g3_2.optimal_weights_sum_to_one", {"eq27_weights": unweighted_inner}, "A") == "refuted"
    assert _verdict("lara.appd.d1_linear_system", {"appd_d1_solution": scaled_rhs}) == "refuted"


# ---------------------------------------------------------- independent confirmations of refutations


def _mp_gauss(w, mu):
    return mp.exp(-sum((mp.mpf(float(a)) - mp.mpf(float(b))) ** 2 for a, b in zip(w, mu, strict=True)) / 2)


def test_confirm_balance_terms_at_own_samples_do_not_sum_to_one():
    """eq9 reading B and G.3.2 readings B and C: with r ≡ 0 (or any zero-sum correction) the sum is
    Σ_c q_c(ω_c)/Σ_c' q_c'(ω_c), which is 1 only if every ω_c gives the same BH vector (mpmath, 50 digits)."""
    means = np.array([[0.0, 0.0], [1.5, -0.5]])
    draws = np.array([[0.3, -0.2], [1.1, 0.4]])                      # ω_c near q_c
    total = sum(_mp_gauss(draws[c], means[c]) / sum(_mp_gauss(draws[c], m) for m in means) for c in range(2))
    assert abs(total - 1) > 0.1
    lq = mis_est.GaussianProposals(means).logpdf_cross(draws)
    got = mis_est.eq27_weights(lq, np.zeros((2, 2)), argument="own").sum()
    assert got == pytest.approx(float(total), rel=1e-13)
    assert mis_est.eq27_weights(lq, np.zeros((2, 2)), argument="typeset").sum() == pytest.approx(float(total))
    at_common = mis_est.eq27_weights(lq[0], np.zeros(2)).sum()        # reading A: one argument
    assert at_common == pytest.approx(1.0, abs=1e-15)


def test_confirm_eq35_printed_readings():
    """printed_C: the bracket Σ_c' e^{k̃_c·k̃_c'}/Σ_c' e^{k̃_c·k̃_c'} is exactly 1, so μ_c = q̃_c + k̃_c (Eq 34: no global
    information). printed_M: the normaliser sums e^{k̃_c·k_m} over the individual keys, so μ_c changes when keys
    change with every segment mean fixed (loops, mpmath)."""
    rng = np.random.default_rng(11)
    ql, k = rng.normal(size=(3, 2)), rng.normal(size=(6, 2))
    kl = k.reshape(3, 2, 2).mean(1)
    np.testing.assert_array_equal(lara_est.proposal_means("eq35", ql, kl, k, eq35_reading="printed_C"), ql + kl)
    moved = k + np.array([[0.5, -0.5], [-0.5, 0.5]] * 3)                # segment means unchanged
    assert np.allclose(moved.reshape(3, 2, 2).mean(1), kl)

    def printed_m(keys, c):
        num = sum(mp.exp(mp.mpf(float(kl[c] @ kl[j]))) for j in range(3))
        den = sum(mp.exp(mp.mpf(float(kl[c] @ km))) for km in keys)
        return float(num / den)

    assert abs(printed_m(k, 0) - printed_m(moved, 0)) > 1e-3
    got = lara_est.proposal_means("eq35", ql, kl, moved, eq35_reading="printed_M")[0]
    np.testing.assert_allclose(got, ql[0] + printed_m(moved, 0) * kl[0], rtol=1e-13)


def test_confirm_non_uniform_constants_are_not_rfa():
    """§4.3 reading K2: constant weights κ_nc that differ across c reweight the samples, so LARA ≠ RFA (loops)."""
    rng = np.random.default_rng(12)
    q, k, v = 0.5 * rng.normal(size=(2, 2)), 0.5 * rng.normal(size=(3, 2)), rng.normal(size=(3, 1))
    omega = rng.normal(size=(2, 2))
    kappa = np.array([[0.9, 0.1], [0.2, 0.8]])

    def term(n, s):
        return mp.exp(mp.mpf(float(omega[s] @ q[n]))) * sum(
            mp.exp(mp.mpf(float(omega[s] @ km - km @ km / 2))) * mp.mpf(float(vm[0]))
            for km, vm in zip(k, v, strict=True))

    def den(n, s):
        return mp.exp(mp.mpf(float(omega[s] @ q[n]))) * sum(mp.exp(mp.mpf(float(omega[s] @ km - km @ km / 2)))
                                                             for km in k)

    for n in range(2):
        rfa = sum(term(n, s) for s in range(2)) / sum(den(n, s) for s in range(2))
        lara = sum(kappa[n, s] * term(n, s) for s in range(2)) / sum(kappa[n, s] * den(n, s) for s in range(2))
        got = lara_est.lara_attention(q, k, v, proposals=lara_est.lara_proposals(q, k, 2, proposal="standard"),
                                      omega=omega[:, None], weights="constant", kappa=kappa)[n, 0]
        assert got == pytest.approx(float(lara), rel=1e-12)
        assert abs(float(lara - rfa)) > 1e-3


def test_confirm_algorithm3_reading_p2_is_not_lara():
    """Algorithm 3 reading P2: α'_nc = α_nc N(ω_c; 0, I/q_c(ω_c)) changes the relative weights of the proposals
    (C = 2, mpmath), so its output differs from Eq 10's."""
    q = np.array([[0.2, -0.1]])
    k, v = np.array([[2.0, 0.0], [0.0, 0.0], [-2.0, 0.0]]), np.array([[-3.0], [0.0], [3.0]])
    means = np.array([[2.0, 0.0], [-1.0, 0.0]])
    omega = np.array([[2.1, 0.1], [-2.5, 0.3]])  # ω_1 at its proposal's mean, ω_2 in its proposal's tail
    alpha = np.array([[0.6, 0.4]])
    d = 2
    log_q = [-float((w - m) @ (w - m)) / 2 - d / 2 * math.log(2 * math.pi) for w, m in zip(omega, means, strict=True)]

    def stats(c):
        xi_k = [mp.exp(mp.mpf(float(omega[c] @ km - km @ km / 2))) for km in k]
        return (sum(x * mp.mpf(float(vm[0])) for x, vm in zip(xi_k, v, strict=True)), sum(xi_k),
                mp.exp(mp.mpf(float(omega[c] @ q[0] - q[0] @ q[0] / 2))))

    def output(prime):
        num = sum(prime[c] * stats(c)[2] * stats(c)[0] for c in range(2))
        return float(num / sum(prime[c] * stats(c)[2] * stats(c)[1] for c in range(2)))

    sq = [mp.mpf(float(w @ w)) for w in omega]
    p1 = [alpha[0, c] * mp.exp(-sq[c] / 2) / (2 * mp.pi) / mp.exp(log_q[c]) for c in range(2)]
    p2 = [alpha[0, c] * (mp.exp(log_q[c]) / (2 * mp.pi)) ** (d / 2) * mp.exp(-mp.exp(log_q[c]) * sq[c] / 2)
          for c in range(2)]
    loops = {r: lara_est.lara_algorithm3(q, k, v, omega, alpha, np.array(log_q), reading=r)[0, 0] for r in ("P1", "P2")}
    assert loops["P1"] == pytest.approx(output(p1), rel=1e-12)
    assert loops["P2"] == pytest.approx(output(p2), rel=1e-12)
    assert abs(output(p1) - output(p2)) > 0.1
