"""``rfkit bench``: speed and memory of the estimators against exact attention, measured side by side.

Each row is one *case* (an estimator at one size) timed in this process, in one run:

* ``seconds`` — the best of several timed calls (inputs prepared outside the timer);
* ``gflops`` — the case's exact matrix-product flop count (:mod:`rfkit.theory.cost`) over ``seconds``;
* ``roofline_fraction`` — achieved flop rate over the flop rate of *plain numpy matrix products of the
  same shapes*, timed in the same run: the practical limit of this machine's BLAS for this work;
* ``roofline_seconds`` / ``roofline_gflops`` — that GEMM time and rate, measured in the row's own dtype
  (float32 rows against float32 products, float64 rows against float64 ones) on the row's own shapes;
* ``peak_bytes`` — peak traced allocation (``tracemalloc``, which numpy reports to) during one call;
* ``speedup_vs_exact`` / ``memory_vs_exact`` — exact softmax attention's time / this time and this
  peak / exact's peak at the same ``L`` and direction (``null`` where exact is not run).

Dtypes: every row is run in each requested dtype (``dtypes``, ``rfkit bench --dtype``; default float32 *and*
float64: users run float32, the claims float64), except the rows whose estimators compute in float64 whatever is
asked (RA, LARA, RMFA: float64 only) and the one-time sampling rows (drawn in float64, then cast: once).

Rows: exact softmax attention; FAVOR+ (positive features, R-ORF; features included) and linear attention
from given features; FAVOR+ with trigonometric / positive / hyperbolic features and iid or R-ORF
projections (:func:`rfkit.estimators.favor.favor_attention`, projection drawn once outside the timer),
bidirectional and causal; Macformer's RMFA_exp with a given draw of 256 random Maclaurin features
(:func:`rfkit.estimators.rmf.rmfa`, p = 2), bidirectional and causal, at every length; and the one-time sampling
cost of R-ORF, H-ORF and G-ORF projections (``L = null``: no sequence; no matrix products, so no roofline).

Torch-CPU rows: FAVOR+ with positive features and a given R-ORF projection through the torch backend
(:func:`rfkit.gpu.favor_attention`, features included), bidirectional and causal, at every length (when torch is
installed; ``peak_bytes`` there misses torch's own allocations, see ``memory_note``).

EVA rows: practical EVA (:func:`rfkit.estimators.eva.eva_practical`, Eq 16) and causal EVA
(:func:`rfkit.estimators.eva.eva_causal`, Algorithm 2) at every length, blocks of 64 tokens and 64 chunks,
train mode (the chunk noise is drawn inside the timer), against exact softmax attention.

RA/LARA rows (RA/LARA paper, Table 6's setting: 16 LARA samples): randomized attention (RA, ``S = 1``, sampling
included; quadratic like exact attention, so in quick mode only up to ``L = 4096``) and LARA (Eq 34 proposals,
Eq 9 weights, ``C = 16``, training mode, sampling included; linear), bidirectional, in float64 (their
estimators compute in float64 whatever the requested dtype).

Peer rows (``peer ...``, issues 8 and 16), what users run, side by side in the same run at ``d = 64``, ``m = 256``
on :data:`PEER_HEADS` = 8 heads (batch × heads) and ``L`` up to :data:`PEER_MAX_LENGTH` (4096 in quick mode), with
the R-ORF projection *drawn inside every timed call* by each implementation's own sampler: rfkit numpy FAVOR+
(:func:`rfkit.estimators.favor.favor_attention`, positive features, ``rng`` a numpy generator), rfkit's torch
backend on the CPU (:func:`rfkit.gpu.favor_attention`, ``(8, L, d)`` tensors, a ``torch.Generator``), exact
softmax attention by ``torch.nn.functional.scaled_dot_product_attention`` (``(1, 8, L, d)`` inputs, so torch
picks its fused CPU kernel; no projection) and performer-pytorch's ``FastAttention`` (the ``peers`` extra) with
``dim_heads = 64``, ``nb_features = 256`` and its own defaults (softmax kernel ``eps = 1e-4`` with its
stabilizers; causal: its CPU path ``causal_linear_attention_noncuda``, as the CUDA extension is not used), its
``redraw_projection_matrix`` called inside the timed call (its ``forward`` alone reuses one draw). All torch
calls run under ``torch.no_grad()``, in the row's dtype, with ``torch.set_num_threads`` equal to numpy's BLAS
threads (``threads``). Extra fields: ``impl`` (the implementation), ``speedup_vs`` (``{other impl: its seconds /
this row's seconds}`` over the peer rows of the same ``L``, dtype and direction: > 1 means this row is faster),
``peers_skipped`` (``{impl: reason}`` for peers not installed), ``rfkit_numpy_speedup`` (this row's seconds /
rfkit numpy FAVOR+'s at the same ``L``, dtype and direction: > 1 means rfkit is faster), ``peak_rss_bytes``
(peak resident memory above the resident size before the call, read from Linux's ``VmHWM`` after resetting it;
``null`` where unavailable), ``memory_vs_rfkit_numpy`` (ratio of those), and ``peak_method`` naming what
``peak_bytes`` measured: ``tracemalloc`` does not see torch's allocations, so torch rows report the resident
peak there (an approximation: page granularity, and it includes memory of other threads of this process;
``resource.getrusage``'s ``ru_maxrss`` is not used as it cannot be reset between rows). The roofline of a peer
row is the GEMM time of rfkit's FAVOR+ (or exact attention's) products for the 8 heads; causal exact rows count the full
``L×L`` products, which torch's fused kernel partly skips, so their fraction can exceed 1. Without torch or
performer-pytorch their rows are skipped with a warning and a ``peers_skipped`` reason.
:func:`performance_table` renders the README's performance table from these rows (``rfkit bench --json``).

Timings are measurements, never assertions: tests check the rows' structure and the memory law, not
speed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import importlib.util
import io
import json
import math
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_info

from rfkit.estimators import (
    NonPositiveDenominatorWarning,
    linear_attention,
    orthogonal_projection,
    positive_features,
    softmax_attention,
)
from rfkit.estimators.attention import DEFAULT_CHUNK_SIZE
from rfkit.estimators.eva import eva_causal, eva_practical
from rfkit.estimators.favor import draw_projection, favor_attention
from rfkit.estimators.lara import lara_attention
from rfkit.estimators.ra import ra_attention
from rfkit.estimators.rmf import draw_rmf, rmfa
from rfkit.theory.cost import (
    feature_map_gemms,
    gemm_flops,
    linear_attention_gemms,
    rmfa_gemms,
    softmax_attention_gemms,
)
from rfkit.theory.eva import eva_practical_gemms
from rfkit.theory.lara import lara_gemms, ra_gemms
from rfkit.validation.timing import peak_bytes

__all__ = ["Case", "DTYPES", "default_cases", "run_cases", "measure_roofline", "format_table", "performance_table",
           "read_json_lines"]

#: Dtypes of a default ``rfkit bench`` run: what users run (float32) and what the claims use (float64).
DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class Case:
    """One benchmark row: ``setup()`` prepares inputs and returns the zero-argument call to time."""

    name: str
    params: dict
    setup: Callable[[], Callable[[], object]]
    gemms: tuple
    baseline: str | None = None  # name of the exact case with the same L and direction
    extra: dict = field(default_factory=dict)


#: Most warm-up calls of :func:`_best_time`.
WARMUP_MAX = 10


def _warm_up(fn: Callable[[], object]) -> None:
    """Call ``fn`` until a call takes within 10% of the one before (at most :data:`WARMUP_MAX` calls): the steady
    state a caller in a loop sees. One call is not enough: glibc's allocator serves FAVOR+'s 32 MiB temporaries
    (float32, B·H = 8, L = 4096, m = 256) by fresh page-faulting mappings until its mmap threshold has risen, so
    the first four calls there took 238, 126, 125 and 107 ms and the fifth on 55 ms (2026-11-28)."""
    last = math.inf
    for _ in range(WARMUP_MAX):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        if dt >= 0.9 * last:
            return
        last = dt


def _best_time(fn: Callable[[], object], *, min_total: float, max_runs: int) -> float:
    _warm_up(fn)  # first-touch of caches and allocations, lazy imports, compilation
    times, total = [], 0.0
    while len(times) < max_runs and (total < min_total or len(times) < 2):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
    return min(times)


def measure_roofline(gemms, *, dtype=np.float64, min_total: float = 0.2, max_runs: int = 10,
                     rng=None) -> float:
    """Seconds that plain numpy matrix products of exactly these shapes take (best of several runs)."""
    rng = np.random.default_rng(0) if rng is None else rng
    operands = [(rng.standard_normal((n, k)).astype(dtype), rng.standard_normal((k, p)).astype(dtype), c)
                for n, k, p, c in gemms]

    def products():
        for a, b, c in operands:
            for _ in range(c):
                a @ b

    return _best_time(products, min_total=min_total, max_runs=max_runs)


def _qkv(length: int, d: int, dv: int, dtype, seed: int):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((length, n)).astype(dtype) for n in (d, d, dv))
    return q, k, v


def _exact_case(length: int, d: int, causal: bool, dtype) -> Case:
    def setup():
        q, k, v = _qkv(length, d, d, dtype, 1)
        return lambda: softmax_attention(q, k, v, causal=causal, dtype=dtype)

    direction = "causal" if causal else "bidirectional"
    return Case(f"exact softmax ({direction})", dict(L=length, d=d, m=None, dtype=np.dtype(dtype).name,
                                                     causal=causal),
                setup, softmax_attention_gemms(length, length, d, d))


def _favor_case(length: int, d: int, m: int, causal: bool, dtype, *, features_included: bool,
                sweep: str | None = None) -> Case:
    scale = d ** -0.25

    def setup():
        q, k, v = _qkv(length, d, d, dtype, 1)
        w = orthogonal_projection(m, d, rng=2, dtype=dtype)
        if features_included:
            return lambda: linear_attention(positive_features(q * scale, w, dtype=dtype),
                                            positive_features(k * scale, w, dtype=dtype), v,
                                            causal=causal, dtype=dtype)
        qf = positive_features(q * scale, w, dtype=dtype)
        kf = positive_features(k * scale, w, dtype=dtype)
        return lambda: linear_attention(qf, kf, v, causal=causal, dtype=dtype)

    direction = "causal" if causal else "bidirectional"
    gemms = linear_attention_gemms(length, m, d, causal=causal, chunk=DEFAULT_CHUNK_SIZE)
    if features_included:
        gemms = gemms + feature_map_gemms(length, d, m, batch=2)
        name = f"favor+ positive ORF ({direction})"
    else:
        name = f"linear attention from features ({direction})"
    return Case(name, dict(L=length, d=d, m=m, dtype=np.dtype(dtype).name, causal=causal), setup, gemms,
                baseline=f"exact softmax ({direction})", extra=dict(sweep=sweep) if sweep else {})


#: Feature kinds of the FAVOR+ variant rows and their feature count ``r`` per projection row.
FAVOR_KINDS = {"trig": 2, "positive": 1, "hyperbolic": 2}
PROJECTION_LABELS = {"iid": "iid", "orthogonal": "ORF"}


def _favor_variant_case(length: int, d: int, m: int, kind: str, projection: str, causal: bool, dtype) -> Case:
    def setup():
        q, k, v = _qkv(length, d, d, dtype, 1)
        omega = draw_projection(projection, m, d, rng=2, dtype=dtype)
        return lambda: _without_sign_warnings(favor_attention, q, k, v, kind=kind, omega=omega, causal=causal,
                                              dtype=dtype)

    direction = "causal" if causal else "bidirectional"
    r = FAVOR_KINDS[kind] * m
    gemms = linear_attention_gemms(length, r, d, causal=causal, chunk=DEFAULT_CHUNK_SIZE)
    gemms = gemms + feature_map_gemms(length, d, m, batch=2)
    return Case(f"favor+ {kind} {PROJECTION_LABELS[projection]} ({direction}, W given)",
                dict(L=length, d=d, m=m, dtype=np.dtype(dtype).name, causal=causal), setup, gemms,
                baseline=f"exact softmax ({direction})")


#: Practical EVA's configuration in the benchmark: ``|E|`` (block size) and ``C`` (number of chunks).
EVA_BLOCK, EVA_CHUNKS = 64, 64


def _eva_case(length: int, d: int, causal: bool, dtype) -> Case:
    def setup():
        q, k, v = _qkv(length, d, d, dtype, 1)
        rng = np.random.default_rng(2)
        if causal:
            return lambda: eva_causal(q, k, v, block_size=EVA_BLOCK, chunk_size=length // EVA_CHUNKS, rng=rng,
                                      dtype=dtype)
        return lambda: eva_practical(q, k, v, block_size=EVA_BLOCK, num_chunks=EVA_CHUNKS, rng=rng, dtype=dtype)

    direction = "causal" if causal else "bidirectional"
    return Case(f"eva practical ({direction})", dict(L=length, d=d, m=None, dtype=np.dtype(dtype).name,
                                                      causal=causal),
                setup, eva_practical_gemms(length, d, d, EVA_BLOCK, EVA_CHUNKS),
                baseline=f"exact softmax ({direction})", extra=dict(block_size=EVA_BLOCK, num_chunks=EVA_CHUNKS))


def _without_sign_warnings(fn, *args, **kwargs):
    """Trigonometric features make renormalisers <= 0: expected here, so not announced on every timed call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPositiveDenominatorWarning)
        return fn(*args, **kwargs)


