"""The engine: run a claim's cells (in-process, in local worker processes or on dask) and compute verdicts from them.

Cells are planned, seeded and run by :mod:`rfkit.validation.cells` (wherever they run, the budgets' extensions
included); the engine orchestrates a run and turns its cells into verdicts.

Verdicts (per variant, then per claim):

* **refuted** — some cell of the variant is rejected by Holm's procedure at family-wise level ``alpha``
  across *all* cells of the claim (every variant, grid and search); the witness is the rejected cell with
  the smallest adjusted p-value (largest violation on ties).
* **supported** — nothing rejected, and every cell is conclusive: no cell is flagged (heavy tails,
  infinite variance, non-finite values, empty evidence), every cell's upper confidence bound on the
  violation is at most the claim's tolerance (an equivalence test: nothing else is needed); a universally
  quantified claim must also have run its adversarial search. The verdict states the weakest validity
  class of its cells (``exact``, ``non-asymptotic``, ``asymptotic``) and the assumption it rests on.
* **inconclusive** — otherwise, with the reason: among the cells whose bound crosses the tolerance,
  ``underpowered`` when one's resolution (its confidence radius) exceeds the tolerance, so that not even an
  exactly true claim could be supported there; ``cannot exclude`` when the radius is fine but the bound
  still crosses the tolerance.

A claim's verdict is its variants' common verdict; when readings disagree it is *inconclusive* and the
reason lists each reading's verdict (the claim is then true or false depending on how it is read).
Cells whose check raises are reported (the run counts as failed) and make the claim inconclusive.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from rfkit.validation.adapters import known_roles
from rfkit.validation.cells import BACKENDS, CellOutcome, CellSpec, extensions, plan, run_cell
from rfkit.validation.domain import domain_coverage
from rfkit.validation.model import TIERS, Claim
from rfkit.validation.progress import progress as show_progress
from rfkit.validation.results import ClaimResult, RunResult, jsonable
from rfkit.validation.stats import Evidence, holm, replicates_for_radius, weakest_validity

__all__ = ["VariantVerdict", "ClaimResult", "RunResult", "decide", "validate", "validate_implementation",
           "rfkit_version", "source_commit",
           "VERDICTS", "coverage_table", "variant_coverage", "holds_on", "refuted_readings"]

VERDICTS = ("supported", "refuted", "inconclusive")


def rfkit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rfkit")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


def source_commit() -> str | None:
    """Short hash of the git checkout rfkit runs from, ``+dirty`` with uncommitted changes to tracked files;
    ``None`` for an installed copy (no git checkout)."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


@dataclass
class VariantVerdict:
    verdict: str
    reason: str
    witness: dict | None
    resolution: float
    cells: int
    validity: str | None = None
    #: Why an inconclusive verdict is one: ``power`` (the evidence could not decide: underpowered, cannot
    #: exclude, heavy tails/skew), ``evidence`` (other flags: non-finite values, empty or degenerate evidence),
    #: ``error`` (a cell failed), ``scope`` (untestable here, no cell or no search), ``coverage`` (the cells do
    #: not cover the reading's declared domain); ``None`` when decided.
    cause: str | None = None
    #: Coverage of the reading's declared domain by this tier's cells (``None`` without a declared domain).
    coverage: str | None = None
    #: For a refuted reading, the largest declared sub-domain on which its cells support the claim.
    holds_on: str | None = None


def _witness(outcome: CellOutcome, p_adj: float) -> dict:
    ev = outcome.evidence
    return dict(outcome.spec.describe(), estimate=ev.estimate, prediction=ev.prediction, stderr=ev.stderr,
                statistic=ev.statistic, p_value=ev.p_value, p_adjusted=float(p_adj), effect=ev.effect,
                upper=ev.upper, resolution=ev.resolution, method=ev.method, validity=ev.validity,
                assumption=ev.assumption, extra=jsonable(ev.extra))


