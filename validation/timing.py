"""Measuring cost honestly on a shared machine: peak memory, and CPU time with single-threaded BLAS.

Complexity claims and the benchmark's memory column use these; the benchmark's ``seconds`` are wall clock.

* :func:`peak_bytes` — peak traced allocation during one call (``tracemalloc``, which numpy reports to):
  deterministic, so memory slopes are exact.
* :func:`interleaved_times` — repeated *CPU time of the calling thread* with BLAS limited to one thread
  (threadpoolctl). Other processes' load stretches wall time by whole scheduler slices and idle BLAS workers
  spin, but neither adds work to this thread, so scaling slopes measure the work. Calls are timed
  round-robin, so any remaining disturbance hits every size alike. Numba code here is not ``parallel``,
  so its work is on the calling thread too. :func:`interleaved_best_times` summarises them as best-of-k.
* :func:`timing_slope_test` — a timing is a random variable: the log-log slope of time against size is
  fitted on *every* repeated measurement (at least 5 sizes), with Student t on the fit's degrees of freedom.
* :func:`timing_ratio_test` — "A is k times faster than B" on paired repeated timings (log-ratios, t).
"""

from __future__ import annotations

import gc
import math
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from rfkit.validation.stats import ratio_test, slope_test

__all__ = ["peak_bytes", "single_threaded_blas", "interleaved_times", "interleaved_best_times", "timing_slope_test",
           "timing_ratio_test", "MACHINE_MARGIN"]

#: Log-ratio a claim about relative speed measured on this CPU allows for the machine (another CPU, BLAS and
#: memory system than the paper's): 25% either way.
MACHINE_MARGIN = math.log(1.25)

#: Smallest relative resolution given to a best time (timer and CPU-frequency jitter).
TIMING_FLOOR = 0.02


def peak_bytes(fn: Callable[[], object], *, collect: bool = True) -> int:
    """Peak traced allocation during one call, above the baseline.

    ``collect`` runs the garbage collector first (slow in a large process; a sweep of calls collects once).
    """
    if collect:
        gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def single_threaded_blas():
    """Context manager: BLAS limited to one thread inside the block (restored after)."""
    return threadpool_limits(limits=1, user_api="blas")


def interleaved_times(calls: list[Callable[[], object]], *, repeats: int) -> np.ndarray:
    """``(repeats, len(calls))`` CPU times of the calling thread, single-threaded BLAS, calls round-robin
    after one warm-up call each (lazy imports, JIT compilation, first touch of memory)."""
    times = np.empty((repeats, len(calls)))
    with single_threaded_blas():
        for call in calls:
            call()
        for row in times:
            for i, call in enumerate(calls):
                t0 = time.thread_time()
                call()
                row[i] = time.thread_time() - t0
    return times


def timing_slope_test(sizes, calls: list[Callable[[], object]], claimed: float, *, repeats: int, alpha: float,
                      tolerance: float, alternative: str = "less", extra: dict | None = None):
    """Log-log slope of CPU time against ``sizes`` versus ``claimed`` from ``repeats`` rounds of every call.

    Every measurement is a point of a least-squares fit of ``log t`` on ``log size`` with one intercept per
    round (the calls are timed round-robin, so a round's machine speed, which drifts by tens of percent
    between rounds, is common to all its sizes) and one slope, each point with the relative resolution
    :data:`TIMING_FLOOR`; the slope's standard error comes from the scatter within rounds and the curvature
    between sizes (when larger than that floor), and the interval is Student t with
    ``points - rounds - 1`` degrees of freedom (:func:`rfkit.validation.stats.slope_test` with ``groups``).
    Needs at least 5 sizes. ``alternative="less"``: "grows no faster than size^claimed". Validity:
    asymptotic (normal log-time errors).
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    times = interleaved_times(calls, repeats=max(repeats, 2))
    floor = TIMING_FLOOR * np.median(times, axis=0)
    times = np.maximum(times, floor)
    x = np.broadcast_to(sizes, times.shape).ravel()
    y = times.ravel()
    rounds = np.broadcast_to(np.arange(times.shape[0])[:, None], times.shape).ravel()
    best = times.min(axis=0)
    info = dict(extra or {}, sizes=sizes.tolist(), seconds=best.tolist(), repeats=int(times.shape[0]),
                measured="CPU time of the calling thread, single-threaded BLAS")
    # equal weights with a floor: each log time is given the resolution TIMING_FLOOR, and the fit's scatter
    # (within rounds, curvature) inflates it by sqrt(χ²/dof) when larger
    return slope_test(x, y, TIMING_FLOOR * y, claimed, alpha=alpha, tolerance=tolerance, alternative=alternative,
                      groups=rounds, extra=info)


def timing_ratio_test(fast: Callable[[], object], slow: Callable[[], object], claimed_ratio: float, *, repeats: int,
                      alpha: float, tolerance: float, margin: float = MACHINE_MARGIN, extra: dict | None = None):
    """"``fast`` takes at most ``claimed_ratio`` times the time of ``slow``" on paired repeated CPU times:
    :func:`rfkit.validation.stats.ratio_test` on ``log(t_fast/t_slow)`` with the machine margin."""
    times = interleaved_times([fast, slow], repeats=max(repeats, 3))
    return ratio_test(times[:, 0], times[:, 1], claimed_ratio, alpha=alpha, tolerance=tolerance, margin=margin,
                      alternative="less", extra=dict(extra or {}, seconds=times.tolist()))


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