def _sampling_case(projection: str, m: int, d: int, dtype) -> Case:
    labels = {"orthogonal": "R-ORF", "hadamard": "H-ORF", "givens": "G-ORF"}

    def setup():
        rng = np.random.default_rng(3)
        return lambda: draw_projection(projection, m, d, rng=rng, dtype=dtype)

    return Case(f"sampling {labels[projection]} (one-time)", dict(L=None, d=d, m=m, dtype=np.dtype(dtype).name,
                                                                   causal=None), setup, ())


#: LARA's number of landmarks (= samples) in the benchmark rows (Table 6 uses 16); RA's samples per query (G.2).
LARA_LANDMARKS = 16
RA_SAMPLES = 1
#: Longest sequence of the RA rows in quick mode (RA is quadratic in time).
RA_QUICK_MAX_LENGTH = 4096


def _ra_case(length: int, d: int) -> Case:
    scale = d ** -0.25

    def setup():
        q, k, v = _qkv(length, d, d, np.float64, 1)
        rng = np.random.default_rng(2)
        return lambda: ra_attention(q * scale, k * scale, v, num_samples=RA_SAMPLES, rng=rng)

    return Case(f"ra S={RA_SAMPLES} (bidirectional, sampling included)",
                dict(L=length, d=d, m=RA_SAMPLES, dtype="float64", causal=False), setup,
                ra_gemms(length, length, d, d, RA_SAMPLES), baseline="exact softmax (bidirectional)")


