"""Exact cost models: the matrix products an estimator performs, and their flop counts.

A *GEMM list* is a tuple of ``(n, k, p, count)``: ``count`` products of an ``n×k`` by a ``k×p`` matrix,
``2·n·k·p`` flops each (one multiply and one add per term). The lists mirror the code in
:mod:`rfkit.estimators` exactly; the benchmark times plain numpy products of the same shapes to get the
practical roofline, and complexity claims compare measured scaling with these counts.
"""

from __future__ import annotations

from collections import Counter

__all__ = [
    "gemm_flops",
    "softmax_attention_gemms",
    "feature_map_gemms",
    "linear_attention_gemms",
]

Gemms = tuple[tuple[int, int, int, int], ...]


def gemm_flops(gemms: Gemms) -> int:
    """Total flops ``Σ 2·n·k·p·count`` of a GEMM list."""
    return sum(2 * n * k * p * c for n, k, p, c in gemms)


def softmax_attention_gemms(n: int, m: int, d: int, dv: int, *, batch: int = 1) -> Gemms:
    """Materialised softmax attention: ``QKᵀ`` then ``weights·V`` (Performer Eq 1: ``O(L²d)``)."""
    return ((n, d, m, batch), (n, m, dv, batch))


def feature_map_gemms(length: int, d: int, m: int, *, batch: int = 1) -> Gemms:
    """One random feature map of ``length`` rows: the projection ``X Wᵀ`` (``O(Lmd)``)."""
    return ((length, d, m, batch),)


def linear_attention_gemms(n: int, r: int, dv: int, *, causal: bool, chunk: int, batch: int = 1) -> Gemms:
    """Linear attention from ``r`` features (Performer Eq 4 / Algorithm 1), as implemented.

    Bidirectional: ``(K')ᵀ[V 1]`` and ``Q'·S``. Causal, per chunk of ``b`` rows: the masked intra-chunk
    scores ``Q'_c K'_cᵀ`` and their product with ``[V_c 1]``, the carried state ``Q'_c S``, and the state
    update ``(K'_c)ᵀ[V_c 1]`` (the first chunk has no carried state).
    """
    if not causal:
        return ((r, n, dv + 1, batch), (n, r, dv + 1, batch))
    sizes = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
    counts: Counter = Counter()
    for i, b in enumerate(sizes):
        counts[(b, r, b)] += batch       # scores Q'_c K'_cᵀ
        counts[(b, b, dv + 1)] += batch  # masked scores · [V_c 1]
        counts[(r, b, dv + 1)] += batch  # state update (K'_c)ᵀ[V_c 1]
        if i:
            counts[(b, r, dv + 1)] += batch  # carried state Q'_c S
    return tuple((n_, k, p, c) for (n_, k, p), c in counts.items())
