"""Results as data: one ``xarray.Dataset`` per claim, ``verdicts.json`` for the run.

Dataset layout (DESIGN "Results"):

* dimensions ``variant`` and one per sweep axis of the tier (``d``, ``L``, ``m``, ...); cells outside the
  hypothesis domain are missing (nan, ``cell_verdict = "outside-domain"``);
* data variables :data:`rfkit.validation.model.RESULT_VARIABLES`: ``estimate``, ``prediction``, ``stderr``,
  ``statistic``, ``p_value``, ``p_adjusted``, ``resolution``, ``effect``, ``upper``, ``n_samples`` (the evidence's
  ``n``), ``seconds``, ``cell_verdict``, ``flags``, ``method``, ``validity`` (``exact``, ``non-asymptotic``,
  ``asymptotic``), ``extra`` (JSON);
* adversarial search restarts on their own dimension ``restart``: ``search_margin``,
  ``search_p_value``, ``search_effect``, ``search_point`` (JSON);
* attributes ``claim_id``, ``paper``, ``kind``, ``verdict``, ``reason``, ``alpha``, ``tier``, ``seed``,
  ``rfkit_version``, ``created``, ``tolerance``, ``units``, ``statement``, ``source``, ``hypotheses``,
  ``variant_verdicts`` and ``witness`` (JSON), ``validity`` (of a supported verdict, else "").
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import xarray as xr

from rfkit.validation.engine import ClaimResult, RunResult, _jsonable
from rfkit.validation.model import RESULT_VARIABLES

__all__ = ["to_dataset", "cell_verdict", "write_run", "load_dataset"]

#: Text variables, and numeric ones the engine computes; every other variable of
#: :data:`~rfkit.validation.model.RESULT_VARIABLES` is an ``Evidence`` field.
_TEXT = ("cell_verdict", "flags", "method", "validity", "extra")
_COMPUTED = ("p_adjusted", "seconds")
#: Variable name -> ``Evidence`` field (``n`` is stored as ``n_samples``: ``n`` is a common axis name).
_FROM_EVIDENCE = {name: "n" if name == "n_samples" else name for name in RESULT_VARIABLES
                  if name not in _TEXT + _COMPUTED}


def cell_verdict(result: ClaimResult, i: int) -> str:
    """Why cell ``i`` does or does not support the claim."""
    o = result.outcomes[i]
    if o.error:
        return "error"
    ev = o.evidence
    tol = result.claim.tolerance
    if result.reject[i]:
        return "violation"
    if ev.flags:
        return "flagged"
    if ev.upper <= tol:
        return "ok"
    return "underpowered" if not ev.resolution <= tol else "undecided"


def _coord(values: list) -> np.ndarray:
    if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values):
        return np.asarray(values)
    return np.asarray([str(v) for v in values], dtype=object)


def to_dataset(result: ClaimResult) -> xr.Dataset:
    """The claim's evidence as a labelled dataset (see the module docstring)."""
    claim = result.claim
    axes = claim.axes(result.tier)
    variants = list(claim.variants)
    dims = ("variant", *axes)
    shape = (len(variants), *(len(v) for v in axes.values()))
    num = {k: np.full(shape, np.nan) for k in (*_FROM_EVIDENCE, *_COMPUTED)}
    text = {k: np.full(shape, "", dtype=object) for k in _TEXT}
    text["cell_verdict"][...] = "outside-domain"
    restarts = max((o.spec.restart + 1 for o in result.outcomes if o.spec.kind == "search"), default=0)
    search_num = {k: np.full((len(variants), restarts), np.nan) for k in ("margin", "p_value", "effect")}
    search_point = np.full((len(variants), restarts), "", dtype=object)
    for i, o in enumerate(result.outcomes):
        v = variants.index(o.spec.variant)
        ev = o.evidence
        if o.spec.kind == "search":
            if ev is not None:
                search_num["margin"][v, o.spec.restart] = ev.estimate
                search_num["p_value"][v, o.spec.restart] = ev.p_value
                search_num["effect"][v, o.spec.restart] = ev.effect
                search_point[v, o.spec.restart] = json.dumps(_jsonable(ev.extra))
            continue
        idx = (v, *(list(axes[k]).index(o.spec.params[k]) for k in axes))
        num["seconds"][idx] = o.seconds
        num["p_adjusted"][idx] = result.p_adjusted[i]
        text["cell_verdict"][idx] = cell_verdict(result, i)
        if ev is None:
            text["flags"][idx] = o.error or ""
            continue
        for name, field in _FROM_EVIDENCE.items():
            num[name][idx] = getattr(ev, field)
        text["flags"][idx] = "; ".join(ev.flags)
        text["method"][idx] = ev.method
        text["validity"][idx] = ev.validity
        text["extra"][idx] = json.dumps(_jsonable(ev.extra))
    data = {k: (dims, a) for k, a in {**num, **text}.items()}
    if restarts:
        for k, a in search_num.items():
            data[f"search_{k}"] = (("variant", "restart"), a)
        data["search_point"] = (("variant", "restart"), search_point)
    coords = {"variant": _coord(variants), **{k: _coord(v) for k, v in axes.items()}}
    attrs = dict(claim_id=claim.id, paper=claim.paper, kind=claim.kind, verdict=result.verdict,
                 reason=result.reason, alpha=result.alpha, tier=result.tier, seed=result.seed,
                 rfkit_version=result.version, created=result.created, tolerance=claim.tolerance,
                 units=claim.units, statement=claim.statement, source=claim.source, hypotheses=claim.hypotheses,
                 variant_verdicts=json.dumps({k: v.verdict for k, v in result.variants.items()}),
                 witness=json.dumps(_jsonable(result.witness)), validity=result.validity or "",
                 holds_on=result.holds_on or "", coverage=json.dumps(result.coverage),
                 resolution=float(result.resolution) if math.isfinite(result.resolution) else "inf")
    return xr.Dataset(data, coords=coords, attrs=attrs)


def write_run(run: RunResult, out: Path) -> dict[str, Path]:
    """Write ``results/<id>.nc`` for every claim and ``verdicts.json``; return the paths."""
    out = Path(out)
    (out / "results").mkdir(parents=True, exist_ok=True)
    paths = {}
    for result in run.claims:
        path = out / "results" / f"{result.claim.id}.nc"
        result.dataset.to_netcdf(path, engine="h5netcdf")
        paths[result.claim.id] = path
    verdicts = out / "verdicts.json"
    verdicts.write_text(json.dumps(_jsonable(run.verdicts()), indent=2) + "\n")
    paths["verdicts.json"] = verdicts
    return paths


def load_dataset(path) -> xr.Dataset:
    """Open a result written by :func:`write_run` (loaded into memory)."""
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        return ds.load()
