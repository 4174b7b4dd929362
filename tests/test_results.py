"""Results datasets: every grid axis name a claim may use round-trips through netCDF; names that would clash
with the dataset's own variables are refused when the claim is declared."""

import numpy as np
import pytest
import xarray as xr

from rfkit.validation import validate
from rfkit.validation.model import RESERVED_AXES, RESULT_VARIABLES, Claim
from rfkit.validation.results import load_dataset, to_dataset, write_dataset
from rfkit.validation.stats import exact_test


def _claim(axis: str) -> Claim:
    return Claim(id="core.toy.axis", paper="core", source="test", statement="toy", kind="identity",
                 hypotheses="none", tolerance=1e-9, grid={"smoke": {axis: [3, 5]}},
                 cell=lambda ctx: exact_test(np.zeros(2), np.zeros(2), tolerance=1e-9))


def test_axis_named_n_roundtrips_through_netcdf(tmp_path):
    result = validate([_claim("n")], tier="smoke", progress=False).claims[0]
    ds = to_dataset(result)
    assert set(ds.data_vars) == set(RESULT_VARIABLES)
    assert list(ds["n"].values) == [3, 5] and (ds["n_samples"] >= 1).all()
    write_dataset(ds, tmp_path / "x.nc")
    assert list(load_dataset(tmp_path / "x.nc")["n"].values) == [3, 5]


@pytest.mark.parametrize("where", ["dataset", "variable"])
def test_attributes_the_netcdf3_writer_reserves_are_refused_by_name(tmp_path, where):
    # scipy's writer keeps netCDF attributes beside its own fields: an attribute ``mode`` (or ``data`` on a variable)
    # overwrites them and the write fails at close with an unrelated TypeError (seen in CI on lara.fig1)
    ds = xr.Dataset({"a": ("x", np.arange(3.0))})
    if where == "dataset":
        ds.attrs["mode"] = "both"
    else:
        ds["a"].attrs["data"] = "x"
    with pytest.raises(ValueError, match="reserves"):
        write_dataset(ds, tmp_path / "x.nc")


@pytest.mark.parametrize("axis", sorted(RESERVED_AXES))
def test_reserved_axis_names_are_refused(axis):
    with pytest.raises(ValueError, match="clash with results variables"):
        _claim(axis)


def test_claim_resolution_is_the_deciding_readings():
    # lara.eq36 was "supported" with resolution inf: the worst radius of a reading reported beside the verdict
    from rfkit.validation.domain import Choice, Reading
    from rfkit.validation.stats import undecided

    claim = Claim(id="core.toy.beside", paper="core", source="test", statement="toy", kind="identity",
                  hypotheses="none", tolerance=1e-9, grid={"smoke": {"x": [1]}},
                  domain=dict(x=Choice("x", (1,))),
                  readings={"main": Reading("decides"), "other": Reading("beside", beside=True)},
                  cell=lambda ctx: exact_test(0.0, 0.0, tolerance=1e-9) if ctx.variant == "main" else undecided("no"))
    result = validate([claim], tier="smoke", progress=False).claims[0]
    assert result.verdict == "supported" and result.variants["other"].resolution == np.inf
    assert result.resolution == 0.0
