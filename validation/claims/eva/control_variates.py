r"""``eva.*`` statistical claims of control variates (EVA §2-3, App B, Lemma 3, Prop 1-2, App G.2).

Expectation and moment claims are Monte Carlo over independent sample sets ``ω ~ N(μ, τ²I)`` of one query
(the register's standard sweep, :mod:`.inputs`), evaluated by :func:`rfkit.estimators.eva.control_variate_terms`
(``g_m``, ``h_m``, ``g``, ``h``, ``β̂`` with the exact ``log Z``) and compared with the exact moments of
:mod:`rfkit.theory.eva`; cells are sized from those moments (:func:`~rfkit.validation.stats.required_replicates`)
and capped by the tier's replicate count (cells above the cap stay underpowered and say so). Vector-valued means
are tested coordinate by coordinate (Bonferroni inside the cell). The weighted kernel terms are log-normal-like
(skewness ``(e^{σ²} + 2)√(e^{σ²} - 1)`` with ``σ² = ‖q + k_m - μ‖²``), so Monte Carlo cells of the smoke and quick
tiers use input spreads ``s <= 0.3`` where the means are nearly normal; the full tier adds the register's larger
spreads, where cells may stay underpowered (the closed-form parts of the claims cover every spread).

Rate claims about S → ∞ (Eq 21 here, Eq 27 in :mod:`.practical`) meet SNIS's slow approach to its 1/S regime
(``S·MSE`` reaches 0.9 of its limit only at ``S ~ 1e4..1e15`` for the heavier quick-tier weights): where the
samples' relevant subspace has dimension <= 4, :func:`exact_rate_cell` computes the exact finite-S MSE by
quadrature (:func:`rfkit.theory.eva.snis_finite_mse`), tests that the implementation's Monte Carlo MSE decays at
least as fast as it on the simulated sizes, and takes the asymptotic slope from the exact curve. The finite-S bias
(App B.2) is tested along its exact direction (:func:`rfkit.theory.eva.snis_finite_bias`) with antithetic pairs
``μ ± x``.

Optimality and inequality claims with closed forms (Eq 20, App B.1, Prop 1, Lemma 3, Prop 2, §4.1) are exact
margins on grid cells plus an adversarial search (:func:`~rfkit.validation.search.minimize_margin`) over the
stated domain: inputs, proposal means, weights, coefficients and (through an integer axis) every set partition
of a small index set. Search budgets (Nelder-Mead iterations after the corner scan) are small in smoke/quick and
the full tier runs 20 restarts. Argmin claims compare the claimed minimiser with a numerical minimiser of the
closed form.

Tolerances (fixed from the claims' meaning, before any run):

* :data:`VALUE_TOL` — a bias of 2% of the typical value coordinate in an attention output;
* :data:`RELATIVE_TOL` — 2% relative bias of a positive mean (kernel, ``h``, ``h_m``);
* :data:`MOMENT_TOL` — 10% relative error of a second moment or an asymptotic constant;
* :data:`ALGEBRA_TOL` — ``1e-9`` relative: closed-form margins and argmins are round-off exact, anything larger
  is a counterexample;
* :data:`SLOPE_TOL` — 0.25 on log-log slopes (rates and costs).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import numpy as np
from scipy import optimize

from rfkit.base.numerics import gauss_hermite_rule, logsumexp
from rfkit.estimators import proposals as proposals_est
from rfkit.estimators import softmax_attention
from rfkit.estimators.control_variates import control_variate_estimate, optimal_coefficient
from rfkit.estimators.eva import (
    EXACT,
    PARTITION_LAYOUTS,
    GaussianProposal,
    contiguous_labels,
    control_variate_family,
    control_variate_terms,
    eva_ideal,
    exact_set,
    log_xi,
    partition_labels,
    rfa_attention,
    token_coefficients,
)
from rfkit.estimators.lara import lara_attention, lara_proposals
from rfkit.estimators.mis import cross_log_density, mis_weights
from rfkit.theory import eva as theory
from rfkit.validation.claims.eva.inputs import MEANS, attention_inputs, proposal_mean
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.harness import chunks, controlled_pair
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.opcount import exp_evaluations
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import (
    MIN_SLOPE_POINTS,
    Evidence,
    combine,
    exact_test,
    flagged,
    mean_test,
    required_replicates,
    slope_test,
    undecided,
)
from rfkit.validation.timing import LOAD_BEST_OF, count_slope_test, geometric_sizes, peak_bytes, timing_slope_test

VALUE_TOL = 0.02
VALUE_UNITS = "bias per output coordinate / RMS value coordinate"
RELATIVE_TOL = 0.02
MOMENT_TOL = 0.1
ALGEBRA_TOL = 1e-9
SLOPE_TOL = 0.25
#: Fewest replicates of a sized Monte Carlo cell (batch means need a few thousand).
MIN_REPLICATES = 4_000
#: Doubles of ``log λ`` held at once while drawing replicates (bounds memory).
BATCH_ENTRIES = 2_000_000
#: Largest sample count of a rate cell (the register's sweep); cells whose asymptotic regime lies beyond it get
#: fewer than 3 distinct sizes and stay inconclusive.
MAX_SAMPLES = 4096
_TINY = np.finfo(float).tiny

# ------------------------------------------------------------------------------- shared domain axes

#: ``ρ = N(μ, I)`` with the register's proposal means (SW): 0, q_n + mean_m k_m, q_n + k_1 (the boundary μ = u_1
#: where Var[h_1] = 0), random N(0, I) and far (‖μ‖ = 3).
MU_AXIS = Choice("any proposal ρ = N(μ, I): the register's means 0, q_n + mean k, q_n + k_1, random, far", MEANS)


def _s_axis(words: str = "any S") -> Integers:
    return Integers(f"{words}: S iid draws ω_s", 1, math.inf, points=(1,), up_to=8,
                    why="the closed forms scale every (co)variance by 1/S for every coefficient: the optimum and "
                        "the sign of a variance difference do not depend on S (S to 64 at the full tier)")


def _d_axis(words: str = "any q_n, k_m ∈ R^d", up_to: int = 8, why: str = "") -> Integers:
    return Integers(words, 1, math.inf, points=(1,), up_to=up_to,
                    why=why or "the moments depend on q_n, K, μ only through the Gram matrix of the M = 8 vectors "
                               "q_n + k_m - μ, which every d >= M realises (d to 16 at the full tier)")


#: ``q_n, K, V`` arbitrary: covered by the claim's adversarial search (``searched=("qkv",)``).
QKV_AXIS = Range("any q_n, K, V: scale of the inputs (the adversarial search explores q_n, K, V and μ over a box; "
                 "the grid adds the register's generators)", 0.0, math.inf, up_to=(None, 1.0),
                 why="the register's G-iid spreads (covered by the search)")

# ------------------------------------------------------------------------------------------ inputs


def _inputs(ctx: CellContext, n: int = 1):
    p = ctx.params
    return attention_inputs(p.get("inputs", "iid"), n, p.get("M", 8), p.get("d", 4), p.get("dv", 2), ctx.rng,
                            scale=p.get("s", 0.5), values=p.get("values", "iid"))


def _mean_vector(ctx: CellContext, q, k) -> np.ndarray:
    return proposal_mean(ctx.params.get("mu", "zero"), q, k, ctx.rng)


def _value_scale(v) -> float:
    """RMS value coordinate: the natural unit of an attention output's error."""
    return max(float(np.sqrt(np.mean(np.asarray(v) ** 2))), 1e-12)


def _sized(ctx: CellContext, rel_sd: float, two_sided: bool = True, skewness: float | None = None,
           alpha: float | None = None, resolution: float = 0.5) -> int:
    """Replicates for a resolution of half the tolerance and, given the exact skewness, for the normal
    approximation to hold (exact moments; 20% margin), capped by the tier."""
    test = dict(ctx.test, alpha=ctx.alpha if alpha is None else alpha)
    need = required_replicates(rel_sd, alternative="two-sided" if two_sided else "greater", skewness=skewness,
                               resolution=resolution, **test)
    if not math.isfinite(need):
        return ctx.replicates
    return int(min(ctx.replicates, max(MIN_REPLICATES, math.ceil(1.2 * need))))


def _terms(ctx: CellContext, q, k, v, omega, log_ratio):
    return ctx.impl("control_variate_terms", control_variate_terms)(q, k, v, omega=omega, log_ratio=log_ratio)


