"""``lara.*`` identity claims: the algebra behind RFA, RA and LARA, checked on shared draws and pointwise.

Seed text ``000_d62fa2cae7f5a446.txt``; register ``../shared/claims/lara.md``. Estimators come from
:mod:`rfkit.estimators.rfa`, :mod:`~rfkit.estimators.ra`, :mod:`~rfkit.estimators.mis` and
:mod:`~rfkit.estimators.lara` (called through roles, so user implementations can be put through the same
checks); predictions from :mod:`rfkit.theory.lara`.

Design notes
------------
* **Tolerance.** The register fixes identity tolerances at "a relative tolerance of order 1e-9, scaled by the
  conditioning of the computation". Every error here is divided by the magnitude of what was summed: for an
  attention row, ``max|v|`` times ``Σ|terms|/|Σ terms|`` (1 for non-negative weights; large for signed
  weights or trigonometric features whose denominators nearly cancel); for a log density, ``1 +`` the largest
  exponent involved (``‖ω‖²/2``, ``‖q‖²``, ...), since a log-sum-exp of terms of size ``E`` carries absolute
  round-off ``~E·eps``. Round-off then sits near ``1e-13``; a wrong factor, sign, normaliser or sample shows
  as ``1e-3`` to ``1``.
* **Parts with their own thresholds.** A few claims mix exact parts with a Monte Carlo or structural part
  (the mass of ``p(ω|m)`` by Monte Carlo, Eq 35's "global information"); their tolerance is ``1`` and each
  part's violation is expressed in units of its own threshold (stated in ``units``), fixed from the claim's
  meaning before any run.
* **Adversarial search.** Pointwise identities ("for any ω", "for all q, k", weights summing to one "for any
  ω, r', β") also get a search that maximises the scaled error over the whole domain (norms up to the
  register's bounds, every angle, ``ω`` up to distance 50, β up to 10), so that a violation confined to a corner
  (``k = -q``, ``z = 0``, large ``‖ω‖``) is found. Identities between two implementations of one estimator on
  shared draws are swept over the register's grids, extremes included (G-degenerate, G-peaked, large norms).
* **Readings.** Eq 9's statement writes one argument (``Σ_c α_nc(ω) = 1``, MIS validity after Eq 8): it is
  decided by the common-argument reading, and the own-sample reading is reported beside. G.3.2's words admit
  three (the validity of a weighting function; the display's ``Σ_c α*_nc(ω_c)``; its second line as typeset):
  they decide together. (Eq 35, Algorithm 3 and §4.3's readings are :mod:`.forms`'.)
* **Budgets.** Cells are small (tens of tokens, a few samples); the ``full`` tier follows the register's sweeps.
"""

from __future__ import annotations

import math

import numpy as np

from rfkit.base.numerics import gauss_hermite_rule, logsumexp
from rfkit.estimators import lara as lara_est
from rfkit.estimators import mis as mis_est
from rfkit.estimators import ra as ra_est
from rfkit.estimators import rfa as rfa_est
from rfkit.estimators import snis_estimate, softmax_attention
from rfkit.theory import lara as theory
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.harness import condition_scale, controlled_pair, quiet
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import Evidence, combine, exact_test, mean_test, required_replicates

from .inputs import attention_inputs, norm_inputs, unit_vectors

PI = math.pi
#: The register's identity tolerance (relative, condition-scaled).
IDENTITY_TOL = 1e-9
#: Nelder-Mead iterations per search restart (the objectives are round-off noise unless an identity fails,
#: when they are O(1) almost everywhere: a short polish from the corners suffices).
SEARCH_ITERATIONS = 120
#: Search restarts per tier (restart 0 scans the box's corners and centre).
RESTARTS = tiers(3, smoke=1, full=20)
#: Proposal families as one axis (Eq 35's readings spelled out).
PROPOSAL_AXIS = ("eq32", "eq33", "eq34", "eq35_printed_C", "eq35_printed_M", "eq35_landmark_attention", "standard")
GAUSSIAN_PROPOSALS = tuple(p for p in PROPOSAL_AXIS if p != "eq32")
SIGNED_WEIGHTS = ("eq9", "eq37")


# =============================================================================== shared helpers


def _half_sq(x):
    return 0.5 * np.einsum("...i,...i->...", x, x)


def _exact(value, ctx: CellContext, extra: dict | None = None, *, threshold: float = 1.0) -> Evidence:
    """Exact evidence for a scaled error; ``threshold`` is the part's own tolerance (see the module notes)."""
    return exact_test(np.asarray(value, dtype=np.float64) / threshold, 0.0, tolerance=ctx.tolerance, extra=extra)


