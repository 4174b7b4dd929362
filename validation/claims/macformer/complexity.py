"""Complexity: softmax and RMFA cost (Figure 2) and Table 2's memory claim."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rfkit.estimators import softmax_attention
from rfkit.estimators.rmf import draw_rmf, rmfa
from rfkit.theory import cost
from rfkit.validation.model import CellContext, Claim, per_tier
from rfkit.validation.stats import (
    Evidence,
    combine,
    exact_test,
)
from rfkit.validation.timing import peak_bytes, single_threaded_blas, timing_slope_test

from .common import KERNEL_NAMES, _quiet
from .inputs import _gaussian_qkv, _mask

#: Trend claims: a trend is a log-log slope of at least TREND in the claimed direction; TREND_TOLERANCE of it is
#: tolerated, so a cell is refuted when the slope is significantly on the wrong side of ±(TREND - TREND_TOLERANCE)
#: and supported when it is significantly beyond it.
TREND, TREND_TOLERANCE = 0.1, 0.05


def _sqrt2_sizes(low: int, high: int) -> list[int]:
    """√2-spaced sizes from ``low`` to ``high`` (both included; ``high/low`` a power of 2): a fitted slope needs at
    least 5 sizes, and the top of the sweep (where fixed per-call overheads no longer bend the curve) is kept."""
    steps = round(2 * np.log2(high / low))
    return [int(round(low * 2 ** (k / 2))) for k in range(steps + 1)]


def _timing_slope(ctx: CellContext, sizes: Sequence[int], calls: list[Callable], claimed: float,
                  extra: dict | None = None, **test) -> Evidence:
    """Log-log slope of CPU time (every repeated measurement) against ``claimed`` ("grows no faster than")."""
    test = test or ctx.test
    return timing_slope_test(sizes, calls, claimed, repeats=ctx.replicates, alpha=test["alpha"],
                             tolerance=test["tolerance"], alternative="less", extra=extra)


def _softmax_call(ctx: CellContext, n: int, d: int):
    q, k, v = _gaussian_qkv(ctx.rng, n, d)
    attend = ctx.impl("softmax_attention", softmax_attention)
    return lambda: attend(q, k, v)


SOFTMAX_SIZES = {"n": {"smoke": _sqrt2_sizes(256, 1024), "quick": _sqrt2_sizes(256, 2048),
                       "full": _sqrt2_sizes(256, 16384)},
                 "d": {"smoke": _sqrt2_sizes(64, 256), "quick": _sqrt2_sizes(32, 256), "full": _sqrt2_sizes(16, 256)}}
SOFTMAX_FIXED_N, SOFTMAX_FIXED_D = 256, 64


def _softmax_cost_cell(ctx: CellContext) -> Evidence:
    sweep = ctx.params["sweep"]
    sizes = per_tier(SOFTMAX_SIZES[sweep], ctx.tier)
    shapes = [(s, SOFTMAX_FIXED_D) if sweep == "n" else (SOFTMAX_FIXED_N, s) for s in sizes]
    timing = _timing_slope(ctx, sizes, [_softmax_call(ctx, n, d) for n, d in shapes], 2.0 if sweep == "n" else 1.0,
                           **ctx.sub_test(2))
    flops = [cost.gemm_flops(cost.softmax_attention_gemms(n, n, d, d)) for n, d in shapes]
    counts = exact_test(flops, [4 * n * n * d for n, d in shapes], tolerance=0.0, extra=dict(flops=flops))
    return combine([timing, counts])


SOFTMAX_COST = Claim(
    id="macformer.sec_rmfa.softmax_cost", paper="macformer", source="RMFA section and Figure 2a; Definition 1",
    statement="Softmax attention has time complexity O(n²d) (QKᵀ costs O(n²d), and the product with V another "
              "O(n²d)).",
    kind="complexity", hypotheses="the naive form with materialised scores (Figure 2a); d_v = d; float64, numpy",
    tolerance=0.25, units="log-log slope of time above the claimed order (counts: any mismatch)",
    cell=_softmax_cost_cell, grid={"smoke": dict(sweep=["n"]), "quick": dict(sweep=["n", "d"])},
    replicates={"smoke": 3, "quick": 6, "full": 20}, roles=("softmax_attention",), plot_x="sweep",
    notes="Time: the CPU time of every repeat (rfkit.validation.timing.timing_slope_test, >= 5 √2-spaced sizes) of "
          "rfkit.estimators.softmax_attention (n sweep at d = 64, d sweep at n = 256). "
          "Counts: the GEMM flops of rfkit.theory.cost against the analytic 2n²d + 2n²d_v. The torch GPU path is "
          "not run here.",
)

RMFA_COST_SIZES = {"n": {"smoke": _sqrt2_sizes(1024, 4096), "quick": _sqrt2_sizes(2048, 8192),
                         "full": _sqrt2_sizes(2048, 65536)},
                   "n_general": {"smoke": _sqrt2_sizes(256, 1024), "quick": _sqrt2_sizes(512, 2048),
                                 "full": _sqrt2_sizes(256, 4096)},
                   "D": {"smoke": _sqrt2_sizes(64, 256), "quick": _sqrt2_sizes(64, 256),
                         "full": _sqrt2_sizes(64, 2048)},
                   "d": {"smoke": _sqrt2_sizes(64, 256), "quick": _sqrt2_sizes(32, 128), "full": _sqrt2_sizes(16, 256)}}
RMFA_FIXED = dict(n=2048, D=64, d=64)


def _rmfa_call(ctx: CellContext, n: int, d: int, num_features: int, route: str, p: float, sampling: str):
    q, k, v = _gaussian_qkv(ctx.rng, n, d)
    options = dict(_route_options(route, n, ctx.rng), p=p)
    attend = ctx.impl("rmfa", rmfa)
    if sampling == "excluded":
        draw = draw_rmf(num_features, d, rng=ctx.rng, p=p)
        return lambda: _quiet(attend, q, k, v, draw=draw, **options)
    seed = int(ctx.rng.integers(2**63))
    return lambda: _quiet(attend, q, k, v, num_features=num_features, rng=seed, **options)


def _route_options(route: str, n: int, rng: np.random.Generator) -> dict:
    if route == "padding":
        return dict(key_padding=_mask("padding", n, rng)[0])
    if route == "causal":
        return dict(causal=True)
    if route == "general":
        return dict(mask=_mask("general", n, rng))
    return {}


def _rmfa_cost_cell(ctx: CellContext) -> Evidence:
    sweep, route, p = ctx.params["sweep"], ctx.params["route"], ctx.params["p"]
    sizes = per_tier(RMFA_COST_SIZES["n_general" if sweep == "n" and route == "general" else sweep], ctx.tier)
    shapes = [dict(RMFA_FIXED, **{sweep: s}) for s in sizes]
    calls = [_rmfa_call(ctx, sh["n"], sh["d"], sh["D"], route, p, ctx.variant) for sh in shapes]
    return _timing_slope(ctx, sizes, calls, 1.0, extra=dict(route=route, p=p, order="ndD"))


RMFA_COST = Claim(
    id="macformer.sec_rmfa.rmfa_cost", paper="macformer", source="RMFA section and Figure 2b",
    statement="RMFA has time complexity O(ndD), and for n >> D it is much cheaper than softmax attention.",
    kind="complexity",
    hypotheses="none stated by the paper: not qualified by mask type (none, key padding, causal, general) or p; "
               "float64 numpy; sweeps at n = 2048, D = 64, d = 64 unless swept",
    tolerance=0.25, units="log-log slope of time above 1 (in n, d or D)",
    cell=_rmfa_cost_cell,
    grid={"smoke": dict(sweep=["n"], route=["none", "general"], p=[2.0]),
          "quick": dict(sweep=["n", "D", "d"], route=["none", "causal", "general"], p=[2.0]),
          "full": dict(sweep=["n", "D", "d"], route=["none", "padding", "causal", "general"], p=[1.5, 2.0, 4.0])},
    where=lambda p, v: p["sweep"] == "n" or p["route"] == "none",
    replicates={"smoke": 2, "quick": 4, "full": 20},  # repeats of each timing sweep (10 sweeps at quick)
    variants=("included", "excluded"),
    variant_notes={"included": "drawing the RMF features is timed", "excluded": "the draw is made outside the timer"},
    roles=("rmfa",), plot_x="sweep",
    notes="The general-mask route is RMFA's definition with an arbitrary M': its factored form does not exist, so it "
          "is the quadratic form. 'Much cheaper than softmax for n >> D' is measured by macformer.fig4b.*. "
          "p changes only the constant (E[W] = D/(p-1)); its sweep is in the full tier.",
)




def _forward_peak(ctx: CellContext, kernel: str, inputs, options: dict, seed: int) -> int:
    q, k, v = inputs
    return peak_bytes(lambda: _quiet(rmfa, q, k, v, kernel, rng=seed, **options), collect=False)


def _memory_cell(ctx: CellContext) -> Evidence:
    n, d, num_features, p = ctx.params["length"], ctx.params["d"], ctx.params["D"], ctx.params["p"]
    inputs = _gaussian_qkv(ctx.rng, n, d, scale=0.3 * d**-0.25)
    options = dict(num_features=num_features, p=p, coeffs=ctx.params["coeffs"], causal=ctx.params["mask"] == "causal")
    seed = int(ctx.rng.integers(2**63))
    _forward_peak(ctx, "exp", inputs, options, seed)  # warm-up outside the comparison (lazy imports, caches)
    with single_threaded_blas():
        peaks = np.array([_forward_peak(ctx, kernel, inputs, options, seed) for kernel in KERNEL_NAMES], dtype=float)
    return exact_test(peaks, peaks[0], tolerance=ctx.tolerance, scale=peaks[0],
                      extra=dict(kernels=list(KERNEL_NAMES), peak_bytes=peaks.tolist()))


MEMORY_KERNEL_INVARIANT = Claim(
    id="macformer.table2.memory_kernel_invariant", paper="macformer", source="Table 2 (memory columns)",
    statement="Changing the kernel (exp, inv, trigh, log, sqrt) does not change Macformer's memory consumption: the "
              "kernel only changes the coefficients a_N.",
    kind="complexity",
    hypotheses="the same shapes, D, p and seeds (hence the same draw); the attention layer's forward pass on CPU "
               "(tracemalloc peak)",
    tolerance=0.01, units="relative difference of peak bytes from the exp kernel's",
    cell=_memory_cell,
    grid={"smoke": dict(length=[1024], d=[32], D=[128], p=[2.0], mask=["none"], coeffs=["derived"]),
          "quick": dict(length=[512], d=[32], D=[128], p=[1.5, 4.0], mask=["none", "causal"],
                        coeffs=["derived", "printed"]),
          "full": dict(length=[1024, 4096], d=[32, 64], D=[128, 512], p=[1.5, 2.0, 4.0], mask=["none", "causal"],
                       coeffs=["derived", "printed"])},
    roles=("rmfa",), plot_x="p",
    notes="Forward + backward memory and torch.cuda.max_memory_allocated need the GPU backend and are not run; the "
          "LRA models of Table 2 need training (not reproducible here). Accuracy and training time are out of "
          "scope (register).",
)


