r"""``performer.*`` claims on the unbiasedness and MSE of the softmax estimators (Choromanski et al. 2021).

Sec 2.3 (Eq 6, trig unbiasedness), Lemma 1 (Eq 7; F.1, Eq 12), Lemma 2's MSE formulas (Eq 8; F.2) and the
register's derived relative-MSE and single-term-moment predictions. Predictions come from
:mod:`rfkit.theory.softmax`, estimates from :mod:`rfkit.estimators` through the roles of
:mod:`rfkit.validation.adapters`; the method (Monte Carlo domains, exact parts) is described in :mod:`.common`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats

from rfkit.base.numerics import gauss_hermite_rule, logsumexp
from rfkit.estimators import (
    gaussian_kernel,
    softmax_kernel,
)
from rfkit.theory import softmax as theory
from rfkit.validation.claims.performer.common import (
    G_D,
    G_M,
    KINDS,
    MC_CAP_MSE,
    MC_CAP_UNBIASED,
    PAIR_AXES,
    PI,
    _cell_pair,
    _chunk,
    _feature_map,
    _gauss_hermite_mean,
    _is_sweep,
    _kernel_draws,
    _named,
    _projections,
    _relative_error,
    _replicates_for,
    _spread,
    _squared_errors,
    _sweep_axes,
    _worst_over_grid,
)
from rfkit.validation.domain import Choice, Integers, Range
from rfkit.validation.harness import (
    as_features,
    chunks,
    controlled_pair,
    kernel_estimates,
)
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.stats import Evidence, combine, exact_test, mean_test

# ============================================================ v2 pair axes (shared by the ported claims)

#: Why the norm axes stop at 3: the register's sweep G_norm (scaled inputs) ends there.
_NORM_WHY = ("the register's sweep G_norm (scaled inputs) ends at 3; the exact route evaluates every pair of "
             "the sweep, the Monte Carlo route only pairs inside its cap (a method limit, not the domain)")


def _pair_axes(words: str) -> dict:
    """``norm_x``, ``norm_y``, ``angle``: ``x, y`` arbitrary (zero vectors, x = y and x = -y included)."""
    return dict(
        norm_x=Range(f"{words}: ‖x‖ (x = 0 included)", 0.0, math.inf, up_to=(None, 3.0), why=_NORM_WHY),
        norm_y=Range(f"{words}: ‖y‖ (y = 0 included)", 0.0, math.inf, up_to=(None, 3.0), why=_NORM_WHY),
        angle=Range(f"{words}: the angle between x and y (x ∥ y, x = y at equal norms; x = -y at π)", 0.0, PI))


# ======================================================================= Sec 2.3: SM and K_gauss

GAUSS_PARTS = ("i", "ii", "iii")
#: Floor of the MSE comparison in part (iii), relative to SM²: below it the comparison is round-off.
_MSE_FLOOR = 1e-8


def _log_error_scaling(x, y) -> float:
    """(i): ``|log SM(q/d^{1/4}, k/d^{1/4}) - qᵀk/√d|`` with ``q = d^{1/4}x`` (log-space = relative error)."""
    d = x.size
    q, k = x * d**0.25, y * d**0.25
    lhs = softmax_kernel(q[None] / d**0.25, k[None] / d**0.25, log=True)[0, 0]
    return abs(float(lhs) - float(q @ k) / math.sqrt(d))


def _log_error_gauss(x, y) -> float:
    """(ii): ``|log SM(x, y) - (‖x‖²/2 + log K_gauss(x, y) + ‖y‖²/2)|``."""
    lhs = float(softmax_kernel(x[None], y[None], log=True)[0, 0])
    rhs = float(x @ x) / 2 + float(gaussian_kernel(x[None], y[None], log=True)[0, 0]) + float(y @ y) / 2
    return abs(lhs - rhs)


def _mse_transfer_error(ctx: CellContext, x, y, kind: str, projection: str, m: int) -> float:
    """(iii): relative gap between the sample MSE of ``c·SM-hat`` against ``K_gauss`` and ``c²`` times the sample
    MSE of ``SM-hat`` (same 64 draws, ``c = e^{-(‖x‖²+‖y‖²)/2}``) for one estimator."""
    c = math.exp(-(float(x @ x) + float(y @ y)) / 2)
    sm = math.exp(float(x @ y))
    k_gauss = float(gaussian_kernel(x[None], y[None])[0, 0])
    est = _kernel_draws(ctx, kind, x, y, m, projection, 64)
    mse_sm = float(np.mean((est - sm) ** 2))
    mse_gauss = float(np.mean((c * est - k_gauss) ** 2))
    return abs(mse_gauss - c * c * mse_sm) / (c * c * (mse_sm + _MSE_FLOOR * sm * sm))


def _sm_gauss_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    errors = {"i": _log_error_scaling, "ii": _log_error_gauss,
              "iii": lambda x, y: _mse_transfer_error(ctx, x, y, p["kind"], p["projection"], p["m"])}
    return _worst_over_grid(ctx, errors[p["part"]], keep=_part_iii_pair if p["part"] == "iii" else None)


#: ``d`` of the part (iii) cells (the ends of the quick grid): (iii) is algebraic per draw.
_PART_III_D = (1, 32)
#: Pairs of the part (iii) cells (those of the sweep on these norms and angles).
_PART_III_NORMS = (0.0, 0.5, 1.0, 3.0)
_PART_III_ANGLES = (0.0, 2 * PI / 3, PI)


def _part_iii_pair(nx: float, ny: float, angle: float) -> bool:
    return nx in _PART_III_NORMS and ny in _PART_III_NORMS and angle in _PART_III_ANGLES


def _sm_gauss_where(p: dict, variant: str) -> bool:
    if not _is_sweep(p):
        return False
    if p["part"] != "iii":  # (i), (ii) do not involve an estimator: once per d (kind, projection, m unused)
        return p["kind"] == KINDS[0] and p["projection"] == "iid" and p["m"] == 1
    return p["d"] in _PART_III_D


SM_GAUSS_IDENTITY = Claim(
    id="performer.sec2_3.sm_gauss_identity", source="Sec 2.3, Eq 6 and the sentence after it",
    statement="(i) exp(qᵀk/√d) = SM(q/d^{1/4}, k/d^{1/4}); (ii) SM(x,y) = exp(‖x‖²/2) K_gauss(x,y) exp(‖y‖²/2); "
              "(iii) hence an SM estimator times exp(-(‖x‖²+‖y‖²)/2) estimates K_gauss with its MSE multiplied "
              "by exp(-‖x‖²-‖y‖²).",
    kind="identity",
    domain=dict(
        part=Choice("the three statements (i), (ii), (iii)", ("i", "ii", "iii")),
        kind=Choice("(iii) any SM estimator: trig, positive, hyperbolic", tuple(KINDS)),
        projection=Choice("(iii) any SM estimator: iid and orthogonal (R-ORF) projections", ("iid", "orthogonal")),
        m=Integers("(iii) any SM estimator SM-hat_m, m >= 1", 1, math.inf, points=(1,), up_to=64,
                   why="(iii) is algebraic per draw ((c·SM-hat - c·SM)² = c²(SM-hat - SM)²), so m only changes "
                       "the draws"),
        **_pair_axes("x, y ∈ R^d arbitrary (q, k = d^{1/4}x, d^{1/4}y for (i))"),
        d=Integers("x, y ∈ R^d: every d >= 1", 1, math.inf, points=(1,), up_to=32,
                   why="(i)-(ii) are float identities at every d; the full tier runs G_d up to 128")),
    tolerance=1e-9, units="relative error (i, ii: log-space difference; iii: gap / c²(MSE + 1e-8·SM²))",
    cell=_sm_gauss_cell,
    grid=tiers(dict(part=list(GAUSS_PARTS), **_sweep_axes("medium", {}, []), d=[1, 8, 32], kind=list(KINDS),
                    projection=["iid", "orthogonal"], m=[1, 64]),
               smoke=dict(**_sweep_axes("coarse", {}, []), d=[1, 32]),
               full=dict(**_sweep_axes("register", {}, []), d=list(G_D))),
    where=_sm_gauss_where,
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection",), plot_x="d",
    notes="Each cell sweeps every pair of its sweep (SWEEPS; I2 in a random plane of R^d, d = 1: angles 0 and π) and "
          "reports the worst with its pair. (i) and (ii) "
          "in log space at every pair; (iii) the sample MSE of the rescaled estimator against the rescaled sample "
          "MSE on the same 64 draws, for every estimator (trig, positive, hyperbolic; iid and R-ORF; m in "
          f"{{1, 64}}) at the pairs with norms in {_PART_III_NORMS} and angles 0, 2π/3, π (zero vectors, x = y, "
          f"x = -y and the largest norm 3 included) and d in {_PART_III_D}: the identity is algebraic per draw, "
          "so these cells probe round-off, and all pairs × d would multiply their work by ~4.",
)

# ================================================================ unbiasedness (Sec 2.3, Lemma 1)

#: Named Monte Carlo pairs (‖x‖, ‖y‖, angle) for expectation claims.
UNBIASED_PAIRS = {
    "small": (0.5, 0.5, PI / 3),          # s = 0.75,  t = 0.25
    "orthogonal": (1.0, 0.5, PI / 2),     # s = 1.25,  t = 1.25
    "cancel": (1.0, 1.0, 5 * PI / 6),     # s = 0.27,  t = 3.73
    "unequal": (1.0, 0.25, 2 * PI / 3),   # s = 0.81,  t = 1.31
    "opposite": (1.5, 1.5, PI),           # s = 0 (positive, hyperbolic exact), t = 9
    "parallel": (1.0, 1.0, 0.0),          # t = 0 (trig exact), s = 4
}


def _unbiased_mc(ctx: CellContext, kind: str, x, y, m: int, projection: str, test: dict | None = None) -> Evidence:
    """Monte Carlo mean of ``φ(x)ᵀφ(y)`` against ``SM(x, y)`` (exact sd: iid moments, or the R-ORF MSE)."""
    target = math.exp(float(x @ y))
    if projection == "iid":
        mom = theory.estimator_moments(kind, x, y, m)
        sd, skew = mom["sd"], mom["skewness"]
    else:
        sd, skew = math.sqrt(theory.orthogonal_mse(kind, x, y, m)), None
    skew = None if skew is None or math.isnan(skew) else skew
    est = _kernel_draws(ctx, kind, x, y, m, projection, _replicates_for(ctx, sd / target, skew, test=test))
    return mean_test(est, target, scale=target, sd=sd, **(test or ctx.test))


def _trig_unbiased_cell(ctx: CellContext) -> Evidence:
    if ctx.params["route"] == "exact":  # the mean of one projection (= of every m-term mean) by quadrature
        fmap = _feature_map(ctx, "trig")
        return _worst_over_grid(ctx, lambda x, y: _relative_error(_gauss_hermite_mean(fmap, x, y),
                                                             math.exp(float(x @ y))))
    x, y = _cell_pair(ctx)
    return _unbiased_mc(ctx, "trig", x, y, ctx.params["m"], ctx.params["projection"])


def _unbiased_where(kind_of):
    """``where`` of the unbiasedness claims: the exact route on every pair of its sweep, once per ``d`` (iid,
    ``m = 1``: the mean of an m-term mean is that of one term); the Monte Carlo route on the named pairs of
    :data:`UNBIASED_PAIRS` inside the cap ``MC_CAP_UNBIASED``, realisable in ``R^d``."""
    def where(p: dict, variant: str) -> bool:
        if p["route"] == "exact":
            return _is_sweep(p) and p.get("projection", "iid") == "iid" and p["m"] == 1
        return (_named(UNBIASED_PAIRS, p) is not None and _spread(p, kind_of(p)) <= MC_CAP_UNBIASED[kind_of(p)]
                and (p["d"] > 1 or p["angle"] in (0.0, PI)))
    return where


def _unbiased_axes(d_up_to: int, m_up_to: int | None = 16, m_full: int = 64) -> dict:
    """Pair axes, ``d`` and (unless ``m_up_to`` is None) ``m`` of the unbiasedness statements."""
    axes = dict(
        **_pair_axes("SM(x, y) for x, y ∈ R^d"),
        d=Integers("ω ~ N(0, I_d): every d >= 1", 1, math.inf, points=(1,), up_to=d_up_to,
                   why="the estimate depends on ω only through its component in span(x, y), standard normal in "
                       "any d >= 2; the full tier runs G_d up to 128"))
    if m_up_to is not None:
        axes["m"] = Integers("SM-hat_m: every number of features m >= 1", 1, math.inf, points=(1,), up_to=m_up_to,
                             why="an m-term mean has the expectation of one term (exact route, m = 1); the Monte "
                                 f"Carlo route tests the averaging up to m = {m_up_to} (the full tier {m_full})")
    return axes


TRIG_UNBIASED = Claim(
    id="performer.sec2_3.trig_unbiased", source="Sec 2.3",
    statement="SM^trig_m(x, y) = exp((‖x‖²+‖y‖²)/2)(1/m)Σ cos(ω_iᵀ(x-y)) is an unbiased estimator of SM(x, y).",
    kind="expectation",
    domain=dict(projection=Choice("ω_i iid N(0, I_d); the register's ORF variant (R-ORF: m <= d and B.2 blocks, "
                                  "m > d)", ("iid", "orthogonal")),
                **_unbiased_axes(8)),
    tolerance=0.05, units="relative bias",
    cell=_trig_unbiased_cell,
    grid=tiers(dict(route=["exact", "mc"], **_sweep_axes("medium", UNBIASED_PAIRS, ["small", "orthogonal",
                                                                                      "parallel"]),
                    projection=["iid", "orthogonal"], d=[1, 2, 8], m=[1, 4, 16]),
               smoke=dict(**_sweep_axes("coarse", UNBIASED_PAIRS, ["small", "parallel"]), d=[1, 8], m=[1, 16]),
               full=dict(**_sweep_axes("register", UNBIASED_PAIRS, list(UNBIASED_PAIRS)), d=list(G_D),
                         m=[1, 4, 16, 64])),
    replicates=tiers(100_000, smoke=10_000, full=1_000_000),
    where=_unbiased_where(lambda p: "trig"),
    roles=("feature_map.trig", "orthogonal_projection"), plot_x="angle",
    notes="Route axis: 'exact' is the mean of the implemented feature map over one projection ω ~ N(0, I_d) by "
          "2-D Gauss–Hermite quadrature over its component in span(x, y), at every pair of the sweep (SWEEPS; "
          "x = 0, x = y, x = -y included), all in one cell per d (the worst pair in extra): the mean of every m-term "
          "mean, and of R-ORF's whose "
          "rows are marginally N(0, I_d). 'mc' is the Monte Carlo mean of the implementation with m features "
          "(iid, or R-ORF with chi norms: m <= d and B.2 blocks for m > d) against SM with the exact sd (iid "
          f"moments or the R-ORF MSE), on named pairs with ‖x-y‖² <= {MC_CAP_UNBIASED['trig']} (a method limit).",
)


PRF_SERIES_NORMS = (0.0, 0.5, 1.0, 2.0, 3.0, 4.0)


def _eq12_series_error(norm_u: float) -> float:
    """Relative error of Eq 12's series ``Σ_i E[(ωᵀu)^{2i}]/(2i)!`` (Gaussian moments from scipy, halves
    of ``E[(ωᵀu)^{2i}] + E[(-ωᵀu)^{2i}]``) against ``E exp(ωᵀu) = exp(‖u‖²/2)``; odd moments must vanish."""
    law = stats.norm(scale=norm_u) if norm_u > 0 else None
    total, odd = 1.0, 0.0
    for i in range(1, 80):
        even = law.moment(2 * i) if law else 0.0
        total += 0.5 * (even + even) / math.factorial(2 * i)
        odd = max(odd, abs(law.moment(2 * i - 1)) / math.factorial(2 * i - 1) if law else 0.0)
    return max(_relative_error(total, math.exp(norm_u**2 / 2)), odd)


def _quadrature_error(ctx: CellContext, kind: str) -> Evidence:
    """Exact route: the implemented feature map's mean over one ω ~ N(0, I_d) (Gauss–Hermite) against SM at the
    cell's pair."""
    fmap = _feature_map(ctx, kind)
    return _worst_over_grid(ctx, lambda x, y: _relative_error(_gauss_hermite_mean(fmap, x, y), math.exp(float(x @ y))))


