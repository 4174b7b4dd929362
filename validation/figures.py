"""One figure per claim *kind* that shows why the claim got its verdict (PNG and SVG).

Every figure plots what the cells' :class:`~rfkit.validation.stats.Evidence` holds — nothing is recomputed:

* ``expectation``, ``moment``, ``reproduction``: the deviation ``estimate - prediction`` of every cell (in the
  claim's effect units, where the tolerance lives) with its confidence radius (``Evidence.resolution``: the
  half-width of the cell's confidence sequence/interval at the cell's level), against the tolerance band
  ``|deviation| <= tolerance`` (shaded); one panel per swept axis with more than one value.
* ``identity``: the error ``Evidence.effect`` (condition-scaled where the claim scales it) on a log axis
  against the tolerance line; the witness is marked.
* ``inequality``, ``optimality``: the signed margin ``estimate - prediction`` (negative: the inequality fails)
  with the violation region ``margin < -tolerance`` shaded; the witness is marked.
* ``tail-bound``: binomial cells — the exceedance frequency with its Clopper–Pearson interval
  (``extra["ci_low"], extra["ci_high"]``) against the bound (``prediction``) and ``bound + tolerance``, log
  axis; cells that report a closed-form margin are drawn as an inequality.
* ``rate``: log-log points of the quantity the slope was fitted on (when the cell's ``extra`` carries them)
  with the fitted slope (``estimate``, or ``extra["slope"]`` of a count judged as a margin) and the claimed
  slope through the points' geometric centre; beside it, every slope cell's slope with its confidence radius
  against the claimed slope ± tolerance; cells judged without a fitted slope (a closed-form route) and search
  restarts are drawn beside those as deviations (all of them, when no cell fitted a slope).
* ``complexity``: time or memory against size (``extra["sizes"]`` with ``seconds``/``values``/``ratios``, or
  the recorded flop counts) on log-log axes with the claimed order as a reference line; the slope panel as for
  a rate.

Deviations and margins that span decades get a symmetric log axis; a value a million times beyond the largest
violation (a margin of 1e304) is drawn as an "off scale" triangle at a cap. Cells are coloured by their cell
verdict (:func:`rfkit.validation.results.cell_verdict`); adversarial search
restarts get a panel of their own. The title is the claim id and its verdict; a caption line says what is
drawn. :func:`figure_spec` extracts plain picklable data (:class:`FigureSpec`) so figures can be drawn in
worker processes; :func:`render_figure` builds the matplotlib figure, :func:`draw_figure` writes it (PNG and
SVG); :func:`claim_figure` does both.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rfkit.validation.canvas import canvas_figure
from rfkit.validation.results import ClaimResult, cell_verdict

__all__ = ["FigureSpec", "figure_spec", "render_figure", "draw_figure", "draw_figures", "claim_figure", "VERDICT_ORDER"]

#: Cell verdicts in legend order (:func:`rfkit.validation.results.cell_verdict`).
VERDICT_ORDER = ("ok", "violation", "flagged", "undecided", "underpowered", "error")
_PALETTE_INDEX = {"ok": 2, "violation": 3, "flagged": 1, "undecided": 0, "underpowered": 4, "error": 7}
_MAX_PANELS = 4
_DPI = 100


@dataclass(frozen=True)
class FigureSpec:
    """Plain data for one claim figure (picklable, so figures can be drawn in worker processes).

    ``frame`` has one row per grid cell (``_source == "grid"``) or search restart (``_source == "search"``):
    the cell's axis values, ``variant``, ``restart``, the evidence fields ``estimate``, ``prediction``,
    ``stderr``, ``effect``, ``upper``, ``resolution``, ``method``, ``_ci_low``/``_ci_high`` (binomial cells),
    ``_slope``/``_claimed`` (slope cells), ``_curve`` (``(x, y, y_se)`` lists a slope was fitted on, or
    None), ``cell_verdict`` and ``_witness`` (the cell the verdict names). Columns that are not result
    variables (:data:`rfkit.validation.model.RESULT_VARIABLES`, which no grid axis may be named) start with
    an underscore, so a grid axis named ``source`` or ``slope`` keeps its values."""

    claim_id: str
    kind: str
    verdict: str
    units: str
    tolerance: float
    axes: tuple[str, ...]
    plot_x: str | None
    frame: object  # pandas DataFrame
    notes: tuple[str, ...] = field(default_factory=tuple)


def _number_list(v) -> list[float] | None:
    """``v`` as a list of finite numbers, or None."""
    if not isinstance(v, (list, tuple, np.ndarray)) or len(v) < 2:
        return None
    try:
        a = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return a.tolist() if a.ndim == 1 and np.isfinite(a).all() else None


def _curve(params: dict, extra: dict) -> tuple[list, list, list | None] | None:
    """The ``(x, y, y_se)`` points a slope or complexity cell was measured on, when its evidence carries them:
    ``extra["sizes"]`` with ``seconds``/``values``/``ratios``; the recorded flop counts over the swept axis; or
    a list-valued grid axis that ``extra`` repeats with a positive list beside it (``S`` with ``bias`` and
    ``bias_se``)."""
    sizes = _number_list(extra.get("sizes"))
    if sizes is not None:
        for key in ("seconds", "values", "ratios"):
            y = _number_list(extra.get(key))
            if y is not None and len(y) == len(sizes):
                return sizes, y, None
    swept = extra.get("swept")
    x = _number_list(params.get(swept)) if isinstance(swept, str) else None
    y = _number_list(extra.get("recorded_flops"))
    if x is not None and y is not None and len(x) == len(y):
        return x, y, None
    for name, value in params.items():
        x = _number_list(value)
        if x is None or _number_list(extra.get(name)) is None:
            continue
        for key, v in extra.items():
            y = _number_list(v)
            if key == name or key.endswith("_se") or y is None or len(y) != len(x) or min(y) <= 0:
                continue
            se = _number_list(extra.get(key + "_se"))
            return x, y, se if se is not None and len(se) == len(x) else None
    return None


def _fitted(ev) -> bool:
    """Whether ``ev`` is a log-log slope test (:func:`rfkit.validation.stats.slope_test`)."""
    return ev.method.startswith("log-log")


def _slope(ev) -> float:
    """A slope cell's fitted slope: its estimate (a slope test) or ``extra["slope"]`` (a count slope judged as
    a margin); nan for other cells."""
    return float(ev.extra.get("slope", ev.estimate if _fitted(ev) else math.nan))


def _claimed_slope(ev) -> float:
    """The slope a cell's claim states: ``extra["claimed_slope"]`` or a slope test's prediction."""
    return float(ev.extra.get("claimed_slope", ev.prediction if _fitted(ev) else math.nan))


def figure_spec(result: ClaimResult) -> FigureSpec | None:
    """The data of ``result``'s figure, or None when no cell has a finite estimate."""
    import pandas as pd

    witness = result.witness or {}
    rows = []
    for i, o in enumerate(result.outcomes):
        ev = o.evidence
        if ev is None:
            continue
        params = {k: v if isinstance(v, Hashable) else str(v) for k, v in o.spec.params.items()}
        is_witness = bool(witness) and witness.get("variant") == o.spec.variant and (
            witness.get("kind") == o.spec.kind and witness.get("restart") == o.spec.restart
            and (o.spec.kind == "search" or witness.get("params") == o.spec.params))
        curve = _curve(o.spec.params, ev.extra) if result.claim.kind in ("rate", "complexity") else None
        # evidence columns carry reserved result names (never grid axes) or a leading underscore
        row = dict(params if o.spec.kind == "grid" else {}, _source=o.spec.kind, variant=o.spec.variant,
                   restart=o.spec.restart, estimate=ev.estimate, prediction=ev.prediction, stderr=ev.stderr,
                   effect=ev.effect, upper=ev.upper, resolution=ev.resolution, method=ev.method,
                   _ci_low=ev.extra.get("ci_low", math.nan), _ci_high=ev.extra.get("ci_high", math.nan),
                   _slope=_slope(ev), _claimed=_claimed_slope(ev), _curve=curve,
                   cell_verdict=cell_verdict(result, i), _witness=is_witness)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty or not np.isfinite(frame["estimate"].astype(float)).any():
        return None
    grid = frame[frame["_source"] == "grid"]
    axes = tuple(a for a in result.claim.axes(result.tier) if a in grid and grid[a].map(str).nunique() > 1)
    return FigureSpec(result.claim.id, result.claim.kind, result.verdict, result.claim.units or "effect units",
                      float(result.claim.tolerance), axes, result.claim.plot_x, frame)