def _row_error(got, want, scale_rows) -> float:
    """``max |got - want| / scale`` with one scale per output row."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    scale = np.broadcast_to(np.asarray(scale_rows, dtype=np.float64), got.shape[:1]).reshape(-1, 1)
    return float((np.abs(got - want) / scale).max(initial=0.0))


def _value_scale(v, rel_den=None):
    """``max|v| / (|Σa|/Σ|a|)`` per row: the size of the terms an attention row sums (see module notes)."""
    base = max(float(np.abs(v).max(initial=0.0)), np.finfo(float).tiny)
    return base if rel_den is None else base / np.maximum(np.asarray(rel_den), np.finfo(float).tiny)


def _inputs(ctx: CellContext, n: int, m: int, d: int, dv: int | None = None):
    """Cell inputs from the ``inputs`` / ``logit_std`` axes (G-gauss by default)."""
    p = ctx.params
    kind = p.get("inputs", "gauss")
    if kind == "opposite":
        m = n
    return attention_inputs(kind, ctx.rng, n, m, d, dv, p.get("logit_std", 1.0))


def _search_evidence(ctx: CellContext, error_fn, bounds, *, integer=None) -> Evidence:
    """Maximise ``error_fn`` over the box (restart ``ctx.restart``) and judge the worst point exactly."""
    res = minimize_margin(lambda x: -error_fn(x), bounds, rng=ctx.rng, restart=ctx.restart or 0,
                          integer=integer, maxiter=SEARCH_ITERATIONS)
    return margin_evidence(res.margin, tolerance=ctx.tolerance,
                           extra=dict(x=res.x.tolist(), evaluations=res.evaluations))


def _log_magnitude(omega, *vectors) -> np.ndarray:
    """``1 + ‖ω‖²/2 + Σ‖x‖²`` per point: the size of the exponents in a Gaussian log density."""
    out = 1.0 + _half_sq(omega)
    for x in vectors:
        out = out + 2 * _half_sq(x)
    return out


def _degenerate(kind: str, q, k, v):
    """G-degenerate modifications of G-norm inputs (``norm``: unchanged)."""
    q, k, v = q.copy(), k.copy(), v.copy()
    if kind == "zero_query":
        q[:] = 0.0
    elif kind == "zero_keys":
        k[:] = 0.0
    elif kind == "opposite":
        k[: q.shape[0]] = -q[: k.shape[0]]
    elif kind == "identical_keys":
        k[:] = k[0]
    elif kind != "norm":
        raise ValueError(f"unknown degenerate kind {kind!r}")
    return q, k, v


def _omega_points(ctx: CellContext, placement: str, q, k, count: int) -> np.ndarray:
    """Points ``(N, count, D)``: ``standard`` N(0, I), ``target`` from p_n, ``far`` at distance 50."""
    n, d = q.shape
    if placement == "standard":
        return ctx.rng.standard_normal((n, count, d))
    if placement == "target":
        return ra_est.attention_mixture(q, k).sample(ctx.rng, count)
    return 50.0 * unit_vectors(ctx.rng, n * count, d).reshape(n, count, d)



def _proposal(name: str):
    """``(family, eq35_reading)`` from a :data:`PROPOSAL_AXIS` value."""
    if name.startswith("eq35_"):
        return "eq35", name[len("eq35_"):]
    return name, "landmark_attention"


def _lara_setup(q, k, C: int, proposal: str):
    family, reading = _proposal(proposal)
    return lara_est.lara_proposals(q, k, C, proposal=family, eq35_reading=reading, uneven="adaptive")


def _weights_for(ctx: CellContext, kind: str, lp, q, omega, *, beta: float = 1.0, axis: str = "queries",
                 inner: str = "outer", kappa=None):
    """``α (N, C, S_c)`` of ``kind`` at the draws ``omega`` (shared by the two sides of an identity)."""
    lq = mis_est.cross_log_density(lp.proposals, omega)
    r = mis_est.rprime(q, lp.q_landmarks, axis=axis) if kind in SIGNED_WEIGHTS else None
    weights = ctx.impl("mis_weights", mis_est.mis_weights)
    return np.asarray(weights(kind, lq, rprime=r, beta=beta, eq37_inner=inner, kappa=kappa, n_queries=q.shape[0]))


def _row_scale_from_alpha(v, alpha, log_ratio) -> np.ndarray:
    """Per-query ``max|v|·Σ|a|/|Σa|`` with ``a = α e^{log_ratio}`` (the conditioning of a signed MIS row)."""
    shift = log_ratio.max(axis=(1, 2), keepdims=True)
    a = alpha * np.exp(log_ratio - shift)
    return _value_scale(v, np.abs(a.sum(axis=(1, 2))) / np.abs(a).sum(axis=(1, 2)))


def _lara_log_ratio(q, k, omega, lp) -> np.ndarray:
    """``log p̃_n(ω_c) - log q_c(ω_c)``, shape ``(N, C, S_c)`` (for conditioning only)."""
    n_c, s_c, d = omega.shape
    log_pt = rfa_est.log_implied_target(q, k, omega.reshape(-1, d)).reshape(q.shape[0], n_c, s_c)
    return log_pt - lp.proposals.logpdf(omega)[None]


# ==================================================================== Eq 2: RFA's forms (§2.2)


def _kernel_average_error(x, y, omega, phase, feature_map, rf_features) -> float:
    """Footnote 3: ``(1/S)Σ_s ξ(x,ω_s)ᵀξ(y,ω_s)`` (from ξ) against ``φ(x,w)ᵀφ(y,w)`` (features), scaled by
    ``(1/S)Σ_s Σ_l |ξ_l ξ_l|``."""
    sx, lx = rfa_est.xi(x, omega, feature_map=feature_map, phase=phase)     # (X, S, l)
    sy, ly = rfa_est.xi(y, omega, feature_map=feature_map, phase=phase)
    logs = lx[:, None] + ly[None]                                            # (X, Y, S, l)
    shift = logs.max(axis=(2, 3))
    shift = np.where(np.isfinite(shift), shift, 0.0)
    terms = (sx[:, None] * sy[None]) * np.exp(logs - shift[..., None, None])
    s = omega.shape[0]
    average, magnitude = terms.sum(axis=(2, 3)) / s, np.abs(terms).sum(axis=(2, 3)) / s
    fx = rf_features(x, omega, feature_map=feature_map, phase=phase)
    fy = rf_features(y, omega, feature_map=feature_map, phase=phase)
    sign, logabs = fx.kernel(fy, log=True)
    return float((np.abs(average - sign * np.exp(logabs - shift)) / np.maximum(magnitude, 1e-300)).max())


def _near_zero_denominators(fq, fk) -> int:
    """Rows whose renormaliser ``Σ_m φ(q)ᵀφ(k_m)`` is below 1e-8 of ``Σ_m |φ(q)ᵀφ(k_m)|``."""
    sign, logabs = fq.kernel(fk, log=True)
    shift = logabs.max(axis=-1, keepdims=True)
    terms = sign * np.exp(logabs - np.where(np.isfinite(shift), shift, 0.0))
    return int((np.abs(terms.sum(-1)) < 1e-8 * np.abs(terms).sum(-1)).sum())


def _eq2_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    fmap, d, S = p["feature"], p["d"], p["S"]
    q, k, v = norm_inputs(ctx.rng, p["N"], p["M"], d, p["norm"])
    omega, phase = rfa_est.draw_rfa_samples(S, d, rng=ctx.rng, feature_map=fmap)
    attention = ctx.impl("rfa_attention", rfa_est.rfa_attention)
    reuse = np.asarray(quiet(attention, q, k, v, omega=omega, phase=phase, feature_map=fmap, form="features"))
    double = quiet(rfa_est.rfa_attention, q, k, v, omega=omega, phase=phase, feature_map=fmap, form="double_sum")
    fq = rfa_est.rf_features(q, omega, feature_map=fmap, phase=phase)
    fk = rfa_est.rf_features(k, omega, feature_map=fmap, phase=phase)
    form_error = float((np.abs(reuse - double) / condition_scale(fq, fk, v, double, False)).max())
    rows = slice(0, 17)
    kernel_error = _kernel_average_error(q[rows], k[rows], omega, phase, fmap,
                                         ctx.impl("rf_features", rfa_est.rf_features))
    extra = dict(form_error=form_error, kernel_error=kernel_error,
                 near_zero_denominators=_near_zero_denominators(fq, fk))
    return _exact(max(form_error, kernel_error), ctx, extra)


_SUM_WHY = "both sides sum the same finite set of terms in another order; more terms add terms of the same kind"

EQ2_RFA_FORMS = Claim(
    id="lara.eq2.rfa_forms", source="§2.2 Eq 2; footnote 3",
    statement="Σ_mΣ_s ξ(q_n,ω_s)ᵀξ(k_m,ω_s)v_mᵀ / Σ_mΣ_s ξ(q_n,ω_s)ᵀξ(k_m,ω_s) = Σ_s ξ(q_n,ω_s)ᵀΣ_m ξ(k_m,ω_s)v_mᵀ / "
              "Σ_s ξ(q_n,ω_s)ᵀΣ_m ξ(k_m,ω_s) =: RFA(q_n, K, V); and (1/S)Σ_s ξ(x,ω_s)ᵀξ(y,ω_s) = φ(x,w)ᵀφ(y,w) with "
              "φ(x,w) = S^{-1/2}[ξ(x,ω_1), ..., ξ(x,ω_S)].",
    kind="identity",
    tolerance=IDENTITY_TOL,
    units="error / condition magnitude (Σ|terms||v| + |out|Σ|terms|)/|Σ terms| (rows); kernel: / (1/S)Σ|ξᵀξ|",
    domain=dict(
        feature=Choice("any ξ (App C's randomized mappings)", tuple(rfa_est.XI_MAPS)),
        S=Integers("any samples ω_1, ..., ω_S", 1, math.inf, points=(1, 2), up_to=64, why=_SUM_WHY),
        N=Integers("every query q_n", 1, math.inf, up_to=17, why="rows are computed independently"),
        M=Integers("Σ_m over the keys k_m and values v_m", 1, math.inf, points=(1, 2), up_to=17, why=_SUM_WHY),
        d=Integers("q_n, k_m, ω_s ∈ R^D", 1, math.inf, up_to=64,
                   why="D enters only through the features ξ(x, ω), the same in both forms"),
        norm=Range("any inputs q_n, k_m (G-norm: norms uniform on [0, max], one at the max)", 0.0, math.inf,
                   up_to=(None, 6.0), why="the register's sweep (norms up to 6); the positive and hyperbolic maps "
                                          "are compared in log space")),
    cell=_eq2_cell,
    grid=tiers(dict(feature=list(rfa_est.XI_MAPS), d=[1, 8, 64], N=[1, 17], M=[1, 2, 17], S=[1, 2, 64],
                    norm=[0.0, 6.0]),
               smoke=dict(d=[1, 64], N=[1, 17], M=[1, 2, 17], S=[1, 2, 64], norm=[0.0, 6.0]),
               full=dict(d=[1, 8, 64], N=[1, 2, 17, 196], M=[1, 2, 17, 196], S=[1, 2, 64, 256],
                         norm=[0.0, 0.5, 2.0, 6.0])),
    roles=("rfa_attention", "rf_features"), plot_x="S",
    notes="Rows with near-zero trigonometric renormalisers (|D̂| < 1e-8 Σ|terms|) are counted in the cell's "
          "`near_zero_denominators` and judged on the same condition-scaled error.",
)


# ============================================================= Eq 3: the normaliser cancels (§2.3)


def _eq3_target(target: str, q, k, v):
    """The target mixture and its Eq 6 integrand ``f (P, D), rows -> (len(rows), P, D_v)`` (queries ``rows``)."""
    fmap = "positive" if target == "positive" else "hyperbolic"
    mix = ra_est.attention_mixture(q, k, feature_map=fmap)
    return mix, lambda w, rows=slice(None): rfa_est.integrand(q[rows], k, v, w, feature_map=fmap, form="literal")


def _eq3_proposal_mean(ctx: CellContext, q, k, mix) -> np.ndarray:
    name = ctx.params["proposal"]
    if name == "standard":
        return np.zeros(q.shape[1])
    if name == "eq34":
        return lara_est.lara_proposals(q, k, min(2, q.shape[0]), proposal="eq34").proposals.means[0]
    center = ra_est.attention_mixture(q, k).mean()[0]
    return center + float(name[len("shift"):]) * unit_vectors(ctx.rng, 1, q.shape[1])[0]


def _component_expectation(mix, f, nodes, weights) -> np.ndarray:
    """``E_p[f] = Σ_m π_nm E_{N(μ_nm, I)}[f]`` by Gauss–Hermite per component (symmetric: both signs)."""
    signs = (1.0, -1.0) if mix.symmetric else (1.0,)
    out = 0.0
    for sign in signs:
        for m in range(mix.offsets.shape[0]):
            centers = sign * (mix.base + mix.offsets[m])                   # (N, D)
            vals = np.stack([f(c + nodes, slice(i, i + 1))[0] for i, c in enumerate(centers)])  # (N, G, D_v)
            out = out + np.exp(mix.log_weights[:, m])[:, None] * np.einsum("g,ngd->nd", weights, vals) / len(signs)
    return out


def _eq3_quadrature_error(mix, f, mu, v) -> float:
    """First equality of Eq 3 by quadrature: ``E_q[(p/q)f]/E_q[p/q]`` (Gauss–Hermite about ``q``) against
    ``E_p[f]`` (Gauss–Hermite about each component of ``p``). The hyperbolic integrand is analytic only in a strip
    (``cosh`` vanishes at ``iπ/2``), where Gauss–Hermite converges slowly: 300 nodes (D = 1) and 200² (D = 2)
    bring both rules below 1e-11 here (measured against 300/500 nodes)."""
    d = mu.shape[0]
    nodes, weights = gauss_hermite_rule(300 if d == 1 else 200, d)
    w = mu + nodes
    ratio = np.exp(mix.logpdf_cross(w).T - rfa_est.log_normal(w, mu))         # (N, G): p/q
    num = np.einsum("g,ng,ngd->nd", weights, ratio, f(w))
    den = ratio @ weights
    return _row_error(num / den[:, None], _component_expectation(mix, f, nodes, weights), _value_scale(v))


def _eq3_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    d = p["d"]
    q, k, v = attention_inputs("gauss", ctx.rng, 1 if d <= 2 else 4, 4 if d <= 2 else 8, d, 3, 1.0)
    mix, f = _eq3_target(p["target"], q, k, v)
    mu = _eq3_proposal_mean(ctx, q, k, mix)
    omega = mu + ctx.rng.standard_normal((p["S"], d))
    log_w = mix.logpdf_cross(omega).T - rfa_est.log_normal(omega, mu)
    snis = ctx.impl("snis_estimate", snis_estimate)
    fv = f(omega)
    with_p = np.asarray(snis(fv, log_weights=log_w))
    with_tilde = np.asarray(snis(fv, log_weights=log_w + p["log_z"]))
    errors = dict(cancel_error=_row_error(with_tilde, with_p, _value_scale(v)))
    if d <= 2 and p["log_z"] > 0 and p["S"] == 1:  # the first equality involves neither Z nor the samples:
        # once per (target, proposal, d)
        errors["quadrature_error"] = _eq3_quadrature_error(mix, f, mu, v)
    return _exact(max(errors.values()), ctx, errors)


EQ3_PROPOSALS = ("standard", "shift0", "shift6", "eq34")

EQ3_SNIS = Claim(
    id="lara.eq3.snis_normaliser_cancels", source="§2.3 Eq 3",
    statement="With p = p̃/Z, E_p[f] = E_q[(p/q)f]/E_q[p/q] ≈ [(1/S)Σ_s (1/Z)(p̃/q)(ω_s)f(ω_s)] / [(1/S)Σ_s (1/Z)"
              "(p̃/q)(ω_s)] = Σ_s (p̃/q)(ω_s)f(ω_s) / Σ_s (p̃/q)(ω_s): the normalising constant Z cancels.",
    kind="identity",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    domain=dict(
        log_z=Range("p = p̃/Z with any Z > 0 (log Z)", -math.inf, math.inf, up_to=(-690.0, 690.0),
                    why="e^{±690} are near float64's limits; Z is a common factor of every term"),
        target=Choice("p and f (the register's targets: Eq 5's p_n and Corollary C.1's hyperbolic mixture, with "
                      "their Eq 6 integrands)", ("positive", "hyperbolic")),
        proposal=Choice("q (N(0, I); N(μ, I) at distance 0 and 6 from the target's mean; eq34 landmark proposals)",
                        EQ3_PROPOSALS),
        S=Integers("the same samples ω_1, ..., ω_S in numerator and denominator", 1, math.inf, points=(1,),
                   up_to=32, why=_SUM_WHY),
        d=Integers("ω ∈ R^D (the first equality by Gauss-Hermite quadrature for D <= 2)", 1, math.inf,
                   points=(2,), up_to=64, why="D enters only through the densities and the integrand")),
    cell=_eq3_cell,
    # quadrature cells (D <= 2, log Z > 0, S = 1) take ~0.1 s each: 200² Gauss-Hermite nodes (see _eq3_quadrature_error)
    grid=tiers(dict(target=["positive", "hyperbolic"], proposal=list(EQ3_PROPOSALS), d=[1, 2, 64],
                    log_z=[-690.0, 690.0], S=[1, 32]),
               smoke=dict(d=[1, 2, 64]),
               full=dict(proposal=["standard", "shift0", "shift1", "shift3", "shift6", "eq34"], d=[1, 2, 8, 64],
                         log_z=[-690.0, -30.0, 0.0, 30.0, 690.0], S=[1, 2, 32, 256])),
    roles=("snis_estimate",), plot_x="log_z",
)


# ============================================================ Eq 4, Prop 3.1, Lemma A.1 (§3.1, App A)


def _log_pair_sum(q, k, omega):
    """``(log Σ_m ξ(q_n,ω)ᵀξ(k_m,ω), log ξ(q_n,ω)ᵀξ(k_m,ω))`` at ``omega (N, S, D)`` (positive map)."""
    _, pair = rfa_est.pair_log_kernel(q, k, omega)
    return logsumexp(pair, axis=-1), pair


def _eq4_errors(ctx: CellContext, q, k, v, omega) -> dict:
    """Both lines of Eq 4 at ``omega (N, S, D)``, with ``p`` the Eq 5 mixture and ``Z = Σ_m exp(q_n·k_m)``."""
    mixture = ctx.impl("attention_mixture", ra_est.attention_mixture)
    log_pq = mixture(q, k).logpdf(omega) - rfa_est.log_normal(omega)       # log p/q, (N, S)
    _, log_z = ra_est.softmax_log_weights(q, k)
    log_sum, pair = _log_pair_sum(q, k, omega)
    rhs = log_sum - log_z[:, None]
    mag = _log_magnitude(omega, q[:, None, :]) + float(_half_sq(k).max()) * 2
    weight_error = float((np.abs(log_pq - rhs) / mag).max())
    f = rfa_est.integrand(q, k, v, omega, form="literal")                          # Eq 6, (N, S, D_v)
    terms = np.exp(pair - log_z[:, None, None] - rhs[..., None])                    # (N, S, M)
    left = np.exp(log_pq - rhs)[..., None] * f
    scale = (terms @ np.abs(v)) * mag[..., None]
    vector_error = float((np.abs(left - terms @ v) / np.maximum(scale, 1e-300)).max())
    return dict(weight_error=weight_error, vector_error=vector_error)


#: Keys entering the quadrature checks (each term of Z and each component mass is checked on its own).
QUADRATURE_KEYS = 8


def _z_quadrature_error(q, k) -> float:
    """``Z = ∫ N(ω; 0, I) Σ_m ξ(q_1,ω)ξ(k_m,ω) dω`` by Gauss–Hermite (``D <= 2``) against ``Σ_m exp(q_1·k_m)``
    (the first :data:`QUADRATURE_KEYS` keys): the difference of logs over ``1 + max q·k``."""
    d = q.shape[1]
    k = k[:QUADRATURE_KEYS]
    nodes, weights = gauss_hermite_rule(150, d)
    _, pair = rfa_est.pair_log_kernel(q[:1], k, nodes)
    log_quad = logsumexp(pair[0] + np.log(weights)[:, None])
    log_exact = logsumexp(q[0] @ k.T)
    return abs(float(log_quad - log_exact)) / (1.0 + float(np.abs(q[0] @ k.T).max()))


def _eq4_inputs(ctx: CellContext, n: int):
    p = ctx.params
    q, k, v = norm_inputs(ctx.rng, n, p["M"], p["d"], p["norm"])
    return _degenerate(p["inputs"], q, k, v)


def _eq4_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _eq4_inputs(ctx, 3)
    omega = _omega_points(ctx, p["omega"], q, k, 16)
    errors = _eq4_errors(ctx, q, k, v, omega)
    if p["d"] <= 2:
        errors["z_quadrature_error"] = _z_quadrature_error(q, k)
    return _exact(max(errors.values()), ctx, errors)


def _pair_geometry(x):
    """``(q, k, ω)`` in ``R^3`` from a search vector: the norms of ``q`` and ``k``, the angle between them, ``ω``'s
    radius and two angles (every configuration up to a rotation, which the identities are invariant to)."""
    nq, nk, angle, radius, t1, t2 = x
    q = np.array([nq, 0.0, 0.0])
    k = nk * np.array([math.cos(angle), math.sin(angle), 0.0])
    w = radius * np.array([math.cos(t1), math.sin(t1) * math.cos(t2), math.sin(t1) * math.sin(t2)])
    return q, k, w


_POINTWISE_BOUNDS = [(0.0, 8.0), (0.0, 8.0), (0.0, PI), (0.0, 50.0), (0.0, PI), (0.0, 2 * PI)]


def _eq4_search(ctx: CellContext) -> Evidence:
    d = 3
    rng = np.random.default_rng(2)
    k_extra = rng.standard_normal((1, d))
    v = rng.standard_normal((2, 2))

    def error(x):
        q, k, w = _pair_geometry(x)
        keys = np.vstack([k, k_extra])
        return max(_eq4_errors(ctx, q[None], keys, v, w[None, None]).values())

    return _search_evidence(ctx, error, _POINTWISE_BOUNDS)


DEGENERATE_INPUTS = ("norm", "zero_query", "zero_keys", "opposite", "identical_keys")
_EQ4_GRID = tiers(dict(d=[1, 2, 16, 128], M=[1, 2, 196], omega=["standard", "target", "far"], norm=[0.0, 3.0, 8.0],
                       inputs=list(DEGENERATE_INPUTS)),
                  smoke=dict(d=[1, 2, 128], M=[1, 2, 196], norm=[0.0, 3.0, 8.0]),
                  full=dict(d=[1, 2, 16, 64, 128], M=[1, 2, 196, 784], norm=[0.0, 1.0, 3.0, 8.0]))
#: The domain of Eq 4 and Prop 3.1 (positive map, q = N(0, I)): the pointwise identities at any ω and inputs.
_EQ4_DOMAIN = dict(
    omega=Choice("for any ω: drawn from q = N(0, I), drawn from p_n, and at distance 50",
                 ("standard", "target", "far")),
    d=Integers("ω, q_n, k_m ∈ R^D (Z by Gauss-Hermite quadrature for D <= 2)", 1, math.inf, points=(2,), up_to=128,
               why="D enters through inner products and norms only; 128 is the register's largest D"),
    M=Integers("Σ_m over the keys k_m", 1, math.inf, points=(1, 2), up_to=196,
               why="a log-sum-exp over more keys of the same kind"),
    norm=Range("any q_n, k_m (G-norm: norms uniform on [0, max], one at the max)", 0.0, math.inf, up_to=(None, 8.0),
               why="the register's bound ‖q_n‖, ‖k_m‖ <= 8; the search explores every norm up to 8 and every angle"),
    inputs=Choice("any q_n, k_m: G-norm and G-degenerate inputs (q_n = 0, k_m = 0, k_m = -q_n, identical keys)",
                  DEGENERATE_INPUTS))


def _degenerate_domain(p, v) -> bool:
    """Degenerate inputs are swept at one norm and one key count (they make norms and keys coincide)."""
    return p["inputs"] == "norm" or (p["norm"] == 3.0 and p["M"] == 2)


EQ4_REVERSE = Claim(
    id="lara.eq4.reverse_engineering", source="§3.1 Eq 4; App A Eqs 11-15",
    statement="With q(ω) = N(ω; 0, I), for any ω: (p(ω)/q(ω)) f(ω) = (1/Z) ξ(q_n,ω)ᵀ Σ_m ξ(k_m,ω) v_mᵀ and "
              "p(ω)/q(ω) = (1/Z) ξ(q_n,ω)ᵀ Σ_m ξ(k_m,ω), where p and f are Proposition 3.1's (Eq 5, Eq 6) and "
              "Z = ∫ q(ω) Σ_m ξ(q_n,ω)ᵀξ(k_m,ω) dω = Σ_m exp(q_n·k_m).",
    kind="identity",
    tolerance=IDENTITY_TOL,
    units="log-space error / (1 + ‖ω‖²/2 + ‖q‖² + max‖k‖²) (vector form: relative to Σ|terms||v|, same factor)",
    domain=_EQ4_DOMAIN,
    cell=_eq4_cell, grid=_EQ4_GRID, where=_degenerate_domain,
    search=_eq4_search, restarts=RESTARTS, universal=True,
    roles=("attention_mixture",), plot_x="norm",
    notes="Positive map (the statement's). The search maximises the scaled error over ‖q‖, ‖k‖ ∈ [0, 8], every "
          "angle and ω up to distance 50 (D = 3, two keys).",
)


#: Threshold of the Monte Carlo mass check (relative error of ∫p(ω|m)dω that would matter).
MASS_TOL = 0.02
#: ‖q + k‖² of the pair used for the Monte Carlo mass check (relative sd √(e^{0.5} - 1) ≈ 0.8).
MASS_PAIR_SQ = 0.5


def _component_errors(q, k, omega) -> dict:
    """Eq 15 against Eq 5 (log p), Eq 16's components against N(q + k_m, I), and their non-negativity."""
    _, log_z = ra_est.softmax_log_weights(q, k)
    log_sum, pair = _log_pair_sum(q, k, omega)
    log_eq15 = rfa_est.log_normal(omega) + log_sum - log_z[:, None]
    log_eq5 = ra_est.attention_mixture(q, k).logpdf(omega)
    mag = _log_magnitude(omega, q[:, None, :]) + float(_half_sq(k).max()) * 2
    log_cond = rfa_est.log_normal(omega)[..., None] + pair - (q @ k.T)[:, None, :]      # log p(ω|m)
    tilted = theory.tilted_gaussian_log_density(omega[:, :, None, :], q[:, None, None, :], k[None, None, :, :])
    sign, _ = rfa_est.pair_log_kernel(q, k, omega)
    return dict(eq15_error=float((np.abs(log_eq15 - log_eq5) / mag).max()),
                eq16_error=float((np.abs(log_cond - tilted) / mag[..., None]).max()),
                negative_components=float((sign < 0).mean()))


