"""``eva.*`` identity claims: the algebra of RFA as SNIS, per-token control variates, EVA and Scatterbrain.

Every check is deterministic: for each drawn sample set (not on average) both sides are computed by
different routes (definitions of Eq 3 from :mod:`rfkit.theory.eva`, the SNIS primitive of
:mod:`rfkit.estimators.importance`, the linear-cost estimators of :mod:`rfkit.estimators.eva`) and compared
with :func:`~rfkit.validation.stats.exact_test`.

Tolerance. The register fixes deterministic identities at ``|Δ| <= 1e-10·(1 + largest |value| involved)``.
We use ``1e-10`` relative to the largest absolute term *of the same query row* (every side and every
intermediate term of the identity), which is never looser than the register's rule and keeps identities
between tiny quantities (``h_m``, ``w_m``) meaningful. Round-off of these float64 computations is
``~1e-15`` of that magnitude; any error of a formula (a missing weight, a wrong normaliser, a wrong
line of a derivation) is of the order of the terms themselves.

Domains. Each claim declares its quantified domain (:mod:`rfkit.validation.domain`). The standard sweep
(the register's SW) is one design shared by most claims (:func:`_sw_domain`, :func:`_sw_keep`): the full
product of sizes (d, M, S) with the three core proposal means and input generators, and every other named
proposal mean, input generator, value kind and (for "any ρ") proposal shape as a *swept tuple* evaluated in one
cell at d = 4 (:func:`_swept`: the cell runs once per member on the same random stream and reports the worst).

Readings. Only Eq 4's proposal (the symbol q(ω) of Eq 4 against the sentence before it) is read two ways that
the words admit; they decide together. Elsewhere the literal statement decides, and the other versions the
register names (App B.1's trace, App G.1's practical mechanisms, App G.5's Eq 31 last line and the (b)
expression with Z, App D's released-code and overlapping-window chunk rules) are reported beside the verdict.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import integrate, stats
from scipy.special import logsumexp

from rfkit.estimators import proposals as proposals_est
from rfkit.estimators import snis_estimate, softmax_attention
from rfkit.estimators.control_variates import control_variate_estimate
from rfkit.estimators.eva import (
    EXACT,
    GaussianProposal,
    LinearLayerNorm,
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
from rfkit.estimators.proposals import GaussianMixtureProposal
from rfkit.theory import eva as theory
from rfkit.validation.claims.eva.inputs import GENERATORS, MEANS, VALUE_KINDS, attention_inputs, proposal_mean
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import combine, exact_test

TOLERANCE = 1e-10
UNITS = "|Δ| / largest |term| of the query row"
#: Independent sample sets per cell: the identity is checked for each of them.
SETS = 3
_TINY = np.finfo(float).tiny
_LOG_2PI = math.log(2 * math.pi)

# ------------------------------------------------------------------------------------------ helpers


def _row_scale(lead: int, *arrays) -> np.ndarray:
    """Largest ``|entry|`` of each row (the first ``lead`` axes), maximised over the arrays (broadcast)."""
    mags = [np.abs(np.asarray(a, dtype=float)).reshape(np.shape(a)[:lead] + (-1,)).max(axis=-1) for a in arrays]
    return np.maximum(np.maximum.reduce(np.broadcast_arrays(*mags)), _TINY)


def _identity(ctx: CellContext, lhs, rhs, *terms, lead: int = 2, extra: dict | None = None):
    """Exact test of ``lhs == rhs`` relative to the largest term of each row (see the module docstring)."""
    lhs, rhs = np.asarray(lhs, dtype=float), np.asarray(rhs, dtype=float)
    scale = _row_scale(lead, lhs, rhs, *terms)
    scale = scale.reshape(scale.shape + (1,) * (max(lhs.ndim, rhs.ndim) - scale.ndim))
    return exact_test(lhs, rhs, tolerance=ctx.tolerance, scale=scale, extra=extra)


def _relative_log_gap(ctx: CellContext, log_a, log_b, extra: dict | None = None):
    """Relative difference ``|a/b - 1|`` of two positive quantities given in log space."""
    gap = np.abs(np.expm1(np.asarray(log_a) - np.asarray(log_b)))
    return exact_test(gap, 0.0, tolerance=ctx.tolerance, extra=extra)


def _inputs(ctx: CellContext, n: int = 3):
    p = ctx.params
    values = p.get("values", "iid")
    d = p.get("d", 4)
    return attention_inputs(p.get("inputs", "iid"), p.get("N", n), p.get("M", 8), d,
                            d if values == "keys" else p.get("dv", 2), ctx.rng, scale=p.get("s", 0.5), values=values)


#: Proposal shapes for statements about "any ρ" (the register's non-unit-covariance and mixture proposals).
RHOS = ("unit", "narrow", "wide", "mixture")


def _proposal(ctx: CellContext, q, k):
    """``ρ``: ``N(μ, I)`` (``rho = unit``), ``N(μ, τ²I)`` with ``τ = 0.5`` or ``2``, or the two-component mixture
    ``½N(μ, I) + ½N(-μ + 1, 2²I)``; ``μ`` from the ``mu`` axis."""
    mu = proposal_mean(ctx.params.get("mu", "zero"), q, k, ctx.rng)
    rho = ctx.params.get("rho", "unit")
    if rho == "mixture":
        return GaussianMixtureProposal(np.stack([mu, 1.0 - mu]), np.array([1.0, 2.0]), np.array([0.5, 0.5]))
    return GaussianProposal(mu, dict(unit=1.0, narrow=0.5, wide=2.0)[rho])


def _draws(ctx: CellContext, proposal: GaussianProposal, sets: int = SETS):
    """``(omega (sets, S, d), log r)``: independent sample sets of ``S`` draws from the proposal."""
    s, d = ctx.params.get("S", 4), proposal.dim
    omega = proposal.sample(ctx.rng, sets * s).reshape(sets, s, d)
    return omega, proposals_est.log_ratio(proposal, omega)


def _terms(ctx: CellContext, q, k, v, omega, log_ratio, **kw):
    return ctx.impl("control_variate_terms", control_variate_terms)(q, k, v, omega=omega, log_ratio=log_ratio, **kw)


def _log_importance_weights(q, k, omega, proposal: GaussianProposal) -> np.ndarray:
    """``log W(ω_s) = log p_n(ω_s) - log ρ(ω_s)`` from Eq 3's definition, ``(sets, N, S)``."""
    log_p = np.stack([[theory.log_target_density(om, qn, k) for qn in q] for om in omega])
    return log_p - proposal.logpdf(omega)[:, None, :]


def _softmax(q, k, v):
    return softmax_attention(q, k, v, scale=1.0)


# ------------------------------------------------------------------------------ the standard sweep

_SUM_WHY = ("both sides sum the same terms (one per key and sample) in another order or grouping; more terms are "
            "terms of the same kind")
_D_WHY = "d enters only through inner products and squared norms of q_n, k_m and ω_s; the algebra is the same for any d"
#: Core proposal means and generators: their full product with the sizes (the pre-port sweep).
CORE_MU = ("zero", "q+mean_k", "far")
CORE_INPUTS = ("iid", "peaked", "outlier")
#: Every other named mean, generator and value kind: one swept tuple each (:func:`_swept`).
EXTRA_MU = tuple(m for m in MEANS if m not in CORE_MU)
EXTRA_INPUTS = tuple(g for g in GENERATORS if g not in CORE_INPUTS)
EXTRA_VALUES = tuple(v for v in VALUE_KINDS if v != "iid")
EXTRA_RHOS = RHOS[1:]
SPECIAL = ("mu", "inputs", "values", "rho", "layout")


def _swept(cell):
    """A cell that sweeps a tuple-valued axis (one of :data:`SPECIAL`): it runs ``cell`` once per member (same
    random stream) and combines the exact tests; the worst member is reported in ``extra``."""
    def run(ctx: CellContext):
        listed = {a: tuple(v) for a, v in ctx.params.items() if a in SPECIAL and isinstance(v, list)}
        if listed:                                  # a tuple read back from JSON (a witness re-run)
            ctx = _with_params(ctx, **listed)
        axes = [a for a in SPECIAL if isinstance(ctx.params.get(a), tuple)]
        if not axes:
            return cell(ctx)
        members = list(itertools.product(*(ctx.params[a] for a in axes)))
        parts = [cell(_with_params(ctx, **dict(zip(axes, m, strict=True)))) for m in members]
        worst = max(range(len(parts)), key=lambda i: (parts[i].effect if math.isfinite(parts[i].effect) else -1.0))
        return combine(parts, method="exact", extra=dict(worst=dict(zip(axes, members[worst], strict=True))))
    run.__name__ = cell.__name__
    run.__doc__ = cell.__doc__
    return run


def _sw_keep(p: dict) -> bool:
    """The standard sweep's design: every core cell; a swept tuple (one at a time) only at d = 4 and S <= 16, every
    other special axis at its base value (:func:`_one_tuple`)."""
    tuples = [a for a in SPECIAL if isinstance(p.get(a), tuple)]
    if not tuples:
        return True
    return p.get("d", 4) == 4 and p.get("S", 1) <= 16 and _one_tuple(p)


def _sw_grid(*, rho: bool = False, **overrides) -> dict:
    """The standard sweep per tier (:func:`tiers`), with axes replaced or added (``{tier: values}`` or values)."""
    base = dict(d=[1, 4, 16], M=[1, 3, 16], S=[1, 3, 64], mu=[*CORE_MU, EXTRA_MU], inputs=[*CORE_INPUTS, EXTRA_INPUTS],
                values=["iid", EXTRA_VALUES])
    smoke = dict(d=[1, 4, 16], M=[1, 16], S=[1, 16], mu=["zero", EXTRA_MU + CORE_MU[1:]],
                 inputs=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]], values=["iid", EXTRA_VALUES])
    full = dict(d=[1, 2, 4, 8, 16, 64], M=[1, 2, 3, 16, 64, 256], S=[1, 2, 3, 4, 8, 64, 1024],
                mu=list(MEANS), s=[0.1, 0.5, 1.5],
                inputs=["iid", "clustered", "peaked", "flat", "outlier", ("clustered_shuffled", "transformer")],
                values=["iid", EXTRA_VALUES])
    if rho:
        base["rho"], smoke["rho"], full["rho"] = ["unit", EXTRA_RHOS], ["unit", EXTRA_RHOS], ["unit", EXTRA_RHOS]
    grids = dict(quick=base, smoke=smoke, full=full)
    for key, value in overrides.items():
        for tier, grid in grids.items():
            grid[key] = value[tier] if isinstance(value, dict) else value
    return tiers(grids["quick"], smoke=grids["smoke"], full=grids["full"])


def _sw_domain(*, mu: str = "ω_1, ..., ω_S ~ ρ: the register's proposals N(μ, I)", rho: str | None = None,
               s_points=(1,), s_up_to: int = 16, **more) -> dict:
    """The standard sweep's domain: sizes, proposal means, input generators and value kinds (and, for statements
    about any ρ, the proposal's shape), plus the claim's own axes ``more``."""
    domain = dict(
        d=Integers("q_n, k_m, ω_s ∈ R^d", 1, math.inf, up_to=16, why=_D_WHY),
        M=Integers("any K, V: the M keys and values", 1, math.inf, points=(1,), up_to=16, why=_SUM_WHY),
        S=Integers("the samples ω_1, ..., ω_S (any S >= 1)", 1, math.inf, points=s_points, up_to=s_up_to,
                   why=_SUM_WHY + " (S = 64 is tested at quick)"),
        mu=Choice(mu + " (μ = 0, q_n + mean k, q_n + k_1, random, far)", MEANS),
        inputs=Choice("any q_n, K: the register's generators (G-iid, G-clust contiguous and shuffled, G-peaked, "
                      "G-flat, G-outlier, G-transformer)", GENERATORS),
        values=Choice("any V: the register's G-values (iid, all equal, one-hot, v_m = k_m, correlated with q·k)",
                      VALUE_KINDS))
    if rho:
        domain["rho"] = Choice(rho + " (N(μ, I), N(μ, τ²I) with τ = 0.5 and 2, a two-component Gaussian mixture)",
                               RHOS)
    domain.update(more)
    return domain


# ------------------------------------------------------------------------------ Eq 4: SNIS = RFA


def _eq4_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    proposal = _proposal(ctx, q, k)
    omega, log_ratio = _draws(ctx, proposal)
    terms = control_variate_terms(q, k, v, omega=omega, log_ratio=log_ratio)
    snis = snis_estimate(terms.f, log_weights=_log_importance_weights(q, k, omega, proposal))
    phi_form = ctx.impl("rfa_attention_with_proposal", rfa_attention)(q, k, v, omega=omega, form="features")
    return _identity(ctx, snis, phi_form)


def _without(domain: dict, *axes: str) -> dict:
    return {k: v for k, v in domain.items() if k not in axes}


EQ4 = Claim(
    id="eva.eq4.snis_equals_rfa", source="§2.2, SNIS display and Eq 4",
    statement="With ω_1..ω_S ~ ρ, the SNIS estimate Σ_s [p_n(ω_s)/ρ(ω_s)] f_n(ω_s) / Σ_s [p_n(ω_s)/ρ(ω_s)] equals "
              "RFA(q_n,K,V) := Σ_m φ(q_n,ω)ᵀφ(k_m,ω) v_m / Σ_m' φ(q_n,ω)ᵀφ(k_m',ω); vanilla RFA is SNIS with "
              "ρ = N(0, I).",
    kind="identity",
    related={"eva.eq14.rfa_ratio_form": "RFA: its SNIS and φ forms, and its ratio form g/h"},
    tolerance=TOLERANCE, units=UNITS,
    domain=_without(_sw_domain(), "mu"),
    readings={"R1": Reading("ρ = N(0, I) (the sentence before Eq 4)",
                            words="'Vanilla RFA amounts to constructing the SNIS estimation with q(ω) = N(ω; 0, I). "
                                  "The SNIS representation also turns out equivalent to the more established form of "
                                  "RFA' (Eq 4): the q of Eq 4 is vanilla RFA's"),
              "R2": Reading("ρ = N(μ, I), μ ≠ 0 (every other register mean): left side with the proposal's weights, "
                            "right side the φ form on the same samples (Eq 4's generic proposal)",
                            words="Eq 4's left side prints the generic proposal q(ω_s) of the SNIS display, "
                                  "'ω_1, ..., ω_S ~ q(ω)'")},
    cell=_swept(_eq4_cell),
    grid=_sw_grid(mu=dict(smoke=["zero", "far", ("q+mean_k", "q+k1", "random")], quick=[*CORE_MU, EXTRA_MU],
                          full=list(MEANS))),
    where=lambda p, variant: (_sw_keep(p) or p["mu"] == "far" and _sw_keep(dict(p, mu="zero")))
    and (p["mu"] == "zero") == (variant == "R1"),
    roles=("rfa_attention_with_proposal",), plot_x="S",
    notes="The same samples on both sides; the display's p_n(ω)/q(ω_s) read as p_n(ω_s)/ρ(ω_s). The proposal is "
          "what the two readings disagree on, so it is each reading's own grid axis (mu), not a domain axis.",
)

