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
* **Readings.** Where the register lists readings (Eq 9's argument convention, G.3.2's display, Eq 35's
  normaliser, Algorithm 3's parenthesis, §4.3's "constant functions") each is a variant with its own verdict.
* **Budgets.** Cells are small (tens of tokens, a few samples); the ``full`` tier follows the register's sweeps.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import softmax

from rfkit.base.numerics import gauss_hermite_rule, logsumexp
from rfkit.estimators import lara as lara_est
from rfkit.estimators import mis as mis_est
from rfkit.estimators import ra as ra_est
from rfkit.estimators import rfa as rfa_est
from rfkit.estimators import snis_estimate, softmax_attention
from rfkit.theory import lara as theory
from rfkit.validation.harness import condition_scale, controlled_pair, quiet
from rfkit.validation.model import CellContext, Claim
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import Evidence, combine, exact_test, mean_test, required_replicates, sequential_mean

from .inputs import attention_inputs, norm_inputs, unit_vectors

PI = math.pi
#: The register's identity tolerance (relative, condition-scaled).
IDENTITY_TOL = 1e-9
#: Nelder-Mead iterations per search restart (the objectives are round-off noise unless an identity fails,
#: when they are O(1) almost everywhere: a short polish from the corners suffices).
SEARCH_ITERATIONS = 120
#: Search restarts per tier (restart 0 scans the box's corners and centre).
RESTARTS = {"smoke": 1, "quick": 3, "full": 20}
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
        return ra_est.attention_mixture(q, k).draw(count, ctx.rng)
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
    return log_pt - lp.proposals.log_density_own(omega)[None]


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


