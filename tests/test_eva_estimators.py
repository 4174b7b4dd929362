"""EVA estimators against brute-force loops written from the paper's formulas; causality; bad inputs.

Every reference below is a plain Python loop over queries, samples and keys with ``math.exp``, written from
the seed text (``002_b2e9d84e2f6b65de.txt``: Eqs 3-4, 7, 13, 16, 29-30, Algorithms 1-2, App C/D), on small
moderate inputs where nothing overflows. All tests are deterministic (fixed seeds).
"""

import math

import numpy as np
import pytest
from scipy import stats

from rfkit.estimators import NumericalError, softmax_attention
from rfkit.estimators import proposals as proposals_est
from rfkit.estimators.control_variates import (
    control_variate_estimate,
    control_variate_mean,
    optimal_coefficient,
    snis_control_variate,
)
from rfkit.estimators.eva import (
    EXACT,
    EXCLUDED,
    GaussianMixtureProposal,
    GaussianProposal,
    LinearLayerNorm,
    block_labels,
    contiguous_labels,
    control_variate_family,
    control_variate_terms,
    eva_causal,
    eva_causal_incremental,
    eva_coefficients,
    eva_ideal,
    eva_practical,
    exact_set,
    log_xi,
    partition_labels,
    practical_partition,
    rfa_attention,
    scatterbrain_attention,
    shared_coefficients,
    token_coefficients,
)

SEED = 6_022_140_857_747_474_383


@pytest.fixture
def data():
    rng = np.random.default_rng(SEED)
    n, m, d, dv = 5, 6, 3, 2
    q, k = rng.normal(scale=0.5, size=(2, n, d))[0], rng.normal(scale=0.5, size=(m, d))
    v = rng.normal(size=(m, dv))
    return rng, q, k, v


def xi(x, w):
    return math.exp(float(w @ x) - 0.5 * float(x @ x))


def normal_pdf(w, mean):
    return math.exp(-0.5 * float((w - mean) @ (w - mean))) / (2 * math.pi) ** (len(w) / 2)


def loop_rfa(q, k, v, omega, mu=None, causal=False):
    """Eq 4 with a proposal N(μ, I): Σ_{s,m} r_s ξ(q_n,ω_s) ξ(k_m,ω_s) v_m / Σ_{s,m} (same)."""
    mu = np.zeros(q.shape[1]) if mu is None else mu
    out = np.zeros((q.shape[0], v.shape[1]))
    for n in range(q.shape[0]):
        num, den = np.zeros(v.shape[1]), 0.0
        for w in omega:
            r = normal_pdf(w, 0 * w) / normal_pdf(w, mu)
            for m in range(k.shape[0] if not causal else n + 1):
                lam = r * xi(q[n], w) * xi(k[m], w)
                num += lam * v[m]
                den += lam
        out[n] = num / den
    return out


# ------------------------------------------------------------------------------------------- RFA


@pytest.mark.parametrize("causal", [False, True])
def test_rfa_matches_the_eq4_loop(data, causal):
    rng, q, k, v = data
    k = k[:5] if causal else k
    v = v[:5] if causal else v
    mu = rng.normal(scale=0.3, size=3)
    omega = GaussianProposal(mu).sample(rng, 7)
    got = rfa_attention(q, k, v, omega=omega, proposal=GaussianProposal(mu), causal=causal)
    assert np.allclose(got, loop_rfa(q, k, v, omega, mu, causal), rtol=1e-12, atol=1e-13)


def test_rfa_per_query_samples_match_the_loop(data):
    rng, q, k, v = data
    omega = rng.normal(size=(q.shape[0], 4, 3))
    got = rfa_attention(q, k, v, omega=omega, per_query=True)
    want = np.stack([loop_rfa(q[n:n + 1], k, v, omega[n])[0] for n in range(q.shape[0])])
    assert np.allclose(got, want, rtol=1e-12)
    causal = rfa_attention(q, k[:5], v[:5], omega=omega, per_query=True, causal=True)
    want_c = np.stack([loop_rfa(q[n:n + 1], k[:n + 1], v[:n + 1], omega[n])[0] for n in range(q.shape[0])])
    assert np.allclose(causal, want_c, rtol=1e-12)


def test_rfa_draws_from_the_proposal_and_sqrt_d_frame(data):
    rng, q, k, v = data
    a = rfa_attention(q, k, v, num_samples=8, rng=1)
    b = rfa_attention(q, k, v, omega=np.random.default_rng(1).standard_normal((8, 3)))
    assert np.array_equal(a, b)
    scaled = rfa_attention(q, k, v, omega=np.ones((2, 3)), frame="sqrt_d")
    assert np.allclose(scaled, rfa_attention(q * 3 ** -0.25, k * 3 ** -0.25, v, omega=np.ones((2, 3))))


