"""The layout every reproduction figure shares: colour-blind palette, legend outside the data, readable log ticks,
and a caption line stating the inputs and the regime the reproduction ran (issue 17).

* :func:`themed` — decorates a plotting function so that it draws under seaborn's ``"paper"`` look and
  ``"colorblind"`` palette (``matplotlib.rc_context``: the user's settings and backend are left alone);
* :func:`new_figure` — a constrained-layout figure on its own Agg canvas, outside pyplot;
* :func:`regime_caption` — the caption line: the regime (sizes, replicates, what the points and bars are), the seed,
  the options changed from their defaults, and every option whose value differs from the paper's (``paper``: the
  values the paper states; an option the paper leaves open is not compared);
* :func:`finish` — one legend for the whole figure outside the axes (right), the caption under the axes, log-axis
  tick labels thinned until none overlap (:func:`readable_log_ticks`), the PNG written and the figure closed.

The caption text carries the gid :data:`CAPTION_GID` so a test can find it in the drawn figure.
"""

from __future__ import annotations

import functools
import math
import textwrap
from pathlib import Path

import numpy as np

from rfkit.validation.canvas import canvas_figure

__all__ = ["CAPTION_GID", "PALETTE", "theme", "themed", "new_figure", "regime_caption", "log_ticks_at",
           "readable_log_ticks", "finish", "LOG_SUBS", "standard_error"]

CAPTION_GID = "regime-caption"
PALETTE = "colorblind"


def theme(style: str = "whitegrid") -> dict:
    """The matplotlib rc of the reproductions' look: seaborn's ``style``, its ``"paper"`` context and the
    colour-blind palette, as a dict (nothing global is changed; :func:`themed` applies it for one call)."""
    import seaborn as sns
    from matplotlib import cycler

    return {**sns.axes_style(style), **sns.plotting_context("paper"),
            "axes.prop_cycle": cycler(color=sns.color_palette(PALETTE))}


def themed(style: str = "whitegrid"):
    """Decorator: run a plotting function under :func:`theme` (``matplotlib.rc_context``), so a figure gets the
    reproductions' look while the user's rcParams, and their backend, stay as they were."""
    def decorate(plot):
        @functools.wraps(plot)
        def wrapper(*args, **kwargs):
            import matplotlib

            with matplotlib.rc_context(theme(style)):
                return plot(*args, **kwargs)
        return wrapper
    return decorate


def new_figure(nrows: int, ncols: int, figsize: tuple[float, float], **kwargs):
    """``(fig, axes)`` (``axes`` a 2-d array) on :func:`~rfkit.validation.canvas.canvas_figure`: constrained
    layout, its own Agg canvas, outside pyplot (:func:`finish` writes it)."""
    fig = canvas_figure(figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kwargs)


