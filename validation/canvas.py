"""A matplotlib figure on its own Agg canvas: the one drawing primitive shared by the verdict figures
(:mod:`rfkit.validation.figures`) and the papers' reproductions (:mod:`rfkit.validation.reproductions`).

A module of its own so that a reproduction, whose computation some claims' checks run, imports no part of the
engine or its reports: a claim's code digest (:func:`rfkit.validation.checkpoint.claim_digest`) covers what its
cells import, and an edit to the engine must not make a full-tier run's stored cells stale.
"""

from __future__ import annotations

__all__ = ["canvas_figure"]


def canvas_figure(figsize: tuple[float, float]):
    """A constrained-layout matplotlib ``Figure`` on its own Agg canvas, outside pyplot: no backend is selected,
    no figure is registered (nothing to close), and the user's interactive session is left alone."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig
