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
from scipy import stats

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
from rfkit.validation.harness import (
    as_features,
    chunks,
    condition_scale,
    controlled_pair,
    kernel_estimates,
    replicate_projections,
)
from rfkit.validation.model import CellContext, Claim
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
    id="core.is.unbiased", paper="core", source="rfkit.estimators.importance.is_estimate",
    statement="The importance sampling estimate (1/S) Σ w_s f(x_s), x_s ~ q, w = p/q, is unbiased for E_p[f].",
    kind="expectation",
    hypotheses="p = N(a, 1) normalised, q = N(0, s²) with s² > 1/2 (finite weight variance), f ∈ {x, 1}",
    tolerance=0.05, units="absolute bias",
    cell=_is_unbiased_cell,
    grid={"smoke": dict(a=[0.5], s=[1.0, 2.0], S=[4], f=["x", "1"]),
          "quick": dict(a=[0.0, 0.5, 1.0], s=[1.0, 2.0], S=[1, 8], f=["x", "1"])},
    replicates={"smoke": 60_000, "quick": 200_000, "full": 1_000_000},
    roles=("is_estimate",), plot_x="a",
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
    a, sizes = ctx.params["a"], ctx.params["S_max"]
    estimator = ctx.impl("snis_estimate", snis_estimate)
    grid = [S for S in SNIS_SIZES if S <= sizes]
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
    id="core.snis.bias_rate", paper="core", source="rfkit.estimators.importance.snis_estimate",
    statement="Self-normalised importance sampling is consistent with bias O(1/S): log|bias| falls with slope "
              "-1 in log S (delta method: bias ≈ (μ E_q[w²] - E_q[w² f])/S = -a e^{a²}/S here).",
    kind="rate",
    hypotheses="p = N(a, 1), q = N(0, 1), f(x) = x, a > 0 (so the bias is non-zero), S from 8 up",
    tolerance=0.25, units="slope difference",
    cell=_snis_rate_cell,
    grid={"smoke": dict(a=[0.5], S_max=[128]), "quick": dict(a=[0.5, 1.0], S_max=[128]),
          "full": dict(a=[0.25, 0.5, 1.0], S_max=[1024])},
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
    id="core.linear_attention.exact", paper="core", source="rfkit.estimators.attention.linear_attention",
    statement="Linear attention D̂⁻¹Q'((K')ᵀV) (and its causal prefix-sum form) equals the quadratic form "
              "D̂⁻¹(Q'K'ᵀ ⊙ mask)V to round-off, for any features, lengths and chunk sizes.",
    kind="identity",
    hypotheses="any feature matrices with non-zero renormalisers; error scaled by the condition magnitude "
               "(Σ|Â||v| + |out|Σ|Â|)/|D̂| per entry",
    tolerance=1e-11, units="condition-scaled error",
    cell=_linear_exact_cell,
    grid={"smoke": dict(L=[17, 256], chunk=[7, 128], feature=list(FEATURE_KINDS),
                        direction=["bidirectional", "causal"]),
          "quick": dict(L=[1, 2, 17, 1024], chunk=[1, 16, 128], feature=list(FEATURE_KINDS),
                        direction=["bidirectional", "causal"])},
    where=lambda p, v: not (p["direction"] == "bidirectional" and p["chunk"] != 128)
    and not (p["L"] >= 1024 and p["chunk"] == 1),
    roles=("linear_attention",) + tuple(f"feature_map.{k}" for k in FEATURE_KINDS), plot_x="L",
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
    id="core.causal.no_future_leak", paper="core", source="rfkit.estimators.attention.linear_attention",
    statement="Causal linear attention's outputs up to position t do not change when tokens after t change "
              "(stabilisers use past and present tokens only).",
    kind="identity",
    hypotheses="any inputs; future tokens replaced by fresh draws, possibly with huge norms",
    tolerance=1e-15, units="relative change",
    cell=_no_future_leak_cell,
    grid={"smoke": dict(L=[64], t=[0, 31, 62], feature=list(FEATURE_KINDS), chunk=[7, 64],
                        future=["normal", "huge"]),
          "quick": dict(L=[64, 300], t=[0, 31, 62, 298], feature=list(FEATURE_KINDS), chunk=[1, 7, 64],
                        future=["normal", "huge"])},
    where=lambda p, v: p["t"] < p["L"] - 1,
    roles=("linear_attention",) + tuple(f"feature_map.{k}" for k in FEATURE_KINDS), plot_x="t",
)

# ------------------------------------------------------------------------------------- projections


