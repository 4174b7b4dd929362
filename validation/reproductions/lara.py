r"""RA/LARA reproduction: Figure 1 of ``000_d62fa2cae7f5a446.txt`` (``rfkit reproduce lara.fig1``).

Figure 1 plots the MSE between exact softmax attention and its approximations (RFA/Performer, LARA, RA with one
sample) against the number of samples, for ViTs at sequence lengths 196, 576 and 784. We have no pretrained ViT
activations, so heads are drawn from the register's synthetic generators (G-smooth by default: tokens on the
``√N × √N`` grid made of a smooth random field, token noise and a shared offset, projected to ``q, k, v``; G-gauss and
G-peaked as options) in merged coordinates, each head an independent draw. The estimators share each head's
``Q, K, V``; RFA uses ``S = C`` iid samples, LARA ``C`` landmarks (one sample each), RA ``S = 1``.

The quantities are computed here and nowhere else: the claims ``lara.fig1.*`` call :func:`fig1_heads`. Parameters
the paper leaves open are options (register "Figure 1"): generator, logit scale, D, LARA's proposal, weights, β,
r' axis, mode and landmark layout, and the MSE normalisation (per element). The default is reduced (N = 196 only at
D = 64, the paper's first panel, 8 heads, sample counts 4-64) to run in well under two minutes on one core;
``size=full`` runs the three lengths with the register's sample grid. The paper does not say which LARA mode Figure 1
ran, and the claims ``lara.fig1.*`` quantify over both: by default (``mode=both``) every length is drawn in the
training mode (ω_c ~ q_c) and in the evaluation mode (ω_c = μ_c, G.3.3), one row of panels each, and every panel's
title names its length and mode. Points are the mean per-element MSE over the heads, bars (and the band around RA)
± 1 standard error over the heads, ``sd(ddof=1)/√heads``; the caption (:func:`fig1_caption`) states the regime and
the options that differ from the paper's (:data:`FIG1_PAPER`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from rfkit.estimators import softmax_attention
from rfkit.estimators.lara import lara_attention
from rfkit.estimators.ra import ra_attention
from rfkit.estimators.rfa import rfa_attention
from rfkit.validation.claims.lara.inputs import attention_inputs
from rfkit.validation.netcdf import write_dataset
from rfkit.validation.reproductions import Reproduction, layout

__all__ = ["REPRODUCTIONS", "FIG1_OPTIONS", "FIG1_PAPER", "ESTIMATORS", "fig1_heads", "fig1_sweep", "fig1_caption",
           "run_fig1"]

ESTIMATORS = ("RFA", "LARA", "RA")
MODES = ("train", "eval")
MODE_TITLES = {"train": "LARA training mode (ω_c ~ q_c)", "eval": "LARA evaluation mode (ω_c = μ_c)"}
FULL_SAMPLES = (4, 9, 16, 25, 36, 49, 64, 100, 144, 196)

FIG1_OPTIONS = dict(size="reduced", lengths=[196], samples=[4, 8, 16, 32, 64], heads=8, d=64, generator="smooth",
                    logit_std=2.0, proposal="eq34", weights="eq9", beta=1.0, rprime_axis="queries", mode="both",
                    layout="1d", seed=0)
FIG1_DOCS = dict(
    size="'reduced' (the options as given) or 'full' (lengths 196, 576, 784; the register's sample grid; 32 heads)",
    lengths="sequence lengths N (self-attention, N = M)", samples="numbers of samples S = C (x axis)",
    heads="independent (Q, K, V) draws per length (heads x layers of the paper)", d="head dimension D (= D_v)",
    generator="input generator: smooth (G-smooth, ViT-like), gauss (G-gauss) or peaked (G-peaked)",
    logit_std="standard deviation of the logits q·k (merged coordinates)",
    proposal="LARA proposal family (eq32, eq33, eq34, eq35)", weights="LARA weights (eq9, balance, eq37, constant)",
    beta="β of the Eq 9 correction", rprime_axis="r' normalisation axis (queries as printed, or landmarks)",
    mode="LARA mode: train (ω_c ~ q_c), eval (ω_c = μ_c) or both (one row of panels each)",
    layout="landmark layout: 1d segments or 2d pooling",
    seed="root seed")


def _mse(y, target) -> float:
    """Per-element MSE, ``(1/(N·D_v)) Σ_n ‖y_n - μ_n‖²``."""
    return float(np.mean((y - target) ** 2))


def _lara_options(options: dict, n: int) -> dict:
    side = int(round(np.sqrt(n)))
    grid = (side, side) if options["layout"] == "2d" and side * side == n else None
    return dict(proposal=options["proposal"], weights=options["weights"], beta=options["beta"],
                rprime_axis=options["rprime_axis"], mode=options["mode"], uneven="adaptive",
                layout="2d" if grid else "1d", grid=grid)


def fig1_heads(n: int, samples, rng: np.random.Generator, *, heads: int, d: int = 64, generator: str = "smooth",
               logit_std: float = 2.0, **lara_options) -> dict[str, np.ndarray]:
    """Per-head MSEs ``(heads, len(samples))`` of RFA (S = C) and LARA (C landmarks), and ``(heads,)`` of RA (S = 1).

    ``lara_options``: proposal, weights, beta, rprime_axis, mode, layout (see :data:`FIG1_DOCS`).
    """
    options = dict(FIG1_OPTIONS, **{"mode": "train", **lara_options})  # one head set is drawn in one mode
    out = {"RFA": np.empty((heads, len(samples))), "LARA": np.empty((heads, len(samples))), "RA": np.empty(heads)}
    for h in range(heads):
        q, k, v = attention_inputs(generator, rng, n, n, d, d, logit_std)
        exact = softmax_attention(q, k, v, scale=1.0)
        out["RA"][h] = _mse(ra_attention(q, k, v, num_samples=1, rng=rng), exact)
        for j, c in enumerate(samples):
            out["RFA"][h, j] = _mse(rfa_attention(q, k, v, num_samples=c, rng=rng), exact)
            out["LARA"][h, j] = _mse(lara_attention(q, k, v, C=c, rng=rng, **_lara_options(options, n)), exact)
    return out


def _resolved(options: dict) -> dict:
    opts = dict(FIG1_OPTIONS, **options)
    if opts["size"] == "full":
        opts.update(lengths=[196, 576, 784], samples=list(FULL_SAMPLES), heads=32)
    return opts


def _modes(options: dict) -> list[str]:
    return list(MODES) if options["mode"] == "both" else [options["mode"]]


def fig1_sweep(options: dict) -> xr.Dataset:
    """MSE per (length, mode, head, samples) for each estimator, as an xarray Dataset."""
    opts = _resolved(options)
    rng = np.random.default_rng(opts["seed"])
    keys = ("proposal", "weights", "beta", "rprime_axis", "layout")
    modes = _modes(opts)
    per_length = [[fig1_heads(n, opts["samples"], rng, heads=opts["heads"], d=opts["d"], generator=opts["generator"],
                              logit_std=opts["logit_std"], mode=mode, **{k: opts[k] for k in keys}) for mode in modes]
                  for n in opts["lengths"]]
    coords = dict(N=opts["lengths"], mode=modes, head=np.arange(opts["heads"]), samples=opts["samples"])
    data = {name: (("N", "mode", "head", "samples"),
                   np.stack([np.stack([r[name] for r in row]) for row in per_length])) for name in ("RFA", "LARA")}
    data["RA"] = (("N", "mode", "head"), np.stack([np.stack([r["RA"] for r in row]) for row in per_length]))
    attrs = {k: str(v) for k, v in opts.items() if k != "mode"}  # the coordinate ``mode`` records the modes drawn
    attrs["note"] = ("synthetic heads (no pretrained ViT activations); per-element MSE against exact softmax "
                     "attention; mode: LARA's training (ω_c ~ q_c) or evaluation (ω_c = μ_c) mode, fresh heads "
                     "for each")
    return xr.Dataset(data, coords=coords, attrs=attrs)


#: Figure 1's values of the options the paper states (its three panels; the sample grid of its x axis); the
#: rest (generator, logit scale, LARA's proposal, weights, β, mode, layout, head count) the paper leaves open.
FIG1_PAPER = dict(lengths=[196, 576, 784], samples=list(FULL_SAMPLES), d=64)


def _standard_error(values: xr.DataArray) -> xr.DataArray | None:
    """Per-point standard error of the mean over heads (:func:`~rfkit.validation.reproductions.layout.standard_error`;
    None with one head)."""
    return layout.standard_error(values, "head") if values.sizes["head"] > 1 else None


def fig1_caption(ds: xr.Dataset, options: dict) -> str:
    """The figure's regime line (:func:`rfkit.validation.reproductions.layout.regime_caption`)."""
    opts = _resolved(options)
    regime = (f"synthetic {opts['generator']} heads (no pretrained ViT activations), N in {opts['lengths']}, "
              f"D = {opts['d']}, logit sd {opts['logit_std']:g}, S = C in {opts['samples']}, {opts['heads']} "
              f"independent heads per (N, mode) as replicates; points: mean per-element MSE over heads, bars and "
              f"RA band: ± 1 standard error over heads; LARA proposal {opts['proposal']}, weights {opts['weights']}, "
              f"layout {opts['layout']}, size={opts['size']}")
    return layout.regime_caption("lara.fig1", regime, {k: opts[k] for k in FIG1_OPTIONS}, FIG1_OPTIONS, FIG1_PAPER)