def _mass_quadrature_error(q, k) -> float:
    """``max_m |∫ p(ω|m) dω - 1|`` by Gauss–Hermite (``D <= 2``) for the first query and keys."""
    k = k[:QUADRATURE_KEYS]
    nodes, weights = gauss_hermite_rule(150, q.shape[1])
    _, pair = rfa_est.pair_log_kernel(q[:1], k, nodes)
    mass = np.exp(pair[0] - (q[0] @ k.T)[None, :]).T @ weights
    return float(np.abs(mass - 1.0).max())


def _mass_monte_carlo(ctx: CellContext, d: int, alpha: float) -> Evidence:
    """``∫ p(ω|m) dω = E_{N(0,I)}[ξ(q,ω)ξ(k,ω)/e^{q·k}] = 1`` by Monte Carlo, exact sd ``√(e^{‖q+k‖²} - 1)``."""
    q, k = controlled_pair(math.sqrt(MASS_PAIR_SQ) / 2, math.sqrt(MASS_PAIR_SQ) / 2, 0.0, d, ctx.rng)
    rel_sd = math.sqrt(math.expm1(MASS_PAIR_SQ))
    n = int(min(required_replicates(rel_sd, alpha=alpha, tolerance=1.0 * MASS_TOL), 400_000))
    omega = ctx.rng.standard_normal((n, d))
    _, pair = rfa_est.pair_log_kernel(q[None], k[None], omega)
    mass = np.exp(pair[0, :, 0] - q @ k)
    return mean_test(mass, 1.0, scale=MASS_TOL, sd=rel_sd, alpha=alpha, tolerance=1.0)