def _prf_identity_where(p: dict, variant: str) -> bool:
    if p["route"] == "series":  # deterministic, independent of the integrand, d and the pair: once
        return p["integrand"] == "exp" and p["d"] == 2 and _is_sweep(p)
    return _unbiased_where(lambda q: "positive")(dict(p, m=1), variant)


def _prf_identity_cell(ctx: CellContext) -> Evidence:
    kind = {"exp": "positive", "cosh": "hyperbolic"}[ctx.params["integrand"]]
    route = ctx.params["route"]
    if route == "series":
        errors = [_eq12_series_error(u) for u in PRF_SERIES_NORMS]
        return exact_test(max(errors), 0.0, tolerance=ctx.tolerance, extra=dict(norms=list(PRF_SERIES_NORMS)))
    if route == "exact":
        return _quadrature_error(ctx, kind)
    x, y = _cell_pair(ctx)
    return _unbiased_mc(ctx, kind, x, y, 1, "iid")


PRF_IDENTITY = Claim(
    id="performer.lemma1.prf_identity", source="Lemma 1, Eq 7; proof F.1, Eq 12",
    statement="SM(x,y) = E_ω[exp(ωᵀx - ‖x‖²/2) exp(ωᵀy - ‖y‖²/2)] = Λ E_ω cosh(ωᵀz), z = x + y, ω ~ N(0, I_d); "
              "proof (Eq 12): E exp(ωᵀu) = Σ_i E[(ωᵀu)^{2i}]/(2i)! (odd moments vanish).",
    kind="expectation",
    domain=dict(integrand=Choice("both expectations: E_ω[exp(ωᵀx - ‖x‖²/2) exp(ωᵀy - ‖y‖²/2)] and "
                                 "Λ E_ω cosh(ωᵀz)", ("exp", "cosh")),
                **_unbiased_axes(16, m_up_to=None)),
    tolerance=0.05, units="relative bias (relative error for the series)",
    cell=_prf_identity_cell,
    grid=tiers(dict(route=["exact", "mc", "series"],
                    **_sweep_axes("medium", UNBIASED_PAIRS, ["small", "cancel", "unequal", "opposite"]),
                    integrand=["exp", "cosh"], d=[1, 2, 16]),
               smoke=dict(**_sweep_axes("coarse", UNBIASED_PAIRS, ["cancel", "opposite"]), d=[1, 2, 16]),
               full=dict(**_sweep_axes("register", UNBIASED_PAIRS, list(UNBIASED_PAIRS)), d=list(G_D))),
    replicates=tiers(40_000, smoke=10_000, full=400_000),
    where=_prf_identity_where,
    roles=("feature_map.positive", "feature_map.hyperbolic"), plot_x="angle",
    notes="Route axis: 'exact' is Gauss–Hermite quadrature of the implemented m = 1 positive (exp) and hyperbolic "
          "(cosh) feature maps over ω's component in span(x, y), at every pair of the sweep (SWEEPS; x = 0, x = y, "
          "x = -y included), all in one cell (the worst pair in extra); 'mc' the Monte Carlo mean with one ω per "
          "replicate (exact sd and "
          f"skewness) on the named pairs of UNBIASED_PAIRS with ‖x+y‖² <= {MC_CAP_UNBIASED['positive']} (a method "
          "limit: Monte Carlo noise grows like e^{‖z‖²}); 'series' (one cell) the Eq 12 series from scipy's "
          f"normal moments at ‖u‖ in {PRF_SERIES_NORMS}: beyond ‖u‖ = 4 scipy's moments of order up to 160 lose "
          "accuracy (at ‖u‖ = 6 the evaluator is off by 90%), a limit of the evaluator, so larger ‖z‖ is "
          "covered by the exact route.",
)


