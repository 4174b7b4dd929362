"""Performer reproductions R1 (Fig 2) and R2 (Fig 4) at a tiny size: files, limits, shared computations."""

import math

import numpy as np
import xarray as xr

from rfkit.theory.softmax import mse_ratio
from rfkit.validation.reproductions import get_reproduction, parse_options
from rfkit.validation.reproductions.performer import coupled_projections, fig2_surface


def test_fig2_writes_png_and_netcdf_with_limits_not_nan(tmp_path):
    rep = get_reproduction("performer.fig2")
    options = parse_options(rep, ["n_phi=41", "n_l=21", "replicates=2000", "mc_angles=2.5,2.9", "d=4", "m=2"])
    paths = rep.run(tmp_path, **options)
    assert paths["png"].stat().st_size > 10_000
    with xr.open_dataset(paths["netcdf"]) as ds:
        r = ds["r"].values
        assert not np.isnan(r).any()
        assert np.isinf(r[:, 0]).all()  # φ = -π: MSE_+ = 0 (l = 0: the limit l -> 0 at φ = -π)
        assert (r[10, 1:-1] == 0).all()  # l = 0, |φ| < π: the limit l -> 0
        np.testing.assert_allclose(r, r[::-1, ::-1], rtol=1e-9)  # symmetric under (φ, l) -> (-φ, -l)
        assert ds["mc_mse_trig"].size == 4


def test_fig2_surface_is_the_theory_ratio():
    phis, lengths = np.array([0.5, 2.0, 3.0]), np.array([0.25, 1.0])
    surface = fig2_surface(phis, lengths, "same_features")
    np.testing.assert_array_equal(surface.values, mse_ratio(phis[None, :], lengths[:, None], "same_features"))


def test_fig4_writes_png_and_netcdf(tmp_path):
    rep = get_reproduction("performer.fig4")
    options = parse_options(rep, ["L=32", "d=4", "m=2,8", "samples=3", "include_hyperbolic=true"])
    paths = rep.run(tmp_path, **options)
    assert paths["png"].stat().st_size > 10_000
    with xr.open_dataset(paths["netcdf"]) as ds:
        assert dict(ds["output_mse"].sizes) == {"sample": 3, "feature": 3, "projection": 2, "m": 2}
        assert np.isfinite(ds["mean"].values).all() and (ds["output_mse"].values > 0).all()


def test_coupled_projections_have_the_orf_law_and_share_the_gaussian():
    rng = np.random.default_rng(6_021_023_000_000_000_000)
    iid, ort = zip(*(coupled_projections(6, 3, rng) for _ in range(4000)), strict=True)
    iid, ort = np.array(iid), np.array(ort)
    for start in (0, 3):  # blocks of d rows: exactly orthogonal, norms equal to the Gaussian rows'
        block = ort[:, start:start + 3]
        gram = block @ np.swapaxes(block, -1, -2)
        np.testing.assert_allclose(gram * (1 - np.eye(3)), 0.0, atol=1e-10)
        np.testing.assert_allclose(np.linalg.norm(block, axis=-1), np.linalg.norm(iid[:, start:start + 3], axis=-1))
    np.testing.assert_allclose(ort[:, 0], iid[:, 0])  # the first row of each block is the Gaussian row itself
    # Haar directions: the second row's first coordinate is symmetric (mean 0 to 5 standard errors)
    second = ort[:, 1, 0] / np.linalg.norm(ort[:, 1], axis=-1)
    assert abs(second.mean()) < 5 / math.sqrt(3 * len(second))
