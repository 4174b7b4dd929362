"""performer attention claims: smoke runs without failing cells, planted bugs are refuted, and every refutation
is confirmed by an independent computation."""

import dataclasses
import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate, stats

from rfkit.estimators import Features, linear_attention_quadratic
from rfkit.estimators.favor import (
    ScanStats,
    favor_attention,
    favor_features,
    favor_from_features,
    parallel_prefix_scan,
    prefix_sum_states,
)
from rfkit.estimators.generalized import generalized_features, template_features
from rfkit.estimators.structured import default_givens_rotations, hadamard_projection
from rfkit.theory import cost
from rfkit.validation import validate
from rfkit.validation.claims import claims_in, get_claim
from rfkit.validation.claims.performer import attention as claims

TIMING = {"performer.eq1.exact_cost", "performer.eq4.fa_cost", "performer.b2.r_orf_cost", "performer.b2.hg_orf_cost",
          "performer.b3.time"}
COMPLEXITY = TIMING | {"performer.eq11.parallel_prefix_cost", "performer.b3.space_bidirectional",
                       "performer.b3.space_unidirectional", "performer.b3.space_structured"}
#: Smoke, seed 0: claims whose cells all support the statement but whose smoke grid does not cover the declared
#: domain (the smoke tier is a few cells): ``inconclusive`` with the reason "not covered" (quick covers them).
NOT_COVERED_AT_SMOKE = {
    "performer.eq4.fa_identity", "performer.alg1.bidirectional", "performer.sec2_2.generalized_attention",
    "performer.eq5.template_kernels", "performer.derived.relu_arccos_kernel",
    "performer.sec2_3.trig_nonpositive_renormalizer", "performer.eq1.exact_cost", "performer.eq4.fa_cost",
    "performer.b3.space_bidirectional", "performer.b3.space_unidirectional", "performer.b2.r_orf_cost",
    "performer.b2.hg_orf_cost", "performer.eq11.parallel_prefix_cost",
}
EXPECTED = {  # smoke, seed 0: computed verdicts this test pins (see the report for each refutation's reason)
    **{claim_id: "inconclusive" for claim_id in NOT_COVERED_AT_SMOKE},
    # any_parameters refuted; default_construction undecided: its positive-feature cells at d = 64 have Hill tail
    # indices below 3 and no variance bound for H/G-ORF rows (whose marginals are not Gaussian), so the asymptotic
    # sequence cannot decide them (the bias itself is shown by test_givens_default_rotations_leave_an_axis_bias)
    "performer.b2.hg_orf_bias": "inconclusive",
    "performer.alg1.unidirectional": "refuted",  # the a3_stabilizer configuration leaks the future
    "performer.eq11.prefix_sum_identity": "inconclusive",  # display not covered at smoke, literal refuted
    "performer.b3.space_structured": "refuted",
}


def run(ids, **kw):
    kw.setdefault("tier", "smoke")
    kw.setdefault("progress", False)
    return validate([get_claim(i) for i in ids], **kw)


def _ids(kind):
    every = [c.id for c in claims_in(claims)]
    return [i for i in every if (i in COMPLEXITY) == (kind == "complexity")]


def test_register_ids_all_present():
    assert len(claims_in(claims)) == 18
    assert {c.id for c in claims_in(claims)} >= set(EXPECTED)


@pytest.mark.parametrize("kind", ["measurement", "complexity"])
def test_smoke_runs_without_failing_cells(kind):
    result = run(_ids(kind))
    assert not result.failed, [o.error for c in result.claims for o in c.outcomes if o.error]
    for c in result.claims:
        if c.claim.id in EXPECTED:
            assert c.verdict == EXPECTED[c.claim.id], (c.claim.id, c.reason)
        if c.claim.id in NOT_COVERED_AT_SMOKE:  # every cell decided in favour; only the design's coverage is short
            assert c.reason.startswith("not covered") and not any(c.reject), (c.claim.id, c.reason)
    by_id = {c.claim.id: c for c in result.claims}
    if kind == "measurement":
        unidirectional = by_id["performer.alg1.unidirectional"]
        assert {o.spec.params["stabilizer"] for o, r in zip(unidirectional.outcomes, unidirectional.reject,
                                                            strict=True) if r} == {"a3_stabilizer"}
        assert by_id["performer.eq11.prefix_sum_identity"].variants["literal"].verdict == "refuted"
    else:
        assert by_id["performer.b3.time"].variants["b3_reading"].verdict == "refuted"