# ------------------------------------------------------------------- App B.1: variance expansion


def _beta(kind: str, cov_hg: np.ndarray, var_h: float, rng) -> np.ndarray:
    """A constant coefficient: random, aligned with ``Cov[h, g]`` or orthogonal to it (scale ``~β*``)."""
    size = np.linalg.norm(cov_hg) / max(var_h, _TINY)
    if kind == "aligned":
        return cov_hg / max(var_h, _TINY) * rng.uniform(0.5, 2.0)
    b = rng.normal(size=cov_hg.shape)
    if kind == "orthogonal":
        b -= (b @ cov_hg) / max(cov_hg @ cov_hg, _TINY) * cov_hg
    return b / np.linalg.norm(b) * max(size, 1e-3)


def _raw_second_moment(x: np.ndarray) -> np.ndarray:
    """``mean x xᵀ`` over the draws: the magnitude sample variances are computed from (their round-off scale,
    e.g. when a control is deterministic and its variance is pure round-off)."""
    x = x.reshape(x.shape[0], -1)
    return x.T @ x / x.shape[0]


def _sample_moments(g: np.ndarray, h: np.ndarray):
    dg, dh = g - g.mean(axis=0), h - h.mean(axis=0)
    n = g.shape[0] - 1
    return dg.T @ dg / n, dh @ dg / n, float(dh @ dh / n)


def _eq20_cell(ctx: CellContext):
    q, k, v = _inputs(ctx, n=1)
    proposal = _proposal(ctx, q, k)
    if ctx.params["source"] == "sample":
        omega, log_ratio = _draws(ctx, proposal, sets=64)
        terms = _terms(ctx, q, k, v, omega, log_ratio)
        g, h = terms.g[:, 0], terms.h[:, 0]
        var_g, cov_hg, var_h = _sample_moments(g, h)
        beta = _beta(ctx.params["beta"], cov_hg, var_h, ctx.rng)
        g_tilde = control_variate_estimate(g, h, 1.0, beta)
        lhs = _sample_moments(g_tilde, h)[0]
        raw = (_raw_second_moment(g), _raw_second_moment(g_tilde),
               _raw_second_moment(h) * np.multiply.outer(beta, beta))
    else:
        mom = theory.cv_moments(q[0], k, v, proposal.mean, ctx.params["S"])
        var_g, cov_hg, var_h = mom.var_g, mom.cov_hg, mom.var_h
        beta = _beta(ctx.params["beta"], cov_hg, var_h, ctx.rng)
        a = v - beta
        lhs = a.T @ mom.cov_h @ a                       # Var[Σ_m h_m (v_m - β)], not via the expansion
        raw = ()
    rhs = theory.cv_variance(var_g, cov_hg, var_h, beta, form="printed")
    terms_ = (var_g, 2 * np.multiply.outer(cov_hg, beta), var_h * np.multiply.outer(beta, beta), *raw)
    if ctx.variant == "trace":
        lhs, rhs, terms_ = np.trace(lhs), np.trace(rhs), tuple(np.abs(t).sum() for t in terms_)
    return _identity(ctx, lhs, rhs, *terms_, lead=0, extra=dict(beta=beta.tolist(), cov_hg=cov_hg.tolist()))


EQ20_EXPANSION = Claim(
    id="eva.eq20.variance_expansion", source="App B.1, display before Eq 20",
    statement="Var[g̃(ω)] = Var[g(ω)] - 2 Cov[h(ω), g(ω)] βᵀ + Var[h(ω)] ββᵀ (printed as a d×d matrix identity).",
    kind="identity",
    tolerance=TOLERANCE, units="|Δ| / largest |term| (entry or trace)",
    domain=dict(
        dv=Integers("Var[g̃(ω)] ∈ R^{d_v×d_v} (printed d×d)", 1, math.inf, points=(1, 2), up_to=8,
                    why="each entry involves two coordinates of g and β: d_v = 2 already has diagonal and "
                        "off-diagonal entries, more coordinates add entries of the same two kinds"),
        S=Integers("g, h the RFA estimate and control over S draws", 1, math.inf, points=(1,), up_to=8,
                   why="the expansion is algebra in the moments of (g, h), whatever S they average over"),
        mu=Choice("ω ~ ρ = N(μ, I) (the register's means μ = 0, q_n + mean k, q_n + k_1, random, far)", MEANS),
        beta=Choice("a constant β (random, aligned with Cov[h, g], orthogonal to it)",
                    ("random", "aligned", "orthogonal"))),
    readings={"entrywise": Reading("the d_v × d_v matrices entry by entry, as printed (App B.1 defines Var[g] := "
                                   "Cov[g, g], a matrix)"),
              "trace": Reading("their traces (all that Eq 20's argmin uses)", beside=True)},
    cell=_swept(_eq20_cell),
    grid=tiers(dict(dv=[1, 2, 8], S=[1, 8], mu=["zero", "q+k1", ("q+mean_k", "random", "far")],
                    beta=["random", "aligned", "orthogonal"], source=["sample", "closed_form"]),
               smoke=dict(mu=["zero", ("q+mean_k", "q+k1", "random", "far")]),
               full=dict(S=[1, 2, 8, 64], mu=list(MEANS), s=[0.3, 1.0])),
    where=lambda p, variant: not (p["dv"] == 1 and p["beta"] == "orthogonal"),
    roles=("control_variate_terms",), plot_x="dv",
    notes="Sample covariances obey the same algebra as population ones, so the 'sample' cells compare the sample "
          "covariance of g̃ over 64 draws with the expansion in the sample moments; 'closed_form' cells use "
          "eva.derived.cv_moments, with Var[g̃] formed directly as Σ Cov[h_m,h_m'](v_m - β)(v_m' - β)ᵀ.",
)

# --------------------------------------------------------------------------- Eq 6 and App B.2 chain

CHAIN_STEPS = ("L0-L1", "L1-L2", "L2-L3", "L3-L4", "L4-L5", "L5-L6")


def _b2_lines(w: np.ndarray, f: np.ndarray, terms) -> list[np.ndarray]:
    """The seven lines of App B.2 as printed (L4: elementwise product, 1 broadcast); L6 = g - β̂(h - E h)."""
    s = w.shape[-1]
    sw = w.sum(axis=-1)[..., None]
    swf = np.einsum("...s,...sv->...v", w, f)
    ratio, mean_wf, mean_w = swf / sw, swf / s, sw / s
    return [ratio,
            ratio - mean_wf + mean_wf,
            ratio - (sw / sw) * mean_wf + mean_wf,
            (1 - mean_w) / sw * swf + mean_wf,
            ratio * (1 - mean_wf) + mean_wf,
            mean_wf - ratio * (mean_w - 1),
            control_variate_estimate(terms.g, terms.h, 1.0, terms.coefficient)]


def _eq6_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    proposal = _proposal(ctx, q, k)
    omega, log_ratio = _draws(ctx, proposal)
    terms = _terms(ctx, q, k, v, omega, log_ratio)
    log_w = _log_importance_weights(q, k, omega, proposal)
    lines = _b2_lines(np.exp(log_w), terms.f, terms)
    if ctx.params["step"] == "eq6":
        return _identity(ctx, snis_estimate(terms.f, log_weights=log_w), lines[-1], *lines)
    i = CHAIN_STEPS.index(ctx.params["step"])
    return _identity(ctx, lines[i], lines[i + 1], *lines, extra=dict(step=ctx.params["step"]))


def _has_tuple(p: dict) -> bool:
    return any(isinstance(p.get(a), tuple) for a in SPECIAL)


_BASE = dict(mu="zero", inputs="iid", values="iid", rho="unit", layout="contiguous")


def _one_tuple(p: dict) -> bool:
    """One swept tuple, every other special axis at its base value (zero mean, iid inputs and values, contiguous)."""
    tuples = [a for a in SPECIAL if isinstance(p.get(a), tuple)]
    return len(tuples) == 1 and all(p[a] == v for a, v in _BASE.items() if a in p and a not in tuples)


EQ6 = Claim(
    id="eva.eq6.snis_cv_identity", source="§3.1, Eq 6; App B.2 derivation",
    statement="For every sample set, Σ_s W f / Σ_s W = (1/S)Σ_s W f - [Σ_s W f/Σ_s W]·((1/S)Σ_s W - 1) =: "
              "g(ω) - β̂(ω)(h(ω) - E[h(ω)]) with E[h] = 1; and the B.2 chain L0..L6, line by line as printed.",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=dict(
        S=Integers("every sample set ω_1, ..., ω_S", 1, math.inf, points=(1, 2, 3), up_to=16,
                   why=_SUM_WHY + " (S = 1024 is tested at quick)"),
        mu=Choice("ω_s iid from ρ = N(μ, I) (the register's means μ = 0, q_n + mean k, q_n + k_1, random, far)",
                  MEANS),
        inputs=Choice("any q_n, K (through W and f): the register's generators, one dominating weight included",
                      GENERATORS),
        values=Choice("any V (through f): the register's G-values", VALUE_KINDS),
        step=Choice("Eq 6 itself, and each consecutive pair of the B.2 chain's lines L0..L6 as printed (L4's "
                    "product of two d-vectors read elementwise, 1 broadcast)", ("eq6", *CHAIN_STEPS))),
    cell=_swept(_eq6_cell),
    grid=tiers(dict(S=[1, 2, 3, 16, 1024], mu=["zero", "q+k1", "far", ("q+mean_k", "random")],
                    inputs=["iid", "peaked", EXTRA_INPUTS + ("outlier",)], values=["iid", EXTRA_VALUES],
                    step=["eq6", *CHAIN_STEPS]),
               smoke=dict(S=[1, 2, 3, 16], mu=["zero", ("q+mean_k", "q+k1", "random", "far")],
                          inputs=["iid", EXTRA_INPUTS + ("peaked", "outlier")]),
               full=dict(mu=list(MEANS), d=[2, 8], M=[3, 64], inputs=["iid", "peaked", "outlier", EXTRA_INPUTS])),
    where=lambda p, v: _sw_keep(p) and (not _has_tuple(p) or p["S"] == 16 and p["step"] == "eq6"),
    roles=("control_variate_terms",), plot_x="S",
    notes="ω_s iid from ρ; W = p_n/ρ with the exact Z. The statement is a conjunction (Eq 6, and every line of the "
          "printed chain): a wrong printed line refutes it, and the verdict's 'holds on' names the steps that hold.",
)

# ------------------------------------------------------------------------ §3.1: g, h and alpha


def _gh_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    proposal = _proposal(ctx, q, k)
    omega, log_ratio = _draws(ctx, proposal)
    terms = _terms(ctx, q, k, v, omega, log_ratio)
    w = np.exp(_log_importance_weights(q, k, omega, proposal))
    s = omega.shape[1]
    lq, lk = log_xi(q, omega), log_xi(k, omega)                        # (sets, N, S), (sets, M, S)
    pair = np.exp(terms.log_alpha + lq)[..., None] * np.swapaxes(np.exp(lk), -1, -2)[:, None]  # (sets, N, S, M)
    if ctx.params["quantity"] == "g":
        definition = np.einsum("rns,rnsv->rnv", w, terms.f) / s
        display = np.einsum("rnsm,mv->rnv", pair, v)
        tokens = terms.g_tokens.sum(axis=-2)
    else:
        definition = w.sum(axis=-1) / s
        display = pair.sum(axis=(-2, -1))
        tokens = terms.h_tokens.sum(axis=-1)
    return _identity(ctx, np.stack([display, tokens]), np.stack([definition, definition]), lead=3)


GH = Claim(
    id="eva.sec3_1.gh_decomposition", source="§3.1, displays after Eq 6 and the definitions of g_m, h_m",
    statement="g(ω) = Σ_s α(ω_s) Σ_m ξ(q_n,ω_s)ξ(k_m,ω_s) v_m and h(ω) = Σ_s α(ω_s) Σ_m ξ(q_n,ω_s)ξ(k_m,ω_s), "
              "α(ω_s) = (1/S) N(ω_s;0,I)/(Z ρ(ω_s)); exchanging the sums gives g = Σ_m g_m and h = Σ_m h_m.",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=_sw_domain(mu="any ω: ω_1, ..., ω_S ~ ρ", quantity=Choice("both displays: g(ω) and h(ω)", ("g", "h"))),
    cell=_swept(_gh_cell),
    grid=_sw_grid(quantity=["g", "h"], inputs=dict(smoke=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]],
                                                    quick=["iid", "peaked", EXTRA_INPUTS + ("outlier",)],
                                                    full=["iid", "clustered", "peaked", "flat", EXTRA_INPUTS])),
    where=lambda p, v: _sw_keep(p),
    roles=("control_variate_terms",), plot_x="S",
    notes="Definitions of §3.1 (g = (1/S)Σ_s W f, h = (1/S)Σ_s W with W = p_n/ρ). Routes: the definition "
          "(1/S)Σ_s W f with W from Eq 3's density; the display Σ_s α ξ ξ v; Σ_m g_m.",
)


def _alpha_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    proposal = _proposal(ctx, q, k)
    omega, log_ratio = _draws(ctx, proposal)
    q2, k2, v2 = _inputs(ctx)
    changed = ctx.params["changed"]
    other = dict(q=(q2, k, v), K=(q, k2, v), V=(q, k, v2))[changed]
    log_alpha = _terms(ctx, q, k, v, omega, log_ratio).log_alpha
    log_alpha2 = _terms(ctx, *other, omega, log_ratio).log_alpha
    return _relative_log_gap(ctx, log_alpha2, log_alpha, extra=dict(changed=changed))


ALPHA = Claim(
    id="eva.sec3_1.alpha_constant", source="§3.1, definition of α(ω_s)",
    statement="α(ω_s) := (1/S) N(ω_s;0,I)/(Z ρ(ω_s)) collects terms that are constant with respect to queries, "
              "keys and values.",
    kind="identity",
    tolerance=TOLERANCE, units="relative difference |α'/α - 1|",
    domain=_sw_domain(mu="fixed samples ω and a fixed proposal ρ",
                      changed=Choice("constant with respect to queries, keys and values (each changed separately, "
                                     "fresh draws)", ("q", "K", "V"))),
    cell=_swept(_alpha_cell),
    grid=_sw_grid(changed=["q", "K", "V"], inputs=dict(smoke=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]],
                                                       quick=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]],
                                                       full=["iid", "clustered", "peaked", EXTRA_INPUTS])),
    where=lambda p, v: _sw_keep(p),
    roles=("control_variate_terms",), plot_x="changed",
    notes="α contains Z = Σ_m exp(q_n·k_m), a function of the query and of every key.",
)

