"""Measuring cost honestly on a shared machine: peak memory, and CPU time with single-threaded BLAS.

Complexity claims and the benchmark's memory column use these; the benchmark's ``seconds`` are wall clock.

* :func:`peak_bytes` — peak traced allocation during one call (``tracemalloc``, which numpy reports to):
  deterministic, so memory slopes are exact.
* :func:`interleaved_times` — repeated *CPU time of the calling thread* with BLAS limited to one thread
  (threadpoolctl). Other processes' load stretches wall time by whole scheduler slices and idle BLAS workers
  spin, but neither adds work to this thread, so scaling slopes measure the work. Calls are timed
  round-robin, so any remaining disturbance hits every size alike. Numba code here is not ``parallel``,
  so its work is on the calling thread too. With ``best_of`` a repeat is a block of rounds and each call's best
  time in it (load only adds time). :func:`interleaved_best_times` summarises them as best-of-k.
* :func:`timing_slope_test` — a timing is a random variable: the log-log slope of time against size is
  fitted on *every* repeated measurement (at least 5 sizes), with Student t on the fit's degrees of freedom.
* :func:`timing_ratio_slope_test` — the same fit for the ratio of two calls' paired times (an acceleration).
* :func:`cell_timing_slope` — :func:`timing_slope_test` at a claim cell's level, repeats and tolerance.
* :func:`timing_ratio_test` — "A is k times faster than B" on paired repeated timings (log-ratios, t).
* :func:`geometric_sizes` — the sizes of a timing sweep.
* :func:`count_slope_test` — a deterministic log-log slope (flop counts, peak bytes) against a claimed order.
"""

from __future__ import annotations

import gc
import math
import threading
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from rfkit.validation.search import margin_evidence
from rfkit.validation.stats import exact_test, ratio_test, slope_test

__all__ = ["peak_bytes", "single_threaded_blas", "interleaved_times", "interleaved_best_times", "timing_slope_test",
           "timing_ratio_slope_test", "cell_timing_slope", "timing_ratio_test", "geometric_sizes", "loglog_slope",
           "count_slope_test", "MACHINE_MARGIN", "LOAD_BEST_OF"]

#: Log-ratio a claim about relative speed measured on this CPU allows for the machine (another CPU, BLAS and
#: memory system than the paper's): 25% either way.
MACHINE_MARGIN = math.log(1.25)

#: Smallest relative resolution given to a best time (timer and CPU-frequency jitter).
TIMING_FLOOR = 0.02

#: Rounds per block (``best_of``) of the timing claims whose verdict followed the machine's load: each repeat is
#: a call's best time in a block of this many rounds (:func:`interleaved_times`).
LOAD_BEST_OF = 2


#: Calls of :func:`peak_bytes` when other threads run in the process (the least peak is the call's own).
PEAK_REPEATS = 3


def peak_bytes(fn: Callable[[], object], *, collect: bool = True) -> int:
    """Peak traced allocation during one call, above the baseline.

    ``collect`` runs the garbage collector first (slow in a large process; a sweep of calls collects once).
    tracemalloc counts every thread's allocations: where other threads run (a dask worker's communication and
    heartbeat threads), their allocations during the call add to its peak (5% at 6 MB was seen on a loaded worker),
    so the call is made ``PEAK_REPEATS`` times and the least peak is returned; alone in the process, once.
    """
    if collect:
        gc.collect()
    repeats = 1 if threading.active_count() == 1 else PEAK_REPEATS
    tracemalloc.start()
    try:
        peaks = []
        for _ in range(repeats):
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            fn()
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
        return min(peaks)
    finally:
        tracemalloc.stop()


def single_threaded_blas():
    """Context manager: BLAS limited to one thread inside the block (restored after)."""
    return threadpool_limits(limits=1, user_api="blas")


def interleaved_times(calls: list[Callable[[], object]], *, repeats: int, best_of: int = 1) -> np.ndarray:
    """``(repeats, len(calls))`` CPU times of the calling thread, single-threaded BLAS, calls round-robin
    after one warm-up call each (lazy imports, JIT compilation, first touch of memory).

    ``best_of > 1``: each row is a block of ``best_of`` consecutive rounds, and a call's time in it is its best
    (smallest) there. Other processes' load only ever adds CPU time to a measurement (cache and memory-bandwidth
    contention, interrupts): one disturbed round at one size is an outlier of a fit on every round, whose
    lack-of-fit inflation widens the whole interval, so the verdict follows the machine's load. A block's best is
    disturbed only when all its rounds are, and every block still holds every call, so a block's machine speed
    stays common to its calls; the blocks are independent rows."""
    if repeats < 1 or best_of < 1:
        raise ValueError(f"repeats and best_of must be >= 1, got {repeats} and {best_of}")
    times = np.empty((repeats * best_of, len(calls)))
    with single_threaded_blas():
        for call in calls:
            call()
        for row in times:
            for i, call in enumerate(calls):
                t0 = time.thread_time()
                call()
                row[i] = time.thread_time() - t0
    return times.reshape(repeats, best_of, len(calls)).min(axis=1)


