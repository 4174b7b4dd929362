"""Definition 3: unbiasedness of the random Maclaurin feature kernel estimate."""

from __future__ import annotations

import math

import numpy as np

from rfkit.estimators.maclaurin_kernels import MACLAURIN_KERNELS, kernel_values
from rfkit.estimators.rmf import RMFDraw, draw_rmf, rmf_features
from rfkit.theory import maclaurin as theory
from rfkit.validation.model import CellContext, Claim
from rfkit.validation.stats import (
    Evidence,
    flagged,
    mean_test,
    required_replicates,
)

from .common import KERNEL_NAMES, RESOLUTION, _readings, _replicate_cap

#: (n_law, weight) pairs of the register (est.rmf).
LAWS = {"geom-importance": ("geom", "importance"), "geom-printed": ("geom", "printed"),
        "defective-printed": ("defective", "printed")}
RMF_READINGS = _readings(law=list(LAWS), coeffs=["derived", "printed"])


def _rmf_reading(variant: str) -> tuple[str, str, str]:
    reading = RMF_READINGS[variant]
    return (*LAWS[reading["law"]], reading["coeffs"])


#: Pairs (‖x‖, ‖y‖, cos) with norms either absolute or in units of d^{-1/4} ("*": the range RMFA produces from
#: unit-ball inputs). ``moderate`` puts x·y = 0.44, where the printed log coefficients are visibly wrong while the
#: variance stays finite; ``boundary`` has ‖x‖‖y‖ = R_f = 1 (full tier).
PAIRS = {"scaled": ("0.5*", "0.5*", 0.5), "unit_scaled": ("1*", "1*", 0.9), "moderate": (0.7, 0.7, 0.9),
         "moderate_neg": (0.7, 0.7, -0.9), "sparse_orthogonal": (0.9, 0.9, 0.0), "boundary": (1.0, 1.0, 0.5),
         "boundary_parallel": (1.0, 1.0, 1.0)}


def _pair_norm(value, d: int) -> float:
    return float(value[:-1]) * d**-0.25 if isinstance(value, str) else float(value)


def _pair_argument(pair: str, d: int) -> float:
    nx, ny, cos = PAIRS[pair]
    return _pair_norm(nx, d) * _pair_norm(ny, d) * cos