# ---------------------------------------------------------------------------- Eq 7 and Eq 14


def _eq7_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    omega, log_ratio = _draws(ctx, _proposal(ctx, q, k))
    terms = _terms(ctx, q, k, v, omega, log_ratio)
    tokens = control_variate_family(terms, shared_coefficients(terms), per_token=True)
    rfa = ctx.impl("rfa_attention_with_proposal", rfa_attention)(q, k, v, omega=omega, log_ratio=log_ratio,
                                                                 form="features")
    return _identity(ctx, tokens.sum(axis=-2), rfa, tokens.sum(axis=-2), terms.g, lead=2)


EQ7 = Claim(
    id="eva.eq7.local_cv_sum", source="§3.1, Eq 7 (β(ω) in the first line read as β̂(ω))",
    statement="g̃(ω) = Σ_m g̃_m(ω) with g̃_m(ω) = g_m(ω) - β̂(ω)(h_m(ω) - E[h_m(ω)]), the same β̂(ω) = g/h for all m; "
              "hence Σ_m g̃_m equals the SNIS/RFA estimate.",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=_sw_domain(mu="ω_1, ..., ω_S ~ ρ, shared by all keys"),
    cell=_swept(_eq7_cell), grid=_sw_grid(), where=lambda p, v: _sw_keep(p),
    roles=("control_variate_terms", "rfa_attention_with_proposal"), plot_x="S",
    notes="E[h_m] = exp(q_n·k_m)/Z (Eq 22). Right side: rfa_attention's linear-cost path (features and "
          "linear_attention) on the same ω.",
)


def _eq14_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    omega, log_ratio = _draws(ctx, _proposal(ctx, q, k))
    terms = _terms(ctx, q, k, v, omega, log_ratio)
    ratio = terms.g_tokens.sum(axis=-2) / terms.h_tokens.sum(axis=-1)[..., None]
    rfa = ctx.impl("rfa_attention_with_proposal", rfa_attention)(q, k, v, omega=omega, log_ratio=log_ratio,
                                                                 form="features")
    return _identity(ctx, ratio, rfa)


EQ14 = Claim(
    id="eva.eq14.rfa_ratio_form", source="§4.1, Eq 14; App B.7",
    statement="RFA(q_n,K,V) = g(ω)/h(ω) = Σ_m g_m(ω) / Σ_m h_m(ω).",
    kind="identity",
    related={"eva.eq4.snis_equals_rfa": "RFA: its SNIS and φ forms, and its ratio form g/h"},
    tolerance=TOLERANCE, units=UNITS,
    domain=_sw_domain(mu="ω_1, ..., ω_S ~ ρ (definitions of §3.1), shared by all keys"),
    cell=_swept(_eq14_cell), grid=_sw_grid(), where=lambda p, v: _sw_keep(p),
    roles=("control_variate_terms", "rfa_attention_with_proposal"), plot_x="S",
)

# ----------------------------------------------------------------------------------- Prop 1, Eq 12


def _scipy_log_density(proposal, omega: np.ndarray) -> np.ndarray:
    """``log ρ(ω)`` from scipy's multivariate normal (not the code's ``logpdf``): a Gaussian or a mixture."""
    eye = np.eye(proposal.dim)
    if isinstance(proposal, GaussianMixtureProposal):
        comps = [math.log(w) + stats.multivariate_normal(m, t * t * eye).logpdf(omega)
                 for m, t, w in zip(proposal.means, proposal.scales, proposal.weights, strict=True)]
        return logsumexp(np.stack(comps), axis=0)
    return stats.multivariate_normal(proposal.mean, proposal.scale ** 2 * eye).logpdf(omega)


def _ratio_cell(ctx: CellContext):
    """``g_m / h_m`` with ``g_m`` from the code under test and ``h_m`` computed independently from theory: by the
    Gaussian identity ``N(ω;0,I)ξ(q,ω)ξ(k_m,ω)/Z = w_m N(ω; q + k_m, I)`` (:func:`rfkit.theory.eva.
    log_mixture_components`) over the proposal density ``N(ω; μ, I)`` from scipy. A wrong ``λ``, ``Z``, importance
    ratio or sample average in ``g_m`` moves the ratio off ``v_m``; the code's own ``h_m`` (the same ``λ``-sum as
    its ``g_m``) would cancel such a bug."""
    q, k, v = _inputs(ctx)
    proposal = _proposal(ctx, q, k)
    omega, log_ratio = _draws(ctx, proposal)
    g = _terms(ctx, q, k, v, omega, log_ratio).g_tokens                            # (sets, N, M, d_v)
    log_rho = _scipy_log_density(proposal, omega.reshape(-1, q.shape[1])).reshape(omega.shape[:2])   # (sets, S)
    log_h = np.stack([[logsumexp(theory.log_mixture_components(om, qn, k) - lr, axis=-1) for qn in q]
                      for om, lr in zip(omega, log_rho, strict=True)]) - math.log(omega.shape[1])
    h = np.exp(log_h)[..., None]                                                     # (sets, N, M, 1)
    usable = h > 1e3 * _TINY                        # h_m ≠ 0 (the hypothesis) in floating point
    ratio = np.where(usable, g / np.where(usable, h, 1.0), v)
    return _identity(ctx, ratio, np.broadcast_to(v, ratio.shape), lead=3,
                     extra=dict(underflowed=int((~usable).sum())))


PROP1_RATIO = Claim(
    id="eva.prop1.ratio_equals_value", source="Prop 1, Eq 8 (last equality); App B.4 first display",
    statement="g_m(ω)/h_m(ω) = v_m.",
    kind="identity",
    related={
        "eva.prop1.softmax_recovery": "Prop 1: g_m/h_m = v_m makes β̂_m = v_m the per-token coefficient that "
            "recovers softmax",
    },
    tolerance=TOLERANCE, units="|Δ| / largest |term| of the key row",
    domain=_sw_domain(mu="any ρ (its mean)", rho="any ρ (its shape)"),
    cell=_swept(_ratio_cell), grid=_sw_grid(rho=True), where=lambda p, v: _sw_keep(p),
    roles=("control_variate_terms",), plot_x="S",
    notes="g_m is the code's (its definition Σ_s α ξ(q) ξ(k_m) v_m, the sum over s taken last); h_m is computed "
          "independently, as (1/S) Σ_s w_m N(ω_s; q_n + k_m, I)/ρ(ω_s) (the Gaussian form of N(ω)ξ(q,ω)ξ(k_m,ω)/Z) "
          "with ρ's density from scipy, so the identity tests the code's λ-sum rather than g and h sharing it. "
          "h_m(ω) ≠ 0 (the hypothesis) in floating point: rows where h_m underflows are counted in 'underflowed'.",
)


def _recovery_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    omega, log_ratio = _draws(ctx, _proposal(ctx, q, k))
    terms = _terms(ctx, q, k, v, omega, log_ratio)
    tokens = control_variate_family(terms, token_coefficients(terms), per_token=True)
    part = ctx.params["part"]
    if part == "a":
        target = np.exp(theory.log_softmax_weights(q, k))[..., None] * v
        return _identity(ctx, tokens, np.broadcast_to(target, tokens.shape), terms.g_tokens, lead=3)
    g_tilde = tokens.sum(axis=-2)
    if part == "b":
        return _identity(ctx, g_tilde, np.broadcast_to(_softmax(q, k, v), g_tilde.shape), terms.g)
    rfa = ctx.impl("rfa_attention_with_proposal", rfa_attention)(q, k, v, omega=omega, log_ratio=log_ratio,
                                                                 form="features")
    return _identity(ctx, rfa, g_tilde, extra=dict(reading="RFA_ρ(q_n) = g̃(ω), the chain's first equality"))


PROP1_RECOVERY = Claim(
    id="eva.prop1.softmax_recovery", source="Prop 1 (last sentence); App B.4, Eq 23 and after",
    statement="With β̂_m = v_m for all m: g̃_m(ω) = v_m E[h_m] = exp(q_n·k_m) v_m/Z (Eq 23), and "
              "'RFA(q_n,K,V) = g̃(ω) = SoftmaxAttn(q_n,K,V)', with zero bias and zero variance.",
    kind="identity",
    related={
        "eva.prop1.ratio_equals_value": "Prop 1: g_m/h_m = v_m makes β̂_m = v_m the per-token coefficient that "
            "recovers softmax",
    },
    tolerance=TOLERANCE, units=UNITS,
    domain=_sw_domain(mu="as Prop 1: any ρ (its mean)", rho="as Prop 1: any ρ (its shape)",
                      part=Choice("each equality: (a) Eq 23 per token, (b) g̃(ω) = SoftmaxAttn, (c) the printed "
                                  "chain's first equality RFA(q_n, K, V) = g̃(ω)", ("a", "b", "c"))),
    cell=_swept(_recovery_cell),
    grid=_sw_grid(rho=True, part=["a", "b", "c"]), where=lambda p, v: _sw_keep(p),
    roles=("control_variate_terms", "rfa_attention_with_proposal"), plot_x="part",
    notes="Parts: (a) g̃_m - w_m v_m per draw; (b) ‖g̃ - SoftmaxAttn‖; (c) ‖RFA_ρ(q_n) - g̃(ω)‖ with RFA_ρ from "
          "rfa_attention on the same ω (the printed chain's first equality).",
)


def _eq12_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    omega, log_ratio = _draws(ctx, _proposal(ctx, q, k))
    terms = _terms(ctx, q, k, v, omega, log_ratio)
    tokens = control_variate_family(terms, token_coefficients(terms), per_token=True)
    exact = np.exp(theory.log_softmax_weights(q, k))[..., None] * v
    return _identity(ctx, tokens, np.broadcast_to(exact, tokens.shape), terms.g_tokens,
                     terms.h_tokens[..., None] * v, lead=3)


EQ12 = Claim(
    id="eva.eq12.exact_token_term", source="§4.1, Eq 12",
    statement="For m ∈ E with β̂_m = v_m: g̃_m(ω) = g_m(ω) - v_m h_m(ω) + v_m exp(q_n·k_m)/Z = exp(q_n·k_m) v_m/Z.",
    kind="identity",
    tolerance=TOLERANCE, units="|Δ| / largest |term| of the key row",
    domain=_sw_domain(mu="g_m, h_m from ω_1, ..., ω_S ~ ρ"),
    cell=_swept(_eq12_cell), grid=_sw_grid(), where=lambda p, v: _sw_keep(p),
    notes="E ∩ P_c = ∅ and (∪_c P_c) ∪ E = [M] (stated without loss of generality): the identity is per token, so "
          "every key is put in E.",
    roles=("control_variate_terms",), plot_x="S",
)

# ------------------------------------------------------------------------------ App B.6, Eq 11


def _partition_labels(ctx: CellContext, m: int, chunks: int, exact=None, keys=None) -> np.ndarray:
    return partition_labels(m, chunks, exact=exact, layout=ctx.params.get("layout", "contiguous"), keys=keys,
                            rng=ctx.rng)


def _shared_beta(ctx: CellContext, kind: str, q, k, v, alpha, values):
    if kind == "rfa":
        omega = ctx.rng.normal(size=(16, q.shape[1]))
        return rfa_attention(q, k, v, omega=omega, form="features")[0]
    if kind == "softmax_U":
        return alpha @ values
    if kind == "zero":
        return np.zeros(v.shape[1])
    return 3.0 * ctx.rng.normal(size=v.shape[1])


