r"""Performer reproductions: Fig 2 (R1) and Fig 4 (R2) of ``003_4855bc6ab225d7a6.txt``.

Both figures' quantities are computed here and nowhere else: the claims ``performer.fig2.critical_region``,
``performer.fig4.orf_vs_iid`` and ``performer.fig4.pos_vs_trig`` call the same functions
(:func:`fig2_monte_carlo`, :func:`fig4_inputs`, :func:`fig4_output_mse`), and the closed form ``r(φ, l)``
comes from :func:`rfkit.theory.softmax.mse_ratio`.

**R1 — Fig 2** (``rfkit reproduce performer.fig2``). The ratio ``r(φ, l) = MSE(SM^trig_m)/MSE(SM⁺_m)`` for
``‖x‖ = ‖y‖ = l`` at angle ``φ`` (Lemma 2; independent of ``m`` and ``d``) on ``[-π, π] × [-2, 2]`` (the
paper's "symmetrized" domain: ``r`` depends on ``l²`` and ``cos φ`` only), its ``l = 1`` slice, and an
inset with both MSEs in a low-kernel-value region. Monte Carlo overlays: sample MSEs of both estimators
at a few points (``d`` and ``m`` options). The boundary values are limits, never NaN: ``r = inf`` at
``φ = ±π`` (``MSE_+ = 0``) and ``r = 0`` at ``l = 0`` (the limit ``l → 0``; ``inf`` at ``φ = ±π``).

**R2 — Fig 4** (``rfkit reproduce performer.fig4``). Output MSE ``mean((Att-hat - Att)²)`` of bidirectional
attention against ``m`` for trigonometric and positive features with iid and orthogonal (R-ORF, B.2 blocks
for ``m > d``) projections: ``Q, K, V`` with iid ``N(0, c²)`` entries, ``A = exp(QKᵀ/√d)``, one feature
draw per input sample (option ``draws``), mean ± sd over the input samples. The paper's size is
``L = 4096, d = 16`` with 15 samples; the default ``L = 1024`` keeps a run under a minute on 2 cores (pass
``--option L=4096`` for the paper's size).

Fig 2's Monte Carlo dots carry ± 1 delta-method standard error of the ratio of the two replicate means
(:func:`ratio_standard_error`); Fig 4's bands are ± 1 sd over the input samples. Each figure's caption
(:func:`fig2_caption`, :func:`fig4_caption`) states its regime (:mod:`rfkit.validation.reproductions.layout`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

from rfkit.estimators import FEATURE_MAPS, NonPositiveDenominatorWarning, linear_attention, softmax_attention
from rfkit.theory.softmax import lemma2_mse, mse_ratio
from rfkit.validation.harness import chunks, controlled_pair, kernel_estimates, replicate_projections
from rfkit.validation.netcdf import write_dataset
from rfkit.validation.reproductions import Reproduction, layout

__all__ = ["REPRODUCTIONS", "coupled_projections", "fig2_pair", "fig2_monte_carlo", "fig2_surface", "fig4_inputs",
           "fig4_output_mse", "fig4_sweep", "fig2_caption", "fig4_caption", "ratio_standard_error", "run_fig2",
           "run_fig4"]

#: Projection kinds of Fig 4: iid Gaussian, or R-ORF with chi norms (A.3 ``ortho_scaling = 0``) or √d norms.
FIG4_PROJECTIONS = {"iid": "iid", "orthogonal": "orthogonal", "orthogonal_sqrt_d": "orthogonal_sqrt_d"}


# ------------------------------------------------------------------------------------------ Fig 2


def fig2_pair(length: float, phi: float, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``x, y`` with ``‖x‖ = ‖y‖ = |l|`` at angle ``|φ|`` in a random plane of ``R^d`` (``d >= 2``)."""
    return controlled_pair(abs(length), abs(length), abs(phi), d, rng)


