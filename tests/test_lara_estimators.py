"""LARA-paper estimators (rfa, ra, mis, lara) against brute-force loops written from the paper's formulas, seeded
statistical tests of the samplers, and bad-input errors."""

import math

import numpy as np
import pytest
from scipy import stats

from rfkit.estimators import NumericalError, softmax_attention
from rfkit.estimators import lara as lara_est
from rfkit.estimators import mis as mis_est
from rfkit.estimators import ra as ra_est
from rfkit.estimators import rfa as rfa_est

TOL = 1e-11


def _inputs(rng, n=5, m=4, d=3, dv=2, scale=0.6):
    return rng.normal(0, scale, (n, d)), rng.normal(0, scale, (m, d)), rng.normal(size=(m, dv))


def _xi_loop(x, w, fmap, b=0.0):
    """ξ(x, ω) ∈ R^l from App C, one vector and one sample at a time."""
    nx = float(x @ x)
    t = float(w @ x)
    if fmap == "positive":
        return np.array([math.exp(t - nx / 2)])
    if fmap == "hyperbolic":
        return math.exp(-nx / 2) / math.sqrt(2) * np.array([math.exp(t), math.exp(-t)])
    if fmap == "trig_sincos":
        return math.exp(nx / 2) * np.array([math.sin(t), math.cos(t)])
    return np.array([math.sqrt(2) * math.exp(nx / 2) * math.cos(t + b)])


def _rfa_loop(q, k, v, omega, fmap, phase=None):
    """Eq 2, first form: Σ_m Σ_s ξ(q,ω_s)ᵀξ(k_m,ω_s) v_m / Σ_m Σ_s ξ(q,ω_s)ᵀξ(k_m,ω_s)."""
    out = np.zeros((len(q), v.shape[1]))
    for n in range(len(q)):
        num, den = 0.0, 0.0
        for m in range(len(k)):
            for s in range(len(omega)):
                b = 0.0 if phase is None else phase[s]
                a = float(_xi_loop(q[n], omega[s], fmap, b) @ _xi_loop(k[m], omega[s], fmap, b))
                num = num + a * v[m]
                den += a
        out[n] = num / den
    return out


def _log_normal_loop(w, mu):
    return float(stats.multivariate_normal(mean=mu, cov=np.eye(len(mu))).logpdf(w))


# ------------------------------------------------------------------------------------------- RFA


