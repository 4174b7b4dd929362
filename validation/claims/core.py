"""``core.*`` claims: properties of rfkit's primitives, the engine's first customers.

They state textbook facts that the paper methods rely on (importance sampling is unbiased, SNIS has an
``O(1/S)`` bias, linear attention equals its quadratic form, causal attention ignores the future, ORF
blocks are Haar, random features are unbiased, Kish's ESS lies in ``[1, S]``). Each check calls the
implementation of a *role* (see :mod:`rfkit.validation.adapters`), so a user's estimator can be put
through the same tests.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from scipy import special

from rfkit.estimators import (
    FEATURE_MAPS,
    effective_sample_size,
    is_estimate,
    linear_attention,
    linear_attention_quadratic,
    orthogonal_projection,
    snis_estimate,
)
from rfkit.theory import importance as is_theory
from rfkit.theory.softmax import estimator_moments, orthogonal_mse
from rfkit.validation.domain import Choice, Integers, Range
from rfkit.validation.harness import (
    as_features,
    chunks,
    condition_scale,
    controlled_pair,
    kernel_estimates,
    replicate_projections,
)
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import combine, exact_test, flagged, ks_test, mean_test, slope_test

# ---------------------------------------------------------------------------------------------- IS


def _gaussian_is_draws(ctx: CellContext, a: float, s: float, S: int, replicates: int):
    """``x ~ N(0, s²)`` of shape (replicates, S) and ``log w = log N(x; a, 1) - log N(x; 0, s²)``."""
    x = ctx.rng.normal(0.0, s, size=(replicates, S))
    log_w = x * x * (0.5 / (s * s) - 0.5) + a * x - 0.5 * a * a + math.log(s)
    return x, log_w


def _is_unbiased_cell(ctx: CellContext):
    a, s, S, f = ctx.params["a"], ctx.params["s"], ctx.params["S"], ctx.params["f"]
    estimator = ctx.impl("is_estimate", is_estimate)
    power = 1 if f == "x" else 0
    est = []
    for n in chunks(ctx.replicates):
        x, log_w = _gaussian_is_draws(ctx, a, s, S, n)
        est.append(np.asarray(estimator(x**power, log_weights=log_w), dtype=np.float64))
    target = a if power == 1 else 1.0
    sd = math.sqrt(is_theory.is_variance(a, s, power) / S)
    return mean_test(np.concatenate(est), target, sd=sd, **ctx.test)


IS_UNBIASED = Claim(
    id="core.is.unbiased", source="rfkit.estimators.importance.is_estimate",
    statement="The importance sampling estimate (1/S) Σ w_s f(x_s), x_s ~ q, w = p/q, is unbiased for E_p[f], for "
              "p = N(a, 1) with 0 <= a <= 1, q = N(0, s²) with 1 <= s <= 2 (a proposal at least as wide as the "
              "target), f ∈ {x, 1} and every sample size S >= 1.",
    kind="expectation", tolerance=0.05, units="absolute bias",
    domain=dict(a=Range("p = N(a, 1) with 0 <= a <= 1", 0.0, 1.0),
                s=Range("q = N(0, s²) with 1 <= s <= 2", 1.0, 2.0),
                f=Choice("f ∈ {x, 1}", ("x", "1")),
                S=Integers("every sample size S >= 1", 1, math.inf, points=(1,), up_to=8,
                           why="the estimate is a mean of S iid terms, so its expectation is that of S = 1; "
                               "S = 8 checks the averaging")),
    cell=_is_unbiased_cell,
    grid=tiers(dict(a=[0.0, 0.5, 1.0], s=[1.0, 1.5, 2.0], S=[1, 8], f=["x", "1"]),
               smoke=dict(a=[0.0, 1.0], s=[1.0, 2.0])),
    replicates=tiers(200_000, smoke=150_000, full=1_000_000),
    roles=("is_estimate",), plot_x="a",
    notes="The exact weight variance of rfkit.theory.importance is the Catoni sequence's variance bound "
          "(non-asymptotic). Proposals narrower than the target (1/2 < s² < 1) have heavy-tailed weights whose "
          "variance grows without bound as s² -> 1/2: not claimed here.",
)


def _snis_control(x: np.ndarray, log_w: np.ndarray, a: float) -> np.ndarray:
    """The SNIS estimate's linearisation ``Σwx/S - a(Σw/S - 1)`` per replicate: its mean is exactly ``a`` (the
    weights are normalised, ``E_q[w] = 1``, ``E_q[wx] = a``), so ``SNIS - control`` has mean exactly the SNIS bias
    while its Monte Carlo noise is ``O(1/S)`` instead of ``O(1/√S)`` (a control variate with known mean)."""
    w = np.exp(log_w)
    return (w * x).mean(axis=1) - a * (w.mean(axis=1) - 1.0)


#: Sample sizes of the SNIS rate fit: √2-spaced from 8 (a fitted slope needs at least 5 sizes; more sizes give
#: the fit's lack-of-fit estimate more degrees of freedom).
SNIS_SIZES = tuple(int(round(8 * 2 ** (k / 2))) for k in range(15))  # 8, 11, 16, ..., 724, 1024


def _snis_rate_cell(ctx: CellContext):
    a, grid = ctx.params["a"], list(ctx.params["S"])
    estimator = ctx.impl("snis_estimate", snis_estimate)
    bias, se, raw_se = [], [], []
    for S in grid:
        est, raw = [], []
        for n in chunks(ctx.replicates, max(1, 4_000_000 // S)):
            x, log_w = _gaussian_is_draws(ctx, a, 1.0, S, n)
            snis = np.asarray(estimator(x, log_weights=log_w), dtype=np.float64)
            est.append(snis - _snis_control(x, log_w, a))
            raw.append(snis)
        est, raw = np.concatenate(est), np.concatenate(raw)
        bias.append(est.mean())
        se.append(est.std(ddof=1) / math.sqrt(est.size))
        raw_se.append(raw.std(ddof=1) / math.sqrt(raw.size))
    bias, se = np.array(bias), np.array(se)
    extra = dict(S=grid, bias=bias.tolist(), bias_se=se.tolist(), bias_se_without_control=raw_se,
                 delta_method=[is_theory.snis_bias_constant(a, 1.0) / S for S in grid])
    ev = slope_test(np.array(grid), np.abs(bias), se, -1.0, extra=extra, **ctx.test)
    if (np.abs(bias) < 3 * se).any():
        ev = flagged(ev, "bias not resolved from Monte Carlo noise at some S (|bias| < 3 se); add replicates")
    return ev



SNIS_RATE = Claim(
    id="core.snis.bias_rate", source="rfkit.estimators.importance.snis_estimate",
    statement="Self-normalised importance sampling is consistent with bias O(1/S): log|bias| falls with slope "
              "-1 in log S (delta method: bias ≈ (μ E_q[w²] - E_q[w² f])/S = -a e^{a²}/S here), for p = N(a, 1) "
              "with 0 < a <= 1, q = N(0, 1), f(x) = x, from S = 8 on.",
    kind="rate", tolerance=0.25, units="slope difference",
    domain=dict(a=Range("p = N(a, 1) with 0 < a <= 1 (a non-zero bias)", 0.0, 1.0, strict=(True, False)),
                S=Integers("from S = 8 on", 8, math.inf, up_to=128,
                           why="the slope is fitted on 9 √2-spaced sizes from 8 to 128 (1024 at the full tier)")),
    cell=_snis_rate_cell,
    grid=tiers(dict(a=[0.05, 0.5, 1.0], S=[SNIS_SIZES[:9]]), smoke=dict(a=[0.05, 1.0]),
               full=dict(a=[0.05, 0.25, 0.5, 1.0], S=[SNIS_SIZES])),
    replicates={"smoke": 30_000, "quick": 60_000, "full": 1_000_000},
    roles=("snis_estimate",), plot_x="a",
    notes="The bias at each S is the mean of SNIS minus its linearisation Σwx/S - a(Σw/S - 1), whose mean is "
          "exactly a (a control variate with known mean): unbiased for the bias, with O(1/S) noise per replicate. "
          "Each cell's extra has the standard errors without the control.",
)

# ------------------------------------------------------------------------------- linear attention

FEATURE_KINDS = tuple(FEATURE_MAPS)


def _attention_inputs(ctx: CellContext, length: int, d: int = 8, m: int = 16, dv: int = 3):
    rng = ctx.rng
    w = orthogonal_projection(m, d, rng=rng)
    q, k = rng.normal(size=(2, length, d)) * 0.5
    v = rng.normal(size=(length, dv))
    fmap = ctx.impl(f"feature_map.{ctx.params['feature']}", FEATURE_MAPS[ctx.params["feature"]])
    return as_features(fmap(q, w)), as_features(fmap(k, w)), v


def _linear_attention_impl(ctx: CellContext):
    default = functools.partial(_rfkit_linear_attention, chunk_size=ctx.params.get("chunk"))
    return ctx.impl("linear_attention", default)


def _rfkit_linear_attention(q_features, k_features, v, *, causal, chunk_size=None):
    return linear_attention(q_features, k_features, v, causal=causal, chunk_size=chunk_size)


def _linear_exact_cell(ctx: CellContext):
    causal = ctx.params["direction"] == "causal"
    qf, kf, v = _attention_inputs(ctx, ctx.params["L"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # signed (trig) features: D̂ <= 0 is measured, not warned about
        want = linear_attention_quadratic(qf, kf, v, causal=causal)
        got = np.asarray(_linear_attention_impl(ctx)(qf, kf, v, causal=causal))
    scale = condition_scale(qf, kf, v, want, causal)
    return exact_test(got, want, tolerance=ctx.tolerance, scale=scale)


LINEAR_EXACT = Claim(
    id="core.linear_attention.exact", source="rfkit.estimators.attention.linear_attention",
    statement="Linear attention D̂⁻¹Q'((K')ᵀV) (and its causal prefix-sum form) equals the quadratic form "
              "D̂⁻¹(Q'K'ᵀ ⊙ mask)V to round-off, for any features, lengths and chunk sizes.",
    kind="identity", tolerance=1e-11, units="condition-scaled error",
    domain=dict(feature=Choice("any features: trig, positive and hyperbolic maps", FEATURE_KINDS),
                direction=Choice("bidirectional and its causal prefix-sum form", ("bidirectional", "causal")),
                L=Integers("any length", 1, math.inf, points=(1, 2, 17), up_to=1024,
                           why="the prefix sums run over chunks of at most 128 rows: longer inputs repeat "
                               "the same carries"),
                chunk=Integers("any chunk size", 1, math.inf, points=(1, 16), up_to=128,
                               why="128 exceeds every tested length but the longest (one chunk)")),
    hypotheses="any feature matrices with non-zero renormalisers; error scaled by the condition magnitude "
               "(Σ|Â||v| + |out|Σ|Â|)/|D̂| per entry",
    cell=_linear_exact_cell,
    grid=tiers(dict(L=[1, 2, 17, 1024], chunk=[1, 16, 128], feature=list(FEATURE_KINDS),
                    direction=["bidirectional", "causal"])),
    where=lambda p, v: not (p["direction"] == "bidirectional" and p["chunk"] != 128)
    and not (p["L"] >= 1024 and p["chunk"] == 1),
    roles=("linear_attention",) + tuple(f"feature_map.{k}" for k in FEATURE_KINDS), plot_x="L",
    notes="Coverage is per axis: the chunk sizes are exercised by the causal form (the bidirectional form has "
          "no chunks), and chunk 1 at lengths up to 17.",
)


def _no_future_leak_cell(ctx: CellContext):
    length, t, d = ctx.params["L"], ctx.params["t"], 8
    fmap = ctx.impl(f"feature_map.{ctx.params['feature']}", FEATURE_MAPS[ctx.params["feature"]])
    rng = ctx.rng
    scale = {"normal": 1.0, "huge": 30.0}[ctx.params["future"]]
    w = orthogonal_projection(16, d, rng=rng)
    q, k = rng.normal(size=(2, length, d)) * 0.5
    v = rng.normal(size=(length, 3))
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    q2[t + 1:] = rng.normal(size=(length - t - 1, d)) * scale
    k2[t + 1:] = rng.normal(size=(length - t - 1, d)) * scale
    v2[t + 1:] = rng.normal(size=(length - t - 1, 3)) * scale
    attend = _linear_attention_impl(ctx)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        a = np.asarray(attend(as_features(fmap(q, w)), as_features(fmap(k, w)), v, causal=True))
        b = np.asarray(attend(as_features(fmap(q2, w)), as_features(fmap(k2, w)), v2, causal=True))
    ref = np.abs(a[: t + 1]).max()
    return exact_test(b[: t + 1], a[: t + 1], tolerance=ctx.tolerance, scale=max(ref, np.finfo(float).tiny))


NO_FUTURE_LEAK = Claim(
    id="core.causal.no_future_leak", source="rfkit.estimators.attention.linear_attention",
    statement="Causal linear attention's outputs up to position t do not change when tokens after t change "
              "(stabilisers use past and present tokens only), for any inputs, including future tokens of huge "
              "norm.",
    kind="identity", tolerance=1e-15, units="relative change",
    domain=dict(t=Integers("every position t before the last", 0, math.inf, points=(0,), up_to=298,
                           why="t < L - 1 <= 298 at the longest tested length"),
                L=Integers("any length with a future (L >= 2)", 2, math.inf, up_to=300,
                           why="chunked prefix sums of at most 64 rows: 300 spans several chunks and a partial "
                               "one"),
                feature=Choice("any features: trig, positive and hyperbolic maps", FEATURE_KINDS),
                chunk=Integers("any chunk size", 1, math.inf, points=(1, 7), up_to=64,
                               why="64 is a whole chunk of the shorter length"),
                future=Choice("future tokens replaced by fresh draws, possibly of huge norm", ("normal", "huge"))),
    cell=_no_future_leak_cell,
    grid=tiers(dict(L=[2, 64, 300], t=[0, 31, 62, 298], feature=list(FEATURE_KINDS), chunk=[1, 7, 64],
                    future=["normal", "huge"]),
               smoke=dict(L=[2, 300], t=[0, 298])),
    where=lambda p, v: p["t"] < p["L"] - 1,
    roles=("linear_attention",) + tuple(f"feature_map.{k}" for k in FEATURE_KINDS), plot_x="t",
)

# ------------------------------------------------------------------------------------- projections


#: Rows of the sampled matrix as a function of d: one block, a partial second block, two whole blocks.
HAAR_ROWS = {"d": lambda d: d, "d+1": lambda d: d + 1, "2d": lambda d: 2 * d}


def _blocks(m: int, d: int) -> list[range]:
    return [range(start, min(start + d, m)) for start in range(0, m, d)]


def _orthogonality_error(directions: np.ndarray, d: int) -> float:
    """``max |U Uᵀ - I|`` over the blocks of unit rows ``U`` (rows of one block must be exactly orthonormal)."""
    worst = 0.0
    for rows in _blocks(directions.shape[1], d):
        u = directions[:, rows, :]
        gram = u @ np.swapaxes(u, -1, -2)
        worst = max(worst, float(np.abs(gram - np.eye(len(rows))).max()))
    return worst


#: Frame entries the Haar-law cell draws at once (~0.4 GB with its Gram matrices).
HAAR_BLOCK = 5_000_000


def _haar_law_cell(ctx: CellContext):
    d = ctx.params["d"]
    m = HAAR_ROWS[ctx.params["m"]](d)
    sampler = ctx.impl("orthogonal_projection", orthogonal_projection)
    u = ctx.rng.normal(size=d)
    u /= np.linalg.norm(u)
    # frames drawn in blocks (the full tier's 100,000 frames of 64 x 64 with their Gram matrices: ~13 GB at once);
    # what the tests read is kept: each block's orthogonality error, first coordinates, coordinates along u, norms
    error, first, coords, norms = 0.0, [], [], []
    for n in chunks(ctx.replicates, max(1, HAAR_BLOCK // (m * d))):
        frames = np.asarray(sampler(m, d, rng=ctx.rng, size=n), dtype=np.float64)
        block_norms = np.linalg.norm(frames, axis=-1)
        directions = frames / block_norms[..., None]
        error = max(error, _orthogonality_error(directions, d))
        first.append(directions[:, :, 0])
        coords.append(directions @ u)
        norms.append(block_norms)
    first, coords, norms = np.concatenate(first), np.concatenate(coords), np.concatenate(norms)
    pairs = [(i, j) for rows in _blocks(m, d) for i in rows for j in rows if i < j] if d > 2 else []
    test = ctx.sub_test(2 + bool(pairs))
    # 1. exact: rows of one block are orthonormal to round-off (64·d ulps); the effect is in units of that
    #    round-off times the tolerance, so it exceeds the tolerance exactly when the error exceeds the round-off
    roundoff = 64 * d * np.finfo(float).eps
    parts = [exact_test(error, 0.0, tolerance=ctx.tolerance, scale=roundoff / ctx.tolerance,
                        extra=dict(max_gram_error=error, roundoff=roundoff))]
    # 2. every row: its direction's coordinate along e_1 and along a random u (law c_d (1-t²)^{(d-3)/2}, i.e.
    #    (t + 1)/2 ~ Beta((d-1)/2, (d-1)/2)) and its norm (chi(d)), as one Kolmogorov-Smirnov family
    half = (d - 1) / 2.0
    rows = np.concatenate([(first + 1) / 2, (coords + 1) / 2, norms], axis=1)

    def rows_cdf(v):  # columns: 2m sphere coordinates, then m chi norms
        out = np.empty_like(v)
        out[:, : 2 * m] = special.betainc(half, half, np.clip(v[:, : 2 * m], 0.0, 1.0))
        out[:, 2 * m:] = special.gammainc(d / 2, v[:, 2 * m:] ** 2 / 2)
        return out

    parts.append(ks_test(rows, rows_cdf, **test))
    # 3. two rows of a block jointly: for a Haar frame (u_i, u_j) and a fixed unit u, the squared length of u's
    #    projection on span(u_i, u_j) is that of a uniform point's first two coordinates, Beta(1, (d-2)/2)
    #    (d >= 3; for d = 2 it is exactly 1, which the orthogonality part checks)
    if pairs:
        i, j = np.array(pairs).T
        projected = coords[:, i] ** 2 + coords[:, j] ** 2
        # Beta(1, b) has the closed-form CDF 1 - (1 - v)^b
        parts.append(ks_test(projected, lambda v: 1.0 - (1.0 - np.clip(v, 0.0, 1.0)) ** ((d - 2) / 2.0), **test))
    return combine(parts, extra=dict(rows=m, pairs=len(pairs), max_gram_error=error))


HAAR_LAW = Claim(
    id="core.orf.haar_law", source="rfkit.estimators.projections.orthogonal_projection",
    statement="Orthogonal random features are Haar within each block of d rows: rows of a block are exactly "
              "orthonormal in direction; every row's direction is uniform on S^{d-1} (coordinate law "
              "c_d (1-t²)^{(d-3)/2}, along e_1 and along a random u); any two rows of a block are jointly Haar "
              "(the squared projection of a fixed unit vector on their span is Beta(1, (d-2)/2)); with chi "
              "norms each row's norm is chi(d). For every d >= 2 and every number of rows m (whole and partial "
              "blocks).",
    kind="identity", tolerance=0.04,
    units="Kolmogorov-Smirnov distance (orthogonality: error in units of 64·d ulps times the tolerance)",
    domain=dict(d=Integers("every d >= 2", 2, math.inf, points=(2, 3), up_to=16,
                           why="the sampler is one sign-fixed QR for every d; 64 at the full tier"),
                m=Choice("every number of rows: one block, a partial and a whole second block",
                         tuple(HAAR_ROWS))),
    cell=_haar_law_cell,
    grid=tiers(dict(d=[2, 3, 8, 16], m=list(HAAR_ROWS)), full=dict(d=[2, 3, 8, 16, 64])),
    # the partial and the second block are tested up to d = 8 (coverage is per axis); d = 16 is one block
    where=lambda p, v: p["d"] <= 8 or p["m"] == "d",
    replicates=tiers(20_000, full=100_000),
    roles=("orthogonal_projection",), plot_x="d",
)

# ---------------------------------------------------------------------------------------- features

PAIRS = {  # (‖x‖, ‖y‖, angle); ‖x+y‖² <= 1.5 keeps the Monte Carlo mean close to normal
    "small": (0.5, 0.5, math.pi / 3),
    "obtuse": (0.8, 0.6, 2 * math.pi / 3),
    "parallel": (0.6, 0.6, 0.0),
    "opposite": (0.7, 0.7, math.pi),
}


def _features_unbiased_cell(ctx: CellContext):
    kind, proj, d, m = ctx.params["feature"], ctx.params["projection"], ctx.params["d"], ctx.params["m"]
    x, y = controlled_pair(*PAIRS[ctx.params["pair"]], d, ctx.rng)
    fmap = ctx.impl(f"feature_map.{kind}", FEATURE_MAPS[kind])
    target = math.exp(float(x @ y))
    # the exact per-replicate variance (theory, independent of the estimator): iid rows, or R-ORF blocks (iid
    # variance plus the within-block pair covariances). It is exactly 0 for trig features at x = y (every term is
    # cos(ωᵀ(x - y)) = 1): such a cell is deterministic and judged exactly.
    variance = estimator_moments(kind, x, y, m)["var"] if proj == "iid" else orthogonal_mse(kind, x, y, m)
    sd = math.sqrt(max(variance, 0.0))

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        est = []
        for size in chunks(n, max(1, 400_000 // m)):
            omega = replicate_projections(proj, size, m, d, rng)
            est.append(kernel_estimates(fmap, x, y, omega, size))
        return np.concatenate(est)

    return ctx.mean(draw, target, scale=target, sd=sd, extra=dict(theory_sd=sd))


FEATURES_UNBIASED = Claim(
    id="core.features.unbiased", source="rfkit.estimators.features",
    statement="Trigonometric, positive and hyperbolic random features give unbiased estimates of the softmax "
              "kernel SM(x, y) = exp(xᵀy) with iid Gaussian or orthogonal (chi-norm) projections, for every "
              "number of features m >= 1, every d >= 1 and inputs x, y at the angles 0, π/3, 2π/3 and π with "
              "‖x + y‖² <= 1.5.",
    kind="expectation", tolerance=0.05, units="relative bias",
    domain=dict(feature=Choice("trigonometric, positive and hyperbolic random features", FEATURE_KINDS),
                projection=Choice("iid Gaussian or orthogonal (chi-norm) projections", ("iid", "orthogonal")),
                d=Integers("every d >= 1", 1, math.inf, points=(1, 2), up_to=8,
                           why="the estimate depends on x, y only through their Gram matrix, a 2-dimensional "
                               "configuration: d >= 2 adds nothing but orthogonal blocks, tested at 8"),
                m=Integers("every number of features m >= 1", 1, math.inf, points=(1,), up_to=8,
                           why="unbiasedness of a mean of m terms is that of one term; 8 > d checks a partial "
                               "orthogonal block"),
                pair=Choice("x, y at the angles 0, π/3, 2π/3 and π with ‖x + y‖² <= 1.5", tuple(PAIRS))),
    cell=_features_unbiased_cell,
    grid=tiers(dict(feature=list(FEATURE_KINDS), projection=["iid", "orthogonal"], d=[1, 2, 8], m=[1, 8],
                    pair=list(PAIRS)),
               smoke=dict(d=[1, 2, 8], pair=list(PAIRS)),
               full=dict(d=[1, 2, 8, 32], m=[1, 8, 64])),
    where=lambda p, v: not (p["d"] == 1 and p["pair"] in ("small", "obtuse")),
    replicates={"smoke": 20_000, "quick": 100_000, "full": 1_000_000},
    roles=tuple(f"feature_map.{k}" for k in FEATURE_KINDS), plot_x="pair",
    notes="Sequential cells (budget per tier) with the exact variance of rfkit.theory.softmax (iid rows: "
          "estimator_moments; orthogonal: orthogonal_mse) as the Catoni sequence's variance bound. Trig features at "
          "x = y (pair=parallel) have variance exactly 0: those cells are deterministic and judged exactly. In "
          "d = 1 only the angles 0 and π exist.",
)

# --------------------------------------------------------------------------------------------- ESS


def _ess_margin(weights: np.ndarray, ess_fn) -> float:
    ess = float(ess_fn(weights=weights))
    return min(ess - 1.0, weights.size - ess) / weights.size


def _ess_cell(ctx: CellContext):
    S, law = ctx.params["S"], ctx.params["law"]
    rng = ctx.rng
    ess_fn = ctx.impl("effective_sample_size", effective_sample_size)
    draws = {
        "exponential": lambda: rng.exponential(size=S),
        "lognormal": lambda: rng.lognormal(0.0, 3.0, size=S),
        "one-hot": lambda: np.eye(S)[rng.integers(S)],
        "equal": lambda: np.full(S, rng.exponential()),
        "sparse": lambda: rng.exponential(size=S) * (rng.random(S) < 0.1) + np.eye(S)[0],
    }
    margins = [_ess_margin(draws[law](), ess_fn) for _ in range(50)]
    worst = min(margins)
    return margin_evidence(worst, tolerance=ctx.tolerance, extra=dict(worst_margin=worst))


def _ess_search(ctx: CellContext):
    S = 6
    ess_fn = ctx.impl("effective_sample_size", effective_sample_size)
    res = minimize_margin(lambda lw: _ess_margin(np.exp(lw), ess_fn), [(-40.0, 40.0)] * S, rng=ctx.rng,
                          restart=ctx.restart or 0)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(log_weights=res.x.tolist()))


ESS_RANGE = Claim(
    id="core.ess.range", source="rfkit.estimators.importance.effective_sample_size",
    statement="Kish's effective sample size (Σw)²/Σw² of S non-negative weights, not all zero, lies in [1, S].",
    kind="inequality", tolerance=1e-12, units="margin / S",
    domain=dict(S=Integers("S weights", 1, math.inf, points=(1, 2, 6), up_to=1000,
                           why="a ratio of two sums: nothing changes in kind with S; the search works at S = 6"),
                law=Choice("non-negative weights, not all zero: spread, heavy-tailed, one non-zero, all equal and "
                           "mostly zero (and, by the search, adversarial log-weights over 80 orders of magnitude)",
                           ("exponential", "lognormal", "one-hot", "equal", "sparse"))),
    cell=_ess_cell, search=_ess_search, universal=True,
    grid=tiers(dict(S=[1, 2, 6, 10, 1000], law=["exponential", "lognormal", "one-hot", "equal", "sparse"])),
    restarts={"smoke": 2, "quick": 6, "full": 30},
    roles=("effective_sample_size",), plot_x="S",
)
