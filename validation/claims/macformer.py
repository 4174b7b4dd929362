r"""Macformer claims (``004_803b6fd9a1d4a879.txt``, register ``../shared/claims/macformer.md``).

Sections: Table 1 coefficients and domains; Definitions 2–3 and the RMFA display; Theorems 1–2; Algorithm 1 and
Theorem 3 (ppSBN); complexity; Figure 4 and Table 2; derived predictions. Estimators come from
:mod:`rfkit.estimators.rmf`, :mod:`rfkit.estimators.ppsbn` and :mod:`rfkit.estimators.maclaurin_kernels`,
predictions from :mod:`rfkit.theory.maclaurin` and :mod:`rfkit.theory.cost`; the Figure 4 quantities come from
:mod:`rfkit.validation.reproductions.macformer`.

Conventions of the checks
-------------------------
* Readings of the register (norm ball, batch-norm statistics, power sign, RMF law/weight, coefficient source,
  mask fill...) are variants; each gets its own verdict. Variant names join the reading values with ``|``.
* Where an undefined value (nan, a printed formula with no value at ``N``) is itself the failure, the violation
  is *capped*: a relative error counts at most 1 (completely wrong), and a non-finite value counts as 1
  (:func:`_capped`), so the engine sees a decisive finite effect instead of an undecidable nan.
* Monte Carlo cells are sized from exact moments (:func:`rfkit.validation.stats.required_replicates`), capped
  per tier; a cell whose need exceeds the cap reports the shortfall as an underpowered cell.
* Trend claims ("falls", "grows") put the prediction at ``±tolerance`` with the matching one-sided alternative: a
  cell is refuted only when the trend is significantly in the wrong direction, and supported only when it is
  significantly in the claimed direction.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from rfkit.estimators import softmax_attention
from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS, MASK_FILLS, kernel_values, kernelized_attention
from rfkit.estimators.ppsbn import BN_STATS, VAR_ESTIMATORS, matrix_norm, presbn
from rfkit.estimators.rmf import RMFDraw, draw_rmf, rmf_features, rmfa
from rfkit.theory import maclaurin as theory
from rfkit.validation.model import CellContext, Claim, per_tier
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import (
    Evidence,
    exact_test,
)

KERNEL_NAMES = tuple(MACLAURIN_KERNELS)
LIMITED = ("inv", "log", "sqrt")  # kernels with R_f = 1


# ============================================================================================ helpers


def _readings(**axes: Sequence) -> dict[str, dict]:
    """Variant name -> reading dict for the product of reading axes (names join the values with ``|``)."""
    return {"|".join(str(v) for v in combo): dict(zip(axes, combo, strict=True))
            for combo in itertools.product(*axes.values())}


def _capped(values, cap: float = 1.0) -> np.ndarray:
    """Violations with non-finite entries counted as ``cap`` and everything capped at ``cap``."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), np.minimum(values, cap), cap)


def _capped_relative(got, want, scale) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return _capped(np.abs(np.asarray(got) - np.asarray(want)) / scale)


def _exact(values, ctx: CellContext, extra: dict | None = None, tolerance: float | None = None) -> Evidence:
    """Exact evidence on capped violations (largest entry), at the claim's or a stricter tolerance."""
    violation = _capped(values)
    tol = ctx.tolerance if tolerance is None else tolerance
    return exact_test(float(violation.max(initial=0.0)), 0.0, tolerance=tol, extra=extra)


def _sub(ctx: CellContext, parts: int) -> dict:
    """Test keywords at the Bonferroni level of one of ``parts`` sub-tests of a cell."""
    return dict(ctx.test, alpha=ctx.alpha / parts)


def _flag(ev: Evidence, reason: str) -> Evidence:
    return replace(ev, flags=ev.flags + (reason,), p_value=1.0)


