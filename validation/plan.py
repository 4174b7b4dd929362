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
is timed in CPU seconds of this process with BLAS on one thread (as on a ``--workers`` cluster), so estimates are
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

import numpy as np

from rfkit.validation.cells import plan, run_cell
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
             progress=None) -> list[dict]:
    """One row per claim: its cells and restarts at ``tier`` and, with ``sample > 0``, the estimated seconds.

    ``cap`` bounds the seconds spent sampling one claim (enforced with ``SIGALRM`` in the main thread of a
    POSIX process; elsewhere cells run to their end). ``progress(row)`` is called after each claim.
    """
    if sample < 0 or not cap > 0:
        raise ValueError(f"sample must be >= 0 and cap > 0, got sample={sample}, cap={cap}")
    timed = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    rows, commit = [], source_commit()
    for claim in claims:
        specs = plan(claim, tier=tier, seed=seed)
        grid = [s for s in specs if s.kind == "grid"]
        search = [s for s in specs if s.kind == "search"]
        points = _points(grid)
        row = dict(id=claim.id, paper=claim.paper, tier=tier, cells=len(grid), points=len(points),
                   restarts=len(search), replicates=claim.n_replicates(tier), seconds=None, lower_bound=False,
                   sampled=0, min=None, max=None, errors=[], commit=commit)
        if sample and specs:
            rng = random.Random(f"{claim.id}/{seed}")
            start, seconds, times, cells = time.perf_counter(), 0.0, [], 0
            for units, k in ((points, sample), ([[s] for s in search], min(2, sample))):
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
                    row["lower_bound"] = True  # no time left to sample this group: it counts as 0 s
                times += took
                if row["lower_bound"]:
                    break
            row.update(seconds=seconds, sampled=cells, min=min(times), max=max(times))
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


def plan_table(rows: list[dict]) -> str:
    """A text table of :func:`estimate`'s rows (longest first when timed) and the total per paper."""
    timed = any(r["seconds"] is not None for r in rows)
    order = sorted(rows, key=lambda r: -(r["seconds"] or 0)) if timed else rows
    head = f" {'estimate':>12}  cells run [min, max] s a point" if timed else ""
    lines = [f"{'claim':50} {'cells':>8} {'restarts':>8}{head}"]
    for r in order:
        line = f"{r['id']:50} {r['cells']:8d} {r['restarts']:8d}"
        if r["seconds"] is not None:
            line += (f" {'≥' if r['lower_bound'] else ' '}{_duration(r['seconds']):>11}  {r['sampled']} "
                     f"[{r['min']:.3g}, {r['max']:.3g}]")
        lines.append(line)
    lines.append("")
    for paper in dict.fromkeys(r["paper"] for r in rows):
        mine = [r for r in rows if r["paper"] == paper]
        total = f"{paper}: {sum(r['cells'] for r in mine)} cells, {sum(r['restarts'] for r in mine)} restarts"
        if timed:
            bound = sum(r["lower_bound"] for r in mine)
            total += (f", {'≥ ' if bound else ''}{_duration(sum(r['seconds'] or 0 for r in mine))} single-process"
                      + (f" ({bound} claim(s) a lower bound)" if bound else ""))
        lines.append(total)
    return "\n".join(lines)
