"""``performer.*`` claims on beautiful functions (App. F.4): Remark 1, Eqs 38-43, 54-74, Lemmas 4-6,
Theorems 3, 5 and 6, and the derived MGF and projection-law predictions.

Register: ``../shared/claims/performer.md``; estimator ``rfkit.estimators.beautiful`` (performer.est.beautiful_mc),
theory ``rfkit.theory.beautiful``. Each check compares measurements (Monte Carlo through the estimators, or
quadrature) with predictions from the theory module; deterministic statements are decided exactly.

Roles (``ctx.impl``): ``beautiful.terms`` — ``f(z, g, law, m, *, rng, orthogonal, size) -> (size, m)`` terms
``g(ω_iᵀz)`` (see :func:`rfkit.estimators.beautiful.beautiful_terms`); ``feature_map.positive`` — the SMREG
estimator of Theorem 3 is built from it with spherical or ``√d``-norm orthogonal projections.

Budget notes: a Haar frame costs about 1 µs per row, so Monte Carlo over orthogonal ensembles dominates;
quick grids keep ``d·m·replicates`` small and use the exact parts (quadrature, series) for the rest of the
domain. Tail-bound cells with a negative right-hand side need no Monte Carlo at all (a probability cannot
be below 0), and a bound ``>= 1 - tolerance`` cannot be violated by more than the tolerance.

Findings (see the claims' notes): the corrections of Theorem 5 (Eq 41), Eq 68 and Theorem 3's orthogonal bound
are not invariant under ``g -> λg, θ -> θ/λ`` (they scale by ``λ^{m-4}``) while the quantities they bound are;
for small enough scales the right-hand sides become negative, and the three statements fail with exact witnesses.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from scipy import special, stats

from rfkit.estimators import positive_features
from rfkit.estimators.beautiful import IsotropicLaw, Maclaurin, beautiful_projections, beautiful_terms
from rfkit.theory import beautiful as bt
from rfkit.validation.claims.performer.common import _replicates_for
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.harness import chunks, controlled_pair, kernel_estimates, replicate_projections
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import (
    Evidence,
    binomial_test,
    combine,
    exact_test,
    flagged,
    ks_test,
    mean_test,
    required_replicates,
    sequential_mean,
)

# ------------------------------------------------------------------------------------ shared inputs

#: Isotropic laws of the register's sweeps: radial law and radius in units of √d.
OMEGAS = {"gaussian": ("chi", None), "reg": ("sqrt_d", None), "uniform": ("uniform", 2.0),
          "half": ("fixed", 0.5), "double": ("fixed", 2.0)}

#: The register's g families (non-negative Maclaurin coefficients).
G_FAMILIES = {
    "exp": Maclaurin.exp(), "exp/1000": Maclaurin.exp(1e-3), "exp/100": Maclaurin.exp(1e-2),
    "exp/10": Maclaurin.exp(0.1), "10exp": Maclaurin.exp(10.0), "cosh": Maclaurin.cosh(),
    "1+u+u2": Maclaurin.polynomial(1, 1, 1), "u+u2": Maclaurin.polynomial(0, 1, 1),
    "2+u2": Maclaurin.polynomial(2, 0, 1), "u2": Maclaurin.polynomial(0, 0, 1),
    "u4": Maclaurin.polynomial(0, 0, 0, 0, 1), "u+u3": Maclaurin.polynomial(0, 1, 0, 1),
}

#: G_m^≤ of the register: m as a rule in d.
M_RULES = ("1", "2", "3", "d/2", "d-1", "d")
G_D = (1, 2, 3, 4, 8, 16, 32, 64, 128)

#: θ grid of the tail-bound claims (one value per decade, 1e-3 .. 1e4); the minimising θ is added.
THETAS = tuple(10.0**k for k in range(-3, 5))

#: Nelder-Mead iterations per search restart (the corner scan of restart 0 comes on top); a tier searches deeper
#: through more restarts (``restarts``), not through the tier's name: the full tier's 8x restarts keep the effort of
#: its former 1000-iteration restarts.
SEARCH_ITERATIONS = 120

#: Tail-bound and probability units: an excess of two percentage points of exceedance probability.
TAIL_TOLERANCE = 0.02


def _law(name: str, d: int) -> IsotropicLaw:
    radial, k = OMEGAS[name]
    return IsotropicLaw(d, radial, None if k is None else k * math.sqrt(d))


def _m(rule: str, d: int) -> int:
    return {"1": 1, "2": 2, "3": 3, "d/2": d // 2, "d-1": d - 1, "d": d}[rule]


def _m_ok(p: dict, minimum: int = 1) -> bool:
    """``m`` rule inside ``[minimum, d]``, without duplicates at small ``d``: ``"d"`` is always kept, ``"1"``-``"3"``
    are dropped where they equal ``d``, ``"d/2"`` and ``"d-1"`` where they equal 1, 2, 3 or ``d`` (grids that use a
    rule list ``"d"``, and the full grids list every rule)."""
    d, rule = p["d"], p["m"]
    m = _m(rule, d)
    if not minimum <= m <= d:
        return False
    if rule == "d":
        return True
    return m != d if rule in ("1", "2", "3") else m not in (1, 2, 3, d)


def _one_at_a_time(base: dict, anchor: dict) -> Callable[[dict], bool]:
    """A design for the cells with ``design = "sparse"`` (cells with ``design = "product"`` are all kept): every
    combination of the ``base`` values, plus, from the ``anchor`` point, the other grid values of one axis at a
    time (each further value is tested once, for coverage, without the whole product). Axes in neither mapping
    are free."""
    def keep(p: dict) -> bool:
        if p.get("design", "product") == "product":
            return True
        off = [k for k, values in base.items() if p[k] not in values]
        return not off or len(off) == 1 and all(p[k] == v for k, v in anchor.items() if k not in off)
    return keep


#: ``m <= d`` at its structural points (a rule in d): one row (the orthogonal ensemble is then the iid one), a pair
#: (the first orthogonal coupling) and a full frame; the rules in between change nothing in kind.
M_POINTS = ("1", "2", "d")


def _m_axis(words: str = "every m <= d", points: tuple = M_POINTS) -> Choice:
    return Choice(f"{words}: m = {', '.join(points)} (one row, a pair, a full frame)", points)


def _d_axis(words: str, up_to: int, why: str, points: tuple = (1, 2), lo: int = 1) -> Integers:
    return Integers(words, lo, math.inf, points=points, up_to=up_to, why=why)


def _unit(d: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(d)
    return v / np.linalg.norm(v)


def _terms(ctx: CellContext, g: Maclaurin, law: IsotropicLaw, m: int, z: np.ndarray, n: int,
           orthogonal: bool, rng: np.random.Generator | None = None) -> np.ndarray:
    """``(n, m)`` terms ``g(ω_iᵀz)`` from the implementation under test, in memory-bounded batches (``rng``:
    the generator of a sequential cell's round; default the cell's)."""
    fn = ctx.impl("beautiful.terms", beautiful_terms)
    rng = ctx.rng if rng is None else rng
    batch = max(1, 2_000_000 // (m * law.d))
    return np.concatenate([np.asarray(fn(z, g, law, m, rng=rng, orthogonal=orthogonal, size=k),
                                      dtype=np.float64).reshape(k, m) for k in chunks(n, batch)])




def _realisable(pair: tuple, d: int) -> tuple[float, float, float]:
    """``(‖x‖, ‖y‖, angle)`` realisable in ``R^d``: in ``d = 1`` the angle is 0 or π (whichever is nearer)."""
    nx, ny, angle = pair
    if d == 1:
        angle = 0.0 if angle <= math.pi / 2 else math.pi
    return nx, ny, angle


def _pair_geometry(pair: tuple, d: int) -> tuple[float, float]:
    """``(‖x‖² + ‖y‖², ‖x + y‖)`` of the realisable pair."""
    nx, ny, angle = _realisable(pair, d)
    sq_norms = nx * nx + ny * ny
    return sq_norms, math.sqrt(max(sq_norms + 2 * nx * ny * math.cos(angle), 0.0))


def _draw_pair(pair: tuple, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Vectors with the realisable norms and angle in a uniformly random plane (input generator I2)."""
    return controlled_pair(*_realisable(pair, d), d, rng)


# =================================================================================== Remark 1

PAIRS = {  # (‖x‖, ‖y‖, angle): ‖z‖ from 0 to 3, Λ from 1 to e^{-9}
    "zero": (0.0, 0.0, 0.0), "tiny": (0.1, 0.1, math.pi / 2), "small": (0.2, 0.2, math.pi / 3),
    "unit": (1.0, 1.0, math.pi / 2), "large": (1.5, 1.5, math.pi / 3), "opposite": (3.0, 3.0, 0.9 * math.pi),
}