def decide(claim: Claim, outcomes: list[CellOutcome], alpha: float
           ) -> tuple[str, str, dict[str, VariantVerdict], np.ndarray, np.ndarray]:
    """Verdicts from one claim's cell outcomes: ``(verdict, reason, variants, reject, p_adjusted)``.

    Readings that narrow the declared domain (:class:`~rfkit.validation.domain.Reading` with ``narrows``)
    refute the claim when they find a violation (their domain lies inside the statement's), but their support
    never supports the claim: the verdict then comes from the readings over the whole domain, and when there
    are none it is ``inconclusive`` (not covered).
    """
    n = len(outcomes)
    reject, p_adj = np.zeros(n, bool), np.ones(n)
    ok = [i for i, o in enumerate(outcomes) if o.evidence is not None]
    if ok:
        r, p = holm([outcomes[i].evidence.p_value for i in ok], alpha)
        reject[ok], p_adj[ok] = r, p
    variants: dict[str, VariantVerdict] = {}
    for variant in claim.variants:
        idx = [i for i, o in enumerate(outcomes) if o.spec.variant == variant]
        variants[variant] = _decide_variant(claim, outcomes, idx, reject, p_adj)
    if claim.untestable and not outcomes:
        return "inconclusive", claim.untestable, variants, reject, p_adj
    full = {k: v for k, v in variants.items() if k in claim.deciding()}
    narrow = {k: v for k, v in variants.items() if claim.narrowed(k)}
    beside = [f"{_beside_outcome(v)} under the reading {k} ({claim.variant_notes.get(k, '')}){_failure_site(v)}, "
              f"reported beside the verdict." for k, v in variants.items() if claim.beside(k)]
    refuting = {k: v for k, v in narrow.items() if v.verdict == "refuted"}
    if refuting and not any(v.verdict == "refuted" for v in full.values()):
        name, v = next(iter(refuting.items()))
        return ("refuted", _sentences(f"{name} (a sub-domain of the statement): {v.reason}", beside), variants,
                reject, p_adj)
    supported_narrow = [k for k, v in narrow.items() if v.verdict == "supported"]
    under = (" Supported under the declared narrowing(s): " + ", ".join(
        f"{k} ({claim.variant_notes.get(k, '')})" for k in supported_narrow) + ".") if supported_narrow else ""
    if not full:
        undecided = "".join(f" {k}: {v.reason}." for k, v in narrow.items() if v.verdict != "supported" and v.reason)
        return ("inconclusive", _sentences("not covered: only narrowed readings of the statement were tested."
                                           + under + undecided, beside), variants, reject, p_adj)
    verdicts = {v.verdict for v in full.values()}
    if len(verdicts) > 1:
        reason = "verdict depends on the reading: " + ", ".join(f"{k} {v.verdict}" for k, v in full.items())
        return "inconclusive", _sentences(reason + ("." + under if under else ""), beside), variants, reject, p_adj
    verdict = verdicts.pop()
    if len(full) == 1:
        reason = next(iter(full.values())).reason
    else:
        reason = "; ".join(f"{name}: {v.reason}" for name, v in full.items() if v.reason)
    return (verdict, _sentences(reason + (under if verdict == "inconclusive" else ""), beside), variants, reject,
            p_adj)


def _beside_outcome(v: VariantVerdict) -> str:
    """How a reading reported beside the verdict came out; one with no cell at this tier was not run, which says
    nothing either way (it read "Undecided", as if its cells could not decide)."""
    if v.cells == 0:
        return "Not run at this tier"
    return "Holds" if v.verdict == "supported" else "Fails" if v.verdict == "refuted" else "Undecided"


def _failure_site(v: VariantVerdict) -> str:
    """Where a refuted reading fails and where it holds (``""`` unless it is refuted)."""
    if v.verdict != "refuted" or v.witness is None:
        return ""
    where = ", ".join(f"{k}={x}" for k, x in v.witness.get("params", {}).items())
    return (f": fails at {where}" if where else "") + (f", holds on {v.holds_on}" if v.holds_on else "")


def _sentences(text: str, more: list[str]) -> str:
    """``text`` followed by the sentences ``more`` (a stop added between them where ``text`` has none)."""
    if not more:
        return text
    return " ".join([text + ("" if not text or text.endswith(".") else ".")] + more).strip()