# ------------------------------------------------------------------------------------- planted bugs


def _verdict(claim_id, implementations, variant=None):
    result = run([claim_id], implementations=implementations).claims[0]
    assert not result.failed, [o.error for o in result.outcomes if o.error]
    return result.variants[variant].verdict if variant else result.verdict


def test_planted_leaking_causal_mask_is_refuted():
    def leaky(q, k, v, **options):
        return favor_attention(q, k, v, **dict(options, causal=False))

    claim = dataclasses.replace(get_claim("performer.alg1.unidirectional"), grid={"smoke": dict(
        L=[17, 256], d=[16], m=[16], impl=["chunked", "scan", "parallel"], chunk=[7], feature=["trig"],
        dtype=["float64"], check=["oracle", "causality"], stabilizer=["algorithm"])})
    result = validate([claim], tier="smoke", progress=False, implementations={"favor_attention": leaky}).claims[0]
    assert result.verdict == "refuted"


def test_planted_wrong_renormaliser_is_refuted():
    def off_by_one_percent(qf, kf, v, **options):
        return 1.01 * favor_from_features(qf, kf, v, **options)

    assert _verdict("performer.eq4.fa_identity", {"favor_from_features": off_by_one_percent}) == "refuted"


def test_planted_feature_scale_is_refuted():
    def epsilon_outside_the_scale(x, omega=None, *, function="relu", kernel_epsilon=0.0, **kw):
        f = generalized_features(x, omega, function=function, kernel_epsilon=0.0, **kw)
        return Features(f.values * 1.1 + kernel_epsilon, f.log_scale)  # 10% too large

    impl = {"generalized_features": epsilon_outside_the_scale}
    assert _verdict("performer.sec2_2.generalized_attention", impl) == "refuted"
    assert _verdict("performer.derived.relu_arccos_kernel", impl) == "refuted"


def test_planted_template_function_is_refuted():
    def cosines(x, omega, functions, **kw):
        return template_features(x, omega, [np.cos] * len(functions), **kw)

    assert _verdict("performer.eq5.template_kernels", {"template_features": cosines}) == "refuted"


def test_planted_exclusive_prefix_sum_is_refuted():
    def exclusive(kf, v):
        ref, gps, stats_ = prefix_sum_states(kf, v)
        own = kf.values[:, :, None] * np.concatenate([v, np.ones((len(v), 1))], axis=1)[:, None, :]
        return ref, gps - own * np.exp(kf.log_scale - ref)[:, None, None], stats_

    assert _verdict("performer.eq11.prefix_sum_identity", {"prefix_sum_states": exclusive}, "display") == "refuted"


def test_planted_work_inefficient_scan_is_refuted():
    def hillis_steele(log_scale, states):  # O(L log L) combines: every element at every distance 2^k
        ref, prefix, _ = parallel_prefix_scan(log_scale, states)
        n = len(log_scale)
        rounds = max(n - 1, 0).bit_length()
        return ref, prefix, ScanStats(sum(n - 2**k for k in range(rounds)), rounds)

    assert _verdict("performer.eq11.parallel_prefix_cost", {"parallel_prefix_scan": hillis_steele}) == "refuted"


def test_planted_signed_positive_features_are_refuted():
    def trig_for_positive(x, omega, *, kind, **kw):
        return favor_features(x, omega, kind="trig" if kind == "positive" else kind, **kw)

    verdict = _verdict("performer.sec2_3.trig_nonpositive_renormalizer", {"favor_features": trig_for_positive})
    assert verdict == "refuted"


def test_planted_quadratic_memory_is_refuted():
    def materialising(qf, kf, v, **options):
        return linear_attention_quadratic(qf, kf, v, causal=options.get("causal", False))

    sizes = claims._Sizes(claims.FA_SIZES["L"]["smoke"], owner="memory_vs_L")  # the grid pairs a sweep with its sizes
    memory_only = dataclasses.replace(get_claim("performer.eq4.fa_cost"),
                                      grid={"smoke": dict(sweep=["memory_vs_L"], L=[sizes])})
    result = validate([memory_only], tier="smoke", progress=False,
                      implementations={"favor_from_features": materialising})
    assert result.claims[0].verdict == "refuted"


