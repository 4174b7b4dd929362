r"""Macformer reproduction: Figure 4 of ``004_803b6fd9a1d4a879.txt`` (``rfkit reproduce macformer.fig4``).

The toy RMFA experiment ("Evaluation of RMFA"): random ``Q, K, V`` of shape ``batch × heads × length × d``,
pre-processed by pre-SBN (Algorithm 1 steps 1-2, ``ε = 1e-12``), fed to softmax attention and to ``RMFA_exp``
with ``D`` random features (``p = 2``); each ``(length, D)`` pair is repeated and averaged. Figure 4a is the
log NMSE of RMFA against softmax attention, Figure 4b the log acceleration ratio ``time_softmax / time_RMFA``.

The claims ``macformer.fig4a.*`` draw their data with :func:`fig4_data` and score it with :func:`nmse`
(``macformer.fig4b.*`` time the same two paths). Parameters the paper leaves open are options (register "Protocol"):
data law, pre-SBN readings, draw sharing, NMSE definition, log base, averaging order, softmax implementation,
whether sampling the RMF draw is timed. Times are CPU times of the calling thread with single-threaded BLAS
(:mod:`rfkit.validation.timing`), on the same device and dtype for both paths; pre-SBN is common to both and not
timed. The paper's size (16 × 8 heads, lengths 200…4000, ``D = 2^1…2^12``, 100 repeats) is an option set; the
default is reduced to run in about a minute on 2 cores. The panels are heat maps (no error bars; every repeat is
in the netCDF file); the caption (:func:`fig4_caption`) states the regime.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np
import xarray as xr

from rfkit.estimators import softmax_attention
from rfkit.estimators.ppsbn import presbn
from rfkit.estimators.rmf import draw_rmf, rmfa
from rfkit.validation.netcdf import write_dataset
from rfkit.validation.reproductions import Reproduction, layout
from rfkit.validation.timing import single_threaded_blas

__all__ = ["REPRODUCTIONS", "FIG4_OPTIONS", "fig4_data", "fig4_trial", "fig4_sweep", "nmse", "fig4_caption", "run_fig4"]

DATA_LAWS = ("normal", "uniform_symmetric", "uniform_positive")
SOFTMAX_IMPLS = {"naive": None, "blocked": 256}  # blocked: queries in blocks of 256 rows (O(block·n) memory)


def fig4_data(rng: np.random.Generator, shape: tuple[int, ...], law: str = "normal") -> np.ndarray:
    """One generated array: iid ``N(0, 1)`` (default), ``U(-1, 1)`` or ``U(0, 1)`` entries."""
    if law not in DATA_LAWS:
        raise ValueError(f"unknown data law {law!r}; expected one of {DATA_LAWS}")
    if law == "normal":
        return rng.standard_normal(shape)
    return rng.uniform(-1.0 if law == "uniform_symmetric" else 0.0, 1.0, size=shape)


def nmse(estimate: np.ndarray, target: np.ndarray, definition: str = "global") -> float:
    """``‖Y - A‖²_F/‖A‖²_F`` over the whole output (``global``) or the mean over ``(b, h)`` of per-matrix NMSEs."""
    if definition not in ("global", "per_matrix_mean"):
        raise ValueError(f"unknown nmse definition {definition!r}; expected global or per_matrix_mean")
    err, ref = ((estimate - target) ** 2).sum(axis=(-2, -1)), (target**2).sum(axis=(-2, -1))
    return float(err.sum() / ref.sum() if definition == "global" else (err / ref).mean())


def _timed(fn):
    t0 = time.thread_time()
    out = fn()
    return out, time.thread_time() - t0


def fig4_trial(length: int, features: list[int], *, rng: np.random.Generator, batch: int = 2, heads: int = 2,
               d: int = 64, data: str = "normal", bn_stats: str = "feature_batch", norm_reading: str = "row",
               draw_sharing: str = "shared", softmax_impl: str = "naive", sampling_timed: bool = True,
               nmse_def: str = "global", time_calls: bool = True) -> dict:
    """One repeat at one length for every ``D`` in ``features`` (fresh data and draws; the same data at every D):
    ``dict(nmse=[...], time_softmax=float, time_rmfa=[...])``, times ``nan`` when ``time_calls`` is False."""
    shape = (batch, heads, length, d)
    q, k, v = (fig4_data(rng, shape, data) for _ in range(3))
    pre = presbn(q, k, eps=1e-12, bn_stats=bn_stats, norm_reading=norm_reading)
    groups = {"shared": 1, "per_head": heads, "per_batch_head": batch * heads}[draw_sharing]
    with single_threaded_blas():
        exact, t_soft = _timed(lambda: softmax_attention(pre.q, pre.k, v, block_size=SOFTMAX_IMPLS[softmax_impl]))
        errors, times = [], []
        for num_features in features:
            options = dict(num_features=num_features, rng=rng)
            if not sampling_timed:
                draws = [draw_rmf(num_features, d, rng=rng) for _ in range(groups)]
                options = dict(draw=draws if groups > 1 else draws[0])
            call = functools.partial(rmfa, pre.q, pre.k, v, draw_sharing=draw_sharing, **options)
            with np.errstate(all="ignore"):
                estimate, elapsed = _timed(call)
            errors.append(nmse(estimate, exact, nmse_def))
            times.append(elapsed)
    if not time_calls:
        t_soft, times = np.nan, [np.nan] * len(times)
    return dict(nmse=errors, time_softmax=t_soft, time_rmfa=times)


def fig4_sweep(options: dict, rng: np.random.Generator) -> xr.Dataset:
    """All repeats of the protocol grid: ``nmse (length, D, repeat)``, ``time_softmax (length, repeat)``,
    ``time_rmfa (length, D, repeat)``."""
    lengths, features, repeats = list(options["lengths"]), [2**e for e in options["log2_D"]], options["repeats"]
    keys = ("batch", "heads", "d", "data", "bn_stats", "norm_reading", "draw_sharing", "softmax_impl",
            "sampling_timed", "nmse_def")
    trials = [[fig4_trial(n, features, rng=rng, **{k: options[k] for k in keys}) for _ in range(repeats)]
              for n in lengths]

    def stacked(name: str) -> np.ndarray:  # (length, repeat[, D]) -> (length[, D], repeat)
        values = np.array([[t[name] for t in row] for row in trials])
        return values.transpose(0, 2, 1) if values.ndim == 3 else values

    dims = ("length", "D", "repeat")
    return xr.Dataset({"nmse": (dims, stacked("nmse")), "time_softmax": (("length", "repeat"), stacked("time_softmax")),
                       "time_rmfa": (dims, stacked("time_rmfa"))},
                      coords=dict(length=lengths, D=features, repeat=np.arange(repeats)))


#: The paper's values of the options it states ("Evaluation of RMFA": 16 × 8 heads, d = 64, 100 repeats); its
#: lengths (200 to 4000, "uniformly") are named in the caption, the D grid it leaves open.
FIG4_PAPER = dict(batch=16, heads=8, d=64, repeats=100)


def fig4_caption(options: dict) -> str:
    """Fig 4's regime line (:func:`rfkit.validation.reproductions.layout.regime_caption`)."""
    base = "log10" if options["log_base"] == 10 else "ln"
    regime = (f"Q, K, V {options['data']} entries of shape {options['batch']} × {options['heads']} heads × length × "
              f"{options['d']}, pre-SBN ({options['bn_stats']}, {options['norm_reading']}), lengths "
              f"{options['lengths']} (paper: 200 to 4000), D = 2^e for e in {options['log2_D']}, draws "
              f"{options['draw_sharing']}, softmax {options['softmax_impl']}, NMSE {options['nmse_def']}; each cell: "
              f"{base}, {options['avg_order']} over {options['repeats']} repeats (a heat map: no error bars; the "
              f"repeats are in the netCDF file); CPU times, single-threaded BLAS, sampling timed: "
              f"{options['sampling_timed']}")
    return layout.regime_caption("macformer.fig4", regime, options, FIG4_OPTIONS, FIG4_PAPER)


