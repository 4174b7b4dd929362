"""Tests of the Figure 1 reproduction (``rfkit reproduce lara.fig1``) and of the ``lara.fig1.*`` claims."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import rfkit.estimators  # noqa: F401
from rfkit.estimators import softmax_attention
from rfkit.estimators.lara import lara_attention
from rfkit.validation import engine
from rfkit.validation.claims.lara import performance
from rfkit.validation.claims.lara.inputs import attention_inputs
from rfkit.validation.reproductions import get_reproduction
from rfkit.validation.reproductions.lara import fig1_heads, run_fig1


def test_fig1_heads_shapes_and_reproducibility():
    a = fig1_heads(16, [2, 4], np.random.default_rng(0), heads=2, d=8)
    b = fig1_heads(16, [2, 4], np.random.default_rng(0), heads=2, d=8)
    assert a["RFA"].shape == (2, 2) and a["LARA"].shape == (2, 2) and a["RA"].shape == (2,)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
        assert (a[name] >= 0).all()


def test_fig1_lara_mse_is_the_per_element_error():
    """The LARA entry equals the per-element MSE of lara_attention recomputed by hand on the same draws."""
    rng = np.random.default_rng(3)
    heads = fig1_heads(16, [4], rng, heads=1, d=8, generator="gauss")
    rng = np.random.default_rng(3)
    q, k, v = attention_inputs("gauss", rng, 16, 16, 8, 8, 2.0)
    exact = softmax_attention(q, k, v, scale=1.0)
    from rfkit.estimators.ra import ra_attention
    from rfkit.estimators.rfa import rfa_attention

    ra_attention(q, k, v, num_samples=1, rng=rng)
    rfa_attention(q, k, v, num_samples=4, rng=rng)
    y = lara_attention(q, k, v, C=4, rng=rng, uneven="adaptive")
    assert heads["LARA"][0, 0] == pytest.approx(float(np.mean((y - exact) ** 2)), rel=1e-12)


def test_run_fig1_writes_png_and_netcdf(tmp_path):
    paths = run_fig1(tmp_path, lengths=[16], samples=[2, 4], heads=2, d=8)
    assert paths["png"].exists() and paths["png"].stat().st_size > 0
    ds = xr.open_dataset(paths["netcdf"])
    assert set(ds.data_vars) == {"RFA", "LARA", "RA"}
    assert ds["RFA"].shape == (1, 2, 2, 2) and list(ds["mode"].values) == ["train", "eval"]
    assert ds["RA"].shape == (1, 2, 2)
    options = get_reproduction("lara.fig1").options
    assert options["lengths"] == [196] and options["d"] == 64 and options["mode"] == "both"


def test_run_fig1_one_mode(tmp_path):
    paths = run_fig1(tmp_path, lengths=[16], samples=[2, 4], heads=2, d=8, mode="eval")
    ds = xr.open_dataset(paths["netcdf"])
    assert list(ds["mode"].values) == ["eval"] and ds["LARA"].shape == (1, 1, 2, 2)


@pytest.mark.slow
@pytest.mark.parametrize("claim", [performance.MSE_ORDERING, performance.RFA_PLATEAU, performance.LARA_DECREASING],
                         ids=lambda c: c.id)
def test_fig1_claims_run_at_smoke(claim):
    result = engine.validate([claim], tier="smoke", progress=False).claims[0]
    assert not any(o.error for o in result.outcomes)