#: Flags that say the evidence was too weak to decide (more or better-conditioned data would decide it).
_POWER_FLAGS = ("heavy tails", "skewed", "slope undefined", "bias not resolved", "pre-asymptotic", "underpowered")


def _decide_variant(claim: Claim, outcomes, idx, reject, p_adj) -> VariantVerdict:
    cells = [outcomes[i] for i in idx]
    resolutions = [o.evidence.resolution for o in cells if o.evidence is not None]
    resolution = max(resolutions) if resolutions else math.inf
    errors = [o for o in cells if o.error]
    rejected = [i for i in idx if reject[i]]
    if rejected:
        best = min(rejected, key=lambda i: (p_adj[i], -(outcomes[i].evidence.effect or 0)))
        ev = outcomes[best].evidence
        holds = holds_on(claim, [outcomes[i] for i in idx], [bool(reject[i]) for i in idx])
        return VariantVerdict("refuted", f"violation {ev.effect:.3g} (tolerance {claim.tolerance:g}) at "
                              f"{_where(outcomes[best].spec)}, adjusted p = {p_adj[best]:.3g}"
                              + (f"; holds on {holds}" if holds else ""),
                              _witness(outcomes[best], p_adj[best]), resolution, len(cells), holds_on=holds)
    if errors:
        return VariantVerdict("inconclusive", f"{len(errors)} cell(s) failed: {errors[0].error}", None, resolution,
                              len(cells), cause="error")
    if not cells:
        reason = claim.untestable or "no cell of this tier lies in the claim's hypothesis domain"
        return VariantVerdict("inconclusive", reason, None, resolution, 0, cause="scope")
    flagged = [o for o in cells if o.evidence.flags]
    if flagged:
        first = flagged[0].evidence.flags[0]
        return VariantVerdict("inconclusive", f"{len(flagged)} of {len(cells)} cell(s) cannot decide: "
                              f"{first} at {_where(flagged[0].spec)}", None, resolution, len(cells),
                              cause="power" if first.startswith(_POWER_FLAGS) else "evidence")
    edge = [o for o in cells if not o.evidence.upper <= claim.tolerance]
    weak = [o for o in edge if not o.evidence.resolution <= claim.tolerance]
    if weak:
        worst = max(weak, key=lambda o: o.evidence.resolution)
        return VariantVerdict("inconclusive", f"underpowered: {len(weak)} of {len(cells)} cell(s) have a confidence "
                              f"radius {worst.evidence.resolution:.3g} > tolerance {claim.tolerance:g}, so not even "
                              f"an exactly true claim could be supported there (worst at {_where(worst.spec)}, "
                              f"{worst.evidence.n} replicates){_replicates_needed(worst.evidence, claim.tolerance)}",
                              None, resolution, len(cells), cause="power")
    if edge:
        worst = max(edge, key=lambda o: o.evidence.upper)
        return VariantVerdict("inconclusive", f"{len(edge)} of {len(cells)} cell(s) cannot exclude a violation "
                              f"beyond the tolerance: upper bound {worst.evidence.upper:.3g} > "
                              f"{claim.tolerance:g} at {_where(worst.spec)}", None, resolution, len(cells),
                              cause="power")
    if claim.universal and not any(o.spec.kind == "search" for o in cells):
        return VariantVerdict("inconclusive", "universally quantified claim without an adversarial search",
                              None, resolution, len(cells), cause="scope")
    covered, cover_text = variant_coverage(claim, [o.spec for o in cells])
    if not covered:
        return VariantVerdict("inconclusive", f"not covered: {cover_text}", None, resolution, len(cells),
                              cause="coverage", coverage=cover_text)
    validity = weakest_validity(o.evidence for o in cells)
    basis = next(o.evidence for o in cells if o.evidence.validity == validity)
    reason = f"validity: {validity}" + (f" ({basis.assumption})" if basis.assumption else "")
    return VariantVerdict("supported", reason, None, resolution, len(cells), validity, coverage=cover_text)