# --------------------------------------------------------------------------------------------- drawing helpers


def _colours():
    import seaborn as sns

    palette = sns.color_palette("colorblind", 10)
    return {v: palette[k] for v, k in _PALETTE_INDEX.items()}, palette


def _label(v) -> str:
    """A grid value as a short tick label: floats to 3 significant digits, sequences element-wise."""
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(map(_label, v)) + ")"
    if isinstance(v, (float, np.floating)):
        return f"{v:.3g}"
    return str(v)


def _cut(text: str, width: int = 24) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _categorical_x(ax, values) -> np.ndarray:
    """Positions 0..k-1 of ``values`` (in first-seen order) on ``ax`` with readable tick labels."""
    values = [_label(v) for v in values]
    labels = list(dict.fromkeys(values))
    pos = np.array([labels.index(v) for v in values], dtype=float)
    step = max(1, math.ceil(len(labels) / 8))  # at most 8 labels
    shown = range(0, len(labels), step)
    ax.set_xticks(list(shown))
    long = max((len(labels[i]) for i in shown), default=0) > 6
    ax.set_xticklabels([_cut(labels[i]) for i in shown],
                       rotation=30 if long else 0, ha="right" if long else "center", fontsize=7)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    return pos


def _jitter(df) -> np.ndarray:
    """Small horizontal offsets separating the cells that share an x position."""
    n = len(df)
    return (np.arange(n) % 7 - 3) * 0.04 if n > 1 else np.zeros(n)