def _b6_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _inputs(ctx, n=1)
    m = k.shape[0]
    universe = np.arange(m) if p["U"] == "all" else np.arange(m // 4, m)        # E = the first quarter
    labels = _partition_labels(ctx, universe.size, min(p["C"], universe.size), keys=k[universe])
    alpha = np.exp(theory.log_softmax_weights(q[0], k[universe]))
    local = theory.local_softmax(q[0], k[universe], v[universe], labels)[1]
    beta = _shared_beta(ctx, p["beta"], q, k, v, alpha, v[universe])
    dec = theory.error_decomposition(alpha, v[universe], labels, beta, coefficients=local)
    if p["part"] == "cross":
        # round-off magnitude: each summand forms β_c - β*_m from terms of size ‖β_c‖ + ‖v_m‖ (with one dominant
        # weight β_c rounds to v_m and the summands no longer cancel; mpmath confirms the cross term is 0 there)
        opt = local[labels]
        size = float(alpha @ (np.linalg.norm(beta - opt, axis=1)
                              * (np.linalg.norm(opt, axis=1) + np.linalg.norm(v[universe], axis=1))))
        return exact_test(dec["cross"], 0.0, tolerance=ctx.tolerance, scale=max(dec["cross_scale"], size, _TINY))
    scale = max(dec["total"], dec["between"], dec["within"], _TINY)
    return exact_test(dec["total"], dec["between"] + dec["within"], tolerance=ctx.tolerance, scale=scale,
                      extra=dict(reduction=dec["between"] / max(dec["total"], _TINY)))


APPB6 = Claim(
    id="eva.appb6.error_decomposition", source="App B.6, displays after 'To see the error reduction'",
    statement="For any shared β̂ and β_c = β*_c (local softmax), with ŵ_m := exp(q_n·k_m)/Σ_{m'∈U} exp(q_n·k_m'): the "
              "cross term Σ_c Σ_{m∈P_c} ŵ_m (β̂ - β_c)ᵀ(β_c - β*_m) = 0, and J(β̂,…,β̂) = Σ_c Σ_{m∈P_c} ŵ_m ‖β̂ - β_c‖² + "
              "Σ_c Σ_{m∈P_c} ŵ_m ‖β_c - β*_m‖².",
    kind="identity",
    tolerance=TOLERANCE, units="|Δ| / (sum of |cross summands|, or largest of J and its two parts)",
    domain=dict(
        M=Integers("the keys [M] that U is drawn from", 1, math.inf, points=(1,), up_to=16,
                   why=_SUM_WHY + " (M = 64 is tested at quick)"),
        C=Integers("U's partition arbitrary: C subsets (C = |U|: singletons)", 1, math.inf, points=(1,), up_to=16,
                   why="each subset contributes its own sums; more subsets are more terms of the same kind"),
        U=Choice("U arbitrary: U = [M] and U = [M] \\ E (E the first quarter)", ("all", "complement")),
        layout=Choice("U's partition arbitrary: contiguous, random and clustered subsets",
                      ("contiguous", "random", "clustered")),
        beta=Choice("any shared β̂ (the realised RFA coefficient, β*_U, 0, a random vector)",
                    ("rfa", "softmax_U", "zero", "random")),
        inputs=Choice("any q_n, K, V: the register's generators", GENERATORS),
        part=Choice("both displays: the cross term and the decomposition of J", ("cross", "decomposition"))),
    cell=_swept(_b6_cell),
    grid=tiers(dict(M=[1, 3, 16, 64], C=[1, 2, 4, 16], U=["all", "complement"],
                    beta=["rfa", "softmax_U", "zero", "random"], layout=["contiguous", "random", "clustered"],
                    inputs=["iid", "clustered", tuple(g for g in GENERATORS if g not in ("iid", "clustered"))],
                    part=["cross", "decomposition"]),
               smoke=dict(M=[1, 16], C=[1, 16], layout=["contiguous", ("random", "clustered")]),
               full=dict(M=[1, 3, 16, 64, 256, 1024], C=[1, 2, 4, 16, 64, 1024], s=[0.3, 1.5])),
    where=lambda p, v: p["C"] <= p["M"] and (not _has_tuple(p) or p["M"] == 16 and p["beta"] == "random"
                                             and _one_tuple(p)),
    plot_x="C",
    notes="β*_m = v_m (Prop 2's setting).",
)


def _eq11_cell(ctx: CellContext):
    q, k, v = _inputs(ctx)
    omega, log_ratio = _draws(ctx, _proposal(ctx, q, k))
    labels = _partition_labels(ctx, k.shape[0], min(ctx.params["C"], k.shape[0]), keys=k)
    terms = _terms(ctx, q, k, v, omega, log_ratio)
    tokens = control_variate_family(terms, eva_coefficients(terms, labels), per_token=True)
    log_pi, _ = theory.local_softmax(q, k, v, labels)
    rfa = ctx.impl("rfa_attention_with_proposal", rfa_attention)
    lhs = np.stack([tokens[..., labels == c, :].sum(axis=-2) for c in range(log_pi.shape[-1])])
    rhs = np.stack([np.exp(log_pi[:, c])[:, None] * rfa(q, k[labels == c], v[labels == c], omega=omega,
                                                         log_ratio=log_ratio, form="features")
                    for c in range(log_pi.shape[-1])])
    return _identity(ctx, lhs, rhs, np.abs(tokens).sum(axis=-2)[None], lead=3)


EQ11 = Claim(
    id="eva.eq11.subset_estimator_collapse", source="§4.1, Eq 11",
    statement="Σ_{m∈P_c} (g_m(ω) - β̂_c(ω) h_m(ω) + β̂_c(ω) exp(q_n·k_m)/Z) = [Σ_{m∈P_c} exp(q_n·k_m)/Z] β̂_c(ω), "
              "β̂_c(ω) = Σ_{P_c} g_m / Σ_{P_c} h_m.",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=_sw_domain(mu="any ω: ω_1, ..., ω_S ~ ρ, shared by the subsets",
                      C=Integers("any subset P_c (the keys cut into C subsets, C = M: singletons)", 1, math.inf,
                                 points=(1,), up_to=16, why="each subset's identity is separate; more subsets are "
                                                            "more identities of the same kind"),
                      layout=Choice("any subset P_c: contiguous, random and clustered subsets",
                                    ("contiguous", "random", "clustered"))),
    cell=_swept(_eq11_cell),
    grid=_sw_grid(C={"smoke": [1, 16], "quick": [1, 2, 4, 16], "full": [1, 2, 4, 16, 64, 256]},
                  layout={"smoke": ["contiguous", ("random", "clustered")],
                          "quick": ["contiguous", "random", ("clustered",)],
                          "full": ["contiguous", "random", "clustered"]},
                  mu={"smoke": ["zero", EXTRA_MU + CORE_MU[1:]], "quick": ["zero", "far", EXTRA_MU + ("q+mean_k",)],
                      "full": list(MEANS)}),
    where=lambda p, v: p["C"] <= p["M"] and _sw_keep(p) and (not _has_tuple(p) or p["C"] in (1, 4)),
    roles=("control_variate_terms", "rfa_attention_with_proposal"), plot_x="C",
    notes="Right side: π_c from the exact local log-sum-exp, β̂_c as RFA restricted to P_c on the same ω "
          "(rfa_attention's linear path).",
)

# ---------------------------------------------------------------------------------- Eq 13 / Eq 15


def _chunk_proposals(ctx: CellContext, q, k, labels, chunks: int):
    """Per-subset proposals ``N(μ_c, I)``, ``μ_c = q_1 + mean_{P_c} k`` (the local Eq 28 analogue)."""
    means = np.stack([q[0] + k[labels == c].mean(axis=0) for c in range(chunks)])
    return GaussianProposal(means)


def _eq15_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _inputs(ctx)
    m = k.shape[0]
    exact = np.arange(min(p["E"], m))
    chunks = min(p["C"], m - exact.size)
    labels = _partition_labels(ctx, m, chunks, exact=exact, keys=k)
    s = p["S"]
    if p["sampling"] == "shared":
        proposal = _proposal(ctx, q, k)
        omega, log_ratio = _draws(ctx, proposal)
        terms = [_terms(ctx, q, k, v, omega, log_ratio)] * max(chunks, 1)
    else:
        proposal = _chunk_proposals(ctx, q, k, labels, chunks)
        omega = proposal.sample(ctx.rng, SETS * s).reshape(chunks, SETS, s, -1).transpose(1, 0, 2, 3)
        log_ratio = proposals_est.log_ratio(proposal, omega)
        terms = [_terms(ctx, q, k, v, omega[:, c], log_ratio[:, c]) for c in range(chunks)]
    eq13 = ctx.impl("eva_ideal", eva_ideal)(q, k, v, labels, omega=omega, log_ratio=log_ratio, sampling=p["sampling"])
    form = _cv_sum(terms, labels) if p["form"] == "cv_sum" else _eq15_form(terms, q, k, v, labels)
    return _identity(ctx, form, eq13)


def _cv_sum(terms, labels) -> np.ndarray:
    """Σ_m g̃_m with assignment (iii); subset c's tokens come from its own sample set."""
    total = 0.0
    for c, t in enumerate(terms):
        tokens = control_variate_family(t, eva_coefficients(t, labels), per_token=True)
        keep = (labels == c) | ((labels == EXACT) & (c == 0))
        total = total + tokens[..., keep, :].sum(axis=-2)
    return total


def _eq15_form(terms, q, k, v, labels) -> np.ndarray:
    """Σ_{m∈E} w_m g_m/h_m + Σ_c π_c Σ_{P_c} g_m / Σ_{P_c} h_m (Eq 15)."""
    w = np.exp(theory.log_softmax_weights(q, k))
    log_pi, _ = theory.local_softmax(q, k, v, labels)
    exact = labels == EXACT
    g0, h0 = terms[0].g_tokens, terms[0].h_tokens
    out = np.einsum("nm,rnmv->rnv", w[:, exact], g0[..., exact, :] / h0[..., exact, None])
    for c, t in enumerate(terms):
        inside = labels == c
        ratio = t.g_tokens[..., inside, :].sum(axis=-2) / t.h_tokens[..., inside].sum(axis=-1)[..., None]
        out = out + np.exp(log_pi[:, c])[:, None] * ratio
    return out


EQ15 = Claim(
    id="eva.eq15.eva_ratio_form", source="§4.1, Eq 13 and Eq 15; App B.7",
    statement="EVA(q_n,K,V) := g̃(ω) = Σ_{m∈E} g̃_m + Σ_{m∉E} g̃_m = Σ_{m∈E}(e_m/Z) v_m + Σ_c (Σ_{P_c} e_m/Z) β̂_c(ω) "
              "(Eq 13) = Σ_{m∈E}(e_m/Z) g_m/h_m + Σ_c (Σ_{P_c} e_m/Z) Σ_{P_c} g_m/Σ_{P_c} h_m (Eq 15).",
    kind="identity",
    related={"eva.derived.eq13_error_decomposition": "EVA (Eq 13): its ratio forms, and its error to softmax"},
    tolerance=TOLERANCE, units=UNITS,
    domain=dict(
        M=Integers("E and {P_c} covering [M]", 1, math.inf, points=(1,), up_to=16, why=_SUM_WHY),
        E=Integers("E ⊆ [M] (|E| from 0)", 0, math.inf, points=(0, 1), up_to=4,
                   why="each exact token adds one term of the same kind; E = [M] is "
                       "eva.appg1.full_exact_set_is_softmax"),
        C=Integers("the subsets P_1, ..., P_C of [M] \\ E", 1, math.inf, points=(1,), up_to=8,
                   why="each subset adds one term π_c β̂_c of the same kind"),
        S=Integers("the samples ω (S per sample set)", 1, math.inf, points=(1,), up_to=16, why=_SUM_WHY),
        layout=Choice("any disjoint covering {P_c}: contiguous, random and clustered subsets",
                      ("contiguous", "random", "clustered")),
        sampling=Choice("shared or per-chunk sampling", ("shared", "per_chunk")),
        form=Choice("both equalities: the CV-sum form and Eq 15, each against Eq 13", ("cv_sum", "eq15")),
        inputs=Choice("any q_n, K, V: the register's generators", GENERATORS)),
    cell=_swept(_eq15_cell),
    grid=tiers(dict(M=[1, 3, 16], E=[0, 1, 4], C=[1, 2, 8], S=[1, 16], layout=["contiguous", "random", ("clustered",)],
                    sampling=["shared", "per_chunk"], form=["cv_sum", "eq15"],
                    inputs=["iid", "clustered", tuple(g for g in GENERATORS if g not in ("iid", "clustered"))]),
               smoke=dict(M=[1, 16], E=[0, 1, 4], C=[1, 8], layout=["contiguous", ("random", "clustered")],
                          inputs=["iid", tuple(g for g in GENERATORS if g != "iid")]),
               full=dict(M=[1, 3, 16, 64], E=[0, 1, 4, 16], C=[1, 2, 8, 32], S=[1, 16, 256], d=[2, 16],
                         layout=["contiguous", "random", "clustered"])),
    where=lambda p, v: p["E"] + p["C"] <= p["M"] and (not _has_tuple(p) or p["M"] == 16 and p["S"] == 16
                                                      and p["sampling"] == "per_chunk" and p["form"] == "cv_sum"
                                                      and _one_tuple(p)),
    roles=("control_variate_terms", "eva_ideal"), plot_x="C",
    notes="Coefficients v_m on E and β̂_c on P_c. Eq 13 from eva_ideal (exact log-sum-exp masses, joint log-sum-exp "
          "coefficients); the CV-sum form from "
          "control_variate_family with assignment (iii); Eq 15 from g_m, h_m and the exact masses.",
)

# --------------------------------------------------------------------------- Eq 16 from Eq 13


def _sigma(name: str, d: int, rng):
    if name == "identity":
        return None
    if name == "ln_identity_init":
        return LinearLayerNorm.identity_init(d)
    return LinearLayerNorm.random_init(d, rng=rng)


def _practical_inputs(ctx: CellContext):
    p = ctx.params
    return attention_inputs(p.get("inputs", "iid"), p["N"], p["N"], p.get("d", 4), p.get("dv", 2), ctx.rng,
                            scale=p.get("s", 0.5))


def _eq16_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _practical_inputs(ctx)
    sigma = _sigma(p["sigma"], q.shape[1], ctx.rng)
    options = dict(block_size=p["E"], num_chunks=p["C"], partition_domain="complement", sigma_q=sigma,
                   sigma_k=sigma, mode=p["mode"], rng=ctx.rng, return_details=True)
    y16, det = ctx.impl("eva_practical", eva_practical)(q, k, v, chunk_logit="lse", **options)
    part = det.partition
    eq13 = np.empty_like(y16)
    for b, queries in enumerate(part.queries):
        labels = np.full(k.shape[0], EXACT)
        labels[part.chunks[b].ravel()] = np.repeat(np.arange(part.num_chunks), part.chunks.shape[-1])
        omega = det.omega[b]                                                   # (C, 1, d): ω_c of this block
        log_ratio = proposals_est.log_ratio(GaussianProposal(det.mu[b]), omega)
        eq13[queries] = eva_ideal(q[queries], k, v, labels, omega=omega, log_ratio=log_ratio, sampling="per_chunk")
    gaps = _representative_log_gaps(q, k, det)
    return _identity(ctx, y16[None], eq13[None], extra=dict(log_mass_ratio_quantiles=gaps))


def _representative_log_gaps(q, k, det) -> list[float]:
    """Quantiles (0, .25, .5, .75, 1) over queries and chunks of ``q_n·k̃_c - LSE_{m∈P_c}(q_n·k_m)`` (no pass/fail
    role: how far Eq 16's substitution is from the exact masses for this σ)."""
    part = det.partition
    gaps = []
    for b, queries in enumerate(part.queries):
        exact = logsumexp(np.einsum("nd,cld->ncl", q[queries], k[part.chunks[b]]), axis=-1)
        gaps.append(q[queries] @ det.k_tilde[b].T - exact)
    return np.quantile(np.concatenate(gaps).ravel(), [0, 0.25, 0.5, 0.75, 1]).tolist()


EQ16 = Claim(
    id="eva.eq16.reduction_from_eq13", source="§4.2 (display for Z and Eq 16)",
    statement="Z = Σ_{m∈E} e_m + Σ_c Σ_{m∈P_c} e_m, and applying Σ_{m∈P_c} exp(q_n·k_m) ≈ exp(q_n·k̃_c) to the subset "
              "weights and to Z turns Eq 13 into Eq 16.",
    kind="identity",
    related={"eva.alg1.implements_eq16": "Eq 16: reached from Eq 13, and computed by Algorithm 1"},
    tolerance=TOLERANCE, units=UNITS,
    domain=dict(
        E=Integers("E (the exact block; its size)", 1, math.inf, points=(1,), up_to=8,
                   why="each exact token adds one term of the same kind to both numerator and Z"),
        C=Integers("the subsets P_1, ..., P_C", 1, math.inf, points=(1,), up_to=4,
                   why="each subset adds one term exp(q_n·k̃_c) β̂_c of the same kind"),
        sigma=Choice("k̃_c = σ(mean k): the register's σ settings (identity, LN∘Linear at identity init, LN∘Linear "
                     "random)", ("identity", "ln_identity_init", "ln_random")),
        mode=Choice("ω_c drawn (train) or at the mean (eval)", ("train", "eval")),
        inputs=Choice("any q_n, K, V: the register's generators", GENERATORS)),
    cell=_swept(_eq16_cell),
    grid=tiers(dict(N=[16, 48], E=[1, 4, 8, 16], C=[1, 2, 4], sigma=list(("identity", "ln_identity_init", "ln_random")),
                    mode=["train", "eval"], inputs=["iid", "clustered", tuple(g for g in GENERATORS
                                                                            if g not in ("iid", "clustered"))]),
               smoke=dict(N=[16], E=[1, 8], C=[1, 4]),
               # N = 16: where σ = LN∘Linear at identity init runs (the full tier lacked it, so that σ never ran)
               full=dict(N=[16, 64, 256], E=[1, 4, 16, 64], C=[1, 4, 16], inputs=list(GENERATORS))),
    where=lambda p, v: (p["N"] % p["E"] == 0 and (p["N"] - p["E"]) % p["C"] == 0 and p["E"] < p["N"]
                        and (p["sigma"] != "ln_identity_init" or p["N"] == 16)
                        and (not _has_tuple(p) or p["N"] == 16 and p["sigma"] == "ln_random" and p["mode"] == "train"
                             and p["E"] == 8)),
    roles=("eva_practical",), plot_x="C",
    notes="E and {P_c} partition [M]. Checkable content: Eq 16 equals Eq 13 (same β̂_c) whenever exp(q_n·k̃_c) = "
          "Σ_{m∈P_c} e_m (diagnostic (b) of practical EVA, partition_domain = complement). "
          "Eq 13 from eva_ideal with per-chunk samples equal to the practical run's ω_c (S = 1). The extra field "
          "log_mass_ratio_quantiles reports log[exp(q_n·k̃_c)/Σ_{P_c} e_m] for the representative logits.",
)

# ------------------------------------------------------------------------------ App C identities


def _eq27_cell(ctx: CellContext):
    p = ctx.params
    q, k, _ = _inputs(ctx, n=1)
    if p["points"] == "grid":
        axes = [np.linspace(-4, 4, 9) + (q[0, i] + k[:, i].mean()) for i in range(q.shape[1])]
        omega = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, q.shape[1])
    else:
        omega = ctx.rng.normal(size=(64, q.shape[1])) * 2.0 + q[0] + k.mean(axis=0)
    return _relative_log_gap(ctx, theory.log_target_density(omega, q[0], k),
                             theory.log_target_mixture_density(omega, q[0], k))


