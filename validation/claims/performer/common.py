r"""Shared pieces of the performer moment claims (:mod:`.moments`, :mod:`.regimes`, :mod:`.orf`, :mod:`.outputs`).

Register ``../shared/claims/performer.md`` (Sec 2.3-2.4, Lemmas 1-2, Theorem 2, App B.2, F.1-F.2, F.4,
Figs 2 and 4, derived predictions): its sweep grids, the named input pairs, Monte Carlo draws of the
estimators and exact expectations by Gauss-Hermite quadrature.

Method
------
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
* Generalized features (``sgn``, ``ReLU``) are estimated by :func:`_generalized_estimates`; their kernels
  (:func:`_angular_kernel`, :func:`_relu_kernel`) are the register's closed forms.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from rfkit.estimators import (
    FEATURE_MAPS,
    orthogonal_projection,
)
from rfkit.theory import softmax as theory
from rfkit.validation.harness import (
    chunks,
    controlled_pair,
    kernel_estimates,
    replicate_projections,
)
from rfkit.validation.model import CellContext
from rfkit.validation.stats import Evidence, exact_test, required_replicates

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


#: The ``(norms, angles)`` an exact route sweeps: subsets of the register's ``G_norm × G_angle`` (``register``: the
#: whole of it).
SWEEPS = {"coarse": ((0.0, 0.5, 3.0), (0.0, 2 * PI / 3, PI)),
          "medium": ((0.0, 0.25, 1.0, 2.0, 3.0), (0.0, PI / 3, 2 * PI / 3, 0.9 * PI, PI)),
          "register": (G_NORM, G_ANGLE)}
#: The pair axes of a cell: ``‖x‖``, ``‖y‖`` and the angle between ``x`` and ``y``.
PAIR_AXES = ("norm_x", "norm_y", "angle")


def _sweep_axes(sweep: str, table: dict | None = None, names=()) -> dict:
    """Grid lists ``norm_x``, ``norm_y``, ``angle``: the exact route's sweep (a key of :data:`SWEEPS`) as one
    tuple-valued value of each axis (one cell evaluates every pair of its tuples; coverage counts each tuple's
    values), then the scalar values of the named Monte Carlo pairs ``table[name]`` (each route's ``where`` keeps
    its own combinations)."""
    norms, angles = SWEEPS[sweep]
    pairs = [table[n] for n in names]
    return dict(norm_x=[tuple(norms), *sorted({nx for nx, _, _ in pairs})],
                norm_y=[tuple(norms), *sorted({ny for _, ny, _ in pairs})],
                angle=[tuple(angles), *sorted({a for _, _, a in pairs})])


def _is_sweep(p: dict) -> bool:
    """An exact-route cell: its ``norm_x``, ``norm_y``, ``angle`` are the tuples of a sweep (:func:`_sweep_axes`; lists
    once a witness went through JSON)."""
    return all(isinstance(p[a], (tuple, list)) for a in PAIR_AXES)


def _named(table: dict, p: dict) -> str | None:
    """The name of the Monte Carlo pair the cell's scalar ``(norm_x, norm_y, angle)`` is, if any."""
    for name, value in table.items():
        if value == tuple(p[a] for a in PAIR_AXES):
            return name
    return None


def _cell_pair(ctx: CellContext) -> tuple[np.ndarray, np.ndarray]:
    """A Monte Carlo cell's named pair, placed in a random plane of ``R^d`` (input I2)."""
    p = ctx.params
    return controlled_pair(p["norm_x"], p["norm_y"], p["angle"], p["d"], ctx.rng)


def _spread(p: dict, kind: str) -> float:
    """``‖x+y‖²`` (positive, hyperbolic) or ``‖x-y‖²`` (trig) of a Monte Carlo cell's scalar pair."""
    sign = -1.0 if kind == "trig" else 1.0
    return p["norm_x"] ** 2 + p["norm_y"] ** 2 + 2 * sign * p["norm_x"] * p["norm_y"] * math.cos(p["angle"])


def _sweep_pairs(ctx: CellContext, keep=None):
    """Every ``(‖x‖, ‖y‖, angle)`` of an exact-route cell's tuples (those ``keep(nx, ny, angle)`` accepts), with
    ``x, y`` placed in a random plane of ``R^d`` (input I2); ``d = 1`` has the angles 0 and π only."""
    p = ctx.params
    d = p["d"]
    for nx in p["norm_x"]:
        for ny in p["norm_y"]:
            for angle in p["angle"]:
                if d == 1 and angle not in (0.0, PI) or keep is not None and not keep(nx, ny, angle):
                    continue
                x, y = controlled_pair(nx, ny, angle, d, ctx.rng)
                yield (nx, ny, angle), x, y


def _relative_error(value: float, reference: float) -> float:
    """``|value - reference|/|reference|``; 0 when both are 0, ``inf`` when only the reference is."""
    if value == reference:
        return 0.0
    return abs(value - reference) / abs(reference) if reference != 0 else math.inf


def _worst_over_grid(ctx: CellContext, error, keep=None) -> Evidence:
    """Exact route: the largest ``error(x, y)`` over the pairs of the cell's sweep (:func:`_sweep_pairs`) against
    0, with the pair that attains it (``worst_pair``) and the number of pairs in ``extra``; nan is worst."""
    worst, where, n = -math.inf, None, 0
    for point, x, y in _sweep_pairs(ctx, keep):
        err = float(error(x, y))
        err = err if err == err else math.inf
        n += 1
        if err >= worst:
            worst, where = err, point
    return exact_test(worst, 0.0, tolerance=ctx.tolerance, extra=dict(worst_pair=where, pairs=n))


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


def _squared_errors(ctx: CellContext, kind: str, x, y, m: int, projection: str = "iid",
                    n: int | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
    target = math.exp(float(x @ y))
    return (_kernel_draws(ctx, kind, x, y, m, projection, n or ctx.replicates, rng) - target) ** 2


#: Monte Carlo domain of the MSE tests (‖x+y‖² for positive/hyperbolic, ‖x-y‖² for trig): beyond it the
#: squared errors are too skewed for any affordable replicate count (register: "cap ‖x+y‖² and record it").
MC_CAP_MSE = {"trig": 16.0, "positive": 0.3, "hyperbolic": 0.3}


#: Monte Carlo domain of the unbiasedness tests: pairs whose estimate's mean is close to normal.
MC_CAP_UNBIASED = {"trig": 1.5, "positive": 0.85, "hyperbolic": 0.85}


def _axis_pair(nx: float, ny: float, angle: float, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``x`` along ``e_1`` and ``y`` in ``span(e_1, e_2)`` (the register's axis-aligned placement)."""
    x, y = np.zeros(d), np.zeros(d)
    x[0] = nx
    y[0] = ny * math.cos(angle)
    if d > 1:
        y[1] = ny * math.sin(angle)
    return x, y
