"""Figure 4: the toy RMFA experiment (error trends, acceleration)."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np

from rfkit.estimators import softmax_attention
from rfkit.estimators.ppsbn import presbn
from rfkit.estimators.rmf import draw_rmf, rmfa
from rfkit.theory import cost
from rfkit.validation.model import CellContext, Claim, per_tier
from rfkit.validation.stats import (
    Evidence,
    combine,
    slope_test,
)
from rfkit.validation.timing import TIMING_FLOOR, interleaved_times, timing_ratio_test

from .common import _quiet, _readings
from .complexity import TREND, TREND_TOLERANCE

#: Lengths and D are swept on grids of at least 5 points (a fitted slope needs 5 sizes): lengths √2-spaced, D by
#: doublings.
FIG4_SETTINGS = {"smoke": dict(batch=1, heads=1, lengths=[64, 91, 128, 181, 256], log2_D=[1, 2, 3, 4, 5, 6, 7],
                               repeats=4),
                 "quick": dict(batch=1, heads=1, lengths=[128, 181, 256, 362, 512], log2_D=[1, 2, 3, 4, 5, 6, 7, 8],
                               repeats=12),
                 "full": dict(batch=16, heads=8, lengths=list(range(200, 4001, 200)), log2_D=list(range(1, 13)),
                              repeats=100)}


def _fig4_errors(ctx: CellContext, length: int, features: list[int]) -> np.ndarray:
    """``(repeats, len(features))`` NMSEs of RMFA_exp against softmax attention (toy protocol, no timing)."""
    from rfkit.validation.reproductions.macformer import fig4_trial

    settings = per_tier(FIG4_SETTINGS, ctx.tier)
    return np.array([fig4_trial(length, features, rng=ctx.rng, batch=settings["batch"], heads=settings["heads"],
                                time_calls=False)["nmse"] for _ in range(settings["repeats"])])


def _average(errors: np.ndarray, order: str) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the averaged error and its standard error, on the scale slope tests take (positive values).

    ``log_of_mean``: mean NMSE; ``mean_of_log``: ``exp`` of the mean log NMSE (delta-method errors)."""
    count = errors.shape[0]
    if order == "log_of_mean":
        return errors.mean(axis=0), errors.std(axis=0, ddof=1) / math.sqrt(count)
    logs = np.log(errors)
    centre = np.exp(logs.mean(axis=0))
    return centre, centre * logs.std(axis=0, ddof=1) / math.sqrt(count)


def _trend(x, values, errors, direction: str, ctx: CellContext, parts: int, extra: dict) -> Evidence:
    """``slope >= TREND`` (rising) or ``<= -TREND`` (falling) in log-log, within ``TREND_TOLERANCE``."""
    rising = direction == "rising"
    return slope_test(np.asarray(x, dtype=np.float64), values, errors, TREND if rising else -TREND,
                      alternative="greater" if rising else "less", **ctx.sub_test(parts), extra=extra)


FIG4A_D_READINGS = _readings(avg_order=["log_of_mean", "mean_of_log"], returns=["linear", "log"])


#: Fewest decrements the diminishing-returns slope is fitted on (a fitted slope needs 5 sizes).
MIN_SPANS = 5


