"""Cells: plan a claim's sweep cells, seed them, run one, and extend the undecided ones.

This module is everything a cell's evidence depends on besides the claim's own code, so it (with what it imports)
is what a checkpoint's per-claim digest covers (:mod:`rfkit.validation.checkpoint`): edits to how verdicts are
decided, reported or shown (:mod:`rfkit.validation.engine`, results, reports) leave stored cells valid.

Seeding. Every cell gets its own ``SeedSequence(root_seed, spawn_key=H(claim, variant, kind, restart,
params))`` where ``H`` is a SHA-256 of the cell's coordinates. Results therefore depend only on the root
seed and the cell, never on scheduling order or the number of workers. The one exception is what is
measured on the machine itself: the CPU times of complexity claims (their exact operation counts and
traced memory are reproducible).

Budgets. A sequential cell (:meth:`~rfkit.validation.model.CellContext.mean`) draws replicates in rounds and
stops when decided, so most cells spend a fraction of their planned budget. After all cells ran, the
engine gives each claim's unspent budget, plus a reserve of :data:`RESERVE` times its planned sequential
budget, to the claim's sequential cells that spent their budget undecided (at most :data:`MAX_EXTENSION`
times a cell's plan; not those whose flags more replicates cannot lift, :data:`NOT_EXTENDED`, nor those of readings
reported beside the verdict, which the engine leaves out) and runs them again. Their rounds are seeded by the
round index, so the re-run repeats the first rounds and continues; the extension depends only on outcomes, so
results stay identical for a seed whatever the worker count. Stopping later is valid because confidence sequences
cover at every time simultaneously.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rfkit.validation.model import TIERS, CellContext, Claim
from rfkit.validation.stats import Evidence

__all__ = ["CellSpec", "CellOutcome", "plan", "run_cell", "extensions", "spec_from_witness", "BACKENDS",
           "backend_implementations", "RESERVE", "MAX_EXTENSION", "NOT_EXTENDED"]

#: Per tier, the budget a claim may add to its undecided sequential cells, as a fraction of its planned
#: sequential budget (on top of what its decided cells left unspent).
RESERVE = {"smoke": 0.0, "quick": 1.0, "full": 2.0}
#: Largest multiple of its planned budget one sequential cell may be given.
MAX_EXTENSION = 8
#: Flags more replicates of the same draws cannot lift, so the reserve is not spent on them: non-finite or degenerate
#: replicates, an infinite variance, and a tail index below 3 (Hill's estimator converges to the law's index, a
#: property of the law, not of the sample size; at the eva full tier two EVA13 cells of index 1.7 and 1.9 were being
#: extended 8x, one of them 446 CPU-s at its plan, so up to an hour, to stay flagged). One large replicate's share of
#: the variance and a sample's skewness do shrink with more replicates: those cells are extended.
NOT_EXTENDED = ("non-finite", "infinite", "degenerate", "heavy tails (tail index")


def _spawn_key(*parts: Any) -> tuple[int, ...]:
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(blob).digest()
    return tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4))


BACKENDS = ("numpy", "torch")


@functools.cache
def backend_implementations(backend: str, device: str = "cpu") -> Mapping[str, Callable]:
    """The roles an execution backend runs (``{}`` for numpy, rfkit's own code): built inside each cell's
    process from ``backend``/``device``, so nothing but these two strings travels to dask workers."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "numpy":
        return {}
    from rfkit.validation.backends import implementations

    return implementations(device)


@dataclass(frozen=True)
class CellSpec:
    """One unit of work: a grid point (``kind="grid"``) or a search restart (``kind="search"``)."""

    claim: Claim
    variant: str
    params: Mapping[str, Any]
    tier: str
    seed: int
    kind: str = "grid"
    restart: int | None = None
    alpha: float = 1e-3
    power: float = 0.8
    backend: str = "numpy"
    device: str = "cpu"
    implementations: Mapping[str, Callable] = field(default_factory=dict)
    budget: int | None = None

    @property
    def replicates(self) -> int:
        """Replicates this cell may draw: the tier's plan, or the engine's extension of it."""
        return self.budget if self.budget is not None else self.claim.n_replicates(self.tier)

    @property
    def key(self) -> str:
        """The cell's coordinates as a string: unique within a run."""
        return json.dumps([self.claim.id, self.variant, self.kind, self.restart, dict(self.params)],
                          sort_keys=True, default=str)

    @property
    def spawn_key(self) -> tuple[int, ...]:
        return _spawn_key(self.claim.id, self.variant, self.kind, self.restart, dict(self.params))

    def context(self) -> CellContext:
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=self.spawn_key))
        impls = {**backend_implementations(self.backend, self.device), **self.implementations}
        return CellContext(self.claim.id, self.variant, dict(self.params), self.tier, self.replicates, self.alpha,
                           self.power, self.claim.tolerance, rng, impls, self.backend, self.device, self.restart,
                           self.claim.n_replicates(self.tier), self.seed)

    def describe(self) -> dict:
        """JSON-able coordinates of this cell (enough to re-run it: see :func:`spec_from_witness`)."""
        return dict(claim_id=self.claim.id, variant=self.variant, kind=self.kind, restart=self.restart,
                    params=dict(self.params), tier=self.tier, seed=self.seed, alpha_cell=self.alpha,
                    power=self.power, replicates=self.replicates, budget=self.budget, backend=self.backend,
                    device=self.device, implementations=sorted(self.implementations))