@layout.themed("white")
def _plot(ds: xr.Dataset, options: dict, path: Path) -> None:
    fig, axes = layout.new_figure(1, 2, figsize=(11, 4.2))
    base = "log10" if options["log_base"] == 10 else "ln"
    for ax, name, title in zip(axes[0], ("log_nmse", "log_acceleration"),
                               (f"(a) error: {base} NMSE", f"(b) acceleration: {base} time ratio"), strict=True):
        values = ds[name].transpose("D", "length")
        mesh = ax.pcolormesh(np.arange(values.length.size), np.arange(values.D.size), values.values,
                             shading="auto", cmap="viridis")
        ax.set_xticks(np.arange(values.length.size), [str(v) for v in values.length.values], rotation=90)
        ax.set_yticks(np.arange(values.D.size), [str(v) for v in values.D.values])
        ax.set(xlabel="length", ylabel="D", title=title)
        fig.colorbar(mesh, ax=ax)
    fig.suptitle(f"Macformer Fig 4 (unsmoothed): {options['batch']}×{options['heads']} heads, d={options['d']}, "
                 f"{options['repeats']} repeats")
    layout.finish(fig, path, fig4_caption(options))


def run_fig4(out, **options) -> dict[str, Path]:
    """Figure 4: log NMSE and log acceleration ratio of RMFA_exp against softmax attention (PNG + netCDF)."""
    options = dict(FIG4_OPTIONS, **options)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ds = fig4_sweep(options, np.random.default_rng(options["seed"]))
    log = np.log10 if options["log_base"] == 10 else np.log

    def average(x):  # over repeats, in the option's order
        return log(x.mean("repeat")) if options["avg_order"] == "log_of_mean" else log(x).mean("repeat")

    ds["log_nmse"], ds["log_acceleration"] = average(ds.nmse), average(ds.time_softmax / ds.time_rmfa)
    ds.attrs.update({k: str(v) for k, v in options.items()}, figure="Macformer Fig 4")
    paths = {"netcdf": out / "macformer_fig4.nc", "png": out / "macformer_fig4.png"}
    write_dataset(ds, paths["netcdf"])
    _plot(ds, options, paths["png"])
    return paths