def _features(ctx: CellContext, kind: str, x, y, m: int):
    """Features of ``x``, ``y`` over a batch of 256 draws of ``m`` iid projections."""
    omega = _projections(ctx, "iid", 256, m, x.size)
    return as_features(_feature_map(ctx, kind)(np.stack([x, y]), omega))


def _nonpositive(f) -> float:
    """1 if some feature value is ``<= 0`` or not finite in float64, else 0."""
    ok = bool((f.values > 0).all() and np.isfinite(f.values).all() and np.isfinite(f.log_scale).all())
    return 0.0 if ok else 1.0


def _positivity(ctx: CellContext, kind: str, x, y, m: int) -> Evidence:
    """Every feature value of ``φ(x)``, ``φ(y)`` over a batch of draws is ``> 0`` (and finite) in float64."""
    f = _features(ctx, kind, x, y, m)
    return exact_test(_nonpositive(f), 0.0, tolerance=ctx.tolerance,
                      extra=dict(min_value=float(f.values.min()), checked=int(f.values.size)))


def _prf_estimators_cell(ctx: CellContext) -> Evidence:
    kind, m = ctx.params["kind"], ctx.params["m"]
    if ctx.params["route"] == "exact":
        fmap = _feature_map(ctx, kind)
        parts = {"bias": _worst_over_grid(ctx, lambda x, y: _relative_error(_gauss_hermite_mean(fmap, x, y),
                                                                            math.exp(float(x @ y)))),
                 "positivity": _worst_over_grid(ctx, lambda x, y: _nonpositive(_features(ctx, kind, x, y, m)))}
        worst = max(parts.values(), key=lambda e: e.effect if e.effect == e.effect else math.inf)
        return combine(list(parts.values()), extra=dict(worst_pair=worst.extra["worst_pair"],
                                                        **{f"{k}_worst_pair": e.extra["worst_pair"]
                                                           for k, e in parts.items()}))
    x, y = _cell_pair(ctx)
    return combine([_unbiased_mc(ctx, kind, x, y, m, "iid", test=ctx.sub_test(2)), _positivity(ctx, kind, x, y, m)])


