r"""A claim's quantified domain as data, and how much of it a tier's cells cover.

A register statement quantifies over something: "for every ``m >= 1``", "for iid and orthogonal
projections", "for ``z ≠ 0``", "for all inputs ``x ∈ ℝ^d``". A claim declares that domain as a mapping of
named **axes**, each naming the words of the statement it stands for:

* :class:`Range` — a continuous interval, with closed or open (strict) ends, an optional declared
  practical end ``up_to`` for an infinite one, and ``boundaries``: points where the statement degenerates
  (the ``0`` of a strict inequality, a limit) that must be tested explicitly;
* :class:`Integers` — a discrete range with the ``points`` where structure changes (``m = k·d`` and
  ``k·d + 1``), which must be tested, and ``up_to`` for an unbounded one;
* :class:`Choice` — named constructions or a finite set (feature maps, samplers, kernels): every one.

:func:`coverage` compares an axis with the values a tier's cells took on it (or with the adversarial
search, when the claim's search explores the axis) and says what is missing. The engine
(:mod:`rfkit.validation.engine`) supports a reading only when every axis of its domain is covered; a
reading that tests less than the statement declares its narrowing (:class:`Reading`), so its verdict says
so. ``hypotheses`` text is generated from the domain (:func:`describe`).

Coverage is a property of the *design* (which points are tested), not of the outcome; it is computed
from the cells that ran, so a cell the ``where`` filter removes is not covered.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Axis", "Range", "Integers", "Choice", "Reading", "Coverage", "coverage", "describe", "narrowing",
           "domain_coverage"]

#: Two values are the same point of an axis when they agree to this relative precision.
_SAME = 1e-9


def _same(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= _SAME * max(abs(a), abs(b), 1.0)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isinf(v):
            return "∞" if v > 0 else "-∞"
        return f"{v:g}"
    return str(v)


@dataclass(frozen=True)
class Coverage:
    """Whether one axis is covered, and in words what was tested and what is missing."""

    axis: str
    covered: bool
    tested: str
    missing: tuple[str, ...] = ()
    declared: str = ""

    def __str__(self) -> str:
        text = f"{self.axis}: tested {self.tested}"
        if self.missing:
            text += "; missing " + ", ".join(self.missing)
        if self.declared:
            text += f" ({self.declared})"
        return text


@dataclass(frozen=True)
class Axis:
    """One quantified variable of a statement; ``words`` are the statement's words it stands for."""

    words: str

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def cover(self, name: str, values: Sequence, searched: bool) -> Coverage:  # pragma: no cover - abstract
        raise NotImplementedError

    def contains(self, other: Axis) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Range(Axis):
    """A real interval from ``lo`` to ``hi``; ``strict = (lower, upper)`` marks open ends.

    Covered when the tested values reach each end: a closed finite end is tested exactly; an open one is
    approached to within ``near`` of the span (``near·(hi - lo)``; when the other end is infinite, of the span
    to its declared practical end ``up_to``, else ``near·max(|end|, 1)``); an infinite end is reached by the
    declared practical end ``up_to`` (with ``why``), or by an adversarial search over the axis. Every
    ``boundaries`` point is tested exactly.
    """

    lo: float = -math.inf
    hi: float = math.inf
    strict: tuple[bool, bool] = (False, False)
    boundaries: tuple[float, ...] = ()
    up_to: tuple[float | None, float | None] = (None, None)
    why: str = ""
    near: float = 0.05

    def __post_init__(self):
        if not self.lo < self.hi:
            raise ValueError(f"Range needs lo < hi, got [{self.lo}, {self.hi}]")
        for b in self.boundaries:
            if not self.lo <= b <= self.hi:
                raise ValueError(f"boundary {b} lies outside [{self.lo}, {self.hi}]")
        if (math.isinf(self.lo) and self.up_to[0] is not None or math.isinf(self.hi) and self.up_to[1] is not None) \
                and not self.why:
            raise ValueError("a practical end up_to of an infinite range needs its reason (why=...)")

    def describe(self) -> str:
        left = "(" if self.strict[0] or math.isinf(self.lo) else "["
        right = ")" if self.strict[1] or math.isinf(self.hi) else "]"
        text = f"{left}{_fmt(self.lo)}, {_fmt(self.hi)}{right}"
        if self.boundaries:
            text += ", boundary " + ", ".join(map(_fmt, self.boundaries))
        return text

    def _end(self, end: float, other: float, strict: bool, practical: float | None, values: list[float],
             side: int) -> tuple[str | None, str]:
        """``(missing, declared)`` for one end (``side`` -1: lower, +1: upper)."""
        if math.isinf(end):
            if practical is None:
                return f"the unbounded {'lower' if side < 0 else 'upper'} end (no search, no declared up_to)", ""
            reach = min(values) if side < 0 else max(values)
            declared = f"unbounded end tested up to {_fmt(practical)}: {self.why}"
            ok = reach <= practical if side < 0 else reach >= practical
            return (None if ok else f"{_fmt(practical)} (declared practical end)"), declared
        if not strict:
            return (None if any(_same(v, end) for v in values) else f"the end {_fmt(end)}"), ""
        practical_other = self.up_to[1 if side < 0 else 0]
        width = (abs(other - end) if math.isfinite(other) else abs(practical_other - end)
                 if practical_other is not None else max(abs(end), 1.0))
        gap = min(abs(v - end) for v in values)
        return (None if gap <= self.near * width else f"values near the open end {_fmt(end)} "
                f"(closest {_fmt(gap)} away, needs <= {_fmt(self.near * width)})"), ""

    def cover(self, name: str, values: Sequence, searched: bool) -> Coverage:
        if searched:
            return Coverage(name, True, "by adversarial search over " + self.describe())
        vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        inside = [v for v in vals if self.lo <= v <= self.hi]
        if not inside:
            return Coverage(name, False, "nothing", (self.describe(),))
        missing, declared = [], []
        for end, other, strict, practical, side in ((self.lo, self.hi, self.strict[0], self.up_to[0], -1),
                                                    (self.hi, self.lo, self.strict[1], self.up_to[1], +1)):
            m, d = self._end(end, other, strict, practical, inside, side)
            missing += [m] if m else []
            declared += [d] if d else []
        missing += [f"the boundary {_fmt(b)}" for b in self.boundaries if not any(_same(v, b) for v in inside)]
        tested = f"[{_fmt(min(inside))}, {_fmt(max(inside))}] ({len(set(inside))} values)"
        return Coverage(name, not missing, tested, tuple(missing), "; ".join(declared))

    def contains(self, other: Axis) -> bool:
        if isinstance(other, Range):
            lo_ok = other.lo > self.lo or _same(other.lo, self.lo) and (other.strict[0] or not self.strict[0])
            hi_ok = other.hi < self.hi or _same(other.hi, self.hi) and (other.strict[1] or not self.strict[1])
            return lo_ok and hi_ok  # a narrowing may leave out boundaries: that is what it declares
        if isinstance(other, Integers):
            return self.lo <= other.lo and other.hi <= self.hi
        if isinstance(other, Choice):
            return all(isinstance(v, (int, float)) and self.lo <= v <= self.hi for v in other.values)
        return False