def test_rfa_is_finite_with_outlier_logits(data):
    _, q, k, v = data
    k = k.copy()
    k[0] = 10.0 * k[0] / np.linalg.norm(k[0])
    q = 5.0 * q / np.linalg.norm(q, axis=1, keepdims=True)
    omega = np.random.default_rng(2).normal(size=(64, 3)) * 3
    y = rfa_attention(q, k, v, omega=omega)
    assert np.isfinite(y).all()
    assert (y >= v.min(axis=0) - 1e-12).all() and (y <= v.max(axis=0) + 1e-12).all()  # convex combination


def test_rfa_causal_outputs_ignore_future_tokens(data):
    rng, q, k, v = data
    omega = rng.normal(size=(6, 3))
    q5, k5, v5 = q, k[:5], v[:5]
    a = rfa_attention(q5, k5, v5, omega=omega, causal=True)
    q2, k2, v2 = q5.copy(), k5.copy(), v5.copy()
    for arr in (q2, k2, v2):
        arr[3:] = rng.normal(size=arr[3:].shape) * 40.0
    b = rfa_attention(q2, k2, v2, omega=omega, causal=True)
    assert np.array_equal(a[:3], b[:3])


# ------------------------------------------------------------------------- control-variate terms


def test_control_variate_terms_match_the_section_3_1_loops(data):
    rng, q, k, v = data
    mu = rng.normal(scale=0.3, size=3)
    proposal = GaussianProposal(mu)
    omega = proposal.sample(rng, 4)
    t = control_variate_terms(q, k, v, omega=omega, proposal=proposal)
    s = omega.shape[0]
    for n in range(q.shape[0]):
        z = sum(math.exp(q[n] @ km) for km in k)
        alpha = [normal_pdf(w, 0 * w) / (s * z * normal_pdf(w, mu)) for w in omega]
        h_m = [sum(alpha[i] * xi(q[n], w) * xi(k[m], w) for i, w in enumerate(omega)) for m in range(len(k))]
        assert np.allclose(t.h_tokens[n], h_m, rtol=1e-12)
        assert np.allclose(t.g_tokens[n], np.array(h_m)[:, None] * v, rtol=1e-12)
        assert np.allclose(np.exp(t.log_alpha[n]), alpha, rtol=1e-12)
        weights = [normal_pdf(w, 0 * w) * sum(xi(q[n], w) * xi(km, w) for km in k) / (z * normal_pdf(w, mu))
                   for w in omega]                                     # W = p_n/ρ (Eq 3)
        assert np.allclose(np.exp(t.log_importance_weights[n]), weights, rtol=1e-12)
        f = [sum(xi(q[n], w) * xi(k[m], w) * v[m] for m in range(len(k))) / sum(xi(q[n], w) * xi(km, w) for km in k)
             for w in omega]
        assert np.allclose(t.f[n], f, rtol=1e-12)
        assert np.isclose(t.h[n], np.mean(weights), rtol=1e-12)
        assert np.allclose(t.g[n], np.mean(np.array(weights)[:, None] * np.array(f), axis=0), rtol=1e-12)
    assert np.allclose(t.softmax_weights, softmax_attention(q, k, np.eye(6), scale=1.0))


def test_control_variate_family_assignments(data):
    rng, q, k, v = data
    omega = rng.normal(size=(5, 3))
    t = control_variate_terms(q, k, v, omega=omega)
    assert np.allclose(control_variate_family(t, shared_coefficients(t)), rfa_attention(q, k, v, omega=omega))
    assert np.allclose(control_variate_family(t, token_coefficients(t)), softmax_attention(q, k, v, scale=1.0))
    labels = contiguous_labels(6, 2, exact=[1])
    assert np.allclose(control_variate_family(t, eva_coefficients(t, labels)),
                       eva_ideal(q, k, v, labels, omega=omega))
    beta = np.array([0.3, -2.0])                                      # constant β: unbiased CV (Eq 5)
    assert np.allclose(control_variate_family(t, beta), t.g - beta * (t.h - 1.0)[:, None])


def test_control_variate_terms_with_replicate_axes(data):
    rng, q, k, v = data
    omega = rng.normal(size=(3, 4, 3))
    t = control_variate_terms(q, k, v, omega=omega)
    single = control_variate_terms(q, k, v, omega=omega[1])
    assert t.h_tokens.shape == (3, 5, 6) and np.allclose(t.h_tokens[1], single.h_tokens)
    assert np.allclose(t.coefficient[1], single.coefficient)
    assert np.allclose(t.f[2], control_variate_terms(q, k, v, omega=omega[2]).f)


