r"""EVA reproductions: Figure 1 (left, middle) of ``002_b2e9d84e2f6b65de.txt`` (``rfkit reproduce eva.fig1``).

Figure 1 plots the memory footprint and the running time per iteration of several attention mechanisms against the
sequence length (App E.4: the same 8-layer Transformer, width 192, 2 heads, batch 64 over 8 V100 GPUs, 30 runs).
Here one attention layer (2 heads of dimension 96) runs forward on the CPU in float64 for each mechanism:

* ``softmax`` — exact attention with the score matrix materialised;
* ``performer`` — RFA/Performer with positive random features, ``features`` samples shared by all queries;
* ``local`` — block-local attention (practical EVA with ``C = 0``), blocks of ``window`` tokens;
* ``eva`` — practical EVA (Eq 16, train mode, one sample per chunk), ``|E| = window``, ``C = chunks``.

Blocks and chunks are capped at half the sequence length (``|E| = min(window, L/2)``, ``C = min(chunks, L/2)``), so
short sequences keep a local part and a chunked part. Times are
best-of-``repeats`` CPU times of the calling thread with single-threaded BLAS (:mod:`rfkit.validation.timing`),
memory is the ``tracemalloc`` peak of one call. The quantities are computed by :func:`efficiency_sweep` only: the
claims ``eva.fig1.runtime_memory`` and ``eva.appe4.short_sequences`` call it too. Long-Short (Transformer-LS) has no
implementation in rfkit, so the figure's Long-Short curve is not reproduced. Defaults follow Table 12's MLM setting
(window 256, C = 128, 256 Performer features) and a reduced length list so the run takes about a minute. Time bars
reach from the best time up to the second best (``seconds_resolution``, the resolution the complexity claims use);
memory is one deterministic call (no bars). The caption (:func:`fig1_caption`) states the regime.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from rfkit.estimators import rfa_attention, softmax_attention
from rfkit.estimators.eva import eva_practical
from rfkit.theory.cost import feature_map_gemms, gemm_flops, linear_attention_gemms, softmax_attention_gemms
from rfkit.theory.eva import eva_practical_gemms
from rfkit.validation.netcdf import write_dataset
from rfkit.validation.reproductions import Reproduction, layout
from rfkit.validation.timing import interleaved_best_times, peak_bytes

__all__ = ["REPRODUCTIONS", "FIG1_OPTIONS", "MECHANISMS", "attention_call", "mechanism_flops", "efficiency_sweep",
           "is_capped", "fig1_caption", "run_fig1"]

MECHANISMS = ("softmax", "performer", "local", "eva")
#: What :func:`efficiency_sweep` measures (option ``measures``: a subset).
MEASURES = ("seconds", "peak_bytes", "flops")


def attention_call(mechanism: str, length: int, options: dict, rng: np.random.Generator) -> Callable[[], object]:
    """One forward call of ``mechanism`` on random inputs ``(heads, length, d_head)`` (scaled ``d^{-1/4}``)."""
    heads, width = options["heads"], options["width"]
    d = width // heads
    q, k, v = (rng.standard_normal((heads, length, d)) * d**-0.25 for _ in range(3))
    window, chunks = _sizes(mechanism, length, options)
    seed = int(rng.integers(2**63))
    if mechanism == "softmax":
        return lambda: softmax_attention(q, k, v, scale=1.0)
    if mechanism == "performer":
        omega = rng.standard_normal((options["features"], d))
        return lambda: rfa_attention(q, k, v, omega=omega, form="features")
    if mechanism == "local":
        return lambda: eva_practical(q, k, v, block_size=window, num_chunks=0)
    if mechanism == "eva":
        return lambda: eva_practical(q, k, v, block_size=window, num_chunks=chunks, rng=np.random.default_rng(seed))
    raise ValueError(f"unknown mechanism {mechanism!r}; expected one of {MECHANISMS}")


def is_capped(length: int, options: dict) -> bool:
    """Whether EVA's ``|E|`` or ``C`` is capped at ``length`` (the stated configuration does not fit)."""
    return options["window"] > length // 2 or options["chunks"] > length // 2