EQ2_RFA_FORMS = Claim(
    id="lara.eq2.rfa_forms", paper="lara", source="§2.2 Eq 2; footnote 3",
    statement="Σ_mΣ_s ξ(q_n,ω_s)ᵀξ(k_m,ω_s)v_mᵀ / Σ_mΣ_s ξ(q_n,ω_s)ᵀξ(k_m,ω_s) = Σ_s ξ(q_n,ω_s)ᵀΣ_m ξ(k_m,ω_s)v_mᵀ / "
              "Σ_s ξ(q_n,ω_s)ᵀΣ_m ξ(k_m,ω_s) =: RFA(q_n, K, V); and (1/S)Σ_s ξ(x,ω_s)ᵀξ(y,ω_s) = φ(x,w)ᵀφ(y,w) with "
              "φ(x,w) = S^{-1/2}[ξ(x,ω_1), ..., ξ(x,ω_S)].",
    kind="identity",
    hypotheses="any ξ of App C (positive, trig_sincos, trig_cos_phase, hyperbolic) and any samples ω_1..ω_S; "
               "G-norm inputs with norms up to 6",
    tolerance=IDENTITY_TOL,
    units="error / condition magnitude (Σ|terms||v| + |out|Σ|terms|)/|Σ terms| (rows); kernel: / (1/S)Σ|ξᵀξ|",
    cell=_eq2_cell,
    grid={"smoke": dict(feature=list(rfa_est.XI_MAPS), d=[8], N=[17], M=[17], S=[64], norm=[2.0]),
          "quick": dict(feature=list(rfa_est.XI_MAPS), d=[1, 8, 64], N=[1, 17], M=[2, 17], S=[1, 64],
                        norm=[1.0, 6.0]),
          "full": dict(feature=list(rfa_est.XI_MAPS), d=[1, 8, 64], N=[1, 2, 17, 196], M=[1, 2, 17, 196],
                       S=[1, 2, 64, 256], norm=[0.5, 2.0, 6.0])},
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
    ratio = np.exp(mix.log_density(w).T - rfa_est.log_normal(w, mu))         # (N, G): p/q
    num = np.einsum("g,ng,ngd->nd", weights, ratio, f(w))
    den = ratio @ weights
    return _row_error(num / den[:, None], _component_expectation(mix, f, nodes, weights), _value_scale(v))


def _eq3_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    d = p["d"]
    q, k, v = attention_inputs("gauss", ctx.rng, 1 if d <= 2 else 4, 4 if d <= 2 else 8, d, 3, 1.0)
    mix, f = _eq3_target(p["target"], q, k, v)
    mu = _eq3_proposal_mean(ctx, q, k, mix)
    omega = mu + ctx.rng.standard_normal((32, d))
    log_w = mix.log_density(omega).T - rfa_est.log_normal(omega, mu)
    snis = ctx.impl("snis_estimate", snis_estimate)
    fv = f(omega)
    with_p = np.asarray(snis(fv, log_weights=log_w))
    with_tilde = np.asarray(snis(fv, log_weights=log_w + p["log_z"]))
    errors = dict(cancel_error=_row_error(with_tilde, with_p, _value_scale(v)))
    if d <= 2 and p["log_z"] > 0:  # the first equality does not involve Z: once per (target, proposal, d)
        errors["quadrature_error"] = _eq3_quadrature_error(mix, f, mu, v)
    return _exact(max(errors.values()), ctx, errors)


EQ3_SNIS = Claim(
    id="lara.eq3.snis_normaliser_cancels", paper="lara", source="§2.3 Eq 3",
    statement="With p = p̃/Z, E_p[f] = E_q[(p/q)f]/E_q[p/q] ≈ [(1/S)Σ_s (1/Z)(p̃/q)(ω_s)f(ω_s)] / [(1/S)Σ_s (1/Z)"
              "(p̃/q)(ω_s)] = Σ_s (p̃/q)(ω_s)f(ω_s) / Σ_s (p̃/q)(ω_s): the normalising constant Z cancels.",
    kind="identity",
    hypotheses="p = p̃/Z with Z > 0 (log Z ∈ [-690, 690]); targets p_n (Eq 5) and Corollary C.1's hyperbolic mixture "
               "with their Eq 6 integrands; proposals N(0, I), N(μ, I) at distance 0-6 from the target's mean, eq34 "
               "landmark proposals; the same samples in numerator and denominator; the first equality by "
               "Gauss-Hermite quadrature for D <= 2",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    cell=_eq3_cell,
    grid={"smoke": dict(target=["positive", "hyperbolic"], proposal=["standard", "shift3"], d=[1, 8],
                        log_z=[-690.0, 690.0]),
          # quadrature cells (D <= 2, log Z > 0) take ~0.1 s each: 200² Gauss-Hermite nodes (see _eq3_quadrature_error)
          "quick": dict(target=["positive", "hyperbolic"], proposal=["standard", "shift0", "shift6", "eq34"],
                        d=[1, 2, 64], log_z=[-690.0, 690.0]),
          "full": dict(target=["positive", "hyperbolic"], proposal=["standard", "shift0", "shift1", "shift3",
                                                                    "shift6", "eq34"],
                       d=[1, 2, 8, 64], log_z=[-690.0, -30.0, 0.0, 30.0, 690.0])},
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
    log_pq = mixture(q, k).log_density_own(omega) - rfa_est.log_normal(omega)       # log p/q, (N, S)
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


_EQ4_GRID = {"smoke": dict(d=[1, 16], M=[2], omega=["standard", "target", "far"], norm=[2.0, 8.0], inputs=["norm"]),
             "quick": dict(d=[1, 2, 16, 128], M=[1, 2, 196], omega=["standard", "target", "far"], norm=[0.0, 3.0, 8.0],
                           inputs=["norm", "zero_query", "opposite"]),
             "full": dict(d=[1, 2, 16, 64, 128], M=[1, 2, 196, 784], omega=["standard", "target", "far"],
                          norm=[0.0, 1.0, 3.0, 8.0], inputs=["norm", "zero_query", "zero_keys", "opposite",
                                                             "identical_keys"])}


def _degenerate_domain(p, v) -> bool:
    """Degenerate inputs are swept at one norm and one key count (they make norms and keys coincide)."""
    return p["inputs"] == "norm" or (p["norm"] == 3.0 and p["M"] == 2)


EQ4_REVERSE = Claim(
    id="lara.eq4.reverse_engineering", paper="lara", source="§3.1 Eq 4; App A Eqs 11-15",
    statement="With q(ω) = N(ω; 0, I), for any ω: (p(ω)/q(ω)) f(ω) = (1/Z) ξ(q_n,ω)ᵀ Σ_m ξ(k_m,ω) v_mᵀ and "
              "p(ω)/q(ω) = (1/Z) ξ(q_n,ω)ᵀ Σ_m ξ(k_m,ω), where p and f are Proposition 3.1's (Eq 5, Eq 6) and "
              "Z = ∫ q(ω) Σ_m ξ(q_n,ω)ᵀξ(k_m,ω) dω = Σ_m exp(q_n·k_m).",
    kind="identity",
    hypotheses="positive map; q = N(0, I); any ω (drawn from N(0, I), from p_n, and at distance 50); ‖q_n‖, ‖k_m‖ ∈ "
               "[0, 8]; G-degenerate inputs (q = 0, k = -q); Z also by Gauss-Hermite quadrature for D <= 2",
    tolerance=IDENTITY_TOL,
    units="log-space error / (1 + ‖ω‖²/2 + ‖q‖² + max‖k‖²) (vector form: relative to Σ|terms||v|, same factor)",
    cell=_eq4_cell, grid=_EQ4_GRID, where=_degenerate_domain,
    search=_eq4_search, restarts=RESTARTS, universal=True,
    roles=("attention_mixture",), plot_x="norm",
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
    log_eq5 = ra_est.attention_mixture(q, k).log_density_own(omega)
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
    id="lara.prop3_1.mixture_target", paper="lara", source="§3.1 Prop 3.1 (Eqs 5, 6); App A Eqs 15-16; §4.2",
    statement="With q(ω) = N(ω; 0, I), the positive map and Eq 4: p(ω) = Σ_m π_m N(ω; q_n + k_m, I), π_m = "
              "softmax_m(q_n·k_m) (Eq 5), and f is Eq 6. Equivalently p(ω) = q(ω)Σ_m ξ(q_n,ω)ᵀξ(k_m,ω)/Σ_m' "
              "exp(q_n·k_m') (Eq 15) = Σ_m p(m)p(ω|m) (Eq 16), p(ω|m) = q(ω)ξ(q_n,ω)ᵀξ(k_m,ω)/exp(q_n·k_m); since ξ "
              ">= 0, p(ω|m) is non-negative and integrates to 1.",
    kind="identity",
    hypotheses="positive map, standard Gaussian proposal; sweep as lara.eq4.reverse_engineering; ∫p(ω|m)dω by "
               "Gauss-Hermite quadrature (D <= 2) and by Monte Carlo under N(0, I) (a pair with ‖q+k‖² = 0.5, "
               "replicates from the exact variance e^{‖q+k‖²} - 1)",
    tolerance=1.0,
    units="error in units of each part's threshold: log-space / quadrature errors (scaled as in lara.eq4) over "
          "1e-9; Monte Carlo relative error of the mass over 0.02",
    cell=_mixture_target_cell,
    grid={"smoke": dict(_EQ4_GRID["smoke"], monte_carlo=[False]) | dict(norm=[2.0], d=[1, 16]),
          "quick": dict(_EQ4_GRID["quick"], monte_carlo=[False, True]),
          "full": dict(_EQ4_GRID["full"], monte_carlo=[False, True])},
    where=lambda p, v: _degenerate_domain(p, v) and (not p["monte_carlo"] or _mass_cell(p)),
    search=_mixture_target_search, restarts=RESTARTS, universal=True,
    plot_x="norm",
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


LEMMA_A1 = Claim(
    id="lara.lemmaa1.tilted_gaussian", paper="lara", source="App A, Lemma A.1",
    statement="For the positive map and q(ω) = N(ω; 0, I), g(ω) := q(ω)ξ(q_n,ω)ᵀξ(k_m,ω)/exp(q_n·k_m) is the density "
              "N(ω; q_n + k_m, I).",
    kind="identity",
    hypotheses="q_n, k_m ∈ R^D arbitrary (norms in [0, 10], every angle including k = -q), ω up to distance 50",
    tolerance=IDENTITY_TOL, units="|log g - log N| / (1 + ‖ω‖²/2 + ‖q‖² + ‖k‖² + |q·k|)",
    cell=_lemma_a1_cell,
    grid={"smoke": dict(d=[2, 64], norm_q=[1.0, 10.0], norm_k=[10.0], angle=[0.0, PI], radius=[0.0, 50.0]),
          "quick": dict(d=[1, 2, 16, 128], norm_q=[0.0, 1.0, 10.0], norm_k=[1.0, 10.0], angle=[0.0, PI / 2, PI],
                        radius=[0.0, 5.0, 50.0]),
          "full": dict(d=[1, 2, 16, 64, 128], norm_q=[0.0, 1.0, 5.0, 10.0], norm_k=[0.0, 1.0, 5.0, 10.0],
                       angle=[0.0, PI / 4, PI / 2, 3 * PI / 4, PI], radius=[0.0, 5.0, 20.0, 50.0])},
    where=lambda p, v: p["d"] > 1 or p["angle"] in (0.0, PI),
    search=_lemma_a1_search, restarts=RESTARTS, universal=True,
    roles=("xi",), plot_x="radius",
)


# ======================================================== Prop 3.1: RFA is SNIS (§3.1, footnote 4)


def _rfa_is_snis_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    omega, _ = rfa_est.draw_rfa_samples(p["S"], p["d"], rng=ctx.rng)
    rfa = np.asarray(ctx.impl("rfa_attention", rfa_est.rfa_attention)(q, k, v, omega=omega))
    snis, ess = ctx.impl("rfa_snis", rfa_est.rfa_snis)(q, k, v, omega, f_form="literal")
    return _exact(_row_error(rfa, snis, _value_scale(v)), ctx, dict(min_ess=float(np.min(ess))))


PROP31_RFA_IS_SNIS = Claim(
    id="lara.prop3_1.rfa_is_snis", paper="lara", source="§3.1 (after Prop 3.1; footnote 4); App A",
    statement="For every query, RFA (Eq 2, positive map, ω_s iid N(0, I)) is self-normalised importance sampling of "
              "E_{p_n}[f_n] with proposal N(0, I): RFA(q_n) = Σ_s (Z p_n(ω_s)/q(ω_s)) f_n(ω_s) / "
              "Σ_s (Z p_n(ω_s)/q(ω_s)).",
    kind="identity",
    hypotheses="positive map; shared samples; f_n the literal Eq 6; G-gauss (logit std 0.25-4), G-peaked and "
               "G-degenerate inputs",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    cell=_rfa_is_snis_cell,
    grid={"smoke": dict(S=[1, 16], d=[8], N=[16], logit_std=[1.0], inputs=["gauss", "peaked"]),
          "quick": dict(S=[1, 2, 256], d=[1, 64], N=[1, 16], logit_std=[0.25, 4.0],
                        inputs=["gauss", "peaked", "single_key", "identical_keys", "zero_query"]),
          "full": dict(S=[1, 2, 16, 256], d=[1, 8, 64], N=[1, 16, 196], logit_std=[0.25, 0.5, 1.0, 2.0, 4.0],
                       inputs=["gauss", "peaked", "single_key", "identical_keys", "zero_query", "opposite"])},
    where=lambda p, v: p["inputs"] == "gauss" or p["logit_std"] == 4.0,
    roles=("rfa_attention", "rfa_snis"), plot_x="S",
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
    id="lara.g2.rfa_mean_sample_degenerate", paper="lara", source="G.2 (last sentence of the biased-RA paragraph)",
    statement="The expected-sample strategy cannot be transferred to Performer (RFA): under N(0, I) the expectation of "
              "ω is 0, and this leads to degeneration.",
    kind="identity",
    hypotheses="RFA with the positive map and every sample replaced by E[ω] = 0; 'degeneration' read as: the output "
               "no longer depends on the query (every row equals Σ_m softmax_m(-‖k_m‖²/2) v_m and ∂y_n/∂q_n = 0); "
               "the error to softmax attention and biased RA's evaluation output are reported",
    tolerance=IDENTITY_TOL, units="error / max|v| (rows against the constant vector; change under moved queries)",
    cell=_g2_cell,
    grid={"smoke": dict(d=[8], N=[16], logit_std=[1.0], inputs=["gauss", "smooth"]),
          "quick": dict(d=[1, 8, 64], N=[16, 196], logit_std=[0.5, 2.0], inputs=["gauss", "smooth"]),
          "full": dict(d=[1, 8, 64], N=[16, 196], logit_std=[0.25, 0.5, 1.0, 2.0, 4.0], inputs=["gauss", "smooth"])},
    roles=("rfa_attention",), plot_x="N",
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
    near = props.draw(1, ctx.rng)
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


EQ9_SUM = Claim(
    id="lara.eq9.weights_sum_to_one", paper="lara", source="§4.1 Eq 9 and the sentence after it; G.3.2 Eqs 37, 38",
    statement="α_nc(ω_c) = q_c(ω_c)/Σ_c' q_c'(ω_c) + r'_nc - (1/C)Σ_c r'_nc (Eq 9 = Eq 38) satisfies Σ_c α_nc(ω) = 1; "
              "the β variant BH + β(r'_nc - mean_c r'_nc) stays valid (its correction sums to 0); Eq 37 (BH plus "
              "q_c(ω_c)(r'_nc - Σ_c BH_c r'_nc)) has the same structure.",
    kind="identity",
    hypotheses="unit-covariance Gaussian proposals (means identical to well separated); any r'_nc (both rprime_axis "
               "readings); any β; ω near the proposals (draws) and far (20 units away)",
    tolerance=IDENTITY_TOL, units="|Σ_c α_nc - 1| / max(1, Σ_c|α_nc|) (and |Σ_c correction| likewise)",
    cell=_eq9_cell,
    grid={"smoke": dict(weights=list(WEIGHT_AXIS), beta=[1.0], axis=["queries", "landmarks"], C=[1, 4], d=[8],
                        separation=[1.0]),
          "quick": dict(weights=list(WEIGHT_AXIS), beta=[0.0, 1.0, 2.0, 10.0], axis=["queries", "landmarks"],
                        C=[1, 2, 16], d=[1, 64], separation=[0.0, 5.0]),
          "full": dict(weights=list(WEIGHT_AXIS), beta=[0.0, 0.5, 1.0, 2.0, 4.0, 10.0],
                       axis=["queries", "landmarks"], C=[1, 2, 4, 16, 49, 196], d=[1, 8, 64],
                       separation=[0.0, 0.5, 2.0, 5.0])},
    variants=("A", "B"),
    variant_notes={"A": "every α_nc evaluated at one common argument ω (as written after Eq 9)",
                   "B": "each α_nc evaluated at its own proposal's sample ω_c (how the weights enter the estimator)"},
    where=lambda p, v: p["weights"] == "eq9" or p["beta"] == 1.0,
    search=_eq9_search, restarts=RESTARTS, universal=True,
    roles=("weight_table", "mis_weights"), plot_x="C",
    notes="β = 1 is Eq 9; other β are the β variant (eq37 is swept at β = 1). Under reading A the Eq 37 inner sum "
          "is at the same argument for both inner readings.",
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
    log_q = props.log_density(draws)                                            # [c, c'] = log q_c'(ω_c)
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
    id="lara.g3_2.optimal_weights_sum_to_one", paper="lara", source="G.3.2 (display following the definition of α*)",
    statement="Σ_c α*_nc(ω_c) = Σ_c q_c(ω_c)/Σ_c' q_c'(ω_c) + Σ_c q_c(ω_c)(r_nc(ω_c) - Σ_c'' [q_c''(ω_c'')/Σ_c' "
              "q_c'(ω_c)] r_nc''(ω_c'')) = 1 + [...] = 1: α* sums to 1 over c, is a valid weighting function, and its "
              "correction term sums to 0.",
    kind="identity",
    hypotheses="any r_nc(·) (the displayed algebra uses no property of r): (i) App D's D = 1 quadrature solution, "
               "(ii) the constants r'_nc, (iii) random smooth functions, (iv) r ≡ 0; Gaussian proposals from "
               "overlapping to far apart; independent draws ω_c ~ q_c",
    tolerance=IDENTITY_TOL, units="|Σ_c α*_nc - 1| / max(1, Σ_c|α*_nc|) (and |Σ_c correction| likewise)",
    cell=_g3_2_cell,
    grid={"smoke": dict(r=["quadrature", "rprime", "zero"], C=[1, 3], d=[1, 8], separation=[1.0]),
          "quick": dict(r=list(R_CHOICES), C=[1, 2, 6, 16], d=[1, 64], separation=[0.0, 5.0]),
          "full": dict(r=list(R_CHOICES), C=[1, 2, 3, 6, 16, 49], d=[1, 8, 64],
                       separation=[0.0, 0.5, 2.0, 5.0])},
    variants=("A", "B", "C"),
    variant_notes={"A": "Eq 27 with every term at one common ω, summed over c",
                   "B": "Eq 27 with each α*_nc at its own sample ω_c (inner sum at ω_c)",
                   "C": "the display as typeset: inner numerators and r at ω_c'', inner denominators at ω_c"},
    where=lambda p, v: p["r"] != "quadrature" or p["d"] == 1,
    search=_g3_2_search, restarts=RESTARTS, universal=True,
    roles=("eq27_weights",), plot_x="C",
)


# ================================================================= App D: the D = 1 linear system


def _appd_means(ctx: CellContext, C: int) -> np.ndarray:
    placement = ctx.params["placement"]
    if placement == "overlapping":
        return 0.3 * ctx.rng.standard_normal(C)
    if placement == "separated":
        return np.linspace(-3.0, 3.0, C) + 0.1 * ctx.rng.standard_normal(C)
    means = 0.5 * ctx.rng.standard_normal(C)
    means[-1] = 10.0
    return means


def _appd_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    a = p["magnitude"]
    q, k = ctx.rng.uniform(-a, a), ctx.rng.uniform(-a, a, p["M"])
    v = ctx.rng.uniform(-5, 5, p["M"])
    sol = ctx.impl("appd_d1_solution", theory.appd_d1_solution)(q, k, v, _appd_means(ctx, p["C"]))
    bh = softmax(sol.log_q, axis=-1)
    qc = np.exp(sol.log_q)
    s = bh @ sol.r
    ag = sol.alpha_times_g()                                                    # α*_c g
    w = sol.weights[:, None]
    # every term of r̂_c = ∫ BH_c g + q_c(r_c - Σ_c' BH_c' r_c'), in absolute value; the solve couples all c, so the
    # residual is judged against the largest of them (normwise, as a backward-stable solve guarantees)
    magnitude = (np.abs(bh * sol.g[:, None]) * w).sum(0) + (qc * (np.abs(sol.r) + (bh @ np.abs(sol.r))[:, None])
                                                            * w).sum(0)
    fixed_point = float(np.abs((ag * w).sum(0) - sol.r).max() / max(magnitude.max(), 1e-300))
    with np.errstate(divide="ignore", invalid="ignore"):
        lam_c = np.where(qc > 0, 2 * ag * sol.g[:, None] / qc, 0.0) - 2 * sol.g[:, None] * sol.r   # Eq 23 per c
    lam_26 = 2 * sol.g**2 / qc.sum(-1) - 2 * sol.g * s                                              # Eq 26
    scale = 2 * sol.g**2 / qc.sum(-1) + 2 * np.abs(sol.g) * np.abs(sol.r).max() + 1e-300
    keep = qc.min(-1) > 1e-250  # the Eq 23 form divides by q_c
    spread = float((np.ptp(lam_c, axis=1) / scale)[keep].max(initial=0.0))
    eq26 = float((np.abs(lam_c.mean(1) - lam_26) / scale)[keep].max(initial=0.0))
    residual = float(np.abs(sol.A @ sol.r - sol.b).max() / (np.abs(sol.A).max() * np.abs(sol.r).max()
                                                            + np.abs(sol.b).max() + 1e-300))
    extra = dict(fixed_point=fixed_point, eq23_spread=spread, eq26_error=eq26, backward_error=residual,
                 r=sol.r.tolist(), condition=float(np.linalg.cond(sol.A)))
    return _exact(max(fixed_point, spread, eq26), ctx, extra)


APPD_D1 = Claim(
    id="lara.appd.d1_linear_system", paper="lara", source="App D (the simplified case D = 1)",
    statement="For D = 1 and every c' = 1..C: Σ_c r_ncD ∫ q_c'(ω)q_c(ω)/Σ_c'' q_c''(ω) dω = ∫ q_c'(ω)p_n(ω)(f_n,D(ω) - "
              "μ_n,D)/Σ_c'' q_c''(ω) dω, with r_nc(ω) = p_n(f - μ)r_ncD/(p_n²(f - μ)²): solving this system gives "
              "the optimal weights α* of Eq 27, which satisfy the stationarity conditions Eq 23 with the λ of Eq 26.",
    kind="identity",
    hypotheses="D = D_v = 1; Gaussian proposals N(μ_c, 1) overlapping, separated, or with one far from p_n; M keys "
               "and the query in [-a, a], values in [-5, 5]; integrals by the trapezoid rule on one grid",
    tolerance=IDENTITY_TOL,
    units="fixed point max_c|∫α*_c g - r_c| / max_c ∫(|BH_c g| + q_c(|r_c| + Σ BH|r|)); Eq 23 spread across c and "
          "Eq 26 error / (2g²/Σq + 2|g| max|r|)",
    cell=_appd_cell,
    grid={"smoke": dict(C=[2, 4], M=[5], magnitude=[1.0], placement=["overlapping", "far"]),
          "quick": dict(C=[2, 3, 6], M=[1, 5, 20], magnitude=[0.5, 3.0], placement=["overlapping", "separated", "far"]),
          "full": dict(C=[2, 3, 4, 6], M=[1, 2, 5, 20], magnitude=[0.5, 1.5, 3.0],
                       placement=["overlapping", "separated", "far"])},
    roles=("appd_d1_solution",), plot_x="C",
)


# ================================================================= Eq 10: Z_p cancels (§4.2)


def _eq10_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    lp = _lara_setup(q, k, p["C"], p["proposal"])
    omega = lp.proposals.draw(1, ctx.rng)
    alpha = _weights_for(ctx, p["weights"], lp, q, omega)
    exact_p = np.asarray(ctx.impl("mis_attention", mis_est.mis_attention)(q, k, v, lp.proposals, omega=omega,
                                                                          alpha=alpha, normalise=True))
    eq10 = np.asarray(ctx.impl("lara_attention", lara_est.lara_attention)(q, k, v, proposals=lp, omega=omega,
                                                                          alpha=alpha, form="eq10"))
    scale = _row_scale_from_alpha(v, alpha, _lara_log_ratio(q, k, omega, lp))
    return _exact(_row_error(eq10, exact_p, scale), ctx, dict(max_condition=float(np.max(scale))))


EQ10_NORMALISER_FREE = Claim(
    id="lara.eq10.normaliser_free", paper="lara", source="§4.2 (display of p_n = p̃_n/Z_p; Eq 10)",
    statement="p_n(ω) = N(ω;0,I)ξ(q_n,ω)ᵀΣ_m ξ(k_m,ω)/Σ_m' exp(q_n·k_m') =: p̃_n(ω)/Z_p; in the self-normalised MIS "
              "estimate the quadratic-cost Z_p cancels, so Eq 10 uses only p̃_n.",
    kind="identity",
    hypotheses="positive map; every proposal family (Eq 32-35 readings, standard) and weight family (balance, eq9, "
               "eq37, constant), evaluated once and shared by both sides with the same draws",
    tolerance=IDENTITY_TOL, units="error / (max|v| Σ|a|/|Σa|), a = α p̃/q (signed)",
    cell=_eq10_cell,
    grid={"smoke": dict(proposal=["eq32", "eq34", "eq35_landmark_attention"], weights=["balance", "eq9"], C=[4],
                        d=[8], N=[16]),
          "quick": dict(proposal=list(PROPOSAL_AXIS), weights=["balance", "eq9", "eq37", "constant"], C=[1, 4],
                        d=[8], N=[16]),
          "full": dict(proposal=list(PROPOSAL_AXIS), weights=["balance", "eq9", "eq37", "constant"], C=[1, 4, 49],
                       d=[8, 64], N=[16, 196])},
    where=lambda p, v: p["C"] <= p["N"],
    roles=("mis_attention", "lara_attention", "mis_weights"), plot_x="C",
)


# ============================================================ Eq 35: landmark aggregation (G.3.1)

#: Segments per cell whose dependence on the other segments is checked (each check recomputes every mean).
EQ35_SEGMENTS_CHECKED = 8
#: Threshold of the "global information" part: the share of segments whose mean ignores other segments.
GLOBAL_SHARE_TOL = 0.5


def _structured_keys(ctx: CellContext, M: int, d: int) -> np.ndarray:
    p = ctx.params
    if p["structure"] == "smooth":
        k = attention_inputs("smooth", ctx.rng, 2, M, d)[1]
    elif p["structure"] == "clustered":
        centers = ctx.rng.standard_normal((4, d))
        k = centers[ctx.rng.integers(4, size=M)] + 0.2 * ctx.rng.standard_normal((M, d))
    else:
        k = ctx.rng.standard_normal((M, d))
    k = k / np.sqrt(np.mean(np.sum(k * k, axis=1)))                 # mean squared norm 1
    return p["scale"] * k


def _eq35_means(ctx: CellContext, ql, k, C: int) -> np.ndarray:
    kl = lara_est.segment_landmarks(k, C)
    means = ctx.impl("proposal_means", lara_est.proposal_means)
    return np.asarray(means("eq35", ql, kl, k, eq35_reading=ctx.variant))


def _eq35_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    C, d = p["C"], p["d"]
    M = C * p["T"]
    k = _structured_keys(ctx, M, d)
    ql = lara_est.segment_landmarks(ctx.rng.standard_normal((M, d)) / math.sqrt(d), C)
    mu = _eq35_means(ctx, ql, k, C)
    segment = np.repeat(np.arange(C), p["T"])
    ignores = []
    for c in ctx.rng.permutation(C)[:EQ35_SEGMENTS_CHECKED]:  # (a) replace every other segment's keys: does μ_c move?
        fresh = np.where((segment != c)[:, None], _structured_keys(ctx, M, d), k)
        moved = _eq35_means(ctx, ql, fresh, C)[c]
        ignores.append(float(np.linalg.norm(moved - mu[c]) <= 1e-12 * (1.0 + np.linalg.norm(mu[c]))))
    noise = ctx.rng.standard_normal((M, d)) * p["scale"]
    noise -= np.repeat(lara_est.segment_landmarks(noise, C), p["T"], axis=0)   # zero mean within each segment
    same_landmarks = _eq35_means(ctx, ql, k + noise, C)
    landmark_only = float((np.linalg.norm(same_landmarks - mu, axis=1) / (1.0 + np.linalg.norm(mu, axis=1))).max())
    global_share = float(np.mean(ignores))
    extra = dict(share_ignoring_other_segments=global_share, change_with_landmarks_fixed=landmark_only,
                 **_eq35_report(ctx, ql, k, C, mu))
    parts = [_exact(global_share if C > 1 else 0.0, ctx, threshold=GLOBAL_SHARE_TOL),
             _exact(landmark_only, ctx, threshold=IDENTITY_TOL)]
    return combine(parts, extra=extra)


def _eq35_report(ctx: CellContext, ql, k, C: int, mu) -> dict:
    """(b) local aggregation weight and (c) 'bridging' distances to Eq 33 and Eq 34 (reported, not tested)."""
    kl = lara_est.segment_landmarks(k, C)
    if ctx.variant == "landmark_attention":
        weights = softmax(kl @ kl.T, axis=-1)
        local = np.diag(weights)
        local_is_max = float(np.mean(local >= weights.max(axis=1)))
    else:
        local, local_is_max = np.ones(C), 1.0
    mu33 = lara_est.proposal_means("eq33", ql, kl, k)
    mu34 = lara_est.proposal_means("eq34", ql, kl, k)
    gap = np.linalg.norm(mu34 - mu33, axis=1) + 1e-300
    return dict(local_weight_mean=float(local.mean()), local_weight_is_largest=local_is_max,
                distance_to_eq34=float(np.median(np.linalg.norm(mu - mu34, axis=1) / gap)),
                distance_to_eq33=float(np.median(np.linalg.norm(mu - mu33, axis=1) / gap)))


EQ35_AGGREGATION = Claim(
    id="lara.eq35.landmark_aggregation", paper="lara", source="G.3.1 Eq 35 and the paragraph after it; §5.2",
    statement="q_c(ω) = N(ω; q̃_c + Σ_c' [exp(k̃_c·k̃_c')/Σ_{c'=1}^M exp(k̃_c·k̃_c')] k̃_c, I) bridges Eq 33 and Eq 34: an "
              "attention-like aggregation over key landmarks that computes correlations between key vectors, collects "
              "global information while still favouring local segments, and costs O(C²).",
    kind="identity",
    hypotheses="key landmarks are segment means (T = M/C keys per segment); random, smooth (G-smooth) and clustered "
               "keys; landmark norms small (flat softmax) to large (peaked)",
    tolerance=1.0,
    units="violation in units of each part's threshold: (a) global information — share of segments whose mean "
          "ignores every other segment's keys, threshold 0.5; (d) O(C²) from landmarks only — relative change of μ "
          "when keys change with their segment means fixed, threshold 1e-9",
    cell=_eq35_cell,
    grid={"smoke": dict(C=[4], d=[8], T=[4], structure=["random", "smooth"], scale=[1.0]),
          "quick": dict(C=[2, 16, 49], d=[64], T=[1, 4], structure=["random", "smooth", "clustered"],
                        scale=[0.5, 4.0]),
          "full": dict(C=[1, 2, 4, 16, 49, 196], d=[8, 64], T=[1, 4, 16], structure=["random", "smooth", "clustered"],
                       scale=[0.25, 1.0, 4.0, 8.0])},
    variants=lara_est.EQ35_READINGS,
    variant_notes={"printed_C": "the printed formula, normaliser over the C key landmarks (the bracket is then 1)",
                   "printed_M": "the printed formula, M-term normaliser over the individual keys",
                   "landmark_attention": "μ_c = q̃_c + Σ_c' softmax_c'(k̃_c·k̃_c') k̃_c' (the verbal description)"},
    roles=("proposal_means",), plot_x="C",
    notes="(b) the local aggregation weight, (c) the distances to the Eq 33/34 means relative to their gap are "
          "reported in each cell; the paper does not quantify 'favouring' or 'bridging'. (d)'s cost is measured by "
          "lara.g3_1.proposal_costs; here its premise (μ depends on the landmarks only) is checked.",
)


# ====================================================== Eq 28 and the softmax form of LARA (§4.3, App E)


def _lara_forms_cell(ctx: CellContext, left: str, right: str) -> Evidence:
    """LARA computed in two forms on shared draws and shared weights (``mode`` train: ω_c ~ q_c; eval: μ_c)."""
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    lp = _lara_setup(q, k, p["C"], p["proposal"])
    omega = lp.proposals.draw(1, ctx.rng) if p.get("mode", "train") == "train" else lp.proposals.mean()[:, None]
    alpha = _weights_for(ctx, p["weights"], lp, q, omega)
    lara = ctx.impl("lara_attention", lara_est.lara_attention)
    a = np.asarray(lara(q, k, v, proposals=lp, omega=omega, alpha=alpha, form=left))
    b = np.asarray(lara_est.lara_attention(q, k, v, proposals=lp, omega=omega, alpha=alpha, form=right))
    scale = _row_scale_from_alpha(v, alpha, _lara_log_ratio(q, k, omega, lp))
    return _exact(_row_error(a, b, scale), ctx, dict(max_condition=float(np.max(scale)),
                                                     frac_nonpositive_alpha=float((alpha <= 0).mean())))


EQ28_REWRITE = Claim(
    id="lara.eq28.rfa_like_rewrite", paper="lara", source="§4.3; App E (Eq 28)",
    statement="LARA(q_n, K, V) = Σ_c α'_nc(ω_c)ξ(q_n,ω_c)ᵀΣ_m ξ(k_m,ω_c)v_mᵀ / Σ_c α'_nc(ω_c)ξ(q_n,ω_c)ᵀΣ_m ξ(k_m,ω_c) "
              "with α'_nc(ω_c) := α_nc(ω_c)N(ω_c; 0, I)/q_c(ω_c) and ω_c ~ q_c.",
    kind="identity",
    hypotheses="positive map; any proposals (every family and Eq 35 reading) and weights (balance, eq9, eq37, "
               "constant; signed arithmetic); training (ω_c ~ q_c) and evaluation (ω_c = μ_c) modes",
    tolerance=IDENTITY_TOL, units="error / (max|v| Σ|a|/|Σa|), a = α p̃/q (signed)",
    cell=lambda ctx: _lara_forms_cell(ctx, "eq28", "eq10"),
    grid={"smoke": dict(proposal=["eq32", "eq34"], weights=["balance", "eq9"], C=[4], d=[8], N=[16],
                        mode=["train", "eval"]),
          "quick": dict(proposal=list(PROPOSAL_AXIS), weights=["balance", "eq9", "eq37", "constant"], C=[1, 4],
                        d=[1, 64], N=[16], mode=["train", "eval"]),
          "full": dict(proposal=list(PROPOSAL_AXIS), weights=["balance", "eq9", "eq37", "constant"],
                       C=[1, 4, 49, 196], d=[1, 8, 64], N=[16, 196, 784], mode=["train", "eval"])},
    where=lambda p, v: p["C"] <= p["N"] and (p["d"] > 1 or p["weights"] in ("balance", "eq9")),
    roles=("lara_attention", "mis_weights"), plot_x="C",
)

LARA_SOFTMAX_FORM = Claim(
    id="lara.derived.lara_softmax_form", paper="lara", source="register: derived prediction (from Eq 10, App E)",
    statement="For the positive map, Gaussian proposals N(μ_c, I) and α_nc > 0: LARA(q_n) = Σ_c softmax_c(log α_nc + "
              "ω_c·(q_n - μ_c) + ‖μ_c‖²/2 + log Den_c) f(ω_c), Den_c = Σ_m exp(ω_c·k_m - ‖k_m‖²/2); with signed α, "
              "y_n = Σ_c a_nc f(ω_c)/Σ_c a_nc, a_nc = α_nc exp(ω_c·(q_n - μ_c) + ‖μ_c‖²/2 + log Den_c).",
    kind="identity",
    hypotheses="positive map; Gaussian proposal families (Eq 33-35 readings, standard); positive weights (balance, "
               "constant) and signed ones (eq9, eq37); shared draws; against Eq 10 with explicit p̃_n",
    tolerance=IDENTITY_TOL, units="error / (max|v| Σ|a|/|Σa|)",
    cell=lambda ctx: _lara_forms_cell(ctx, "softmax", "eq10"),
    grid={"smoke": dict(proposal=["eq34", "eq33"], weights=["balance", "eq9"], C=[4], d=[8], N=[16],
                        logit_std=[1.0]),
          "quick": dict(proposal=list(GAUSSIAN_PROPOSALS), weights=["balance", "eq9", "eq37", "constant"], C=[1, 4],
                        d=[64], N=[16], logit_std=[0.5, 4.0]),
          "full": dict(proposal=list(GAUSSIAN_PROPOSALS), weights=["balance", "eq9", "eq37", "constant"],
                       C=[1, 4, 49], d=[8, 64], N=[16, 196], logit_std=[0.25, 1.0, 4.0])},
    where=lambda p, v: p["C"] <= p["N"],
    roles=("lara_attention", "mis_weights"), plot_x="C",
)


# ================================================================ §4.3: RFA and RA as special cases


def _rfa_special_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    C, n = p["C"], p["N"]
    q, k, v = _inputs(ctx, n, n, p["d"])
    lp = lara_est.lara_proposals(q, k, C, proposal="standard")
    omega = lp.proposals.draw(1, ctx.rng)                                       # ω_1..ω_C ~ N(0, I)
    kappa = None if ctx.variant == "K1" else ctx.rng.dirichlet(np.ones(C), size=n)
    lara = np.asarray(ctx.impl("lara_attention", lara_est.lara_attention)(q, k, v, proposals=lp, omega=omega,
                                                                          weights="constant", kappa=kappa))
    rfa = np.asarray(ctx.impl("rfa_attention", rfa_est.rfa_attention)(q, k, v, omega=omega[:, 0], form="features"))
    return _exact(_row_error(lara, rfa, _value_scale(v)), ctx)


RFA_SPECIAL = Claim(
    id="lara.sec4_3.rfa_special_case", paper="lara", source="§4.3",
    statement="Setting every proposal to N(ω; 0, I) and every α_nc(·) to a constant function makes RFA a special case "
              "of LARA.",
    kind="identity",
    hypotheses="positive map; C = S; the same ω_1..ω_C for both (RFA by its Eq 2 feature form)",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    cell=_rfa_special_cell,
    grid={"smoke": dict(C=[1, 16], d=[8], N=[16], logit_std=[1.0]),
          "quick": dict(C=[1, 2, 16, 64], d=[1, 64], N=[16], logit_std=[0.5, 2.0]),
          "full": dict(C=[1, 2, 16, 64], d=[1, 8, 64], N=[16, 196], logit_std=[0.25, 0.5, 1.0, 2.0, 4.0])},
    variants=("K1", "K2"),
    variant_notes={"K1": "α_nc ≡ 1/C", "K2": "arbitrary constants κ_nc with Σ_c κ_nc = 1 (random Dirichlet per query)"},
    roles=("lara_attention", "rfa_attention"), plot_x="C",
)


def _ra_special_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    draws = ra_est.draw_ra(q, k, 1, rng=ctx.rng)
    ra = np.asarray(ctx.impl("ra_attention", ra_est.ra_attention)(q, k, v, draws=draws))
    omega = ra_est.ra_samples(q, k, draws)                                       # ω_c ~ p_c, (C = N, 1, D)
    mis = np.asarray(ctx.impl("mis_attention", mis_est.mis_attention)(q, k, v, ra_est.attention_mixture(q, k),
                                                                      omega=omega, weights="delta", normalise=False))
    return _exact(_row_error(mis, ra, _value_scale(v)), ctx)


RA_SPECIAL = Claim(
    id="lara.sec4_3.ra_special_case", paper="lara", source="§4.3 and footnote 7",
    statement="LARA is equivalent to RA if self-normalisation is removed, the weighting functions are α_nc(ω) = δ_nc, "
              "and N proposals are kept, each of the form p_n(ω) (Eq 5).",
    kind="identity",
    hypotheses="C = N; q_c = p_c; one sample per proposal, shared with RA (S = 1): ω_n = ω_c for c = n",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    cell=_ra_special_cell,
    grid={"smoke": dict(N=[2, 16], d=[8], logit_std=[1.0]),
          "quick": dict(N=[1, 2, 16], d=[1, 64], logit_std=[0.5, 4.0]),
          "full": dict(N=[1, 2, 16, 196], d=[1, 8, 64], logit_std=[0.25, 1.0, 4.0])},
    roles=("ra_attention", "mis_attention"), plot_x="N",
    notes="The register's second check (equal output laws under independent draws) follows from this pathwise "
          "identity: with q_c = p_c the weight p_n/q_n is identically 1, so both estimators are f_n(ω), ω ~ p_n.",
)


# ================================================================== Corollary C.1: hyperbolic target


def _hyperbolic_errors(q, k, omega) -> dict:
    """Pointwise: ``N(ω;0,I)ξᵀΣξ/Σexp(q·k)`` (hyperbolic) against C.1's mixture, and ``p(ω|m)`` against its
    stated component ``½N(q+k_m, I) + ½N(-q-k_m, I)``."""
    _, log_z = ra_est.softmax_log_weights(q, k)
    _, pair = rfa_est.pair_log_kernel(q, k, omega, feature_map="hyperbolic")
    implied = rfa_est.log_normal(omega) + logsumexp(pair, axis=-1) - log_z[:, None]
    stated = theory.hyperbolic_target_log_density(omega, q, k)
    mag = _log_magnitude(omega, q[:, None, :]) + float(_half_sq(k).max()) * 2
    centers = q[:, None, None, :] + k[None, None, :, :]
    cond = rfa_est.log_normal(omega)[..., None] + pair - (q @ k.T)[:, None, :]
    component = np.logaddexp(rfa_est.log_normal(omega[:, :, None, :], centers),
                             rfa_est.log_normal(omega[:, :, None, :], -centers)) - math.log(2.0)
    return dict(target_error=float((np.abs(implied - stated) / mag).max()),
                component_error=float((np.abs(cond - component) / mag[..., None]).max()))


def _corc1_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = norm_inputs(ctx.rng, 3, p["M"], p["d"], p["norm"])
    q, k, v = _degenerate(p["inputs"], q, k, v)
    omega = _omega_points(ctx, p["omega"], q, k, 8)
    errors = _hyperbolic_errors(q, k, omega)
    shared, _ = rfa_est.draw_rfa_samples(16, p["d"], rng=ctx.rng)
    rfa = np.asarray(ctx.impl("rfa_attention", rfa_est.rfa_attention)(q, k, v, omega=shared, feature_map="hyperbolic"))
    snis, _ = ctx.impl("rfa_snis", rfa_est.rfa_snis)(q, k, v, shared, feature_map="hyperbolic")
    errors["snis_error"] = _row_error(rfa, snis, _value_scale(v))
    ra = ra_est.ra_attention(q, k, v, S=500, rng=ctx.rng, feature_map="hyperbolic")
    exact = softmax_attention(q, k, v, scale=1.0)
    report = dict(ra_hyperbolic_error_to_softmax=float(np.abs(ra - exact).max() / _value_scale(v)))
    return _exact(max(errors.values()), ctx, dict(errors, **report))


def _corc1_search(ctx: CellContext) -> Evidence:
    d = 3
    k_extra = np.random.default_rng(2).standard_normal((1, d))

    def error(x):
        q, k, w = _pair_geometry(x)
        return max(_hyperbolic_errors(q[None], np.vstack([k, k_extra]), w[None, None]).values())

    return _search_evidence(ctx, error, [(0.0, 6.0), (0.0, 6.0)] + _POINTWISE_BOUNDS[2:])


CORC1_HYPERBOLIC = Claim(
    id="lara.corc1.hyperbolic_target", paper="lara", source="App C, Corollary C.1 and its proof",
    statement="With ξ(x,ω) = (1/√2)exp(-‖x‖²/2)[exp(ω·x), exp(-ω·x)]ᵀ, RFA also defines an SNIS estimator of E_p[f], f "
              "of the Eq 6 form with this ξ and p(ω) = ½Σ_m π_m(N(ω; q_n + k_m, I) + N(ω; -q_n - k_m, I)); the proof "
              "shows p(ω|m) = ½N(ω; q_n + k_m, I) + ½N(ω; -q_n - k_m, I).",
    kind="identity",
    hypotheses="q = N(0, I); hyperbolic map; norms up to 6, ω from N(0, I), from p_n and at distance 50; "
               "G-degenerate inputs. E_p[f] against softmax attention (RA with this map) is reported, not tested: "
               "the corollary does not state it",
    tolerance=IDENTITY_TOL,
    units="log-space error / (1 + ‖ω‖²/2 + ‖q‖² + max‖k‖²); RFA against SNIS: error / max|v|",
    cell=_corc1_cell,
    grid={"smoke": dict(d=[2, 8], M=[2], norm=[2.0], omega=["standard", "far"], inputs=["norm"]),
          "quick": dict(d=[1, 2, 64], M=[1, 2, 32], norm=[0.5, 6.0], omega=["standard", "target", "far"],
                        inputs=["norm", "zero_query", "opposite"]),
          "full": dict(d=[1, 2, 8, 64], M=[1, 2, 32, 196], norm=[0.5, 2.0, 6.0], omega=["standard", "target", "far"],
                       inputs=["norm", "zero_query", "zero_keys", "opposite", "identical_keys"])},
    where=lambda p, v: p["inputs"] == "norm" or (p["norm"] == 6.0 and p["M"] == 2),
    search=_corc1_search, restarts=RESTARTS, universal=True,
    roles=("rfa_attention", "rfa_snis"), plot_x="norm",
)


# ============================================================ Algorithms 1-3 (G.1-G.3), literal loops


def _alg1_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    draws = ra_est.draw_ra(q, k, p["S"], rng=ctx.rng)
    loops = np.asarray(ctx.impl("ra_algorithm1", ra_est.ra_algorithm1)(q, k, v, draws.z, draws.eps))
    scale = _value_scale(v)
    errors = {form: _row_error(loops, ra_est.ra_attention(q, k, v, draws=draws, f_form=form), scale)
              for form in ("simplified", "literal")}
    return _exact(max(errors.values()), ctx, errors)


ALG1 = Claim(
    id="lara.alg1.ra_algorithm", paper="lara", source="G.2 Algorithm 1; G.1",
    statement="Algorithm 1 computes RA (per query: π_n; per sample a_ns ~ Categorical(π_n), ε_s ~ N(0, I), ω_ns = K "
              "a_ns + q_n + ε_s, N_ns = ξ(q_n,ω_ns)Σ_m ξ(k_m,ω_ns)v_mᵀ, D_ns = ξ(q_n,ω_ns)Σ_m ξ(k_m,ω_ns); y_n = "
              "(1/S)Σ_s N_ns/D_ns), and its loops can run in parallel.",
    kind="identity",
    hypotheses="positive map; identical (z, ε); the literal loops (Numba, float64, max-shifted) against the "
               "vectorised log-space numpy RA with both integrand forms",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    cell=_alg1_cell,
    grid={"smoke": dict(S=[1, 3], N=[5], d=[8], logit_std=[1.0]),
          "quick": dict(S=[1, 3], N=[1, 5, 64], d=[1, 64], logit_std=[1.0, 4.0]),
          "full": dict(S=[1, 3], N=[1, 5, 64], d=[1, 8, 64], logit_std=[0.25, 1.0, 4.0])},
    roles=("ra_algorithm1",), plot_x="N",
    notes="The torch backend (rfkit.gpu) has no RA yet; the loops are the Numba backend, the vectorised path numpy.",
)


def _alg2_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    omega, _ = rfa_est.draw_rfa_samples(p["S"], p["d"], rng=ctx.rng)
    loops = np.asarray(ctx.impl("rfa_algorithm2", rfa_est.rfa_algorithm2)(q, k, v, omega))
    scale = _value_scale(v)
    errors = {form: _row_error(loops, rfa_est.rfa_attention(q, k, v, omega=omega, form=form), scale)
              for form in ("softmax", "double_sum")}
    return _exact(max(errors.values()), ctx, errors)


ALG2 = Claim(
    id="lara.alg2.rfa_algorithm", paper="lara", source="G.1 Algorithm 2",
    statement="Algorithm 2 computes RFA (Eq 2): for s: ω_s ~ N(0, I), N_s = Σ_m ξ(k_m,ω_s)v_mᵀ, D_s = Σ_m ξ(k_m,ω_s); "
              "for n: N = Σ_s ξ(q_n,ω_s)N_s, D = Σ_s ξ(q_n,ω_s)D_s, y_n = N/D; its loops can run in parallel.",
    kind="identity",
    hypotheses="positive map; the same ω; the literal loops (Numba, float64, max-shifted) against the vectorised "
               "softmax form and the double sum of Eq 2",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    cell=_alg2_cell,
    grid={"smoke": dict(S=[1, 16], N=[5], d=[8], logit_std=[1.0]),
          "quick": dict(S=[1, 16, 256], N=[1, 5, 64], d=[1, 64], logit_std=[1.0, 4.0]),
          "full": dict(S=[1, 16, 256], N=[1, 5, 64], d=[1, 8, 64], logit_std=[0.25, 1.0, 4.0])},
    roles=("rfa_algorithm2",), plot_x="S",
)


def _alg3_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    lp = _lara_setup(q, k, p["C"], p["proposal"])
    omega = lp.proposals.draw(1, ctx.rng)
    alpha = _weights_for(ctx, "eq9", lp, q, omega, beta=p["beta"], axis=p["axis"])
    log_q_own = lp.proposals.log_density_own(omega)[:, 0]
    loops = np.asarray(ctx.impl("lara_algorithm3", lara_est.lara_algorithm3)(
        q, k, v, omega[:, 0], alpha[:, :, 0], log_q_own, reading=ctx.variant))
    eq10 = lara_est.lara_attention(q, k, v, proposals=lp, omega=omega, alpha=alpha, form="eq10")
    scale = _row_scale_from_alpha(v, alpha, _lara_log_ratio(q, k, omega, lp))
    errors = dict(algorithm_error=_row_error(loops, eq10, scale))
    rows = ctx.rng.permutation(p["N"])[:4]  # key statistics recomputed for single queries, against reuse
    alone = np.vstack([lara_est.lara_attention(q[i:i + 1], k, v, proposals=lp, omega=omega, alpha=alpha[i:i + 1])
                       for i in rows])
    errors["reuse_error"] = _row_error(alone, eq10[rows], np.broadcast_to(scale, (p["N"],))[rows])
    return _exact(max(errors.values()), ctx, errors)


ALG3 = Claim(
    id="lara.alg3.lara_algorithm", paper="lara", source="G.3.1 Algorithm 3; §4.2",
    statement="Algorithm 3 computes LARA (Eq 10), computing the key-value statistics N_c = Σ_m ξ(k_m,ω_c)v_mᵀ, D_c = "
              "Σ_m ξ(k_m,ω_c) once (ω_c ~ q_c = N(μ_c, I)) and reusing them for every query: α_nc by Eq 9, α'_nc ← "
              "\"α_nc(ω_c) N(ω_c; 0, I/q_c(ω_c)\" (as printed), y_n = Σ_c α'_nc ξ(q_n,ω_c)N_c / "
              "Σ_c α'_nc ξ(q_n,ω_c)D_c.",
    kind="identity",
    hypotheses="Gaussian proposals (eq34, the eq35 readings, eq33); positive map; Eq 9 weights with β ∈ {1, 2} and "
               "both rprime_axis readings; the same ω_c",
    tolerance=IDENTITY_TOL, units="error / (max|v| Σ|a|/|Σa|)",
    cell=_alg3_cell,
    grid={"smoke": dict(C=[1, 4], N=[16], d=[8], proposal=["eq34"], beta=[1.0], axis=["queries"]),
          "quick": dict(C=[1, 4, 49], N=[4, 49], d=[1, 64], proposal=["eq34", "eq35_landmark_attention", "eq33"],
                        beta=[2.0], axis=["queries", "landmarks"]),
          "full": dict(C=[1, 4, 49], N=[4, 49, 196], d=[1, 8, 64],
                       proposal=["eq34", "eq35_printed_C", "eq35_printed_M", "eq35_landmark_attention", "eq33"],
                       beta=[1.0, 2.0], axis=["queries", "landmarks"])},
    variants=lara_est.ALG3_READINGS,
    variant_notes={"P1": "α'_nc = α_nc(ω_c) N(ω_c; 0, I)/q_c(ω_c) (§4.3, App E)",
                   "P2": "α'_nc = α_nc(ω_c) N(ω_c; 0, q_c(ω_c)^{-1} I), a Gaussian with covariance I/q_c(ω_c)"},
    where=lambda p, v: p["C"] <= p["N"],
    roles=("lara_algorithm3",), plot_x="C",
)


# ================================================================ derived predictions (register)


def _cancellation_error(integrand, q, k, v, omega) -> float:
    """Literal Eq 6 (``ξ(q_n, ω)`` kept) against ``Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m``, scaled by
    ``max|v|(1 + |ω·q| + ‖q‖²/2)`` (the literal form's logits carry ``log ξ(q_n, ω)``)."""
    literal = np.asarray(integrand(q, k, v, omega, form="literal"))
    simple = theory.cancelled_integrand(k, v, omega)
    mag = 1.0 + np.abs(np.einsum("nsd,nd->ns", omega, q)) + _half_sq(q)[:, None]
    return float((np.abs(literal - simple) / (mag[..., None] * _value_scale(v))).max())


def _cancellation_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = norm_inputs(ctx.rng, 3, p["M"], p["d"], p["norm"])
    omega = _omega_points(ctx, p["omega"], q, k, 16)
    return _exact(_cancellation_error(ctx.impl("integrand", rfa_est.integrand), q, k, v, omega), ctx)


def _cancellation_search(ctx: CellContext) -> Evidence:
    integrand = ctx.impl("integrand", rfa_est.integrand)
    d = 3
    rng = np.random.default_rng(2)
    k_extra, v = rng.standard_normal((2, d)), rng.standard_normal((3, 2))

    def error(x):
        q, k, w = _pair_geometry(x)
        return _cancellation_error(integrand, q[None], np.vstack([k, k_extra]), v, w[None, None])

    return _search_evidence(ctx, error, _POINTWISE_BOUNDS)


QUERY_CANCELLATION = Claim(
    id="lara.derived.query_cancellation", paper="lara", source="register: derived prediction (from Eq 6)",
    statement="For the positive map, ξ(q_n, ω) is a common scalar factor of the numerator and denominator of Eq 6, so "
              "f_n(ω) = Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m, independent of n and q_n.",
    kind="identity",
    hypotheses="positive map; random and extreme ω (N(0, I), p_n, distance 50); norms up to 8",
    tolerance=IDENTITY_TOL, units="error / (max|v| (1 + |ω·q_n| + ‖q_n‖²/2))",
    cell=_cancellation_cell,
    grid={"smoke": dict(d=[8], M=[16], omega=["standard", "far"], norm=[2.0]),
          "quick": dict(d=[1, 16, 128], M=[1, 2, 196], omega=["standard", "target", "far"], norm=[0.5, 8.0]),
          "full": dict(d=[1, 2, 16, 64, 128], M=[1, 2, 196, 784], omega=["standard", "target", "far"],
                       norm=[0.0, 1.0, 3.0, 8.0])},
    search=_cancellation_search, restarts=RESTARTS, universal=True,
    roles=("integrand",), plot_x="norm",
)


def _rank_outputs(ctx: CellContext, estimator: str, draws: int, q, k, v):
    """``(Y, F, affine)``: the estimator's outputs, the query-free vectors ``F`` its rows combine, and whether the
    combinations are affine (weights summing to 1) or only linear (unnormalised MIS)."""
    d = q.shape[1]
    if estimator == "rfa":
        omega, _ = rfa_est.draw_rfa_samples(draws, d, rng=ctx.rng)
        y = ctx.impl("rfa_attention", rfa_est.rfa_attention)(q, k, v, omega=omega)
        return np.asarray(y), theory.cancelled_integrand(k, v, omega), True
    lp = lara_est.lara_proposals(q, k, draws, proposal="eq34")
    omega = lp.proposals.draw(2, ctx.rng)
    f = theory.cancelled_integrand(k, v, omega.reshape(-1, d))
    if estimator == "lara":
        y = ctx.impl("lara_attention", lara_est.lara_attention)(q, k, v, proposals=lp, omega=omega, weights="eq9")
        return np.asarray(y), f, True
    y = ctx.impl("mis_attention", mis_est.mis_attention)(q, k, v, lp.proposals, omega=omega, weights="balance")
    return np.asarray(y), f, False


def _span_residual(y, f, affine: bool) -> float:
    """Largest distance of a row of ``y`` to the affine hull (or linear span) of the rows of ``f``, over max|y|."""
    base = f[:1] if affine else np.zeros_like(f[:1])
    basis = (f[1:] - f[:1]) if affine else f
    target = y - base
    if basis.shape[0] == 0:
        resid = target
    else:
        coef, *_ = np.linalg.lstsq(basis.T, target.T, rcond=None)
        resid = target - coef.T @ basis
    return float(np.abs(resid).max() / max(np.abs(y).max(), 1e-300))


def _rank_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, 64, 64, p["d"], p["dv"])
    y, f, affine = _rank_outputs(ctx, p["estimator"], p["draws"], q, k, v)
    bound = theory.output_rank_bound(f.shape[0], v.shape[1])
    sv = np.linalg.svd(y, compute_uv=False)
    tail = float(sv[bound] / sv[0]) if bound < sv.size and sv[0] > 0 else 0.0
    resid = _span_residual(y, f, affine)
    return _exact(max(tail, resid), ctx, dict(singular_value_tail=tail, span_residual=resid, bound=bound,
                                              singular_values=sv[: bound + 2].tolist()))


def _rank_search(ctx: CellContext) -> Evidence:
    def error(x):
        scale, estimator = x[0], ("rfa", "lara", "mis")[int(x[1])]
        rng = np.random.default_rng(int(1e6 * scale))
        q, k, v = attention_inputs("gauss", rng, 16, 16, 4, 12, scale)
        sub = CellContext(ctx.claim_id, ctx.variant, {}, ctx.tier, 0, ctx.alpha, ctx.power, ctx.tolerance, rng,
                          ctx.implementations)
        y, f, affine = _rank_outputs(sub, estimator, 2, q, k, v)
        sv = np.linalg.svd(y, compute_uv=False)
        bound = theory.output_rank_bound(f.shape[0], v.shape[1])
        return max(float(sv[bound] / sv[0]), _span_residual(y, f, affine))

    return _search_evidence(ctx, error, [(0.05, 6.0), (0.0, 2.0)], integer=[False, True])


RANK_BOUND = Claim(
    id="lara.derived.rank_bound", paper="lara", source="register: derived prediction (from the softmax forms)",
    statement="For the positive map, RFA's rows are y_n = Σ_s w_ns F_s with Σ_s w_ns = 1 and F_s = f(ω_s) common to "
              "all queries: rank(Y) <= min(S, D_v) and every row lies in the affine hull of {F_s} (S = 1: every row is "
              "f(ω_1)); the same for LARA with S replaced by C·S_c (signed weights); for unnormalised MIS rank(Y) "
              "<= C·S_c.",
    kind="identity",
    hypotheses="positive map; D_v larger than the number of draws; LARA with eq34 proposals, Eq 9 weights, S_c = 2; "
               "unnormalised MIS with balance weights",
    tolerance=IDENTITY_TOL,
    units="σ_{bound+1}/σ_1 of Y, and the distance of rows to the affine hull (linear span for MIS) of {F} over max|y|",
    cell=_rank_cell,
    grid={"smoke": dict(estimator=["rfa", "lara", "mis"], draws=[1, 4], d=[8], dv=[32], logit_std=[1.0]),
          "quick": dict(estimator=["rfa", "lara", "mis"], draws=[1, 2, 8], d=[8, 64], dv=[32], logit_std=[0.5, 4.0]),
          "full": dict(estimator=["rfa", "lara", "mis"], draws=[1, 2, 8, 16], d=[1, 8, 64], dv=[8, 32, 64],
                       logit_std=[0.25, 1.0, 4.0])},
    search=_rank_search, restarts=RESTARTS, universal=True,
    roles=("rfa_attention", "lara_attention", "mis_attention"), plot_x="draws",
)


def _rfa_softmax_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, p["N"], p["N"], p["d"])
    omega, _ = rfa_est.draw_rfa_samples(p["S"], p["d"], rng=ctx.rng)
    form = np.asarray(ctx.impl("rfa_attention", rfa_est.rfa_attention)(q, k, v, omega=omega, form="softmax"))
    eq2 = rfa_est.rfa_attention(q, k, v, omega=omega, form="features")
    return _exact(_row_error(form, eq2, _value_scale(v)), ctx)


RFA_SOFTMAX_FORM = Claim(
    id="lara.derived.rfa_softmax_form", paper="lara", source="register: derived prediction (from Eq 2)",
    statement="For the positive map, RFA(q_n) = Σ_s softmax_s(ω_s·q_n + log Den_s) f(ω_s), Den_s = Σ_m exp(ω_s·k_m - "
              "‖k_m‖²/2).",
    kind="identity",
    hypotheses="positive map; shared ω; against Eq 2 as linear attention on footnote-3 features (stabilised)",
    tolerance=IDENTITY_TOL, units="error / max|v|",
    cell=_rfa_softmax_cell,
    grid={"smoke": dict(S=[16], N=[16], d=[8], logit_std=[1.0, 4.0]),
          "quick": dict(S=[1, 64], N=[1, 64], d=[1, 64], logit_std=[0.25, 4.0], inputs=["gauss", "peaked"]),
          "full": dict(S=[1, 16, 256], N=[1, 16, 196], d=[1, 8, 64], logit_std=[0.25, 1.0, 4.0],
                       inputs=["gauss", "peaked", "smooth"])},
    roles=("rfa_attention",), plot_x="S",
)


def _density_ratio_errors(omega, means) -> float:
    """``log N(ω;0,I) - log N(ω;μ_c,I)`` (direct) against ``-ω·μ_c + ‖μ_c‖²/2`` and ``-log ξ(μ_c, ω)``; balance
    heuristic from proposal densities against ``softmax_c(ω·μ_c - ‖μ_c‖²/2)``."""
    props = mis_est.GaussianProposals(means)
    direct = rfa_est.log_normal(omega)[:, None] - props.log_density(omega)             # (P, C)
    closed = theory.log_density_ratio_standard(omega[:, None, :], means[None])
    _, log_xi = rfa_est.xi(means, omega)                                                # (C, P, 1)
    mag = 1.0 + _half_sq(omega)[:, None] + _half_sq(means)[None] + np.abs(omega @ means.T)
    bh = mis_est.balance_heuristic(props.log_density(omega))
    bh_closed = theory.gaussian_balance_heuristic(omega, means)
    return max(float((np.abs(direct - closed) / mag).max()), float((np.abs(closed + log_xi[..., 0].T) / mag).max()),
               float((np.abs(bh - bh_closed) / mag).max()))


def _density_ratio_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    means = p["norm"] * unit_vectors(ctx.rng, p["C"], p["d"]) * ctx.rng.uniform(0, 1, (p["C"], 1))
    omega = p["radius"] * unit_vectors(ctx.rng, 16, p["d"])
    return _exact(_density_ratio_errors(omega, means), ctx)


def _density_ratio_search(ctx: CellContext) -> Evidence:
    def error(x):
        _, mu, w = _pair_geometry(x)
        return _density_ratio_errors(w[None], np.vstack([mu, 0.5 * mu[::-1]]))

    return _search_evidence(ctx, error, [(0.0, 8.0), (0.0, 20.0)] + _POINTWISE_BOUNDS[2:])


GAUSSIAN_RATIO = Claim(
    id="lara.derived.gaussian_density_ratio", paper="lara", source="register: derived prediction",
    statement="N(ω; 0, I)/N(ω; μ, I) = exp(-ω·μ + ‖μ‖²/2) = 1/ξ(μ, ω) for the positive map; for unit-covariance "
              "Gaussian proposals BH_c(ω) = softmax_c(ω·μ_c - ‖μ_c‖²/2).",
    kind="identity",
    hypotheses="any ω and μ (norms up to 20 for μ and 50 for ω)",
    tolerance=IDENTITY_TOL, units="error / (1 + ‖ω‖²/2 + ‖μ‖²/2 + |ω·μ|)",
    cell=_density_ratio_cell,
    grid={"smoke": dict(d=[1, 8], C=[4], norm=[3.0], radius=[1.0, 50.0]),
          "quick": dict(d=[1, 8, 64], C=[1, 4, 49], norm=[0.0, 3.0, 20.0], radius=[0.0, 5.0, 50.0]),
          "full": dict(d=[1, 2, 8, 64, 128], C=[1, 4, 49, 196], norm=[0.0, 1.0, 3.0, 20.0],
                       radius=[0.0, 1.0, 5.0, 50.0])},
    search=_density_ratio_search, restarts=RESTARTS, universal=True,
    plot_x="radius",
)


#: Threshold of the Monte Carlo part of the hyperbolic symmetry: a difference of expectations, in units of max|v|.
SYMMETRY_MC_TOL = 0.02


def _symmetry_errors(integrand, q, k, v, omega) -> dict:
    """The cosh formula against Eq 6 with the hyperbolic ξ (estimator), and ``f(-ω) = f(ω)``."""
    eq6 = np.asarray(integrand(q, k, v, omega, feature_map="hyperbolic", form="literal"))
    cosh_form = theory.hyperbolic_integrand(q, k, v, omega)
    mirrored = theory.hyperbolic_integrand(q, k, v, -omega)
    mag = (1.0 + np.abs(omega @ q.T).T + float(np.abs(omega @ k.T).max()))[..., None] * _value_scale(v)
    return dict(formula_error=float((np.abs(eq6 - cosh_form) / mag).max()),
                even_error=float((np.abs(mirrored - cosh_form) / mag).max()))


def _symmetry_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    q, k, v = _inputs(ctx, 3, p["M"], p["d"], 2)
    omega = ctx.rng.standard_normal((16, p["d"])) * p["spread"]
    errors = _symmetry_errors(ctx.impl("integrand", rfa_est.integrand), q, k, v, omega)
    exact = _exact(max(errors.values()), ctx, errors, threshold=IDENTITY_TOL)
    if not p["monte_carlo"]:
        return exact
    scale = SYMMETRY_MC_TOL * _value_scale(v)
    if p["M"] == 1:
        # one key: both integrands are v_1 at every ω (a weighted average of one value), so the two expectations
        # are equal exactly; the difference at a few draws of each law is judged exactly (round-off only)
        hyp = ra_est.attention_mixture(q[:1], k, feature_map="hyperbolic").draw(1_000, ctx.rng)[0]
        plain = ra_est.attention_mixture(q[:1], k).draw(1_000, ctx.rng)[0]
        diff = (theory.hyperbolic_integrand(q[:1], k, v, hyp) - theory.hyperbolic_integrand(q[:1], k, v, plain))[0]
        return combine([exact, exact_test(diff / scale, 0.0, tolerance=ctx.tolerance)], extra=errors)
    mixture_hyp = ra_est.attention_mixture(q[:1], k, feature_map="hyperbolic")
    mixture = ra_est.attention_mixture(q[:1], k)

    def draw(j):
        def replicates(rng, n):
            hyp, plain = mixture_hyp.draw(n, rng)[0], mixture.draw(n, rng)[0]
            return (theory.hyperbolic_integrand(q[:1], k, v, hyp)[0, :, j]
                    - theory.hyperbolic_integrand(q[:1], k, v, plain)[0, :, j])
        return replicates

    # both integrands are averages of the values with positive weights, so a difference of coordinate j lies in
    # ±(max_m v_mj - min_m v_mj): a betting confidence sequence (non-asymptotic), sequential in rounds
    spans = (v.max(axis=0) - v.min(axis=0)) * (1 + 1e-9) + 1e-12 * np.abs(v).max(axis=0)  # round-off pad
    tests = [sequential_mean(draw(j), 0.0, rng=ctx.rng, budget=ctx.replicates, planned=ctx.planned or ctx.replicates,
                             scale=scale, bounds=(-float(spans[j]), float(spans[j])),
                             **dict(ctx.sub_test(2 * v.shape[1]), tolerance=1.0))
             for j in range(v.shape[1])]
    return combine([exact] + tests, extra=errors)


HYPERBOLIC_SYMMETRY = Claim(
    id="lara.derived.hyperbolic_symmetry", paper="lara", source="register: derived prediction (App C)",
    statement="For the hyperbolic map, f_n^hyp(ω) = Σ_m e^{-‖k_m‖²/2}cosh(ω·(q_n + k_m))v_m / "
              "Σ_m e^{-‖k_m‖²/2}cosh(ω·(q_n + k_m)), which depends on q_n; f_n^hyp(-ω) = f_n^hyp(ω); hence "
              "E_{p_n^hyp}[f_n^hyp] = E_{p_n}[f_n^hyp].",
    kind="identity",
    hypotheses="hyperbolic map; ω from N(0, s²I), s ∈ {1, 10}; the third statement by Monte Carlo with independent "
               "draws from Corollary C.1's mixture and from p_n (first query): a sequential betting confidence "
               "sequence per output coordinate (the difference is bounded by the value range); exact at M = 1",
    tolerance=1.0,
    units="error in units of each part's threshold: formula and evenness errors / (max|v|(1 + |ω·q| + max|ω·k|)) "
          "over 1e-9; Monte Carlo difference of expectations per output coordinate / max|v| over 0.02",
    cell=_symmetry_cell,
    grid={"smoke": dict(d=[4], M=[8], spread=[1.0], logit_std=[1.0], monte_carlo=[False, True]),
          "quick": dict(d=[1, 16], M=[1, 16], spread=[1.0, 10.0], logit_std=[0.5, 2.0], monte_carlo=[False, True]),
          "full": dict(d=[1, 4, 16, 64], M=[1, 16, 196], spread=[1.0, 10.0], logit_std=[0.25, 1.0, 4.0],
                       monte_carlo=[False, True])},
    where=lambda p, v: not p["monte_carlo"] or p["spread"] == 1.0,
    # a budget per output coordinate, sized from the bound |f_d| <= max|v| (sd of a difference <= √2 max|v|):
    # ((z_α + z_β)√2/0.02)² ≈ 1.4e5 at the quick tier's cell level (smoke: 8e4 for its one Monte Carlo cell, where
    # the betting sequence needs about that); sequential cells stop once decided (M = 1 cells are exact)
    replicates={"smoke": 80_000, "quick": 140_000, "full": 400_000},
    roles=("integrand",), plot_x="M",
)