@pytest.mark.parametrize("fmap", rfa_est.XI_MAPS)
def test_xi_and_features_match_app_c(rng, fmap):
    x = rng.normal(size=(3, 2))
    omega, phase = rfa_est.draw_rfa_samples(4, 2, rng=rng, feature_map=fmap)
    sign, logabs = rfa_est.xi(x, omega, feature_map=fmap, phase=phase)
    for i in range(3):
        for s in range(4):
            want = _xi_loop(x[i], omega[s], fmap, 0.0 if phase is None else phase[s])
            np.testing.assert_allclose(sign[i, s] * np.exp(logabs[i, s]), want, rtol=1e-13, atol=1e-15)
    f = rfa_est.rf_features(x, omega, feature_map=fmap, phase=phase)
    want = np.array([[np.mean([_xi_loop(x[i], omega[s], fmap, 0.0 if phase is None else phase[s])
                               @ _xi_loop(x[j], omega[s], fmap, 0.0 if phase is None else phase[s])
                               for s in range(4)]) for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(f.kernel(f), want, rtol=1e-12)  # footnote 3: φᵀφ is the kernel average


@pytest.mark.filterwarnings("ignore::rfkit.estimators.NonPositiveDenominatorWarning")  # trig maps: signed rows
@pytest.mark.parametrize("fmap", rfa_est.XI_MAPS)
@pytest.mark.parametrize("return_stats", [False, True])
def test_causal_rfa_is_rfa_over_the_prefix(rng, fmap, return_stats):
    # causal=True was silently ignored for the signed maps and for return_stats (found by the torch mirror's
    # tests): row n of the causal output must be RFA of query n over keys 0..n, with the same samples
    q, k, v = rng.normal(size=(3, 5, 2)) * 0.5
    omega, phase = rfa_est.draw_rfa_samples(6, 2, rng=rng, feature_map=fmap)
    kw = dict(omega=omega, phase=phase, feature_map=fmap, form="features")
    out = rfa_est.rfa_attention(q, k, v, causal=True, return_stats=return_stats, **kw)
    out = out[0] if return_stats else out
    for n in range(5):
        want = rfa_est.rfa_attention(q[n:n + 1], k[:n + 1], v[:n + 1], **kw)
        np.testing.assert_allclose(out[n], want[0], rtol=1e-10, atol=1e-12)


@pytest.mark.filterwarnings("ignore::rfkit.estimators.NonPositiveDenominatorWarning")  # trig maps: signed rows
@pytest.mark.parametrize("fmap", rfa_est.XI_MAPS)
def test_rfa_forms_match_the_double_sum_loop(rng, fmap):
    q, k, v = _inputs(rng)
    omega, phase = rfa_est.draw_rfa_samples(6, 3, rng=rng, feature_map=fmap)
    want = _rfa_loop(q, k, v, omega, fmap, phase)
    forms = ("softmax", "features", "double_sum", "algorithm") if fmap == "positive" else ("features", "double_sum")
    for form in forms:
        got = rfa_est.rfa_attention(q, k, v, omega=omega, phase=phase, feature_map=fmap, form=form)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=TOL, err_msg=form)


def test_rfa_softmax_form_survives_huge_norms(rng):
    q, k, v = _inputs(rng, scale=30.0)  # raw exp(ω·k) would overflow
    omega, _ = rfa_est.draw_rfa_samples(8, 3, rng=rng)
    a = rfa_est.rfa_attention(q, k, v, omega=omega)
    b = rfa_est.rfa_algorithm2(q, k, v, omega)
    assert np.isfinite(a).all()
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_integrand_and_target_match_eq6_and_the_mixture(rng):
    q, k, v = _inputs(rng)
    omega = rng.normal(size=(4, 3))
    for fmap in ("positive", "hyperbolic"):
        f = rfa_est.integrand(q, k, v, omega, feature_map=fmap)
        log_t = rfa_est.log_implied_target(q, k, omega, feature_map=fmap)
        for n in range(len(q)):
            for s in range(4):
                a = np.array([_xi_loop(q[n], omega[s], fmap) @ _xi_loop(k[m], omega[s], fmap) for m in range(len(k))])
                np.testing.assert_allclose(f[n, s], a @ v / a.sum(), rtol=1e-12)
                want = _log_normal_loop(omega[s], np.zeros(3)) + math.log(a.sum())
                assert abs(log_t[n, s] - want) < 1e-12 * (1 + abs(want))
    np.testing.assert_allclose(rfa_est.integrand(q, k, v, omega, form="simplified"),
                               rfa_est.integrand(q, k, v, omega, form="literal"), rtol=1e-12)


def test_rfa_snis_is_snis_and_accepts_other_proposals(rng):
    q, k, v = _inputs(rng)
    mu = np.array([0.5, -0.2, 0.1])
    omega = mu + rng.normal(size=(7, 3))
    log_q = np.array([_log_normal_loop(w, mu) for w in omega])
    y, ess = rfa_est.rfa_snis(q, k, v, omega, log_proposal=log_q)
    for n in range(len(q)):
        w = np.array([math.exp(rfa_est.log_implied_target(q[n:n + 1], k, omega[s:s + 1])[0, 0] - log_q[s])
                      for s in range(7)])
        f = rfa_est.integrand(q[n:n + 1], k, v, omega)[0]
        np.testing.assert_allclose(y[n], w @ f / w.sum(), rtol=1e-12)
        assert ess[n] == pytest.approx(w.sum() ** 2 / (w * w).sum())


def test_key_statistics_are_algorithm_2s_ns_ds(rng):
    _, k, v = _inputs(rng)
    omega = rng.normal(size=(3, 3))
    ks = rfa_est.key_statistics(k, v, omega)
    for s in range(3):
        xi_k = np.array([_xi_loop(k[m], omega[s], "positive")[0] for m in range(len(k))])
        assert ks.log_den[s] == pytest.approx(math.log(xi_k.sum()))
        np.testing.assert_allclose(np.exp(ks.log_den[s]) * ks.F[s], xi_k @ v, rtol=1e-12)


# -------------------------------------------------------------------------------------------- RA


def test_mixture_log_density_matches_the_component_sum(rng):
    q, k, _ = _inputs(rng)
    for symmetric in (False, True):
        mix = ra_est.attention_mixture(q, k, feature_map="hyperbolic" if symmetric else "positive")
        pts = rng.normal(size=(4, 3))
        logits = q @ k.T
        pi = np.exp(logits - logits.max(1, keepdims=True))
        pi /= pi.sum(1, keepdims=True)
        for n in range(len(q)):
            for i, w in enumerate(pts):
                terms = [pi[n, m] * math.exp(_log_normal_loop(w, q[n] + k[m])) for m in range(len(k))]
                if symmetric:
                    terms = [0.5 * t + 0.5 * pi[n, m] * math.exp(_log_normal_loop(w, -q[n] - k[m]))
                             for m, t in enumerate(terms)]
                assert mix.logpdf_cross(pts)[i, n] == pytest.approx(math.log(sum(terms)), abs=1e-12)
        own = mix.logpdf(np.broadcast_to(pts, (len(q),) + pts.shape))
        np.testing.assert_allclose(own, mix.logpdf_cross(pts).T, atol=1e-12)


def test_categorical_inverse_cdf_is_exact_on_a_uniform_grid():
    log_w = np.log(np.array([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25]]) + 1e-300)
    u = (np.arange(10_000) + 0.5) / 10_000
    z = ra_est.categorical_from_uniforms(log_w, np.vstack([u, u]))
    for row, probs in enumerate(np.exp(log_w)):
        np.testing.assert_allclose(np.bincount(z[row], minlength=4) / u.size, probs, atol=1e-4)
    assert not (z[0] == 1).any()  # a zero-probability category is never drawn


def test_mixture_sampler_law_in_one_dimension():
    # seeded KS test of the Eq 30 sampler against the mixture CDF; false-failure rate 1e-3 (the test's level)
    rng = np.random.default_rng(6_518_224_001_977_221_943)
    q, k = np.array([[0.4]]), np.array([[-1.0], [0.3], [1.5]])
    mix = ra_est.attention_mixture(q, k)
    draws = mix.sample(rng, 20_000)[0, :, 0]
    pi = np.exp(mix.log_weights[0])
    cdf = lambda x: sum(p * stats.norm.cdf(x, loc=q[0, 0] + km[0]) for p, km in zip(pi, k, strict=True))  # noqa: E731
    assert stats.kstest(draws, cdf).pvalue > 1e-3


def _ra_loop(q, k, v, z, eps, sign=None, fmap="positive"):
    """Algorithm 1 with Eq 6 literally (hyperbolic: ω = σ(q + k_z) + ε)."""
    out = np.zeros((len(q), v.shape[1]))
    for n in range(len(q)):
        for s in range(z.shape[1]):
            w = (1.0 if sign is None else sign[n, s]) * (q[n] + k[z[n, s]]) + eps[n, s]
            a = np.array([_xi_loop(q[n], w, fmap) @ _xi_loop(k[m], w, fmap) for m in range(len(k))])
            out[n] += (a @ v / a.sum()) / z.shape[1]
    return out


def test_ra_matches_algorithm_1_on_given_draws(rng):
    q, k, v = _inputs(rng)
    draws = ra_est.draw_ra(q, k, 3, rng=rng)
    want = _ra_loop(q, k, v, draws.z, draws.eps)
    for form in ("simplified", "literal"):
        np.testing.assert_allclose(ra_est.ra_attention(q, k, v, draws=draws, f_form=form), want, rtol=1e-11)
    np.testing.assert_allclose(ra_est.ra_algorithm1(q, k, v, draws.z, draws.eps), want, rtol=1e-11)
    hyp = ra_est.draw_ra(q, k, 2, rng=rng, feature_map="hyperbolic")
    np.testing.assert_allclose(ra_est.ra_attention(q, k, v, draws=hyp, feature_map="hyperbolic"),
                               _ra_loop(q, k, v, hyp.z, hyp.eps, hyp.sign, "hyperbolic"), rtol=1e-11)


def test_ra_evaluation_modes_and_biased_ra(rng):
    q, k, v = _inputs(rng)
    draws = ra_est.draw_ra(q, k, 2, rng=rng)
    zero = ra_est.RADraws(draws.z, np.zeros_like(draws.eps))
    np.testing.assert_allclose(ra_est.ra_attention(q, k, v, draws=draws, eval_mode="index_only"),
                               _ra_loop(q, k, v, zero.z, zero.eps), rtol=1e-12)
    pi = softmax_attention(q, k, np.eye(len(k)), scale=1.0)
    center = q + pi @ k
    f_center = rfa_est.integrand(q, k, v, center[:, None, :])[:, 0]
    np.testing.assert_allclose(ra_est.ra_attention(q, k, v, eval_mode="mean"), f_center, rtol=1e-12)
    np.testing.assert_allclose(ra_est.biased_ra_attention(q, k, v, eval_mode="mean"), f_center, rtol=1e-12)
    eps = rng.normal(size=(len(q), 2, 3))
    want = rfa_est.integrand(q, k, v, center[:, None, :] + eps).mean(axis=1)
    np.testing.assert_allclose(ra_est.biased_ra_attention(q, k, v, eps=eps), want, rtol=1e-12)


def test_ra_is_unbiased():
    # seeded: 4,000 replicates of S = 1; the largest |z| over 10 coordinates exceeds 4.4 with probability < 1e-4
    rng = np.random.default_rng(1_834_522_707_145_389_120)
    q, k, v = _inputs(rng, n=5, m=4, d=3, dv=2)
    draws = ra_est.draw_ra(q, k, 4000, rng=rng)
    omega = ra_est.ra_samples(q, k, draws)
    f = rfa_est.integrand(q, k, v, omega)
    z = (f.mean(1) - softmax_attention(q, k, v, scale=1.0)) / (f.std(1) / math.sqrt(4000))
    assert np.abs(z).max() < 4.4


# ------------------------------------------------------------------------------------------- MIS


def _proposals(rng, c=3, d=3):
    return mis_est.GaussianProposals(rng.normal(size=(c, d)))


def test_weights_match_their_definitions(rng):
    props = _proposals(rng)
    omega = props.sample(rng, 2)                                          # (C, S_c, D)
    lq = mis_est.cross_log_density(props, omega)
    q = rng.normal(size=(4, 3))
    r = mis_est.rprime(q, rng.normal(size=(3, 3)), axis="landmarks")
    dens = lambda c, w: math.exp(_log_normal_loop(w, props.means[c]))  # noqa: E731
    bh = lambda c, w: dens(c, w) / sum(dens(cc, w) for cc in range(3))  # noqa: E731
    got = {kind: mis_est.mis_weights(kind, lq, rprime=r, beta=2.0, eq37_inner=inner)
           for kind, inner in (("balance", "outer"), ("eq9", "outer"), ("eq37", "outer"))}
    own = mis_est.mis_weights("eq37", lq, rprime=r, eq37_inner="own")
    table = mis_est.weight_table("eq37", lq, rprime=r)
    for n in range(4):
        for c in range(3):
            for j in range(2):
                w = omega[c, j]
                assert got["balance"][0, c, j] == pytest.approx(bh(c, w), abs=1e-14)
                assert got["eq9"][n, c, j] == pytest.approx(bh(c, w) + 2.0 * (r[n, c] - r[n].mean()), abs=1e-14)
                inner = sum(bh(cc, w) * r[n, cc] for cc in range(3))
                assert got["eq37"][n, c, j] == pytest.approx(bh(c, w) + dens(c, w) * (r[n, c] - inner), abs=1e-14)
                inner_own = sum(bh(cc, omega[cc, j]) * r[n, cc] for cc in range(3))
                assert own[n, c, j] == pytest.approx(bh(c, w) + dens(c, w) * (r[n, c] - inner_own), abs=1e-14)
                for c2 in range(3):  # the table holds α_nc2 at the common argument ω_cj
                    assert table[n, c, j, c2] == pytest.approx(bh(c2, w) + dens(c2, w) * (r[n, c2] - inner), abs=1e-14)
    np.testing.assert_allclose(mis_est.rprime(q, props.means, axis="queries").sum(axis=0), 1.0)
    np.testing.assert_allclose(mis_est.rprime(q, props.means, axis="landmarks").sum(axis=1), 1.0)


def test_eq27_readings(rng):
    c = 3
    log_q = rng.normal(size=(c, c)) - 3.0          # [c, c'] = log q_c'(ω_c)
    r = rng.normal(size=(c, c))                    # [c, c'] = r_c'(ω_c)
    q = np.exp(log_q)
    for row in range(c):  # common argument: every row is one point
        bh = q[row] / q[row].sum()
        want = bh + q[row] * (r[row] - bh @ r[row])
        np.testing.assert_allclose(mis_est.eq27_weights(log_q[row], r[row]), want, rtol=1e-13)
    own = mis_est.eq27_weights(log_q, r, argument="own")
    typeset = mis_est.eq27_weights(log_q, r, argument="typeset")
    for cc in range(c):
        bh = q[cc, cc] / q[cc].sum()
        inner_own = (q[cc] / q[cc].sum()) @ r[cc]
        inner_typeset = sum(q[j, j] * r[j, j] for j in range(c)) / q[cc].sum()
        assert own[cc] == pytest.approx(bh + q[cc, cc] * (r[cc, cc] - inner_own), rel=1e-13)
        assert typeset[cc] == pytest.approx(bh + q[cc, cc] * (r[cc, cc] - inner_typeset), rel=1e-13)


def test_mis_matches_eq8_loop_and_is_unbiased(rng):
    q, k, v = _inputs(rng, n=4)
    props = _proposals(rng)
    omega = props.sample(rng, 2)
    got = mis_est.mis_attention(q, k, v, props, omega=omega, weights="balance")
    mix = ra_est.attention_mixture(q, k)
    lq = mis_est.cross_log_density(props, omega)
    alpha = mis_est.mis_weights("balance", lq)
    for n in range(4):
        total = 0.0
        for c in range(3):
            for j in range(2):
                w = omega[c, j]
                ratio = math.exp(mix.logpdf_cross(w[None])[0, n] - _log_normal_loop(w, props.means[c]))
                total = total + alpha[0, c, j] * ratio * rfa_est.integrand(q, k, v, w[None])[n, 0] / 2
        np.testing.assert_allclose(got[n], total, rtol=1e-11)
    # seeded: Eq 8 is unbiased; 3,000 replicates, max |z| over 8 coordinates below 4.4 (probability > 0.9999)
    rs = np.random.default_rng(7_712_340_980_331_274_559)
    reps = np.array([mis_est.mis_attention(q, k, v, props, rng=rs, weights="balance") for _ in range(3000)])
    z = (reps.mean(0) - softmax_attention(q, k, v, scale=1.0)) / (reps.std(0) / math.sqrt(3000))
    assert np.abs(z).max() < 4.4


# ------------------------------------------------------------------------------------------ LARA


def test_segment_landmarks_1d_2d_and_adaptive(rng):
    x = rng.normal(size=(12, 2))
    np.testing.assert_allclose(lara_est.segment_landmarks(x, 3), x.reshape(3, 4, 2).mean(1))
    start, end = lara_est.segment_bounds(10, 4, uneven="adaptive")
    assert start.tolist() == [0, 2, 5, 7] and end.tolist() == [3, 5, 8, 10]
    np.testing.assert_allclose(lara_est.segment_landmarks(x[:10], 4, uneven="adaptive"),
                               [x[a:b].mean(0) for a, b in zip(start, end, strict=True)])
    grid = x.reshape(3, 4, 2)  # H = 3, W = 4; windows 1 x 2
    want = [grid[:, 0:2].reshape(-1, 2).mean(0), grid[:, 2:4].reshape(-1, 2).mean(0)]
    np.testing.assert_allclose(lara_est.segment_landmarks(x, 2, layout="2d", grid=(3, 4), windows=(1, 2)), want)


def test_proposal_means_every_family_and_reading(rng):
    ql, kl, k = rng.normal(size=(3, 2)), rng.normal(size=(3, 2)), rng.normal(size=(6, 2))
    sm = lambda a: np.exp(a) / np.exp(a).sum()  # noqa: E731
    for c in range(3):
        assert np.allclose(lara_est.proposal_means("eq33", ql, kl, k)[c], ql[c] + sm(k @ ql[c]) @ k)
        assert np.allclose(lara_est.proposal_means("eq34", ql, kl, k)[c], ql[c] + kl[c])
        gram = kl @ kl[c]
        printed_m = np.exp(gram).sum() / np.exp(k @ kl[c]).sum()
        assert np.allclose(lara_est.proposal_means("eq35", ql, kl, k, eq35_reading="printed_C")[c], ql[c] + kl[c])
        assert np.allclose(lara_est.proposal_means("eq35", ql, kl, k, eq35_reading="printed_M")[c],
                           ql[c] + printed_m * kl[c])
        assert np.allclose(lara_est.proposal_means("eq35", ql, kl, k)[c], ql[c] + sm(gram) @ kl)
    assert not lara_est.proposal_means("standard", ql).any()


def _lara_loop(q, k, v, omega, alpha, log_q_own):
    """Eq 10 with explicit p̃_n and Eq 6, one query and one draw at a time (S_c draws per proposal)."""
    out = np.zeros((len(q), v.shape[1]))
    for n in range(len(q)):
        num, den = 0.0, 0.0
        for c in range(omega.shape[0]):
            for j in range(omega.shape[1]):
                w = omega[c, j]
                a = np.array([_xi_loop(q[n], w, "positive")[0] * _xi_loop(k[m], w, "positive")[0]
                              for m in range(len(k))])
                p_tilde = math.exp(_log_normal_loop(w, np.zeros(len(w)))) * a.sum()
                term = alpha[n, c, j] * p_tilde / math.exp(log_q_own[c, j])
                num = num + term * (a @ v / a.sum())
                den += term
        out[n] = num / den
    return out


@pytest.mark.parametrize("proposal", ["eq32", "eq33", "eq34", "eq35", "standard"])
@pytest.mark.parametrize("weights", ["balance", "eq9", "eq37", "constant"])
def test_lara_forms_match_the_eq10_loop(rng, proposal, weights):
    q, k, v = _inputs(rng, n=6, m=6)
    lp = lara_est.lara_proposals(q, k, 3, proposal=proposal)
    omega = lp.proposals.sample(rng, 2)
    lq = mis_est.cross_log_density(lp.proposals, omega)
    r = mis_est.rprime(q, lp.q_landmarks) if weights in ("eq9", "eq37") else None
    alpha = np.broadcast_to(mis_est.mis_weights(weights, lq, rprime=r, n_queries=6), (6, 3, 2))
    want = _lara_loop(q, k, v, omega, alpha, lp.proposals.logpdf(omega))
    for form in lara_est.LARA_FORMS:
        got = lara_est.lara_attention(q, k, v, proposals=lp, omega=omega, weights=weights, form=form)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11, err_msg=form)