PRF_ESTIMATORS = Claim(
    id="performer.lemma1.prf_estimators", source="Lemma 1, last sentence",
    statement="SM⁺_m (h = exp(-‖x‖²/2), f = exp) and SM^hyp+_m (h = 2^{-1/2} exp(-‖x‖²/2), f = exp(±u)) with "
              "ω ~ N(0, I_d) are unbiased estimators of SM(x, y) whose features are all positive.",
    kind="expectation",
    domain=dict(kind=Choice("SM⁺_m (f = exp) and SM^hyp+_m (f = exp(±u))", ("positive", "hyperbolic")),
                **_unbiased_axes(16, m_up_to=64)),
    tolerance=0.05, units="relative bias (positivity: indicator, 1 = some feature <= 0)",
    cell=_prf_estimators_cell,
    grid=tiers(dict(route=["exact", "mc"], **_sweep_axes("medium", UNBIASED_PAIRS, ["small", "cancel", "opposite"]),
                    kind=["positive", "hyperbolic"], d=[1, 2, 16], m=[1, 4, 64]),
               smoke=dict(**_sweep_axes("coarse", UNBIASED_PAIRS, ["cancel", "opposite"]), m=[1, 64]),
               full=dict(**_sweep_axes("register", UNBIASED_PAIRS, list(UNBIASED_PAIRS)), d=list(G_D))),
    replicates=tiers(40_000, smoke=10_000, full=400_000),
    where=_unbiased_where(lambda p: p["kind"]),
    roles=("feature_map.positive", "feature_map.hyperbolic"), plot_x="angle",
    notes="Route axis: 'exact' is the implemented feature map's mean over one ω (Gauss–Hermite over its component "
          "in span(x, y)) against SM, with the positivity check (every feature of 256 draws > 0 and finite in "
          "float64), at every pair of the sweep (SWEEPS; x = 0, x = y, x = -y included), all in one cell "
          "(the worst pair in extra), m = 1 (an m-term mean has the mean of one term); 'mc' the Monte Carlo mean "
          "with m features (exact sd and "
          f"skewness) and positivity, on named pairs of UNBIASED_PAIRS with ‖x+y‖² <= {MC_CAP_UNBIASED['positive']} "
          "(a method limit).",
)

# ====================================================================== Lemma 2: MSEs (iid)

#: Named pairs for MSE claims: (‖x‖, ‖y‖, angle).
MSE_PAIRS = {
    "tiny": (0.1, 0.1, 0.0),              # s = 0.04,  t = 0
    "small": (0.25, 0.25, PI / 3),        # s = 0.19,  t = 0.06
    "cancel": (1.0, 1.0, 5 * PI / 6),     # s = 0.27,  t = 3.73
    "orthogonal": (1.0, 0.5, PI / 2),     # s = 1.25,  t = 1.25
    "obtuse": (1.0, 1.0, 2 * PI / 3),     # s = 1,     t = 3
    "far": (1.5, 1.5, 0.9 * PI),          # s = 0.22,  t = 8.78
}
#: Tighter cap for m < 4, where the squared error of exponential features is most skewed.
MC_CAP_MSE_FEW = {"trig": 16.0, "positive": 0.2, "hyperbolic": 0.2}


def _mse_where(kind_of):
    """``where`` for MSE claims: the exact route on every pair of its sweep; the Monte Carlo route on the named
    pairs (:data:`MSE_PAIRS`) inside the cap of the estimator, with a non-zero MSE (zero-MSE pairs are covered
    exactly)."""
    def where(p: dict, variant: str) -> bool:
        kind = kind_of(p)
        if _is_mse_zipped(p):  # a shared Monte Carlo cell (full tier): every kind of the claim at once
            kinds = tuple(kind) if isinstance(kind, (tuple, list)) else None if "kind" in p else (kind,)
            return (p["route"] == "mc" and kinds is not None and _mc_work_kept(p)
                    and bool(_shared_points(kinds, p["d"], p["m"])))
        if isinstance(kind, (tuple, list)) or any(isinstance(p[a], (tuple, list)) and tuple(p[a]) == v
                                                  for a, v in _MSE_ZIPPED.items()):
            return False
        if p["route"] == "exact":
            return _is_sweep(p)
        if p.get("mc_shared", False) or _named(MSE_PAIRS, p) is None:
            return False
        return _mse_point_kept(kind, p)
    return where


def _mse_point_kept(kind: str, p: dict) -> bool:
    """A Monte Carlo MSE point: inside the cap of the estimator (the tighter one for m < 4), a non-zero MSE, and
    realisable in ``R^d`` (d = 1: angles 0 and π)."""
    cap = (MC_CAP_MSE if p["m"] >= 4 else MC_CAP_MSE_FEW)[kind]
    return 0 < _spread(p, kind) <= cap and (p["d"] > 1 or p["angle"] in (0.0, PI))


#: The named pairs of :data:`MSE_PAIRS` as one tuple per pair axis, zipped (pair i is the i-th entry of each), not
#: a cartesian sweep: the pair axes of the full tier's shared Monte Carlo cells (:func:`_shared_mse_mc`).
_MSE_ZIPPED = dict(zip(PAIR_AXES, (tuple(v) for v in zip(*MSE_PAIRS.values(), strict=True)), strict=True))


def _is_mse_zipped(p: dict) -> bool:
    """The cell's pair axes are exactly the zipped named pairs (:data:`_MSE_ZIPPED`)."""
    return all(isinstance(p[a], (tuple, list)) and tuple(p[a]) == v for a, v in _MSE_ZIPPED.items())


def _shared_points(kinds, d: int, m: int) -> list[tuple[str, str]]:
    """``(kind, pair name)`` of every Monte Carlo point of a shared cell at ``(d, m)`` (:func:`_mse_point_kept`)."""
    return [(kind, name) for name, (nx, ny, angle) in MSE_PAIRS.items() for kind in kinds
            if _mse_point_kept(kind, dict(norm_x=nx, norm_y=ny, angle=angle, d=d, m=m))]


#: Largest ``m·d`` of a Monte Carlo MSE cell: a point draws ~35 000 replicates of m rows of R^d at large m
#: (squared errors of relative sd ~√2, sized at the shared cell's Bonferroni level), so the full grid's large-m ×
#: large-d part (m·d up to 131 072) cost up to minutes a cell. 2048 keeps m = 1024 at d = 1 and d = 2 (the
#: structure-change point: ω's component in span(x, y) is 1-D at d = 1, a standard normal plane at every d >= 2),
#: m = 256 up to d = 8, m = 64 up to d = 32 and m <= 16 at every d; the dropped cells (m = 1024 at d = 3, 4,
#: m = 256 at d = 16, m = 64 at d = 64) are interior corners of the product whose d and m are both tested
#: elsewhere, the law of a replicate being the same at every d >= 2.
MC_MSE_WORK = 2048


def _mc_work_kept(p: dict) -> bool:
    """Monte Carlo route: every ``m`` at small ``d`` and every ``d`` at small ``m``.

    The sampled law of a term depends on ω only through its component in span(x, y) (standard normal in every
    d >= 2), so an implementation's d-dependence shows at any m; every d and every m of the grid keeps cells (d up
    to 4 at m = 1024, m up to 16 at d = 128) and the exact route evaluates Eq 8 at every (d, m). Only the
    large-m × large-d part of the cartesian product is left out. Quick and smoke grids lie entirely below the
    bound."""
    return p["m"] * p["d"] <= MC_MSE_WORK