FIG4_OPTIONS = dict(batch=2, heads=2, d=64, lengths=[200, 400, 600, 800, 1000, 1200], log2_D=list(range(1, 11)),
                    repeats=3, data="normal", bn_stats="feature_batch", norm_reading="row", draw_sharing="shared",
                    softmax_impl="naive", sampling_timed=True, nmse_def="global", log_base=10,
                    avg_order="log_of_mean", seed=0)
FIG4_DOCS = dict(
    batch="batch size (paper: 16)", heads="attention heads (paper: 8)", d="head dimension (paper: 64)",
    lengths="sequence lengths (paper: 200 to 4000, 'uniformly')", log2_D="exponents of D = 2^e (paper: unstated)",
    repeats="repeats per (length, D) (paper: 100)", data="normal, uniform_symmetric or uniform_positive entries",
    bn_stats="pre-SBN statistics reading (rfkit.estimators.ppsbn.BN_STATS)", norm_reading="row, fro or spec",
    draw_sharing="shared (one draw for the whole tensor), per_head or per_batch_head",
    softmax_impl="naive (materialised scores, Figure 2a) or blocked (queries in blocks of 256)",
    sampling_timed="include drawing the RMF features in RMFA's time", nmse_def="global or per_matrix_mean",
    log_base="10 or e (any other value: natural log)", avg_order="log_of_mean or mean_of_log over repeats",
    seed="root seed")

REPRODUCTIONS = [
    Reproduction("macformer.fig4", "macformer",
                 "Fig 4: log NMSE and log acceleration of RMFA_exp vs softmax attention over (length, D)", run_fig4,
                 FIG4_OPTIONS, FIG4_DOCS),
]
