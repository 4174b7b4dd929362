r"""``performer.*`` claims on the unbiasedness and MSE of the softmax estimators (Choromanski et al. 2021).

Sec 2.3 (Eq 6, trig unbiasedness), Lemma 1 (Eq 7; F.1, Eq 12), Lemma 2's MSE formulas (Eq 8; F.2) and the
register's derived relative-MSE and single-term-moment predictions. Predictions come from
:mod:`rfkit.theory.softmax`, estimates from :mod:`rfkit.estimators` through the roles of
:mod:`rfkit.validation.adapters`; the method (Monte Carlo domains, exact parts) is described in :mod:`.common`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

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
    PI,
    SWEEPS,
    _feature_map,
    _gauss_hermite_mean,
    _kernel_draws,
    _named_pair,
    _pair_spread,
    _projections,
    _relative_error,
    _replicates_for,
    _squared_errors,
    _worst_over_grid,
)
from rfkit.validation.harness import (
    as_features,
)
from rfkit.validation.model import CellContext, Claim
from rfkit.validation.stats import Evidence, combine, exact_test, mean_test

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


def _mse_transfer_error(ctx: CellContext, x, y) -> float:
    """(iii): worst relative gap between the sample MSE of ``c·SM-hat`` against ``K_gauss`` and ``c²`` times
    the sample MSE of ``SM-hat`` (same draws, ``c = e^{-(‖x‖²+‖y‖²)/2}``) over kinds and projections."""
    c = math.exp(-(float(x @ x) + float(y @ y)) / 2)
    sm = math.exp(float(x @ y))
    k_gauss = float(gaussian_kernel(x[None], y[None])[0, 0])
    worst = 0.0
    for kind in KINDS:
        for projection in ("iid", "orthogonal"):
            est = _kernel_draws(ctx, kind, x, y, 4, projection, 64)
            mse_sm = float(np.mean((est - sm) ** 2))
            mse_gauss = float(np.mean((c * est - k_gauss) ** 2))
            worst = max(worst, abs(mse_gauss - c * c * mse_sm) / (c * c * (mse_sm + _MSE_FLOOR * sm * sm)))
    return worst


def _sm_gauss_cell(ctx: CellContext) -> Evidence:
    errors = {"i": lambda x, y: _log_error_scaling(x, y), "ii": lambda x, y: _log_error_gauss(x, y),
              "iii": lambda x, y: _mse_transfer_error(ctx, x, y)}
    norms = tuple(n for n in SWEEPS[ctx.params["sweep"]][0] if n <= 2.0) if ctx.params["part"] == "iii" else None
    return _worst_over_grid(ctx, errors[ctx.params["part"]], norms)


SM_GAUSS_IDENTITY = Claim(
    id="performer.sec2_3.sm_gauss_identity", paper="performer", source="Sec 2.3, Eq 6 and the sentence after it",
    statement="(i) exp(qᵀk/√d) = SM(q/d^{1/4}, k/d^{1/4}); (ii) SM(x,y) = exp(‖x‖²/2) K_gauss(x,y) exp(‖y‖²/2); "
              "(iii) hence an SM estimator times exp(-(‖x‖²+‖y‖²)/2) estimates K_gauss with its MSE multiplied "
              "by exp(-‖x‖²-‖y‖²).",
    kind="identity",
    hypotheses="x, y arbitrary: I2 pairs over G_norm × G_angle (norms <= 2 for the sampled part iii), d in G_d; "
               "(iii) with every estimator (trig, positive, hyperbolic; iid and ORF; m = 4, 64 draws)",
    tolerance=1e-9, units="relative error (i, ii: log-space difference; iii: gap / c²(MSE + 1e-8·SM²))",
    cell=_sm_gauss_cell,
    grid={"smoke": dict(sweep=["coarse"], d=[1, 4], part=list(GAUSS_PARTS)),
          "quick": dict(sweep=["medium"], d=[1, 2, 3, 8, 32], part=list(GAUSS_PARTS)),
          "full": dict(sweep=["register"], d=list(G_D), part=list(GAUSS_PARTS))},
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection",), plot_x="d",
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


def _unbiased_quadrature(ctx: CellContext, kind: str) -> Evidence:
    """Exact part: the feature map's mean (Gauss–Hermite) against ``SM`` at every pair of ``G_norm × G_angle``."""
    fmap = _feature_map(ctx, kind)
    return _worst_over_grid(ctx, lambda x, y: _relative_error(_gauss_hermite_mean(fmap, x, y), math.exp(float(x @ y))))