def _mass_cell(p) -> bool:
    """The Monte Carlo mass check runs once per dimension up to 16 (its pair does not depend on the cell)."""
    return p["inputs"] == "norm" and p["M"] == 2 and p["omega"] == "standard" and p["norm"] == 0.0 and p["d"] <= 16


def _mixture_target_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _eq4_inputs(ctx, 3)
    omega = _omega_points(ctx, p["omega"], q, k, 16)
    errors = _component_errors(q, k, omega)
    if p["d"] <= 2:
        errors["mass_quadrature_error"] = _mass_quadrature_error(q, k)
    negative = errors.pop("negative_components")
    exact = _exact(max(errors.values()), ctx, dict(errors, negative_components=negative), threshold=IDENTITY_TOL)
    if not p["monte_carlo"]:
        return exact
    parts = [exact, _mass_monte_carlo(ctx, p["d"], ctx.alpha / 2)]
    return combine(parts, extra=dict(errors, negative_components=negative))


def _mixture_target_search(ctx: CellContext) -> Evidence:
    d = 3
    k_extra = np.random.default_rng(2).standard_normal((1, d))

    def error(x):
        q, k, w = _pair_geometry(x)
        errs = _component_errors(q[None], np.vstack([k, k_extra]), w[None, None])
        return max(errs["eq15_error"], errs["eq16_error"]) / IDENTITY_TOL

    return _search_evidence(ctx, error, _POINTWISE_BOUNDS)