def _lara_case(length: int, d: int) -> Case:
    scale = d ** -0.25

    def setup():
        q, k, v = _qkv(length, d, d, np.float64, 1)
        rng = np.random.default_rng(2)
        return lambda: lara_attention(q * scale, k * scale, v, C=LARA_LANDMARKS, rng=rng, uneven="adaptive")

    return Case(f"lara C={LARA_LANDMARKS} eq34/eq9 (bidirectional, sampling included)",
                dict(L=length, d=d, m=LARA_LANDMARKS, dtype="float64", causal=False), setup,
                lara_gemms(length, length, LARA_LANDMARKS, d, d), baseline="exact softmax (bidirectional)")


#: Random Maclaurin features of the RMFA rows (Macformer; p = 2, so E[W] = D projections).
RMFA_FEATURES = 256


def _rmfa_case(length: int, d: int, num_features: int, causal: bool, dtype) -> Case:
    """Macformer RMFA_exp (``rfkit.estimators.rmf.rmfa``) with a given draw of ``D`` features (p = 2)."""
    draw = draw_rmf(num_features, d, rng=2)

    def setup():
        q, k, v = _qkv(length, d, d, np.float64, 1)
        return lambda: _without_sign_warnings(rmfa, q, k, v, draw=draw, causal=causal)

    direction = "causal" if causal else "bidirectional"
    gemms = rmfa_gemms(length, d, d, draw.width, num_features, route="causal" if causal else "none",
                       chunk=DEFAULT_CHUNK_SIZE)
    return Case(f"rmfa exp ({direction}, draw given)", dict(L=length, d=d, m=num_features,
                                                            dtype=np.dtype(dtype).name, causal=causal),
                setup, gemms, baseline=f"exact softmax ({direction})", extra=dict(width=draw.width))


