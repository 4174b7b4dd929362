"""Results as data: the result classes (:class:`ClaimResult`, :class:`RunResult`, which the engine returns),
one ``xarray.Dataset`` per claim, ``verdicts.json`` for the run. The engine imports this module, never the
reverse.

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
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr

from rfkit.validation.domain import coverage
from rfkit.validation.model import RESULT_VARIABLES, Claim
from rfkit.validation.netcdf import load_dataset, write_dataset
from rfkit.validation.stats import VALIDITY

if TYPE_CHECKING:  # annotations only: the engine imports this module, never the reverse
    from rfkit.validation.cells import CellOutcome
    from rfkit.validation.engine import VariantVerdict
__all__ = ["COVERAGE_HEAD", "format_number", "jsonable", "ClaimResult", "RunResult", "to_dataset", "cell_verdict",
           "write_run", "write_dataset", "load_dataset"]


def jsonable(obj):
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else str(float(obj))
    if isinstance(obj, (np.integer, np.bool_)):
        return obj.item()
    return obj


#: Columns of :meth:`ClaimResult.coverage_rows` (the reports' "domain and coverage" tables).
COVERAGE_HEAD = ["reading", "axis", "statement's words", "declared set", "tested", "missing"]


def format_number(x) -> str:
    """A resolution or effect for a table: 3 significant digits, "inf", or "-" for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.3g}"


@dataclass
class ClaimResult:
    """A claim's verdict with all its evidence; ``dataset`` gives the xarray view."""

    claim: Claim
    tier: str
    seed: int
    alpha: float
    verdict: str
    reason: str
    variants: dict[str, VariantVerdict]
    outcomes: list[CellOutcome]
    reject: np.ndarray
    p_adjusted: np.ndarray
    seconds: float
    created: str
    version: str
    #: CPU seconds of the claim's cells (their processes' ``time.process_time``): its single-process cost.
    cpu_seconds: float = 0.0

    @property
    def witness(self) -> dict | None:
        """The first refuting cell of a reading that decides or narrows (never one reported beside the verdict)."""
        for name, v in self.variants.items():
            if v.witness is not None and not self.claim.beside(name):
                return v.witness
        return None

    @property
    def resolution(self) -> float:
        """The confidence radius of the verdict: the worst of the readings that decide it (those reported beside it
        keep their own, in ``variants``)."""
        deciding = [name for name in self.claim.deciding() if name in self.variants] or list(self.variants)
        return max((self.variants[name].resolution for name in deciding), default=math.inf)

    @property
    def failed(self) -> bool:
        return any(o.error for o in self.outcomes)

    @property
    def cause(self) -> str | None:
        """Why an inconclusive verdict is one: ``reading`` when readings disagree, else the variants' cause
        (``power`` first: see :attr:`VariantVerdict.cause`); ``None`` for a decided claim."""
        if self.verdict != "inconclusive":
            return None
        full = {k: v for k, v in self.variants.items() if k in self.claim.deciding()}
        if not full:
            return "coverage"
        if len({v.verdict for v in full.values()}) > 1:
            return "reading"
        causes = [v.cause for v in full.values() if v.cause]
        for kind in ("power", "error", "evidence", "coverage", "scope"):
            if kind in causes:
                return kind
        return "scope"

    @property
    def holds_on(self) -> str | None:
        """Where a refuted claim holds: the sub-domain its cells support, and the narrowed readings that are
        supported (``None`` when the claim is not refuted or nothing supported remains)."""
        if self.verdict != "refuted":
            return None
        parts = [f"{k}: {v.holds_on}" if len(self.variants) > 1 else v.holds_on
                 for k, v in self.variants.items() if v.holds_on]
        parts += [f"the reading {k} ({self.claim.variant_notes.get(k, '')})" for k, v in self.variants.items()
                  if self.claim.narrowed(k) and v.verdict == "supported"]
        return "; ".join(parts) or None

    @property
    def coverage(self) -> dict[str, str | None]:
        """Per reading, the coverage of its declared domain (``None`` without a declared domain)."""
        return {k: v.coverage for k, v in self.variants.items()}

    @property
    def validity(self) -> str | None:
        """The weakest validity class a ``supported`` verdict rests on (``None`` otherwise)."""
        if self.verdict != "supported":
            return None
        return max((v.validity or "exact" for v in self.variants.values()), key=VALIDITY.index)

    @property
    def dataset(self):
        return to_dataset(self)

    def coverage_rows(self) -> list[list[str]]:
        """One row per reading and axis of the claim's declared domain (:data:`COVERAGE_HEAD`): what the run's
        cells covered."""
        rows = []
        for variant in self.claim.variants:
            domain = self.claim.reading_domain(variant)
            specs = [o.spec for o in self.outcomes if o.spec.variant == variant]
            if domain is None or not specs:
                continue
            searched = self.claim.searched if any(s.kind == "search" for s in specs) else ()
            for name, cov in zip(domain, coverage(domain, [s.params for s in specs if s.kind == "grid"], searched),
                                 strict=True):
                tag = variant + (" (narrowed)" if self.claim.narrowed(variant) else "")
                rows.append([tag, name, domain[name].words, domain[name].describe(),
                             cov.tested + (f" ({cov.declared})" if cov.declared else ""),
                             ", ".join(cov.missing) or "—"])
        return rows

    def summary(self) -> dict:
        """The ``verdicts.json`` entry of this claim."""
        return dict(id=self.claim.id, paper=self.claim.paper, kind=self.claim.kind, verdict=self.verdict,
                    variants={k: v.verdict for k, v in self.variants.items()}, validity=self.validity,
                    cause=self.cause, holds_on=self.holds_on,
                    witness=self.witness,
                    resolution=jsonable(self.resolution), tolerance=self.claim.tolerance, cells=len(self.outcomes),
                    seconds=round(self.seconds, 4), cpu_seconds=round(self.cpu_seconds, 4), reason=self.reason,
                    variant_reasons={k: v.reason for k, v in self.variants.items()})


