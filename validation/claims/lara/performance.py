"""``lara.*`` cost and reproduction claims: complexity (§2.2, §3.2, G.3), Table 6 and Figure 1.

Seed text ``000_d62fa2cae7f5a446.txt``; register ``../shared/claims/lara.md``.

* **Complexity** claims combine exact operation counts (:func:`rfkit.theory.lara.rfa_gemms`, ``ra_gemms``,
  ``lara_gemms``, ``proposal_flops`` with :func:`rfkit.theory.cost.gemm_flops`: their log-log slopes are exact) with
  the measured log-log slope of CPU time (:func:`rfkit.validation.timing.timing_slope_test`: every repeated
  measurement of at least 5 sizes, single-threaded BLAS, t on the fit's dof) and, where the claim is about space,
  of traced peak memory. "O(x)" is tested as "grows no faster than x" (alternative ``less``) with the usual slope
  tolerance 0.25. Sizes are √2- or 2-spaced up to the largest size of each tier.
* **Table 6** is measured with rfkit's numpy estimators on CPU (the paper: a GPU transformer); only ratios are
  compared, as the register says, and the numbers are ours, not the paper's hardware. Time ratios are tested on
  repeated paired CPU times (:func:`rfkit.validation.timing.timing_ratio_test`: log-ratios, t, machine margin
  25%), reported in the claim's relative units; traced peak memory is deterministic (an exact margin).
* **Figure 1** uses the reproduction's computation (:func:`rfkit.validation.reproductions.lara.fig1_heads`) on
  synthetic heads: the paper's ViT activations are not available.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from rfkit.estimators import lara as lara_est
from rfkit.estimators import ra as ra_est
from rfkit.estimators import rfa as rfa_est
from rfkit.estimators import softmax_attention
from rfkit.theory import cost
from rfkit.theory import lara as theory
from rfkit.validation.model import CellContext, Claim, per_tier
from rfkit.validation.search import margin_evidence
from rfkit.validation.stats import Evidence, combine, exact_test, mean_test, slope_test
from rfkit.validation.timing import cell_timing_slope, peak_bytes, single_threaded_blas, timing_ratio_test

from .inputs import attention_inputs

#: Slope tolerance of complexity claims.
SLOPE_TOL = 0.25


def _count_slope(sizes, counts) -> float:
    """Exact log-log slope of an operation count between the two largest sizes."""
    return math.log(counts[-1] / counts[-2]) / math.log(sizes[-1] / sizes[-2])


#: Shortest timed measurement: calls faster than this (microsecond proposal computations) are timed in a loop
#: of the same length at every size, so the timer's jitter does not swamp them (a constant factor: the
#: slope is unchanged); such sweeps are cheap, so they get twice the claim's repeats.
MIN_TIMED_SECONDS = 5e-4


def _counts_evidence(ctx: CellContext, sizes, counts, claimed: float) -> Evidence:
    slope = _count_slope(sizes, counts)
    return exact_test(max(slope - claimed, 0.0), 0.0, tolerance=ctx.tolerance,
                      extra=dict(flops=[int(c) for c in counts], count_slope=slope))


def _memory_evidence(ctx: CellContext, sizes, calls, claimed: float) -> Evidence:
    """Exact log-log slope of traced peak memory between the two largest sizes (the only ones traced)."""
    with single_threaded_blas():
        peaks = [peak_bytes(c, collect=False) for c in calls[-2:]]
    slope = _count_slope(sizes[-2:], peaks)
    return exact_test(max(slope - claimed, 0.0), 0.0, tolerance=ctx.tolerance,
                      extra=dict(peak_bytes=peaks, memory_slope=slope))


def _qkv(ctx: CellContext, n: int, d: int):
    return attention_inputs("gauss", ctx.rng, n, n, d, d, 1.0)


# ============================================================================ §2.2: RFA is linear

RFA_SIZES = {"n": {"smoke": [512, 724, 1024, 1448, 2048], "quick": [1024, 1448, 2048, 2896, 4096],
                   "full": [256, 512, 1024, 2048, 4096, 8192, 16384]},
             "S": {"smoke": [16, 32, 64, 128, 256], "quick": [16, 32, 64, 128, 256],
                   "full": [16, 32, 64, 128, 256, 512, 1024]}}
FIXED = dict(n=1024, S=64, d=32, C=16)


def _shapes(ctx: CellContext, sizes_table) -> tuple[str, list[int]]:
    sweep = ctx.params["sweep"]
    return sweep, per_tier(sizes_table[sweep], ctx.tier)


def _rfa_cost_cell(ctx: CellContext) -> Evidence:
    sweep, sizes = _shapes(ctx, RFA_SIZES)
    d = FIXED["d"]
    shapes = [(s, FIXED["S"]) if sweep == "n" else (FIXED["n"], s) for s in sizes]
    attend = ctx.impl("rfa_attention", rfa_est.rfa_attention)
    calls = []
    for n, S in shapes:
        q, k, v = _qkv(ctx, n, d)
        seed = int(ctx.rng.integers(2**32))
        calls.append(lambda q=q, k=k, v=v, S=S, seed=seed: attend(q, k, v, S=S, rng=seed))
    counts = [cost.gemm_flops(theory.rfa_gemms(n, n, S, d, d)) for n, S in shapes]
    return combine([cell_timing_slope(ctx, sizes, calls, 1.0, parts=3, min_seconds=MIN_TIMED_SECONDS),
                    _counts_evidence(ctx, sizes, counts, 1.0),
                    _memory_evidence(ctx, sizes, calls, 1.0)])


COMPLEXITY_GRID = {"smoke": dict(sweep=["n"]), "quick": dict(sweep=["n", "S"])}

RFA_LINEAR = Claim(
    id="lara.sec2_2.rfa_linear_complexity", paper="lara", source="§2.2 (after Eq 2); G.3.4",
    statement="Computing Σ_m ξ(k_m,ω_s)v_mᵀ and Σ_m ξ(k_m,ω_s) once and reusing them for every query makes RFA linear "
              "in sequence length, in time and memory.",
    kind="complexity",
    hypotheses="S and D fixed (S = 64, D = 32) for the N sweep (N = M); N = 1024 for the S sweep; numpy, float64, "
               "softmax form (rfkit.estimators.rfa.rfa_attention)",
    tolerance=SLOPE_TOL, units="log-log slope above 1 (time, exact flop count, traced peak memory)",
    cell=_rfa_cost_cell, grid=COMPLEXITY_GRID, replicates={"smoke": 3, "quick": 5, "full": 20},
    roles=("rfa_attention",), plot_x="sweep",
    notes="Numba and torch backends are not timed here. On the shared 2-core validation machine the CPU-time slope "
          "in N over 1024-4096 comes out about 1.15-1.2 (the n×S feature arrays leave the caches in this range) with "
          "a wide radius, while the exact flop-count and traced-memory slopes are 1; what decides the time part is "
          "the full tier (20 repeats, N up to 16384) on an unloaded machine.",
)


# =========================================================================== §3.2: RA is quadratic

RA_SIZES = {"n": {"smoke": [256, 362, 512, 724, 1024], "quick": [256, 362, 512, 724, 1024],
                  "full": [256, 512, 1024, 2048, 4096, 8192]},
            "S": {"smoke": [1, 2, 3, 4, 6], "quick": [1, 2, 3, 4, 6, 8], "full": [1, 2, 3, 4, 6, 8]}}
#: Timed rounds of the N sweep (the S sweep takes the claim's replicates). Its N×M arrays are 0.5-8 MB at quick:
#: larger ones are DRAM-bound, and on the shared 2-core validation machine their CPU time carries the other
#: processes' memory traffic (over N = 512-2048 the slope measured 2.19 ± 0.05 at load ~2 and its radius 0.48 at
#: load ~7); rounds at N <= 1024 cost ~0.13 s: 15 of them (radius 0.08-0.14 at load ~6) cost about the 2-3 rounds
#: at N <= 2048 did.
RA_N_REPEATS = {"smoke": 2, "quick": 15, "full": 10}


def _ra_cost_cell(ctx: CellContext) -> Evidence:
    sweep, sizes = _shapes(ctx, RA_SIZES)
    d = 64
    shapes = [(s, 1) if sweep == "n" else (512, s) for s in sizes]
    attend = ctx.impl("ra_attention", ra_est.ra_attention)
    calls = []
    for n, S in shapes:
        q, k, v = _qkv(ctx, n, d)
        seed = int(ctx.rng.integers(2**32))
        calls.append(lambda q=q, k=k, v=v, S=S, seed=seed: attend(q, k, v, S=S, rng=seed))
    claimed = 2.0 if sweep == "n" else 1.0
    counts = [cost.gemm_flops(theory.ra_gemms(n, n, d, d, S)) for n, S in shapes]
    repeats = per_tier(RA_N_REPEATS, ctx.tier) if sweep == "n" else None
    return combine([cell_timing_slope(ctx, sizes, calls, claimed, parts=2, repeats=repeats,
                                      min_seconds=MIN_TIMED_SECONDS),
                    _counts_evidence(ctx, sizes, counts, claimed)])


RA_QUADRATIC = Claim(
    id="lara.sec3_2.ra_quadratic_complexity", paper="lara", source="§3.2 (last two paragraphs); G.2; §5.5",
    statement="RA draws a different sample set per query, so key statistics cannot be reused: O(MN) complexity; with S "
              "samples and length N, time and space are O(SN²).",
    kind="complexity",
    hypotheses="N = M; D = 64; S = 1 for the N sweep, N = 512 for the S sweep; numpy float64 "
               "(rfkit.estimators.ra.ra_attention, queries in chunks: its memory is O(NM) for π plus a chunk)",
    tolerance=SLOPE_TOL, units="log-log slope above the claimed order (2 in N, 1 in S; time and exact flop count)",
    cell=_ra_cost_cell, grid=COMPLEXITY_GRID, replicates={"smoke": 2, "quick": 2, "full": 10},
    roles=("ra_attention",), plot_x="sweep",
    notes="'O(·)' is an upper bound: slopes significantly above it refute; the measured slopes (in extra) also show "
          "how close to quadratic the time is. The exact flop count's slope is 2. The quick tier times N = 256-1024 "
          "(N×M arrays <= 8 MB) in 15 rounds: measured 2.04-2.09 with radius 0.08-0.14 at load ~6. Over N = "
          "512-2048 (arrays up to 32 MB, DRAM-bound) the CPU-time slope was 2.19 ± 0.05 (5 rounds, one intercept per "
          "round, load ~2) with local slopes rising 1.8 -> 2.4 as the arrays leave L2 then L3, and its radius was "
          "0.34-0.48 with the 2 rounds that fit the budget there: on the shared machine large arrays' CPU time carries "
          "the other processes' memory traffic. The full tier (N up to 8192, 10 repeats) measures the DRAM regime.",
)


# ========================================================================= G.3.4: LARA is linear

LARA_SIZES = {"n": {"smoke": [512, 724, 1024, 1448, 2048], "quick": [1024, 1448, 2048, 2896, 4096],
                    "full": [256, 512, 1024, 2048, 4096, 8192, 16384]},
              "C": {"smoke": [16, 23, 32, 45, 64], "quick": [16, 23, 32, 45, 64, 91, 128],
                    "full": [16, 23, 32, 45, 49, 64, 91, 128]}}


def _lara_cost_cell(ctx: CellContext) -> Evidence:
    sweep, sizes = _shapes(ctx, LARA_SIZES)
    d = FIXED["d"]
    shapes = [(s, FIXED["C"]) if sweep == "n" else (FIXED["n"], s) for s in sizes]
    attend = ctx.impl("lara_attention", lara_est.lara_attention)
    calls = []
    for n, C in shapes:
        q, k, v = _qkv(ctx, n, d)
        seed = int(ctx.rng.integers(2**32))
        calls.append(lambda q=q, k=k, v=v, C=C, seed=seed: attend(q, k, v, C=C, rng=seed, uneven="adaptive"))
    counts = [cost.gemm_flops(theory.lara_gemms(n, n, C, d, d)) for n, C in shapes]
    parts = [cell_timing_slope(ctx, sizes, calls, 1.0, parts=3, min_seconds=MIN_TIMED_SECONDS),
             _counts_evidence(ctx, sizes, counts, 1.0),
             _memory_evidence(ctx, sizes, calls, 1.0)]
    return combine(parts)


LARA_LINEAR = Claim(
    id="lara.g3_4.lara_linear_complexity", paper="lara", source="§4.2; G.3.4; §5.5",
    statement="LARA costs O(C) or O(C²) for the proposals, O(CM) for the key statistics and O(CN) to apply them: "
              "O(CM + CN) overall when C << min(M, N), with no heavy overhead relative to RFA (C plays S's role).",
    kind="complexity",
    hypotheses="C << min(M, N): C = 16 for the N sweep (N = M), N = 1024 for the C sweep; D = 32; eq34 proposals, "
               "Eq 9 weights; numpy float64 (rfkit.estimators.lara.lara_attention)",
    tolerance=SLOPE_TOL, units="log-log slope above 1 (time, exact flop count, traced peak memory)",
    cell=_lara_cost_cell, grid={"smoke": dict(sweep=["n"]), "quick": dict(sweep=["n", "C"])},
    replicates={"smoke": 3, "quick": 8, "full": 20},
    roles=("lara_attention",), plot_x="sweep",
    notes="The C sweep includes the O(C²D) balance heuristic, negligible next to O(CN) at these sizes; the "
          "LARA/RFA ratio at C = S is lara.table6.lara_vs_performer_cost.",
)


# ========================================================================== G.3.1: proposal costs

PROPOSAL_SIZES = {"M": {"smoke": [1024, 2048, 4096, 8192, 16384], "quick": [1024, 2048, 4096, 8192, 16384],
                        "full": [256, 512, 1024, 2048, 4096, 8192, 16384]},
                  "C": {"smoke": [16, 32, 64, 128, 256], "quick": [16, 32, 64, 128, 256],
                        "full": [4, 8, 16, 32, 49, 64, 128, 256]}}
#: Claimed orders per (variant, sweep): eq33 O(CM); eq35 O(C²), independent of M; eq34 O(C).
PROPOSAL_ORDERS = {("eq33", "M"): 1.0, ("eq33", "C"): 1.0, ("eq35", "M"): 0.0, ("eq35", "C"): 2.0,
                   ("eq34", "M"): 0.0, ("eq34", "C"): 1.0}


def _proposal_cost_cell(ctx: CellContext) -> Evidence:
    sweep, sizes = _shapes(ctx, PROPOSAL_SIZES)
    family, d = ctx.variant, 64
    shapes = [(64, s) if sweep == "M" else (s, 4096) for s in sizes]
    calls = []
    for c, m in shapes:
        ql, kl, k = ctx.rng.normal(0, 0.3, (c, d)), ctx.rng.normal(0, 0.3, (c, d)), ctx.rng.normal(0, 0.3, (m, d))
        calls.append(lambda ql=ql, kl=kl, k=k: lara_est.proposal_means(family, ql, kl, k))
    claimed = PROPOSAL_ORDERS[(family, sweep)]
    counts = [theory.proposal_flops(family, c, m, d) for c, m in shapes]
    return combine([cell_timing_slope(ctx, sizes, calls, claimed, parts=2, min_seconds=MIN_TIMED_SECONDS),
                    _counts_evidence(ctx, sizes, counts, claimed)])


PROPOSAL_COSTS = Claim(
    id="lara.g3_1.proposal_costs", paper="lara", source="G.3.1 (after Eqs 33 and 35); G.3.4 step (1)",
    statement="Eq 33 adds an O(CM) cost; Eq 35 runs in O(C²), much cheaper than O(CM); computing the proposal "
              "distribution takes O(C) or O(C²).",
    kind="complexity",
    hypotheses="proposal means alone, landmarks given (rfkit.estimators.lara.proposal_means); D = 64; C = 64 for the "
               "M sweep, M = 4096 for the C sweep; eq35 in its default landmark-attention reading",
    tolerance=SLOPE_TOL, units="log-log slope above the claimed order (time; exact flop count)",
    cell=_proposal_cost_cell, grid={"smoke": dict(sweep=["M"]), "quick": dict(sweep=["M", "C"])},
    replicates={"smoke": 5, "quick": 6, "full": 30},
    variants=("eq33", "eq34", "eq35"),
    variant_notes={"eq33": "O(CM): linear in M and in C", "eq34": "O(C), independent of M",
                   "eq35": "O(C²), independent of M"},
    plot_x="sweep",
    notes="For claimed order 0 (independent of M) the time slope must not exceed 0 by more than the tolerance; "
          "eq34's microsecond calls are timer-limited (resolution floor 2%).",
)


# =============================================================================== Table 6

#: The paper's RA/softmax time ratio lower bound ("at least twice as slowly") and memory ratio ("about 2.5x").
RA_TIME_RATIO, RA_MEMORY_RATIO = 2.0, 2.5


def _memory_ratio(first, second) -> float:
    """Traced peak memory of ``first`` over ``second`` (deterministic)."""
    with single_threaded_blas():
        peaks = [peak_bytes(first, collect=False), peak_bytes(second, collect=False)]
    return peaks[0] / max(peaks[1], 1)


def _in_claim_units(ev: Evidence, to_units) -> Evidence:
    """A log-ratio :func:`timing_ratio_test` evidence with effect, bound and radius mapped by the increasing
    ``to_units`` (``to_units(0) = 0``) into the claim's relative units; the test itself was run at the
    tolerance mapped back into log units, so its decision is unchanged."""
    return dataclasses.replace(ev, effect=to_units(ev.effect), upper=to_units(ev.upper),
                               resolution=to_units(ev.resolution),
                               extra=dict(ev.extra, log_effect=float(ev.effect), log_upper=float(ev.upper),
                                          log_resolution=float(ev.resolution)))


def _ra_softmax_cell(ctx: CellContext) -> Evidence:
    n, d = ctx.params["N"], 64
    q, k, v = _qkv(ctx, n, d)
    seed = int(ctx.rng.integers(2**32))

    def ra():
        return ra_est.ra_attention(q, k, v, rng=seed)

    def softmax():
        return softmax_attention(q, k, v, scale=1.0)

    if ctx.variant == "time":
        # "RA takes >= 2x softmax's time" is "softmax takes <= 1/2 of RA's time"; a relative shortfall s of
        # the ratio below 2 is the log-violation -log(1 - s)
        ev = timing_ratio_test(softmax, ra, 1.0 / RA_TIME_RATIO, repeats=ctx.replicates, alpha=ctx.alpha,
                               tolerance=-math.log1p(-ctx.tolerance))
        return _in_claim_units(ev, lambda x: -math.expm1(-x))
    memory_ratio = _memory_ratio(ra, softmax)
    # traced peak memory is deterministic: an exact margin
    return margin_evidence(-abs(memory_ratio - RA_MEMORY_RATIO) / RA_MEMORY_RATIO, tolerance=ctx.tolerance,
                           extra=dict(memory_ratio=memory_ratio))


RA_VS_SOFTMAX = Claim(
    id="lara.table6.ra_vs_softmax_cost", paper="lara", source="§5.5; H.5; Table 6; Figure 2",
    statement="RA runs at least twice as slowly as softmax attention and uses about 2.5 times its memory.",
    kind="reproduction",
    hypotheses="attention layer only (no transformer), one head, D = 64, S = 1, forward pass; numpy float64 on CPU "
               "(rfkit's ra_attention, queries chunked; softmax_attention materialising N×N); repeated paired CPU "
               "times (timing_ratio_test, machine margin 25%), traced peak memory",
    tolerance=0.25, units="relative shortfall of the time ratio below 2 / relative deviation of the memory ratio "
                          "from 2.5",
    cell=_ra_softmax_cell,
    grid={"smoke": dict(N=[512]), "quick": dict(N=[1024]), "full": dict(N=[1024, 2048, 3072, 4096, 8192])},
    replicates={"smoke": 5, "quick": 6, "full": 20},
    variants=("time", "memory"),
    variant_notes={"time": "time(RA)/time(softmax) >= 2", "memory": "peak(RA)/peak(softmax) ≈ 2.5"},
    plot_x="N",
    notes="The paper measured a GPU transformer (8 layers, embedding 192, 3 heads); here the ratio is of rfkit's CPU "
          "attention implementations, so a refutation says rfkit's RA does not show Table 6's ratios, not that the "
          "paper's GPU numbers are wrong. The ratios are in extra.",
)

#: LARA vs Performer: "as fast as" (time ratio <= 1) and "marginally more memory" (ratio <= 1.33, Table 6's largest).
LARA_TIME_RATIO, LARA_MEMORY_RATIO = 1.0, 1.33


def _lara_performer_cell(ctx: CellContext) -> Evidence:
    n, d, s = ctx.params["N"], 64, ctx.params["S"]
    q, k, v = _qkv(ctx, n, d)
    seed = int(ctx.rng.integers(2**32))

    def lara():
        return lara_est.lara_attention(q, k, v, C=s, rng=seed, uneven="adaptive")

    def performer():
        return rfa_est.rfa_attention(q, k, v, S=s, rng=seed)

    if ctx.variant == "time":
        # a relative excess e of the ratio over 1 is the log-violation log(1 + e)
        ev = timing_ratio_test(lara, performer, LARA_TIME_RATIO, repeats=ctx.replicates, alpha=ctx.alpha,
                               tolerance=math.log1p(ctx.tolerance))
        return _in_claim_units(ev, math.expm1)
    memory_ratio = _memory_ratio(lara, performer)
    # traced peak memory is deterministic: an exact margin
    return margin_evidence((LARA_MEMORY_RATIO - memory_ratio) / LARA_MEMORY_RATIO, tolerance=ctx.tolerance,
                           extra=dict(memory_ratio=memory_ratio))


LARA_VS_PERFORMER = Claim(
    id="lara.table6.lara_vs_performer_cost", paper="lara", source="§5.5; H.5; Table 6; Figure 2",
    statement="LARA runs as fast as Performer and uses only marginally more memory.",
    kind="reproduction",
    hypotheses="C = S samples (16, 64); attention layer only, D = 64, forward pass, numpy float64 on CPU; LARA eq34 "
               "with Eq 9 weights, Performer = RFA with the positive map (softmax form)",
    tolerance=0.5, units="relative excess of the LARA/Performer ratio over 1 (time) or 1.33 (memory)",
    cell=_lara_performer_cell,
    grid={"smoke": dict(N=[1024], S=[16]), "quick": dict(N=[2048], S=[16, 64]),
          "full": dict(N=[1024, 2048, 3072, 4096, 8192], S=[16, 64, 128])},
    replicates={"smoke": 5, "quick": 6, "full": 20},
    variants=("time", "memory"),
    variant_notes={"time": "time(LARA)/time(Performer) <= 1 (+50% tolerated)",
                   "memory": "peak(LARA)/peak(Performer) <= 1.33 (+50% tolerated)"},
    plot_x="N",
    notes="CPU measurements of rfkit's implementations (the paper: GPU, whole model); ratios in extra.",
)


# =============================================================================== Figure 1

# Budget: 64 heads per cell; at N = 196, D = 64 that is ~5 s of CPU per claim, so the quick tier runs N = 64 (an
# 8×8 grid) and the paper's lengths run at the full tier.
FIG1_GRID = {"smoke": dict(N=[49], generator=["smooth"]), "quick": dict(N=[64], generator=["smooth"]),
             "full": dict(N=[196, 576, 784], generator=["smooth", "gauss", "peaked"])}
#: Sample counts S = C of the trend claims (at least 5: they fit log-log slopes over them).
FIG1_SAMPLES = {"smoke": [4, 6, 8, 11, 16], "quick": [4, 8, 16, 32, 64],
                "full": [4, 9, 16, 25, 36, 49, 64, 100, 144, 196]}
#: Sample counts of the ordering claim (one paired test per count, Bonferroni).
FIG1_ORDER_SAMPLES = {"smoke": [4, 8, 16], "quick": [4, 16, 64], "full": FIG1_SAMPLES["full"]}
FIG1_HEADS = {"smoke": 64, "quick": 64, "full": 256}
FIG1_WHERE = ("synthetic heads (G-smooth; G-gauss and G-peaked at the full tier; D = 64, logit std 2, per-element "
              "MSE; the paper used "
              "softmax-pretrained ViT activations, which we do not have); LARA eq34, Eq 9 (β = 1, r' over queries), "
              "training mode, 1-D segments")


def _fig1(ctx: CellContext, mode: str = "train", sample_table=FIG1_SAMPLES) -> tuple[list[int], dict]:
    from rfkit.validation.reproductions.lara import fig1_heads  # the reproduction imports this package's inputs

    samples = per_tier(sample_table, ctx.tier)
    heads = fig1_heads(ctx.params["N"], samples, ctx.rng, heads=per_tier(FIG1_HEADS, ctx.tier), d=64,
                       generator=ctx.params["generator"], logit_std=2.0, mode=mode)
    return samples, heads


def _ordering_cell(ctx: CellContext) -> Evidence:
    samples, heads = _fig1(ctx, sample_table=FIG1_ORDER_SAMPLES)
    low, high = ("RA", "LARA") if ctx.variant == "ra_below_lara" else ("LARA", "RFA")
    parts = []
    for j in range(len(samples)):
        a = heads[low] if low == "RA" else heads[low][:, j]
        b = heads[high][:, j]
        parts.append(mean_test(b - a, 0.0, alternative="greater", scale=float(np.mean(b)),
                               **ctx.sub_test(len(samples))))
    return combine(parts, extra={k: np.asarray(v).mean(axis=0).tolist() for k, v in heads.items()})


MSE_ORDERING = Claim(
    id="lara.fig1.mse_ordering", paper="lara", source="§5.1; Figure 1; H.1",
    statement="At every number of samples, RA with a single sample has the lowest MSE, and LARA much lower MSE than "
              "RFA (Performer): MSE(RA, S = 1) < MSE(LARA, C) < MSE(RFA, S = C).",
    kind="reproduction", hypotheses=FIG1_WHERE,
    tolerance=0.05, units="relative excess of the lower-claimed MSE over the higher one (paired over heads)",
    cell=_ordering_cell, grid=FIG1_GRID,
    variants=("ra_below_lara", "lara_below_rfa"),
    variant_notes={"ra_below_lara": "MSE(RA, S = 1) < MSE(LARA, C)",
                   "lara_below_rfa": "MSE(LARA, C) < MSE(RFA, S = C)"},
    plot_x="N",
    notes="Paired differences over heads (same Q, K, V for all estimators); one test per sample count, Bonferroni. "
          "LARA's per-head MSE is heavy-tailed on these synthetic heads (median about 0.2, but single heads reach "
          "10 to 1000 times that and carry most of the across-head variance), so a mean over heads is flagged "
          "unless a tail bound on LARA's per-head MSE (theory) or a bounded reading of the figure decides it.",
)


def _slope_over_samples(samples, values: np.ndarray, claimed: float, ctx: CellContext, alternative: str,
                        tolerance: float) -> Evidence:
    mse = values.mean(axis=0)
    se = values.std(axis=0, ddof=1) / math.sqrt(values.shape[0])
    return slope_test(np.array(samples), mse, se, claimed, alternative=alternative,
                      **dict(ctx.test, tolerance=tolerance), extra=dict(samples=list(samples), mse=mse.tolist()))


def _plateau_cell(ctx: CellContext) -> Evidence:
    samples, heads = _fig1(ctx)
    return _slope_over_samples(samples, heads["RFA"], 0.0, ctx, "greater", ctx.tolerance)


RFA_PLATEAU = Claim(
    id="lara.fig1.rfa_plateau", paper="lara", source="§5.1; Figure 1",
    statement="RFA (Performer) plateaus early at a large approximation error and does not improve even with more "
              "samples.",
    kind="reproduction", hypotheses=FIG1_WHERE + "; 'plateau' read as a log-log slope of MSE in S of about 0",
    tolerance=0.25, units="log-log slope of MSE_RFA below 0 (a decay faster than S^-0.25 violates)",
    cell=_plateau_cell, grid=FIG1_GRID, plot_x="N",
)

#: "Keeps decreasing": a log-log slope of at most -TREND, with TREND_TOLERANCE tolerated.
TREND, TREND_TOLERANCE = 0.1, 0.05


def _decreasing_cell(ctx: CellContext) -> Evidence:
    samples, heads = _fig1(ctx, mode=ctx.variant)
    return _slope_over_samples(samples, heads["LARA"], -TREND, ctx, "less", ctx.tolerance)


LARA_DECREASING = Claim(
    id="lara.fig1.lara_decreasing", paper="lara", source="§5.1; Figure 1",
    statement="LARA's MSE keeps decreasing as the number of samples increases.",
    kind="reproduction", hypotheses=FIG1_WHERE + "; 'decreasing' read as a log-log slope of MSE in C <= -0.1",
    tolerance=TREND_TOLERANCE, units="log-log slope of MSE_LARA above -0.1",
    cell=_decreasing_cell, grid=FIG1_GRID,
    variants=("train", "eval"),
    variant_notes={"train": "ω_c ~ q_c", "eval": "ω_c = μ_c (G.3.3)"}, plot_x="N",
    notes="The slope is fitted to the mean MSE over heads at each C. LARA's per-head MSE is heavy-tailed here (a "
          "single head can carry over 90% of the across-head variance at some C), so the mean's standard error, "
          "and with it the slope's radius, is large and unstable: 64 heads do not decide it, and more heads (full "
          "tier: 256) or a tail bound on LARA's per-head MSE from theory would.",
)