def _trig_unbiased_cell(ctx: CellContext) -> Evidence:
    if ctx.params["pair"] == "quadrature":
        return _unbiased_quadrature(ctx, "trig")
    x, y = _named_pair(UNBIASED_PAIRS, ctx)
    return _unbiased_mc(ctx, "trig", x, y, ctx.params["m"], ctx.params["projection"])


def _in_mc_domain(kind: str, p: dict) -> bool:
    """A named pair inside the Monte Carlo domain of ``kind`` (and realisable in ``d = 1``: angle 0 or π)."""
    nx, ny, angle = UNBIASED_PAIRS[p["pair"]]
    realisable = p["d"] > 1 or angle in (0.0, PI)
    return realisable and _pair_spread(UNBIASED_PAIRS, p["pair"], kind) <= MC_CAP_UNBIASED[kind]


def _trig_unbiased_domain(p: dict, variant: str) -> bool:
    if p["pair"] == "quadrature":  # exact part: iid mean of one projection, once per d
        return p["projection"] == "iid" and p["m"] == 4
    return _in_mc_domain("trig", p)


TRIG_UNBIASED = Claim(
    id="performer.sec2_3.trig_unbiased", paper="performer", source="Sec 2.3",
    statement="SM^trig_m(x, y) = exp((‖x‖²+‖y‖²)/2)(1/m)Σ cos(ω_iᵀ(x-y)) is an unbiased estimator of SM(x, y).",
    kind="expectation",
    hypotheses="ω_i iid N(0, I_d) (and the ORF variant: R-ORF with chi norms, m <= d and B.2 blocks). Monte "
               f"Carlo on I2 pairs with ‖x-y‖² <= {MC_CAP_UNBIASED['trig']} (exact sd from theory); every pair of "
               "G_norm × G_angle through the exact mean of the feature map (Gauss–Hermite, iid)",
    tolerance=0.05, units="relative bias",
    cell=_trig_unbiased_cell,
    grid={"smoke": dict(sweep=["coarse"], projection=["iid", "orthogonal"], d=[4], m=[4], pair=["small", "quadrature"]),
          "quick": dict(sweep=["medium"], projection=["iid", "orthogonal"], d=[2, 8], m=[1, 4, 16],
                        pair=["small", "orthogonal", "parallel", "quadrature"]),
          "full": dict(sweep=["register"], projection=["iid", "orthogonal"], d=list(G_D), m=[1, 4, 64],
                       pair=list(UNBIASED_PAIRS) + ["quadrature"])},
    replicates={"smoke": 10_000, "quick": 100_000, "full": 1_000_000},
    where=_trig_unbiased_domain,
    roles=("feature_map.trig", "orthogonal_projection"), plot_x="pair",
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


def _prf_identity_domain(p: dict, variant: str) -> bool:
    if p["pair"] == "series":  # deterministic, independent of the integrand and of d: once
        return p["integrand"] == "exp" and p["d"] == 2
    return p["pair"] == "quadrature" or _in_mc_domain("positive", p)


def _prf_identity_cell(ctx: CellContext) -> Evidence:
    kind = {"exp": "positive", "cosh": "hyperbolic"}[ctx.params["integrand"]]
    pair = ctx.params["pair"]
    if pair == "series":
        errors = [_eq12_series_error(u) for u in PRF_SERIES_NORMS]
        return exact_test(max(errors), 0.0, tolerance=ctx.tolerance, extra=dict(norms=list(PRF_SERIES_NORMS)))
    if pair == "quadrature":
        return _unbiased_quadrature(ctx, kind)
    x, y = _named_pair(UNBIASED_PAIRS, ctx)
    return _unbiased_mc(ctx, kind, x, y, 1, "iid")


PRF_IDENTITY = Claim(
    id="performer.lemma1.prf_identity", paper="performer", source="Lemma 1, Eq 7; proof F.1, Eq 12",
    statement="SM(x,y) = E_ω[exp(ωᵀx - ‖x‖²/2) exp(ωᵀy - ‖y‖²/2)] = Λ E_ω cosh(ωᵀz), z = x + y, ω ~ N(0, I_d); "
              "proof (Eq 12): E exp(ωᵀu) = Σ_i E[(ωᵀu)^{2i}]/(2i)! (odd moments vanish).",
    kind="expectation",
    hypotheses="x, y arbitrary, ω ~ N(0, I_d). Monte Carlo (one ω per replicate: the m = 1 positive and "
               f"hyperbolic features) on I2 pairs with ‖x+y‖² <= {MC_CAP_UNBIASED['positive']}; every pair of "
               "G_norm × G_angle by Gauss–Hermite quadrature of the feature maps; the Eq 12 series for "
               f"‖u‖ in {PRF_SERIES_NORMS}",
    tolerance=0.05, units="relative bias (relative error for the series)",
    cell=_prf_identity_cell,
    grid={"smoke": dict(sweep=["coarse"], integrand=["exp", "cosh"], d=[2], pair=["cancel", "quadrature", "series"]),
          "quick": dict(sweep=["medium"], integrand=["exp", "cosh"], d=[1, 2, 16],
                        pair=["small", "cancel", "unequal", "opposite", "quadrature", "series"]),
          "full": dict(sweep=["register"], integrand=["exp", "cosh"], d=list(G_D),
                       pair=list(UNBIASED_PAIRS) + ["quadrature", "series"])},
    replicates={"smoke": 10_000, "quick": 40_000, "full": 400_000},
    where=_prf_identity_domain,
    roles=("feature_map.positive", "feature_map.hyperbolic"), plot_x="pair",
)


def _positivity(ctx: CellContext, kind: str, x, y, m: int) -> Evidence:
    """Every feature value of ``φ(x)``, ``φ(y)`` over a batch of draws is ``> 0`` (and finite) in float64."""
    omega = _projections(ctx, "iid", 256, m, x.size)
    f = as_features(_feature_map(ctx, kind)(np.stack([x, y]), omega))
    dense_ok = bool((f.values > 0).all() and np.isfinite(f.values).all() and np.isfinite(f.log_scale).all())
    return exact_test(0.0 if dense_ok else 1.0, 0.0, tolerance=ctx.tolerance,
                      extra=dict(min_value=float(f.values.min()), checked=int(f.values.size)))


def _prf_estimators_cell(ctx: CellContext) -> Evidence:
    kind, pair = ctx.params["kind"], ctx.params["pair"]
    if pair == "quadrature":
        return _unbiased_quadrature(ctx, kind)
    x, y = _named_pair(UNBIASED_PAIRS, ctx)
    return combine([_unbiased_mc(ctx, kind, x, y, ctx.params["m"], "iid", test=ctx.sub_test(2)),
                    _positivity(ctx, kind, x, y, ctx.params["m"])])


def _prf_estimators_domain(p: dict, variant: str) -> bool:
    if p["pair"] == "quadrature":  # exact part: independent of m, once per d
        return p["m"] == 4
    return _in_mc_domain("positive", p)


PRF_ESTIMATORS = Claim(
    id="performer.lemma1.prf_estimators", paper="performer", source="Lemma 1, last sentence",
    statement="SM⁺_m (h = exp(-‖x‖²/2), f = exp) and SM^hyp+_m (h = 2^{-1/2} exp(-‖x‖²/2), f = exp(±u)) with "
              "ω ~ N(0, I_d) are unbiased estimators of SM(x, y) whose features are all positive.",
    kind="expectation",
    hypotheses="ω_i iid N(0, I_d); x, y arbitrary. Monte Carlo on I2 pairs with "
               f"‖x+y‖² <= {MC_CAP_UNBIASED['positive']} (exact sd and skewness), m in {{1, 4, 64}}; every pair of "
               "G_norm × G_angle through Gauss–Hermite quadrature of the feature map; positivity: every feature "
               "of 256 draws > 0 in float64",
    tolerance=0.05, units="relative bias (positivity: indicator, 1 = some feature <= 0)",
    cell=_prf_estimators_cell,
    grid={"smoke": dict(sweep=["coarse"], kind=["positive", "hyperbolic"], d=[2], m=[4], pair=["cancel", "quadrature"]),
          "quick": dict(sweep=["medium"], kind=["positive", "hyperbolic"], d=[2, 16], m=[1, 4, 64],
                        pair=["small", "cancel", "opposite", "quadrature"]),
          "full": dict(sweep=["register"], kind=["positive", "hyperbolic"], d=list(G_D), m=[1, 4, 64],
                       pair=list(UNBIASED_PAIRS) + ["quadrature"])},
    replicates={"smoke": 10_000, "quick": 40_000, "full": 400_000},
    where=_prf_estimators_domain,
    roles=("feature_map.positive", "feature_map.hyperbolic"), plot_x="pair",
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


def _mse_domain(kind_of):
    """``where`` for MSE claims: exact cells (pair ``exact``) everywhere; Monte Carlo pairs inside the cap
    of the estimator, with a non-zero MSE (zero-MSE pairs are covered exactly)."""
    def where(p: dict, variant: str) -> bool:
        kind = kind_of(p)
        if p["pair"] == "exact":
            return True
        spread = _pair_spread(MSE_PAIRS, p["pair"], kind)
        angle = MSE_PAIRS[p["pair"]][2]
        cap = (MC_CAP_MSE if p["m"] >= 4 else MC_CAP_MSE_FEW)[kind]
        return 0 < spread <= cap and (p["d"] > 1 or angle in (0.0, PI))
    return where




def _mse_monte_carlo(ctx: CellContext, kind: str, x, y, m: int, prediction: float, scale: float) -> Evidence:
    """Sample MSE against ``prediction`` with the exact sd and skewness of one replicate's squared error."""
    sem = theory.squared_error_moments(kind, x, y, m)
    skew = None if math.isnan(sem["skewness"]) else sem["skewness"]
    n = _replicates_for(ctx, sem["sd"] / scale, skew)
    return mean_test(_squared_errors(ctx, kind, x, y, m, n=n), prediction, scale=scale, sd=sem["sd"],
                     **ctx.test, extra=dict(mse_exact=sem["mean"]))


def _lemma2_cell(kind: str):
    def cell(ctx: CellContext) -> Evidence:
        m = ctx.params["m"]
        if ctx.params["pair"] == "exact":
            return _worst_over_grid(ctx, lambda x, y: _relative_error(
                theory.lemma2_mse(kind, x, y, m), theory.mean_central_moment(kind, x, y, m, 2)))
        x, y = _named_pair(MSE_PAIRS, ctx)
        pred = theory.lemma2_mse(kind, x, y, m)
        return _mse_monte_carlo(ctx, kind, x, y, m, pred, pred)
    return cell


def _mse_grid(mc_pairs: list[str], extra: dict | None = None) -> dict:
    extra = extra or {}
    return {"smoke": dict(sweep=["coarse"], d=[2], m=[4], pair=mc_pairs[:1] + ["exact"], **extra),
            "quick": dict(sweep=["medium"], d=[1, 3], m=[1, 4, 16], pair=mc_pairs + ["exact"], **extra),
            "full": dict(sweep=["register"], d=list(G_D), m=list(G_M), pair=list(MSE_PAIRS) + ["exact"], **extra)}


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
_LEMMA2_REPLICATES = {"smoke": 20_000, "quick": 100_000, "full": 2_000_000}


def _lemma2_claim(kind: str, name: str) -> Claim:
    return Claim(
        id=f"performer.lemma2.{name}", paper="performer", source=_LEMMA2_SOURCES[kind],
        statement=_LEMMA2_STATEMENTS[kind], kind="moment",
        hypotheses="x, y in R^d; ω_i independent N(0, I_d). Monte Carlo (sample MSE with the exact sd and "
                   "skewness of a squared error, from exact central moments up to order 6) on I2 pairs with "
                   f"{'‖x-y‖²' if kind == 'trig' else '‖x+y‖²'} <= {MC_CAP_MSE[kind]} ({MC_CAP_MSE_FEW[kind]} for "
                   "m < 4; cap: beyond it the "
                   "squared errors are too skewed for a decisive test); every pair of G_norm × G_angle exactly "
                   "(Eq 8 against the mpmath second central moment of the m-term mean)",
        tolerance=0.1, units="relative MSE error",
        cell=_lemma2_cell(kind), grid=_mse_grid(_LEMMA2_MC_PAIRS[kind]), replicates=_LEMMA2_REPLICATES,
        where=_mse_domain(lambda p, k=kind: k),
        roles=(f"feature_map.{kind}",), plot_x="pair",
    )


MSE_TRIG = _lemma2_claim("trig", "mse_trig")
MSE_POS = _lemma2_claim("positive", "mse_pos")
MSE_HYP = _lemma2_claim("hyperbolic", "mse_hyp")


def _relative_mse_cell(ctx: CellContext) -> Evidence:
    kind, m = ctx.params["kind"], ctx.params["m"]
    if ctx.params["pair"] == "exact":
        return _worst_over_grid(ctx, lambda x, y: _relative_error(
            theory.relative_mse(kind, x, y, m) * math.exp(2 * float(x @ y)),
            theory.mean_central_moment(kind, x, y, m, 2)))
    x, y = _named_pair(MSE_PAIRS, ctx)
    sm2 = math.exp(2 * float(x @ y))
    rel = theory.relative_mse(kind, x, y, m)
    return _mse_monte_carlo(ctx, kind, x, y, m, rel * sm2, rel * sm2)


RELATIVE_MSE = Claim(
    id="performer.derived.relative_mse", paper="performer", source="register: derived predictions (from Lemma 2)",
    statement="RelMSE = MSE/SM²: (2/m) sinh²(‖x-y‖²/2) (trig), (e^{‖x+y‖²} - 1)/m (positive), "
              "(2/m) sinh²(‖x+y‖²/2) (hyperbolic); it depends on (x, y) only through ‖x-y‖ or ‖x+y‖.",
    kind="moment",
    hypotheses="iid N(0, I_d) projections. Monte Carlo on I2 pairs inside the MSE caps "
               f"{MC_CAP_MSE} ({MC_CAP_MSE_FEW} for m < 4); exactly (against the mpmath central moment) at every "
               "pair of G_norm × G_angle (which covers many pairs with equal ‖x±y‖ and different norms)",
    tolerance=0.1, units="relative error of the relative MSE",
    cell=_relative_mse_cell,
    grid={"smoke": dict(sweep=["coarse"], kind=list(KINDS), d=[3], m=[2], pair=["small", "exact"]),
          "quick": dict(sweep=["medium"], kind=list(KINDS), d=[3], m=[1, 8], pair=["small", "cancel", "far", "exact"]),
          "full": dict(sweep=["register"], kind=list(KINDS), d=list(G_D), m=list(G_M),
                       pair=list(MSE_PAIRS) + ["exact"])},
    replicates={"smoke": 40_000, "quick": 80_000, "full": 2_000_000},
    where=_mse_domain(lambda p: p["kind"]),
    roles=tuple(f"feature_map.{k}" for k in KINDS), plot_x="pair",
)

# ------------------------------------------------------------------------- single-term moments

#: Pairs for the single-term moment checks: positive/hyperbolic powers T^k need a tiny ‖x+y‖² (T⁴ is
#: log-normal with variance 16‖x+y‖²); trig terms are bounded.
MOMENT_PAIRS = {"tiny": (0.1, 0.1, PI / 3), "cancel": (1.0, 1.0, 0.95 * PI), "spread": (1.0, 1.0, PI / 2),
                "far": (1.5, 1.5, 0.9 * PI)}
MC_CAP_POWER = 0.1
MOMENT_ORDERS = ("1", "2", "3", "4", "mean4")


def _single_term_cell(ctx: CellContext) -> Evidence:
    kind, order = ctx.params["kind"], ctx.params["order"]
    x, y = _named_pair(MOMENT_PAIRS, ctx)
    if order == "mean4":  # fourth central moment of the m-term mean: κ4/m³ + 3σ⁴/m²
        m, power = ctx.params["m"], 4
        mom = theory.error_power_moments(kind, x, y, m, 4)
        scale = mom["mean"]
    else:
        m, power = 1, int(order)
        mom = theory.power_moments(kind, x, y, power)
        scale = math.sqrt(theory.term_raw_moment(kind, x, y, 2 * power))
    skew = None if math.isnan(mom["skewness"]) else mom["skewness"]
    draws = _kernel_draws(ctx, kind, x, y, m, "iid", _replicates_for(ctx, mom["sd"] / scale, skew))
    samples = (draws - math.exp(float(x @ y))) ** 4 if order == "mean4" else draws**power
    return mean_test(samples, mom["mean"], scale=scale, sd=mom["sd"], **ctx.test)


def _single_term_domain(p: dict, variant: str) -> bool:
    """Powers ``T^k`` at ``m = 1`` (positive/hyperbolic below the cap). ``(T̄ - SM)⁴`` at ``m > 1`` and ``d = 2``
    (its law does not depend on d) where its fourth power is skewed little enough for a decisive test:
    positive below the cap, hyperbolic from ``m = 64``, trig from ``‖x-y‖² = 1``."""
    spread = _pair_spread(MOMENT_PAIRS, p["pair"], p["kind"])
    if p["order"] != "mean4":
        return p["m"] == 1 and spread > 0 and (p["kind"] == "trig" or spread <= MC_CAP_POWER)
    return p["m"] > 1 and p["d"] == 2 and {"positive": 0 < spread <= MC_CAP_POWER, "hyperbolic": p["m"] >= 64
                                           and 0 < spread <= MC_CAP_POWER, "trig": spread >= 1.0}[p["kind"]]


SINGLE_TERM_MOMENTS = Claim(
    id="performer.derived.single_term_moments", paper="performer", source="register: derived predictions",
    statement="For ψ = Λ e^{ωᵀz}: E ψ^k = Λ^k e^{k²s/2}; for c = cos(ωᵀΔ): E cos(jωᵀΔ) = e^{-j²t/2}, so "
              "E c² = (1 + e^{-2t})/2, E c³ = (3e^{-t/2} + e^{-9t/2})/4, E c⁴ = (3 + 4e^{-2t} + e^{-8t})/8; "
              "E cosh(jωᵀz) = e^{j²s/2}; the fourth central moment of an m-term mean is κ₄/m³ + 3σ⁴/m².",
    kind="moment",
    hypotheses="ω ~ N(0, I_d); terms of the three estimators (trig, positive, hyperbolic), powers k = 1..4 "
               f"of one term (positive/hyperbolic with ‖x+y‖² <= {MC_CAP_POWER}: T⁴ is log-normal with "
               "variance 16‖x+y‖²), and (T̄ - SM)⁴ of m-term means; exact sd from moments of order 2k and 8",
    tolerance=0.1, units="error relative to the RMS of T^k (k = 1..4) or to μ₄ (m-term mean)",
    cell=_single_term_cell,
    grid={"smoke": dict(kind=list(KINDS), order=["4", "mean4"], d=[2], m=[1, 4], pair=["tiny", "spread"]),
          "quick": dict(kind=list(KINDS), order=list(MOMENT_ORDERS), d=[2, 8], m=[1, 4, 16],
                        pair=["tiny", "spread"]),
          "full": dict(kind=list(KINDS), order=list(MOMENT_ORDERS), d=list(G_D), m=[1, 4, 16, 64, 256],
                       pair=list(MOMENT_PAIRS))},
    replicates={"smoke": 40_000, "quick": 80_000, "full": 1_000_000},
    where=_single_term_domain,
    roles=tuple(f"feature_map.{k}" for k in KINDS), plot_x="order",
)

# ====================================================================== Lemma 2: SM → 0 limits