# --------------------------------------------------------------------------------- general CV


def test_control_variates_module():
    rng = np.random.default_rng(SEED)
    h = rng.normal(size=500)
    g = np.stack([2 * h + rng.normal(size=500), -h + rng.normal(size=500)], axis=1)
    beta = optimal_coefficient(g, h)
    cov = np.cov(np.c_[g, h].T)
    assert np.allclose(beta, cov[:2, 2] / cov[2, 2])
    assert np.allclose(control_variate_mean(g, h, 0.0), g.mean(0) - beta * h.mean())
    assert np.allclose(control_variate_estimate(g, h, 0.0, 1.5), g - 1.5 * h[:, None])
    with pytest.raises(NumericalError):
        optimal_coefficient(g, np.ones(500))
    with pytest.raises(ValueError):
        control_variate_estimate(g, h, 0.0, [1.0, 2.0, 3.0])


def test_snis_control_variate_is_eq6():
    rng = np.random.default_rng(SEED)
    f, w = rng.normal(size=(4, 7, 3)), rng.exponential(size=(4, 7))
    cv = snis_control_variate(f, weights=w)
    snis = (w[..., None] * f).sum(1) / w.sum(1)[:, None]
    assert np.allclose(cv.estimate, snis) and np.allclose(cv.coefficient, snis)
    assert np.allclose(cv.base, (w[..., None] * f).mean(1)) and np.allclose(cv.control, w.mean(1))


# ----------------------------------------------------------------------------------- EVA ideal


def loop_eva13(q, k, v, labels, omega_of, mus):
    """Eq 13: Σ_{m∈E} w_m v_m + Σ_c π_c β̂_c with β̂_c = Σ_s Σ_{P_c} λ^c v / Σ λ^c (loops)."""
    out = np.zeros((q.shape[0], v.shape[1]))
    for n in range(q.shape[0]):
        row = labels if labels.ndim == 1 else labels[n]
        attended = [m for m in range(len(k)) if row[m] != EXCLUDED]
        z = sum(math.exp(q[n] @ k[m]) for m in attended)
        for m in attended:
            if row[m] == EXACT:
                out[n] += math.exp(q[n] @ k[m]) / z * v[m]
        for c in range(row.max() + 1):
            members = [m for m in range(len(k)) if row[m] == c]
            pi = sum(math.exp(q[n] @ k[m]) for m in members) / z
            num, den = np.zeros(v.shape[1]), 0.0
            for w in omega_of(c):
                r = normal_pdf(w, 0 * w) / normal_pdf(w, mus[c])
                for m in members:
                    lam = r * xi(q[n], w) * xi(k[m], w)
                    num, den = num + lam * v[m], den + lam
            out[n] += pi * num / den
    return out


@pytest.mark.parametrize("sampling", ["shared", "per_chunk"])
def test_eva_ideal_matches_the_eq13_loop(data, sampling):
    rng, q, k, v = data
    labels = np.array([0, EXACT, 1, 1, 0, 2])
    if sampling == "shared":
        mu = rng.normal(scale=0.3, size=3)
        omega = GaussianProposal(mu).sample(rng, 4)
        log_ratio = proposals_est.log_ratio(GaussianProposal(mu), omega)
        want = loop_eva13(q, k, v, labels, lambda c: omega, [mu] * 3)
    else:
        mus = rng.normal(scale=0.3, size=(3, 3))
        omega = GaussianProposal(mus).sample(rng, 4)
        log_ratio = proposals_est.log_ratio(GaussianProposal(mus), omega)
        want = loop_eva13(q, k, v, labels, lambda c: omega[c], mus)
    got, weights = eva_ideal(q, k, v, labels, omega=omega, log_ratio=log_ratio, sampling=sampling,
                             return_weights=True)
    assert np.allclose(got, want, rtol=1e-12)
    assert np.allclose(weights @ v, got) and np.allclose(weights.sum(1), 1) and (weights >= 0).all()


def test_eva_ideal_causal_labels_and_oracle(data):
    rng, q, k, v = data
    q6 = np.vstack([q, rng.normal(size=(1, 3))])
    labels = block_labels(6, 2, 2, causal=True)
    assert (labels[0] == [EXACT, EXCLUDED, EXCLUDED, EXCLUDED, EXCLUDED, EXCLUDED]).all()
    assert (labels[4] == [0, 0, 1, 1, EXACT, EXCLUDED]).all()
    omega = rng.normal(size=(3, 3))
    got = eva_ideal(q6, k, v, labels, omega=omega)
    assert np.allclose(got, loop_eva13(q6, k, v, labels, lambda c: omega, [np.zeros(3)] * 2), rtol=1e-12)
    oracle = eva_ideal(q6, k, v, labels, omega=omega, coefficient="oracle")
    assert np.allclose(oracle, softmax_attention(q6, k, v, scale=1.0, causal=True))  # exact masses + local softmax


