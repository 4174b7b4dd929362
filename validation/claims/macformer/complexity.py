"""Complexity: softmax and RMFA cost (Figure 2) and Table 2's memory claim."""

from __future__ import annotations

import functools
import math

import numpy as np

from rfkit.estimators import softmax_attention
from rfkit.estimators.rmf import draw_rmf, rmfa
from rfkit.theory import cost
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.harness import quiet
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.stats import Evidence, combine, exact_test
from rfkit.validation.timing import cell_timing_slope, geometric_sizes, peak_bytes, single_threaded_blas

from .common import KERNEL_NAMES, MASK_KINDS, _gaussian_qkv, _p_range, _route_options

#: Trend claims: a log-log slope of at least TREND in the claimed direction, TREND_TOLERANCE of it tolerated.
TREND, TREND_TOLERANCE = 0.1, 0.05


def _sweep(lo: int, hi: int) -> list[int]:  # √2-spaced sizes from lo to hi (hi/lo a power of 2)
    return geometric_sizes(lo, hi, round(2 * math.log2(hi / lo)) + 1)


def _swept(ctx: CellContext) -> tuple[str, list[int], list[dict]]:  # the swept axis, its sizes, params at each
    axis = next(a for a, s in ctx.params.items() if isinstance(s, list))
    return axis, ctx.params[axis], [dict(ctx.params, **{axis: s}) for s in ctx.params[axis]]


def _one_sweep(p: dict, v: str = "") -> bool:  # ``where``: exactly one axis is a sweep (a list of sizes)
    return sum(isinstance(s, list) for s in p.values()) == 1


def _order(words: str, lo: int, up_to: int) -> Integers:
    return Integers(f"{words} (an order: large sizes)", lo, math.inf, up_to=up_to,
                    why=f"the log-log slope of CPU time is fitted on √2-spaced sizes from {lo} to {up_to}, where "
                        "fixed per-call overheads no longer bend the curve (further at the full tier)")


def _softmax_cost_cell(ctx: CellContext) -> Evidence:
    axis, sizes, shapes = _swept(ctx)
    attend = ctx.impl("softmax_attention", softmax_attention)
    calls = [functools.partial(attend, *_gaussian_qkv(ctx.rng, sh["n"], sh["d"])) for sh in shapes]
    timing = cell_timing_slope(ctx, sizes, calls, 2.0 if axis == "n" else 1.0, parts=2)
    flops = [cost.gemm_flops(cost.softmax_attention_gemms(s["n"], s["n"], s["d"], s["d"])) for s in shapes]
    counts = exact_test(flops, [4 * s["n"] ** 2 * s["d"] for s in shapes], tolerance=0.0, extra=dict(flops=flops))
    return combine([timing, counts])


SOFTMAX_COST = Claim(
    id="macformer.sec_rmfa.softmax_cost", source="RMFA section and Figure 2a; Definition 1",
    statement="Softmax attention has time complexity O(n²d) (QKᵀ costs O(n²d), and the product with V another O(n²d)).",
    kind="complexity", tolerance=0.25, units="log-log slope of time above the claimed order (counts: any mismatch)",
    domain=dict(n=_order("time complexity O(n²d): the length n", 256, 2048),
                d=_order("time complexity O(n²d): the width d", 16, 256)),
    cell=_softmax_cost_cell,
    grid=tiers(dict(n=[_sweep(256, 2048), 256], d=[64, _sweep(16, 256)]), full=dict(n=[_sweep(256, 16384), 256])),
    where=_one_sweep, replicates=tiers(6, smoke=3, full=20), roles=("softmax_attention",),
    notes="The naive form with materialised scores (Figure 2a), d_v = d, float64 numpy. Time: CPU time of every "
          "repeat, n sweep at d = 64, d sweep at n = 256. Counts: rfkit.theory.cost's GEMM flops.",
)


def _rmfa_cost_cell(ctx: CellContext) -> Evidence:
    """Log-log slope of CPU time <= 1 in the swept one of n, d, D (the RMF draw timed or not: the reading)."""
    axis, sizes, shapes = _swept(ctx)
    p, attend, calls = ctx.params["p"], ctx.impl("rmfa", rmfa), []
    for sh in shapes:
        q, k, v = _gaussian_qkv(ctx.rng, sh["n"], sh["d"])
        options = dict(_route_options(sh["mask"], sh["n"], ctx.rng), p=p)
        options.update(dict(draw=draw_rmf(sh["D"], sh["d"], rng=ctx.rng, p=p)) if ctx.variant == "excluded" else
                       dict(num_features=sh["D"], rng=int(ctx.rng.integers(2**63))))
        calls.append(functools.partial(quiet, attend, q, k, v, **options))
    return cell_timing_slope(ctx, sizes, calls, 1.0, extra=dict(order="ndD"))