def _mse_monte_carlo(ctx: CellContext, kind: str, x, y, m: int, prediction: float, scale: float) -> Evidence:
    """Sample MSE against ``prediction`` with the exact sd and skewness of one replicate's squared error."""
    sem = theory.squared_error_moments(kind, x, y, m)
    skew = None if math.isnan(sem["skewness"]) else sem["skewness"]
    n = _replicates_for(ctx, sem["sd"] / scale, skew)
    return mean_test(_squared_errors(ctx, kind, x, y, m, n=n), prediction, scale=scale, sd=sem["sd"],
                     **ctx.test, extra=dict(mse_exact=sem["mean"]))


def _shared_mse_mc(ctx: CellContext, kinds, prediction) -> Evidence:
    """The Monte Carlo route at one ``(d, m)`` for every estimator of ``kinds`` at every named pair of
    :data:`MSE_PAIRS` inside its cap (:func:`_shared_points`), on common iid projections.

    Each replicate draws one ``m × d`` matrix of iid N(0, I_d) rows and evaluates every (estimator, pair) on it: the
    feature map is called once per estimator on all the pairs' inputs stacked (one ``(m, d) × (d, 2P)`` product).
    Every point is the one-point cell's test (:func:`_mse_monte_carlo`: the sample MSE against
    ``prediction(kind, x, y, m)``, exact sd and skewness of a squared error) at the Bonferroni level
    ``alpha / points`` (the engine's per-cell level grows as the cells are that many fewer), on the first ``n_j``
    shared replicates, ``n_j`` sized for the point from its exact moments at that level (common random numbers: the
    points are dependent, which Bonferroni allows). The cell costs what its most demanding point needs, and the
    projections (``n·m·d`` normals, the dominant cost at large ``d``) are drawn once instead of once per point."""
    p = ctx.params
    d, m = p["d"], p["m"]
    names = _shared_points(kinds, d, m)
    test = ctx.sub_test(len(names))
    placed = {name: controlled_pair(*MSE_PAIRS[name], d, ctx.rng) for name in dict.fromkeys(n for _, n in names)}
    plan = []
    for kind, name in names:
        x, y = placed[name]
        sem = theory.squared_error_moments(kind, x, y, m)
        pred = prediction(kind, x, y, m)
        skew = None if math.isnan(sem["skewness"]) else sem["skewness"]
        plan.append((kind, name, pred, sem, _replicates_for(ctx, sem["sd"] / pred, skew, test=test)))
    total = max(n for *_, n in plan)
    columns: list[list[np.ndarray]] = [[] for _ in plan]
    done = 0
    for c in chunks(total, _chunk(m, d)):
        omega = _projections(ctx, "iid", c, m, d)
        for kind in kinds:
            mine = [j for j, q in enumerate(plan) if q[0] == kind and q[4] > done]
            if not mine:
                continue
            xs = np.stack([placed[plan[j][1]][0] for j in mine] + [placed[plan[j][1]][1] for j in mine])
            f = as_features(_feature_map(ctx, kind)(xs, omega))
            k = len(mine)
            vals = f.values.reshape(2 * k, -1, c, m)
            dots = np.einsum("plrm,plrm->pr", vals[:k], vals[k:]) * c
            est = dots * np.exp(f.log_scale[:k] + f.log_scale[k:])[:, None]
            for row, j in enumerate(mine):
                x, y = placed[plan[j][1]]
                columns[j].append((est[row] - math.exp(float(x @ y))) ** 2)
        done += c
    parts = []
    for (kind, name, pred, sem, n), cols in zip(plan, columns, strict=True):
        parts.append(mean_test(np.concatenate(cols)[:n], pred, scale=pred, sd=sem["sd"], **test,
                               extra=dict(kind=kind, pair=name, mse_exact=sem["mean"])))
    worst = max(range(len(parts)), key=lambda i: parts[i].effect if not math.isnan(parts[i].effect) else math.inf)
    ev = combine(parts, extra=dict(m=m, points=len(parts), worst=parts[worst].extra))
    return dataclasses.replace(ev, n=max(e.n for e in parts))


def _lemma2_prediction(kind: str, x, y, m: int) -> float:
    return theory.lemma2_mse(kind, x, y, m)


def _relative_mse_prediction(kind: str, x, y, m: int) -> float:
    return theory.relative_mse(kind, x, y, m) * math.exp(2 * float(x @ y))


def _lemma2_cell(kind: str):
    def cell(ctx: CellContext) -> Evidence:
        m = ctx.params["m"]
        if _is_mse_zipped(ctx.params):
            return _shared_mse_mc(ctx, (kind,), _lemma2_prediction)
        if ctx.params["route"] == "exact":
            return _worst_over_grid(ctx, lambda x, y: _relative_error(
                theory.lemma2_mse(kind, x, y, m), theory.mean_central_moment(kind, x, y, m, 2)))
        x, y = _cell_pair(ctx)
        pred = theory.lemma2_mse(kind, x, y, m)
        return _mse_monte_carlo(ctx, kind, x, y, m, pred, pred)
    return cell


def _mse_axes(d_up_to: int = 3) -> dict:
    """``x, y ∈ R^d`` (pair axes), ``d`` and ``m`` of the Lemma 2 statements."""
    return dict(
        **_pair_axes("x, y ∈ R^d"),
        d=Integers("x, y ∈ R^d, ω_i N(0, I_d): every d >= 1", 1, math.inf, points=(1,), up_to=d_up_to,
                   why="the MSEs depend on x, y only through ‖x‖, ‖y‖ and their angle, not on d (Lemma 2); the "
                       "full tier runs G_d up to 128"),
        m=Integers("SM-hat_m: every number of random features m >= 1", 1, math.inf, points=(1,), up_to=16,
                   why="the MSE of a mean of m iid terms is the single-term MSE over m; the full tier runs G_m up "
                       "to 1024"))


def _mse_grid(mc_pairs: list[str], quick: dict, full_extra: dict | None = None, **extra) -> dict:
    """``route`` (exact sweep / Monte Carlo pairs) × the pair axes × ``d``, ``m`` (and ``extra``) per tier.

    Full tier: the pair axes are the register's sweep (exact route) and the zipped named pairs (:data:`_MSE_ZIPPED`):
    one Monte Carlo cell per ``(d, m)`` sweeps every named pair inside its cap (and, with ``full_extra`` giving the
    kind axis a tuple of every kind, every estimator) on common projections (:func:`_shared_mse_mc`)."""
    sweep = _sweep_axes("register", {}, [])
    return tiers(dict(route=["exact", "mc"], **_sweep_axes("medium", MSE_PAIRS, mc_pairs), **quick, **extra),
                 smoke=dict(**_sweep_axes("coarse", MSE_PAIRS, mc_pairs[:1]), d=[1, 3], m=[1, 16]),
                 full=dict(**{a: [*sweep[a], _MSE_ZIPPED[a]] for a in PAIR_AXES}, d=list(G_D), m=list(G_M),
                           mc_shared=[True], **(full_extra or {})))


_LEMMA2_SOURCES = {"trig": "Lemma 2, Eq 8 (line 1); proof F.2, Eqs 13-15",
                   "positive": "Lemma 2, Eq 8 (line 2); proof F.2, Eqs 16-19",
                   "hyperbolic": "Lemma 2, Eq 8 (line 3); proof F.2, Eq 20"}
