"""Measuring cost honestly on a shared machine: peak memory, and CPU time with single-threaded BLAS.

Complexity claims and the benchmark's memory column use these; the benchmark's ``seconds`` are wall clock.

* :func:`peak_bytes` — peak traced allocation during one call (``tracemalloc``, which numpy reports to):
  deterministic, so memory slopes are exact.
* :func:`interleaved_best_times` — best-of-k *CPU time of the calling thread* with BLAS limited to one thread
  (threadpoolctl). Other processes' load stretches wall time by whole scheduler slices and idle BLAS workers
  spin, but neither adds work to this thread, so scaling slopes measure the work. Calls are timed
  round-robin, so any remaining disturbance hits every size alike. Numba code here is not ``parallel``,
  so its work is on the calling thread too.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

__all__ = ["peak_bytes", "single_threaded_blas", "interleaved_best_times"]

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


def interleaved_best_times(calls: list[Callable[[], object]], *, repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """Best-of-``repeats`` CPU time of each call and its resolution, timing the calls round-robin.

    The resolution of a best time is the gap to the second best (the spacing of the fastest runs), floored at
    :data:`TIMING_FLOOR` relative; complexity claims use it as the standard error in log-log slope fits, whose
    lack-of-fit inflation (scatter beyond these errors) absorbs any underestimate.
    """
    times = np.empty((max(repeats, 2), len(calls)))
    with single_threaded_blas():
        for call in calls:
            call()  # warm-up: lazy imports, JIT compilation, first touch of memory
        for row in times:
            for i, call in enumerate(calls):
                t0 = time.thread_time()
                call()
                row[i] = time.thread_time() - t0
    ordered = np.sort(times, axis=0)
    best = ordered[0]
    return best, np.maximum(ordered[1] - best, TIMING_FLOOR * best)
