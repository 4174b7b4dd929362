r"""EVA's partitions of the keys (Zheng et al., ICLR 2023; ``002_b2e9d84e2f6b65de.txt``; §4.1, §4.2, App C).

* exact partitions as label arrays (:data:`~rfkit.base.laws.EXACT` for ``E``,
  :data:`~rfkit.base.laws.EXCLUDED` for keys not attended, ``0..C-1`` for the subsets ``P_c``), the input of
  :func:`~rfkit.estimators.eva.idealized.eva_ideal`: :func:`contiguous_labels`, :func:`partition_labels`
  (contiguous, random, k-means clustered, dyadic; §4.1), :func:`exact_set` (local block, top-``|E|``, random;
  §4.1 "Partially Optimized Coefficients") and :func:`block_labels` (§4.2's per-query blocks and chunks,
  optionally causal);
* practical EVA's partition ``{E^n, P_1^n, ..., P_C^n}`` as index arrays (§4.2, App C "Partitioning
  Strategy"): :func:`practical_partition` returning :class:`PracticalPartition` (1d blocks or 2d windows of
  a grid).

Randomness: only ``rng`` (random layouts, k-means seeding, random exact sets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import as_float_array, check_choice, check_positive_int, check_rng
from rfkit.base.laws import EXACT, EXCLUDED


def contiguous_labels(m: int, num_chunks: int, exact=None) -> np.ndarray:
    """Labels ``(M,)``: ``exact`` indices get :data:`EXACT`, the others ``num_chunks`` contiguous chunks in
    index order (equal sizes when they divide evenly, else sizes differing by one).

    Examples
    --------
    >>> contiguous_labels(6, 2, exact=[0])  # 5 keys: chunks of 3 and 2
    array([-1,  0,  0,  0,  1,  1])
    """
    m = check_positive_int(m, "m")
    labels = np.full(m, EXACT, dtype=np.int64)
    rest = np.setdiff1d(np.arange(m), np.asarray([] if exact is None else exact, dtype=np.int64))
    if num_chunks == 0:
        if rest.size:
            raise ValueError("num_chunks = 0 needs every key in the exact set")
        return labels
    num_chunks = check_positive_int(num_chunks, "num_chunks")
    if num_chunks > rest.size:
        raise ValueError(f"cannot split {rest.size} keys into {num_chunks} non-empty chunks")
    for c, part in enumerate(np.array_split(rest, num_chunks)):
        labels[part] = c
    return labels


PARTITION_LAYOUTS = ("contiguous", "random", "clustered", "dyadic")
EXACT_SETS = ("local", "top", "random")


def partition_labels(m: int, num_chunks: int, *, exact=None, layout: str = "contiguous", keys=None,
                     rng=None) -> np.ndarray:
    """Labels ``(M,)`` of a partition of ``[M] \\ E`` into ``num_chunks`` non-empty subsets (EVA §4.1).

    ``layout``: ``contiguous`` (index order, :func:`contiguous_labels`), ``random`` (a uniformly random
    assignment with the contiguous sizes), ``clustered`` (k-means on ``keys``, Lloyd iterations from a
    k-means++ start drawn from ``rng``; an emptied cluster takes the point farthest from its centre) or
    ``dyadic`` (contiguous with ``num_chunks`` a power of two: successive powers give nested refinements).
    """
    check_choice(layout, "layout", PARTITION_LAYOUTS)
    labels = contiguous_labels(m, num_chunks, exact=exact)
    if layout == "dyadic" and num_chunks & (num_chunks - 1):
        raise ValueError(f"layout='dyadic' needs num_chunks a power of two, got {num_chunks}")
    free = np.flatnonzero(labels != EXACT)
    if layout == "random":
        labels[free] = check_rng(rng).permutation(labels[free])
    elif layout == "clustered" and num_chunks:
        points = as_float_array(keys, "keys", ndim=2)[free]
        labels[free] = _kmeans(points, num_chunks, check_rng(rng))
    return labels


def _kmeans(points: np.ndarray, clusters: int, rng: np.random.Generator, iterations: int = 25) -> np.ndarray:
    centres = points[[rng.integers(points.shape[0])]]
    while centres.shape[0] < clusters:                                   # k-means++ seeding
        dist = ((points[:, None, :] - centres[None]) ** 2).sum(-1).min(axis=1)
        centres = np.vstack([centres, points[rng.choice(points.shape[0], p=dist / dist.sum()) if dist.sum() > 0
                                             else rng.integers(points.shape[0])]])
    for _ in range(iterations):
        assign = ((points[:, None, :] - centres[None]) ** 2).sum(-1).argmin(axis=1)
        for c in range(clusters):
            if not (assign == c).any():                                  # keep every subset non-empty
                far = ((points - centres[assign]) ** 2).sum(-1)
                far[np.bincount(assign, minlength=clusters)[assign] <= 1] = -1.0
                assign[int(far.argmax())] = c
            centres[c] = points[assign == c].mean(axis=0)
    return assign


def exact_set(q, k, size: int, *, kind: str = "local", position: int | None = None, rng=None) -> np.ndarray:
    """Indices of an exact set ``E`` of ``size`` keys for one query (EVA §4.1 "Partially Optimized Coefficients").

    ``kind``: ``local`` (the contiguous block of ``size`` keys containing ``position``, as a block-wise local
    attention would choose), ``top`` (the ``size`` keys with the largest ``q·k_m``) or ``random``.
    """
    check_choice(kind, "kind", EXACT_SETS)
    k = as_float_array(k, "k", ndim=2)
    m = k.shape[0]
    size = check_positive_int(size, "size", minimum=0)
    if size > m:
        raise ValueError(f"size = {size} exceeds the number of keys {m}")
    if kind == "top":
        scores = k @ as_float_array(q, "q", ndim=1)
        return np.sort(np.argsort(-scores, kind="stable")[:size])
    if kind == "random":
        return np.sort(check_rng(rng).choice(m, size=size, replace=False))
    if position is None:
        raise TypeError("kind='local' needs the query's position")
    start = min(position // size * size, m - size) if size else 0
    return np.arange(start, start + size)


def block_labels(n: int, block_size: int, num_chunks: int, *, causal: bool = False) -> np.ndarray:
    """Per-query labels ``(N, N)`` of EVA §4.2 as an exact partition: ``E^n`` = the contiguous block of
    ``n``, ``[N] \\ E^n`` split into ``num_chunks`` contiguous chunks; ``causal`` excludes keys ``m > n``
    (:data:`EXCLUDED`) and splits only ``[n] \\ E^n`` (the causal form of :func:`eva_ideal`)."""
    n = check_positive_int(n, "n")
    block_size = check_positive_int(block_size, "block_size")
    out = np.empty((n, n), dtype=np.int64)
    for i in range(n):
        start = i // block_size * block_size
        block = np.arange(start, min(start + block_size, n))
        keys = n if not causal else i + 1
        rest = np.setdiff1d(np.arange(keys), block)
        row = np.full(n, EXCLUDED, dtype=np.int64)
        row[block[block < keys]] = EXACT
        chunks = min(num_chunks, rest.size)
        for c, part in enumerate(np.array_split(rest, chunks) if chunks else []):
            row[part] = c
        out[i] = row
    return out


@dataclass(frozen=True)
class PracticalPartition:
    """Index arrays of practical EVA's partition (App C, "Partitioning Strategy").

    Attributes
    ----------
    queries : int ``(B, b_q)``
        The query positions of each block (every position exactly once).
    exact : int ``(B, e)``
        The key positions of ``E^n`` for the block's queries (``e = |E|``; padded where ``exact_valid`` is
        False).
    exact_valid : bool ``(B, e)``
    chunks : int ``(G, C, l)``
        Chunk key positions: ``G = 1`` (``partition_domain="all"``, shared by every query) or ``G = B``
        (``"complement"``: chunks of ``[M] \\ E^n``, one set per block).
    """

    queries: np.ndarray
    exact: np.ndarray
    exact_valid: np.ndarray
    chunks: np.ndarray

    @property
    def num_chunks(self) -> int:
        return self.chunks.shape[1]

    def chunk_group(self) -> np.ndarray:
        """For each block, the index of its chunk set along ``chunks``' first axis."""
        blocks = self.queries.shape[0]
        return np.arange(blocks) if self.chunks.shape[0] == blocks else np.zeros(blocks, np.int64)