def _fmt(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def regime_caption(rep_id: str, regime: str, options: dict, defaults: dict, paper: dict) -> str:
    """``"<rep_id>: <regime>. seed=S. Changed from the defaults: ... Differs from the paper: k=v (paper: p); ..."``.

    ``options``: the options the run used; ``defaults``: the reproduction's defaults; ``paper``: the paper's value
    of each option it states (options missing from ``paper`` are left open by the paper).
    """
    if not regime.strip():
        raise ValueError(f"{rep_id}: the caption needs a regime (sizes, replicates, what is drawn)")
    unknown = sorted(set(paper) - set(options))
    if unknown:
        raise ValueError(f"{rep_id}: paper values for unknown options {unknown}")
    parts = [f"{rep_id}: {regime.strip().rstrip('.')}.", f"seed={_fmt(options.get('seed', 'none'))}."]
    changed = [f"{k}={_fmt(v)}" for k, v in options.items() if k != "seed" and k in defaults and v != defaults[k]]
    if changed:
        parts.append("Changed from the defaults: " + ", ".join(changed) + ".")
    differs = [f"{k}={_fmt(options[k])} (paper: {_fmt(p)})" for k, p in paper.items() if options[k] != p]
    parts.append("Differs from the paper: " + "; ".join(differs) + "." if differs
                 else "All options the paper states are at the paper's values.")
    return " ".join(parts)


def standard_error(values, dim: str | int = 0):
    """Standard error of the mean over replicates, ``sd(ddof=1)/√n``, along ``dim`` (a dimension name of an xarray
    ``DataArray``, or an axis of an array); needs ``n >= 2`` replicates."""
    n = values.sizes[dim] if isinstance(dim, str) else np.shape(values)[dim]
    if n < 2:
        raise ValueError(f"a standard error needs at least 2 replicates along {dim!r}, got {n}")
    sd = values.std(dim, ddof=1) if isinstance(dim, str) else np.std(values, axis=dim, ddof=1)
    return sd / math.sqrt(n)


def log_ticks_at(axis, values) -> None:
    """Major ticks of a log ``axis`` at the data ``values`` with plain labels, no minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    axis.set_major_locator(FixedLocator(sorted(float(v) for v in values)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _all_axes(fig) -> list:
    out = []
    for ax in fig.axes:
        out.append(ax)
        out.extend(getattr(ax, "child_axes", []))
    return out


def _labelled(axis, renderer, lo, hi):
    """``(loc, text, extent)`` of the visible major tick labels of ``axis`` within the view, in position order."""
    ticks = []
    for tick in axis.get_major_ticks():
        label = tick.label1
        loc = tick.get_loc()
        if not (label.get_visible() and label.get_text()) or loc is None or not lo <= loc <= hi:
            continue
        ticks.append((loc, label.get_text(), label.get_window_extent(renderer)))
    return sorted(ticks, key=lambda t: t[0])


#: Mantissas tried for matplotlib's default log locator, densest first (:func:`readable_log_ticks`).
LOG_SUBS = ((1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0), (1.0, 2.0, 5.0), (1.0, 3.0), (1.0,))


def _thinned(axis, renderer, pad: float) -> tuple[list, int]:
    """The labelled major ticks of ``axis`` kept greedily from the smallest value so that no two come within
    ``pad`` pixels, and how many labelled ticks there were."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = _labelled(axis, renderer, lo, hi)
    kept = []
    for tick in ticks:
        if kept:
            prev, box = kept[-1][2], tick[2]
            if axis.axis_name == "x":
                clash = box.x0 < prev.x1 + pad and box.x1 > prev.x0 - pad
            else:
                clash = box.y0 < prev.y1 + pad and box.y1 > prev.y0 - pad
            if clash:
                continue
        kept.append(tick)
    return kept, len(ticks)


def _crowded(axis, renderer, pad: float) -> bool:
    """Whether some major tick labels of ``axis`` overlap, or some major ticks in view have no label (matplotlib's
    log formatter hides mantissa labels when the axis spans many decades: a grid line per mantissa is clutter)."""
    kept, total = _thinned(axis, renderer, pad)
    lo, hi = sorted(axis.get_view_interval())
    in_view = sum(lo <= loc <= hi for loc in axis.get_majorticklocs())
    return len(kept) < total or total < in_view


def readable_log_ticks(fig, pad: float = 2.0) -> None:
    """On every log axis of ``fig``: no minor labels; where the axis has matplotlib's default locator, the densest
    mantissa set of :data:`LOG_SUBS` that labels every major tick without overlap; then major labels thinned
    (smallest value kept, then each next one that does not come within ``pad`` pixels of the last kept) until no
    two overlap."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, LogFormatterSciNotation, LogLocator, NullFormatter

    axes = [axis for ax in _all_axes(fig) for axis in (ax.xaxis, ax.yaxis) if axis.get_scale() == "log"]
    for axis in axes:
        axis.set_minor_formatter(NullFormatter())
    pending = [axis for axis in axes if isinstance(axis.get_major_locator(), LogLocator)]
    for subs in LOG_SUBS:
        for axis in pending:
            axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=30))
            # label every mantissa (matplotlib's default hides them beyond one decade); crowding decides
            axis.set_major_formatter(LogFormatterSciNotation(labelOnlyBase=False,
                                                             minor_thresholds=(math.inf, math.inf)))
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        pending = [axis for axis in pending if _crowded(axis, renderer, pad)]
        if not pending:
            break
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for axis in axes:
        kept, total = _thinned(axis, renderer, pad)
        if len(kept) < total:
            axis.set_major_locator(FixedLocator([t[0] for t in kept]))
            axis.set_major_formatter(FixedFormatter([t[1] for t in kept]))


def finish(fig, path: Path, caption: str, *, dpi: int = 130, legend_title: str | None = None) -> Path:
    """One de-duplicated legend outside the axes (right), ``caption`` under the figure, readable log ticks; write
    ``path`` (PNG, tight bounding box)."""
    handles: dict[str, object] = {}
    for ax in _all_axes(fig):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if not label.startswith("_"):
                handles.setdefault(label, handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside right center", fontsize=7, frameon=False,
                   title=legend_title, title_fontsize=7)
    width = max(60, int(fig.get_figwidth() * 17))
    fig.text(0.0, 0.0, textwrap.fill(caption, width), fontsize=7, ha="left", va="top", transform=fig.transFigure,
             gid=CAPTION_GID)
    readable_log_ticks(fig)
    path = Path(path)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path