def _scatter_cells(ax, x, y, err, verdicts, witness, colours):
    """Points ``(x, y)`` with error bars ``err`` coloured by cell verdict; the witness starred."""
    for v in VERDICT_ORDER:
        sel = verdicts == v
        if sel.any():
            ax.errorbar(x[sel], y[sel], yerr=None if err is None else err[..., sel], fmt="o", ms=3.5, lw=0.8,
                        color=colours[v], label=f"cell: {v}", zorder=3)
    if witness.any():
        ax.plot(x[witness], y[witness], marker="*", ms=13, ls="none", mfc="none", mec="black", mew=1.0,
                label="witness", zorder=4)


def _panel_axes(spec: FigureSpec) -> list[str | None]:
    """The swept axes that get a panel: ``plot_x`` first, then the others; an axis that splits the cells exactly
    as an earlier one does (``route`` beside the ``angle`` only its exact route sweeps) adds nothing and is
    dropped; at most :data:`_MAX_PANELS`."""
    axes = list(spec.axes)
    if spec.plot_x in axes:
        axes.remove(spec.plot_x)
        axes.insert(0, spec.plot_x)
    grid = spec.frame[spec.frame["_source"] == "grid"]
    kept, partitions = [], set()
    for a in axes:
        codes = tuple(grid[a].map(_label).factorize()[0])
        if codes not in partitions:
            partitions.add(codes)
            kept.append(a)
    return kept[:_MAX_PANELS] or [None]


def _units(spec: FigureSpec) -> str:
    """The claim's effect units, short enough for an axis label (the caption and report give them in full)."""
    return "(" + textwrap.shorten(spec.units, 40, placeholder="…") + ")"


def _restart(r) -> str:
    """A search restart's tick label."""
    return f"restart {int(r)}" if isinstance(r, (int, float, np.integer, np.floating)) and r == r else "search"


def _finite_err(a) -> np.ndarray:
    """Error-bar lengths with non-finite radii (an undecided cell) drawn as none."""
    a = np.asarray(a, dtype=float)
    return np.where(np.isfinite(a), a, 0.0)