_LEMMA2_STATEMENTS = {
    "trig": "MSE(SM^trig_m(x,y)) = (1/(2m)) exp(‖x+y‖²) SM(x,y)^{-2} (1 - exp(-‖x-y‖²))² "
            "(= (1/m) e^{‖x‖²+‖y‖²} Var cos(ωᵀΔ), Var cos(ωᵀΔ) = (1 - e^{-‖Δ‖²})²/2).",
    "positive": "MSE(SM⁺_m(x,y)) = (1/m) exp(‖x+y‖²) SM(x,y)² (1 - exp(-‖x+y‖²)) "
                "(= (1/m) e^{-(‖x‖²+‖y‖²)} (e^{2‖z‖²} - e^{‖z‖²})).",
    "hyperbolic": "MSE(SM^hyp+_m(x,y)) = (1/2)(1 - exp(-‖x+y‖²)) MSE(SM⁺_m(x,y)) "
                  "(= (1/(2m)) e^{-(‖x‖²+‖y‖²)} (e^{‖z‖²} - 1)²).",
}
_LEMMA2_MC_PAIRS = {"trig": ["small", "cancel", "orthogonal", "far"], "positive": ["small", "tiny", "cancel", "far"],
                    "hyperbolic": ["small", "tiny", "cancel", "far"]}
_MSE_NOTES = ("Route axis: 'exact' evaluates Eq 8 against an independent mpmath second central moment of the m-term "
              "mean at every pair of the sweep (SWEEPS: coarse/medium/register = G_norm × G_angle), all in one "
              "cell (the worst pair in extra), covering all x, y (zero vectors, x = y, x = -y included); 'mc' is the "
              "sample MSE of the "
              "implementation (exact sd and skewness of a squared error from central moments up to order 6) on "
              "the named pairs of MSE_PAIRS inside the caps MC_CAP_MSE ({mse}; {few} for m < 4): beyond them the "
              "squared errors are too skewed for a decisive test (a method limit; the exact route covers the "
              "rest), with m·d <= 2048 (MC_MSE_WORK: every m at d <= 2, every d at small m; the exact "
              "route covers every (d, m)). Pairs are placed in a random plane of R^d (I2); d = 1 has the angles 0 and "
              "π only. Full tier: one Monte Carlo cell per (d, m) evaluates every (estimator, named pair) of the "
              "route on common iid projections, each point at the Bonferroni level alpha/points on replicates sized "
              "from its exact moments (_shared_mse_mc).")


def _lemma2_claim(kind: str, name: str) -> Claim:
    return Claim(
        id=f"performer.lemma2.{name}", source=_LEMMA2_SOURCES[kind],
        statement=_LEMMA2_STATEMENTS[kind], kind="moment",
        domain=_mse_axes(),
        tolerance=0.1, units="relative MSE error",
        cell=_lemma2_cell(kind),
        grid=_mse_grid(_LEMMA2_MC_PAIRS[kind], dict(d=[1, 3], m=[1, 4, 16])),
        replicates=tiers(100_000, smoke=100_000, full=2_000_000),
        where=_mse_where(lambda p, k=kind: k),
        roles=(f"feature_map.{kind}",), plot_x="angle",
        notes=_MSE_NOTES.format(mse=MC_CAP_MSE[kind], few=MC_CAP_MSE_FEW[kind]),
    )


MSE_TRIG = _lemma2_claim("trig", "mse_trig")
MSE_POS = _lemma2_claim("positive", "mse_pos")
MSE_HYP = _lemma2_claim("hyperbolic", "mse_hyp")


def _relative_mse_cell(ctx: CellContext) -> Evidence:
    kind, m = ctx.params["kind"], ctx.params["m"]
    if _is_mse_zipped(ctx.params):
        return _shared_mse_mc(ctx, tuple(kind), _relative_mse_prediction)
    if ctx.params["route"] == "exact":
        return _worst_over_grid(ctx, lambda x, y: _relative_error(
            theory.relative_mse(kind, x, y, m) * math.exp(2 * float(x @ y)),
            theory.mean_central_moment(kind, x, y, m, 2)))
    x, y = _cell_pair(ctx)
    sm2 = math.exp(2 * float(x @ y))
    rel = theory.relative_mse(kind, x, y, m)
    return _mse_monte_carlo(ctx, kind, x, y, m, rel * sm2, rel * sm2)


RELATIVE_MSE = Claim(
    id="performer.derived.relative_mse", source="register: derived predictions (from Lemma 2)",
    statement="RelMSE = MSE/SM²: (2/m) sinh²(‖x-y‖²/2) (trig), (e^{‖x+y‖²} - 1)/m (positive), "
              "(2/m) sinh²(‖x+y‖²/2) (hyperbolic); it depends on (x, y) only through ‖x-y‖ or ‖x+y‖.",
    kind="moment",
    domain=dict(kind=Choice("RelMSE of SM^trig_m, SM⁺_m and SM^hyp+_m (iid N(0, I_d) projections)", tuple(KINDS)),
                **_mse_axes()),
    tolerance=0.1, units="relative error of the relative MSE",
    cell=_relative_mse_cell,
    grid=_mse_grid(["small", "cancel", "far"], dict(d=[1, 3], m=[1, 8, 16]),
                   full_extra=dict(kind=[*KINDS, tuple(KINDS)]), kind=list(KINDS)),
    replicates=tiers(80_000, smoke=80_000, full=2_000_000),
    where=_mse_where(lambda p: p["kind"]),
    roles=tuple(f"feature_map.{k}" for k in KINDS), plot_x="angle",
    notes=_MSE_NOTES.format(mse=MC_CAP_MSE, few=MC_CAP_MSE_FEW) + " The exact route at every pair of the sweep "
          "(many pairs with equal ‖x±y‖ and different norms) tests that RelMSE·SM² is the true MSE, hence that "
          "the relative MSE depends on (x, y) only through ‖x-y‖ (trig) or ‖x+y‖ (positive, hyperbolic).",
)

# ------------------------------------------------------------------------- single-term moments

#: Named Monte Carlo pairs for the single-term moment checks: positive/hyperbolic powers T^k need a tiny
#: ‖x+y‖² (T⁴ is log-normal with variance 16‖x+y‖²); trig terms are bounded.
MOMENT_PAIRS = {"tiny": (0.1, 0.1, PI / 3), "cancel": (1.0, 1.0, 0.95 * PI), "spread": (1.0, 1.0, PI / 2),
                "far": (1.5, 1.5, 0.9 * PI)}
MC_CAP_POWER = 0.1
#: Floor of the exact route's scale, relative to ``max|T|^k`` (trig) or ``SM^k``: below it a moment is round-off
#: (central moments at z = 0 or Δ = 0, odd trig moments at large ‖x-y‖).
_MOMENT_FLOOR = 1e-8
#: Nodes of the exact route: Gauss–Hermite per axis (positive, hyperbolic; trig across Δ) and the trapezoid
#: rule along Δ (trig: step, half-width).
_MOMENT_NODES, _TRIG_STEP, _TRIG_HALF_WIDTH = 32, 0.1, 10.0