@layout.themed()
def _plot(ds: xr.Dataset, path: Path, caption: str) -> None:
    rows, cols = ds.sizes["mode"], ds.sizes["N"]
    fig, axes = layout.new_figure(rows, cols, figsize=(4.2 * cols, 3.2 * rows))
    samples = ds["samples"].values
    for i, mode in enumerate(ds["mode"].values):
        for ax, n in zip(axes[i], ds["N"].values, strict=True):
            sub = ds.sel(N=n, mode=mode)
            for j, (name, marker) in enumerate((("RFA", "o"), ("LARA", "s"))):
                se = _standard_error(sub[name])
                ax.errorbar(samples, sub[name].mean("head"), yerr=None if se is None else se, marker=marker,
                            color=f"C{j}", capsize=3, label=name)
            ra, ra_se = float(sub["RA"].mean()), _standard_error(sub["RA"])
            ax.axhline(ra, color="C2", ls="--", label="RA (S = 1)")
            if ra_se is not None:
                ax.axhspan(ra - float(ra_se), ra + float(ra_se), color="C2", alpha=0.2, lw=0)
            ax.set(xscale="log", yscale="log", xlabel="number of samples S = C", ylabel="MSE (per element)",
                   title=f"N = {int(n)}, {MODE_TITLES.get(str(mode), str(mode))}")
            ax.title.set_fontsize(9)
            layout.log_ticks_at(ax.xaxis, samples)
    layout.finish(fig, path, caption, dpi=120)


def run_fig1(out, **options) -> dict[str, Path]:
    """Compute Figure 1 (see the module docstring) and write ``lara_fig1.png`` and ``lara_fig1.nc`` into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ds = fig1_sweep(options)
    paths = {"png": out / "lara_fig1.png", "netcdf": out / "lara_fig1.nc"}
    _plot(ds, paths["png"], fig1_caption(ds, options))
    write_dataset(ds, paths["netcdf"])
    return paths


REPRODUCTIONS = [
    Reproduction("lara.fig1", "lara",
                 "Figure 1: MSE of RFA, LARA and RA (S = 1) against exact softmax attention vs the number of samples "
                 "(synthetic ViT-like heads)", run_fig1, FIG1_OPTIONS, FIG1_DOCS),
]