@dataclass
class RunResult:
    claims: list[ClaimResult]
    tier: str
    seed: int
    alpha: float
    created: str
    version: str
    seconds: float
    #: Cells taken from a checkpoint (``validate(..., resume=True)``) and stored cells rerun because their claim's
    #: code changed; ``seconds`` is this invocation's wall time, each claim's ``seconds`` its cells' time.
    resumed: int = 0
    stale: int = 0
    #: The git commit of the code that ran (``+dirty`` with local changes), ``None`` outside a checkout.
    commit: str | None = None
    #: Where the cells ran: worker processes (1: in-process; a dask cluster's worker count), and the CPUs this process
    #: could use.
    workers: int = 1
    cpus: int | None = None
    #: Wall seconds of the whole command (cells, results, reports and figures), when a command recorded it.
    command_seconds: float | None = None

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.claims)

    def counts(self) -> dict[str, Counter]:
        """Per paper (and ``all``): how many claims got each verdict."""
        counts: dict[str, Counter] = {}
        for c in self.claims:
            counts.setdefault(c.claim.paper, Counter())[c.verdict] += 1
            counts.setdefault("all", Counter())[c.verdict] += 1
        return counts

    def verdicts(self) -> dict:
        """The ``verdicts.json`` document."""
        doc = dict(rfkit_version=self.version, commit=self.commit, seed=self.seed, tier=self.tier, alpha=self.alpha,
                   created=self.created, seconds=round(self.seconds, 3), workers=self.workers, cpus=self.cpus,
                   resumed_cells=self.resumed, claims=[c.summary() for c in self.claims])
        if self.command_seconds is not None:
            doc["command_seconds"] = round(self.command_seconds, 3)
        return doc

    def table(self):
        """One row per claim (a pandas DataFrame)."""
        import pandas as pd

        return pd.DataFrame([dict(id=c.claim.id, paper=c.claim.paper, kind=c.claim.kind, verdict=c.verdict,
                                  resolution=c.resolution, tolerance=c.claim.tolerance, cells=len(c.outcomes),
                                  seconds=c.seconds, reason=c.reason) for c in self.claims])


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


#: The coordinate of an axis a grid point does not set (a quick-tier point that a full-tier design keeps although the
#: quick grid has fewer axes: :func:`rfkit.validation.design.tier_points`).
UNSET = "unset"


def _index(values: list, value) -> int | None:
    return next((i for i, w in enumerate(values) if isinstance(w, bool) == isinstance(value, bool) and w == value),
                None)


def run_axes(result: ClaimResult) -> dict[str, list]:
    """The dataset's axes: the tier's grid axes, widened by the values (and axes) of the points the run holds that the
    tier's grid lacks; a point without an axis sits at :data:`UNSET` on it."""
    axes = {k: list(v) for k, v in result.claim.axes(result.tier).items()}
    params = [o.spec.params for o in result.outcomes if o.spec.kind == "grid"]
    for p in params:
        for k in p:
            axes.setdefault(k, [])
    for k, values in axes.items():
        for p in params:
            value = p.get(k, UNSET)
            if _index(values, value) is None:
                values.append(value)
    return axes


def to_dataset(result: ClaimResult) -> xr.Dataset:
    """The claim's evidence as a labelled dataset (see the module docstring)."""
    claim = result.claim
    axes = run_axes(result)
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
                search_point[v, o.spec.restart] = json.dumps(jsonable(ev.extra))
            continue
        idx = (v, *(_index(axes[k], o.spec.params.get(k, UNSET)) for k in axes))
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
        text["extra"][idx] = json.dumps(jsonable(ev.extra))
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
                 witness=json.dumps(jsonable(result.witness)), validity=result.validity or "",
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
        write_dataset(result.dataset, path)
        paths[result.claim.id] = path
    paths["verdicts.json"] = write_verdicts(run, out)
    return paths


def write_verdicts(run: RunResult, out: Path) -> Path:
    """Write (or rewrite) ``out/verdicts.json``; return its path."""
    verdicts = Path(out) / "verdicts.json"
    verdicts.write_text(json.dumps(jsonable(run.verdicts()), indent=2) + "\n")
    return verdicts