def _moment_basis(x: np.ndarray, y: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Orthonormal rows spanning ``span(x, y)`` (0, 1 or 2), the first along ``key`` when ``key != 0``."""
    rows: list[np.ndarray] = []
    size = max(1.0, float(np.linalg.norm(x)), float(np.linalg.norm(y)))
    for v in (key, x, y):
        v = v - sum(((v @ r) * r for r in rows), np.zeros_like(v))
        norm = float(np.linalg.norm(v))
        if norm > 1e-12 * size and len(rows) < 2:
            rows.append(v / norm)
    return np.array(rows).reshape(len(rows), x.size)


def _exponential_proposal(kind: str, x, y, k: int, centre: float) -> tuple[np.ndarray, np.ndarray]:
    """Shifts ``r`` (multiples of ``z``) and log mixture weights ``∝ |c_r| e^{r²s/2}`` of the expansion
    ``(T - centre)^k = Σ_r c_r e^{r ωᵀz}`` (``T = Λe^{ωᵀz}`` or ``Λ cosh(ωᵀz)``): the peaks of the integrand."""
    lam = math.exp(-(float(x @ x) + float(y @ y)) / 2)
    base = [(1, lam), (0, -centre)] if kind == "positive" else [(1, lam / 2), (-1, lam / 2), (0, -centre)]
    poly = {0: 1.0}
    for _ in range(k):
        new: dict[int, float] = {}
        for r, c in poly.items():
            for b, cb in base:
                new[r + b] = new.get(r + b, 0.0) + c * cb
        poly = new
    s = float((x + y) @ (x + y))
    rs = np.array([r for r, c in poly.items() if c != 0.0], dtype=np.float64)
    log_w = np.array([math.log(abs(poly[int(r)])) + r * r * s / 2 for r in rs])
    return rs, log_w - logsumexp(log_w)


def _exact_term_moment(feature_map, kind: str, x: np.ndarray, y: np.ndarray, k: int, centre: float = 0.0) -> float:
    """``E[(T - centre)^k]`` of the implemented term ``T = φ(x)ᵀφ(y)`` (one ω ~ N(0, I_d)) by quadrature over ω's
    component in ``span(x, y)``; independent of :mod:`rfkit.theory`.

    Positive, hyperbolic: ``(T - centre)^k`` is a sum of terms ``e^{rωᵀz}`` peaked at ``ω = rz``, outside the
    nodes of a plain rule at large ``k‖z‖``; each is recentred, ``E[e^{aᵀω}g(ω)] = e^{‖a‖²/2}E[g(ω + a)]``, in
    the form of a Gauss–Hermite rule under the mixture ``q = Σ_r π_r N(rz, I)`` of these peaks
    (``E_p f = Σ_r π_r E[f·p/q](ω + rz)``, in log space). The feature map is evaluated at every shifted node, so
    this is the moment of the implementation; the mixture only places the nodes. Trig: bounded, with frequency
    up to ``k‖x-y‖``: a trapezoid rule along ``Δ`` (spectrally accurate for Gaussian-weighted cosines) times
    Gauss–Hermite across it.
    """
    z = x + y
    basis = _moment_basis(x, y, x - y if kind == "trig" else z)
    rank = basis.shape[0]
    if rank == 0:
        t = kernel_estimates(feature_map, x, y, np.zeros((1, x.size)), 1)
        return float((t[0] - centre) ** k)
    if kind == "trig":
        u = np.linspace(-_TRIG_HALF_WIDTH, _TRIG_HALF_WIDTH, int(round(2 * _TRIG_HALF_WIDTH / _TRIG_STEP)) + 1)
        wu = _TRIG_STEP * np.exp(-u * u / 2) / math.sqrt(2 * PI)
        if rank == 1:
            nodes, weights = u[:, None], wu
        else:
            g, w = gauss_hermite_rule(_MOMENT_NODES // 4)
            nodes = np.stack(np.meshgrid(u, g[:, 0], indexing="ij"), axis=-1).reshape(-1, 2)
            weights = np.outer(wu, w).ravel()
        t = kernel_estimates(feature_map, x, y, nodes @ basis, nodes.shape[0])
        return float(weights @ (t - centre) ** k)
    g, w = gauss_hermite_rule(_MOMENT_NODES, d=rank)
    rs, log_pi = _exponential_proposal(kind, x, y, k, centre)
    shifts = np.zeros((rs.size, rank))
    shifts[:, 0] = rs * math.sqrt(float(z @ z))  # z = ‖z‖·basis[0] (z = 0: a single shift 0)
    nodes = (g[None] + shifts[:, None]).reshape(-1, rank)
    log_q_over_p = logsumexp(log_pi[None] + nodes @ shifts.T - 0.5 * (shifts**2).sum(axis=1)[None], axis=1)
    f = kernel_estimates(feature_map, x, y, nodes @ basis, nodes.shape[0]) - centre
    with np.errstate(divide="ignore"):
        log_terms = (k * np.log(np.abs(f)) - log_q_over_p + np.repeat(log_pi, g.shape[0])
                     + np.tile(np.log(w), rs.size))
    finite = np.isfinite(log_terms)
    if not finite.any():
        return 0.0
    top = float(log_terms[finite].max())
    return float(math.exp(top) * (np.sign(f) ** k * np.exp(log_terms - top))[finite].sum())


def _exact_moment_error(ctx: CellContext, kind: str, x, y) -> float:
    """Exact route: the register's formula (through :mod:`rfkit.theory`) against the quadrature moment of the
    implementation. ``power``: ``E T^k``; ``mean4``: ``E(T̄ - SM)⁴ = μ₄/m³ + 3(m-1)μ₂²/m³`` (expanding the
    fourth power of a sum of m iid centred terms) from the quadrature's ``μ₂``, ``μ₄`` of one term."""
    p = ctx.params
    fmap, k = _feature_map(ctx, kind), p["k"]
    sm = math.exp(float(x @ y))
    bound = math.exp(k * (float(x @ x) + float(y @ y)) / 2) if kind == "trig" else sm**k
    if p["moment"] == "power":
        value, formula = _exact_term_moment(fmap, kind, x, y, k), theory.term_raw_moment(kind, x, y, k)
        err = abs(value - formula) / max(abs(formula), _MOMENT_FLOOR * bound)
        return err if err == err else math.inf
    # mean4: one quadrature of μ₂, μ₄ serves every m of the cell (a tuple of m on the full tier)
    mu2, mu4 = (_exact_term_moment(fmap, kind, x, y, j, centre=sm) for j in (2, 4))
    worst = -math.inf
    for m in (p["m"] if isinstance(p["m"], (tuple, list)) else (p["m"],)):
        value, formula = (mu4 + 3 * (m - 1) * mu2 * mu2) / m**3, theory.mean_central_moment(kind, x, y, m, 4)
        err = abs(value - formula) / max(abs(formula), _MOMENT_FLOOR * bound)
        worst = max(worst, err if err == err else math.inf)
    return worst


def _single_term_cell(ctx: CellContext) -> Evidence:
    kind, moment = ctx.params["kind"], ctx.params["moment"]
    if ctx.params["route"] == "exact":
        return _worst_over_grid(ctx, lambda x, y: _exact_moment_error(ctx, kind, x, y))
    x, y = _cell_pair(ctx)
    if moment == "mean4":  # fourth central moment of the m-term mean: κ4/m³ + 3σ⁴/m²
        m, power = ctx.params["m"], 4
        mom = theory.error_power_moments(kind, x, y, m, 4)
        scale = mom["mean"]
    else:
        m, power = 1, ctx.params["k"]
        mom = theory.power_moments(kind, x, y, power)
        scale = math.sqrt(theory.term_raw_moment(kind, x, y, 2 * power))
    skew = None if math.isnan(mom["skewness"]) else mom["skewness"]
    draws = _kernel_draws(ctx, kind, x, y, m, "iid", _replicates_for(ctx, mom["sd"] / scale, skew))
    samples = (draws - math.exp(float(x @ y))) ** 4 if moment == "mean4" else draws**power
    return mean_test(samples, mom["mean"], scale=scale, sd=mom["sd"], **ctx.test)


def _single_term_where(p: dict, variant: str) -> bool:
    """``power`` cells at ``m = 1`` (m unused), ``mean4`` cells at ``k = 4`` (the error's fourth power).

    Exact route: every pair of the sweep at ``d`` in {1, 2} (the moments depend on ω only through its
    component in span(x, y)), ``m`` of the grid for ``mean4``. Monte Carlo route (named pairs of MOMENT_PAIRS,
    ``d >= 2``): powers ``T^k`` (positive/hyperbolic below the cap); ``(T̄ - SM)⁴`` at ``m > 1`` and ``d = 2``
    where its fourth power is skewed little enough for a decisive test: positive below the cap, hyperbolic
    from ``m = 64``, trig from ``‖x-y‖² = 1``."""
    if isinstance(p["m"], (tuple, list)):  # full tier: one exact mean4 cell per (kind, d) sweeps every m
        return p["route"] == "exact" and p["moment"] == "mean4" and p["k"] == 4 and _is_sweep(p) and p["d"] <= 2
    if p["moment"] == "power" and p["m"] != 1 or p["moment"] == "mean4" and p["k"] != 4:
        return False
    if p["route"] == "exact":
        return _is_sweep(p) and p["d"] <= 2 and not (p["moment"] == "mean4" and p.get("m_shared", False))
    if _named(MOMENT_PAIRS, p) is None or p["d"] == 1:
        return False
    spread = _spread(p, p["kind"])
    if p["moment"] == "power":
        return spread > 0 and (p["kind"] == "trig" or spread <= MC_CAP_POWER)
    return p["m"] > 1 and p["d"] == 2 and {"positive": 0 < spread <= MC_CAP_POWER, "hyperbolic": p["m"] >= 64
                                           and 0 < spread <= MC_CAP_POWER, "trig": spread >= 1.0}[p["kind"]]


SINGLE_TERM_MOMENTS = Claim(
    id="performer.derived.single_term_moments", source="register: derived predictions",
    statement="For ψ = Λ e^{ωᵀz}: E ψ^k = Λ^k e^{k²s/2}; for c = cos(ωᵀΔ): E cos(jωᵀΔ) = e^{-j²t/2}, so "
              "E c² = (1 + e^{-2t})/2, E c³ = (3e^{-t/2} + e^{-9t/2})/4, E c⁴ = (3 + 4e^{-2t} + e^{-8t})/8; "
              "E cosh(jωᵀz) = e^{j²s/2}; the fourth central moment of an m-term mean is κ₄/m³ + 3σ⁴/m².",
    kind="moment",
    domain=dict(
        kind=Choice("the terms of the three estimators: ψ = Λe^{ωᵀz} (positive), Λ cosh(ωᵀz) (hyperbolic, "
                    "E cosh(jωᵀz)), e^{(‖x‖²+‖y‖²)/2} c with c = cos(ωᵀΔ) (trig, E cos(jωᵀΔ))", tuple(KINDS)),
        moment=Choice("E ψ^k, E c^k (powers of one term) and the fourth central moment of an m-term mean",
                      ("power", "mean4")),
        k=Integers("E ψ^k, E c², E c³, E c⁴: powers k >= 1 (each k adds the frequency j = k of E cos(jωᵀΔ), "
                   "E cosh(jωᵀz))", 1, math.inf, points=(1, 2, 3, 4), up_to=4,
                   why="the register's named formulas stop at c⁴ and the fourth central moment (the variances of "
                       "sample MSEs it exists for); k > 4 overflows float64 at ‖z‖ = 6 (E T^8 ~ e^{1080})"),
        m=Integers("an m-term mean of iid terms: every m >= 1", 1, math.inf, points=(1,), up_to=16,
                   why="κ₄/m³ + 3σ⁴/m² is algebraic in m given the term's moments; the full tier runs m to 256"),
        **_pair_axes("x, y ∈ R^d (z = x + y, s = ‖z‖², Δ = x - y, t = ‖Δ‖², Λ = e^{-(‖x‖²+‖y‖²)/2})"),
        d=Integers("ω ~ N(0, I_d): every d >= 1", 1, math.inf, points=(1,), up_to=8,
                   why="a term depends on ω only through its component in span(x, y), standard normal in any "
                       "d >= 2; the Monte Carlo route runs d = 8 (the full tier G_d up to 128)")),
    tolerance=0.1,
    units="exact route: relative error of E T^k or E(T̄ - SM)⁴ (scale floored at 1e-8·max|T|^k for trig, "
          "1e-8·SM^k otherwise); Monte Carlo: error relative to the RMS of T^k (k = 1..4) or to μ₄ (m-term mean)",
    cell=_single_term_cell,
    grid=tiers(dict(route=["exact", "mc"], **_sweep_axes("medium", MOMENT_PAIRS, ["tiny", "spread"]),
                    kind=list(KINDS), moment=["power", "mean4"], k=[1, 2, 3, 4], d=[1, 2, 8], m=[1, 4, 16]),
               smoke=dict(**_sweep_axes("coarse", MOMENT_PAIRS, ["tiny", "spread"]), m=[1, 16]),
               # full: the exact mean4 cells take m as one tuple (one quadrature of μ₂, μ₄ per pair serves every m)
               full=dict(**_sweep_axes("register", MOMENT_PAIRS, list(MOMENT_PAIRS)), d=list(G_D),
                         m=[1, 4, 16, 64, 256, (1, 4, 16, 64, 256)], m_shared=[True])),
    replicates=tiers(80_000, full=1_000_000),
    where=_single_term_where,
    roles=tuple(f"feature_map.{k}" for k in KINDS), plot_x="k",
    notes="Route axis: 'exact' is the register's formula (rfkit.theory) against the moment of the implemented "
          "term computed by quadrature over ω's component in span(x, y), independently of rfkit.theory "
          "(_exact_term_moment: positive/hyperbolic (T - c)^k expanded into exponentials e^{rωᵀz}, each "
          "recentred at its peak rz through a Gauss–Hermite mixture rule, in log space; trig a trapezoid rule "
          "along Δ), at every pair of the sweep (SWEEPS; x = 0, x = y, x = -y and ‖x‖ = ‖y‖ = 3 included), all in "
          "one cell (the worst pair in extra), d in {1, 2}; the m-term fourth central moment from the quadrature's "
          "μ₂, μ₄ by "
          "expanding E(Σ(T_i - μ))⁴. Checked against mpmath in tests. 'mc' is the Monte Carlo mean of T^k or "
          "(T̄ - SM)⁴ of the implementation (exact sd and skewness from moments of order 2k and 3k) on named "
          f"pairs of MOMENT_PAIRS: positive/hyperbolic with ‖x+y‖² <= {MC_CAP_POWER} (T⁴ is log-normal with "
          "variance 16‖x+y‖², a method limit), d in {2, 8}.",
)

# ====================================================================== Lemma 2: SM → 0 limits
