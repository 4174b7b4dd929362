"""Table 1: the kernels' Maclaurin coefficients (printed vs derived) and their non-negativity."""

import functools
import math

import numpy as np

from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS, kernel_values
from rfkit.theory import maclaurin as theory
from rfkit.validation.domain import Choice, Integers
from rfkit.validation.model import CellContext, Claim, per_tier, tiers
from rfkit.validation.search import margin_evidence, minimize_margin
from rfkit.validation.stats import Evidence

from .common import KERNEL_NAMES, _exact

PARTIAL_SUM_T = (-0.9, -0.5, -0.1, 0.05, 0.125, 0.5, 0.9)
#: Contour radii of the numeric route (register: 1 for the entire kernels, 0.5 and 0.9 for R_f = 1).
CAUCHY_RADII = {"exp": (1.0,), "trigh": (1.0,), "inv": (0.5, 0.9), "log": (0.5, 0.9), "sqrt": (0.5, 0.9)}
PRINTED_FORMULAS = {"exp": "1/N!", "inv": "1", "log": "1/min(1, N)", "trigh": "1/N!", "sqrt": "max(1, 2N - 3)/(2^N N!)"}


def _coef_cell(kernel: str, ctx: CellContext) -> Evidence:
    """Cauchy's route works 40 digits beyond the smallest ``a_N ρ^N`` (dividing by ``ρ^N`` amplifies round-off); the
    partial-sum route scores ``max(0, |Σ_{N<=N_max} a_N t^N - f(t)| - R_N(t)) / |f(t)|`` with the true tail bound
    ``R_N(t) <= a_{N+1}|t|^{N+1}/(1 - |t|)`` (true ratios ``a_{N+1}/a_N <= 1``, checked)."""
    n_max, route, rho = ctx.params["N_max"], ctx.params["route"], ctx.params["rho"]
    if route == "exact":
        printed, derived = theory.printed_coefficients(kernel, n_max), theory.derived_coefficients(kernel, n_max)
        errors = np.array([1.0 if c is None else float(abs(c - a) / a) for c, a in zip(printed, derived, strict=True)])
        worst = int(np.argmax(errors))
        return _exact(errors, ctx, dict(undefined_N=[n for n, c in enumerate(printed) if c is None], worst_N=worst,
                                        printed=str(printed[worst]), derived=str(derived[worst]),
                                        mismatched_N=[int(i) for i in np.flatnonzero(errors > 0)][:20]))
    if route == "cauchy":
        import mpmath

        n = np.arange(n_max + 1)
        log10_terms = (MACLAURIN_KERNELS[kernel].log_coefficient(n) + n * math.log(rho)) / math.log(10)
        dps = 40 + int(math.ceil(max(0.0, -float(log10_terms.min()))))
        numeric = theory.cauchy_coefficients(kernel, n_max, rho, dps=dps)
        with mpmath.workdps(dps):
            errors = np.array([1.0 if c is None else float(abs(mpmath.mpf(c.numerator) / c.denominator - a) / abs(a))
                               for c, a in zip(theory.printed_coefficients(kernel, n_max), numeric, strict=True)])
        return _exact(errors, ctx, dict(worst_N=int(np.argmax(errors)), rho=rho))
    printed = theory.coefficient_values(kernel, n_max, "printed")
    derived = theory.coefficient_values(kernel, n_max + 1, "derived")
    if (derived[2:] / derived[1:-1] > 1 + 1e-15).any():
        raise RuntimeError(f"{kernel}: coefficient ratios exceed 1; the tail bound does not apply")
    t = np.array(PARTIAL_SUM_T)
    f = kernel_values(kernel, t)
    tail = derived[-1] * np.abs(t) ** (n_max + 1) / (1 - np.abs(t))
    violations = np.maximum(np.abs(np.polyval(printed[::-1], t) - f) - tail, 0.0) / np.abs(f)
    return _exact(violations, ctx, dict(t=list(PARTIAL_SUM_T), violation=violations.tolist()))


