r"""``performer.*`` claims on orthogonal random features (Choromanski et al. 2021).

Theorem 2 (Eq 10) and its closed forms for ORF MSEs (register derived predictions, F.4), unbiasedness of
every estimator under R-ORF (Sec 2.4, B.2, F.4), and the B.2 block construction for m > d. Shared grids and
pairs: :mod:`.common`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math

import numpy as np
from scipy import special, stats

from rfkit.estimators import (
    orthogonal_projection,
)
from rfkit.theory import generalized as generalized_theory
from rfkit.theory import smreg as smreg_theory
from rfkit.theory import softmax as theory
from rfkit.validation.claims.performer.common import (
    BLOCK_RULES,
    GENERALIZED,
    KINDS,
    M_RULES,
    MC_CAP_MSE,
    MC_CAP_UNBIASED,
    PI,
    _angle_between,
    _angular_kernel,
    _axis_pair,
    _cell_pair,
    _chunk,
    _feature_map,
    _gauss_hermite_mean,
    _generalized_estimates,
    _is_sweep,
    _kernel_draws,
    _m_rule_ok,
    _named,
    _projections,
    _relative_error,
    _relu_kernel,
    _span_basis,
    _spread,
    _squared_errors,
    _sweep_axes,
    _sweep_pairs,
    _worst_over_grid,
)
from rfkit.validation.domain import Choice, Integers, Range
from rfkit.validation.harness import (
    chunks,
    controlled_pair,
    kernel_estimates,
)
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import Evidence, combine, exact_test, ks_test, sequential_mean

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
    for point, x, y in _sweep_pairs(ctx):
        margin = _thm2_margin(x, y, m)
        if not margin > worst:
            worst, where = margin, point
    blocks = {f"m={k * d}": min(_thm2_margin(x, y, k * d) for _, x, y in _sweep_pairs(ctx)) for k in (2, 4)}
    return margin_evidence(worst, tolerance=ctx.tolerance,
                           extra=dict(m=m, worst_pair=where, block_construction_outside_hypothesis=blocks))


def _thm2_search(ctx: CellContext) -> Evidence:
    """Adversarial search over ``(‖x‖, ‖y‖, angle, d, m/d)`` in ``[0, norm_max]² × [0, π] × {1..d_max} × (0, 1]``
    (``ctx.params``: ``norm_max``, ``d_max``, ``maxiter``)."""
    p = ctx.params

    def margin(point):
        nx, ny, angle, d, frac = point
        d = int(d)
        x, y = controlled_pair(nx, ny, angle if d > 1 else (0.0 if angle < PI / 2 else PI), d, ctx.rng)
        return _thm2_margin(x, y, max(1, min(d, round(frac * d))))
    res = minimize_margin(margin, [(0.0, p["norm_max"]), (0.0, p["norm_max"]), (0.0, PI), (1, p["d_max"]),
                                   (0.0, 1.0)], rng=ctx.rng, restart=ctx.restart or 0,
                          integer=[False, False, False, True, False], maxiter=p["maxiter"])
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(point=res.x.tolist()))


# Budget: quick ~2-3 s: closed forms at 125 pairs per cell (plus the recorded block construction) and 4
# search restarts.
THM2_ORF_MSE = Claim(
    id="performer.thm2.orf_mse_sm", source="Theorem 2, Eq 10 (via Theorem 6 and Remark 1)",
    statement="For any d > 0: MSE(SM^ort+_m(x,y)) <= MSE(SM⁺_m(x,y)) - (2(m-1)/(m(d+2))) (SM(x,y) - "
              "exp(-(‖x‖²+‖y‖²)/2))².",
    kind="inequality",
    domain=dict(
        d=Integers("for any d > 0", 1, math.inf, points=(1, 2), up_to=64,
                   why="the register's largest d; d enters through ₁F₁(d; d/2; s/2) and 2/(d+2) only"),
        m_rule=Choice("m <= d (register hypothesis): m = 1 (no pair: both sides equal), 2 (the first orthogonal "
                      "pair), d (a full frame); the grid adds 3, d/2, d-1 (G_m^≤)", ("1", "2", "d")),
        norm_x=Range("x arbitrary: ‖x‖", 0.0, math.inf, boundaries=(0.0,), up_to=(None, 3.0),
                     why="G_norm's largest norm; both sides depend on x, y through s = ‖x+y‖² and Λ only, and for "
                         "s → ∞ the relative margin behaves like (m-1)·d/(d+2)·e^{-s} > 0"),
        norm_y=Range("y arbitrary: ‖y‖", 0.0, math.inf, boundaries=(0.0,), up_to=(None, 3.0),
                     why="as ‖x‖"),
        angle=Range("x, y arbitrary: the angle between them", 0.0, PI)),
    searched=("norm_x", "norm_y", "angle"),
    tolerance=1e-9, units="margin (bound - MSE_ort) relative to MSE_iid",
    cell=_thm2_cell, search=_thm2_search, universal=True,
    grid=tiers(dict(**_sweep_axes("medium"), d=[1, 2, 3, 8, 64], m_rule=list(M_RULES)),
               smoke=dict(**_sweep_axes("coarse"), d=[1, 2, 4, 64], m_rule=["1", "2", "d"]),
               full=dict(**_sweep_axes("register"), d=list(THM2_DIMENSIONS))),
    restarts=tiers(4, smoke=1, full=30),
    search_params=tiers(dict(norm_max=3.0, d_max=64, maxiter=200)),
    where=lambda p, v: _m_rule_ok(M_RULES, p["m_rule"], p["d"], upper=p["d"]), plot_x="d",
    notes="SM^ort+_m: R-ORF (Haar frame, independent chi(d) norms, rows marginally N(0, I_d)). MSE_ort in closed form "
          "(performer.derived.orf_pos_mse checks it: by quadrature of its definition for s = ‖x+y‖² up to 36, and "
          "the implementation by Monte Carlo where decidable): MSE_iid + ((m-1)/m) Λ² (₁F₁(d; d/2; s/2) - e^s). "
          "Each cell sweeps the grid's G_norm × G_angle subset (its tuple-valued norm_x, norm_y, angle) in a random "
          "plane of R^d; an "
          "adversarial search over (‖x‖, ‖y‖, angle, d, m) covers x, y. The register's Monte Carlo of MSE_iid - "
          "MSE_ort is replaced by the closed forms (exp features' squared errors are too skewed beyond s ~ 0.5). "
          "Block ORF with m in {2d, 4d} (outside the hypothesis) is recorded in each cell's extra.",
)

# =============================================================== Sec 2.4 / B.2: ORFs stay unbiased

#: Every estimator of the form Eq 5 that Sec 2.4 lists (the register's (ii)), and ``law``: the per-row law
#: of the orthogonal samples (the statement's first part, the register's (i)).
ORF_ESTIMATORS = ("positive", "trig", "hyperbolic", "smreg", "sgn", "relu", "law")
#: Isotropic laws D of the rows: direction uniform on S^{d-1} times an independent radius. The sampler's own
#: radial laws (chi: N(0, I_d); √d: Ω_reg, SMREG's law; 1: the unit sphere) and the register's other isotropic law
#: (radius uniform on [0, 2√d], performer.rem1.beautiful_functions), built as F.4 says (the sampler's unit rows
#: times independent radii).
ORF_LAWS = ("gaussian", "sphere", "unit", "uniform_radius")
_SAMPLER_NORMS = {"gaussian": "chi", "sphere": "sqrt_d", "unit": "unit", "uniform_radius": "unit"}
#: The law each estimator's target is defined under (the softmax estimators: N(0, I_d); SMREG: Ω_reg); sgn and
#: ReLU have a closed-form target under every isotropic D (sgn is scale-free; ReLU is 1-homogeneous).
_NATIVE_LAW = {"positive": "gaussian", "trig": "gaussian", "hyperbolic": "gaussian", "smreg": "sphere"}
#: (‖x‖, ‖y‖, angle) of the Monte Carlo route: s = ‖x+y‖², t = ‖x-y‖² are (0.75, 0.25), (0.52, 1.48), (0.27, 3.73);
#: the last only for the positive-type estimators (trig's relative variance 2 sinh²(t/2) is too large there).
ORF_PAIRS = {"small": (0.5, 0.5, PI / 3), "obtuse": (0.6, 0.8, 2 * PI / 3), "cancel": (1.0, 1.0, 5 * PI / 6)}


def _second_radial_moment(law: str, d: int) -> float:
    """``E‖ω‖²`` under ``law``."""
    return {"gaussian": d, "sphere": d, "unit": 1.0, "uniform_radius": 4.0 * d / 3.0}[law]


def _law_frames(ctx: CellContext, law: str, m: int, d: int, n: int, rng=None) -> np.ndarray:
    """``(n, m, d)`` orthogonal ensembles whose rows have marginal law ``law`` (the role ``orthogonal_projection``
    with the law's radial option, or, for a sampler without one, its directions times the law's radius;
    ``uniform_radius``: unit rows times independent U[0, 2√d] radii)."""
    rng = ctx.rng if rng is None else rng
    sampler = ctx.impl("orthogonal_projection", orthogonal_projection)
    if law == "gaussian":  # the role's default radial law
        return np.asarray(sampler(m, d, rng=rng, size=n), dtype=np.float64)
    if "norms" in inspect.signature(sampler).parameters:
        frames = np.asarray(sampler(m, d, rng=rng, size=n, norms=_SAMPLER_NORMS[law]), dtype=np.float64)
    else:  # a sampler without radial options: its directions with the law's radii (F.4's construction)
        frames = np.asarray(sampler(m, d, rng=rng, size=n), dtype=np.float64)
        frames = frames / np.linalg.norm(frames, axis=-1, keepdims=True)
        if law == "sphere":
            frames = frames * math.sqrt(d)
    if law == "uniform_radius":
        frames = frames * rng.uniform(0.0, 2.0 * math.sqrt(d), size=(n, m, 1))
    return frames


#: Doubles per batch of :func:`_row_laws`' ensembles (bounds memory at d = 64, m = 16d: the full tier's 200 000
#: ensembles of 1024 × 64 rows are ~100 GiB at once); only the tested rows are kept.
LAW_CHUNK = 50_000_000


def _law_replicates(ctx: CellContext, alpha: float, sized: bool) -> int:
    """Ensembles a row-law cell draws: enough that the KS critical distance at ``alpha`` is at most half the
    tolerance (DKW: ``n >= ln(2/alpha) / (2 (tol/2)²)``, 20% margin), so a correct sampler (distance ~ 1/√n) is
    decided within the tolerance; never more than the tier's count (``sized`` false: the tier's count)."""
    if not sized:
        return ctx.replicates
    need = math.log(2 / alpha) / (2 * (ctx.tolerance / 2) ** 2)
    return int(min(ctx.replicates, math.ceil(1.2 * need)))


def _row_laws(ctx: CellContext, law: str, m: int, rows: list[int], sized: bool = False) -> Evidence:
    """Each listed row against ``law``: KS tests of its direction coordinate (``c_d (1-t²)^{(d-3)/2}``) and of its
    radius (chi(d), U[0, 2√d]); a fixed radius (√d, 1) exactly (relative error to round-off, within tolerance).
    Ensembles: :func:`_law_replicates`, drawn in batches of :data:`LAW_CHUNK` doubles."""
    d = ctx.params["d"]
    test = ctx.sub_test(2 * len(rows))
    frames = np.concatenate([_law_frames(ctx, law, m, d, c)[:, rows, :]
                             for c in chunks(_law_replicates(ctx, test["alpha"], sized), max(1, LAW_CHUNK // (m * d)))])
    norms = np.linalg.norm(frames, axis=-1)
    coordinate = stats.beta((d - 1) / 2, (d - 1) / 2)
    radial = {"gaussian": stats.chi(d), "uniform_radius": stats.uniform(0.0, 2.0 * math.sqrt(d))}.get(law)
    if radial is not None:
        parts = [ks_test(norms[:, j], radial.cdf, **test) for j in range(len(rows))]
    else:
        rho = math.sqrt(d) if law == "sphere" else 1.0
        parts = [exact_test(float(np.max(np.abs(norms[:, j] / rho - 1.0))), 0.0, tolerance=ctx.tolerance)
                 for j in range(len(rows))]
    parts += [ks_test(frames[:, j, 0] / norms[:, j], lambda t: coordinate.cdf((np.asarray(t) + 1) / 2), **test)
              for j in range(len(rows))]
    return combine(parts, extra=dict(rows=rows, law=law))


def _orf_estimate_test(ctx: CellContext, estimator: str, x, y, m: int) -> Evidence:
    """Sequential Monte Carlo mean of an ORF estimator (rows of the estimator's own law: N(0, I_d), SMREG: Ω_reg)
    against its target (bias relative to |target|, or to the Cauchy–Schwarz scale for sgn/ReLU, whose targets can
    vanish), with the strongest confidence sequence theory allows: sgn estimates lie in [-1, 1] (betting); the
    others get a variance bound from :mod:`rfkit.theory` (Catoni). ReLU: the ORF rows share one marginal law, so by
    Cauchy–Schwarz the variance of the mean of m terms is at most one term's variance
    (``theory.generalized.term_variance``); SMREG: Λ²(Var Y/m - Σ_b b(b-1)/m²·excess) with the term variance and the
    orthogonal-pair excess of :mod:`rfkit.theory.smreg` (its ``smreg_mse(orthogonal=True)`` for one block), blocks of
    the construction; the softmax estimators: the exact R-ORF MSE (``theory.softmax.orthogonal_mse``, blocks
    included)."""
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
        full, rest = divmod(m, d)
        pairs = full * d * (d - 1) + rest * (rest - 1)  # ordered orthogonal pairs of the block construction
        excess = math.exp(smreg_theory.log_orthogonal_pair_excess(d, s)) if s > 0 else 0.0
        sd = math.sqrt(max(0.0, math.exp(smreg_theory.log_term_variance(d, s)) / m - pairs / m**2 * excess)
                       * math.exp(-float(x @ x + y @ y)))
        return ctx.mean(lambda rng, n: _kernel_draws(ctx, "positive", x, y, m, "orthogonal_sqrt_d", n, rng), target,
                        scale=target, sd=sd)
    target = math.exp(float(x @ y))
    return ctx.mean(lambda rng, n: _kernel_draws(ctx, estimator, x, y, m, "orthogonal", n, rng), target,
                    scale=target, sd=math.sqrt(theory.orthogonal_mse(estimator, x, y, m)))


def _plane(x: np.ndarray, y: np.ndarray, rng) -> np.ndarray:
    """A ``(2, d)`` orthonormal basis of a plane containing ``x`` and ``y`` (completed at random where they span
    less; ``d >= 2``)."""
    basis = _span_basis(x, y)
    while basis.shape[0] < 2:
        v = rng.standard_normal(x.size)
        v -= basis.T @ (basis @ v)
        basis = np.vstack([basis, v / np.linalg.norm(v)])
    return basis


#: Gauss–Legendre nodes per arc of :func:`_arc_row_mean` (exact for the degree-2 trigonometric pieces of ReLU).
ARC_NODES = 16


def _arc_row_mean(f, x: np.ndarray, y: np.ndarray, rng) -> float:
    """``E_φ f(uᵀx) f(uᵀy)`` for ``u = (cos φ, sin φ)`` in a plane containing x and y, φ uniform, exactly for
    piecewise-smooth ``f`` with a break at 0 (sgn, ReLU): the integrand is smooth between the (at most four) angles
    where uᵀx or uᵀy changes sign, so Gauss–Legendre on each arc integrates it (a product rule over the whole plane
    is poor at the breaks; this is exact up to round-off for sgn and ReLU). ``f`` is evaluated at the nodes."""
    basis = _plane(x, y, rng)
    breaks = [0.0]
    for v in (x, y):
        a, b = basis @ v
        if a or b:
            alpha = math.atan2(b, a)
            breaks += [(alpha + PI / 2) % (2 * PI), (alpha - PI / 2) % (2 * PI)]
    cuts = np.unique(np.array(breaks + [2 * PI]))
    t, w = np.polynomial.legendre.leggauss(ARC_NODES)
    lo, hi = cuts[:-1, None], cuts[1:, None]
    phi = ((lo + hi) / 2 + (hi - lo) / 2 * t).ravel()
    weights = ((hi - lo) / 2 * w).ravel()
    u = np.stack([np.cos(phi), np.sin(phi)], axis=-1) @ basis
    return float(weights @ (f(u @ x) * f(u @ y)) / (2 * PI))


def _sgn_row_mean(x: np.ndarray, y: np.ndarray, rng) -> float:
    """``E sgn(ωᵀx) sgn(ωᵀy)`` for one isotropic row (any radial law: sgn is scale-free), exactly by
    :func:`_arc_row_mean` over the angle of ω's component in a plane containing x and y."""
    return _arc_row_mean(GENERALIZED["sgn"], x, y, rng)


def _relu_row_mean(x: np.ndarray, y: np.ndarray, law: str, rng=None) -> float:
    """``E ReLU(ωᵀx) ReLU(ωᵀy)`` for one row of ``law``: ω's component in a plane containing x, y is ρ·u with u
    uniform and E ρ² = 2 E‖ω‖²/d, and ReLU is 1-homogeneous, so it is ``2 E‖ω‖²/d`` times the arc mean
    :func:`_arc_row_mean`."""
    rng = np.random.default_rng(0) if rng is None else rng
    return 2 * _second_radial_moment(law, x.size) / x.size * _arc_row_mean(GENERALIZED["relu"], x, y, rng)


def _smreg_row_mean(ctx: CellContext, x: np.ndarray, y: np.ndarray) -> float:
    """``E φ(x)ᵀφ(y)`` of the implementation's positive feature map for one row uniform on ``√d S^{d-1}``: its
    estimate depends on ω only through ωᵀz (z = x + y), so a Gauss–Jacobi quadrature of the direction's
    coordinate ``v`` along z (density ∝ (1 - v²)^{(d-3)/2}) evaluates the map at ω = √d (v ẑ + √(1 - v²) p)."""
    d = x.size
    _, _, v, lv = _pair_rule(d)
    basis = _plane(x + y, np.zeros(d), ctx.rng)
    omega = math.sqrt(d) * (np.outer(v, basis[0]) + np.outer(np.sqrt(np.clip(1 - v * v, 0.0, None)), basis[1]))
    values = kernel_estimates(_feature_map(ctx, "positive"), x, y, omega, omega.shape[0])
    return float(np.exp(lv) @ values)


def _row_mean_error(ctx: CellContext, estimator: str, law: str, x: np.ndarray, y: np.ndarray) -> float:
    """Exact route: |E over one row of ``law`` of the estimator's term - its target| relative to the target (sgn:
    to 1; ReLU: to E‖ω‖²/d·‖x‖‖y‖/2, the Cauchy–Schwarz scale). Each row of an R-ORF ensemble has the law D (the
    ``law`` cells test it on the implementation), and the estimator is the mean of its rows' terms, so its
    mean is this one-row mean: unbiasedness under ORFs holds at (x, y) exactly when this error is 0."""
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if estimator == "sgn":
        target = _angular_kernel(x, y) if nx and ny else 0.0  # sgn(0) = 0: φ(0) = 0
        return abs(_sgn_row_mean(x, y, ctx.rng) - target)
    if estimator == "relu":
        scale = _second_radial_moment(law, x.size) / x.size
        if not (nx and ny):
            return abs(_relu_row_mean(x, y, law, ctx.rng))
        return abs(_relu_row_mean(x, y, law, ctx.rng) - scale * _relu_kernel(x, y)) / (scale * nx * ny / 2)
    if estimator == "smreg":
        return _relative_error(_smreg_row_mean(ctx, x, y), smreg_theory.smreg(x, y))
    return _relative_error(_gauss_hermite_mean(_feature_map(ctx, estimator), x, y), math.exp(float(x @ y)))


#: The Monte Carlo route's estimators swept by one shared-frame cell (:func:`_shared_mc`, the block claim's full
#: tier): every estimator of the form Eq 5 (``law`` is the marginal route).
MC_SHARED = tuple(e for e in ORF_ESTIMATORS if e != "law")


def _zipped(table: dict) -> dict:
    """The named pairs of ``table`` as one tuple per pair axis, zipped (pair i is the i-th entry of each), not a
    cartesian sweep: ``norm_x``, ``norm_y``, ``angle``."""
    return dict(zip(("norm_x", "norm_y", "angle"), (tuple(v) for v in zip(*table.values(), strict=True)),
                    strict=True))


_ZIPPED_PAIRS = _zipped(ORF_PAIRS)


def _is_zipped(p: dict) -> bool:
    """A shared Monte Carlo cell's pair axes: exactly the zipped named pairs (:data:`ORF_PAIRS`)."""
    return all(isinstance(p[a], (tuple, list)) and tuple(p[a]) == v for a, v in _ZIPPED_PAIRS.items())


def _touches_zipped(p: dict) -> bool:
    return any(isinstance(p[a], (tuple, list)) and tuple(p[a]) == v for a, v in _ZIPPED_PAIRS.items())


def _mc_coordinate(ctx: CellContext, estimator: str, x, y, m: int) -> dict:
    """Target and confidence-sequence options of one (estimator, pair) of :func:`_shared_mc`: those of
    :func:`_orf_estimate_test` (sgn: betting in [-1, 1]; the others: Catoni with the sd from theory, blocks of the
    construction independent as for the softmax estimators' exact MSE), except ReLU's variance bound: Cauchy–Schwarz
    within each block (its rows share one marginal law) and independent blocks give Var X·Σ_b b²/m² instead of
    Var X (1/k of it for m = k·d)."""
    d = x.size
    if estimator == "sgn":
        return dict(prediction=_angular_kernel(x, y), scale=1.0, bounds=(-1.0, 1.0))
    if estimator == "relu":  # Cauchy–Schwarz within each block, the blocks independent: Var <= Var X·Σ_b b²/m²
        norm_x, norm_y = float(np.linalg.norm(x)), float(np.linalg.norm(y))
        full, rest = divmod(m, d)
        sd = math.sqrt(generalized_theory.term_variance("relu", norm_x, norm_y, _angle_between(x, y))
                       * (full * d * d + rest * rest)) / m
        return dict(prediction=_relu_kernel(x, y), scale=norm_x * norm_y / 2, sd=sd)
    if estimator == "smreg":
        target = smreg_theory.smreg(x, y)
        s = float((x + y) @ (x + y))
        full, rest = divmod(m, d)
        pairs = full * d * (d - 1) + rest * (rest - 1)
        excess = math.exp(smreg_theory.log_orthogonal_pair_excess(d, s)) if s > 0 else 0.0
        sd = math.sqrt(max(0.0, math.exp(smreg_theory.log_term_variance(d, s)) / m - pairs / m**2 * excess)
                       * math.exp(-float(x @ x + y @ y)))
        return dict(prediction=target, scale=target, sd=sd)
    target = math.exp(float(x @ y))
    return dict(prediction=target, scale=target, sd=math.sqrt(theory.orthogonal_mse(estimator, x, y, m)))


def _shared_mc(ctx: CellContext, estimators: tuple, m: int) -> Evidence:
    """The Monte Carlo route at one ``(d, m)`` for every estimator in ``estimators`` and every named pair of the
    cell's zipped pair axes (:data:`ORF_PAIRS`; trig where ``‖x-y‖² <= MC_CAP_UNBIASED``), on common R-ORF frames.

    Each replicate draws one ``m × d`` ensemble through the role ``orthogonal_projection`` (N(0, I_d) rows) and
    evaluates every (estimator, pair) on it; SMREG's Ω_reg rows are the same ensemble's directions times √d (Ω_reg
    ORF is Haar directions with radius √d, independent of the chi norms; the law route tests the sampler's own √d
    option). Every (estimator, pair) is the one-point cell's sequential test (:func:`_orf_estimate_test`: the same
    target, scale and sd or bounds) at the Bonferroni level ``alpha / points`` (the engine's per-cell level grows
    as the cells are that many fewer), its rounds the shared draws (common random numbers: the points are
    dependent, which Bonferroni allows); the cell costs what its most demanding point needs (a d×d Haar frame,
    O(d³), dominates a replicate at large d, and is paid once instead of once per point)."""
    p = ctx.params
    d = p["d"]
    coords, pairs = [], []
    for nx, ny, angle in zip(p["norm_x"], p["norm_y"], p["angle"], strict=True):
        x, y = controlled_pair(nx, ny, angle, d, ctx.rng)
        pairs.append((x, y))
        t = nx * nx + ny * ny - 2 * nx * ny * math.cos(angle)
        for estimator in estimators:
            if estimator == "trig" and t > MC_CAP_UNBIASED["trig"]:
                continue
            coords.append((estimator, len(pairs) - 1, (nx, ny, angle)))
    maps = {e: _feature_map(ctx, "positive" if e == "smreg" else e) for e in estimators if e in KINDS + ("smreg",)}

    def draw(rng, n):
        out = []
        for c in chunks(n, _chunk(m, d)):
            w = _projections(ctx, "orthogonal", c, m, d, rng)
            w_reg = w * (math.sqrt(d) / np.linalg.norm(w, axis=-1, keepdims=True)) if "smreg" in maps else None
            cols = []
            for estimator, k, _ in coords:
                x, y = pairs[k]
                if estimator in GENERALIZED:
                    cols.append(_generalized_estimates(GENERALIZED[estimator], x, y, w, c))
                else:
                    cols.append(kernel_estimates(maps[estimator], x, y, w_reg if estimator == "smreg" else w, c))
            out.append(np.stack(cols, axis=-1))
        return np.concatenate(out)

    seed = int(ctx.rng.integers(2**63))
    cache: dict[str, np.ndarray] = {}

    def column(j):
        def draw_j(rng, n):
            key = repr(rng.bit_generator.state)
            if key not in cache:  # every round is kept: the points run one after the other on the same rounds
                cache[key] = np.asarray(draw(rng, n), dtype=np.float64).reshape(n, len(coords))
            return cache[key][:, j]
        return draw_j

    parts = []
    for j, (estimator, k, point) in enumerate(coords):
        x, y = pairs[k]
        options = _mc_coordinate(ctx, estimator, x, y, m)
        extra = dict(estimator=estimator, pair=list(point))
        if estimator in KINDS and m > d:
            extra["mse_ratio_ort_over_iid"] = (theory.orthogonal_mse(estimator, x, y, m)
                                               / (theory.term_variance(estimator, x, y) / m))
        parts.append(sequential_mean(column(j), options.pop("prediction"), rng=np.random.default_rng(seed),
                                     budget=ctx.replicates, planned=ctx.planned or ctx.replicates,
                                     alpha=ctx.alpha / len(coords), tolerance=ctx.tolerance, extra=extra, **options))
    worst = max(range(len(parts)), key=lambda i: parts[i].effect if not math.isnan(parts[i].effect) else math.inf)
    ev = combine(parts, extra=dict(m=m, points=len(coords), worst=parts[worst].extra))
    return dataclasses.replace(ev, n=max(e.n for e in parts))


def _orf_cell(rules: dict, marginal_rows, law_sized: bool = False):
    def cell(ctx: CellContext) -> Evidence:
        p = ctx.params
        d, estimator, law = p["d"], p["estimator"], p["D"]
        m = rules[p["m_rule"]](d)
        if estimator == "law":
            return _row_laws(ctx, law, m, marginal_rows(m, d), law_sized)
        if p["route"] == "exact":
            return _worst_over_grid(ctx, functools.partial(_row_mean_error, ctx, estimator, law))
        if isinstance(estimator, (tuple, list)):
            return _shared_mc(ctx, tuple(estimator), m)
        pair = (p["norm_x"], p["norm_y"], p["angle"])
        x, y = _axis_pair(*pair, d) if p["placement"] == "axis" else _cell_pair(ctx)
        ev = _orf_estimate_test(ctx, estimator, x, y, m)
        if estimator in KINDS and m > d:
            ratio = theory.orthogonal_mse(estimator, x, y, m) / (theory.term_variance(estimator, x, y) / m)
            ev = Evidence(**{**ev.__dict__, "extra": dict(ev.extra, mse_ratio_ort_over_iid=ratio, m=m)})
        return ev
    return cell


def _orf_where(rules: dict, upper: bool, exact_rule: str, law_rule: str, large_d_rules: tuple = ()):
    """Which grid points are cells: m from ``rules`` (at most d if ``upper``); ``law`` on the ``mc`` route at
    the sweep's point (they do not depend on inputs), N(0, I_d) at every (d, m), the other laws D at m =
    ``law_rule`` (the directions are the same Haar frames for every D, the radius is drawn per row independently of
    m); the exact route at every pair of the sweep under each estimator's law (sgn, ReLU: every D), once per d (one
    row: independent of m); the Monte Carlo route of an estimator under its own law at the named pairs (trig:
    ‖x-y‖² <= 1.5). Above ``mc_d_max`` (a grid axis): the exact route and the marginals of m in ``large_d_rules``
    only (one d-row Haar frame costs O(d³) per replicate)."""
    def where(p: dict, variant: str) -> bool:
        if not _m_rule_ok(rules, p["m_rule"], p["d"], upper=p["d"] if upper else None):
            return False
        estimator, law = p["estimator"], p["D"]
        large = p["d"] > p["mc_d_max"]
        shared = p.get("mc_shared", False)  # one cell per (d, m) sweeps the Monte Carlo points (_shared_mc)
        if isinstance(estimator, (tuple, list)):
            return (shared and p["route"] == "mc" and p["placement"] == "random" and law == "gaussian"
                    and not large and _is_zipped(p))
        if _touches_zipped(p):
            return False
        if estimator == "law":
            return (p["route"] == "mc" and p["placement"] == "random" and _is_sweep(p)
                    and (law == "gaussian" or p["m_rule"] == law_rule)
                    and (not large or p["m_rule"] in large_d_rules))
        if law != _NATIVE_LAW.get(estimator, law):
            return False
        if p["route"] == "exact":
            return p["m_rule"] == exact_rule and p["placement"] == "random" and _is_sweep(p)
        name = _named(ORF_PAIRS, p)
        if shared or large or name is None or (estimator not in _NATIVE_LAW and law != "gaussian"):
            return False  # sgn/ReLU: other D exactly; full tier: the shared cells
        return estimator != "trig" or _spread(p, "trig") <= MC_CAP_UNBIASED["trig"]
    return where


def _orf_inputs() -> dict:
    return dict(
        norm_x=Range("every estimator ... stays unbiased (for every input): ‖x‖", 0.0, math.inf, boundaries=(0.0,),
                     up_to=(None, 3.0), why="G_norm's largest norm (the register's sweep G_norm × G_angle); the "
                                            "exact route evaluates the one-row mean there to quadrature accuracy"),
        norm_y=Range("every estimator ... stays unbiased (for every input): ‖y‖", 0.0, math.inf, boundaries=(0.0,),
                     up_to=(None, 3.0), why="as ‖x‖"),
        angle=Range("every estimator ... stays unbiased (for every input): the angle between x and y", 0.0, PI))


_ORF_D_WORDS = ("isotropic D: N(0, I_d) (the softmax estimators' law), Ω_reg = Unif(√d S^{d-1}) (SMREG's), the unit "
                "sphere, and radius uniform on [0, 2√d] (the register's other isotropic law)")
_ORF_ESTIMATOR_WORDS = ("the orthogonal samples each have marginal law D (law); every estimator of the form "
                        "Eq 5 (Sec 2.4's list: SM^ort+ positive, trig-ORF, hyp-ORF, SMREG^ort+, f = sgn, f = ReLU)")
_ORF_NOTES = ("Routes. law (every D): per-row KS tests of the implementation's rows (direction coordinate, "
              "radius; a fixed radius exactly). exact (every x, y of the sweep G_norm × G_angle subset, all in one "
              "cell, the worst pair in extra): the estimator is the mean of its rows' terms and each row has the law "
              "D, so its mean is the "
              "one-row mean, evaluated exactly: the implementation's feature map by 2-D Gauss–Hermite quadrature "
              "over ω's component in span(x, y) (positive, trig, hyperbolic under N(0, I_d)), by Gauss–Jacobi along "
              "z = x + y (SMREG under Ω_reg); f = sgn and ReLU (every D) by Gauss–Legendre on the arcs between the "
              "angles where ωᵀx or ωᵀy changes sign (exact for these piecewise-smooth f; a product rule over the "
              "break is poor), ReLU times 2E‖ω‖²/d (1-homogeneous), sgn scale-free. mc (d <= mc_d_max): the "
              "implementation end to end (sampler + feature map) by sequential Monte Carlo at named pairs with "
              "‖x+y‖² <= 0.75 (trig: ‖x-y‖² <= 1.5) under each estimator's own law, random and axis-aligned "
              "placements; above mc_d_max the exact route and the marginals of m <= 2 only (a d-row Haar frame "
              "costs O(d³) per replicate). Not tested: the softmax estimators under non-Gaussian D (their target "
              "is then another kernel; the law route and linearity cover them). sgn/ReLU features and the "
              "SMREG target are private helpers of this module (shared implementations live in another module; "
              "swap at merge).")


# Budget: quick ~8 s (heavy): row laws under 4 D, the exact route over the coarse sweep (d <= 64), Monte Carlo cells
# (d <= 8); the block claim ~4 s.
ORF_UNBIASED = Claim(
    id="performer.sec2_4.orf_unbiased", source="Sec 2.4; B.2; F.4",
    statement="For isotropic D and m <= d the orthogonal samples each have marginal law D, and every estimator of "
              "the form Eq 5 stays unbiased when iid samples are replaced by ORFs.",
    kind="expectation",
    domain=dict(
        D=Choice(_ORF_D_WORDS, ORF_LAWS),
        estimator=Choice(_ORF_ESTIMATOR_WORDS, ORF_ESTIMATORS),
        d=Integers("D on R^d (an orthogonal pair needs d >= 2; at d = 1, m = 1 and ORF = iid)", 2, math.inf,
                   points=(2,), up_to=64, why="the register's largest d; rows enter through their marginal law"),
        m_rule=Choice("m <= d: m = 1 (one row), 2 (the first orthogonal pair), d (a full frame)", ("1", "2", "d")),
        **_orf_inputs()),
    tolerance=0.05, units="relative bias (sgn, ReLU: relative to √(E f(ωᵀx)² E f(ωᵀy)²)) or KS distance (laws)",
    cell=_orf_cell(M_RULES, lambda m, d: sorted({0, m // 2, m - 1})),
    grid=tiers(dict(route=["exact", "mc"], estimator=list(ORF_ESTIMATORS), D=list(ORF_LAWS), d=[2, 3, 8, 64],
                    m_rule=["1", "2", "d"], placement=["random", "axis"], mc_d_max=[8],
                    **_sweep_axes("coarse", ORF_PAIRS, ["small"])),
               smoke=dict(d=[4], m_rule=["1", "2", "d"], placement=["random"]),
               full=dict(d=[2, 3, 4, 8, 16, 64], m_rule=list(M_RULES), mc_d_max=[64],
                         **_sweep_axes("register", ORF_PAIRS, list(ORF_PAIRS)))),
    replicates=tiers(20_000, smoke=8_000, full=200_000),
    where=_orf_where(M_RULES, upper=True, exact_rule="d", law_rule="2", large_d_rules=("1", "2")),
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection",),
    plot_x="estimator", notes=_ORF_NOTES,
)

BLOCK_ORF = Claim(
    id="performer.b2.block_orf", source="B.2, introduction",
    statement="When m > d, ORFs can be used inside each d×d block of W (independent blocks), and the estimators "
              "stay unbiased with the same marginals.",
    kind="expectation",
    domain=dict(
        D=Choice("the same marginals: " + _ORF_D_WORDS + " (register hypothesis: isotropic D)", ORF_LAWS),
        estimator=Choice("the estimators: " + _ORF_ESTIMATOR_WORDS, ORF_ESTIMATORS),
        d=Integers("d×d blocks (d >= 2: a block with an orthogonal pair)", 2, math.inf, points=(2,), up_to=64,
                   why="the register's largest d"),
        m_rule=Choice("m > d: m = d+1 (a full block and one row), 2d (two full blocks), 2d+1 (two and one row), 4d, "
                      "16d (many blocks)", tuple(BLOCK_RULES)),
        **_orf_inputs()),
    tolerance=0.05, units="relative bias or KS distance (row laws)",
    # marginals: rows in the first, second and last block, ensembles sized for the tolerance (_law_replicates)
    cell=_orf_cell(BLOCK_RULES, lambda m, d: sorted({0, d, m - 1}), law_sized=True),
    grid=tiers(dict(route=["exact", "mc"], estimator=list(ORF_ESTIMATORS), D=list(ORF_LAWS), d=[2, 4],
                    m_rule=list(BLOCK_RULES), placement=["random"], mc_d_max=[2],
                    **_sweep_axes("coarse", ORF_PAIRS, ["obtuse"])),
               smoke=dict(d=[2], m_rule=["d+1", "2d+1", "16d"], **_sweep_axes("coarse", ORF_PAIRS, ["small"])),
               # full: one Monte Carlo cell per (d, m) sweeps every estimator at every named pair on common frames
               # (_shared_mc; the pair axes' zipped tuples); the estimator axis is covered by the exact and law routes
               full=dict(d=[2, 4, 16, 64], mc_d_max=[64], mc_shared=[True],
                         estimator=[*ORF_ESTIMATORS, MC_SHARED],
                         **{a: [*v, _ZIPPED_PAIRS[a]]
                            for a, v in _sweep_axes("register", ORF_PAIRS, list(ORF_PAIRS)).items()})),
    replicates=tiers(20_000, smoke=8_000, full=200_000),
    where=_orf_where(BLOCK_RULES, upper=False, exact_rule="d+1", law_rule="d+1", large_d_rules=tuple(BLOCK_RULES)),
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection",), plot_x="m_rule",
    notes=_ORF_NOTES.replace("Monte Carlo at named pairs", "Monte Carlo (the theory's MSE ratio ORF/iid in extra) at "
                             "named pairs").replace("the marginals of m <= 2 only (a d-row Haar frame costs O(d³) per "
                                                    "replicate)", "the marginals (every m)")
    + " Marginals: rows in the first, second and last block.",
)

# ================================================================ derived: R-ORF MSE closed forms

#: Monte Carlo route: ‖x+y‖² (positive, hyperbolic) at most this (sequential; exact sd of the ORF squared error
#: from theory); beyond it the exp features' squared errors are too skewed for an affordable test.
MC_CAP_ORF = 0.5
#: Spreads of the exact route (s = ‖x+y‖² or t = ‖x-y‖²): 0 (the degenerate point: every estimate exact) to 36
#: (‖x‖, ‖y‖ <= 3, the register's G_norm).
EXACT_SPREADS = (0.0, 0.25, 0.5, 1.0, 2.5, 4.0, 9.0, 16.0, 36.0)
#: Gauss–(generalised) Laguerre × Gauss–Jacobi nodes per axis of the exact route's pair expectation.
PAIR_NODES = 240


@functools.lru_cache(maxsize=32)
def _pair_rule(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(ρ, log w_ρ, v, log w_v)``: ``ρ = √(2g)``, ``g ~ Gamma(d, 1)`` (so ``ρ² ~ χ²_{2d}``) by generalised
    Gauss–Laguerre, and the first coordinate ``v`` of a uniform direction on ``S^{d-1}`` (density
    ``∝ (1 - v²)^{(d-3)/2}``) by Gauss–Jacobi; ``d = 1``: ``v = ±1``."""
    g, wg = special.roots_genlaguerre(PAIR_NODES, d - 1)
    with np.errstate(divide="ignore"):
        lg = np.log(wg)
    if d == 1:
        v, lv = np.array([-1.0, 1.0]), np.log(np.array([0.5, 0.5]))
    else:
        v, wv = special.roots_jacobi(PAIR_NODES, (d - 3) / 2, (d - 3) / 2)
        lv = np.log(wv) - special.logsumexp(np.log(wv))
    return np.sqrt(2 * g), lg - special.logsumexp(lg), v, lv


def _pair_expectation(a: float, d: int, trig: bool) -> float:
    """``E f(ρ a v)`` over the law of :func:`_pair_rule`, ``f = exp`` or ``cos``: for an orthogonal pair with
    N(0, I_d) marginals, ``ω_1 ± ω_2 = ρ·u`` (``‖ω_1 ± ω_2‖² = r_1² + r_2²``, two independent chi(d) norms
    squared; ``u`` uniform by the Haar frame's rotation invariance, independent of the norms), so
    ``E e^{ω_1ᵀz} e^{ω_2ᵀz} = E e^{ρ‖z‖v}`` and ``E cos ω_1ᵀΔ cos ω_2ᵀΔ = E cos(ρ‖Δ‖v)``. A quadrature of the
    definition, independent of the closed form ₁F₁ (and of :mod:`rfkit.theory`)."""
    rho, lr, v, lv = _pair_rule(d)
    arg = a * np.outer(rho, v)
    logw = lr[:, None] + lv[None, :]
    if trig:
        return float(np.sum(np.exp(logw) * np.cos(arg)))
    return float(np.exp(special.logsumexp(logw + arg)))


def _exact_orf_mse(kind: str, x: np.ndarray, y: np.ndarray, m: int) -> tuple[float, float]:
    """``(MSE, E X²)`` of the mean of ``m`` R-ORF terms from the definition: ``Var X/m + Σ_b b(b-1)/m² Cov_pair``
    with elementary Gaussian moments of one term, ``Cov_pair`` by :func:`_pair_expectation` and the blocks of the
    construction (``⌊m/d⌋`` full d-row blocks and the rest)."""
    d = x.size
    sq = float(x @ x + y @ y)
    full, rest = divmod(m, d)
    pairs = full * d * (d - 1) + rest * (rest - 1)
    if kind == "trig":
        t = float((x - y) @ (x - y))
        mean, second = math.exp(sq / 2 - t / 2), math.exp(sq) * (1 + math.exp(-2 * t)) / 2
        pair = math.exp(sq) * _pair_expectation(math.sqrt(t), d, trig=True)
    else:
        s = float((x + y) @ (x + y))
        lam2 = math.exp(-sq)
        mean = math.exp(-sq / 2 + s / 2)
        second = lam2 * (math.exp(2 * s) if kind == "positive" else (math.exp(2 * s) + 1) / 2)
        pair = lam2 * _pair_expectation(math.sqrt(s), d, trig=False)  # cosh·cosh: mean of e^{(ω_1 ± ω_2)ᵀz}
    variance, cov = second - mean**2, pair - mean**2
    return variance / m + pairs / m**2 * cov, second


def _spread_pair(kind: str, spread: float, d: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``x = ±y`` with ``‖x+y‖² = spread`` (positive, hyperbolic) or ``‖x-y‖² = spread`` (trig), in a random
    direction; the estimators depend on the pair only through this spread and ``‖x‖² + ‖y‖²``."""
    r = math.sqrt(spread) / 2
    return controlled_pair(r, r, PI if kind == "trig" else 0.0, d, rng)


def _orf_mse_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    kind, d = p["kind"], p["d"]
    m = {**M_RULES, **BLOCK_RULES}[p["m_rule"]](d)
    if p["route"] == "taylor":  # e^s - ₁F₁(d; d/2; s/2) = s²/(2(d+2)) + O(s³)
        s = 1e-3
        x, y = _axis_pair(math.sqrt(s) / 2, math.sqrt(s) / 2, 0.0, d)
        gap = -theory.orthogonal_pair_covariance("positive", x, y) / math.exp(-(x @ x + y @ y))
        return exact_test(_relative_error(gap, s * s / (2 * (d + 2))), 0.0, tolerance=ctx.tolerance,
                          extra=dict(s=s))
    x, y = _spread_pair(kind, p["spread"], d, ctx.rng)
    pred = theory.orthogonal_mse(kind, x, y, m)
    if p["route"] == "exact":
        exact, second = _exact_orf_mse(kind, x, y, m)
        error = abs(pred - exact) / max(abs(exact), 1e-9 * second)  # spread 0: both are 0 up to round-off of E X²
        return exact_test(error, 0.0, tolerance=ctx.tolerance, extra=dict(m=m, mse_exact=exact, mse_theory=pred))
    # positive, hyperbolic: the exact sd of one ORF squared error (theory's fourth moment of the R-ORF estimator,
    # Humbert Φ₂ moments of Haar-frame rows) -> Catoni sequence, non-asymptotic (exp features are heavy-tailed:
    # an asymptotic cell is flagged by the tail-index check). trig: bounded terms, sequential asymptotic.
    sd = theory.orthogonal_squared_error_moments(kind, x, y, m)["sd"] if kind != "trig" else None
    return ctx.mean(lambda rng, n: _squared_errors(ctx, kind, x, y, m, "orthogonal", n, rng), pred, scale=pred,
                    sd=sd, extra=dict(m=m, mse_iid=theory.term_variance(kind, x, y) / m))


def _mc_spread_ok(kind: str, spread: float) -> bool:
    """The Monte Carlo route's inputs: 0 < s <= MC_CAP_ORF (exp features) or 0 < t <= 16 (trig)."""
    return 0 < spread <= (MC_CAP_MSE["trig"] if kind == "trig" else MC_CAP_ORF)


def _orf_mse_where(kind: str, mc_spreads: dict):
    def where(p: dict, variant: str) -> bool:
        k = p.get("kind", kind)
        if not _m_rule_ok(M_RULES, p["m_rule"], p["d"], upper=p["d"]):
            return False
        if p["route"] == "taylor":  # independent of m and of the spread: once per d
            return k == "positive" and p["m_rule"] == "d" and p["spread"] == 0.0
        if p["route"] == "mc":
            return p["m_rule"] != "1" and p["d"] <= p["mc_d_max"] and p["spread"] in mc_spreads[k] \
                and _mc_spread_ok(k, p["spread"])
        return True
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
#: Spreads of the Monte Carlo route, by kind (s for exp features, t for trig): every one of them that the tier's
#: grid lists (quick leaves out s = 0.5 and t = 4).
_MC_SPREADS = {"positive": (0.25, 0.5), "hyperbolic": (0.25, 0.5), "trig": (1.0, 4.0, 16.0)}
_QUICK_SPREADS = {"positive": [0.0, 0.25, 1.0, 2.5, 4.0, 9.0, 16.0, 36.0],
                  "hyperbolic": [0.0, 0.25, 1.0, 2.5, 4.0, 9.0, 16.0, 36.0],
                  "trig": [0.0, 0.25, 1.0, 2.5, 9.0, 16.0, 36.0]}


def _spread_axis(kind: str) -> Range:
    if kind == "trig":
        words = ("every x, y through t = ‖x - y‖² >= 0 (t = 0: x = y, every estimate exact; register check "
                 "t ∈ [0, 16])")
    elif kind == "positive":
        words = ("every x, y through s = ‖x + y‖² >= 0 (z = x + y; s = 0: every estimate exact; the Taylor "
                 "expansion in s)")
    else:
        words = "every x, y through s = ‖x + y‖² >= 0 (z = x + y; s = 0: every estimate exact)"
    return Range(words, 0.0, math.inf, boundaries=(0.0,), up_to=(None, 36.0),
                 why="‖x‖, ‖y‖ <= 3 as in the register's G_norm (spread <= 36); the exact route evaluates both sides "
                     "there to round-off (the pair expectation by quadrature of its definition)")


_ORF_D = Integers("ω ∈ R^d with an orthogonal pair (d >= 2; d = 1 has m = 1 only, the iid MSE)", 2, math.inf,
                  points=(2,), up_to=16, why="the register's check d ∈ {2, 4, 8, 16}; d enters through ₁F₁(d; d/2; ·)")
_ORF_M = Choice("m <= d: m = 1 (no pair: the iid MSE), 2 (the first orthogonal pair), d (a full frame); the "
                "prediction depends on m through 1/m and (m-1)/m", ("1", "2", "d"))


def _orf_mse_claim(kind: str) -> Claim:
    claim_id, statement = _ORF_MSE_TEXT[kind]
    routes = ["exact", "mc"] + (["taylor"] if kind == "positive" else [])
    return Claim(
        id=claim_id, source="register: derived predictions (Performer Theorem 2, F.4)",
        statement=statement, kind="moment",
        domain=dict(d=_ORF_D, m_rule=_ORF_M, spread=_spread_axis(kind)),
        tolerance=0.1, units="relative MSE error",
        cell=_orf_mse_cell,
        grid=tiers(dict(route=routes, kind=[kind], d=[2, 4, 8, 16], m_rule=["1", "2", "d"],
                        spread=_QUICK_SPREADS[kind], mc_d_max=[8]),
                   smoke=dict(d=[2, 16], spread=[0.0, _MC_SPREADS[kind][0], 2.5, 36.0], mc_d_max=[2]),
                   full=dict(spread=sorted(set(EXACT_SPREADS) | set(_MC_SPREADS[kind])), mc_d_max=[16])),
        replicates=tiers(60_000, smoke=40_000, full=1_000_000),
        where=_orf_mse_where(kind, _MC_SPREADS),
        roles=(f"feature_map.{kind}", "orthogonal_projection"), plot_x="spread",
        notes="Three routes. exact: the MSE of rfkit.theory (the closed form) against the definition at every spread "
              "from 0 to 36 and every d, m of the grid: Var X/m + ((m-1)/m)·Cov_pair with elementary Gaussian "
              "moments of one term and the pair expectation by a 240² quadrature of ω_1 ± ω_2 = ρu (ρ² ~ χ²_{2d}, u "
              "uniform), independent of ₁F₁ (agrees with mpmath's ₁F₁ to 1e-13). mc: the implementation (feature map "
              "and the sign-corrected Haar sampler) by sequential Monte Carlo of its squared errors against the "
              f"closed form (exact sd for exp features) where that is decidable: 0 < s <= {MC_CAP_ORF} (exp "
              "features; register: 's <= 2.5', beyond 0.5 the squared errors are too skewed), t ∈ {1, 4, 16} "
              "(trig), d <= mc_d_max"
              + ("; taylor: the coefficient s²/(2(d+2)) at s = 1e-3 exactly" if kind == "positive" else "") + ".",
    )


ORF_POS_MSE = _orf_mse_claim("positive")
ORF_HYP_MSE = _orf_mse_claim("hyperbolic")
ORF_TRIG_MSE = _orf_mse_claim("trig")


BLOCK_ORF_MSE = Claim(
    id="performer.derived.block_orf_mse", source="register: derived predictions (B.2 blocks)",
    statement="For independent orthogonal blocks of sizes b_1..b_B (Σb = m) and any of the three estimators, "
              "MSE = MSE_iid + (Σ_b b(b-1)/m²) Cov_pair; with m = k·d full blocks the factor is (d-1)/m.",
    kind="moment",
    domain=dict(
        kind=Choice("any of the three estimators above", tuple(KINDS)),
        d=_ORF_D,
        m_rule=Choice("blocks of sizes b_1..b_B, Σb = m > d, as the R-ORF sampler builds them (⌊m/d⌋ full d-row "
                      "blocks and the rest): m = d+1 (sizes d, 1), 2d (two full blocks: k·d), 2d+1 (d, d, 1), 4d "
                      "(many full blocks, k·d)", ("d+1", "2d", "2d+1", "4d")),
        spread=Range("every x, y through s = ‖x + y‖² (positive, hyperbolic) or t = ‖x - y‖² (trig), >= 0", 0.0,
                     math.inf, boundaries=(0.0,), up_to=(None, 36.0),
                     why="‖x‖, ‖y‖ <= 3 as in the register's G_norm; the exact route evaluates both sides there")),
    tolerance=0.1, units="relative MSE error",
    cell=_orf_mse_cell,
    grid=tiers(dict(route=["exact", "mc"], kind=list(KINDS), d=[2, 4, 16], m_rule=["d+1", "2d", "2d+1", "4d"],
                    spread=[0.0, 0.25, 1.0, 4.0, 16.0, 36.0], mc_d_max=[4]),
               smoke=dict(d=[2, 16], spread=[0.0, 0.25, 2.5, 4.0, 36.0], mc_d_max=[2]),
               full=dict(d=[2, 4, 8, 16], spread=[0.0, 0.25, 0.5, 1.0, 4.0, 9.0, 16.0, 36.0], mc_d_max=[16])),
    replicates=tiers(40_000, smoke=20_000, full=1_000_000),
    where=lambda p, v: p["route"] == "exact" or (
        p["d"] <= p["mc_d_max"] and p["m_rule"] in ("d+1", "4d")
        and p["spread"] == (4.0 if p["kind"] == "trig" else 0.25)),
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection",), plot_x="m_rule",
    notes="exact route: rfkit.theory's block MSE against the definition (Var X/m + Σ_b b(b-1)/m²·Cov_pair, the pair "
          "expectation by quadrature, blocks of the construction) at every spread from 0 to 36; mc route: the "
          "implementation's squared errors (sequential; exact sd for exp features) at s = 0.25 or t = 4, m = d+1 and "
          "4d, d <= mc_d_max. Block "
          "sizes other than the sampler's (e.g. 3 + 2 rows at d = 4) are not built by the code under test; the "
          "identity's algebra is the same (pairs in a block share Cov_pair, blocks are independent).",
)

# ================================================= attention matrix and normalised output (Abstract, Sec 5)