def test_eva_ideal_replicate_axes_and_edge_partitions(data):
    rng, q, k, v = data
    omega = rng.normal(size=(2, 3, 4, 3))
    labels = contiguous_labels(6, 3)
    batched = eva_ideal(q, k, v, labels, omega=omega)
    assert batched.shape == (2, 3, 5, 2)
    assert np.allclose(batched[1, 2], eva_ideal(q, k, v, labels, omega=omega[1, 2]))
    everything_exact = eva_ideal(q, k, v, np.full(6, EXACT), omega=omega)
    assert np.allclose(everything_exact, softmax_attention(q, k, v, scale=1.0))


# ------------------------------------------------------------------------------- practical EVA


def loop_practical(q, k, v, part, omega_of, sigma=lambda x: x, multi=None, chunk_logit=None, offset=0.0):
    """Eq 16 / Algorithm 1 with the index sets of ``part``; ``multi=(omega, mu)`` uses App C's per-query
    multi-sample coefficient; ``chunk_logit="lse"`` the exact subset mass."""
    group = part.chunk_group()
    y = np.zeros((q.shape[0], v.shape[1]))
    for b, queries in enumerate(part.queries):
        local = part.exact[b][part.exact_valid[b]]
        for n in queries:
            num = sum((math.exp(q[n] @ k[m]) * v[m] for m in local), np.zeros(v.shape[1]))
            den = sum(math.exp(q[n] @ k[m]) for m in local)
            for c, idx in enumerate(part.chunks[group[b]]):
                kt = sigma(k[idx].mean(0))
                if multi is None:
                    w = omega_of(group[b], c, sigma(q[idx].mean(0)) + kt)
                    weights = [xi(k[m], w) for m in idx]
                else:
                    omegas, mu = multi
                    weights = [sum(normal_pdf(w, 0 * w) / normal_pdf(w, mu[group[b], c]) * xi(q[n], w) * xi(k[m], w)
                                   for w in omegas[group[b], c]) for m in idx]
                beta = sum(wt * v[m] for wt, m in zip(weights, idx, strict=True)) / sum(weights)
                if chunk_logit == "lse":
                    mass = sum(math.exp(q[n] @ k[m]) for m in idx)
                else:
                    mass = math.exp(q[n] @ kt + offset)
                num, den = num + mass * beta, den + mass
            y[n] = num / den
    return y


@pytest.mark.parametrize("domain, layout, window, block, chunks", [
    ("all", "1d", "block", 4, 2), ("complement", "1d", "block", 4, 3), ("all", "1d", "overlapping", 4, 4),
    ("all", "2d", "block", 4, 4), ("complement", "2d", "block", 4, 3), ("complement", "2d", "block", 4, 6),
    ("all", "1d", "block", 0, 4),
    ("all", "1d", "block", 4, 0)])
def test_practical_matches_the_algorithm1_loop(domain, layout, window, block, chunks):
    rng = np.random.default_rng(SEED)
    n, d = 16, 3
    q, k, v = rng.normal(scale=0.6, size=(n, d)), rng.normal(scale=0.6, size=(n, d)), rng.normal(size=(n, 2))
    grid = (4, 4) if layout == "2d" else None
    part = practical_partition(n, block_size=block, num_chunks=chunks, partition_domain=domain, layout=layout,
                               grid=grid, window=window)
    eps = rng.normal(size=part.chunks.shape[:2] + (d,))
    sigma = LinearLayerNorm.random_init(d, rng=rng)
    y, det = eva_practical(q, k, v, block_size=block, num_chunks=chunks, partition_domain=domain, layout=layout,
                           grid=grid, window=window, eps=eps, sigma_q=sigma, sigma_k=sigma, return_details=True)
    want = loop_practical(q, k, v, part, lambda g, c, mu: mu + eps[g, c], sigma)
    assert np.allclose(y, want, rtol=1e-12, atol=1e-14)
    assert np.allclose(det.attention @ v, y) and np.allclose(det.attention.sum(1), 1)