def _coef_claim(kernel: str) -> Claim:
    radii = list(CAUCHY_RADII[kernel])
    return Claim(
        id=f"macformer.table1.coef_{kernel}", source=f"Table 1, row {kernel}",
        statement=f"For every integer N >= 0 the N-th Maclaurin coefficient of f(t) = "
                  f"{MACLAURIN_KERNELS[kernel].expression} equals a_N = {PRINTED_FORMULAS[kernel]}.",
        kind="identity", tolerance=1e-12, units="relative difference of a_N (an undefined printed value counts as 1)",
        domain=dict(N=Integers("for every integer N >= 0", 0, math.inf, up_to=40, through="N_max",
                               why="the register's sweep N = 0..N_max with N_max >= 40 (60 at the full tier); "
                                   "the printed formula is a closed form in N, checked exactly at each")),
        cell=functools.partial(_coef_cell, kernel), plot_x="route",
        grid=tiers(dict(route=["exact", "cauchy", "partial_sum"], N_max=[40], rho=radii), full=dict(N_max=[40, 60])),
        where=lambda p, v: p["route"] == "cauchy" or p["rho"] == radii[0],
        notes="Routes: exact (sympy series of the printed f, rationals, against the printed formula evaluated "
              "exactly), cauchy (trapezoidal rule for Cauchy's integral on |t| = rho in mpmath), partial_sum "
              "(printed partial sums against f at t in " + str(PARTIAL_SUM_T) + ", beyond the true tail bound).",
    )


COEF_CLAIMS = [_coef_claim(k) for k in KERNEL_NAMES]


def _nonnegative_cell(ctx: CellContext) -> Evidence:
    coefficients = theory.derived_coefficients(ctx.params["kernel"], ctx.params["N_max"])
    return margin_evidence(float(min(np.sign(float(c)) for c in coefficients)), tolerance=ctx.tolerance,
                           extra=dict(negative_N=[n for n, c in enumerate(coefficients) if c < 0][:20]))


def _nonnegative_search(ctx: CellContext) -> Evidence:
    kernel = KERNEL_NAMES[(ctx.restart or 0) % len(KERNEL_NAMES)]
    sign = theory.general_term_sign(kernel)
    start = per_tier({"smoke": 41, "quick": 201, "full": 201}, ctx.tier)
    res = minimize_margin(lambda x: sign(int(x[0])), [(start, 1e6)], rng=ctx.rng,
                          restart=(ctx.restart or 0) // len(KERNEL_NAMES), integer=[True], maxiter=100)
    return margin_evidence(res.margin, tolerance=ctx.tolerance, extra=dict(kernel=kernel, N=int(res.x[0])))


# Budget: sympy expands each printed f to N = 200 once per process (3-6 s, cached); the cells only read signs.
NONNEGATIVE = Claim(
    id="macformer.table1.nonnegative_coefficients", source="Table 1 caption; Definition 3",
    statement="Each of the five printed kernels f has Maclaurin coefficients that are all >= 0.",
    kind="inequality", tolerance=0.5, units="sign margin: min_N sign(a_N) (a negative coefficient violates by 1)",
    domain=dict(kernel=Choice("each of the five printed kernels", tuple(KERNEL_NAMES)),
                N=Integers("all coefficients N >= 0", 0, math.inf, up_to=200, through="N_max",
                           why="exact rationals to N = 200; beyond, the search evaluates the CAS's general term "
                               "at integers up to 10^6")),
    cell=_nonnegative_cell, search=_nonnegative_search, universal=True, plot_x="kernel",
    grid=tiers(dict(kernel=list(KERNEL_NAMES), N_max=[200])), restarts={"smoke": 5, "quick": 10, "full": 25},
    notes="Grid cells: exact rationals from sympy's expansion up to N_max. Search: the general term of sympy's formal "
          "power series (fps), evaluated in mpmath at integers up to 10^6 (restart r scans kernel r mod 5).",
)