def _quiet(fn: Callable, *args, **kwargs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _mask(kind: str, n: int, rng: np.random.Generator) -> np.ndarray | None:
    """``M'`` (True = keep) of a mask type; every row keeps at least one key."""
    if kind == "none":
        return None
    if kind == "causal":
        return np.tri(n, dtype=bool)
    if kind == "padding":
        keep = rng.random(n) < 0.7
        keep[rng.integers(n)] = True
        return np.broadcast_to(keep, (n, n)).copy()
    keep = rng.random((n, n)) < 0.5
    keep[np.arange(n), rng.integers(n, size=n)] = True
    return keep


def _unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _ball_matrix(rng: np.random.Generator, n: int, d: int, reading: str, placement: str,
                 positive: bool = False) -> np.ndarray:
    """A matrix in the unit ball ``ℓ2(0,1)`` of a reading: on its boundary (norm exactly 1) or inside."""
    x = np.abs(rng.standard_normal((n, d))) if positive else rng.standard_normal((n, d))
    radius = 1.0 if placement == "boundary" else rng.uniform(0.3, 0.9)
    if reading == "row":
        radii = np.ones((n, 1)) if placement == "boundary" else rng.uniform(0.3, 0.9, size=(n, 1))
        return x / np.linalg.norm(x, axis=1, keepdims=True) * radii
    return x * radius / float(matrix_norm(x, reading)[0, 0])


def _cancelling_keys(rng: np.random.Generator, n: int, d: int, reading: str) -> np.ndarray:
    """Keys in the ball whose Rademacher projections cancel often: pairs ``k, -0.9k`` along coordinates."""
    keys = np.zeros((n, d))
    for i in range(n):
        keys[i, i % d] = 1.0 if i % 2 == 0 else -0.9
    keys += 0.01 * rng.standard_normal((n, d))
    return _ball_matrix_like(keys, reading)


def _ball_matrix_like(x: np.ndarray, reading: str) -> np.ndarray:
    if reading == "row":
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0)
    return x / max(float(matrix_norm(x, reading)[0, 0]), 1.0)


def _replicate_cap(ctx: CellContext, need: float) -> tuple[int, bool]:
    """Replicates for a cell needing ``need`` (from exact moments), capped at the tier's budget."""
    cap = ctx.replicates
    return int(min(max(need, 2_000), cap)), need > cap


# ===================================================================== Table 1: coefficients


def _printed_relative_errors(kernel: str, n_max: int) -> tuple[np.ndarray, list[int]]:
    """``|printed a_N - a_N| / a_N`` exactly (rationals); an undefined printed value counts as 1."""
    printed = theory.printed_coefficients(kernel, n_max)
    derived = theory.derived_coefficients(kernel, n_max)
    undefined = [n for n, c in enumerate(printed) if c is None]
    errors = [1.0 if c is None else float(abs(c - a) / a) for c, a in zip(printed, derived, strict=True)]
    return np.array(errors), undefined


def _cauchy_dps(kernel: str, n_max: int, radius: float) -> int:
    """Working digits: 40 beyond the smallest ``a_N ρ^N`` (the division by ``ρ^N`` amplifies round-off)."""
    n = np.arange(n_max + 1)
    log10_terms = (MACLAURIN_KERNELS[kernel].log_coefficient(n) + n * math.log(radius)) / math.log(10)
    return 40 + int(math.ceil(max(0.0, -float(log10_terms.min()))))


def _cauchy_relative_errors(kernel: str, n_max: int, radius: float) -> np.ndarray:
    """``|printed a_N - a_N^{Cauchy}| / |a_N^{Cauchy}|`` with the contour integral in multiprecision."""
    import mpmath

    dps = _cauchy_dps(kernel, n_max, radius)
    numeric = theory.cauchy_coefficients(kernel, n_max, radius, dps=dps)
    printed = theory.printed_coefficients(kernel, n_max)
    with mpmath.workdps(dps):
        return np.array([1.0 if c is None else float(abs(mpmath.mpf(c.numerator) / c.denominator - a) / abs(a))
                         for c, a in zip(printed, numeric, strict=True)])


PARTIAL_SUM_T = (-0.9, -0.5, -0.1, 0.05, 0.125, 0.5, 0.9)


def _partial_sum_violations(kernel: str, n_max: int) -> np.ndarray:
    """``max(0, |Σ_{N<=N_max} printed a_N t^N - f(t)| - R_N(t)) / |f(t)|`` with ``R_N`` a bound of the true tail.

    The tail bound uses that the true coefficients of Table 1 have non-increasing ratios ``a_{N+1}/a_N <= 1``
    (checked on the expansion): ``R_N(t) <= a_{N+1}|t|^{N+1}/(1 - |t|)``.
    """
    printed = theory.coefficient_values(kernel, n_max, "printed")
    derived = theory.coefficient_values(kernel, n_max + 1, "derived")
    ratios = derived[1:] / derived[:-1]
    if (ratios[1:] > 1 + 1e-15).any():
        raise RuntimeError(f"{kernel}: coefficient ratios exceed 1; the tail bound does not apply")
    t = np.array(PARTIAL_SUM_T)
    partial = np.polyval(printed[::-1], t)
    f = kernel_values(kernel, t)
    tail = derived[-1] * np.abs(t) ** (n_max + 1) / (1 - np.abs(t))
    return np.maximum(np.abs(partial - f) - tail, 0.0) / np.abs(f)