def test_practical_multi_sample_oracle_lse_offset_and_eval(data):
    rng = np.random.default_rng(SEED)
    n, d = 12, 3
    q, k, v = rng.normal(scale=0.6, size=(n, d)), rng.normal(scale=0.6, size=(n, d)), rng.normal(size=(n, 2))
    part = practical_partition(n, block_size=4, num_chunks=2, partition_domain="complement")
    y, det = eva_practical(q, k, v, block_size=4, num_chunks=2, partition_domain="complement", num_samples=3,
                           rng=rng, return_details=True)
    want = loop_practical(q, k, v, part, None, multi=(det.omega, det.mu))
    assert np.allclose(y, want, rtol=1e-12) and np.allclose(det.attention @ v, y)
    oracle = eva_practical(q, k, v, block_size=4, num_chunks=2, coefficient="oracle", chunk_logit="lse")
    full = softmax_attention(q, k, v, scale=1.0)
    part_all = practical_partition(n, block_size=4, num_chunks=2)
    assert not np.allclose(oracle, full)                    # domain "all": chunks overlap E^n
    exact = eva_practical(q, k, v, block_size=4, num_chunks=2, partition_domain="complement", coefficient="oracle",
                          chunk_logit="lse")
    assert np.allclose(exact, full)                         # exact masses and local softmaxes: softmax
    ev = eva_practical(q, k, v, block_size=4, num_chunks=2, mode="eval", chunk_logit_offset=0.7)
    assert np.allclose(ev, loop_practical(q, k, v, part_all, lambda g, c, mu: mu, offset=0.7), rtol=1e-12)


def test_practical_frames_and_batches():
    rng = np.random.default_rng(SEED)
    q, k, v = rng.normal(size=(2, 3, 8, 4)), rng.normal(size=(2, 3, 8, 4)), rng.normal(size=(2, 3, 8, 2))
    eps = rng.normal(size=(2, 3, 1, 2, 4))
    y = eva_practical(q, k, v, block_size=2, num_chunks=2, eps=eps)
    assert y.shape == (2, 3, 8, 2)
    assert np.allclose(y[1, 2], eva_practical(q[1, 2], k[1, 2], v[1, 2], block_size=2, num_chunks=2, eps=eps[1, 2]))
    s = 4 ** -0.25
    assert np.allclose(eva_practical(q, k, v, block_size=2, num_chunks=2, mode="eval", frame="sqrt_d"),
                       eva_practical(q * s, k * s, v, block_size=2, num_chunks=2, mode="eval"))
    ref = eva_practical(q[0, 0], k[0, 0], v[0, 0], block_size=8, num_chunks=0, frame="reference_code")
    assert np.allclose(ref, softmax_attention(q[0, 0], k[0, 0], v[0, 0]))   # logits q·k/√d


def test_practical_position_bias_and_max_pool():
    rng = np.random.default_rng(SEED)
    q, k, v = rng.normal(size=(8, 3)), rng.normal(size=(8, 3)), rng.normal(size=(8, 2))
    bias = rng.normal(size=(4, 4))
    y = eva_practical(q, k, v, block_size=4, num_chunks=0, position_bias=bias)
    for b in range(2):
        sl = slice(4 * b, 4 * b + 4)
        weights = np.exp(q[sl] @ k[sl].T + bias)
        assert np.allclose(y[sl], weights @ v[sl] / weights.sum(1, keepdims=True))
    part = practical_partition(8, block_size=4, num_chunks=2)
    mx = eva_practical(q, k, v, block_size=4, num_chunks=2, pool="max", mode="eval", mu_rule="zero",
                       return_details=True)[1]
    assert np.allclose(mx.k_tilde[0], k[part.chunks[0]].max(axis=1))


def test_linear_layer_norm():
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(5, 4))
    ln = LinearLayerNorm(rng.normal(size=(4, 4)), rng.normal(size=4), rng.normal(size=4), rng.normal(size=4))
    y = x @ ln.weight.T + ln.bias
    want = ln.gain * (y - y.mean(1, keepdims=True)) / np.sqrt(y.var(1, keepdims=True) + 1e-5) + ln.shift
    assert np.allclose(ln(x), want)
    ident = LinearLayerNorm.identity_init(4)(x)
    assert np.allclose(ident.mean(1), 0) and np.allclose((ident ** 2).mean(1), 1, atol=1e-4)


# ---------------------------------------------------------------------------------- causal EVA