# ------------------------------------------------------------- independent confirmations of refutations


def test_literal_prefix_sum_reading_fails_exactly():
    # B.1's in-line formula Σ_{j<=i} G_{i,l,p} = i·G_i; Eq 11 needs Σ_{j<=i} G_j. Exact rationals, L = 2.
    q = [[Fraction(1), Fraction(2)], [Fraction(3), Fraction(1)]]
    k = [[Fraction(2), Fraction(1)], [Fraction(1), Fraction(1)]]
    c = [[Fraction(5), Fraction(1)], [Fraction(-1), Fraction(1)]]  # rows [v_j, 1]

    def dot(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True))

    row2_true = [dot(q[1], k[0]) * c[0][p] + dot(q[1], k[1]) * c[1][p] for p in range(2)]
    row2_literal = [2 * dot(q[1], k[1]) * c[1][p] for p in range(2)]
    assert row2_true == [Fraction(31), Fraction(11)] and row2_literal == [Fraction(-8), Fraction(8)]


def test_algorithm1_buffer_is_md_whatever_the_projection(rng):
    # b3.space_structured: Algorithm 1 stores Buf_1 = (K')ᵀ[V 1] ∈ R^{M×(d+1)} for every projection, so its space
    # is at least M(d+1) numbers while O(m + Ld + mL) grows only linearly along m = d = s at fixed L.
    length = 64
    for s in (64, 256):
        q, k, v = rng.normal(size=(3, length, s))
        _, favor_stats = favor_attention(q, k, v, m=s, projection="hadamard", rng=rng, return_stats=True)
        kf = favor_features(k * s ** -0.25, hadamard_projection(s, s, rng=rng), kind="positive", is_query=False)
        buf1 = kf.dense().T @ np.concatenate([v, np.ones((length, 1))], axis=1)  # Algorithm 1, written out
        assert buf1.shape == (s, s + 1) and favor_stats.state_bytes == buf1.nbytes
    ratio = [cost.favor_state_bytes(length, s, s, impl="bidirectional") / (s + 2 * length * s) / 8 for s in (64, 4096)]
    assert ratio[1] > 20 * ratio[0]  # the stored buffer outgrows the claimed bound without limit


def test_structured_features_cannot_beat_their_output_size(rng):
    # b3.time, reading O(L log(m) d): Q' has L·m entries (written once each), which exceeds L·log₂(m)·d once
    # m > d·log₂ m; the structured product itself costs cost.projection_apply_flops ∝ m log d per vector.
    length, d = 64, 64
    for m in (1024, 16384):
        op = hadamard_projection(m, d, rng=rng)
        assert favor_features(rng.normal(size=(length, d)), op, kind="positive").values.shape == (length, m)
        assert length * m > 4 * length * math.log2(m) * d or m == 1024
        assert cost.projection_apply_flops("hadamard", m, d) >= m * math.log2(d)


def _chi_mgf(c: float, d: int) -> float:
    """E exp(c ρ), ρ ~ chi(d), by quadrature (log-space density)."""
    law = stats.chi(d)
    centre = math.sqrt(d) + c / 2  # the tilted density's peak; its spread is ~0.7
    value, _ = integrate.quad(lambda r: math.exp(c * r + law.logpdf(r)), max(centre - 30, 0), centre + 30,
                              limit=200, epsabs=0, epsrel=1e-12)
    return value