def _coef_cell(kernel: str, ctx: CellContext) -> Evidence:
    n_max, route = ctx.params["N_max"], ctx.params["route"]
    if route == "exact":
        errors, undefined = _printed_relative_errors(kernel, n_max)
        worst = int(np.argmax(errors))
        extra = dict(undefined_N=undefined, worst_N=worst,
                     printed=str(theory.printed_coefficients(kernel, n_max)[worst]),
                     derived=str(theory.derived_coefficients(kernel, n_max)[worst]),
                     mismatched_N=[int(i) for i in np.flatnonzero(errors > 0)][:20])
        return _exact(errors, ctx, extra)
    if route == "cauchy":
        errors = _cauchy_relative_errors(kernel, n_max, ctx.params["rho"])
        return _exact(errors, ctx, dict(worst_N=int(np.argmax(errors)), rho=ctx.params["rho"]))
    violations = _partial_sum_violations(kernel, n_max)
    return _exact(violations, ctx, dict(t=list(PARTIAL_SUM_T), violation=violations.tolist()))


#: Contour radii of the numeric route (register: 1 for the entire kernels, 0.5 and 0.9 for R_f = 1).
CAUCHY_RADII = {"exp": (1.0,), "trigh": (1.0,), "inv": (0.5, 0.9), "log": (0.5, 0.9), "sqrt": (0.5, 0.9)}
PRINTED_FORMULAS = {"exp": "1/N!", "inv": "1", "log": "1/min(1, N)", "trigh": "1/N!", "sqrt": "max(1, 2N - 3)/(2^N N!)"}


def _coef_claim(kernel: str) -> Claim:
    expression = MACLAURIN_KERNELS[kernel].expression
    radii = list(CAUCHY_RADII[kernel])
    return Claim(
        id=f"macformer.table1.coef_{kernel}", paper="macformer", source=f"Table 1, row {kernel}",
        statement=f"For every integer N >= 0 the N-th Maclaurin coefficient of f(t) = {expression} equals "
                  f"a_N = {PRINTED_FORMULAS[kernel]}.",
        kind="identity", hypotheses="N ∈ ℕ; the series about t = 0" + ("" if kernel in ("exp", "trigh") else
                                                                          " (|t| < 1)"),
        tolerance=1e-12, units="relative difference of a_N (an undefined printed value counts as 1)",
        cell=functools.partial(_coef_cell, kernel),
        grid={"smoke": dict(route=["exact", "cauchy", "partial_sum"], N_max=[12], rho=radii[:1]),
              "quick": dict(route=["exact", "cauchy", "partial_sum"], N_max=[40], rho=radii),
              "full": dict(route=["exact", "cauchy", "partial_sum"], N_max=[40, 60], rho=radii)},
        where=lambda p, v: p["route"] == "cauchy" or p["rho"] == radii[0],
        plot_x="route",
        notes="Routes: exact (sympy series of the printed f, rationals, against the printed formula evaluated "
              "exactly), cauchy (trapezoidal rule for Cauchy's integral on |t| = rho in mpmath), partial_sum "
              "(printed partial sums against f at t in " + str(PARTIAL_SUM_T) + ", beyond the true tail bound).",
    )


COEF_CLAIMS = [_coef_claim(k) for k in KERNEL_NAMES]


def _sign_margin(values) -> float:
    """``min sign(a_N)``: 1 if all positive, 0 if some vanish, -1 if some is negative."""
    return float(min(np.sign(float(v)) for v in values))


def _nonnegative_cell(ctx: CellContext) -> Evidence:
    coefficients = theory.derived_coefficients(ctx.params["kernel"], ctx.params["N_max"])
    margin = _sign_margin(coefficients)
    negative = [n for n, c in enumerate(coefficients) if c < 0]
    return margin_evidence(margin, tolerance=ctx.tolerance, extra=dict(negative_N=negative[:20]))