def _deviation_panels(fig, spec: FigureSpec, grid, search, quantity: str):
    """Panels of one per-cell quantity against each swept axis (plus the search restarts).

    ``quantity``: ``deviation`` (estimate - prediction ± resolution, band ±tol), ``margin`` (signed margin,
    violation region below -tol) or ``error`` (effect on a log axis, tolerance line)."""
    colours, _ = _colours()
    tol = spec.tolerance
    panels = _panel_axes(spec) if not grid.empty else []
    n = len(panels) + (not search.empty)
    axs = fig.subplots(1, max(n, 1), squeeze=False, sharey=True)[0]
    sign = _margin_sign(grid, search) if quantity == "margin" else 1.0

    def values(df):
        dev = (df["estimate"].astype(float) - df["prediction"].astype(float)).to_numpy()
        if quantity == "error":
            return df["effect"].astype(float).to_numpy(), None
        return sign * dev, _finite_err(df["resolution"])

    all_y = np.concatenate([values(d)[0] for d in (grid, search) if not d.empty])
    finite = all_y[np.isfinite(all_y)]
    bottom = min(1.5 * finite.min(), -2 * tol) if finite.size else -2 * tol  # of the shaded violation region
    # a margin of 1e300 beside violations of order 1 would flatten them: far-off values are drawn at a cap
    cap = None
    if quantity != "error" and finite.size and finite.max() > 1e6 * max(-min(finite.min(), 0.0), tol):
        cap = 1e3 * max(-min(finite.min(), 0.0), tol)
    floor = None
    if quantity == "error":
        positive = all_y[np.isfinite(all_y) & (all_y > 0)]
        floor = min(positive.min() if positive.size else tol, tol) / 10
    for ax, axis in zip(axs, [*panels, *(["search"] if not search.empty else [])], strict=False):
        df = search if axis == "search" else grid
        y, err = values(df)
        if floor is not None:
            y = np.where(np.isfinite(y), np.maximum(y, floor), np.nan)
        if axis == "search":
            x = _categorical_x(ax, [_restart(r) for r in df["restart"]]) + _jitter(df)
            ax.set_xlabel("adversarial search", fontsize=8)
        elif axis is None:
            x = _jitter(df)
            ax.set_xticks([0])
            ax.set_xticklabels(["all cells"], fontsize=7)
            ax.set_xlim(-0.5, 0.5)
        else:
            x = _categorical_x(ax, df[axis].tolist()) + _jitter(df)
            ax.set_xlabel(axis, fontsize=8)
        if quantity == "deviation":
            ax.axhspan(-tol, tol, color="0.85", zorder=0, label=f"tolerance band ±{tol:g}")
            ax.axhline(0.0, color="0.3", lw=0.8, ls="--", label="prediction")
        elif quantity == "margin":
            ax.axhspan(bottom, -tol, color=colours["violation"], alpha=0.15, zorder=0,
                       label=f"violation: margin < -{tol:g}")
            ax.axhline(0.0, color="0.3", lw=0.8, ls="--", label="margin 0")
        else:
            ax.axhline(tol, color=colours["violation"], lw=1.0, ls="--", label=f"tolerance {tol:g}")
            ax.set_yscale("log")
        if cap is not None and (y > cap).any():
            off = y > cap
            ax.plot(x[off], np.full(off.sum(), cap), marker="^", ms=7, ls="none", color="0.3",
                    label=f"off scale (> {cap:.3g})", zorder=5)
            y, err = np.where(off, cap, y), None if err is None else np.where(off, 0.0, err)
        _scatter_cells(ax, x, y, err, df["cell_verdict"].to_numpy(), df["_witness"].to_numpy(bool), colours)
        ax.tick_params(which="both", labelsize=7)
        ax.grid(alpha=0.3, lw=0.5)
    if quantity in ("deviation", "margin") and np.isfinite(all_y).any():
        span = np.nanmax(np.abs(np.minimum(finite, cap if cap is not None else np.inf)))
        if span > 1e3 * tol:  # deviations span decades: a symmetric log axis keeps the band visible
            lo, hi = min(float(finite.min()), bottom, -tol), max(float(finite.max()) if cap is None else cap, tol)
            pad = lambda v: v * 3 if abs(v) < 1e300 else v  # noqa: E731 (explicit limits: autoscaling overflows)
            for ax in axs:
                ax.set_ylim(pad(lo), pad(hi))  # first: the scale change then keeps them
                ax.set_yscale("symlog", linthresh=tol)
    ylabel = {"deviation": "estimate − prediction ± radius", "error": "error (effect)",
              "margin": f"margin{' (sign flipped)' if sign < 0 else ''} ± radius"}[quantity]
    axs[0].set_ylabel(f"{ylabel}\n{_units(spec)}", fontsize=8)
    return axs, floor


