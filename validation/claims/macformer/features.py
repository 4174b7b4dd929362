"""Definition 3: the random Maclaurin feature (RMF) estimate of K(x·y)."""

import math

import numpy as np

from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS, kernel_values
from rfkit.estimators.rmf import RMFDraw, draw_rmf, rmf_features
from rfkit.theory import maclaurin as theory
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.harness import chunks, controlled_pair
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.stats import Evidence, mean_test, required_replicates, undecided

from .common import KERNEL_NAMES, RESOLUTION, _p_range, _replicate_cap

#: The register's readings of "P[N = η] = 1/p^{η+1}" (est.rmf): (n_law, weight).
LAWS = {"geom-importance": ("geom", "importance"), "geom-printed": ("geom", "printed"),
        "defective-printed": ("defective", "printed")}

#: Pairs (‖x‖, ‖y‖, cos): a norm "s*" means s·d^{-1/4} (the range RMFA feeds Φ from unit-ball inputs).
#: ``moderate``: x·y = 0.44, where the printed log coefficients are visibly wrong and the variance is finite;
#: ``boundary*``: ‖x‖‖y‖ = R_f = 1; ``sparse_orthogonal``: the coordinate axes e_1, e_2.
PAIRS = {"scaled": ("0.5*", "0.5*", 0.5), "unit_scaled": ("1*", "1*", 0.9), "moderate": (0.7, 0.7, 0.9),
         "moderate_neg": (0.7, 0.7, -0.9), "sparse_orthogonal": (0.9, 0.9, 0.0), "boundary": (1.0, 1.0, 0.5),
         "boundary_parallel": (1.0, 1.0, 1.0)}
_PAIRS = {**PAIRS, "parallel": ("0.6*", "0.6*", 1.0)}  # with the pair of d = 1 (inside every kernel's region)


def _norms(pair: str, d: int) -> tuple[float, float, float]:
    *norms, cos = _PAIRS[pair]
    return (*(float(s[:-1]) * d**-0.25 if isinstance(s, str) else float(s) for s in norms), cos)


