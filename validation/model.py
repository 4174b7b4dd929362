"""The claim model: a claim is declarative data plus a check that measures one sweep cell.

A :class:`Claim` names what a paper asserts (``id`` exactly as in ``../shared/claims/*.md``), under which
hypotheses, how it is swept at each tier, the smallest violation that matters (``tolerance``), and a
``cell`` function. The engine calls ``cell(ctx)`` once per grid point and variant with a
:class:`CellContext` (parameters, a seeded ``rng``, replicate count, the test level) and gets back
:class:`~rfkit.validation.stats.Evidence`. Universally quantified claims (bounds, inequalities, "for
every input") also declare a ``search``: it runs once per restart and variant, hunting for a violation
over the hypothesis domain; without it such a claim can never be *supported*.

Verdicts are computed by :mod:`rfkit.validation.engine`; nothing here states one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rfkit.validation.design import DESIGNED_TIERS, tier_points
from rfkit.validation.domain import Axis, Reading, describe, narrowing
from rfkit.validation.stats import combine, padded, sequential_mean

__all__ = ["KINDS", "TIERS", "Claim", "CellContext", "per_tier", "tiers"]

KINDS = ("identity", "expectation", "moment", "inequality", "tail-bound", "rate", "optimality", "complexity",
         "reproduction")
TIERS = ("smoke", "quick", "full")
PAPERS = ("core", "performer", "lara", "eva", "macformer")
#: Names a claim's grid axes may not take: the data variables and dimensions of its results dataset
#: (:func:`rfkit.validation.results.to_dataset`).
RESULT_VARIABLES = ("estimate", "prediction", "stderr", "statistic", "p_value", "resolution", "effect", "upper",
                    "n_samples", "p_adjusted", "seconds", "cell_verdict", "flags", "method", "validity", "extra")
RESERVED_AXES = frozenset({*RESULT_VARIABLES, "variant", "restart"})


def tiers(base, **overrides) -> dict[str, Any]:
    """A per-tier setting written as the quick tier's ``base`` plus each other tier's changes to it:
    ``tiers(dict(m=[16, 64], d=[4]), smoke=dict(m=[16]), full=dict(m=[16, 64, 256]))`` (a grid: the
    overrides replace single axes) or ``tiers(20_000, full=100_000)`` (a budget)."""
    unknown = set(overrides) - set(TIERS)
    if unknown:
        raise ValueError(f"unknown tiers {sorted(unknown)}; expected some of {TIERS}")
    if isinstance(base, Mapping):
        return {t: {**base, **overrides.get(t, {})} for t in TIERS}
    return {t: overrides.get(t, base) for t in TIERS}


def per_tier(value, tier: str):
    """Look ``tier`` up in a per-tier mapping, falling back to the next smaller tier; plain values pass."""
    if not isinstance(value, Mapping) or not set(value) <= set(TIERS):
        return value
    for t in TIERS[: TIERS.index(tier) + 1][::-1]:
        if t in value:
            return value[t]
    raise KeyError(f"no setting for tier {tier!r} or a smaller one in {sorted(value)}")


@dataclass
class CellContext:
    """Everything one cell's check needs. ``rng`` is seeded from the cell's coordinates."""

    claim_id: str
    variant: str
    params: dict[str, Any]
    tier: str
    replicates: int
    alpha: float
    power: float
    tolerance: float
    rng: np.random.Generator
    implementations: Mapping[str, Callable] = field(default_factory=dict)
    backend: str = "numpy"
    device: str = "cpu"
    restart: int | None = None
    planned: int | None = None
    #: Root seed of the run (:meth:`shared_rng`; the cell's own ``rng`` is seeded by the engine).
    seed: int = 0

    def shared_rng(self, label: str = "") -> np.random.Generator:
        """A generator that every reading of this grid point gets alike (one stream per ``label``): common random
        numbers across readings, so that a check can draw the inputs and estimates the readings share once
        (:func:`rfkit.validation.harness.shared`). The readings' tests then depend on each other, which Holm's
        procedure allows."""
        blob = json.dumps([self.claim_id, self.restart, self.params, label], sort_keys=True, default=str).encode()
        digest = hashlib.sha256(blob).digest()
        key = tuple(int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4))
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=key))

    @property
    def test(self) -> dict:
        """Keyword arguments for :mod:`rfkit.validation.stats` procedures: ``alpha``, ``power``, ``tolerance``."""
        return dict(alpha=self.alpha, power=self.power, tolerance=self.tolerance)

    def sub_test(self, parts: int) -> dict:
        """:attr:`test` at the Bonferroni level ``alpha / parts`` of one of ``parts`` sub-tests of the cell
        (combine them with :func:`rfkit.validation.stats.combine`)."""
        return dict(self.test, alpha=self.alpha / parts)

    def mean(self, draw: Callable[[np.random.Generator, int], np.ndarray], prediction: float, **kwargs):
        """A sequential mean cell (:func:`rfkit.validation.stats.sequential_mean`): ``draw(rng, n)`` gives
        ``n`` iid replicates; rounds run until the cell is decided or its budget (``replicates``, which the
        engine may raise for an undecided cell) is spent. Keyword arguments: ``sd``, ``bounds``, ``scale``,
        ``alternative``, ``extra``, ``tolerance`` (default: the claim's)."""
        kwargs.setdefault("tolerance", self.tolerance)
        return sequential_mean(draw, prediction, rng=self.rng, budget=self.replicates,
                               planned=self.planned or self.replicates, alpha=self.alpha, **kwargs)

    def mean_vector(self, draw: Callable[[np.random.Generator, int], np.ndarray], predictions, *, scale, sd=None,
                    bounds=None, extra: dict | None = None):
        """Sequential mean cells of every coordinate of a vector mean, each at level ``alpha/p``
        (:meth:`sub_test`), combined (Bonferroni): ``draw(rng, n)`` returns ``(n, p)`` replicates.

        Every coordinate's sequence is seeded alike, so its rounds see the same draws (computed once and shared):
        the coordinates are dependent, which Bonferroni allows, and the cell costs what its slowest coordinate
        needs. ``scale`` (one or one per coordinate), ``sd`` (per coordinate) or ``bounds`` (``(lo, hi)`` arrays)
        as in :meth:`mean`; a coordinate whose sd is 0 or whose range is a point is deterministic (judged exactly).
        The combined evidence carries what the engine reads to extend an undecided sequential cell (see
        :func:`~rfkit.validation.stats.combine`)."""
        predictions = np.atleast_1d(np.asarray(predictions, dtype=np.float64))
        dims = predictions.size
        scales = np.broadcast_to(np.asarray(scale, dtype=np.float64), (dims,))
        seed = int(self.rng.integers(2**63))
        cache: dict[str, np.ndarray] = {}

        def column(j):
            def draw_j(rng, n):
                key = repr(rng.bit_generator.state)
                if key not in cache:   # every round is kept: the coordinates run one after the other
                    cache[key] = np.asarray(draw(rng, n), dtype=np.float64).reshape(n, dims)
                return cache[key][:, j]
            return draw_j

        planned = self.planned or self.replicates
        parts = []
        for j in range(dims):
            options = {} if sd is None else dict(sd=float(sd[j]))
            if bounds is not None:
                lo, hi = float(bounds[0][j]), float(bounds[1][j])
                options.update(dict(bounds=padded(lo, hi)) if lo < hi else dict(sd=0.0))
            parts.append(sequential_mean(column(j), float(predictions[j]), rng=np.random.default_rng(seed),
                                         budget=self.replicates, planned=planned, scale=float(scales[j]),
                                         **options, **self.sub_test(dims)))
        # combine keeps the engine's budget bookkeeping; the parts share their rounds, so the cell drew the most
        # any part drew
        return dataclasses.replace(combine(parts, extra=extra), n=max(e.n for e in parts))

    def impl(self, role: str, default: Callable) -> Callable:
        """The implementation of ``role`` under test: a user's adapter if given, else ``default``."""
        return self.implementations.get(role, default)


@dataclass(frozen=True)
class Claim:
    """A registered claim (see the module docstring). Per-tier settings are ``{"smoke": .., ...}``."""

    id: str
    source: str
    statement: str
    kind: str
    tolerance: float
    cell: Callable[[CellContext], Any] | None = None
    paper: str = ""
    hypotheses: str = ""
    grid: Mapping[str, Mapping[str, Sequence]] = field(default_factory=dict)
    replicates: Any = 0
    variants: tuple[str, ...] = ("default",)
    variant_notes: Mapping[str, str] = field(default_factory=dict)
    where: Callable[[dict, str], bool] | None = None
    search: Callable[[CellContext], Any] | None = None
    restarts: Any = 0
    #: Settings every search restart reads as ``ctx.params`` (a dict, or :func:`tiers` of dicts): the lists or
    #: depths a search explores at each tier, so that the search never reads ``ctx.tier``.
    search_params: Any = field(default_factory=dict)
    universal: bool = False
    roles: tuple[str, ...] = ()
    untestable: str | None = None
    plot_x: str | None = None
    units: str = ""
    notes: str = ""
    #: The statement's quantified domain (:mod:`rfkit.validation.domain`): the engine supports a reading only
    #: when the cells (and the search, over the axes in ``searched``) cover its domain.
    domain: Mapping[str, Axis] | None = None
    #: Readings of the statement by name (become the variants): a reading with ``narrows`` tests less than the
    #: statement and can never make the claim ``supported``.
    readings: Mapping[str, Reading] | None = None
    #: Axes of the domain that the adversarial ``search`` explores over their whole declared set.
    searched: tuple[str, ...] = ()
    #: Claims about the same estimator or statement, ``{id: how they relate}``, declared on both sides: their
    #: domains and verdicts must tell one story, and the report and ``rfkit show`` link them.
    related: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not self.paper:
            object.__setattr__(self, "paper", self.id.split(".", 1)[0])
        if self.readings:
            object.__setattr__(self, "variants", tuple(self.readings))
            object.__setattr__(self, "variant_notes", {k: r.note for k, r in self.readings.items()})
        if self.domain is not None:
            for reading in (self.readings or {}).values():
                narrowing(self.domain, reading)  # raises on a narrowing outside the domain
            unknown = set(self.searched) - set(self.domain)
            if unknown:
                raise ValueError(f"claim {self.id}: searched axes {sorted(unknown)} are not in its domain")
            if not self.hypotheses:
                object.__setattr__(self, "hypotheses", describe(self.domain))
        elif self.readings or self.searched:
            raise ValueError(f"claim {self.id}: readings and searched axes need a declared domain")
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id}: unknown kind {self.kind!r}; expected one of {KINDS}")
        if self.paper not in PAPERS:
            raise ValueError(f"claim {self.id}: unknown paper {self.paper!r}; expected one of {PAPERS}")
        if not self.id.startswith(self.paper + "."):
            raise ValueError(f"claim {self.id}: id must start with its paper {self.paper!r}")
        if self.cell is None and self.search is None and self.untestable is None:
            raise ValueError(f"claim {self.id}: needs a cell, a search or an `untestable` reason")
        if not self.tolerance > 0:
            raise ValueError(f"claim {self.id}: tolerance must be > 0")
        clashes = {name for tier_axes in map(self.axes, TIERS) for name in tier_axes} & RESERVED_AXES
        if clashes:
            raise ValueError(f"claim {self.id}: grid axes {sorted(clashes)} clash with results variables")

    def __getstate__(self):
        """Pickled without the cache of :meth:`design` (cells travel to dask workers with their claim)."""
        return {k: v for k, v in self.__dict__.items() if k != "_designs"}

    def reading_domain(self, variant: str) -> dict[str, Axis] | None:
        """The domain ``variant`` tests (the claim's, with a narrowing reading's axes swapped in)."""
        if self.domain is None:
            return None
        return narrowing(self.domain, (self.readings or {}).get(variant))

    def narrowed(self, variant: str) -> bool:
        """Whether ``variant`` is a declared narrowing of the statement."""
        reading = (self.readings or {}).get(variant)
        return bool(reading is not None and reading.narrows)

    def beside(self, variant: str) -> bool:
        """Whether ``variant`` is a reading the statement's words do not make (reported beside the verdict)."""
        reading = (self.readings or {}).get(variant)
        return bool(reading is not None and reading.beside)

    def role(self, variant: str) -> str:
        """How ``variant`` enters the verdict: "narrowed", "beside the verdict" or "decides" (``rfkit show`` and the
        report's claim pages print it)."""
        return "narrowed" if self.narrowed(variant) else "beside the verdict" if self.beside(variant) else "decides"

    def deciding(self) -> list[str]:
        """The readings that decide the verdict together: neither narrowed nor reported beside it."""
        return [v for v in self.variants if not self.narrowed(v) and not self.beside(v)]

    def declaration(self) -> dict:
        """The claim as JSON-able data: what it states, its domain and readings, and each tier's design."""
        def axis(a):
            return dict(type=type(a).__name__, set=a.describe(), words=a.words,
                        **{k: v for k, v in dataclasses.asdict(a).items() if k != "words"})

        return dict(
            id=self.id, paper=self.paper, source=self.source, statement=self.statement, kind=self.kind,
            tolerance=self.tolerance, units=self.units, hypotheses=self.hypotheses, universal=self.universal,
            domain=None if self.domain is None else {k: axis(a) for k, a in self.domain.items()},
            readings={v: dict(note=self.variant_notes.get(v, ""), words=(self.readings or {}).get(v, Reading()).words,
                              beside=self.beside(v), narrows={
                k: axis(a) for k, a in ((self.readings or {}).get(v, Reading()).narrows.items())})
                for v in self.variants},
            searched=list(self.searched), related=dict(self.related), roles=list(self.roles),
            untestable=self.untestable, notes=self.notes,
            tiers={t: dict(grid=self.axes(t), replicates=self.n_replicates(t), restarts=self.n_restarts(t),
                           search_params=self.search_settings(t),
                           cells={v: len(self.cells(t, v)) for v in self.variants},
                           design={v: self.design(t, v)[1] for v in self.variants}) for t in TIERS})

    def axes(self, tier: str) -> dict[str, list]:
        """The sweep axes and their values at ``tier``."""
        return {k: list(v) for k, v in per_tier(self.grid, tier).items()} if self.grid else {}

    def cells(self, tier: str, variant: str) -> list[dict]:
        """Grid points of ``tier`` inside the hypothesis domain (``where``) for ``variant``: the product of the
        tier's axes, or at the full tier a covering design of a large one (:mod:`rfkit.validation.design`)."""
        return self.design(tier, variant)[0]

    def design(self, tier: str, variant: str) -> tuple[list[dict], str]:
        """``(points, description)`` of the grid ``tier`` runs for ``variant`` (computed once per claim)."""
        cache = self.__dict__.setdefault("_designs", {})
        if (tier, variant) not in cache:
            if self.cell is None:
                cache[tier, variant] = [], "no grid cells"
            else:
                seeds = self.cells("quick", variant) if tier in DESIGNED_TIERS else ()
                cache[tier, variant] = tier_points(self.axes(tier), lambda p: self.where is None or
                                                   self.where(p, variant), tier=tier, seeds=seeds)
        points, text = cache[tier, variant]
        return [dict(p) for p in points], text

    def search_settings(self, tier: str) -> dict:
        """The ``ctx.params`` of every search restart at ``tier`` (empty without a search)."""
        return dict(per_tier(self.search_params, tier)) if self.search is not None and self.search_params else {}

    def n_restarts(self, tier: str) -> int:
        return int(per_tier(self.restarts, tier)) if self.search is not None else 0

    def n_replicates(self, tier: str) -> int:
        return int(per_tier(self.replicates, tier))