PROP31_MIXTURE = Claim(
    id="lara.prop3_1.mixture_target", source="§3.1 Prop 3.1 (Eqs 5, 6); App A Eqs 15-16; §4.2",
    statement="With q(ω) = N(ω; 0, I), the positive map and Eq 4: p(ω) = Σ_m π_m N(ω; q_n + k_m, I), π_m = "
              "softmax_m(q_n·k_m) (Eq 5), and f is Eq 6. Equivalently p(ω) = q(ω)Σ_m ξ(q_n,ω)ᵀξ(k_m,ω)/Σ_m' "
              "exp(q_n·k_m') (Eq 15) = Σ_m p(m)p(ω|m) (Eq 16), p(ω|m) = q(ω)ξ(q_n,ω)ᵀξ(k_m,ω)/exp(q_n·k_m); since ξ "
              ">= 0, p(ω|m) is non-negative and integrates to 1.",
    kind="identity",
    tolerance=1.0,
    units="error in units of each part's threshold: log-space / quadrature errors (scaled as in lara.eq4) over "
          "1e-9; Monte Carlo relative error of the mass over 0.02",
    domain=_EQ4_DOMAIN,
    cell=_mixture_target_cell,
    grid={t: dict(g, monte_carlo=[False, True]) for t, g in _EQ4_GRID.items()},
    where=lambda p, v: _degenerate_domain(p, v) and (not p["monte_carlo"] or _mass_cell(p)),
    search=_mixture_target_search, restarts=RESTARTS, universal=True,
    plot_x="norm",
    notes="Sweep as lara.eq4.reverse_engineering; ∫p(ω|m)dω by Gauss-Hermite quadrature (D <= 2) and by Monte "
          "Carlo under N(0, I) (a pair with ‖q+k‖² = 0.5, replicates from the exact variance e^{‖q+k‖²} - 1, once "
          "per D <= 16); the search maximises the Eq 15/16 errors over norms up to 8, every angle and ω up to 50.",
)


def _tilted_errors(xi, q, k, omega) -> float:
    """Lemma A.1: ``log q(ω) + log ξ(q,ω) + log ξ(k,ω) - q·k`` against ``log N(ω; q + k, I)``, scaled."""
    _, lq = xi(q[None], omega)
    _, lk = xi(k[None], omega)
    log_g = rfa_est.log_normal(omega) + lq[0, :, 0] + lk[0, :, 0] - q @ k
    want = theory.tilted_gaussian_log_density(omega, q, k)
    mag = _log_magnitude(omega, q, k) + abs(float(q @ k))
    return float((np.abs(log_g - want) / mag).max())


def _lemma_a1_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k = controlled_pair(p["norm_q"], p["norm_k"], p["angle"], p["d"], ctx.rng)
    omega = p["radius"] * unit_vectors(ctx.rng, 8, p["d"]) if p["radius"] else np.zeros((1, p["d"]))
    omega = np.vstack([omega, q + k + ctx.rng.standard_normal((8, p["d"]))])
    return _exact(_tilted_errors(ctx.impl("xi", rfa_est.xi), q, k, omega), ctx)


def _lemma_a1_search(ctx: CellContext) -> Evidence:
    xi = ctx.impl("xi", rfa_est.xi)

    def error(x):
        q, k, w = _pair_geometry(x)
        return _tilted_errors(xi, q, k, w[None])

    return _search_evidence(ctx, error, [(0.0, 10.0), (0.0, 10.0)] + _POINTWISE_BOUNDS[2:])


_NORM_WHY = "the register's bound ‖q_n‖, ‖k_m‖ <= 10; the search explores every norm up to 10 and every angle"

