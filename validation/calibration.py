r"""Calibration of the verdict statistics by simulation under nulls whose mean is known exactly.

A cell *refutes* when its ``p_value <= alpha`` and *supports* when it carries no flag and its upper
confidence bound on the violation (and its resolution) is at most the tolerance
(:mod:`rfkit.validation.engine`). Both decisions must be wrong with probability at most ``alpha``:

* **false refutation** — the true violation is exactly the tolerance (the edge of the interval null,
  ``E X = prediction·(1 + tolerance)`` with ``scale = prediction``): the rate of ``p_value <= alpha``;
* **false support** — the true violation is ``1.5 × tolerance``: the rate of "supported".

Both directions of the violation are simulated (a skewed law fails on one side only) and the table
reports the worse one. Rates come with exact Clopper–Pearson intervals. The **power** side is the rate
of support when the claim holds exactly (violation 0) and the rate of refutation at ``2×``, ``3×`` and
``5×`` the tolerance, and for :func:`~rfkit.validation.stats.sequential_mean` the replicates a decided
cell used.

Every procedure is called exactly as a claim's cell calls it: two-sided, ``tolerance > 0`` and
``scale = prediction`` (a relative violation); :func:`~rfkit.validation.stats.binomial_test` gets
absolute probabilities. The tolerance is a fixed number of standard errors of the mean at the cell's
size (:func:`tolerance_in_se`), a little more than the width of the confidence sequence, so a true claim
can be supported and every case is informative.

Null laws (:func:`standard_laws`): normal; log-normal ``σ = 1.5`` (skewness 33); Pareto with tail index
2.5 (finite variance, infinite third moment); importance weights ``w = p/q`` of a mismatched Gaussian
proposal (:func:`importance_weight_moments`); Bernoulli; Beta(2, 5). Everything is seeded: simulation
``s`` of a law draws from ``np.random.default_rng([seed, law id, s])`` whatever the procedure, so all
procedures see the same samples (common random numbers) and a larger run extends a smaller one.

Regenerate ``docs/statistics.md`` (about 10 minutes on 2 cores)::

    python -m rfkit.validation.calibration --out docs/statistics.md
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import platform
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy
from scipy import stats

from rfkit.validation.stats import Evidence, binomial_test, mean_test, round_sizes, sequential_mean

__all__ = [
    "Law",
    "Procedure",
    "Size",
    "SIZES",
    "standard_laws",
    "standard_procedures",
    "importance_weight_moments",
    "tolerance_in_se",
    "clopper_pearson",
    "simulate",
    "calibration_table",
    "power_table",
    "miscalibrated",
    "calibrate",
    "render_markdown",
    "write_markdown",
    "main",
]


# --------------------------------------------------------------------------------------------------- laws
@dataclass(frozen=True)
class Law:
    """A null law with its exact mean and standard deviation. ``sample(rng, n)`` draws ``n`` iid values."""

    name: str
    sample: Callable[[np.random.Generator, int], np.ndarray]
    mean: float
    sd: float
    bounds: tuple[float, float] | None = None
    bernoulli: bool = False
    skewness: float = math.nan
    note: str = ""

    @property
    def rel_sd(self) -> float:
        return self.sd / abs(self.mean)


def importance_weight_moments(a: float, s2: float) -> tuple[float, float]:
    r"""Mean and variance of ``w = p(X)/q(X)``, ``X ~ q = N(0, s²)``, ``p = N(a, 1)``.

    ``E_q[w] = 1`` and ``E_q[w²] = ∫ p²/q = s/\sqrt{2π} ∫ exp(-(x-a)² + x²/(2s²)) dx``; with
    ``c = 1 - 1/(2s²) > 0`` (that is ``s² > 1/2``) the Gaussian integral is ``\sqrt{π/c} exp(a²/c - a²)``, so

    .. math:: E_q[w²] = \frac{s²}{\sqrt{2s² - 1}} \exp\Big(\frac{a²}{2s² - 1}\Big),

    and ``Var_q[w] = E_q[w²] - 1`` (infinite for ``s² <= 1/2``). The weight's tail index is ``1/(1 - s²)``
    for ``s² < 1``: ``P(w > u) ≍ u^{-1/(1-s²)}`` up to logarithms.
    """
    if s2 <= 0.5:
        return 1.0, math.inf
    second = s2 / math.sqrt(2.0 * s2 - 1.0) * math.exp(a * a / (2.0 * s2 - 1.0))
    return 1.0, second - 1.0


def _importance_weights(a: float, s2: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    s = math.sqrt(s2)

    def sample(rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.normal(0.0, s, n)
        return s * np.exp(-0.5 * (x - a) ** 2 + x * x / (2.0 * s2))

    return sample


def _scipy_sampler(dist) -> Callable[[np.random.Generator, int], np.ndarray]:
    def sample(rng: np.random.Generator, n: int) -> np.ndarray:
        return np.asarray(dist.rvs(size=n, random_state=rng), dtype=np.float64)

    return sample


#: Importance-weight null: target ``N(IS_SHIFT, 1)``, proposal ``N(0, IS_VARIANCE)``: tail index 2.5.
IS_SHIFT, IS_VARIANCE = 0.5, 0.6


def standard_laws() -> dict[str, Law]:
    """The null laws of the calibration, by name (means and variances in closed form)."""
    laws = []
    for name, dist, note, bounds, bern in [
        ("normal", stats.norm(1.0, 1.0), "N(1, 1)", None, False),
        ("log-normal", stats.lognorm(s=1.5), "exp N(0, 1.5²): skewness 33, all moments finite", None, False),
        ("pareto", stats.pareto(b=2.5), "Pareto, x_m = 1, tail index 2.5: infinite third moment", None, False),
        ("bernoulli", stats.bernoulli(0.3), "Bernoulli(0.3)", (0.0, 1.0), True),
        ("beta", stats.beta(2, 5), "Beta(2, 5) on [0, 1]", (0.0, 1.0), False),
    ]:
        mean, var, skew = (float(v) for v in dist.stats("mvs"))
        skew = skew if math.isfinite(skew) else math.inf  # scipy: nan for Pareto b <= 3 (infinite third moment)
        laws.append(Law(name, _scipy_sampler(dist), mean, math.sqrt(var), bounds, bern, skew, note))
    mean, var = importance_weight_moments(IS_SHIFT, IS_VARIANCE)
    laws.insert(3, Law("IS weights", _importance_weights(IS_SHIFT, IS_VARIANCE), mean, math.sqrt(var),
                       skewness=math.inf,
                       note=f"p/q, p = N({IS_SHIFT:g}, 1), q = N(0, {IS_VARIANCE:g}): tail index "
                            f"{1 / (1 - IS_VARIANCE):.3g}, infinite third moment"))
    return {law.name: law for law in laws}


# --------------------------------------------------------------------------------------------- procedures
@dataclass(frozen=True)
class Procedure:
    """A procedure under calibration, called the way a claim's cell calls it.

    ``kind`` says how ``call`` is invoked:

    * ``"fixed"``: ``call(x, prediction, *, law, alpha, tolerance) -> Evidence`` on a fixed sample;
    * ``"sequential"``: ``call(draw, prediction, *, law, alpha, tolerance, rng, budget) -> Evidence``;
    * ``"binomial"``: ``call(exceed, n, bound, *, alpha, tolerance) -> Evidence``.

    ``needs`` restricts the laws: ``"bounds"`` (a known range), ``"bernoulli"`` or ``None`` (any).
    """

    name: str
    kind: str
    call: Callable[..., Evidence]
    needs: str | None = None

    def applies(self, law: Law) -> bool:
        if self.needs == "bounds":
            return law.bounds is not None
        if self.needs == "bernoulli":
            return law.bernoulli
        return True


def _fixed_catoni(x, prediction, *, law, alpha, tolerance):
    return mean_test(x, prediction, alpha=alpha, tolerance=tolerance, scale=prediction, sd=law.sd)


def _fixed_asymptotic(x, prediction, *, law, alpha, tolerance):
    return mean_test(x, prediction, alpha=alpha, tolerance=tolerance, scale=prediction)


def _fixed_betting(x, prediction, *, law, alpha, tolerance):
    return mean_test(x, prediction, alpha=alpha, tolerance=tolerance, scale=prediction, bounds=law.bounds)


def _seq_catoni(draw, prediction, *, law, alpha, tolerance, rng, budget):
    return sequential_mean(draw, prediction, rng=rng, budget=budget, alpha=alpha, tolerance=tolerance,
                           scale=prediction, sd=law.sd)


def _seq_asymptotic(draw, prediction, *, law, alpha, tolerance, rng, budget):
    return sequential_mean(draw, prediction, rng=rng, budget=budget, alpha=alpha, tolerance=tolerance,
                           scale=prediction)


def _seq_betting(draw, prediction, *, law, alpha, tolerance, rng, budget):
    return sequential_mean(draw, prediction, rng=rng, budget=budget, alpha=alpha, tolerance=tolerance,
                           scale=prediction, bounds=law.bounds)


def _binomial(exceed, n, bound, *, alpha, tolerance):
    return binomial_test(exceed, n, bound, alpha=alpha, tolerance=tolerance)


def standard_procedures() -> dict[str, Procedure]:
    """The mean procedures of :mod:`rfkit.validation.stats` (each sequence, fixed and sequential) and
    :func:`~rfkit.validation.stats.binomial_test`, by name."""
    procs = [
        Procedure("mean_test Catoni (sd)", "fixed", _fixed_catoni),
        Procedure("mean_test asymptotic", "fixed", _fixed_asymptotic),
        Procedure("mean_test betting (bounds)", "fixed", _fixed_betting, needs="bounds"),
        Procedure("sequential_mean Catoni (sd)", "sequential", _seq_catoni),
        Procedure("sequential_mean asymptotic", "sequential", _seq_asymptotic),
        Procedure("sequential_mean betting (bounds)", "sequential", _seq_betting, needs="bounds"),
        Procedure("binomial_test", "binomial", _binomial, needs="bernoulli"),
    ]
    return {p.name: p for p in procs}


# ------------------------------------------------------------------------------------------------- sizes
@dataclass(frozen=True)
class Size:
    """How much to simulate. ``sims`` per case at each of ``alphas``; ``n`` replicates of a fixed sample
    (and trials of a binomial cell), ``budget`` of a sequential cell; ``violations`` (in tolerances) of the
    power curve, besides the calibration cases 1 and 1.5 in both directions; a reduced check at
    ``tail_alpha`` with ``tail_sims`` simulations of the false-refutation cases only."""

    sims: int
    n: int
    budget: int
    alphas: tuple[float, ...]
    violations: tuple[float, ...] = ()
    tail_alpha: float | None = None
    tail_sims: int = 0


SIZES = {
    "smoke": Size(sims=150, n=500, budget=1000, alphas=(0.05,)),
    "full": Size(sims=1000, n=2000, budget=4000, alphas=(0.05, 0.01), violations=(0.0, 2.0, 3.0, 5.0),
                 tail_alpha=1e-3, tail_sims=2000),
}

#: Violations (in tolerances) where a decision is false: refuting at 1 (the edge of the null), supporting at 1.5.
FALSE_REFUTATION_AT, FALSE_SUPPORT_AT = 1.0, 1.5


def tolerance_in_se(alpha: float) -> float:
    """Tolerance in standard errors of the mean at the cell's size: ``sqrt(2 log(4/α)) + 1`` rounded up to a
    half — the width of a Catoni-style sequence at its design size (``sqrt(2 log(2/α'))`` with ``α' = α/2`` a
    side) plus one standard error: 4 at ``α = 0.05``, 4.5 at 0.01, 5.5 at 0.001."""
    return math.ceil(2.0 * (math.sqrt(2.0 * math.log(4.0 / alpha)) + 1.0)) / 2.0


@dataclass(frozen=True)
class _Case:
    alpha: float
    violation: float
    direction: int
    sims: int


def _cases(proc: Procedure, size: Size) -> list[_Case]:
    directions = (+1,) if proc.kind == "binomial" else (+1, -1)
    out = []
    for alpha in size.alphas:
        for v in (FALSE_REFUTATION_AT, FALSE_SUPPORT_AT):
            out += [_Case(alpha, v, d, size.sims) for d in directions]
        out += [_Case(alpha, v, +1, size.sims) for v in size.violations]
    if size.tail_alpha is not None and size.tail_sims > 0:
        out += [_Case(size.tail_alpha, FALSE_REFUTATION_AT, d, size.tail_sims) for d in directions]
    return out


def _replicates(proc: Procedure, size: Size) -> int:
    return size.budget if proc.kind == "sequential" else size.n


def _tolerance(proc: Procedure, law: Law, size: Size, alpha: float) -> float:
    """Relative tolerance for a mean (``scale = prediction``); absolute for a probability."""
    n = _replicates(proc, size)
    se = math.sqrt(law.mean * (1 - law.mean) / n) if proc.kind == "binomial" else law.rel_sd / math.sqrt(n)
    return tolerance_in_se(alpha) * se


def _prediction(proc: Procedure, law: Law, violation: float, direction: int, tol: float) -> float:
    """The prediction at which the true violation is ``violation`` tolerances in ``direction`` (+1: the
    true mean lies above it). For a mean, ``scale = prediction`` so ``(μ - pred)/pred = ±violation·tol``."""
    shift = direction * violation * tol
    if proc.kind == "binomial":
        bound = law.mean - shift
        if not 0.0 <= bound <= 1.0:
            raise ValueError(f"{law.name}: bound {bound} outside [0, 1]; use a smaller tolerance")
        return bound
    if not 1.0 + shift > 0:
        raise ValueError(f"{proc.name} on {law.name}: a violation of {violation}×{tol:.3g} below the mean "
                         "needs a negative prediction; use more replicates")
    return law.mean / (1.0 + shift)


def _stable_id(name: str) -> int:
    return zlib.crc32(name.encode())


# ---------------------------------------------------------------------------------------------- simulation
def _run_unit(proc: Procedure, law: Law, size: Size, seed: int) -> list[dict]:
    """All cases of one (procedure, law) pair."""
    cases = _cases(proc, size)
    n = _replicates(proc, size)
    lid = _stable_id(law.name)
    setup = {}
    for c in cases:
        tol = _tolerance(proc, law, size, c.alpha)
        setup[c] = (tol, _prediction(proc, law, c.violation, c.direction, tol))
    acc = {c: dict(refuted=0, supported=0, flagged=0, decided=0, n_sum=0, n_decided=0, validity=Counter())
           for c in cases}
    cache: dict = {}
    start = time.process_time()
    for s in range(max(c.sims for c in cases)):
        if proc.kind == "sequential":
            x = None
        else:
            x = law.sample(np.random.default_rng([seed, lid, s]), n)
        exceed = int(x.sum()) if proc.kind == "binomial" else None
        for c in cases:
            if s >= c.sims:
                continue
            tol, pred = setup[c]
            if proc.kind == "fixed":
                ev = proc.call(x, pred, law=law, alpha=c.alpha, tolerance=tol)
            elif proc.kind == "sequential":
                ev = proc.call(law.sample, pred, law=law, alpha=c.alpha, tolerance=tol,
                               rng=np.random.default_rng([seed, lid, s, 1]), budget=n)
            else:
                key = (exceed, c)
                if key not in cache:  # a binomial cell depends on the count only
                    cache[key] = proc.call(exceed, n, pred, alpha=c.alpha, tolerance=tol)
                ev = cache[key]
            a = acc[c]
            supported = not ev.flags and ev.upper <= tol  # the engine's support rule
            # a fixed-sample or binomial cell always uses all its replicates: "decided" only matters for sequential
            decided = proc.kind != "sequential" or str(ev.extra.get("status", "")).startswith("decided")
            a["refuted"] += ev.p_value <= c.alpha
            a["supported"] += supported
            a["flagged"] += bool(ev.flags)
            a["decided"] += decided
            a["n_sum"] += ev.n
            a["n_decided"] += ev.n if decided else 0
            a["validity"][ev.validity] += 1
    seconds = time.process_time() - start
    rows = []
    for c in cases:
        a, (tol, pred) = acc[c], setup[c]
        rows.append(dict(
            procedure=proc.name, kind=proc.kind, law=law.name, alpha=c.alpha, violation=c.violation,
            direction=c.direction, sims=c.sims, n=n, tolerance=tol, tolerance_se=tolerance_in_se(c.alpha),
            prediction=pred, refuted=a["refuted"], supported=a["supported"], flagged=a["flagged"],
            decided=a["decided"], mean_n=a["n_sum"] / c.sims,
            mean_n_decided=a["n_decided"] / a["decided"] if a["decided"] else math.nan,
            validity=a["validity"].most_common(1)[0][0], cpu_seconds=seconds))
    return rows


_JOBS: list = []


def _job(i: int) -> list[dict]:
    return _run_unit(*_JOBS[i])


def simulate(size: str | Size = "full", *, seed: int = 0, workers: int | None = None,
             procedures: Sequence[Procedure] | dict | None = None, laws: Sequence[Law] | dict | None = None
             ) -> pd.DataFrame:
    """Simulate every applicable (procedure, law) pair at every case of ``size``: one row per
    ``(procedure, law, alpha, violation, direction)`` with the counts ``refuted``, ``supported``,
    ``flagged``, ``decided`` out of ``sims`` and the mean replicates used (``mean_n``, ``mean_n_decided``).

    ``workers`` processes (default ``min(2, cpus)``; 1 runs in this process, which is what a custom
    :class:`Procedure` defined in a test needs unless the platform forks).
    """
    size = SIZES[size] if isinstance(size, str) else size
    procedures = standard_procedures() if procedures is None else procedures
    laws = standard_laws() if laws is None else laws
    procedures = list(procedures.values()) if isinstance(procedures, dict) else list(procedures)
    laws = list(laws.values()) if isinstance(laws, dict) else list(laws)
    units = [(p, law, size, seed) for p in procedures for law in laws if p.applies(law)]
    if not units:
        raise ValueError("no procedure applies to any of the laws")
    workers = min(2, os.cpu_count() or 1) if workers is None else workers
    # the sequential units are the slowest: start them first so the pool stays balanced
    order = sorted(range(len(units)), key=lambda i: units[i][0].kind != "sequential")
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        global _JOBS
        _JOBS = units
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                results = dict(zip(order, pool.map(_job, order), strict=True))
        finally:
            _JOBS = []
    else:
        results = {i: _run_unit(*units[i]) for i in order}
    rows = [r for i in range(len(units)) for r in results[i]]
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------- tables
def clopper_pearson(k, n, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided Clopper–Pearson interval ``(low, high)`` for ``k`` successes out of ``n``."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    q = (1.0 - confidence) / 2.0
    with np.errstate(invalid="ignore"):
        low = np.where(k > 0, stats.beta.ppf(q, k, n - k + 1), 0.0)
        high = np.where(k < n, stats.beta.ppf(1 - q, k + 1, n - k), 1.0)
    return low, high


def _false_rows(long: pd.DataFrame) -> pd.DataFrame:
    """One row per calibration case with its false count: refutations at violation 1, supports at 1.5."""
    ref = long[np.isclose(long.violation, FALSE_REFUTATION_AT)].assign(error="false refutation",
                                                                      count=lambda d: d.refuted)
    sup = long[np.isclose(long.violation, FALSE_SUPPORT_AT)].assign(error="false support",
                                                                   count=lambda d: d.supported)
    out = pd.concat([ref, sup], ignore_index=True)
    return out.assign(rate=out["count"] / out.sims)


def miscalibrated(long: pd.DataFrame, family_error: float = 1e-3) -> pd.DataFrame:
    """Calibration cases whose false rate is significantly above ``alpha``.

    For each case (false refutation at violation 1, false support at 1.5, each direction and level) the
    one-sided Clopper–Pearson lower bound at confidence ``1 - family_error / cases`` is compared with
    ``alpha``. If every true rate is at most ``alpha`` the chance that any case is reported is at most
    ``family_error`` (Bonferroni), so an empty frame means "calibrated", and a row is a finding.
    """
    rows = _false_rows(long)
    delta = family_error / max(len(rows), 1)
    low, _ = clopper_pearson(rows["count"], rows.sims, confidence=1.0 - 2.0 * delta)
    rows = rows.assign(cp_lower=low)
    cols = ["procedure", "law", "alpha", "error", "direction", "sims", "count", "rate", "cp_lower"]
    return rows.loc[rows.cp_lower > rows.alpha, cols].reset_index(drop=True)


def _worst(rows: pd.DataFrame) -> pd.Series:
    """The worse direction of one calibration case (the larger false count)."""
    return rows.loc[rows["count"].idxmax()]


def calibration_table(long: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """One row per ``(procedure, law, alpha)``: the false refutation and false support rates (worse
    direction) with the upper end of their two-sided Clopper–Pearson interval at ``confidence``, the rate
    of support when the claim holds exactly, the mean replicates a decided cell used there, and the
    validity class of the evidence."""
    false = _false_rows(long)
    out = []
    for (proc, law, alpha), grp in long.groupby(["procedure", "law", "alpha"], sort=False):
        f = false[(false.procedure == proc) & (false.law == law) & (false.alpha == alpha)]
        row = dict(procedure=proc, law=law, alpha=alpha, sims=int(grp.sims.max()),
                   tolerance_se=float(grp.tolerance_se.iloc[0]))
        for err, key in (("false refutation", "false_refutation"), ("false support", "false_support")):
            rows = f[f.error == err]
            if rows.empty:
                row[key] = row[key + "_cp_upper"] = math.nan
                continue
            w = _worst(rows)
            row[key] = float(w.rate)
            row[key + "_cp_upper"] = float(clopper_pearson(w["count"], w.sims, confidence)[1])
        zero = grp[np.isclose(grp.violation, 0.0)]
        row["support_at_0"] = float(zero.supported.iloc[0] / zero.sims.iloc[0]) if len(zero) else math.nan
        row["mean_replicates"] = float(zero.mean_n_decided.iloc[0]) if len(zero) else math.nan
        row["validity"] = Counter(grp.validity).most_common(1)[0][0]
        out.append(row)
    return pd.DataFrame(out)


def power_table(long: pd.DataFrame) -> pd.DataFrame:
    """One row per ``(procedure, law, alpha)`` with a power curve: the support rate and flag rate at
    violation 0, the refutation rate at each simulated violation > 1 (direction +), and for sequential
    cells the fraction decided and the mean replicates of a decided cell at 0 and at 3 tolerances."""
    out = []
    plus = long[long.direction == +1]
    for (proc, law, alpha), grp in plus.groupby(["procedure", "law", "alpha"], sort=False):
        by_v = {float(r.violation): r for r in grp.itertuples()}
        if 0.0 not in by_v:
            continue
        z = by_v[0.0]
        row = dict(procedure=proc, law=law, alpha=alpha, sims=int(z.sims), support_at_0=z.supported / z.sims,
                   flagged_at_0=z.flagged / z.sims)
        for v in sorted(by_v):
            if v > FALSE_REFUTATION_AT:
                row[f"refute_at_{v:g}"] = by_v[v].refuted / by_v[v].sims
        if z.kind == "sequential":
            row["decided_at_0"] = z.decided / z.sims
            row["replicates_at_0"] = z.mean_n_decided
            if 3.0 in by_v:
                row["replicates_at_3"] = by_v[3.0].mean_n_decided
        out.append(row)
    return pd.DataFrame(out)


def calibrate(size: str | Size = "full", *, seed: int = 0, workers: int | None = None,
              procedures=None, laws=None) -> pd.DataFrame:
    """Run :func:`simulate` and return :func:`calibration_table` (procedure, law, alpha, sims, false
    refutation and false support with Clopper–Pearson upper bounds, support at 0, mean replicates,
    validity)."""
    return calibration_table(simulate(size, seed=seed, workers=workers, procedures=procedures, laws=laws))


# ---------------------------------------------------------------------------------------------- markdown
def _fmt(v, spec: str) -> str:
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return format(v, spec)


def _markdown(df: pd.DataFrame, columns: list[tuple[str, str, str]]) -> str:
    """``columns``: (column, header, format spec)."""
    lines = ["| " + " | ".join(h for _, h, _ in columns) + " |",
             "|" + "|".join("---" if spec == "" else "---:" for _, _, spec in columns) + "|"]
    for d in df.to_dict("records"):
        lines.append("| " + " | ".join(_fmt(d.get(c, math.nan), spec) for c, _, spec in columns) + " |")
    return "\n".join(lines)


_PROSE = r"""# Statistics of the verdicts

Every claim is checked cell by cell. A cell measures replicates and hands them to one procedure of
`rfkit.validation.stats`, which returns an `Evidence`: a p-value of the *interval* null "the violation
is at most the tolerance", an upper confidence bound `upper` on the violation (in tolerance units), the
`resolution` (the confidence radius), flags, and the `validity` class of the guarantee. The engine
**refutes** a claim when Holm's procedure over its cells rejects one (`p_value <= alpha` after the
adjustment), and **supports** it only when every cell is unflagged and has `upper <= tolerance` (an
equivalence test; the resolution only explains a failure: "underpowered" when it exceeds the tolerance).
Flagged cells (heavy tails, skewness beyond the normal approximation,
non-finite replicates, a degenerate sample) neither refute nor support.

This page describes the procedures and then reports their **calibration**, measured by simulation
under null laws with known means (`rfkit.validation.calibration`). Everything below the line
"Calibration" is generated: regenerate it with

    python -m rfkit.validation.calibration --out docs/statistics.md

## Procedures for a mean

All mean procedures evaluate one *anytime-valid confidence sequence* (CS) (`rfkit.validation.sequences`).
A CS `(C_t)` covers the mean at every `t` simultaneously with probability at least `1 - α`, so a cell may
look after every round of replicates and stop when it is decided (`sequential_mean`), and a fixed
sample (`mean_test`) is the special case of one look. Each CS is the set of means `m` at which a
nonnegative (super)martingale `E_t(m)` under "mean = m" stays below `2/α` (`α/2` a side); by Ville's
inequality `P(∃t: E_t(m) ≥ 1/a) ≤ a`, so `min(1, 1/E_t(m))` is an anytime-valid p-value. The one-sided
processes are monotone in `m`, so the p-value at the nearer end of the null interval
`prediction ± tolerance·scale` is valid for the whole interval; the two-sided p-value is twice the smaller
one-sided one, and `upper` is the farther end of the two-sided CS from the prediction. `mean_test`
tunes the sequence for its sample size, `sequential_mean` for its planned budget and checks after each
round of `round_sizes(budget)` (a first round that is a fixed fraction of the budget, then doubling).

The strongest sequence the cell's assumptions allow is used:

**Betting** (`bounds=(lo, hi)`; `BettingCS`; validity *non-asymptotic*). On `Y = (X - lo)/(hi - lo)`
the capital processes `K_t^+(m) = Π_{i≤t} (1 + λ_i (Y_i - m))` and `K_t^-(m) = Π_{i≤t} (1 - λ_i (Y_i - m))`
are nonnegative martingales under `E Y = m` for every predictable bet `λ_i ∈ [0, 1/m)` (resp.
`[0, 1/(1-m))`), and the CS is their hedge at `α/2` each (Waudby-Smith & Ramdas 2024, "Estimating means
of bounded random variables by betting", JRSS-B 86(1): the hedged capital process). The bets are their
predictable plug-in,
`λ_i = min( sqrt(2 log(2/α) / (σ̂²_{i-1} · max(i, t_opt))), 1/(2m) )` (the `1/(2(1-m))` truncation for
`K^-`), with `σ̂²_i = (1/4 + Σ_{j≤i} (Y_j - μ̂_j)²)/(i + 1)`, `μ̂_i = (1/2 + Σ_{j≤i} Y_j)/(i + 1)`.
Up to `t_opt` these are exactly the bets `lambda_predmix_eb(y, alpha=α/2, fixed_n=t_opt)` of the
authors' `confseq` 0.0.11 and the capital process is its `betting_mart` (`tests/test_sequences.py`
checks both against numbers produced by that code). *Assumption:* every replicate lies in
`[lo, hi]`; nothing else — the guarantee holds at every `t` for every such law.

**Catoni-style** (`sd=`; `CatoniCS`; validity *non-asymptotic*). With Catoni's influence function
`φ(x) = sign(x) log(1 + |x| + x²/2)`, which satisfies `-log(1 - x + x²/2) ≤ φ(x) ≤ log(1 + x + x²/2)`,
`M_t^±(m) = exp( Σ_{i≤t} φ(±λ_i (X_i - m)) - Σ_{i≤t} λ_i² σ_i² / 2 )` is a nonnegative supermartingale under
`E X = m` whenever `Var X ≤ σ_i²` and `λ_i > 0` is predictable (Wang & Ramdas 2023, "Catoni-style
confidence sequences for heavy-tailed mean estimation", SPA 163: the Catoni-style CS and its
supermartingale). The cell uses
`σ_i² = max(σ²_theory, s²_{i-1})` (the sample variance of the *previous* replicates, so an estimator
noisier than theory is judged with its own spread) and
`λ_i = sqrt(2 log(2/α) / (σ_i² max(i, t_opt)))`. *Assumption:* `Var X ≤ σ²_theory` (the closed form from
`rfkit.theory`); heavy tails are fine, because `φ` grows only logarithmically.

**Asymptotic** (neither; `AsymptoticCS`; validity *asymptotic*). The Gaussian-mixture boundary applied to
the running mean and standard deviation,
`C_t = μ̂_t ± σ̂_t sqrt( 2(tρ² + 1)/(t²ρ²) · log( sqrt(tρ² + 1)/α ) )` with
`ρ² = (-2 log α + log(1 - 2 log α))/t_opt` (Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas 2024, Ann.
Statist. 52(6), "Time-uniform central limit theory and asymptotic confidence sequences": its Gaussian-mixture CS for
iid means, with the mixing scale in units of `σ̂_t`, i.e. their `ρ` set to `ρ/σ̂_t`, and the width-optimal `ρ` for time
`t_opt`; the two-sided normal-mixture boundary of Howard et al. 2021). Its e-value at `m` is
`exp(ρ² S²/(2(tρ² + 1)))/sqrt(tρ² + 1)` with `S = t(μ̂_t - m)/σ̂_t`. *Assumption:* iid
replicates with finite variance; the coverage holds in the limit (a time-uniform CLT). Because
random-feature estimators are log-normal-like, the cell is **flagged** (undecided) when one replicate
carries more than 20% of the sample variance; when Hill's estimate of the tail index of `|X - median|`
(on the `max(10, √n)` largest deviations; Hill 1975) is below 3, i.e. the sample does not show three
finite moments, without which the normal approximation of the mean has no Berry–Esseen rate (from
100 replicates on); or when the first Edgeworth term of the mean's tail at the boundary,
`|γ₁|(z² - 1)φ(z)/(6√n)`, exceeds the nominal level. The tail-index check matters most: a sample that
misses the tail also underestimates the variance, so the variance share and the skewness look harmless
exactly when the interval is too narrow (without it, importance weights of tail index 2.5 were falsely
refuted at 3.5 times the level α = 0.001). A cell that needs a decision on such replicates must give
theory's variance bound (`sd=`), which is non-asymptotic.

## Procedure for a tail probability

**Exact binomial** (`binomial_test`; validity *exact*). `k` exceedances in `n` independent trials are
Binomial(`n`, `p`); the null `p ≤ bound + tolerance` is tested with the exact one-sided binomial test,
and `upper` is the one-sided Clopper–Pearson bound at level `1 - α` minus the bound (Clopper & Pearson
1934). *Assumption:* independent trials with a common exceedance probability.

The other procedures (`slope_test`, `ratio_test`, `ks_test`, `exact_test`) are described in the
docstring of `rfkit.validation.stats`; they are not simulated here.

## Why rfkit implements the sequences itself

The authors' library `confseq` 0.0.11 does not build from PyPI on Python 3.11: it pins an old
`pybind11` whose headers do not compile against 3.11 (`invalid use of incomplete type PyFrameObject`),
and `expectation` requires Python ≥ 3.12. rfkit supports Python ≥ 3.10, so it implements the three
sequences in `rfkit.validation.sequences` and tests them against the authors' pure-Python code
(`confseq`'s `betting.py`, `betting_strategies.py`, unpacked from the source distribution and used only
to produce reference numbers, which `tests/test_sequences.py` pins as literals) and against the closed
forms of the papers.
"""


def _setup_table(size: Size, laws: dict[str, Law]) -> str:
    rows = []
    for law in laws.values():
        rows.append(dict(law=law.name, note=law.note, mean=law.mean, sd=law.sd, rel_sd=law.rel_sd,
                         skew=law.skewness))
    return _markdown(pd.DataFrame(rows), [("law", "law", ""), ("note", "definition", ""), ("mean", "mean", ".4g"),
                                          ("sd", "sd", ".4g"), ("rel_sd", "sd/mean", ".3g"),
                                          ("skew", "skewness", ".3g")])


def render_markdown(long: pd.DataFrame, *, size: Size, seed: int, seconds: float, workers: int,
                    size_name: str = "") -> str:
    """The page: the prose above, the setup, the calibration table, the power table and the findings."""
    laws = standard_laws()
    calib = calibration_table(long)
    power = power_table(long)
    bad = miscalibrated(long)
    main_alphas = ", ".join(f"{a:g}" for a in size.alphas)
    cpu = float(long.groupby(["procedure", "law"]).cpu_seconds.first().sum()) if "cpu_seconds" in long else math.nan
    tail = (f" and a reduced check at α = {size.tail_alpha:g}: {size.tail_sims:,} simulations of the "
            "false-refutation cases" if size.tail_alpha else "")
    parts = [_PROSE, "## Calibration\n",
             f"*Generated by `python -m rfkit.validation.calibration` (size `{size_name or 'custom'}`, seed {seed}, "
             f"{workers} worker(s), {seconds:.0f} s wall, {cpu:.0f} s CPU; Python {platform.python_version()}, "
             f"numpy {np.__version__}, scipy {scipy.__version__}, pandas {pd.__version__}). "
             "Do not edit by hand.*\n",
             f"**Design.** {size.sims:,} simulations per case at α ∈ {{{main_alphas}}}{tail}. A fixed-sample cell "
             f"has n = {size.n:,} replicates (a binomial cell n = {size.n:,} trials); a sequential cell a budget "
             f"of {size.budget:,} replicates, checked after rounds of {', '.join(map(str, round_sizes(size.budget)))}. "
             "The tolerance is a relative one (`scale = prediction`) of "
             "`k(α)` standard errors of the mean at that size, `k = ceil₀.₅(sqrt(2 log(4/α)) + 1)` "
             "(4 at α = 0.05, 4.5 at 0.01, 5.5 at 0.001): a little wider than the confidence sequence, so "
             "that a true claim can be supported. The true violation is set by the prediction: "
             "`prediction = mean/(1 ± v·tolerance)`. **False refutation** is the rate of `p_value <= α` at "
             "v = 1 (the edge of the null), **false support** the rate of \"supported\" (no flag, "
             "`upper <= tolerance`) at v = 1.5; both directions of the violation are simulated and the worse "
             "one is shown, with the upper end of its exact 95% Clopper–Pearson interval. Both must be at most "
             "α. The procedures are called as a claim's cell calls them (two-sided; `sd=` the law's exact "
             "standard deviation; `bounds=` its range).\n",
             "Null laws (exact moments):\n", _setup_table(size, laws), ""]
    parts.append("### False decisions\n")
    summary = []
    for alpha, grp in calib.groupby("alpha", sort=True):
        ref = grp.loc[grp.false_refutation.idxmax()]
        line = (f"At α = {alpha:g} the largest false-refutation rate is {ref.false_refutation:.4f} "
                f"({ref.procedure}, {ref.law})")
        if grp.false_support.notna().any():
            sup = grp.loc[grp.false_support.idxmax()]
            line += (f" and the largest false-support rate {sup.false_support:.4f} ({sup.procedure}, {sup.law})"
                     if sup.false_support > 0 else "; no case was falsely supported")
        summary.append(line + ".")
    parts.append(" ".join(summary) + "\n")
    parts.append(_markdown(calib, [
        ("procedure", "procedure", ""), ("law", "law", ""), ("alpha", "α", "g"), ("sims", "sims", ","),
        ("false_refutation", "false refutation", ".4f"), ("false_refutation_cp_upper", "CP 95% upper", ".4f"),
        ("false_support", "false support", ".4f"), ("false_support_cp_upper", "CP 95% upper", ".4f"),
        ("support_at_0", "support at v=0", ".3f"), ("mean_replicates", "mean replicates (v=0, decided)", ",.0f"),
        ("validity", "validity", "")]))
    if len(bad):
        parts.append("\n**Miscalibrated cases** (one-sided Clopper–Pearson lower bound above α, Bonferroni "
                     "over all cases at family error 0.001). Procedures of validity class *asymptotic* carry no "
                     "finite-sample guarantee, so a row for them measures how far the normal approximation (and the "
                     "flags that should catch its failures) is from the nominal level at this size; a row for a "
                     "*non-asymptotic* or *exact* procedure would be a bug:\n")
        parts.append(_markdown(bad, [("procedure", "procedure", ""), ("law", "law", ""), ("alpha", "α", "g"),
                                     ("error", "error", ""), ("direction", "direction", "+d"),
                                     ("count", "count", "d"), ("sims", "sims", ","), ("rate", "rate", ".4f"),
                                     ("cp_lower", "CP lower", ".4f")]))
    else:
        parts.append("\nNo case is miscalibrated: every one-sided Clopper–Pearson lower bound on a false rate "
                     "is at most α (Bonferroni over all cases at family error 0.001).")
    if len(power):
        parts.append("\n### Power\n")
        parts.append("Support rate and flag rate when the claim holds exactly (v = 0), refutation rate at "
                     "larger violations (direction +), and for sequential cells the fraction decided at v = 0 "
                     "and the mean replicates a decided cell used (of the budget).\n")
        vcols = [c for c in power.columns if c.startswith("refute_at_")]
        cols = [("procedure", "procedure", ""), ("law", "law", ""), ("alpha", "α", "g"),
                ("support_at_0", "support v=0", ".3f"), ("flagged_at_0", "flagged v=0", ".3f")]
        cols += [(c, "refute v=" + c.removeprefix("refute_at_"), ".3f") for c in vcols]
        cols += [("decided_at_0", "decided v=0", ".3f"), ("replicates_at_0", "replicates v=0", ",.0f"),
                 ("replicates_at_3", "replicates v=3", ",.0f")]
        parts.append(_markdown(power, cols))
    return "\n".join(parts) + "\n"


def write_markdown(path: str = "docs/statistics.md", *, size: str | Size = "full", seed: int = 0,
                   workers: int | None = None, long: pd.DataFrame | None = None) -> pd.DataFrame:
    """Simulate at ``size`` (unless ``long`` is given) and write the statistics page to ``path``.
    Returns the long frame of :func:`simulate`."""
    size_name = size if isinstance(size, str) else ""
    size_obj = SIZES[size] if isinstance(size, str) else size
    workers = min(2, os.cpu_count() or 1) if workers is None else workers
    start = time.perf_counter()
    if long is None:
        long = simulate(size_obj, seed=seed, workers=workers)
    seconds = time.perf_counter() - start
    text = render_markdown(long, size=size_obj, seed=seed, seconds=seconds, workers=workers, size_name=size_name)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return long


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rfkit.validation.calibration",
                                     description="Calibrate the verdict statistics by simulation.")
    parser.add_argument("--out", default=None, help="write the markdown page here (e.g. docs/statistics.md)")
    parser.add_argument("--size", default="full", choices=sorted(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--csv", default=None, help="also write the long table of all cases here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.out:
        long = write_markdown(args.out, size=args.size, seed=args.seed, workers=args.workers)
    else:
        long = simulate(args.size, seed=args.seed, workers=args.workers)
    if args.csv:
        long.to_csv(args.csv, index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 500):
        print(calibration_table(long).to_string(index=False))
        bad = miscalibrated(long)
        print("\nmiscalibrated cases:" if len(bad) else "\nno miscalibrated case")
        if len(bad):
            print(bad.to_string(index=False))
    print(f"\n{time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