def _margin_sign(*frames) -> float:
    """+1 when the violated cells lie below their prediction (a margin: negative fails), -1 when most lie above
    (a quantity claimed to stay at most its prediction), so that violations always plot below zero."""
    up = down = 0
    for df in frames:
        dev = df["estimate"].astype(float) - df["prediction"].astype(float)
        violated = df["effect"].astype(float) > 0
        up, down = up + int((violated & (dev > 0)).sum()), down + int((violated & (dev < 0)).sum())
    return -1.0 if up > down else 1.0


def _slope_panel(ax, spec: FigureSpec, df, colours):
    """Every slope cell's estimate ± radius against its claimed slope ± tolerance."""
    label_axes = [a for a in spec.axes if a in df] + (["variant"] if df["variant"].nunique() > 1 else [])
    labels = [", ".join(_label(r[a]) for a in label_axes) or "cell" for _, r in df.iterrows()]
    x = _categorical_x(ax, labels)
    ax.set_xlabel(", ".join(label_axes), fontsize=8)
    claimed = df["_claimed"].astype(float).to_numpy()
    for xi, c in zip(x, claimed, strict=True):
        ax.fill_between([xi - 0.35, xi + 0.35], c - spec.tolerance, c + spec.tolerance, color="0.85", zorder=0,
                        lw=0)
        ax.plot([xi - 0.35, xi + 0.35], [c, c], color="0.3", ls="--", lw=0.8)
    ax.fill_between([], [], [], color="0.85", label=f"claimed slope ± {spec.tolerance:g}")
    _scatter_cells(ax, x, df["_slope"].astype(float).to_numpy(), _finite_err(df["resolution"]),
                   df["cell_verdict"].to_numpy(), df["_witness"].to_numpy(bool), colours)
    ax.set_ylabel(f"log-log slope ± radius\n{_units(spec)}", fontsize=8)
    ax.tick_params(which="both", labelsize=7)
    ax.grid(alpha=0.3, lw=0.5)