LEMMA_A1 = Claim(
    id="lara.lemmaa1.tilted_gaussian", source="App A, Lemma A.1",
    statement="For the positive map and q(ω) = N(ω; 0, I), g(ω) := q(ω)ξ(q_n,ω)ᵀξ(k_m,ω)/exp(q_n·k_m) is the density "
              "N(ω; q_n + k_m, I).",
    kind="identity",
    tolerance=IDENTITY_TOL, units="|log g - log N| / (1 + ‖ω‖²/2 + ‖q‖² + ‖k‖² + |q·k|)",
    domain=dict(
        d=Integers("q_n, k_m, ω ∈ R^D", 1, math.inf, points=(2,), up_to=128,
                   why="D enters through inner products and norms only; 128 is the register's largest D"),
        norm_q=Range("q_n arbitrary (its norm)", 0.0, math.inf, up_to=(None, 10.0), why=_NORM_WHY),
        norm_k=Range("k_m arbitrary (its norm)", 0.0, math.inf, up_to=(None, 10.0), why=_NORM_WHY),
        angle=Range("q_n, k_m arbitrary (the angle between them, including k_m = -q_n)", 0.0, PI),
        radius=Range("g is the density at every ω (its distance from the origin)", 0.0, math.inf,
                     up_to=(None, 50.0), why="the register's sweep (ω up to distance 50), compared in log space")),
    cell=_lemma_a1_cell,
    grid=tiers(dict(d=[1, 2, 16, 128], norm_q=[0.0, 1.0, 10.0], norm_k=[0.0, 1.0, 10.0], angle=[0.0, PI / 2, PI],
                    radius=[0.0, 5.0, 50.0]),
               smoke=dict(d=[1, 2, 128], norm_q=[0.0, 10.0], norm_k=[0.0, 10.0], radius=[0.0, 50.0]),
               full=dict(d=[1, 2, 16, 64, 128], norm_q=[0.0, 1.0, 5.0, 10.0], norm_k=[0.0, 1.0, 5.0, 10.0],
                         angle=[0.0, PI / 4, PI / 2, 3 * PI / 4, PI], radius=[0.0, 5.0, 20.0, 50.0])),
    where=lambda p, v: p["d"] > 1 or p["angle"] in (0.0, PI),
    search=_lemma_a1_search, restarts=RESTARTS, universal=True,
    roles=("xi",), plot_x="radius",
    notes="In D = 1 only the angles 0 and π exist (the cells at π/2 are skipped there). The search maximises the "
          "error over norms up to 10, every angle and ω up to distance 50 (D = 3).",
)


# ======================================================== Prop 3.1: RFA is SNIS (§3.1, footnote 4)


def _rfa_is_snis_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    omega, _ = rfa_est.draw_rfa_samples(p["S"], p["d"], rng=ctx.rng)
    rfa = np.asarray(ctx.impl("rfa_attention", rfa_est.rfa_attention)(q, k, v, omega=omega))
    snis, ess = ctx.impl("rfa_snis", rfa_est.rfa_snis)(q, k, v, omega, f_form="literal")
    return _exact(_row_error(rfa, snis, _value_scale(v)), ctx, dict(min_ess=float(np.min(ess))))


SNIS_INPUTS = ("gauss", "peaked", "single_key", "identical_keys", "zero_query", "opposite")

PROP31_RFA_IS_SNIS = Claim(
    id="lara.prop3_1.rfa_is_snis", source="§3.1 (after Prop 3.1; footnote 4); App A",
    statement="For every query, RFA (Eq 2, positive map, ω_s iid N(0, I)) is self-normalised importance sampling of "
              "E_{p_n}[f_n] with proposal N(0, I): RFA(q_n) = Σ_s (Z p_n(ω_s)/q(ω_s)) f_n(ω_s) / "
              "Σ_s (Z p_n(ω_s)/q(ω_s)).",
    kind="identity",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    domain=dict(
        S=Integers("ω_1, ..., ω_S iid N(0, I), shared by every query", 1, math.inf, points=(1, 2), up_to=256,
                   why=_SUM_WHY),
        N=Integers("for every query (N = M tokens)", 1, math.inf, up_to=16, why="rows are computed independently"),
        d=Integers("q_n, k_m, ω ∈ R^D", 1, math.inf, up_to=64, why="D enters through inner products only"),
        logit_std=Range("any inputs: G-gauss at logit std 0.25-4 (the register's)", 0.25, 4.0),
        inputs=Choice("any inputs: G-gauss, G-peaked, G-degenerate (one key, identical keys, q_n = 0, k_m = -q_m)",
                      SNIS_INPUTS)),
    cell=_rfa_is_snis_cell,
    grid=tiers(dict(S=[1, 2, 256], d=[1, 64], N=[1, 16], logit_std=[0.25, 4.0], inputs=list(SNIS_INPUTS)),
               full=dict(S=[1, 2, 16, 256], d=[1, 8, 64], N=[1, 16, 196], logit_std=[0.25, 0.5, 1.0, 2.0, 4.0])),
    where=lambda p, v: p["inputs"] == "gauss" or p["logit_std"] == 4.0,
    roles=("rfa_attention", "rfa_snis"), plot_x="S",
    related={"lara.sec3_1.rfa_consistent": "its strong-law route checks this ratio of sample means"},
    notes="f_n is the literal Eq 6; the same ω on both sides. Non-Gaussian inputs at logit std 4.",
)


# ================================================== G.2: RFA with the expected sample degenerates


def _g2_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    zeros = np.zeros((4, p["d"]))
    attention = ctx.impl("rfa_attention", rfa_est.rfa_attention)
    y = np.asarray(attention(q, k, v, omega=zeros))
    f0 = theory.cancelled_integrand(k, v, zeros[:1])[0]                       # Σ_m softmax(-‖k_m‖²/2) v_m
    moved = np.asarray(attention(q + ctx.rng.standard_normal(q.shape), k, v, omega=zeros))
    exact = softmax_attention(q, k, v, scale=1.0)
    biased = ra_est.biased_ra_attention(q, k, v, eval_mode="mean")
    scale = _value_scale(v)
    extra = dict(constant_error=_row_error(y, np.broadcast_to(f0, y.shape), scale),
                 query_dependence=_row_error(moved, y, scale),
                 spread_of_outputs=float(np.ptp(y, axis=0).max() / scale),
                 spread_of_softmax=float(np.ptp(exact, axis=0).max() / scale),
                 mse_to_softmax=float(np.mean((y - exact) ** 2)),
                 mse_biased_ra_eval=float(np.mean((biased - exact) ** 2)))
    return _exact(max(extra["constant_error"], extra["query_dependence"]), ctx, extra)


G2_DEGENERATE = Claim(
    id="lara.g2.rfa_mean_sample_degenerate", source="G.2 (last sentence of the biased-RA paragraph)",
    statement="The expected-sample strategy cannot be transferred to Performer (RFA): under N(0, I) the expectation of "
              "ω is 0, and this leads to degeneration.",
    kind="identity",
    tolerance=IDENTITY_TOL, units="error / max|v| (rows against the constant vector; change under moved queries)",
    domain=dict(
        d=Integers("ω ∈ R^D with E[ω] = 0 under N(0, I)", 1, math.inf, up_to=64,
                   why="with ω = 0 the features are exp(-‖x‖²/2) whatever D"),
        N=Integers("RFA's queries and keys (N = M tokens)", 1, math.inf, up_to=196,
                   why="every row is the same constant vector; more tokens add terms of the same kind"),
        logit_std=Range("inputs at logit std 0.25-4 (the register's)", 0.25, 4.0),
        inputs=Choice("inputs: G-gauss and G-smooth (the register's)", ("gauss", "smooth"))),
    cell=_g2_cell,
    grid=tiers(dict(d=[1, 8, 64], N=[1, 16, 196], logit_std=[0.25, 1.0, 4.0], inputs=["gauss", "smooth"]),
               smoke=dict(d=[1, 64], N=[1, 196], logit_std=[0.25, 4.0]),
               full=dict(logit_std=[0.25, 0.5, 1.0, 2.0, 4.0])),
    roles=("rfa_attention",), plot_x="N",
    notes="RFA with the positive map and every sample replaced by E[ω] = 0. The paper does not define "
          "'degeneration': read as the output no longer depending on the query (every row equals "
          "Σ_m softmax_m(-‖k_m‖²/2) v_m, and moving the queries changes nothing); the spread of the outputs, the "
          "error to softmax attention and biased RA's evaluation output are reported in the cell's extra.",
)


