r"""``performer.*`` claims on the unbiasedness and MSE of the softmax estimators (Choromanski et al. 2021).

Register ``../shared/claims/performer.md``; seed text ``003_4855bc6ab225d7a6.txt`` (Sec 2.3-2.4, Lemmas 1-2,
Theorem 2, App B.2, F.1-F.2, F.4, Figs 2 and 4), plus the register's derived predictions. Predictions come
from :mod:`rfkit.theory.softmax`, estimates from :mod:`rfkit.estimators` (through the roles of
:mod:`rfkit.validation.adapters`), figure quantities from :mod:`rfkit.validation.reproductions.performer`.

Design notes
------------
* **Monte Carlo where it can decide, exact evaluation elsewhere.** Exponential features are log-normal-like:
  the squared error of ``SM⁺_1`` at ``‖x+y‖² = 1`` has skewness ~500, so no replicate count a test can
  afford makes its sample MSE normal. Every Monte Carlo cell therefore uses inputs from a *Monte Carlo
  domain* (a cap on ``‖x+y‖²`` or ``‖x-y‖²``, stated in the claim's hypotheses) and passes the exact
  standard deviation and skewness of its replicates (:func:`~rfkit.theory.softmax.squared_error_moments`),
  so :func:`~rfkit.validation.stats.mean_test` falls back to Chebyshev rather than trusting a normal
  approximation it should not. The rest of the register's sweep (``G_norm × G_angle``) is covered by an
  *exact* part of the same claim: the paper's formula against an independent high-precision evaluation
  (mpmath central moments) or, for expectations, 2-D Gauss–Hermite quadrature of the feature map itself
  over the projection's component in ``span(x, y)`` (the estimate depends on ``ω`` only through it).
* **One tolerance per claim**, fixed from the claim's meaning: 5% relative bias for unbiasedness (as
  ``core.features.unbiased``), 10% relative error for MSE formulas, round-off for closed-form inequalities.
* **Readings** the register defines are variants with their own verdicts (Fig 2's feature budget, Sec 5's
  matrix vs normalised output, Fig 4's budget for positive vs trig).
* Generalized features (``sgn``, ``ReLU``) and the SMREG target are private helpers here until the shared
  implementations (another module) are merged: :func:`_generalized_estimates`, :func:`_smreg_target`,
  :func:`_angular_kernel`, :func:`_relu_kernel`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np
from scipy import optimize, stats

from rfkit.estimators import (
    FEATURE_MAPS,
    gaussian_kernel,
    givens_projection,
    hadamard_projection,
    orthogonal_projection,
    softmax_attention,
    softmax_kernel,
)
from rfkit.theory import generalized as generalized_theory
from rfkit.theory import smreg as smreg_theory
from rfkit.theory import softmax as theory
from rfkit.validation.domain import Choice, Integers, Range
from rfkit.validation.harness import (
    as_features,
    chunks,
    controlled_pair,
    gram_estimates,
    kernel_estimates,
    replicate_projections,
)
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.reproductions.performer import (
    coupled_projections,
    fig2_monte_carlo,
    fig4_inputs,
    fig4_output_mse,
)
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import Evidence, combine, exact_test, ks_test, mean_test, required_replicates

PI = math.pi
KINDS = theory.ESTIMATORS
#: Register sweep grids (scaled inputs).
G_NORM = (0.0, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0)
G_ANGLE = (0.0, PI / 6, PI / 4, PI / 3, PI / 2, 2 * PI / 3, 3 * PI / 4, 5 * PI / 6, 0.9 * PI, 0.99 * PI, PI)
G_D = (1, 2, 3, 4, 8, 16, 32, 64, 128)
G_M = (1, 2, 4, 8, 16, 64, 256, 1024)
#: ``G_m^≤``: m as a function of d (the register's {1, 2, 3, ⌊d/2⌋, d-1, d} ∩ [1, d]).
M_RULES = {"1": lambda d: 1, "2": lambda d: 2, "3": lambda d: 3, "d/2": lambda d: d // 2, "d-1": lambda d: d - 1,
           "d": lambda d: d}
#: m > d for the B.2 block construction.
BLOCK_RULES = {"d+1": lambda d: d + 1, "2d": lambda d: 2 * d, "2d+1": lambda d: 2 * d + 1, "4d": lambda d: 4 * d,
               "16d": lambda d: 16 * d}
#: Gauss–Hermite nodes per axis of the exact expectation (2-D: NODES² evaluations of the feature map).
NODES = 96


def _m_rule_ok(rules: dict, name: str, d: int, upper: int | None = None) -> bool:
    """``rules[name](d)`` lies in ``[1, upper]`` and no earlier rule already gives that m at this ``d``."""
    def admissible(value: int) -> bool:
        return value >= 1 and (upper is None or value <= upper)

    names = list(rules)
    value = rules[name](d)
    earlier = {rules[e](d) for e in names[: names.index(name)]}
    return admissible(value) and value not in {v for v in earlier if admissible(v)}


#: Subsets of ``G_norm × G_angle`` swept by the exact parts below the full tier (full: the whole grid).
TIER_GRIDS = {"smoke": ((0.0, 0.5, 3.0), (0.0, 2 * PI / 3, PI)),
              "quick": ((0.0, 0.25, 1.0, 2.0, 3.0), (0.0, PI / 3, 2 * PI / 3, 0.9 * PI, PI)),
              "full": (G_NORM, G_ANGLE)}


def _grid_pairs(ctx: CellContext, norms=None):
    """Every ``(‖x‖, ‖y‖, angle)`` of the tier's ``G_norm × G_angle`` placed in a random plane of ``R^d``
    (input I2); ``d = 1`` keeps the angles 0 and π. ``norms`` overrides the tier's norms."""
    d = ctx.params["d"]
    tier_norms, angles = TIER_GRIDS[ctx.tier]
    for nx in norms or tier_norms:
        for ny in norms or tier_norms:
            for angle in angles:
                if d == 1 and angle not in (0.0, PI):
                    continue
                x, y = controlled_pair(nx, ny, angle, d, ctx.rng)
                yield (nx, ny, angle), x, y


def _named_pair(table: dict, ctx: CellContext) -> tuple[np.ndarray, np.ndarray]:
    nx, ny, angle = table[ctx.params["pair"]]
    return controlled_pair(nx, ny, angle, ctx.params["d"], ctx.rng)


def _pair_spread(table: dict, name: str, kind: str) -> float:
    """``s = ‖x+y‖²`` (positive, hyperbolic, SMREG) or ``t = ‖x-y‖²`` (trig) of a named pair."""
    nx, ny, angle = table[name]
    sign = -1.0 if kind == "trig" else 1.0
    return nx * nx + ny * ny + 2 * sign * nx * ny * math.cos(angle)


def _relative_error(value: float, reference: float) -> float:
    """``|value - reference|/|reference|``; 0 when both are 0, ``inf`` when only the reference is."""
    if value == reference:
        return 0.0
    return abs(value - reference) / abs(reference) if reference != 0 else math.inf


def _worst_over_grid(ctx: CellContext, error, norms=None) -> Evidence:
    """Exact part: the largest ``error(x, y)`` over the tier's ``G_norm × G_angle`` at this ``d`` (nan is worst)."""
    worst, where = 0.0, None
    for point, x, y in _grid_pairs(ctx, norms):
        err = error(x, y)
        if not err < worst:
            worst, where = err, point
    return exact_test(worst, 0.0, tolerance=ctx.tolerance, extra=dict(worst_pair=where))



#: Fewest replicates a sized cell draws.
_MIN_REPLICATES = 2_000


def _replicates_for(ctx: CellContext, rel_sd: float, skewness: float | None = None, two_sided: bool = True,
                    test: dict | None = None) -> int:
    """Replicates a z test with exact moments needs at this cell (:func:`~rfkit.validation.stats.
    required_replicates`, resolution half the tolerance, 20% margin), capped by the tier's count; cells
    whose need exceeds it stay underpowered and say so.
    """
    need = required_replicates(rel_sd, skewness=skewness, alternative="two-sided" if two_sided else "greater",
                               **(test or ctx.test))
    if not math.isfinite(need):
        return ctx.replicates
    return int(min(ctx.replicates, max(_MIN_REPLICATES, math.ceil(1.2 * need))))


# ------------------------------------------------------------------------------- sampling helpers


def _projections(ctx: CellContext, projection: str, n: int, m: int, d: int,
                 rng: np.random.Generator | None = None) -> np.ndarray:
    """``(n·m, d)`` rows: ``n`` projection matrices. ``orthogonal`` goes through the role
    ``orthogonal_projection`` (a user's sampler can be plugged in); the rest through the harness. ``rng``:
    the generator of a sequential cell's round (default the cell's)."""
    rng = ctx.rng if rng is None else rng
    if projection == "orthogonal":
        sampler = ctx.impl("orthogonal_projection", orthogonal_projection)
        return np.asarray(sampler(m, d, rng=rng, size=n), dtype=np.float64).reshape(n * m, d)
    return replicate_projections(projection, n, m, d, rng)