def _pair(pair: str, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The vectors of a pair, in a random plane of R^d (on a line when d = 1: cos = ±1)."""
    nx, ny, cos = _norms(pair, d)
    if pair == "sparse_orthogonal":
        return nx * np.eye(d)[0], ny * np.eye(d)[1]
    return controlled_pair(nx, ny, math.acos(cos), d, rng)


def _kernel_replicates(ctx: CellContext, x, y, kernel: str, num_features: int, replicates: int, p: float,
                       n_law: str, weight: str, coeffs: str) -> np.ndarray:
    """``replicates`` estimates Φ(x)·Φ(y), each from a fresh draw of ``D`` features (blocks of one big draw)."""
    features, out = ctx.impl("rmf_features", rmf_features), []
    for n in chunks(replicates, max(1, 400_000 // num_features)):
        draw = draw_rmf(n * num_features, x.size, rng=ctx.rng, p=p, n_law=n_law)
        phi = np.asarray(features(np.stack([x, y]), draw, kernel, coeffs=coeffs, weight=weight))
        phi = phi.reshape(2, n, num_features) * math.sqrt(n)
        out.append(np.einsum("rt,rt->r", phi[0], phi[1]))
    return np.concatenate(out)


def _stratified_replicates(ctx: CellContext, x, y, kernel: str, replicates: int, log_mass, p: float, n_law: str,
                           weight: str, coeffs: str) -> np.ndarray:
    """Draws of ``Y = Σ_{n <= n_max} π_n Z_n``, ``Z_n`` one feature product of degree ``n``, ``log π = log_mass``."""
    features, total = ctx.impl("rmf_features", rmf_features), np.zeros(replicates)
    for n, log_pi in enumerate(log_mass):
        signs = (ctx.rng.integers(0, 2, size=(replicates * n, x.size), dtype=np.int8) * 2 - 1).astype(np.int8)
        draw = RMFDraw(np.full(replicates, n), np.arange(replicates) * n, signs, p, n_law)
        phi = np.asarray(features(np.stack([x, y]), draw, kernel, coeffs=coeffs, weight=weight))
        total += math.exp(log_pi) * replicates * phi[0] * phi[1]
    return total


def _rmf_mean_evidence(ctx: CellContext, x, y, kernel: str, num_features: int, p: float, n_law: str, weight: str,
                       coeffs: str, target: float, **test) -> Evidence:
    test, law = test or ctx.test, dict(p=p, n_law=n_law, weight=weight, coeffs=coeffs)
    mom = theory.rmf_moments(x, y, kernel, num_features=num_features, **law)
    extra = dict(t=float(x @ y), target=target, series_value=mom.mean, exact_sd=mom.sd)
    if mom.abs_mean_finite is not True:
        return undecided("E|Φ(x)·Φ(y)| is infinite or undecided here: the expectation may not exist", extra=extra)
    plain = math.isfinite(mom.sd) and math.isfinite(mom.skewness)
    strata = mom if plain else theory.stratified_moments(x, y, kernel, relative_tail=1e-4, **law)
    need = required_replicates(strata.sd / abs(target), alpha=test["alpha"], tolerance=test["tolerance"],
                               skewness=strata.skewness, resolution=RESOLUTION)
    replicates, short = _replicate_cap(ctx, need, share=1 if plain else 4)
    extra.update(route="plain" if plain else "stratified", replicates_needed=need, capped=short,
                 **({} if plain else dict(n_max=strata.n_max, tail=strata.tail)))
    estimates = (_kernel_replicates(ctx, x, y, kernel, num_features, replicates, **law) if plain else
                 _stratified_replicates(ctx, x, y, kernel, replicates, strata.log_mass, **law) + strata.tail)
    return mean_test(estimates, target, scale=abs(target), sd=strata.sd, extra=extra, **test)


def _rmf_unbiased_cell(ctx: CellContext) -> Evidence:
    (law, coeffs), kernel = ctx.variant.split("|"), ctx.params["kernel"]
    x, y = _pair(ctx.params["pair"], ctx.params["d"], ctx.rng)
    return _rmf_mean_evidence(ctx, x, y, kernel, ctx.params["D"], ctx.params["p"], *LAWS[law], coeffs,
                              float(kernel_values(kernel, float(x @ y))))


def _rmf_where(p: dict, variant: str) -> bool:
    """f(x·y) finite (the statement's points); the defective law only where it is a law (p >= 2); D > 1 at p = 2
    (the 1/D normalisation); the pairs on a line (cos = ±1) at d = 1, at p = 2, and the others at d > 1."""
    nx, ny, cos = _norms(p["pair"], p["d"])
    kernel, t = p["kernel"], nx * ny * cos
    finite = bool(MACLAURIN_KERNELS[kernel].in_domain(np.array(t))) and math.isfinite(float(kernel_values(kernel, t)))
    return (finite and (p["D"] > 1) == (p["p"] == 2.0) and (p["d"] == 1) == (abs(cos) == 1)
            and (p["d"] > 1 or p["p"] == 2.0) and (not variant.startswith("defective") or p["p"] >= 2))


DEFECTIVE_P = Range("p >= 2, where the printed P[N = η] = 1/p^{η+1} (total mass 1/(p - 1)) is a law", 2.0,
                    up_to=(None, 4.0), why="as for p > 1")

RMF_UNBIASED = Claim(
    id="macformer.def3.rmf_unbiased", source="Definition 3 and the paragraph after it",
    statement="E[Φ(x)·Φ(y)] = K(x·y) = f(x·y) for the RMF map Φ of Definition 3 with the kernel's Maclaurin "
              "coefficients a_N (Kar & Karnick 2012, Lemma 7).",
    kind="expectation", tolerance=0.05, units="relative bias",
    domain=dict(
        kernel=Choice("f with non-negative Maclaurin coefficients: the kernels of Table 1", KERNEL_NAMES),
        p=_p_range("p > 1", "p enters through the degree law π_N and the weights p^{N+1}; the register sweeps p up "
                            "to 8 (full tier)"),
        D=Integers("Φ(x) = sqrt(1/D)[φ_1(x), ..., φ_D(x)], D >= 1", 1, points=(1,), up_to=8,
                   why="Φ(x)·Φ(y) is the mean of D iid feature products, so its expectation is that of D = 1; "
                       "D = 8 checks the 1/D normalisation (256 at the full tier)"),
        d=Integers("x, y ∈ R^d", 1, points=(1,), up_to=4,
                   why="E[⟨ω,x⟩⟨ω,y⟩] = x·y for Rademacher ω in every d, so d enters the expectation only through "
                       "x·y; d up to 64 at the full tier"),
        pair=Choice("points inside ‖x‖‖y‖ < R_f (norms s·d^{-1/4} and absolute) and on its boundary "
                    "‖x‖‖y‖ = R_f", ("scaled", "moderate", "boundary"))),
    readings={f"{law}|{coeffs}": Reading(f"N law and weight {law}, coefficients {coeffs}",
                                         {"p": DEFECTIVE_P} if law.startswith("defective") else {})
              for law in LAWS for coeffs in ("derived", "printed")},
    cell=_rmf_unbiased_cell, where=_rmf_where,
    grid=tiers(dict(kernel=list(KERNEL_NAMES), p=[1.5, 2.0, 4.0], D=[1, 8], d=[1, 4],
                    pair=["scaled", "moderate", "parallel"]),
               smoke=dict(kernel=["exp", "log"], p=[1.5, 2.0], D=[1], d=[4], pair=["scaled", "moderate"]),
               full=dict(p=[1.04, 1.1, 1.5, 2.0, 3.0, 4.0, 8.0], D=[1, 4, 16, 256], d=[1, 2, 4, 16, 64],
                         pair=list(_PAIRS))),
    replicates=tiers(400_000, smoke=60_000, full=4_000_000), roles=("rmf_features",), plot_x="p",
    notes="Where the plain estimate has an infinite variance (or third moment) the cell averages the degree-"
          "stratified estimate Σ_n π_n Z_n (degree fixed, all moments finite) plus the exact series tail; cells "
          "where E|Z| = ∞ are undecidable. Each cell's extra has f(x·y) and the coefficient source's series value.",
)