EQ27_MIXTURE = Claim(
    id="eva.eq27.local_mixture_identity", source="App C, definitions of f_c and p_c",
    statement="p_c(ω) := N(ω;0,I) Σ_{m∈P_c} ξ(q_n,ω)ξ(k_m,ω) / Σ_{m'∈P_c} exp(q_n·k_m') = Σ_{m∈P_c} [exp(q_n·k_m) / "
              "Σ_{m'∈P_c} exp(q_n·k_m')] N(ω; q_n + k_m, I).",
    kind="identity",
    tolerance=TOLERANCE, units="relative difference of the densities",
    domain=dict(
        d=Integers("ω, q_n, k_m ∈ R^d", 1, math.inf, up_to=8, why=_D_WHY),
        M=Integers("the keys of P_c", 1, math.inf, points=(1,), up_to=16, why=_SUM_WHY),
        points=Choice("any ω: random points and a grid (d <= 2)", ("random", "grid")),
        inputs=Choice("any q_n and keys: the register's generators", GENERATORS)),
    cell=_swept(_eq27_cell),
    grid=tiers(dict(d=[1, 2, 8], M=[1, 4, 16], points=["random", "grid"],
                    inputs=[*CORE_INPUTS, EXTRA_INPUTS]),
               smoke=dict(d=[1, 2, 8], M=[1, 16], inputs=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]]),
               full=dict(d=[1, 2, 8, 64], M=[1, 4, 16, 256], s=[0.1, 0.5, 1.5], inputs=list(GENERATORS))),
    where=lambda p, v: (p["points"] == "random" or p["d"] <= 2) and (not _has_tuple(p) or p["d"] == 2),
    plot_x="M",
)


def _single_sample_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _inputs(ctx, n=p["M"])
    mu = proposal_mean(p["mu"], q, k, ctx.rng)
    omega = mu + ctx.rng.normal(size=mu.shape)                       # the one sample ω^c ~ ρ_c
    proposal = GaussianProposal(mu)
    labels = np.zeros(k.shape[0], dtype=np.int64)                    # one subset P_c, E = ∅ (π_c = 1)
    general = eva_ideal(q, k, v, labels, omega=omega[None], log_ratio=proposals_est.log_ratio(proposal, omega[None]))
    _, det = ctx.impl("eva_practical", eva_practical)(q, k, v, block_size=0, num_chunks=1, mode="eval",
                                                      mu_rule=omega, return_details=True)
    query_free = det.coefficients[0, 0]
    lhs = np.concatenate([general, general[1:]])
    rhs = np.concatenate([np.broadcast_to(query_free, general.shape), general[:1].repeat(len(general) - 1, 0)])
    return _identity(ctx, lhs[None], rhs[None])


APPC_QUERY_FREE = Claim(
    id="eva.appc.single_sample_query_free", source="App C, display for one sample (w^c read as ω^c)",
    statement="With one sample ω^c from ρ_c the factors N(ω^c;0,I)/(Z ρ_c(ω^c)) and ξ(q_n, ω^c) cancel: β̂_c = "
              "Σ_{m∈P_c} ξ(k_m, ω^c) v_m / Σ_{m∈P_c} ξ(k_m, ω^c), independent of q_n (precomputed once per chunk).",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=_without(_sw_domain(mu="one sample ω^c from ρ_c, a chunk proposal that does not depend on n"), "S"),
    cell=_swept(_single_sample_cell),
    grid={t: {k: v for k, v in g.items() if k != "S"} for t, g in _sw_grid().items()},
    where=lambda p, v: _sw_keep(p),
    roles=("eva_practical",), plot_x="M",
    notes="S = 1 (the statement's one sample). General formula: eva_ideal (S = 1, one subset, the query and weight "
          "factors kept) for every query; "
          "query-free formula: practical EVA's precomputed single-sample coefficient at ω_c = ω^c.",
)


def _algorithm1_literal(q, k, v, part, sigma, omega_of) -> np.ndarray:
    """Algorithm 1 as printed: a loop over chunks (k̃_c, q_c(ω), ω_c, β̂_c), then a loop over queries (S, R, Z)."""
    sigma = sigma or (lambda x: x)
    coefficients = {}
    for g, chunk_set in enumerate(part.chunks):
        for c, idx in enumerate(chunk_set):
            k_tilde, q_tilde = sigma(k[idx].mean(axis=0)), sigma(q[idx].mean(axis=0))
            omega = omega_of(g, c, q_tilde + k_tilde)
            xi = np.array([math.exp(omega @ k[m] - 0.5 * k[m] @ k[m]) for m in idx])
            coefficients[g, c] = (k_tilde, sum(xi[i] / xi.sum() * v[m] for i, m in enumerate(idx)))
    y = np.zeros((q.shape[0], v.shape[1]))
    group = part.chunk_group()
    for b, queries in enumerate(part.queries):
        local = part.exact[b][part.exact_valid[b]]
        for n in queries:
            s_num = sum(math.exp(q[n] @ k[m]) * v[m] for m in local)
            z = sum(math.exp(q[n] @ k[m]) for m in local)
            chunks = [coefficients[group[b], c] for c in range(part.num_chunks)]
            r = sum(math.exp(q[n] @ kt) * beta for kt, beta in chunks)
            z += sum(math.exp(q[n] @ kt) for kt, _ in chunks)
            y[n] = (s_num + r) / z
    return y


def _alg1_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _practical_inputs(ctx)
    sigma = _sigma(p["sigma"], q.shape[1], ctx.rng)
    grid = (math.isqrt(p["N"]),) * 2 if p["layout"] == "2d" else None
    part = practical_partition(p["N"], block_size=p["E"], num_chunks=p["C"], partition_domain=p["domain"],
                               layout=p["layout"], grid=grid)
    eps = ctx.rng.normal(size=part.chunks.shape[:2] + (q.shape[1],))
    y = ctx.impl("eva_practical", eva_practical)(q, k, v, block_size=p["E"], num_chunks=p["C"],
                                                 partition_domain=p["domain"], layout=p["layout"], grid=grid,
                                                 sigma_q=sigma, sigma_k=sigma, mode=p["mode"], eps=eps)
    train = p["mode"] == "train"
    literal = _algorithm1_literal(q, k, v, part, sigma, lambda g, c, mu: mu + eps[g, c] if train else mu)
    return _identity(ctx, y[None], literal[None])