def test_hadamard_k1_axis_bias_is_exact_and_does_not_vanish():
    # hg_orf_bias, any_parameters: with k = 1 and x, y in the span of e_1, e_2, each projection is
    # ρ_i(±z_1 ± z_2)/√d with the four sign patterns equally likely (Rademacher D_1) and ρ_i ~ chi(d), so
    # E[SM⁺ estimate]/SM = ¼ Σ E exp(ρ(±z_1 ± z_2)/√d) / exp(‖z‖²/2); its limit cosh z_1 cosh z_2 e^{-‖z‖²/2} ≠ 1.
    z1, z2 = 1.5, 0.5 * math.sqrt(3)  # ‖x‖ = ‖y‖ = 1, angle π/3
    limit = math.cosh(z1) * math.cosh(z2) / math.exp((z1 * z1 + z2 * z2) / 2) - 1
    for d in (64, 256, 4096):
        mean = sum(_chi_mgf((s1 * z1 + s2 * z2) / math.sqrt(d), d) for s1 in (-1, 1) for s2 in (-1, 1)) / 4
        bias = mean / math.exp((z1 * z1 + z2 * z2) / 2) - 1
        assert bias < -0.2  # ten times the 2% tolerance, at every d
    assert limit == pytest.approx(-0.2657, abs=1e-4) and bias == pytest.approx(limit, abs=0.005)


def _kac_walk(z: np.ndarray, rotations: int, replicates: int, rng) -> np.ndarray:
    """``B z`` for ``replicates`` independent Kac walks (plain numpy, independent of the Numba kernel)."""
    d = z.size
    out = np.tile(z, (replicates, 1))
    rows = np.arange(replicates)
    for _ in range(rotations):
        i = rng.integers(0, d, replicates)
        j = rng.integers(0, d - 1, replicates)
        j += j >= i
        theta = rng.uniform(0, 2 * math.pi, replicates)
        a, b = out[rows, i], out[rows, j]
        out[rows, i], out[rows, j] = np.cos(theta) * a - np.sin(theta) * b, np.sin(theta) * a + np.cos(theta) * b
    return out


def test_givens_default_rotations_leave_an_axis_bias():
    # hg_orf_bias, default_construction: K = ⌈d log₂ d⌉ Kac rotations do not mix exponential moments for
    # axis-aligned inputs. 20000 independent blocks at d = 64 give a standard error of ~0.0015 on a bias of
    # ~0.045: "bias > 0.02 + 6 se" is wrong with probability < 1e-9 if the bias were <= 0.02, and the test fails
    # spuriously only if the estimate falls ~10 se below its mean. Twice the rotations remove the bias.
    rng = np.random.default_rng(9_104_772_356_118_440_127)
    d, norm = 64, 0.5
    x, y = norm * np.eye(d)[0], norm * (0.5 * np.eye(d)[0] + math.sqrt(3) / 2 * np.eye(d)[1])
    z = x + y
    bz = _kac_walk(z, default_givens_rotations(d), 20_000, rng)
    radii = np.sqrt(rng.chisquare(d, size=bz.shape))
    est = np.exp(radii * bz - z @ z / 2).mean(axis=1)  # one block's SM⁺ estimate over SM
    bias, se = est.mean() - 1, est.std() / math.sqrt(est.size)
    assert bias - 6 * se > 0.02
    more = _kac_walk(z, 2 * default_givens_rotations(d), 5_000, rng)
    est2 = np.exp(np.sqrt(rng.chisquare(d, size=more.shape)) * more - z @ z / 2).mean(axis=1)
    assert abs(est2.mean() - 1) < 6 * est2.std() / math.sqrt(est2.size) + 0.005


def test_roles_used_by_the_claims_exist():
    used = {role for c in claims_in(claims) for role in c.roles}
    assert used == {"favor_from_features", "favor_attention", "prefix_sum_states", "generalized_features",
                    "template_features", "favor_features", "hadamard_projection", "givens_projection",
                    "softmax_attention", "orthogonal_projection", "parallel_prefix_scan"}
    assert functools.reduce(lambda a, c: a and (c.cell is not None), claims_in(claims), True)