def _chunk(m: int, d: int) -> int:
    """Replicates per batch: bounds memory at a few million doubles."""
    return max(1, 2_000_000 // (m * max(d, 8)))


def _feature_map(ctx: CellContext, kind: str):
    return ctx.impl(f"feature_map.{kind}", FEATURE_MAPS[kind])


def _kernel_draws(ctx: CellContext, kind: str, x, y, m: int, projection: str, n: int,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` replicates of ``φ(x)ᵀφ(y)`` with ``m`` projections of kind ``projection``."""
    fmap, d = _feature_map(ctx, kind), x.size
    return np.concatenate([kernel_estimates(fmap, x, y, _projections(ctx, projection, c, m, d, rng), c)
                           for c in chunks(n, _chunk(m, d))])


def _gauss_hermite_mean(feature_map, x: np.ndarray, y: np.ndarray, nodes: int = NODES) -> float:
    """``E_ω φ(x)ᵀφ(y)`` for ``ω ~ N(0, I_d)`` and one projection, by Gauss–Hermite quadrature.

    The estimate depends on ``ω`` only through its component in ``span(x, y)``, which is standard normal
    in an orthonormal basis of that span, so a 1-D or 2-D tensor rule is exact up to quadrature error.
    The feature map itself is evaluated at the nodes: this is the exact mean of the implementation.
    """
    g, w = _hermite_rule(nodes)
    basis = _span_basis(x, y)
    if basis.shape[0] == 0:
        grid, weights = np.zeros((1, 0)), np.ones(1)
    elif basis.shape[0] == 1:
        grid, weights = g[:, None], w
    else:
        grid = np.stack(np.meshgrid(g, g, indexing="ij"), axis=-1).reshape(-1, 2)
        weights = np.outer(w, w).ravel()
    omega = grid @ basis if basis.shape[0] else np.zeros((1, x.size))
    values = kernel_estimates(feature_map, x, y, omega, omega.shape[0])
    return float(weights @ values)


@functools.lru_cache(maxsize=4)
def _hermite_rule(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss–Hermite nodes and weights normalised to sum 1 (expectations under N(0, 1))."""
    g, w = np.polynomial.hermite_e.hermegauss(nodes)
    return g, w / w.sum()


def _span_basis(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Orthonormal rows spanning ``span(x, y)`` (0, 1 or 2 rows)."""
    u, sv, vt = np.linalg.svd(np.stack([x, y]), full_matrices=False)
    rank = int((sv > 1e-12 * max(sv.max(initial=0.0), 1e-300)).sum()) if sv.max(initial=0.0) > 0 else 0
    return vt[:rank]


# ------------------------------------------------------------ generalized features (private helpers)

#: Eq 5 functions of the generalized estimators tested here (h = 1, l = 1); swapped for the shared
#: generalized-features module at merge.
GENERALIZED = {"sgn": np.sign, "relu": lambda u: np.maximum(u, 0.0)}


def _generalized_estimates(f, x: np.ndarray, y: np.ndarray, omega: np.ndarray, replicates: int) -> np.ndarray:
    """``φ(x)ᵀφ(y)`` with ``φ(x) = f(Wx)/√m`` for each of ``replicates`` stacked projection matrices."""
    px, py = f(omega @ x), f(omega @ y)
    return (px * py).reshape(replicates, -1).mean(axis=1)


def _angle_between(x: np.ndarray, y: np.ndarray) -> float:
    c = float(x @ y) / (float(np.linalg.norm(x)) * float(np.linalg.norm(y)))
    return math.acos(min(1.0, max(-1.0, c)))


def _angular_kernel(x, y) -> float:
    """``E sgn(ωᵀx) sgn(ωᵀy) = 1 - 2θ/π`` (the angular kernel, register eq5.template_kernels)."""
    return 1.0 - 2.0 * _angle_between(x, y) / PI


def _relu_kernel(x, y) -> float:
    """``E ReLU(ωᵀx) ReLU(ωᵀy) = ‖x‖‖y‖(sin θ + (π - θ) cos θ)/(2π)`` (register relu_arccos_kernel)."""
    theta = _angle_between(x, y)
    return float(np.linalg.norm(x) * np.linalg.norm(y)) * (math.sin(theta) + (PI - theta) * math.cos(theta)) / (2 * PI)


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
    norms = tuple(n for n in TIER_GRIDS[ctx.tier][0] if n <= 2.0) if ctx.params["part"] == "iii" else None
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
    grid={"smoke": dict(d=[1, 4], part=list(GAUSS_PARTS)),
          "quick": dict(d=[1, 2, 3, 8, 32], part=list(GAUSS_PARTS)),
          "full": dict(d=list(G_D), part=list(GAUSS_PARTS))},
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
#: Monte Carlo domain of the unbiasedness tests: pairs whose estimate's mean is close to normal.
MC_CAP_UNBIASED = {"trig": 1.5, "positive": 0.85, "hyperbolic": 0.85}


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
    grid={"smoke": dict(projection=["iid", "orthogonal"], d=[4], m=[4], pair=["small", "quadrature"]),
          "quick": dict(projection=["iid", "orthogonal"], d=[2, 8], m=[1, 4, 16],
                        pair=["small", "orthogonal", "parallel", "quadrature"]),
          "full": dict(projection=["iid", "orthogonal"], d=list(G_D), m=[1, 4, 64],
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
    grid={"smoke": dict(integrand=["exp", "cosh"], d=[2], pair=["cancel", "quadrature", "series"]),
          "quick": dict(integrand=["exp", "cosh"], d=[1, 2, 16],
                        pair=["small", "cancel", "unequal", "opposite", "quadrature", "series"]),
          "full": dict(integrand=["exp", "cosh"], d=list(G_D), pair=list(UNBIASED_PAIRS) + ["quadrature", "series"])},
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
    grid={"smoke": dict(kind=["positive", "hyperbolic"], d=[2], m=[4], pair=["cancel", "quadrature"]),
          "quick": dict(kind=["positive", "hyperbolic"], d=[2, 16], m=[1, 4, 64],
                        pair=["small", "cancel", "opposite", "quadrature"]),
          "full": dict(kind=["positive", "hyperbolic"], d=list(G_D), m=[1, 4, 64],
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
#: Monte Carlo domain of the MSE tests (‖x+y‖² for positive/hyperbolic, ‖x-y‖² for trig): beyond it the
#: squared errors are too skewed for any affordable replicate count (register: "cap ‖x+y‖² and record it").
MC_CAP_MSE = {"trig": 16.0, "positive": 0.3, "hyperbolic": 0.3}
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


def _squared_errors(ctx: CellContext, kind: str, x, y, m: int, projection: str = "iid",
                    n: int | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
    target = math.exp(float(x @ y))
    return (_kernel_draws(ctx, kind, x, y, m, projection, n or ctx.replicates, rng) - target) ** 2


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
    return {"smoke": dict(d=[2], m=[4], pair=mc_pairs[:1] + ["exact"], **extra),
            "quick": dict(d=[1, 3], m=[1, 4, 16], pair=mc_pairs + ["exact"], **extra),
            "full": dict(d=list(G_D), m=list(G_M), pair=list(MSE_PAIRS) + ["exact"], **extra)}


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
    grid={"smoke": dict(kind=list(KINDS), d=[3], m=[2], pair=["small", "exact"]),
          "quick": dict(kind=list(KINDS), d=[3], m=[1, 8], pair=["small", "cancel", "far", "exact"]),
          "full": dict(kind=list(KINDS), d=list(G_D), m=list(G_M), pair=list(MSE_PAIRS) + ["exact"])},
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

#: Path families of the register: P1 x = tu, y = -tu; P2 x = tu, y = tv with uᵀv < 0; P3 x = u fixed,
#: y = tv with uᵀv < 0 (‖u‖ = 1, ‖v‖ = ratio, angle between u and v).
LIMIT_PATHS = ("P1", "P2", "P3")
LIMIT_ANGLES = (0.55 * PI, 2 * PI / 3, 0.75 * PI, 0.9 * PI, PI)
LIMIT_RATIOS = (0.1, 0.5, 1.0, 2.0, 10.0)
#: The path ends where SM reaches this value; the growth exponent is measured over its last decade.
SM_END = 1e-12


def _path_pair(path: str, t: float, angle: float, ratio: float, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair at path parameter ``t`` (axis-aligned plane e_1, e_2 of R^d)."""
    u = np.zeros(d)
    u[0] = 1.0
    v = np.zeros(d)
    v[0], v[1] = ratio * math.cos(angle), ratio * math.sin(angle)
    if path == "P1":
        return t * u, -t * u
    if path == "P2":
        return t * u, t * v
    return u, t * v


def _path_parameter(path: str, angle: float, ratio: float, d: int, log_sm: float) -> float:
    """The ``t`` at which ``log SM(x(t), y(t)) = log_sm`` (SM decreases along each family)."""
    def gap(t):
        x, y = _path_pair(path, t, angle, ratio, d)
        return float(x @ y) - log_sm
    hi = 1.0
    while gap(hi) > 0:
        hi *= 2.0
    return optimize.brentq(gap, 0.0, hi, xtol=1e-14, rtol=1e-15)


def _growth_exponent(kind: str, path: str, angle: float, ratio: float, d: int, m: int) -> float:
    """``β = Δ log MSE / Δ log(1/SM)`` over the last decade before ``SM = 1e-12`` (Lemma 2 closed form);
    ``-inf`` when the MSE is identically 0 on the path (its limit is 0)."""
    logs = []
    for log_sm in (math.log(10 * SM_END), math.log(SM_END)):
        t = _path_parameter(path, angle, ratio, d, log_sm)
        logs.append(theory.lemma2_mse(kind, *_path_pair(path, t, angle, ratio, d), m, log=True))
    if logs[1] == -math.inf:
        return -math.inf
    return (logs[1] - logs[0]) / math.log(10)


#: Margin reported where the MSE is identically 0 along the path (β = -inf; its limit is exactly 0).
_IDENTICALLY_ZERO = 1e300


def _limit_margin(kind: str, beta: float) -> float:
    """Claim ``MSE_trig → ∞`` (needs β > 0) and ``MSE_+ → 0`` (needs β < 0): the margin in β units."""
    margin = beta if kind == "trig" else -beta
    return margin if math.isfinite(margin) else math.copysign(_IDENTICALLY_ZERO, margin)


def _limit_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    beta = _growth_exponent(p["part"], p["path"], p["angle"], p["ratio"], p["d"], p["m"])
    limit = "0" if beta < -ctx.tolerance else "infinite" if beta > ctx.tolerance else "finite or slow"
    return margin_evidence(_limit_margin(p["part"], beta), tolerance=ctx.tolerance,
                           extra=dict(beta=beta, limit=limit, sm_end=SM_END))


def _limit_search(ctx: CellContext) -> Evidence:
    """P4: over angles in (π/2, π] and norm ratios, the smallest margin of both limits on P2 and P3."""
    def margin(point):
        angle, log_ratio = point
        return min(_limit_margin(kind, _growth_exponent(kind, path, angle, 10**log_ratio, 2, 1))
                   for kind in ("trig", "positive") for path in ("P2", "P3"))
    res = minimize_margin(margin, [(0.5 * PI + 1e-3, PI), (-1.0, 1.0)], rng=ctx.rng, restart=ctx.restart or 0,
                          maxiter=150)
    return margin_evidence(res.margin, tolerance=ctx.tolerance,
                           extra=dict(angle=float(res.x[0]), ratio=float(10 ** res.x[1])))


def _limit_domain(p: dict, variant: str) -> bool:
    if p["path"] == "P1":  # x = tu, y = -tu: neither angle nor ratio applies
        return p["angle"] == PI and p["ratio"] == 1.0
    return True


LIMIT_SM_TO_ZERO = Claim(
    id="performer.lemma2.limit_sm_to_zero", paper="performer", source="Lemma 2 (sentence after Eq 8); Sec 2.3",
    statement="As SM(x,y) → 0 with m fixed, MSE(SM^trig_m(x,y)) → ∞ and MSE(SM⁺_m(x,y)) → 0.",
    kind="rate",
    hypotheses="ω_i iid N(0, I_d); every sequence of pairs with xᵀy → -∞ (no path fixed): families P1 (x = tu, "
               "y = -tu), P2 (x = tu, y = tv, uᵀv < 0, angles in (π/2, π], ‖v‖/‖u‖ in {0.1, 0.5, 1, 2, 10}), "
               "P3 (x fixed, y = tv) run until SM = 1e-12, and P4 (adversarial search over angle and norm ratio). "
               "MSEs from Lemma 2 (supported by lemma2.mse_*; Monte Carlo is hopeless where ‖x+y‖² grows)",
    tolerance=0.05, units="growth exponent β of the MSE in 1/SM near SM = 1e-12 (violation: β for MSE_+ → 0, "
                          "-β for MSE_trig → ∞)",
    cell=_limit_cell, search=_limit_search, universal=True,
    grid={"smoke": dict(part=["trig", "positive"], path=["P1", "P2"], angle=[PI, 0.75 * PI], ratio=[1.0], d=[2],
                        m=[1]),
          "quick": dict(part=["trig", "positive"], path=list(LIMIT_PATHS), angle=list(LIMIT_ANGLES),
                        ratio=[0.1, 1.0, 10.0], d=[2, 16], m=[1, 16]),
          "full": dict(part=["trig", "positive"], path=list(LIMIT_PATHS), angle=list(LIMIT_ANGLES),
                       ratio=list(LIMIT_RATIOS), d=[2, 3, 16], m=[1, 16])},
    restarts={"smoke": 1, "quick": 4, "full": 20},
    where=_limit_domain, plot_x="angle",
    notes="MSE_+ = e^{‖x‖²+‖y‖²+4xᵀy}(1 - e^{-‖x+y‖²})/m: it tends to 0 only along sequences with "
          "‖x‖²+‖y‖²+4xᵀy → -∞ (e.g. P1, or P2 at angles beyond 2π/3 with equal norms); the statement holds "
          "for the reading where ‖x+y‖ stays bounded.",
)

# ======================================================== Lemma 2: hyperbolic vs positive with 2m

#: Offsets ``a`` of the exact pairs: ``x = a ẑ + w``, ``y = (‖z‖ - a) ẑ - w`` (so ``x + y = z``), and the norms of
#: the component ``w ⊥ z`` (0 only: ``d = 1``); together they vary ‖x‖, ‖y‖ and the angle at fixed ‖z‖.
HYP_OFFSETS = (-1.0, 0.0, 0.5, 1.0)
HYP_WIDTHS = (0.0, 0.5, 1.0, 2.0)
#: Monte Carlo domain of the comparison: ‖z‖² small enough for decisive MSE tests (as the Lemma 2 MSE caps).
HYP_MC_WIDTH = 0.5


def _z_pair(norm_z: float, offset: float, width: float, d: int, rng: np.random.Generator):
    """``(x, y)`` with ``x + y = z``, ``‖z‖ = norm_z``: ``x = offset·ẑ + w``, ``‖w‖ = width``, ``w ⊥ ẑ`` (a random
    plane of ``R^d``; ``d = 1`` has ``w = 0``)."""
    if d == 1:
        return np.array([offset]), np.array([norm_z - offset])
    basis, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    z_hat, w = basis[:, 0], width * basis[:, 1]
    x = offset * z_hat + w
    return x, norm_z * z_hat - x


def _hyp_margin(x, y, m: int) -> float:
    """``(MSE(SM⁺_{2m}) - MSE(SM^hyp+_m)) / MSE(SM⁺_{2m})`` from Lemma 2 (``= e^{-‖z‖²}`` for z ≠ 0). Where both
    MSEs are 0 (z = 0) the strict inequality ``0 < 0`` fails: scored -1 (no strict gap at all)."""
    pos = theory.lemma2_mse("positive", x, y, 2 * m)
    hyp = theory.lemma2_mse("hyperbolic", x, y, m)
    if pos == 0:
        return -1.0 if hyp == 0 else -math.inf
    return (pos - hyp) / pos


def _difference_moments(a: dict, b: dict) -> tuple[float, float | None]:
    """sd and skewness of ``A - B`` for independent ``A``, ``B`` with the given mean/var/skewness dicts."""
    var = a["var"] + b["var"]
    third = a["skewness"] * a["var"] ** 1.5 - b["skewness"] * b["var"] ** 1.5
    skew = third / var**1.5 if var > 0 and math.isfinite(third) else None
    return math.sqrt(var), skew


def _hyp_vs_pos_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    m, d, norm_z = p["m"], p["d"], p["norm_z"]
    if p["route"] == "exact":  # every pair of the offsets × widths at this ‖z‖ (z = 0: the boundary, exactly)
        worst, where = math.inf, None
        for offset in HYP_OFFSETS:
            for width in HYP_WIDTHS if d > 1 else (0.0,):
                if d > 1 and width == 0.0:
                    continue
                x, y = _z_pair(norm_z, offset, width, d, ctx.rng)
                margin = _hyp_margin(x, y, m)
                if margin <= worst:
                    worst, where = margin, (offset, width)
        return margin_evidence(worst, tolerance=ctx.tolerance, extra=dict(worst_pair=where, norm_z=norm_z))
    x, y = _z_pair(norm_z, norm_z / 2, HYP_MC_WIDTH, d, ctx.rng)
    sd, skew = _difference_moments(theory.squared_error_moments("positive", x, y, 2 * m),
                                   theory.squared_error_moments("hyperbolic", x, y, m))
    scale = theory.lemma2_mse("positive", x, y, 2 * m)
    n = _replicates_for(ctx, sd / scale, skew, two_sided=False)
    diff = _squared_errors(ctx, "positive", x, y, 2 * m, n=n) - _squared_errors(ctx, "hyperbolic", x, y, m, n=n)
    return mean_test(diff, 0.0, alternative="greater", scale=scale, sd=sd, **ctx.test,
                     extra=dict(margin_exact=_hyp_margin(x, y, m)))


def _hyp_vs_pos_search(ctx: CellContext) -> Evidence:
    def margin(point):
        nx, ny, angle, m = point
        x, y = controlled_pair(nx, ny, angle, 2, ctx.rng)
        return _hyp_margin(x, y, int(m))
    res = minimize_margin(margin, [(0.0, 3.0), (0.0, 3.0), (0.0, PI), (1, 1024)], rng=ctx.rng,
                          restart=ctx.restart or 0, integer=[False, False, False, True], maxiter=200)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(point=res.x.tolist()))


HYP_NORM_Z = [0.0, 0.2, 0.5, 1.0, 2.0, 3.0, 6.0]

# Budget: quick ~3 s (heavy): each Monte Carlo cell draws SM⁺ with 2m projections and SM^hyp+ independently,
# sized by exact moments to resolve half the tolerance despite the skewed squared errors.
HYP_VS_POS_2M = Claim(
    id="performer.lemma2.hyp_vs_pos_2m", source="Lemma 2 (sentence after Eq 8)",
    statement="The hyperbolic estimator is strictly more accurate than the positive one with twice as many "
              "random features: MSE(SM^hyp+_m(x,y)) < MSE(SM⁺_{2m}(x,y)).",
    kind="inequality",
    domain=dict(
        norm_z=Range("all x, y (z = x + y, including x = -y)", 0.0, math.inf, boundaries=(0.0,),
                     up_to=(None, 6.0),
                     why="‖x‖, ‖y‖ <= 3 as in G_norm (‖z‖ <= 6); the relative margin is e^{-‖z‖²} by Lemma 2, "
                         "positive at every finite ‖z‖ and tending to 0"),
        m=Integers("m random features (2m for SM⁺), every m >= 1", 1, math.inf, points=(1,), up_to=16,
                   why="both MSEs are proportional to 1/m (Lemma 2), so the relative margin does not depend on m; "
                       "the search reaches m = 1024, the full tier G_m"),
        d=Integers("x, y ∈ R^d, ω_i iid N(0, I_d), every d >= 1", 1, math.inf, points=(1,), up_to=3,
                   why="Lemma 2's MSEs depend on x, y only through ‖x‖, ‖y‖ and ‖z‖, not on d; the full tier "
                       "runs G_d")),
    tolerance=0.05,
    units="relative MSE margin (MSE⁺_{2m} - MSE^hyp_m)/MSE⁺_{2m}; at z = 0, where both MSEs are 0, the strict "
          "inequality 0 < 0 fails and is scored -1",
    cell=_hyp_vs_pos_cell, search=_hyp_vs_pos_search, universal=True,
    grid=tiers(dict(route=["exact", "mc"], norm_z=HYP_NORM_Z, m=[1, 4, 16], d=[1, 3]),
               smoke=dict(norm_z=[0.0, 0.5, 6.0], m=[1, 16]),
               full=dict(norm_z=HYP_NORM_Z + [0.05, 0.3, 4.0], m=list(G_M), d=list(G_D))),
    replicates=tiers(100_000, smoke=20_000, full=2_000_000),
    restarts=tiers(4, smoke=1, full=20),
    where=lambda p, v: p["route"] == "exact" or (
        p["d"] > 1 and 0 < p["norm_z"] ** 2 <= MC_CAP_MSE["positive"]),
    roles=("feature_map.positive", "feature_map.hyperbolic"), plot_x="norm_z",
    notes="Exact route: the Lemma 2 margin (= e^{-‖z‖²} for z ≠ 0) at 16 pairs with x + y = z for each ‖z‖ "
          "(x = aẑ + w, a ∈ {-1, 0, 0.5, 1}, ‖w‖ ∈ {0.5, 1, 2}, w ⊥ z; d = 1: w = 0), z = 0 tested exactly: there "
          "both estimators are exact (MSE = 0), so the strict inequality fails as an equality. Monte Carlo route: "
          "the difference of squared errors of SM⁺_{2m} and SM^hyp+_m from independent draws (exact sd and "
          "skewness), at x = z/2 + w, ‖w‖ = 0.5, for 0 < ‖z‖² <= 0.3 (beyond it the squared errors are too skewed "
          "for a decisive test). Adversarial search over (‖x‖, ‖y‖, angle, m) ∈ [0, 3]² × [0, π] × {1..1024}.",
)

# ================================================================================ Fig 2

#: Length grids of the exact parts (l in (0, 2]) and the angle grid of [0, π] (plus π - 10^{-k}).
FIG2_LENGTHS = {"smoke": [0.5, 1.0, 2.0], "quick": [round(0.1 * i, 1) for i in range(1, 21)],
                "full": [round(0.02 * i, 2) for i in range(1, 101)]}
FIG2_PHIS = np.concatenate([np.linspace(0.0, PI, 2001), PI - 10.0 ** -np.arange(1, 9)])
#: "Small kernel values": SM = e^{l² cos φ} at most this (Fig 2 caption reading; documented choice).
SMALL_KERNEL = 0.5
#: Monte Carlo spot checks inside the critical region (l, φ) where both MSEs can be estimated.
FIG2_MC_POINTS = {"l0.5-0.75pi": (0.5, 0.75 * PI), "l0.5-0.9pi": (0.5, 0.9 * PI), "l1-0.9pi": (1.0, 0.9 * PI)}
FIG2_PARTS = ("threshold", "divergence", "small_kernel", "monte_carlo")


def _log_ratio(phis, length: float, budget: str) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(theory.mse_ratio(phis, length, budget))


def _fig2_exact(ctx: CellContext, part: str, length: float) -> Evidence:
    budget = ctx.variant
    if part == "threshold":  # r > 1 on (φ*, π]: the critical region is an interval ending at π
        phi_star = theory.critical_angle(length, budget)
        above = FIG2_PHIS[FIG2_PHIS > phi_star]
        margin = float(_log_ratio(above, length, budget).min()) if above.size else -math.inf
        extra = dict(phi_star=phi_star, sm_at_phi_star=math.exp(length**2 * math.cos(phi_star)))
    elif part == "divergence":  # "arbitrarily more accurate": r grows without bound as φ → π
        near = _log_ratio(np.array([PI - 1e-4, PI - 1e-8]), length, budget)
        margin = float(near[1] - near[0])
        extra = dict(log_r=near.tolist(), r_at_pi=theory.mse_ratio(PI, length, budget))
    else:  # small kernel values: SM <= SMALL_KERNEL implies r > 1
        small = FIG2_PHIS[length**2 * np.cos(FIG2_PHIS) <= math.log(SMALL_KERNEL)]
        margin = float(_log_ratio(small, length, budget).min())
        extra = dict(small_kernel=SMALL_KERNEL, points=int(small.size))
    return margin_evidence(margin, tolerance=ctx.tolerance, extra=extra)


def _fig2_monte_carlo(ctx: CellContext) -> Evidence:
    length, phi = FIG2_MC_POINTS[ctx.params["point"]]
    d, m, budget = ctx.params["d"], ctx.params["m"], ctx.variant
    m_pos = 2 * m if budget == "same_features" else m
    x, y = _axis_pair(length, length, phi, d)  # the moments depend on the norms and the angle only
    sd, skew = _difference_moments(theory.squared_error_moments("trig", x, y, m),
                                   theory.squared_error_moments("positive", x, y, m_pos))
    n = _replicates_for(ctx, sd / theory.lemma2_mse("trig", x, y, m), skew, two_sided=False)
    maps = {k: _feature_map(ctx, k) for k in ("trig", "positive")}
    mc = fig2_monte_carlo(length, phi, d=d, m=m, replicates=n, rng=ctx.rng, budget=budget, feature_maps=maps)
    return mean_test(mc["trig"] - mc["positive"], 0.0, alternative="greater", scale=mc["mse_trig"], sd=sd,
                     **ctx.test, extra=dict(r=mc["mse_trig"] / mc["mse_positive"]))


def _fig2_cell(ctx: CellContext) -> Evidence:
    if ctx.params["part"] == "monte_carlo":
        return _fig2_monte_carlo(ctx)
    return _fig2_exact(ctx, ctx.params["part"], ctx.params["l"])


def _fig2_search(ctx: CellContext) -> Evidence:
    """Smallest ``log r`` over the small-kernel region ``SM <= 1/2``, ``l in (0, 2]`` (closed form).

    Coordinates ``(l, u)`` with ``φ = φ_min(l) + u (π - φ_min(l))`` and ``cos φ_min(l) = ln(1/2)/l²`` keep
    every point inside the region."""
    def margin(point):
        length, u = point
        phi_min = math.acos(max(-1.0, math.log(SMALL_KERNEL) / length**2))
        phi = phi_min + u * (PI - phi_min)
        return float(_log_ratio(np.array([phi]), length, ctx.variant)[0])
    res = minimize_margin(margin, [(math.sqrt(math.log(1 / SMALL_KERNEL)), 2.0), (0.0, 1.0)], rng=ctx.rng,
                          restart=ctx.restart or 0)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(l=float(res.x[0]), u=float(res.x[1])))


def _fig2_domain(p: dict, variant: str) -> bool:
    if p["part"] == "monte_carlo":
        return p["l"] == FIG2_LENGTHS["smoke"][1]  # one set of spot checks (they have their own points)
    if p["point"] != next(iter(FIG2_MC_POINTS)) or p["d"] != 2 or p["m"] != 1:
        return False  # exact parts: once per l
    return p["part"] != "small_kernel" or p["l"] ** 2 >= math.log(1 / SMALL_KERNEL)


# Budget: quick ~3 s (heavy): 120 closed-form cells (20 lengths × 3 parts × 2 readings), 3 searches per reading
# and 8 Monte Carlo spot checks sized by exact moments.
FIG2_CRITICAL_REGION = Claim(
    id="performer.fig2.critical_region", paper="performer", source="Fig 2 caption; paragraph after Lemma 1; Sec 2.3",
    statement="r = MSE(trig)/MSE(positive) as a function of the angle φ and the length l: in critical regions "
              "(φ large enough, SM small) the positive estimator is arbitrarily more accurate than the "
              "trigonometric one, and it outperforms it where kernel values are small.",
    kind="reproduction",
    hypotheses="‖x‖ = ‖y‖ = l in (0, 2], angle φ in [0, π] (r depends on l² and cos φ only); ω_i iid N(0, I_d). "
               "Exact (Lemma 2 via rfkit.theory.softmax.mse_ratio): r > 1 on (φ*(l), π]; r grows without bound "
               f"as φ → π; r > 1 wherever SM = e^{{l² cos φ}} <= {SMALL_KERNEL} (plus a search of that region). "
               "Monte Carlo spot checks in the critical region (d in {2, 16}, m in {1, 16})",
    tolerance=0.05, units="margin in log r (exact parts) or (MSE_trig - MSE_+)/MSE_trig (Monte Carlo)",
    cell=_fig2_cell, search=_fig2_search, universal=True,
    variants=("same_m", "same_features"),
    variant_notes={"same_m": "(a) both estimators use m projections (r independent of m)",
                   "same_features": "(b) same feature dimension: SM⁺ with 2m projections (r' = 2r)"},
    grid={tier: dict(part=list(FIG2_PARTS), l=FIG2_LENGTHS[tier], point=list(FIG2_MC_POINTS),
                     d=[2, 16] if tier == "full" else [2], m=[1] if tier == "smoke" else [1, 16])
          for tier in ("smoke", "quick", "full")},
    replicates={"smoke": 60_000, "quick": 100_000, "full": 1_000_000},
    restarts={"smoke": 1, "quick": 3, "full": 10},
    where=_fig2_domain, roles=("feature_map.trig", "feature_map.positive"), plot_x="l",
)

# ============================================================== Theorem 2: ORF MSE bound (closed form)

THM2_DIMENSIONS = (1, 2, 3, 4, 8, 16, 32, 64)


def _thm2_margin(x, y, m: int) -> float:
    """``(bound - MSE_ort)/MSE_iid`` for ``SM⁺`` (Eq 10's right side minus the R-ORF MSE, relative to the
    iid MSE); 0 at ``z = 0`` where all three vanish."""
    iid = theory.lemma2_mse("positive", x, y, m)
    if iid == 0:
        return 0.0
    return (theory.theorem2_bound(x, y, m) - theory.orthogonal_mse("positive", x, y, m)) / iid


def _thm2_cell(ctx: CellContext) -> Evidence:
    d = ctx.params["d"]
    m = M_RULES[ctx.params["m_rule"]](d)
    worst, where = math.inf, None
    for point, x, y in _grid_pairs(ctx):
        margin = _thm2_margin(x, y, m)
        if not margin > worst:
            worst, where = margin, point
    blocks = {f"m={k * d}": min(_thm2_margin(x, y, k * d) for _, x, y in _grid_pairs(ctx)) for k in (2, 4)}
    return margin_evidence(worst, tolerance=ctx.tolerance,
                           extra=dict(m=m, worst_pair=where, block_construction_outside_hypothesis=blocks))


def _thm2_search(ctx: CellContext) -> Evidence:
    def margin(point):
        nx, ny, angle, d, frac = point
        d = int(d)
        x, y = controlled_pair(nx, ny, angle if d > 1 else (0.0 if angle < PI / 2 else PI), d, ctx.rng)
        return _thm2_margin(x, y, max(1, min(d, round(frac * d))))
    res = minimize_margin(margin, [(0.0, 3.0), (0.0, 3.0), (0.0, PI), (1, 64), (0.0, 1.0)], rng=ctx.rng,
                          restart=ctx.restart or 0, integer=[False, False, False, True, False], maxiter=200)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(point=res.x.tolist()))


# Budget: quick ~2-3 s: closed forms at 125 pairs per cell (plus the recorded block construction) and 4
# search restarts.
THM2_ORF_MSE = Claim(
    id="performer.thm2.orf_mse_sm", paper="performer", source="Theorem 2, Eq 10 (via Theorem 6 and Remark 1)",
    statement="For any d > 0: MSE(SM^ort+_m(x,y)) <= MSE(SM⁺_m(x,y)) - (2(m-1)/(m(d+2))) (SM(x,y) - "
              "exp(-(‖x‖²+‖y‖²)/2))².",
    kind="inequality",
    hypotheses="SM^ort+_m: R-ORF (Haar frame, independent chi(d) norms, rows marginally N(0, I_d)); m <= d; x, y "
               "arbitrary. MSE_ort in closed form (performer.derived.orf_pos_mse, checked there by Monte Carlo): "
               "MSE_iid + ((m-1)/m) Λ² (₁F₁(d; d/2; s/2) - e^s); grid d in {1,2,3,4,8,16,32,64} × G_m^<= × "
               "G_norm × G_angle, plus an adversarial search over (‖x‖, ‖y‖, angle, d, m). Block ORF with "
               "m in {2d, 4d} (outside the hypothesis) is recorded in each cell's extra",
    tolerance=1e-9, units="margin (bound - MSE_ort) relative to MSE_iid",
    cell=_thm2_cell, search=_thm2_search, universal=True,
    grid={"smoke": dict(d=[1, 4], m_rule=["1", "2", "d"]),
          "quick": dict(d=[1, 2, 3, 8, 64], m_rule=list(M_RULES)),
          "full": dict(d=list(THM2_DIMENSIONS), m_rule=list(M_RULES))},
    restarts={"smoke": 1, "quick": 4, "full": 30},
    where=lambda p, v: _m_rule_ok(M_RULES, p["m_rule"], p["d"], upper=p["d"]), plot_x="d",
)

# =============================================================== Sec 2.4 / B.2: ORFs stay unbiased

ORF_ESTIMATORS = ("positive", "trig", "hyperbolic", "smreg", "sgn", "relu", "law")
#: (‖x‖, ‖y‖, angle): s = ‖x+y‖², t = ‖x-y‖² are (0.75, 0.25), (0.52, 1.48), (0.27, 3.73); the last only for
#: the positive-type estimators (trig's relative variance 2 sinh²(t/2) is too large there).
ORF_PAIRS = {"small": (0.5, 0.5, PI / 3), "obtuse": (0.6, 0.8, 2 * PI / 3), "cancel": (1.0, 1.0, 5 * PI / 6)}


def _axis_pair(nx: float, ny: float, angle: float, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``x`` along ``e_1`` and ``y`` in ``span(e_1, e_2)`` (the register's axis-aligned placement)."""
    x, y = np.zeros(d), np.zeros(d)
    x[0] = nx
    y[0] = ny * math.cos(angle)
    if d > 1:
        y[1] = ny * math.sin(angle)
    return x, y


def _placed_pair(ctx: CellContext, table: dict) -> tuple[np.ndarray, np.ndarray]:
    if ctx.params.get("placement") == "axis":
        return _axis_pair(*table[ctx.params["pair"]], ctx.params["d"])
    return _named_pair(table, ctx)


def _row_laws(ctx: CellContext, m: int, rows: list[int]) -> Evidence:
    """KS tests of each listed row's direction coordinate (``c_d (1-t²)^{(d-3)/2}``) and chi(d) norm."""
    d = ctx.params["d"]
    sampler = ctx.impl("orthogonal_projection", orthogonal_projection)
    frames = np.asarray(sampler(m, d, rng=ctx.rng, size=ctx.replicates), dtype=np.float64)
    norms = np.linalg.norm(frames, axis=-1)
    coordinate = stats.beta((d - 1) / 2, (d - 1) / 2)
    test = ctx.sub_test(2 * len(rows))
    parts = [ks_test(norms[:, i], stats.chi(d).cdf, **test) for i in rows]
    parts += [ks_test(frames[:, i, 0] / norms[:, i], lambda t: coordinate.cdf((np.asarray(t) + 1) / 2), **test)
              for i in rows]
    return combine(parts, extra=dict(rows=rows))


def _orf_estimate_test(ctx: CellContext, estimator: str, x, y, m: int) -> Evidence:
    """Sequential Monte Carlo mean of an ORF estimator against its target (bias relative to |target|, or to
    the Cauchy–Schwarz scale for sgn/ReLU, whose targets can vanish), with the strongest confidence sequence
    theory allows: sgn estimates lie in [-1, 1] (betting); the others get a variance bound from
    :mod:`rfkit.theory` (Catoni). ReLU: the ORF rows share the N(0, I_d) marginal, so by Cauchy–Schwarz the
    variance of the mean of m terms is at most one term's variance (``theory.generalized.term_variance``);
    SMREG: the exact ORF MSE (``theory.smreg.smreg_mse(orthogonal=True)``); the softmax estimators: the exact
    R-ORF MSE (``theory.softmax.orthogonal_mse``)."""
    d = x.size
    if estimator in GENERALIZED:
        f = GENERALIZED[estimator]

        def draw(rng, n):
            return np.concatenate([_generalized_estimates(f, x, y, _projections(ctx, "orthogonal", c, m, d, rng), c)
                                   for c in chunks(n, _chunk(m, d))])

        target = _angular_kernel(x, y) if estimator == "sgn" else _relu_kernel(x, y)
        if estimator == "sgn":
            return ctx.mean(draw, target, scale=1.0, bounds=(-1.0, 1.0))
        norm_x, norm_y = float(np.linalg.norm(x)), float(np.linalg.norm(y))
        sd = math.sqrt(generalized_theory.term_variance("relu", norm_x, norm_y, _angle_between(x, y)))
        return ctx.mean(draw, target, scale=norm_x * norm_y / 2, sd=sd)
    if estimator == "smreg":
        target = smreg_theory.smreg(x, y)
        s = float((x + y) @ (x + y))
        sd = math.sqrt(smreg_theory.smreg_mse(d, s, m, orthogonal=True, log_lam=-float(x @ x + y @ y) / 2))
        return ctx.mean(lambda rng, n: _kernel_draws(ctx, "positive", x, y, m, "orthogonal_sqrt_d", n, rng), target,
                        scale=target, sd=sd)
    target = math.exp(float(x @ y))
    return ctx.mean(lambda rng, n: _kernel_draws(ctx, estimator, x, y, m, "orthogonal", n, rng), target,
                    scale=target, sd=math.sqrt(theory.orthogonal_mse(estimator, x, y, m)))


def _orf_unbiased_cell(ctx: CellContext) -> Evidence:
    d, estimator = ctx.params["d"], ctx.params["estimator"]
    m = M_RULES[ctx.params["m_rule"]](d)
    if estimator == "law":
        return _row_laws(ctx, m, sorted({0, m // 2, m - 1}))
    x, y = _placed_pair(ctx, ORF_PAIRS)
    return _orf_estimate_test(ctx, estimator, x, y, m)


def _orf_pair_ok(p: dict) -> bool:
    """Row laws once per (d, m) (they do not depend on inputs); trig only where ‖x-y‖² <= 1.5."""
    if p["estimator"] == "law":
        return p["pair"] == next(iter(ORF_PAIRS)) and p.get("placement", "random") == "random"
    return p["estimator"] != "trig" or _pair_spread(ORF_PAIRS, p["pair"], "trig") <= MC_CAP_UNBIASED["trig"]


def _orf_unbiased_domain(p: dict, variant: str) -> bool:
    return _m_rule_ok(M_RULES, p["m_rule"], p["d"], upper=p["d"]) and _orf_pair_ok(p)


# Budget: quick ~3 s (heavy): 7 estimators × 2 placements × (d, m), a Haar QR per replicate.
ORF_UNBIASED = Claim(
    id="performer.sec2_4.orf_unbiased", paper="performer", source="Sec 2.4; B.2; F.4",
    statement="For isotropic D and m <= d the orthogonal samples each have marginal law D, and every estimator of "
              "the form Eq 5 stays unbiased when iid samples are replaced by ORFs.",
    kind="expectation",
    hypotheses="isotropic D (N(0, I_d): R-ORF with chi norms; Unif(√d S^{d-1}): √d norms), m <= d (G_m^<=). "
               "(i) per-row KS tests of the direction coordinate and the chi(d) norm; (ii) Monte Carlo means of "
               "SM^ort+, trig-ORF, hyp-ORF (exact sd from the R-ORF MSE), SMREG^ort+ (target Λ ₀F₁(; d/2; ds/4)) "
               "and Eq 5 with f = sgn (angular kernel 1 - 2θ/π) and ReLU (arc-cosine kernel), random and "
               "axis-aligned placements of I2 pairs with ‖x+y‖² <= 0.75 (trig: ‖x-y‖² <= 1.5)",
    tolerance=0.05, units="relative bias (sgn, ReLU: relative to √(E f(ωᵀx)² E f(ωᵀy)²)) or KS distance (laws)",
    cell=_orf_unbiased_cell,
    grid={"smoke": dict(estimator=list(ORF_ESTIMATORS), d=[4], m_rule=["d"], pair=["small"], placement=["random"]),
          "quick": dict(estimator=list(ORF_ESTIMATORS), d=[2, 3, 8], m_rule=["2", "d"], pair=["small"],
                        placement=["random", "axis"]),
          "full": dict(estimator=list(ORF_ESTIMATORS), d=[2, 3, 4, 8, 16, 64], m_rule=list(M_RULES),
                       pair=list(ORF_PAIRS), placement=["random", "axis"])},
    replicates={"smoke": 8_000, "quick": 20_000, "full": 200_000},
    where=_orf_unbiased_domain, roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection",),
    plot_x="estimator",
    notes="sgn/ReLU features and the SMREG target are private helpers of this module (shared implementations "
          "live in another module; swap at merge).",
)


def _block_orf_cell(ctx: CellContext) -> Evidence:
    d, estimator = ctx.params["d"], ctx.params["estimator"]
    m = BLOCK_RULES[ctx.params["m_rule"]](d)
    if estimator == "law":  # rows in the first, second and last block
        return _row_laws(ctx, m, sorted({0, d, m - 1}))
    x, y = _named_pair(ORF_PAIRS, ctx)
    ev = _orf_estimate_test(ctx, estimator, x, y, m)
    ratio = theory.orthogonal_mse(estimator, x, y, m) / (theory.term_variance(estimator, x, y) / m)
    return Evidence(**{**ev.__dict__, "extra": dict(ev.extra, mse_ratio_ort_over_iid=ratio, m=m)})


BLOCK_ORF = Claim(
    id="performer.b2.block_orf", paper="performer", source="B.2, introduction",
    statement="When m > d, ORFs can be used inside each d×d block of W (independent blocks), and the estimators "
              "stay unbiased with the same marginals.",
    kind="expectation",
    hypotheses="N(0, I_d) marginals (chi norms), m > d: m in {d+1, 2d, 2d+1, 4d, 16d}; I2 pairs with "
               "‖x+y‖² <= 0.75 (trig: ‖x-y‖² <= 1.5); per-row KS tests in the first, second and last block; the "
               "theory's MSE ratio ORF/iid is reported",
    tolerance=0.05, units="relative bias or KS distance (row laws)",
    cell=_block_orf_cell,
    grid={"smoke": dict(estimator=["positive", "trig", "law"], d=[2], m_rule=["2d+1"], pair=["small"]),
          "quick": dict(estimator=["positive", "trig", "hyperbolic", "law"], d=[2, 4], m_rule=["d+1", "2d", "4d"],
                        pair=["obtuse"]),
          "full": dict(estimator=["positive", "trig", "hyperbolic", "law"], d=[2, 4, 16, 64],
                       m_rule=list(BLOCK_RULES), pair=list(ORF_PAIRS))},
    replicates={"smoke": 8_000, "quick": 20_000, "full": 200_000},
    where=lambda p, v: _orf_pair_ok(p),
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection",), plot_x="m_rule",
)

# ================================================================ derived: R-ORF MSE closed forms

#: Pairs for the ORF MSE checks, by spread: s = ‖x+y‖² (positive, hyperbolic) or t = ‖x-y‖² (trig).
ORF_MSE_PAIRS = {"s0.25": (0.25, 0.25, 0.0), "s0.5": (0.3535, 0.3535, 0.0), "s1": (0.5, 0.5, 0.0),
                 "s2.5": (0.79, 0.79, 0.0),
                 "t1": (0.5, 0.5, PI), "t4": (1.0, 1.0, PI), "t16": (2.0, 2.0, PI)}
#: Cap on ‖x+y‖² of the Monte Carlo MSE tests with ORF (sequential; exact sd of the ORF squared error from theory).
MC_CAP_ORF = 0.5


def _orf_mse_cell(kind: str, rules: dict):
    def cell(ctx: CellContext) -> Evidence:
        d = ctx.params["d"]
        m = rules[ctx.params["m_rule"]](d)
        if ctx.params["pair"] == "taylor":  # e^s - ₁F₁(d; d/2; s/2) = s²/(2(d+2)) + O(s³)
            s = 1e-3
            x, y = _axis_pair(math.sqrt(s) / 2, math.sqrt(s) / 2, 0.0, d)
            gap = -theory.orthogonal_pair_covariance("positive", x, y) / math.exp(-(x @ x + y @ y))
            return exact_test(_relative_error(gap, s * s / (2 * (d + 2))), 0.0, tolerance=ctx.tolerance,
                              extra=dict(s=s))
        x, y = _named_pair(ORF_MSE_PAIRS, ctx)
        pred = theory.orthogonal_mse(kind, x, y, m)
        # positive, hyperbolic: the exact sd of one ORF squared error (theory's fourth moment of the R-ORF
        # estimator, Humbert Φ₂ moments of Haar-frame rows) -> Catoni sequence, non-asymptotic (exp features
        # are heavy-tailed: an asymptotic cell is flagged by the tail-index check). trig: bounded terms,
        # sequential asymptotic.
        sd = theory.orthogonal_squared_error_moments(kind, x, y, m)["sd"] if kind != "trig" else None
        return ctx.mean(lambda rng, n: _squared_errors(ctx, kind, x, y, m, "orthogonal", n, rng), pred, scale=pred,
                        sd=sd, extra=dict(m=m, mse_iid=theory.term_variance(kind, x, y) / m))
    return cell


def _orf_mse_domain(kind: str, rules: dict, upper: bool):
    def where(p: dict, variant: str) -> bool:
        if not _m_rule_ok(rules, p["m_rule"], p["d"], upper=p["d"] if upper else None) or (upper and p["d"] < 2):
            return False
        if p["pair"] == "taylor":  # independent of m: once per d
            return kind == "positive" and p["m_rule"] == "d"
        spread = _pair_spread(ORF_MSE_PAIRS, p["pair"], kind)
        trig_pair = p["pair"].startswith("t")
        return spread > 0 and (trig_pair if kind == "trig" else (not trig_pair and spread <= MC_CAP_ORF))
    return where


_ORF_MSE_TEXT = {
    "positive": ("performer.derived.orf_pos_mse",
                 "For an orthogonal pair E[e^{ω_1ᵀz} e^{ω_2ᵀz}] = ₁F₁(d; d/2; s/2), hence MSE(SM^ort+_m) = "
                 "MSE(SM⁺_m) + ((m-1)/m) Λ² [₁F₁(d; d/2; s/2) - e^s]; e^s - ₁F₁(d; d/2; s/2) = s²/(2(d+2)) + O(s³)."),
    "hyperbolic": ("performer.derived.orf_hyp_mse",
                   "E[cosh(ω_1ᵀz) cosh(ω_2ᵀz)] = ₁F₁(d; d/2; s/2) for an orthogonal pair, hence MSE(hyp+, ORF) = "
                   "Λ² (e^s - 1)²/(2m) + ((m-1)/m) Λ² [₁F₁(d; d/2; s/2) - e^s]."),
    "trig": ("performer.derived.orf_trig_mse",
             "Cov(cos ω_1ᵀΔ, cos ω_2ᵀΔ) = ₁F₁(d; d/2; -t/2) - e^{-t} for an orthogonal pair, hence MSE(trig, ORF) "
             "= e^{‖x‖²+‖y‖²} [(1 - e^{-t})²/(2m) + ((m-1)/m)(₁F₁(d; d/2; -t/2) - e^{-t})]."),
}
_ORF_MSE_PAIRS_BY_KIND = {"positive": ["s0.25", "s0.5", "taylor"], "hyperbolic": ["s0.25", "s0.5"],
                          "trig": ["t1", "t4", "t16"]}


def _orf_mse_claim(kind: str) -> Claim:
    claim_id, statement = _ORF_MSE_TEXT[kind]
    spread = "‖x-y‖² in {1, 4, 16}" if kind == "trig" else f"‖x+y‖² <= {MC_CAP_ORF}"
    return Claim(
        id=claim_id, paper="performer", source="register: derived predictions (Performer Theorem 2, F.4)",
        statement=statement, kind="moment",
        hypotheses="Gaussian marginals via a Haar frame plus independent chi(d) norms (sign-corrected sampler), "
                   f"m <= d (m in {{2, d}}); sequential Monte Carlo MSE (exact sd of a squared error from theory "
                   f"for exp features) on pairs with {spread}"
                   + ("; the Taylor coefficient at s = 1e-3 exactly" if kind == "positive" else ""),
        tolerance=0.1, units="relative MSE error",
        cell=_orf_mse_cell(kind, M_RULES),
        grid={"smoke": dict(d=[4], m_rule=["d"], pair=_ORF_MSE_PAIRS_BY_KIND[kind][:1] + (
                  ["taylor"] if kind == "positive" else [])),
              "quick": dict(d=[2, 4, 8], m_rule=["2", "d"], pair=_ORF_MSE_PAIRS_BY_KIND[kind][:1] + (
                  ["taylor"] if kind == "positive" else ["t16"] if kind == "trig" else [])),
              "full": dict(d=[2, 4, 8, 16], m_rule=["2", "d"], pair=_ORF_MSE_PAIRS_BY_KIND[kind])},
        replicates={"smoke": 40_000, "quick": 60_000, "full": 1_000_000},
        where=_orf_mse_domain(kind, M_RULES, upper=True),
        roles=(f"feature_map.{kind}", "orthogonal_projection"), plot_x="pair",
    )


ORF_POS_MSE = _orf_mse_claim("positive")
ORF_HYP_MSE = _orf_mse_claim("hyperbolic")
ORF_TRIG_MSE = _orf_mse_claim("trig")


def _block_mse_cell(ctx: CellContext) -> Evidence:
    return _orf_mse_cell(ctx.params["kind"], BLOCK_RULES)(ctx)


BLOCK_ORF_MSE = Claim(
    id="performer.derived.block_orf_mse", paper="performer", source="register: derived predictions (B.2 blocks)",
    statement="For independent orthogonal blocks of sizes b_1..b_B (Σb = m) and any of the three estimators, "
              "MSE = MSE_iid + (Σ_b b(b-1)/m²) Cov_pair; with m = k·d full blocks the factor is (d-1)/m.",
    kind="moment",
    hypotheses="R-ORF blocks (chi norms), m in {d+1, 2d, 4d}; sequential Monte Carlo MSE (exact sd of a squared "
               "error from theory for exp features) on pairs with "
               f"‖x+y‖² <= {MC_CAP_ORF} (positive, hyperbolic) or ‖x-y‖² in {{1, 4, 16}} (trig)",
    tolerance=0.1, units="relative MSE error",
    cell=_block_mse_cell,
    grid={"smoke": dict(kind=list(KINDS), d=[2], m_rule=["2d+1"], pair=["s0.25", "t4"]),
          "quick": dict(kind=list(KINDS), d=[2, 4], m_rule=["d+1", "4d"], pair=["s0.25", "t4"]),
          "full": dict(kind=list(KINDS), d=[2, 4, 8, 16], m_rule=["d+1", "2d", "4d"],
                       pair=["s0.25", "s0.5", "t1", "t4", "t16"])},
    replicates={"smoke": 20_000, "quick": 40_000, "full": 1_000_000},
    where=lambda p, v: _orf_mse_domain(p["kind"], BLOCK_RULES, upper=False)(p, v) and p["pair"] != "taylor",
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection",), plot_x="m_rule",
)

# ================================================= attention matrix and normalised output (Abstract, Sec 5)

#: Input generators for attention-level claims: I1 (iid N(0, c²) entries, scaled by d^{-1/4} inside
#: attention) and I3 (rows of scaled norm ρ with random directions).
ATTENTION_INPUTS = {"I1(c=0.25)": ("I1", 0.25), "I1(c=0.5)": ("I1", 0.5), "I1(c=1)": ("I1", 1.0),
                    "I3(rho=0.5)": ("I3", 0.5)}
#: Entries tested per cell at most (a uniformly random subset beyond it; all entries of small L).
MAX_ENTRIES = 64


def _attention_rows(ctx: CellContext, length: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Scaled queries and keys ``x_i = q_i/d^{1/4}``, ``y_j = k_j/d^{1/4}`` of shape ``(L, d)``."""
    generator, size = ATTENTION_INPUTS[ctx.params["inputs"]]
    if generator == "I1":
        q, k = ctx.rng.normal(0.0, size, size=(2, length, d))
        return q / d**0.25, k / d**0.25
    rows = ctx.rng.standard_normal((2, length, d))
    rows *= size / np.linalg.norm(rows, axis=-1, keepdims=True)
    return rows[0], rows[1]


def _gram_draws(ctx: CellContext, kind: str, xs, ys, m: int, projection: str, n: int) -> np.ndarray:
    """``(n, N, M)`` estimated attention matrices ``Â = Q'K'ᵀ`` (``projection``: iid, orthogonal = R-ORF,
    hadamard = H-ORF, givens = G-ORF)."""
    fmap, d = _feature_map(ctx, kind), xs.shape[1]
    size = max(1, 4_000_000 // (m * (d + 2 * (xs.shape[0] + ys.shape[0]))))  # projections + (2m-wide) features
    if projection in STRUCTURED:
        return np.concatenate([gram_estimates(fmap, xs, ys, _structured_rows(ctx, projection, c, m, d), c)
                               for c in chunks(n, size)])
    return np.concatenate([gram_estimates(fmap, xs, ys, _projections(ctx, projection, c, m, d), c)
                           for c in chunks(n, size)])


#: The structured samplers of B.2(2), as in performer.b2.hg_orf_bias (default sizes, chi norms).
STRUCTURED = ("hadamard", "givens")


class _ReplicateRows:
    """``n`` replicates of ``m`` rows from one structured operator of ``n`` runs of whole independent blocks:
    replicate ``r`` owns the first ``m`` rows of run ``r`` (the operator protocol of
    :func:`rfkit.estimators.features.project`: ``apply``, ``m``, ``d``; ``shape`` for the harness)."""

    def __init__(self, op, n: int, m: int):
        self.op, self.n, self.run, self.rows = op, n, op.m // n, m
        self.m, self.d = n * m, op.d
        self.shape = (n * m, op.d)

    def apply(self, x, *, dtype=np.float64) -> np.ndarray:
        proj = self.op.apply(x, dtype=dtype)
        lead = proj.shape[:-1]
        return proj.reshape(*lead, self.n, self.run)[..., : self.rows].reshape(*lead, self.m)


def _structured_rows(ctx: CellContext, projection: str, n: int, m: int, d: int) -> _ReplicateRows:
    """``n`` independent H-ORF (``k = 3`` HD factors) or G-ORF (``K = ⌈d log₂ d⌉`` rotations) projections of ``m``
    rows, chi norms: ``⌈m/b⌉`` whole blocks of ``b`` rows each (``b = d``, H-ORF: the padded ``2^⌈log₂ d⌉``)."""
    if projection == "hadamard":
        block = 1 << max(d - 1, 0).bit_length()
        op = ctx.impl("hadamard_projection", hadamard_projection)(n * -(-m // block) * block, d, rng=ctx.rng, k=3,
                                                                  norms="chi")
    else:
        op = ctx.impl("givens_projection", givens_projection)(n * -(-m // d) * d, d, rng=ctx.rng, norms="chi")
    return _ReplicateRows(op, n, m)


def _entry_variances(kind: str, xs, ys, m: int, projection: str) -> np.ndarray:
    """Exact ``Var Â_ij`` (iid: diagonal of the kernel covariance; R-ORF: the block MSE)."""
    if projection == "iid":
        return np.stack([np.diag(theory.kernel_covariance(kind, x, ys, m)) for x in xs])
    return np.array([[theory.orthogonal_mse(kind, x, y, m) for y in ys] for x in xs])


def _entrywise_unbiased(ctx: CellContext, kind: str, projection: str, test: dict | None = None) -> Evidence:
    """``E Â_ij = A_ij`` for every tested entry (Bonferroni over entries). Entries whose Monte Carlo
    resolution would exceed half the tolerance (huge ``‖x_i + y_j‖²``) are left to the exact parts of the
    per-pair claims and counted in ``extra``.

    H/G-ORF (``projection`` in :data:`STRUCTURED`): the claim is a *small* bias, ``|bias| <= HG_SMALL_BIAS·A_ij``;
    effects are reported in units of the claim's tolerance (scale ``A_ij·HG_SMALL_BIAS/tolerance``), with
    ``(tolerance/HG_SMALL_BIAS)²`` times the replicates and an asymptotic test (no exact variance for these
    samplers; the R-ORF variance sizes the Monte Carlo domain)."""
    test = test or ctx.test
    length, d, m = ctx.params["L"], ctx.params["d"], ctx.params["m"]
    xs, ys = _attention_rows(ctx, length, d)
    exact = softmax_kernel(xs, ys)
    structured = projection in STRUCTURED
    sd = np.sqrt(_entry_variances(kind, xs, ys, m, "orthogonal" if structured else projection))
    relative = HG_SMALL_BIAS if structured else test["tolerance"]
    replicates = ctx.replicates * (math.ceil((test["tolerance"] / relative) ** 2) if structured else 1)
    rel_sd = sd / exact
    feasible = rel_sd <= relative / 2 * math.sqrt(replicates) / 6
    entries = np.argwhere(feasible)
    if len(entries) > MAX_ENTRIES:
        entries = entries[ctx.rng.choice(len(entries), MAX_ENTRIES, replace=False)]
    if len(entries) == 0:
        return Evidence(math.nan, 0.0, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, 0, "entrywise mean",
                        ("no entry inside the Monte Carlo domain",))
    draws = _gram_draws(ctx, kind, xs, ys, m, projection, replicates)
    sub = dict(test, alpha=test["alpha"] / len(entries))
    units = test["tolerance"] / relative
    parts = [mean_test(draws[:, i, j], exact[i, j], scale=exact[i, j] / units,
                       **({} if structured else dict(sd=float(sd[i, j]))), **sub) for i, j in entries]
    return combine(parts, extra=dict(entries=len(entries), outside_mc_domain=int((~feasible).sum()),
                                     relative_tolerance=relative,
                                     max_relative_bias=float(max(abs(draws[:, i, j].mean() / exact[i, j] - 1)
                                                                 for i, j in entries))))


#: Projection names of the statement and the samplers that draw them.
MATRIX_PROJECTIONS = {"iid": "iid", "R-ORF": "orthogonal", "H-ORF": "hadamard", "G-ORF": "givens"}
#: What "a small bias" of H/G-ORF means here: at most 2% of A_ij, performer.b2.hg_orf_bias's tolerance.
HG_SMALL_BIAS = 0.02


def _unbiased_matrix_cell(ctx: CellContext) -> Evidence:
    return _entrywise_unbiased(ctx, ctx.params["kind"], MATRIX_PROJECTIONS[ctx.params["projection"]])


# Budget: quick ~3-4 s (heavy): up to 64 entrywise tests per cell, R-ORF blocks sampled per replicate; H/G cells
# draw (0.05/0.02)² = 6.25 -> 7 times the replicates.
UNBIASED_ATTENTION_MATRIX = Claim(
    id="performer.abstract.unbiased_attention_matrix", source="Abstract; Sec 1; Sec 2.3; B.2",
    statement="Â = Q'K'ᵀ estimates A = exp(QKᵀ/√d) without bias (iid, R-ORF) or with a small bias (H/G-ORF).",
    kind="expectation",
    domain=dict(
        projection=Choice("iid, R-ORF (without bias); H/G-ORF (with a small bias)", tuple(MATRIX_PROJECTIONS)),
        kind=Choice("Q', K': the softmax estimators of this paper (trig, positive, hyperbolic)", tuple(KINDS))),
    tolerance=0.05,
    units="relative bias of an entry (iid, R-ORF); H/G-ORF: relative bias in units of 0.02/0.05, i.e. 'small "
          "bias' = |E Â_ij - A_ij| <= 0.02 A_ij (performer.b2.hg_orf_bias's tolerance)",
    cell=_unbiased_matrix_cell,
    grid=tiers(dict(kind=list(KINDS), projection=list(MATRIX_PROJECTIONS), d=[4, 16], m=[16], L=[8],
                    inputs=["I1(c=0.25)"]),
               smoke=dict(d=[4], L=[4], inputs=["I3(rho=0.5)"]),
               full=dict(d=[4, 16, 64], m=[4, 16, 256], L=[8, 64], inputs=["I1(c=0.25)", "I3(rho=0.5)"])),
    replicates=tiers(8_000, smoke=4_000, full=100_000),
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection", "hadamard_projection",
                                                       "givens_projection"), plot_x="kind",
    notes="Extra grid axes d, m, L and inputs are the register's sweep (I1 with c = 0.25, I3 with ρ = 0.5); every "
          f"entry (at most {MAX_ENTRIES} random ones) whose Monte Carlo resolution is below half the tolerance "
          "(exact per-entry sd; R-ORF's for H/G) is tested, the rest is left to the exact parts of the per-pair "
          "claims (sec2_3.trig_unbiased, lemma1.prf_estimators). H/G-ORF as in performer.b2.hg_orf_bias: H-ORF "
          "with k = 3 HD factors, G-ORF with K = ⌈d log₂ d⌉ Givens rotations, chi norms, whole independent blocks "
          "per replicate (d padded to a power of 2 for H-ORF). 'Small bias' is b2.hg_orf_bias's criterion, a "
          "relative bias of at most 0.02; that claim tests it at d >= 64 (its d → ∞ limit), this statement names no "
          "d, so it is tested at every d of the grid. H/G cells are asymptotic (no exact variance for these "
          "samplers) and draw (0.05/0.02)² -> 7 times the replicates.",
)


def _attention_outputs(ctx: CellContext, kind: str, xs, ys, v, m: int, projection: str, n: int) -> np.ndarray:
    """``(n, L, d_v)`` normalised outputs ``D̂⁻¹ÂV`` (bidirectional), one per feature draw."""
    gram = _gram_draws(ctx, kind, xs, ys, m, projection, n)
    return (gram @ v) / gram.sum(axis=-1, keepdims=True)


def _unbiased_output_cell(ctx: CellContext) -> Evidence:
    kind, projection = ctx.params["kind"], ctx.params["projection"]
    if ctx.variant == "matrix":
        return _entrywise_unbiased(ctx, kind, projection)
    length, d, m = ctx.params["L"], ctx.params["d"], ctx.params["m"]
    xs, ys = _attention_rows(ctx, length, d)
    v = ctx.rng.standard_normal((length, d))
    exact = softmax_attention(xs * d**0.25, ys * d**0.25, v)
    out = _attention_outputs(ctx, kind, xs, ys, v, m, projection, ctx.replicates)
    entries = [(i, a) for i in range(length) for a in range(d)]
    if len(entries) > MAX_ENTRIES:
        entries = [entries[k] for k in ctx.rng.choice(len(entries), MAX_ENTRIES, replace=False)]
    sub = ctx.sub_test(len(entries))
    parts = [mean_test(out[:, i, a], exact[i, a], **sub) for i, a in entries]
    return combine(parts, extra=dict(entries=len(entries)))


UNBIASED_OUTPUT = Claim(
    id="performer.sec5.unbiased_output", paper="performer", source="Sec 5; Sec 2 opening; Abstract",
    statement="FAVOR+ gives an unbiased estimate of softmax attention.",
    kind="expectation",
    hypotheses="positive softmax estimators (SM⁺, hyp+), iid or R-ORF; I1 inputs (c in {0.5, 1}), "
               "L in {4, 8, 32}, d in {2, 4, 16}, m in {4, 16, 64, 256}; values N(0, 1), d_v = d; at most "
               f"{MAX_ENTRIES} random entries per cell; (a) entries inside the Monte Carlo domain as in "
               "abstract.unbiased_attention_matrix (c = 0.5 only: at c = 1 no entry is)",
    tolerance=0.02, units="(a) relative bias of Â entries; (b) bias of output entries in units of the values' sd",
    cell=_unbiased_output_cell,
    variants=("matrix", "output"),
    variant_notes={"matrix": "(a) the unnormalised matrix Â is unbiased entrywise",
                   "output": "(b) the normalised output D̂⁻¹ÂV is unbiased for D⁻¹AV"},
    grid={"smoke": dict(kind=["positive"], projection=["iid"], L=[4], d=[2], m=[4], inputs=["I1(c=0.5)"]),
          "quick": dict(kind=["positive"], projection=["iid", "orthogonal"], L=[4], d=[2], m=[4, 16],
                        inputs=["I1(c=0.5)", "I1(c=1)"]),
          "full": dict(kind=["positive", "hyperbolic"], projection=["iid", "orthogonal"], L=[4, 8, 32],
                       d=[2, 4, 16], m=[4, 16, 64, 256], inputs=["I1(c=0.5)", "I1(c=1)"])},
    replicates={"smoke": 8_000, "quick": 20_000, "full": 200_000},
    where=lambda p, v: v == "output" or p["inputs"] == "I1(c=0.5)",  # (a): c = 1 is outside the MC domain
    roles=("feature_map.positive", "feature_map.hyperbolic", "orthogonal_projection"), plot_x="m",
)


def _delta_method_cell(ctx: CellContext) -> Evidence:
    """Monte Carlo bias (along the predicted bias direction) and total MSE of ``D̂⁻¹ÂV`` against the delta method."""
    kind, length, d, m = ctx.params["kind"], ctx.params["L"], ctx.params["d"], ctx.params["m"]
    xs, ys = _attention_rows(ctx, length, d)
    v = ctx.rng.standard_normal((length, d))
    exact = softmax_attention(xs * d**0.25, ys * d**0.25, v)
    bias, mse = theory.output_delta_method(kind, xs, ys, v, m)
    direction = bias / np.linalg.norm(bias)
    along, total = [], []
    for n in chunks(ctx.replicates, max(1, 400_000 // (m * length))):
        err = _attention_outputs(ctx, kind, xs, ys, v, m, "iid", n) - exact
        along.append(np.einsum("nia,ia->n", err, direction))
        total.append(np.einsum("nia,nia->n", err, err))
    sub = ctx.sub_test(2)
    norm_bias, total_mse = float(np.linalg.norm(bias)), float(mse.sum())
    return combine([mean_test(np.concatenate(along), norm_bias, scale=norm_bias, **sub),
                    mean_test(np.concatenate(total), total_mse, scale=total_mse, **sub)],
                   extra=dict(m_times_bias_norm=m * norm_bias, m_times_total_mse=m * total_mse))


OUTPUT_DELTA_METHOD = Claim(
    id="performer.derived.output_delta_method", paper="performer", source="register: derived predictions",
    statement="For unbiased Â, the normalised output o_i = N_i/D_i has bias (1/D_i²) Σ_jk Σ_i[j,k](o_i - v_j) and "
              "per-coordinate MSE (1/D_i²) Σ_jk Σ_i[j,k](v_j - o_i)(v_k - o_i) up to higher order, with "
              "Σ_i[j,k] = (1/m)[Λ_ij Λ_ik exp(‖2x_i + y_j + y_k‖²/2) - SM_ij SM_ik] for iid positive features "
              "(so m·bias has a finite limit).",
    kind="moment",
    hypotheses="iid positive features; L <= 8, d <= 4, rows of small scaled norm (I3, ρ = 0.5); "
               "m in {32, 128, 512}; the bias is tested along its predicted direction, the MSE summed over "
               "entries; the neglected terms are O(1/m²)",
    tolerance=0.2, units="relative error of the leading-order prediction",
    cell=_delta_method_cell,
    grid={"smoke": dict(kind=["positive"], L=[4], d=[2], m=[32], inputs=["I3(rho=0.5)"]),
          "quick": dict(kind=["positive"], L=[4], d=[2, 4], m=[32], inputs=["I3(rho=0.5)"]),
          "full": dict(kind=["positive"], L=[4, 8], d=[2, 4], m=[32, 128, 512], inputs=["I3(rho=0.5)"])},
    replicates={"smoke": 40_000, "quick": 100_000, "full": 1_000_000},
    roles=("feature_map.positive",), plot_x="m",
)

# ================================================================================ Fig 4

#: Sizes per tier: input samples × feature draws per input (>= 64 replicates for batch means). L = 4096 (the
#: paper's) costs ~0.3 s per replicate pair; 1024 replicates per cell make it the reproduction's job
#: (``rfkit reproduce performer.fig4 --option L=4096``), the claim uses L <= 1024.
#: Fig 4 sequence length per tier.
FIG4_SIZES = {"smoke": dict(L=64), "quick": dict(L=64), "full": dict(L=1024)}


def _fig4_pairs(ctx: CellContext, worse: dict, better: dict, coupled: bool, rng: np.random.Generator,
                n: int) -> tuple[np.ndarray, np.ndarray]:
    """Output MSEs of the two estimators for ``n`` iid replicates: each draws its own inputs (Q, K, V) and
    one feature draw from ``rng``, so the replicates of a sequential cell are independent.

    ``worse``/``better``: keyword sets for :func:`fig4_output_mse` (feature, projection, m); the claim says
    ``better`` has the lower output MSE. ``coupled``: the iid and R-ORF projections of a replicate come from
    one Gaussian matrix (:func:`coupled_projections`: each has its exact law, the pair is strongly
    correlated); otherwise both estimators share the iid rows they have in common (common random numbers).
    """
    length = FIG4_SIZES[ctx.tier]["L"]
    d, c = ctx.params["d"], ctx.params["c"]
    pairs = np.empty((n, 2))
    for i in range(n):
        q, k, v = fig4_inputs(length, d, c, rng)
        exact = softmax_attention(q, k, v)
        omegas = _fig4_omegas(ctx, worse, better, coupled, d, rng)
        pairs[i] = [fig4_output_mse(q, k, v, rng=rng, exact=exact, omega=omega,
                                    feature_map=_feature_map(ctx, est["feature"]), **est)
                    for est, omega in zip((worse, better), omegas, strict=True)]
    return pairs[:, 0], pairs[:, 1]


def _fig4_omegas(ctx: CellContext, worse: dict, better: dict, coupled: bool, d: int, rng: np.random.Generator):
    if coupled:
        iid, ort = coupled_projections(worse["m"], d, rng)
        return (iid, ort) if worse["projection"] == "iid" else (ort, iid)
    rows = max(worse["m"], better["m"])
    shared = _projections(ctx, worse["projection"], 1, rows, d, rng)
    return shared[: worse["m"]], shared[: better["m"]]


def _fig4_test(ctx: CellContext, statistic: str, worse: dict, better: dict, coupled: bool) -> Evidence:
    """Paired test on ``ctx.replicates`` iid replicates (inputs and features drawn per replicate).
    ``mean``: E[MSE_worse - MSE_better] >= 0 relative to E MSE_worse; ``log``: E log(MSE_worse/MSE_better) >= 0.
    Asymptotic: output MSEs have no variance bound in theory. With trigonometric features the output MSE has
    an infinite mean (:func:`rfkit.theory.softmax.renormalised_output_mean_exists`: the renormaliser has a
    positive density at 0), so a mean reading comparing two trig estimators has no estimand: it is flagged
    from theory without sampling. A fixed sample, not a sequential cell: at the quick tier's sizes no budget
    the tier can afford decides the trig log cells (see :data:`_FIG4_NOTES`), so the claim's reserve is not
    spent on them."""
    if statistic == "mean" and not any(theory.renormalised_output_mean_exists(e["feature"]) for e in (worse, better)):
        reason = ("infinite mean: E MSE = ∞ for both estimators (trig renormalisers D̂_i have a positive density "
                  "at 0, so each output N̂/D̂ has tails P(|ô| > t) ~ c/t; rfkit.theory.softmax."
                  "renormalised_output_mean_exists), so E[MSE_a - MSE_b] does not exist and no budget decides the "
                  "mean reading for trig features; the log reading has finite moments")
        return Evidence(math.nan, 0.0, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, 0,
                        "theory: infinite mean", (reason,), extra=dict(statistic=statistic), validity="exact",
                        assumption="rfkit.theory.softmax.renormalised_output_mean_exists")
    a, b = _fig4_pairs(ctx, worse, better, coupled, ctx.rng, ctx.replicates)
    extra = dict(mean_mse_worse=float(a.mean()), mean_mse_better=float(b.mean()),
                 median_log_ratio=float(np.median(np.log(a / b))))
    if statistic == "log":
        ev = mean_test(np.log(a / b), 0.0, alternative="greater", **ctx.test, extra=extra)
    else:
        ev = mean_test(a - b, 0.0, alternative="greater", scale=float(a.mean()), **ctx.test, extra=extra)
    if any(f.startswith("heavy tails") for f in ev.flags):
        if worse["feature"] != "trig":
            hint = "; deciding it needs more iid pairs (a larger tier)"
        elif statistic == "log":
            hint = ("; log MSE_trig has exponential tails (finite variance, no closed form for it): deciding it "
                    "needs more iid pairs (a larger tier)")
        else:
            hint = ("; E MSE_trig = ∞ (rfkit.theory.softmax.renormalised_output_mean_exists), so the sample mean "
                    "does not settle at any budget")
        ev = replace(ev, flags=tuple(f + hint if f.startswith("heavy tails") else f for f in ev.flags))
    return ev


def _fig4_orf_cell(ctx: CellContext) -> Evidence:
    feature, m = ctx.params["feature"], ctx.params["m"]
    return _fig4_test(ctx, ctx.variant, dict(feature=feature, projection="iid", m=m),
                      dict(feature=feature, projection="orthogonal", m=m), coupled=True)


def _fig4_pos_trig_cell(ctx: CellContext) -> Evidence:
    projection, m = ctx.params["projection"], ctx.params["m"]
    budget, statistic = ctx.variant.split("/")
    m_pos = 2 * m if budget == "same_features" else m
    return _fig4_test(ctx, statistic, dict(feature="trig", projection=projection, m=m),
                      dict(feature="positive", projection=projection, m=m_pos), coupled=False)


_FIG4_STATISTICS = {
    "mean": "lower mean output MSE (the figure's mean ± sd): E[MSE_a - MSE_b] >= 0, relative to E MSE_a",
    "log": "lower error on the figure's log scale (geometric mean): E log(MSE_a/MSE_b) >= 0",
}

_FIG4_HYPOTHESES = ("the Fig 4 setting (R2): Q, K, V with iid N(0, c²) entries (V: N(0, 1)), bidirectional "
                    "renormalised attention with A = exp(QKᵀ/√d), stabiliser 0, one feature draw per replicate, "
                    "R-ORF with chi norms (B.2 blocks for m > d); paired test on iid replicates, each with its own "
                    "inputs and one feature draw (64 pairs a cell at smoke, 512 at quick, 2048 at full). Sizes: "
                    "L = 1024 (full), 64 (quick, smoke); d = 16 (the paper's), "
                    "8 and 64 at full; c in {0.25, 0.5, 1, 2}")

#: Paired iid replicates of a Fig 4 cell (the same number of output MSEs as before: smoke 8×8, quick 32×16,
#: full 32×64 input samples × feature draws, now each pair with its own inputs).
FIG4_REPLICATES = {"smoke": 64, "quick": 512, "full": 2048}
#: What decides the Fig 4 claims (stated in their notes): the log readings need a confidence radius <= 0.05,
#: about (5 sd/0.05)² iid pairs with sd the spread of log(MSE_a/MSE_b): ~1.5e3 pairs for positive features
#: (sd ~0.4), 1e4-1e5 for trig (sd 0.8 at c = 0.5, ~3 at c = 1) at L = 64; at c = 1 the trig log ratio of
#: orf_vs_iid is -0.03 ± 0.07 (2000 pairs, seed 1), so even 1e6 pairs may leave it undecided. Mean readings:
#: the output MSE of trig features has an infinite mean (rfkit.theory.softmax.renormalised_output_mean_exists),
#: so orf_vs_iid's trig mean cells have no estimand and pos_vs_trig's sample means never settle.
_FIG4_NOTES = ("Decided by: log readings: ~(5·sd/0.05)² iid pairs per cell (sd of log(MSE_a/MSE_b): ~0.4 for "
               "positive features, 0.8 (c = 0.5) to 3 (c = 1) for trig features at L = 64), i.e. 1e3-1e5 pairs "
               "against 512 at quick; for trig features at c = 1 the ORF/iid log ratio is -0.03 ± 0.07 (2000 pairs), "
               "so the cell may stay undecided at any feasible budget. Mean readings with trig features: no budget "
               "decides them, since the output MSE of trig features has an infinite mean (its renormaliser has a "
               "positive density at 0: rfkit.theory.softmax.renormalised_output_mean_exists); with two trig "
               "estimators the mean difference does not exist.")

FIG4_ORF_VS_IID = Claim(
    id="performer.fig4.orf_vs_iid", paper="performer", source="Sec 4.2; Fig 4",
    statement="In the Fig 4 setting, orthogonal features give a lower output-approximation MSE than unstructured "
              "(iid) features.",
    kind="reproduction", hypotheses=_FIG4_HYPOTHESES,
    tolerance=0.05, units="(MSE_iid - MSE_ort)/MSE_iid (mean) or log(MSE_iid/MSE_ort) (log); violation: ORF "
                          "worse by more than this",
    cell=_fig4_orf_cell,
    variants=tuple(_FIG4_STATISTICS), variant_notes=_FIG4_STATISTICS,
    grid={"smoke": dict(feature=["positive"], m=[16], d=[16], c=[1.0]),
          "quick": dict(feature=["trig", "positive"], m=[16], d=[16], c=[0.5, 1.0]),
          "full": dict(feature=["trig", "positive"], m=[4, 8, 16, 32, 64, 128, 256, 512], d=[8, 16, 64],
                       c=[0.25, 0.5, 1.0, 2.0])},
    replicates=FIG4_REPLICATES, notes=_FIG4_NOTES,
    roles=("feature_map.trig", "feature_map.positive", "orthogonal_projection"), plot_x="m",
)

FIG4_POS_VS_TRIG = Claim(
    id="performer.fig4.pos_vs_trig", paper="performer", source="Sec 4.2; Fig 4",
    statement="In the Fig 4 setting, positive features give a lower error than trigonometric sin/cos features.",
    kind="reproduction", hypotheses=_FIG4_HYPOTHESES,
    tolerance=0.05, units="(MSE_trig - MSE_pos)/MSE_trig (mean) or log(MSE_trig/MSE_pos) (log); violation: "
                          "positive worse by more than this",
    cell=_fig4_pos_trig_cell,
    variants=tuple(f"{b}/{s}" for b in ("same_m", "same_features") for s in _FIG4_STATISTICS),
    variant_notes={f"{b}/{s}": f"{note}; {_FIG4_STATISTICS[s]}" for b, note in (
        ("same_m", "both use m projections (trig has 2m features, positive m)"),
        ("same_features", "same feature dimension: positive with 2m projections")) for s in _FIG4_STATISTICS},
    grid={"smoke": dict(projection=["iid"], m=[16], d=[16], c=[1.0]),
          "quick": dict(projection=["iid"], m=[16], d=[16], c=[0.5, 1.0]),
          "full": dict(projection=["iid", "orthogonal"], m=[4, 8, 16, 32, 64, 128, 256, 512], d=[8, 16, 64],
                       c=[0.25, 0.5, 1.0, 2.0])},
    replicates=FIG4_REPLICATES, notes=_FIG4_NOTES,
    roles=("feature_map.trig", "feature_map.positive", "orthogonal_projection"), plot_x="m",
)