def _grid_windows(grid: tuple[int, int], side: int) -> np.ndarray:
    """Row-major token indices of the ``side × side`` windows of an ``H × W`` grid, window by window."""
    h, w = grid
    if h % side or w % side:
        raise ValueError(f"the grid {grid} must be divisible by the window side {side}")
    idx = np.arange(h * w).reshape(h // side, side, w // side, side)
    return idx.transpose(0, 2, 1, 3).reshape(-1, side * side)


def _square_side(size: int, what: str) -> int:
    side = math.isqrt(size)
    if side * side != size:
        raise ValueError(f"2d layout: {what} = {size} must be a perfect square")
    return side


def practical_partition(n_tokens: int, *, block_size: int, num_chunks: int, partition_domain: str = "all",
                        layout: str = "1d", grid: tuple[int, int] | None = None,
                        window: str = "block") -> PracticalPartition:
    r"""The partition ``{E^n, P_1^n, ..., P_C^n}`` of practical EVA (§4.2, App C).

    Parameters
    ----------
    n_tokens : int
        ``N = M`` (self-attention).
    block_size : int
        ``|E|``: contiguous blocks (``layout="1d"``) or ``√|E| × √|E|`` windows of the ``grid``
        (``"2d"``); 0 means no exact set (every query in one group, ``E = ∅``).
    num_chunks : int
        ``C`` (0: local attention only). Chunks are contiguous (1d) or square patches of side
        ``√(M/C)`` (2d, ``partition_domain="all"``); with ``"complement"`` the keys outside ``E^n`` are
        listed in index order (1d) or window by window (2d, windows of side ``√|E|``) and split into
        ``C`` equal runs; an empty complement (``|E| = M``) leaves no chunk.
    window : {"block", "overlapping"}
        ``overlapping`` (1d, App E.3): ``E^n`` = the block of ``n`` plus ``block_size/2`` tokens of each
        neighbouring block (``|E| = 2·block_size``), truncated at the sequence ends; domain ``all`` only.
    """
    n = check_positive_int(n_tokens, "n_tokens")
    b = check_positive_int(block_size, "block_size", minimum=0)
    c = check_positive_int(num_chunks, "num_chunks", minimum=0)
    check_choice(partition_domain, "partition_domain", ("all", "complement"))
    check_choice(layout, "layout", ("1d", "2d"))
    check_choice(window, "window", ("block", "overlapping"))
    if layout == "2d" and (grid is None or grid[0] * grid[1] != n):
        raise ValueError(f"layout='2d' needs grid=(H, W) with H·W = {n}, got {grid}")
    queries, exact, valid = _exact_sets(n, b, layout, grid, window)
    if c == 0:
        return PracticalPartition(queries, exact, valid, np.zeros((1, 0, 0), np.int64))
    if partition_domain == "all":
        chunks = _all_chunks(n, c, layout, grid)[None]
    else:
        if window == "overlapping":
            raise ValueError("window='overlapping' is defined with partition_domain='all' only")
        chunks = _complement_chunks(n, c, exact, layout, grid, b)
    return PracticalPartition(queries, exact, valid, chunks)


def _exact_sets(n, b, layout, grid, window):
    if b == 0:
        return np.arange(n)[None], np.zeros((1, 0), np.int64), np.zeros((1, 0), bool)
    if layout == "2d":
        if window != "block":
            raise ValueError("window='overlapping' is defined for layout='1d' only")
        blocks = _grid_windows(grid, _square_side(b, "block_size"))
        return blocks, blocks, np.ones(blocks.shape, bool)
    if n % b:
        raise ValueError(f"n_tokens = {n} must be a multiple of block_size = {b} (padding is not implemented)")
    blocks = np.arange(n).reshape(-1, b)
    if window == "block":
        return blocks, blocks, np.ones(blocks.shape, bool)
    if b % 2:
        raise ValueError("window='overlapping' needs an even block_size")
    exact = blocks[:, :1] + np.arange(-b // 2, b + b // 2)
    valid = (exact >= 0) & (exact < n)
    return blocks, np.clip(exact, 0, n - 1), valid


def _all_chunks(n, c, layout, grid):
    if n % c:
        raise ValueError(f"num_chunks = {c} must divide n_tokens = {n}")
    if layout == "1d":
        return np.arange(n).reshape(c, n // c)
    return _grid_windows(grid, _square_side(n // c, "chunk size M/C"))


def _complement_chunks(n, c, exact, layout, grid, block):
    """Chunks of ``[M] \\ E^n`` per block: the remaining keys in index order (1d) or window by window (2d, windows
    of the exact set's side, so that removing ``E^n`` removes one window), split into ``c`` equal runs."""
    if layout == "1d":
        order = np.arange(n)
    else:
        order = _grid_windows(grid, _square_side(block if block else n // c, "window size")).ravel()
    rest = [order[~np.isin(order, e)] for e in exact]
    size = rest[0].size
    if size == 0:
        return np.zeros((exact.shape[0], 0, 0), np.int64)
    if size % c:
        raise ValueError(f"num_chunks = {c} must divide the {size} keys outside each exact set")
    return np.stack([r.reshape(c, size // c) for r in rest])