def _replicated_terms(ctx: CellContext, q, k, v, proposal: GaussianProposal, num_samples: int, replicates: int):
    """Yield :class:`ControlVariateTerms` for batches of independent sample sets ``(R, S, d)``."""
    per_batch = max(1, BATCH_ENTRIES // (num_samples * k.shape[0] * q.shape[0]))
    for n in chunks(replicates, per_batch):
        omega = proposal.sample(ctx.rng, n * num_samples).reshape(n, num_samples, -1)
        yield _terms(ctx, q, k, v, omega, proposals_est.log_ratio(proposal, omega))


def _collect(ctx, q, k, v, proposal, num_samples, replicates, fn) -> np.ndarray:
    """``fn(terms)`` over all replicate batches, concatenated along the replicate axis."""
    return np.concatenate([fn(t) for t in _replicated_terms(ctx, q, k, v, proposal, num_samples, replicates)])


def _batched(draw, entries: int):
    """``draw(rng, n)`` in batches of at most :data:`BATCH_ENTRIES` / ``entries`` replicates (``entries``: the numbers
    one replicate holds in its largest intermediate), concatenated: a sequential cell's late rounds and the engine's
    extensions ask for tens of millions of replicates at once (the eva full tier's E[Y] cells at d = 64 reached 21 GB
    in one call, and the kernel killed the worker)."""
    per_batch = max(1, BATCH_ENTRIES // max(entries, 1))

    def batched(rng, n):
        return np.concatenate([draw(rng, size) for size in chunks(n, per_batch)])

    return batched


def _terms_draw(ctx: CellContext, q, k, v, proposal: GaussianProposal, num_samples: int, fn):
    """``draw(rng, n)`` for a sequential cell: ``fn(terms)`` of ``n`` independent sample sets (batched)."""
    per_batch = max(1, BATCH_ENTRIES // (num_samples * k.shape[0] * q.shape[0]))

    def draw(rng, n):
        out = []
        for size in chunks(n, per_batch):
            omega = proposal.sample(rng, size * num_samples).reshape(size, num_samples, -1)
            out.append(fn(_terms(ctx, q, k, v, omega, proposals_est.log_ratio(proposal, omega))))
        return np.concatenate(out)

    return draw


def _vector_mean_test(ctx: CellContext, samples, target, *, scale: float, sd=None, extra=None, alpha=None):
    """Coordinate-wise mean tests of ``(R, p)`` samples at ``alpha/p`` (default ``ctx.alpha``), combined
    (Bonferroni)."""
    samples, target = np.atleast_2d(samples), np.atleast_1d(target)
    dims = samples.shape[1]
    test = dict(ctx.test, alpha=(ctx.alpha if alpha is None else alpha) / dims)
    parts = [mean_test(samples[:, j], float(target[j]), scale=scale,
                       sd=None if sd is None else float(sd[j]), **test) for j in range(dims)]
    return combine(parts, extra=extra)


def _softmax(q, k, v) -> np.ndarray:
    return softmax_attention(q, k, v, scale=1.0)


#: Gauss-Hermite nodes of the exact (quadrature) routes in all (at most 60 per axis: 60, 60, 40, 16 for rank 1-4;
#: the integrand is a sum of exp(z·a_m) with ‖a_m‖ <= ~5, whose rule error is far below the tolerance).
RATIO_GH_POINTS = 64_000
#: Largest span rank of a tensor rule: at rank 8 the same budget leaves 4 nodes an axis (exact for polynomials of
#: degree 7 only), and Eq 5's "exact" route came out 0.15-0.31 off a true identity at the full tier's d = 8, s >= 0.5.
GH_MAX_RANK = 4


#: Largest relative error of an axis's rule on ``E[exp(c z)] = exp(c²/2)`` at the integrand's steepest exponent ``c``
#: for the rule to count as exact: a hundredth of the smallest tolerance these routes judge (0.02). The quick tier's
#: steepest case (far μ, M = d = 4, second moments: c = 6.7, 30 nodes an axis) has 1.5e-5, and its moments agree with
#: the closed forms to 1.4e-5.
GH_EXACT = 2e-4


class QuadratureOutOfReach(ValueError):
    """The Gauss-Hermite rule of an exact route is not exact at these inputs."""


def _beyond_exact_route(exc: QuadratureOutOfReach) -> Evidence:
    return undecided(f"beyond the exact route: {exc}; a rule centred on the integrand's mass (or of more nodes) "
                     f"would decide it")


def _span_rule(directions, points: int, degree: int | None = 1):
    """``(basis, z, w)``: an orthonormal basis ``(r, d)`` of ``span(directions)`` and a Gauss-Hermite tensor rule on it
    (``points`` nodes in all, at most 60 an axis), for integrands that are sums of ``exp(z·a)`` with ``a`` a sum of
    ``degree`` directions (1 for means, 2 for second moments; ``None``: another integrand, not checked).

    Refuses (:class:`QuadratureOutOfReach`) a rank above :data:`GH_MAX_RANK`, and inputs whose steepest exponent
    ``c = degree·max‖a_m‖`` the axis rule integrates with a relative error above :data:`GH_EXACT` (the full tier's
    far mean at s = 1: ‖a‖ ≈ 5 puts the mass of exp(2‖a‖z) at z ≈ 10, the edge of 60 nodes, and var_h came out 0.22
    off its closed form)."""
    directions = np.atleast_2d(directions)
    _, sv, vt = np.linalg.svd(directions, full_matrices=False)
    basis = vt[sv > 1e-12 * max(float(sv.max(initial=0.0)), 1.0)]
    rank = basis.shape[0]
    if rank > GH_MAX_RANK:
        raise QuadratureOutOfReach(f"the quadrature route needs a span of rank <= {GH_MAX_RANK}, got {rank} "
                                   f"({round(points ** (1 / rank))} nodes an axis would not be exact)")
    if not rank:
        return basis, None, np.ones(1)
    nodes = min(60, round(points ** (1 / rank)))
    steepest = 0.0 if degree is None else degree * float(np.linalg.norm(directions, axis=1).max())
    z1, w1 = gauss_hermite_rule(nodes)
    error = abs(float(w1 @ np.exp(steepest * z1[:, 0] - steepest**2 / 2)) - 1.0)
    if not error <= GH_EXACT:
        raise QuadratureOutOfReach(f"the quadrature rule ({nodes} nodes an axis) integrates exp(c·z) at the steepest "
                                   f"exponent c = {steepest:.3g} with relative error {error:.2g} > {GH_EXACT:g}")
    z, w = gauss_hermite_rule(nodes, d=rank)
    return basis, z, w


def _quadrature_terms(ctx: CellContext, q, k, v, mu, points: int = RATIO_GH_POINTS, degree: int = 1):
    """``(terms, w)``: the implementation's :class:`ControlVariateTerms` (S = 1) at the nodes of a Gauss-Hermite rule
    for ``ω ~ N(μ, I)``, and the rule's weights, so that ``w @ f(terms)`` is ``E_ρ[f]`` for any ``f`` linear in
    the terms (a mean of S iid terms has the expectation of one term). ``g_m, h_m, g, h`` depend on ``ω`` only
    through its projection on ``span{q_n + k_m - μ}`` (``r(ω)ξ(q_n, ω)ξ(k_m, ω) ∝ exp(ω·(q_n + k_m - μ))``), so a
    tensor rule on that span (rank <= M) is exact up to its truncation, far below the tolerances."""
    basis, z, w = _span_rule(q[0] + k - mu, points, degree)
    omega = (mu[None, :] if z is None else mu + z @ basis)[:, None, :]
    return _terms(ctx, q, k, v, omega, proposals_est.log_ratio(GaussianProposal(mu), omega)), w


def _base_quadrature_terms(ctx: CellContext, q, k, v, mu, tau: float = 1.0, proposal=None):
    """``(terms, w, log r)`` with ``w @ (f(terms) / r) = E_ρ[f]`` (``log r`` at the nodes, computed here) for
    ``ρ = N(μ, τ²I)`` and any ``f`` *linear* in the weighted terms (``h``, ``h_m``, ``g``, ``g_m``): each is ``r(ω)``
    times a function of ``ω·(q_n + k_m)``, so ``E_ρ[f] = E_{N(0,I)}[(ρ/N(0,I)) f]`` and ``(ρ/N(0,I)) f`` depends on
    ``ω`` only through its projection on ``span{q_n + k_m}``: a Gauss-Hermite rule for N(0, I) on that span
    (evaluate ``f/r`` in log form: ``r`` overflows at far nodes when τ < 1). Exact (to the rule's truncation) for
    every μ and τ, heavy-tailed weights included (τ < 1), and for any other ``proposal`` (a Gaussian mixture)."""
    basis, z, w = _span_rule(q[0] + k, RATIO_GH_POINTS, degree=None)   # the ratio ρ/N(0, I) is not on this span
    omega = (np.zeros((1, k.shape[1])) if z is None else z @ basis)[:, None, :]
    log_ratio = proposals_est.log_ratio(GaussianProposal(mu, tau) if proposal is None else proposal, omega)
    return _terms(ctx, q, k, v, omega, log_ratio), w, log_ratio[:, 0]


#: Gauss-Hermite nodes of the one-dimensional per-token rule (exact to round-off for exp(a z), |a| <= 10).
TOKEN_GH_NODES = 80


def _token_quadrature_means(ctx: CellContext, q, k, v, proposal) -> np.ndarray:
    """``E_ρ[h_m]`` for every token, exactly: ``(ρ/N(0,I)) h_m = ξ(q_n, ω)ξ(k_m, ω)/Z`` depends on ``ω`` only
    through ``ω·u_m`` (``u_m = q_n + k_m``), so a one-dimensional Gauss-Hermite rule along ``u_m`` (weights
    ``exp(-log r)`` at the nodes, as :func:`_base_quadrature_terms`) integrates the implementation's ``h_m``,
    whatever d, M and the proposal."""
    z, w = gauss_hermite_rule(TOKEN_GH_NODES)
    out = np.empty(k.shape[0])
    for m, u in enumerate(q[0] + k):
        norm = float(np.linalg.norm(u))
        nodes = (z if norm > 0 else z[:1] * 0.0) @ (u[None] / norm if norm > 0 else np.zeros((1, k.shape[1])))
        weights = w if norm > 0 else np.ones(1)
        omega = nodes[:, None, :]
        log_ratio = proposals_est.log_ratio(proposal, omega)
        log_h = _terms(ctx, q, k, v, omega, log_ratio).log_h_tokens[:, 0, m]   # log form: r(ω) may overflow
        out[m] = weights @ np.exp(log_h - log_ratio[:, 0])
    return out


#: Sample sets on which :func:`_sample_mean_gap` compares an S-sample estimate with its single-draw ones.
LINEARITY_SETS = 64


def _sample_mean_gap(ctx: CellContext, q, k, v, proposal: GaussianProposal, num_samples: int, fn, scale) -> float:
    """Largest ``|fn(S-sample terms) - mean_s fn(terms of ω_s alone)| / scale`` over :data:`LINEARITY_SETS` sample
    sets drawn from ``proposal``: where it is round-off, the implementation's S-sample estimate is the mean of S
    iid single-draw ones at those sets (a deterministic check of an identity at random points), so its expectation
    is the single-draw expectation that a quadrature rule integrates."""
    omega = proposal.sample(ctx.rng, LINEARITY_SETS * num_samples).reshape(LINEARITY_SETS, num_samples, -1)
    joint = np.asarray(fn(_terms(ctx, q, k, v, omega, proposals_est.log_ratio(proposal, omega))))
    single = omega.reshape(-1, 1, omega.shape[-1])
    alone = np.asarray(fn(_terms(ctx, q, k, v, single, proposals_est.log_ratio(proposal, single))))
    alone = alone.reshape(LINEARITY_SETS, num_samples, *alone.shape[1:]).mean(axis=1)
    with np.errstate(invalid="ignore"):
        gap = float(np.max(np.abs(joint - alone))) / scale
    return gap if math.isfinite(gap) else math.inf


def _quadrature_mean(ctx: CellContext, q, k, v, mu, fn, target, scale, extra=None):
    """Exact route of an expectation claim: ``E_ρ[fn(terms)]`` by :func:`_quadrature_terms` against ``target``."""
    try:
        terms, w = _quadrature_terms(ctx, q, k, v, mu)
    except QuadratureOutOfReach as exc:
        return _beyond_exact_route(exc)
    value = np.tensordot(w, np.asarray(fn(terms)), axes=1)
    return exact_test(value, target, tolerance=ctx.tolerance, scale=scale,
                      extra=dict(extra or {}, nodes=int(w.size), value=np.asarray(value).tolist()))


# ----------------------------------------------------------------------- Eq 17: kernel is unbiased


def _eq17_cell(ctx: CellContext):
    p = ctx.params
    d, s_count = p["d"], p["S"]
    x, y = controlled_pair(p["norm"], p["norm"], math.acos(p["cos"]), d, ctx.rng)
    mom = theory.weighted_kernel_moments(x, y, y, np.zeros(d))
    target, sd = mom["mean"], math.sqrt(mom["cov"] / s_count)
    feature = ctx.impl("log_xi", log_xi)
    if p["route"] == "quadrature":  # ξ(x, ω)ξ(y, ω) depends on ω only through ω·(x + y): a 1-D rule along x + y
        u = x + y
        z, w = gauss_hermite_rule(TOKEN_GH_NODES)
        norm = float(np.linalg.norm(u))
        omega = (np.outer(z, u / norm) if norm > 0 else np.zeros((1, d)))[:, None, :]
        w = w if norm > 0 else np.ones(1)
        value = w @ np.exp(feature(x[None], omega) + feature(y[None], omega)).reshape(-1)
        return exact_test(value, target, tolerance=ctx.tolerance, scale=target)
    estimates = []
    for n in chunks(_sized(ctx, sd / target), max(1, BATCH_ENTRIES // s_count)):
        omega = ctx.rng.standard_normal((n, s_count, d))
        estimates.append(np.exp(feature(x[None], omega)[:, 0] + feature(y[None], omega)[:, 0]).mean(axis=1))
    return mean_test(np.concatenate(estimates), target, scale=target, sd=sd, **ctx.test)


EQ17 = Claim(
    id="eva.eq17.kernel_unbiased", source="§2.2; App A, Eq 17 and the Monte Carlo display after it",
    statement="exp(q_n·k_m) = E_{ω~N(0,I)}[ξ(q_n,ω) ξ(k_m,ω)]; hence φ(q_n,ω)ᵀφ(k_m,ω) = (1/S)Σ_s ξ(q_n,ω_s)ξ(k_m,ω_s) "
              "estimates exp(q_n·k_m) without bias.",
    kind="expectation",
    domain=dict(
        d=Integers("any q_n, k_m ∈ R^d (d = 1: parallel pairs only)", 1, math.inf, points=(1,), up_to=16,
                   why="ξ(q,ω)ξ(k,ω)/exp(q·k) = exp(ω·u - ‖u‖²/2), u = q + k: its law depends on q, k only through "
                       "‖u‖ for every d (d to 128 at the full tier)"),
        norm=Range("any q_n, k_m: their norm (equal norms: the relative law depends only on ‖q + k‖, which the "
                   "angle sweeps from 0 to 2‖q‖)", 0.0, math.inf, up_to=(None, 1.0),
                   why="the register's largest norm (‖q + k‖ = 2: relative variance e^4 - 1 = 54 per draw; the "
                       "quadrature route is exact at any norm)"),
        cos=Range("any angle between q_n and k_m: cos from -1 (k = -q) to 1 (k = q)", -1.0, 1.0),
        S=Integers("(1/S)Σ_s over S iid draws ω_s", 1, math.inf, points=(1,), up_to=16,
                   why="a mean of S iid terms has the expectation of one term (64 at the full tier)")),
    tolerance=RELATIVE_TOL, units="relative bias",
    cell=_eq17_cell,
    grid=tiers(dict(route=["quadrature", "monte_carlo"], d=[1, 4, 16], norm=[0.0, 0.3, 0.5, 1.0],
                    cos=[-1.0, 0.0, 1.0], S=[1, 16]),
               smoke=dict(d=[4], norm=[0.5], cos=[0.5, -1.0], S=[1, 8]),
               full=dict(d=[1, 2, 4, 8, 16, 64, 128], norm=[0.0, 0.1, 0.3, 0.5, 1.0], cos=[-1.0, -0.5, 0.0, 0.5, 1.0],
                         S=[1, 4, 64])),
    replicates=tiers(300_000, smoke=60_000, full=10_000_000),
    where=lambda p, v: (p["d"] > 1 or abs(p["cos"]) == 1.0) and (
        p["S"] == 1 if p["route"] == "quadrature" else 0.0 < p["norm"] < 1.0),
    roles=("log_xi",), plot_x="cos",
    notes="Routes: quadrature (S = 1: a mean of S iid terms has the expectation of one term) — ξ(q,ω)ξ(k,ω) depends "
          "on ω only through ω·(q + k), so a one-dimensional Gauss-Hermite rule along q + k evaluates the "
          "implementation's log ξ at its nodes (exact to round-off at every norm); monte_carlo (norms 0.3, 0.5) — "
          "the mean of the implementation's estimate over draws ω ~ N(0, I) (which also tests the sampling), with "
          "the variance of one draw from eva.derived.weighted_kernel_moments (μ = 0): exp(2q·k)(exp(‖q+k‖²) - 1).",
)

# ------------------------------------------------------------ Eq 2: softmax as an expectation


def _eq2_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    y = _softmax(q, k, v)[0]
    scale = _value_scale(v)
    route = ctx.params["route"]
    if route == "quadrature":  # ∫p_n = E_{N(0,I)}[h] and E_{p_n}[f_n] = E_{N(0,I)}[g], both exactly
        try:
            terms, w = _quadrature_terms(ctx, q, k, v, np.zeros(k.shape[1]))
        except QuadratureOutOfReach as exc:
            return _beyond_exact_route(exc)
        mass = w @ np.exp(logsumexp(terms.log_h_tokens[:, 0], axis=-1))
        return combine([exact_test(mass, 1.0, tolerance=ctx.tolerance),
                        exact_test(w @ terms.g[:, 0], y, tolerance=ctx.tolerance, scale=scale)],
                       extra=dict(mass=float(mass), nodes=int(w.size)))
    if route == "exact_sampling":
        w = np.exp(theory.log_softmax_weights(q[0], k))

        @functools.partial(_batched, entries=k.size)
        def draw(rng, n):
            picks = rng.choice(k.shape[0], size=n, p=w / w.sum())
            omega = (q[0] + k[picks] + rng.standard_normal((n, k.shape[1])))[:, None, :]
            return _terms(ctx, q, k, v, omega, np.zeros(omega.shape[:-1])).f[:, 0, 0]

        # f_n(ω) is a convex combination of the values (positive weights, normalised), so each coordinate lies
        # in [min_m v_m, max_m v_m]: a betting sequence; a point range (M = 1: f_n ≡ v_1) is deterministic
        return ctx.mean_vector(draw, y, scale=scale, bounds=(v.min(axis=0), v.max(axis=0)))
    mom = theory.cv_moments(q[0], k, v, np.zeros(k.shape[1]), 1)
    proposal = GaussianProposal(np.zeros(k.shape[1]))
    if route == "normalisation":
        return ctx.mean(_terms_draw(ctx, q, k, v, proposal, 1, lambda t: t.h[:, 0]), 1.0, sd=math.sqrt(mom.var_h))
    sd = np.sqrt(np.diag(mom.var_g))
    return ctx.mean_vector(_terms_draw(ctx, q, k, v, proposal, 1, lambda t: t.g[:, 0]), y, scale=scale,
                                  sd=sd)


def _eq2_where(p, variant) -> bool:
    """Quadrature at every value kind where its rule is exact: d <= 2 at every spread, and M <= 4 keys (a span of
    rank <= 4 in any d) at s <= 1; the Monte Carlo routes at s <= 0.3 on iid and one-hot values, and at d = 8 on
    iid values with s = 0.1, M = 8; past d = 2 the importance-weighted ones (normalisation, importance) only where
    the rule does not reach (M > 4). One-hot values need d_v <= M, values = keys d_v = d."""
    if p["values"] == "one_hot" and p.get("dv", 2) > p["M"] or p["values"] == "keys" and p["d"] != p.get("dv", 2):
        return False
    reach = p["d"] <= 2 or p["M"] <= GH_MAX_RANK and p["s"] <= 1.0
    if p["route"] == "quadrature":
        return reach
    if p["route"] != "exact_sampling" and p["d"] > 2 and reach:
        return False
    if p["d"] == 8:
        return p["s"] == 0.1 and p["values"] == "iid" and p["M"] == 8
    return 0.0 < p["s"] <= 0.3 and p["values"] in ("iid", "one_hot")


EQ2 = Claim(
    id="eva.eq2.softmax_as_expectation", source="§2.2, Eq 2-3",
    statement="SoftmaxAttn(q_n, K, V) = E_{ω~p_n}[f_n(ω)], where p_n is a probability density with normalising "
              "constant Z = Σ_m exp(q_n·k_m).",
    kind="expectation",
    domain=dict(
        d=_d_axis("any q_n, k_m ∈ R^d"),
        M=Integers("any K: M keys (M = 1: f_n ≡ v_1)", 1, math.inf, points=(1,), up_to=8,
                   why="p_n is a mixture of M Gaussians N(q_n + k_m, I): more keys add components of the same form "
                       "(64 at the full tier)"),
        s=Range("any q_n, K: the G-iid spread s (s = 0: q = k = 0, a flat softmax)", 0.0, math.inf,
                up_to=(None, 1.5), why="the register's largest spread"),
        values=Choice("any V: the register's G-values (iid, all equal, one-hot, v_m = k_m, correlated with q·k_m)",
                      ("iid", "equal", "one_hot", "keys", "correlated"))),
    tolerance=VALUE_TOL, units=VALUE_UNITS + " (normalisation: bias of ∫p_n)",
    cell=_eq2_cell,
    grid=tiers(dict(route=["quadrature", "normalisation", "exact_sampling", "importance"], d=[1, 2, 8], M=[1, 8],
                    s=[0.0, 0.1, 0.3, 1.5], values=["iid", "equal", "one_hot", "keys", "correlated"]),
               smoke=dict(d=[2], M=[4], s=[0.3], values=["iid"]),
               full=dict(d=[1, 2, 4, 8, 16], M=[1, 3, 16, 64], s=[0.0, 0.1, 0.3, 0.5, 1.0, 1.5])),
    replicates=tiers(300_000, smoke=60_000, full=2_000_000),
    where=_eq2_where,
    roles=("control_variate_terms",), plot_x="M",
    notes="Routes: quadrature (every value kind; d <= 2 at every spread, and M <= 4 keys at s <= 1 in any d: "
          "span{q_n + k_m} has rank <= 4) — ∫p_n = E_{N(0,I)}[p_n/N(0,I)] = E[h] = 1 and E_{p_n}[f_n] = "
          "E_{N(0,I)}[g] (g = W f_n with the exact Z), both by a Gauss-Hermite rule on that span at whose nodes the "
          "implementation's terms are evaluated (exact to round-off; a rule that is not exact at the steepest "
          "exponent is refused); normalisation — ∫p_n = 1 by Monte Carlo with the exact variance; exact_sampling — "
          "ω drawn exactly from p_n = Σ_m w_m N(u_m, I), the mean of f_n (a convex combination of the values: a "
          "betting sequence on their range); importance — sampling from N(0, I) with the exact Z, the mean of "
          "g = W f_n. The Monte Carlo routes run at s <= 0.3 (log-normal-like weights) and at d = 8 with s = 0.1, "
          "M = 8 (d >= M: every Gram matrix of the q_n + k_m); past d = 2 the importance-weighted ones run where the "
          "rule does not reach (M > 4): at the full tier's d = 16, M = 3, s = 0.3, ∫p_n's Monte Carlo radius was "
          "0.037 > 0.02 after 1.6e7 draws.",
)

# --------------------------------------------------------------------------- Eq 5: CV unbiased


def _fixed_beta(kind: str, v, mom, rng) -> np.ndarray:
    if kind == "zero":
        return np.zeros(v.shape[1])
    if kind == "v1":
        return v[0].copy()
    if kind == "optimal":
        return theory.optimal_cv_coefficient(mom.cov_hg, mom.var_h)
    return rng.normal(size=v.shape[1]) * _value_scale(v)


def _eq5_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu, s_count = _mean_vector(ctx, q, k), ctx.params["S"]
    mom = theory.cv_moments(q[0], k, v, mu, s_count)
    beta = _fixed_beta(ctx.params["beta"], v, mom, ctx.rng)
    sd = np.sqrt(np.maximum(np.diag(theory.cv_variance(mom.var_g, mom.cov_hg, mom.var_h, beta)), 0.0))
    scale = _value_scale(v)
    estimate = ctx.impl("control_variate_estimate", control_variate_estimate)

    def corrected(t):
        return estimate(t.g[:, 0], t.h[:, 0], 1.0, beta)

    if ctx.params["route"] == "quadrature":
        if s_count > 1:
            gap = _sample_mean_gap(ctx, q, k, v, GaussianProposal(mu), s_count, corrected, scale)
            if not gap <= ALGEBRA_TOL:
                return undecided(f"the implementation's S = {s_count} estimate is not the mean of its single-draw "
                                 f"estimates (largest gap {gap:.3g} of the value scale at {LINEARITY_SETS} sample "
                                 "sets), so the single-draw rule does not give its expectation; Monte Carlo would "
                                 "decide it")
        return _quadrature_mean(ctx, q, k, v, mu, corrected, _softmax(q, k, v)[0], scale,
                                extra=dict(beta=beta.tolist(), S=s_count))
    draw = _terms_draw(ctx, q, k, v, GaussianProposal(mu), s_count, corrected)
    return ctx.mean_vector(draw, _softmax(q, k, v)[0], scale=scale, sd=sd, extra=dict(beta=beta.tolist()))


EQ5 = Claim(
    id="eva.eq5.cv_unbiased", source="§2.3, Eq 5; App B.1, Eq 19",
    statement="g̃(ω) = g(ω) - βh(ω) + βE[h(ω)] with scalar h of known mean and constant β satisfies E[g̃] = E[g].",
    kind="expectation",
    domain=dict(
        beta=Choice("any constant β (the register's 0, v_1, random, the optimum of Eq 20)",
                    ("zero", "v1", "random", "optimal")),
        S=Integers("g = (1/S)Σ_s W f_n, h = (1/S)Σ_s W: S iid draws", 1, math.inf, points=(1,), up_to=8,
                   why="a mean of S iid terms has the expectation of one term, which the quadrature route checks of "
                       "the implementation (64 at the full tier)"),
        d=Integers("q_n, k_m ∈ R^d", 1, math.inf, points=(1,), up_to=2,
                   why="E[g̃] - E[g] = -β(E[h] - 1) by linearity whatever d; E[h] = 1 for every d is "
                       "eva.appb2.importance_weight_mean (d to 16 at the full tier)"),
        mu=MU_AXIS),
    tolerance=VALUE_TOL, units=VALUE_UNITS,
    cell=_eq5_cell,
    grid=tiers(dict(route=["quadrature", "monte_carlo"], S=[1, 8], d=[1, 2], mu=list(MEANS), s=[0.3],
                    beta=["zero", "v1", "random", "optimal"]),
               smoke=dict(S=[4], d=[2], mu=["zero", "q+k1"], beta=["zero", "optimal"]),
               full=dict(S=[1, 4, 64], d=[1, 2, 8, 16], s=[0.1, 0.5, 1.0])),
    replicates=tiers(150_000, smoke=60_000, full=2_000_000),
    where=lambda p, v: (p["d"] <= GH_MAX_RANK if p["route"] == "quadrature"
                        else (p["d"] == 2 and p["s"] <= 0.5 or p["d"] > GH_MAX_RANK and p["s"] == 0.1)
                        and p["mu"] in ("zero", "q+mean_k", "q+k1")),
    related={"eva.appb2.importance_weight_mean": "E[h] = 1, the known mean Eq 5 subtracts"},
    roles=("control_variate_estimate", "control_variate_terms"), plot_x="beta",
    notes="E[g] = SoftmaxAttn(q_n) since E_ρ[W f_n] = E_{p_n}[f_n]. Routes: quadrature (every proposal mean and S; "
          "d <= 4, so span{q_n + k_m - μ} has rank <= 4) — E_ρ of the implementation's single-draw g̃ at the nodes of "
          "a Gauss-Hermite rule on that span (exact to round-off; at rank 8 its 4 nodes an axis were 0.15-0.31 off), "
          "and for S > 1 a check that the implementation's S-sample g̃ is the mean of its single-draw ones (to 1e-9 "
          "of the value scale at 64 sample sets), so that its expectation is the one the rule integrates; "
          "monte_carlo (μ ∈ {0, q_n + mean k, q_n + k_1}, d = 2 at s <= 0.5; at the full tier also d = 8, 16 at "
          "s = 0.1, where Ω stays small) — sequential per-coordinate mean tests with the exact sd from cv_variance. "
          "The far and random means (Ω ~ e^9) are beyond Monte Carlo at quick budgets, and so is s = 1 at the full "
          "tier (radius 0.52 at μ = q_n + k_1, S = 4 after 1.6e7 draws): the quadrature route decides those points.",
)

# --------------------------------------------------------------- numerical minimisation helpers


def _numerical_argmin(objective, start: np.ndarray) -> np.ndarray:
    """BFGS minimiser of a smooth objective from ``start`` (an independent route to a closed-form argmin)."""
    res = optimize.minimize(objective, start, method="BFGS", options=dict(gtol=1e-12, maxiter=500))
    return res.x


def _argmin_margin(objective, claimed: np.ndarray, scale: float, rng) -> tuple[float, np.ndarray]:
    """``(objective(best numerical) - objective(claimed)) / scale`` (>= 0 when ``claimed`` is the argmin)."""
    start = claimed + rng.normal(size=claimed.shape) * (1.0 + np.abs(claimed))
    found = _numerical_argmin(objective, start.ravel()).reshape(claimed.shape)
    return (objective(found.ravel()) - objective(claimed.ravel())) / max(scale, _TINY), found


def _gradient_norm(objective, point: np.ndarray) -> float:
    """``‖∇objective(point)‖`` by central differences (exact up to round-off for the quadratics used here)."""
    step = 1e-2 * (1.0 + float(np.abs(point).max(initial=0.0)))
    grad = np.zeros(point.size)
    flat = point.ravel()
    for i in range(flat.size):
        up, down = flat.copy(), flat.copy()
        up[i] += step
        down[i] -= step
        grad[i] = (objective(up) - objective(down)) / (2 * step)
    return float(np.linalg.norm(grad))


def _set_partitions(m: int) -> list[np.ndarray]:
    """Every set partition of ``m`` indices as labels (restricted growth strings)."""
    out = []
    for labels in itertools.product(range(m), repeat=m):
        if labels[0] == 0 and all(labels[i] <= max(labels[:i]) + 1 for i in range(1, m)):
            out.append(np.array(labels))
    return out


PARTITIONS_4 = _set_partitions(4)
PARTITIONS_3 = _set_partitions(3)

# ---------------------------------------------------------------------- Eq 20: optimal coefficient


def _gh_moments(q, k, v, mu, num_samples: int, subset):
    """``(cov_h block, values of the subset, Cov[H, G], Var[H])`` of ``G = Σ_{m∈P} g_m``, ``H = Σ_{m∈P} h_m``."""
    mom = theory.cv_moments(q, k, v, mu, num_samples)
    block = mom.cov_h[np.ix_(subset, subset)]
    return block, v[subset], block.sum(axis=0) @ v[subset], float(block.sum())


def _eq20_objective(q, k, v, mu, subset):
    """``(β ↦ Tr Var[G - βH], Eq 20's β*, Tr Var[G], Σ|Cov[h_m, h_m']|)`` from the closed-form moments; ``None``
    when Var[H] vanishes to round-off (``< 1e-8 Σ|Cov|``: outside the hypothesis Var[H] > 0, where Eq 20's ratio
    is not determined by the moments)."""
    block, vals, cov_hg, var_h = _gh_moments(q, k, v, mu, 1, subset)
    size = float(np.abs(block).sum())
    if not var_h > 1e-8 * size:
        return None

    def trace_var(beta):
        return theory.subset_cv_variance(block, vals, beta)

    return trace_var, theory.optimal_cv_coefficient(cov_hg, var_h), trace_var(np.zeros(vals.shape[1])), size


def _eq20_closed_margin(q, k, v, mu, subset, rng) -> float:
    setup = _eq20_objective(q, k, v, mu, subset)
    if setup is None:
        return 0.0
    trace_var, claimed, scale, _ = setup
    return _argmin_margin(trace_var, claimed, scale, rng)[0]


def _eq20_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu = _mean_vector(ctx, q, k)
    subset = np.arange(k.shape[0]) if ctx.params["source"] == "rfa" else np.arange(max(1, k.shape[0] // 2))
    if ctx.params["route"] == "closed_form":
        return margin_evidence(_eq20_closed_margin(q[0], k, v, mu, subset, ctx.rng), tolerance=ctx.tolerance)
    proposal = GaussianProposal(mu)
    omega = proposal.sample(ctx.rng, 64 * ctx.params["S"]).reshape(64, ctx.params["S"], -1)
    terms = _terms(ctx, q, k[subset], v[subset], omega, proposals_est.log_ratio(proposal, omega))
    g, h = terms.g[:, 0], terms.h[:, 0]

    def sample_trace_var(beta):
        resid = g - np.outer(h, beta)
        return float(np.sum(np.var(resid, axis=0, ddof=1)))

    claimed = ctx.impl("optimal_coefficient", optimal_coefficient)(g, h)
    margin, _ = _argmin_margin(sample_trace_var, claimed, sample_trace_var(np.zeros(v.shape[1])), ctx.rng)
    return margin_evidence(margin, tolerance=ctx.tolerance)


def _eq20_search(ctx: CellContext):
    """Inputs ``q (2)``, ``K (3×2)``, ``V (3×2)``, ``μ (2)`` in a box: the gradient of Tr Var at Eq 20's β* must
    vanish, relative to the round-off magnitude ``Σ|Cov[h_m,h_m']| (‖v_m‖ + ‖β*‖)(‖v_m'‖ + ‖β*‖) / (1 + ‖β*‖)``;
    Var[H] = 0 points are outside the domain."""
    def margin(x):
        v = x[8:14].reshape(3, 2)
        setup = _eq20_objective(x[:2], x[2:8].reshape(3, 2), v, x[14:16], np.arange(3))
        if setup is None:
            return math.inf
        trace_var, claimed, _, size = setup
        spread = 1.0 + np.linalg.norm(claimed) + np.linalg.norm(v, axis=1).max()
        return -_gradient_norm(trace_var, claimed) * (1.0 + np.linalg.norm(claimed)) / max(size * spread**2, _TINY)

    res = minimize_margin(margin, [(-1.0, 1.0)] * 8 + [(-3.0, 3.0)] * 6 + [(-2.0, 2.0)] * 2, rng=ctx.rng,
                          restart=ctx.restart or 0, maxiter=40)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(x=res.x.tolist()))


EQ20_OPTIMAL = Claim(
    id="eva.eq20.optimal_coefficient", source="App B.1, Eq 20",
    statement="β* = argmin_β Tr(Var[g̃(ω)]) = Cov[h(ω), g(ω)] / Var[h(ω)].",
    kind="optimality",
    domain=dict(
        source=Choice("g(ω), h(ω) of §2.3 (RFA, all keys); the register adds the per-subset sums G_c, H_c",
                      ("rfa", "subset")),
        S=_s_axis(), d=_d_axis(), mu=MU_AXIS, qkv=QKV_AXIS),
    searched=("qkv",),
    tolerance=ALGEBRA_TOL, units="(Tr Var at the numerical argmin - at Eq 20's β*) / Tr Var[g]",
    cell=_eq20_cell,
    grid=tiers(dict(route=["closed_form", "sample"], S=[1, 8], d=[1, 8], mu=list(MEANS), source=["rfa", "subset"]),
               smoke=dict(S=[4], d=[4], mu=["zero"]),
               full=dict(S=[1, 8, 64], d=[1, 2, 8, 16], s=[0.1, 0.5, 1.0])),
    search=_eq20_search, restarts=tiers(2, smoke=1, full=20), universal=True,
    roles=("optimal_coefficient", "control_variate_terms"), plot_x="mu",
    notes="Two routes: closed_form — the exact moments of eva.derived.cv_moments, BFGS on Tr Var[g - βh] = "
          "Σ Cov[h_m,h_m'](v_m - β)·(v_m' - β) against Eq 20's β*; sample — the sample moments of 64 draws (the "
          "statement applied to their empirical law), BFGS on the sample Tr Var against the sample Eq 20 "
          "(rfkit.estimators.control_variates.optimal_coefficient). The search attacks the closed form: the "
          "gradient of Tr Var at Eq 20's β* over inputs and proposal means; points where Var[H] vanishes to "
          "round-off are outside the hypothesis Var[h] > 0.",
)

# ---------------------------------------------------------------- App B.1: variance never larger


def _appb1_margin(q, k, v, mu, num_samples: int, reading: str) -> tuple[float, float]:
    """``(margin, Tr Var[g])``: R1 ``Tr Var[g] - Tr Var[g̃(β*)]``, R2 the smallest eigenvalue of the difference.
    ``Var[g̃(β)] = Σ Cov[h_m,h_m'](v_m - β)(v_m' - β)ᵀ`` (formed directly, not through the expansion)."""
    mom = theory.cv_moments(q, k, v, mu, num_samples)
    if not mom.var_h > 0:
        return 0.0, float(np.trace(mom.var_g))
    a = v - theory.optimal_cv_coefficient(mom.cov_hg, mom.var_h)
    gap = mom.var_g - a.T @ mom.cov_h @ a
    margin = float(np.trace(gap)) if reading == "R1" else float(np.linalg.eigvalsh((gap + gap.T) / 2).min())
    return margin, float(np.trace(mom.var_g))


def _appb1_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu, s_count = _mean_vector(ctx, q, k), ctx.params["S"]
    if ctx.params["route"] == "closed_form":
        margin, trace_g = _appb1_margin(q[0], k, v, mu, s_count, ctx.variant)
        return margin_evidence(margin, tolerance=ctx.tolerance, scale=max(trace_g, _TINY))
    trace_g = float(np.trace(theory.cv_moments(q[0], k, v, mu, s_count).var_g))
    proposal = GaussianProposal(mu)
    pilot = _collect(ctx, q, k, v, proposal, s_count, 2_000, lambda t: np.column_stack([t.h[:, 0], t.g[:, 0]]))
    beta = optimal_coefficient(pilot[:, 1:], pilot[:, 0])
    y = _softmax(q, k, v)[0]
    diff = _collect(ctx, q, k, v, proposal, s_count, ctx.replicates,
                    lambda t: np.sum((t.g[:, 0] - y) ** 2, axis=-1)
                    - np.sum((control_variate_estimate(t.g[:, 0], t.h[:, 0], 1.0, beta) - y) ** 2, axis=-1))
    return mean_test(diff, 0.0, alternative="greater", scale=max(trace_g, _TINY), **ctx.test)


def _appb1_where(p, variant) -> bool:
    """Closed forms at every scale but the Monte Carlo route's s = 0.1 (quick: 0.3; full: 0.5, 1; the full tier's
    former s == 0.3 left it without closed-form cells, so reading R2 never ran there); the Monte Carlo route (reading
    R1) on light-tailed inputs only."""
    if p["route"] == "closed_form":
        return p["s"] != 0.1
    return (variant == "R1" and p["mu"] in ("zero", "q+mean_k", "q+k1") and p["s"] == 0.1 and p["d"] == 2
            and p["dv"] == 1 and p["S"] == 1)


def _appb1_search(ctx: CellContext):
    reading = ctx.variant

    def margin(x):
        value, trace_g = _appb1_margin(x[:2], x[2:8].reshape(3, 2), x[8:14].reshape(3, 2), x[14:16], 1, reading)
        return value / max(trace_g, _TINY)

    res = minimize_margin(margin, [(-1.0, 1.0)] * 8 + [(-3.0, 3.0)] * 6 + [(-2.0, 2.0)] * 2, rng=ctx.rng,
                          restart=ctx.restart or 0, maxiter=60)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(x=res.x.tolist()))


APPB1 = Claim(
    id="eva.appb1.variance_never_larger", source="App B.1, sentence after Eq 20",
    statement="With the optimal coefficient β*, the variance of the control-variate estimate is never larger than "
              "the variance of the plain estimator g.",
    kind="inequality",
    domain=dict(S=_s_axis(), d=_d_axis(),
                dv=Integers("g ∈ R^{d_v}: a vector estimate (d_v = 1: the scalar case)", 1, math.inf, points=(1, 2),
                            up_to=3, why="Var[g] - Var[g̃(β*)] = Cov[h,g]Cov[h,g]ᵀ/Var[h] has rank one for every d_v; "
                                         "d_v >= 2 is where the matrix order differs from the trace (8 at full)"),
                mu=MU_AXIS, qkv=QKV_AXIS),
    searched=("qkv",),
    readings={"R1": Reading("Tr Var[g̃(β*)] <= Tr Var[g]: the trace the paper minimises in Eq 20",
                            words="the variance ... never larger (of a vector estimate: its total variance)"),
              "R2": Reading("Var[g] - Var[g̃(β*)] positive semidefinite (smallest eigenvalue; Var := Cov[g, g], "
                            "App B.1)", words="the variance ... never larger (Var[g] a matrix: the Loewner order)")},
    tolerance=RELATIVE_TOL, units="increase of the variance over Var[g] / Tr Var[g]",
    cell=_appb1_cell,
    grid=tiers(dict(route=["closed_form", "monte_carlo"], S=[1, 8], d=[1, 2, 8], dv=[1, 2, 3], mu=list(MEANS),
                    s=[0.1, 0.3]),
               smoke=dict(S=[1], mu=["zero", "q+k1"], s=[0.1, 0.3], d=[2], dv=[1]),
               full=dict(S=[1, 4, 64], d=[1, 2, 8, 16], dv=[1, 2, 3, 8], s=[0.1, 0.5, 1.0],
                         inputs=["iid", "peaked", "clustered"])),
    replicates=tiers(400_000, smoke=60_000, full=2_000_000),
    where=_appb1_where,
    search=_appb1_search, restarts=tiers(2, smoke=1, full=20), universal=True,
    roles=("control_variate_terms",), plot_x="mu",
    notes="Routes: closed_form — Var[g̃(β)] = Σ Cov[h_m,h_m'](v_m - β)(v_m' - β)ᵀ formed directly (not through the "
          "expansion); monte_carlo (reading R1) — paired ‖g - y‖² - ‖g̃ - y‖² with β* estimated on an independent "
          "pilot of 2000 draws (E g = E g̃ = y known exactly), a one-sided mean test: the practical claim with a "
          "finite-sample β̂*. Tolerance: a variance increase of 2% of Tr Var[g] would make 'never larger' wrong in a "
          "way that matters (the closed forms are round-off exact). The Monte Carlo route runs on light-tailed "
          "inputs (s = 0.1, d = 2, d_v = 1, S = 1: the paired squared errors are log-normal-like and flag heavy "
          "tails at s = 0.3), and the far and random proposals (Ω ~ e^9) are left to the closed form.",
)

# ------------------------------------------------------------------ App B.2: E[h] = 1, finite-S bias


def _appb2_mean_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu, tau, s_count = _mean_vector(ctx, q, k), ctx.params["tau"], ctx.params["S"]
    if ctx.params["route"] == "quadrature":  # in log form: r(ω) overflows at far nodes when τ < 1
        terms, w, log_ratio = _base_quadrature_terms(ctx, q, k, v, mu, tau)
        value = w @ np.exp(logsumexp(terms.log_h_tokens[:, 0], axis=-1) - log_ratio)
        return exact_test(value, 1.0, tolerance=ctx.tolerance, extra=dict(nodes=int(w.size)))
    var_h = theory.cv_moments(q[0], k, v, mu, s_count, tau).var_h
    sd = math.sqrt(var_h) if math.isfinite(var_h) else math.inf
    skew = theory.importance_weight_skewness(q[0], k, mu, s_count)[0] if tau == 1.0 else None
    n = _sized(ctx, sd, skewness=skew) if math.isfinite(sd) else MIN_REPLICATES
    h = _collect(ctx, q, k, v, GaussianProposal(mu, tau), s_count, n, lambda t: t.h[:, 0])
    return mean_test(h, 1.0, sd=sd, **ctx.test)


TAU_AXIS = Choice("ω_s iid from ρ = N(μ, τ²I): the register's τ ∈ {0.5, 1, 2} (τ = 0.5: Var[h] infinite)",
                  (0.5, 1.0, 2.0))

APPB2_MEAN = Claim(
    id="eva.appb2.importance_weight_mean", source="App B.2, display after the chain",
    statement="E[h(ω)] = E[(1/S)Σ_s W(ω_s)] = 1.",
    kind="expectation",
    domain=dict(
        S=Integers("(1/S)Σ_s over S iid draws", 1, math.inf, points=(1,), up_to=8,
                   why="a mean of S iid terms has the expectation of one term (64 at the full tier)"),
        d=_d_axis(why="E[h] depends on q_n, K only through the Gram matrix of the q_n + k_m, which every d >= M "
                      "realises (the quadrature's M = 3 keys at d = 8; Monte Carlo with M = 8 at d = 4; d to 16 at "
                      "the full tier)"),
        mu=MU_AXIS, tau=TAU_AXIS),
    tolerance=RELATIVE_TOL, units="bias of E[h] (= relative bias)",
    cell=_appb2_mean_cell,
    grid=tiers(dict(route=["quadrature", "monte_carlo"], S=[1, 8], d=[1, 4, 8], M=[3, 8], mu=list(MEANS),
                    tau=[0.5, 1.0, 2.0], s=[0.3]),
               smoke=dict(S=[1, 8], d=[4], mu=["zero", "q+mean_k"], tau=[1.0]),
               full=dict(S=[1, 4, 64], d=[1, 2, 4, 8, 16], s=[0.1, 0.5, 1.0])),
    replicates=tiers(400_000, smoke=60_000, full=5_000_000),
    # the Monte Carlo route runs at d = 4 (the smoke and quick grids have it; the full grid lacked it, so its S axis
    # was tested at S = 1 only) and at the quick tier's scale s = 0.3 or the full tier's middle one (the quadrature
    # route covers every s)
    where=lambda p, v: (p["S"] == 1 and p["d"] != 4 and p["M"] == 3 if p["route"] == "quadrature"
                        else p["d"] == 4 and p["M"] == 8 and p["tau"] != 0.5
                        and p["mu"] in ("zero", "q+mean_k", "q+k1") and p["s"] in (0.3, 0.5)),
    related={"eva.eq5.cv_unbiased": "the known mean E[h] = 1 that Eq 5's control variate subtracts"},
    roles=("control_variate_terms",), plot_x="mu",
    notes="Routes: quadrature (S = 1: a mean of S iid terms has the expectation of one term; every μ and τ) — "
          "E_ρ[h] = E_{N(0,I)}[(ρ/N(0,I)) h], and (ρ/N(0,I)) h depends on ω only through its projection on "
          "span{q_n + k_m} (rank <= M = 3): a Gauss-Hermite rule there evaluates the implementation's h at the nodes "
          "(exact to round-off, heavy-tailed weights included: τ = 0.5 has Var[h] = ∞, the far and random means "
          "Ω ~ e^9); "
          "monte_carlo (τ ∈ {1, 2}, μ ∈ {0, q_n + mean k, q_n + k_1}, d = 4) — the mean of h with sd from "
          "eva.derived.cv_moments (Var[h] = (Ω - 1)/S) and skewness from importance_weight_skewness (τ = 1), which "
          "also tests the proposal's sampler.",
)


def _bias_direction_samples(ctx, q, k, v, mu, s_count, n):
    """``(β̂ - y)`` samples ``(n, d_v)``."""
    y = _softmax(q, k, v)[0]
    return _collect(ctx, q, k, v, GaussianProposal(mu), s_count, n, lambda t: t.coefficient[:, 0] - y)


def _nonzero_bias_evidence(ctx: CellContext, q, k, v, mu, s_count: int):
    """``z = S (β̂ - y)·u/|b|`` along a unit direction ``u`` fixed before the cell's draws (``b`` from
    eva.derived.snis_asymptotics, the units); the claim "biased" is tested as ``E z > 0``.

    ``u`` is the direction of the exact finite-S bias (:func:`rfkit.theory.eva.snis_finite_bias`, quadrature;
    then ``E z = S‖E β̂ - y‖/|b| > 0`` for every S, and ``→ 1`` as S → ∞) where ``span{q + k_m - μ}`` has rank <= 4,
    else the direction of the mean error on an independent pilot of ``replicates/4`` draws. Not the asymptotic
    direction ``b``: at small S the bias need not point along ``+b`` (S = 1, μ = 0, M = 8: ``E z < 0`` along b,
    which a test of the sign along b would have called a violation of a true claim).

    The test's prediction is put at the tolerance with ``alternative="greater"``: the interval null "violation
    <= tolerance" is then ``E z >= 0`` (refuted by a significantly negative bias along u), and *supported* needs
    the upper bound of ``tolerance - E z`` below the tolerance, i.e. a significantly positive bias.

    Antithetic replicates (variance reduction; the mean is unchanged because ``μ - x`` has the law of ``μ + x``):
    each replicate is ``(z(μ + x) + z(μ - x))/2`` for one draw ``x ~ N(0, I)^S``. The leading fluctuation of ``z``
    is odd in ``x`` (linear in the weights ``W ≈ 1 + (Σ_m w_m a_m)·x`` when ``Ω ≈ 1``), the bias is even, so the pair
    cancels most of the spread exactly where the bias is smallest (|b| = 0.0012 at S = 16, μ = q + mean_k, M = 3:
    50x less variance per evaluation). The replicates stay bounded (``z`` lies in ``S/|b|·[min_m, max_m] (v_m -
    y)·u``), so their tails stay light; a control variate in the weights (``S(g - yh)·u``, mean 0) removes more
    variance but gives the replicates the log-normal tail of ``h`` (Hill tail index < 3: flagged). Sequential cell
    (asymptotic confidence sequence: the finite-S variance of β̂ has no closed form, and the range is too wide
    for a betting sequence)."""
    _, b = theory.snis_asymptotics(q[0], k, v, mu)
    size = max(float(np.linalg.norm(b)), _TINY)
    y = _softmax(q, k, v)[0]
    proposal = GaussianProposal(mu)
    per_batch = max(1, BATCH_ENTRIES // (2 * s_count * k.shape[0]))

    def errors(rng, n):
        out = []
        for m in chunks(n, per_batch):
            x = rng.standard_normal((m, s_count, mu.size))
            pair = [_terms(ctx, q, k, v, mu + sign * x,
                           proposals_est.log_ratio(proposal, mu + sign * x)).coefficient[:, 0] - y
                    for sign in (1.0, -1.0)]
            out.append(0.5 * (pair[0] + pair[1]))
        return np.concatenate(out)

    exact = theory.snis_finite_bias(q[0], k, v, mu, [s_count])[0]
    known = bool(np.isfinite(exact).all())
    if known and np.linalg.norm(exact) > 0:
        direction, source = exact / np.linalg.norm(exact), "exact finite-S bias"
    else:
        pilot = errors(ctx.rng, max(ctx.replicates // 4, 2))
        direction, source = pilot.mean(axis=0) / max(float(np.linalg.norm(pilot.mean(axis=0))), _TINY), "pilot"

    def draw(rng, n):
        return s_count * errors(rng, n) @ direction / size

    return ctx.mean(draw, ctx.tolerance, alternative="greater",
                    extra=dict(b_norm=size, direction=source, exact_bias=exact.tolist() if known else None,
                               predicted=float(s_count * np.linalg.norm(exact) / size) if known else None,
                               antithetic=True))


#: Sample sets of the implementation evaluated at a boundary input (M = 1 or all values equal), where β̂ is the
#: one value for every ω: an identity checked draw by draw.
BOUNDARY_DRAWS = 2_000


def _boundary_input(p) -> bool:
    """The register's boundary inputs of eva.appb2.finite_s_bias: one key (M = 1) or all values equal."""
    return p["M"] == 1 or p["values"] == "equal"


def _boundary_bias_evidence(ctx: CellContext, q, k, v, mu, s_count: int):
    """At a boundary input β̂ = Σ λ_m v_m / Σ λ_m = v for every ω, so E[β̂] = SoftmaxAttn(q_n) exactly: the
    implementation's β̂ on ``BOUNDARY_DRAWS`` sample sets against SoftmaxAttn (round-off, ``ALGEBRA_TOL`` of the RMS
    value), with the exact finite-S bias of the quadrature (rfkit.theory.eva.snis_finite_bias: 0 here).

    Reading ``estimator`` (deciding): the estimator's bias is 0 at these inputs (an identity: supported when the
    implementation is exact). Reading ``per_input`` (beside): "E[SNIS] differs from SoftmaxAttn(q_n)" at this
    input — the strict inequality fails as an equality, scored -1 (no bias at all, as performer.regimes scores
    ``0 < 0``): an exact witness."""
    y = _softmax(q, k, v)[0]
    worst = max(float(np.max(np.abs(t.coefficient[:, 0] - y)))
                for t in _replicated_terms(ctx, q, k, v, GaussianProposal(mu), s_count, BOUNDARY_DRAWS))
    scale = _value_scale(v)
    exact = theory.snis_finite_bias(q[0], k, v, mu, [s_count])[0]
    extra = dict(boundary="M = 1" if k.shape[0] == 1 else "all values equal", max_error=worst / scale,
                 exact_bias=exact.tolist(), draws=BOUNDARY_DRAWS)
    identity = exact_test(worst / scale, 0.0, tolerance=ALGEBRA_TOL, extra=extra)
    if ctx.variant != "per_input" or identity.p_value == 0.0:
        return identity   # a non-exact implementation at the boundary is refuted by the identity in both readings
    return margin_evidence(-1.0, tolerance=ctx.tolerance,
                           extra=dict(extra, reason="E[β̂] - SoftmaxAttn(q_n) = 0 exactly: 'differs' fails as an "
                                                    "equality (scored -1)"))


def _finite_s_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu = _mean_vector(ctx, q, k)
    if _boundary_input(ctx.params):
        return _boundary_bias_evidence(ctx, q, k, v, mu, ctx.params["S"])
    return _nonzero_bias_evidence(ctx, q, k, v, mu, ctx.params["S"])


def _finite_s_where(p, v) -> bool:
    if p.get("values") == "one_hot" and p["M"] < p.get("dv", 2):
        return False
    if p["M"] == 1 and p["values"] != "iid":   # one key: the values' kind makes no difference
        return False
    if _boundary_input(p):   # exact and S-, μ-free: the zero and far means at every S
        return p["mu"] in ("zero", "far")
    # per_input reads the generic inputs as the estimator reading does (the same test): one S, to say where it holds
    return v != "per_input" or p["S"] == 4


APPB2_BIAS = Claim(
    id="eva.appb2.finite_s_bias", source="App B.2 (the SNIS estimate 'is still biased')",
    statement="For finite S, E[g̃(ω)] (= E[SNIS]) differs from SoftmaxAttn(q_n); the difference vanishes as S → ∞.",
    kind="expectation",
    domain=dict(
        S=Integers("for finite S: S iid draws ω_s from ρ", 1, math.inf, points=(1,), up_to=16,
                   why="every finite S of the grid is tested for a nonzero bias; 'vanishes as S → ∞' follows from "
                       "|bias| <= sqrt(MSE) → 0, tested by eva.eq21.coefficient_consistency (S to 128 at the full "
                       "tier)"),
        M=Integers("SoftmaxAttn(q_n) over M keys, the register's boundary input M = 1 included (β̂ = v_1 exactly)",
                   1, math.inf, points=(1, 2), up_to=8,
                   why="the bias is a weighted sum over pairs of tokens (M to 64 at the full tier)"),
        values=Choice("the values v_m: distinct (G-iid) and the register's boundary input 'all values equal' "
                      "(β̂ = v exactly)", ("iid", "equal")),
        mu=MU_AXIS),
    readings={
        "estimator": Reading("the SNIS estimator is biased: E[β̂] ≠ SoftmaxAttn(q_n) (tested > 0 along the exact "
                             "bias direction at every S) at every input where β̂ depends on ω (M >= 2 keys with "
                             "distinct values); at the boundary inputs (M = 1, all values equal) β̂ = v for every "
                             "ω and the bias is exactly 0 (an identity, checked exactly): no estimator of a constant "
                             "is biased, and the statement is about the estimator",
                             words="the SNIS estimate 'is still biased' because β̂ depends on ω (App B.2): a property "
                                   "of the estimator"),
        "per_input": Reading("the literal per-input reading: E[SNIS] differs from SoftmaxAttn(q_n) at every input, "
                             "the boundary inputs M = 1 and all values equal included (there the bias is exactly 0: "
                             "an exact witness; its generic inputs are the estimator reading's test, run at S = 4 "
                             "only, to say where it holds)", beside=True)},
    tolerance=0.25, units="S·bias along the exact bias direction, in units of |b| (claim: > 0); at the boundary "
                          "inputs (b = 0): max |β̂ - SoftmaxAttn| / RMS value (estimator: = 0 to 1e-9), and "
                          "per_input's strict 'differs' scored -1 where the bias is exactly 0",
    cell=_finite_s_cell,
    grid=tiers(dict(S=[1, 4, 16], mu=list(MEANS), M=[1, 2, 3, 8], values=["iid", "equal"]),
               smoke=dict(S=[4], mu=["zero"], M=[1, 8]),
               full=dict(S=[1, 2, 4, 8, 32, 128], d=[2, 8], M=[1, 2, 8, 64], s=[0.3, 0.5, 1.0],
                         values=["iid", "equal", "one_hot", "correlated"])),
    replicates=tiers(40_000, smoke=20_000, full=2_000_000),
    where=_finite_s_where,
    related={"eva.derived.snis_asymptotics": "the S·bias limit of this bias as S grows"},
    roles=("control_variate_terms",), plot_x="S",
    notes="Readings: 'is still biased' is App B.2's remark on the estimator (β̂ depends on ω), so the estimator "
          "reading decides; the literal per-input reading ('differs at every input') is reported beside it and fails "
          "exactly at the register's boundary inputs (M = 1, all values equal), where β̂ = v for every ω. "
          "Finite S: the bias is tested along its exact direction (rfkit.theory.eva.snis_finite_bias, quadrature; "
          "a pilot's mean error where the rank of span{q + k_m - μ} exceeds 4), so a nonzero bias has a positive "
          "component there at every S (the cell is supported if it is significantly positive, refuted if "
          "significantly negative); the asymptotic direction b of eva.derived.snis_asymptotics is not used for "
          "that: at small S the bias may point against it (S = 1, μ = 0, M = 8). Sequential cells of antithetic "
          "pairs (ω = μ ± x): where Ω ≈ 1 the bias is tiny (|b| = 0.0012 at S = 16, μ = q + mean_k, M = 3) and "
          "the pair cancels the odd, leading part of the spread (50x less variance per evaluation there). The size "
          "of the bias is not tested (the exact value is in the cell's extra). Boundary inputs: the implementation's "
          "β̂ on 2000 sample sets against SoftmaxAttn (exact, round-off; S- and μ-free: the zero and far means at "
          "every S). "
          "'Vanishes as S → ∞' follows from |bias| <= sqrt(MSE) and MSE → 0, tested by "
          "eva.eq21.coefficient_consistency (resolving a bias of order b/S directly at S >= 256 needs ~1e6 "
          "replicates per cell).",
)

# ------------------------------------------------------------------ Eq 21: β̂ consistency (rate)


#: The exact MSE's 1/S regime starts at the smallest ladder size from which ``S·MSE(S) >= REGIME_REACHED·σ²_RFA``
#: on the whole ladder (:func:`exact_rate_cell`).
REGIME_REACHED = 0.9
#: The ladder searched for that onset: ``2^(j/2)`` rounded, ``j = 2 .. 2·LADDER_LOG2`` (the quadrature costs the same
#: at any S); its spacing √2 makes the 7 ladder sizes from the onset a rate window.
LADDER_LOG2 = 128
#: Sizes of a rate window: ``RATE_POINTS`` geometric sizes over a factor ``RATE_SPAN``.
RATE_POINTS = 7
RATE_SPAN = 8
#: A rate cell undecided after its planned replicates draws ``EXTRA_FACTOR`` times as many more and is tested again
#: on all of them: two looks, each at half the level of its part (Bonferroni), so the cell's error rates hold.
EXTRA_FACTOR = 4


def rate_window(start: float, points: int = RATE_POINTS, span: float = RATE_SPAN) -> np.ndarray:
    """``points`` geometric sizes from ``start`` over a factor ``span`` (rounded, distinct)."""
    return np.unique(np.round(start * span ** (np.arange(points) / (points - 1))).astype(np.int64))


def _weighted_slope(sizes, values, weights) -> float:
    """Weighted least-squares slope of ``log values`` on ``log sizes``."""
    x, y, w = np.log(np.asarray(sizes, float)), np.log(np.asarray(values, float)), np.asarray(weights, float)
    xm = (w @ x) / w.sum()
    return float((w * (x - xm)) @ (y - (w @ y) / w.sum()) / ((w * (x - xm)) @ (x - xm)))


def _exact_limit(ctx: CellContext, ladder, on_ladder, sigma2: float) -> tuple[Evidence, dict]:
    """Part 2 of :func:`exact_rate_cell`: the slope of the exact MSE over the 7 ladder sizes from the onset of its
    1/S regime, against -1 (a deterministic margin), or a flag when the ladder ends before the onset."""
    reached = ladder * on_ladder / sigma2
    below = np.flatnonzero(reached < REGIME_REACHED)
    last = ladder.size - RATE_POINTS
    if below.size and below[-1] >= last:
        flag = (f"pre-asymptotic beyond the quadrature's ladder: S·MSE/σ²_RFA = {reached[-1]:.2f} at "
                f"S = 2^{LADDER_LOG2}")
        return Evidence(math.nan, -1.0, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, 0,
                        "exact (quadrature)", (flag,), extra=dict(part="exact limit"), validity="exact"), {}
    first = below[-1] + 1 if below.size else 0
    window = slice(first, first + RATE_POINTS)
    slope = _weighted_slope(ladder[window], on_ladder[window], np.ones(RATE_POINTS))
    limit = dataclasses.replace(
        margin_evidence(-(slope + 1.0), tolerance=ctx.tolerance, extra=dict(part="exact limit")),
        assumption="quadrature of the exact finite-S MSE (Gauss–Hermite; slope error ~1e-2)")
    return limit, dict(onset=float(ladder[first]), exact_slope=slope)


def exact_rate_cell(ctx: CellContext, q, k, v, mu, sizes, squared_errors, *, extra: dict | None = None):
    r"""A rate cell for "the SNIS estimate's MSE decays like 1/S" from the exact finite-S MSE (quadrature,
    :func:`rfkit.theory.eva.snis_finite_mse`) and the implementation's Monte Carlo MSE on ``sizes``
    (``squared_errors(S, n)``: ``n`` fresh replicates of ``‖β̂ - β‖²`` with ``S`` samples, drawn from ``ctx.rng``).

    Two parts (Bonferroni), both in the claim's units (log-log slopes):

    1. *The implementation decays at least as fast as the exact MSE on the simulated sizes*: ``slope_test`` of
       ``log(MSE_MC/MSE_exact)`` against 0 (one-sided: a slower decay is the violation; refuted, e.g., by
       importance weights that do not target ``p``, whose MSE stops shrinking). Where the sizes are
       pre-asymptotic (``S·MSE`` still growing towards ``σ²_RFA``) the exact MSE decays slower than 1/S and the
       comparison is with it, not with -1; the ratio also keeps the exact curve's curvature out of the fit's
       lack-of-fit test. Two looks: the planned replicates, then (if undecided) ``EXTRA_FACTOR`` times as many
       more, each look at ``alpha/4`` (two parts, two looks) and the cell's p-value doubled.
    2. *The exact MSE decays like 1/S as S → ∞*: the onset of its regime (the smallest ladder size ``2^(j/2)``,
       rounded, from which ``S·MSE(S) >= REGIME_REACHED·σ²_RFA`` up to ``2^LADDER_LOG2``) and the slope of the
       exact MSE over the 7 ladder sizes from there against -1 (a deterministic margin; the quadrature's slope
       error is about 1e-2). The asymptotic regime is computed where it cannot be simulated (onsets up to
       ``2^50`` in the quick tier at seed 0, ``2^82`` at seed 3), not assumed.

    Returns ``None`` (nothing drawn) where the quadrature is unavailable (``span{q + k_m - μ}`` of rank > 4)."""
    if theory.snis_quadrature_rank(q, k, mu) > theory.SNIS_QUADRATURE_RANK:
        return None
    sizes = np.asarray(sizes, dtype=np.int64)
    ladder = np.round(2.0 ** (np.arange(2, 2 * LADDER_LOG2 + 1) / 2))
    exact = theory.snis_finite_mse(q, k, v, mu, np.concatenate([sizes, ladder]))
    if not np.isfinite(exact).all():
        return None
    sigma2, _ = theory.snis_asymptotics(q, k, v, mu)
    at_sizes = exact[:sizes.size]
    limit, regime = _exact_limit(ctx, ladder, exact[sizes.size:], sigma2)
    extra = dict(extra or {}, S=sizes.tolist(), exact_mse=at_sizes.tolist(),
                 s_mse_over_limit=(sizes * at_sizes / sigma2).tolist(), **regime)
    samples = [squared_errors(int(size), ctx.replicates) for size in sizes]
    for look in (1, 2):
        mse = np.array([x.mean() for x in samples])
        se = np.array([x.std(ddof=1) / math.sqrt(x.size) for x in samples])
        follows = slope_test(sizes, mse / at_sizes, se / at_sizes, 0.0, alternative="less",
                             extra=dict(part="implementation"), **ctx.sub_test(4))
        decided = follows.upper <= ctx.tolerance or follows.p_value <= ctx.alpha / 4 or limit.flags
        if look == 2 or decided:
            break
        samples = [np.concatenate([x, squared_errors(int(size), EXTRA_FACTOR * ctx.replicates)])
                   for x, size in zip(samples, sizes, strict=True)]
    ev = combine([follows, limit], method=f"{follows.method} + exact 1/S regime" + (
        f" from S = {regime['onset']:.3g}" if regime else ""), extra=dict(
        extra, mse=mse.tolist(), looks=look, replicates=int(samples[0].size),
        predicted_slope=_weighted_slope(sizes, at_sizes, (mse / se) ** 2), relative_slope=follows.estimate,
        relative_slope_radius=follows.resolution, **{key: follows.extra.get(key) for key in ("chi2", "inflation")}))
    return dataclasses.replace(ev, p_value=min(1.0, 2.0 * ev.p_value))


def _eq21_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu = _mean_vector(ctx, q, k)
    omega_sq = theory.cv_moments(q[0], k, v, mu, 1).omega_sq
    multiples = omega_sq * np.array(ctx.params["S_over_omega"])
    sizes = np.unique(np.clip(np.round(multiples), 4, MAX_SAMPLES).astype(int))
    if sizes.size < MIN_SLOPE_POINTS:   # Ω so large that the multiples pass the cap: the largest window under it
        sizes = rate_window(MAX_SAMPLES / RATE_SPAN ** 2)

    def squared_errors(s_count, n):
        return np.sum(_bias_direction_samples(ctx, q, k, v, mu, s_count, n) ** 2, axis=-1)

    ev = exact_rate_cell(ctx, q[0], k, v, mu, sizes, squared_errors, extra=dict(omega_sq=omega_sq))
    if ev is not None:
        return ev
    mse, se = [], []
    for s_count in sizes:
        sq = squared_errors(int(s_count), ctx.replicates)
        mse.append(sq.mean())
        se.append(sq.std(ddof=1) / math.sqrt(sq.size))
    sigma2, _ = theory.snis_asymptotics(q[0], k, v, mu)
    reached = float(sizes[-1] * mse[-1] / sigma2) if sigma2 > 0 else math.nan
    ev = slope_test(sizes, mse, se, -1.0, alternative="less",
                    extra=dict(mse=mse, s_mse_over_limit=reached), **ctx.test)
    if not reached >= ASYMPTOTIC_REACHED:
        # Without the exact curve (rank > 4), a rate about S → ∞ is judged only where the sequence is
        # asymptotic: S·MSE at the largest S must have come within 25% of its limit σ²_RFA — a check of the
        # regime, whichever way the slope points.
        ev = flagged(ev, f"pre-asymptotic: S·MSE at S = {int(sizes[-1])} is "
                         f"{reached:.2f} of its limit σ²_RFA; a larger S (beyond {int(sizes[-1])}) would decide it")
    return ev


#: Without the exact curve: the fraction of its limit σ²_RFA that S·MSE must reach at the largest S for the 1/S
#: rate to be judged.
ASYMPTOTIC_REACHED = 0.75


EQ21 = Claim(
    id="eva.eq21.coefficient_consistency", source="App B.2, Eq 21",
    statement="β̂(ω) = g(ω)/h(ω) → E[g]/E[h] = E_{p_n}[f_n(ω)] =: β in probability as S → ∞.",
    kind="rate",
    domain=dict(
        mu=MU_AXIS,
        d=_d_axis(up_to=4, why="d <= 4 keeps span{q_n + k_m - μ} of rank <= 4, where the exact finite-S MSE "
                               "(quadrature) locates the 1/S regime as S → ∞ (up to 2^128); d = 8, 16 at the full "
                               "tier by Monte Carlo, flagged pre-asymptotic where S·MSE has not reached 75% of "
                               "σ²_RFA")),
    tolerance=SLOPE_TOL, units="log-log slope of MSE(S) above -1",
    cell=_eq21_cell,
    grid=tiers(dict(S_over_omega=[(4, 6, 10, 16, 25, 40, 64)], mu=list(MEANS), d=[1, 2, 4], s=[0.3, 0.5]),
               smoke=dict(mu=["zero"], d=[4], s=[0.3]),
               full=dict(S_over_omega=[(4, 6, 10, 16, 25, 40, 64, 101, 161, 256)], d=[1, 2, 4, 8, 16],
                         s=[0.3, 0.5, 1.0])),
    replicates=tiers(1_000, smoke=600, full=20_000),
    related={"eva.derived.snis_asymptotics": "σ²_RFA, the constant of the 1/S rate this tests"},
    roles=("control_variate_terms",), plot_x="mu",
    notes="MSE = E‖β̂ - SoftmaxAttn‖² decays at least like 1/S (slope <= -1 up to the tolerance); convergence in "
          "probability follows from MSE → 0 (Markov). S·MSE against σ²_RFA is eva.derived.snis_asymptotics. "
          "Pre-asymptotically (S not >> Ω = E_ρ[W²]) S·MSE still grows towards σ²_RFA and the slope is flatter "
          "(d = 4, s = 0.5, μ = 0, Ω = 16.9: S·MSE/σ² = 0.54 at S = 1081 = 64Ω, 0.73 at 4096, 0.9 only from "
          "S ≈ 33000), which says nothing about consistency. Where span{q + k_m - μ} has rank <= 4 (d <= 4 here) the "
          "exact finite-S MSE is known (rfkit.theory.eva.snis_finite_mse, quadrature): the implementation's MSE at "
          "S = Ω × (4, 6, 10, 16, 25, 40, 64) (7 sizes: slope_test needs 5, and 5 dof keep the t quantile of a "
          "scattered fit moderate; the largest window under MAX_SAMPLES when they pass it) must decay at least as "
          "fast as the exact one (slope of log(MC/exact) <= 0 up to the tolerance), and the exact MSE's slope over "
          "the first 7 sizes of its 1/S regime (S·MSE >= 0.9σ², located on a ladder up to 2^128) must be -1 up to "
          "the tolerance: the asymptotic regime is computed, not simulated. An undecided cell draws 4x its "
          "replicates more (two looks, Bonferroni). Without the quadrature (rank > 4: d = 8, 16 in the full tier) "
          "the Monte Carlo slope is tested against -1 and flagged pre-asymptotic unless S·MSE at the largest size "
          "reached 75% of σ²_RFA.",
)

# ------------------------------------------------------------------------- Eq 22: E[h_m] = w_m


def _eq22_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu, tau, s_count = _mean_vector(ctx, q, k), ctx.params["tau"], ctx.params["S"]
    if ctx.params["route"] == "quadrature":
        mixture = (proposals_est.GaussianMixtureProposal(np.stack([mu, np.zeros_like(mu)]), np.array([tau, 2.0]),
                                                         np.array([0.5, 0.5]))
                   if ctx.params["family"] == "mixture" else None)
        means = _token_quadrature_means(ctx, q, k, v, GaussianProposal(mu, tau) if mixture is None else mixture)
        return exact_test(means / np.exp(theory.log_softmax_weights(q[0], k)), 1.0, tolerance=ctx.tolerance)
    mom = theory.cv_moments(q[0], k, v, mu, s_count, tau)
    w = mom.mean_h
    rel_sd = np.sqrt(np.maximum(np.diag(mom.cov_h), 0.0)) / w
    skew = theory.importance_weight_skewness(q[0], k, mu, s_count)[1] if tau == 1.0 else np.full(w.size, np.nan)
    test = dict(ctx.test, alpha=ctx.alpha / w.size)
    worst = int(np.argmax(rel_sd))
    n = _sized(ctx, float(rel_sd[worst]), skewness=float(np.nanmax(skew, initial=0.0)), alpha=test["alpha"])
    h_tokens = _collect(ctx, q, k, v, GaussianProposal(mu, tau), s_count, n, lambda t: t.h_tokens[:, 0])
    return combine([mean_test(h_tokens[:, m], w[m], scale=w[m], sd=rel_sd[m] * w[m], **test)
                    for m in range(w.size)])


def _eq22_where(p, variant) -> bool:
    if p["route"] == "quadrature":
        return p["S"] == 1 and p["d"] != 4 and p["M"] in (1, 8) and (p["family"] == "gaussian" or p["tau"] == 1.0)
    # Monte Carlo at d = 4 (the full grid lacked it: its S axis was tested at S = 1 only) and s = 0.3 or 0.5
    return (p["family"] == "gaussian" and p["d"] == 4 and p["M"] in (3, 6) and p["tau"] != 0.5
            and p["mu"] in ("zero", "q+k1", "q+mean_k") and p["s"] in (0.3, 0.5))


EQ22 = Claim(
    id="eva.eq22.per_token_cv_mean", source="footnote 2; App B.3, Eq 22",
    statement="E[h_m(ω)] = exp(q_n·k_m)/Z for every m.",
    kind="expectation",
    domain=dict(
        S=Integers("S iid draws ω_s", 1, math.inf, points=(1,), up_to=8,
                   why="a mean of S iid terms has the expectation of one term (64 at the full tier)"),
        M=Integers("for every m of any K (M = 1: h_1 = h)", 1, math.inf, points=(1,), up_to=8,
                   why="each h_m is its own mean; M enters through Z only (64 at the full tier)"),
        d=_d_axis(), mu=MU_AXIS, tau=TAU_AXIS,
        family=Choice("a proposal ρ whose support covers R^d: Gaussian N(μ, τ²I) and a two-component Gaussian "
                      "mixture (register)", ("gaussian", "mixture"))),
    tolerance=RELATIVE_TOL, units="relative bias of E[h_m] (worst token)",
    cell=_eq22_cell,
    grid=tiers(dict(route=["quadrature", "monte_carlo"], S=[1, 8], M=[1, 3, 6, 8], d=[1, 4, 8], mu=list(MEANS),
                    tau=[0.5, 1.0, 2.0], family=["gaussian", "mixture"], s=[0.3]),
               smoke=dict(S=[4], M=[3], d=[4], mu=["zero", "q+k1"], tau=[1.0], family=["gaussian"]),
               # M: the routes' own (quadrature 1, 8; Monte Carlo 3): the former 16, 64 were outside both, so the
               # full tier never reached the declared M = 8
               full=dict(S=[1, 8, 64], M=[1, 3, 8], d=[1, 2, 4, 8], s=[0.1, 0.5, 1.0])),
    replicates=tiers(1_000_000, smoke=100_000, full=5_000_000),
    where=_eq22_where,
    related={"eva.derived.cv_moments": "the (co)variances of h_m that size these cells; E[h_m] = w_m by quadrature "
                                       "there as well"},
    roles=("control_variate_terms",), plot_x="mu",
    notes="Routes: quadrature (S = 1; every μ, τ, the mixture ½N(μ, I) + ½N(0, 4I)) — E_ρ[h_m] = "
          "E_{N(0,I)}[(ρ/N(0,I)) h_m], a function of ω·(q_n + k_m) only: a one-dimensional Gauss-Hermite rule along "
          "q_n + k_m at whose nodes the implementation's h_m is evaluated (exact to round-off, whatever the tails of "
          "the weights); monte_carlo (Gaussian ρ, τ ∈ {1, "
          "2}, μ ∈ {0, q_n + k_1, q_n + mean k}, M ∈ {3, 6}, d = 4) — per-token mean tests: Var[h_m]/w_m² = "
          "(Γ_mm - 1)/S does not depend on w_m, so a relative tolerance is as easy for small weights as for large "
          "ones; the exact skewness of the log-normal token terms sets the replicate counts (at S = 1, τ = 2 the "
          "1M cap binds: 500k left a radius of 0.017), and the run also tests the proposal's sampler.",
)


# ---------------------------------------------------------------------- Prop 1: β*_m = v_m, zero var


def _prop1_closed_margin(q, k, v, mu, rng) -> float:
    """Worst over tokens of ``(Tr Var[g̃_m] at the numerical argmin - at v_m) / Tr Var[g_m]``."""
    var_h = np.diag(theory.cv_moments(q, k, v, mu, 1).cov_h)
    margins = []
    for m in range(k.shape[0]):
        def trace_var(beta, m=m):
            return theory.token_cv_variance(var_h[m], v[m], beta)
        margins.append(_argmin_margin(trace_var, v[m], trace_var(np.zeros(v.shape[1])), rng)[0])
    return min(margins)


def _prop1_opt_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu = _mean_vector(ctx, q, k)
    if ctx.params["route"] == "closed_form":
        return margin_evidence(_prop1_closed_margin(q[0], k, v, mu, ctx.rng), tolerance=ctx.tolerance)
    proposal = GaussianProposal(mu)
    omega = proposal.sample(ctx.rng, 64 * ctx.params["S"]).reshape(64, ctx.params["S"], -1)
    terms = _terms(ctx, q, k, v, omega, proposals_est.log_ratio(proposal, omega))
    g, h = terms.g_tokens[:, 0], terms.h_tokens[:, 0]                   # (R, M, d_v), (R, M)
    usable = np.var(h, axis=0) > 1e-20 * np.mean(h**2, axis=0)      # Var[h_m] > 0 (Eq 20's hypothesis)
    coef = np.stack([optimal_coefficient(g[:, m], h[:, m]) if usable[m] else v[m] for m in range(k.shape[0])])
    return exact_test(coef, v, tolerance=ctx.tolerance, scale=_value_scale(v), extra=dict(usable=int(usable.sum())))


def _prop1_search(ctx: CellContext):
    """Gradient of Tr Var[g̃_m(β)] at β = v_m, worst token, over q, K (3×2), V (3×2), μ in a box."""
    def margin(x):
        q, k, v, mu = x[:2], x[2:8].reshape(3, 2), x[8:14].reshape(3, 2), x[14:16]
        var_h = np.diag(theory.cv_moments(q, k, v, mu, 1).cov_h)
        worst = 0.0
        for m in range(3):
            def trace_var(beta, m=m):
                return theory.token_cv_variance(var_h[m], v[m], beta)
            scale = max(trace_var(np.zeros(2)) * (1.0 + np.linalg.norm(v[m])), _TINY)
            worst = max(worst, _gradient_norm(trace_var, v[m]) / scale)
        return -worst

    res = minimize_margin(margin, [(-1.0, 1.0)] * 8 + [(-3.0, 3.0)] * 6 + [(-2.0, 2.0)] * 2, rng=ctx.rng,
                          restart=ctx.restart or 0, maxiter=40)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(x=res.x.tolist()))


PROP1_OPTIMAL = Claim(
    id="eva.prop1.optimal_coefficient", source="§3.2, Prop 1, Eq 8; App B.4",
    statement="For g̃_m(ω) = g_m(ω) - β̂_m(h_m(ω) - E[h_m(ω)]) with a constant β̂_m, the minimiser of "
              "Tr(Var[g̃_m(ω)]) over β is β*_m = v_m.",
    kind="optimality",
    domain=dict(
        S=_s_axis("any ρ and S as in §3.1"),
        M=Integers("every key m of any K (M = 1: one token)", 1, math.inf, points=(1,), up_to=8,
                   why="Tr Var[g̃_m(β)] = Var[h_m]‖v_m - β‖² is one parabola per token: M enters only through w_m "
                       "(M to 16 at the full tier)"),
        d=_d_axis(), mu=MU_AXIS, qkv=QKV_AXIS),
    searched=("qkv",),
    tolerance=ALGEBRA_TOL, units="(Tr Var at the numerical argmin - at v_m) / Tr Var[g_m]; sample: |Δβ| / RMS value",
    cell=_prop1_opt_cell,
    grid=tiers(dict(route=["closed_form", "sample"], S=[1, 8], M=[1, 3, 8], d=[1, 8], mu=list(MEANS)),
               smoke=dict(S=[4], M=[4], d=[4], mu=["zero", "q+k1"]),
               full=dict(S=[1, 8, 64], M=[1, 3, 16], d=[1, 2, 8, 16], s=[0.1, 0.5, 1.0])),
    search=_prop1_search, restarts=tiers(1, full=20), universal=True,
    roles=("optimal_coefficient", "control_variate_terms"), plot_x="mu",
    notes="Routes: closed_form — BFGS on Var[h_m]‖v_m - β‖² (eva.derived.cv_parabola) per token against v_m; at "
          "μ = q_n + k_m (Var[h_m] = 0, the register's boundary) every β is optimal and the margin is 0; sample — "
          "Eq 20's Cov/Var from 64 draws of (g_m, h_m) equals v_m (tokens with Var[h_m] > 0; exact since g_m = "
          "h_m v_m). The search: the gradient of Tr Var[g̃_m(β)] at β = v_m, worst token, over q, K (3×2), V (3×2), μ.",
)


def _zero_variance_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    proposal = GaussianProposal(_mean_vector(ctx, q, k))
    omega = proposal.sample(ctx.rng, 64 * ctx.params["S"]).reshape(64, ctx.params["S"], -1)
    terms = _terms(ctx, q, k, v, omega, proposals_est.log_ratio(proposal, omega))
    per_token = ctx.params["part"] == "per_token"
    tilde = control_variate_family(terms, token_coefficients(terms), per_token=per_token)[:, 0]
    shared = control_variate_family(terms, terms.coefficient[..., None, :], per_token=per_token)[:, 0]
    trace_var = np.var(tilde, axis=0, ddof=1).sum(axis=-1)
    raw = np.mean(np.sum(tilde**2, axis=-1), axis=0)
    contrast = float(np.var(shared, axis=0, ddof=1).sum(axis=-1).max())
    return exact_test(trace_var, 0.0, tolerance=ctx.tolerance, scale=np.maximum(raw, _TINY),
                      extra=dict(shared_coefficient_trace_var=contrast))


PROP1_ZERO = Claim(
    id="eva.prop1.zero_variance", source="Prop 1 (second sentence); App B.4",
    statement="With β̂_m = β*_m = v_m for all m: Tr Var[g̃_m(ω)] = 0 for every m, and therefore Tr Var[g̃(ω)] = 0.",
    kind="moment",
    domain=dict(
        S=Integers("any S as in Prop 1: S iid draws ω_s", 1, math.inf, points=(1,), up_to=16,
                   why="g̃_m = g_m - v_m(h_m - w_m) = w_m v_m identically for every draw, whatever S (to 256 at full)"),
        M=Integers("for every m of any K (M = 1: one token)", 1, math.inf, points=(1,), up_to=16,
                   why="the identity holds token by token (to 64 at the full tier)"),
        mu=MU_AXIS,
        inputs=Choice("any q_n, K, V: the register's G-iid, G-peaked (near one-hot) and G-outlier (|q·k| up to 50, "
                      "log space) inputs", ("iid", "peaked", "outlier"))),
    tolerance=1e-10, units="sample Tr Var over 64 draws / mean ‖g̃‖² (float-level zero)",
    cell=_zero_variance_cell,
    grid=tiers(dict(part=["per_token", "total"], S=[1, 16], M=[1, 3, 16], mu=list(MEANS),
                    inputs=["iid", "peaked", "outlier"]),
               smoke=dict(S=[4], M=[8], mu=["zero"], inputs=["iid"]),
               full=dict(S=[1, 16, 256], M=[1, 3, 16, 64], d=[2, 8])),
    roles=("control_variate_terms",), plot_x="S",
    notes="Parts: per_token — every g̃_m; total — g̃ = Σ_m g̃_m. The sample variance over 64 independent draws is "
          "float-level zero for an exact identity; extra carries the contrast: the trace variance of the same terms "
          "with the shared coefficient β̂(ω).",
)

# ------------------------------------------------------------ §3.2: coefficient/cost trade-off


def _cost_calls(n: int, d: int, num_samples: int, rng):
    q, k, v = (rng.normal(scale=0.3, size=(n, d)) for _ in range(3))
    omega = rng.standard_normal((num_samples, d))

    def per_token():
        terms = control_variate_terms(q, k, v, omega=omega)
        return control_variate_family(terms, token_coefficients(terms))

    def shared():
        return rfa_attention(q, k, v, omega=omega, form="features")

    return per_token, shared


#: The shared-coefficient (RFA) variants run at N × SHARED_SCALE: at the per-token sweep's N the linear form takes
#: ~0.2 ms, where fixed per-call overheads (not its growth) dominate the time.
SHARED_SCALE = 16


def _cost_cell(ctx: CellContext):
    sizes, d, s_count = np.array(ctx.params["N_values"]), ctx.params["d"], ctx.params["S"]
    which = 0 if ctx.params["form"] == "per_token" else 1
    if which == 1:  # the linear form costs well under a millisecond at these N: measured SHARED_SCALE× larger
        sizes = sizes * SHARED_SCALE
    calls = [_cost_calls(int(n), d, s_count, ctx.rng) for n in sizes]
    fns = [c[which] for c in calls]
    claimed, alternative = (2.0, "greater") if which == 0 else (1.0, "less")
    if ctx.params["measure"] == "exps":
        return _exp_count_evidence(ctx, sizes, fns, per_token=which == 0)
    if ctx.params["measure"] == "memory":
        # tracemalloc peaks are deterministic (same allocations every call): the slope is exact
        fns[0]()  # warm-up outside the trace (lazy imports allocate once)
        y = np.array([peak_bytes(f) for f in fns], dtype=float)
        slope = float(np.polyfit(np.log(sizes), np.log(y), 1)[0])
        margin = slope - claimed if alternative == "greater" else claimed - slope
        return margin_evidence(margin, tolerance=ctx.tolerance,
                               extra=dict(sizes=sizes.tolist(), peak_bytes=y.tolist(), slope=slope))
    return timing_slope_test(sizes, fns, claimed, repeats=ctx.params["repeats"], best_of=LOAD_BEST_OF,
                             alpha=ctx.alpha, tolerance=ctx.tolerance, alternative=alternative)


def _exp_count_evidence(ctx: CellContext, sizes: np.ndarray, fns, *, per_token: bool):
    """The exponentials each call evaluates (:func:`rfkit.validation.opcount.exp_evaluations`, exact). Per token:
    at least one per query-key pair (count >= N·M at every N) and a log-log slope of 2 (two-sided); shared: slope
    <= 1."""
    counts = np.array([exp_evaluations(f) for f in fns], dtype=float)
    if not per_token:
        return count_slope_test(sizes, counts, 1.0, tolerance=ctx.tolerance)
    per_pair = counts / sizes.astype(float) ** 2
    every_pair = margin_evidence(float(per_pair.min()) - 1.0, tolerance=0.0,
                                 extra=dict(exps_per_pair=per_pair.tolist()))
    return combine([count_slope_test(sizes, counts, 2.0, tolerance=ctx.tolerance, two_sided=True), every_pair],
                   extra=dict(sizes=sizes.tolist(), exps=counts.tolist(), exps_per_pair=per_pair.tolist()))


SEC3_2_COST = Claim(
    id="eva.sec3_2.coefficient_cost_tradeoff", source="§3.2, paragraph after Prop 1",
    statement="A distinct coefficient per key gives the exact result but requires exp(q_n·k_m) for every query-key "
              "pair (quadratic time and space); one shared coefficient is conventional RFA, computable in linear "
              "complexity.",
    kind="complexity",
    domain=dict(
        form=Choice("a distinct coefficient per key (quadratic); one shared coefficient, conventional RFA (linear)",
                    ("per_token", "shared")),
        measure=Choice("requires exp(q_n·k_m) for every query-key pair (the exponentials evaluated, counted "
                       "exactly); quadratic time and space (CPU time, peak memory)", ("exps", "time", "memory")),
        N_values=Integers("N = M growing (d, S fixed)", 384, math.inf, up_to=1536,
                          why="a log-log slope over 5 √2-spaced N from 384, the asymptotic end (the per-token form "
                              "holds N·S·N log-weights: at N = 256-1024 its fixed and linear costs bend the CPU-time "
                              "slope to 1.7-2.0; the shared form runs at N × 16); to 3072 at the full tier")),
    tolerance=SLOPE_TOL, units="log-log slope in N of the exponentials, CPU time or peak memory (per-token: below 2; "
                               "shared: above 1); exps: evaluations per query-key pair below 1",
    cell=_cost_cell,
    grid=tiers(dict(form=["per_token", "shared"], measure=["exps", "time", "memory"],
                    N_values=[tuple(geometric_sizes(384, 1536))], d=[8], S=[2], repeats=[4]),
               smoke=dict(N_values=[tuple(geometric_sizes(384, 768))], repeats=[3]),
               # full: the per-token form stores N·S·N·d_v values (550 GB at the register's N = 4096, S = 64, d = 64;
               # ~4 GB at its peak at N = 3072, S = 2, d = 8)
               full=dict(N_values=[tuple(geometric_sizes(384, 3072, 7))], d=[4, 8], S=[2], repeats=[7])),
    plot_x="N_values",
    notes="Exps: the exponentials np.exp evaluates in a call, counted exactly (rfkit.validation.opcount; the "
          "numpy paths measured evaluate every exponential through it): per token at least one per query-key pair "
          "(N·M) and a slope of 2, shared a slope <= 1. Time: every repeated CPU time, each the "
          "best of a block of 2 rounds (timing_slope_test, t with the "
          "fit's dof) of Σ_m[g_m - v_m(h_m - w_m)] (per token) and of RFA with the shared β̂ over 5 √2-spaced N from "
          "384 to 1536 in quick (~10 s): per-token slope >= 2, shared slope <= 1. Memory: tracemalloc peaks are "
          "deterministic, so the log-log slope is an exact margin. d and S are held small (the per-token form stores "
          "N·S·N·d_v values: the register's S = 64, d = 64 would need 550 GB at N = 4096). The shared (RFA) form is "
          "measured at N × SHARED_SCALE (16): at the per-token sweep's N the "
          "linear form takes ~0.2 ms, dominated by per-call overheads. Only the numpy backend is measured (the "
          "register's Numba and Torch backends of these forms are not implemented).",
)

# ------------------------------------------------------------------- Lemma 3: weighted MSE J (Eq 24)


def _weights(kind: str, m: int, rng) -> np.ndarray:
    """``α`` of Lemma 3: uniform, Dirichlet(κ), softmax with temperature, or near-degenerate (``1e-12``)."""
    if kind == "uniform":
        a = np.ones(m)
    elif kind.startswith("dirichlet"):
        a = np.maximum(rng.dirichlet(np.full(m, float(kind.split("_")[1]))), 1e-300)
    elif kind == "softmax":
        logits = rng.normal(scale=3.0, size=m)
        a = np.exp(logits - logits.max())
    else:
        a = np.full(m, 1e-12)
        a[rng.integers(m)] = 1.0
    return a / a.sum()


def _shared_beta(kind: str, alpha, targets, optimum, rng) -> np.ndarray:
    if kind == "zero":
        return np.zeros(targets.shape[1])
    if kind == "mean":
        return alpha @ targets
    if kind == "subset":
        return optimum[0].copy()
    if kind == "far":
        return 100.0 * rng.normal(size=targets.shape[1])
    return rng.normal(size=targets.shape[1])


def _j_scale(alpha, targets, j_value: float, beta=None) -> float:
    """Scale of a margin between two values of J: ``J`` itself, floored at its round-off magnitude
    ``1e-12·Σ_m α_m (‖β*_m‖² + ‖β‖²)`` (a difference of J's below it is round-off, not a counterexample)."""
    size = alpha @ np.sum(np.asarray(targets) ** 2, axis=-1)
    if beta is not None:
        size += float(np.sum(np.asarray(beta) ** 2))
    return max(j_value, 1e-12 * size, _TINY)


def _lemma3_margin(alpha, targets, labels, beta) -> tuple[float, float]:
    """``(J(β,…,β) - J(β*_1,…,β*_C), scale)`` (Eq 24 with Lemma 3's β*_c; scale from :func:`_j_scale`)."""
    optimum = theory.partition_optimal_coefficients(alpha, targets, labels)
    shared = theory.weighted_error(alpha, targets, labels, beta)
    return shared - theory.weighted_error(alpha, targets, labels, optimum), _j_scale(alpha, targets, shared, beta)


def _eq25_residual(alpha, targets, labels) -> tuple[np.ndarray, np.ndarray]:
    """Eq 25's ``Σ_{m∈P_c} α_m (β*_c - β*_m)`` per subset and its magnitude ``Σ_{m∈P_c} α_m (‖β*_c‖ + ‖β*_m‖)``."""
    optimum = theory.partition_optimal_coefficients(alpha, targets, labels)
    diff = optimum[labels] - targets
    onehot = np.eye(optimum.shape[0])[labels].T                           # (C, M)
    size = alpha * (np.linalg.norm(optimum[labels], axis=1) + np.linalg.norm(targets, axis=1))
    return (onehot * alpha) @ diff, onehot @ size


def _lemma3_cell(ctx: CellContext):
    p = ctx.params
    m = p["M"]
    labels = partition_labels(m, min(p["C"], m), layout=p["layout"], rng=ctx.rng,
                              keys=ctx.rng.normal(size=(m, 2)))
    alpha, targets = _weights(p["alpha"], m, ctx.rng), ctx.rng.normal(size=(m, 3)) * 2
    if p["part"] == "eq25":
        residual, size = _eq25_residual(alpha, targets, labels)
        return exact_test(residual, 0.0, tolerance=ctx.tolerance, scale=np.maximum(size, _TINY)[:, None])
    optimum = theory.partition_optimal_coefficients(alpha, targets, labels)
    beta = _shared_beta(p["beta"], alpha, targets, optimum, ctx.rng)
    margin, scale = _lemma3_margin(alpha, targets, labels, beta)
    return margin_evidence(margin, tolerance=ctx.tolerance, scale=scale)


def _lemma3_search(ctx: CellContext):
    """Log-weights in [-30, 30], targets and β in a box, and every set partition of 4 indices (integer axis)."""
    def unpack(x):
        w = np.exp(x[:4] - x[:4].max())
        return w / w.sum(), x[4:12].reshape(4, 2), x[12:14], PARTITIONS_4[int(x[14])]

    def margin(x):  # both parts: the worse of the inequality's margin and Eq 25's residual
        alpha, targets, beta, labels = unpack(x)
        residual, size = _eq25_residual(alpha, targets, labels)
        value, scale = _lemma3_margin(alpha, targets, labels, beta)
        return min(value / scale, -float(np.max(np.abs(residual) / np.maximum(size, _TINY)[:, None])))

    bounds = [(-30.0, 30.0)] * 4 + [(-5.0, 5.0)] * 10 + [(0, len(PARTITIONS_4) - 1)]
    res = minimize_margin(margin, bounds, rng=ctx.rng, restart=ctx.restart or 0, integer=[False] * 14 + [True],
                          maxiter=150)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(x=res.x.tolist()))


LEMMA3_ALPHAS = ("uniform", "dirichlet_0.1", "dirichlet_1", "dirichlet_10", "softmax", "degenerate")


def _lemma3_where(p, variant) -> bool:
    """C <= M; Eq 25 does not involve β (β = random only); the extra layouts with β random and the extra weight
    families on contiguous partitions (each axis is covered; the full tier runs the product)."""
    return (p["C"] <= p["M"] and (p["part"] == "inequality" or p["beta"] == "random")
            and (p["layout"] in ("contiguous", "random") or p["beta"] == "random" or p.get("design") == "product")
            and (p["alpha"] in ("uniform", "dirichlet_0.1", "softmax", "degenerate") or p["layout"] == "contiguous"
                 or p.get("design") == "product"))


LEMMA3 = Claim(
    id="eva.lemma3.partition_lowers_weighted_mse", source="§4.1; App B.5, Lemma 3, Eq 24-25",
    statement="For any partition {P_c} of [M], weights α_m > 0 summing to 1 and any global β, β*_c = Σ_{m∈P_c} α_m "
              "β*_m / Σ_{m∈P_c} α_m gives J(β,…,β) >= J(β*_1,…,β*_C) (Eq 24), and Σ_{m∈P_c} α_m(β*_c - β*_m) = 0 "
              "(Eq 25).",
    kind="inequality",
    domain=dict(
        M=Integers("any partition of [M] (M = 1: one index)", 1, math.inf, points=(1,), up_to=64,
                   why="J is a sum over subsets of per-subset weighted spreads: more indices add terms of the same "
                       "form (register to 1024 at the full tier)"),
        C=Integers("{P_c}: C subsets, from one (C = 1) to all singletons (C = M)", 1, math.inf, points=(1,),
                   up_to=64, why="C = M = 64 is the all-singletons partition of the largest M (register: C up to M)"),
        layout=Choice("any partition: contiguous, random, clustered (k-means on keys), dyadic", PARTITION_LAYOUTS),
        alpha=Choice("any weights α_m > 0 with Σ_m α_m = 1: uniform, Dirichlet(κ), κ ∈ {0.1, 1, 10}, softmax with "
                     "temperature, near-degenerate (α_m ≈ 1e-12)", LEMMA3_ALPHAS),
        beta=Choice("any global β: 0, random, Σ_m α_m β*_m, one of the β*_c, far away",
                    ("zero", "random", "mean", "subset", "far")),
        targets=Range("arbitrary vectors β*_m (the algebra): scale of the vectors (grid N(0, 4I); the search "
                      "explores β*_m, α and β over a box)", 0.0, math.inf, up_to=(None, 5.0),
                      why="the search's box [-5, 5]")),
    searched=("targets",),
    tolerance=ALGEBRA_TOL, units="margin / J(β,…,β) (Eq 25: residual / Σ α_m(‖β*_c‖ + ‖β*_m‖))",
    cell=_lemma3_cell,
    grid=tiers(dict(part=["inequality", "eq25"], M=[1, 3, 16, 64], C=[1, 2, 8, 64], layout=list(PARTITION_LAYOUTS),
                    alpha=list(LEMMA3_ALPHAS), beta=["zero", "random", "mean", "subset", "far"]),
               smoke=dict(M=[1, 8], C=[1, 3], layout=["contiguous"], alpha=["uniform", "dirichlet_0.1"],
                          beta=["random", "mean"]),
               full=dict(M=[1, 2, 3, 16, 64, 256, 1024], C=[1, 2, 8, 64, 1024], design=["product"])),
    where=_lemma3_where,
    search=_lemma3_search, restarts=tiers(3, smoke=1, full=20), universal=True,
    plot_x="M",
    notes="Parts: inequality — J(β,…,β) - J(β*_1,…,β*_C) >= 0; eq25 — Σ_{m∈P_c} α_m(β*_c - β*_m) = 0 per subset. "
          "Exact margins on grid cells (β*_m ~ N(0, 4I) in R^3) plus an adversarial search over log-weights in "
          "[-30, 30], β*_m and β in [-5, 5]² and every set partition of 4 indices (an integer axis).",
)


# ----------------------------------------------------------------------- Prop 2 (Eq 9-10), §4.1


def _prop2_inputs(ctx: CellContext):
    """``(q, keys of U, values of U, labels of a partition of U)``; U = [M] or [M] minus a local block E."""
    q, k, v = _inputs(ctx)
    if ctx.params.get("U", "all") == "complement":
        keep = np.setdiff1d(np.arange(k.shape[0]), exact_set(q[0], k, min(2, k.shape[0] - 1), kind="local",
                                                             position=0))
        k, v = k[keep], v[keep]
    m = k.shape[0]
    labels = partition_labels(m, min(ctx.params["C"], m), layout=ctx.params.get("layout", "contiguous"),
                              rng=ctx.rng, keys=k)
    return q, k, v, labels


def _prop2_argmin_margin(q, k, v, labels, rng) -> tuple[float, float]:
    """``(J(numerical argmin) - J(local softmaxes), J(softmax over U))`` for Eq 9's weights."""
    alpha = np.exp(theory.log_softmax_weights(q, k))
    _, local = theory.local_softmax(q, k, v, labels)

    def objective(flat):
        return theory.weighted_error(alpha, v, labels, flat.reshape(local.shape))

    margin, _ = _argmin_margin(objective, local, 1.0, rng)
    return margin, _j_scale(alpha, v, theory.weighted_error(alpha, v, labels, alpha @ v))


def _ratio_of_means_evidence(ctx: CellContext, q, k, v, labels):
    """E[G_c - β*_c H_c]/π_c = 0 per coordinate (the ratio of Monte Carlo means is the local softmax)."""
    mu, s_count = _mean_vector(ctx, q, k), ctx.params["S"]
    mom = theory.cv_moments(q[0], k, v, mu, s_count)
    log_pi, local = theory.local_softmax(q[0], k, v, labels)
    scale, c_count = _value_scale(v), local.shape[0]
    a = (v - local[labels]) / np.exp(log_pi[labels])[:, None]           # (v_m - β*_c(m)) / π_c(m)
    weighted = np.eye(c_count)[labels][:, :, None] * a[:, None, :]       # (M, C, d_v): token m only in its chunk
    sd = np.sqrt(np.maximum(np.einsum("mcv,mn,ncv->cv", weighted, mom.cov_h, weighted), 0.0))
    samples = _collect(ctx, q, k, v, GaussianProposal(mu), s_count,
                       _sized(ctx, float(sd.max()) / scale, alpha=ctx.alpha / sd.size),
                       lambda t: np.einsum("rm,mcv->rcv", t.h_tokens[:, 0], weighted))
    return combine([_vector_mean_test(ctx, samples[:, c], np.zeros(v.shape[1]), scale=scale, sd=sd[c],
                                      alpha=ctx.alpha / c_count) for c in range(c_count)])


def _ratio_of_means_quadrature(ctx: CellContext, q, k, v, labels):
    """E[G_c]/E[H_c] against the local softmax, the expectations by :func:`_quadrature_terms`."""
    try:
        terms, w = _quadrature_terms(ctx, q, k, v, _mean_vector(ctx, q, k))
    except QuadratureOutOfReach as exc:
        return _beyond_exact_route(exc)
    onehot = np.eye(labels.max() + 1)[labels]                              # (M, C)
    mean_h = w @ terms.h_tokens[:, 0]                                      # (M,)
    mean_g = np.einsum("r,rmv->mv", w, terms.g_tokens[:, 0])               # (M, d_v)
    ratio = (onehot.T @ mean_g) / (onehot.T @ mean_h)[:, None]
    _, local = theory.local_softmax(q[0], k, v, labels)
    return exact_test(ratio, local, tolerance=ctx.tolerance, scale=_value_scale(v), extra=dict(nodes=int(w.size)))


def _prop2_opt_cell(ctx: CellContext):
    q, k, v, labels = _prop2_inputs(ctx)
    if ctx.params["part"] == "ratio_of_means" and ctx.params.get("route") == "quadrature":
        return _ratio_of_means_quadrature(ctx, q, k, v, labels)
    if ctx.params["part"] == "ratio_of_means":
        return _ratio_of_means_evidence(ctx, q, k, v, labels)
    margin, scale = _prop2_argmin_margin(q[0], k, v, labels, ctx.rng)
    return margin_evidence(margin, tolerance=ctx.tolerance, scale=scale)


def _gradient_margin(x) -> float:
    """``-‖∇J(local softmaxes)‖ / Σ_m ŵ_m ‖v_m‖`` (central differences, exact for a quadratic)."""
    q, k, v, labels = x[:2], x[2:8].reshape(3, 2), x[8:14].reshape(3, 2), PARTITIONS_3[int(x[14])]
    alpha = np.exp(theory.log_softmax_weights(q, k))
    _, local = theory.local_softmax(q, k, v, labels)

    def objective(flat):
        return theory.weighted_error(alpha, v, labels, flat.reshape(local.shape))

    return -_gradient_norm(objective, local) / max(float(alpha @ np.linalg.norm(v, axis=1)), _TINY)


def _prop2_opt_search(ctx: CellContext):
    bounds = [(-2.0, 2.0)] * 8 + [(-3.0, 3.0)] * 6 + [(0, len(PARTITIONS_3) - 1)]
    res = minimize_margin(_gradient_margin, bounds, rng=ctx.rng, restart=ctx.restart or 0,
                          integer=[False] * 14 + [True], maxiter=40)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(x=res.x.tolist()))


def _prop2_where(p, variant) -> bool:
    """C <= |U|; the argmin part on every input (no route); the ratio of means on iid inputs with M <= 8, by
    quadrature under every proposal mean and by Monte Carlo under μ = 0; the extra layouts on iid inputs (each axis
    covered)."""
    if not p["C"] <= p["M"] - (2 if p.get("U") == "complement" else 0):
        return False
    if p["part"] == "argmin":
        return p["route"] == "quadrature" and p["mu"] == "zero" and (p["layout"] in ("contiguous", "random")
                                                                     or p["inputs"] == "iid")
    return (p["inputs"] == "iid" and p["M"] <= 8 and p["layout"] in ("contiguous", "random")
            and (p["route"] == "quadrature" or p["mu"] == "zero"))


PROP2_OPTIMAL = Claim(
    id="eva.prop2.local_softmax_optimal", source="§4.1, Prop 2, Eq 9-10; App B.6 (first part)",
    statement="For key indices U, a partition {P_c} of U and β*_m = v_m, with J(β_1,…,β_C) := Σ_c Σ_{m∈P_c} "
              "[exp(q_n·k_m)/Σ_{m'∈U} exp(q_n·k_m')] ‖β_c - β*_m‖² (Eq 9): β*_c = argmin J = E[Σ_{P_c} g_m]/"
              "E[Σ_{P_c} h_m] = Σ_{m∈P_c} exp(q_n·k_m) v_m / Σ_{m∈P_c} exp(q_n·k_m) (the local softmax).",
    kind="optimality",
    domain=dict(
        part=Choice("β*_c = argmin J (Eq 9) and = E[Σ_{P_c} g_m]/E[Σ_{P_c} h_m] (Eq 10), both the local softmax",
                    ("argmin", "ratio_of_means")),
        U=Choice("a set of key indices U: [M] and [M] minus a local block E", ("all", "complement")),
        M=Integers("any K: M keys", 1, math.inf, points=(1, 3), up_to=16,
                   why="J is a sum of per-subset quadratics: more keys add terms of the same form (64 at full); "
                       "M = 3 is the smallest with U = [M] minus a block of 2 non-empty"),
        C=Integers("a partition {P_c} of U into C subsets", 1, math.inf, points=(1, 2), up_to=8,
                   why="per-subset optima are separate (C to 64 at the full tier)"),
        layout=Choice("an arbitrary partition (as in Lemma 3): contiguous, random, clustered, dyadic",
                      PARTITION_LAYOUTS),
        mu=MU_AXIS, qkv=QKV_AXIS),
    searched=("qkv",),
    tolerance=VALUE_TOL, units="argmin: (J at the BFGS argmin - J at the local softmaxes) / J(softmax over U); "
                               "ratio_of_means: " + VALUE_UNITS,
    cell=_prop2_opt_cell,
    grid=tiers(dict(part=["argmin", "ratio_of_means"], route=["quadrature", "monte_carlo"], M=[1, 3, 16], C=[1, 2, 8],
                    U=["all", "complement"],
                    layout=list(PARTITION_LAYOUTS), S=[4], mu=list(MEANS), s=[0.3], inputs=["iid", "peaked"]),
               smoke=dict(M=[8], C=[1, 3], U=["all"], layout=["contiguous"], mu=["zero"], inputs=["iid"]),
               full=dict(M=[1, 3, 16, 64], C=[1, 2, 8, 64], S=[1, 4, 64],
                         inputs=["iid", "clustered", "peaked", "outlier"])),
    replicates=tiers(100_000, smoke=80_000, full=1_000_000),
    where=_prop2_where,
    search=_prop2_opt_search, restarts=tiers(2, smoke=1, full=20), universal=True,
    roles=("control_variate_terms",), plot_x="C",
    notes="Parts: argmin — BFGS on J (Eq 9) against the local softmax; the search: gradient of J at the local "
          "softmax over q, K, V and every partition of 3 keys; ratio_of_means — E[G_c]/E[H_c] = β*_c, by two routes: "
          "quadrature (every proposal mean: the expectations of the implementation's g_m, h_m by a tensor "
          "Gauss-Hermite rule on span{q_n + k_m - μ}, exact to round-off; Monte Carlo under the far and random means "
          "needs more than 1e6 replicates) and Monte Carlo under μ = 0 (the mean of (G_c - β*_c H_c)/π_c against 0, "
          "exact sd from eva.derived.cv_moments). "
          "The ratio of means runs on iid inputs with M <= 8 (peaked inputs and M = 16 give log-normal tails that "
          "force Chebyshev bounds at these budgets; the closed-form argmin covers them). Tolerance: a coefficient "
          "lowering Eq 9's error by 2% of the shared-coefficient error, or a bias of the ratio of means of 2% of "
          "the value scale, would make Prop 2 wrong in a way that matters; the closed-form margins are round-off "
          "exact (~1e-15), so any error of the formulas shows far above it.",
)


def _global_beta(ctx: CellContext, kind: str, q, k, v) -> np.ndarray:
    """A shared β: the realised RFA coefficient β̂(ω) (S = 4), the softmax over U, 0, or random."""
    if kind == "rfa":
        proposal = GaussianProposal(_mean_vector(ctx, q, k))
        return rfa_attention(q, k, v, proposal=proposal, num_samples=4, rng=ctx.rng, form="features")[0]
    if kind == "softmax":
        return _softmax(q, k, v)[0]
    if kind == "zero":
        return np.zeros(v.shape[1])
    return ctx.rng.normal(size=v.shape[1]) * _value_scale(v)


def _beats_global_margin(q, k, v, labels, beta) -> tuple[float, float]:
    """``(J(β,…,β) - J(local softmaxes), scale)`` with Eq 9's softmax weights over U (:func:`_j_scale`)."""
    alpha = np.exp(theory.log_softmax_weights(q, k))
    _, local = theory.local_softmax(q, k, v, labels)
    shared = theory.weighted_error(alpha, v, labels, beta)
    return shared - theory.weighted_error(alpha, v, labels, local), _j_scale(alpha, v, shared, beta)


def _beats_global_cell(ctx: CellContext):
    q, k, v, labels = _prop2_inputs(ctx)
    beta = _global_beta(ctx, ctx.params["beta"], q, k, v)
    margin, scale = _beats_global_margin(q[0], k, v, labels, beta)
    return margin_evidence(margin, tolerance=ctx.tolerance, scale=scale,
                           extra=dict(relative_reduction=margin / scale))


def _beats_global_search(ctx: CellContext):
    """q (2), K (3×2), V (3×2), the shared β (2) in a box and every partition of the 3 keys."""
    def margin(x):
        q, k, v = x[:2], x[2:8].reshape(3, 2), x[8:14].reshape(3, 2)
        value, scale = _beats_global_margin(q, k, v, PARTITIONS_3[int(x[16])], x[14:16])
        return value / scale

    bounds = [(-2.0, 2.0)] * 8 + [(-3.0, 3.0)] * 8 + [(0, len(PARTITIONS_3) - 1)]
    res = minimize_margin(margin, bounds, rng=ctx.rng, restart=ctx.restart or 0, integer=[False] * 16 + [True],
                          maxiter=60)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(x=res.x.tolist()))


def _beats_where(p, variant) -> bool:
    """C <= |U|; the extra layouts on iid inputs, the outlier inputs on contiguous partitions (each axis covered)."""
    return (p["C"] <= p["M"] - (2 if p["U"] == "complement" else 0)
            and (p["layout"] in ("contiguous", "random") or p["inputs"] == "iid")
            and (p["inputs"] != "outlier" or p["layout"] == "contiguous"))


PROP2_BEATS = Claim(
    id="eva.prop2.partition_beats_global", source="Prop 2 (last sentence); App B.6 (second part)",
    statement="J(β*_1,…,β*_C) <= J(β,…,β) for every globally shared β (the reduction is usually large, and "
              "significant when the β*_c deviate much from the shared coefficient).",
    kind="inequality",
    domain=dict(
        U=Choice("as Prop 2: key indices U = [M] or [M] minus a local block E", ("all", "complement")),
        M=Integers("any K: M keys", 3, math.inf, points=(3,), up_to=64,
                   why="J is a sum of per-subset quadratics: more keys add terms of the same form (256 at full); "
                       "M = 3 is the smallest with U = [M] minus a block of 2 non-empty"),
        C=Integers("a partition {P_c} of U into C subsets (C = 1: one subset, the shared β's own optimum)", 1,
                   math.inf, points=(1, 2), up_to=8, why="per-subset optima are separate (C to 64 at full)"),
        layout=Choice("partitions as in Lemma 3: contiguous, random, clustered, dyadic", PARTITION_LAYOUTS),
        beta=Choice("every globally shared β: the realised RFA coefficient β̂(ω), the softmax over U, 0, random "
                    "(the search: any β in a box)", ("rfa", "softmax", "zero", "random")),
        qkv=QKV_AXIS),
    searched=("qkv",),
    tolerance=ALGEBRA_TOL, units="margin / J(β,…,β)",
    cell=_beats_global_cell,
    grid=tiers(dict(M=[3, 16, 64], C=[1, 2, 8], U=["all", "complement"], layout=list(PARTITION_LAYOUTS),
                    mu=["zero"], inputs=["iid", "peaked", "clustered", "outlier"],
                    beta=["rfa", "softmax", "zero", "random"]),
               smoke=dict(M=[8], C=[1, 3], U=["all"], layout=["contiguous"], inputs=["iid"], beta=["rfa", "softmax"]),
               full=dict(M=[3, 16, 64, 256], C=[1, 2, 8, 64], mu=["zero", "q+mean_k"])),
    where=_beats_where,
    search=_beats_global_search, restarts=tiers(3, smoke=1, full=20), universal=True,
    plot_x="C",
    notes="Eq 9's softmax weights over U, β*_m = v_m, β*_c the local softmaxes (Prop 2): exact margins on the grid "
          "(inputs: the register's G-iid, G-peaked, G-clust and G-outlier) plus a search over q (2), K (3×2), "
          "V (3×2), the shared β (2) in a box and every partition of the 3 keys. The size of the reduction "
          "('usually large') is reported per cell as extra.relative_reduction; it is a scope remark, not a "
          "testable bound. B.6's scope note (no variance reduction promised) is not tested.",
)

# ------------------------------------------------------------------------ §4.1: exact set E lowers J


def _optimal_j(alpha, v, labels) -> float:
    return theory.weighted_error(alpha, v, labels, theory.partition_optimal_coefficients(alpha, v, labels))


def _with_singletons(labels: np.ndarray) -> np.ndarray:
    """Labels with every :data:`EXACT` key made its own subset (β_m = v_m: zero error on E)."""
    out = labels.copy()
    exact = np.flatnonzero(out == EXACT)
    out[exact] = out.max(initial=-1) + 1 + np.arange(exact.size)
    _, out = np.unique(out, return_inverse=True)
    return out


def _exact_set_configs(m: int, chunks_count: int, exact, reading: str) -> tuple[np.ndarray, np.ndarray]:
    """``(labels without E, labels with E exact)``. R1: refine the same chunks; R2: re-chunk [M]\\E into C."""
    base = contiguous_labels(m, chunks_count)
    if reading == "R1":
        refined = base.copy()
        refined[np.asarray(exact, dtype=int)] = EXACT
    else:
        refined = contiguous_labels(m, chunks_count, exact=exact)
    return base, _with_singletons(refined)


def _exact_set_margin(q, k, v, chunks_count, exact, reading) -> tuple[float, float]:
    """``(J_opt(without E) - J_opt(with E), scale)`` over U = [M] with Eq 9's weights; the scale is J with one
    shared optimal coefficient (the total spread of the values, :func:`_j_scale`)."""
    alpha = np.exp(theory.log_softmax_weights(q, k))
    base, refined = _exact_set_configs(k.shape[0], chunks_count, exact, reading)
    one = np.zeros(k.shape[0], dtype=int)
    return _optimal_j(alpha, v, base) - _optimal_j(alpha, v, refined), _j_scale(alpha, v, _optimal_j(alpha, v, one))


def _exact_indices(ctx: CellContext, q, k) -> np.ndarray:
    size, kind = ctx.params["E"], ctx.params["E_kind"]
    if kind == "bottom":
        return np.sort(np.argsort(k @ q, kind="stable")[:size])
    return exact_set(q, k, size, kind=kind, position=k.shape[0] // 2, rng=ctx.rng)


def _exact_set_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    exact = _exact_indices(ctx, q[0], k)
    margin, scale = _exact_set_margin(q[0], k, v, ctx.params["C"], exact, ctx.variant)
    return margin_evidence(margin, tolerance=ctx.tolerance, scale=scale, extra=dict(exact=exact.tolist()))


def _exact_set_search(ctx: CellContext):
    """M = 6 keys in d = 2 with scalar values, C = 2 chunks, E = one key at any position (integer axis)."""
    def margin(x):
        q, k, v = x[:2], x[2:14].reshape(6, 2), x[14:20, None]
        value, scale = _exact_set_margin(q, k, v, 2, [int(x[20])], ctx.variant)
        return value / scale

    bounds = [(-2.0, 2.0)] * 14 + [(-3.0, 3.0)] * 6 + [(0, 5)]
    res = minimize_margin(margin, bounds, rng=ctx.rng, restart=ctx.restart or 0, integer=[False] * 20 + [True],
                          maxiter=80)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(x=res.x.tolist()))


SEC4_1_EXACT = Claim(
    id="eva.sec4_1.exact_set_lowers_j", source="§4.1, 'Partially Optimized Coefficients'",
    statement="Giving each token of a subset E its own coefficient β_m = v_m (exact estimates on E) reduces the "
              "overall squared error of Eq 9.",
    kind="inequality",
    domain=dict(
        M=Integers("any K: M keys (M = 2: the smallest with a token outside E)", 2, math.inf, points=(2,), up_to=16,
                   why="J is a sum of per-subset quadratics (M to 256 at the full tier)"),
        C=Integers("the subsets P_c (C = 1: one shared coefficient outside E)", 1, math.inf, points=(1,), up_to=4,
                   why="per-subset optima are separate (C to 16 at the full tier)"),
        E=Integers("some subset E ⊆ [M]: |E| from 0 (nothing exact) up", 0, math.inf, points=(0, 1), up_to=8,
                   why="half of the largest quick M (|E| to 64 of M = 256 at the full tier)"),
        E_kind=Choice("E chosen by a sparse mechanism (local window; Reformer-like top-|E| by q_n·k_m) in the paper; "
                      "any E for the algebra (random, bottom-|E|)", ("local", "top", "random", "bottom")),
        qkv=QKV_AXIS),
    searched=("qkv",),
    readings={"R1": Reading("the partition {P_c} of [M] against the same subsets with E removed ({P_c minus E} plus "
                            "singletons of E): the paper's 'without loss of generality, E ∩ P_c = ∅' keeps the "
                            "other tokens' subsets"),
              "R2": Reading("C contiguous equal chunks of [M] against E plus C contiguous chunks of [M] minus E (the "
                            "same C, re-chunked: how practical EVA builds its chunks, §4.2), not the paragraph's "
                            "construction", beside=True)},
    tolerance=ALGEBRA_TOL, units="(J_opt with E - J_opt without E) / J with one shared optimal coefficient",
    cell=_exact_set_cell,
    grid=tiers(dict(M=[2, 8, 16], C=[1, 2, 4], E=[0, 1, 2, 4, 8], E_kind=["local", "top", "random", "bottom"],
                    inputs=["iid", "clustered"]),
               smoke=dict(M=[8], C=[2], E=[2], E_kind=["local", "top"], inputs=["iid"]),
               full=dict(M=[8, 16, 64, 256], C=[1, 2, 4, 8, 16], E=[0, 1, 2, 4, 16, 64],
                         inputs=["iid", "clustered", "peaked"])),
    where=lambda p, v: p["E"] + p["C"] <= p["M"],
    search=_exact_set_search, restarts=tiers(3, smoke=1, full=20), universal=True,
    plot_x="E",
    notes="J over U = [M] with Eq 9's softmax weights and optimal coefficients (β*_c the local softmaxes, β_m = v_m "
          "on E): exact margins on the grid plus a search over M = 6 keys in d = 2 with scalar values, C = 2 chunks "
          "and E = one key at any position (an integer axis). 'Reduces' is tested as 'does not increase' (|E| = 0 "
          "changes nothing; a token whose value equals its subset's local softmax changes nothing).",
)

# ------------------------------------------------------------------------------ derived predictions


def _centred_product_variance(a, a2, mean: float, mean2: float) -> float:
    """``Var[(Y - m)(Y' - m')]`` for ``Y = m·exp(ω·a - μ·a - ‖a‖²/2)``, ``Y' = m'·exp(ω·a' - μ·a' - ‖a'‖²/2)``,
    ``ω ~ N(μ, I)`` (``a = x + y - μ``, ``a' = x + y' - μ``): the Gaussian moment generating function gives
    ``E[Y^i Y'^j] = m^i m'^j exp((i² - i)‖a‖²/2 + (j² - j)‖a'‖²/2 + ij a·a')``, and the fourth-order moment
    ``E[(Y - m)²(Y' - m')²]`` is their binomial sum (the same closed form as rfkit.theory.eva's Γ, one order up)."""
    na, nb, g = float(a @ a), float(a2 @ a2), float(a @ a2)
    second = sum(math.comb(2, i) * math.comb(2, j) * (-1) ** (i + j)
                 * math.exp((i * i - i) * na / 2 + (j * j - j) * nb / 2 + i * j * g)
                 for i in range(3) for j in range(3))
    return (mean * mean2) ** 2 * (second - math.expm1(g) ** 2)


#: Nodes of the kernel moments' rule (rank <= 2: 60 an axis, exact for exp(c·z) to c ≈ 11).
KERNEL_GH_POINTS = 3_600


def _kernel_quadrature(ctx: CellContext, x, y, y2, mu, part: str, extra=None):
    """Exact route: ``Y = r ξ(x)ξ(y)``, ``Y' = r ξ(x)ξ(y')`` depend on ``ω = μ + z`` only through ``z·(x + y - μ)``
    and ``z·(x + y' - μ)``: a tensor Gauss-Hermite rule on that span (rank <= 2) evaluates the implementation's
    ``log ξ`` and ``log r`` at its nodes. ``mean``: E[Y] = exp(x·y) and, at μ = x + y, Var[Y] = 0; ``cov``: the
    register's formula exp(x·y + x·y')(exp((x + y - μ)·(x + y' - μ)) - 1), relative to sqrt(Var Y Var Y')."""
    a, a2 = x + y - mu, x + y2 - mu
    try:
        basis, z, w = _span_rule(np.stack([a, a2]), KERNEL_GH_POINTS, degree=2)
    except QuadratureOutOfReach as exc:
        return _beyond_exact_route(exc)
    omega = (mu[None, :] if z is None else mu + z @ basis)[:, None, :]
    feature = ctx.impl("log_xi", log_xi)
    base = proposals_est.log_ratio(GaussianProposal(mu), omega) + feature(x[None], omega)[:, 0]          # (n, 1)
    vals = np.exp(base + feature(np.stack([y, y2]), omega)[:, :, 0])                                      # (n, 2)
    m1, m2 = w @ vals
    target = math.exp(float(x @ y))
    if part == "mean":
        parts = [exact_test(m1, target, tolerance=ctx.tolerance, scale=target)]
        if np.allclose(a, 0.0):   # μ = x + y: Y is constant, Var[Y] = 0 (relative to E[Y]², round-off)
            parts.append(exact_test((w @ vals[:, 0] ** 2 - m1**2) / m1**2, 0.0, tolerance=ctx.tolerance))
        return combine(parts, extra=dict(extra or {}, route="quadrature"))
    cov = w @ (vals[:, 0] * vals[:, 1]) - m1 * m2
    predicted = math.exp(float(x @ y + x @ y2)) * math.expm1(float(a @ a2))
    bound = math.sqrt(math.exp(float(2 * x @ y)) * math.expm1(float(a @ a)) * math.exp(float(2 * x @ y2))
                      * math.expm1(float(a2 @ a2)))
    scale = max(bound, abs(predicted), 1e-8 * target * math.exp(float(x @ y2)))
    return exact_test(cov, predicted, tolerance=ctx.tolerance, scale=scale,
                      extra=dict(extra or {}, route="quadrature", cov=float(cov), predicted=predicted))


def _kernel_moment_cell(ctx: CellContext):
    p = ctx.params
    d = p["d"]
    if p["route"] == "quadrature":  # x, y, y' in random directions (any d), each of norm p["norm"]
        x, y, y2 = (p["norm"] * u / np.linalg.norm(u) for u in ctx.rng.normal(size=(3, d)))
        mu = {"zero": np.zeros(d), "x+y": x + y, "random": 0.5 * ctx.rng.normal(size=d)}[p["mu"]]
        return _kernel_quadrature(ctx, x, y, y2, mu, p["part"])
    x, y = controlled_pair(p["norm"], p["norm"], math.pi / 3, d, ctx.rng)
    y2 = -0.5 * y + 0.3 * x
    mu = {"zero": np.zeros(d), "x+y": x + y, "random": 0.5 * ctx.rng.normal(size=d)}[p["mu"]]
    mom = theory.weighted_kernel_moments(x, y, y2, mu)
    var_y = max(theory.weighted_kernel_moments(x, y, y, mu)["cov"], 0.0)
    if p["part"] == "mean":
        target, scale, var = mom["mean"], mom["mean"], var_y
    else:
        bound = math.sqrt(var_y * max(theory.weighted_kernel_moments(x, y2, y2, mu)["cov"], 0.0))
        roundoff = 1e-8 * mom["mean"] * mom["mean2"]     # the centred products of a constant Y are round-off
        target, scale = mom["cov"], max(bound, abs(mom["cov"]), roundoff)
        var = _centred_product_variance(x + y - mu, x + y2 - mu, mom["mean"], mom["mean2"])
    # sized from exact moments before any draw (cannot steer the verdict): beyond the tier's budget the cell's
    # point is decided by the quadrature (the full tier's d = 64, μ random: a radius of 1.2e15 after the budget)
    need = required_replicates(math.sqrt(max(var, 0.0)) / scale, **ctx.test)
    if not need <= ctx.replicates:
        return _kernel_quadrature(ctx, x, y, y2, mu, p["part"],
                                  extra=dict(monte_carlo=f"needs {need:.2g} replicates > {ctx.replicates}"))
    proposal, feature = GaussianProposal(mu), ctx.impl("log_xi", log_xi)

    @functools.partial(_batched, entries=3 * d)
    def values(rng, n):
        omega = proposal.sample(rng, n)[:, None, :]
        base = proposals_est.log_ratio(proposal, omega) + feature(x[None], omega)[:, 0]                   # (n, 1)
        return np.exp(base + feature(np.stack([y, y2]), omega)[:, :, 0])                   # (n, 2)

    if p["part"] == "mean":
        return ctx.mean(lambda rng, n: values(rng, n)[:, 0], target, scale=scale, sd=math.sqrt(var))

    def products(rng, n):
        vals = values(rng, n)
        return (vals[:, 0] - mom["mean"]) * (vals[:, 1] - mom["mean2"])

    # μ = x + y makes Y constant: the exact variance is 0 but the computed products are round-off noise, judged
    # by the asymptotic sequence on the round-off scale as before; otherwise the exact variance (Catoni)
    sd = math.sqrt(var) if var > 0 and p["mu"] != "x+y" else None
    return ctx.mean(products, target, scale=scale, sd=sd)


KERNEL_MOMENTS = Claim(
    id="eva.derived.weighted_kernel_moments", source="register, derived prediction",
    statement="For ω ~ N(μ, I) and Y(x, y) := r(ω) ξ(x, ω) ξ(y, ω): E[Y] = exp(x·y); Cov[Y(x, y), Y(x, y')] = "
              "exp(x·y + x·y')(exp((x + y - μ)·(x + y' - μ)) - 1); Var[Y(x, y)] = 0 for μ = x + y.",
    kind="moment",
    domain=dict(
        part=Choice("E[Y]; Cov[Y(x, y), Y(x, y')] (Var[Y] = 0 at μ = x + y is tested with E[Y])", ("mean", "cov")),
        d=Integers("any x, y, y' ∈ R^d", 1, math.inf, points=(1,), up_to=4,
                   why="Y, Y' depend on x, y, y', μ through their Gram matrix, which every d >= 4 realises (d to "
                       "64 at the full tier)"),
        norm=Range("any x, y, y': their norm (x = y = 0 included)", 0.0, math.inf, up_to=(None, 0.7),
                   why="the register's largest norm"),
        mu=Choice("one draw ω ~ N(μ, I): μ = 0, μ = x + y (the zero-variance point), random",
                  ("zero", "x+y", "random"))),
    tolerance=MOMENT_TOL, units="relative error of the moment (covariance: / sqrt(Var Y Var Y'))",
    cell=_kernel_moment_cell,
    grid=tiers(dict(route=["quadrature", "monte_carlo"], part=["mean", "cov"], d=[1, 2, 4],
                    norm=[0.0, 0.2, 0.5, 0.7], mu=["zero", "x+y", "random"]),
               smoke=dict(d=[4], norm=[0.4], mu=["zero", "x+y"]),
               full=dict(d=[1, 2, 4, 8, 16, 64], norm=[0.0, 0.1, 0.3, 0.5, 0.7], mc_cov=[True])),
    replicates=tiers(100_000, smoke=40_000, full=5_000_000),
    where=lambda p, v: p["route"] == "quadrature" or (p["d"] >= 2 and 0.0 < p["norm"] < 0.7
                                                      and (p["part"] == "mean" or p.get("mc_cov", False))),
    roles=("log_xi",), plot_x="norm",
    notes="Routes: quadrature (any d, x, y, y' in random directions of the cell's norm) — the moments of the "
          "implementation's Y, Y' by a tensor Gauss-Hermite rule on span{x + y - μ, x + y' - μ} (exact to round-off); "
          "monte_carlo (d >= 2, x, y at 60°, y' = -y/2 + 0.3x) — E[Y] with the exact variance, and Cov[Y, Y'] as the "
          "mean of centred products with their exact variance (Gaussian moment generating function, fourth order). "
          "The products are log-normal-like (quick, seed 0: a Monte Carlo covariance cell at μ random, d = 4 stayed "
          "underpowered after 800k draws), so the covariance is decided by the quadrature in smoke and quick and by "
          "Monte Carlo too at the full tier, where a cell whose exact variance needs more replicates than the tier "
          "allows (required_replicates, from exact moments before any draw) is decided by the quadrature instead.",
)


def _second_moment_target(which: str, mom, y):
    """``(replicate function of the terms, predicted moment, scale)`` for one moment of eva.derived.cv_moments;
    every mean is known exactly (E h = 1, E h_m = w_m, E g = SoftmaxAttn), so each moment is a mean of products."""
    w = mom.mean_h
    if which == "var_h":
        return (lambda t: (t.h[:, 0] - 1.0) ** 2), mom.var_h, mom.var_h
    if which == "cov_h":
        # Var[h_m] = 0 at μ = q_n + k_m: the Cauchy-Schwarz scale has the quadrature route's round-off floor
        return ((lambda t: (t.h_tokens[:, 0, 0] - w[0]) * (t.h_tokens[:, 0, 1] - w[1])), mom.cov_h[0, 1],
                max(math.sqrt(mom.cov_h[0, 0] * mom.cov_h[1, 1]), 1e-10 * abs(w[0] * w[1])))
    if which == "cov_hg":
        direction = mom.cov_hg / max(np.linalg.norm(mom.cov_hg), _TINY)
        return ((lambda t: (t.h[:, 0] - 1.0) * ((t.g[:, 0] - y) @ direction)), float(np.linalg.norm(mom.cov_hg)),
                math.sqrt(mom.var_h * np.trace(mom.var_g)))
    trace = float(np.trace(mom.var_g))
    return (lambda t: np.sum((t.g[:, 0] - y) ** 2, axis=-1)), trace, trace


#: Nodes of the second-moment quadrature in all (30 per axis at rank 4: products e^{z·(a_m + a_m')} with
#: ‖a_m‖ ~ 3 under the far mean need more nodes than the means; 16 per axis left 15% errors there).
CV_MOMENT_GH_POINTS = 810_000


def _cv_moment_quadrature(ctx: CellContext, q, k, v, mu, moments) -> Evidence:
    """Exact route (S = 1): the moments of the implementation's h_m, h, g over a Gauss-Hermite rule on
    span{q_n + k_m - μ} (:func:`_quadrature_terms`, one evaluation for every moment of the cell) against
    eva.derived.cv_moments' closed forms."""
    mom = theory.cv_moments(q[0], k, v, mu, 1)
    try:
        terms, w = _quadrature_terms(ctx, q, k, v, mu, points=CV_MOMENT_GH_POINTS, degree=2)
    except QuadratureOutOfReach as exc:
        return _beyond_exact_route(exc)
    h_tok, h, g = terms.h_tokens[:, 0], terms.h[:, 0], terms.g[:, 0]
    mean_h, mean_tok, mean_g = w @ h, w @ h_tok, w @ g
    centred_tok, centred_g = h_tok - mean_tok, g - mean_g
    diag = np.sqrt(np.maximum(np.diag(mom.cov_h), 0.0))       # Var[h_m] = 0 at μ = q_n + k_m: round-off floor
    checks = {
        "mean_h": lambda: exact_test(mean_tok / mom.mean_h, 1.0, tolerance=ctx.tolerance),
        "var_h": lambda: exact_test(w @ (h - mean_h) ** 2, mom.var_h, tolerance=ctx.tolerance,
                                    scale=max(mom.var_h, _TINY)),
        "cov_h": lambda: exact_test(np.einsum("r,rm,rn->mn", w, centred_tok, centred_tok), mom.cov_h,
                                    tolerance=ctx.tolerance,
                                    scale=np.maximum(np.outer(diag, diag), 1e-10 * np.outer(mom.mean_h, mom.mean_h))),
        "cov_hg": lambda: exact_test(np.einsum("r,r,rv->v", w, h - mean_h, centred_g), mom.cov_hg,
                                     tolerance=ctx.tolerance,
                                     scale=max(math.sqrt(mom.var_h * np.trace(mom.var_g)), _TINY)),
        "var_g": lambda: exact_test(np.einsum("r,ru,rv->uv", w, centred_g, centred_g), mom.var_g,
                                    tolerance=ctx.tolerance, scale=max(float(np.trace(mom.var_g)), _TINY)),
    }
    return combine([checks[m]() for m in moments], extra=dict(nodes=int(w.size), moments=list(moments)))


def _cv_moment_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu, s_count = _mean_vector(ctx, q, k), ctx.params["S"]
    which = ctx.params["moment"]
    if ctx.params["route"] == "quadrature":  # one cell sweeps every moment (a tuple)
        return _cv_moment_quadrature(ctx, q, k, v, mu, (which,) if isinstance(which, str) else which)
    mom = theory.cv_moments(q[0], k, v, mu, s_count)
    fn, target, scale = _second_moment_target(which, mom, _softmax(q, k, v)[0])
    # every replicate is a quadratic form Xᵀ A X of the centred token terms X_m = h_m - w_m: its exact variance
    # (fourth moments of the Gaussian–exponential terms, rfkit.theory.eva.quadratic_form_sd) gives a Catoni sequence
    m = k.shape[0]
    if which == "var_h":
        form = np.ones((m, m))
    elif which == "cov_h":
        form = np.zeros((m, m))
        form[0, 1] = 1.0
    elif which == "cov_hg":
        form = np.outer(np.ones(m), v @ (mom.cov_hg / max(np.linalg.norm(mom.cov_hg), _TINY)))
    else:
        form = v @ v.T
    sd = theory.quadratic_form_sd(q[0], k, mu, form, s_count)
    draw = _terms_draw(ctx, q, k, v, GaussianProposal(mu), s_count, fn)
    if sd == 0:
        # a factor is the constant h_m = w_m (μ = q_n + k_m): every replicate is zero in exact arithmetic and
        # its computed value the terms' round-off, so each is judged exactly on the round-off floor of the scale
        return exact_test(draw(ctx.rng, ROUNDOFF_REPLICATES), target, tolerance=ctx.tolerance, scale=scale,
                          extra=dict(route="every replicate (exact variance 0)"))
    return ctx.mean(draw, target, scale=max(scale, _TINY), sd=sd)


#: Replicates of a Monte Carlo cell whose replicate is zero in exact arithmetic, each judged exactly.
ROUNDOFF_REPLICATES = 10_000

#: The quadrature route's cells sweep every moment at once (one evaluation of the terms).
CV_MOMENTS_ALL = ("mean_h", "var_h", "cov_h", "cov_hg", "var_g")

CV_MOMENTS = Claim(
    id="eva.derived.cv_moments", source="register, derived prediction",
    statement="With S iid draws from N(μ, I): E[h_m] = w_m; Cov[h_m, h_m'] = w_m w_m'(Γ_mm' - 1)/S; "
              "Var[h] = (Ω - 1)/S; Cov[h, g] = Σ Cov[h_m, h_m'] v_m'; Var[g] = Σ Cov[h_m, h_m'] v_m v_m'ᵀ.",
    kind="moment",
    domain=dict(
        moment=Choice("E[h_m], Cov[h_m, h_m'], Var[h], Cov[h, g], Var[g]",
                      ("mean_h", "cov_h", "var_h", "cov_hg", "var_g")),
        S=Integers("S iid draws", 1, math.inf, points=(1,), up_to=8,
                   why="the (co)variances of a mean of S iid terms are the one-draw values over S (64 at full)"),
        M=Integers("any K: M keys (M = 1: h_1 = h)", 1, math.inf, points=(1,), up_to=4,
                   why="every moment is a sum over pairs of tokens (M to 64 at the full tier)"),
        d=Integers("q_n, k_m ∈ R^d", 1, math.inf, points=(1,), up_to=4,
                   why="the moments depend on q_n, K, μ through the Gram matrix of the M = 4 vectors q_n + k_m - μ, "
                       "which every d >= 4 realises (d to 8 at the full tier)"),
        mu=MU_AXIS),
    tolerance=MOMENT_TOL, units="relative error of the second moment (cross moments: / Cauchy-Schwarz bound)",
    cell=_cv_moment_cell,
    grid=tiers(dict(route=["quadrature", "monte_carlo"], S=[1, 8], M=[1, 4], d=[1, 2, 4], mu=list(MEANS), s=[0.2],
                    moment=[CV_MOMENTS_ALL, "var_h", "cov_h", "cov_hg", "var_g"]),
               smoke=dict(S=[4], M=[4], d=[2], mu=["zero"]),
               full=dict(S=[1, 8, 64], M=[1, 2, 4, 16, 64], d=[1, 2, 4, 8], s=[0.2, 0.5, 1.0], design=["full"])),
    replicates=tiers(100_000, smoke=40_000, full=4_000_000),
    where=lambda p, v: (p["S"] == 1 and p["d"] in (1, 4) and p["moment"] == CV_MOMENTS_ALL
                        if p["route"] == "quadrature"
                        else p["moment"] != CV_MOMENTS_ALL and p["M"] >= 2 and p["mu"] != "far"
                        and (p.get("design") == "full" or p["M"] == 4 and p["d"] == 2
                             and p["mu"] in ("zero", "q+mean_k"))),
    related={"eva.eq22.per_token_cv_mean": "E[h_m] = w_m (Eq 22), tested there by Monte Carlo as well"},
    roles=("control_variate_terms",), plot_x="moment",
    notes="Routes: quadrature (S = 1: the moments of a mean of S iid terms are the one-draw moments over S; every "
          "proposal mean, d <= 4) — the implementation's h_m, h, g at the nodes of a Gauss-Hermite rule on "
          "span{q_n + k_m - μ} (exact to round-off) against the closed forms; monte_carlo (μ ∈ {0, q_n + mean k}, "
          "d = 2, M = 4, S ∈ {1, 8}) — means are known exactly (E h = 1, E h_m = w_m, E g = SoftmaxAttn), so each "
          "second moment is the mean of a product of centred replicates, in sequential cells; Var[h] with the exact "
          "variance of (h - 1)² (the fourth moment of W from the Gaussian moment generating function: Catoni "
          "sequence), and so the cross moments: each replicate is a quadratic form in the centred token terms, whose "
          "exact variance is a sum of their closed-form fourth moments (rfkit.theory.eva.quadratic_form_sd). The "
          "products are log-normal-like (s = 0.5: one replicate carried a third of the sample variance at 40k draws), "
          "so the Monte Carlo runs at s = 0.2 and the far and random means (Ω ~ e^9) by quadrature only.",
)


#: Monte Carlo of a limit ``S·MSE → σ²`` at one finite S judges the limit only where the S draws' effective sample size
#: ``S/Ω`` (Kong's ESS of importance weights, Ω = E_ρ[W²], the largest over the SNIS terms) is at least ``MC_REACH``,
#: the usual size for a normal approximation. Below it the draws rarely meet the weights that make σ²: at the full
#: tier's s = 1, d >= 8 (Ω up to 1e18, S/Ω down to 1e-16) S·MSE is 1e-12 of σ² — a pre-asymptotic value, not a wrong
#: limit. The quick tier's cells have S/Ω >= 30. Above the gate the O(1/S) correction can still be large where Ω is
#: (s = 0.5, Ω ≈ 4: S·MSE is 0.86 of its limit at S = 256); the exact route decides those inputs at rank <= 4.
MC_REACH = 30


def _asymptotic_mse_evidence(ctx: CellContext, draw_errors, s_count: int, predicted: float, omega_sq: float):
    """A sequential cell of ``S·‖error‖²`` replicates against ``lim S·MSE`` (units relative to it): ``draw_errors(rng,
    n)`` gives ``n`` errors ``(n, d_v)``; the cell stops when decided (asymptotic sequence: the finite-S law of the
    error has no closed-form variance). Where ``S < MC_REACH·Ω`` nothing is drawn: the cell cannot decide, and says
    which S would."""
    if not s_count >= MC_REACH * omega_sq:
        reach = f"{MC_REACH * omega_sq:.3g}" if math.isfinite(omega_sq) else "inf (Ω diverges)"
        return undecided(f"pre-asymptotic: S = {s_count} < {MC_REACH}·Ω = {reach} (Ω = E_ρ[W²] = {omega_sq:.3g}), so "
                         f"Monte Carlo at this S cannot judge the limit; S >= {reach} draws per estimate would (the "
                         f"exact route decides the limit where the span has rank <= 4)", extra=dict(omega_sq=omega_sq))
    return ctx.mean(lambda rng, n: s_count * np.sum(draw_errors(rng, n) ** 2, axis=-1), predicted,
                    scale=max(predicted, _TINY), extra=dict(omega_sq=omega_sq))


#: The exact route's S for "S → ∞": the top of :func:`exact_rate_cell`'s ladder (the quadrature costs the same at
#: any S; S·MSE and S·bias there are within 1e-9 of their limits for every quick-tier input, the far mean included).
LIMIT_S = 2.0**LADDER_LOG2


def _snis_exact(ctx: CellContext, q, k, v, mu, parts):
    """S·MSE and S·bias of the exact finite-S SNIS moments (quadrature, :func:`rfkit.theory.eva.snis_finite_mse`,
    :func:`~rfkit.theory.eva.snis_finite_bias`) at ``S = LIMIT_S`` against σ²_RFA and b."""
    sigma2, b = theory.snis_asymptotics(q[0], k, v, mu)
    checks = []
    if "mse" in parts:
        value = LIMIT_S * theory.snis_finite_mse(q[0], k, v, mu, [LIMIT_S])[0]
        checks.append(exact_test(value, sigma2, tolerance=ctx.tolerance, scale=max(sigma2, _TINY),
                                 extra=dict(part="mse", s_mse=float(value), sigma2=sigma2)))
    if "bias" in parts:
        value = LIMIT_S * theory.snis_finite_bias(q[0], k, v, mu, [LIMIT_S])[0]
        checks.append(exact_test(value, b, tolerance=ctx.tolerance, scale=max(float(np.linalg.norm(b)), _TINY),
                                 extra=dict(part="bias", s_bias=value.tolist(), b=b.tolist())))
    return combine(checks, extra=dict(S=LIMIT_S, parts=list(parts)))


def _snis_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    mu, part = _mean_vector(ctx, q, k), ctx.params["part"]
    if ctx.params["route"] == "exact":
        return _snis_exact(ctx, q, k, v, mu, (part,) if isinstance(part, str) else part)
    s_count = ctx.params["S"]
    sigma2, _ = theory.snis_asymptotics(q[0], k, v, mu)
    y = _softmax(q, k, v)[0]
    draw = _terms_draw(ctx, q, k, v, GaussianProposal(mu), s_count, lambda t: t.coefficient[:, 0] - y)
    return _asymptotic_mse_evidence(ctx, draw, s_count, sigma2, theory.cv_moments(q[0], k, v, mu, 1).omega_sq)


#: The exact route's cells test both limits at once (a tuple).
SNIS_PARTS = ("mse", "bias")

SNIS_ASYMPTOTICS = Claim(
    id="eva.derived.snis_asymptotics", source="register, derived prediction",
    statement="For RFA_ρ with S iid draws from N(μ, I): S·MSE → σ²_RFA = Σ w_m w_m' (v_m - β)·(v_m' - β) Γ_mm' and "
              "S·bias → -Σ w_m w_m' (v_m - β) Γ_mm'.",
    kind="moment",
    domain=dict(
        part=Choice("S·MSE → σ²_RFA and S·bias → b", SNIS_PARTS),
        mu=MU_AXIS,
        d=_d_axis(why="the limits depend on q_n, K, μ only through the Gram matrix of the M = 8 vectors "
                      "q_n + k_m - μ (the exact route at d <= 4, rank <= 4; Monte Carlo of S·MSE at d = 2, 8; d to "
                      "16 at the full tier)")),
    tolerance=MOMENT_TOL, units="relative error of S·MSE against σ²_RFA (S·bias: ‖S·bias - b‖/‖b‖)",
    cell=_snis_cell,
    grid=tiers(dict(route=["exact", "monte_carlo"], part=[SNIS_PARTS, "mse"], S=[128], mu=list(MEANS),
                    d=[1, 2, 4, 8], s=[0.2]),
               smoke=dict(S=[64], mu=["zero"], d=[2, 4]),
               full=dict(S=[256, 1024, 4096], d=[1, 2, 4, 8, 16], s=[0.2, 0.5, 1.0])),
    replicates=tiers(12_000, smoke=6_000, full=200_000),
    where=lambda p, v: (p["part"] == SNIS_PARTS and p["d"] <= 4 and p["S"] <= 256   # one S per tier: S-free
                        if p["route"] == "exact"
                        else p["part"] == "mse" and p["d"] in (2, 8, 16) and p["mu"] in ("zero", "q+mean_k")),
    related={"eva.appb2.finite_s_bias": "the sign of the finite-S bias along its exact direction",
             "eva.eq21.coefficient_consistency": "the 1/S rate of the MSE whose constant this is",
             "eva.derived.eva13_asymptotics": "EVA13's limit for E = ∅, C = 1 is this σ²_RFA"},
    roles=("control_variate_terms",), plot_x="mu",
    notes="Routes: exact (d <= 4, every proposal mean) — S·MSE and S·bias of the exact finite-S SNIS moments "
          "(rfkit.theory.eva.snis_finite_mse / snis_finite_bias, quadrature on span{q_n + k_m - μ}) at S = 2^128, "
          "where they are within 1e-9 of σ²_RFA and b for every quick-tier input (the far mean's S·bias is still "
          "52% off at S = 2^20: the limit is computed, not simulated); monte_carlo (S·MSE only, μ ∈ {0, q_n + mean "
          "k}, d ∈ {2, 8}) — the implementation's S·‖β̂ - β‖² at S = 128 against σ²_RFA. The approach of S·MSE to "
          "σ²_RFA is slow when Ω = E_ρ[W²] is large (s = 0.5, d = 4: S·MSE/σ² ≈ 0.65 at S = 64, 0.8 at S = 256), so "
          "Monte Carlo uses s = 0.2 (Ω ≈ 1.2, where the O(1/S) correction is ~1% at S = 64) and the large-Ω inputs "
          "run in the full tier up to S = 4096, judged only where S/Ω >= 30 (MC_REACH; below it a cell is undecided "
          "and names the S it needs). The implementation's S·bias is not simulated (resolving b/S at "
          "S >= 256 needs ~1e6 replicates per cell); its sign along the exact bias direction is tested by "
          "eva.appb2.finite_s_bias.",
)


def _eva13_exact(ctx: CellContext, q, k, v, labels, means, sampling: str):
    """``LIMIT_S·MSE(LIMIT_S)`` of EVA13 from the exact finite-S SNIS MSE (quadrature) against the limit, where it is
    a sum of independent SNIS errors: EVA13 - SoftmaxAttn = Σ_c π_c (β̂_c - β*_c) with exact masses π_c, and β̂_c
    the SNIS estimate of the local softmax over P_c (weights w_m/π_c) — independent across subsets under per_chunk
    sampling (MSE = Σ_c π_c² MSE_c), a single term under shared sampling with C = 1. ``None`` where a subset's span
    ``{q + k_m - μ_c}`` has rank > 4."""
    w = np.exp(theory.log_softmax_weights(q[0], k))
    total = 0.0
    for c in range(ctx.params["C"]):
        members = labels == c
        mu_c = means if sampling == "shared" else means[c]
        if theory.snis_quadrature_rank(q[0], k[members], mu_c) > theory.SNIS_QUADRATURE_RANK:
            return None
        mse = theory.snis_finite_mse(q[0], k[members], v[members], mu_c, [LIMIT_S])[0]
        total += w[members].sum() ** 2 * LIMIT_S * mse
    predicted = theory.eva13_asymptotics(q[0], k, v, labels, means, sampling=sampling)
    return exact_test(total, predicted, tolerance=ctx.tolerance, scale=max(predicted, _TINY),
                      extra=dict(S=LIMIT_S, s_mse=float(total), limit=predicted))


def _eva13_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    m, s_count, sampling = k.shape[0], ctx.params["S"], ctx.params["sampling"]
    labels = contiguous_labels(m, ctx.params["C"], exact=np.arange(ctx.params["E"]))
    chunk_count = ctx.params["C"]
    if sampling == "shared":
        mu = _mean_vector(ctx, q, k)
        shape, means = (s_count,), mu
    else:
        means = np.stack([q[0] + k[labels == c].mean(axis=0) for c in range(chunk_count)])
        mu = means[:, None, :]
        shape = (chunk_count, s_count)
    if ctx.params["route"] == "exact":
        ev = _eva13_exact(ctx, q, k, v, labels, means, sampling)
        if ev is None:
            raise ValueError("the exact route needs every subset's span {q + k_m - μ_c} of rank <= 4 (d <= 4)")
        return ev
    predicted = theory.eva13_asymptotics(q[0], k, v, labels, means, sampling=sampling)
    y = _softmax(q, k, v)[0]
    estimator = ctx.impl("eva_ideal", eva_ideal)

    def draw_errors(rng, count):
        errors = []
        for n in chunks(count, max(1, BATCH_ENTRIES // (s_count * m * chunk_count))):
            omega = mu + rng.standard_normal((n, *shape, k.shape[1]))
            log_ratio = -np.einsum("...i,...i->...", omega, mu) + 0.5 * np.sum(mu * mu, axis=-1)
            errors.append(estimator(q, k, v, labels, omega=omega, log_ratio=log_ratio, sampling=sampling)[:, 0] - y)
        return np.concatenate(errors)

    omega_sq = max(theory.cv_moments(q[0], k[labels == c], v[labels == c], means if sampling == "shared" else means[c],
                                     1).omega_sq for c in range(chunk_count))
    return _asymptotic_mse_evidence(ctx, draw_errors, s_count, predicted, omega_sq)


def _eva13_where(p, v) -> bool:
    if p["E"] + p["C"] > p["M"] or not (p["sampling"] == "shared" or p["mu"] == "zero"):
        return False
    if p["route"] == "exact":   # S-free: one S per tier; shared sampling is one SNIS term only for C = 1
        return p["S"] <= 256 and p.get("d", 4) <= 4 and (p["sampling"] == "per_chunk" or p["C"] == 1)
    return p["mu"] in LIGHT_MEANS


#: The proposal means at which Monte Carlo reaches EVA13's 1/S regime at S = 64 with light tails (Ω = E_ρ[W²] <= 1.4
#: at s = 0.2). q_n + k_1 (Ω ~ 1.1-1.8) gives S·‖error‖² a heavy tail (Hill index 2.2 at shared, C = 1, E = ∅); the
#: random (Ω ~ 2-30) and far (Ω ~ 1e3-3e4) means need S >> Ω.
LIGHT_MEANS = ("zero", "q+mean_k")

EVA13_ASYMPTOTICS = Claim(
    id="eva.derived.eva13_asymptotics", source="register, derived prediction",
    statement="shared sampling: S·MSE(EVA13) → Σ_{m,m'∉E} w_m w_m' (v_m - β*_c(m))·(v_m' - β*_c(m')) Γ_mm'; per_chunk "
              "sampling (N(μ_c, I) per subset): S·MSE → Σ_c Σ_{m,m'∈P_c} w_m w_m' (v_m - β*_c)·(v_m' - β*_c) "
              "exp((u_m - μ_c)·(u_m' - μ_c)).",
    kind="moment",
    domain=dict(
        sampling=Choice("shared sampling (one set from N(μ, I) for all subsets); per_chunk sampling (N(μ_c, I) per "
                        "subset)", ("shared", "per_chunk")),
        E=Integers("E and {P_c} disjoint and covering [M]: the exact set E (E = ∅ included)", 0, math.inf,
                   points=(0,), up_to=2,
                   why="excluded keys only drop terms of the sums (|E| to 8 at the full tier)"),
        C=Integers("{P_c}: C subsets (C = 1: RFA over the keys outside E)", 1, math.inf, points=(1,), up_to=4,
                   why="the limit is a sum over pairs inside and across subsets (C to 8 at the full tier)"),
        mu=MU_AXIS),
    readings={"light_shared": Reading(
        "every μ except shared sampling with C >= 2 at the means q_n + k_1, random and far: there the subsets' SNIS "
        "errors share the draws (correlated, two denominators: no exact route) and Monte Carlo at S = 64 is "
        "heavy-tailed (q_n + k_1: Hill index 2.2) or pre-asymptotic (Ω ~ 2-30 random, 1e3-3e4 far), so that part "
        "is not tested; the mean axis is narrowed to the light means "
        "for it (per_chunk sampling at every C and shared sampling with C = 1 are tested at every mean, by the exact "
        "route, and refute if they fail)",
        narrows=dict(mu=Choice("shared sampling with C >= 2: the light proposal means 0, q_n + mean k",
                               LIGHT_MEANS)))},
    tolerance=MOMENT_TOL, units="relative error of S·MSE against the limit",
    cell=_eva13_cell,
    grid=tiers(dict(route=["exact", "monte_carlo"], sampling=["shared", "per_chunk"], S=[64], M=[8], E=[0, 2],
                    C=[1, 4], mu=list(MEANS), s=[0.2]),
               smoke=dict(route=["monte_carlo"], E=[2], C=[2], mu=["zero"]),
               full=dict(S=[256, 1024, 4096], M=[8, 16, 64], E=[0, 2, 8], C=[1, 2, 4, 8], d=[2, 8],
                         s=[0.2, 0.5, 1.0])),
    replicates=tiers(12_000, smoke=9_000, full=200_000),
    where=_eva13_where,
    related={"eva.derived.snis_asymptotics": "the limit for E = ∅, C = 1 (σ²_RFA)"},
    roles=("eva_ideal",), plot_x="C",
    notes="Routes: exact (d <= 4; per_chunk sampling for every C, shared sampling for C = 1, every proposal mean) — "
          "EVA13 - SoftmaxAttn = Σ_c π_c (β̂_c - β*_c) (exact masses π_c), a sum of independent SNIS errors of the "
          "local softmax under per_chunk sampling and one such error under shared sampling with C = 1, so "
          "S·MSE at S = 2^128 is Σ_c π_c² S·MSE_c from the exact finite-S SNIS MSE (rfkit.theory.eva."
          "snis_finite_mse, quadrature) — the limit computed, not simulated, for the heavy far and random means; "
          "monte_carlo (μ ∈ {0, q_n + mean k} for shared sampling, μ_c = q_n + mean_{P_c} k for per_chunk, "
          "S = 64) — the implementation's (eva_ideal) S·‖EVA13 - SoftmaxAttn‖² against the limit. Shared sampling "
          "with C >= 2 correlates the subsets' errors (no exact route): it is tested by Monte Carlo only, at the "
          "small-Ω means, and q_n + k_1, the random and far means are declared untested there (reading light_shared, a "
          "narrowing: the verdict cannot claim them). Covering them needs a two-denominator quadrature of the cross "
          "terms E[(β̂_c - β*_c)·(β̂_c' - β*_c')] (a 2-D Laplace lattice in (t, t'), ~1e6 points per subset pair, "
          "~1e10-1e11 operations a cell: full tier only) or Monte Carlo at S >> Ω with a tail-valid test (q_n + k_1: "
          "a variance bound for a non-asymptotic sequence; random: S >= 4096 at full; far: out of reach). At s = 0.5 "
          "(Ω ≈ 4) S·MSE is 0.67 of the limit at S = 64 and 0.86 at S = 256 (a slow approach, not a wrong limit), so "
          "large Ω runs in the full tier, judged only where S/Ω >= 30 (MC_REACH, Ω the largest over the subsets). "
          "Per_chunk's μ_c is App C's "
          "q_n + mean_{P_c} k (the register's N(μ_c, I) with that choice).",
)

# --------------------------------------------------------------------- App G.2: LARA as a CV estimator


def _lara_setup(ctx: CellContext):
    """LARA's draws ``(C, S_c, d)`` (Eq 34 proposals), its balance-heuristic weights and ``log r`` per draw for
    :func:`control_variate_terms`: ``log(C α_c(ω)) + log N(ω; 0, I) - log q_c(ω)`` so that ``h = (1/S_c) Σ_{c,j}
    α_c W_c`` (the MIS estimate of 1)."""
    q, k, v = _inputs(ctx, n=ctx.params["N"])
    n_props, per = ctx.params["C"], ctx.params["S_c"]
    props = lara_proposals(q, k, n_props, proposal="eq34")
    omega = props.proposals.sample(ctx.rng, per)
    alpha = mis_weights("balance", cross_log_density(props.proposals, omega))           # (1, C, S_c)
    log_ratio = (np.log(n_props * alpha[0]) + proposals_est.log_ratio(props.proposals, omega)).ravel()
    return q, k, v, props, omega, log_ratio


def _lara_cell(ctx: CellContext):
    q, k, v, props, omega, log_ratio = _lara_setup(ctx)
    lara = ctx.impl("lara_attention", lara_attention)(q, k, v, proposals=props, omega=omega, weights="balance")
    terms = _terms(ctx, q, k, v, omega.reshape(-1, omega.shape[-1]), log_ratio)
    part = ctx.params["part"]
    if part == "eq6":
        rhs = control_variate_estimate(terms.g, terms.h, 1.0, terms.coefficient)
        return exact_test(lara, rhs, tolerance=ctx.tolerance, scale=_value_scale(v))
    if part == "eq7":
        tokens = control_variate_family(terms, terms.coefficient[..., None, :], per_token=True)
        return exact_test(tokens.sum(axis=-2), lara, tolerance=ctx.tolerance, scale=_value_scale(v))
    tilde = control_variate_family(terms, token_coefficients(terms))
    return exact_test(tilde, _softmax(q, k, v), tolerance=ctx.tolerance, scale=_value_scale(v))


LARA_CV = Claim(
    id="eva.appg2.lara_cv_form", source="App G.2",
    statement="LARA and RFA are both SNIS estimators that differ in the proposal, so the control-variate "
              "generalisation of this paper also applies to LARA.",
    kind="identity",
    domain=dict(
        part=Choice("the control-variate generalisation: LARA = g - β̂(h - 1) (Eq 6 form), Σ_m g̃_m with the shared "
                    "β̂ (Eq 7), per-token coefficients v_m give softmax (Prop 1 form)", ("eq6", "eq7", "prop1")),
        weights=Choice("LARA: its multiple-importance-sampling weights, the balance heuristic and LARA's default "
                       "Eq 9 weights (signed)", ("balance", "eq9")),
        C=Integers("LARA's number of proposals (C = 1: plain SNIS with the Eq 34 proposal)", 1, math.inf,
                   points=(1,), up_to=4, why="every proposal adds terms of the same form (8 at the full tier)"),
        S_c=Integers("samples per proposal", 1, math.inf, points=(1,), up_to=3,
                     why="the identities hold draw by draw (16 at the full tier)"),
        inputs=Choice("SW inputs: G-iid, G-peaked", ("iid", "peaked"))),
    readings={"balance": Reading("LARA with the balance-heuristic weights only: its default signed Eq 9 weights are "
                                 "not run (control_variate_terms works in log space and needs positive weights; "
                                 "a linear-space route would cover them)",
                                 narrows=dict(weights=Choice("the balance heuristic", ("balance",))))},
    tolerance=1e-10, units="|Δ| / RMS value coordinate",
    cell=_lara_cell,
    grid=tiers(dict(part=["eq6", "eq7", "prop1"], weights=["balance"], N=[4, 8], M=[8], C=[1, 2, 4], S_c=[1, 3],
                    inputs=["iid", "peaked"]),
               smoke=dict(N=[4], C=[2], S_c=[1], inputs=["iid"]),
               full=dict(N=[8, 16], M=[16, 64], C=[1, 2, 4, 8], S_c=[1, 4, 16], inputs=["iid", "clustered", "peaked"])),
    where=lambda p, v: p["C"] <= min(p["N"], p["M"]),
    related={"lara.eq8.mis_unbiased": "E[h] = 1 and E[h_m] = w_m under LARA's sampling: the unbiasedness of MIS"},
    roles=("lara_attention", "control_variate_terms"), plot_x="part",
    notes="LARA (Eq 34 proposals, MIS weights) written with its own importance weights W = α_c p_n/q_c (exact Z). "
          "Parts: (a) eq6 — LARA = g - β̂(h - 1) with LARA's weights; (b) eq7 — Σ_m g̃_m with the shared β̂ equals "
          "LARA; (d) prop1 — per-token coefficients v_m give softmax. The register's (c), the Monte Carlo of Eq 22's "
          "means under LARA's sampling, is the unbiasedness of MIS (lara.eq8.mis_unbiased).",
)