def test_lara_algorithm3_and_eval_mode(rng):
    q, k, v = _inputs(rng, n=6, m=6)
    lp = lara_est.lara_proposals(q, k, 3)
    mean = lp.proposals.mean()[:, None, :]
    np.testing.assert_allclose(lara_est.lara_attention(q, k, v, proposals=lp, mode="eval"),
                               lara_est.lara_attention(q, k, v, proposals=lp, omega=mean), rtol=1e-13)
    omega = lp.proposals.sample(rng, 1)
    lq = mis_est.cross_log_density(lp.proposals, omega)
    alpha = mis_est.mis_weights("eq9", lq, rprime=mis_est.rprime(q, lp.q_landmarks))
    loops = lara_est.lara_algorithm3(q, k, v, omega[:, 0], alpha[:, :, 0], lp.proposals.logpdf(omega)[:, 0])
    np.testing.assert_allclose(loops, lara_est.lara_attention(q, k, v, proposals=lp, omega=omega, weights="eq9"),
                               rtol=1e-10)


def test_lara_stats_report_signed_weights(rng):
    q, k, v = _inputs(rng, n=8, m=8)
    _, st = lara_est.lara_attention(q, k, v, C=4, rng=rng, weights="eq9", beta=10.0, return_stats=True)
    assert 0 < st.frac_nonpositive_alpha < 1
    assert st.relative_denominator.shape == (8,) and (st.relative_denominator <= 1 + 1e-12).all()
    _, st = lara_est.lara_attention(q, k, v, C=4, rng=rng, weights="balance", return_stats=True)
    np.testing.assert_allclose(st.relative_denominator, 1.0)