def _alg1_where(p, variant) -> bool:
    n, e, c = p["N"], p["E"], p["C"]
    if (p["domain"] == "complement" and (e >= n or (n - e) % c)) or (p["domain"] == "all" and n % c):
        return False
    if p["layout"] == "1d":
        return n % e == 0
    side, window = math.isqrt(n), math.isqrt(e)
    if side * side != n or window * window != e or side % window:
        return False
    if p["domain"] == "complement":
        return True
    patch = math.isqrt(n // c)
    return patch * patch == n // c and side % patch == 0


ALG1 = Claim(
    id="eva.alg1.implements_eq16", source="App C, Algorithm 1 (ℛ's k_c read as k̃_c)",
    statement="Algorithm 1 computes y_n = (𝒮 + ℛ)/Z with 𝒮 = Σ_{m∈E^n} exp(q_n·k_m) v_m, ℛ = Σ_c exp(q_n·k̃_c) β̂_c, "
              "Z = Σ_{m∈E^n} exp(q_n·k_m) + Σ_c exp(q_n·k̃_c) and the single-sample β̂_c, i.e. Eq 16.",
    kind="identity",
    related={"eva.eq16.reduction_from_eq13": "Eq 16: reached from Eq 13, and computed by Algorithm 1"},
    tolerance=TOLERANCE, units=UNITS,
    domain=dict(
        C=Integers("Σ_c over the C chunks", 1, math.inf, points=(1,), up_to=4,
                   why="each chunk adds one term exp(q_n·k̃_c) β̂_c of the same kind to ℛ and Z"),
        domain=Choice("as practical EVA: chunks over all indices or over [M] \\ E^n", ("all", "complement")),
        layout=Choice("as practical EVA: 1D blocks and 2D windows", ("1d", "2d")),
        mode=Choice("as practical EVA: training (ω_c = μ_c + ε) and evaluation (ω_c = μ_c)", ("train", "eval")),
        sigma=Choice("as practical EVA: σ = identity, LN∘Linear at identity init, LN∘Linear random",
                     ("identity", "ln_identity_init", "ln_random"))),
    cell=_alg1_cell,
    grid=tiers(dict(N=[16, 36], E=[4, 9], C=[1, 3, 4], domain=["all", "complement"], layout=["1d", "2d"],
                    mode=["train", "eval"], sigma=["identity", "ln_identity_init", "ln_random"]),
               smoke=dict(N=[16], E=[4], C=[1, 4], domain=["all", "complement"], mode=["train", "eval"]),
               full=dict(N=[16, 36, 64, 144], E=[4, 9, 16], C=[1, 3, 4, 9, 16])),
    where=_alg1_where,
    roles=("eva_practical",), plot_x="C",
    notes="The same ε on both sides. The literal loop reads the index sets from practical_partition and evaluates "
          "exp directly (moderate "
          "inputs); with partition_domain = complement β̂_c is recomputed per block (the printed P_c^n). Only the "
          "numpy backend exists: Numba and Torch backends of practical EVA are not implemented.",
)

# ---------------------------------------------------------------------------------- causal (App D)

CAUSAL_VARIANTS = {"alg2": dict(chunk_mask="alg2", window="block"),
                   "before_own_chunk": dict(chunk_mask="before_own_chunk", window="block"),
                   "overlapping_window": dict(chunk_mask="alg2", window="overlapping")}


def _positions(n: int, block: int, chunk: int) -> list[int]:
    """Query positions at block and chunk boundaries (and the first and last but one)."""
    cand = {0, block - 1, block, 2 * block - 1, chunk - 1, chunk, 2 * chunk, n - 2}
    return sorted(t for t in cand if 0 <= t <= n - 2)


def _causal_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _practical_inputs(ctx)
    n, d = q.shape
    options = dict(block_size=p["E"], chunk_size=p["chunk"], mode=p["mode"], **CAUSAL_VARIANTS[ctx.variant])
    eps = ctx.rng.normal(size=(n // p["chunk"], d))
    causal = ctx.impl("eva_causal", eva_causal)
    full = causal(q, k, v, eps=eps, **options)
    lhs, rhs = [], []
    if p["part"] == "incremental":
        lhs.append(ctx.impl("eva_causal_incremental", eva_causal_incremental)(q, k, v, eps=eps, **options))
        rhs.append(full)
    for t in _positions(n, p["E"], p["chunk"]) if p["part"] != "incremental" else []:
        if p["part"] == "perturb":
            q2, k2, v2 = (a.copy() for a in (q, k, v))
            for a in (q2, k2, v2):
                a[t + 1:] = ctx.rng.normal(size=a[t + 1:].shape) * 30.0
            other = causal(q2, k2, v2, eps=eps, **options)
        else:
            other = causal(q[:t + 1], k[:t + 1], v[:t + 1], eps=eps, **options)
        lhs.append(other[:t + 1])
        rhs.append(full[:t + 1])
    return _identity(ctx, np.concatenate(lhs)[None], np.concatenate(rhs)[None])


CAUSAL = Claim(
    id="eva.appd.causal_no_future_leak", source="§4.2 'Extension to Autoregressive Modeling'; App D; "
                                                             "Algorithm 2",
    statement="The two triangular masks (intra-block |E|×|E| and inter-chunk C×C) remove all information from future "
              "tokens in E and from entire future chunks, so each query depends only on tokens at positions <= n.",
    kind="identity",
    tolerance=TOLERANCE, units="|Δy| / largest |y| of the compared rows",
    domain=dict(
        E=Integers("the intra-block |E|×|E| mask (equal block sizes |E|)", 1, math.inf, points=(1,), up_to=8,
                   why="a block's mask has the same triangular form at every size"),
        chunk=Integers("the inter-chunk C×C mask: chunk sizes smaller than, equal to and larger than the block", 1,
                       math.inf, points=(1,), up_to=8, why="the chunk mask has the same triangular form at every size"),
        mode=Choice("training (drawn ω_c, the same ε) and evaluation", ("train", "eval")),
        part=Choice("each query depends only on positions <= n: the future perturbed, the prefix alone, and the "
                    "incremental (set-based) form against the parallel (mask) form", ("perturb", "prefix",
                                                                                    "incremental"))),
    readings={"alg2": Reading("Algorithm 2: chunks ending at or before the block start b^n"),
              "before_own_chunk": Reading("released code: chunks with an index below that of n's chunk",
                                          beside=True),
              "overlapping_window": Reading("E^n = previous block + current block up to n (alg2 chunk rule)",
                                            beside=True)},
    cell=_causal_cell,
    grid=tiers(dict(N=[24, 40], E=[1, 2, 4, 8], chunk=[1, 2, 4, 8], mode=["train", "eval"],
                    part=["perturb", "prefix", "incremental"]),
               smoke=dict(N=[24], E=[1, 8], chunk=[1, 8]),
               full=dict(N=[40, 130], E=[1, 2, 4, 16, 64, 128], chunk=[1, 2, 4, 16, 64],
                         inputs=["iid", "transformer"])),
    where=lambda p, v: p["E"] < p["N"] and p["chunk"] < p["N"],
    roles=("eva_causal", "eva_causal_incremental"), plot_x="E",
    notes="Parts: 'perturb' replaces every token after t by fresh draws 30× larger and compares rows <= t; 'prefix' "
          "runs on positions 0..t only; 'incremental' compares the parallel mask-matrix form with the token-by-token "
          "set-based form. Positions t at block and chunk boundaries. Self-attention; the same ε on both sides.",
)

# ---------------------------------------------------------------------------------------- App G.1

#: App G.1's statements hold for any inputs: the tokens (self-attention, N = M), d and the generators.
_G1_DOMAIN = dict(N=Integers("the M keys (self-attention, N = M)", 1, math.inf, points=(1,), up_to=32, why=_SUM_WHY),
                  d=Integers("q_n, k_m ∈ R^d", 1, math.inf, up_to=4, why=_D_WHY),
                  inputs=Choice("any q_n, K, V: the register's generators", GENERATORS))


def _full_exact_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _practical_inputs(ctx)
    exact = _softmax(q, k, v)
    if ctx.variant == "ideal":
        omega = ctx.rng.normal(size=(1, p["S"], q.shape[1]))
        y = ctx.impl("eva_ideal", eva_ideal)(q, k, v, np.full(k.shape[0], EXACT), omega=omega)
    else:
        domain = "complement" if ctx.variant == "practical_complement" else "all"
        chunks = 0 if ctx.variant == "practical_c0" else p["C"]
        y = ctx.impl("eva_practical", eva_practical)(q, k, v, block_size=p["N"], num_chunks=chunks,
                                                     partition_domain=domain, rng=ctx.rng)
    return _identity(ctx, np.asarray(y).reshape((1,) + exact.shape), exact[None], extra=dict(variant=ctx.variant))


APPG1_FULL = Claim(
    id="eva.appg1.full_exact_set_is_softmax", source="App G.1",
    statement="If |E| = M, EVA (Eq 13) equals softmax attention.",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=_G1_DOMAIN,
    readings={"ideal": Reading("EVA13 (eva_ideal) with E = [M], no subsets (App G.1: 'EVA (Equation 13)')"),
              "practical_c0": Reading("practical EVA, one block of size M and C = 0", beside=True),
              "practical_all": Reading("practical EVA, one block of size M and C > 0 chunks of [M]", beside=True),
              "practical_complement": Reading("practical EVA, one block of size M and C > 0 chunks of [M] \\ E = ∅",
                                              beside=True)},
    cell=_swept(_full_exact_cell),
    grid=tiers(dict(N=[1, 8, 32], d=[1, 4], S=[1, 16], C=[1, 4], inputs=[*CORE_INPUTS, EXTRA_INPUTS]),
               smoke=dict(N=[1, 8, 32], inputs=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]]),
               full=dict(N=[1, 8, 32, 128], d=[1, 4, 16], S=[1, 16, 256], C=[1, 4, 8], inputs=list(GENERATORS))),
    where=lambda p, v: (p["C"] == 1 or v in ("practical_all", "practical_complement")) and
    (v != "practical_all" or p["N"] % p["C"] == 0) and (p["S"] == 1 or v == "ideal")
    and (not _has_tuple(p) or p["N"] == 8),
    roles=("eva_ideal", "eva_practical"), plot_x="N",
)


SINGLETON_SIGMAS = {"practical_identity": "identity", "practical_ln_identity_init": "ln_identity_init",
                    "practical_ln_random": "ln_random"}


def _singleton_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _practical_inputs(ctx)
    n, d = q.shape
    exact = _softmax(q, k, v)
    if ctx.variant == "ideal":
        shape = (SETS, p["S"], d) if p["sampling"] == "shared" else (SETS, n, p["S"], d)
        proposal = _proposal(ctx, q, k)
        omega = proposal.sample(ctx.rng, int(np.prod(shape[:-1]))).reshape(shape)
        y = ctx.impl("eva_ideal", eva_ideal)(q, k, v, np.arange(n), omega=omega,
                                             log_ratio=proposals_est.log_ratio(proposal, omega), sampling=p["sampling"])
    else:
        sigma = _sigma(SINGLETON_SIGMAS[ctx.variant], d, ctx.rng)
        y = ctx.impl("eva_practical", eva_practical)(q, k, v, block_size=0, num_chunks=n, sigma_q=sigma,
                                                     sigma_k=sigma, mode=p["mode"], rng=ctx.rng)[None]
    return _identity(ctx, y, np.broadcast_to(exact, y.shape), extra=dict(variant=ctx.variant))


APPG1_SINGLETON = Claim(
    id="eva.appg1.singleton_chunks_is_softmax", source="App G.1",
    statement="If C = M (every subset a single token), EVA (Eq 13) equals softmax attention.",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=_G1_DOMAIN,
    readings={"ideal": Reading("EVA13 (eva_ideal), E = ∅, singleton subsets P_c = {c}, any S, shared and per-chunk "
                               "sampling (App G.1: 'EVA (Equation 13)')"),
              "practical_identity": Reading("practical EVA, C = M, |E| = 0, σ = identity", beside=True),
              "practical_ln_identity_init": Reading("practical EVA, C = M, |E| = 0, σ = LN∘Linear at identity init",
                                                    beside=True),
              "practical_ln_random": Reading("practical EVA, C = M, |E| = 0, σ = LN∘Linear, random init (xavier, "
                                             "gain 1/√2)", beside=True)},
    cell=_swept(_singleton_cell),
    grid=tiers(dict(N=[1, 8, 32], d=[1, 4], S=[1, 16], mu=["zero", "far", EXTRA_MU + ("q+mean_k",)],
                    sampling=["shared", "per_chunk"], mode=["train", "eval"],
                    inputs=["iid", "outlier", EXTRA_INPUTS + ("peaked",)]),
               smoke=dict(N=[1, 8, 32], S=[1, 4], mu=["zero", EXTRA_MU + CORE_MU[1:]], sampling=["shared", "per_chunk"],
                          inputs=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]]),
               full=dict(N=[1, 8, 32, 128], d=[1, 4, 16], S=[1, 16, 256], mu=list(MEANS), inputs=list(GENERATORS))),
    where=lambda p, v: (p["mode"] == "train" if v == "ideal" else
                        (p["S"] == 1 and p["sampling"] == "shared" and p["mu"] == "zero"))
    and (not _has_tuple(p) or p["N"] == 8 and sum(isinstance(p[a], tuple) for a in ("mu", "inputs")) == 1),
    roles=("eva_ideal", "eva_practical"), plot_x="N",
)


def _one_chunk_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _practical_inputs(ctx)
    rfa = ctx.impl("rfa_attention_with_proposal", rfa_attention)
    if ctx.variant == "ideal":
        omega = ctx.rng.normal(size=(SETS, p["S"], q.shape[1]))
        y = ctx.impl("eva_ideal", eva_ideal)(q, k, v, np.zeros(k.shape[0], dtype=np.int64), omega=omega)
        return _identity(ctx, y, rfa(q, k, v, omega=omega, form="features"))
    rule = "zero" if ctx.variant == "practical_mu_zero" else "q+k"
    y, det = ctx.impl("eva_practical", eva_practical)(q, k, v, block_size=0, num_chunks=1, mu_rule=rule,
                                                      mode=p["mode"], rng=ctx.rng, return_details=True)
    omega = det.omega[0, 0]                                          # (1, d): the chunk's single sample
    exact = _softmax(q, k, v)
    many = rfa(q, k, v, omega=ctx.rng.normal(size=(128, q.shape[1])))
    extra = dict(error_practical=float(np.mean((y - exact) ** 2)), error_rfa_s128=float(np.mean((many - exact) ** 2)))
    return _identity(ctx, y[None], rfa(q, k, v, omega=omega)[None], extra=extra)


APPG1_ONE_CHUNK = Claim(
    id="eva.appg1.one_chunk_no_exact_is_rfa", source="App G.1",
    statement="If |E| = 0 and C = 1, EVA recovers vanilla RFA.",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=_G1_DOMAIN,
    readings={"ideal": Reading("EVA13 with E = ∅, C = 1, shared ω ~ N(0, I), against vanilla RFA on the same ω (App "
                               "G.1: 'EVA (Equation 13)')"),
              "practical_mu_zero": Reading("practical EVA (|E| = 0, C = 1, S = 1, μ_1 = 0) against vanilla RFA with "
                                           "S = 1 at the same ω", beside=True),
              "practical_mu_rule": Reading("as practical_mu_zero with μ_1 = q̃_1 + k̃_1 (Eq 28)", beside=True)},
    cell=_swept(_one_chunk_cell),
    grid=tiers(dict(N=[1, 8, 32], d=[1, 4], S=[1, 3, 64], mode=["train", "eval"],
                    inputs=["iid", "outlier", EXTRA_INPUTS + ("peaked",)]),
               smoke=dict(N=[1, 8, 32], S=[1, 16], inputs=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]]),
               full=dict(N=[1, 8, 32, 128], d=[1, 4, 16, 64], S=[1, 3, 64, 1024], inputs=list(GENERATORS))),
    where=lambda p, v: ((p["mode"] == "train") if v == "ideal" else p["S"] == 1)
    and (not _has_tuple(p) or p["N"] == 8),
    roles=("eva_ideal", "eva_practical", "rfa_attention_with_proposal"), plot_x="N",
    notes="E = ∅, P_1 = [M]; the same samples on both sides. Practical cells also report, with no pass/fail role, "
          "the mean squared error to softmax of practical EVA "
          "and of vanilla RFA with S = 128 (extra fields).",
)

# --------------------------------------------------------------------------------- App G.5 Scatterbrain


def _exact_sets(ctx: CellContext, q, k) -> np.ndarray:
    """``E`` per query ``(N, M)``: the local block containing the query's position, or its top-|E| keys."""
    size, kind = min(ctx.params["E"], k.shape[0]), "top" if ctx.params["layout"] == "top" else "local"
    mask = np.zeros((q.shape[0], k.shape[0]), bool)
    for i in range(q.shape[0]):
        mask[i, exact_set(q[i], k, size, kind=kind, position=i)] = True
    return mask


def _scatterbrain_pieces(ctx: CellContext):
    q, k, v = _practical_inputs(ctx)
    mask = _exact_sets(ctx, q, k)
    omega = ctx.rng.normal(size=(ctx.params["S"], q.shape[1]))
    terms = _terms(ctx, q, k, v, omega, np.zeros(omega.shape[0]))
    parts = ctx.impl("scatterbrain_attention", scatterbrain_attention)(q, k, v, omega=omega, exact=mask,
                                                                        return_parts=True)
    return q, k, v, mask, terms, parts


def _step_b(terms, mask, beta, log_norm, q, k, v):
    """Σ_E e_m v_m/Z' + Σ_{m∉E}(g'_m - β h'_m) + β Σ_{m∉E} h̃_m/Z' with Z' = exp(log_norm) (g', h' rescaled to Z').

    Returns the value and its round-off magnitude: the sum of the absolute values of the terms added.
    """
    rescale = np.exp(terms.log_z - log_norm)[..., None]                   # Z/Z'
    out_ = (~mask).astype(float)
    g = terms.g_tokens * rescale[..., None]
    h = terms.h_tokens * rescale                                           # also h̃_m/Z' = Z h_m/Z'
    exact = (np.exp(q @ k.T - log_norm[:, None]) * mask) @ v
    value = (exact + np.einsum("nm,nmv->nv", out_, g - beta[:, None, :] * h[..., None])
             + beta * (h * out_).sum(axis=-1)[:, None])
    magnitude = (np.abs(exact) + np.einsum("nm,nmv->nv", out_, np.abs(g))
                 + 2 * np.abs(beta) * (h * out_).sum(axis=-1)[:, None])
    return value, magnitude


def _printed_last_line(terms, mask, q, k, v):
    """Eq 31's last line as printed: [Σ_{m∉E} φᵀφ v_m + Σ_{m'∉E} e_m' v_m'] / Z."""
    out_ = (~mask).astype(float)
    g = terms.g_tokens
    e_over = np.exp(q @ k.T - terms.log_z[:, None])
    return np.einsum("nm,nmv->nv", out_, g) + (e_over * out_) @ v


def _log_z_hat(terms, mask) -> np.ndarray:
    """``log Ẑ`` from App G.5's definition: ``Ẑ = Σ_E e_m + Σ_{m∉E} h̃_m`` with ``h̃_m = Z h_m`` (ρ = N(0, I))."""
    return terms.log_z + np.log((terms.softmax_weights * mask).sum(axis=-1) + (terms.h_tokens * ~mask).sum(axis=-1))


def _scatterbrain_cell(ctx: CellContext):
    q, k, v, mask, terms, parts = _scatterbrain_pieces(ctx)
    beta = np.stack([terms.coefficient, 3.0 * ctx.rng.normal(size=terms.coefficient.shape)])   # several β̂
    step = ctx.params["step"]
    log_z, log_z_hat = terms.log_z, _log_z_hat(terms, mask)
    eq30 = parts.numerator / parts.denominator[:, None]
    if step == "a":
        coefficients = np.where(mask[..., None], v, beta[:, :, None, :])
        family = control_variate_family(terms, coefficients)
        exact = (np.exp(q @ k.T - log_z[:, None]) * mask) @ v
        printed = (exact + np.einsum("nm,bnmv->bnv", (~mask).astype(float), terms.g_tokens - beta[:, :, None, :]
                                     * terms.h_tokens[..., None])
                   + beta * (1 - (np.exp(q @ k.T - log_z[:, None]) * mask).sum(axis=-1))[:, None])
        return _identity(ctx, printed, family, terms.g_tokens.sum(axis=-2)[None], beta)
    if step in ("b", "c1", "c2"):
        lhs, size = (np.stack(a) for a in zip(*(_step_b(terms, mask, b, log_z_hat if step == "c1" else log_z, q, k,
                                                        v) for b in beta), strict=True))
    else:
        lhs = _printed_last_line(terms, mask, q, k, v)[None]
        size = np.abs(lhs)
    if step == "b":
        y_prime_over_z = parts.numerator * np.exp(parts.log_scale - log_z)[:, None]
        return _identity(ctx, lhs, np.broadcast_to(y_prime_over_z, lhs.shape), size)
    return _identity(ctx, lhs, np.broadcast_to(eq30, lhs.shape), size, extra=dict(step=step))