def _sizes(mechanism: str, length: int, options: dict) -> tuple[int, int]:
    window = min(options["window"], length // 2)
    return window, (min(options["chunks"], length // 2) if mechanism == "eva" else 0)


def mechanism_flops(mechanism: str, length: int, options: dict) -> int:
    """GEMM flops of one forward call of ``mechanism`` (all heads), from :mod:`rfkit.theory.cost` /
    :func:`rfkit.theory.eva.eva_practical_gemms`."""
    heads = options["heads"]
    d = options["width"] // heads
    if mechanism == "softmax":
        return gemm_flops(softmax_attention_gemms(length, length, d, d, batch=heads))
    if mechanism == "performer":
        r = options["features"]
        return gemm_flops(feature_map_gemms(2 * length, d, r, batch=heads)
                          + linear_attention_gemms(length, r, d, causal=False, chunk=length, batch=heads))
    window, chunks = _sizes(mechanism, length, options)
    return heads * gemm_flops(eva_practical_gemms(length, d, d, window, chunks))


def efficiency_sweep(options: dict, rng: np.random.Generator) -> xr.Dataset:
    """``seconds`` (best CPU time) with ``seconds_resolution`` (its gap to the second-best time,
    :func:`rfkit.validation.timing.interleaved_best_times`), ``peak_bytes`` and ``flops`` (GEMM counts) of one forward
    call, each ``(mechanism, length)``; ``options["measures"]`` selects a subset (default all)."""
    lengths, mechanisms = list(options["lengths"]), list(options["mechanisms"])
    measures = options.get("measures", MEASURES)
    calls = [attention_call(m, n, options, rng) for n in lengths for m in mechanisms]
    values = {}
    if "seconds" in measures:
        values["seconds"], values["seconds_resolution"] = interleaved_best_times(calls, repeats=options["repeats"])
    if "peak_bytes" in measures:
        calls[0]()  # warm-up outside the trace
        gc.collect()
        values["peak_bytes"] = np.array([peak_bytes(call, collect=False) for call in calls], dtype=float)
    if "flops" in measures:
        values["flops"] = np.array([mechanism_flops(m, n, options) for n in lengths for m in mechanisms], dtype=float)
    shape = (len(lengths), len(mechanisms))
    return xr.Dataset({name: (("length", "mechanism"), v.reshape(shape)) for name, v in values.items()},
                      coords=dict(length=lengths, mechanism=mechanisms)).transpose("mechanism", "length")


#: App E.4 / Table 12 (MLM) values of the options the paper states; the sequence lengths it leaves open.
FIG1_PAPER = dict(width=192, heads=2, window=256, chunks=128, features=256, repeats=30)


def fig1_caption(options: dict) -> str:
    """Fig 1's regime line (:func:`rfkit.validation.reproductions.layout.regime_caption`)."""
    regime = (f"one attention layer ({options['heads']} heads of dimension {options['width'] // options['heads']}), "
              f"forward only, CPU, float64, single-threaded BLAS (paper: 8-layer Transformer, batch 64, 8 V100 GPUs), "
              f"random inputs, lengths {options['lengths']}, mechanisms {options['mechanisms']} (Long-Short not "
              f"implemented); time: best of {options['repeats']} interleaved repeats (paper: mean of 30), bars up to "
              f"the second-best time; memory: tracemalloc peak of one call (deterministic, no bars); |E| = "
              f"min({options['window']}, L/2), C = min({options['chunks']}, L/2), {options['features']} Performer "
              f"features")
    return layout.regime_caption("eva.fig1", regime, options, FIG1_OPTIONS, FIG1_PAPER)


@layout.themed()
def _plot(ds: xr.Dataset, options: dict, path: Path) -> None:
    fig, axes = layout.new_figure(1, 2, figsize=(10, 4))
    lengths = ds.length.values
    for ax, name, label in zip(axes[0], ("peak_bytes", "seconds"), ("peak memory (MiB)", "CPU time (ms)"),
                               strict=True):
        factor = 2.0**-20 if name == "peak_bytes" else 1e3
        for i, mech in enumerate(ds.mechanism.values):
            values = ds[name].sel(mechanism=mech).values * factor
            err = None
            if name == "seconds" and "seconds_resolution" in ds:
                err = [np.zeros_like(values), ds["seconds_resolution"].sel(mechanism=mech).values * factor]
            ax.errorbar(lengths, values, yerr=err, marker="o", color=f"C{i}", capsize=3, label=str(mech))
        ax.set(xscale="log", yscale="log", xlabel="sequence length", ylabel=label)
        layout.log_ticks_at(ax.xaxis, lengths)
    fig.suptitle("EVA Fig 1 (one attention layer, forward, CPU): memory and running time")
    layout.finish(fig, path, fig1_caption(options))


def run_fig1(out, **options) -> dict[str, Path]:
    """Figure 1 (left, middle): memory and running time against sequence length (PNG + netCDF)."""
    options = dict(FIG1_OPTIONS, **options)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ds = efficiency_sweep(options, np.random.default_rng(options["seed"]))
    ds.attrs.update({k: str(v) for k, v in options.items()}, figure="EVA Fig 1 (left, middle)")
    paths = {"netcdf": out / "eva_fig1.nc", "png": out / "eva_fig1.png"}
    write_dataset(ds, paths["netcdf"])
    _plot(ds, options, paths["png"])
    return paths


FIG1_OPTIONS = dict(lengths=[256, 512, 1024, 2048], mechanisms=list(MECHANISMS), width=192, heads=2, window=256,
                    chunks=128, features=256, repeats=3, seed=0)
FIG1_DOCS = dict(
    lengths="sequence lengths (paper: unstated; figure spans short to long sequences)",
    mechanisms="subset of softmax, performer, local, eva (Long-Short is not implemented)",
    width="embedding width (paper: 192)", heads="attention heads (paper: 2)",
    window="local block / EVA |E| (Table 12 MLM: 256)", chunks="EVA chunks C (Table 12 MLM: 128)",
    features="Performer random features (Table 12 MLM: 256)", repeats="timing repeats (best of k; paper: mean of 30)",
    seed="root seed")

REPRODUCTIONS = [
    Reproduction("eva.fig1", "eva", "Fig 1 (left, middle): memory and running time vs sequence length, one attention "
                 "layer on CPU", run_fig1, FIG1_OPTIONS, FIG1_DOCS),
]
