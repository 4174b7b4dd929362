"""Figure 4: the toy RMFA experiment (error trends, acceleration)."""

from __future__ import annotations

import functools
import math

import numpy as np

from rfkit.estimators import softmax_attention
from rfkit.estimators.ppsbn import presbn
from rfkit.estimators.rmf import draw_rmf, rmfa
from rfkit.theory import cost
from rfkit.validation.model import CellContext, Claim, per_tier
from rfkit.validation.search import margin_evidence
from rfkit.validation.stats import (
    Evidence,
    combine,
    slope_test,
)
from rfkit.validation.timing import interleaved_best_times

from .common import _quiet, _readings
from .complexity import TREND, TREND_TOLERANCE

FIG4_SETTINGS = {"smoke": dict(batch=1, heads=1, lengths=[64, 128, 256], log2_D=[1, 3, 5, 7], repeats=4),
                 "quick": dict(batch=1, heads=1, lengths=[128, 256, 512], log2_D=[1, 2, 3, 4, 5, 6, 7, 8],
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


def _spans(count: int) -> list[int]:
    """D-grid positions bounding the three spans over which decrements are measured (start, thirds, end)."""
    return sorted({0, count // 3, (2 * count) // 3, count - 1})


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
          "consecutive thirds of the D grid shrinks (log-log slope of the decrements against the span's first D "
          "<= -0.1), in NMSE or in log NMSE. A pure power law NMSE ∝ 1/D has shrinking linear decrements but "
          "constant log decrements per doubling.",
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


def _timed_pair(ctx: CellContext, n: int, num_features: int, sampling: str):
    """Best-of-k CPU times of softmax attention and RMFA_exp on the same pre-SBN inputs, with resolutions."""
    settings = per_tier(FIG4_SETTINGS, ctx.tier)
    shape = (settings["batch"], 1, n, 64)
    pre = presbn(ctx.rng.standard_normal(shape), ctx.rng.standard_normal(shape), eps=1e-12)
    v = ctx.rng.standard_normal(shape)
    if sampling == "excluded":
        draw = draw_rmf(num_features, 64, rng=ctx.rng)
        fast = functools.partial(_quiet, rmfa, pre.q, pre.k, v, draw=draw)
    else:
        fast = functools.partial(_quiet, rmfa, pre.q, pre.k, v, num_features=num_features, rng=ctx.rng)
    best, resolution = interleaved_best_times([lambda: softmax_attention(pre.q, pre.k, v), fast],
                                              repeats=ctx.replicates)
    return best, resolution


def _log_ratio(best: np.ndarray, resolution: np.ndarray) -> tuple[float, float]:
    """``log10(t_softmax/t_RMFA)`` and its resolution (relative timing resolutions added in quadrature)."""
    rel = resolution / best
    return float(np.log10(best[0] / best[1])), float(math.hypot(rel[0], rel[1]) / math.log(10))


def _faster_cell(ctx: CellContext) -> Evidence:
    n, num_features = ctx.params["length"], ctx.params["D"]
    ratio, resolution = _log_ratio(*_timed_pair(ctx, n, num_features, ctx.variant))
    predicted = cost.softmax_rmfa_flop_ratio(n, 64, 64, num_features)
    return margin_evidence(ratio + 3 * resolution, tolerance=ctx.tolerance,
                           extra=dict(log10_ratio=ratio, resolution=resolution, model_ratio=predicted))


FIG4B_FASTER = Claim(
    id="macformer.fig4b.rmfa_faster_all_cases", paper="macformer", source="Evaluation of RMFA; Figure 4b",
    statement="RMFA_exp is faster than softmax attention in every (length, D) cell of the experiment: the "
              "acceleration ratio is > 1 everywhere.",
    kind="reproduction",
    hypotheses="the toy protocol at reduced size (one head, d = 64, pre-SBN untimed); the paper states neither the "
               "device nor the range of D (D = 2^1..2^12 by default, which includes D >= n); numpy CPU, naive "
               "softmax",
    tolerance=0.05, units="log10 acceleration ratio below 0 (beyond 3 timing resolutions)",
    cell=_faster_cell,
    grid={"smoke": dict(length=[128], D=[8, 512]), "quick": dict(length=[128, 512], D=[8, 128, 512]),
          "full": dict(n=list(range(200, 4001, 200)), D=[2**e for e in range(1, 13)])},
    replicates={"smoke": 3, "quick": 5, "full": 20},
    variants=("included", "excluded"),
    variant_notes={"included": "RMF sampling timed", "excluded": "RMF draw made outside the timer"},
    plot_x="D",
    notes="Each cell compares best-of-k CPU times (single-threaded BLAS); the margin is log10 ratio plus three "
          "timing resolutions, so only a slowdown clearly beyond 12% refutes. The flop-model ratio "
          "(rfkit.theory.cost.softmax_rmfa_flop_ratio) is in each cell's extra. torch GPU is not run here.",
)

TREND_SIZES = {"D": {"smoke": [16, 64, 256], "quick": [8, 32, 128, 512], "full": [2, 16, 128, 1024, 4096]},
               "n": {"smoke": [256, 512, 1024], "quick": [256, 512, 1024, 2048], "full": [200, 800, 2000, 4000]}}
TREND_FIXED = dict(n=512, D=32)


def _trends_cell(ctx: CellContext) -> Evidence:
    axis = ctx.params["against"]
    sizes = per_tier(TREND_SIZES[axis], ctx.tier)
    ratios, errors = [], []
    for size in sizes:
        shape = dict(TREND_FIXED, **{axis: size})
        ratio, resolution = _log_ratio(*_timed_pair(ctx, shape["n"], shape["D"], "included"))
        ratios.append(10.0**ratio)
        errors.append(10.0**ratio * resolution * math.log(10))
    model = [cost.softmax_rmfa_flop_ratio(dict(TREND_FIXED, **{axis: s})["n"], 64, 64,
                                          dict(TREND_FIXED, **{axis: s})["D"]) for s in sizes]
    return _trend(sizes, np.array(ratios), np.array(errors), "falling" if axis == "D" else "rising", ctx, 1,
                  dict(sizes=sizes, ratios=ratios, model_ratios=model))


FIG4B_TRENDS = Claim(
    id="macformer.fig4b.acceleration_trends", paper="macformer", source="Evaluation of RMFA; Figure 4b",
    statement="At a fixed length the acceleration ratio falls as D grows; at a fixed D it rises markedly as the "
              "length grows.",
    kind="reproduction",
    hypotheses="the toy protocol at reduced size (one head, d = 64); sweeps at n = 512 (against D) and D = 32 "
               "(against n); numpy CPU",
    tolerance=TREND_TOLERANCE, units="log-log slope beyond the minimal trend ±0.1",
    cell=_trends_cell, grid={"smoke": dict(against=["D"]), "quick": dict(against=["D", "n"])},
    replicates={"smoke": 3, "quick": 5, "full": 20}, plot_x="against",
    notes="Slopes of the ratio of best-of-k times; the flop model's ratios (rfkit.theory.cost) are in extra.",
)