def rmfa_cases(lengths: Iterable[int], *, d: int = 64, dtype=np.float64) -> list[Case]:
    """RMFA rows (bidirectional and causal) at each length, compared with exact softmax attention there."""
    return [_rmfa_case(length, d, RMFA_FEATURES, causal, dtype) for length in lengths for causal in (False, True)]


# ---- rfkit torch-CPU backend (rfkit.gpu) ----------------------------------------------------------------

#: What ``peak_bytes`` means on the torch rows: ``tracemalloc`` does not see torch's allocator.
TORCH_MEMORY_NOTE = "torch allocations are not traced; peak_bytes counts Python-side allocations only"


def _torch_favor_case(length: int, d: int, m: int, causal: bool, dtype) -> Case:
    """FAVOR+ positive features with R-ORF through :func:`rfkit.gpu.favor_attention` on the CPU (features
    included; ``W`` drawn once outside the timer with a ``torch.Generator``)."""
    def setup():
        import torch

        from rfkit import gpu

        q, k, v = (torch.from_numpy(a) for a in _qkv(length, d, d, dtype, 1))
        omega = gpu.orthogonal_projection(m, d, rng=gpu.make_generator(2, "cpu"), dtype=q.dtype)
        return lambda: gpu.favor_attention(q, k, v, omega=omega, causal=causal)

    direction = "causal" if causal else "bidirectional"
    gemms = linear_attention_gemms(length, m, d, causal=causal, chunk=DEFAULT_CHUNK_SIZE)
    gemms = gemms + feature_map_gemms(length, d, m, batch=2)
    return Case(f"rfkit torch-CPU favor+ positive ORF ({direction})",
                dict(L=length, d=d, m=m, dtype=np.dtype(dtype).name, causal=causal), setup, gemms,
                baseline=f"exact softmax ({direction})", extra=dict(memory_note=TORCH_MEMORY_NOTE))


