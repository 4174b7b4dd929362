"""How big a tier is, and how long it will take: the plan of each claim and a sampled estimate of its time.

``rfkit plan --tier full --paper performer --sample 4`` builds every cell of the tier (as
:func:`~rfkit.validation.engine.validate` would), runs ``sample`` grid points per claim spread over its plan
(one at random from each of ``sample`` equal strata of the plan's order) and up to two search restarts, and
extrapolates: ``seconds = mean(sampled grid points) × grid points + mean(sampled restarts) × restarts``. A grid
point is timed with all its readings, one after another as a run does, so that readings sharing a point's
measurement (:func:`~rfkit.validation.harness.shared`) are counted once, as they cost (timing single cells charged
each reading the whole measurement: 72 readings of one macformer point sharing four RMFA runs came out 18x too
slow). Not counted: the engine's second round for undecided sequential cells (at most the claim's planned
sequential budget again times the tier's reserve, :data:`~rfkit.validation.cells.RESERVE`). A cell
is timed in CPU seconds of this process with BLAS on one thread (as in a worker process), so estimates are
the single-process time on one core of this machine, whatever else runs beside (wall time under load measured
the load). A cell that runs past the claim's ``cap`` (wall seconds) is stopped and counted with the CPU time it
ran, so that claim's estimate is a lower bound (``lower_bound``). The spread of the sampled cells (``min``,
``max``) says how far to trust them (claims mixing instant exact cells with slow Monte Carlo cells vary most).
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from rfkit.validation.cells import plan, run_cell
from rfkit.validation.checkpoint import claim_digest, read_records
from rfkit.validation.engine import source_commit
from rfkit.validation.model import Claim
from rfkit.validation.timing import single_threaded_blas

__all__ = ["estimate", "plan_table"]


class _PastCap(BaseException):
    """Raised in a cell that ran past the claim's sampling cap (a BaseException: checks cannot swallow it)."""


def _alarm(*_):
    raise _PastCap()