def _rmfa_where(p: dict, v: str) -> bool:
    """One of n, d, D swept; the masks and p in the n sweeps only. The general mask is the quadratic form: its n
    sweep is the shorter one (starting below 2048), the factored routes' the longer."""
    if not isinstance(p["n"], list):
        return _one_sweep(p) and p["mask"] == "none" and p["p"] == 2.0
    general = p["mask"] == "general"
    return _one_sweep(p) and general == (min(p["n"]) < 2048) and (p["p"] == 2.0 or p["mask"] == "none")


RMFA_COST = Claim(
    id="macformer.sec_rmfa.rmfa_cost", source="RMFA section and Figure 2b",
    statement="RMFA has time complexity O(ndD), and for n >> D it is much cheaper than softmax attention.",
    kind="complexity", tolerance=0.25, units="log-log slope of time above 1 (in n, d or D)",
    domain=dict(n=_order("time complexity O(ndD): the length n", 512, 8192),
                d=_order("time complexity O(ndD): the width d", 16, 128),
                D=_order("time complexity O(ndD): the features D", 64, 256),
                mask=Choice("not qualified by mask type", MASK_KINDS),
                p=_p_range("not qualified by p (every p > 1)",
                           "p changes only the constant E[W] = D/(p - 1) of the projections")),
    readings={"included": Reading("drawing the RMF features is timed"),
              "excluded": Reading("the draw is made outside the timer")},
    cell=_rmfa_cost_cell,
    grid=tiers(dict(n=[_sweep(2048, 8192), _sweep(512, 2048), 2048], d=[64, _sweep(16, 128)], D=[64, _sweep(64, 256)],
                    mask=["none", "padding", "causal", "general"], p=[1.1, 2.0, 4.0]),
               full=dict(n=[_sweep(2048, 65536), _sweep(256, 4096), 2048], d=[64, _sweep(16, 256)],
                         D=[64, _sweep(64, 2048)])),
    where=_rmfa_where, replicates=tiers(4, smoke=2, full=20), roles=("rmfa",),
    notes="n = 2048, D = 64, d = 64 unless swept. The general mask M' has no factored form: its route is quadratic "
          "(n sweep 512..2048). 'Much cheaper than softmax for n >> D': macformer.fig4b.*.",
)


def _memory_cell(ctx: CellContext) -> Evidence:
    n, d = ctx.params["length"], ctx.params["d"]
    q, k, v = _gaussian_qkv(ctx.rng, n, d, scale=0.3 * d**-0.25)
    options = dict(num_features=ctx.params["D"], p=ctx.params["p"], coeffs=ctx.params["coeffs"],
                   causal=ctx.params["mask"] == "causal", rng=int(ctx.rng.integers(2**63)))

    def peak(kernel: str) -> int:
        return peak_bytes(lambda: quiet(rmfa, q, k, v, kernel, **options), collect=False)

    peak("exp")  # warm-up outside the comparison (lazy imports, caches)
    with single_threaded_blas():
        peaks = np.array([peak(kernel) for kernel in KERNEL_NAMES], dtype=float)
    return exact_test(peaks, peaks[0], tolerance=ctx.tolerance, scale=peaks[0],
                      extra=dict(kernels=list(KERNEL_NAMES), peak_bytes=peaks.tolist()))


def _setting(words: str, lo: int, hi: int) -> Integers:
    return Integers(f"the same model and data settings: {words}", lo, hi)


MEMORY_KERNEL_INVARIANT = Claim(
    id="macformer.table2.memory_kernel_invariant", source="Table 2 (memory columns)",
    statement="Changing the kernel (exp, inv, trigh, log, sqrt) does not change Macformer's memory consumption: the "
              "kernel only changes the coefficients a_N.",
    kind="complexity", tolerance=0.01, units="relative difference of peak bytes from the exp kernel's",
    domain=dict(length=_setting("the register's lengths 1024..4096", 1024, 4096),
                d=_setting("widths 32..64", 32, 64), D=_setting("features 128..512 (LRA: 128)", 128, 512),
                p=Range("p of the register's sweep, 1.5..4 (the paper fixes p = 2)", 1.5, 4.0),
                mask=Choice("masks none and causal", ("none", "causal")),
                coeffs=Choice("coefficients printed and derived", ("derived", "printed"))),
    cell=_memory_cell,
    grid=tiers(dict(length=[1024, 4096], d=[32, 64], D=[128, 512], p=[1.5, 4.0], mask=["none", "causal"],
                    coeffs=["derived", "printed"]),
               smoke=dict(length=[1024], d=[32], D=[128], mask=["none"], coeffs=["derived"]),
               full=dict(p=[1.5, 2.0, 4.0])),
    # two corners: all sizes small or all large (coverage is per axis)
    where=lambda p, v: len({p["length"] == 1024, p["d"] == 32, p["D"] == 128}) == 1, roles=("rmfa",), plot_x="p",
    notes="The forward pass on CPU (tracemalloc peak); the same shapes, D, p and seed (same draw) for every kernel. "
          "Backward and GPU memory, and Table 2's trained LRA models, are not run here.",
)