def _nonnegative_search(ctx: CellContext) -> Evidence:
    """Beyond the expansion: the CAS's general term at large N (``N ∈ [N_max + 1, 10^6]``), searched for a sign."""
    kernel = KERNEL_NAMES[(ctx.restart or 0) % len(KERNEL_NAMES)]
    sign = theory.general_term_sign(kernel)
    start = per_tier({"smoke": 41, "quick": 201, "full": 201}, ctx.tier)
    res = minimize_margin(lambda x: sign(int(x[0])), [(start, 1e6)], rng=ctx.rng,
                          restart=(ctx.restart or 0) // len(KERNEL_NAMES), integer=[True], maxiter=100)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(kernel=kernel, N=int(res.x[0])))


NONNEGATIVE = Claim(
    id="macformer.table1.nonnegative_coefficients", paper="macformer", source="Table 1 caption; Definition 3",
    statement="Each of the five printed kernels f has Maclaurin coefficients that are all >= 0.",
    kind="inequality", hypotheses="none; coefficients derived from the printed f (not the printed a_N)",
    tolerance=0.5, units="sign margin: min_N sign(a_N) (a negative coefficient violates by 1)",
    cell=_nonnegative_cell, search=_nonnegative_search, universal=True,
    grid={"smoke": dict(kernel=list(KERNEL_NAMES), N_max=[40]), "quick": dict(kernel=list(KERNEL_NAMES), N_max=[200]),
          "full": dict(kernel=list(KERNEL_NAMES), N_max=[200])},
    restarts={"smoke": 5, "quick": 10, "full": 25}, plot_x="kernel",
    notes="Grid cells: exact rationals from sympy's expansion up to N_max. Search: the general term that sympy's "
          "formal power series (fps) gives, evaluated in mpmath at integers up to 10^6 (restart r scans kernel r mod "
          "5).",
)


# ================================================================= pre-SBN: domain and unit ball

#: Step-2 norm readings (``fro_tensor``: Frobenius over the whole tensor).
NORMS = {"row": ("row", "matrix"), "fro": ("fro", "matrix"), "fro_tensor": ("fro", "tensor"),
         "spec": ("spec", "matrix")}
PRESBN_READINGS = _readings(norm=list(NORMS), bn_stats=list(BN_STATS), var=list(VAR_ESTIMATORS))

#: Raw inputs of the pre-SBN sweeps (register table1.domain_ppsbn).
RAW_INPUTS = ("gaussian", "student1", "student2", "low_rank", "constant_cols", "duplicated", "same", "offset_scale")

#: (n, d, B, H, input) cases per tier: the quick/smoke cases cover the boundary values (n = 1, d = 1), heavy tails,
#: degenerate inputs and huge offsets; full is the register's product.
PRESBN_CASES = {
    "smoke": [(2, 1, 1, 1, "gaussian"), (8, 2, 1, 1, "constant_cols")],
    "quick": [(8, 16, 1, 1, "gaussian"), (64, 64, 4, 2, "gaussian"), (2, 1, 1, 1, "gaussian"),
              (1, 4, 4, 2, "gaussian"), (16, 4, 1, 1, "student1"), (8, 2, 1, 1, "constant_cols"),
              (8, 16, 1, 1, "low_rank"), (8, 16, 1, 1, "offset_scale")],
    "full": [(n, d, b, h, kind) for n in (1, 2, 3, 8, 200, 1000, 4000) for d in (1, 2, 4, 16, 64, 128)
             for b, h in ((1, 1), (16, 8)) for kind in RAW_INPUTS],
}


def _raw(kind: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    b, h, n, d = shape
    if kind == "student1":
        return rng.standard_t(1, size=shape)
    if kind == "student2":
        return rng.standard_t(2, size=shape)
    if kind == "low_rank":
        return rng.standard_normal((b, h, n, 1)) * rng.standard_normal((b, h, 1, d))
    if kind == "constant_cols":
        return np.broadcast_to(rng.standard_normal((b, h, 1, d)), shape).copy()
    if kind == "duplicated":
        return np.broadcast_to(rng.standard_normal((b, h, 1, d)), shape).copy()
    if kind == "offset_scale":
        return 10.0 ** rng.choice([-6, 6]) * rng.standard_normal(shape) + 10.0 ** rng.choice([-6, 6])
    return rng.standard_normal(shape)


def _raw_pair(kind: str, rng: np.random.Generator, shape: tuple[int, ...]):
    q = _raw("gaussian" if kind == "same" else kind, rng, shape)
    return (q, q.copy()) if kind == "same" else (q, _raw(kind, rng, shape))


def _presbn_outputs(ctx: CellContext, q: np.ndarray, k: np.ndarray):
    reading = PRESBN_READINGS[ctx.variant]
    norm_reading, scope = NORMS[reading["norm"]]
    transform = ctx.impl("presbn", presbn)
    return _quiet(transform, q, k, eps=1e-12, bn_stats=reading["bn_stats"], var_estimator=reading["var"],
                  norm_reading=norm_reading, norm_scope=scope)


def _kernel_arguments(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``x_ai = q_a·k_i/√d`` for every ``(b, h)`` matrix."""
    with np.errstate(all="ignore"):
        return q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])


def _domain_score(out) -> tuple[float, dict]:
    """``max x_ai - 1`` (``>= 0`` violates ``x < 1``; an undefined argument counts as 1), with diagnostics."""
    x = _kernel_arguments(out.q, out.k)
    finite = np.isfinite(x)
    largest = float(np.max(np.where(finite, x, -np.inf)))
    extra = dict(max_x=largest, max_abs_x=float(np.max(np.where(finite, np.abs(x), 0.0))),
                 nonfinite=int((~finite).sum()))
    return (1.0 if not finite.all() else largest - 1.0), extra


def _domain_violation(out) -> tuple[float, dict]:
    """Indicator of ``x_ai >= 1`` or undefined for some argument (the inequality is strict)."""
    score, extra = _domain_score(out)
    return float(score >= 0.0), extra


def _largest_norm(out, ball: str) -> float:
    norms = np.concatenate([matrix_norm(x, ball).ravel() for x in (out.q, out.k)])
    return float(norms.max()) if np.isfinite(norms).all() else math.inf


def _ball_score(out) -> tuple[float, dict]:
    """``max ‖X^SBN‖ - 1`` under the matched ball (the step-2 norm); an undefined output counts as 1."""
    worst = _largest_norm(out, out.norm_reading)
    return (worst - 1.0 if math.isfinite(worst) else 1.0), {}


def _ball_violation(out) -> tuple[float, dict]:
    """:func:`_ball_score` with the 3×3 table of the largest norms under every ball reading."""
    table = {ball: _largest_norm(out, ball) for ball in ("row", "fro", "spec")}
    return _ball_score(out)[0], dict(norms=table, nonfinite=out.n_nonfinite)


def _presbn_cell(violation: Callable, ctx: CellContext) -> Evidence:
    n, d, b, h, kind = ctx.params["case"]
    value, extra = violation(_presbn_outputs(ctx, *_raw_pair(kind, ctx.rng, (b, h, n, d))))
    return _exact([value], ctx, extra)


def _presbn_search(score: Callable, violation: Callable, ctx: CellContext) -> Evidence:
    """Adversarial search over raw ``Q, K`` (entries in ``[-5, 5]``) of a small shape (restart ``r``: shape
    ``r mod 4`` of (2,1), (2,2), (3,2), (1,3)) maximising the continuous ``score``; judged by ``violation``."""
    n, d = [(2, 1), (2, 2), (3, 2), (1, 3)][(ctx.restart or 0) % 4]

    def outputs(z):
        return _presbn_outputs(ctx, z[: n * d].reshape(1, 1, n, d), z[n * d:].reshape(1, 1, n, d))

    res = minimize_margin(lambda z: -score(outputs(z))[0], [(-5.0, 5.0)] * (2 * n * d), rng=ctx.rng,
                          restart=(ctx.restart or 0) // 4, maxiter=25)
    value, extra = violation(outputs(res.x))
    return _exact([value], ctx, dict(extra, n=n, d=d, raw=res.x.tolist()))


PRESBN_GRID = {tier: dict(case=cases) for tier, cases in PRESBN_CASES.items()}
PRESBN_NOTES = {name: f"step 2 by the {r['norm']} norm, {r['bn_stats']} statistics, {r['var']} variance"
                for name, r in PRESBN_READINGS.items()}

DOMAIN_PPSBN = Claim(
    id="macformer.table1.domain_ppsbn", paper="macformer", source="paragraph after Table 1; Pre-post SBN section",
    statement="After pre-SBN (Algorithm 1 steps 1-2), every kernel argument x_ai = q^SBN_a·k^SBN_i/√d satisfies "
              "x_ai < 1, so the inv, log and sqrt kernels are defined.",
    kind="inequality",
    hypotheses="no assumption on the raw Q and K; ε = 1e-12 > 0; any n and d (n = 1 and d = 1 included)",
    tolerance=0.5, units="indicator: some x_ai >= 1 or undefined (nan)",
    cell=functools.partial(_presbn_cell, _domain_violation),
    search=functools.partial(_presbn_search, _domain_score, _domain_violation), universal=True,
    grid=PRESBN_GRID, variants=tuple(PRESBN_READINGS), variant_notes=PRESBN_NOTES,
    restarts={"smoke": 1, "quick": 1, "full": 8}, roles=("presbn",), plot_x="case",
    notes="Cases (n, d, B, H, raw input) cover n = 1, d = 1, heavy tails, constant columns, low rank, Q = K and "
          "offsets/scales of 1e±6; max |x_ai| and the nan count are in each cell's extra. The search maximises "
          "max x_ai over raw inputs of small shapes.",
)

PRESBN_L2_BALL = Claim(
    id="macformer.alg1.presbn_l2_ball", paper="macformer", source="Algorithm 1 steps 1-2 and the paragraph after it",
    statement="Pre-SBN puts its outputs in the unit ball: Q^SBN ∈ ℓ2(0,1) and K^SBN ∈ ℓ2(0,1).",
    kind="inequality", hypotheses="any input; ε = 1e-12 > 0; the ball of the same norm as step 2 (matched pairing)",
    tolerance=1e-12, units="norm above 1 (an undefined output counts as 1)",
    cell=functools.partial(_presbn_cell, _ball_violation),
    search=functools.partial(_presbn_search, _ball_score, _ball_violation), universal=True,
    grid=PRESBN_GRID, variants=tuple(PRESBN_READINGS), variant_notes=PRESBN_NOTES,
    restarts={"smoke": 1, "quick": 1, "full": 8}, roles=("presbn",), plot_x="case",
    notes="Matched pairings decide (a row-normalised matrix has row norms 1, a Frobenius-normalised one Frobenius "
          "norm 1, ...). Each cell's extra holds the largest norm under all three ball readings (the 3×3 table: "
          "e.g. row-normalised outputs have Frobenius norm √n, outside the Frobenius ball for n >= 2).",
)

# ============================================================== Definition 2 and the RMFA display

MASK_KINDS = ("none", "padding", "causal", "general")


def _scored_inputs(rng: np.random.Generator, n: int, d: int, dv: int, score: float):
    """``Q, K, V`` with unit rows scaled so that ``|q·k|/√d`` reaches about ``score``."""
    scale = math.sqrt(score) * d**0.25
    return _unit_rows(rng, n, d) * scale, _unit_rows(rng, n, d) * scale, rng.standard_normal((n, dv))


def _def2_cell(ctx: CellContext) -> Evidence:
    n, d = ctx.params["n"], ctx.params["d"]
    q, k, v = _scored_inputs(ctx.rng, n, d, 4, ctx.params["score"])
    keep = _mask(ctx.params["mask"], n, ctx.rng)
    attention = ctx.impl("kernelized_attention", kernelized_attention)
    kernelized = attention(q, k, v, "exp", mask=keep)
    literal = _quiet(attention, q, k, v, "exp", mask=keep, mask_fill=ctx.variant, on_nonfinite="propagate")
    reference = softmax_attention(q, k, v, mask=keep)
    scale = float(np.abs(v).max())
    errors = np.concatenate([_capped_relative(kernelized, reference, scale).ravel(),
                             _capped_relative(literal, reference, scale).ravel()])
    return _exact(errors, ctx, dict(max_score=float(np.abs(q @ k.T).max() / math.sqrt(d))))


DEF2_EXP_SOFTMAX = Claim(
    id="macformer.def2.exp_equals_softmax", paper="macformer", source="Definitions 1-2; the RMFA display",
    statement="With f = exp, kernelized attention equals softmax attention: attn_K(Q,K,V) = Softmax(QKᵀ/√d ⊙ M)V, "
              "with or without a mask.",
    kind="identity", hypotheses="none (every query keeps at least one key)",
    tolerance=1e-12, units="max |difference| / max |V| (non-finite counts as 1)",
    cell=_def2_cell,
    grid={"smoke": dict(n=[2, 16], d=[1, 16], mask=list(MASK_KINDS), score=[1.0, 50.0]),
          "quick": dict(n=[1, 2, 16, 300], d=[1, 64], mask=list(MASK_KINDS), score=[1.0, 50.0]),
          "full": dict(n=[1, 2, 16, 1000, 4000], d=[1, 16, 64], mask=list(MASK_KINDS), score=[1.0, 50.0])},
    variants=MASK_FILLS,
    variant_notes={"additive": "S + M with M ∈ {0, -inf}", "neg_inf": "masked fill with -inf",
                   "neg_1e9": "masked fill with -1e9", "dtype_min": "masked fill with the dtype minimum"},
    where=lambda p, v: not (p["n"] == 1 and p["mask"] != "none"),
    roles=("kernelized_attention",), plot_x="n",
    notes="Both the M' form (masked weights 0) and Definition 1's literal masked-fill form of exp attention are "
          "compared with rfkit.estimators.softmax_attention (log-sum-exp, -inf masking); scores up to |x| = 50.",
)


def _mask_conversion_cell(ctx: CellContext) -> Evidence:
    n, kernel = ctx.params["n"], ctx.params["kernel"]
    d = 8
    if ctx.params["inputs"] == "presbn":
        out = presbn(ctx.rng.standard_normal((n, d)), ctx.rng.standard_normal((n, d)), eps=1e-12)
        q, k = out.q, out.k
    else:
        q, k = _ball_matrix(ctx.rng, n, d, "row", "interior"), _ball_matrix(ctx.rng, n, d, "row", "interior")
    v = ctx.rng.standard_normal((n, 3))
    keep = _mask(ctx.params["mask"], n, ctx.rng)
    attention = ctx.impl("kernelized_attention", kernelized_attention)
    filled = _quiet(attention, q, k, v, kernel, mask=keep, mask_fill=ctx.variant, on_nonfinite="propagate")
    multiplied = attention(q, k, v, kernel, mask=keep)
    errors = _capped_relative(filled, multiplied, float(np.abs(v).max()))
    return _exact(errors, ctx, dict(nonfinite=int((~np.isfinite(filled)).sum())))


MASK_CONVERSION = Claim(
    id="macformer.eq_rmfa.mask_conversion", paper="macformer", source="the RMFA display, first to second line",
    statement="For every query a, with S = QKᵀ/√d: Σ_i f(S_ai ⊙ M_ai) V_i / Σ_j f(S_aj ⊙ M_aj) = "
              "Σ_i f(S_ai) M'_ai V_i / Σ_j f(S_aj) M'_aj, where ⊙ M is the masked fill and M' = 1[M >= 0].",
    kind="identity", hypotheses="any mask M; the kernels of Table 1 (closed forms as printed)",
    tolerance=1e-12, units="max |difference| / max |V| (non-finite counts as 1)",
    cell=_mask_conversion_cell,
    grid={"smoke": dict(kernel=list(KERNEL_NAMES), mask=["causal"], inputs=["presbn"], n=[16]),
          "quick": dict(kernel=list(KERNEL_NAMES), mask=["padding", "causal", "general"],
                        inputs=["presbn", "unit_ball"], n=[2, 16]),
          "full": dict(kernel=list(KERNEL_NAMES), mask=["padding", "causal", "general"],
                       inputs=["presbn", "unit_ball"], n=[2, 16, 256])},
    variants=MASK_FILLS, variant_notes=DEF2_EXP_SOFTMAX.variant_notes,
    roles=("kernelized_attention",), plot_x="kernel",
    notes="The filled scores go through the printed closed forms; nan/inf outputs are counted in extra.",
)


def _factorization_inputs(ctx: CellContext):
    n, d, b = ctx.params["n"], ctx.params["d"], 2 if ctx.params["sharing"] != "shared" else 1
    q = _ball_matrix(ctx.rng, n, d, "row", "interior")[None, None] * np.ones((b, 2, 1, 1))
    k = _ball_matrix(ctx.rng, n, d, "row", "interior")[None, None] * np.ones((b, 2, 1, 1))
    return q, k, ctx.rng.standard_normal((b, 2, n, 3))


def _reference_terms(phi_q: np.ndarray, phi_k: np.ndarray, v: np.ndarray, keep: np.ndarray):
    """Quadratic-form numerator/denominator Σ_i [Φ(q̃_a)·Φ(k̃_i) M'_ai][V_i, 1] and their scales Σ|terms|."""
    scores = (phi_q @ np.swapaxes(phi_k, -1, -2)) * keep
    ones = np.concatenate([v, np.ones(v.shape[:-1] + (1,))], axis=-1)
    return scores @ ones, np.abs(scores) @ np.abs(ones)


def _factorization_cell(ctx: CellContext) -> Evidence:
    q, k, v = _factorization_inputs(ctx)
    n, d, sharing = ctx.params["n"], ctx.params["d"], ctx.params["sharing"]
    groups = {"shared": 1, "per_head": 2, "per_batch_head": q.shape[0] * 2}[sharing]
    draws = [draw_rmf(ctx.params["D"], d, rng=ctx.rng, p=ctx.params["p"]) for _ in range(groups)]
    route = ctx.params["mask"]
    keep = np.ones((n, n), dtype=bool) if route == "none" else _mask(route, n, ctx.rng)
    options = dict(kernel=ctx.params["kernel"], draw=draws if groups > 1 else draws[0], draw_sharing=sharing,
                   return_details=True)
    if route == "padding":
        options["key_padding"] = keep[0]
    elif route == "causal":
        options["causal"] = True
    elif route == "general":
        options["mask"] = keep
    result = _quiet(ctx.impl("rmfa", rmfa), q, k, v, **options)
    scale = d**-0.25
    phi = [_grouped(x * scale, draws, sharing, ctx.params["kernel"]) for x in (q, k)]
    want, magnitude = _reference_terms(phi[0], phi[1], v, keep)
    got = np.concatenate([result.numerator, result.denominator[..., None]], axis=-1)
    errors = _capped_relative(got, want, np.maximum(magnitude, np.finfo(float).tiny))
    return _exact(errors, ctx, dict(width=result.width, nonpositive=result.n_nonpositive))


def _grouped(x: np.ndarray, draws: list[RMFDraw], sharing: str, kernel: str) -> np.ndarray:
    """Features with one draw per group, computed directly from Definition 3 (independent of rmfa's grouping)."""
    if sharing == "shared":
        return rmf_features(x, draws[0], kernel)
    if sharing == "per_head":
        return np.stack([rmf_features(x[:, h], draws[h], kernel) for h in range(x.shape[1])], axis=1)
    b, h = x.shape[:2]
    return np.stack([np.stack([rmf_features(x[i, j], draws[i * h + j], kernel) for j in range(h)])
                     for i in range(b)])


FACTORIZATION = Claim(
    id="macformer.eq_rmfa.factorization", paper="macformer", source="the RMFA display; Figure 2b",
    statement="With one RMF draw, Σ_i [Φ(q̃_a)·Φ(k̃_i) M'_ai] V_i / Σ_j [Φ(q̃_a)·Φ(k̃_j) M'_aj] = "
              "Φ(q̃_a)ᵀ Σ_i [M'_ai Φ(k̃_i) ⊗ V_i] / Φ(q̃_a)ᵀ Σ_j M'_aj Φ(k̃_j): the factored forms (no mask, key "
              "padding, causal prefix sums) compute exactly the quadratic form.",
    kind="identity", hypotheses="none",
    tolerance=1e-10, units="max |difference| / Σ|terms| of numerators and denominators (float64)",
    cell=_factorization_cell,
    grid={"smoke": dict(mask=list(MASK_KINDS), n=[17], D=[8], d=[4], p=[2.0], kernel=["exp"], sharing=["shared"]),
          "quick": dict(mask=list(MASK_KINDS), n=[1, 17, 256], D=[1, 128], d=[1, 4], p=[1.5, 4.0],
                        kernel=["exp", "sqrt"], sharing=["shared", "per_head"]),
          "full": dict(mask=list(MASK_KINDS), n=[1, 2, 17, 256, 2048], D=[1, 8, 128, 1024], d=[1, 4, 64],
                       p=[1.5, 2.0, 4.0], kernel=list(KERNEL_NAMES),
                       sharing=["shared", "per_head", "per_batch_head"])},
    where=lambda p, v: not (p["n"] == 1 and p["mask"] in ("padding", "general"))
    and not (p["n"] >= 256 and p["D"] == 1),
    roles=("rmfa",), plot_x="n",
    notes="Numerators and denominators are compared separately (a ratio amplifies round-off where the denominator "
          "is small). Inputs are (B, 2, n, d) so that draw sharing is exercised. Numba and torch backends are not run.",
)

CLAIMS = [*COEF_CLAIMS, NONNEGATIVE, DOMAIN_PPSBN, PRESBN_L2_BALL, DEF2_EXP_SOFTMAX, MASK_CONVERSION, FACTORIZATION]