def fig2_monte_carlo(length: float, phi: float, *, d: int, m: int, replicates: int, rng: np.random.Generator,
                     budget: str = "same_m", feature_maps: dict[str, Callable] | None = None) -> dict:
    """Squared errors of ``SM^trig_m`` and ``SM⁺_{m'}`` at one ``(φ, l)`` (``m' = m``, or ``2m`` for the
    same feature dimension), each from ``replicates`` iid draws, with the Lemma 2 predictions.

    Returns ``dict(trig=..., positive=..., mse_trig=..., mse_positive=..., x=..., y=...)``; the arrays are
    per-replicate squared errors ``(φ(x)ᵀφ(y) - SM)²``.
    """
    maps = dict(FEATURE_MAPS, **(feature_maps or {}))
    x, y = fig2_pair(length, phi, d, rng)
    target = math.exp(float(x @ y))
    m_pos = 2 * m if budget == "same_features" else m
    out = dict(x=x, y=y, mse_trig=lemma2_mse("trig", x, y, m), mse_positive=lemma2_mse("positive", x, y, m_pos))
    for kind, mk in (("trig", m), ("positive", m_pos)):
        est = [kernel_estimates(maps[kind], x, y, replicate_projections("iid", n, mk, d, rng), n)
               for n in chunks(replicates, max(1, 2_000_000 // (mk * d)))]
        out[kind] = (np.concatenate(est) - target) ** 2
    return out


def fig2_surface(phis, lengths, budget: str = "same_m") -> xr.DataArray:
    """``r(φ, l)`` on a grid (closed form, :func:`rfkit.theory.softmax.mse_ratio`)."""
    phis, lengths = np.asarray(phis, dtype=np.float64), np.asarray(lengths, dtype=np.float64)
    r = mse_ratio(phis[None, :], lengths[:, None], budget)
    return xr.DataArray(r, dims=("l", "phi"), coords=dict(l=lengths, phi=phis), name="r",
                        attrs=dict(long_name="MSE(trig)/MSE(positive)", budget=budget))


def _fig2_overlays(options: dict, rng: np.random.Generator) -> xr.Dataset:
    rows = []
    for length in options["mc_lengths"]:
        for phi in options["mc_angles"]:
            mc = fig2_monte_carlo(length, phi, d=options["d"], m=options["m"], replicates=options["replicates"],
                                  rng=rng, budget=options["budget"])
            rows.append((length, phi, mc["trig"].mean(), mc["positive"].mean(), mc["mse_trig"], mc["mse_positive"],
                         _standard_error(mc["trig"]), _standard_error(mc["positive"])))
    arr = np.array(rows, dtype=np.float64)
    point = np.arange(len(rows))
    return xr.Dataset({"mc_l": ("point", arr[:, 0]), "mc_phi": ("point", arr[:, 1]),
                       "mc_mse_trig": ("point", arr[:, 2]), "mc_mse_positive": ("point", arr[:, 3]),
                       "mse_trig": ("point", arr[:, 4]), "mse_positive": ("point", arr[:, 5]),
                       "mc_se_trig": ("point", arr[:, 6]), "mc_se_positive": ("point", arr[:, 7])},
                      coords=dict(point=point))


def _standard_error(values: np.ndarray) -> float:
    """Standard error of a replicate mean (:func:`~rfkit.validation.reproductions.layout.standard_error`; nan with one
    replicate)."""
    return float(layout.standard_error(values)) if values.size > 1 else math.nan


def ratio_standard_error(num: np.ndarray, num_se: np.ndarray, den: np.ndarray, den_se: np.ndarray) -> np.ndarray:
    """Delta-method standard error of ``num/den`` for independent means: ``|r|·√((se_n/n)² + (se_d/d)²)``.

    The Monte Carlo overlays of Fig 2 estimate ``MSE_trig`` and ``MSE_+`` from independent draws, so the ratio's
    first-order standard error is this.
    """
    ratio = num / den
    return np.abs(ratio) * np.sqrt((num_se / num) ** 2 + (den_se / den) ** 2)


def _inset(options: dict) -> xr.Dataset:
    """Both Lemma 2 MSEs (``m = 1``) along ``φ`` at ``l = inset_l`` over ``φ ∈ [inset_phi_min, π)``."""
    phis = np.linspace(options["inset_phi_min"], math.pi, 64)[:-1]
    length = options["inset_l"]
    pairs = [(np.array([length, 0.0]), length * np.array([math.cos(p), math.sin(p)])) for p in phis]
    m_pos = 2 if options["budget"] == "same_features" else 1
    trig = [lemma2_mse("trig", x, y, 1) for x, y in pairs]
    pos = [lemma2_mse("positive", x, y, m_pos) for x, y in pairs]
    return xr.Dataset({"inset_mse_trig": ("inset_phi", trig), "inset_mse_positive": ("inset_phi", pos)},
                      coords=dict(inset_phi=phis))


#: Fig 2 is closed form over the paper's symmetrized domain; the paper states no Monte Carlo setting, so no
#: option of this reproduction has a paper value to compare with.
FIG2_PAPER: dict = {}


def fig2_caption(options: dict) -> str:
    """Fig 2's regime line (:func:`rfkit.validation.reproductions.layout.regime_caption`)."""
    regime = (f"closed-form r(φ, l) (Lemma 2) on a {options['n_phi']} × {options['n_l']} grid of [-π, π] × [-2, 2], "
              f"budget {options['budget']}; Monte Carlo overlays at l in {options['mc_lengths']}, φ in "
              f"{options['mc_angles']}, d = {options['d']}, m = {options['m']}, {options['replicates']} iid draws "
              f"per point (dots: ratio of the mean squared errors, bars: ± 1 delta-method standard error); inset: "
              f"both Lemma 2 MSEs (m = 1) at l = {options['inset_l']:g}")
    return layout.regime_caption("performer.fig2", regime, options, FIG2_OPTIONS, FIG2_PAPER)


@layout.themed("white")
def _plot_fig2(surface: xr.DataArray, overlays: xr.Dataset, inset: xr.Dataset, options: dict, path: Path) -> None:
    from matplotlib.colors import LogNorm

    fig, ((left, right),) = layout.new_figure(1, 2, figsize=(11, 4.2))
    values = np.clip(surface.values, 1e-6, 1e6)
    norm = LogNorm(1e-6, 1e6) if options["color_scale"] == "log" else None
    mesh = left.pcolormesh(surface.phi, surface.l, values, shading="auto", cmap="viridis", norm=norm)
    left.contour(surface.phi, surface.l, surface.values, levels=[1.0], colors="white", linewidths=1.0)
    fig.colorbar(mesh, ax=left, label="r (clipped to [1e-6, 1e6]; white: r = 1)")
    left.set(xlabel="angle φ (rad)", ylabel="length l", title=f"r(φ, l), budget {options['budget']}")
    phis = surface.phi.values
    one = mse_ratio(phis, 1.0, options["budget"])
    right.plot(phis, one, color="C0", label="closed form (Lemma 2)")
    mask = np.isclose(overlays.mc_l.values, 1.0)
    if mask.any():
        num, den = overlays.mc_mse_trig.values[mask], overlays.mc_mse_positive.values[mask]
        err = ratio_standard_error(num, overlays.mc_se_trig.values[mask], den, overlays.mc_se_positive.values[mask])
        right.errorbar(overlays.mc_phi.values[mask], num / den, yerr=err, fmt="o", color="C3", capsize=3, zorder=3,
                       label=f"Monte Carlo (d={options['d']}, m={options['m']})")
    right.axhline(1.0, color="grey", lw=0.8, ls="--")
    right.set(yscale="log", xlabel="angle φ (rad)", ylabel="r", title="slice l = 1")
    box = right.inset_axes([0.58, 0.1, 0.38, 0.35])
    box.semilogy(inset.inset_phi, inset.inset_mse_trig, color="C1", label="inset: MSE trig (m = 1)")
    box.semilogy(inset.inset_phi, inset.inset_mse_positive, color="C2", label="inset: MSE positive (m = 1)")
    box.set_title(f"MSEs, l = {options['inset_l']:g} (m = 1)", fontsize=7)
    box.tick_params(labelsize=6)
    layout.finish(fig, path, fig2_caption(options))


def run_fig2(out, **options) -> dict[str, Path]:
    """R1: the surface, the ``l = 1`` slice, an inset and Monte Carlo overlays (PNG + netCDF)."""
    options = dict(FIG2_OPTIONS, **options)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    phis = np.linspace(-math.pi, math.pi, options["n_phi"])
    lengths = np.linspace(-2.0, 2.0, options["n_l"])
    surface = fig2_surface(phis, lengths, options["budget"])
    overlays = _fig2_overlays(options, np.random.default_rng(options["seed"]))
    inset = _inset(options)
    ds = xr.merge([surface.to_dataset(), overlays, inset])
    ds.attrs.update({k: str(v) for k, v in options.items()}, figure="Performer Fig 2",
                    boundary="r = inf at phi = +-pi (MSE_+ = 0); r = limit l -> 0 at l = 0 (0, or inf at +-pi)")
    paths = {"netcdf": out / "performer_fig2.nc", "png": out / "performer_fig2.png"}
    write_dataset(ds, paths["netcdf"])
    _plot_fig2(surface, overlays, inset, options, paths["png"])
    return paths


# ------------------------------------------------------------------------------------------ Fig 4


def fig4_inputs(length: int, d: int, c: float, rng: np.random.Generator, dv: int | None = None):
    """``Q, K ∈ R^{L×d}`` and ``V ∈ R^{L×d_v}`` with iid ``N(0, c²)`` entries for Q, K and ``N(0, 1)`` for V."""
    q = rng.normal(0.0, c, size=(length, d))
    k = rng.normal(0.0, c, size=(length, d))
    v = rng.normal(size=(length, dv or d))
    return q, k, v


def coupled_projections(m: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """An iid Gaussian ``W`` and an R-ORF ``W_ort`` (chi norms) built from it, for paired comparisons.

    Per block of ``d`` rows, ``Gᵀ = QR`` (QR with positive ``diag R``): ``Q`` is a Haar frame independent of
    ``R``, and the row norms ``‖g_i‖ = ‖R_{:,i}‖`` are independent ``chi(d)`` variables that depend on ``R``
    only, so ``W_ort = diag(‖g_i‖) Qᵀ`` has exactly the R-ORF law (B.2: Gram–Schmidt keeping the marginals)
    while staying close to ``W = G`` (its first row of each block *is* ``g_1``). Each matrix alone has its
    correct law, so expectations of differences are unchanged and their variance is much smaller.
    """
    g = rng.standard_normal((m, d))
    ort = np.empty_like(g)
    for start in range(0, m, d):
        block = g[start:start + d]
        q, r = np.linalg.qr(block.T)
        q = q * np.where(np.diagonal(r) < 0, -1.0, 1.0)
        ort[start:start + d] = q.T * np.linalg.norm(block, axis=1)[:, None]
    return g, ort


def fig4_output_mse(q, k, v, *, feature: str, projection: str, m: int, rng: np.random.Generator,
                    exact: np.ndarray | None = None, feature_map: Callable | None = None,
                    omega: np.ndarray | None = None) -> float:
    """``mean((Att-hat - Att)²)`` over the ``L×d_v`` outputs for one feature draw (bidirectional, renormalised).

    Features of ``q/d^{1/4}`` and ``k/d^{1/4}`` with ``m`` projections of kind ``projection`` (``iid``,
    ``orthogonal``: R-ORF blocks with chi norms, ``orthogonal_sqrt_d``), or the given ``omega`` (then
    ``projection`` only labels it); stabiliser 0. Signed (trig) features can give renormalisers ``<= 0``:
    the estimate is still computed (and counted by :func:`rfkit.estimators.linear_attention`'s
    statistics), the warning is silenced here.
    """
    d = q.shape[-1]
    if exact is None:
        exact = softmax_attention(q, k, v)
    if omega is None:
        omega = replicate_projections(FIG4_PROJECTIONS[projection], 1, m, d, rng)
    fmap = feature_map or FEATURE_MAPS[feature]
    scale = d**-0.25
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPositiveDenominatorWarning)
        est = linear_attention(fmap(q * scale, omega), fmap(k * scale, omega), v)
    return float(np.mean((est - exact) ** 2))


def fig4_sweep(options: dict, rng: np.random.Generator) -> xr.DataArray:
    """Output MSE over (sample, feature, projection, m), ``draws`` feature draws averaged per sample."""
    features = ["trig", "positive"] + (["hyperbolic"] if options["include_hyperbolic"] else [])
    projections = ["iid", options["orthogonal"]]
    ms = list(options["m"])
    mse = np.full((options["samples"], len(features), len(projections), len(ms)), np.nan)
    for s in range(options["samples"]):
        q, k, v = fig4_inputs(options["L"], options["d"], options["c"], rng)
        exact = softmax_attention(q, k, v)
        for a, feature in enumerate(features):
            for b, proj in enumerate(projections):
                for j, m in enumerate(ms):
                    mse[s, a, b, j] = np.mean([fig4_output_mse(q, k, v, feature=feature, projection=proj, m=m,
                                                               rng=rng, exact=exact)
                                               for _ in range(options["draws"])])
    return xr.DataArray(mse, dims=("sample", "feature", "projection", "m"),
                        coords=dict(sample=np.arange(options["samples"]), feature=features,
                                    projection=projections, m=ms), name="output_mse",
                        attrs=dict(long_name="mean over L x d_v outputs of (Att-hat - Att)^2"))


#: Fig 4's values of the options the paper states (App: L = 4096, d = 16, 15 input samples).
FIG4_PAPER = dict(L=4096, d=16, samples=15)


def fig4_caption(options: dict) -> str:
    """Fig 4's regime line (:func:`rfkit.validation.reproductions.layout.regime_caption`)."""
    regime = (f"Q, K with iid N(0, {options['c']:g}²) entries, V iid N(0, 1), L = {options['L']}, d = {options['d']}, "
              f"m in {options['m']}; {options['samples']} input samples as replicates, {options['draws']} feature "
              f"draw(s) each; lines: mean output MSE over the samples, bands: ± 1 sd over the samples")
    return layout.regime_caption("performer.fig4", regime, options, FIG4_OPTIONS, FIG4_PAPER)


@layout.themed()
def _plot_fig4(mse: xr.DataArray, options: dict, path: Path) -> None:
    import seaborn as sns

    df = mse.to_dataframe().reset_index()
    fig, axes = layout.new_figure(1, 2, figsize=(10, 4), sharey=True)
    panels = ((axes[0, 0], "projection", "feature = positive", df[df.feature == "positive"]),
              (axes[0, 1], "feature", f"projection = {options['orthogonal']}",
               df[df.projection == options["orthogonal"]]))
    colours = dict(zip(["iid", options["orthogonal"], "trig", "positive", "hyperbolic"],
                       sns.color_palette(layout.PALETTE, 5), strict=True))
    for ax, hue, title, part in panels:
        sns.lineplot(part, x="m", y="output_mse", hue=hue, errorbar="sd", marker="o", ax=ax, palette=colours)
        ax.set(xscale="log", yscale="log", title=title, ylabel="output MSE", xlabel="m (projections)")
        layout.log_ticks_at(ax.xaxis, options["m"])
    fig.suptitle(f"Performer Fig 4: L={options['L']}, d={options['d']}, c={options['c']}")
    layout.finish(fig, path, fig4_caption(options))


def run_fig4(out, **options) -> dict[str, Path]:
    """R2: output MSE against ``m``, ORF vs iid and trig vs positive (PNG + netCDF)."""
    options = dict(FIG4_OPTIONS, **options)
    if options["orthogonal"] not in ("orthogonal", "orthogonal_sqrt_d"):
        raise ValueError(f"orthogonal must be 'orthogonal' or 'orthogonal_sqrt_d', got {options['orthogonal']!r}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mse = fig4_sweep(options, np.random.default_rng(options["seed"]))
    ds = mse.to_dataset()
    ds["mean"] = mse.mean("sample")
    ds["sd"] = mse.std("sample", ddof=1)
    ds.attrs.update({k: str(v) for k, v in options.items()}, figure="Performer Fig 4")
    paths = {"netcdf": out / "performer_fig4.nc", "png": out / "performer_fig4.png"}
    write_dataset(ds, paths["netcdf"])
    _plot_fig4(mse, options, paths["png"])
    return paths


FIG2_OPTIONS = dict(budget="same_m", n_phi=241, n_l=161, color_scale="log", d=16, m=16, replicates=20_000,
                    mc_lengths=[0.5, 1.0], mc_angles=[1.0, 2.0, 2.5, 2.8], inset_l=1.0, inset_phi_min=2.5, seed=0)
FIG2_DOCS = dict(
    budget="same_m (both estimators use m projections) or same_features (SM+ gets 2m: r doubles)",
    n_phi="grid points in phi over [-pi, pi]", n_l="grid points in l over [-2, 2]",
    color_scale="log or linear colour scale of the surface", d="dimension of the Monte Carlo overlays",
    m="projections of the Monte Carlo overlays", replicates="Monte Carlo draws per overlay point",
    mc_lengths="l of the overlay points", mc_angles="phi of the overlay points (radians)",
    inset_l="l of the inset (low kernel values)", inset_phi_min="inset starts at this phi (radians)",
    seed="root seed of the overlays")
FIG4_OPTIONS = dict(L=1024, d=16, m=[4, 8, 16, 32, 64, 128, 256, 512], c=1.0, samples=15, draws=1,
                    orthogonal="orthogonal", include_hyperbolic=False, seed=0)
FIG4_DOCS = dict(
    L="sequence length (paper: 4096)", d="head dimension (paper: 16)", m="projection counts",
    c="sd of the entries of Q and K (inputs scaled by d^-1/4 inside attention)",
    samples="input samples (paper: 15)", draws="feature draws averaged per input sample",
    orthogonal="orthogonal (R-ORF, chi norms: A.3 ortho_scaling=0) or orthogonal_sqrt_d",
    include_hyperbolic="add the hyperbolic (hyp+) positive estimator as a third curve",
    seed="root seed")

REPRODUCTIONS = [
    Reproduction("performer.fig2", "performer", "Fig 2: MSE ratio r(phi, l) of trig vs positive features",
                 run_fig2, FIG2_OPTIONS, FIG2_DOCS),
    Reproduction("performer.fig4", "performer",
                 "Fig 4: attention output MSE vs m, ORF vs iid and trig vs positive", run_fig4, FIG4_OPTIONS,
                 FIG4_DOCS),
]