def _loglog_panel(ax, spec: FigureSpec, df, palette, ylabel: str, *, relative: bool) -> int:
    """The measured points of every cell that carries them, its fitted line and the claimed order."""
    drawn = 0
    for k, (_, r) in enumerate(df.iterrows()):
        if r["_curve"] is None:
            continue
        x, y, se = (np.asarray(a, dtype=float) if a is not None else None for a in r["_curve"])
        keep = (x > 0) & (y > 0)
        if keep.sum() < 2:
            continue
        x, y, se = x[keep], y[keep], None if se is None else se[keep]
        if relative:  # quantities of different units share the axis as growth over the smallest size
            y, se = y / y[0], None if se is None else se / y[0]
        colour = palette[k % len(palette)]
        name = ", ".join(f"{a}={_label(r[a])}" for a in spec.axes if a in r and not isinstance(r[a], (list, tuple)))
        label = _cut(name or r["variant"], 30)
        if se is not None:
            ax.errorbar(x, y, yerr=np.minimum(se, 0.999 * y), fmt="o", ms=3.5, lw=0.8, color=colour,
                        label=label)
        else:
            ax.plot(x, y, "o", ms=3.5, color=colour, label=label)
        grid_x = np.geomspace(x.min(), x.max(), 20)
        slope, claimed = float(r["_slope"]), float(r["_claimed"])
        # both lines through the points' geometric centre: the cell's intercept may belong to a rescaled
        # quantity (per-round intercepts of a timing, a normalised bias), its slope never does
        cx, cy = math.exp(np.log(x).mean()), math.exp(np.log(y).mean())
        if math.isfinite(slope):
            ax.plot(grid_x, cy * (grid_x / cx) ** slope, color=colour, lw=1.0, label=f"fit: slope {slope:.3g}")
        if math.isfinite(claimed):
            ax.plot(grid_x, cy * (grid_x / cx) ** claimed, color=colour, lw=1.0, ls=":",
                    label=f"claimed: slope {claimed:.3g}")
        drawn += 1
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    low, high = ax.get_ylim()
    if high > 10 * low:  # a decade or more: the major ticks suffice
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("size (swept)", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(which="both", labelsize=7)
    ax.grid(alpha=0.3, lw=0.5, which="both")
    return drawn


def _tail_panels(fig, spec: FigureSpec, df, colours):
    """Exceedance frequency (Clopper–Pearson interval) against the bound, per binomial cell."""
    ax = fig.subplots(1, 1)
    axis = next(iter(_panel_axes(spec)))
    labels = df[axis].map(str).tolist() if axis is not None else ["cell"] * len(df)
    if axis is None or df[axis].map(str).nunique() < len(df):
        others = [a for a in spec.axes if a in df]
        labels = [", ".join(f"{a}={_label(r[a])}" for a in others) or "cell" for _, r in df.iterrows()]
    x = _categorical_x(ax, labels)
    freq = df["estimate"].astype(float).to_numpy()
    lo, hi = df["_ci_low"].astype(float).to_numpy(), df["_ci_high"].astype(float).to_numpy()
    bound = df["prediction"].astype(float).to_numpy()
    floor = min([v for v in (*freq, *lo, *bound) if v > 0] or [1e-4]) / 3
    for xi, b in zip(x, bound, strict=True):
        ax.plot([xi - 0.35, xi + 0.35], [max(b, floor)] * 2, color="black", lw=1.5)
        ax.fill_between([xi - 0.35, xi + 0.35], max(b, floor), max(b + spec.tolerance, floor), color="0.85",
                        lw=0, zorder=0)
    ax.plot([], [], color="black", lw=1.5, label="bound")
    ax.fill_between([], [], [], color="0.85", label=f"bound + tolerance {spec.tolerance:g}")
    err = np.vstack([np.clip(np.maximum(freq, floor) - np.maximum(lo, floor), 0, None),
                     np.clip(np.maximum(hi, floor) - np.maximum(freq, floor), 0, None)])
    _scatter_cells(ax, x, np.maximum(freq, floor), np.where(np.isfinite(err), err, 0.0),
                   df["cell_verdict"].to_numpy(), df["_witness"].to_numpy(bool), colours)
    ax.set_yscale("log")
    ax.set_ylabel("exceedance frequency", fontsize=8)
    ax.tick_params(which="both", labelsize=7)
    ax.grid(alpha=0.3, lw=0.5, which="both")
    return [ax], floor


_IDENTITY_KINDS = ("identity",)
_MARGIN_KINDS = ("inequality", "optimality")


#: Figure size: 3.2 inches a panel (at most 13), plus the legend's column beside them, 3.4 inches high; the caption
#: is wrapped to the figure's width (7-point text: ~16 characters an inch).
_PANEL_INCHES, _MAX_PANELS_INCHES, _LEGEND_INCHES, _HEIGHT_INCHES = 3.2, 13.0, 2.4, 3.4
_CAPTION_CHARS_PER_INCH = 16


def _canvas(panels: int):
    return canvas_figure(figsize=(min(_PANEL_INCHES * panels, _MAX_PANELS_INCHES) + _LEGEND_INCHES, _HEIGHT_INCHES))


def _sparse_minor_ticks(ax) -> None:
    """Minor ticks at 2 and 5 of each decade on a log axis, none on a symmetric log one (its decades are labelled):
    matplotlib's eight a decade are most of a figure's drawing time (every tick is two lines and two labels).
    Log and symmetric log tick labels are plain Unicode text (:func:`_plain_tick_label`)."""
    from matplotlib.ticker import LogLocator, NullLocator

    for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
        if scale == "log":
            axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        elif scale == "symlog":
            axis.set_minor_locator(NullLocator())
        if scale in ("log", "symlog"):
            axis.set_major_formatter(_plain_formatter(axis.get_major_formatter()))
            axis.set_minor_formatter(_plain_formatter(axis.get_minor_formatter()))


def _plain_formatter(inner):
    """``inner`` (a log formatter) with its labels as plain text (:func:`_plain_tick_label`); it still sees the
    axis and the tick locations (which minor ticks it labels depends on them)."""
    from matplotlib.ticker import Formatter

    class Plain(Formatter):
        def set_axis(self, axis):
            super().set_axis(axis)
            inner.set_axis(axis)

        def set_locs(self, locs):
            inner.set_locs(locs)

        def __call__(self, x, pos=None):
            return _plain_tick_label(inner(x, pos))

    return Plain()


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
_MATHTEXT_POWER = re.compile(r"\\?mathdefault\{(.*)\}")


def _plain_tick_label(label: str) -> str:
    """A log axis' mathtext label (``$\\mathdefault{2\\times10^{-3}}$``) as plain text (``2×10⁻³``): matplotlib parses
    every mathtext label with pyparsing, ~14 ms each, a fifth of a figure's time."""
    if not label.startswith("$"):
        return label
    inner = _MATHTEXT_POWER.search(label)
    text = (inner.group(1) if inner else label.strip("$")).replace("\\times", "×").replace("\\,", "")
    return re.sub(r"\^\{([^}]*)\}", lambda m: m.group(1).translate(_SUPERSCRIPT), text).replace("-", "−")


def _part(spec: FigureSpec, frame) -> FigureSpec:
    """``spec`` restricted to the rows of ``frame``, whose swept axes are those with more than one value in it."""
    grid = frame[frame["_source"] == "grid"]
    return replace(spec, frame=frame, axes=tuple(a for a in spec.axes if grid[a].map(_label).nunique() > 1))


def _beside(sub, rest: FigureSpec, quantity: str) -> list:
    """Panels for the cells a figure's own panels do not draw (``rest``, :func:`_part`): its grid cells as
    ``quantity`` (deviation or margin) and its search restarts, in the subfigure ``sub``."""
    searched = rest.frame["_source"] != "grid"
    return _deviation_panels(sub, rest, rest.frame[~searched], rest.frame[searched], quantity)[0]


def render_figure(spec: FigureSpec):
    """The matplotlib ``Figure`` of ``spec`` (see the module docstring for what each kind shows), on its own Agg
    canvas (:func:`canvas_figure`)."""
    colours, palette = _colours()
    df = spec.frame
    grid, search = df[df["_source"] == "grid"], df[df["_source"] != "grid"]
    kind = spec.kind
    binomial = grid["method"].astype(str).str.startswith("exact binomial")
    slopes = np.isfinite(grid["_slope"].astype(float))
    panels = max(len(_panel_axes(spec)) + (not search.empty), 2)
    caption = ""
    if kind == "tail-bound" and binomial.any():
        fig = _canvas(panels)
        rest = _part(spec, df[~df.index.isin(grid.index[binomial])])
        sub = fig.subfigures(1, 2, width_ratios=[1, 1.6]) if not rest.frame.empty else [fig]
        axs, floor = _tail_panels(sub[0], spec, grid[binomial], colours)
        caption = ("Dots: empirical exceedance frequency per binomial cell, bars: its Clopper–Pearson interval; "
                   f"black: the bound, grey: bound + tolerance; zeros drawn at {floor:.2g}.")
        if not rest.frame.empty:
            axs = [*axs, *_beside(sub[1], rest, "margin")]
            caption += (" Right: cells decided without sampling (a closed-form margin: a negative bound, or one "
                        "above 1 - tolerance) and search restarts, as signed margins.")
    elif kind in ("rate", "complexity") and slopes.any():
        # slope cells: their measured points (where they carry them) and their slopes; the other cells (a route
        # judged without a fit) and search restarts as deviations beside them
        fitted, rest = grid[slopes], _part(spec, df[~df.index.isin(grid.index[slopes])])
        points = bool(fitted["_curve"].map(lambda c: c is not None).any())
        left_n = 1 + points
        rest_grid = rest.frame["_source"] == "grid"
        right_n = len(_panel_axes(rest)) * bool(rest_grid.any()) + bool((~rest_grid).any())
        fig = _canvas(max(left_n + right_n, panels))
        sub = fig.subfigures(1, 2, width_ratios=[max(left_n, 1.5), right_n]) if right_n else [fig]
        axs = list(sub[0].subplots(1, left_n, squeeze=False)[0])
        caption = "Each slope cell's slope ± confidence radius, grey: claimed slope ± tolerance."
        if points:
            ylabel = "measured quantity" if kind == "rate" else "time, memory or flops\n/ value at the smallest size"
            if not _loglog_panel(axs[0], spec, fitted, palette, ylabel, relative=kind == "complexity"):
                axs[0].text(0.5, 0.5, "no finite\nmeasured points", ha="center", va="center",
                            transform=axs[0].transAxes, fontsize=8)
                axs[0].set_axis_off()
            caption = ("Left: measured points (log-log"
                       + ("; each series over its value at the smallest size" if kind == "complexity" else "")
                       + "); solid: the fitted slope, dotted: the claimed order, both through the points' centre. "
                       + caption)
        _slope_panel(axs[-1], spec, fitted, colours)
        if right_n:
            axs = [*axs, *_beside(sub[1], rest, "deviation")]
            caption += (" Right: cells judged without a fitted slope (estimate − prediction ± radius) and search "
                        "restarts.")
    else:
        if kind in _IDENTITY_KINDS:
            quantity = "error"
        elif kind in _MARGIN_KINDS or kind == "tail-bound":
            quantity = "margin"
        else:
            quantity = "deviation"
        fig = _canvas(panels)
        axs, floor = _deviation_panels(fig, spec, grid, search, quantity)
        caption = {"deviation": "Dots: estimate − prediction per cell, bars: its confidence radius; grey: the "
                                "tolerance band; one panel per swept axis.",
                   "margin": "Dots: the signed margin per cell (negative: the inequality fails), bars: its "
                             "confidence radius; shaded: margins beyond the tolerance (violations).",
                   "error": "Dots: each cell's error (the claim's effect, log axis); dashed: the tolerance"
                            + (f"; zeros drawn at {floor:.2g}." if floor else ".")}[quantity]
    caption += " Colour: cell verdict; star: the witness."
    fig.suptitle(f"{spec.claim_id}: {spec.verdict}", x=0.01, ha="left", fontsize=10, fontweight="bold")
    handles, labels = {}, []
    for ax in axs:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    if labels:
        fig.legend([handles[lab] for lab in labels], labels, loc="outside right upper", fontsize=7, frameon=False)
    for ax in fig.axes:
        _sparse_minor_ticks(ax)
    # the caption as the figure's x label: the constrained layout makes room for it (no tight bounding box to
    # measure at save time, which costs a second draw per file)
    fig.supxlabel(textwrap.fill(caption, int(fig.get_figwidth() * _CAPTION_CHARS_PER_INCH)), x=0.0, ha="left",
                  fontsize=7)
    return fig


def draw_figure(spec: FigureSpec, path: Path) -> Path:
    """Draw ``spec`` (:func:`render_figure`) into ``path`` (PNG, dpi 100) and beside it ``path`` with suffix
    ``.svg`` (vector); return ``path``.

    The constrained layout is solved once, by the PNG's draw, and then frozen for the SVG (the layout is ~half of
    a figure's time: it measures every tick label)."""
    path = Path(path)
    fig = render_figure(spec)
    fig.savefig(path, dpi=_DPI)
    fig.set_layout_engine(None)
    fig.savefig(path.with_suffix(".svg"))
    return path


def claim_figure(result: ClaimResult, path: Path) -> bool:
    """Draw ``result``'s figure into ``path`` (and its ``.svg`` beside it); False when there is nothing to plot."""
    spec = figure_spec(result)
    if spec is None:
        return False
    draw_figure(spec, path)
    return True


#: Fewest figures worth a process pool (below it, starting the workers costs more than it saves).
PARALLEL_MIN_FIGURES = 16


def draw_figures(jobs: list[tuple[FigureSpec, Path]], *, workers: int | None = None,
                 on_done: Callable[[], None] | None = None) -> None:
    """Draw every ``(spec, path)`` of ``jobs`` (:func:`draw_figure`), in a pool of ``workers`` processes (default:
    the CPUs this process may use) when there are at least :data:`PARALLEL_MIN_FIGURES` of them; ``on_done`` is
    called once per finished figure (a progress bar's update). The figures are the same either way: each is
    drawn from its picklable spec alone."""
    import concurrent.futures
    import multiprocessing

    if workers is None:
        from rfkit.validation.engine import usable_cpus

        workers = usable_cpus()
    if workers < 2 or len(jobs) < PARALLEL_MIN_FIGURES:
        for spec, path in jobs:
            draw_figure(spec, path)
            if on_done is not None:
                on_done()
        return
    # spawn: a fresh interpreter per worker (forking a process that holds BLAS/Numba threads is unsafe)
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for future in concurrent.futures.as_completed([pool.submit(draw_figure, spec, path) for spec, path in jobs]):
            future.result()
            if on_done is not None:
                on_done()