def _spans(count: int) -> list[int]:
    """D-grid positions bounding equal spans (in doublings) over which decrements are measured: the longest equal
    span that still leaves :data:`MIN_SPANS` decrements (one doubling on the quick grid; fewer decrements only
    when the grid is too short)."""
    step = max(1, (count - 1) // MIN_SPANS)
    return list(range(0, count, step))


def _decrements(errors: np.ndarray, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """Decrease over consecutive spans of the D grid (paired over repeats), in NMSE (``linear``) or in log NMSE
    (``log``); spans of several doublings keep each decrement well above the Monte Carlo noise."""
    values = errors if scale == "linear" else np.log(errors)
    cut = values[:, _spans(values.shape[1])]
    steps = cut[:, :-1] - cut[:, 1:]
    return steps.mean(axis=0), steps.std(axis=0, ddof=1) / math.sqrt(errors.shape[0])


def _fig4a_d_cell(ctx: CellContext) -> Evidence:
    reading = FIG4A_D_READINGS[ctx.variant]
    features = [2**e for e in per_tier(FIG4_SETTINGS, ctx.tier)["log2_D"]]
    errors = _fig4_errors(ctx, ctx.params["length"], features)
    centre, se = _average(errors, reading["avg_order"])
    falls = _trend(features, centre, se, "falling", ctx, 2, dict(D=features, nmse=centre.tolist()))
    steps, step_se = _decrements(errors, reading["returns"])
    starts = [features[i] for i in _spans(len(features))[:-1]]
    diminishing = _trend(starts, steps, step_se, "falling", ctx, 2, dict(span_starts=starts,
                                                                          decrements=steps.tolist()))
    if (steps <= 0).any():  # a log-log slope needs positive decrements: say what would resolve them
        diminishing = replace(diminishing, flags=(
            f"slope undefined: {int((steps <= 0).sum())} of {steps.size} decrements over the D grid are not positive "
            f"(Monte Carlo noise of {errors.shape[0]} repeats); more repeats (the full tier) would decide",))
    return combine([falls, diminishing])


FIG4A_DECREASES = Claim(
    id="macformer.fig4a.error_decreases_with_d", paper="macformer", source="Evaluation of RMFA; Figure 4a",
    statement="At a fixed length, the error of RMFA_exp against softmax attention (log NMSE) falls quickly as D "
              "increases, with diminishing marginal returns (in agreement with Theorem 2).",
    kind="reproduction",
    hypotheses="the toy protocol (rfkit.validation.reproductions.macformer) at reduced size: pre-SBN (row norm, "
               "feature_batch statistics, ε = 1e-12), p = 2, N(0,1) data, global NMSE, D = 2^1..2^8",
    tolerance=TREND_TOLERANCE, units="log-log slope beyond the minimal trend ±0.1",
    cell=_fig4a_d_cell,
    grid={"smoke": dict(length=[128]), "quick": dict(length=[128, 512]), "full": dict(length=[200, 1000, 4000])},
    variants=tuple(FIG4A_D_READINGS),
    variant_notes={name: f"repeats averaged as {r['avg_order']}; diminishing returns in "
                         + ("NMSE (linear)" if r["returns"] == "linear" else "log NMSE")
                   for name, r in FIG4A_D_READINGS.items()},
    plot_x="length",
    notes="Two sub-tests per length (Bonferroni): log NMSE falls with log D (slope <= -0.1), and the decrease over "
          "consecutive equal spans of the D grid (one doubling at quick, at least 5 spans) shrinks (log-log slope of "
          "the decrements against the span's first D <= -0.1), in NMSE or in log NMSE. A pure power law NMSE ∝ 1/D "
          "has shrinking linear decrements but constant log decrements per doubling.",
)

FIG4A_LENGTH_READINGS = ("log_of_mean", "mean_of_log")


def _fig4a_length_cell(ctx: CellContext) -> Evidence:
    lengths = per_tier(FIG4_SETTINGS, ctx.tier)["lengths"]
    errors = np.stack([_fig4_errors(ctx, n, [ctx.params["D"]])[:, 0] for n in lengths], axis=1)
    centre, se = _average(errors, ctx.variant)
    return _trend(lengths, centre, se, "rising", ctx, 1, dict(lengths=lengths, nmse=centre.tolist()))


FIG4A_INCREASES = Claim(
    id="macformer.fig4a.error_increases_with_length", paper="macformer", source="Evaluation of RMFA; Figure 4a",
    statement="At a fixed D, the error (log NMSE) of RMFA_exp grows as the sequence length grows.",
    kind="reproduction", hypotheses="the toy protocol at reduced size (see fig4a.error_decreases_with_d)",
    tolerance=TREND_TOLERANCE, units="log-log slope beyond the minimal trend +0.1",
    cell=_fig4a_length_cell,
    grid={"smoke": dict(D=[16]), "quick": dict(D=[16, 128]), "full": dict(D=[2, 16, 128, 1024])},
    variants=FIG4A_LENGTH_READINGS,
    variant_notes={"log_of_mean": "log of the mean NMSE over repeats", "mean_of_log": "mean of log NMSE"},
    plot_x="D",
)


def _pair_calls(ctx: CellContext, n: int, num_features: int, sampling: str):
    """Calls of softmax attention and RMFA_exp on the same pre-SBN inputs."""
    settings = per_tier(FIG4_SETTINGS, ctx.tier)
    shape = (settings["batch"], 1, n, 64)
    pre = presbn(ctx.rng.standard_normal(shape), ctx.rng.standard_normal(shape), eps=1e-12)
    v = ctx.rng.standard_normal(shape)
    if sampling == "excluded":
        draw = draw_rmf(num_features, 64, rng=ctx.rng)
        fast = functools.partial(_quiet, rmfa, pre.q, pre.k, v, draw=draw)
    else:
        fast = functools.partial(_quiet, rmfa, pre.q, pre.k, v, num_features=num_features, rng=ctx.rng)
    return (lambda: softmax_attention(pre.q, pre.k, v)), fast


def _faster_cell(ctx: CellContext) -> Evidence:
    """Paired repeated CPU times (a timing is a random variable): ``log(t_RMFA/t_softmax) <= 0`` up to the tolerance
    and the machine margin (rfkit.validation.timing.timing_ratio_test)."""
    n, num_features = ctx.params["length"], ctx.params["D"]
    softmax_call, rmfa_call = _pair_calls(ctx, n, num_features, ctx.variant)
    predicted = cost.softmax_rmfa_flop_ratio(n, 64, 64, num_features)
    return timing_ratio_test(rmfa_call, softmax_call, 1.0, repeats=ctx.replicates, alpha=ctx.alpha,
                             tolerance=ctx.tolerance, extra=dict(model_ratio=predicted))


FIG4B_FASTER = Claim(
    id="macformer.fig4b.rmfa_faster_all_cases", paper="macformer", source="Evaluation of RMFA; Figure 4b",
    statement="RMFA_exp is faster than softmax attention in every (length, D) cell of the experiment: the "
              "acceleration ratio is > 1 everywhere.",
    kind="reproduction",
    hypotheses="the toy protocol at reduced size (one head, d = 64, pre-SBN untimed); the paper states neither the "
               "device nor the range of D (D = 2^1..2^12 by default, which includes D >= n); numpy CPU, naive "
               "softmax",
    tolerance=0.05 * math.log(10), units="log t_RMFA/t_softmax above 0 (natural log; beyond the machine margin)",
    cell=_faster_cell,
    grid={"smoke": dict(length=[128], D=[8, 512]), "quick": dict(length=[128, 512], D=[8, 128, 512]),
          "full": dict(length=list(range(200, 4001, 200)), D=[2**e for e in range(1, 13)])},
    replicates={"smoke": 5, "quick": 6, "full": 20},
    variants=("included", "excluded"),
    variant_notes={"included": "RMF sampling timed", "excluded": "RMF draw made outside the timer"},
    plot_x="D",
    notes="Each cell compares paired repeated CPU times (single-threaded BLAS; log-ratio t test with the machine "
          "margin log 1.25 of rfkit.validation.timing): only a slowdown beyond 25% (plus the tolerance, 0.05 in "
          "log10) refutes. The flop-model ratio "
          "(rfkit.theory.cost.softmax_rmfa_flop_ratio) is in each cell's extra. torch GPU is not run here.",
)

#: Sweeps of the acceleration trends: at least 5 sizes (a fitted slope), D by doublings, n √2-spaced, with the same
#: largest sizes as before.
TREND_SIZES = {"D": {"smoke": [16, 32, 64, 128, 256], "quick": [8, 16, 32, 64, 128, 256, 512],
                     "full": [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]},
               "n": {"smoke": [256, 362, 512, 724, 1024], "quick": [256, 362, 512, 724, 1024, 1448, 2048],
                     "full": [200, 400, 800, 1200, 2000, 2800, 4000]}}
TREND_FIXED = dict(n=512, D=32)


def _trends_cell(ctx: CellContext) -> Evidence:
    """Log-log slope of the acceleration ratio t_softmax/t_RMFA against the size, fitted on every repeat's paired
    ratio (CPU times of the calling thread, calls round-robin; as rfkit.validation.timing.timing_slope_test does
    for one call: each log ratio has the resolution of two timings, and the fit's scatter inflates it)."""
    axis = ctx.params["against"]
    sizes = per_tier(TREND_SIZES[axis], ctx.tier)
    calls = []
    for size in sizes:
        shape = dict(TREND_FIXED, **{axis: size})
        calls.extend(_pair_calls(ctx, shape["n"], shape["D"], "included"))
    times = interleaved_times(calls, repeats=max(ctx.replicates, 2))
    times = np.maximum(times, TIMING_FLOOR * np.median(times, axis=0))
    ratios = times[:, 0::2] / times[:, 1::2]
    x = np.broadcast_to(np.asarray(sizes, dtype=np.float64), ratios.shape).ravel()
    model = [cost.softmax_rmfa_flop_ratio(dict(TREND_FIXED, **{axis: s})["n"], 64, 64,
                                          dict(TREND_FIXED, **{axis: s})["D"]) for s in sizes]
    extra = dict(sizes=sizes, ratios=np.median(ratios, axis=0).tolist(), model_ratios=model,
                 repeats=int(ratios.shape[0]), measured="CPU time of the calling thread, single-threaded BLAS")
    return _trend(x, ratios.ravel(), math.sqrt(2) * TIMING_FLOOR * ratios.ravel(),
                  "falling" if axis == "D" else "rising", ctx, 1, extra)


FIG4B_TRENDS = Claim(
    id="macformer.fig4b.acceleration_trends", paper="macformer", source="Evaluation of RMFA; Figure 4b",
    statement="At a fixed length the acceleration ratio falls as D grows; at a fixed D it rises markedly as the "
              "length grows.",
    kind="reproduction",
    hypotheses="the toy protocol at reduced size (one head, d = 64); sweeps at n = 512 (against D) and D = 32 "
               "(against n); numpy CPU",
    tolerance=TREND_TOLERANCE, units="log-log slope beyond the minimal trend ±0.1",
    cell=_trends_cell, grid={"smoke": dict(against=["D"]), "quick": dict(against=["D", "n"])},
    replicates={"smoke": 3, "quick": 3, "full": 20}, plot_x="against",
    notes="Slopes of the ratio of paired CPU times, fitted on every repeat (>= 5 sizes); the flop model's ratios "
          "(rfkit.theory.cost) are in extra.",
)


