"""Which points of a claim's declared grid a tier runs: the whole product, or a covering design of it.

A claim declares each tier's grid as axes whose Cartesian product it sweeps. At the smoke and quick tiers the
engine runs the product. At the full tier a product of many dense axes grows to 10^4-10^5 points (``rfkit plan
--tier full``), which no machine this project runs on finishes; there the engine runs a **pairwise covering
design** of the product instead once it has more than :data:`PRODUCT_LIMIT` points:

* every quick-tier point of the claim (the full tier never tests less than the quick tier; a quick point outside
  the full product, e.g. at a smaller size, runs as it is, with the full tier's budget), then
* rows of the full product chosen greedily until every pair of values of every two axes that occurs in the
  product (after the claim's ``where``) occurs in some chosen row (a strength-2 covering array; Colbourn,
  "Combinatorial aspects of covering arrays", 2004; greedy construction as in Cohen et al., "The AETG system",
  IEEE TSE 1997, here over the explicit candidate list so that ``where`` constraints are respected exactly).

So every value of every axis, and every combination of two, is tested; what a covering design leaves out is
interactions of three or more axes at values the product would have paired. The claim's declaration
(``rfkit show``) and ``rfkit plan`` state the design and its size. The construction is deterministic (ties go to
the first candidate in product order), so a verdict's cells are reproducible from the claim and the tier alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["PRODUCT_LIMIT", "DESIGNED_TIERS", "covering_rows", "tier_points"]

#: Full-tier grids with more points than this (per reading, after ``where``) are reduced to a pairwise
#: covering design; smaller ones run whole.
PRODUCT_LIMIT = 1000
#: The tiers at which a large product is reduced.
DESIGNED_TIERS = ("full",)


def covering_rows(codes: np.ndarray, chosen: Sequence[int] = (), strength: int = 2) -> np.ndarray:
    """Indices of candidate rows that, with the rows ``chosen``, cover every ``strength``-tuple of axis values
    occurring among the candidates.

    ``codes`` is an ``(n, k)`` integer array: row ``r`` is a candidate point, column ``j`` the index of its value
    on axis ``j``. Greedy: repeatedly add the candidate covering the most uncovered tuples (the first one on
    ties), until none is left. Returns the sorted union of ``chosen`` and the added rows.
    """
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ValueError(f"codes must be (candidates, axes), got shape {codes.shape}")
    n, k = codes.shape
    chosen = sorted({int(i) for i in chosen})
    if any(not 0 <= i < n for i in chosen):
        raise ValueError(f"chosen rows must index the {n} candidates")
    if n == 0:
        return np.array(chosen, dtype=int)
    if strength < 1:
        raise ValueError(f"strength must be >= 1, got {strength}")
    groups = list(itertools.combinations(range(k), min(strength, k)))
    if not groups or not groups[0]:  # no axes: the one point
        return np.array(sorted(set(chosen) | {0}), dtype=int)
    # one global id per (axis tuple, value tuple): the value tuple's mixed-radix number, offset per axis tuple
    sizes = codes.max(axis=0).astype(np.int64) + 1
    ids, offset = np.empty((n, len(groups)), dtype=np.int64), 0
    for g, axes in enumerate(groups):
        number = np.zeros(n, dtype=np.int64)
        for j in axes:
            number = number * sizes[j] + codes[:, j]
        ids[:, g] = number + offset
        offset += int(np.prod(sizes[list(axes)]))
    covered = np.zeros(offset, dtype=bool)
    covered[ids[chosen].ravel()] = True
    gain = (~covered[ids]).sum(axis=1)
    flat_order = np.argsort(ids.ravel(), kind="stable")  # rows holding each id, grouped
    starts = np.searchsorted(ids.ravel()[flat_order], np.arange(offset + 1))
    width = len(groups)
    picked = list(chosen)
    while True:
        r = int(np.argmax(gain))
        if gain[r] == 0:
            break
        picked.append(r)
        for t in ids[r][~covered[ids[r]]]:
            covered[t] = True
            gain[flat_order[starts[t]:starts[t + 1]] // width] -= 1
    return np.array(sorted(set(picked)), dtype=int)


def _key(point: Mapping) -> tuple:
    return tuple((k, repr(v)) for k, v in point.items())


def tier_points(axes: Mapping[str, Sequence], keep, *, tier: str, seeds: Sequence[Mapping] = (),
                limit: int | None = None) -> tuple[list[dict], str]:
    """The grid points a tier runs, and a one-line description of the design.

    ``axes`` are the tier's axes, ``keep(point)`` the claim's ``where`` for one reading, ``seeds`` the points the
    design contains (the quick tier's, for the full tier). Below ``limit`` points, or outside
    :data:`DESIGNED_TIERS`, the whole product runs (``limit`` defaults to :data:`PRODUCT_LIMIT`)."""
    limit = PRODUCT_LIMIT if limit is None else limit
    names = list(axes)
    values = [list(v) for v in axes.values()]
    index_rows = list(itertools.product(*(range(len(v)) for v in values)))
    points, codes = [], []
    for row in index_rows:
        p = {name: values[j][i] for j, (name, i) in enumerate(zip(names, row, strict=True))}
        if keep(p):
            points.append(p)
            codes.append(row)
    if tier not in DESIGNED_TIERS or len(points) <= limit:
        return points, f"product of {len(points)} points"
    position = {_key(p): i for i, p in enumerate(points)}
    inside = [position[_key(s)] for s in seeds if _key(s) in position]
    outside = [dict(s) for s in seeds if _key(s) not in position]
    rows = covering_rows(np.asarray(codes, dtype=np.int64).reshape(len(points), len(names)), inside)
    return [points[i] for i in rows] + outside, (
        f"pairwise covering design: {len(rows)} of {len(points)} product points ({len(inside)} of them quick-tier "
        f"points, then every pair of values of two axes) and {len(outside)} quick-tier points outside the product")