def geometric_sizes(lo: int, hi: int, count: int = 5) -> list[int]:
    """``count`` sizes from ``lo`` to ``hi``, geometrically spaced, rounded to multiples of 16 (of 1 below 64).

    Timing sweeps span the asymptotic end of a size range (fixed per-call overheads and cache transitions
    bend the curve at small sizes) with at least the 5 sizes a slope test needs: ``geometric_sizes(lo, 4·lo)``
    has √2 steps, ``geometric_sizes(lo, 2^k·lo, 2k + 1)`` too. Multiples of 16 keep BLAS on its aligned
    kernels (an odd size such as 181 can take longer than 256, a curvature that is no growth).
    """
    step = 16 if lo >= 64 else 1
    return [int(round(lo * (hi / lo) ** (k / (count - 1)) / step)) * step for k in range(count)]


def _rounds_slope(sizes, times: np.ndarray, resolution: float, claimed: float, *, alpha: float, tolerance: float,
                  alternative: str, extra: dict, best_of: int = 1):
    """Log-log least-squares slope of ``times (rounds, sizes)`` against ``sizes``: one intercept per round and
    one slope, each point with the relative resolution ``resolution`` (inflated by the fit's scatter when
    larger); Student t on ``points - rounds - 1`` degrees of freedom."""
    x = np.broadcast_to(np.asarray(sizes, dtype=np.float64), times.shape).ravel()
    rounds = np.broadcast_to(np.arange(times.shape[0])[:, None], times.shape).ravel()
    y = times.ravel()
    info = dict(extra, sizes=np.asarray(sizes, dtype=np.float64).tolist(), repeats=int(times.shape[0]),
                best_of=best_of, measured="CPU time of the calling thread, single-threaded BLAS"
                + (f", best of {best_of} rounds per repeat" if best_of > 1 else ""))
    return slope_test(x, y, resolution * y, claimed, alpha=alpha, tolerance=tolerance, alternative=alternative,
                      groups=rounds, extra=info)


def _floored(times: np.ndarray) -> np.ndarray:
    return np.maximum(times, TIMING_FLOOR * np.median(times, axis=0))


def timing_slope_test(sizes, calls: list[Callable[[], object]], claimed: float, *, repeats: int, alpha: float,
                      tolerance: float, alternative: str = "less", best_of: int = 1, extra: dict | None = None):
    """Log-log slope of CPU time against ``sizes`` versus ``claimed`` from ``repeats`` rounds of every call.

    Every measurement is a point of a least-squares fit of ``log t`` on ``log size`` with one intercept per
    round (the calls are timed round-robin, so a round's machine speed, which drifts by tens of percent
    between rounds, is common to all its sizes) and one slope, each point with the relative resolution
    :data:`TIMING_FLOOR`; the slope's standard error comes from the scatter within rounds and the curvature
    between sizes (when larger than that floor), and the interval is Student t with
    ``points - rounds - 1`` degrees of freedom (:func:`rfkit.validation.stats.slope_test` with ``groups``).
    ``best_of > 1``: a round is a block of that many, each size's best time in it (:func:`interleaved_times`).
    Needs at least 5 sizes. ``alternative="less"``: "grows no faster than size^claimed". Validity:
    asymptotic (normal log-time errors).
    """
    times = _floored(interleaved_times(calls, repeats=max(repeats, 2), best_of=best_of))
    return _rounds_slope(sizes, times, TIMING_FLOOR, claimed, alpha=alpha, tolerance=tolerance,
                         alternative=alternative, extra=dict(extra or {}, seconds=times.min(axis=0).tolist()),
                         best_of=best_of)


def timing_ratio_slope_test(sizes, numerators: list[Callable[[], object]], denominators: list[Callable[[], object]],
                            claimed: float, *, repeats: int, alpha: float, tolerance: float, alternative: str,
                            extra: dict | None = None):
    """:func:`timing_slope_test` for the ratio ``t(numerators[i])/t(denominators[i])`` of paired CPU times (an
    acceleration ratio): both calls of a size are timed in the same round, each log ratio has the resolution of
    two timings (``√2·TIMING_FLOOR``), one intercept per round."""
    calls = [c for pair in zip(numerators, denominators, strict=True) for c in pair]
    times = _floored(interleaved_times(calls, repeats=max(repeats, 2)))
    ratios = times[:, 0::2] / times[:, 1::2]
    return _rounds_slope(sizes, ratios, math.sqrt(2) * TIMING_FLOOR, claimed, alpha=alpha, tolerance=tolerance,
                         alternative=alternative, extra=dict(extra or {}, ratios=np.median(ratios, axis=0).tolist()))