def test_renormalizer_rows_are_drawn_in_bounded_batches_that_add_up(monkeypatch):
    # the full tier's L = 256, m = 256 cells would hold ~10 GB of features at once: rows come in batches of at
    # most RENORMALIZER_BATCH entries, and every row is counted (planted bug: a dropped remainder batch)
    from rfkit.validation.cells import plan

    seen = []
    real = claims._nonpositive_counts

    def recording(ctx, names, x0, y, m, rng):
        seen.append((x0.shape[0], y.shape[1], m))
        return real(ctx, names, x0, y, m, rng)

    monkeypatch.setattr(claims, "_nonpositive_counts", recording)
    monkeypatch.setattr(claims, "RENORMALIZER_BATCH", 7 * 33 * 16)  # 7 rows of L = 32, m = 16 per batch
    spec = next(s for s in plan(get_claim("performer.sec2_3.trig_nonpositive_renormalizer"), tier="quick", seed=0)
                if s.kind == "grid" and s.params["regime"] == "obtuse" and s.params["L"] == 32)
    ev = spec.claim.cell(dataclasses.replace(spec, budget=100).context())
    assert len(seen) == 15 and sum(n for n, _, _ in seen) == 100
    assert max(n * (length + 1) * max(m, 16) for n, length, m in seen) <= claims.RENORMALIZER_BATCH
    assert ev.n == 6 * 100  # six binomial tests of 100 rows each
    assert all(round(f * 100, 9) == round(f * 100) for f in ev.extra["frequency"].values())


def test_renormalizer_asserts_trig_only_where_kernel_scores_are_close_to_zero():
    # the caveat locates the trig instability at "kernel scores close to 0": the literal reading asserts it in
    # obtuse I3 rows (every score ~e^{-0.9 s²}); random-direction I3 rows (median score 1) assert it only under the
    # reading large_norms, reported beside the verdict. Planted misreading: asserting trig in the literal reading's
    # sphere cells would add two parts there.
    from rfkit.validation.cells import plan

    claim = get_claim("performer.sec2_3.trig_nonpositive_renormalizer")
    assert claim.readings["large_norms"].beside and not claim.readings["literal"].beside
    specs = {(s.variant, s.params["regime"]): s for s in plan(claim, tier="quick", seed=0)
             if s.kind == "grid" and s.params["regime"] != "i1" and s.params["L"] == 32}

    def run(variant, regime):
        spec = specs[variant, regime]
        return spec.claim.cell(dataclasses.replace(spec, budget=300).context())

    sphere, obtuse, beside = run("literal", "sphere"), run("literal", "obtuse"), run("large_norms", "sphere")
    assert sphere.extra["tested"] == list(claims.POSITIVE_FAMILY) and sphere.n == 4 * 100
    assert set(sphere.extra["frequency"]) == set(claims.RENORMALIZER_ESTIMATORS)  # trig's rate is still reported
    assert beside.extra["tested"] == [*claims.POSITIVE_FAMILY, "trig", "trig_orf"] and beside.n == 6 * 300
    assert obtuse.extra["tested"] == [*claims.POSITIVE_FAMILY, "trig", "trig_orf"] and obtuse.n == 6 * 300
    # where the scores are close to 0, trig's renormaliser is non-positive in a large share of rows
    assert obtuse.extra["frequency"]["trig"] > 0.2 and obtuse.extra["median_log_exact_row_sum"] < 0
    assert sphere.extra["median_log_exact_row_sum"] > obtuse.extra["median_log_exact_row_sum"] + 5


def test_renormalizer_rows_are_sized_by_the_binomial_resolution():
    # full tier: low-kernel cells draw what half the tolerance needs at the 1% / 99% nulls, not the flat budget
    from rfkit.validation.cells import plan
    from rfkit.validation.stats import binomial_test

    spec = next(s for s in plan(get_claim("performer.sec2_3.trig_nonpositive_renormalizer"), tier="full", seed=0)
                if s.kind == "grid" and s.params["regime"] == "obtuse" and s.params["L"] == 64
                and s.params["m"] == 16 and s.params["d"] == 16)
    ctx = spec.context()
    ev = spec.claim.cell(ctx)
    n = ev.n // 6
    assert ev.n == 6 * n and 1_000 < n < ctx.replicates
    # a positive-feature estimator with no D <= 0 in n rows supports at that n (upper <= tolerance / 2)
    assert binomial_test(0, n, 0.0, alpha=ctx.alpha / 6, tolerance=ctx.tolerance).upper <= ctx.tolerance / 2
    # and trig at its 98% bound, with 98% of rows D <= 0, too
    assert binomial_test(round(0.98 * n), n, 0.98, alpha=ctx.alpha / 6, tolerance=ctx.tolerance).upper \
        <= ctx.tolerance