def _sphere_coordinate_cdf(d: int):
    law = stats.beta((d - 1) / 2, (d - 1) / 2)
    return lambda t: law.cdf((np.asarray(t) + 1) / 2)


def _haar_law_cell(ctx: CellContext):
    d = ctx.params["d"]
    sampler = ctx.impl("orthogonal_projection", orthogonal_projection)
    frames = np.asarray(sampler(d, d, rng=ctx.rng, size=ctx.replicates), dtype=np.float64)
    directions = frames / np.linalg.norm(frames, axis=-1, keepdims=True)
    u = ctx.rng.normal(size=d)
    u /= np.linalg.norm(u)
    cdf = _sphere_coordinate_cdf(d)
    rows = sorted({0, d // 2, d - 1})
    test = dict(ctx.test, alpha=ctx.alpha / (3 * len(rows)))
    parts = [ks_test(directions[:, i, 0], cdf, **test) for i in rows]
    parts += [ks_test(directions[:, i, :] @ u, cdf, **test) for i in rows]
    parts += [ks_test(np.linalg.norm(frames[:, i, :], axis=-1), stats.chi(d).cdf, **test) for i in rows]
    return combine(parts, extra=dict(rows=rows))


HAAR_LAW = Claim(
    id="core.orf.haar_law", paper="core", source="rfkit.estimators.projections.orthogonal_projection",
    statement="Orthogonal random features are Haar: every row's direction is uniform on S^{d-1} (coordinate "
              "law c_d (1-t²)^{(d-3)/2}, along e_1 and along a random u) and, with chi norms, each row's "
              "norm is chi(d).",
    kind="identity",
    hypotheses="d >= 2, rows 0, d/2 and d-1 of a d×d block, norms='chi'",
    tolerance=0.04, units="Kolmogorov-Smirnov distance",
    cell=_haar_law_cell,
    grid={"smoke": dict(d=[2, 8]), "quick": dict(d=[2, 3, 8, 16])},
    replicates={"smoke": 12_000, "quick": 20_000, "full": 100_000},
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
    id="core.features.unbiased", paper="core", source="rfkit.estimators.features",
    statement="Trigonometric, positive and hyperbolic random features give unbiased estimates of the softmax "
              "kernel SM(x, y) = exp(xᵀy) with iid Gaussian or orthogonal (chi-norm) projections.",
    kind="expectation",
    hypotheses="x, y of moderate norm (‖x+y‖² <= 1.5, where Monte Carlo means are nearly normal) at several "
               "angles; projection rows marginally N(0, I_d)",
    tolerance=0.05, units="relative bias",
    cell=_features_unbiased_cell,
    grid={"smoke": dict(feature=list(FEATURE_KINDS), projection=["iid", "orthogonal"], d=[4], m=[4],
                        pair=["small", "obtuse"]),
          "quick": dict(feature=list(FEATURE_KINDS), projection=["iid", "orthogonal"], d=[2, 8], m=[1, 8],
                        pair=list(PAIRS)),
          "full": dict(feature=list(FEATURE_KINDS), projection=["iid", "orthogonal"], d=[1, 2, 8, 32],
                       m=[1, 8, 64], pair=list(PAIRS))},
    replicates={"smoke": 20_000, "quick": 100_000, "full": 1_000_000},
    roles=tuple(f"feature_map.{k}" for k in FEATURE_KINDS), plot_x="pair",
    notes="Sequential cells (budget per tier) with the exact variance of rfkit.theory.softmax (iid rows: "
          "estimator_moments; orthogonal: orthogonal_mse) as the Catoni sequence's variance bound. Trig features at "
          "x = y (pair=parallel) have variance exactly 0: those cells are deterministic and judged exactly.",
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
    id="core.ess.range", paper="core", source="rfkit.estimators.importance.effective_sample_size",
    statement="Kish's effective sample size (Σw)²/Σw² of S non-negative weights, not all zero, lies in [1, S].",
    kind="inequality",
    hypotheses="w ∈ [0, ∞)^S, w ≠ 0",
    tolerance=1e-12, units="margin / S",
    cell=_ess_cell, search=_ess_search, universal=True,
    grid={"smoke": dict(S=[1, 10], law=["exponential", "one-hot", "equal"]),
          "quick": dict(S=[1, 2, 10, 1000], law=["exponential", "lognormal", "one-hot", "equal", "sparse"])},
    restarts={"smoke": 2, "quick": 6, "full": 30},
    roles=("effective_sample_size",), plot_x="S",
)

CLAIMS = [IS_UNBIASED, SNIS_RATE, LINEAR_EXACT, NO_FUTURE_LEAK, HAAR_LAW, FEATURES_UNBIASED, ESS_RANGE]