def torch_cpu_cases(lengths: Iterable[int], *, d: int = 64, m: int = 256, dtype=np.float64) -> list[Case]:
    """The torch-CPU FAVOR+ rows (bidirectional and causal) at each length; none when torch is not installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return []
    return [_torch_favor_case(length, d, m, causal, dtype) for length in lengths for causal in (False, True)]


def default_cases(*, quick: bool, lengths: list[int] | None = None, dtypes: Iterable = DTYPES,
                  peers_only: bool = False) -> list[Case]:
    """FAVOR+-style linear attention vs exact softmax attention, d = 64, m = 256, in each of ``dtypes``.

    ``L ∈ {1024, 4096, 16384}`` bidirectional and causal, plus causal FAVOR+ at ``L = 65,536`` (exact
    attention is not run there: its ``L×L`` matrix would take 34 GB). The full run adds ``L = 32,768``.
    ``lengths`` replaces the lengths (and drops the ``L = 65,536`` row). FAVOR+ variant rows (trig /
    positive / hyperbolic × iid / R-ORF) run at the second length in quick mode and at every length in
    full; the sampling rows (R/H/G-ORF, ``m = 256``, ``d = 64``) once.
    RA (``S = 1``) and LARA (``C = 16``) rows at every length (RA up to :data:`RA_QUICK_MAX_LENGTH` in quick mode).
    Float64-only rows (RA, LARA, RMFA) and the sampling rows run once (module docstring); the peer rows in every
    dtype. ``peers_only``: only the peer rows (what :func:`performance_table` renders).
    """
    dtypes = [np.dtype(dt).name for dt in dtypes]
    bad = [dt for dt in dtypes if dt not in DTYPES]
    if bad or not dtypes:
        raise ValueError(f"dtypes must be a non-empty subset of {DTYPES}, got {dtypes}")
    d, m = 64, 256
    custom = lengths is not None
    if not custom:
        lengths = [1024, 4096, 16384] + ([] if quick else [32768])
    peer_lengths = [length for length in lengths if length <= PEER_MAX_LENGTH[quick]]
    cases = []
    for dtype in dtypes:
        if not peers_only:
            cases += _estimator_cases(quick, lengths, custom, d, m, dtype, float64_rows=dtype == "float64",
                                      sampling=dtype == dtypes[-1])
        cases += peer_cases(peer_lengths, d=d, m=m, dtype=dtype)
    return cases


def _estimator_cases(quick: bool, lengths: list[int], custom: bool, d: int, m: int, dtype: str, *,
                     float64_rows: bool, sampling: bool) -> list[Case]:
    """The non-peer rows of :func:`default_cases` in ``dtype``; ``float64_rows``: also RA, LARA and RMFA (float64
    whatever is asked); ``sampling``: also the sampling rows (dtype-independent, so one pass carries them)."""
    variant_lengths = lengths[1:2] or lengths if quick else lengths
    cases = []
    for length in lengths:
        for causal in (False, True):
            cases.append(_exact_case(length, d, causal, dtype))
            cases.append(_favor_case(length, d, m, causal, dtype, features_included=True))
            cases.append(_favor_case(length, d, m, causal, dtype, features_included=False))
            cases.append(_eva_case(length, d, causal, dtype))
            if length in variant_lengths:
                cases += [_favor_variant_case(length, d, m, kind, projection, causal, dtype)
                          for kind in FAVOR_KINDS for projection in PROJECTION_LABELS]
        if float64_rows and (not quick or length <= RA_QUICK_MAX_LENGTH):
            cases.append(_ra_case(length, d))
        if float64_rows:
            cases.append(_lara_case(length, d))
    if float64_rows:
        cases += rmfa_cases(lengths, d=d, dtype=np.float64)
    cases += torch_cpu_cases(lengths, d=d, m=m, dtype=dtype)
    if not custom:
        cases.append(_favor_case(65536, d, m, True, dtype, features_included=True))
    if sampling:
        cases += [_sampling_case(projection, m, d, dtype) for projection in ("orthogonal", "hadamard", "givens")]
    return cases


# ------------------------------------------------------------------------------------------ memory

#: Lengths of the memory sweep (``rfkit bench --memory``, issue 16): causal FAVOR+'s peak memory as ``L`` grows.
MEMORY_LENGTHS = (16384, 65536, 262144)


def memory_cases(*, lengths: Iterable[int] = MEMORY_LENGTHS, dtypes: Iterable = DTYPES, d: int = 64,
                 m: int = 256) -> list[Case]:
    """Causal FAVOR+ (positive features, R-ORF, features included, one head) at each of ``lengths``, in each of
    ``dtypes``: its rows carry ``sweep = "memory"`` (:func:`memory_table`). Exact attention is not run (its
    ``L×L`` matrix is 275 GB at ``L = 262,144`` in float32)."""
    return [_favor_case(length, d, m, True, np.dtype(dtype).name, features_included=True, sweep="memory")
            for dtype in dtypes for length in lengths]


def memory_table(rows: Iterable[dict]) -> str:
    """Markdown: the memory sweep's rows (``sweep == "memory"``) per dtype, peak traced memory and bytes per
    position at each ``L`` (not their times: the bench tables compare speed), and the log-log slope of the peak
    against ``L`` (1: linear in ``L``; the inputs, allocated before the call, are not counted). Raises
    ``ValueError`` without such rows."""
    rows = [r for r in rows if r.get("sweep") == "memory"]
    if not rows:
        raise ValueError("no memory-sweep rows: run `rfkit bench --memory --json`")
    first = rows[0]
    lines = [f"Causal FAVOR+ (positive features, R-ORF, features included), one head, d = {first['d']}, "
             f"m = {first['m']}: peak memory traced during one call (`tracemalloc`; the inputs are allocated "
             "before it)", "", "| dtype | L | peak | bytes per position |", "|---|---|---|---|"]
    slopes = []
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        mine = sorted((r for r in rows if r["dtype"] == dtype), key=lambda r: r["L"])
        for r in mine:
            peak = r["peak_bytes"]
            lines.append(f"| {dtype} | {r['L']:,} | {peak / 2**20:.1f} MiB | {peak / r['L']:.0f} |")
        if len(mine) >= 2:
            slope = float(np.polyfit(np.log([r["L"] for r in mine]), np.log([r["peak_bytes"] for r in mine]), 1)[0])
            slopes.append(f"{dtype} {slope:.3f}")
    if slopes:
        lines += ["", "Log-log slope of the peak against L (1: linear in L): " + ", ".join(slopes) + "."]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------- peers

#: Heads (batch × heads) of every peer row; the longest ``L`` of the peer rows, in quick and in full mode.
PEER_HEADS = 8
PEER_MAX_LENGTH = {True: 4096, False: 16384}
#: What ``peak_bytes`` measured in a peer row.
TRACEMALLOC_METHOD = "tracemalloc"
RSS_METHOD = "resident set high-water mark (Linux VmHWM reset through /proc/self/clear_refs, after malloc_trim)"
RSS_UNAVAILABLE_METHOD = "tracemalloc (torch allocations not seen: no resident high-water mark on this system)"


def blas_threads() -> int:
    """Threads of numpy's BLAS (threadpoolctl); the torch peer rows run with as many."""
    return max((pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"), default=1)


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else :func:`platform.processor`, else ``"unknown CPU"``): bench
    rows carry it, since the same code runs at very different speeds on different machines."""
    import platform

    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"{key} not in /proc/self/status")


def rss_peak_bytes(fn: Callable[[], object]) -> int | None:
    """Peak resident memory during one call above the resident size before it, or ``None`` where Linux's
    ``VmHWM`` cannot be reset. Free heap pages are returned first (glibc ``malloc_trim``), so that memory the
    call reuses from earlier calls is counted too. Sees every allocation (torch's included), at page granularity.
    """
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        before = _status_bytes("VmRSS")
    except OSError:
        return None
    fn()
    return max(_status_bytes("VmHWM") - before, 0)


def _peer_qkv(length: int, d: int, dtype):
    rng = np.random.default_rng(1)
    return tuple(rng.standard_normal((PEER_HEADS, length, d)).astype(dtype) for _ in range(3))


def _torch_inputs(length: int, d: int, dtype):
    """``(1, heads, L, d)`` tensors of the peer inputs, and torch's thread count matched to numpy's BLAS."""
    import torch

    torch.set_num_threads(blas_threads())
    return tuple(torch.from_numpy(a)[None] for a in _peer_qkv(length, d, dtype))


def _direction(causal: bool) -> str:
    return "causal" if causal else "bidirectional"


def _peer_reference(causal: bool) -> str:
    return f"peer rfkit numpy favor+ ({_direction(causal)}, bh={PEER_HEADS})"


#: The peer implementations, in the order of the README's table: name in the rows → label in the table.
PEER_LABELS = {
    "performer FastAttention": "performer-pytorch FastAttention",
    "torch sdpa exact": "torch SDPA (exact)",
    "rfkit numpy favor+": "rfkit numpy",
    "rfkit torch favor+": "rfkit torch (CPU)",
}


def missing_peers() -> dict[str, str]:
    """``{impl: reason}`` for the peer implementations that cannot run here (library not installed)."""
    have_torch = importlib.util.find_spec("torch") is not None
    have_performer = have_torch and importlib.util.find_spec("performer_pytorch") is not None
    missing = {}
    if not have_torch:
        missing.update(dict.fromkeys(("torch sdpa exact", "rfkit torch favor+"),
                                     "torch is not installed (pip install 'rfkit[torch]')"))
    if not have_performer:
        missing["performer FastAttention"] = "performer-pytorch is not installed (pip install 'rfkit[peers]')"
    return missing


def _peer_case(name: str, length: int, d: int, m: int | None, causal: bool, dtype, setup, gemms, *,
               torch_row: bool, **extra) -> Case:
    extra = dict(impl=name, batch_heads=PEER_HEADS, threads=blas_threads(), cpu=cpu_model(), torch_row=torch_row,
                 reference=_peer_reference(causal), peers_skipped=missing_peers(), **extra)
    return Case(f"peer {name} ({_direction(causal)}, bh={PEER_HEADS})",
                dict(L=length, d=d, m=m, dtype=np.dtype(dtype).name, causal=causal), setup, gemms, extra=extra)


def favor_peer_gemms(length: int, d: int, m: int, causal: bool) -> tuple:
    """FAVOR+'s matrix products for the peer rows: features of queries and keys, then linear attention, on
    :data:`PEER_HEADS` heads (the roofline of every FAVOR+ peer row, on the CPU and on a device)."""
    return (linear_attention_gemms(length, m, d, causal=causal, chunk=DEFAULT_CHUNK_SIZE, batch=PEER_HEADS)
            + feature_map_gemms(length, d, m, batch=2 * PEER_HEADS))


def _rfkit_peer_case(length: int, d: int, m: int, causal: bool, dtype) -> Case:
    def setup():
        q, k, v = _peer_qkv(length, d, dtype)
        rng = np.random.default_rng(2)
        return lambda: favor_attention(q, k, v, m=m, rng=rng, causal=causal, dtype=dtype)

    return _peer_case("rfkit numpy favor+", length, d, m, causal, dtype, setup, favor_peer_gemms(length, d, m, causal),
                      torch_row=False)


def _rfkit_torch_peer_case(length: int, d: int, m: int, causal: bool, dtype) -> Case:
    def setup():
        import torch

        from rfkit import gpu

        q, k, v = (t[0] for t in _torch_inputs(length, d, dtype))
        generator = gpu.make_generator(2, "cpu")

        def call():
            with torch.no_grad():
                return gpu.favor_attention(q, k, v, m=m, rng=generator, causal=causal)

        return call

    return _peer_case("rfkit torch favor+", length, d, m, causal, dtype, setup, favor_peer_gemms(length, d, m, causal),
                      torch_row=True)


def _sdpa_peer_case(length: int, d: int, causal: bool, dtype) -> Case:
    def setup():
        import torch
        import torch.nn.functional as F

        q, k, v = _torch_inputs(length, d, dtype)

        def call():
            with torch.no_grad():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return call

    return _peer_case("torch sdpa exact", length, d, None, causal, dtype, setup,
                      softmax_attention_gemms(length, length, d, d, batch=PEER_HEADS), torch_row=True)


def performer_fast_attention(omega: np.ndarray, *, causal: bool, dtype=np.float64):
    """performer-pytorch's ``FastAttention`` with projection ``omega`` (``m×d``) and its other defaults.

    Its constructor prints a notice when the causal CUDA extension is missing; that is swallowed here (stdout
    carries ``rfkit bench --json``).
    """
    import torch

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # distutils / torch.cuda.amp deprecations inside performer-pytorch
        from performer_pytorch import FastAttention

        module = FastAttention(dim_heads=omega.shape[1], nb_features=omega.shape[0], causal=causal)
    module.projection_matrix = torch.from_numpy(np.asarray(omega, dtype=dtype))
    return module


def _performer_peer_case(length: int, d: int, m: int, causal: bool, dtype) -> Case:
    def setup():
        import torch

        q, k, v = _torch_inputs(length, d, dtype)
        module = performer_fast_attention(orthogonal_projection(m, d, rng=2, dtype=dtype), causal=causal, dtype=dtype)

        def call():
            with torch.no_grad():
                module.redraw_projection_matrix(q.device)  # its own sampler, inside the call as rfkit's
                return module(q, k, v)

        call.module = module  # the timed module (its last projection), for tests that check what is timed
        return call

    impl = "causal_linear_attention_noncuda (CPU; no CUDA extension)" if causal else "linear_attention"
    return _peer_case("performer FastAttention", length, d, m, causal, dtype, setup,
                      favor_peer_gemms(length, d, m, causal), torch_row=True, performer_impl=impl)


def peer_cases(lengths: Iterable[int], *, d: int = 64, m: int = 256, dtype=np.float64) -> list[Case]:
    """Peer rows (module docstring) at each length, both directions; rows of a missing library are skipped
    with a warning (and named in every row's ``peers_skipped``)."""
    lengths = list(lengths)
    missing = missing_peers()
    if missing and lengths:
        warnings.warn("bench peer rows skipped: " + "; ".join(f"{impl}: {why}" for impl, why in missing.items()),
                      stacklevel=2)
    makers = {"rfkit numpy favor+": lambda length, causal: _rfkit_peer_case(length, d, m, causal, dtype),
              "rfkit torch favor+": lambda length, causal: _rfkit_torch_peer_case(length, d, m, causal, dtype),
              "torch sdpa exact": lambda length, causal: _sdpa_peer_case(length, d, causal, dtype),
              "performer FastAttention": lambda length, causal: _performer_peer_case(length, d, m, causal, dtype)}
    return [make(length, causal) for length in lengths for causal in (False, True)
            for impl, make in makers.items() if impl not in missing]


def _peer_memory(case: Case, fn: Callable[[], object], traced_peak: int) -> dict:
    """Memory fields of a peer row (module docstring); ``{}`` for other rows."""
    if "torch_row" not in case.extra:
        return {}
    resident = rss_peak_bytes(fn)
    if not case.extra["torch_row"]:
        return dict(peak_rss_bytes=resident, peak_method=TRACEMALLOC_METHOD)
    if resident is None:
        return dict(peak_rss_bytes=None, peak_method=RSS_UNAVAILABLE_METHOD, peak_bytes=traced_peak)
    return dict(peak_rss_bytes=resident, peak_method=RSS_METHOD, peak_bytes=resident)


def _add_peer_ratios(rows: list[dict]) -> None:
    """``speedup_vs`` (against every other peer of the same ``L``, dtype and direction), ``rfkit_numpy_speedup``
    and ``memory_vs_rfkit_numpy`` (against the reference row) of every peer row."""
    by_key = {(r["name"], r["L"], r["dtype"]): r for r in rows}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "reference" in r:
            groups.setdefault((r["L"], r["dtype"], r["causal"]), []).append(r)
    for group in groups.values():
        for r in group:
            r["speedup_vs"] = {o["impl"]: o["seconds"] / r["seconds"] for o in group if o is not r}
    for r in rows:
        if "reference" not in r:
            continue
        ref = by_key.get((r["reference"], r["L"], r["dtype"]))
        r["rfkit_numpy_speedup"] = r["seconds"] / ref["seconds"] if ref else None
        resident = (r["peak_rss_bytes"], ref["peak_rss_bytes"]) if ref else (None, None)
        r["memory_vs_rfkit_numpy"] = resident[0] / resident[1] if None not in resident and resident[1] else None


def run_cases(cases: Iterable[Case], *, quick: bool = True, progress: bool = False) -> list[dict]:
    """Time every case and its roofline; return one dict per row (see the module docstring)."""
    cases = list(cases)
    min_total, max_runs = (0.3, 5) if quick else (1.0, 20)
    rows: list[dict] = []
    iterator = cases
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(cases, desc="bench", unit="case", leave=False)
    for case in iterator:
        fn = case.setup()
        seconds = _best_time(fn, min_total=min_total, max_runs=max_runs)
        peak = peak_bytes(fn)
        peer_memory = _peer_memory(case, fn, peak)
        del fn
        gc.collect()
        flops = gemm_flops(case.gemms)
        dtype = np.dtype(case.params["dtype"])
        roof = (measure_roofline(case.gemms, dtype=dtype, min_total=min(min_total, 0.2), max_runs=max_runs)
                if case.gemms else None)
        rows.append(dict(name=case.name, **case.params, seconds=seconds,
                         gflops=flops / seconds / 1e9 if flops else None,
                         roofline_fraction=roof / seconds if roof is not None else None, roofline_seconds=roof,
                         roofline_gflops=flops / roof / 1e9 if roof and flops else None, peak_bytes=peak,
                         flops=flops, baseline=case.baseline, **case.extra))
        rows[-1].update(peer_memory)
    by_key = {(r["name"], r["L"], r["dtype"]): r for r in rows}
    for r in rows:
        base = by_key.get((r.pop("baseline"), r["L"], r["dtype"]))
        r["speedup_vs_exact"] = base["seconds"] / r["seconds"] if base else None
        r["memory_vs_exact"] = r["peak_bytes"] / base["peak_bytes"] if base else None
    _add_peer_ratios(rows)
    return rows


def format_table(rows: list[dict]) -> str:
    """A fixed-width text table of the rows."""
    head = f"{'name':52} {'dtype':>7} {'L':>6} {'m':>4} {'seconds':>9} {'GFLOP/s':>8} {'roofline':>8} " \
           f"{'peak MiB':>9} {'vs exact':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        speed = f"{r['speedup_vs_exact']:.1f}x" if r["speedup_vs_exact"] else "-"
        gflops = f"{r['gflops']:.1f}" if r["gflops"] is not None else "-"
        roof = f"{r['roofline_fraction']:.2f}" if r["roofline_fraction"] is not None else "-"
        lines.append(f"{r['name']:52} {r['dtype']:>7} {r['L'] or '-':>6} {r['m'] or '-':>4} {r['seconds']:>9.4f} "
                     f"{gflops:>8} {roof:>8} {r['peak_bytes'] / 2**20:>9.1f} {speed:>8}")
    return "\n".join(lines)


def to_json_lines(rows: list[dict]) -> str:
    """``rfkit bench --json``: one JSON object per row."""
    return "\n".join(json.dumps(r) for r in rows)


def read_json_lines(text: str) -> list[dict]:
    """The rows of a ``rfkit bench --json`` output (blank lines ignored)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _milliseconds(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms" if ms >= 10 else f"{ms:.2f} ms"


def performance_table(rows: Iterable[dict], *, dtype: str = "float32", length: int | None = None) -> str:
    """The README's performance table (Markdown) from ``rfkit bench --json`` rows: the peer rows of one dtype and
    ``L`` (default: the longest peer ``L`` of that dtype), one line per implementation of :data:`PEER_LABELS`,
    milliseconds per call bidirectional and causal, rfkit's speed-up over performer-pytorch in brackets
    (``speedup_vs``), then the measured GEMM roofline of FAVOR+'s products in the same dtype and rfkit's fraction
    of it (``roofline_seconds``, ``roofline_fraction``). Peers absent from the run are listed as skipped.
    Raises ``ValueError`` when the rows hold no peer row of that dtype (and ``L``)."""
    peers = [r for r in rows if "impl" in r and r.get("dtype") == dtype]
    if length is None and peers:
        length = max(r["L"] for r in peers)
    peers = [r for r in peers if r["L"] == length]
    if not peers:
        raise ValueError(f"no peer rows in dtype {dtype!r}" + (f" at L = {length}" if length else "")
                         + ": run `rfkit bench --json` with that dtype (peer rows need L <= 4096 in quick mode)")
    cell = {(r["impl"], r["causal"]): r for r in peers}
    first = peers[0]
    m = next((r["m"] for r in peers if r["m"]), None)
    lines = [f"{dtype}, B×H = {first['batch_heads']}, L = {length}, d = {first['d']}, m = {m}, projection drawn "
             f"inside each call, {first['threads']} thread(s)" + (f" on {first['cpu']}" if first.get("cpu") else "")
             + "; brackets: speed-up over performer-pytorch",
             "", "| method | bidirectional | causal |", "|---|---|---|"]
    for impl, label in PEER_LABELS.items():
        if not any((impl, c) in cell for c in (False, True)):
            continue
        cells = []
        for causal in (False, True):
            r = cell.get((impl, causal))
            if r is None:
                cells.append("—")
                continue
            speedup = r.get("speedup_vs", {}).get("performer FastAttention")
            cells.append(_milliseconds(r["seconds"]) + (f" ({speedup:.2f}×)" if impl.startswith("rfkit")
                                                         and speedup is not None else ""))
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    lines.append("")
    for causal in (False, True):
        parts = [f"{PEER_LABELS[impl]} at {cell[(impl, causal)]['roofline_fraction']:.0%}"
                 for impl in ("rfkit numpy favor+", "rfkit torch favor+") if (impl, causal) in cell]
        ref = cell.get(("rfkit numpy favor+", causal))
        if ref is not None and ref.get("roofline_seconds"):
            lines.append(f"{_direction(causal).capitalize()}: FAVOR+'s matrix products as plain {dtype} GEMMs of the "
                         f"same shapes take {_milliseconds(ref['roofline_seconds'])} here "
                         f"({ref['roofline_gflops']:.3g} GFLOP/s, measured in the same run); "
                         + ", ".join(parts) + " of that roofline.")
    skipped = first.get("peers_skipped") or {}
    if skipped:
        lines.append("Skipped: " + "; ".join(f"{impl} ({why})" for impl, why in skipped.items()) + ".")
    return "\n".join(lines)