def _log_kernel_sides(kernel: str, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``(log Λ F_{Ω,exp}(x+y), log K(x, y))``: the beautiful side by the series, the kernel by its own form."""
    d, zn = x.size, float(np.linalg.norm(x + y))
    log_lam = -(x @ x + y @ y) / 2
    law = IsotropicLaw(d, "chi" if kernel == "SM" else "sqrt_d")
    lhs = log_lam + bt.log_beautiful_value(Maclaurin.exp(), law, zn)
    rhs = float(x @ y) if kernel == "SM" else log_lam + bt.log_sphere_exp_mean(zn, d)
    return lhs, rhs


def _remark1_cell(ctx: CellContext):
    kernel, d = ctx.params["kernel"], ctx.params["d"]
    x, y = _draw_pair(PAIRS[ctx.params["pair"]], d, ctx.rng)
    lhs, rhs = _log_kernel_sides(kernel, x, y)
    if ctx.params["part"] == "closed_form":
        return exact_test(math.expm1(lhs - rhs), 0.0, tolerance=ctx.tolerance,
                          extra=dict(log_lhs=lhs, log_rhs=rhs))
    return _remark1_monte_carlo(ctx, kernel, x, y, lhs, rhs)


def _remark1_monte_carlo(ctx: CellContext, kernel: str, x, y, log_beautiful: float, log_kernel: float):
    """F̂(x+y) against K/Λ, and rfkit's positive-feature kernel estimate against Λ·F (both relative)."""
    d, z = x.size, x + y
    law = IsotropicLaw(d, "chi" if kernel == "SM" else "sqrt_d")
    log_lam = -(x @ x + y @ y) / 2
    zn = float(np.linalg.norm(z))
    sd = math.sqrt(max(bt.term_variance(Maclaurin.exp(), law, zn), 0.0))
    f_hat = _terms(ctx, Maclaurin.exp(), law, 1, z, ctx.replicates, False)[:, 0]
    target = math.exp(log_kernel - log_lam)
    part_f = mean_test(f_hat, target, scale=target, sd=sd, **ctx.sub_test(2))
    fmap = ctx.impl("feature_map.positive", positive_features)
    kind = "iid" if kernel == "SM" else "spherical"
    est = np.concatenate([kernel_estimates(fmap, x, y, replicate_projections(kind, n, 1, d, ctx.rng), n)
                          for n in chunks(ctx.replicates)])
    beautiful = math.exp(log_beautiful)
    part_k = mean_test(est, beautiful, scale=beautiful, sd=math.exp(log_lam) * sd, **ctx.sub_test(2))
    return combine([part_f, part_k], extra=dict(z_norm=zn))


REMARK1 = Claim(
    id="performer.remark1.softmax_beautiful", source="Definition 1 (Eq 36); Remark 1 (Eq 37)",
    statement="F_{Ω,g}(z) = E g(ωᵀz) with isotropic Ω and entire g with non-negative coefficients is beautiful; "
              "with Ω = N(0, I_d) and g = exp, SM(x, y) = exp(-(‖x‖²+‖y‖²)/2)·F_{Ω,g}(x+y), and with Ω_reg "
              "(uniform on the sphere of radius √d), SMREG(x, y) = exp(-(‖x‖²+‖y‖²)/2)·F_{Ω_reg,g}(x+y).",
    kind="identity",
    tolerance=0.01, units="relative error",
    domain=dict(
        kernel=Choice("SM with Ω = N(0, I_d) and SMREG with Ω_reg", ("SM", "SMREG")),
        d=_d_axis("x, y ∈ R^d (Definition 1's F: R^n -> R read with n = d)", 16, points=(1,),
                  why="both sides are closed forms in d (Eq 30's Bessel form for SMREG), checked at each tested d; "
                      "d = 1 is the two-point sphere; the full tier goes to 128"),
        pair=Choice("x, y with ‖x + y‖ from 0 to 3 and Λ = exp(-(‖x‖²+‖y‖²)/2) from 1 to e^{-9} (the register's "
                    "pairs of I2; the expectation exists for g = exp)", tuple(PAIRS))),
    cell=_remark1_cell,
    grid=tiers(dict(kernel=["SM", "SMREG"], d=[1, 3, 16], pair=list(PAIRS), part=["closed_form", "monte_carlo"]),
               smoke=dict(d=[2], pair=["zero", "small", "opposite"]),
               full=dict(d=list(G_D))),
    # Monte Carlo where the mean of exp(ωᵀz) is nearly normal (‖z‖ <= 0.35) and d <= 8 (sampling cost); the
    # closed forms cover ‖z‖ <= 3 and every d of the sweep.
    where=lambda p, v: p["part"] == "closed_form" or (p["pair"] in ("zero", "tiny", "small") and p["d"] <= 8),
    replicates=tiers(150_000, smoke=60_000, full=1_000_000),
    roles=("beautiful.terms", "feature_map.positive"), plot_x="pair",
    notes="closed_form: the beautiful series Σ a_{2k} E(ωᵀz)^{2k} against exp(xᵀy) and against Eq 30's Bessel "
          "form of SMREG; monte_carlo: F̂^iid_1 against K/Λ and rfkit's SM⁺/SMREG⁺ estimate against Λ·F. The "
          "first sentence (Definition 1) names a class; the identities are what is tested.",
)

# ======================================================================================= Eq 39


def _scale(value: float) -> float:
    """A relative scale that stays defined where the target is 0 (then the units are absolute)."""
    return abs(value) if value != 0 else 1.0


def _unbiased_cell(ctx: CellContext):
    p = ctx.params
    d = p["d"]
    m, law, g = _m(p["m"], d), _law(p["omega"], d), G_FAMILIES[p["g"]]
    orthogonal = p["estimator"] == "ort"
    z = p["z"] * _unit(d, ctx.rng)
    target = bt.beautiful_value(g, law, p["z"])
    # A variance at the round-off of E F̂² - F² is zero, which the sequential test judges exactly (e.g. Ω_reg
    # with a full orthogonal frame and g = u²: Σ_i (ω_iᵀz)² = d‖z‖² for every frame).
    variance = max(bt.mse(g, law, p["z"], m, orthogonal=orthogonal), 0.0)

    def draw(rng, n):
        return _terms(ctx, g, law, m, z, n, orthogonal, rng).mean(axis=1)

    # Budget: replicates counts terms g(ω_iᵀz) (the estimate's variance falls as 1/m), as a sequential cell.
    return sequential_mean(draw, target, rng=ctx.rng, budget=max(64, ctx.replicates // m),
                           planned=max(64, (ctx.planned or ctx.replicates) // m), alpha=ctx.alpha,
                           tolerance=ctx.tolerance, scale=_scale(target), sd=math.sqrt(variance))


EQ39_G = ("exp", "cosh", "1+u+u2", "u2", "u4")
_EQ39_DESIGN = _one_at_a_time(dict(g=("exp", "1+u+u2", "u2"), d=(3, 8), m=("d",), z=(0.5,)),
                              dict(omega="reg", g="exp", d=3, m="d", z=0.5))
OMEGAS_3 = Choice("isotropic Ω: N(0, I_d), Ω_reg, radius uniform on [0, 2√d]", ("gaussian", "reg", "uniform"))

EQ39 = Claim(
    id="performer.eq39.ort_estimator_unbiased",
    source="Eqs 38-39; proof of Theorem 6 (both estimators unbiased); F.4 (existence of the ensemble)",
    statement="F̂^iid_m(z) and F̂^ort_m(z) are unbiased estimators of the beautiful function F_{Ω,g}(z); the "
              "orthogonal one requires m <= d.",
    kind="expectation",
    tolerance=0.05, units="relative bias (absolute where F(z) = 0)",
    domain=dict(
        estimator=Choice("F̂^iid_m and F̂^ort_m (Haar frame, independent radii)", ("iid", "ort")),
        omega=OMEGAS_3,
        g=Choice("g entire with a_s >= 0: exp, cosh, 1 + u + u², u², u⁴ (the register's sweep)", EQ39_G),
        d=_d_axis("every d", 16, why="E g(ωᵀz) depends on d through the projection law only; 16 is the register's "
                                     "largest d"),
        m=_m_axis("every m (m <= d for the orthogonal one)"),
        z=Range("every z: ‖z‖ >= 0", 0.0, math.inf, up_to=(None, 2.0),
                why="the register sweeps ‖z‖ in {0, 0.5, 1, 2}; the estimators are linear in the terms g(ωᵀz)")),
    cell=_unbiased_cell,
    # quick: the product of the old design, plus each further value of g, d, m and z once from (Ω_reg, exp, d = 3,
    # m = d, ‖z‖ = 0.5)
    grid=tiers(dict(omega=["gaussian", "reg", "uniform"], g=list(EQ39_G), d=[1, 2, 3, 8, 16], m=list(M_POINTS),
                    z=[0.0, 0.5, 2.0], estimator=["iid", "ort"], design=["sparse"]),
               smoke=dict(omega=["gaussian", "reg"], g=["exp", "u2"], d=[3], m=["d"], z=[1.0], design=["product"]),
               full=dict(d=[1, 2, 3, 4, 8, 16], m=list(M_RULES), z=[0.0, 0.5, 1.0, 2.0], design=["product"])),
    where=lambda p, v: _m_ok(p) and _EQ39_DESIGN(p),
    replicates=tiers(120_000, smoke=40_000, full=2_000_000),
    roles=("beautiful.terms",), plot_x="z",
    notes="The prediction's standard deviation is exact: sqrt(MSE) from the series of rfkit.theory.beautiful.mse. "
          "The quick and smoke designs add each further value of an axis once (one axis at a time); the full tier "
          "is the whole product.",
)

# ============================================================================ tail bounds: machinery


@dataclass(frozen=True)
class Tail:
    """One tail-bound setting: ``P[F̂_m(z) > a]`` for ``g``, ``Ω``, ``‖z‖``, ``m`` (``sq_norms``: ``‖x‖²+‖y‖²``)."""

    g: Maclaurin
    law: IsotropicLaw
    z_norm: float
    m: int
    a: float
    sq_norms: float = 0.0


BoundFn = Callable[[Tail, float], bt.SignedLog]


#: ``log M_X(θ)`` of a fixed ``(g, Ω, ‖z‖)`` as a function of ``θ`` (a sweep cell's memo: see :func:`_mgf_memo`).
LogMgf = Callable[[float], float]


def _lemma4_bound(sign: int, log_mgf: LogMgf | None = None) -> BoundFn:
    """Eq 40 with the printed ``+θma`` (``sign = +1``) or the Chernoff ``-θma`` (``sign = -1``); ``log_mgf``: the
    memo of a sweep cell whose points share ``(g, Ω, ‖z‖)`` (default: the quadrature at each call)."""
    def bound(tail: Tail, theta: float) -> bt.SignedLog:
        lm = bt.log_mgf(tail.g, tail.law, tail.z_norm, theta) if log_mgf is None else log_mgf(theta)
        return bt.SignedLog(1, bt.lemma4_log_bound(lm, theta, tail.m, tail.a, sign=sign))
    return bound


def _thm5_bound(tail: Tail, theta: float) -> bt.SignedLog:
    return bt.thm5_bound(tail.g, tail.law, tail.z_norm, tail.a, theta, tail.m)


def _thm5_bound_memo(log_mgf: LogMgf) -> BoundFn:
    """:func:`rfkit.theory.beautiful.thm5_bound` with a sweep cell's memoised ``log M_X(θ)`` (the same formula:
    ``e^{-θma}(M_X(θ)^m - Eq 68's right-hand side)``)."""
    def bound(tail: Tail, theta: float) -> bt.SignedLog:
        diff = bt.SignedLog.difference(tail.m * log_mgf(theta),
                                       bt.log_orf_gap_bound(tail.g, tail.law, tail.z_norm, theta, tail.m))
        return diff.scaled(-theta * tail.m * tail.a)
    return bound


def _mgf_memo(g: Maclaurin, law: IsotropicLaw, z_norm: float) -> LogMgf:
    """``θ -> log M_X(θ)`` memoised: a sweep cell's points (m, a) share ``(g, Ω, ‖z‖)``, and the θ scan of
    :func:`_tightest` (and, since ``m`` only scales Lemma 4's key, its Brent steps) visit the same θ for each."""
    memo: dict[float, float] = {}

    def log_mgf(theta: float) -> float:
        if theta not in memo:
            memo[theta] = bt.log_mgf(g, law, z_norm, theta)
        return memo[theta]
    return log_mgf


def _thm3_ort_bound(tail: Tail, theta: float) -> bt.SignedLog:
    """Theorem 3's orthogonal bound as printed: ``e^{-θma}(M_X(θ)^m - e^{-(m/2)(‖x‖²+‖y‖²)} θ⁴m(m-1)‖z‖⁴/(4(d+2)))``."""
    log_mgf = bt.log_mgf(tail.g, tail.law, tail.z_norm, theta)
    correction = bt.thm3_log_correction(tail.sq_norms, tail.z_norm, theta, tail.m, tail.law.d)
    return bt.SignedLog.difference(tail.m * log_mgf, correction).scaled(-theta * tail.m * tail.a)


def _tightest(bound: BoundFn, tail: Tail) -> tuple[float, bt.SignedLog, dict]:
    """The smallest bound over :data:`THETAS` and the minimising θ in ``[1e-8, 1e8]``.

    Testing ``P <= min_θ bound(θ)`` is testing every θ at once: a violation at any θ is a violation at the
    minimum, and the exact binomial test is monotone in the bound, so no power is lost to multiplicity.
    """
    values = {theta: bound(tail, theta) for theta in THETAS}
    theta_star, _ = bt.minimize_over_theta(lambda th: bound(tail, th).key, lo=1e-8, hi=1e8, points=25)
    values[theta_star] = bound(tail, theta_star)
    best = min(values, key=lambda th: values[th].key)
    table = {f"{th:.4g}": [v.sign, v.log_abs] for th, v in values.items()}
    return best, values[best], table


def _tail_replicates(ctx: CellContext, bound: float) -> int:
    """Trials a binomial tail cell draws: enough for a confidence radius of half the tolerance at the null
    ``bound + tolerance`` (binomial sd ``√(q(1-q))``, ``q`` capped at 1/2) at the cell's level and power, never more
    than the tier's budget. It depends on the bound and the cell's level only, never on outcomes."""
    q = min(max(bound + ctx.tolerance, ctx.tolerance), 0.5)
    need = required_replicates(math.sqrt(q * (1 - q)), alpha=ctx.alpha, tolerance=ctx.tolerance, power=ctx.power,
                               alternative="greater")
    return int(min(ctx.replicates, max(math.ceil(need), 1_000)))


def _tail_evidence(ctx: CellContext, bound: bt.SignedLog, exceedances: Callable[[int], tuple[int, int]],
                   extra: dict) -> Evidence:
    """Evidence for ``P[F̂ > a] <= bound``: exact when the bound is negative (violated by every law, since a
    probability is >= 0) or at least ``1 - tolerance`` (no law violates it by more than ``1 - bound``);
    otherwise the exact binomial test on :func:`_tail_replicates` trials."""
    extra = dict(extra, bound_sign=bound.sign, log_bound=bound.log_abs)
    if bound.sign < 0:
        return margin_evidence(bound.value, tolerance=ctx.tolerance, extra=dict(extra, decided="bound < 0"))
    if bound.sign > 0 and bound.log_abs >= math.log1p(-ctx.tolerance):
        return margin_evidence(min(bound.value - 1.0, 0.0), tolerance=ctx.tolerance,
                               extra=dict(extra, decided="bound >= 1 - tolerance"))
    exceed, n = exceedances(_tail_replicates(ctx, bound.value))
    return binomial_test(exceed, n, bound.value, **ctx.test, extra=extra)


def _beautiful_exceedances(ctx: CellContext, tail: Tail, orthogonal: bool) -> Callable[[int], tuple[int, int]]:
    def count(n: int) -> tuple[int, int]:
        z = tail.z_norm * _unit(tail.law.d, ctx.rng)
        est = _terms(ctx, tail.g, tail.law, tail.m, z, n, orthogonal).mean(axis=1)
        return int((est > tail.a).sum()), est.size
    return count


def _beautiful_tail(p: dict) -> Tail:
    d = p["d"]
    g, law = G_FAMILIES[p["g"]], _law(p["omega"], d)
    m = _m(p["m"], d) if isinstance(p["m"], str) else p["m"]
    return Tail(g, law, p["z"], m, p["mult"] * bt.beautiful_value(g, law, p["z"]))


def _tail_cell(bound: BoundFn, tail_of: Callable[[CellContext], tuple[Tail, Callable]]):
    def cell(ctx: CellContext) -> Evidence:
        tail, exceedances = tail_of(ctx)
        theta, b, table = _tightest(bound, tail)
        return _tail_evidence(ctx, b, exceedances, dict(theta=theta, a=tail.a, m=tail.m, bounds=table))
    return cell


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _tightest_at(bound: BoundFn, tail: Tail, theta_star: float) -> tuple[float, bt.SignedLog, dict]:
    """:func:`_tightest` with the minimising θ given: Lemma 4's log-bound is ``m·(log M_X(θ) ∓ θa)``, so its
    minimiser over θ does not depend on ``m`` and is found once per ``a`` (at ``m = 1``)."""
    values = {theta: bound(tail, theta) for theta in (*THETAS, theta_star)}
    best = min(values, key=lambda th: values[th].key)
    table = {f"{th:.4g}": [v.sign, v.log_abs] for th, v in values.items()}
    return best, values[best], table


def _tail_sweep_cell(make_bound: Callable[[LogMgf | None], BoundFn], orthogonal: bool, m_scales: bool = False):
    """A tail cell at one ``(Ω, g, d, ‖z‖)`` that sweeps tuple-valued ``m`` and ``mult`` (the full grids; a cell
    with scalar values is the one-point :func:`_tail_cell`).

    Every point ``(m, a = mult·F)`` is the one-point cell's test at the Bonferroni level ``alpha / points``
    (:meth:`CellContext.sub_test`; the engine's per-cell level grows by the same factor, as the cells are that
    many fewer), combined by :func:`combine`. Shared work: ``log M_X(θ)`` is memoised over θ (:func:`_mgf_memo`);
    ``m_scales`` (Lemma 4: the log-bound is ``m`` times that of ``m = 1``) minimises over θ once per ``a``; the
    estimates of one ``m`` are drawn once, as many as its most demanding point needs, and compared with each
    ``a`` (common random numbers; Bonferroni allows the dependence); iid terms are drawn once for the largest
    ``m``, and ``F̂^iid_m`` is the mean of the first ``m`` columns (iid columns: the law of each estimate is
    unchanged)."""
    one_point = _tail_cell(make_bound(None), _beautiful_tail_of(orthogonal))

    def cell(ctx: CellContext) -> Evidence:
        p = ctx.params
        ms, mults = _as_tuple(p["m"]), _as_tuple(p["mult"])
        if len(ms) == 1 and len(mults) == 1:
            return one_point(ctx)
        d = p["d"]
        g, law = G_FAMILIES[p["g"]], _law(p["omega"], d)
        F = bt.beautiful_value(g, law, p["z"])
        bound = make_bound(_mgf_memo(g, law, p["z"]))
        points = [(_m(m, d) if isinstance(m, str) else m, mult) for m in ms for mult in mults]
        sub = replace(ctx, alpha=ctx.alpha / len(points))
        rows, theta_star = [], {}
        for m, mult in points:
            tail = Tail(g, law, p["z"], m, mult * F)
            if m_scales:
                if mult not in theta_star:
                    one_row = replace(tail, m=1)
                    theta_star[mult] = bt.minimize_over_theta(lambda th, t=one_row: bound(t, th).key,
                                                              lo=1e-8, hi=1e8, points=25)[0]
                rows.append((m, mult, tail, *_tightest_at(bound, tail, theta_star[mult])))
            else:
                rows.append((m, mult, tail, *_tightest(bound, tail)))
        need: dict[int, int] = {}
        for m, _, _, _, b, _ in rows:
            if b.sign > 0 and b.log_abs < math.log1p(-ctx.tolerance):  # the binomial route of _tail_evidence
                need[m] = max(need.get(m, 0), _tail_replicates(sub, b.value))
        z = p["z"] * _unit(d, ctx.rng)
        if orthogonal or not need:
            est = {m: _terms(ctx, g, law, m, z, n, orthogonal).mean(axis=1) for m, n in need.items()}
        else:
            # iid terms in column blocks: the columns m' < j <= m are drawn for as many rows as the largest m'' >= m
            # needs; the first n_m rows of the first m columns are an iid sample of F̂^iid_m
            ms_sorted, blocks, width = sorted(need), [], 0
            for m in ms_sorted:
                rows_needed = max(need[k] for k in ms_sorted if k >= m)
                blocks.append(_terms(ctx, g, law, m - width, z, rows_needed, False))
                width = m
            est = {}
            for m in ms_sorted:
                n, cols, total = need[m], 0, 0.0
                for block in blocks:
                    if cols >= m:
                        break
                    total = total + block[:n].sum(axis=1)
                    cols += block.shape[1]
                est[m] = total / m
        parts = []
        for m, mult, tail, theta, b, table in rows:
            def exceedances(n: int, m=m, a=tail.a) -> tuple[int, int]:
                return int((est[m][:n] > a).sum()), n
            parts.append(_tail_evidence(sub, b, exceedances, dict(theta=theta, a=tail.a, m=m, mult=mult,
                                                                  bounds=table)))
        worst = max(range(len(parts)), key=lambda i: parts[i].effect if math.isfinite(parts[i].effect) else -1)
        return combine(parts, extra=dict(points=len(parts), worst_m=rows[worst][0], worst_mult=rows[worst][1],
                                         worst_theta=rows[worst][3]))
    return cell


def _beautiful_tail_of(orthogonal: bool):
    def tail_of(ctx: CellContext):
        tail = _beautiful_tail(ctx.params)
        return tail, _beautiful_exceedances(ctx, tail, orthogonal)
    return tail_of


def _a_positive(p: dict) -> bool:
    """``a = mult·F > F`` needs ``F > 0``: excludes ``z = 0`` with ``a_0 = 0``."""
    return p["z"] > 0 or G_FAMILIES[p["g"]].a0 > 0


@dataclass(frozen=True)
class TailSpace:
    """A search box over a tail claim's domain: ``decode(x) -> (Tail, θ, input builder)``."""

    bounds: list
    integer: list
    decode: Callable


def _beautiful_space(omegas: tuple, gs: tuple, ds: tuple, max_m: Callable[[int], int]) -> TailSpace:
    """``x = (Ω index, g index, d index, m fraction, ‖z‖, log10(mult - 1), log10 θ)``."""
    def decode(x):
        d = ds[int(x[2])]
        m = 1 + int(round(x[3] * (max_m(d) - 1)))
        p = dict(omega=omegas[int(x[0])], g=gs[int(x[1])], d=d, m=m, z=float(x[4]), mult=1 + 10 ** float(x[5]))
        return _beautiful_tail(p), 10 ** float(x[6]), p
    bounds = [(0, len(omegas) - 1), (0, len(gs) - 1), (0, len(ds) - 1), (0.0, 1.0), (0.05, 4.0), (-2.0, 0.6),
              (-3.0, 4.0)]
    return TailSpace(bounds, [True, True, True, False, False, False, False], decode)


def _tail_search(bound: BoundFn, space: TailSpace, exceedances: Callable):
    """Minimise the closed-form bound over the domain (θ included); judge the tightest point exactly or by MC."""
    def search(ctx: CellContext) -> Evidence:
        res = minimize_margin(lambda x: bound(*space.decode(x)[:2]).key, space.bounds, rng=ctx.rng,
                              restart=ctx.restart or 0, integer=space.integer, maxiter=SEARCH_ITERATIONS)
        tail, theta, point = space.decode(res.x)
        b = bound(tail, theta)
        return _tail_evidence(ctx, b, exceedances(ctx, tail, point),
                              dict(point={k: v for k, v in point.items() if k not in ("x", "y")}, theta=theta,
                                   a=tail.a))
    return search


def _beautiful_search_exceedances(orthogonal: bool):
    return lambda ctx, tail, point: _beautiful_exceedances(ctx, tail, orthogonal)

# ===================================================================================== Lemma 4

LEMMA4_G = ("exp", "exp/1000", "exp/10", "10exp", "cosh", "1+u+u2", "u+u2", "2+u2", "u2")
LEMMA4_OMEGAS = ("reg", "uniform", "half", "double", "gaussian")
TAIL_D = (1, 2, 3, 4, 8, 16)


def _lemma4_domain(p: dict, variant: str) -> bool:
    """Bounded radial laws with every g; Gaussian Ω only with quadratic g (finite M_X(θ) for small θ)."""
    g = G_FAMILIES[p["g"]]
    gaussian_ok = p["omega"] != "gaussian" or (g.degree is not None and g.degree <= 2)
    return gaussian_ok and _a_positive(p)


def _lemma4_sign(ctx: CellContext) -> int:
    return -1 if ctx.variant == "minus" else 1


_LEMMA4_DESIGN = _one_at_a_time(dict(omega=("reg", "uniform", "gaussian"), g=("exp", "1+u+u2"), z=(1.0,),
                                      mult=(1.1, 2.0)),
                                 dict(omega="reg", g="1+u+u2", z=1.0, mult=1.1, m=8))


def _lemma4_cell(ctx: CellContext) -> Evidence:
    sign = _lemma4_sign(ctx)
    return _tail_sweep_cell(lambda log_mgf: _lemma4_bound(sign, log_mgf), False, m_scales=True)(ctx)


def _lemma4_search(ctx: CellContext) -> Evidence:
    space = _beautiful_space(LEMMA4_OMEGAS, LEMMA4_G, TAIL_D, lambda d: 64)
    return _tail_search(_lemma4_bound(_lemma4_sign(ctx)), space, _beautiful_search_exceedances(False))(ctx)


def _mult_axis(words: str = "any a > F(z), as a = mult·F(z)") -> Range:
    return Range(words, 1.0, math.inf, strict=(True, False), up_to=(None, 5.0),
                 why="the register's a ∈ F·{1.01, 1.1, 1.5, 2, 5}; far tails have exceedance probabilities below "
                     "the binomial test's resolution")


def _z_axis(words: str, up_to: float, why: str) -> Range:
    return Range(words, 0.0, math.inf, up_to=(None, up_to), why=why)


THETA_WORDS = ("every θ > 0 is tested at once in each cell: the bound at its minimising θ over [1e-8, 1e8] (and the "
               "θ grid 1e-3..1e4) is the smallest, so a violation at any θ is one there")

LEMMA4 = Claim(
    id="performer.lemma4.iid_chernoff", source="Lemma 4, Eq 40",
    statement="For any a > F(z) and θ > 0, P[F̂^iid_m(z) > a] <= exp(θma)·M_X(θ)^m, with X = g(wᵀz), w ~ D.",
    kind="tail-bound",
    tolerance=TAIL_TOLERANCE, units="excess exceedance probability over the bound",
    domain=dict(
        omega=Choice("D read as Ω, isotropic: Ω_reg, radius uniform on [0, 2√d], fixed radius 0.5√d or 2√d, and "
                     "N(0, I_d) (with quadratic g only: for exp-type g M_X(θ) = +∞ and the bound holds trivially)",
                     LEMMA4_OMEGAS),
        g=Choice("beautiful F: g entire with a_s >= 0 (the register's families)", LEMMA4_G),
        d=_d_axis("any d", 16, why="the search and the full grid reach 16, the register's largest d"),
        m=Integers("any m >= 1", 1, math.inf, points=(1,), up_to=64,
                   why="M_X(θ)^m and the mean of m iid terms: the search reaches m = 64"),
        z=_z_axis("every z (a > F(z) >= 0 needs F(z) > 0: z = 0 only where a_0 > 0)", 4.0,
                  why="the register's ‖z‖ ∈ {0.25, ..., 4}; the search reaches 4"),
        mult=_mult_axis()),
    readings={"minus": Reading("exp(-θma)·M_X(θ)^m, the Chernoff bound used in Theorem 3 and Eq 43; the "
                               "statement's words are Eq 40's +θma, so this is reported beside", beside=True),
              "plus": Reading("exp(+θma)·M_X(θ)^m as printed in Eq 40 (>= 1 for every input: a > F >= 0, "
                              "M_X(θ) >= e^{θF})")},
    searched=("d", "m"),
    cell=_lemma4_cell, search=_lemma4_search,
    grid=tiers(dict(omega=list(LEMMA4_OMEGAS), g=list(LEMMA4_G), d=[3], m=[1, 8], z=[0.0, 1.0, 4.0],
                    mult=[1.1, 2.0, 5.0], design=["sparse"]),
               smoke=dict(omega=["reg"], g=["exp"], m=[1, 4], z=[1.0], mult=[1.1, 2.0], design=["product"]),
               # full: the register's m <= 16 (m up to 64 is the search's: see the m axis); one cell sweeps every
               # (m, mult) of an (Ω, g, d, ‖z‖): they share M_X(θ) (see _tail_sweep_cell)
               full=dict(d=list(TAIL_D), m=[(1, 2, 4, 8, 16)], z=[0.0, 0.25, 0.5, 1.0, 2.0, 4.0],
                         mult=[(1.01, 1.1, 1.5, 2.0, 5.0)], design=["product"])),
    where=lambda p, v: _lemma4_domain(p, v) and _LEMMA4_DESIGN(p),
    universal=True, restarts=tiers(1, full=160),
    replicates=tiers(20_000, smoke=15_000, full=1_000_000),
    roles=("beautiful.terms",), plot_x="mult",
    notes="θ: " + THETA_WORDS + ". Gaussian Ω is tested with quadratic g (M_X finite for 2θa_2‖z‖² < 1, +∞ "
          "beyond); the search covers d <= 16 and m <= 64 over the same Ω and g.",
)


# =================================================================================== Theorem 5

THM5_G = ("exp", "exp/1000", "exp/100", "exp/10", "10exp", "cosh", "1+u+u2", "u+u2", "2+u2", "u2")
THM5_OMEGAS = ("reg", "uniform", "half", "double")

def _gaussian_quadratic(p: dict) -> bool:
    """Gaussian Ω only with quadratic g (elsewhere M_X(θ) = +∞: the bound is +∞)."""
    g = G_FAMILIES[p["g"]]
    return p["omega"] != "gaussian" or (g.degree is not None and g.degree <= 2)


_THM5_DESIGN = _one_at_a_time(dict(omega=("reg", "uniform"), g=("exp/1000", "exp", "10exp", "1+u+u2", "u+u2"),
                                   m=("2", "d"), z=(1.0,), mult=(1.1,)),
                              dict(omega="reg", g="1+u+u2", d=2, m="d", z=1.0, mult=1.1))

THM5 = Claim(
    id="performer.thm5.ort_tail", source="Theorem 5, Eq 41; proof F.4.2",
    statement="If F_{Ω,g} is beautiful, then for m <= d, X as in Lemma 4 and any a > F(z), θ > 0: "
              "P[F̂^ort_m(z) > a] <= exp(-θma)·(M_X(θ)^m - (θ⁴m(m-1)/(4d²(d+2)))·a_0^{M-2}·a_1²·‖z‖⁴·(E‖ω‖²)²), "
              "for any dimensionality d.",
    kind="tail-bound",
    tolerance=TAIL_TOLERANCE, units="excess exceedance probability over the bound",
    domain=dict(
        omega=Choice("Ω isotropic: Ω_reg, radius uniform on [0, 2√d], fixed radius 0.5√d or 2√d, and N(0, I_d) "
                     "(with quadratic g only: for exp-type g M_X(θ) = +∞ and the bound holds trivially)",
                     THM5_OMEGAS + ("gaussian",)),
        g=Choice("g entire with a_i >= 0: c·exp (c from 1e-3 to 10), cosh, 1 + u + u², u + u², 2 + u², u² "
                 "(a_0 = 0, a_1 = 0, a_0 << a_1, a_0 >> a_1)", THM5_G),
        d=_d_axis("for any dimensionality d", 16, why="the search and the full grid reach 16, the register's "
                                                      "largest d"),
        m=_m_axis("m <= d (M read as m, Eq 68)"),
        z=_z_axis("every z (z = 0 only where a_0 > 0, so that a > F(z) > 0)", 4.0,
                  why="the register's ‖z‖ ∈ {0, ..., 4}; the search reaches 4"),
        mult=_mult_axis()),
    # z: the search's box spans ‖z‖ ∈ [0.05, 4] (minimize_margin moves it continuously), so the full grid keeps its
    # ends 0 (a boundary: F(0) = a_0) and 4 and one interior point
    searched=("d", "z"),
    cell=_tail_sweep_cell(lambda log_mgf: _thm5_bound if log_mgf is None else _thm5_bound_memo(log_mgf), True),
    grid=tiers(dict(omega=list(THM5_OMEGAS) + ["gaussian"], g=list(THM5_G), d=[2, 4], m=list(M_POINTS),
                    z=[0.0, 1.0, 4.0], mult=[1.1, 5.0], design=["sparse"]),
               smoke=dict(omega=["reg"], g=["exp/1000", "exp"], d=[2], m=["d"], z=[1.0], mult=[1.1],
                          design=["product"]),
               # full: one cell sweeps every mult of an (Ω, g, d, m, ‖z‖): they share M_X(θ) (_tail_sweep_cell)
               full=dict(d=list(TAIL_D), m=list(M_RULES), z=[0.0, 1.0, 4.0],
                         mult=[(1.01, 1.1, 1.5, 2.0, 5.0)], design=["product"])),
    where=lambda p, v: _m_ok(p) and _a_positive(p) and _gaussian_quadratic(p) and _THM5_DESIGN(p),
    search=_tail_search(_thm5_bound, _beautiful_space(THM5_OMEGAS, THM5_G, TAIL_D, lambda d: d),
                        _beautiful_search_exceedances(True)),
    universal=True, restarts=tiers(1, full=160),
    replicates=tiers(20_000, smoke=10_000, full=1_000_000),
    roles=("beautiful.terms",), plot_x="g",
    notes="θ: " + THETA_WORDS + ". A negative right-hand side (the correction exceeds M_X(θ)^m) is violated by "
          "every law; such cells are decided exactly. The correction is not invariant under g -> λg, θ -> θ/λ (it "
          "scales by λ^{m-4}) while the left-hand side and M_X^m are, which is why it fails for small scales "
          "(m < 4). The search covers d <= 16 over the bounded radial laws and every g.",
)

# =================================================================================== Theorem 3

#: (‖x‖, ‖y‖, angle) of the register's Theorem 3 sweep: Λ from 1 to e^{-9}, ‖z‖ from 0 to 6.
THM3_PAIRS = {
    "zero": (0.0, 0.0, 0.0), "small": (0.5, 0.5, math.pi / 3), "unit": (1.0, 1.0, math.pi / 2),
    "parallel": (1.0, 2.0, 0.0), "obtuse": (2.0, 2.0, 3 * math.pi / 4), "opposite": (3.0, 3.0, 0.9 * math.pi),
    "skew": (3.0, 0.5, math.pi / 6),
}


def _smreg_tail(pair: tuple, d: int, m: int, mult: float) -> Tail:
    """Theorem 3 as an instance of Theorem 5: ``X = Λ exp(√d ω̂ᵀz)``, i.e. ``g = Λ·exp``, ``Ω = Ω_reg``."""
    sq_norms, zn = _pair_geometry(pair, d)
    lam = math.exp(-sq_norms / 2)
    smreg = lam * math.exp(bt.log_sphere_exp_mean(zn, d))
    return Tail(Maclaurin.exp(lam), IsotropicLaw(d, "sqrt_d"), zn, m, mult * smreg, sq_norms)


def _smreg_estimates(ctx: CellContext, tail: Tail, pair: tuple, orthogonal: bool) -> np.ndarray:
    """``ctx.replicates`` draws of rfkit's SMREG⁺ estimator (positive features; rows iid on √d S^{d-1}, or a Haar
    frame with √d norms) at a random placement of the pair."""
    d = tail.law.d
    x, y = _draw_pair(pair, d, ctx.rng)
    fmap = ctx.impl("feature_map.positive", positive_features)
    kind = "orthogonal_sqrt_d" if orthogonal else "spherical"
    return np.concatenate([kernel_estimates(fmap, x, y, replicate_projections(kind, n, tail.m, d, ctx.rng), n)
                           for n in chunks(ctx.replicates, max(1, 2_000_000 // (tail.m * d)))])


def _smreg_exceedances(ctx: CellContext, tail: Tail, pair: tuple, orthogonal: bool) -> Callable[[int], tuple[int, int]]:
    def count(n: int) -> tuple[int, int]:
        return int((_smreg_estimates(replace(ctx, replicates=n), tail, pair, orthogonal) > tail.a).sum()), n
    return count


def _smreg_tail_of(orthogonal: bool):
    def tail_of(ctx: CellContext):
        p = ctx.params
        pair = THM3_PAIRS[p["pair"]]
        tail = _smreg_tail(pair, p["d"], _m(p["m"], p["d"]), p["mult"])
        return tail, _smreg_exceedances(ctx, tail, pair, orthogonal)
    return tail_of


def _smreg_space(min_m: int) -> TailSpace:
    """``x = (d index, m fraction, ‖x‖, ‖y‖, angle, log10(mult - 1), log10 θ)`` over the register's box."""
    def decode(x):
        d = TAIL_D[int(x[0])]
        lo = min(min_m, d)
        m = lo + int(round(x[1] * (d - lo)))
        pair = (float(x[2]), float(x[3]), float(x[4]))
        point = dict(d=d, m=m, norm_x=pair[0], norm_y=pair[1], angle=pair[2], mult=1 + 10 ** float(x[5]))
        return _smreg_tail(pair, d, m, point["mult"]), 10 ** float(x[6]), point
    bounds = [(0, len(TAIL_D) - 1), (0.0, 1.0), (0.0, 3.0), (0.0, 3.0), (0.0, math.pi), (-2.0, 0.6), (-3.0, 4.0)]
    return TailSpace(bounds, [True] + [False] * 6, decode)


def _smreg_search_exceedances(orthogonal: bool):
    def build(ctx, tail, point):
        return _smreg_exceedances(ctx, tail, (point["norm_x"], point["norm_y"], point["angle"]), orthogonal)
    return build


def _iid_smreg_bound(tail: Tail, theta: float) -> bt.SignedLog:
    return _lemma4_bound(-1)(tail, theta)


THM3_GRID = tiers(dict(pair=list(THM3_PAIRS), d=[2, 4], m=list(M_POINTS), mult=[1.1, 2.0, 5.0], design=["sparse"]),
                  smoke=dict(pair=["unit", "opposite"], d=[2], m=["d"], mult=[1.1], design=["product"]),
                  full=dict(d=list(TAIL_D), m=list(M_RULES), mult=[1.01, 1.1, 1.5, 2.0, 5.0], design=["product"]))
#: quick: the old product (4 pairs, d in {2, 4}, m in {2, d}, mult in {1.1, 2}) plus each further value once
_THM3_DESIGN = _one_at_a_time(dict(pair=("small", "unit", "obtuse", "opposite"), m=("2", "d"), mult=(1.1, 2.0)),
                              dict(pair="unit", d=2, m="d", mult=1.1))


def _thm3_domain(m_words: str) -> dict:
    return dict(
        pair=Choice("x, y ∈ R^d: ‖x‖, ‖y‖ from 0 to 3 at angles from 0 to 0.9π (Λ from 1 to e^{-9}, ‖z‖ from 0 "
                    "to 6; the register's pairs, placed in a random plane)", tuple(THM3_PAIRS)),
        d=_d_axis("x, y in R^d, every d", 16, why="the search and the full grid reach 16, the register's largest d"),
        m=_m_axis(m_words),
        mult=_mult_axis("any a > SMREG(x, y), as a = mult·SMREG(x, y)"))


THM3_IID = Claim(
    id="performer.thm3.iid_tail", source="Theorem 3, first inequality",
    statement="For x, y in R^d, any a > SMREG(x, y), θ > 0 and m <= d: P[SMREG⁺_m(x, y) > a] <= "
              "exp(-θma)·M_Z(θ)^m, with X = Λ·exp(√d ωᵀ(x+y)/‖ω‖), ω ~ N(0, I_d).",
    kind="tail-bound",
    tolerance=TAIL_TOLERANCE, units="excess exceedance probability over the bound",
    domain=_thm3_domain("m <= d"), searched=("d",),
    cell=_tail_cell(_iid_smreg_bound, _smreg_tail_of(False)),
    grid=THM3_GRID, where=lambda p, v: _m_ok(p) and _THM3_DESIGN(p),
    search=_tail_search(_iid_smreg_bound, _smreg_space(1), _smreg_search_exceedances(False)),
    universal=True, restarts=tiers(1, full=160),
    replicates=tiers(20_000, smoke=10_000, full=1_000_000),
    roles=("feature_map.positive",), plot_x="pair",
    notes="M_Z read as M_X (Z is never defined; the register's reading, the only one); SMREG⁺ with rows iid "
          "uniform on √d·S^{d-1}. θ: " + THETA_WORDS + ".",
)

THM3_ORT = Claim(
    id="performer.thm3.ort_tail", source="Theorem 3, second inequality",
    statement="Under the same hypotheses, P[SMREG^ort+_m(x, y) > a] <= exp(-θma)·(M_Z(θ)^m - "
              "exp(-(m/2)(‖x‖²+‖y‖²))·(θ⁴m(m-1)/(4(d+2)))·‖x+y‖⁴).",
    kind="tail-bound",
    tolerance=TAIL_TOLERANCE, units="excess exceedance probability over the bound",
    domain=_thm3_domain("m <= d (m >= 2: the correction is active; m = 1 its boundary)"), searched=("d",),
    cell=_tail_cell(_thm3_ort_bound, _smreg_tail_of(True)),
    grid=THM3_GRID, where=lambda p, v: _m_ok(p) and _THM3_DESIGN(p),
    search=_tail_search(_thm3_ort_bound, _smreg_space(2), _smreg_search_exceedances(True)),
    universal=True, restarts=tiers(1, full=160),
    replicates=tiers(20_000, smoke=10_000, full=1_000_000),
    roles=("feature_map.positive",), plot_x="pair",
    notes="M_Z = M_X; SMREG^ort+ uses a Haar frame with √d norms (proj_orf, norm_law = sqrt_d). θ: " + THETA_WORDS
          + ". With t = θΛ the correction is Λ^{m-4}·t⁴m(m-1)‖z‖⁴/(4(d+2)) while M_X(θ) depends on t alone: for "
          "m < 4 and small Λ (large, nearly opposite x and y, where SMREG is small) the right-hand side is "
          "negative, which no probability satisfies.",
)


def _bound_level_cell(ctx: CellContext) -> Evidence:
    """(a): the orthogonal bound is strictly below the iid bound at every θ, and both bounds hold."""
    iid_tail, iid_count = _smreg_tail_of(False)(ctx)
    ort_tail, ort_count = _smreg_tail_of(True)(ctx)
    # iid bound - orthogonal bound = e^{-θma}·(Theorem 3's correction): strictly positive iff the correction is
    log_gaps = [bt.thm3_log_correction(ort_tail.sq_norms, ort_tail.z_norm, th, ort_tail.m, ort_tail.law.d)
                - th * ort_tail.m * ort_tail.a for th in THETAS]
    strict = margin_evidence(0.0 if min(log_gaps) > -math.inf else -1.0, tolerance=ctx.tolerance,
                             extra=dict(min_log_gap=min(log_gaps)))
    parts = [strict]
    for bound, tail, count in ((_iid_smreg_bound, iid_tail, iid_count), (_thm3_ort_bound, ort_tail, ort_count)):
        theta, b, table = _tightest(bound, tail)
        parts.append(_tail_evidence(replace(ctx, alpha=ctx.alpha / 3), b, count, dict(theta=theta, bounds=table)))
    return combine(parts, extra=dict(strict=strict.extra, iid_bound=parts[1].extra, orthogonal_bound=parts[2].extra))


def _exceedance_pair(ctx: CellContext) -> tuple[np.ndarray, np.ndarray]:
    """Independent exceedance indicators of the orthogonal and the iid estimator at the cell's a: rfkit's SMREG⁺
    (``family = "smreg"``) or F̂ for another g with Ω_reg at the pair's ‖z‖."""
    p = ctx.params
    pair = THM3_PAIRS[p["pair"]]
    tail = _smreg_tail(pair, p["d"], _m(p["m"], p["d"]), p["mult"])
    if p["family"] != "smreg":
        g = G_FAMILIES[p["family"]]
        tail = Tail(g, tail.law, tail.z_norm, tail.m, p["mult"] * bt.beautiful_value(g, tail.law, tail.z_norm))

    def estimates(orthogonal: bool) -> np.ndarray:
        if p["family"] == "smreg":
            return _smreg_estimates(ctx, tail, pair, orthogonal)
        z = tail.z_norm * _unit(tail.law.d, ctx.rng)
        return _terms(ctx, tail.g, tail.law, tail.m, z, ctx.replicates, orthogonal).mean(axis=1)

    return (estimates(True) > tail.a).astype(np.float64), (estimates(False) > tail.a).astype(np.float64)


#: Largest sd of a difference of two independent indicators (each p(1-p) <= 1/4).
INDICATOR_DIFFERENCE_SD = math.sqrt(0.5)


def _probability_level_cell(ctx: CellContext) -> Evidence:
    """(b): ``P[ort > a] <= P[iid > a]``; independent samples paired by index, so the differences are iid.

    Pairs drawn: enough for a radius of half the tolerance at the largest sd of a difference of indicators, at
    the cell's level and power (never more than the tier's budget; outcome-free)."""
    need = required_replicates(INDICATOR_DIFFERENCE_SD, alpha=ctx.alpha, tolerance=ctx.tolerance, power=ctx.power,
                               alternative="less")
    ctx = replace(ctx, replicates=int(min(ctx.replicates, math.ceil(need))))
    ort, iid = _exceedance_pair(ctx)
    return mean_test(ort - iid, 0.0, alternative="less", extra=dict(p_ort=ort.mean(), p_iid=iid.mean()),
                     **ctx.test)


def _sharper_cell(ctx: CellContext) -> Evidence:
    return _bound_level_cell(ctx) if ctx.variant == "bound_level" else _probability_level_cell(ctx)


class _Draws:
    """Estimates drawn on demand and kept, so that a sweep cell's thresholds ``a`` compare the same draws (common
    random numbers); ``first(n)`` extends the sample when a point needs more."""

    def __init__(self, draw: Callable[[int], np.ndarray]):
        self._draw, self._x = draw, np.empty(0)

    def first(self, n: int) -> np.ndarray:
        if self._x.size < n:
            self._x = np.concatenate([self._x, np.asarray(self._draw(n - self._x.size), dtype=np.float64)])
        return self._x[:n]


def _sharper_sweep_cell(ctx: CellContext) -> Evidence:
    """Both readings at one ``(family, pair, d, m)`` for every ``mult`` of a tuple (the full grid; a scalar ``mult``
    is the one-point :func:`_sharper_cell`): the estimators' laws do not depend on ``a``, so one sample of each
    (grown to what the most demanding point needs) is compared with every ``a``. Each point is the one-point test
    at the Bonferroni level ``alpha / points`` (the engine's per-cell level grows by the same factor, as the cells
    are that many fewer), combined by :func:`combine`."""
    p = ctx.params
    mults = _as_tuple(p["mult"])
    if len(mults) == 1:
        return _sharper_cell(ctx)
    sub = replace(ctx, alpha=ctx.alpha / len(mults))
    pair, d = THM3_PAIRS[p["pair"]], p["d"]
    base = _smreg_tail(pair, d, _m(p["m"], d), 1.0)
    if p["family"] == "smreg":
        def draws(orthogonal: bool) -> _Draws:
            return _Draws(lambda n: _smreg_estimates(replace(ctx, replicates=n), base, pair, orthogonal))
    else:
        g = G_FAMILIES[p["family"]]
        base = Tail(g, base.law, base.z_norm, base.m, bt.beautiful_value(g, base.law, base.z_norm))
        z = base.z_norm * _unit(d, ctx.rng)

        def draws(orthogonal: bool) -> _Draws:
            return _Draws(lambda n: _terms(ctx, base.g, base.law, base.m, z, n, orthogonal).mean(axis=1))
    ort, iid = draws(True), draws(False)
    parts = []
    for mult in mults:
        tail = replace(base, a=mult * base.a)
        if ctx.variant == "bound_level":
            parts.append(_bound_level_point(sub, tail, ort, iid))
        else:
            n = _probability_level_replicates(sub)
            o, i = (ort.first(n) > tail.a).astype(np.float64), (iid.first(n) > tail.a).astype(np.float64)
            parts.append(mean_test(o - i, 0.0, alternative="less", extra=dict(mult=mult, p_ort=o.mean(),
                                                                                p_iid=i.mean()), **sub.test))
    worst = max(range(len(parts)), key=lambda k: parts[k].effect if math.isfinite(parts[k].effect) else -1)
    return combine(parts, extra=dict(points=len(parts), worst_mult=mults[worst]))


def _bound_level_point(ctx: CellContext, tail: Tail, ort: _Draws, iid: _Draws) -> Evidence:
    """:func:`_bound_level_cell` at ``tail`` (its ``a``) with the sweep's shared draws."""
    log_gaps = [bt.thm3_log_correction(tail.sq_norms, tail.z_norm, th, tail.m, tail.law.d) - th * tail.m * tail.a
                for th in THETAS]
    strict = margin_evidence(0.0 if min(log_gaps) > -math.inf else -1.0, tolerance=ctx.tolerance,
                             extra=dict(min_log_gap=min(log_gaps)))
    parts = [strict]
    for bound, draws in ((_iid_smreg_bound, iid), (_thm3_ort_bound, ort)):
        theta, b, table = _tightest(bound, tail)

        def count(n: int, draws=draws) -> tuple[int, int]:
            return int((draws.first(n) > tail.a).sum()), n
        parts.append(_tail_evidence(replace(ctx, alpha=ctx.alpha / 3), b, count, dict(theta=theta, bounds=table)))
    return combine(parts, extra=dict(a=tail.a, strict=strict.extra, iid_bound=parts[1].extra,
                                     orthogonal_bound=parts[2].extra))


def _probability_level_replicates(ctx: CellContext) -> int:
    """:func:`_probability_level_cell`'s pairs: outcome-free, from the level, power and tolerance."""
    need = required_replicates(INDICATOR_DIFFERENCE_SD, alpha=ctx.alpha, tolerance=ctx.tolerance, power=ctx.power,
                               alternative="less")
    return int(min(ctx.replicates, math.ceil(need)))


def _sharper_search(ctx: CellContext) -> Evidence:
    if ctx.variant == "bound_level":
        return _tail_search(_thm3_ort_bound, _smreg_space(2), _smreg_search_exceedances(True))(ctx)
    return _probability_search(ctx)


def _probability_search(ctx: CellContext) -> Evidence:
    """Search the exact law for the largest ``P[ort > a] - P[iid > a]``, then measure it there.

    The estimators' laws have no closed form, so the objective is a small Monte Carlo estimate with common
    random numbers across evaluations (a fixed seed per restart); the found point gets a fresh full test.
    """
    seed = int(ctx.rng.integers(2**32))

    def margin(x):
        p = _sharper_point(x)
        sub = replace(ctx, rng=np.random.default_rng(seed), replicates=2_000, params=p)
        ort, iid = _exceedance_pair(sub)
        return float(iid.mean() - ort.mean())

    bounds = [(0, 2), (0.0, 1.0), (0, len(THM3_PAIRS) - 1), (-2.0, 0.6)]
    res = minimize_margin(margin, bounds, rng=ctx.rng, restart=ctx.restart or 0, integer=[True, False, True, False],
                          maxiter=SEARCH_ITERATIONS // 4)
    point = _sharper_point(res.x)
    return _probability_level_cell(replace(ctx, params=point))


def _sharper_point(x) -> dict:
    d = (2, 3, 8)[int(x[0])]
    m_rule = "2" if x[1] < 0.5 else "d"
    return dict(family="smreg", pair=list(THM3_PAIRS)[int(x[2])], d=d, m=m_rule, mult=1 + 10 ** float(x[3]))


SHARPER_FAMILIES = ("smreg", "1+u+u2", "cosh")
_SHARPER_DESIGN = _one_at_a_time(dict(family=("smreg", "1+u+u2"), pair=("parallel", "opposite"), d=(2, 4),
                                      m=("d",), mult=(1.01, 2.0)),
                                 dict(family="smreg", pair="opposite", d=4, m="d", mult=1.01))

THM3_SHARPER = Claim(
    id="performer.thm3.ort_sharper",
    source="Text after Theorem 3; Sec 2.4; title of Theorem 5; text after Theorem 5",
    statement="Orthogonal features give exponentially small tail bounds that are strictly better than for iid "
              "features, for every d, especially where the softmax kernel is small.",
    kind="tail-bound",
    tolerance=TAIL_TOLERANCE, units="excess exceedance probability (over the bound, or ORF over iid)",
    domain=dict(
        family=Choice("orthogonal against iid features: SMREG⁺ (Theorem 3) and F̂ with other beautiful g "
                      "(Theorem 5's title)", SHARPER_FAMILIES),
        pair=Choice("every input with z ≠ 0, including small softmax kernels (anti-parallel x, y with larger "
                    "norms): the register's pairs other than x = y = 0", tuple(k for k in THM3_PAIRS if k != "zero")),
        d=_d_axis("for every d (m >= 2 needs d >= 2)", 8, lo=2, points=(2,),
                  why="the register's d reach 16 at the full tier; the quick tier reaches 8"),
        m=_m_axis("m >= 2, m <= d (orthogonality couples rows)", ("2", "d")),
        mult=_mult_axis("a close to SMREG and far tails: a = mult·SMREG(x, y)")),
    readings={"bound_level": Reading("(a) Eq 41's orthogonal bound is strictly smaller than the iid bound, and both "
                                     "bounds hold (Theorem 3's bounds: SMREG⁺ only)",
                                     narrows=dict(family=Choice("Theorem 3's SMREG⁺ bounds", ("smreg",)))),
              "probability_level": Reading("(b) P[SMREG^ort+_m > a] <= P[SMREG⁺_m > a], and likewise for F̂^ort_m "
                                           "against F̂^iid_m")},
    cell=_sharper_sweep_cell,
    grid=tiers(dict(family=list(SHARPER_FAMILIES), pair=[k for k in THM3_PAIRS if k != "zero"], d=[2, 4, 8],
                    m=["2", "d"], mult=[1.01, 2.0, 5.0], design=["sparse"]),
               smoke=dict(family=["smreg"], pair=["opposite", "parallel"], d=[2], m=["d"], mult=[1.01],
                          design=["product"]),
               # full: one cell sweeps every mult of a (family, pair, d, m): the estimators' laws do not depend on a
               full=dict(d=list(TAIL_D), m=list(M_RULES), mult=[(1.01, 1.1, 1.5, 2.0, 5.0)], design=["product"])),
    where=lambda p, v: _m_ok(p, minimum=2) and (v == "probability_level" or p["family"] == "smreg")
    and _SHARPER_DESIGN(p),
    search=_sharper_search, universal=True, restarts=tiers(1, full=80),
    replicates=tiers(20_000, smoke=10_000, full=1_000_000),
    roles=("feature_map.positive", "beautiful.terms"), plot_x="pair",
    notes="Theorem 3's setting (SMREG⁺ with Ω_reg rows, iid or a Haar frame); (b) also for F̂^ort_m against "
          "F̂^iid_m with Ω_reg at the pair's ‖z‖. Bound level: the gap of the two bounds is e^{-θma} times Theorem "
          "3's correction, compared at every θ of the grid; probability level: independent exceedance indicators "
          "paired by index (a one-sided mean test of their difference).",
)

# ============================================================================ MGFs: Eqs 43 and 68

#: θ values of the MGF claims: absolute (exact cells) or ``κ = θ·sd(X_1^iid+...+X_m^iid)`` (Monte Carlo cells,
#: m > 3, where E e^{θS} is estimable: its relative variance grows like e^{κ²}).
MGF_THETAS = tuple(f"{10.0**k:g}" for k in range(-3, 5))
MGF_KAPPAS = ("k0.1", "k0.3")

#: Relative excess of the orthogonal MGF that matters: 0.1% moves a Chernoff bound by 0.1%.
MGF_TOLERANCE = 1e-3


@dataclass(frozen=True)
class MgfSetting:
    g: Maclaurin
    law: IsotropicLaw
    z_norm: float
    m: int
    theta: float
    F: float
    sd_ort: float  # sd of X_1^ort + ... + X_m^ort

    @property
    def log_iid(self) -> float:
        """``m log M_X(θ)`` (the iid MGF of the sum)."""
        return self.m * bt.log_mgf(self.g, self.law, self.z_norm, self.theta)

    def log_ratio(self) -> tuple[float, float]:
        """``(log E e^{θS_ort} - m log M_X(θ), error estimate)`` for m <= 3: the error is the change of the
        difference on coarser rules (both sides' rules coarsened, so shared errors cancel as they do in the
        difference); m = 1 is exactly 0 (the orthogonal ensemble of one row is the iid one)."""
        if self.m == 1:
            return 0.0, 0.0
        fine = bt.log_mgf_ort(self.g, self.law, self.z_norm, self.theta, self.m) - self.log_iid
        steps = bt.ORT_CHECK_STEPS[self.m]
        coarse = (bt.log_mgf_ort(self.g, self.law, self.z_norm, self.theta, self.m, step=steps)
                  - self.m * bt.log_mgf(self.g, self.law, self.z_norm, self.theta, step=steps[0]))
        return fine, abs(fine - coarse)


def _mgf_setting(p: dict) -> MgfSetting:
    d = p["d"]
    g, law = G_FAMILIES[p["g"]], _law(p["omega"], d)
    m = _m(p["m"], d) if isinstance(p["m"], str) else p["m"]
    sd_ort = m * math.sqrt(max(bt.mse(g, law, p["z"], m, orthogonal=True), 0.0))
    theta = p["theta"]
    if isinstance(theta, str):
        sd_iid = math.sqrt(m * bt.term_variance(g, law, p["z"]))
        theta = float(theta[1:]) / sd_iid if theta.startswith("k") else float(theta)
    return MgfSetting(g, law, p["z"], m, theta, bt.beautiful_value(g, law, p["z"]), sd_ort)


def _mgf_domain(p: dict) -> bool:
    """Exact cells (absolute θ) for m <= 3, Monte Carlo cells (κ) for m > 3 and z ≠ 0."""
    if not _m_ok(p):
        return False
    exact = _m(p["m"], p["d"]) <= 3
    return exact != p["theta"].startswith("k") and (exact or p["z"] > 0)


def _ort_mgf_ratio_samples(ctx: CellContext, st: MgfSetting) -> np.ndarray:
    """Replicates with mean ``E e^{θ(S - mF)}``, ``S = X_1^ort + ... + X_m^ort``: ``e^{θW} - θW - θ²(W² - σ²)/2``
    with ``W = S - mF``; the two control variates have mean 0 because ``E S = mF`` and ``Var S = σ²`` exactly."""
    z = st.z_norm * _unit(st.law.d, ctx.rng)
    w = _terms(ctx, st.g, st.law, st.m, z, ctx.replicates, True).sum(axis=1) - st.m * st.F
    tw = st.theta * w
    return np.exp(tw) - tw - 0.5 * (tw * tw - (st.theta * st.sd_ort) ** 2)


def _decided(ev: Evidence, lo: float, hi: float, tolerance: float) -> Evidence:
    """Flag an exact margin whose quadrature error straddles the tolerance (violation in ``[lo, hi]``)."""
    if lo <= tolerance < hi:
        return flagged(ev, f"quadrature error: the violation lies in [{lo:.3g}, {hi:.3g}], across the tolerance")
    return ev


def _mgf_excess(st: MgfSetting) -> tuple[float, float, float, dict]:
    """Relative excess ``E e^{θS_ort}/M_X^m - 1`` and its range under the quadrature error (m <= 3)."""
    log_ratio, err = st.log_ratio()
    if not math.isfinite(log_ratio):
        return math.nan, math.nan, math.nan, dict(log_ratio=log_ratio)
    excess = [math.expm1(min(log_ratio + k * err, 700.0)) for k in (0, -1, 1)]
    return (*excess, dict(theta=st.theta, log_ratio=log_ratio, quadrature_error=err))


def _mgf_ordering_cell(ctx: CellContext) -> Evidence:
    st = _mgf_setting(ctx.params)
    if st.m <= 3:
        excess, lo, hi, extra = _mgf_excess(st)
        return _decided(margin_evidence(-excess, tolerance=ctx.tolerance, extra=extra), lo, hi, ctx.tolerance)
    prediction = math.exp(st.log_iid - st.theta * st.m * st.F)
    return mean_test(_ort_mgf_ratio_samples(ctx, st), prediction, alternative="less", scale=prediction,
                     extra=dict(theta=st.theta), **ctx.test)


MGF_SEARCH_OMEGAS = ("reg", "half", "double", "uniform")


def _mgf_point(x) -> dict:
    """``x = (Ω index, g index, d index, m in {1, 2}, ‖z‖, log10 θ)``: the exact part of the domain."""
    d = TAIL_D[int(x[2])]
    return dict(omega=MGF_SEARCH_OMEGAS[int(x[0])], g=THM5_G[int(x[1])], d=d, m=min(int(x[3]), d), z=float(x[4]),
                theta=10 ** float(x[5]))


MGF_SEARCH_BOX = ([(0, len(MGF_SEARCH_OMEGAS) - 1), (0, len(THM5_G) - 1), (0, len(TAIL_D) - 1), (1, 2),
                   (0.0, 4.0), (-3.0, 4.0)], [True, True, True, True, False, False])


def _coarse_excess(x) -> float:
    """The relative excess on a coarse rule: the search's objective (the found point is then judged finely)."""
    st = _mgf_setting(_mgf_point(x))
    log_ort = bt.log_mgf_ort(st.g, st.law, st.z_norm, st.theta, st.m, step=(1 / 16, 1 / 8)[:st.m])
    return math.expm1(min(log_ort - st.log_iid, 700.0))


def _mgf_ordering_search(ctx: CellContext) -> Evidence:
    """Minimise ``-(relative excess)`` over the exactly computable part of the domain (m <= 2: a 2-D rule)."""
    res = minimize_margin(lambda x: -_coarse_excess(x), MGF_SEARCH_BOX[0], rng=ctx.rng, restart=ctx.restart or 0,
                          integer=MGF_SEARCH_BOX[1], maxiter=SEARCH_ITERATIONS // 4)
    excess, lo, hi, extra = _mgf_excess(_mgf_setting(_mgf_point(res.x)))
    ev = margin_evidence(-excess, tolerance=ctx.tolerance, extra=dict(extra, point=_mgf_point(res.x)))
    return _decided(ev, lo, hi, ctx.tolerance)


MGF_GRID = tiers(dict(omega=list(THM5_OMEGAS), g=list(THM5_G), d=[2, 4], m=list(M_POINTS), z=[0.0, 1.0],
                      theta=["0.001", "1", "100", "k0.1", "k0.3"], design=["sparse"]),
                 smoke=dict(omega=["reg"], g=["exp", "1+u+u2"], d=[2, 4], m=["1", "d"], z=[0.0, 1.0],
                            theta=["1", "k0.3"], design=["product"]),
                 full=dict(d=list(TAIL_D), m=list(M_RULES), z=[0.0, 0.25, 0.5, 1.0, 2.0, 4.0],
                           theta=list(MGF_THETAS) + list(MGF_KAPPAS), design=["product"]))
#: quick: the old product (Ω in {reg, double}, g in {exp/1000, exp, 10exp, 1+u+u2}, ‖z‖ = 1) plus each further
#: value once
_MGF_DESIGN = _one_at_a_time(dict(omega=("reg", "double"), g=("exp/1000", "exp", "10exp", "1+u+u2"), z=(1.0,)),
                             dict(omega="reg", g="exp", d=2, z=1.0, theta="1"))

MGF_OMEGAS = Choice("beautiful F with a bounded radial law (Theorem 5's sweep: Ω_reg, radius uniform on "
                    "[0, 2√d], fixed radius 0.5√d or 2√d), where both MGFs are finite", THM5_OMEGAS)
MGF_D = _d_axis("m <= d, every d", 16, why="the search and the full grid reach 16, the register's largest d")
MGF_THETA = Range("every θ > 0", 0.0, math.inf, strict=(True, False), up_to=(None, 1e4),
                  why="the register's θ grid 1e-3..1e4, explored by the search (log-uniform)")

EQ43 = Claim(
    id="performer.eq43.mgf_ordering", source="F.4.2, Eq 43 and the sentence after it",
    statement="P[F̂^ort_m(z) > a] <= E[e^{θ(X_1^ort+...+X_m^ort)}]/e^{θma}; it suffices that for every θ > 0, "
              "E[e^{θ(X_1^ort+...+X_m^ort)}] < E[e^{θ(X_1^iid+...+X_m^iid)}] (strict).",
    kind="inequality",
    tolerance=MGF_TOLERANCE, units="relative excess of the orthogonal MGF over the iid MGF",
    domain=dict(omega=MGF_OMEGAS, g=Choice("X_i = g(ω_iᵀz), g entire with a_i >= 0 (Theorem 5's families)", THM5_G),
                d=MGF_D, m=_m_axis("m <= d, including the boundary m = 1"),
                z=_z_axis("every z, including z = 0", 4.0, why="the register's ‖z‖ ∈ {0, ..., 4}; the search "
                                                                "explores [0, 4]"),
                theta=MGF_THETA),
    searched=("d", "z", "theta"),
    cell=_mgf_ordering_cell, grid=MGF_GRID, where=lambda p, v: _mgf_domain(p) and _MGF_DESIGN(p),
    search=_mgf_ordering_search, universal=True, restarts=tiers(1, full=160),
    replicates=tiers(30_000, smoke=20_000, full=400_000),
    roles=("beautiful.terms",), plot_x="theta",
    notes="The strict inequality is tested: a violation is a relative excess >= 0 of the orthogonal MGF beyond "
          "the tolerance. Exact (quadrature of the frame's projection law, with an error estimate) for m <= 3 at θ "
          "from 1e-3 to 1e4 (m = 3 in the full tier only: a 3-D rule); Monte Carlo with control variates for m > 3 "
          "at κ = θ·sd(S_iid) in {0.1, 0.3}. At m = 1 and z = 0 both sides are equal: strictness fails there by a "
          "violation of size 0, below any tolerance. The first sentence (Markov's inequality) is not measured "
          "separately: it is the Chernoff bound of lemma4's minus reading.",
)


def _gap_domain(p: dict) -> bool:
    """Where Eq 68's right-hand side is positive (elsewhere it reduces to Δ >= 0, Eq 43)."""
    g, m = G_FAMILIES[p["g"]], _m(p["m"], p["d"])
    return _m_ok(p) and not p["theta"].startswith("k") and m >= 2 and p["z"] > 0 and g.a1 > 0 and (
        g.a0 > 0 or m == 2)


def _gap_ratio(st: MgfSetting) -> tuple[float, float, float, dict]:
    """``Δ/C`` with ``Δ = M_X^m - E e^{θS_ort}`` and C Eq 68's right-hand side, with its error range.

    Jensen (``E e^{θS} >= e^{θmF}``) bounds ``Δ <= M_X^m - e^{θmF}`` for every m: when that is below C the ratio's
    upper end is certain. Otherwise m <= 3 uses the exact orthogonal MGF; m > 3 stays undecided (nan).
    """
    log_c = bt.log_orf_gap_bound(st.g, st.law, st.z_norm, st.theta, st.m)
    log_iid = st.log_iid
    jensen = bt.SignedLog.difference(log_iid, st.theta * st.m * st.F)
    extra = dict(theta=st.theta, log_bound=log_c, log_mgf_iid=log_iid)

    def ratio(gap: bt.SignedLog) -> float:
        return gap.sign * math.exp(min(gap.log_abs - log_c, 700.0)) if gap.sign else 0.0

    if jensen.sign <= 0 or jensen.log_abs < log_c:
        r = ratio(jensen)
        return r, -math.inf, r, dict(extra, decided="Jensen upper bound")
    if st.m > 3:
        return math.nan, math.nan, math.nan, dict(extra, decided="undecided (m > 3, Jensen does not decide)")
    log_ratio, err = st.log_ratio()
    values = [ratio(bt.SignedLog.difference(log_iid, log_iid + log_ratio + k * err)) for k in (0, 1, -1)]
    return (*values, dict(extra, decided="exact", log_ratio=log_ratio, quadrature_error=err))


def _gap_evidence(ctx: CellContext, st: MgfSetting, point: dict | None = None) -> Evidence:
    r, lo, hi, extra = _gap_ratio(st)
    if math.isnan(r):
        return exact_test(math.nan, 0.0, tolerance=ctx.tolerance, extra=extra)
    ev = margin_evidence(r - 1.0, tolerance=ctx.tolerance, extra=dict(extra, point=point) if point else extra)
    return _decided(ev, 1.0 - hi, 1.0 - lo, ctx.tolerance)


def _mgf_gap_cell(ctx: CellContext) -> Evidence:
    """The relative shortfall ``1 - Δ/C`` of Eq 68 (see :func:`_gap_ratio`)."""
    return _gap_evidence(ctx, _mgf_setting(ctx.params))


def _mgf_gap_search(ctx: CellContext) -> Evidence:
    """Minimise the Jensen upper bound of ``Δ/C - 1`` over the whole domain (every m <= d), then judge exactly."""
    def point(x):
        d = TAIL_D[int(x[2])]
        return dict(omega=MGF_SEARCH_OMEGAS[int(x[0])], g=THM5_G[int(x[1])], d=d,
                    m=min(d, 2 + int(round(x[3] * max(d - 2, 0)))), z=float(x[4]), theta=10 ** float(x[5]))

    def log_bound(st: MgfSetting) -> float:  # -inf outside the domain (m = 1, a_1 = 0, a_0 = 0 with m > 2)
        return -math.inf if st.m < 2 else bt.log_orf_gap_bound(st.g, st.law, st.z_norm, st.theta, st.m)

    def margin(x):
        st = _mgf_setting(point(x))
        log_c = log_bound(st)
        if log_c == -math.inf:  # the right-hand side is 0: outside the claim's domain
            return math.inf
        jensen = bt.SignedLog.difference(st.log_iid, st.theta * st.m * st.F)
        return (jensen.sign * math.exp(min(jensen.log_abs - log_c, 700.0)) if jensen.sign else 0.0) - 1.0

    box = MGF_SEARCH_BOX[0][:3] + [(0.0, 1.0), (0.05, 4.0), (-3.0, 4.0)]
    res = minimize_margin(margin, box, rng=ctx.rng, restart=ctx.restart or 0, integer=MGF_SEARCH_BOX[1],
                          maxiter=SEARCH_ITERATIONS)
    found = _mgf_setting(point(res.x))
    if log_bound(found) == -math.inf:  # every point the search saw lies outside the claim's domain
        return margin_evidence(math.inf, tolerance=ctx.tolerance, extra=dict(point=point(res.x), outside=True))
    return _gap_evidence(ctx, found, point(res.x))


EQ68_G = tuple(k for k in THM5_G if G_FAMILIES[k].a1 > 0)
_EQ68_DESIGN = _one_at_a_time(dict(omega=("reg", "double"), g=("exp/1000", "exp", "10exp", "1+u+u2", "u+u2")),
                              dict(omega="reg", g="exp", d=2, m="d", z=1.0, theta="1"))

EQ68 = Claim(
    id="performer.eq68.mgf_gap_bound", source="F.4.2, Eqs 50, 66-68",
    statement="Δ := E e^{θΣX_i^iid} - E e^{θΣX_i^ort} is a sum of non-negative terms ĉ·Δ̂; keeping the j = 4 "
              "terms with two indices equal to 2, weighted a_1²·a_0^{m-2}, gives Δ >= (θ⁴m(m-1)/(4d²(d+2)))·"
              "a_1²·a_0^{m-2}·‖z‖⁴·(E‖ω‖²)² (Eq 68).",
    kind="inequality",
    tolerance=0.01, units="relative shortfall of Δ below the bound, 1 - Δ/RHS",
    domain=dict(omega=MGF_OMEGAS,
                g=Choice("g entire with a_i >= 0 and a_1 > 0 (with a_1 = 0 the right-hand side is 0 and Eq 68 is "
                         "Δ >= 0: the eq43 claim)", EQ68_G),
                d=MGF_D,
                m=_m_axis("m <= d with m >= 2 (m = 1: the right-hand side is 0); a_0 = 0 only with m = 2 (0^0 = 1)",
                          ("2", "d")),
                z=Range("every z ≠ 0 (at z = 0 the right-hand side is 0)", 0.0, math.inf, strict=(True, False),
                        up_to=(None, 4.0), why="the register's ‖z‖ up to 4; the search explores [0.05, 4]"),
                theta=MGF_THETA),
    searched=("d", "z", "theta"),
    cell=_mgf_gap_cell,
    grid=tiers(dict(omega=list(THM5_OMEGAS), g=list(EQ68_G), d=[2, 4, 16], m=["2", "d"], z=[1.0],
                    theta=["0.001", "1", "1000"], design=["sparse"]),
               smoke=dict(omega=["reg"], g=["exp/1000", "exp"], d=[2], m=["d"], theta=["1", "1000"],
                          design=["product"]),
               full=dict(d=list(TAIL_D), m=list(M_RULES), z=[0.0, 0.25, 0.5, 1.0, 2.0, 4.0],
                         theta=list(MGF_THETAS) + list(MGF_KAPPAS), design=["product"])),
    where=lambda p, v: _gap_domain(p) and _EQ68_DESIGN(p),
    search=_mgf_gap_search, universal=True, restarts=tiers(1, full=160),
    plot_x="theta",
    notes="Cells where the right-hand side is positive (a_1 > 0, z ≠ 0, m >= 2, a_0 > 0 or m = 2). No Monte Carlo: "
          "Δ/C is below 1/100 of the orthogonal MGF's Monte Carlo resolution wherever it matters, so m > 3 cells "
          "are decided by Jensen's bound or reported undecided. The first sentence (Δ >= 0 term by term) is the "
          "eq62 claim (Δ̂ >= 0) and, summed, the eq43 claim. The weight a_1²·a_0^{m-2} is not the coefficient of "
          "Y_1²Y_2² in X_1²X_2² (that is (a_1²+2a_0a_2)²), and the bound scales by λ^{m-4} under g -> λg, "
          "θ -> θ/λ while Δ is invariant.",
)

# ================================================================================ Eqs 54 and 62

#: Exponent tuples (d_1..d_m) of Eq 54's sweep: odd and even entries, Σd_i <= 8.
EQ54_TUPLES = {"2": (2,), "1,1": (1, 1), "2,2": (2, 2), "3,1": (3, 1), "4,2": (4, 2), "2,2,2": (2, 2, 2),
               "1,2,1": (1, 2, 1), "4,4": (4, 4), "6,2": (6, 2), "2,2,2,2": (2, 2, 2, 2), "3,3,2": (3, 3, 2)}
#: With Gaussian radii, Y = Π(ω_iᵀz)^{d_i} of degree Σd_i > 4 is so skewed (skewness ~ 30 for (4, 2)) that the mean
#: needs ~1e5 draws to be nearly normal: the grid axis ``gaussian_degree`` caps the degree of Gaussian-radius cases
#: (4 below the full tier, 8 at it); Ω_reg takes every tuple.


def _eq54_prediction(law: IsotropicLaw, z_norm: float, ks: tuple, orthogonal: bool) -> float:
    """The paper's right-hand sides: Eq 55 (orthogonal; direction moment by Lemma 5) or Eq 56 (iid)."""
    ks_arr = np.asarray(ks)
    radial = float(np.exp(bt.log_radial_moment(law, ks_arr).sum())) * z_norm ** int(ks_arr.sum())
    if orthogonal:
        return radial * bt.normalized_gaussian_moment(law.d, ks)
    return radial * math.prod(bt.normalized_gaussian_moment(law.d, (k,)) for k in ks)


def _moment_law(law: IsotropicLaw, z_norm: float, ks: tuple, orthogonal: bool) -> tuple[float, float, float]:
    """``(E Y, sd Y, skewness Y)`` of ``Y = Π(ω_iᵀz)^{d_i}`` from the frame-moment route (not Lemma 5)."""
    ks = np.asarray(ks)
    m1, m2, m3 = (bt.mixed_moment(law, z_norm, k * ks, orthogonal=orthogonal) for k in (1, 2, 3))
    var = max(m2 - m1 * m1, 0.0)
    skew = (m3 - 3 * m1 * m2 + 2 * m1**3) / var**1.5 if var > 0 else 0.0
    return m1, math.sqrt(var), skew


def _eq54_case(p: dict) -> tuple[IsotropicLaw, tuple]:
    return _law(p["law"], p["d"]), EQ54_TUPLES[p["tuple"]]


def _eq54_where(p: dict, variant: str) -> bool:
    ks = EQ54_TUPLES[p["tuple"]]
    return len(ks) <= p["d"] and (p["law"] != "gaussian" or sum(ks) <= p["gaussian_degree"])


def _eq54_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    (law, ks), orthogonal = _eq54_case(p), p["side"] == "ort"
    z_norm = 0.8
    prediction = _eq54_prediction(law, z_norm, ks, orthogonal)
    mean, sd, skew = _moment_law(law, z_norm, ks, orthogonal)
    rms = math.sqrt(sd * sd + mean * mean)
    exact = exact_test(prediction, mean, tolerance=ctx.tolerance, scale=rms)
    z = z_norm * _unit(law.d, ctx.rng)
    # replicates sized from the exact moments (sd/RMS <= 1 and the skewness of Y: a resolution of half the
    # tolerance at this sub-test's level, outcome-free), capped by the tier's count
    n = _replicates_for(ctx, sd / rms if rms > 0 else 0.0, skew, test=ctx.sub_test(2))
    omega = beautiful_projections(law, len(ks), rng=ctx.rng, orthogonal=orthogonal, size=n)
    y = np.prod((omega @ z) ** np.asarray(ks), axis=1)
    mc = mean_test(y, prediction, scale=rms, sd=sd, **ctx.sub_test(2))
    return combine([exact, mc], extra=dict(prediction=prediction, frame_route=mean))


EQ54 = Claim(
    id="performer.eq54.orf_moment_factorization", source="F.4.2, Eqs 52-56",
    statement="With a Haar frame and independently chosen lengths, Y = Π((ω_i^ort)ᵀz)^{d_i} has the law of "
              "Π(e_iᵀ(g/‖g‖)‖z‖)^{d_i}·Π‖ω_i‖^{d_i} (Eq 53), hence E[Π((ω_i^ort)ᵀz)^{d_i}] = Π E‖ω_i‖^{d_i}·"
              "E[Π(e_iᵀv)^{d_i}]·‖z‖^{Σd_i} (Eqs 54-55), and for iid rows E[Π((ω_i^iid)ᵀz)^{d_i}] = "
              "Π E‖ω_i‖^{d_i}·‖z‖^{Σd_i}·Π E[g_i^{d_i}/‖g‖^{d_i}] (Eq 56).",
    kind="identity",
    tolerance=0.05, units="bias in units of the RMS of the product Y",
    domain=dict(
        law=Choice("isotropic Ω: N(0, I_d) and Ω_reg (the register's)", ("gaussian", "reg")),
        tuple=Choice("exponent tuples d_1..d_m with Σd_i <= 8, odd and even entries", tuple(EQ54_TUPLES)),
        side=Choice("the orthogonal (Eqs 54-55) and the iid (Eq 56) forms", ("ort", "iid")),
        d=_d_axis("m <= d, every d", 4, why="the moments are Beta integrals in d (no structural change beyond a "
                                            "full frame, m = d, tested at d = 2); 8 at the full tier")),
    cell=_eq54_cell,
    grid=tiers(dict(law=["gaussian", "reg"], tuple=list(EQ54_TUPLES), d=[1, 2, 4], side=["ort", "iid"],
                    gaussian_degree=[4]),
               smoke=dict(law=["reg"], tuple=["2,2", "3,1"], d=[3]),
               full=dict(d=[1, 2, 3, 4, 8], gaussian_degree=[8])),
    where=_eq54_where,
    replicates=tiers(40_000, smoke=20_000, full=2_000_000),
    plot_x="tuple",
    notes="‖z‖ = 0.8 in a random direction. Exact part: the paper's right-hand sides (Lemma 5 for the direction "
          "moment) against E Y from a Beta-integral recursion over the frame's coordinates; Monte Carlo part: the "
          "estimator's rows, with the exact standard deviation of Y (a Catoni sequence). Coverage is per axis: "
          "below the full tier Gaussian radii are tested with tuples of degree <= 4 (grid axis gaussian_degree).",
)


def _nonzero_tuples(max_nonzero: int, max_entry: int = 8):
    """Sorted tuples of 1..max_entry with 1..max_nonzero entries (zeros do not change Δ̂, L or τ)."""
    for k in range(1, max_nonzero + 1):
        yield from itertools.combinations_with_replacement(range(1, max_entry + 1), k)


def _eq62_violations(law: IsotropicLaw, ks: tuple) -> tuple[float, float, float]:
    """``(identity error, zero-statement error, lower-bound shortfall)`` relative to ``L`` (1 where L = 0)."""
    z_norm = 1.0
    direct = (bt.mixed_moment(law, z_norm, ks, orthogonal=False)
              - bt.mixed_moment(law, z_norm, ks, orthogonal=True))
    log_l = bt.log_mixed_moment_factor(law, z_norm, ks)
    scale = math.exp(log_l) if log_l > -math.inf else 1.0
    identity = abs(direct - bt.mixed_moment_gap(law, z_norm, ks)) / scale
    admissible = all(k % 2 == 0 for k in ks) and len(ks) >= 2
    zero = 0.0 if admissible else abs(direct) / scale
    shortfall = max(0.0, 2 / (law.d + 2) - direct / scale) if admissible else 0.0
    return identity, zero, shortfall


def _eq62_cell(ctx: CellContext) -> Evidence:
    law = _law(ctx.params["omega"], ctx.params["d"])
    tuples = [ks for ks in _nonzero_tuples(min(ctx.params["nonzero"], law.d))]
    errors = np.array([_eq62_violations(law, ks) for ks in tuples])
    worst = tuples[int(errors.max(axis=1).argmax())]
    return exact_test(errors, 0.0, tolerance=ctx.tolerance,
                      extra=dict(tuples=len(tuples), worst_tuple=list(worst),
                                 max_identity=float(errors[:, 0].max()), max_zero=float(errors[:, 1].max()),
                                 max_shortfall=float(errors[:, 2].max())))


EQ62 = Claim(
    id="performer.eq62.mixed_moment_gap",
    source="F.4.2, Eqs 51 and 57-63, the observations after Eq 63, the display before Eq 66",
    statement="Δ̂(d_1..d_m) = E[Π((ω_i^iid)ᵀz)^{d_i}] - E[Π((ω_i^ort)ᵀz)^{d_i}] = L(d_1..d_m)(1 - τ(d_1..d_m)) "
              "(Eq 62); Δ̂ = 0 if some d_i is odd or at most one is nonzero; for all d_i even with at least two "
              "nonzero, Δ̂ >= (2/(d+2))·L >= 0.",
    kind="identity",
    tolerance=1e-10, units="error relative to L(d_1..d_m)",
    domain=dict(
        omega=OMEGAS_3,
        d=_d_axis("m <= d, every d", 64, why="exact evaluation; the register's largest d is 64"),
        nonzero=Integers("every tuple d_1..d_m, m <= d, entries in {0..8}: enumerated by their nonzero entries "
                         "(zeros change neither Δ̂ nor L nor τ), all tuples with at most `nonzero` of them "
                         "(and at most d)", 1, math.inf, up_to=3, through="nonzero",
                         why="every sorted tuple with <= 3 nonzero entries in 1..8 (4 at the full tier); more "
                             "nonzero entries only lengthen the same products of chi and Gaussian moments")),
    cell=_eq62_cell,
    grid=tiers(dict(omega=["gaussian", "reg", "uniform"], d=[1, 2, 3, 4, 8, 16, 64], nonzero=[3]),
               smoke=dict(omega=["reg"], d=[1, 3], nonzero=[2]), full=dict(nonzero=[4])),
    plot_x="d",
    notes="Both sides exact: the left as the difference of the iid moment (Eq 56) and the orthogonal moment "
          "from a Beta-integral recursion over the frame's coordinates; the right from chi and Gaussian moments "
          "(Eqs 61, 63). The Monte Carlo cross-check of the two moments is the eq54 claim.",
)

# =================================================================================== Lemmas 5-6


#: Monte Carlo of Lemma 5's ratio only for tuples whose exact skewness is at most this: with larger skewness the
#: mean of 4e4 draws cannot resolve 5% at the cells' levels.
MAX_SKEWNESS = 10.0
#: ... and whose exact kurtosis is at most ``replicates / KURTOSIS_PER_REPLICATE``: the odd tuples have skewness 0
#: but kurtosis up to 6e4 at d = 16, s = 4; with kurtosis of the order of n a few replicates dominate the running
#: sample variance that the Catoni sequence also uses, and the cell cannot resolve the tolerance (power, not
#: validity: the exact part decides those tuples).
KURTOSIS_PER_REPLICATE = 100

def _lemma5_tuples(s: int, k_max: int):
    return list(itertools.combinations_with_replacement(range(1, k_max + 1), s))


def _lemma5_law(d: int, ks: tuple) -> tuple[float, float, float, float]:
    """``(mean, sd, skewness, kurtosis)`` of ``Π v_i^{k_i}``, ``v = g/‖g‖`` (the frame-moment route of
    :func:`_moment_law`, not Lemma 5)."""
    law = IsotropicLaw(d, "fixed", 1.0)
    mean, sd, skew = _moment_law(law, 1.0, ks, orthogonal=True)
    if sd == 0:
        return mean, sd, skew, 0.0
    m1, m2, m3, m4 = (bt.mixed_moment(law, 1.0, j * np.asarray(ks), orthogonal=True) for j in (1, 2, 3, 4))
    return mean, sd, skew, (m4 - 4 * m3 * m1 + 6 * m2 * m1**2 - 3 * m1**4) / sd**4


def _lemma5_cell(ctx: CellContext) -> Evidence:
    d, s = ctx.params["d"], ctx.params["s"]
    tuples = _lemma5_tuples(s, ctx.params["k_max"])
    rms = np.array([math.sqrt(bt.frame_moment(d, tuple(2 * k for k in ks))) for ks in tuples])
    lhs = np.array([bt.frame_moment(d, ks) for ks in tuples])
    rhs = np.array([bt.normalized_gaussian_moment(d, ks) for ks in tuples])
    laws = {ks: _lemma5_law(d, ks) for ks in tuples}
    moderate = [ks for ks in tuples if abs(laws[ks][2]) <= MAX_SKEWNESS
                and laws[ks][3] <= ctx.replicates / KURTOSIS_PER_REPLICATE]
    chosen = [moderate[i] for i in np.linspace(0, len(moderate) - 1, min(6, len(moderate))).astype(int)]
    parts = [exact_test(lhs, rhs, tolerance=ctx.tolerance, scale=rms)]
    g = ctx.rng.standard_normal((ctx.replicates, d))
    v = g[:, :s] / np.linalg.norm(g, axis=1, keepdims=True)
    for ks in chosen:
        mean, sd, _, _ = laws[ks]
        y = np.prod(v ** np.asarray(ks), axis=1)
        parts.append(mean_test(y, bt.normalized_gaussian_moment(d, ks), scale=math.sqrt(sd * sd + mean * mean),
                               sd=sd, **ctx.sub_test(len(chosen) + 1)))
    return combine(parts, extra=dict(tuples=len(tuples), monte_carlo=[list(k) for k in chosen]))


LEMMA5 = Claim(
    id="performer.lemma5.normalized_moments", source="Lemma 5, Eq 57; proof Eqs 58-59",
    statement="For s in N_+ with s <= n, k_1..k_s in N_+ and g ~ N(0, I_d): E[g_1^{k_1}···g_s^{k_s}/‖g‖^{k_1+...+k_s}] "
              "= Π E[g_i^{k_i}] / E[‖g‖^{k_1+...+k_s}].",
    kind="identity",
    tolerance=0.05, units="error in units of the RMS of g_1^{k_1}···g_s^{k_s}/‖g‖^{Σk}",
    domain=dict(
        d=_d_axis("g ~ N(0, I_d), every d (n read as d)", 16, why="the register's largest d; both sides are "
                                                                  "Gamma-function ratios in d"),
        s=Integers("s in N_+ with s <= d", 1, math.inf, up_to=4,
                   why="the register sweeps s up to min(d, 4): every multiset of k_i in {1..k_max} for each s"),
        k=Integers("k_1..k_s in N_+", 1, math.inf, up_to=6, through="k_max",
                   why="the register's k_i in {1..6}: one cell evaluates every multiset of k_i in {1..k_max} "
                       "exactly (the statement is symmetric in the indices); both sides are products of Gamma "
                       "ratios for every k, with no structural change beyond the parity of each k_i")),
    cell=_lemma5_cell,
    grid=tiers(dict(d=[1, 2, 3, 4, 8, 16], s=[1, 2, 3, 4], k_max=[6]), smoke=dict(d=[2, 4], s=[2])),
    where=lambda p, v: p["s"] <= p["d"],
    replicates=tiers(40_000, smoke=20_000, full=1_000_000),
    plot_x="d",
    notes="Left side exactly through Dirichlet moments (a Beta-integral recursion over the coordinates of "
          "g/‖g‖, independent of the Gaussian-radius argument of the proof) for every multiset of k_i in "
          "{1..k_max}; k_i > k_max is not tested. Monte Carlo cross-check for six tuples per cell with the exact "
          "standard deviation (a Catoni sequence), among the tuples whose exact skewness is <= 10 and kurtosis "
          "<= replicates/100 (heavier ones cannot resolve the tolerance and are decided by the exact part only).",
)


def _even_tuples(m: int, max_entry: int) -> np.ndarray:
    """All sorted tuples of even entries in ``0..max_entry`` of length m with at least two nonzero."""
    rows = np.array(list(itertools.combinations_with_replacement(range(0, max_entry + 1, 2), m)))
    return rows[(rows > 0).sum(axis=1) >= 2]


def _log_tau_rows(d: int, rows: np.ndarray) -> np.ndarray:
    lmu = bt.log_chi_moment(d, np.arange(rows.sum(axis=1).max() + 1))
    return lmu[rows].sum(axis=1) - lmu[rows.sum(axis=1)]


def _tau_table(d: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Exhaustive table: entries up to 40 (m <= 4) or 16 (m = 8)."""
    rows = _even_tuples(m, 40 if m <= 4 else 16)
    return rows, np.exp(_log_tau_rows(d, rows))


def _tau_bound_cell(ctx: CellContext) -> Evidence:
    d, m = ctx.params["d"], ctx.params["m"]
    rows, taus = _tau_table(d, m)
    i = int(taus.argmax())
    return margin_evidence(d / (d + 2) - taus[i], tolerance=ctx.tolerance,
                           extra=dict(tuples=len(rows), argmax=rows[i].tolist(), max_tau=float(taus[i])))


def _tau_search(ctx: CellContext) -> Evidence:
    """Adversarial search over d in [1, 1024], m in [2, 8] and even entries up to 40."""
    def decode(x):
        d = int(round(2 ** x[0]))
        m = int(round(x[1]))
        return d, np.array([2 * int(round(k)) for k in x[2:2 + m]])

    def margin(x):
        d, ks = decode(x)
        if (ks > 0).sum() < 2:
            return math.inf
        return d / (d + 2) - math.exp(bt.log_tau(d, ks))

    res = minimize_margin(margin, [(0.0, 10.0), (2, 8)] + [(0.0, 20.0)] * 8, rng=ctx.rng, restart=ctx.restart or 0,
                          integer=[False, True] + [True] * 8, maxiter=SEARCH_ITERATIONS)
    d, ks = decode(res.x)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(d=d, tuple=ks.tolist()))


TAU_GRID = tiers(dict(d=[1, 2, 3, 5, 8, 16, 64, 1024], m=[2, 3, 4, 8]), smoke=dict(d=[1, 3], m=[2, 3]))
TAU_DOMAIN = dict(
    d=_d_axis("d >= 1", 1024, points=(1, 2, 3), why="τ is a ratio of Gamma functions in d; the register's largest "
                                                   "d, also explored by the search"),
    m=Integers("tuples d_1..d_m of even entries (up to 40; 16 for m = 8), at least two nonzero", 2, math.inf,
               up_to=8, why="the register's m ∈ {2, 3, 4, 8}: exhaustive over sorted tuples (τ is symmetric; extra "
                            "zero entries do not change it)"))

LEMMA6_BOUND = Claim(
    id="performer.lemma6.tau_bound", source="Lemma 6, Eqs 64-65",
    statement="If d_i, d_j > 0 for some i ≠ j and all d_i are even, then τ(d_1..d_m) = Π μ_d(d_i)/μ_d(Σd_i) "
              "<= d/(d+2), with μ_d(j) = 2^{j/2}Γ((d+j)/2)/Γ(d/2).",
    kind="inequality",
    tolerance=1e-12, units="τ - d/(d+2)",
    domain=TAU_DOMAIN,
    cell=_tau_bound_cell, grid=TAU_GRID, search=_tau_search, universal=True,
    restarts=tiers(4, smoke=1, full=240), plot_x="d",
    notes="Exhaustive over sorted tuples (τ is symmetric) with entries up to 40 (m <= 4) or 16 (m = 8), plus an "
          "adversarial search over d up to 1024, m up to 8 and entries up to 40.",
)


def _tau_argmax_cell(ctx: CellContext) -> Evidence:
    d, m = ctx.params["d"], ctx.params["m"]
    rows, taus = _tau_table(d, m)
    top = taus.max()
    maximisers = rows[taus >= top * (1 - 1e-13)]
    wrong = [r.tolist() for r in maximisers if sorted(r[r > 0].tolist()) != [2, 2]]
    value = abs(top - d / (d + 2)) / (d / (d + 2))
    return exact_test(np.array([value, float(bool(wrong))]), 0.0, tolerance=ctx.tolerance,
                      extra=dict(max_tau=float(top), maximisers=[r.tolist() for r in maximisers[:4]], wrong=wrong[:4]))


LEMMA6_ARGMAX = Claim(
    id="performer.lemma6.tau_argmax", source="Lemma 6, proof",
    statement="For fixed d, the maximum of τ over admissible tuples is attained at (2, 2, 0, ..., 0), up to "
              "permutation, and equals d/(d+2).",
    kind="optimality",
    tolerance=1e-12, units="relative error of the maximum; 1 if a maximiser is not (2, 2, 0..0)",
    domain=TAU_DOMAIN,
    cell=_tau_argmax_cell, grid=TAU_GRID, plot_x="d",
    notes="Exhaustive enumeration of sorted tuples (every permutation has the same τ).",
)

# ============================================================================ Theorem 6 and Eq 73

MSE_G = ("exp", "10exp", "cosh", "1+u+u2", "u2", "u4", "u+u3")


@dataclass(frozen=True)
class MseSetting:
    g: Maclaurin
    law: IsotropicLaw
    z_norm: float
    m: int
    F: float
    mse_iid: float

    @property
    def pair_gap(self) -> float:
        """``(1 - 1/m)(E X_1X_2^{iid} - E X_1X_2^{ort})`` with the orthogonal pair moment of the frame route (the
        ``a_0`` terms both share left out: :func:`rfkit.theory.beautiful.ort_pair_gap`)."""
        if self.m == 1:
            return 0.0
        return (1 - 1 / self.m) * bt.ort_pair_gap(self.g, self.law, self.z_norm)


def _mse_setting(p: dict) -> MseSetting:
    d = p["d"]
    g, law = G_FAMILIES[p["g"]], _law(p["omega"], d)
    m = _m(p["m"], d) if isinstance(p["m"], str) else p["m"]
    return MseSetting(g, law, p["z"], m, bt.beautiful_value(g, law, p["z"]),
                      bt.mse(g, law, p["z"], m, orthogonal=False))


def _ort_squared_errors(ctx: CellContext, st: MseSetting, orthogonal: bool = True) -> np.ndarray:
    z = st.z_norm * _unit(st.law.d, ctx.rng)
    est = _terms(ctx, st.g, st.law, st.m, z, ctx.replicates, orthogonal).mean(axis=1)
    return (est - st.F) ** 2


def _thm6_cell(ctx: CellContext) -> Evidence:
    st = _mse_setting(ctx.params)
    bound = bt.thm6_improvement(st.g, st.law, st.z_norm, st.m)
    scale = _scale(st.mse_iid)
    extra = dict(mse_iid=st.mse_iid, improvement_bound=bound)
    if ctx.params["part"] == "exact":
        gap = st.pair_gap
        return margin_evidence(gap - bound, tolerance=ctx.tolerance, scale=scale, extra=dict(extra, gap=gap))
    # terms g(ωᵀz) lie in theory's [lo, hi] (bounded radial laws: the Monte Carlo domain), so each squared error
    # lies in [0, max(hi - F, F - lo)²] whatever the orthogonal coupling: a betting test, non-asymptotic (the
    # asymptotic one is unreliable on these skewed, heavy-tailed replicates)
    lo, hi = bt.term_range(st.g, st.law, st.z_norm)
    return mean_test(_ort_squared_errors(ctx, st), st.mse_iid - bound, alternative="less", scale=scale,
                     bounds=(0.0, max(hi - st.F, st.F - lo) ** 2), extra=extra, **ctx.test)


MSE_GRID = tiers(dict(omega=["gaussian", "reg", "uniform"], g=list(MSE_G), d=[1, 2, 64], m=list(M_POINTS),
                      z=[0.0, 0.5, 1.5, 2.5], part=["exact", "mc"], design=["sparse"]),
                 smoke=dict(omega=["reg"], g=["exp", "u2"], d=[3], m=["d"], z=[0.5], design=["product"]),
                 full=dict(d=[1, 2, 3, 4, 8, 16, 64], m=list(M_RULES), z=[0.0, 0.5, 1.0, 1.5, 2.0, 2.5],
                           design=["product"]))
#: quick: the old product (g in {exp, 1+u+u2, u2, u+u3}, d in {2, 64}, m in {2, d}, ‖z‖ in {0.5, 1.5}) plus each
#: further value once from (Ω_reg, exp, d = 2, m = d, ‖z‖ = 0.5)
_MSE_DESIGN = _one_at_a_time(dict(g=("exp", "1+u+u2", "u2", "u+u3"), d=(2, 64), m=("2", "d"), z=(0.5, 1.5)),
                             dict(omega="reg", g="exp", d=2, m="d", z=0.5))
MSE_DOMAIN = dict(
    omega=OMEGAS_3,
    g=Choice("beautiful F: g entire with a_s >= 0 (the register's exp, c·exp, cosh, 1 + u + u², u², u⁴, u + u³)",
             MSE_G),
    d=_d_axis("for any d", 64, why="the register's largest d; the MSEs are exact series in d"),
    m=_m_axis("m <= d"),
    z=_z_axis("every z: the register's ‖z‖ ∈ [0, 2.5]", 2.5, why="the register's range; exp-type g grow like "
                                                                  "e^{‖z‖²}"))


def _mse_mc_feasible(p: dict) -> bool:
    """Monte Carlo cells: bounded radial laws, d <= 8 (Haar frames cost O(m²d) per draw), 0 < ‖z‖ <= 0.5 and g
    without a cubic term. Elsewhere the squared error has a finite but huge fourth moment (Gaussian Ω: ωᵀz is
    unbounded; large ‖z‖: exp-type g; u³: kurtosis ~50) and the sample MSE resolves only coarse errors; those
    cells are decided by the exact part. d = 1 (so m = 1, where the orthogonal ensemble is the iid one) is decided
    by the exact part only: with Ω_reg, ω = ±1 and F = (g(‖z‖) + g(-‖z‖))/2, so every squared error equals
    ((g(‖z‖) - g(-‖z‖))/2)² and the Monte Carlo replicates are degenerate."""
    return p["omega"] != "gaussian" and 2 <= p["d"] <= 8 and 0 < p["z"] <= 0.5 and p["g"] != "u+u3"


def _thm6_search(ctx: CellContext) -> Evidence:
    """Minimise the exact margin ``(gap - bound)/MSE_iid`` over Ω, g, d <= 64, m <= d and ‖z‖ <= 2.5."""
    omegas, ds = ("gaussian", "reg", "uniform"), (1, 2, 3, 4, 8, 16, 64)

    def point(x):
        d = ds[int(x[2])]
        return dict(omega=omegas[int(x[0])], g=MSE_G[int(x[1])], d=d, m=1 + int(round(x[3] * (d - 1))),
                    z=float(x[4]))

    def margin(x):
        st = _mse_setting(point(x))
        return (st.pair_gap - bt.thm6_improvement(st.g, st.law, st.z_norm, st.m)) / _scale(st.mse_iid)

    box = [(0, 2), (0, len(MSE_G) - 1), (0, len(ds) - 1), (0.0, 1.0), (0.0, 2.5)]
    res = minimize_margin(margin, box, rng=ctx.rng, restart=ctx.restart or 0,
                          integer=[True, True, True, False, False], maxiter=SEARCH_ITERATIONS)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(point=point(res.x)))


THM6 = Claim(
    id="performer.thm6.ort_mse_beautiful", source="Theorem 6, Eq 42; proof F.4.3, Eqs 69-75",
    statement="If F_{Ω,g} is beautiful and m <= d, then for any d > 0: MSE(F̂^ort_m(z)) <= MSE(F̂^iid_m(z)) - "
              "(1 - 1/m)·(2/(d+2))·(F_{Ω,g}(z) - a_0)².",
    kind="inequality",
    tolerance=0.05, units="excess of MSE(F̂^ort) over the guaranteed value, relative to MSE(F̂^iid)",
    domain=MSE_DOMAIN, searched=("d", "z"),
    cell=_thm6_cell, grid=MSE_GRID,
    where=lambda p, v: _m_ok(p) and (p["part"] == "exact" or _mse_mc_feasible(p)) and _MSE_DESIGN(p),
    search=_thm6_search, universal=True, restarts=tiers(1, full=160),
    replicates=tiers(150_000, smoke=20_000, full=1_000_000),
    roles=("beautiful.terms",), plot_x="z",
    notes="exact: MSE_iid - MSE_ort = (1-1/m)(F² - E X_1X_2^ort) (Eq 73) with the orthogonal pair moment from a "
          "series over the frame's Beta-integral moments (not the τ route of the proof); mc: the squared error "
          "of rfkit's F̂^ort against MSE_iid minus the guaranteed improvement.",
)


def _eq73_cell(ctx: CellContext) -> Evidence:
    st = _mse_setting(ctx.params)
    scale = _scale(st.mse_iid)
    series = bt.mse_gap_series(st.g, st.law, st.z_norm, st.m)
    if ctx.params["part"] == "exact":
        quadrature = (1 - 1 / st.m) * (st.F**2 - bt.ort_pair_moment_quadrature(st.g, st.law, st.z_norm)) \
            if st.law.bounded and st.m > 1 else st.pair_gap
        return exact_test(np.array([st.pair_gap, quadrature]), series, tolerance=ctx.tolerance, scale=scale,
                          extra=dict(eq74_series=series, eq73_pair_series=st.pair_gap, eq73_quadrature=quadrature))
    # MSE(iid) is known exactly (Var X/m), so the measured side is MSE(ort) alone: half the variance of a
    # difference of two sample MSEs
    return mean_test(_ort_squared_errors(ctx, st), st.mse_iid - series, scale=scale,
                     extra=dict(eq74_series=series), **ctx.test)


EQ73 = Claim(
    id="performer.eq73.mse_difference_identity", source="F.4.3, Eqs 69-74",
    statement="MSE(F̂^iid_m) - MSE(F̂^ort_m) = (1 - 1/m)·(E[X_1^iid X_2^iid] - E[X_1^ort X_2^ort]) (Eq 73) = "
              "(1 - 1/m)·Σ_{t,u} a_t a_u ‖z‖^{t+u} E‖ω‖^t E‖ω‖^u (E r^t E r^u)/(E‖g‖^t E‖g‖^u)·(1 - τ(t, u)) (Eq 74); "
              "terms with t or u zero or odd vanish.",
    kind="identity",
    tolerance=0.05, units="error relative to MSE(F̂^iid)",
    domain=MSE_DOMAIN,
    cell=_eq73_cell, grid=MSE_GRID,
    where=lambda p, v: _m_ok(p) and (p["part"] == "exact" or _mse_mc_feasible(p)) and _MSE_DESIGN(p),
    replicates=tiers(150_000, smoke=25_000, full=1_000_000),
    roles=("beautiful.terms",), plot_x="z",
    notes="exact: Eq 74's τ series against Eq 73 with the orthogonal pair moment by a frame-moment series and by "
          "quadrature of the pair's projection law; mc: the sample MSE of rfkit's F̂^ort against MSE(F̂^iid) "
          "(exact, Var X/m) minus Eq 74.",
)

# =========================================================================== derived predictions

#: (‖x‖, ‖y‖, angle) for the Gaussian PRF MGF: z ≠ 0, Λ from 1 to e^{-9}.
PRF_PAIRS = {"small": (0.3, 0.2, math.pi / 3), "unit": (1.0, 1.0, math.pi / 2), "opposite": (3.0, 3.0, 0.9 * math.pi)}


def _prf_setting(p: dict) -> tuple[Maclaurin, float, float]:
    sq_norms, zn = _pair_geometry(PRF_PAIRS[p["pair"]], p["d"])
    return Maclaurin.exp(math.exp(-sq_norms / 2)), zn, p["theta"]


def _divergence_certificates(g: Maclaurin, zn: float, theta: float, d: int) -> dict:
    """Three exact checks that ``E exp(θΛe^{ωᵀz}) = +∞``: rfkit's analytic detection, the Gaussian-shell lower
    bound exceeding the largest double and still growing, and the series terms ``θ^kΛ^k e^{k²s/2}/k!`` growing."""
    law = IsotropicLaw(d, "chi")
    t_big = 1.0
    while bt.gaussian_mgf_lower_bound(g, zn, theta, t_big) < 710.0 and t_big < 1e3:
        t_big *= 1.5
    shell = [bt.gaussian_mgf_lower_bound(g, zn, theta, t) for t in (t_big, 2 * t_big, 4 * t_big)]
    k = np.arange(1, 4000)
    log_terms = k * math.log(theta * g.scale) + k * k * zn * zn / 2 - special.gammaln(k + 1)
    return dict(analytic=math.isinf(bt.log_mgf(g, law, zn, theta)),
                shell=shell[0] >= 710.0 and shell[0] < shell[1] < shell[2],
                series=bool(log_terms[-1] > 709.0 and np.all(np.diff(log_terms[-100:]) > 0)),
                shell_log_bounds=shell, t=t_big)


def _prf_cell(ctx: CellContext) -> Evidence:
    g, zn, theta = _prf_setting(ctx.params)
    d = ctx.params["d"]
    if ctx.params["part"] == "analytic":
        cert = _divergence_certificates(g, zn, theta, d)
        failed = [name for name in ("analytic", "shell", "series") if not cert[name]]
        return exact_test(float(len(failed)), 0.0, tolerance=ctx.tolerance, extra=dict(cert, failed=failed))
    return _prf_truncated(ctx, g, zn, theta)


def _prf_truncated(ctx: CellContext, g: Maclaurin, zn: float, theta: float) -> Evidence:
    """Monte Carlo means of ``min(e^{θX}, C)/C`` against their exact values for caps at the 50% and 75% quantiles
    of ``e^{θX}``: truncated means the estimator can resolve (they grow with ``C`` without limit, by the
    shell bound of the analytic part)."""
    law = IsotropicLaw(ctx.params["d"], "chi")
    z = zn * _unit(law.d, ctx.rng)
    x = _terms(ctx, g, law, 1, z, ctx.replicates, False)[:, 0]
    parts, means = [], []
    for q in (0.5, 0.75):
        log_cap = theta * float(g(zn * stats.norm.ppf(q)))
        mean = bt.truncated_mgf_gaussian(g, zn, theta, log_cap)
        sd = math.sqrt(max(bt.truncated_mgf_gaussian(g, zn, theta, log_cap, power=2) - mean * mean, 0.0))
        means.append(mean)
        parts.append(mean_test(np.exp(np.minimum(theta * x - log_cap, 0.0)), mean, scale=mean, sd=sd,
                               **ctx.sub_test(2)))
    return combine(parts, extra=dict(truncated_means_over_cap=means))


GAUSSIAN_PRF_MGF = Claim(
    id="performer.derived.gaussian_prf_mgf", source="register, derived prediction",
    statement="For ω ~ N(0, I_d), z ≠ 0, Λ > 0 and every θ > 0, E exp(θΛ·e^{ωᵀz}) = +∞ (ωᵀz is Gaussian with "
              "variance s > 0); sample means are finite but do not converge. The harness detects this analytically.",
    kind="identity",
    tolerance=0.05, units="relative error of truncated means (a failed divergence certificate counts 1)",
    domain=dict(
        pair=Choice("z = x + y ≠ 0 and Λ = exp(-(‖x‖²+‖y‖²)/2) > 0: ‖z‖ from 0.43 to 1.9 (s = ‖z‖²), Λ from "
                    "e^{-0.065} to e^{-9}", tuple(PRF_PAIRS)),
        d=_d_axis("ω ~ N(0, I_d), every d", 8, points=(1,),
                  why="ωᵀz ~ N(0, ‖z‖²) whatever d: d enters only through the sampler; 64 at the full tier"),
        theta=Range("every θ > 0", 0.0, math.inf, strict=(True, False), up_to=(None, 1e3),
                    why="the divergence certificates hold at every θ (the series terms grow like e^{k²s/2}); "
                        "the register's θ up to 1e3")),
    cell=_prf_cell,
    grid=tiers(dict(pair=list(PRF_PAIRS), d=[1, 2, 8], theta=[1e-3, 1.0, 1e3], part=["analytic", "truncated"]),
               smoke=dict(pair=["unit"], d=[2], theta=[1e-3, 1.0]),
               full=dict(d=[1, 2, 8, 64], theta=[1e-3, 1e-1, 1.0, 1e1, 1e3])),
    # z ≠ 0: in d = 1 an obtuse pair is realised antiparallel, and ‖x‖ = ‖y‖ then gives z = 0
    where=lambda p, v: _pair_geometry(PRF_PAIRS[p["pair"]], p["d"])[1] > 0,
    replicates=tiers(120_000, smoke=20_000, full=1_000_000),
    roles=("beautiful.terms",), plot_x="theta",
    notes="analytic: three exact divergence certificates (rfkit's analytic detection, the Gaussian-shell lower bound "
          "beyond the largest double and still growing, the growing series terms); truncated: Monte Carlo means of "
          "min(e^{θX}, C)/C at two caps against their exact values (finite sample means that grow with the cap).",
)


def _smreg_mgf_setting(p: dict) -> tuple[Maclaurin, IsotropicLaw, float, float]:
    d = p["d"]
    sq_norms, zn = _pair_geometry(THM3_PAIRS[p["pair"]], d)
    lam = math.exp(-sq_norms / 2)
    theta = p["kappa"] / (lam * math.exp(math.sqrt(d) * zn))  # θ·max X = κ
    return Maclaurin.exp(lam), IsotropicLaw(d, "sqrt_d"), zn, theta


def _smreg_mgf_cell(ctx: CellContext) -> Evidence:
    g, law, zn, theta = _smreg_mgf_setting(ctx.params)
    m = 1 if ctx.params["part"] == "single" else 2

    def log_m(t):
        return bt.log_mgf(g, law, zn, t) if m == 1 else bt.log_mgf_ort(g, law, zn, t, 2)

    moments = [math.exp(log_m(k * theta)) for k in (1, 2, 3)]
    target, var = moments[0], max(moments[1] - moments[0] ** 2, 0.0)
    skew = (moments[2] - 3 * moments[0] * moments[1] + 2 * moments[0] ** 3) / var**1.5 if var > 0 else 0.0
    z = zn * _unit(law.d, ctx.rng)
    if zn == 0.0:
        var = 0.0  # z = 0: every term is g(0) = Λ, so exp(θ Σ X_i) is deterministic (judged exactly)

    def draw(rng, n):
        return np.exp(theta * _terms(ctx, g, law, m, z, n, m == 2, rng).sum(axis=1))

    parts = [sequential_mean(draw, target, rng=ctx.rng, budget=ctx.replicates, planned=ctx.planned or ctx.replicates,
                             scale=target, sd=math.sqrt(var), extra=dict(skewness=skew), **ctx.sub_test(2))]
    if law.d == 1:
        closed = 0.5 * (math.exp(theta * g.scale * math.exp(zn)) + math.exp(theta * g.scale * math.exp(-zn)))
        parts.append(exact_test(target, closed, tolerance=ctx.tolerance, scale=closed))
    return combine(parts, extra=dict(theta=theta, mgf=target))


#: quick: the old product (pairs small, unit, opposite; κ in {0.1, 1}) plus each further pair and κ = 0.01 once
_SMREG_MGF_DESIGN = _one_at_a_time(dict(pair=("small", "unit", "opposite"), kappa=(0.1, 1.0)),
                                   dict(pair="unit", d=2, kappa=1.0))

SMREG_TERM_MGF = Claim(
    id="performer.derived.smreg_term_mgf", source="register, derived prediction",
    statement="For X = Λ·exp(√d‖z‖u), u ~ c_d(1-u²)^{(d-3)/2}: M_X(θ) = c_d ∫ exp(θΛe^{√d‖z‖u})(1-u²)^{(d-3)/2} du; "
              "for d = 1, M_X(θ) = (exp(θΛe^{‖z‖}) + exp(θΛe^{-‖z‖}))/2; the orthogonal-pair MGF is "
              "E exp(θΛ(e^{√d‖z‖u_1} + e^{√d‖z‖u_2})) with (u_1, u_2) from the frame's projection law.",
    kind="expectation",
    tolerance=0.02, units="relative error",
    domain=dict(
        part=Choice("M_X(θ) (with its d = 1 closed form) and the orthogonal-pair MGF (m = 2, d >= 2)",
                    ("single", "pair")),
        pair=Choice("X = Λ·exp(√d‖z‖u) for the pairs (x, y) of the Theorem 3 sweep (Λ from 1 to e^{-9}, ‖z‖ from "
                    "0 to 6)", tuple(THM3_PAIRS)),
        d=_d_axis("every d (the register checks d in {2, 3, 4, 8, 16}; d = 1 has the closed form)", 8,
                  why="the projection law's quadrature is the same rule in every d; 16 at the full tier"),
        kappa=Range("every θ > 0, as κ = θ·max X = θΛe^{√d‖z‖}", 0.0, math.inf, strict=(True, False),
                    up_to=(None, 1.0),
                    why="the relative variance of e^{θX} grows like e^{κ²}: κ = 3 needs ~1.3e5 draws for a 2% "
                        "resolution (full tier)")),
    cell=_smreg_mgf_cell,
    grid=tiers(dict(pair=list(THM3_PAIRS), d=[1, 2, 3, 8], kappa=[0.01, 0.1, 1.0], part=["single", "pair"],
                    design=["sparse"]),
               smoke=dict(pair=["unit"], d=[1, 3], kappa=[1.0], design=["product"]),
               full=dict(d=[1, 2, 3, 4, 8, 16], kappa=[0.01, 0.1, 1.0, 3.0], design=["product"])),
    where=lambda p, v: (p["part"] == "single" or p["d"] >= 2) and _SMREG_MGF_DESIGN(p),
    replicates=tiers(40_000, smoke=20_000, full=1_000_000),
    roles=("beautiful.terms",), plot_x="kappa",
    notes="Tanh-sinh quadrature of the projection law (log space, max-shifted) against Monte Carlo of rfkit's "
          "estimator terms, with the exact standard deviation sqrt(M(2θ) - M(θ)²).",
)


def _beta_on_interval(a: float, b: float):
    law = stats.beta(a, b)
    return lambda t: law.cdf((np.asarray(t) + 1) / 2)


#: Frame entries drawn at once by the projection-law cell (~0.5 GB of float64 with QR's workspace): the full tier's
#: 200,000 frames of 63 × 64 drawn together took over 24 GB.
PROJECTION_LAW_BLOCK = 4_000_000


def _projection_law_cell(ctx: CellContext) -> Evidence:
    d = ctx.params["d"]
    m = _m(ctx.params["m"], d)
    z, law = _unit(d, ctx.rng), IsotropicLaw(d, "fixed", 1.0)
    t = np.concatenate([beautiful_projections(law, m, rng=ctx.rng, orthogonal=True, size=n) @ z
                        for n in chunks(ctx.replicates, max(1, PROJECTION_LAW_BLOCK // (m * d)))])
    if d == 1:
        return _two_point_law(ctx, t[:, 0])
    coordinate = _beta_on_interval((d - 1) / 2, (d - 1) / 2)
    checks = [(t[:, 0], coordinate), (t[:, -1], coordinate)]
    r2 = (t * t).sum(axis=1)
    if m < d:
        checks.append((r2, stats.beta(m / 2, (d - m) / 2).cdf))
    if m >= 2:
        checks.append((t[:, 0] / np.sqrt(r2), _beta_on_interval((m - 1) / 2, (m - 1) / 2)))
    k = len(checks) + (m == d)
    parts = [ks_test(x, cdf, **ctx.sub_test(k)) for x, cdf in checks]
    if m == d:
        parts.append(exact_test(r2, 1.0, tolerance=ctx.tolerance))
    return combine(parts, extra=dict(m=m))


def _two_point_law(ctx: CellContext, t: np.ndarray) -> Evidence:
    """d = 1: ``t = ±1``; the Kolmogorov distance to the fair two-point law is ``|P(t = -1) - 1/2|``."""
    support = exact_test(np.abs(t), 1.0, tolerance=ctx.tolerance)
    balance = mean_test((t < 0).astype(np.float64), 0.5, sd=0.5, **ctx.sub_test(2))
    return combine([support, balance])


ORF_PROJECTION_LAW = Claim(
    id="performer.derived.orf_projection_law", source="register, derived prediction",
    statement="For a Haar m-frame u_1..u_m and a fixed unit ẑ, (u_1ᵀẑ, ..., u_mᵀẑ) has the law of the first m "
              "coordinates of a uniform vector on S^{d-1}: density ∝ (1 - Σt_i²)^{(d-m-2)/2} on the unit ball for "
              "m < d; c_d(1-t²)^{(d-3)/2} for m = 1; t = ±1 with probability 1/2 for d = 1; uniform on S^{d-1} "
              "for m = d.",
    kind="identity",
    tolerance=0.03, units="Kolmogorov-Smirnov distance",
    domain=dict(
        d=_d_axis("every d (d = 1: t = ±1)", 8, points=(1, 2, 3),
                  why="the sampler is one sign-fixed QR for every d; 64 at the full tier"),
        m=Choice("every Haar m-frame, m <= d: m = 1, m < d (2 and 3 rows) and m = d", ("1", "2", "3", "d"))),
    cell=_projection_law_cell,
    grid=tiers(dict(d=[1, 2, 3, 4, 8], m=["1", "2", "3", "d"]), smoke=dict(d=[1, 3], m=["1", "2", "d"]),
               full=dict(d=[1, 2, 3, 4, 8, 16, 64], m=list(M_RULES))),
    where=lambda p, v: _m_ok(p),
    replicates=tiers(20_000, full=200_000),
    roles=("beautiful.terms",), plot_x="d",
    notes="rfkit's orthogonal ensemble (sign-fixed QR Haar frames); ẑ a random unit vector. The law is checked "
          "through the statistics that determine it (rotation invariance within R^m): "
          "coordinates against c_d(1-t²)^{(d-3)/2}, Σt_i² against Beta(m/2, (d-m)/2), and the direction t/‖t‖ "
          "against the coordinate law of S^{m-1}. The quadrature rule built on this law is tested in the suite.",
)