def loop_causal(q, k, v, block, chunk, eps, rule="alg2", window="block"):
    """Algorithm 2 as sets: local keys b^n..n (or the previous block too), chunks entirely before the window start
    (alg2) or before n's chunk (released code); chunk statistics from the chunk's own tokens."""
    n_tokens = q.shape[0]
    y = np.zeros((n_tokens, v.shape[1]))
    for n in range(n_tokens):
        start = n // block * block - (block if window == "overlapping" else 0)
        keys = range(max(start, 0), n + 1)
        logits, values = [q[n] @ k[m] for m in keys], [v[m] for m in keys]
        for c in range(n_tokens // chunk):
            end = (c + 1) * chunk
            usable = end <= max(start, 0) if rule == "alg2" else c < n // chunk
            if usable:
                idx = range(c * chunk, end)
                kt = k[list(idx)].mean(0)
                w = q[list(idx)].mean(0) + kt + eps[c]
                weights = np.array([xi(k[m], w) for m in idx])
                logits.append(q[n] @ kt)
                values.append(weights @ v[list(idx)] / weights.sum())
        a = np.exp(np.array(logits) - max(logits))
        y[n] = a @ np.array(values) / a.sum()
    return y


@pytest.mark.parametrize("rule", ["alg2", "before_own_chunk"])
@pytest.mark.parametrize("window", ["block", "overlapping"])
@pytest.mark.parametrize("block, chunk, n", [(4, 2, 16), (2, 4, 15), (3, 3, 10), (4, 8, 20), (1, 1, 5)])
def test_causal_matches_the_algorithm2_loop(rule, window, block, chunk, n):
    rng = np.random.default_rng(SEED)
    q, k, v = rng.normal(scale=0.6, size=(n, 3)), rng.normal(scale=0.6, size=(n, 3)), rng.normal(size=(n, 2))
    eps = rng.normal(size=(n // chunk, 3))
    options = dict(block_size=block, chunk_size=chunk, chunk_mask=rule, window=window, eps=eps)
    want = loop_causal(q, k, v, block, chunk, eps, rule, window)
    y, det = eva_causal(q, k, v, return_details=True, **options)
    assert np.allclose(y, want, rtol=1e-12)
    assert np.allclose(eva_causal_incremental(q, k, v, **options), want, rtol=1e-12)
    assert np.allclose(det.attention @ v, y) and np.allclose(np.triu(det.attention, 1), 0)


def test_causal_ignores_future_tokens_bitwise():
    rng = np.random.default_rng(SEED)
    n = 40
    q, k, v = rng.normal(size=(n, 4)), rng.normal(size=(n, 4)), rng.normal(size=(n, 3))
    eps = rng.normal(size=(n // 4, 4))
    for rule in ("alg2", "before_own_chunk"):
        y = eva_causal(q, k, v, block_size=8, chunk_size=4, chunk_mask=rule, eps=eps)
        for t in (0, 7, 8, 15, 23, 38):
            q2, k2, v2 = q.copy(), k.copy(), v.copy()
            for arr in (q2, k2, v2):
                arr[t + 1:] = rng.normal(size=arr[t + 1:].shape) * 50.0
            y2 = eva_causal(q2, k2, v2, block_size=8, chunk_size=4, chunk_mask=rule, eps=eps)
            assert np.array_equal(y[:t + 1], y2[:t + 1])
            prefix = eva_causal(q[:t + 1], k[:t + 1], v[:t + 1], block_size=8, chunk_size=4, chunk_mask=rule, eps=eps)
            assert np.allclose(prefix, y[:t + 1], rtol=1e-13, atol=1e-15)


def test_causal_draws_noise_like_the_incremental_form():
    rng = np.random.default_rng(SEED)
    q, k, v = rng.normal(size=(12, 3)), rng.normal(size=(12, 3)), rng.normal(size=(12, 2))
    a = eva_causal(q, k, v, block_size=4, chunk_size=2, rng=5)
    b = eva_causal_incremental(q, k, v, block_size=4, chunk_size=2, rng=5)
    assert np.allclose(a, b)


# -------------------------------------------------------------------------------- Scatterbrain


def test_scatterbrain_matches_eqs_29_30(data):
    rng, q, k, v = data
    q = np.vstack([q, rng.normal(size=(1, 3))])
    omega = rng.normal(size=(5, 3))
    s = omega.shape[0]
    for block in (1, 2, 4):
        y = scatterbrain_attention(q, k, v, omega=omega, block_size=block)
        linear = scatterbrain_attention(q, k, v, omega=omega, block_size=block, method="linear")
        unnormalised = scatterbrain_attention(q, k, v, omega=omega, block_size=block, normalize=False)
        for n in range(6):
            exact = [m for m in range(6) if m // block == n // block]
            num, den = np.zeros(2), 0.0
            for m in range(6):
                weight = math.exp(q[n] @ k[m]) if m in exact else sum(xi(q[n], w) * xi(k[m], w) for w in omega) / s
                num, den = num + weight * v[m], den + weight
            assert np.allclose(y[n], num / den, rtol=1e-12) and np.allclose(linear[n], num / den, rtol=1e-10)
            assert np.allclose(unnormalised[n], num, rtol=1e-12)


# ------------------------------------------------------------------------------ proposals, helpers


def test_proposals_log_densities():
    rng = np.random.default_rng(SEED)
    mu = rng.normal(size=3)
    omega = rng.normal(size=(6, 3))
    for scale in (1.0, 2.0):
        p = GaussianProposal(mu, scale)
        assert np.allclose(p.logpdf(omega), stats.multivariate_normal(mu, scale ** 2 * np.eye(3)).logpdf(omega))
        want = stats.multivariate_normal(np.zeros(3)).logpdf(omega) - p.logpdf(omega)
        assert np.allclose(proposals_est.log_ratio(p, omega), want)
    mix = GaussianMixtureProposal(np.stack([mu, -mu]), [1.0, 0.5], [0.3, 0.7])
    want = np.log(0.3 * stats.multivariate_normal(mu).pdf(omega)
                  + 0.7 * stats.multivariate_normal(-mu, 0.25 * np.eye(3)).pdf(omega))
    assert np.allclose(mix.logpdf(omega), want)
    assert mix.sample(rng, 10).shape == (10, 3)
    per_query = GaussianProposal(rng.normal(size=(4, 3)))
    assert per_query.sample(rng, 5).shape == (4, 5, 3)
    assert np.allclose(log_xi(np.ones((1, 3)), omega), omega.sum(1) - 1.5)


def test_practical_partition_index_sets():
    part = practical_partition(8, block_size=2, num_chunks=2, partition_domain="complement")
    assert part.queries[1].tolist() == [2, 3] and part.exact[1].tolist() == [2, 3]
    assert part.chunks[1].tolist() == [[0, 1, 4], [5, 6, 7]] and part.chunk_group().tolist() == [0, 1, 2, 3]
    shared = practical_partition(8, block_size=2, num_chunks=4)
    assert shared.chunks.tolist() == [[[0, 1], [2, 3], [4, 5], [6, 7]]] and shared.chunk_group().tolist() == [0] * 4
    grid = practical_partition(16, block_size=4, num_chunks=4, layout="2d", grid=(4, 4))
    assert grid.exact[0].tolist() == [0, 1, 4, 5] and grid.chunks[0][3].tolist() == [10, 11, 14, 15]
    grid_c = practical_partition(16, block_size=4, num_chunks=3, layout="2d", grid=(4, 4),
                                 partition_domain="complement")
    assert grid_c.chunks[0].ravel().tolist() == [2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]   # patch by patch
    overlap = practical_partition(8, block_size=4, num_chunks=2, window="overlapping")
    assert overlap.exact[0][overlap.exact_valid[0]].tolist() == [0, 1, 2, 3, 4, 5]
    assert overlap.exact[1][overlap.exact_valid[1]].tolist() == [2, 3, 4, 5, 6, 7]
    assert practical_partition(4, block_size=4, num_chunks=2, partition_domain="complement").num_chunks == 0
    assert practical_partition(6, block_size=0, num_chunks=3).queries.tolist() == [[0, 1, 2, 3, 4, 5]]


def test_partition_and_exact_set_helpers():
    rng = np.random.default_rng(SEED)
    keys = np.r_[rng.normal(size=(6, 2)) + 8, rng.normal(size=(6, 2)) - 8]
    clustered = partition_labels(12, 2, layout="clustered", keys=keys, rng=1)
    assert len(set(clustered[:6])) == 1 and len(set(clustered[6:])) == 1 and clustered[0] != clustered[6]
    shuffled = partition_labels(12, 3, exact=[0, 5], layout="random", rng=2)
    assert (shuffled[[0, 5]] == EXACT).all() and np.bincount(shuffled[shuffled >= 0]).tolist() == [4, 3, 3]
    coarse, fine = partition_labels(8, 2, layout="dyadic"), partition_labels(8, 4, layout="dyadic")
    assert all(len(set(coarse[fine == c])) == 1 for c in range(4))            # nested refinement
    with pytest.raises(ValueError, match="power of two"):
        partition_labels(6, 3, layout="dyadic")
    assert (exact_set(np.array([1.0, 0.0]), keys, 3, kind="top") == np.sort(np.argsort(-keys[:, 0])[:3])).all()
    assert (exact_set(None, keys, 4, position=5) == [4, 5, 6, 7]).all()
    assert exact_set(None, keys, 0, position=3).size == 0
    assert len(set(exact_set(None, keys, 5, kind="random", rng=3))) == 5


def test_labels_helpers():
    assert (contiguous_labels(5, 2) == [0, 0, 0, 1, 1]).all()
    assert (contiguous_labels(3, 0, exact=[0, 1, 2]) == EXACT).all()
    rows = block_labels(8, 4, 2)
    assert (rows[5] == [0, 0, 1, 1, EXACT, EXACT, EXACT, EXACT]).all()


# ------------------------------------------------------------------------------------ bad inputs


def test_bad_inputs_raise(data):
    rng, q, k, v = data
    omega = rng.normal(size=(4, 3))
    with pytest.raises(ValueError, match="last dimension"):
        rfa_attention(q, k[:, :2], v, omega=omega)
    with pytest.raises(ValueError, match="non-finite"):
        rfa_attention(np.full_like(q, np.nan), k, v, omega=omega)
    with pytest.raises(ValueError, match="columns"):
        rfa_attention(q, k, v, omega=omega[:, :2])
    with pytest.raises(TypeError, match="num_samples"):
        rfa_attention(q, k, v)
    with pytest.raises(ValueError, match="frame"):
        rfa_attention(q, k, v, omega=omega, frame="bogus")
    with pytest.raises(ValueError, match="per_query"):
        rfa_attention(q, k, v, omega=omega, per_query=True)
    with pytest.raises(ValueError, match="log_ratio"):
        rfa_attention(q, k, v, omega=omega, log_ratio=np.zeros(3))
    with pytest.raises(TypeError, match="labels"):
        eva_ideal(q, k, v, np.zeros(6), omega=omega)
    with pytest.raises(ValueError, match="labels"):
        eva_ideal(q, k, v, np.zeros(5, dtype=int), omega=omega)
    with pytest.raises(ValueError, match="per_chunk"):
        eva_ideal(q, k, v, np.arange(6), omega=omega, sampling="per_chunk")
    with pytest.raises(ValueError, match="no key"):
        eva_ideal(q, k, v, np.full(6, EXCLUDED), omega=omega)
    qs, ks, vs = rng.normal(size=(2, 8, 3)), rng.normal(size=(8, 3)), rng.normal(size=(8, 2))
    with pytest.raises(ValueError, match="self-attention"):
        eva_practical(qs, ks[:6], vs[:6], block_size=2, num_chunks=2)
    with pytest.raises(ValueError, match="multiple of block_size"):
        eva_practical(qs[0], ks, vs, block_size=3, num_chunks=2)
    with pytest.raises(ValueError, match="divide"):
        eva_practical(qs[0], ks, vs, block_size=2, num_chunks=3)
    with pytest.raises(TypeError, match="rng"):
        eva_practical(qs[0], ks, vs, block_size=2, num_chunks=2)
    with pytest.raises(ValueError, match="mu_rule"):
        eva_practical(qs[0], ks, vs, block_size=2, num_chunks=2, rng=0, mu_rule="bogus")
    with pytest.raises(ValueError, match="eps"):
        eva_practical(qs[0], ks, vs, block_size=2, num_chunks=2, eps=np.zeros((1, 3, 3)))
    with pytest.raises(ValueError, match="grid"):
        eva_practical(qs[0], ks, vs, block_size=4, num_chunks=2, layout="2d", rng=0)
    with pytest.raises(ValueError, match="num_samples=1"):
        eva_practical(qs[0], ks, vs, block_size=2, num_chunks=2, rng=0, num_samples=2, frame="reference_code")
    with pytest.raises(TypeError, match="sigma_k"):
        eva_practical(qs[0], ks, vs, block_size=2, num_chunks=2, rng=0, sigma_k="ln")
    with pytest.raises(ValueError, match="chunk_size"):
        eva_causal(qs[0], ks, vs, block_size=2, chunk_size=0, rng=0)
    with pytest.raises(ValueError, match="chunk_mask"):
        eva_causal(qs[0], ks, vs, block_size=2, chunk_size=2, rng=0, chunk_mask="future")
    with pytest.raises(ValueError, match="at least"):
        eva_causal(qs[0], ks, vs, block_size=2, chunk_size=2, eps=np.zeros((2, 3)))
    with pytest.raises(TypeError, match="exactly one"):
        scatterbrain_attention(q, k, v, omega=omega)
    with pytest.raises(TypeError, match="boolean"):
        scatterbrain_attention(q, k, v, omega=omega, exact=np.zeros((5, 6)))
    with pytest.raises(ValueError, match="self-attention"):
        scatterbrain_attention(q, k, v, omega=omega, block_size=2)
    with pytest.raises(ValueError, match="scale"):
        GaussianProposal(np.zeros(3), scale=0.0)
    with pytest.raises(ValueError, match="probability"):
        GaussianMixtureProposal(np.zeros((2, 3)), [1.0, 1.0], [0.5, 0.6])
