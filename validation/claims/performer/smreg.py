r"""``performer.*`` claims on the regularized softmax kernel SMREG, Theorem 1 and Lemma 3 (Sec 2.3, 3, F.3).

SMREG replaces ``ω ~ N(0, I_d)`` in the softmax kernel's positive features by ``√d ω/‖ω‖``. Its closed
form, the Eq 29/30 series and Theorem 1's proof quantities live in :mod:`rfkit.theory.smreg`; the sphere
moments and angle integrals of Lemma 3 in :mod:`rfkit.theory.sphere`. Estimates come from
:func:`~rfkit.estimators.positive_features` with :func:`~rfkit.estimators.spherical_projection` (iid rows
on ``√d S^{d-1}``) or :func:`~rfkit.estimators.orthogonal_projection` with ``norms="sqrt_d"``.

How Theorem 1 is decided
------------------------
The ratio ``A^reg(i, j)/A(i, j) = SMREG/SM`` of one pair depends only on ``d`` and
``w = ‖x_i + y_j‖²/2`` and strictly decreases in ``w`` (``performer.derived.smreg_closed_form``). So the
infimum ``W_C(d)`` of Theorem 1 over every ``L`` and every admissible ``(Q, K)`` (``‖exp(XYᵀ)‖∞ <= C`` on
the scaled inputs) is ``ratio(d, w*)`` with ``w*`` the supremum of ``w`` over admissible configurations.
``w*`` is found by an adversarial search with the constraint evaluated exactly (:func:`_sup_w`): by
rotation invariance two distinct queries and two distinct keys in a plane suffice (rows ``2..L`` repeat
the second vector, which is what the induced norm (R) charges for); the domain "all" is the theorem's,
"tied" (``Q = K``) the special case its proof silently assumes (it bounds ``w`` with ``SM(x, x)`` and
``SM(y, y)``, which are entries of ``A`` only when queries are keys). A lower bound of ``W_C(d)`` comes
from the proof's ``w <= 2 ln C`` where that bound is valid (tied inputs: ``exp(‖x_i‖²) = A_ii <= C``)
and from the exact ``1 - ratio <= w²/d`` (:func:`rfkit.theory.smreg.ratio_deficit_bound`).

Monte Carlo and budgets
-----------------------
A cell draws the replicates that make a z-test's confidence half-width (exact variance, the cell's level)
half the tolerance (a sample-size calculation from theory, :func:`_replicates_for_power`), never more than the
tier's count nor :data:`_CELL_NORMALS` standard normals (``replicates × m × d``), so cheap cells stay
cheap and the quick tier keeps its budget. Cells whose relative variance makes Monte Carlo hopeless are
outside the claims' stated (Monte Carlo) domains; the exact claims cover them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import integrate, special, stats

from rfkit.estimators import positive_features, softmax_kernel
from rfkit.theory import smreg as theory
from rfkit.theory import sphere
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.harness import as_features, chunks, controlled_pair, kernel_estimates, replicate_projections
from rfkit.validation.model import CellContext, Claim, per_tier, tiers
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import Evidence, combine, exact_test, mean_test, required_replicates, sequential_mean

#: Most standard normals one Monte Carlo cell draws, per tier (bounds a cell's time at about 0.3 s at quick, 3 s at
#: full: there the d·m = 2048 cells of smreg_unbiased (d = 128, m = 16) and the s = 3 cells of smreg_mse drew 7 324
#: and 58 593 replicates under the quick tier's cap and stayed underpowered, radius 0.065-0.07 > 0.05).
_CELL_NORMALS = tiers(15_000_000, full=150_000_000)
#: Fewest replicates of a Monte Carlo cell (sample skewness and batch means need a few thousand).
_MIN_REPLICATES = 2_000
G_NORM = [0.0, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0]
G_ANGLE = [0.0, math.pi / 6, math.pi / 4, math.pi / 3, math.pi / 2, 2 * math.pi / 3, 3 * math.pi / 4,
           5 * math.pi / 6, 0.9 * math.pi, 0.99 * math.pi, math.pi]
G_D = [1, 2, 3, 4, 8, 16, 32, 64, 128]


def _pair_s(norm_x: float, norm_y: float, angle: float) -> float:
    """``s = ‖x + y‖²`` of a pair with these norms and angle."""
    return max(norm_x**2 + norm_y**2 + 2 * norm_x * norm_y * math.cos(angle), 0.0)


def _angle_allowed(d: int, angle: float) -> bool:
    """In ``d = 1`` two vectors are parallel or opposite."""
    return d > 1 or math.isclose(angle, 0.0) or math.isclose(angle, math.pi)


def _relative_variance(d: int, s: float, m: int = 1) -> float:
    """``Var(SMREGhat^+_m)/SMREG²`` for iid rows (Λ cancels)."""
    return theory.term_variance(d, s) / m / math.exp(2 * float(theory.log_term_moment(d, s)))


def _replicates_for_power(ctx: CellContext, relative_sd: float, normals_per_replicate: int) -> int:
    """Replicates for a resolution of half the tolerance (:func:`~rfkit.validation.stats.required_replicates`).

    Never more than the tier's count nor :data:`_CELL_NORMALS` standard normals: cells beyond that stay
    underpowered and say so.
    """
    need = required_replicates(relative_sd, **ctx.test)
    cap = min(ctx.replicates, per_tier(_CELL_NORMALS, ctx.tier) // normals_per_replicate)
    return int(max(_MIN_REPLICATES, min(math.ceil(need) if math.isfinite(need) else cap, cap)))


def _smreg_estimates(ctx: CellContext, x, y, m: int, n: int, projection: str,
                     rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` independent ``SMREGhat^+_m(x, y)`` (``projection`` ``spherical`` or ``orthogonal_sqrt_d``; ``rng``:
    a sequential round's generator, default the cell's)."""
    fmap = ctx.impl("feature_map.positive", positive_features)
    rng = ctx.rng if rng is None else rng
    est = [kernel_estimates(fmap, x, y, replicate_projections(projection, k, m, x.size, rng), k)
           for k in chunks(n, max(1, 400_000 // m))]
    return np.concatenate(est)


# ------------------------------------------------------------------------------ Sec 2.3 unbiased

#: Relative variance of SMREGhat above which a cell is outside the Monte Carlo domain.
_UNBIASED_MAX_REL_VAR = 4.0


def _unbiased_cell(ctx: CellContext):
    p = ctx.params
    d, m = p["d"], p["m"]
    x, y = controlled_pair(p["norm_x"], p["norm_y"], p["angle"], d, ctx.rng)
    s = float((x + y) @ (x + y))
    log_lam = -float(x @ x + y @ y) / 2
    target = theory.smreg(x, y)
    sd = math.sqrt(theory.smreg_mse(d, s, m, log_lam=log_lam))  # the variance of an unbiased estimator
    if _pair_s(p["norm_x"], p["norm_y"], p["angle"]) == 0.0:
        sd = 0.0  # x + y = 0 (up to round-off): every feature product is Λ = SMREG, a deterministic estimate
    series = math.exp(log_lam + s / 2 + float(theory.log_smreg_ratio_eq30(d, s / 2)))
    # Budget: the tier's replicates, scaled down so the planned budget draws at most _CELL_NORMALS normals
    # (an engine extension scales the same way).
    planned = ctx.planned or ctx.replicates
    share = min(1.0, per_tier(_CELL_NORMALS, ctx.tier) / (m * d) / planned)

    def draw(rng, n):
        return _smreg_estimates(ctx, x, y, m, n, "spherical", rng)

    return sequential_mean(draw, target, rng=ctx.rng, budget=max(1, int(ctx.replicates * share)),
                           planned=max(1, int(planned * share)), scale=target, sd=sd,
                           extra=dict(s=s, eq30_value=series), **ctx.test)


#: Pairs (‖x‖, ‖y‖) of the unbiasedness sweep: the quick/smoke grids' pairs with both norms non-zero, and the
#: degenerate pairs with x = 0 or y = 0 (z = y or x; both zero: a deterministic estimate), tested at angle 0 only;
#: pairs with ‖y‖ > ‖x‖ > 0 are left out (the estimator and SMREG are symmetric in x and y).
_UNBIASED_ZERO_PAIRS = {(0.0, 0.0), (0.0, 0.5), (1.0, 0.0)}


def _unbiased_domain(p: dict, variant: str) -> bool:
    pair = (p["norm_x"], p["norm_y"])
    if 0.0 in pair and (pair not in _UNBIASED_ZERO_PAIRS or p["angle"] != 0.0):
        return False  # a zero vector has no angle: one cell per degenerate pair
    if 0.0 not in pair and p["norm_y"] > p["norm_x"]:
        return False  # the estimator and SMREG are symmetric in x and y
    s = _pair_s(p["norm_x"], p["norm_y"], p["angle"])
    return _angle_allowed(p["d"], p["angle"]) and _relative_variance(p["d"], s, p["m"]) <= _UNBIASED_MAX_REL_VAR


_NORM_WHY = ("Monte Carlo domain: the relative variance of SMREGhat^+_m grows like ₀F₁(; d/2; d s)/₀F₁(; d/2; d s/4)² "
             "with s = ‖x + y‖², so cells keep it <= 4 (the estimate is Λ times a function of z = x + y only); "
             "the exact identity E X = SMREG at every s is performer.derived.smreg_closed_form")

SMREG_UNBIASED = Claim(
    id="performer.sec2_3.smreg_unbiased", source="end of Sec 2.3; Remark 1",
    statement="SMREGhat^+_m(x, y), the positive features with ω_i iid Unif(√d S^{d-1}), is an unbiased "
              "estimator of SMREG(x, y).",
    kind="expectation",
    domain=dict(
        d=Integers("ω_i on √d S^{d-1}: every dimension d >= 1", 1, math.inf, points=(1, 2), up_to=64,
                   why="d = 1 is the two-point law ω = ±1; the register's sweep G_d reaches 128 (full tier)"),
        m=Integers("SMREGhat^+_m: every number of features m >= 1", 1, math.inf, points=(1,), up_to=16,
                   why="a mean of m iid terms has the expectation of one term; m = 16 checks the averaging"),
        norm_x=Range("x arbitrary: its norm", 0.0, math.inf, up_to=(None, 1.0), why=_NORM_WHY),
        norm_y=Range("y arbitrary: its norm", 0.0, math.inf, up_to=(None, 0.5),
                     why="pairs are tested with ‖y‖ <= ‖x‖ (the estimator and SMREG are symmetric in x and y), "
                         "so ‖y‖ up to 0.5 with ‖x‖ up to 1; " + _NORM_WHY),
        angle=Range("x, y arbitrary: the angle between them", 0.0, math.pi)),
    tolerance=0.05, units="relative bias",
    cell=_unbiased_cell,
    grid=tiers(dict(d=[1, 2, 8, 64], norm_x=[0.0, 0.5, 1.0], norm_y=[0.0, 0.5],
                    angle=[0.0, 2 * math.pi / 3, math.pi], m=[1, 16]),
               smoke=dict(d=[1, 2, 64], norm_x=[0.0, 1.0], angle=[0.0, math.pi]),
               full=dict(d=G_D, norm_x=G_NORM, norm_y=G_NORM, angle=G_ANGLE)),
    # Budget (quick about 1.5 s): the d = 64 cells need ~10^7 normals for the power calculation's replicates.
    replicates=tiers(200_000, smoke=20_000, full=2_000_000),
    where=_unbiased_domain, roles=("feature_map.positive",), plot_x="d",
    notes="Controlled pairs (I2): ‖x‖ >= ‖y‖ (symmetry) and their angle; pairs with a zero vector at angle 0 only; "
          "Monte Carlo cells where Var(SMREGhat^+_m)/SMREG² <= 4. Target from the ₀F₁ closed form (the Eq 30 "
          "series value is recorded per cell); exact sd from Var X = Λ²(₀F₁(; d/2; d s) - ₀F₁(; d/2; d s/4)²).",
)

# --------------------------------------------------------------------- derived: closed form (MC)

#: Relative variance of one draw above which a closed-form cell is outside the Monte Carlo domain.
_DEFINITION_MAX_REL_VAR = 9.0
#: w grid on which monotonicity is checked (consecutive relative increases).
_MONOTONE_W = np.concatenate([[0.0], np.geomspace(1e-4, 200.0, 400)])
#: Relative increase between neighbours of the w grid that round-off can explain (the ratio is evaluated in logs).
_MONOTONE_ROUND_OFF = 1e-12


def _definition_draws(ctx: CellContext, d: int, norm_z: float, n: int) -> np.ndarray:
    """``exp(√d ‖z‖ ω̂_1)`` for ``ω ~ N(0, I_d)``: ``ω̂_1 = g_1/√(g_1² + χ²_{d-1})`` (the definition, 1-D)."""
    g = ctx.rng.standard_normal(n)
    rest = ctx.rng.chisquare(d - 1, size=n) if d > 1 else np.zeros(n)
    return np.exp(math.sqrt(d) * norm_z * g / np.sqrt(g * g + rest))


def _closed_form_mc(ctx: CellContext, d: int, norm_z: float):
    s = norm_z**2
    n = _replicates_for_power(ctx, math.sqrt(_relative_variance(d, s)), 2)
    draws = np.concatenate([_definition_draws(ctx, d, norm_z, k) for k in chunks(n, 1_000_000)])
    target = math.exp(float(theory.log_term_moment(d, s)))
    return mean_test(draws, target, scale=target, sd=math.sqrt(theory.term_variance(d, s)), **ctx.test)


def _closed_form_decreasing(ctx: CellContext, d: int):
    log_ratio = np.asarray(theory.log_smreg_ratio(d, 2 * _MONOTONE_W))
    increase = float(np.max(np.expm1(np.diff(log_ratio)), initial=-math.inf))
    worst = int(np.argmax(np.diff(log_ratio)))
    # "strictly decreasing": any increase beyond round-off is a violation (not the Monte Carlo check's 2%)
    return margin_evidence(-increase, tolerance=_MONOTONE_ROUND_OFF,
                           extra=dict(w_from=float(_MONOTONE_W[worst]), w_to=float(_MONOTONE_W[worst + 1])))


def _closed_form_cell(ctx: CellContext):
    p = ctx.params
    if p["check"] == "decreasing":
        return _closed_form_decreasing(ctx, p["d"])
    return _closed_form_mc(ctx, p["d"], p["norm_z"])


def _closed_form_domain(p: dict, variant: str) -> bool:
    if p["check"] == "decreasing":
        return p["norm_z"] == 0.0  # one monotonicity cell per d (it scans w itself)
    return _relative_variance(p["d"], p["norm_z"] ** 2) <= _DEFINITION_MAX_REL_VAR


SMREG_CLOSED_FORM = Claim(
    id="performer.derived.smreg_closed_form", source="register: derived prediction (Eqs 29-30)",
    statement="SMREG(x, y) = Λ·₀F₁(; d/2; d s/4) = Λ·Γ(d/2)(2/(√d‖z‖))^{d/2-1} I_{d/2-1}(√d‖z‖) (Λ at z = 0); "
              "SMREG/SM = e^{-s/2}₀F₁(; d/2; d s/4) = E f(Po(s/2), d) is strictly decreasing in ‖z‖.",
    kind="expectation",
    domain=dict(
        check=Choice("the closed form (Monte Carlo of the definition) and 'strictly decreasing in ‖z‖'",
                     ("mc", "decreasing")),
        d=Integers("for every d >= 1", 1, math.inf, points=(1, 2), up_to=64,
                   why="d = 1 is the two-point law; the register's sweep G_d reaches 128 (full tier)"),
        norm_z=Range("‖z‖ ∈ [0, ∞), with Λ at z = 0", 0.0, math.inf, boundaries=(0.0,), up_to=(None, 3.0),
                     why="the register's check range ‖z‖ ∈ [0, 3] (Monte Carlo cells where one draw's relative "
                         "variance is <= 9); the decreasing check scans w = ‖z‖²/2 over [0, 200] (‖z‖ <= 20) "
                         "in each of its cells")),
    tolerance=0.02, units="relative error of the closed form (mc); relative increase between neighbours "
                          "of the w grid (decreasing; exact, any increase above round-off refutes)",
    cell=_closed_form_cell,
    grid=tiers(dict(check=["mc", "decreasing"], d=[1, 2, 8, 64], norm_z=[0.0, 0.5, 1.0, 1.5, 3.0]),
               smoke=dict(d=[1, 2, 64], norm_z=[0.0, 1.0, 3.0]),
               full=dict(d=G_D, norm_z=[0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0])),
    replicates=tiers(1_000_000, smoke=200_000, full=20_000_000),
    where=_closed_form_domain, plot_x="norm_z",
    notes="check 'mc': Monte Carlo of Λ·E exp(√d ω̂ᵀz) from its definition (ω ~ N(0, I_d)); check 'decreasing': "
          "SMREG/SM on 401 points of w ∈ [0, 200] (one cell per d), every consecutive relative change must be "
          "negative (to round-off, 1e-12). The Bessel, series and Poisson forms are compared exactly in "
          "performer.eq30.smreg_series; strict monotonicity is also checked exactly (mpmath) in "
          "tests/test_performer_smreg_theory.py.",
)

# ---------------------------------------------------------------------------- derived: MSE (MC)

_PROJECTIONS = {"iid": "spherical", "orthogonal": "orthogonal_sqrt_d"}


def _mse_cell(ctx: CellContext):
    p = ctx.params
    d, m, s, orthogonal = p["d"], p["m"], p["s"], p["ensemble"] == "orthogonal"
    if d == 1:  # parallel (d = 1 has no right angle): ‖x+y‖² = s; Λ is divided out below
        x, y = controlled_pair(math.sqrt(s) / 2, math.sqrt(s) / 2, 0.0, d, ctx.rng)
    else:
        x, y = controlled_pair(math.sqrt(s / 2), math.sqrt(s / 2), math.pi / 2, d, ctx.rng)  # ‖x+y‖² = s
    mom = theory.estimator_error_moments(d, s, m, orthogonal=orthogonal)
    n = _replicates_for_power(ctx, mom["sd_squared_error"] / mom["mse"], m * d)
    est = _smreg_estimates(ctx, x, y, m, n, _PROJECTIONS[p["ensemble"]]) * math.exp((x @ x + y @ y) / 2)
    mean = math.exp(float(theory.log_term_moment(d, s)))
    # d = m = 1: X = Λe^{±√s}, both signs equally far from the mean Λ cosh √s, so the squared error is
    # deterministic (the closed-form sd is round-off of a cancellation there)
    sd = 0.0 if d == 1 and m == 1 else mom["sd_squared_error"]
    return mean_test((est - mean) ** 2, mom["mse"], scale=mom["mse"], sd=sd, **ctx.test)


SMREG_MSE = Claim(
    id="performer.derived.smreg_mse", source="register: derived prediction (Theorem 2 for SMREG)",
    statement="With ω_i on the sphere of radius √d: E X² = Λ²₀F₁(; d/2; d s); MSE(SMREGhat^+_m) = "
              "(Λ²₀F₁(; d/2; d s) - SMREG²)/m; for a Haar frame (m <= d) E X_1X_2 = Λ²₀F₁(; d/2; d s/2) and "
              "MSE(SMREGhat^ort+_m) = MSE(SMREGhat^+_m) + ((m-1)/m)(Λ²₀F₁(; d/2; d s/2) - SMREG²).",
    kind="moment",
    domain=dict(
        ensemble=Choice("iid rows (SMREGhat^+_m) and a Haar frame (SMREGhat^ort+_m)", ("iid", "orthogonal")),
        d=Integers("ω_i on the sphere of radius √d, every d >= 1", 1, math.inf, points=(1,), up_to=8,
                   why="d = 1 is the two-point law; the register's check reaches d = 16 (full tier)"),
        m=Integers("m features (m <= d for the Haar frame)", 1, math.inf, points=(1, 2), up_to=8,
                   why="m enters the predictions only through 1/m and (m - 1)/m; m = 1 has no pairs, m = 2 the "
                       "first pair, m = d = 8 a full frame (16 at the full tier)"),
        s=Range("s = ‖x + y‖² > 0 (at s = 0 every estimate is exactly Λ)", 0.0, math.inf, strict=(True, False),
                up_to=(None, 2.0), why="the squared errors' relative sd grows with s (about 4.3 at d = 8, m = 1, "
                                       "s = 2, 5.6 at s = 3): the register's largest s = 3 runs at the full tier")),
    tolerance=0.05, units="relative MSE error",
    cell=_mse_cell,
    grid=tiers(dict(d=[1, 2, 8], m=[1, 2, 8], s=[0.1, 2.0], ensemble=["iid", "orthogonal"]),
               smoke=dict(d=[1, 8]),
               full=dict(d=[1, 2, 4, 8, 16], m=[1, 2, 4, 8, 16], s=[0.1, 0.25, 0.5, 1.0, 2.0, 3.0])),
    # Budget: squared errors are heavy-tailed, so resolving 5% of an MSE takes ~10^5 estimator replicates per
    # cell (plus a batched QR per orthogonal block).
    replicates=tiers(1_000_000, smoke=400_000, full=10_000_000),
    where=lambda p, v: p["m"] <= p["d"] and not (p["m"] == 1 and p["ensemble"] == "orthogonal"),
    roles=("feature_map.positive",), plot_x="s",
    notes="Pairs at right angles (parallel in d = 1) with ‖x‖ = ‖y‖ and ‖x + y‖² = s (the estimator "
          "depends on z = x + y and Λ only); a one-row Haar frame is one iid row (m = 1 runs as iid). "
          "Squared errors are tested against the exact MSE with the exact sd of the squared error (joint moments "
          "E Π Y_i^{k_i} = ₀F₁(; d/2; d s Σk_i²/4) for a Haar frame). m <= d for both ensembles (the iid formula "
          "holds for every m; its m > d cells would add nothing that m = d does not test).",
)

# ------------------------------------------------------------------------------ Eqs 21, 29, 30

#: Gauss–Jacobi nodes for the quadrature of the definition E exp(a u), u ~ c_d (1-u²)^{(d-3)/2}.
_JACOBI_NODES = 600


@functools.lru_cache(maxsize=64)
def _jacobi_rule(d: int) -> tuple[np.ndarray, np.ndarray]:
    alpha = (d - 3) / 2
    nodes, weights = special.roots_jacobi(_JACOBI_NODES, alpha, alpha)
    return nodes, np.log(weights) - special.logsumexp(np.log(weights))


def _log_ratio_by_quadrature(d: int, w: float) -> float:
    """``log(e^{-w} E exp(√(2dw) u_1))`` by Gauss–Jacobi quadrature of the coordinate law (two points if d = 1)."""
    a = math.sqrt(2 * d * w)
    if d == 1:
        return -w + float(np.logaddexp(a, -a)) - math.log(2)
    nodes, log_weights = _jacobi_rule(d)
    return -w + float(special.logsumexp(log_weights + a * nodes))


def _series_cell(ctx: CellContext):
    d, w = ctx.params["d"], ctx.params["w"]
    values = dict(closed_form=float(theory.log_smreg_ratio(d, 2 * w)), eq29_30=float(theory.log_smreg_ratio_eq30(d, w)),
                  eq21=float(theory.log_smreg_ratio_eq21(d, 2 * w)), quadrature=_log_ratio_by_quadrature(d, w))
    reference = values["closed_form"]
    parts = [exact_test(v, reference, tolerance=ctx.tolerance, extra=dict(form=k)) for k, v in values.items()]
    return combine(parts, extra=values)


SMREG_SERIES = Claim(
    id="performer.eq30.smreg_series", source="F.3, Eqs 21, 29, 30",
    statement="SMREG(x, y) = Λ Σ_k ‖z‖^{2k} d^k E[(ω̂ᵀe_1)^{2k}]/(2k)! (Eq 21) = Λ Σ_k (w^k/k!) f(k, d) (Eq 29), "
              "hence SMREG/SM = e^{-w} Σ_k (w^k/k!) f(k, d) (Eq 30), w = ‖z‖²/2, f(k, d) = d^k/(d(d+2)···(d+2k-2)).",
    kind="identity",
    domain=dict(
        d=Integers("d >= 1", 1, math.inf, points=(1, 2), up_to=128,
                   why="the register's sweep G_d ends at 128; f(k, d) -> 1 as d grows"),
        w=Range("x, y arbitrary, through w = ‖z‖²/2 >= 0 (the ratio depends on d and w only)", 0.0, math.inf,
                up_to=(None, 50.0), why="the register's sweep w ∈ [0, 50]")),
    tolerance=1e-10, units="|difference of log(SMREG/SM)| between representations (≈ relative error)",
    cell=_series_cell,
    grid=tiers(dict(d=[1, 2, 3, 8, 32, 128], w=[0.0, 1e-3, 0.1, 1.0, 5.0, 20.0, 50.0]),
               smoke=dict(d=[1, 2, 128], w=[0.0, 0.5, 50.0]),
               full=dict(d=G_D, w=[0.0, 1e-6, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 35.0, 50.0])),
    plot_x="w",
    notes="Four evaluations: the ₀F₁/Bessel closed form (reference), Eq 29/30 summed in log space, Eq 21 with "
          "the sphere moments in Gamma form, and 600-node Gauss–Jacobi quadrature of the definition "
          "Λ E exp(√d ω̂ᵀz). Monte Carlo of the definition: performer.derived.smreg_closed_form.",
)

# ------------------------------------------------------------------------------------- Lemma 3

_QUAD = dict(epsabs=0.0, epsrel=1e-13, limit=200)


def _angle_moment_by_quadrature(p: int, d: int) -> float:
    """``E cos^p θ`` under the Eq 24 angle density (``d >= 2``); the two-point law ``u_1 = ±1`` for ``d = 1``."""
    if d == 1:
        return 1.0 if p % 2 == 0 else 0.0
    value, _ = integrate.quad(lambda t: math.cos(t) ** p * sphere.angle_density(t, d), 0.0, math.pi, **_QUAD)
    return value


def _even_moment_cell(ctx: CellContext):
    k, d = ctx.params["k"], ctx.params["d"]
    power = 2 * k if ctx.variant == "a" else 4 * k
    reference = _angle_moment_by_quadrature(power, d)
    claimed = sphere.lemma3_moment(k, d)
    return exact_test(claimed, reference, tolerance=ctx.tolerance, scale=reference,
                      extra=dict(power=power, claimed=claimed, quadrature=reference))


#: The words of Lemma 3 that combine two ways: the definition's exponent 2k and the argument 2k of A(2k, d).
_A_WORDS = "A(2k,d) = ..., where A(k,d) := E[(ω̂ᵀe_1)^{2k}]"

SPHERE_EVEN_MOMENTS = Claim(
    id="performer.lemma3.sphere_even_moments", source="Lemma 3, Eqs 22-23; proof Eqs 24-28",
    statement="A(2k, d) = (2k-1)!!/((d+2k-2)(d+2k-4)···d) for k ∈ N, where A(k, d) := E_{ω~N(0,I_d)}[(ω̂ᵀe_1)^{2k}].",
    kind="identity",
    domain=dict(
        k=Integers("k ∈ N (k = 0 gives 1)", 0, math.inf, points=(0, 1), up_to=8,
                   why="the register's sweep k <= 8; both sides are rational in d for each k"),
        d=Integers("d unrestricted (the proof assumes d >= 2; d = 1 is the two-point law)", 1, math.inf,
                   points=(1, 2), up_to=64, why="the register's sweep ends at d = 64")),
    readings={"a": Reading("the quantity is E[(ω̂ᵀe_1)^{2k}], as used in Eqs 21 and 29", words=_A_WORDS),
              "b": Reading("literally A(2k, d) with A(k, d) := E[(ω̂ᵀe_1)^{2k}], i.e. E[(ω̂ᵀe_1)^{4k}]",
                           words=_A_WORDS)},
    tolerance=1e-10, units="relative error",
    cell=_even_moment_cell,
    grid=tiers(dict(k=[0, 1, 2, 3, 5, 8], d=[1, 2, 3, 4, 5, 8, 16, 64]),
               smoke=dict(k=[0, 1, 8], d=[1, 2, 64]),
               full=dict(k=list(range(9)))),
    plot_x="k",
    notes="Reference: adaptive quadrature of E cos^p θ against the Eq 24 angle density (its correctness is "
          "performer.lemma3.proof_recursions); Monte Carlo of u_1^{2k} in tests/test_performer_smreg_theory.py.",
)


def _integral(f, scale: float = 0.0) -> float:
    """``∫_0^π f`` to relative accuracy 1e-13 (absolute ``1e-12·scale`` for integrals that vanish)."""
    return integrate.quad(f, 0.0, math.pi, **dict(_QUAD, epsabs=1e-12 * scale))[0]


def _cos_sin(k: int, d: int):
    return lambda t: math.cos(t) ** k * math.sin(t) ** d


def _eq24_residual(d: int) -> float:
    """Largest gap between the CDF of the Eq 24 density (quadrature) and the exact angle law (Beta)."""
    law = stats.beta((d - 1) / 2, (d - 1) / 2)
    thetas = np.linspace(0.0, math.pi, 33)
    from_density = [integrate.quad(lambda t: float(sphere.angle_density(t, d)), 0.0, a, **_QUAD)[0] for a in thetas]
    exact = law.sf((1 + np.cos(thetas)) / 2)
    return float(np.max(np.abs(np.array(from_density) - exact)))


def _recursion_sides(part: str, k: int, d: int) -> tuple[float, float, float]:
    """``(lhs, rhs, scale)`` of one identity of Eqs 25-27, both sides by quadrature times the paper's factor."""
    if part == "eq25":
        scale = _integral(lambda t: abs(math.cos(t)) ** k * math.sin(t) ** d)
        lhs = _integral(_cos_sin(k, d), scale)
        rhs = sphere.eq25_factor(k, d) * _integral(_cos_sin(k - 2, d + 2), scale)
    elif part == "eq26":
        lhs = _integral(_cos_sin(2 * k, d))
        rhs = sphere.eq26_factor(k, d) * _integral(_cos_sin(0, d + 2 * k))
        scale = lhs
    else:  # eq27
        lhs = _integral(_cos_sin(0, d))
        rhs = sphere.eq27_factor(d) * _integral(_cos_sin(0, d - 2))
        scale = lhs
    return lhs, rhs, scale


def _recursions_cell(ctx: CellContext):
    part, k, d = ctx.params["part"], ctx.params["k"], ctx.params["d"]
    if part == "eq24":
        gap = _eq24_residual(d)
        return exact_test(gap, 0.0, tolerance=ctx.tolerance, extra=dict(max_cdf_gap=gap))
    lhs, rhs, scale = _recursion_sides(part, k, d)
    return exact_test(rhs, lhs, tolerance=ctx.tolerance, scale=scale, extra=dict(lhs=lhs, rhs=rhs))


def _recursions_domain(p: dict, variant: str) -> bool:
    if p["part"] in ("eq24", "eq27"):
        return p["k"] == 0  # these identities do not involve k
    return p["k"] >= 2 if p["part"] == "eq25" else True


PROOF_RECURSIONS = Claim(
    id="performer.lemma3.proof_recursions", source="F.3, Eqs 24-27",
    statement="For d >= 2: the angle θ between a uniform unit vector and e_1 has density sin^{d-2}θ/∫_0^π sin^{d-2} "
              "(Eq 24); F(k, d) := ∫_0^π cos^kθ sin^dθ dθ = ((k-1)/(d+1)) F(k-2, d+2); F(2k, d) = "
              "(2k-1)!!/((d+1)(d+3)···(d+2k-1)) ∫_0^π sin^{d+2k} (Eq 26); ∫_0^π sin^d = ((d-1)/d) ∫_0^π sin^{d-2} "
              "(Eq 27).",
    kind="identity",
    domain=dict(
        part=Choice("Eq 24 (the angle density), the F(k, d) recursion, Eq 26 and Eq 27",
                    ("eq24", "eq25", "eq26", "eq27")),
        d=Integers("for d >= 2", 2, math.inf, points=(2, 3), up_to=64,
                   why="the register's sweep d ∈ {2, ..., 20, 64}"),
        k=Integers("k >= 2 for the recursion; F(2k, d) for k ∈ N (Eq 26)", 0, math.inf, points=(0, 2), up_to=10,
                   why="the register's sweep k <= 10")),
    tolerance=1e-9, units="residual relative to ∫|integrand| (Eqs 25-27); CDF gap (Eq 24)",
    cell=_recursions_cell,
    grid=tiers(dict(part=["eq24", "eq25", "eq26", "eq27"], d=[2, 3, 4, 7, 16, 64], k=[0, 1, 2, 3, 6, 10]),
               smoke=dict(d=[2, 3, 64], k=[0, 2, 10]),
               full=dict(d=[*range(2, 21), 64], k=list(range(11)))),
    where=_recursions_domain, plot_x="d",
    notes="Eqs 24 and 27 do not involve k (one cell per d, k = 0); the recursion runs for k >= 2. "
          "Eq 24 is compared with the exact law of θ ((1 + cos θ)/2 ~ Beta((d-1)/2, (d-1)/2)) on 33 angles; a "
          "Kolmogorov–Smirnov test of Monte Carlo angles is in tests/test_performer_smreg_theory.py.",
)

# ------------------------------------------------------------------ Theorem 1: admissible inputs

#: The two readings of ‖A‖∞ (the paper does not define it); neither narrows the domain.
#: Theorem 1 reads "the L∞-norm of the attention matrix ... ‖A‖∞ <= C": the L∞ (sup) norm of the entries. The
#: induced ∞-norm, the linear-algebra convention for the symbol, is reported beside the verdict.
READINGS = {"E": Reading("‖A‖∞ is the entrywise maximum max_ij |A_ij|",
                         words="'the L∞-norm of the attention matrix ... satisfies ‖A‖∞ <= C'"),
            "R": Reading("‖A‖∞ is the induced ∞-norm max_i Σ_j |A_ij|, the linear-algebra convention for the "
                         "symbol; not the paper's words ('L∞-norm'): reported beside the verdict", beside=True)}
C_GRID = [1.0, 1.5, math.e, math.e**2, 10.0, 1e3]
#: Largest norm of a searched query/key in the domain "all" (the domain is unbounded; w reaches ~1e6).
_SEARCH_RADIUS = 1e3
#: Norm of the adversarial "orthogonal" family's rows (scaled inputs).
_ORTHOGONAL_RADIUS = 10.0
#: Norm of the I3 family's rows before they are shrunk to admissibility.
_SPHERE_RADIUS = 3.0
#: Nelder–Mead iterations per search start (the margins here are cheap closed forms of a few parameters).
_SEARCH_ITERATIONS = 200


@dataclass(frozen=True)
class _Configuration:
    """Scaled queries ``x_i = q_i/d^{1/4}`` and keys ``y_j`` as distinct rows with multiplicities (``L`` each)."""

    queries: np.ndarray
    keys: np.ndarray
    query_count: np.ndarray
    key_count: np.ndarray

    @classmethod
    def dense(cls, queries: np.ndarray, keys: np.ndarray) -> _Configuration:
        return cls(queries, keys, np.ones(len(queries)), np.ones(len(keys)))

    def scaled(self, factor: float) -> _Configuration:
        return _Configuration(self.queries * factor, self.keys * factor, self.query_count, self.key_count)

    def log_attention(self) -> np.ndarray:
        """``log A = X Yᵀ`` (``A = SM(x_i, y_j)``) on distinct rows (a plain product: the searches' hot path)."""
        return self.queries @ self.keys.T

    def log_norm(self, reading: str) -> float:
        """``log ‖A‖∞`` under the reading; a repeated key counts once per copy in a row sum."""
        log_a = self.log_attention()
        if reading == "E":
            return float(log_a.max())
        terms = log_a + np.log(self.key_count)
        top = terms.max(axis=1, keepdims=True)  # row-wise log-sum-exp (scipy's is slow for tiny arrays)
        return float((top[:, 0] + np.log(np.exp(terms - top).sum(axis=1))).max())

    def admissible(self, C: float, reading: str) -> bool:
        return self.log_norm(reading) <= math.log(C)

    def pair_w(self) -> np.ndarray:
        """``w_ij = ‖x_i + y_j‖²/2`` for every distinct pair."""
        qq = np.einsum("ik,ik->i", self.queries, self.queries)
        kk = np.einsum("jk,jk->j", self.keys, self.keys)
        return np.maximum(0.5 * (qq[:, None] + kk[None, :]) + self.log_attention(), 0.0)

    def pair_w_from_kernels(self) -> np.ndarray:
        """The proof's ``[ln SM(x,x) + ln SM(y,y) + 2 ln SM(x,y)]/2`` for every distinct pair."""
        log_xx = np.diagonal(softmax_kernel(self.queries, self.queries, log=True))
        log_yy = np.diagonal(softmax_kernel(self.keys, self.keys, log=True))
        return (log_xx[:, None] + log_yy[None, :] + 2 * softmax_kernel(self.queries, self.keys, log=True)) / 2


def _shrink_to_admissible(config: _Configuration, C: float, reading: str, steps: int = 60) -> _Configuration:
    """The configuration scaled by a factor in ``[0, 1]`` that is admissible (bisection from the zero matrix)."""
    if config.admissible(C, reading):
        return config
    if not config.scaled(0.0).admissible(C, reading):
        raise ValueError(f"no scaling of this configuration is admissible (C={C}, reading {reading})")
    lo, hi = 0.0, 1.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if config.scaled(mid).admissible(C, reading) else (lo, mid)
    return config.scaled(lo)


def _generated(inputs: str, d: int, L: int, rng: np.random.Generator) -> _Configuration:
    """Inputs of the register's generators: I1 (``gaussian``, ``tied``), I3 (``sphere``), adversarial."""
    if inputs == "orthogonal":  # x_i = ρu, y_j = ρ(v - u)/√2 with u ⊥ v: every xᵀy = -ρ²/√2 < 0
        u, v = controlled_pair(1.0, 1.0, math.pi / 2, d, rng)
        return _Configuration(_ORTHOGONAL_RADIUS * u[None], _ORTHOGONAL_RADIUS * (v - u)[None] / math.sqrt(2),
                              np.array([float(L)]), np.array([float(L)]))
    g = rng.standard_normal((2, L, d))
    if inputs == "sphere":
        g *= _SPHERE_RADIUS / np.linalg.norm(g, axis=-1, keepdims=True)
    else:
        g *= d**-0.25  # I1 with c = 1, scaled by d^{-1/4} as inside attention
    return _Configuration.dense(g[0], g[0] if inputs == "tied" else g[1])


def _admissible_inputs(ctx: CellContext) -> _Configuration:
    p = ctx.params
    raw = _generated(p["inputs"], p["d"], p["L"], ctx.rng)
    return _shrink_to_admissible(raw, p["C"], ctx.variant)


def _generated_domain(p: dict, variant: str) -> bool:
    """Shrinking reaches the zero matrix, admissible under (R) only if its row sums L are <= C; the
    orthogonal family needs d >= 2."""
    if p["inputs"] == "orthogonal":
        return p["d"] >= 2
    return variant == "E" or p["L"] <= p["C"]


def _planar_configuration(params: np.ndarray, domain: str, C: float, L: int) -> _Configuration:
    """Distinct rows in a plane from ``(fraction of the largest norm, angle in [0, π])`` pairs.

    ``all``: queries ``params[0:2]``, keys ``params[2:4]``; ``tied``: queries = keys = ``params[0:2]``. The
    first row occurs once, the second ``L - 1`` times. The largest norm is ``_SEARCH_RADIUS`` for ``all`` and
    ``√(ln C)`` for ``tied`` (there ``exp(‖x_i‖²) = A_ii <= ‖A‖∞ <= C`` under both readings).
    """
    radius = _SEARCH_RADIUS if domain == "all" else math.sqrt(math.log(C))
    pairs = params.reshape(-1, 2)
    points = (pairs[:, 0] * radius)[:, None] * np.column_stack([np.cos(pairs[:, 1]), np.sin(pairs[:, 1])])
    rows = 1 if L == 1 else 2
    counts = np.array([1.0, L - 1.0])[:rows]
    queries = points[:rows]
    keys = queries if domain == "tied" else points[2:2 + rows]
    return _Configuration(queries, keys, counts, counts)


def _planar_bounds(domain: str) -> list[tuple[float, float]]:
    return [(0.0, 1.0), (0.0, math.pi)] * (2 if domain == "tied" else 4)


def _admissible_minimum(value, problem, bounds, reading: str, floor: float, rng, restart: int):
    """Minimise ``value(params, config)`` over parameters whose configuration is admissible.

    ``problem(params) -> (configuration, C)``. Inadmissible points score ``floor + log-norm excess`` (``floor``
    at least every admissible value), which leads the simplex back into the admissible set. Returns the
    best admissible ``(value, params)`` evaluated, or ``(inf, None)`` if none was.
    """
    best = [math.inf, None]

    def objective(params):
        config, C = problem(params)
        excess = config.log_norm(reading) - math.log(C)
        if excess > 0:
            return floor + excess
        current = value(params, config)
        if current < best[0]:
            best[:] = [current, np.array(params)]
        return current

    minimize_margin(objective, bounds, rng=rng, restart=restart, maxiter=_SEARCH_ITERATIONS)
    return best[0], best[1]


def _sup_w_search(domain: str, C: float, L: int, reading: str, rng, restart: int
                  ) -> tuple[float, _Configuration | None]:
    """Largest ``max_ij w_ij`` over admissible planar configurations found from one start (``-inf, None``: none)."""

    def problem(params):
        return _planar_configuration(params, domain, C, L), C

    value, params = _admissible_minimum(lambda _, config: -float(config.pair_w().max()), problem,
                                        _planar_bounds(domain), reading, 0.0, rng, restart)
    return -value, None if params is None else problem(params)[0]


@functools.cache
def _sup_w(domain: str, C: float, L: int, reading: str) -> tuple[float, _Configuration]:
    """:func:`_sup_w_search` from its deterministic start (box corners and centre; rng unused: <= 256 corners)."""
    return _sup_w_search(domain, C, L, reading, np.random.default_rng(0), restart=0)


def _random_hypothesis(rng: np.random.Generator) -> tuple[float, int]:
    """``(C, L)`` log-uniform in ``[1, 10^3] × {1..256}``."""
    return float(10 ** rng.uniform(0, 3)), int(round(2 ** rng.uniform(0, 8)))


def _configuration_extra(config: _Configuration | None) -> dict:
    if config is None:
        return dict(note="the search found no admissible configuration")
    return dict(queries=config.queries.tolist(), keys=config.keys.tolist(),
                query_count=config.query_count.tolist(), key_count=config.key_count.tolist())

def _theorem1_domain(d_lo: int, d_up_to: int, d_why: str, C_up_to: float, L_up_to: int) -> dict:
    """Theorem 1's hypothesis domain: C >= 1, any L (and any admissible (Q, K): the grid's input families and
    the adversarial search), d as the claim states it."""
    return dict(
        d=Integers("d" + (" unrestricted" if d_lo == 1 else f" >= {d_lo}"), d_lo, math.inf, points=(d_lo,),
                   up_to=d_up_to, why=d_why),
        C=Range("‖A‖∞ <= C for a constant C >= 1", 1.0, math.inf, up_to=(None, C_up_to),
                why="the register's sweep C ∈ {1, 1.5, e, e², 10, 10³} (full tier); the searches draw C "
                    "log-uniformly in [1, 10³]"),
        L=Integers("any L (sequence length)", 1, math.inf, points=(1,), up_to=L_up_to,
                   why="the register's sweep L ∈ {1, 2, 16, 256} (full tier); the searches' planar "
                       "configurations repeat a row L - 1 times for L up to 256"))


# --------------------------------------------------------------------------- Theorem 1: Eq 31


def _ratio_margin(d: int, w: float) -> float:
    """``1 - SMREG/SM`` at ``(d, w)`` (exact, cancellation-free near ``w = 0``)."""
    return -math.expm1(theory.log_smreg_ratio(d, 2 * float(w)))


def _universal_cell(ctx: CellContext):
    d, w = ctx.params["d"], ctx.params["w"]
    return margin_evidence(_ratio_margin(d, w), tolerance=ctx.tolerance, extra=dict(d=d, w=w))


def _universal_search(ctx: CellContext):
    def margin(params):
        return _ratio_margin(int(round(10 ** params[0])), 10 ** params[1])

    res = minimize_margin(margin, [(math.log10(2), 6.0), (-8.0, 6.0)], rng=ctx.rng, restart=ctx.restart or 0)
    d, w = int(round(10 ** res.x[0])), float(10 ** res.x[1])
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(d=d, w=w))


SMREG_LE_SM = Claim(
    id="performer.thm1.smreg_le_sm_universal", source="Theorem 1, last sentence; Eq 31",
    statement="For d >= 2, SMREG(x, y) <= SM(x, y) for all x, y, without any ‖A‖∞ condition (universal lower "
              "bound); proof-level: f(k, d) <= 1 for k >= 1 (Eq 31).",
    kind="inequality",
    domain=dict(
        d=Integers("for d >= 2", 2, math.inf, points=(2, 3), up_to=1024,
                   why="the register's sweep ends at 1024; the search covers d up to 10^6"),
        w=Range("for all x, y, through w = ‖x + y‖²/2 >= 0 (the ratio depends on d and w only)", 0.0, math.inf,
                up_to=(None, 200.0), why="the register's grid w ∈ [0, 200]; the search covers w up to 10^6")),
    tolerance=1e-10, units="SMREG/SM - 1",
    cell=_universal_cell, search=_universal_search, universal=True,
    grid=tiers(dict(d=[2, 3, 4, 8, 16, 64, 1024], w=[0.0, 1e-4, 0.01, 0.1, 1.0, 5.0, 20.0, 200.0]),
               smoke=dict(d=[2, 3, 1024], w=[0.0, 0.01, 1.0, 200.0]),
               full=dict(w=[0.0, *np.geomspace(1e-6, 200.0, 41).tolist()])),
    restarts=tiers(4, smoke=2, full=30), plot_x="w",
    notes="Exact ratio from the closed form; the search covers d in [2, 10^6] and w in [1e-8, 1e6] (log scales). "
          "d = 1 (outside the hypothesis, f(k, 1) = 1/(2k-1)!! <= 1 as well) and a Monte Carlo cross-check are in "
          "tests/test_performer_smreg_claims.py.",
)

# ------------------------------------------------------------------------- Theorem 1: upper bound


def _upper_cell(ctx: CellContext):
    config = _admissible_inputs(ctx)
    w = config.pair_w()
    margin = float(np.min(-np.expm1(theory.log_smreg_ratio(ctx.params["d"], 2 * w))))
    return margin_evidence(margin, tolerance=ctx.tolerance, extra=dict(min_w=float(w.min()), max_w=float(w.max())))


def _upper_problem(params: np.ndarray) -> tuple[int, float, int]:
    """``(d, C, L)`` from the search's log-scale parameters."""
    return int(round(10 ** params[0])), float(10 ** params[1]), int(round(2 ** params[2]))


def _upper_search(ctx: CellContext):
    def problem(params):
        _, C, L = _upper_problem(params)
        return _planar_configuration(params[3:], "all", C, L), C

    def margin(params, config):
        return _ratio_margin(_upper_problem(params)[0], config.pair_w().min())

    bounds = [(math.log10(2), 3.0), (0.0, 3.0), (0.0, 8.0), *_planar_bounds("all")]
    value, params = _admissible_minimum(margin, problem, bounds, ctx.variant, 1.0, ctx.rng, ctx.restart or 0)
    if params is None:
        return margin_evidence(math.inf, tolerance=ctx.tolerance, extra=dict(note="no admissible point found"))
    d, C, L = _upper_problem(params)
    extra = dict(d=d, C=C, L=L, **_configuration_extra(problem(params)[0]))
    return margin_evidence(value, tolerance=ctx.tolerance, extra=extra)


THM1_UPPER = Claim(
    id="performer.thm1.upper_bound", source="Theorem 1, Eq 9 (right part)",
    statement="Under ‖A‖∞ <= C (C >= 1): sup_{i,j} A^reg(i, j)/A(i, j) <= 1.",
    kind="inequality",
    domain=_theorem1_domain(1, 64, "the register's sweep G_d reaches 128 (full tier); the search covers d in "
                                   "[2, 1000] (its planar configurations need two dimensions)", 10.0, 16),
    tolerance=1e-10, units="max_ij A^reg/A - 1",
    cell=_upper_cell, search=_upper_search, universal=True,
    grid=tiers(dict(d=[1, 2, 64], C=[1.0, 10.0], L=[1, 16], inputs=["gaussian", "sphere", "tied", "orthogonal"]),
               smoke=dict(inputs=["gaussian", "orthogonal"]),
               full=dict(d=G_D, C=C_GRID, L=[1, 2, 16, 256])),
    readings=READINGS, where=_generated_domain,
    restarts=tiers(3, smoke=1, full=20), plot_x="d",
    notes="Any L and any (Q, K) with ‖A‖∞ <= C (scaled inputs). Grid inputs: I1 Gaussian (Q ≠ K and tied Q = K) and "
          "I3 rows of norm 3, shrunk to admissibility by "
          "bisection on a common factor, and the adversarial family x_i = 10u, y_j = 10(v - u)/√2 (u ⊥ v).",
)

# ----------------------------------------------------------------- Theorem 1: the proof's w bound


def _w_bound_cell(ctx: CellContext):
    config = _admissible_inputs(ctx)
    C = ctx.params["C"]
    w = config.pair_w()
    scale = max(1.0, float(theory.w_bound(C)))
    identity = exact_test(config.pair_w_from_kernels(), w, tolerance=ctx.tolerance, scale=np.maximum(1.0, w))
    bound = margin_evidence(float(theory.w_bound(C) - w.max()), tolerance=ctx.tolerance, scale=scale,
                            extra=dict(max_w=float(w.max()), w_bound=float(theory.w_bound(C))))
    return combine([identity, bound], extra=dict(max_w=float(w.max()), w_bound=float(theory.w_bound(C))))


def _w_bound_search(ctx: CellContext):
    C, L = _random_hypothesis(ctx.rng)
    w, config = _sup_w_search("all", C, L, ctx.variant, ctx.rng, ctx.restart or 0)
    bound = float(theory.w_bound(C))
    margin = bound - w if config is not None else math.inf
    extra = dict(C=C, L=L, w=w, w_bound=bound, **_configuration_extra(config))
    return margin_evidence(margin, tolerance=ctx.tolerance, scale=max(1.0, bound), extra=extra)


THM1_W_BOUND = Claim(
    id="performer.thm1.proof_w_bound", source="F.3, the line before Eq 35",
    statement="For a query x and key y under ‖A‖∞ <= C: w = ‖z‖²/2 = [ln SM(x,x) + ln SM(y,y) + 2 ln SM(x,y)]/2 "
              "<= 2 ln C.",
    kind="inequality",
    domain=_theorem1_domain(1, 64, "the register's sweep G_d reaches 128 (full tier); w does not depend on d "
                                   "beyond the inputs' dimension", 10.0, 16),
    tolerance=1e-9, units="(w - 2 ln C)/max(1, 2 ln C); identity error |Δw|/max(1, w)",
    cell=_w_bound_cell, search=_w_bound_search, universal=True,
    grid=tiers(dict(d=[1, 2, 64], C=[1.0, 10.0], L=[1, 16], inputs=["gaussian", "sphere", "tied", "orthogonal"]),
               smoke=dict(d=[2, 16], L=[2], inputs=["tied", "orthogonal"]),
               full=dict(d=G_D, C=C_GRID, L=[1, 2, 16, 256])),
    readings=READINGS, where=_generated_domain,
    restarts=tiers(3, smoke=1, full=20), plot_x="C",
    notes="Any L and any (Q, K) with ‖A‖∞ <= C (scaled inputs). The identity holds for every pair; the bound uses "
          "SM(x,x) <= C and SM(y,y) <= C, which the hypothesis "
          "gives only when x and y are also keys and queries (tied inputs Q = K).",
)

# ------------------------------------------------------------------------- Theorem 1: lower bound

_LOWER_D = [2, 8, 27, 64, 125, 1000, 10**4, 10**5, 10**6]
_LOWER_GRID = tiers(dict(d=[2, 27, 1000, 10**6], C=[1.5, 1e3], L=[1, 16], domain=["all", "tied"]),
                    smoke=dict(d=[8, 1000, 10**6], C=[math.e], L=[2]),
                    full=dict(d=_LOWER_D, C=C_GRID, L=[1, 2, 16, 256]))
#: The claimed constant: limsup d^{1/3}(1 - W_C(d)) <= 2.
_LOWER_CONSTANT = 2.0


def _scaled_deficit(d, w: float) -> np.ndarray:
    """``d^{1/3}(1 - ratio(d, w))`` for an array of ``d``."""
    return np.array([dd ** (1 / 3) * _ratio_margin(dd, w) for dd in np.atleast_1d(d)])


def _tail_sup_bound(d: int, w_bar: float) -> float:
    """Upper bound of ``sup_{d' >= d} d'^{1/3}(1 - W(d'))`` from ``1 - W(d') <= min(1, w̄²/d')``."""
    if not math.isfinite(w_bar):
        return math.inf
    peak = w_bar**2  # d'^{1/3} min(1, w̄²/d') rises up to d' = w̄² and falls after it
    return w_bar ** (2 / 3) if d <= peak else w_bar**2 / d ** (2 / 3)


def _tail_evidence(tolerance: float, y_here: float, tail_inf: float, tail_sup: float, extra: dict) -> Evidence:
    """Exact evidence on ``limsup y``: it lies in ``[tail_inf, tail_sup]`` (claim: ``<= 2``)."""
    effect = max(tail_inf - _LOWER_CONSTANT, 0.0)
    return Evidence(y_here, _LOWER_CONSTANT, 0.0, tail_inf - _LOWER_CONSTANT, 0.0 if effect > tolerance else 1.0,
                    0.0, effect, tail_sup - _LOWER_CONSTANT, 1, "exact tail bracket of d^{1/3}(1 - W_C(d))",
                    extra=extra)


def _lower_cell(ctx: CellContext):
    d, C, L, domain = ctx.params["d"], ctx.params["C"], ctx.params["L"], ctx.params["domain"]
    w_found, config = _sup_w(domain, C, L, ctx.variant)
    tail = [dd for dd in sorted({d, *_LOWER_D}) if dd >= d]  # the register's d sweep from d on (every tier)
    y_tail = _scaled_deficit(tail, w_found)
    w_bar = float(theory.w_bound(C)) if domain == "tied" else math.inf  # proven only for tied inputs
    w_lower = 1 - min(1.0, float(theory.ratio_deficit_bound(d, w_bar))) if math.isfinite(w_bar) else 0.0
    extra = dict(w_found=w_found, W_found=1 - _ratio_margin(d, w_found), W_lower=w_lower,
                 claimed=1 - _LOWER_CONSTANT / d ** (1 / 3), w_bar=w_bar, tail_d=tail, tail_y=y_tail.tolist(),
                 **_configuration_extra(config))
    return _tail_evidence(ctx.tolerance, float(y_tail[0]), float(y_tail.min()), _tail_sup_bound(d, w_bar), extra)


def _lower_search(ctx: CellContext):
    C, L = _random_hypothesis(ctx.rng)
    d = max(_LOWER_D)
    w, config = _sup_w_search("all", C, L, ctx.variant, ctx.rng, ctx.restart or 0)
    if config is None:
        return margin_evidence(math.inf, tolerance=ctx.tolerance, extra=dict(d=d, C=C, L=L))
    y = float(_scaled_deficit(d, w)[0])
    return _tail_evidence(ctx.tolerance, y, y, math.inf, dict(d=d, C=C, L=L, w=w, **_configuration_extra(config)))


def _lower_domain(p: dict, variant: str) -> bool:
    """Tied inputs under (R) need C >= L: the row sums of exp(XXᵀ) average at least L."""
    return not (p["domain"] == "tied" and variant == "R" and p["L"] > p["C"])


THM1_LOWER = Claim(
    id="performer.thm1.lower_bound", source="Theorem 1, Eq 9 (left part); proof F.3",
    statement="If ‖A‖∞ <= C for some constant C >= 1, then inf_{i,j} A^reg(i, j)/A(i, j) >= 1 - 2/d^{1/3} + "
              "o(1/d^{1/3}); testable form: limsup_{d→∞} d^{1/3}(1 - W_C(d)) <= 2 for each fixed C, W_C(d) the "
              "infimum of the ratio over all L and admissible (Q, K).",
    kind="rate",
    domain=_theorem1_domain(2, 10**6, "limsup_{d→∞}: each cell brackets it over the register's d sweep from d "
                                      "up to 10^6", 1e3, 16),
    tolerance=0.5, units="d^{1/3}(1 - W_C(d)) above the claimed constant 2",
    cell=_lower_cell, search=_lower_search, universal=True,
    grid=_LOWER_GRID, readings=READINGS, where=_lower_domain,
    restarts=tiers(2, smoke=1, full=20), plot_x="d",
    notes="Any L and any (Q, K) with ‖A‖∞ <= C (grid axis domain 'all'); the tied inputs Q = K (domain 'tied') are "
          "a sub-domain the proof implicitly assumes. W_C(d) = ratio(d, w*) with w* the supremum of ‖x_i+y_j‖²/2 "
          "over admissible inputs (the ratio "
          "decreases in w). Each cell brackets limsup d^{1/3}(1 - W_C(d)): from below by the smallest value over "
          "the register's d' >= d (2, 8, 27, ..., 10^6) with the best admissible configuration found, from above by "
          "w* <= 2 ln C (tied "
          "domain only) and 1 - ratio <= w²/d. A violation is the lower end exceeding 2 by more than 0.5.",
)

# ---------------------------------------------------------------------------- Eqs 32-35 (proof)

_CHAIN_PARTS = ("i", "ii", "iii", "iv")
_CHAIN_C = [1.01, 1.5, math.e, math.e**2, 10.0, 1e3]
_CHAIN_FRACTIONS = [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99]


def _chain_w(part: str, fraction: float, l: int, C: float) -> float:
    """The grid's ``w``: a fraction of ``l`` (parts i-iii) or of ``min(l, 2 ln C)`` (part iv)."""
    top = min(l, float(theory.w_bound(C))) if part == "iv" else l
    return fraction * top


def _chain_margin(part: str, d: int, l: int, w: float, C: float) -> tuple[float, dict]:
    """``(bounded side - bound, details)`` for one step of the proof (>= 0 when the step holds)."""
    if part == "i":
        ratio, bound = 1 - _ratio_margin(d, w), float(theory.eq32_lower_bound(d, w, l))
    elif part == "ii":
        ratio, bound = math.exp(theory.log_f(l, d)), float(theory.eq33_f_lower_bound(d, l))
    elif part == "iii":
        ratio, bound = float(theory.eq34_chernoff_bound(w, l)), float(theory.poisson_tail(w, l))
    else:
        ratio, bound = 1 - _ratio_margin(d, w), float(theory.eq35_bound(d, C))
    extra = dict(part=part, d=d, l=l, w=w, larger=ratio, smaller=bound)
    if part == "iv":
        extra["scaled_deficit_of_bound"] = d ** (1 / 3) * (1 - bound)  # -> 2 as d grows (Eq 35's trend)
    return ratio - bound, extra


def _chain_cell(ctx: CellContext):
    p = ctx.params
    l = theory.proof_l(p["d"], p["rounding"])
    w = _chain_w(p["part"], p["fraction"], l, p["C"])
    margin, extra = _chain_margin(p["part"], p["d"], l, w, p["C"])
    return margin_evidence(margin, tolerance=ctx.tolerance, extra=extra)


def _is_cube(d: int) -> bool:
    return theory.proof_l(d, "floor") == theory.proof_l(d, "ceil")


def _chain_domain(p: dict, variant: str) -> bool:
    if _is_cube(p["d"]) and p["rounding"] == "ceil":
        return False  # l = d^{1/3} exactly: one cell
    if p["part"] in ("i", "ii", "iii") and p["C"] != _CHAIN_C[0]:
        return False  # C enters part (iv) only
    if p["part"] == "ii" and p["fraction"] != _CHAIN_FRACTIONS[0]:
        return False  # w does not enter part (ii)
    return theory.proof_l(p["d"], p["rounding"]) >= 1


def _chain_search(ctx: CellContext):
    restart = ctx.restart or 0
    part, rounding = _CHAIN_PARTS[restart % 4], ("floor", "ceil")[(restart // 4) % 2]

    def point(params):
        d = int(round(10 ** params[0]))
        l = theory.proof_l(d, rounding)
        return d, l, _chain_w(part, params[1], l, 10 ** params[2]), 10 ** params[2]

    def margin(params):
        d, l, w, C = point(params)
        return _chain_margin(part, d, l, w, C)[0]

    bounds = [(math.log10(8), 6.0), (1e-6, 1 - 1e-9), (math.log10(1.01), 3.0)]
    res = minimize_margin(margin, bounds, rng=ctx.rng, restart=restart // 8, maxiter=_SEARCH_ITERATIONS)
    d, l, w, C = point(res.x)
    value, extra = _chain_margin(part, d, l, w, C)
    return margin_evidence(value, tolerance=ctx.tolerance, extra=dict(extra, C=C, rounding=rounding))


PROOF_CHAIN = Claim(
    id="performer.eq32_35.proof_chain", source="F.3, Eqs 32-35 (with Eq 34)",
    statement="With l = d^{1/3} (an integer) and t = ln(l/w): (i) SMREG/SM >= f(l, d)(1 - P[Po(w) > l]) (Eq 32); "
              "(ii) f(l, d) >= (1 - (2l-2)/d)^l; (iii) P[Po(w) > l] <= exp(-w - l(t - 1)) (Eq 34); (iv) for "
              "w <= 2 ln C: SMREG/SM >= (1 - 2/d^{1/3} + o(d^{-1/3}))(1 - C^{-2}(d^{1/3}/(2e ln C))^{-d^{1/3}}) "
              "(Eq 35).",
    kind="inequality",
    domain=dict(
        part=Choice("the four steps (i)-(iv)", _CHAIN_PARTS),
        d=Integers("d with l = d^{1/3} treated as an integer (l >= 1)", 1, math.inf, points=(1, 8), up_to=10**6,
                   why="the register's sweep ends at 10^6; the search covers d in [8, 10^6]"),
        fraction=Range("0 < w < l (so that t > 0), as w = fraction·l (part iv: fraction·min(l, 2 ln C))",
                       0.0, 1.0, strict=(True, True)),
        C=Range("C > 1 for (iv)", 1.0, math.inf, strict=(True, False), up_to=(None, 1e3),
                why="the register's sweep C <= 10³; the search covers C in [1.01, 10³]")),
    tolerance=1e-12, units="bounded side minus bound (all quantities in [0, 1])",
    cell=_chain_cell, search=_chain_search, universal=True,
    grid=tiers(dict(part=list(_CHAIN_PARTS), d=[1, 8, 27, 100, 1000, 10**6], fraction=[0.01, 0.5, 0.99],
                    C=[1.01, math.e, 1e3], rounding=["floor", "ceil"]),
               smoke=dict(d=[1, 8, 27, 10**6], fraction=[0.01, 0.99], C=[1.01, 1e3], rounding=["floor"]),
               full=dict(d=[1, 8, 27, 64, 100, 125, 500, 1000, 5000, 8000, 10**6], fraction=_CHAIN_FRACTIONS,
                         C=_CHAIN_C)),
    where=_chain_domain, restarts=tiers(8, smoke=4, full=40), plot_x="d",
    notes="l = d^{1/3} for cubes, ⌊d^{1/3}⌋ or ⌈d^{1/3}⌉ otherwise (grid axis rounding); the o-term of (iv) is "
          "dropped (its non-o part evaluated at finite d). Exact Poisson tails (scipy.stats.poisson) and exact f(l, "
          "d); search restarts cycle through the four "
          "steps and both roundings of l, over d in [8, 10^6], w in (0, l) and C in [1.01, 10^3].",
)

# ------------------------------------------------------------------------------ Theorem 2 (SMREG)


def _orf_gain_shortfall(d: int, m: int, s: float) -> tuple[float, dict]:
    """``1 - (MSE_iid - MSE_ort)/gap`` with Theorem 2's gap; 0 where both vanish (m = 1 or s = 0)."""
    if m == 1 or s == 0:
        return 0.0, dict(reduction_over_gap=1.0)
    log_mean = float(theory.log_term_moment(d, s))  # log F(a), F(a) = SMREG/Λ = ₀F₁(; d/2; d s/4)
    # per (m-1)/m Λ²: reduction = F(a)² - F(2a), gap = (2/(d+2)) (F(a) - 1)²
    log_reduction = theory.log_orthogonal_pair_excess(d, s)
    log_excess_f = log_mean + math.log(-math.expm1(-log_mean))  # log(F(a) - 1) without overflow
    log_gap = math.log(theory.theorem2_gap_coefficient(d, m) * m / (m - 1)) + 2 * log_excess_f
    ratio = math.exp(log_reduction - log_gap)
    return 1.0 - ratio, dict(reduction_over_gap=ratio, log_reduction=log_reduction, log_gap=log_gap)


def _orf_cell(ctx: CellContext):
    p = ctx.params
    s = _pair_s(p["norm_x"], p["norm_y"], p["angle"])
    shortfall, extra = _orf_gain_shortfall(p["d"], p["m"], s)
    return margin_evidence(-shortfall, tolerance=ctx.tolerance, extra=dict(extra, s=s))


def _orf_search(ctx: CellContext):
    def margin(params):
        return -_orf_gain_shortfall(int(round(10 ** params[0])), 2, 10 ** params[1])[0]

    res = minimize_margin(margin, [(math.log10(2), 4.0), (-6.0, 6.0)], rng=ctx.rng, restart=ctx.restart or 0,
                          maxiter=_SEARCH_ITERATIONS)
    d, s = int(round(10 ** res.x[0])), float(10 ** res.x[1])
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(d=d, s=s))


_ORF_NORM_WHY = ("the comparison depends on s = ‖x + y‖² only (Λ cancels); the search covers s in [1e-6, 10^6], "
                 "the grid's pairs reach s = 36")


def _orf_domain(p: dict, variant: str) -> bool:
    d, m = p["d"], p["m"]
    allowed = {1, 2, 3, d // 2, d - 1, d}  # G_m^<= of the register
    return m <= d and m in allowed and _angle_allowed(d, p["angle"])


THM2_ORF_SMREG = Claim(
    id="performer.thm2.orf_mse_smreg", source="Theorem 2, last sentence",
    statement="MSE(SMREGhat^ort+_m(x, y)) <= MSE(SMREGhat^+_m(x, y)) - (2(m-1)/(m(d+2)))(SMREG(x, y) - Λ)², "
              "i.e. Eq 10 with SM replaced by SMREG in the estimators and the bound.",
    kind="inequality",
    domain=dict(
        d=Integers("ω_i ∈ √d S^{d-1}, every d >= 1", 1, math.inf, points=(1, 2), up_to=64,
                   why="the register's sweep ends at 64; the search covers d in [2, 10^4]"),
        m=Integers("m <= d (G_m^<= of the register: 1, 2, 3, d/2, d - 1, d)", 1, math.inf, points=(1, 2),
                   up_to=64, why="m <= d <= 64; the comparison does not depend on m >= 2 (see notes)"),
        norm_x=Range("x arbitrary: its norm", 0.0, math.inf, up_to=(None, 3.0), why=_ORF_NORM_WHY),
        norm_y=Range("y arbitrary: its norm", 0.0, math.inf, up_to=(None, 3.0), why=_ORF_NORM_WHY),
        angle=Range("x, y arbitrary: the angle between them", 0.0, math.pi)),
    tolerance=1e-9, units="shortfall of the MSE reduction relative to the claimed gap, 1 - (MSE_iid - MSE_ort)/gap",
    cell=_orf_cell, search=_orf_search, universal=True,
    grid=tiers(dict(d=[1, 2, 4, 16, 64], m=[1, 2, 3, 4, 8, 15, 16, 32, 63, 64], norm_x=[0.0, 0.25, 1.0, 3.0],
                    norm_y=[0.0, 0.5, 2.0, 3.0], angle=[0.0, math.pi / 2, math.pi]),
               smoke=dict(d=[1, 2, 16, 64], m=[1, 2, 16, 64], norm_x=[0.0, 3.0], norm_y=[0.0, 3.0],
                          angle=[0.0, math.pi / 2, math.pi]),
               full=dict(d=[1, 2, 3, 4, 8, 16, 32, 64], m=[1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64], norm_x=G_NORM,
                         norm_y=G_NORM, angle=G_ANGLE)),
    where=_orf_domain, restarts=tiers(4, smoke=2, full=30), plot_x="d",
    notes="ω_i marginally Unif(√d S^{d-1}) and pairwise orthogonal (Haar frame, norms √d). Exact closed forms "
          "(performer.derived.smreg_mse verifies them by Monte Carlo): per (m-1)/m Λ² the "
          "reduction is ₀F₁(; d/2; ds/4)² - ₀F₁(; d/2; ds/2) and the gap (2/(d+2))(₀F₁(; d/2; ds/4) - 1)², so "
          "the comparison does not depend on m >= 2 or Λ; the search covers d in [2, 10^4], s in [1e-6, 1e6].",
)

# ------------------------------------------------------------------------------- Sec 3 proxy

#: Accuracy threshold of "an accurate proxy" (the paper gives none): mean row total-variation distance
#: between the regularized and the softmax attention distributions. It is the claim's tolerance.
PROXY_THRESHOLD = 0.1
#: Random features per estimator in the Monte Carlo comparison (App. A.3's default).
_PROXY_FEATURES = 256
#: Query rows (each against every key) on which the Monte Carlo cells compare estimators: their mean row TV
#: estimates the mean over all (iid) rows, and both estimators use the same rows.
_PROXY_MC_QUERIES = 32


def _proxy_inputs(ctx: CellContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scaled queries ``Q/d^{1/4}``, keys and values: I1 (``N(0, c²)`` entries) or I3 (rows of norm ``c√d``)."""
    p = ctx.params
    q, k, v = ctx.rng.standard_normal((3, p["L"], p["d"]))
    if p["inputs"] == "sphere":
        q, k = (a * (p["c"] * math.sqrt(p["d"]) / np.linalg.norm(a, axis=-1, keepdims=True)) for a in (q, k))
    else:
        q, k = p["c"] * q, p["c"] * k
    scale = p["d"] ** -0.25
    return q * scale, k * scale, v


def _row_softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _mean_row_tv(p: np.ndarray, q: np.ndarray) -> float:
    return float(0.5 * np.abs(p - q).sum(axis=-1).mean())


def _proxy_exact(ctx: CellContext, x, y, v):
    log_a = softmax_kernel(x, y, log=True)
    s = np.maximum(np.einsum("ik,ik->i", x, x)[:, None] + np.einsum("jk,jk->j", y, y)[None, :] + 2 * log_a, 0.0)
    log_ratio = theory.log_smreg_ratio(x.shape[1], s)
    att, att_reg = _row_softmax(log_a), _row_softmax(log_a + log_ratio)
    tv = _mean_row_tv(att_reg, att)
    extra = dict(mean_row_tv=tv, max_row_tv=float((0.5 * np.abs(att_reg - att).sum(-1)).max()),
                 mean_row_kl=float((att * (np.log(att) - np.log(att_reg))).sum(-1).mean()),
                 mean_row_ratio_spread=float(np.exp(log_ratio.max(-1) - log_ratio.min(-1)).mean()),
                 output_relative_error=float(np.linalg.norm((att_reg - att) @ v) / np.linalg.norm(att @ v)))
    return exact_test(tv, 0.0, tolerance=ctx.tolerance, extra=extra)


def _estimated_attentions(fmap, x, y, omega: np.ndarray, replicates: int) -> np.ndarray:
    """Row-normalised ``φ(x_i)ᵀφ(y_j)`` for each of ``replicates`` projections stacked in ``omega``.

    One feature-map call covers every replicate (a replicate owns ``m`` consecutive feature columns; the
    per-row scale of the queries cancels in the row normalisation). The per-replicate products use
    ``einsum`` rather than many small multi-threaded BLAS calls, which stall on a busy machine.
    """
    fx, fy = as_features(fmap(x, omega)), as_features(fmap(y, omega))
    m = omega.shape[0] // replicates
    vx = fx.values.reshape(x.shape[0], replicates, m)
    vy = fy.values.reshape(y.shape[0], replicates, m)
    with np.errstate(divide="ignore"):
        return _row_softmax(np.log(np.einsum("irm,jrm->rij", vx, vy)) + fy.log_scale[None, None, :])


def _proxy_mc(ctx: CellContext, x, y):
    d, m, n = x.shape[1], _PROXY_FEATURES, ctx.replicates
    x = x[:_PROXY_MC_QUERIES]
    fmap = ctx.impl("feature_map.positive", positive_features)
    exact = _row_softmax(softmax_kernel(x, y, log=True))
    projection = {"mc_iid": "spherical", "mc_orthogonal": "orthogonal_sqrt_d"}[ctx.params["compare"]]
    reg = _estimated_attentions(fmap, x, y, replicate_projections(projection, n, m, d, ctx.rng), n)
    sm = _estimated_attentions(fmap, x, y, replicate_projections("iid", n, m, d, ctx.rng), n)
    diff = [_mean_row_tv(reg[r], exact) - _mean_row_tv(sm[r], exact) for r in range(n)]
    return mean_test(np.array(diff), 0.0, alternative="less", **ctx.test)


def _proxy_cell(ctx: CellContext):
    x, y, v = _proxy_inputs(ctx)
    return _proxy_exact(ctx, x, y, v) if ctx.params["compare"] == "exact" else _proxy_mc(ctx, x, y)


SMREG_PROXY = Claim(
    id="performer.sec3.smreg_proxy",
    source="end of Sec 2.3; the sentences before and after Theorem 1",
    statement="The regularized softmax kernel is, in practice, an accurate proxy of the softmax kernel in "
              "attention, and positive random features for SMREG can be used to approximate the softmax kernel.",
    kind="reproduction",
    domain=dict(
        compare=Choice("an accurate proxy in attention (exact), and positive random features for SMREG (iid "
                       "and orthogonal, against SMhat^+ at equal m)", ("exact", "mc_iid", "mc_orthogonal")),
        inputs=Choice("in practice (no inputs stated): the register's I1 (Gaussian) and I3 (sphere) inputs",
                      ("gaussian", "sphere")),
        d=Integers("in practice: the register's head dimensions d ∈ {16, 32, 64, 128}", 16, 128),
        L=Integers("in attention: any sequence length (the register's sweep L ∈ {256, 1024})", 1, math.inf,
                   up_to=1024, why="the register's longest sequences"),
        c=Range("in practice: the register's input scales c ∈ [0.25, 2]", 0.25, 2.0)),
    tolerance=PROXY_THRESHOLD,
    units="mean row total variation between D_reg⁻¹A^reg and D⁻¹A (exact); excess of the SMREGhat^+ "
          "attention's mean row TV to exact softmax attention over SMhat^+'s, at m = 256 (mc)",
    cell=_proxy_cell,
    grid=tiers(dict(compare=["exact", "mc_iid", "mc_orthogonal"], inputs=["gaussian"], d=[16, 64], L=[128],
                    c=[0.25, 1.0]),
               smoke=dict(compare=["exact", "mc_iid"], d=[16], L=[64], c=[0.5, 1.0]),
               full=dict(inputs=["gaussian", "sphere"], d=[16, 32, 64, 128], L=[1, 256, 1024],
                         c=[0.25, 0.5, 1.0, 2.0])),
    where=lambda p, v: p["compare"] == "exact" or p["L"] <= 256,
    # Budget: the heaviest claim here (quick about 1-2 s): exact L×L attention per cell plus, per Monte Carlo
    # cell, 64 redraws of two 256-feature maps; fewer redraws would leave batch means without their 64 values.
    replicates=tiers(64, full=256), roles=("feature_map.positive",), plot_x="c",
    notes="Inputs I1 (Q, K with iid N(0, c²) entries) and I3 (rows of norm c√d), scaled by d^{-1/4}; 'accurate' = "
          "PROXY_THRESHOLD. The quick and smoke grids test only part of the domain (I1, L <= 128): a violation "
          "there refutes, support would need the full tier. The exact part also reports the max row TV, mean row "
          "KL(D⁻¹A ‖ D_reg⁻¹A^reg), the mean within-row "
          "spread max/min of A^reg/A and ‖Att_reg - Att‖/‖Att‖. Monte Carlo cells redraw one projection per "
          "replicate and compare paired mean row TVs (batch means) over the first 32 query rows against all "
          "keys; they run at L <= 256.",
)