# ------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call, error", [
    (lambda: rfa_est.rfa_attention(np.ones((2, 3)), np.ones((2, 4)), np.ones((2, 1)), num_samples=2, rng=0),
     ValueError),
    (lambda: rfa_est.rfa_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((3, 1)), num_samples=2, rng=0),
     ValueError),
    (lambda: rfa_est.rfa_attention(np.full((2, 3), np.nan), np.ones((2, 3)), np.ones((2, 1)), num_samples=2, rng=0),
     ValueError),
    (lambda: rfa_est.rfa_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 1)), num_samples=0, rng=0),
     ValueError),
    (lambda: rfa_est.rfa_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 1))), TypeError),
    (lambda: rfa_est.rfa_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 1)), num_samples=2, rng=0,
                                   feature_map="trig_sincos", form="softmax"), ValueError),
    (lambda: rfa_est.rfa_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 1)), omega=np.ones((2, 3)),
                                   feature_map="trig_cos_phase"), ValueError),
    (lambda: rfa_est.xi(np.ones((2, 3)), np.ones((2, 3)), feature_map="cosine"), ValueError),
    (lambda: rfa_est.log_implied_target(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)), feature_map="trig_sincos"),
     ValueError),
    (lambda: ra_est.ra_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 1)), rng=0, eval_mode="median"),
     ValueError),
    (lambda: ra_est.ra_algorithm1(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 1)), np.array([[0], [2]]),
                                  np.zeros((2, 1, 3))), ValueError),
    (lambda: ra_est.categorical_from_uniforms(np.zeros((1, 3)), np.array([[1.0]])), ValueError),
    (lambda: ra_est.categorical_from_uniforms(np.full((1, 3), -np.inf), np.array([[0.5]])), ValueError),
    (lambda: mis_est.mis_weights("delta", np.zeros((3, 1, 3)), n_queries=4), ValueError),
    (lambda: mis_est.mis_weights("eq9", np.zeros((3, 1, 3))), TypeError),
    (lambda: mis_est.rprime(np.ones((2, 3)), np.ones((2, 3)), axis="rows"), ValueError),
    (lambda: lara_est.segment_landmarks(np.ones((10, 2)), 4), ValueError),
    (lambda: lara_est.segment_landmarks(np.ones((3, 2)), 4, uneven="adaptive"), ValueError),
    (lambda: lara_est.lara_attention(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 1)), C=2, rng=0, proposal="eq99"),
     ValueError),
    (lambda: lara_est.lara_attention(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 1)), C=2, rng=0, mode="test"),
     ValueError),
    (lambda: lara_est.lara_proposals(np.ones((4, 2)), np.ones((4, 2)), 3, proposal="exact"), ValueError),
    (lambda: lara_est.lara_algorithm3(np.ones((4, 2)), np.ones((4, 2)), np.ones((4, 1)), np.ones((2, 2)),
                                      np.ones((4, 2)), np.ones(2), reading="P3"), ValueError),
])
def test_bad_inputs_raise(call, error):
    with pytest.raises(error):
        call()


def test_zero_denominator_is_reported_not_nan():
    with pytest.raises(NumericalError):
        mis_est.mis_combine(np.ones((1, 2, 1, 1)), np.zeros((1, 2, 1)), np.array([[[1.0], [-1.0]]]), normalise=True)


def test_leading_head_axes_broadcast(rng):
    q, k, v = rng.normal(size=(2, 3, 5, 4)), rng.normal(size=(3, 6, 4)), rng.normal(size=(3, 6, 2))
    omega, _ = rfa_est.draw_rfa_samples(4, 4, rng=rng)
    y = rfa_est.rfa_attention(q, k, v, omega=omega)
    assert y.shape == (2, 3, 5, 2)
    np.testing.assert_allclose(y[1, 2], rfa_est.rfa_attention(q[1, 2], k[2], v[2], omega=omega))
    lara = lara_est.lara_attention(q, k, v, C=5, mode="eval", uneven="adaptive")
    np.testing.assert_allclose(lara[0, 1], lara_est.lara_attention(q[0, 1], k[1], v[1], C=5, mode="eval",
                                                                   uneven="adaptive"))
    assert ra_est.ra_attention(q, k, v, rng=rng).shape == (2, 3, 5, 2)
