"""Every reproduction figure states its regime in a caption, has no overlapping tick labels on its log axes and keeps
its legend outside the axes; lara.fig1 draws error bars from its heads' spread (issue 17). Tiny sizes."""

from __future__ import annotations

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import xarray as xr
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer

from rfkit.validation.reproductions import all_reproductions, get_reproduction, layout

#: Reduced options per reproduction (the sizes the other reproduction tests use).
TINY = {
    "lara.fig1": dict(lengths=[196], samples=[4, 9, 16, 25, 36, 49, 64, 100, 144, 196], heads=3, d=8),  # full grid
    "performer.fig2": dict(n_phi=41, n_l=21, replicates=2000, mc_angles=[2.5, 2.9], d=4, m=2),
    "performer.fig4": dict(L=32, d=4, m=[2, 8, 32, 128], samples=3),
    "eva.fig1": dict(lengths=[64, 128], repeats=2),
    "macformer.fig4": dict(batch=1, heads=1, d=8, lengths=[16, 32], log2_D=[1, 2], repeats=2),
}


def _axes(fig) -> list:
    return [a for ax in fig.axes for a in (ax, *ax.child_axes)]


def overlapping_log_tick_labels(fig) -> list[tuple[str, str]]:
    """Pairs of tick labels (major and minor) of a log axis of ``fig`` whose drawn boxes overlap."""
    if not hasattr(fig.canvas, "get_renderer"):  # a closed figure: draw it again on an Agg canvas
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    clashes = []
    for ax in _axes(fig):
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            lo, hi = sorted(axis.get_view_interval())
            labels = [t.label1 for t in axis.get_major_ticks() + axis.get_minor_ticks()
                      if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi]
            boxes = [(lab.get_text(), lab.get_window_extent(renderer)) for lab in labels]
            for i, (text_a, a) in enumerate(boxes):
                for text_b, b in boxes[i + 1:]:
                    if a.overlaps(b):
                        clashes.append((text_a, text_b))
    return clashes


def caption_of(fig) -> str | None:
    texts = [t.get_text() for t in fig.texts if t.get_gid() == layout.CAPTION_GID]
    return texts[0].replace("\n", " ") if texts else None


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """Run a reproduction at its tiny size; return ``(figure, paths)`` (the figure as written, then closed)."""
    figures = []
    finish = layout.finish

    def keep(fig, path, caption, **kwargs):
        figures.append(fig)
        return finish(fig, path, caption, **kwargs)

    monkeypatch.setattr(layout, "finish", keep)

    def run(rep_id: str):
        rep = get_reproduction(rep_id)
        paths = rep.run(tmp_path / rep_id, **dict(rep.options, **TINY[rep_id]))
        assert len(figures) == 1 and paths["png"].stat().st_size > 0
        return figures.pop(), paths

    return run


def test_every_reproduction_has_a_tiny_size():
    assert {rep.id for rep in all_reproductions()} == set(TINY)


@pytest.mark.parametrize("rep_id", sorted(TINY))
def test_figure_states_its_regime_and_has_readable_log_ticks(drawn, rep_id):
    rc = dict(matplotlib.rcParams)
    fig, _ = drawn(rep_id)
    # the seaborn look is applied for the one figure: the user's settings, backend and pyplot figures stay as they were
    assert dict(matplotlib.rcParams) == rc and plt.get_fignums() == []
    assert fig.get_axes()[0].xaxis.label.get_fontsize() == layout.theme()["axes.labelsize"]
    caption = caption_of(fig)
    assert caption is not None, f"{rep_id}: no regime caption"
    assert caption.startswith(f"{rep_id}: ") and f"seed={get_reproduction(rep_id).options['seed']}" in caption
    assert "Differs from the paper" in caption or "at the paper's values" in caption
    assert "Changed from the defaults" in caption  # the tiny options are named
    assert overlapping_log_tick_labels(fig) == []
    for ax in _axes(fig):
        assert ax.get_legend() is None, f"{rep_id}: a legend inside an axes"
    if any(ax.get_legend_handles_labels()[1] for ax in _axes(fig)):
        assert len(fig.legends) == 1


def test_lara_fig1_error_bars_are_the_standard_errors_over_heads(drawn):
    fig, paths = drawn("lara.fig1")
    with xr.open_dataset(paths["netcdf"]) as ds:
        for ax, mode in zip(fig.axes, ds["mode"].values, strict=True):
            bars = {c.get_label(): c for c in ax.containers if isinstance(c, ErrorbarContainer)}
            assert set(bars) == {"RFA", "LARA"}
            for name, container in bars.items():
                values = ds[name].sel(mode=mode).isel(N=0)
                se = values.std("head", ddof=1).values / math.sqrt(values.sizes["head"])
                mean = values.mean("head").values
                (segments,) = [lc.get_segments() for lc in container.lines[2]]
                low, high = (np.array([s[i][1] for s in segments]) for i in (0, 1))
                np.testing.assert_allclose(low, mean - se, rtol=1e-9)
                np.testing.assert_allclose(high, mean + se, rtol=1e-9)
    assert "standard error over heads" in caption_of(fig)


def test_overlap_check_catches_crowded_log_ticks_and_the_layout_fixes_them():
    """The checker can fail: labels at every sample of a long log grid overlap until readable_log_ticks thins them."""
    fig, axes = layout.new_figure(1, 1, figsize=(2.5, 2))
    ax = axes[0, 0]
    grid = [4, 9, 16, 25, 36, 49, 64, 100, 144, 196]
    ax.plot(grid, np.arange(1, 11.0) ** 2)
    ax.set(xscale="log", yscale="log")
    layout.log_ticks_at(ax.xaxis, grid)
    assert overlapping_log_tick_labels(fig)
    layout.readable_log_ticks(fig)
    assert overlapping_log_tick_labels(fig) == []
    kept = [t.label1.get_text() for t in ax.xaxis.get_major_ticks() if t.label1.get_text()]
    assert kept[0] == "4" and len(kept) >= 3


def test_regime_caption_names_the_differences_from_the_paper():
    line = layout.regime_caption("x.fig", "3 heads", dict(L=256, d=16, seed=1), dict(L=1024, d=16, seed=0),
                                 dict(L=4096, d=16))
    assert line == ("x.fig: 3 heads. seed=1. Changed from the defaults: L=256. Differs from the paper: L=256 "
                    "(paper: 4096).")
    with pytest.raises(ValueError, match="regime"):
        layout.regime_caption("x.fig", " ", {}, {}, {})
    with pytest.raises(ValueError, match="unknown options"):
        layout.regime_caption("x.fig", "r", dict(L=1), {}, dict(M=2))