def refuted_readings(outcomes: list[CellOutcome], alpha: float) -> set[str]:
    """The readings (variants) of one claim's outcomes that a cell refutes whatever the claim's other cells show: its
    p-value times the number of cells with evidence is at most ``alpha``. Bonferroni's rejection implies Holm's
    (:func:`decide`) for any p-values of the other cells, so extending them cannot take the refutation back, and in
    a reading refuted by one violation its undecided cells cannot change its verdict."""
    evidence = [o for o in outcomes if o.evidence is not None]
    return {o.spec.variant for o in evidence if o.evidence.p_value * len(evidence) <= alpha}


def variant_coverage(claim: Claim, specs: list[CellSpec]) -> tuple[bool, str | None]:
    """Whether one reading's cells (grid points, and the search when one runs) cover its declared domain;
    ``(True, None)`` for a claim without a declared domain."""
    if not specs:
        return False, "no cell"
    domain = claim.reading_domain(specs[0].variant)
    if domain is None:
        return True, None
    searched = claim.searched if any(s.kind == "search" for s in specs) else ()
    return domain_coverage(domain, [s.params for s in specs if s.kind == "grid"], searched)


def coverage_table(claim: Claim) -> dict[str, dict[str, dict]]:
    """The design's coverage of each reading's domain at each tier, before anything runs:
    ``{tier: {reading: {"covered": bool, "coverage": text, "cells": n}}}`` (empty without a domain)."""
    if claim.domain is None:
        return {}
    out = {}
    for tier in TIERS:
        specs = plan(claim, tier=tier, seed=0)
        out[tier] = {}
        for variant in claim.variants:
            mine = [s for s in specs if s.variant == variant]
            covered, text = variant_coverage(claim, mine)
            out[tier][variant] = dict(covered=covered, coverage=text, cells=len(mine),
                                      narrowed=claim.narrowed(variant))
    return out


def _good(outcome: CellOutcome, rejected: bool, tolerance: float) -> bool:
    ev = outcome.evidence
    return ev is not None and not rejected and not ev.flags and ev.upper <= tolerance


def holds_on(claim: Claim, cells: list[CellOutcome], rejected: list[bool]) -> str | None:
    """The largest sub-grid, cut along declared axes, on which every cell supports the claim.

    Greedily removes the axis value whose cells hold the most violations per supporting cell lost, until no
    rejected cell is left; then, the same way, the values whose cells are undecided (flagged, or an upper bound
    above the tolerance), so one undecided cell elsewhere does not hide where the claim holds. Reports the
    remaining values of the axes it cut (``"z ∈ {0.5, 1}"``), or ``None`` when nothing supported remains (or the
    claim declares no domain). Only grid cells count: a search's witness is one point, which the grid's cut may
    or may not exclude.
    """
    if claim.domain is None:
        return None
    grid = [(o, r) for o, r in zip(cells, rejected, strict=True) if o.spec.kind == "grid"]
    axes = [a for a in claim.domain if all(a in o.spec.params for o, _ in grid)]
    keep = {a: {_key(o.spec.params[a]) for o, _ in grid} for a in axes}
    cut: set[str] = set()

    def inside(o):
        return all(_key(o.spec.params[a]) in keep[a] for a in axes)

    for is_bad in (lambda o, r: r, lambda o, r: not _good(o, r, claim.tolerance)):
        while True:
            live = [(o, r) for o, r in grid if inside(o)]
            bad = [(o, r) for o, r in live if is_bad(o, r)]
            if not bad:
                break
            best, best_score = None, None
            for a in axes:
                for value in {_key(o.spec.params[a]) for o, _ in bad}:
                    removed = [(o, r) for o, r in live if _key(o.spec.params[a]) == value]
                    lost = sum(_good(o, r, claim.tolerance) for o, r in removed)
                    gained = sum(bool(is_bad(o, r)) for o, r in removed)
                    score = (gained / (lost + 1), -lost)
                    if best_score is None or score > best_score:
                        best, best_score = (a, value), score
            if best is None:
                return None
            keep[best[0]].discard(best[1])
            cut.add(best[0])
    if not any(inside(o) for o, _ in grid):
        return None
    return ", ".join(f"{a} ∈ {{{', '.join(sorted(keep[a], key=_order))}}}" for a in claim.domain if a in cut)


def _key(value) -> str:
    return json.dumps(value, default=str) if not isinstance(value, str) else value


def _order(text: str):
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def _replicates_needed(ev: Evidence, tolerance: float) -> str:
    """What would decide an underpowered cell: the replicates at which its radius is half the tolerance (where an
    exactly true claim is supported unless its estimate errs by more than half the radius), taking the radius to
    fall as ``1/√n`` (iid replicates, finite variance): ``n·(2·radius/tolerance)²``."""
    if not ev.n or not math.isfinite(ev.resolution):
        return "; more replicates would decide it"
    need = replicates_for_radius(ev.n, ev.resolution, tolerance / 2)
    return (f"; a radius of half the tolerance, which decides an exactly true claim, needs about {need:.2g} "
            "replicates there (the radius falls as 1/√n)")


def _where(spec: CellSpec) -> str:
    if spec.kind == "search":
        return f"search restart {spec.restart}"
    return ", ".join(f"{k}={v}" for k, v in spec.params.items()) or "the single cell"


#: Most cells in one task (a worker process's or dask's): a task costs the transfer (and dask's scheduler) a few
#: milliseconds, as much as many a cheap cell, so cells travel in batches (measured in docs/distributed.md).
MAX_BATCH = 32


def _point(spec: CellSpec) -> tuple:
    """The grid point a cell belongs to (its readings share it; a search restart is a point of its own)."""
    if spec.kind != "grid":
        return (spec.claim.id, spec.kind, spec.variant, spec.restart)
    return (spec.claim.id, json.dumps(dict(spec.params), sort_keys=True, default=str))