# ========================================================== Eq 9 and G.3.2: weights sum to one


def _weight_inputs(ctx: CellContext, C: int, d: int):
    """Queries (for ``r'`` and its landmarks), Gaussian proposals with means ``separation·N(0, I)``, and their
    draws ``ω_c ~ q_c`` (one per proposal) and far points (``ω_c`` moved 20 units away)."""
    p = ctx.params
    n = max(16, C)
    q = attention_inputs("gauss", ctx.rng, n, 2, d)[0]
    landmarks = lara_est.segment_landmarks(q, C, uneven="adaptive")
    means = p["separation"] * ctx.rng.standard_normal((C, d))
    props = mis_est.GaussianProposals(means)
    near = props.sample(ctx.rng, 1)
    far = near + 20.0 * unit_vectors(ctx.rng, C, d)[:, None, :]
    return q, landmarks, props, np.concatenate([near, far], axis=1)


def _weight_kind(name: str):
    """``(kind, eq37_inner)`` from the ``weights`` axis."""
    return ("eq37", name.split("_", 1)[1]) if name.startswith("eq37") else ("eq9", "outer")


def _sum_errors(alpha, bh) -> tuple[float, float]:
    """``max |Σ_c α - 1| / max(1, Σ|α|)`` and ``max |Σ_c (α - BH)| / max(1, Σ|α - BH|)`` along the last axis."""
    total = np.abs(alpha.sum(-1) - 1.0) / np.maximum(1.0, np.abs(alpha).sum(-1))
    corr = alpha - bh
    corr_sum = np.abs(corr.sum(-1)) / np.maximum(1.0, np.abs(corr).sum(-1))
    return float(total.max()), float(corr_sum.max())


def _eq9_errors(ctx: CellContext, weights_name: str, beta: float, r, props, omega) -> tuple[float, float]:
    """Sum errors of Eq 9/37 weights at the points ``omega (C, S, D)`` under the cell's reading."""
    kind, inner = _weight_kind(weights_name)
    lq = mis_est.cross_log_density(props, omega)                              # (C, S, C)
    if ctx.variant == "A":  # every α_nc at one common argument ω (the points ω_cj)
        alpha = np.asarray(ctx.impl("weight_table", mis_est.weight_table)(kind, lq, rprime=r, beta=beta))
        bh = mis_est.balance_heuristic(lq)[None]
    else:                   # each α_nc at its own proposal's sample ω_c
        weights = ctx.impl("mis_weights", mis_est.mis_weights)
        alpha = np.asarray(weights(kind, lq, rprime=r, beta=beta, eq37_inner=inner)).swapaxes(1, 2)
        idx = np.arange(lq.shape[0])
        bh = mis_est.balance_heuristic(lq)[idx, :, idx].T[None]               # (1, S, C): BH_c(ω_cj)
    return _sum_errors(alpha, bh)


def _eq9_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, landmarks, props, omega = _weight_inputs(ctx, p["C"], p["d"])
    r = mis_est.rprime(q, landmarks, axis=p["axis"])
    total, corr = _eq9_errors(ctx, p["weights"], p["beta"], r, props, omega)
    return _exact(max(total, corr), ctx, dict(sum_error=total, correction_sum_error=corr))


WEIGHT_AXIS = ("eq9", "eq37_outer", "eq37_own")


def _search_proposals(separation: float, distance: float, C: int = 3, d: int = 2):
    """Fixed directions scaled by the search: proposals ``N(separation·u_c, I)`` and points ``ω_c`` drawn near them
    and moved ``distance`` away (a deterministic family, so the search optimises a smooth objective)."""
    rng = np.random.default_rng(0)
    directions, noise, away = rng.standard_normal((C, d)), rng.standard_normal((C, 1, d)), unit_vectors(rng, C, d)
    props = mis_est.GaussianProposals(separation * directions)
    return props, props.means[:, None, :] + noise + distance * away[:, None, :]


def _eq9_search(ctx: CellContext) -> Evidence:
    q = attention_inputs("gauss", np.random.default_rng(1), 12, 2, 2)[0]
    landmarks = lara_est.segment_landmarks(q, 3)

    def error(x):
        beta, separation, distance, axis, weights = x
        props, omega = _search_proposals(separation, distance)
        r = mis_est.rprime(q, landmarks, axis=mis_est.RPRIME_AXES[int(axis)])
        return max(_eq9_errors(ctx, WEIGHT_AXIS[int(weights)], beta, r, props, omega))

    return _search_evidence(ctx, error, [(0.0, 10.0), (0.0, 10.0), (0.0, 50.0), (0.0, 1.0), (0.0, 2.0)],
                            integer=[False, False, False, True, True])


_SEPARATION = Range("any proposals q_c > 0 (unit-covariance Gaussians, means from identical to well separated)",
                    0.0, math.inf, up_to=(None, 5.0),
                    why="at separation 5 the densities differ by factors up to e^{-50}; the search goes to 10")
_WEIGHTS_C = Integers("c = 1, ..., C proposals", 1, math.inf, points=(1, 2), up_to=16,
                      why="a sum over c of terms of the same kind")
_WEIGHTS_D = Integers("ω ∈ R^D", 1, math.inf, up_to=64, why="D enters only through the proposal densities")

EQ9_SUM = Claim(
    id="lara.eq9.weights_sum_to_one", source="§4.1 Eq 9 and the sentence after it; G.3.2 Eqs 37, 38",
    statement="α_nc(ω_c) = q_c(ω_c)/Σ_c' q_c'(ω_c) + r'_nc - (1/C)Σ_c r'_nc (Eq 9 = Eq 38) satisfies Σ_c α_nc(ω) = 1; "
              "the β variant BH + β(r'_nc - mean_c r'_nc) stays valid (its correction sums to 0); Eq 37 (BH plus "
              "q_c(ω_c)(r'_nc - Σ_c BH_c r'_nc)) has the same structure.",
    kind="identity",
    tolerance=IDENTITY_TOL, units="|Σ_c α_nc - 1| / max(1, Σ_c|α_nc|) (and |Σ_c correction| likewise)",
    domain=dict(
        weights=Choice("Eq 9 (= Eq 38) and its β variant; Eq 37 (inner sum at ω_c, or at its own sample ω_c'')",
                       WEIGHT_AXIS),
        beta=Range("the β variant, any β >= 0 (β = 1: Eq 9)", 0.0, math.inf, boundaries=(1.0,), up_to=(None, 10.0),
                   why="the correction is linear in β; the search goes to 10 as well"),
        axis=Choice("any real r'_nc: both readings of r'_nc's normalisation (softmax over queries or landmarks)",
                    ("queries", "landmarks")),
        C=_WEIGHTS_C, d=_WEIGHTS_D, separation=_SEPARATION),
    readings={
        "A": Reading("every α_nc evaluated at one common argument ω", words="'Σ_c α_nc(ω) = 1' after Eq 9: one "
                     "argument ω for every c, the validity condition of MIS weighting functions stated after Eq 8 "
                     "('unbiased if Σ_c α_nc(ω) = 1 for any ω')"),
        "B": Reading("each α_nc evaluated at its own proposal's sample ω_c (how the weights enter the estimator, "
                     "Eq 8): the statement's words are Σ_c α_nc(ω) at one ω, so this is reported beside",
                     beside=True)},
    cell=_eq9_cell,
    grid=tiers(dict(weights=list(WEIGHT_AXIS), beta=[0.0, 1.0, 2.0, 10.0], axis=["queries", "landmarks"],
                    C=[1, 2, 16], d=[1, 64], separation=[0.0, 5.0]),
               smoke=dict(beta=[0.0, 1.0, 10.0], C=[1, 2, 16], d=[1, 64]),
               full=dict(beta=[0.0, 0.5, 1.0, 2.0, 4.0, 10.0], C=[1, 2, 4, 16, 49, 196], d=[1, 8, 64],
                         separation=[0.0, 0.5, 2.0, 5.0])),
    where=lambda p, v: p["weights"] == "eq9" or p["beta"] == 1.0,
    search=_eq9_search, restarts=RESTARTS, universal=True,
    roles=("weight_table", "mis_weights"), plot_x="C",
    related={"lara.g3_2.optimal_weights_sum_to_one": "the same sum for α* (Eq 27), whose display writes the argument "
                                                     "ω_c"},
    notes="β = 1 is Eq 9; other β are the β variant (eq37 is swept at β = 1). Every cell evaluates ω near the "
          "proposals (one draw each) and 20 units away; the search maximises the error over β ∈ [0, 10], "
          "separation ∈ [0, 10], ω up to distance 50, both r' axes and every weight (C = 3, D = 2). Under reading "
          "A the Eq 37 inner sum is at the same argument for both inner readings.",
)