#: App G.5's domain (both claims): the sample count, the exact set E (its size and kind) and the inputs.
APPG5_DOMAIN = dict(
    S=Integers("ρ = N(0, I), S samples", 1, math.inf, points=(1,), up_to=16, why=_SUM_WHY),
    E=Integers("E = Supp_n(S) arbitrary: |E| from 0 to M", 0, math.inf, points=(0, 1), up_to=8,
               why="each exact token adds one term of the same kind; |E| = M (no random-feature part) is "
                   "tested at every tier"),
    layout=Choice("E arbitrary: a local block or the top-|E| keys", ("block", "top")),
    inputs=Choice("any q_n, K, V: the register's generators", GENERATORS))


# Budget: ~1.7 s at the quick tier (378 cells; each forms the N×S×M weighted kernel tensor for two β̂ and two
# normalisers). The register's sweep of |E|, S, layouts and the five steps/readings is what it costs.
SCATTERBRAIN = Claim(
    id="eva.appg5.scatterbrain_special_case", source="App G.5, Eqs 29-31",
    statement="Scatterbrain (Eq 30) is a special case of EVA: with E = Supp_n(S), per-token coefficients on E, one "
              "shared coefficient β̂ on [M] \\ E, ρ = N(0, I), and Z estimated by Ẑ = Σ_E e_m + Σ_{∉E} φ(q_n)ᵀφ(k_m) in "
              "the control-variate mean, the estimator becomes Eq 30.",
    kind="identity",
    related={
        "eva.appg5.coefficient_irrelevance": "the same equivalence with Scatterbrain; the other claim varies the "
            "shared β̂",
    },
    tolerance=TOLERANCE, units=UNITS,
    domain=dict(APPG5_DOMAIN),
    readings={"c1": Reading("the (b) expression with Z replaced by Ẑ, against Eq 30 (the statement's 'Z estimated by "
                            "Ẑ')"),
              "c2": Reading("the (b) expression with Z, against Eq 30", beside=True),
              "c3": Reading("the last line of Eq 31 as printed (denominator Z, exact term over m' ∉ E), against Eq 30",
                            beside=True)},
    cell=_swept(_scatterbrain_cell),
    grid=tiers(dict(N=[8, 32], S=[1, 16, 96], E=[0, 1, 4, 32], layout=["block", "top"],
                    inputs=["iid", tuple(g for g in GENERATORS if g != "iid")], step=["a", "b", "c1", "c2", "c3"]),
               smoke=dict(N=[8], S=[1, 16], E=[0, 1, 8]),
               full=dict(N=[49, 196], S=[1, 16, 96, 1024], E=[0, 1, 49, 196], inputs=list(GENERATORS))),
    where=lambda p, v: p["E"] <= p["N"] and p["step"] in (("a", "b", v) if v == "c1" else (v,))
    and (not _has_tuple(p) or p["S"] == 16 and p["N"] == 8),
    roles=("control_variate_terms", "scatterbrain_attention"), plot_x="E",
    notes="Several β̂ in each cell. Steps (a) the exact rewriting for any β̂ against the control-variate family; (b) "
          "after the first ≈ "
          "(ĥ_m read as h̃_m = Z h_m): Σ_E e v/Z + Σ_{∉E} g_m = y'_n/Z with y'_n from Eq 29; (c) per reading. "
          "Steps (a) and (b) run under the deciding reading c1; the readings beside it (c2, c3) test their own "
          "last step only.",
)


def _irrelevance_cell(ctx: CellContext):
    q, k, v, mask, terms, parts = _scatterbrain_pieces(ctx)
    betas = [np.zeros_like(terms.coefficient), terms.coefficient, ctx.rng.normal(size=terms.coefficient.shape)]
    huge = ctx.rng.normal(size=terms.coefficient.shape)
    betas.append(1e6 * huge / np.linalg.norm(huge, axis=-1, keepdims=True))
    expression = ctx.params["expression"]
    if expression == "c3":
        line = _printed_last_line(terms, mask, q, k, v)
        outs, sizes = [line] * len(betas), [np.abs(line)] * len(betas)
    else:
        log_norm = terms.log_z if expression == "b" else _log_z_hat(terms, mask)
        outs, sizes = zip(*(_step_b(terms, mask, b, log_norm, q, k, v) for b in betas), strict=True)
    size = np.max(np.stack(sizes), axis=0)
    return _identity(ctx, np.stack(outs[1:]), np.broadcast_to(outs[0], (len(outs) - 1,) + outs[0].shape),
                     np.broadcast_to(size, (len(outs) - 1,) + size.shape), extra=dict(expression=expression))


SCATTERBRAIN_BETA = Claim(
    id="eva.appg5.coefficient_irrelevance", source="App G.5, last sentence",
    statement="The equivalence with Scatterbrain holds for every choice of the shared coefficient β̂.",
    kind="identity",
    related={
        "eva.appg5.scatterbrain_special_case": "the same equivalence with Scatterbrain; the other claim varies the "
            "shared β̂",
    },
    tolerance=TOLERANCE, units="|Δ| / sum of the |terms| of the expression (query row)",
    domain=dict(APPG5_DOMAIN),
    cell=_swept(_irrelevance_cell),
    grid=tiers(dict(N=[8, 32], S=[1, 16, 96], E=[0, 1, 4, 32], layout=["block", "top"],
                    inputs=["iid", tuple(g for g in GENERATORS if g != "iid")], expression=["b", "c1", "c3"]),
               smoke=dict(N=[8], S=[1, 16], E=[0, 1, 8]),
               full=dict(N=[49, 196], S=[1, 16, 96, 1024], E=[0, 1, 49, 196], inputs=list(GENERATORS))),
    where=lambda p, v: p["E"] <= p["N"] and (not _has_tuple(p) or p["S"] == 16 and p["N"] == 8),
    roles=("control_variate_terms", "scatterbrain_attention"), plot_x="E",
    notes="β̂ ∈ {0, the realised RFA coefficient, a random vector, a vector of norm 1e6}; expression b is also "
          "reading c2 (Z kept); c3 (Eq 31's last line) contains no β̂.",
)

# ----------------------------------------------------------------------------- derived predictions


def _quadrature_log_ratio_integral(a, b, mu) -> float:
    """``log ∫ N(ω;a,I) N(ω;b,I)/N(ω;μ,I) dω`` by adaptive quadrature, one coordinate at a time (the densities
    factorise). Each 1-D integrand is shifted by its numerically located peak and integrated over ±40 around it
    (relative accuracy ~1e-14); nothing of the closed form is used."""
    grid = np.linspace(-60.0, 60.0, 2001)
    total = 0.0
    for ai, bi, mi in zip(a, b, mu, strict=True):
        def log_f(t, ai=ai, bi=bi, mi=mi):
            return -0.5 * ((t - ai) ** 2 + (t - bi) ** 2 - (t - mi) ** 2) - 0.5 * _LOG_2PI

        peak = float(grid[np.argmax(log_f(grid))])
        top = float(log_f(peak))
        value, _ = integrate.quad(lambda t, top=top: math.exp(log_f(t) - top), peak - 40.0, peak + 40.0,
                                  points=[peak], epsabs=0.0, epsrel=1e-13, limit=400)
        total += math.log(value) + top
    return total


def _gaussian_product_cell(ctx: CellContext):
    p = ctx.params
    d, norm = p["d"], p["norm"]
    x, y = (norm * u / np.linalg.norm(u) for u in ctx.rng.normal(size=(2, d)))
    part = p["part"]
    if part == "pointwise":
        omega = ctx.rng.normal(size=(64, d)) * 2.0 + (x + y)
        return _relative_log_gap(ctx, *theory.gaussian_product_sides(x, y, omega))
    if part == "integral":
        mu = ctx.rng.normal(size=d) * norm / math.sqrt(d)
        return _relative_log_gap(ctx, _quadrature_log_ratio_integral(x, y, mu),
                                 theory.log_gaussian_ratio_integral(x, y, mu))
    q, k, v = x[None], np.stack([y, -0.5 * x, ctx.rng.normal(size=d)]), ctx.rng.normal(size=(3, 2))
    proposal = GaussianProposal(ctx.rng.normal(size=d))
    omega, log_ratio = _draws(_with_params(ctx, S=16), proposal, sets=1)
    if part == "mixture":
        return _relative_log_gap(ctx, theory.log_target_density(omega[0], q[0], k),
                                 theory.log_target_mixture_density(omega[0], q[0], k))
    comps = theory.log_mixture_components(omega[0], q[0], k) - proposal.logpdf(omega[0])   # (M, S)
    terms = control_variate_terms(q, k, v, omega=omega, log_ratio=log_ratio)
    w_f = np.exp(terms.log_importance_weights)[..., None] * terms.f                          # (1, 1, S, d_v)
    mixture = np.exp(comps).T @ v
    return _identity(ctx, w_f[0, 0], mixture, lead=1)


def _with_params(ctx: CellContext, **params) -> CellContext:
    """A copy of ``ctx`` with some parameters replaced (same rng)."""
    from dataclasses import replace

    return replace(ctx, params=dict(ctx.params, **params))


GAUSSIAN_PRODUCT = Claim(
    id="eva.derived.gaussian_product", source="register, derived prediction (Gaussian product identity)",
    statement="For all x, y, ω: N(ω;0,I) ξ(x,ω) ξ(y,ω) = exp(x·y) N(ω; x+y, I); hence p_n(ω) = Σ_m w_m N(ω; u_m, I), "
              "W(ω) f_n(ω) = Σ_m w_m v_m N(ω; u_m, I)/ρ(ω), and ∫ N(ω;a,I) N(ω;b,I)/N(ω;μ,I) dω = exp((a-μ)·(b-μ)).",
    kind="identity",
    tolerance=TOLERANCE, units="relative difference",
    domain=dict(
        d=Integers("x, y, ω ∈ R^d", 1, math.inf, up_to=8, why=_D_WHY),
        norm=Range("for all x, y (their norms; random directions)", 0.0, math.inf, up_to=(None, 5.0),
                   why="the register's outlier scale (‖q‖‖k‖ up to ~50 is G-outlier's; both sides are compared in "
                       "log space)"),
        part=Choice("the identity and each consequence: pointwise, the mixture p_n, W f_n, and the integral "
                    "(unit-covariance Gaussians)", ("pointwise", "mixture", "weighted", "integral"))),
    cell=_gaussian_product_cell,
    grid=tiers(dict(d=[1, 2, 8], norm=[0.0, 0.5, 2.0, 5.0], part=["pointwise", "mixture", "weighted", "integral"]),
               smoke=dict(d=[1, 8], norm=[0.0, 5.0]),
               full=dict(d=[1, 2, 8, 64], norm=[0.0, 0.1, 0.5, 2.0, 5.0])),
    plot_x="norm",
    notes="The integral is checked by adaptive quadrature per coordinate (to ~1e-14), not by Monte Carlo: one "
          "claim has one tolerance, and a Monte Carlo cell could not resolve 1e-10 (tests/test_eva_theory.py also "
          "checks it by seeded Monte Carlo).",
)


def _f_invariant_cell(ctx: CellContext):
    q, k, v = _inputs(ctx, n=4)
    omega, log_ratio = _draws(ctx, _proposal(ctx, q, k), sets=1)
    f = control_variate_terms(q, k, v, omega=omega, log_ratio=log_ratio).f[0]           # (N, S, d_v)
    rfa = ctx.impl("rfa_attention_with_proposal", rfa_attention)
    query_free = rfa(np.zeros((1, q.shape[1])), k, v, omega=omega[0][:, None, :], form="features")[:, 0]  # S = 1, q = 0
    return _identity(ctx, f, np.broadcast_to(query_free, f.shape), lead=2)


F_INVARIANT = Claim(
    id="eva.derived.f_query_invariant", source="register, derived prediction (f_n does not depend on q_n)",
    statement="f_n(ω) = Σ_m ξ(k_m,ω) v_m / Σ_m ξ(k_m,ω): the factor ξ(q_n,ω) cancels, so f_n does not depend on q_n.",
    kind="identity",
    tolerance=TOLERANCE, units=UNITS,
    domain=_sw_domain(mu="any ω (drawn from ρ)"),
    cell=_swept(_f_invariant_cell), grid=_sw_grid(), where=lambda p, v: _sw_keep(p),
    roles=("rfa_attention_with_proposal",), plot_x="S",
    notes="Left: f_n(ω_s) from Eq 3 with each query; right: single-sample RFA at q = 0 (the query-free formula).",
)