def _pair(pair: str, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The vectors of a pair: in a random plane, except ``sparse_orthogonal`` (coordinate axes e_1, e_2)."""
    nx, ny, cos = PAIRS[pair]
    nx, ny = _pair_norm(nx, d), _pair_norm(ny, d)
    if pair == "sparse_orthogonal":
        return nx * np.eye(d)[0], ny * np.eye(d)[1]
    basis, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    return nx * basis[:, 0], ny * (cos * basis[:, 0] + math.sqrt(max(1 - cos * cos, 0.0)) * basis[:, 1])


def _in_kernel_domain(kernel: str, t: float) -> bool:
    return bool(MACLAURIN_KERNELS[kernel].in_domain(np.array(t))) and math.isfinite(
        float(kernel_values(kernel, t)))


def _kernel_replicates(ctx: CellContext, x, y, kernel: str, num_features: int, replicates: int, p: float,
                       n_law: str, weight: str, coeffs: str) -> np.ndarray:
    """``replicates`` estimates ``Φ(x)·Φ(y)`` with fresh draws of ``D`` features each (blocks of one big draw)."""
    features = ctx.impl("rmf_features", rmf_features)
    out = []
    for n in _chunk_sizes(replicates, max(1, 400_000 // num_features)):
        draw = draw_rmf(n * num_features, x.size, rng=ctx.rng, p=p, n_law=n_law)
        phi = np.asarray(features(np.stack([x, y]), draw, kernel, coeffs=coeffs, weight=weight))
        phi = phi.reshape(2, n, num_features) * math.sqrt(n)
        out.append(np.einsum("rt,rt->r", phi[0], phi[1]))
    return np.concatenate(out)


def _chunk_sizes(total: int, size: int):
    while total > 0:
        yield min(size, total)
        total -= size


def _undecidable_mean(ctx: CellContext, reason: str, extra: dict) -> Evidence:
    return flagged(mean_test(np.zeros(2), 0.0, sd=math.inf, **ctx.test, extra=extra), reason)


def _stratified_replicates(ctx: CellContext, x, y, kernel: str, replicates: int, strata: theory.StratifiedMoments,
                           p: float, n_law: str, weight: str, coeffs: str) -> np.ndarray:
    """``replicates`` draws of ``Y = Σ_{n<=n_max} π_n Z_n``: ``Z_n`` one feature of the estimator with its degree
    fixed at ``n`` (an explicit draw: fresh Rademacher vectors), ``π_n`` the law's mass."""
    features = ctx.impl("rmf_features", rmf_features)
    total = np.zeros(replicates)
    for n, log_mass in enumerate(strata.log_mass):
        signs = (ctx.rng.integers(0, 2, size=(replicates * n, x.size), dtype=np.int8) * 2 - 1).astype(np.int8)
        draw = RMFDraw(np.full(replicates, n), np.arange(replicates) * n, signs, p, n_law)
        phi = np.asarray(features(np.stack([x, y]), draw, kernel, coeffs=coeffs, weight=weight))
        total += math.exp(log_mass) * replicates * phi[0] * phi[1]
    return total


def _rmf_mean_evidence(ctx: CellContext, x, y, kernel: str, num_features: int, p: float, n_law: str, weight: str,
                       coeffs: str, target: float, **test) -> Evidence:
    """Mean test of ``Φ(x)·Φ(y)`` against ``target``: plain Monte Carlo where the estimate's variance and skewness are
    finite (exact moments), else the degree-stratified estimate (finite moments) plus the exact series tail."""
    test = test or ctx.test
    mom = theory.rmf_moments(x, y, kernel, p=p, n_law=n_law, weight=weight, coeffs=coeffs,
                             num_features=num_features)
    extra = dict(t=float(x @ y), target=target, series_value=mom.mean, exact_sd=mom.sd)
    if mom.abs_mean_finite is not True:
        return _undecidable_mean(ctx, "E|Φ(x)·Φ(y)| is infinite or undecided here: the expectation may not exist",
                                 extra)
    if math.isfinite(mom.sd) and math.isfinite(mom.skewness):
        need = required_replicates(mom.sd / abs(target), alpha=test["alpha"], tolerance=test["tolerance"],
                                   skewness=mom.skewness, resolution=RESOLUTION)
        replicates, short = _replicate_cap(ctx, need)
        estimates = _kernel_replicates(ctx, x, y, kernel, num_features, replicates, p, n_law, weight, coeffs)
        return mean_test(estimates, target, scale=abs(target), sd=mom.sd,
                         extra=dict(extra, route="plain", replicates_needed=need, capped=short), **test)
    strata = theory.stratified_moments(x, y, kernel, p=p, n_law=n_law, weight=weight, coeffs=coeffs,
                                       relative_tail=1e-4)
    need = required_replicates(strata.sd / abs(target), alpha=test["alpha"], tolerance=test["tolerance"],
                               skewness=strata.skewness, resolution=RESOLUTION)
    replicates, short = _replicate_cap(ctx, need, share=4)
    estimates = _stratified_replicates(ctx, x, y, kernel, replicates, strata, p, n_law, weight, coeffs)
    return mean_test(estimates + strata.tail, target, scale=abs(target), sd=strata.sd,
                     extra=dict(extra, route="stratified", n_max=strata.n_max, tail=strata.tail,
                                replicates_needed=need, capped=short), **test)


def _rmf_unbiased_cell(ctx: CellContext) -> Evidence:
    kernel, p, num_features, d = ctx.params["kernel"], ctx.params["p"], ctx.params["D"], ctx.params["d"]
    n_law, weight, coeffs = _rmf_reading(ctx.variant)
    x, y = _pair(ctx.params["pair"], d, ctx.rng)
    target = float(kernel_values(kernel, float(x @ y)))
    return _rmf_mean_evidence(ctx, x, y, kernel, num_features, p, n_law, weight, coeffs, target)


def _rmf_scope(p: dict, variant: str) -> bool:
    n_law = _rmf_reading(variant)[0]
    return (n_law != "defective" or p["p"] >= 2) and _in_kernel_domain(p["kernel"], _pair_argument(p["pair"],
                                                                                                    p["d"]))


RMF_UNBIASED = Claim(
    id="macformer.def3.rmf_unbiased", paper="macformer", source="Definition 3 and the paragraph after it",
    statement="E[Φ(x)·Φ(y)] = K(x·y) = f(x·y) for the RMF map Φ of Definition 3 with the kernel's Maclaurin "
              "coefficients a_N (Kar & Karnick 2012, Lemma 7).",
    kind="expectation",
    hypotheses="f with non-negative coefficients; p > 1; P[N = η] = 1/p^{η+1} (readings n_law × weight); ω "
               "Rademacher iid; points where f(x·y) is finite, inside and on the boundary ‖x‖‖y‖ = R_f",
    tolerance=0.05, units="relative bias",
    cell=_rmf_unbiased_cell,
    grid={"smoke": dict(kernel=["exp", "log"], p=[1.5, 2.0], D=[1], d=[4], pair=["scaled", "moderate"]),
          # quick: trigh has exp's coefficients (derived.trigh_exp_identity), so its cells would repeat exp's.
          # Heavy (~6 s): cells near divergence need the stratified route and 1e4-1e5 replicates each.
          "quick": dict(kernel=["exp", "inv", "log", "sqrt"], p=[1.5, 2.0, 4.0], D=[1, 8], d=[4],
                        pair=["scaled", "moderate"]),  # p = 2 at D = 8 only (see where)
          "full": dict(kernel=list(KERNEL_NAMES), p=[1.1, 1.5, 2.0, 3.0, 4.0, 8.0], D=[1, 4, 16, 256],
                       d=[1, 2, 4, 16, 64], pair=list(PAIRS))},
    replicates={"smoke": 60_000, "quick": 400_000, "full": 4_000_000},
    variants=tuple(RMF_READINGS),
    variant_notes={name: f"N law and weight {r['law']}, coefficients {r['coeffs']}" for name, r in
                   RMF_READINGS.items()},
    where=lambda p, v: _rmf_scope(p, v) and (p["D"] > 1) == (p["p"] == 2.0),
    roles=("rmf_features",), plot_x="p",
    notes="Replicates are sized from the exact moments (rfkit.theory.maclaurin.rmf_moments). Where the plain "
          "estimate has an infinite variance (or third moment) the cell averages the degree-stratified estimate "
          "Σ_n π_n Z_n (the estimator's features with the degree fixed, all moments finite) plus the exact series "
          "tail beyond its last degree; cells where E|Z| = ∞ (the expectation need not exist) are reported as "
          "undecidable. Each cell's extra has both targets: f(x·y) (the claim) and the series value of the "
          "coefficient source in use. D > 1 is run at p = 2 (the 1/D normalisation).",
)