@dataclass
class CellOutcome:
    """A cell's evidence (``None`` with ``error`` when its check raised), its wall ``seconds`` and the CPU seconds of
    its process (``time.process_time``: the single-process cost, robust to other load on the machine)."""

    spec: CellSpec
    evidence: Evidence | None
    seconds: float
    error: str | None = None
    cpu_seconds: float = 0.0


def run_cell(spec: CellSpec) -> CellOutcome:
    """Run one cell's check (top-level and picklable: the unit of work on dask workers)."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn = spec.claim.cell if spec.kind == "grid" else spec.claim.search
    try:
        evidence = fn(spec.context())
        if not isinstance(evidence, Evidence):
            raise TypeError(f"check of {spec.claim.id} returned {type(evidence).__name__}, not Evidence")
        return CellOutcome(spec, evidence, time.perf_counter() - t0, None, time.process_time() - c0)
    except Exception as exc:  # a failing check is reported, never turned into a verdict silently
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return CellOutcome(spec, None, time.perf_counter() - t0, tb, time.process_time() - c0)


def plan(claim: Claim, *, tier: str, seed: int, alpha: float = 1e-3, power: float = 0.8,
         backend: str = "numpy", device: str = "cpu",
         implementations: Mapping[str, Callable] | None = None) -> list[CellSpec]:
    """All cells of one claim at ``tier``; the Bonferroni level ``alpha / n_cells`` goes to each."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; expected one of {TIERS}")
    # grouped by grid point, readings in their order within a point: checks that share work across the readings of
    # a point (CellContext.shared_rng) find it still cached, in-process and in a dask batch alike
    by_point: dict[str, list] = {}
    for v in claim.variants:
        for p in claim.cells(tier, v):
            by_point.setdefault(json.dumps(p, sort_keys=True, default=str), []).append((v, "grid", None, p))
    points = [cell for cells in by_point.values() for cell in cells]
    points += [(v, "search", r, claim.search_settings(tier)) for v in claim.variants
               for r in range(claim.n_restarts(tier))]
    alpha_cell = alpha / max(len(points), 1)
    impls = dict(implementations or {})
    return [CellSpec(claim, v, p, tier, seed, kind, r, alpha_cell, power, backend, device, impls)
            for v, kind, r, p in points]


def extensions(outcomes: list[CellOutcome]) -> list[CellSpec]:
    """Cells of one claim to run again with more budget (see "Budgets" in the module docstring).

    The claim's pool is its planned sequential budget times ``1 + RESERVE[tier]`` minus what its sequential
    cells used; it is shared equally by the cells that spent their budget undecided, each capped at
    ``MAX_EXTENSION`` times its plan. Cells that would gain less than half their plan are left as they are.
    """
    seq = [o for o in outcomes if o.evidence is not None and o.evidence.extra.get("sequential")]
    if not seq:
        return []
    tier = seq[0].spec.tier
    planned = sum(int(o.evidence.extra["planned"]) for o in seq)
    used = sum(int(o.evidence.extra.get("used", o.evidence.n)) for o in seq)
    pool = planned * (1.0 + RESERVE.get(tier, 0.0)) - used
    undecided = [o for o in seq if o.evidence.extra.get("status") == "budget spent"
                 and not any(f.startswith(NOT_EXTENDED) for f in o.evidence.flags)]
    if not undecided or pool <= 0:
        return []
    share = pool / len(undecided)
    out = []
    for o in undecided:
        plan_i, budget_i = int(o.evidence.extra["planned"]), int(o.evidence.extra["budget"])
        new = int(min(MAX_EXTENSION * plan_i, budget_i + share))
        if new - budget_i >= plan_i / 2:
            out.append(replace(o.spec, budget=new))
    return out


def spec_from_witness(witness: Mapping, claim: Claim) -> CellSpec:
    """Rebuild the cell that produced a witness (rfkit's own implementations)."""
    return CellSpec(claim, witness["variant"], dict(witness["params"]), witness["tier"], int(witness["seed"]),
                    witness["kind"], witness["restart"], float(witness["alpha_cell"]), float(witness["power"]),
                    witness.get("backend", "numpy"), witness.get("device", "cpu"), budget=witness.get("budget"))
