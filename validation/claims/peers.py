"""Claims that third-party random-feature libraries are audited against (``rfkit audit``, :mod:`..audit`).

They are ``core.*`` claims (textbook properties, not a paper's), written for roles that a library's estimator
fills when rfkit has no role of that shape yet; rfkit's own estimators are the defaults, so the registry runs them
on rfkit like every other claim. Roles (see :mod:`rfkit.validation.adapters`):

=============================  =====================================================================
role                           signature
=============================  =====================================================================
``rff.phase``, ``rff.paired``  ``f(x (n, d), *, gamma, m, rng, size) -> (size, n, r)``: ``size`` independent
                               draws of a random-Fourier-feature map of ``exp(-γ‖x - y‖²)`` with ``m``
                               frequencies (random phase: ``r = m``; paired cos/sin: ``r = 2m``), such that
                               ``z(x)ᵀz(y)`` estimates the kernel
``favor.fixed_projection``     ``f(q (L, d), k (L, d), v (L, d_v), *, omega (m, d), causal) -> (L, d_v)``:
                               FAVOR+ softmax attention with the given projection (inputs scaled by ``d^{-1/4}``
                               inside, as in Performer Algorithm 1); ``favor.fixed_projection.float32``: the
                               same computed in float32 (inputs and ``omega`` given as float32)
``poly_sketch``                ``f(x (n, d), *, gamma, degree, coef0, m, rng, size) -> (size, n, m)``: ``size``
                               independent sketches of ``(γ xᵀy + c)^p`` with ``m`` components
=============================  =====================================================================
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from rfkit.estimators import (
    FEATURE_MAPS,
    gaussian_projection,
    linear_attention_quadratic,
    orthogonal_projection,
    positive_features,
    trig_features,
)
from rfkit.estimators.favor import favor_attention
from rfkit.estimators.kernel_features import polynomial_maclaurin_features, random_phase_features
from rfkit.theory.rff import RFF_MAPS, gaussian_kernel_value, rff_squared_error_sd, rff_variance
from rfkit.theory.rounding import favor_float32_bound
from rfkit.validation.domain import Choice
from rfkit.validation.harness import chunks, condition_scale, controlled_pair, kernel_estimates
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.stats import exact_test

# ------------------------------------------------------------------ random Fourier features (Gaussian kernel)


def rfkit_rff_paired(x, *, gamma: float, m: int, rng, size: int) -> np.ndarray:
    """rfkit's trigonometric map as a Gaussian-kernel map: ``trig_features(√(2γ)x, W)·exp(-γ‖x‖²)``.

    ``exp(-γ‖x - y‖²) = SM(x', y')·e^{-‖x'‖²/2}e^{-‖y'‖²/2}`` with ``x' = √(2γ)x`` and ``W ~ N(0, I)``: the paired
    map ``m^{-1/2}[sin(Wx'), cos(Wx')]`` (``trig_features`` without its ``exp(‖x'‖²/2)`` scale).
    """
    x = np.asarray(x, dtype=np.float64)
    omega = gaussian_projection(m, x.shape[-1], rng=rng, size=size)
    xs = math.sqrt(2 * gamma) * x
    f = trig_features(xs, omega.reshape(size * m, -1))
    vals = f.values * np.exp(f.log_scale - 0.5 * np.sum(xs * xs, axis=-1))[:, None]
    vals = vals.reshape(x.shape[0], 2, size, m).transpose(2, 0, 1, 3).reshape(size, x.shape[0], 2 * m)
    return vals * math.sqrt(size)  # each draw's own 1/√m


RFF_DEFAULTS = {"phase": random_phase_features, "paired": rfkit_rff_paired}
RFF_GRID_WORDS = (" On the audit grid γ ∈ {1/2, 2}, ‖x - y‖ ∈ {0.25, 1, 2}, m ∈ {4, 16}, d ∈ {1, 8} (an audit "
                  "property of finitely many points, not a 'for all').")
RFF_SOURCES = {"phase": "Rahimi & Recht (2007), random Fourier features with a random phase (scikit-learn RBFSampler)",
               "paired": "Rahimi & Recht (2007), the paired [sin, cos] map (Performer Eq 5, GPyTorch RFFKernel)"}
#: Distances ‖x - y‖ (γ = 1/2 and γ = 2 rescale them): the kernel from 0.97 to 0.1 at γ = 1/2.
RFF_DISTANCES = (0.25, 1.0, 2.0)


def _rff_estimates(ctx: CellContext, kind: str):
    """``(x, y, sq_dist, draw)``: ``draw(rng, n)`` gives ``n`` estimates ``z(x)ᵀz(y)`` of the role's map."""
    gamma, m, d = ctx.params["gamma"], ctx.params["m"], ctx.params["d"]
    angle = math.pi / 2 if d > 1 else 0.0
    r = ctx.params["dist"] / math.sqrt(2.0) if d > 1 else ctx.params["dist"]
    x, y = controlled_pair(r, r, angle, d, ctx.rng) if d > 1 else (np.zeros(1), np.array([r]))
    sq_dist = float(np.sum((x - y) ** 2))
    fmap = ctx.impl(f"rff.{kind}", RFF_DEFAULTS[kind])

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        out = []
        for size in chunks(n, max(1, 200_000 // m)):
            z = np.asarray(fmap(np.stack([x, y]), gamma=gamma, m=m, rng=rng, size=size), dtype=np.float64)
            if z.shape[:2] != (size, 2):
                raise ValueError(f"rff.{kind} returned shape {z.shape}; expected ({size}, 2, r)")
            out.append(np.einsum("sr,sr->s", z[:, 0], z[:, 1]))
        return np.concatenate(out)

    return sq_dist, draw


def _rff_unbiased_cell(ctx: CellContext):
    kind = ctx.params["map"]
    sq_dist, draw = _rff_estimates(ctx, kind)
    gamma, m = ctx.params["gamma"], ctx.params["m"]
    target = gaussian_kernel_value(sq_dist, gamma)
    sd = math.sqrt(rff_variance(kind, sq_dist, gamma, m))
    return ctx.mean(draw, target, sd=sd, extra=dict(kernel=target, theory_sd=sd))


def _rff_variance_cell(ctx: CellContext):
    kind = ctx.params["map"]
    sq_dist, draw = _rff_estimates(ctx, kind)
    gamma, m = ctx.params["gamma"], ctx.params["m"]
    target = gaussian_kernel_value(sq_dist, gamma)
    variance = rff_variance(kind, sq_dist, gamma, m)
    other = {k: rff_variance(k, sq_dist, gamma, m) for k in RFF_MAPS}

    def squared_errors(rng, n):
        return (draw(rng, n) - target) ** 2

    sd = rff_squared_error_sd(kind, sq_dist, gamma, m)
    return ctx.mean(squared_errors, variance, scale=variance, sd=sd,
                    extra=dict(kernel=target, variance_closed_form=variance, squared_error_sd=sd,
                               **{f"variance_{k}_map": v for k, v in other.items()}))


def _rff_domain():
    return dict(gamma=Choice("γ ∈ {1/2, 2}", (0.5, 2.0)),
                dist=Choice("‖x - y‖ ∈ {0.25, 1, 2}", RFF_DISTANCES),
                m=Choice("m ∈ {4, 16} frequencies", (4, 16)),
                d=Choice("d ∈ {1, 8}", (1, 8)))


def _rff_claims(kind: str) -> list[Claim]:
    words = {"phase": "the random-phase map √(2/m)·cos(Wx + b), b ~ U[0, 2π] (Rahimi & Recht 2007; scikit-learn "
                      "RBFSampler)",
             "paired": "the paired map m^{-1/2}[cos(Wx), sin(Wx)] (Sutherland & Schneider 2015; GPyTorch "
                       "RFFKernel, rfkit's trigonometric features)"}[kind]
    term = {"phase": "1 + k(2Δ)/2 - k(Δ)²", "paired": "(1 + k(2Δ))/2 - k(Δ)²"}[kind]
    grid = tiers(dict(map=[kind], gamma=[0.5, 2.0], dist=list(RFF_DISTANCES), m=[4, 16], d=[1, 8]))
    unbiased = Claim(
        id=f"core.rff.{kind}.unbiased", source=RFF_SOURCES[kind],
        statement=f"Random Fourier features with {words} give an unbiased estimate z(x)ᵀz(y) of the Gaussian "
                  "kernel k(Δ) = exp(-γ‖x - y‖²), W ~ N(0, 2γI)." + RFF_GRID_WORDS,
        kind="expectation", tolerance=0.02, units="absolute bias (the kernel lies in [0, 1])",
        domain=dict(map=Choice(words, (kind,)), **_rff_domain()), cell=_rff_unbiased_cell, grid=grid,
        replicates={"smoke": 40_000, "quick": 100_000, "full": 400_000}, roles=(f"rff.{kind}",), plot_x="dist",
        related={f"core.rff.{kind}.variance": "its variance about this mean"},
        notes=f"Sequential cells with the exact variance ({term})/m of rfkit.theory.rff as the Catoni sequence's "
              "variance bound (non-asymptotic).")
    variance = Claim(
        id=f"core.rff.{kind}.variance", source=RFF_SOURCES[kind],
        statement=f"The estimate of exp(-γ‖Δ‖²) by {words} has variance ({term})/m with m frequencies "
                  "(rfkit.theory.rff: the random phase adds exactly 1/2 per frequency to the paired map's)."
                  + RFF_GRID_WORDS,
        kind="expectation", tolerance=0.1, units="relative error of the variance",
        domain=dict(map=Choice(words, (kind,)), **_rff_domain()), cell=_rff_variance_cell, grid=grid,
        replicates={"smoke": 20_000, "quick": 100_000, "full": 400_000}, roles=(f"rff.{kind}",), plot_x="dist",
        notes="The mean of the squared error (k̂ - k(Δ))² (the mean is known: unbiasedness is its own claim) "
              "against the closed form, with the squared error's exact standard deviation (from the fourth moment, "
              "rfkit.theory.rff.rff_squared_error_sd) as the Catoni sequence's variance bound (non-asymptotic).",
        related={f"core.rff.{kind}.unbiased": "the mean the squared error is taken about"})
    return [unbiased, variance]


RFF_CLAIMS = [c for kind in RFF_MAPS for c in _rff_claims(kind)]

# ------------------------------------------------------------------------------ positive features, large norms


def _positive_opposite_cell(ctx: CellContext):
    r, d, m = ctx.params["norm"], ctx.params["d"], 16
    x, y = controlled_pair(r, r, math.pi, d, ctx.rng)
    fmap = ctx.impl("feature_map.positive", FEATURE_MAPS["positive"])
    omega = gaussian_projection(m, d, rng=ctx.rng, size=ctx.replicates).reshape(-1, d)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        est = kernel_estimates(fmap, x, y, omega, ctx.replicates)
    target = math.exp(float(x @ y))
    return exact_test(est, target, tolerance=ctx.tolerance, scale=target,
                      extra=dict(kernel=target, mean_estimate=float(np.mean(est))))


POSITIVE_OPPOSITE = Claim(
    id="core.features.positive_exact_opposite", source="rfkit.estimators.features.positive_features",
    statement="Positive random features φ(x) = m^{-1/2}exp(Wx - ‖x‖²/2) estimate SM(x, y) = exp(xᵀy) exactly, for "
              "every projection W, when y = -x: every term is exp(ωᵀ(x + y) - (‖x‖² + ‖y‖²)/2) = exp(-‖x‖²); at "
              "‖x‖ ∈ {0.5, 1, 2, 3} and d ∈ {4, 16}, including the large norms where a stabiliser or an additive eps "
              "would bias it.",
    kind="identity", tolerance=0.01, units="relative error",
    domain=dict(norm=Choice("‖x‖ ∈ {0.5, 1, 2, 3}", (0.5, 1.0, 2.0, 3.0)), d=Choice("d ∈ {4, 16}", (4, 16))),
    cell=_positive_opposite_cell, grid=tiers(dict(norm=[0.5, 1.0, 2.0, 3.0], d=[4, 16])),
    replicates=tiers(200, smoke=50), roles=("feature_map.positive",), plot_x="norm",
    notes="An identity per projection draw (m = 16 Gaussian rows): each draw is compared with exp(-‖x‖²) to a 1% "
          "relative tolerance, far above round-off; a map that adds eps·m^{-1/2} to its features (performer-pytorch's "
          "softmax_kernel) misses it once eps·exp(shift) is comparable to the features.",
)

# ----------------------------------------------------------------------------- FAVOR+ with a given projection

FAVOR_D, FAVOR_M = 16, 32


def rfkit_favor_fixed(q, k, v, *, omega, causal: bool) -> np.ndarray:
    """rfkit's FAVOR+ (positive features, inputs scaled by ``d^{-1/4}``) with the projection ``omega``."""
    return favor_attention(q, k, v, omega=omega, causal=causal)


def _favor_inputs(ctx: CellContext, length: int, sigma: float):
    rng = ctx.rng
    omega = orthogonal_projection(FAVOR_M, FAVOR_D, rng=rng)
    q, k = sigma * rng.normal(size=(2, length, FAVOR_D))
    v = rng.normal(size=(length, 4))
    return q, k, v, omega


def _favor_exact_cell(ctx: CellContext):
    causal = ctx.params["direction"] == "causal"
    q, k, v, omega = _favor_inputs(ctx, ctx.params["L"], ctx.params["sigma"])
    scale = FAVOR_D ** -0.25
    qf, kf = positive_features(q * scale, omega), positive_features(k * scale, omega)
    want = linear_attention_quadratic(qf, kf, v, causal=causal)
    attend = ctx.impl("favor.fixed_projection", rfkit_favor_fixed)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        got = np.asarray(attend(q, k, v, omega=omega, causal=causal), dtype=np.float64)
    return exact_test(got, want, tolerance=ctx.tolerance, scale=condition_scale(qf, kf, v, want, causal))


FAVOR_EXACT = Claim(
    id="core.favor.exact_given_projection", source="rfkit.estimators.favor.favor_attention",
    statement="FAVOR+ attention with a given projection W is the plug-in ratio D̂⁻¹(Q'K'ᵀ ⊙ mask)V of the unbiased "
              "positive features Q' = φ(d^{-1/4}Q), K' = φ(d^{-1/4}K) (Performer Algorithm 1, Eq 7), "
              "bidirectional and causal, to round-off: stabilisers may rescale features but must cancel (at "
              "L ∈ {1, 16, 128}, σ ∈ {0.35, 1}).",
    kind="identity", tolerance=1e-9, units="condition-scaled error",
    domain=dict(direction=Choice("bidirectional and causal", ("bidirectional", "causal")),
                L=Choice("L ∈ {1, 16, 128}", (1, 16, 128)),
                sigma=Choice("q, k ~ N(0, σ²I) with σ ∈ {0.35, 1} (‖d^{-1/4}q‖ ≈ 0.7 and 2)", (0.35, 1.0))),
    cell=_favor_exact_cell,
    grid=tiers(dict(direction=["bidirectional", "causal"], L=[1, 16, 128], sigma=[0.35, 1.0])),
    roles=("favor.fixed_projection",), plot_x="L",
    related={"core.favor.float32_forward_error": "the same computation in float32 against this one in float64"},
    notes="The reference is rfkit's positive_features and the quadratic oracle linear_attention_quadratic; the error "
          "is scaled per entry by the condition magnitude (Σ|Â||v| + |out|Σ|Â|)/|D̂| as in "
          "core.linear_attention.exact.",
)


def _favor_leak_cell(ctx: CellContext):
    length, t, sigma = ctx.params["L"], ctx.params["t"], 0.35
    q, k, v, omega = _favor_inputs(ctx, length, sigma)
    scale = {"normal": 1.0, "large": 5.0}[ctx.params["future"]]
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    rest = length - t - 1
    q2[t + 1:], k2[t + 1:] = scale * sigma * ctx.rng.normal(size=(2, rest, FAVOR_D))
    v2[t + 1:] = ctx.rng.normal(size=(rest, v.shape[1]))
    attend = ctx.impl("favor.fixed_projection", rfkit_favor_fixed)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        a = np.asarray(attend(q, k, v, omega=omega, causal=True), dtype=np.float64)
        b = np.asarray(attend(q2, k2, v2, omega=omega, causal=True), dtype=np.float64)
    ref = float(np.abs(a[: t + 1]).max())
    return exact_test(b[: t + 1], a[: t + 1], tolerance=ctx.tolerance, scale=max(ref, np.finfo(float).tiny))


FAVOR_NO_LEAK = Claim(
    id="core.favor.no_future_leak", source="rfkit.estimators.favor.favor_attention",
    statement="Causal FAVOR+ outputs up to position t do not change when the tokens after t change (features, "
              "stabilisers and renormalisers use past and present tokens only), including future tokens of larger "
              "norm (at L ∈ {2, 64}, t ∈ {0, 31}).",
    kind="identity", tolerance=1e-12, units="relative change",
    domain=dict(L=Choice("L ∈ {2, 64}", (2, 64)), t=Choice("t ∈ {0, 31}", (0, 31)),
                future=Choice("future tokens redrawn at the same or 5x the scale", ("normal", "large"))),
    cell=_favor_leak_cell,
    grid=tiers(dict(L=[2, 64], t=[0, 31], future=["normal", "large"])),
    where=lambda p, v: p["t"] < p["L"] - 1,
    roles=("favor.fixed_projection",), plot_x="t",
    notes="The same property as core.causal.no_future_leak, here of the whole FAVOR+ pipeline (features from raw "
          "inputs): a key stabiliser taken over all keys of the sequence breaks it.",
)

# ------------------------------------------------------------------------ FAVOR+ in float32 (forward error)

#: The error, in bounds, that a non-finite float32 output counts as where the float64 output is finite.
FLOAT32_LOST_ERROR = 1e30


def rfkit_favor_fixed_float32(q, k, v, *, omega, causal: bool) -> np.ndarray:
    """rfkit's FAVOR+ with the projection ``omega``, computed in float32 (``favor_attention(dtype=np.float32)``)."""
    return favor_attention(q, k, v, omega=omega, causal=causal, dtype=np.float32)


def _favor_float32_cell(ctx: CellContext):
    causal = ctx.params["direction"] == "causal"
    q, k, v, omega = (a.astype(np.float32) for a in _favor_inputs(ctx, ctx.params["L"], ctx.params["sigma"]))
    wide = [a.astype(np.float64) for a in (q, k, v, omega)]  # the same (float32-representable) values
    attend64 = ctx.impl("favor.fixed_projection", rfkit_favor_fixed)
    attend32 = ctx.impl("favor.fixed_projection.float32", rfkit_favor_fixed_float32)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = np.asarray(attend64(*wide[:3], omega=wide[3], causal=causal), dtype=np.float64)
        got32 = np.asarray(attend32(q, k, v, omega=omega, causal=causal))
    scale = FAVOR_D ** -0.25
    x = np.concatenate([wide[0], wide[1]]) * scale
    bound = favor_float32_bound(x, wide[3], ctx.params["L"])
    qf, kf = positive_features(wide[0] * scale, wide[3]), positive_features(wide[1] * scale, wide[3])
    allowed = bound * condition_scale(qf, kf, wide[2], want, causal)
    got = got32.astype(np.float64)
    lost = ~np.isfinite(got) & np.isfinite(want)  # overflow, or underflow to 0/0, that float64 does not have
    got = np.where(lost, want + FLOAT32_LOST_ERROR * allowed, got)
    return exact_test(got, want, tolerance=ctx.tolerance, scale=allowed,
                      extra=dict(bound=bound, output_dtype=str(got32.dtype), n_nonfinite_float32=int(lost.sum()),
                                 max_norm=float(np.sqrt((x * x).sum(axis=-1)).max())))


FAVOR_FLOAT32 = Claim(
    id="core.favor.float32_forward_error", source="Higham (2002), Accuracy and Stability of Numerical Algorithms, "
    "§3.1-3.4 (γ_n bounds); rfkit.estimators.favor.favor_attention(dtype=np.float32)",
    statement="FAVOR+ attention with a given projection computed in float32 agrees with the same computation in "
              "float64 on the same inputs within the first-order worst-case forward-error bound η = γ_{L+m+3} + "
              "2ε_φ (u = 2^-24, γ_n = nu/(1 - nu), ε_φ = 2u + γ_{d+4}(2 max|ω|ᵀ|x| + ‖x‖²/2) the features' exp "
              "error) on the condition-scaled error, bidirectional and causal, at L ∈ {16, 1024} and input scales "
              "σ ∈ {0.35, 1, 4, 8} (large norms, where exp needs its stabiliser), with no overflow or underflow to "
              "0/0.",
    kind="identity", tolerance=1.0, units="condition-scaled error / η (the bound)",
    domain=dict(direction=Choice("bidirectional and causal", ("bidirectional", "causal")),
                L=Choice("L ∈ {16, 1024}", (16, 1024)),
                sigma=Choice("q, k ~ N(0, σ²I) with σ ∈ {0.35, 1, 4, 8} (‖d^{-1/4}q‖ ≈ 0.7, 2, 8 and 16)",
                             (0.35, 1.0, 4.0, 8.0))),
    cell=_favor_float32_cell,
    grid=tiers(dict(direction=["bidirectional", "causal"], L=[16, 1024], sigma=[0.35, 1.0, 4.0, 8.0])),
    roles=("favor.fixed_projection", "favor.fixed_projection.float32"), plot_x="sigma",
    related={"core.favor.exact_given_projection": "the float64 computation's exactness (this compares float32 "
                                                  "with it)"},
    notes="Inputs and projection are rounded to float32 first; the float64 reference is the same role's float64 "
          "computation on those values (so this measures float32 behaviour, not exactness). The error is scaled per "
          "entry by η times the condition magnitude (Σ|Â||v| + |out|Σ|Â|)/|D̂| (rfkit's positive features of the "
          "same inputs); tolerance 1 is the worst-case bound itself (rfkit's float32 sits at ~1% of it: typical "
          "errors grow as √n·u, not n·u, Higham & Mary 2019). A non-finite float32 output where float64 is finite "
          "counts as an error of 10^30 bounds (FLOAT32_LOST_ERROR). At σ = 8 the unstabilised exp(ωᵀx - ‖x‖²/2) "
          "underflows in float32.",
)

# ------------------------------------------------------------------------------ polynomial kernel sketches


def _poly_unbiased_cell(ctx: CellContext):
    gamma, degree, coef0, m, d = 0.5, ctx.params["degree"], ctx.params["coef0"], 64, 8
    x, y = controlled_pair(1.0, 1.2, ctx.params["angle"], d, ctx.rng)
    target = (gamma * float(x @ y) + coef0) ** degree
    sketch = ctx.impl("poly_sketch", polynomial_maclaurin_features)

    def draw(rng, n):
        z = np.asarray(sketch(np.stack([x, y]), gamma=gamma, degree=degree, coef0=coef0, m=m, rng=rng, size=n),
                       dtype=np.float64)
        return np.einsum("sr,sr->s", z[:, 0], z[:, 1])

    scale = (gamma * float(np.linalg.norm(x) * np.linalg.norm(y)) + coef0) ** degree
    return ctx.mean(draw, target, scale=scale, extra=dict(kernel=target))


POLY_UNBIASED = Claim(
    id="core.poly.sketch_unbiased",
    source="Kar & Karnick (2012) Sec 4; scikit-learn PolynomialCountSketch (Pham & Pagh 2013)",
    statement="A random sketch of the polynomial kernel k(x, y) = (γ xᵀy + c)^p (random Maclaurin features, "
              "TensorSketch / scikit-learn PolynomialCountSketch) is unbiased: E z(x)ᵀz(y) = k(x, y), at p ∈ "
              "{2, 3}, c ∈ {0, 1} and two angles (d = 8, γ = 1/2, m = 64).",
    kind="expectation", tolerance=0.05, units="bias relative to (γ‖x‖‖y‖ + c)^p",
    domain=dict(degree=Choice("p ∈ {2, 3}", (2, 3)), coef0=Choice("c ∈ {0, 1}", (0.0, 1.0)),
                angle=Choice("x, y at the angles π/3 and 2π/3 (‖x‖ = 1, ‖y‖ = 1.2, d = 8, γ = 1/2, m = 64)",
                             (math.pi / 3, 2 * math.pi / 3))),
    cell=_poly_unbiased_cell,
    grid=tiers(dict(degree=[2, 3], coef0=[0.0, 1.0], angle=[math.pi / 3, 2 * math.pi / 3])),
    replicates={"smoke": 4_000, "quick": 20_000, "full": 100_000}, roles=("poly_sketch",), plot_x="angle",
    notes="Asymptotic (CLT) sequential cells; the bias is measured on the scale of the kernel's largest value at "
          "these norms, (γ‖x‖‖y‖ + c)^p, since xᵀy < 0 makes the kernel itself small.",
)