@dataclass(frozen=True)
class Integers(Axis):
    """Integers from ``lo`` to ``hi`` (``math.inf`` for unbounded). Covered when ``lo``, ``hi`` (or the
    declared practical end ``up_to``, with ``why``) and every structural point in ``points`` are tested.
    ``through`` names a grid parameter whose value ``n`` means that one cell tests every integer from ``lo``
    to ``n`` (a cell that sweeps ``N = 0..N_max`` itself)."""

    lo: int = 0
    hi: float = math.inf
    points: tuple[int, ...] = ()
    up_to: int | None = None
    why: str = ""
    through: str | None = None

    def __post_init__(self):
        if not self.lo <= self.hi:
            raise ValueError(f"Integers needs lo <= hi, got [{self.lo}, {self.hi}]")
        if math.isinf(self.hi) and self.up_to is not None and not self.why:
            raise ValueError("a practical end up_to of an unbounded axis needs its reason (why=...)")

    def describe(self) -> str:
        text = f"{{{self.lo}, ..., {_fmt(self.hi) if math.isfinite(self.hi) else '∞'}}}"
        if self.points:
            text += ", including " + ", ".join(map(str, self.points))
        return text

    def cover(self, name: str, values: Sequence, searched: bool) -> Coverage:
        if searched:
            return Coverage(name, True, "by adversarial search over " + self.describe())
        vals = sorted({int(v) for v in values if v is not None and self.lo <= v <= self.hi})
        if not vals:
            return Coverage(name, False, "nothing", (self.describe(),))
        missing, declared = [], ""
        if vals[0] != self.lo:
            missing.append(f"the end {self.lo}")
        if math.isfinite(self.hi):
            if vals[-1] != self.hi:
                missing.append(f"the end {int(self.hi)}")
        elif self.up_to is None:
            missing.append("the unbounded upper end (no search, no declared up_to)")
        else:
            declared = f"unbounded, tested up to {self.up_to}: {self.why}"
            if vals[-1] < self.up_to:
                missing.append(f"{self.up_to} (declared practical end)")
        missing += [f"the point {p}" for p in self.points if p not in vals]
        return Coverage(name, not missing, _runs(vals), tuple(missing), declared)

    def contains(self, other: Axis) -> bool:
        if isinstance(other, Integers):
            return self.lo <= other.lo and other.hi <= self.hi
        if isinstance(other, Choice):
            return all(isinstance(v, int) and self.lo <= v <= self.hi for v in other.values)
        return False


