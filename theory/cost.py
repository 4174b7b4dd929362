"""Exact cost models: the matrix products an estimator performs, their flop counts, and array sizes.

A *GEMM list* is a tuple of ``(n, k, p, count)``: ``count`` products of an ``n×k`` by a ``k×p`` matrix,
``2·n·k·p`` flops each (one multiply and one add per term). The lists mirror the code in
:mod:`rfkit.estimators` exactly; the benchmark times plain numpy products of the same shapes to get the
practical roofline, and complexity claims compare measured scaling with these counts.

Beyond matrix products (Performer ``003_4855bc6ab225d7a6.txt`` Sec 2.1-2.2, B.1-B.3):

* sizes of what an estimator *stores*: the materialised ``L×L`` matrices of exact attention
  (:func:`softmax_attention_bytes`), the prefix-sum state of causal FAVOR for each implementation
  (:func:`favor_state_bytes`: ``O(r·d_v)`` carried, ``O(L·r·d_v)`` materialised ``G^PS``), and the
  encodings of projection matrices (:func:`projection_bytes`: dense ``md`` numbers, H-ORF ``O(m)`` signs,
  G-ORF ``O(m log d)`` rotations);
* operation counts that are not matrix products: the structured products ``Wx``
  (:func:`projection_apply_flops`) and the work and rounds of the work-efficient parallel prefix sum
  (:func:`prefix_scan_counts`, Blelloch's up-sweep/down-sweep, as :func:`rfkit.estimators.favor.
  parallel_prefix_scan` performs it).

Each count equals what the code does, so tests check the implementations against these functions exactly.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from rfkit.base.numerics import next_power_of_two as padded_length

__all__ = [
    "gemm_flops",
    "softmax_attention_gemms",
    "feature_map_gemms",
    "linear_attention_gemms",
    "softmax_attention_bytes",
    "favor_state_bytes",
    "prefix_scan_counts",
    "projection_bytes",
    "projection_apply_flops",
    "padded_length",
    "RMFA_ROUTES",
    "rmfa_gemms",
    "rmfa_flop_model",
    "rmfa_expected_width",
    "softmax_rmfa_flop_ratio",
    "eva_coefficient_bytes",
    "VitConfig",
    "vit_parameters",
    "vit_macs",
]

FLOAT_BYTES = 8

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


def softmax_attention_bytes(n: int, m: int, *, block: int | None = None, itemsize: int = FLOAT_BYTES) -> int:
    """Bytes of the score matrices exact attention holds at once: logits and weights, ``2·b·M`` numbers.

    ``b = N`` materialised (Performer Eq 1: ``A`` stored, ``O(L²)``), ``b = block`` when blocked over queries.
    """
    rows = n if block is None else min(block, n)
    return 2 * rows * m * itemsize


def favor_state_bytes(n: int, r: int, dv: int, *, impl: str, chunk: int = 128, itemsize: int = FLOAT_BYTES) -> int:
    """Bytes of the prefix-sum state of FAVOR (Performer Algorithm 1, Eq 11, B.3) as implemented.

    ``bidirectional`` and ``scan``: one ``r×(d_v+1)`` state (``Buf_1``, or the carried ``G^PS_i``);
    ``chunked``: that state plus the ``b×b`` masked scores of one chunk; ``parallel``: the materialised
    ``G^PS`` over the padded length ``2^⌈log₂ L⌉`` (``O(L·r·d_v)``, B.3).
    """
    state = r * (dv + 1)
    if impl in ("bidirectional", "scan"):
        return state * itemsize
    if impl == "chunked":
        b = min(chunk, n)
        return (state + b * b) * itemsize
    if impl == "parallel":
        return padded_length(n) * state * itemsize
    raise ValueError(f"unknown impl {impl!r}; expected bidirectional, scan, chunked or parallel")


def prefix_scan_counts(n: int) -> tuple[int, int]:
    """``(combines, rounds)`` of the work-efficient inclusive prefix scan of ``n`` elements (Blelloch 1990).

    Over the padded length ``n' = 2^⌈log₂ n⌉``: the up-sweep and the down-sweep each perform ``n' - 1``
    combines in ``log₂ n'`` rounds (all combines of a round are independent); the exclusive result is
    turned inclusive by ``n`` more combines in one round. Work ``2n' + n - 2 = O(n)``, depth
    ``2 log₂ n' + 1 = O(log n)`` (Performer B.1: "O(L) total steps and O(log L) time in parallel").
    """
    size = padded_length(n)
    depth = size.bit_length() - 1
    return 2 * (size - 1) + n, 2 * depth + 1


def _blocks(m: int, width: int) -> int:
    return -(-m // width)


def projection_bytes(kind: str, m: int, d: int, *, k: int = 3, rotations: int | None = None,
                     norms: str = "chi") -> int:
    """Bytes that encode ``W ∈ R^{m×d}`` (Performer B.2).

    ``dense`` (iid, R-ORF): ``m·d`` float64. ``hadamard``: ``k·d'`` int8 signs per block of ``d' =
    2^⌈log₂ d⌉`` rows (``O(m)``). ``givens``: ``K`` rotations per block of ``d`` rows, each two int32
    indices and one float64 angle (``O(m log d)`` with ``K = ⌈d log₂ d⌉``). Structured kinds add ``m``
    float64 norms for ``norms="chi"`` (constant norms are not stored).
    """
    radii = m * FLOAT_BYTES if norms == "chi" else 0
    if kind == "dense":
        return m * d * FLOAT_BYTES
    if kind == "hadamard":
        width = padded_length(d)
        return _blocks(m, width) * k * width + radii
    if kind == "givens":
        if rotations is None:
            raise ValueError("givens needs the number of rotations per block")
        return _blocks(m, d) * rotations * (2 * 4 + FLOAT_BYTES) + radii
    raise ValueError(f"unknown kind {kind!r}; expected dense, hadamard or givens")


def projection_apply_flops(kind: str, m: int, d: int, *, k: int = 3, rotations: int | None = None) -> int:
    """Flops of ``Wx`` for one vector ``x ∈ R^d`` as implemented (Performer B.2: ``O(md)`` vs ``O(m log d)``).

    ``dense``: ``2md``. ``hadamard``: per block, ``k`` sign flips (``d'``) and unnormalised transforms
    (``d' log₂ d'`` additions), one scaling (``d'``); then ``m`` radial scalings. ``givens``: per block,
    ``6K`` (four multiplications, two additions per rotation); then ``m`` radial scalings.
    """
    if kind == "dense":
        return 2 * m * d
    if kind == "hadamard":
        width = padded_length(d)
        log_width = width.bit_length() - 1
        return _blocks(m, width) * (k * (width + width * log_width) + width) + m
    if kind == "givens":
        if rotations is None:
            raise ValueError("givens needs the number of rotations per block")
        return _blocks(m, d) * 6 * rotations + m
    raise ValueError(f"unknown kind {kind!r}; expected dense, hadamard or givens")


# ------------------------------------------------------------------------------ Macformer RMFA

#: Mask routes of :func:`rfkit.estimators.rmf.rmfa`: linear (none, key padding, causal) or quadratic (general).
RMFA_ROUTES = ("none", "padding", "causal", "general")


def rmfa_gemms(n: int, d: int, dv: int, width: int, num_features: int, *, route: str = "none", chunk: int = 128,
               batch: int = 1) -> Gemms:
    """RMFA (Macformer, ``004_803b6fd9a1d4a879.txt``) with one shared draw, as :func:`rfkit.estimators.rmf.rmfa`
    performs it: the Rademacher projections ``Q̃Ωᵀ`` and ``K̃Ωᵀ`` (all ``batch·n`` rows against ``Ω ∈ R^{W×d}``),
    then linear attention from the ``D`` features (:func:`linear_attention_gemms`; key padding is bidirectional
    with zeroed key rows), or, for a general mask, the quadratic route ``(Φ_Q Φ_Kᵀ ⊙ M')[V 1]``.
    """
    if route not in RMFA_ROUTES:
        raise ValueError(f"unknown route {route!r}; expected one of {RMFA_ROUTES}")
    projections = ((batch * n, d, width, 1), (batch * n, d, width, 1))
    if route == "general":
        return projections + ((n, num_features, n, batch), (n, n, dv + 1, batch))
    return projections + linear_attention_gemms(n, num_features, dv, causal=route == "causal", chunk=chunk,
                                                batch=batch)


def rmfa_flop_model(n: int, d: int, dv: int, width: int, num_features: int) -> int:
    """Register ``derived.cost_model``, bidirectional RMFA: ``4·n·d·W`` (projections of ``Q̃`` and ``K̃``) plus
    ``4·n·D·(d_v + 1)`` (``Φ_Kᵀ[V 1]`` and ``Φ_Q S``; the extra column is the denominator ``z = Φ_Kᵀ1``)."""
    return 4 * n * d * width + 4 * n * num_features * (dv + 1)


def rmfa_expected_width(num_features: int, p: float, n_law: str = "geom") -> float:
    """``E[W] = E[Σ_t N_t]``: ``D/(p-1)`` under the geometric degree law, ``D/(p-1)²`` under the defective one."""
    per_feature = 1.0 / (p - 1.0) if n_law == "geom" else 1.0 / (p - 1.0) ** 2
    return num_features * per_feature


def softmax_rmfa_flop_ratio(n: int, d: int, dv: int, num_features: int, p: float = 2.0) -> float:
    """Flops of naive softmax attention over those of bidirectional RMFA at ``W = E[W]`` (≈ ``n/(2D)`` at
    ``p = 2``, ``d_v = d``, ``n, d >> 1``)."""
    width = rmfa_expected_width(num_features, p)
    softmax = gemm_flops(softmax_attention_gemms(n, n, d, dv))
    return softmax / (4 * n * d * width + 4 * n * num_features * (dv + 1))


def eva_coefficient_bytes(n: int, num_chunks: int, dv: int, *, num_samples: int = 1, groups: int = 1,
                          itemsize: int = FLOAT_BYTES) -> int:
    """Bytes of the chunk coefficients ``β̂_c`` practical EVA stores (EVA App C, after the single-sample display).

    One sample per chunk: query-free ``β̂_c``, ``groups·C·d_v`` numbers (``groups = 1`` when the chunks partition
    ``[M]``, one set per block for ``[M] \\ E^n``): ``O(Cd)``. Several samples: one ``β̂_c(q_n)`` per query,
    ``N·C·d_v`` numbers: ``O(NCd)`` (``O(Nd)`` for ``C = 1``).
    """
    per_set = num_chunks * dv * itemsize
    return n * per_set if num_samples > 1 else groups * per_set


@dataclass(frozen=True)
class VitConfig:
    """A DeiT-style vision transformer (EVA Tables 1-2, App E.2) and its attention mechanism.

    ``attention``: ``softmax``, ``local`` (window ``exact`` tokens), ``performer`` (``features`` random features
    per head) or ``eva`` (``exact`` = |E|, ``chunks`` = C, plus σ_q and σ_k: Linear(d_head) + LayerNorm per layer,
    shared across heads, as in the released code).
    """

    width: int
    heads: int
    layers: int = 12
    patch: int = 16
    image: int = 224
    classes: int = 1000
    class_token: bool = True
    mlp_ratio: int = 4
    attention: str = "softmax"
    exact: int = 0
    chunks: int = 0
    features: int = 0

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2 + int(self.class_token)

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


def vit_parameters(cfg: VitConfig) -> int:
    """Trainable parameters: patch embedding, class token, learned positions, blocks (LN, QKV, projection, LN,
    MLP), final LN, classifier; EVA adds ``2·(d_h² + d_h + 2d_h)`` per layer (σ_q, σ_k)."""
    w = cfg.width
    hidden = cfg.mlp_ratio * w
    block = 2 * w + (3 * w * w + 3 * w) + (w * w + w) + 2 * w + (w * hidden + hidden) + (hidden * w + w)
    if cfg.attention == "eva":
        dh = cfg.head_dim
        block += 2 * (dh * dh + dh + 2 * dh)
    embed = 3 * cfg.patch**2 * w + w + int(cfg.class_token) * w + cfg.tokens * w
    return embed + cfg.layers * block + 2 * w + w * cfg.classes + cfg.classes


def _attention_macs(cfg: VitConfig) -> int:
    """Multiply-accumulates of one layer's attention core (scores and weighted values), all heads."""
    n, w = cfg.tokens, cfg.width
    if cfg.attention == "softmax":
        return 2 * n * n * w
    if cfg.attention == "local":
        return 2 * n * cfg.exact * w
    if cfg.attention == "performer":
        return 2 * n * cfg.features * w + 2 * n * cfg.features * w  # features of q and k; K'ᵀV and Q'(K'ᵀV)
    chunk = n // max(cfg.chunks, 1)
    sigma = 2 * cfg.chunks * cfg.heads * cfg.head_dim**2
    coefficients = 2 * cfg.chunks * chunk * w       # ω_c·k_m and the weighted values of each chunk
    return 2 * n * (cfg.exact + cfg.chunks) * w + sigma + coefficients


def vit_macs(cfg: VitConfig) -> int:
    """Forward multiply-accumulates (one MAC counted as one FLOP, the fvcore/timm convention): patch embedding,
    per layer the QKV, projection and MLP products plus the attention core, and the classifier."""
    n, w = cfg.tokens, cfg.width
    patches = (cfg.image // cfg.patch) ** 2
    linear = n * (4 * w * w + 2 * cfg.mlp_ratio * w * w)
    return patches * 3 * cfg.patch**2 * w + cfg.layers * (linear + _attention_macs(cfg)) + w * cfg.classes