def batches(specs: list[CellSpec], workers: int) -> list[list[CellSpec]]:
    """Consecutive cells in batches of about :data:`MAX_BATCH` at most, at least 8 batches per worker where there
    are cells enough (so that the last ones do not leave workers idle), never splitting the readings of one grid
    point (:func:`~rfkit.validation.cells.plan` lists them together): a check that shares work across them
    (``CellContext.shared_rng``, :func:`~rfkit.validation.harness.shared`) does it once per point, not once per
    batch (macformer.thm3.scale_restoration: 72 readings of a point on one set of RMFA draws)."""
    size = max(1, min(MAX_BATCH, len(specs) // (8 * max(1, workers))))
    out: list[list[CellSpec]] = []
    for _, group in itertools.groupby(specs, key=_point):
        group = list(group)
        if out and len(out[-1]) + len(group) <= size:
            out[-1].extend(group)
        else:
            out.append(group)
    return out


def run_cells(specs: list[CellSpec]) -> list[CellOutcome]:
    """:func:`~rfkit.validation.cells.run_cell` over a batch (the unit of work of a worker)."""
    return [run_cell(spec) for spec in specs]


#: A worker process's queue of finished cells (set by :func:`_one_core_worker`).
_FINISHED = None


def _run_pickled(batch_id: int, batch: bytes) -> int:
    """:func:`~rfkit.validation.cells.run_cell` over a batch pickled by cloudpickle (claims carry lambdas and
    closures, which the standard pickle cannot send to a worker process; it reads what cloudpickle wrote). Each
    outcome goes to the parent as soon as it is done, ``(batch_id, index, (evidence, seconds, error, cpu
    seconds))``, without its spec (the parent holds the specs), so that a batch of slow cells is checkpointed and
    counted cell by cell. Returns the batch's size."""
    specs = pickle.loads(batch)
    for i, spec in enumerate(specs):
        o = run_cell(spec)
        _FINISHED.put((batch_id, i, (o.evidence, o.seconds, o.error, o.cpu_seconds)))
    return len(specs)


def _one_core_worker(finished) -> None:
    """Worker-process initialiser: the queue of finished cells, and one thread per worker (one worker per core, no
    oversubscription): BLAS now, and OpenMP/MKL/OpenBLAS (torch's intra-op threads included) in whatever a cell
    imports later."""
    from threadpoolctl import threadpool_limits

    global _FINISHED
    _FINISHED = finished
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"
    threadpool_limits(limits=1, user_api="blas")


#: Fewest cells worth worker processes when their number is left to the engine (``workers="auto"``): starting a
#: worker (a fresh interpreter importing rfkit, and its first JIT compilations) costs a few seconds, as much as
#: some hundred quick cells.
PARALLEL_MIN_CELLS = 200


def usable_cpus() -> int:
    """The CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def auto_workers(cells: int) -> int:
    """Worker processes for ``cells`` cells when the run leaves it to the engine: one per CPU this process may use,
    or 1 (in-process) below :data:`PARALLEL_MIN_CELLS` cells."""
    return usable_cpus() if cells >= PARALLEL_MIN_CELLS else 1


#: The error of a cell whose worker process was killed while it ran alone (the system's out-of-memory killer, or a
#: signal): rerunning it would kill the worker again.
KILLED = ("the worker process running this cell was killed (run alone, so by the cell itself: out of memory, most "
          "likely); its evidence is lost")


class _Executor:
    """Runs cells in-process (``workers`` None or 1), in a pool of ``workers`` local processes (the standard
    library's, no server), or on the dask cluster at ``scheduler``; kept for the whole run (both phases)."""

    def __init__(self, workers: int | None, scheduler: str | None):
        self.client = self.pool = self.finished = self.checkpoint = None
        self.workers, self.futures = 1, []
        if scheduler:
            from dask.distributed import Client

            self.client = Client(scheduler)
            self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        elif workers and workers > 1:
            self.workers = workers
            self._start_pool()

    def _start_pool(self):
        import concurrent.futures
        import multiprocessing

        # spawn: a fresh interpreter per worker (forking a process that holds BLAS/Numba threads is unsafe)
        context = multiprocessing.get_context("spawn")
        self.finished = context.SimpleQueue()
        self.pool = concurrent.futures.ProcessPoolExecutor(self.workers, mp_context=context,
                                                           initializer=_one_core_worker, initargs=(self.finished,))
        self.futures = []

    def _restart_pool(self):
        """A fresh pool after a worker was killed (the standard library's pool is broken for good then)."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self._start_pool()

    def map(self, specs: list[CellSpec]) -> Iterator[CellOutcome]:
        """Outcomes of ``specs`` in completion order (those in the checkpoint first, without running them)."""
        ckpt = self.checkpoint
        if ckpt is not None:
            todo = []
            for spec in specs:
                stored = ckpt.get(spec)
                if stored is None:
                    todo.append(spec)
                else:
                    yield CellOutcome(spec, *stored)
            specs = todo
        for outcome in self._run(specs):
            if ckpt is not None:
                ckpt.add(outcome.spec, outcome.evidence, outcome.seconds, outcome.error, outcome.cpu_seconds)
            yield outcome

    def _run(self, specs: list[CellSpec]) -> Iterator[CellOutcome]:
        if self.client is not None:
            from dask.distributed import as_completed

            for future in as_completed(self.client.map(run_cells, batches(specs, self.workers), pure=False)):
                yield from future.result()
        elif self.pool is not None:
            yield from self._run_pool(specs)
        else:
            for spec in specs:
                yield run_cell(spec)

    def _run_pool(self, specs: list[CellSpec]) -> Iterator[CellOutcome]:
        """Run ``specs`` on the local pool. A worker killed by the system (out of memory: the kernel kills the largest
        process) breaks the pool: the cells that may have been running then are run again alone, one at a time, in
        a fresh pool; one that is killed alone is the cause and becomes an error outcome (:data:`KILLED`), never a
        verdict; the cells not yet run go on in parallel."""
        remaining = list(specs)
        while remaining:
            left, suspects = yield from self._pool_pass(remaining)
            if not left:
                return
            self._restart_pool()
            for spec in suspects:
                alone, _ = yield from self._pool_pass([spec])
                if alone:
                    yield CellOutcome(spec, None, 0.0, KILLED, 0.0)
                    self._restart_pool()
            remaining = [s for s in left if not any(s is t for t in suspects)]

    def _pool_pass(self, specs: list[CellSpec]):
        """Yield the outcomes of ``specs`` from the pool; return ``([], [])``, or, where a worker was killed, the cells
        not finished and those among them that may have been running (each batch runs its cells in order)."""
        import concurrent.futures

        import cloudpickle

        parts = batches(specs, self.workers)
        futures = [self.pool.submit(_run_pickled, b, cloudpickle.dumps(batch)) for b, batch in enumerate(parts)]
        self.futures += futures
        received = [0] * len(parts)
        for _ in range(len(specs)):
            while self.finished.empty():  # a worker that dies (killed by the kernel) fails its future
                if any(f.done() and f.exception() is not None for f in futures) and self.finished.empty():
                    left = [s for b, part in enumerate(parts) for s in part[received[b]:]]
                    started = [part[received[b]] for b, part in enumerate(parts) if 0 < received[b] < len(part)]
                    waiting = [part[0] for b, part in enumerate(parts) if received[b] == 0]
                    # a batch not heard from may have been running its first cell: as many as the pool could hold
                    return left, started + waiting[:self.workers + 1]
                concurrent.futures.wait(futures, timeout=0.05, return_when=concurrent.futures.FIRST_EXCEPTION)
            b, i, result = self.finished.get()
            received[b] += 1
            yield CellOutcome(parts[b][i], *result)
        return [], []

    def close(self):
        if self.client is not None:
            self.client.close()
        if self.pool is not None:
            if any(not f.done() for f in self.futures):
                # a run stopped early (an error, Ctrl-C) leaves workers busy, or blocked on a queue nobody reads:
                # stop them rather than wait (ProcessPoolExecutor has no public terminate)
                for process in list((getattr(self.pool, "_processes", None) or {}).values()):
                    process.terminate()
            self.pool.shutdown(wait=True, cancel_futures=True)


def validate(claims: Iterable[Claim] | None = None, *, paper: str | None = None, tier: str = "quick",
             seed: int = 0, alpha: float = 1e-3, power: float = 0.8, workers: int | str | None = None,
             scheduler: str | None = None, implementations: Mapping[str, Callable] | None = None,
             backend: str = "numpy", device: str = "cpu", progress: bool | None = None,
             checkpoint: str | os.PathLike | None = None, resume: bool = False) -> RunResult:
    """Validate claims and return their verdicts with all evidence.

    Parameters
    ----------
    claims : iterable of Claim, optional
        Default: every registered claim (of ``paper`` if given); with ``implementations``, the claims
        that use one of those roles.
    tier : {"smoke", "quick", "full"}
    seed : int
        Root seed; every cell's generator derives from it and the cell's coordinates.
    alpha : float
        Family-wise level per claim (Holm across its cells and variants).
    power : float
        Power at which minimal detectable effects are computed.
    workers, scheduler
        Run cells in ``workers`` local processes (a standard-library pool, no server; ``None`` or 1: in this
        process; ``"auto"``: :func:`auto_workers`), or on the dask cluster whose scheduler is at ``scheduler``
        (``tcp://host:port``).
    implementations : mapping role -> callable
        Third-party estimators to validate in place of rfkit's (see :mod:`rfkit.validation.adapters`).
    backend, device
        ``"torch"`` runs the roles :mod:`rfkit.gpu` covers on torch (on ``device``, ``"cpu"`` or ``"cuda"``);
        explicit ``implementations`` take precedence over them.
    progress : bool, optional
        ``None`` or ``True``: a tqdm bar on a terminal, timestamped lines on stderr otherwise
        (:mod:`rfkit.validation.progress`); ``False``: nothing.
    checkpoint, resume
        Append every finished cell to the file ``checkpoint``; with ``resume``, first skip the cells it holds
        (from a run with the same settings and code: :mod:`rfkit.validation.checkpoint`). Not with
        ``implementations`` (third-party code is not part of the checkpoint's digest).
    """
    from rfkit.validation.claims import all_claims

    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; expected one of {TIERS}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if checkpoint is not None and implementations:
        raise ValueError("checkpoint: not with third-party implementations (their code is not in its digest)")
    if resume and checkpoint is None:
        raise ValueError("resume needs a checkpoint file")
    if claims is None:
        claims = [c for c in all_claims() if paper is None or c.paper == paper]
        if implementations:
            claims = [c for c in claims if set(c.roles) & set(implementations)]
    claims = list(claims)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    version = rfkit_version()
    commit = source_commit()  # the code that runs is the code at the start: a commit made during a long run is not
    t0 = time.perf_counter()
    specs_by_claim = {c.id: plan(c, tier=tier, seed=seed, alpha=alpha, power=power, backend=backend,
                                 device=device, implementations=implementations) for c in claims}
    all_specs = [s for specs in specs_by_claim.values() for s in specs]
    index = {s.key: i for i, s in enumerate(all_specs)}
    outcomes: list[CellOutcome | None] = [None] * len(all_specs)
    ckpt = None
    if checkpoint is not None:  # first: a refused checkpoint leaves no cluster or progress bar behind
        from rfkit.validation.checkpoint import Checkpoint

        ckpt = Checkpoint(checkpoint, dict(tier=tier, seed=seed, alpha=alpha, power=power, backend=backend,
                                           device=device), resume=resume)
    if workers == "auto":
        workers = auto_workers(len(all_specs))
    elif workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive int, 'auto' or None, got {workers!r}")
    bar = show_progress(len(all_specs), f"validate ({tier})", show=progress)
    executor = _Executor(workers, scheduler)
    executor.checkpoint = ckpt
    try:
        for outcome in executor.map(all_specs):
            outcomes[index[outcome.spec.key]] = outcome
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(outcome.spec.claim.id, refresh=False)
        spans, start = {}, 0
        for claim in claims:
            spans[claim.id] = (start, start + len(specs_by_claim[claim.id]))
            start = spans[claim.id][1]
        # the reserve goes to the cells that can change the verdict: not to a reading reported beside it, nor to a
        # reading already refuted (its undecided cells keep their planned budget and say so)
        more = []
        for c in claims:
            mine = outcomes[slice(*spans[c.id])]
            settled = refuted_readings(mine, alpha)
            more += extensions([o for o in mine if not c.beside(o.spec.variant) and o.spec.variant not in settled])
        if bar is not None and more:
            bar.total += len(more)
            bar.set_description(f"validate ({tier}, extending {len(more)} undecided)")
        for outcome in executor.map(more):
            i = index[outcome.spec.key]
            outcome.seconds += outcomes[i].seconds
            outcome.cpu_seconds += outcomes[i].cpu_seconds
            if outcome.error is not None:  # the extension failed (e.g. killed for memory): the planned budget's
                first = outcomes[i].evidence       # evidence stands, and says so
                outcome = dataclasses.replace(outcomes[i], seconds=outcome.seconds, cpu_seconds=outcome.cpu_seconds,
                                              evidence=dataclasses.replace(first, extra=dict(
                                                  first.extra, extension_failed=outcome.error)))
            outcomes[i] = outcome
            if bar is not None:
                bar.update(1)
    finally:
        executor.close()
        if bar is not None:
            bar.close()
    results = []
    for claim in claims:
        mine = outcomes[slice(*spans[claim.id])]
        verdict, reason, variants, reject, p_adj = decide(claim, mine, alpha)
        results.append(ClaimResult(claim, tier, seed, alpha, verdict, reason, variants, mine, reject, p_adj,
                                   sum(o.seconds for o in mine), created, version,
                                   cpu_seconds=sum(o.cpu_seconds for o in mine)))
    return RunResult(results, tier, seed, alpha, created, version, time.perf_counter() - t0,
                     resumed=ckpt.reused if ckpt else 0, stale=ckpt.stale if ckpt else 0, commit=commit,
                     workers=executor.workers, cpus=usable_cpus())


def validate_implementation(implementations: dict[str, Callable], *, tier: str = "quick", seed: int = 0,
                            alpha: float = 1e-3, **options):
    """Run every registered claim that uses one of these roles, with these implementations
    (:mod:`rfkit.validation.adapters` names the roles).

    Returns the :class:`~rfkit.validation.engine.RunResult`; unknown roles raise ``ValueError``.
    """
    unknown = sorted(set(implementations) - set(known_roles()))
    if unknown:
        raise ValueError(f"unknown role(s) {unknown}; expected some of {known_roles()}")
    return validate(None, tier=tier, seed=seed, alpha=alpha, implementations=implementations, **options)