def _smooth_r(rng, C: int, d: int):
    """Random smooth functions ``r_c(ω) = Σ_j a_cj cos(u_cj·ω + φ_cj)`` (three terms each)."""
    a = rng.standard_normal((C, 3))
    u = 0.5 * rng.standard_normal((C, 3, d))
    phi = rng.uniform(0, 2 * PI, (C, 3))
    return lambda w: (a * np.cos(np.einsum("cjd,...d->...cj", u, w) + phi)).sum(-1)   # (..., C)


def _r_function(ctx: CellContext, choice: str, props, q, landmarks):
    C, d = props.means.shape
    if choice == "quadrature":
        sol = theory.appd_d1_solution(q[0], ctx.rng.standard_normal(5), ctx.rng.uniform(-5, 5, 5), props.means)
        return lambda w: sol.r_functions(w[..., 0])
    if choice == "rprime":
        r = mis_est.rprime(q, landmarks)[0]
        return lambda w: np.broadcast_to(r, w.shape[:-1] + (C,))
    if choice == "smooth":
        return _smooth_r(ctx.rng, C, d)
    return lambda w: np.zeros(w.shape[:-1] + (C,))


def _g3_2_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, landmarks, props, omega = _weight_inputs(ctx, p["C"], p["d"])
    draws = omega[:, 0, :]                                                      # ω_c ~ q_c, (C, D)
    r = _r_function(ctx, p["r"], props, q, landmarks)(draws)                   # [c, c'] = r_c'(ω_c)
    total, corr, bh_sum = _g3_2_errors(ctx, props, draws, r)
    return _exact(max(total, corr), ctx, dict(sum_error=total, correction_sum_error=corr,
                                              sum_of_balance_terms=bh_sum))


def _g3_2_errors(ctx: CellContext, props, draws, r) -> tuple[float, float, float]:
    """Sum errors of Eq 27 at the draws under the cell's reading, and the sum of the balance terms."""
    log_q = props.logpdf_cross(draws)                                            # [c, c'] = log q_c'(ω_c)
    eq27 = ctx.impl("eq27_weights", mis_est.eq27_weights)
    if ctx.variant == "A":
        alpha = np.asarray(eq27(log_q, r, argument="common"))                   # (C points, C)
        bh = mis_est.balance_heuristic(log_q)
    else:
        alpha = np.asarray(eq27(log_q, r, argument="own" if ctx.variant == "B" else "typeset"))[None]
        bh = np.diag(mis_est.balance_heuristic(log_q))[None]
    total, corr = _sum_errors(alpha, bh)
    return total, corr, float(bh.sum(-1).max())


def _g3_2_search(ctx: CellContext) -> Evidence:
    q = attention_inputs("gauss", np.random.default_rng(1), 12, 2, 1)[0]
    landmarks = lara_est.segment_landmarks(q, 3)
    sub = CellContext(ctx.claim_id, ctx.variant, {}, ctx.tier, 0, ctx.alpha, ctx.power, ctx.tolerance,
                      np.random.default_rng(2), ctx.implementations)

    def error(x):
        separation, distance, choice = x
        props, omega = _search_proposals(separation, distance, d=1)
        draws = omega[:, 0, :]
        r = _r_function(sub, R_CHOICES[int(choice)], props, q, landmarks)(draws)
        return max(_g3_2_errors(ctx, props, draws, r)[:2])

    # r from App D's quadrature is swept by the grid (each evaluation solves a system); the search covers the
    # displayed algebra with constants, smooth functions and zero
    return _search_evidence(ctx, error, [(0.0, 10.0), (0.0, 50.0), (1.0, 3.0)], integer=[False, False, True])


R_CHOICES = ("quadrature", "rprime", "smooth", "zero")


G3_2_OPTIMAL_SUM = Claim(
    id="lara.g3_2.optimal_weights_sum_to_one", source="G.3.2 (display following the definition of α*)",
    statement="Σ_c α*_nc(ω_c) = Σ_c q_c(ω_c)/Σ_c' q_c'(ω_c) + Σ_c q_c(ω_c)(r_nc(ω_c) - Σ_c'' [q_c''(ω_c'')/Σ_c' "
              "q_c'(ω_c)] r_nc''(ω_c'')) = 1 + [...] = 1: α* sums to 1 over c, is a valid weighting function, and its "
              "correction term sums to 0.",
    kind="identity",
    tolerance=IDENTITY_TOL, units="|Σ_c α*_nc - 1| / max(1, Σ_c|α*_nc|) (and |Σ_c correction| likewise)",
    domain=dict(
        r=Choice("any r_nc(·) (the displayed algebra uses no property of r): App D's D = 1 quadrature solution, the "
                 "constants r'_nc, random smooth functions, r ≡ 0", R_CHOICES),
        C=_WEIGHTS_C, d=_WEIGHTS_D, separation=_SEPARATION),
    readings={
        "A": Reading("Eq 27 with every term at one common ω, summed over c",
                     words="'it sums to 1 over all c's and is a valid weighting function': validity as defined after "
                           "Eq 8, Σ_c α_nc(ω) = 1 for any ω"),
        "B": Reading("Eq 27 with each α*_nc at its own sample ω_c (inner sum at ω_c)",
                     words="the display's left side 'Σ_{c=1}^C α*_nc(ω_c)': each term at its own ω_c"),
        "C": Reading("the display as typeset: inner numerators and r at ω_c'', inner denominators at ω_c",
                     words="the display's second line 'q_c''(ω_c'')/Σ_c' q_c'(ω_c) r_nc''(ω_c'')'")},
    cell=_g3_2_cell,
    grid=tiers(dict(r=list(R_CHOICES), C=[1, 2, 6, 16], d=[1, 64], separation=[0.0, 5.0]),
               smoke=dict(C=[1, 2, 16]),
               full=dict(C=[1, 2, 3, 6, 16, 49], d=[1, 8, 64], separation=[0.0, 0.5, 2.0, 5.0])),
    where=lambda p, v: p["r"] != "quadrature" or p["d"] == 1,
    search=_g3_2_search, restarts=RESTARTS, universal=True,
    roles=("eq27_weights",), plot_x="C",
    related={"lara.eq9.weights_sum_to_one": "the same sum for the tractable weights (Eq 9 = 38, Eq 37), whose "
                                            "statement writes one argument ω"},
    notes="Independent draws ω_c ~ q_c (and points 20 units away). App D's r exists for D = 1 only (quadrature "
          "cells at D = 1); the search covers the displayed algebra with constants, smooth functions and zero.",
)
