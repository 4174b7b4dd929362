"""The cost-measurement helpers: CPU time of the calling thread, traced peak memory."""

import time

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from rfkit.validation.timing import interleaved_best_times, peak_bytes, single_threaded_blas


def test_times_are_cpu_time_not_wall_time():
    best, se = interleaved_best_times([lambda: time.sleep(0.05), lambda: sum(range(200_000))], repeats=3)
    assert best[0] < 0.01  # sleeping does no work on this thread
    assert best[1] > 0 and (se >= 0.02 * best).all()


def test_peak_bytes_sees_numpy_allocations():
    peak = peak_bytes(lambda: np.ones(1_000_000))
    assert 8_000_000 <= peak < 8_100_000


def test_single_threaded_blas_is_restored():
    before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    with single_threaded_blas():
        assert all(i["num_threads"] == 1 for i in threadpool_info() if i["user_api"] == "blas")
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == before


def test_geometric_sizes_spacing_and_rounding():
    from rfkit.validation.timing import geometric_sizes

    assert geometric_sizes(256, 1024) == [256, 368, 512, 720, 1024]  # √2 steps, multiples of 16
    assert geometric_sizes(256, 4096) == [256, 512, 1024, 2048, 4096]
    assert geometric_sizes(2, 32) == [2, 4, 8, 16, 32]  # below 64: integers


def test_ratio_slope_sees_a_growing_ratio():
    from rfkit.validation.timing import timing_ratio_slope_test

    sizes = [1, 2, 4, 8, 16]
    slow = [lambda n=n: sum(range(20_000 * n)) for n in sizes]
    fast = [lambda: sum(range(20_000))] * len(sizes)
    ev = timing_ratio_slope_test(sizes, slow, fast, 0.5, repeats=3, alpha=1e-3, tolerance=0.1, alternative="greater")
    assert ev.estimate > 0.5 and ev.extra["repeats"] == 3


def test_peak_bytes_takes_the_least_of_repeated_calls_when_other_threads_run():
    # tracemalloc counts every thread: in a dask worker, its communication threads' allocations add to a call's
    # peak (a memory-invariance claim flipped to refuted on a loaded worker). Deterministic stand-in: a call whose
    # first runs allocate more (as if another thread had allocated meanwhile).
    import threading

    import numpy as np

    from rfkit.validation.timing import PEAK_REPEATS, peak_bytes

    sizes = iter([3_000_000, 1_000_000, 2_000_000, 5_000_000])
    calls = []

    def fn():
        calls.append(1)
        return np.ones(next(sizes) // 8)

    if threading.active_count() == 1:
        assert abs(peak_bytes(fn) - 3_000_000) < 10_000 and len(calls) == 1  # alone: one call
        calls.clear()
        sizes = iter([3_000_000, 1_000_000, 2_000_000])
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert abs(peak_bytes(fn) - 1_000_000) < 10_000 and len(calls) == PEAK_REPEATS
    finally:
        stop.set()
        other.join()


def test_exp_evaluations_counts_every_value_and_restores_numpy():
    from rfkit.base.numerics import logsumexp
    from rfkit.validation.opcount import exp_evaluations

    real = np.exp
    assert exp_evaluations(lambda: np.exp(np.zeros((3, 4)))) == 12
    assert exp_evaluations(lambda: logsumexp(np.zeros((5, 6)), axis=-1)) == 30  # through rfkit's logsumexp
    assert exp_evaluations(lambda: np.exp(1.0) + np.log(2.0)) == 1
    with pytest.raises(ZeroDivisionError):
        exp_evaluations(lambda: 1 / 0)
    assert np.exp is real


def _cubic(n):
    a = np.random.default_rng(0).standard_normal((n, n))
    return lambda: [a @ a for _ in range(4)]  # time ~ n³


def test_best_of_blocks_slope_refutes_a_cubic_growth_claimed_quadratic():
    from rfkit.validation.timing import timing_slope_test

    sizes = [96, 128, 176, 240, 320]
    ev = timing_slope_test(sizes, [_cubic(n) for n in sizes], 2.0, repeats=4, best_of=2, alpha=1e-3, tolerance=0.25)
    assert ev.estimate > 2.5 and ev.effect > 0.25  # slope ~3: a violation beyond the tolerance
    assert ev.extra["best_of"] == 2 and ev.extra["repeats"] == 4
    ev = timing_slope_test(sizes, [_cubic(n) for n in sizes], 3.0, repeats=4, best_of=2, alpha=1e-3, tolerance=0.25)
    assert ev.effect <= 0.25


def _disturbed(work, every):
    """A call that does ``work`` units, and 20 times as many on each ``every``-th call (a planted disturbance:
    another process's load only ever adds time)."""
    calls = [0]

    def call():
        calls[0] += 1
        for _ in range(work * (20 if calls[0] % every == 0 else 1)):
            sum(range(2_000))
    return call


def test_best_of_a_block_drops_a_disturbed_round():
    from rfkit.validation.timing import interleaved_times

    # call 1 is the warm-up and every 3rd call is disturbed (3, 6, 9, 12): every block of 2 rounds (calls 2-3,
    # 4-5, ..., 12-13) holds an undisturbed one
    plain = interleaved_times([_disturbed(20, 3)], repeats=6)[:, 0]
    best = interleaved_times([_disturbed(20, 3)], repeats=6, best_of=2)[:, 0]
    assert plain.max() > 8 * np.median(plain)  # the planted disturbance is seen round by round
    assert best.max() < 3 * best.min()  # and dropped by the best of each block
    with pytest.raises(ValueError, match="best_of"):
        interleaved_times([_disturbed(1, 3)], repeats=2, best_of=0)


def test_timing_ratio_test_reports_its_blocks():
    from rfkit.validation.timing import timing_ratio_test

    ev = timing_ratio_test(_disturbed(5, 1_000), _disturbed(10, 1_000), 1.0, repeats=4, best_of=3, alpha=1e-3,
                           tolerance=0.25)
    assert ev.extra["best_of"] == 3 and len(ev.extra["seconds"]) == 4
    assert 0.3 < ev.estimate < 0.7  # half the work