def _parabola_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _inputs(ctx, n=1)
    proposal = _proposal(ctx, q, k)
    beta = ctx.rng.normal(size=v.shape[1])
    part = p["part"]
    if part == "per_draw":
        omega, log_ratio = _draws(ctx, proposal)
        terms = _terms(ctx, q, k, v, omega, log_ratio)
        tokens = control_variate_family(terms, beta, per_token=True)
        rewritten = terms.h_tokens[..., None] * (v - beta) + beta * terms.softmax_weights[..., None]
        return _identity(ctx, tokens, rewritten, terms.g_tokens, lead=3)
    if part in ("token_sample", "subset_sample"):
        omega, log_ratio = _draws(ctx, proposal, sets=64)
        terms = _terms(ctx, q, k, v, omega, log_ratio)
        tokens = control_variate_family(terms, beta, per_token=True)[:, 0]              # (R, M, d_v)
        h = terms.h_tokens[:, 0]
        cov_h = np.cov(h.T, ddof=1).reshape(h.shape[1], h.shape[1])
        subset = np.arange(h.shape[1] // 2, h.shape[1])
        if part == "token_sample":
            lhs = np.array([np.trace(np.atleast_2d(np.cov(tokens[:, m].T))) for m in range(h.shape[1])])
            rhs = np.array([theory.token_cv_variance(cov_h[m, m], v[m], beta) for m in range(h.shape[1])])
            raw = (tokens ** 2).sum(axis=-1).mean(axis=0)
        else:
            lhs = np.trace(np.atleast_2d(np.cov(tokens[:, subset].sum(axis=1).T)))
            rhs = theory.subset_cv_variance(cov_h, v, beta, subset)
            raw = (tokens[:, subset].sum(axis=1) ** 2).sum(axis=-1).mean()
        return _identity(ctx, lhs, rhs, raw, lead=lhs.ndim)
    mom = theory.cv_moments(q[0], k, v, proposal.mean, p["S"])
    subset = np.arange(k.shape[0] // 2, k.shape[0])
    best = theory.subset_variance_minimiser(mom.cov_h, v, subset)
    var_hp = mom.cov_h[np.ix_(subset, subset)].sum()
    step = ctx.rng.normal(size=v.shape[1])
    lhs = theory.subset_cv_variance(mom.cov_h, v, best + step, subset) - theory.subset_cv_variance(mom.cov_h, v, best,
                                                                                                   subset)
    return _identity(ctx, lhs, var_hp * (step @ step), theory.subset_cv_variance(mom.cov_h, v, best + step, subset),
                     lead=0)


CV_PARABOLA = Claim(
    id="eva.derived.cv_parabola", source="register, derived prediction (the parabola in the coefficient)",
    statement="g_m(ω) = h_m(ω) v_m; for a constant β, g_m - β(h_m - w_m) = h_m(v_m - β) + βw_m, so Tr Var[g_m - "
              "β(h_m - w_m)] = Var[h_m]‖v_m - β‖²; for a subset P, Tr Var[Σ_P(g_m - β(h_m - w_m))] = Σ_{m,m'∈P} "
              "Cov[h_m,h_m'](v_m - β)·(v_m' - β), minimised by β_var,P = Σ Cov[h_m,h_m'] v_m'/Σ Cov[h_m,h_m'].",
    kind="identity",
    tolerance=TOLERANCE, units="|Δ| / largest |term|",
    domain=dict(
        M=Integers("the keys (a subset P of them)", 1, math.inf, points=(1,), up_to=16, why=_SUM_WHY),
        S=Integers("S iid draws", 1, math.inf, points=(1,), up_to=8,
                   why="the identities are algebra in h_m and its moments, whatever S they average over"),
        mu=Choice("S iid draws from N(μ, I) (the register's means)", MEANS),
        dv=Integers("v_m, β ∈ R^{d_v}", 1, math.inf, up_to=3,
                    why="the traces are sums over coordinates of identities of the same kind"),
        part=Choice("each identity: per draw, the token variance, the subset variance, and its minimiser",
                    ("per_draw", "token_sample", "subset_sample", "minimiser"))),
    cell=_swept(_parabola_cell),
    grid=tiers(dict(M=[1, 3, 16], S=[1, 8], mu=["zero", "q+k1", "far", ("q+mean_k", "random")], dv=[1, 3],
                    part=["per_draw", "token_sample", "subset_sample", "minimiser"]),
               smoke=dict(M=[1, 16], mu=["zero", ("q+mean_k", "q+k1", "random", "far")]),
               full=dict(M=[1, 3, 16, 64], S=[1, 8, 64], mu=list(MEANS), dv=[1, 3, 8], s=[0.3, 1.0])),
    where=lambda p, v: not (p["part"] == "minimiser" and p["M"] == 1 and set(
        p["mu"] if isinstance(p["mu"], tuple) else (p["mu"],)) & {"q+k1", "q+mean_k"}),
    roles=("control_variate_terms",), plot_x="M",
    notes="Constant β. The minimiser needs Var[H_P] > 0 (M = 1 with μ = q + k_1 or q + mean k makes h_1 "
          "deterministic: those cells are left out). Variances by sample moments over 64 draws (the algebra holds "
          "for sample moments exactly) and, for the "
          "minimiser, from the closed-form Cov[h_m, h_m'] of eva.derived.cv_moments: f(β* + δ) - f(β*) = "
          "Var[H_P]‖δ‖² (no linear term) for a random δ.",
)


J_PARTS = ("pythagoras", "best_shared", "prop2_optimum", "prop2_best_shared", "prop2_between", "refinement")


def _alpha(kind: str, m: int, rng) -> np.ndarray:
    if kind == "uniform":
        return np.full(m, 1.0 / m)
    if kind == "dirichlet":
        a = rng.dirichlet(np.full(m, 0.1))
        a = np.maximum(a, 1e-300)
        return a / a.sum()
    a = np.full(m, 1e-12)
    a[0] = 1.0
    return a / a.sum()


def _refined(labels: np.ndarray, rng) -> np.ndarray:
    """A refinement of ``labels``: every subset of size >= 2 split in two at a random point."""
    out = labels.copy()
    nxt = labels.max() + 1
    for c in range(labels.max() + 1):
        idx = np.flatnonzero(labels == c)
        if idx.size >= 2:
            out[idx[rng.integers(1, idx.size):]] = nxt
            nxt += 1
    return out


def _j_cell(ctx: CellContext):
    p = ctx.params
    m, part = p["M"], p["part"]
    anchors = ctx.rng.normal(size=(m, 2))                               # positions the clustered layout groups
    labels = _partition_labels(ctx, m, min(p["C"], m), keys=anchors)
    if part.startswith("prop2"):
        q, k, v = _inputs(ctx, n=1)
        alpha, targets = np.exp(theory.log_softmax_weights(q[0], k)), v
        log_pi, local = theory.local_softmax(q[0], k, v, labels)
        optimum = theory.partition_optimal_coefficients(alpha, targets, labels)
        if part == "prop2_optimum":
            return _identity(ctx, optimum, local, lead=1)
        softmax_u = _softmax(q, k, v)[0]
        if part == "prop2_best_shared":
            return _identity(ctx, alpha @ targets, softmax_u, lead=0)
        lhs = theory.weighted_error(alpha, targets, labels, softmax_u) - theory.weighted_error(alpha, targets, labels,
                                                                                             local)
        rhs = float(np.exp(log_pi) @ ((local - softmax_u) ** 2).sum(axis=1))
        return _identity(ctx, lhs, rhs, theory.weighted_error(alpha, targets, labels, softmax_u), lead=0)
    alpha, targets = _alpha(p["alpha"], m, ctx.rng), ctx.rng.normal(size=(m, 3)) * 2
    optimum = theory.partition_optimal_coefficients(alpha, targets, labels)
    beta = ctx.rng.normal(size=3) * 3
    shared = theory.weighted_error(alpha, targets, labels, beta)
    if part == "pythagoras":
        lhs = shared - theory.weighted_error(alpha, targets, labels, optimum)
        return _identity(ctx, lhs, theory.pythagoras_gap(alpha, targets, labels, beta), shared, lead=0)
    if part == "best_shared":
        best = alpha @ targets
        lhs = shared - theory.weighted_error(alpha, targets, labels, best)
        return _identity(ctx, lhs, (beta - best) @ (beta - best), shared, lead=0)
    return _refinement_evidence(ctx, alpha, targets, labels, _refined(labels, ctx.rng))


def _optimal_j(alpha, targets, labels) -> float:
    return theory.weighted_error(alpha, targets, labels, theory.partition_optimal_coefficients(alpha, targets, labels))


def _refinement_evidence(ctx: CellContext, alpha, targets, coarse, fine):
    j_coarse, j_fine = _optimal_j(alpha, targets, coarse), _optimal_j(alpha, targets, fine)
    return margin_evidence(j_coarse - j_fine, tolerance=ctx.tolerance, scale=max(j_coarse, _TINY),
                           extra=dict(j_coarse=j_coarse, j_fine=j_fine))


def _j_search(ctx: CellContext):
    """Minimise the refinement margin ``(J_P(opt) - J_P'(opt))/J_P(opt)`` over weights (log-weights in [-30, 30])
    and targets in [-5, 5] for P = {0,1}{2,3} and its refinement P' = {0}{1}{2,3}."""
    coarse, fine = np.array([0, 0, 1, 1]), np.array([0, 1, 2, 2])

    def weights(x):
        w = np.exp(x[:4] - x[:4].max())
        return w / w.sum()

    def margin(x):
        alpha, targets = weights(x), x[4:, None]
        j_coarse = _optimal_j(alpha, targets, coarse)
        return (j_coarse - _optimal_j(alpha, targets, fine)) / max(j_coarse, _TINY)

    res = minimize_margin(margin, [(-30.0, 30.0)] * 4 + [(-5.0, 5.0)] * 4, rng=ctx.rng, restart=ctx.restart or 0,
                          maxiter=200)
    return _refinement_evidence(ctx, weights(res.x), res.x[4:, None], coarse, fine)


J_PYTHAGORAS = Claim(
    id="eva.derived.j_pythagoras",
    source="register, derived prediction (weighted-MSE Pythagorean identity)",
    statement="J(β,…,β) - J(β*_1,…,β*_C) = Σ_c A_c ‖β - β*_c‖² for every β; the best shared coefficient is "
              "Σ_m α_m β*_m; with Prop 2's weights the optimum is the local softmax, the best shared coefficient "
              "β*_U and J(β*_U) - J(β*_c) = Σ_c π̂_c ‖β*_c - β*_U‖²; a refining partition never increases "
              "the optimal J.",
    kind="identity",
    tolerance=TOLERANCE, units="|Δ| / largest |term| (refinement: margin / J_P)",
    domain=dict(
        M=Integers("the M weights α_m and targets β*_m", 1, math.inf, points=(1,), up_to=16,
                   why=_SUM_WHY + " (M = 64 is tested at quick)"),
        C=Integers("any partition into C subsets", 1, math.inf, points=(1,), up_to=8,
                   why="each subset adds one term A_c‖β - β*_c‖² of the same kind"),
        alpha=Choice("α_m > 0 summing to 1 (Eq 24): uniform, Dirichlet(0.1), one dominant weight (the Prop 2 parts: "
                     "softmax weights over U, Eq 9)", ("uniform", "dirichlet", "degenerate")),
        layout=Choice("any partition: contiguous, random and clustered subsets", ("contiguous", "random", "clustered")),
        part=Choice("each statement: the Pythagorean identity, the best shared coefficient, Prop 2's optimum, best "
                    "shared coefficient and between-subset spread, and the refinement inequality", J_PARTS)),
    cell=_j_cell,
    grid=tiers(dict(M=[1, 3, 16, 64], C=[1, 2, 8], alpha=["uniform", "dirichlet", "degenerate"],
                    layout=["contiguous", "random", "clustered"], part=list(J_PARTS)),
               smoke=dict(M=[1, 16], C=[1, 8]),
               full=dict(M=[1, 3, 16, 64, 256, 1024], C=[1, 2, 8, 64, 1024],
                         layout=["contiguous", "random", "clustered", "dyadic"],
                         inputs=["iid", "clustered", "peaked"])),
    where=lambda p, v: p["C"] <= p["M"] and (not p["part"].startswith("prop2") or p["alpha"] == "uniform"),
    search=_j_search, restarts=tiers(3, smoke=1, full=20), universal=True,
    plot_x="M",
    notes="The refinement inequality also gets an adversarial search over weights (log-weights in [-30, 30]) and "
          "targets for a fixed partition and its refinement.",
)


def _eq13_decomposition_cell(ctx: CellContext):
    p = ctx.params
    q, k, v = _inputs(ctx)
    m = k.shape[0]
    exact = np.arange(min(p["E"], m))
    chunks = min(p["C"], m - exact.size)
    labels = _partition_labels(ctx, m, chunks, exact=exact, keys=k)
    proposal = _proposal(ctx, q, k)
    omega, log_ratio = _draws(ctx, proposal)
    y, weights = ctx.impl("eva_ideal", eva_ideal)(q, k, v, labels, omega=omega, log_ratio=log_ratio,
                                                  return_weights=True)
    if p["part"] == "error":
        log_pi, local = theory.local_softmax(q, k, v, labels)
        rfa = ctx.impl("rfa_attention_with_proposal", rfa_attention)
        beta_hat = np.stack([rfa(q, k[labels == c], v[labels == c], omega=omega, log_ratio=log_ratio, form="features")
                             for c in range(chunks)], axis=-2)                      # (sets, N, C, d_v)
        predicted = theory.eq13_error(log_pi, beta_hat, local)
        return _identity(ctx, y - _softmax(q, k, v), predicted, y, np.abs(beta_hat).max(axis=-2))
    if p["part"] == "convex":
        rows = weights.sum(axis=-1)
        negative = np.minimum(weights, 0.0).min(axis=-1)
        return _identity(ctx, np.stack([rows, 1 + negative]), np.ones((2,) + rows.shape), lead=3)
    return _identity(ctx, weights @ v, y)


EQ13_DECOMPOSITION = Claim(
    id="eva.derived.eq13_error_decomposition", source="register, derived prediction (Eq 13's error)",
    statement="When E and {P_c} are disjoint and cover [M]: EVA13(ω) - SoftmaxAttn(q_n) = Σ_c π_c (β̂_c(ω) - β*_c); "
              "EVA13 = Σ_m A_{n,m} v_m with A non-negative and row-stochastic.",
    kind="identity",
    related={"eva.eq15.eva_ratio_form": "EVA (Eq 13): its ratio forms, and its error to softmax"},
    tolerance=TOLERANCE, units=UNITS,
    domain=dict(
        M=Integers("E ∪ ∪_c P_c = [M]", 1, math.inf, points=(1,), up_to=16, why=_SUM_WHY),
        E=Integers("E (|E| from 0)", 0, math.inf, points=(0, 1), up_to=4,
                   why="each exact token adds one term w_m v_m of the same kind"),
        C=Integers("the subsets P_1, ..., P_C (disjoint from E)", 1, math.inf, points=(1,), up_to=8,
                   why="each subset adds one term π_c β̂_c of the same kind"),
        S=Integers("shared samples ω (S per set)", 1, math.inf, points=(1,), up_to=16, why=_SUM_WHY),
        mu=Choice("ω ~ ρ = N(μ, I) (the register's means)", MEANS),
        layout=Choice("any disjoint {P_c}: contiguous, random and clustered subsets",
                      ("contiguous", "random", "clustered")),
        inputs=Choice("any q_n, K, V: the register's generators", GENERATORS),
        part=Choice("both statements: the error decomposition; A non-negative and row-stochastic with A V = EVA13",
                    ("error", "convex", "values"))),
    cell=_swept(_eq13_decomposition_cell),
    grid=tiers(dict(M=[1, 3, 16], E=[0, 1, 4], C=[1, 2, 8], S=[1, 16], mu=["zero", "far", EXTRA_MU + ("q+mean_k",)],
                    layout=["contiguous", "random", ("clustered",)],
                    inputs=["iid", "peaked", EXTRA_INPUTS + ("outlier",)], part=["error", "convex", "values"]),
               smoke=dict(M=[1, 16], E=[0, 1, 4], C=[1, 8], mu=["zero", EXTRA_MU + CORE_MU[1:]],
                          layout=["contiguous", ("random", "clustered")],
                          inputs=["iid", EXTRA_INPUTS + CORE_INPUTS[1:]]),
               full=dict(M=[1, 3, 16, 64, 256], E=[0, 1, 4, 16], C=[1, 2, 8, 32], S=[1, 16, 256], d=[2, 16],
                         mu=list(MEANS), layout=["contiguous", "random", "clustered"], inputs=list(GENERATORS))),
    where=lambda p, v: p["E"] + p["C"] <= p["M"] and p["C"] > 0 and (
        not _has_tuple(p) or p["M"] == 16 and p["S"] == 16 and p["part"] == "error" and _one_tuple(p)),
    roles=("eva_ideal", "rfa_attention_with_proposal"), plot_x="C",
    notes="Parts: 'error' (β̂_c as RFA restricted to P_c on the same ω, π_c and β*_c exact); 'convex' (rows of A sum "
          "to 1 and min A >= 0); 'values' (A V = EVA13).",
)