def _batched(calls: list[Callable[[], object]], min_seconds: float) -> tuple[list[Callable[[], object]], int]:
    """``calls`` each repeated ``loops`` times so that the smallest lasts ``min_seconds`` (one pilot call; a
    constant factor at every size, so the slope is unchanged; at most 1000 loops)."""
    with single_threaded_blas():
        calls[0]()
        t0 = time.thread_time()
        calls[0]()
        pilot = time.thread_time() - t0
    loops = int(min(1000, max(1, math.ceil(min_seconds / max(pilot, 1e-7)))))
    if loops == 1:
        return list(calls), 1
    return [lambda call=call: [call() for _ in range(loops)] for call in calls], loops


def cell_timing_slope(ctx, sizes, calls: list[Callable[[], object]], claimed: float, *, parts: int = 1,
                      repeats: int | None = None, min_seconds: float = 0.0, extra: dict | None = None):
    """"Time grows no faster than ``size^claimed``" in a claim cell: :func:`timing_slope_test` with ``repeats``
    rounds (default ``ctx.replicates``) at the level of one of ``parts`` sub-tests and the claim's tolerance.

    Calls faster than ``min_seconds`` are timed in loops of the same length at every size (the timer's jitter
    would swamp them); such sweeps are cheap and get twice the repeats."""
    loops = 1
    if min_seconds > 0:
        calls, loops = _batched(calls, min_seconds)
    repeats = (ctx.replicates if repeats is None else repeats) * (2 if loops > 1 else 1)
    return timing_slope_test(sizes, calls, claimed, repeats=repeats, alpha=ctx.alpha / parts,
                             tolerance=ctx.tolerance, alternative="less",
                             extra=dict(extra or {}, **({"calls_per_measurement": loops} if min_seconds > 0 else {})))


def timing_ratio_test(fast: Callable[[], object], slow: Callable[[], object], claimed_ratio: float, *, repeats: int,
                      alpha: float, tolerance: float, margin: float = MACHINE_MARGIN, best_of: int = 1,
                      extra: dict | None = None):
    """"``fast`` takes at most ``claimed_ratio`` times the time of ``slow``" on paired repeated CPU times:
    :func:`rfkit.validation.stats.ratio_test` on ``log(t_fast/t_slow)`` with the machine margin. ``best_of >
    1``: each pair is the two calls' best times in a block of that many rounds (:func:`interleaved_times`)."""
    times = interleaved_times([fast, slow], repeats=max(repeats, 3), best_of=best_of)
    return ratio_test(times[:, 0], times[:, 1], claimed_ratio, alpha=alpha, tolerance=tolerance, margin=margin,
                      alternative="less", extra=dict(extra or {}, seconds=times.tolist(), best_of=best_of))


def interleaved_best_times(calls: list[Callable[[], object]], *, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """Best-of-``repeats`` CPU time of each call and its resolution, timing the calls round-robin.

    The resolution of a best time is the gap to the second best (the spacing of the fastest runs), floored at
    :data:`TIMING_FLOOR` relative; complexity claims use it as the standard error in log-log slope fits, whose
    lack-of-fit inflation (scatter beyond these errors) absorbs any underestimate.
    """
    times = interleaved_times(calls, repeats=max(repeats, 2))
    ordered = np.sort(times, axis=0)
    best = ordered[0]
    return best, np.maximum(ordered[1] - best, TIMING_FLOOR * best)


def loglog_slope(sizes, values) -> float:
    """Least-squares slope of ``log values`` against ``log sizes``."""
    return float(np.polyfit(np.log(np.asarray(sizes, float)), np.log(np.asarray(values, float)), 1)[0])


def count_slope_test(sizes, values, claimed: float, *, tolerance: float, two_sided: bool = False,
                     extra: dict | None = None):
    """Exact evidence on a deterministic log-log slope (flop counts, peak bytes): ``slope <= claimed`` (an upper
    order, ``O``), or ``slope ≈ claimed`` with ``two_sided`` (``Θ``), up to ``tolerance``."""
    slope = loglog_slope(sizes, values)
    info = dict(extra or {}, sizes=list(sizes), values=[float(v) for v in values], slope=slope, claimed_slope=claimed)
    if two_sided:
        return exact_test(slope, claimed, tolerance=tolerance, extra=info)
    return margin_evidence(claimed - slope, tolerance=tolerance, extra=info)