def _sampled(units: list, k: int, rng: random.Random) -> list:
    """One unit at random from each of ``k`` equal strata of ``units`` (all of them when fewer)."""
    n = len(units)
    k = min(k, n)
    return [units[rng.randrange(j * n // k, (j + 1) * n // k)] for j in range(k)]


def _points(grid: list) -> list[list]:
    """The grid cells grouped by point (their readings, in plan order: :func:`~rfkit.validation.cells.plan` puts
    a point's readings next to each other)."""
    by_point: dict[str, list] = {}
    for spec in grid:
        by_point.setdefault(json.dumps(spec.params, sort_keys=True, default=str), []).append(spec)
    return list(by_point.values())


def estimate(claims: Iterable[Claim], *, tier: str, seed: int = 0, sample: int = 0, cap: float = 60.0,
             measured: Iterable[str | Path] = (), progress=None) -> list[dict]:
    """One row per claim: its cells and restarts at ``tier`` and, with ``sample > 0`` or ``measured``, the estimated
    seconds.

    ``measured``: checkpoints of runs of the tier (``OUT/cells.ckpt``; the seed must match). The cells they hold,
    run by the claim's current code (:func:`~rfkit.validation.checkpoint.claim_digest`), count with their
    measured CPU seconds (the engine's extensions of them included); the claim's other grid points (restarts) are
    then extrapolated from the mean of its measured ones (a run measures a claim's points in plan order, so where
    later points are larger the rest of a partly run claim costs more), and sampled only where none is measured.
    ``measured`` in a row is how many of its cells were read, not run. ``cap`` bounds the seconds spent sampling
    one claim (enforced with ``SIGALRM`` in the main thread of a POSIX process; elsewhere cells run to their end).
    ``progress(row)`` is called after each claim.
    """
    if sample < 0 or not cap > 0:
        raise ValueError(f"sample must be >= 0 and cap > 0, got sample={sample}, cap={cap}")
    stored = _stored(measured, tier, seed)
    timed = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    rows, commit = [], source_commit()
    for claim in claims:
        specs = plan(claim, tier=tier, seed=seed)
        grid = [s for s in specs if s.kind == "grid"]
        search = [s for s in specs if s.kind == "search"]
        points = _points(grid)
        row = dict(id=claim.id, paper=claim.paper, tier=tier, cells=len(grid), points=len(points),
                   restarts=len(search), replicates=claim.n_replicates(tier), seconds=None, lower_bound=False,
                   sampled=0, measured=0, min=None, max=None, errors=[], commit=commit)
        digest = claim_digest(claim) if stored else None
        if (sample or stored) and specs:
            rng = random.Random(f"{claim.id}/{seed}")
            start, seconds, times, cells = time.perf_counter(), 0.0, [], 0
            for units, k in ((points, sample), ([[s] for s in search], min(2, sample))):
                per_unit = [_unit_seconds(unit, stored, digest) for unit in units]
                read = [t for t in per_unit if t is not None]
                row["measured"] += sum(len(u) for u, t in zip(units, per_unit, strict=True) if t is not None)
                if read:  # measured: the rest of the group at the mean of its measured units
                    seconds += float(np.sum(read)) + float(np.mean(read)) * (len(units) - len(read))
                    times += read
                    continue
                took = []
                for unit in _sampled(units, k, rng):
                    left = cap - (time.perf_counter() - start)
                    if left <= 0 and (took or times):
                        break
                    previous = signal.signal(signal.SIGALRM, _alarm) if timed else None
                    if timed:
                        signal.setitimer(signal.ITIMER_REAL, max(left, 1.0))
                    c0 = time.process_time()
                    try:
                        with single_threaded_blas():
                            for spec in unit:
                                cells += 1
                                outcome = run_cell(spec)
                                if outcome.error:
                                    row["errors"].append(outcome.error)
                    except _PastCap:
                        row["lower_bound"] = True
                    finally:
                        if timed:
                            signal.setitimer(signal.ITIMER_REAL, 0)
                            signal.signal(signal.SIGALRM, previous)
                    took.append(time.process_time() - c0)
                    if row["lower_bound"]:
                        break
                if took:
                    seconds += float(np.mean(took)) * len(units)
                elif units:
                    row["lower_bound"] = True  # neither measured nor sampled: this group counts as 0 s
                times += took
                if row["lower_bound"]:
                    break
            row.update(seconds=seconds, sampled=cells, min=min(times, default=None), max=max(times, default=None))
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def _stored(paths: Iterable[str | Path], tier: str, seed: int) -> dict[str, dict]:
    """``{cell key: {(budget, digest): cpu seconds}}`` of the checkpoints ``paths`` (a run of ``tier`` and
    ``seed``; another is refused). A round stored twice by the same code (a checkpoint copied to resume from, then
    given beside its copy) counts once: its first record. A round rerun after its claim's code changed is stored
    again under the new digest (a resumed run appends it after the stale one), so both are kept."""
    out: dict[str, dict] = {}
    for path in paths:
        header, records, _ = read_records(path)
        if header.get("tier") != tier or header.get("seed") != seed:
            raise ValueError(f"{path}: a checkpoint of tier {header.get('tier')!r}, seed {header.get('seed')!r}; "
                             f"the plan is of tier {tier!r}, seed {seed}")
        for key, budget, digest, _evidence, _seconds, _error, cpu in records:
            out.setdefault(key, {}).setdefault((budget, digest), cpu)
    return out


def _unit_seconds(unit: list, stored: dict, digest: str | None) -> float | None:
    """CPU seconds of a unit (a grid point's cells, or a restart) from the checkpoints, every round of each cell
    (the first round and the engine's extensions); ``None`` unless each cell's first round is stored, run by the
    claim's current code."""
    total = 0.0
    for spec in unit:
        rounds = [(budget, cpu) for (budget, code), cpu in stored.get(spec.key, {}).items() if code == digest]
        if not any(budget is None for budget, _ in rounds):
            return None
        total += sum(cpu for _, cpu in rounds)
    return total


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def plan_table(rows: list[dict]) -> str:
    """A text table of :func:`estimate`'s rows (longest first when timed) and the total per paper."""
    timed = any(r["seconds"] is not None for r in rows)
    order = sorted(rows, key=lambda r: -(r["seconds"] or 0)) if timed else rows
    head = f" {'estimate':>12} {'measured':>9}  cells run [min, max] s a unit" if timed else ""
    lines = [f"{'claim':50} {'cells':>8} {'restarts':>8}{head}"]
    for r in order:
        line = f"{r['id']:50} {r['cells']:8d} {r['restarts']:8d}"
        if r["seconds"] is not None:
            spread = f"[{r['min']:.3g}, {r['max']:.3g}]" if r["min"] is not None else ""
            line += (f" {'≥' if r['lower_bound'] else ' '}{_duration(r['seconds']):>11} {r.get('measured', 0):9d}  "
                     f"{r['sampled']} {spread}")
        lines.append(line)
    lines.append("")
    for paper in dict.fromkeys(r["paper"] for r in rows):
        mine = [r for r in rows if r["paper"] == paper]
        total = f"{paper}: {sum(r['cells'] for r in mine)} cells, {sum(r['restarts'] for r in mine)} restarts"
        if timed:
            bound = sum(r["lower_bound"] for r in mine)
            total += (f", {'≥ ' if bound else ''}{_duration(sum(r['seconds'] or 0 for r in mine))} single-process"
                      + (f" ({bound} claim(s) a lower bound)" if bound else "")
                      + f", {sum(r.get('measured', 0) for r in mine)} cell(s) measured by a run")
        lines.append(total)
    return "\n".join(lines)