@dataclass(frozen=True)
class Choice(Axis):
    """A finite set: named constructions (``"iid"``, ``"orthogonal"``) or values; every one is tested."""

    values: tuple = ()

    def __post_init__(self):
        if not self.values:
            raise ValueError("Choice needs at least one value")

    def describe(self) -> str:
        return "{" + ", ".join(map(_fmt, self.values)) + "}"

    def cover(self, name: str, values: Sequence, searched: bool) -> Coverage:
        tested = [v for v in self.values if any(_eq(v, u) for u in values)]
        missing = tuple(_fmt(v) for v in self.values if v not in tested)
        return Coverage(name, not missing, "{" + ", ".join(map(_fmt, tested)) + "}" if tested else "nothing",
                        missing)

    def contains(self, other: Axis) -> bool:
        return isinstance(other, Choice) and all(any(_eq(v, u) for u in self.values) for v in other.values)


def _runs(vals: list[int]) -> str:
    """Sorted integers as ``{0..40, 64}`` (runs of 3 or more consecutive values joined)."""
    parts, start = [], 0
    for i in range(1, len(vals) + 1):
        if i == len(vals) or vals[i] != vals[i - 1] + 1:
            run = vals[start:i]
            parts += [f"{run[0]}..{run[-1]}"] if len(run) >= 3 else [str(v) for v in run]
            start = i
    return "{" + ", ".join(parts) + "}"


def _eq(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return _same(float(a), float(b))
    return a == b


@dataclass(frozen=True)
class Reading:
    """One way of reading the statement; ``note`` says what the reading means.

    * ``narrows`` replaces some axes of the domain by narrower ones: a reading that tests less than the
      statement, declared (its violations refute, its support never supports).
    * ``words``: the words of the statement that admit this reading. Two or more readings decide the verdict
      together ("depends on the reading" when they disagree) only when the words truly admit each of them,
      so every deciding reading of such a claim names its words (the registry's tests require it of every
      audited paper).
    * ``beside=True``: a reading the words do not make (another section's version, a convention of the
      field): it is tested and reported beside the verdict ("holds under the reading ..."), never deciding it.
    """

    note: str = ""
    narrows: Mapping[str, Axis] = field(default_factory=dict)
    words: str = ""
    beside: bool = False

    def __post_init__(self):
        if self.beside and self.narrows:
            raise ValueError("a reading reported beside the verdict tests another statement; it cannot narrow")


def narrowing(domain: Mapping[str, Axis], reading: Reading | None) -> dict[str, Axis]:
    """The domain a reading tests: the claim's with the reading's narrowed axes swapped in."""
    if reading is None or not reading.narrows:
        return dict(domain)
    unknown = set(reading.narrows) - set(domain)
    if unknown:
        raise ValueError(f"reading narrows axes {sorted(unknown)} that the domain does not declare")
    for name, axis in reading.narrows.items():
        if not domain[name].contains(axis):
            raise ValueError(f"reading's axis {name} = {axis.describe()} is not inside the domain's "
                             f"{domain[name].describe()}")
    return {**domain, **reading.narrows}


def describe(domain: Mapping[str, Axis]) -> str:
    """The hypotheses text of a domain: one ``name ∈ set (words)`` per axis."""
    return "; ".join(f"{name} ∈ {axis.describe()} ({axis.words})" for name, axis in domain.items())


def coverage(domain: Mapping[str, Axis], points: Iterable[Mapping[str, Any]],
             searched: Iterable[str] = ()) -> list[Coverage]:
    """Coverage of each axis by the tested ``points`` (the cells' parameters) and the ``searched`` axes."""
    points = list(points)
    searched = set(searched)
    out = []
    for name, axis in domain.items():
        if getattr(axis, "through", None):
            values = [list(range(int(axis.lo), int(p[axis.through]) + 1)) for p in points if axis.through in p]
        else:
            values = [p[name] for p in points if name in p]
        flat = [u for v in values for u in _members(axis, v)]
        out.append(axis.cover(name, flat, name in searched))
    return out


def _members(axis: Axis, value) -> list:
    """The axis values one cell tests: a tuple (or list) sweeps its members, unless it is itself a declared value
    of a :class:`Choice`."""
    if not isinstance(value, (list, tuple)) or isinstance(axis, Choice) and any(_eq(value, u) for u in axis.values):
        return [value]
    return list(value)


def domain_coverage(domain: Mapping[str, Axis], points: Iterable[Mapping[str, Any]],
                    searched: Iterable[str] = ()) -> tuple[bool, str]:
    """``(covered, text)``: whether every axis is covered, and the missing parts (or the tested ranges)."""
    cov = coverage(domain, points, searched)
    gaps = [c for c in cov if not c.covered]
    if gaps:
        return False, "; ".join(str(c) for c in gaps)
    return True, "; ".join(str(c) for c in cov)
