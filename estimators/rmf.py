r"""Random Maclaurin features (Macformer Definition 3) and Random Maclaurin Feature Attention (RMFA).

Definition 3 (``004_803b6fd9a1d4a879.txt``, Kar & Karnick 2012):

.. math::  Φ(x) = \sqrt{1/D}\,[φ_1(x), …, φ_D(x)], \qquad
           φ_t(x) = c_{N_t} \prod_{j=1}^{N_t} ⟨ω_{t,j}, x⟩,

with ``N_t`` iid on ``ℕ = {0, 1, …}`` (the empty product is 1), ``ω_{t,j}`` iid Rademacher vectors independent
of the ``N_t``, and ``c_N`` a weight built from the kernel's Maclaurin coefficient ``a_N >= 0``. Then
``E[Φ(x)·Φ(y)] = Σ_N π_N c_N² (x·y)^N`` (:func:`rfkit.theory.maclaurin.rmf_moments`).

The printed law ``P[N = η] = p^{-(η+1)}`` has total mass ``1/(p - 1)``: a law only at ``p = 2``. The readings
(:data:`N_LAWS` × :data:`WEIGHTS`, Macformer register; the law's masses and weights are defined once in
:mod:`rfkit.base.maclaurin`, which the theory shares):

* ``n_law="geom"``: ``π_η = (1 - 1/p) p^{-η}`` (equal to the printed masses at ``p = 2``);
  ``n_law="defective"`` (``p >= 2``): ``N`` has the printed masses and the feature is identically 0 with the
  remaining probability ``1 - 1/(p - 1)``;
* ``weight="printed"``: ``c_N = sqrt(a_N p^{N+1})``; ``weight="importance"``: ``c_N = sqrt(a_N/π_N)``.
  Valid pairs: (geom, printed), (geom, importance), (defective, printed).

RMFA (the RMFA display, bidirectional / key padding / causal / general mask) with ``q̃ = q/d^{1/4}``,
``k̃ = k/d^{1/4}`` and one draw for the whole call:

.. math::  \mathrm{RMFA}(Q, K, V)_a = \frac{Φ(q̃_a)^\top \sum_i M'_{ai} Φ(k̃_i) ⊗ V_i}
                                             {Φ(q̃_a)^\top \sum_j M'_{aj} Φ(k̃_j)}.

Design notes
------------
* One draw ``(N_1..N_D, ω)`` is a :class:`RMFDraw`: the ``W = Σ N_t`` sign vectors stacked in an int8 matrix
  ``Ω ∈ {±1}^{W×d}`` with segment offsets, so features cost one product ``X Ωᵀ`` and a segment product.
  Segment products are one compiled (Numba) loop over rows and features, reading each row's projections in
  order (``N_t = 0`` features are the empty product 1, then weighted ``c_0``).
* Weights are formed in log space (``lgamma``, ``(N+1) log p``) and exponentiated last.
* RMF features are signed, so the renormaliser ``Φ(q̃_a)·Σ_j Φ(k̃_j)`` can be ``<= 0`` or tiny. The paper has
  no safeguard, and neither has :func:`rmfa`: it returns what IEEE arithmetic gives and reports the count of
  non-positive denominators, the smallest ``|denominator|`` and the count of non-finite outputs
  (:class:`RMFAResult`). Numerator and denominator are returned separately for identity checks.
* Bidirectional, key-padding and causal forms reuse :func:`~rfkit.estimators.attention.linear_attention_buffers`
  on plain feature arrays (the causal form is its chunked prefix-sum scan: ``O(D·d_v)`` carried state, and no
  stabiliser, since plain features have zero log-scales); a general mask uses the quadratic form
  ``((Φ_Q Φ_Kᵀ) ⊙ M')[V 1]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numba
import numpy as np

from rfkit.base.checks import (
    as_float_array,
    as_mask,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_qkv,
    check_rng,
)
from rfkit.base.maclaurin import N_LAWS, WEIGHTS, check_law, get_maclaurin_kernel, log_degree_mass, log_weight_squared

from .attention import DEFAULT_CHUNK_SIZE, linear_attention_buffers

__all__ = ["N_LAWS", "WEIGHTS", "DRAW_SHARINGS", "MaclaurinCoefficients", "RMFDraw", "draw_rmf", "rmf_features",
           "RMFAResult", "rmfa", "rmfa_replicates"]

DRAW_SHARINGS = ("shared", "per_head", "per_batch_head")


# ------------------------------------------------------------------------------------ coefficients


@dataclass(frozen=True)
class MaclaurinCoefficients:
    """Maclaurin coefficients ``a_N >= 0`` as a function ``N -> log a_N`` (``-inf`` for ``a_N = 0``).

    Build with :meth:`from_kernel` (Table 1's kernels, ``source="derived"`` or ``"printed"``) or
    :meth:`from_sequence` (a user's ``a_0..a_{N_max}``; ``a_N = 0`` beyond: a polynomial kernel).
    """

    log_a: Callable[[np.ndarray], np.ndarray]
    label: str
    log: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def from_kernel(cls, kernel, source: str = "derived", *, printed_fallback: float | None = None
                    ) -> MaclaurinCoefficients:
        """Coefficients of a Table 1 kernel.

        ``derived``: the true ``a_N = f^{(N)}(0)/N!`` (closed form). ``printed``: Table 1's formula, evaluated
        exactly; where it is undefined (``log`` at ``N = 0``) the value ``printed_fallback`` is used (default
        ``f(0)``) and the substitution is recorded in ``log``.
        """
        spec = get_maclaurin_kernel(kernel)
        source = check_choice(source, "coeffs", ("derived", "printed"))
        if source == "derived":
            return cls(spec.log_coefficient, f"{spec.name}:derived")
        fallback = float(spec.closed_form(np.float64(0.0))) if printed_fallback is None else printed_fallback
        table: list[float] = []

        def log_a(n):
            n = np.asarray(n, dtype=np.int64)
            top = int(n.max(initial=0))
            for i in range(len(table), top + 1):  # extend the exact table of printed values as needed
                value = spec.printed(i)
                table.append(fallback if value is None else float(value))
            values = np.array(table)
            _check_nonnegative(values, spec.name)
            with np.errstate(divide="ignore"):
                return np.log(values)[n]

        undefined = [i for i in range(2) if spec.printed(i) is None]
        log = tuple(f"printed a_{i} of {spec.name} is undefined; using {fallback:g}" for i in undefined)
        return cls(log_a, f"{spec.name}:printed", log)

    @classmethod
    def from_sequence(cls, coefficients, *, label: str = "user") -> MaclaurinCoefficients:
        """A user-supplied sequence ``a_0..a_{N_max}`` (non-negative; ``a_N = 0`` for ``N > N_max``)."""
        a = as_float_array(coefficients, "coefficients", ndim=1)
        _check_nonnegative(a, label)
        with np.errstate(divide="ignore"):
            log_a = np.log(a)

        def lookup(n):
            n = np.asarray(n, dtype=np.int64)
            return np.where(n < a.size, log_a[np.minimum(n, a.size - 1)], -np.inf)

        return cls(lookup, label)


def _check_nonnegative(a: np.ndarray, label: str) -> None:
    if (a < 0).any():
        raise ValueError(f"Maclaurin coefficients of {label} must be >= 0 (RMF weights are sqrt(a_N ...)); "
                         f"got a negative one at N = {int(np.argmax(a < 0))}")


def as_coefficients(kernel, coeffs) -> MaclaurinCoefficients:
    """Resolve ``coeffs`` (``"derived"``, ``"printed"``, a sequence or :class:`MaclaurinCoefficients`)."""
    if isinstance(coeffs, MaclaurinCoefficients):
        return coeffs
    if isinstance(coeffs, str):
        return MaclaurinCoefficients.from_kernel(kernel, coeffs)
    return MaclaurinCoefficients.from_sequence(coeffs)


# ------------------------------------------------------------------------------------------- draws


@dataclass(frozen=True)
class RMFDraw:
    """One draw of ``D`` random Maclaurin features.

    Attributes
    ----------
    degrees : int64 array ``(D,)``
        ``N_t``; ``-1`` marks an identically-zero feature (defective law, or a degree above the cap).
    offsets : int64 array ``(D,)``
        Start of feature ``t``'s segment of rows in ``signs``.
    signs : int8 array ``(W, d)``
        The ``W = Σ max(N_t, 0)`` Rademacher vectors, feature by feature.
    p, n_law : the degree law; ``dropped_mass``: ``P(N > n_max)`` under an optional cap (0 without one).
    """

    degrees: np.ndarray
    offsets: np.ndarray
    signs: np.ndarray
    p: float
    n_law: str
    dropped_mass: float = 0.0

    @property
    def num_features(self) -> int:
        return int(self.degrees.size)

    @property
    def width(self) -> int:
        """``W = Σ N_t``: the number of Rademacher projections."""
        return int(self.signs.shape[0])

    @property
    def d(self) -> int:
        return int(self.signs.shape[1])


def _sample_degrees(num: int, p: float, n_law: str, rng: np.random.Generator) -> np.ndarray:
    # numpy's geometric counts trials (support 1, 2, ...): subtract 1 for failures N in {0, 1, ...}
    degrees = rng.geometric(1.0 - 1.0 / p, size=num).astype(np.int64) - 1
    if n_law == "defective":
        alive = rng.random(num) < 1.0 / (p - 1.0)
        degrees = np.where(alive, degrees, -1)
    return degrees


def draw_rmf(num_features: int, d: int, *, rng, p: float = 2.0, n_law: str = "geom",
             n_max: int | None = None) -> RMFDraw:
    """Draw ``(N_1..N_D, ω)`` for ``D = num_features`` features of ``d``-dimensional inputs.

    ``n_max`` caps the degree (a labelled deviation from the paper, which has none): features with
    ``N_t > n_max`` become identically 0 and ``dropped_mass = P(N > n_max)`` is recorded; the bias is the
    series tail beyond ``n_max`` (:func:`rfkit.theory.maclaurin.truncation_bias`).

    Randomness: ``N_t`` iid from the degree law, then ``W`` iid Rademacher vectors (``rng.integers``).
    """
    num_features = check_positive_int(num_features, "num_features")
    d = check_positive_int(d, "d")
    p = check_positive_float(p, "p")
    if p <= 1:
        raise ValueError(f"p must be > 1 (Definition 3), got {p}")
    n_law = check_choice(n_law, "n_law", N_LAWS)
    if n_law == "defective" and p < 2:
        raise ValueError(f"the defective law needs p >= 2, got p = {p}")
    rng = check_rng(rng)
    degrees = _sample_degrees(num_features, p, n_law, rng)
    dropped = 0.0
    if n_max is not None:
        n_max = check_positive_int(n_max, "n_max", minimum=0)
        dropped = math.exp(log_degree_mass(n_max + 1, p, n_law) - math.log1p(-1.0 / p))
        degrees = np.where(degrees > n_max, -1, degrees)
    counts = np.maximum(degrees, 0)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    signs = (rng.integers(0, 2, size=(int(counts.sum()), d), dtype=np.int8) * 2 - 1).astype(np.int8)
    return RMFDraw(degrees, offsets, signs, p, n_law, dropped)


# ---------------------------------------------------------------------------------------- features


def _feature_weights(draw: RMFDraw, coefficients: MaclaurinCoefficients, weight: str) -> np.ndarray:
    """``c_{N_t}`` per feature (0 for identically-zero features), from log space."""
    alive = draw.degrees >= 0
    n = np.where(alive, draw.degrees, 0)
    log_c2 = log_weight_squared(n, coefficients.log_a(n), draw.p, draw.n_law, weight)
    return np.where(alive, np.exp(0.5 * log_c2), 0.0)


def _segment_products(projections: np.ndarray, draw: RMFDraw) -> np.ndarray:
    """``Π_{j < N_t} P[..., offset_t + j]`` per feature (1 for ``N_t <= 0``), by a compiled loop over rows."""
    rows = math.prod(projections.shape[:-1])
    flat = np.ascontiguousarray(projections.reshape(rows, projections.shape[-1]))
    out = _segment_products_kernel(flat, draw.degrees, draw.offsets)
    return out.reshape(projections.shape[:-1] + (draw.num_features,))


@numba.njit(cache=True)
def _segment_products_kernel(projections, degrees, offsets):
    """Row ``r``, feature ``t``: the product of ``projections[r, offsets[t] : offsets[t] + degrees[t]]``."""
    out = np.ones((projections.shape[0], degrees.size), dtype=projections.dtype)
    for row in range(projections.shape[0]):
        for t in range(degrees.size):
            product = 1.0
            for j in range(offsets[t], offsets[t] + degrees[t]):
                product *= projections[row, j]
            out[row, t] = product
    return out


def rmf_features(x, draw: RMFDraw, kernel="exp", *, coeffs="derived", weight: str = "importance") -> np.ndarray:
    r"""Random Maclaurin features ``Φ(x) = D^{-1/2} [c_{N_t} Π_j ⟨ω_{t,j}, x⟩]_t`` (Definition 3).

    Parameters
    ----------
    x : array_like, shape ``(..., d)``
        Φ acts on the last axis.
    draw : RMFDraw
        From :func:`draw_rmf`; every vector whose products are compared must use the same draw.
    kernel : str
        A Table 1 kernel (:data:`~rfkit.estimators.maclaurin_kernels.MACLAURIN_KERNELS`) naming the
        coefficients, unless ``coeffs`` is a sequence or :class:`MaclaurinCoefficients`.
    coeffs : {"derived", "printed"}, sequence or MaclaurinCoefficients
    weight : {"importance", "printed"}
        See the module docstring; ``printed`` is Definition 3 as printed.

    Returns
    -------
    ndarray ``(..., D)``

    Notes
    -----
    Cost ``O(|x|·d·W)`` for the projections ``X Ωᵀ`` plus ``O(|x|·W)`` for the products; memory
    ``O(|x|·W)``. Deterministic given the draw.

    Examples
    --------
    One feature of degree 0 is the constant ``c_0 = sqrt(a_0/π_0)``: ``sqrt(1/(1/2)) = √2`` for exp at ``p = 2``.

    >>> draw = RMFDraw(np.array([0]), np.array([0]), np.zeros((0, 3), np.int8), 2.0, "geom")
    >>> rmf_features(np.ones(3), draw)
    array([1.41421356])
    """
    x = as_float_array(x, "x", min_ndim=1)
    if x.shape[-1] != draw.d:
        raise ValueError(f"x has last dimension {x.shape[-1]} but the draw was made for d = {draw.d}")
    weight = check_choice(weight, "weight", WEIGHTS)
    check_law(draw.p, draw.n_law, weight)
    coefficients = as_coefficients(kernel, coeffs)
    projections = x @ draw.signs.T.astype(x.dtype)
    products = _segment_products(projections, draw)
    return products * (_feature_weights(draw, coefficients, weight) / math.sqrt(draw.num_features))


# --------------------------------------------------------------------------------------------- RMFA


@dataclass(frozen=True)
class RMFAResult:
    """RMFA output with its numerator and denominator and the renormaliser diagnostics (no safeguard applied).

    ``out = numerator / denominator[..., None]``; ``n_nonpositive`` counts denominators ``<= 0``,
    ``min_abs_denominator`` is the smallest ``|denominator|``, ``n_nonfinite`` counts non-finite outputs;
    ``gemms`` lists the matrix products performed, ``(rows, inner, cols, count)`` (see :mod:`rfkit.theory.cost`).
    """

    out: np.ndarray
    numerator: np.ndarray
    denominator: np.ndarray
    n_nonpositive: int
    min_abs_denominator: float
    n_nonfinite: int
    width: int
    gemms: tuple = ()
    draws: tuple = ()


def _mask_route(n_q: int, n_k: int, lead: tuple[int, ...], mask, key_padding, causal: bool):
    """``(route, array)``: ``none``, ``padding`` (``(..., n_k)`` keep), ``causal`` or ``general`` (``M'``)."""
    if mask is not None:
        keep = as_mask(mask, "mask", lead + (n_q, n_k))
        if causal:
            keep = keep & np.tri(n_q, n_k, dtype=bool)
        if key_padding is not None:
            keep = keep & as_mask(key_padding, "key_padding", lead + (n_k,))[..., None, :]
        return "general", keep
    if causal:
        if n_q != n_k:
            raise ValueError(f"causal attention needs as many queries as keys, got {n_q} and {n_k}")
        if key_padding is not None:
            return "general", np.tri(n_q, n_k, dtype=bool) & as_mask(key_padding, "key_padding",
                                                                    lead + (n_k,))[..., None, :]
        return "causal", None
    if key_padding is not None:
        return "padding", as_mask(key_padding, "key_padding", lead + (n_k,))
    return "none", None


def _buffers(phi_q: np.ndarray, phi_k: np.ndarray, v: np.ndarray, route: str, keep, chunk_size):
    """``[numerator | denominator]`` of RMFA from plain feature arrays, and the GEMMs performed."""
    n, r, dv = phi_q.shape[-2], phi_q.shape[-1], v.shape[-1]
    lead = np.broadcast_shapes(phi_q.shape[:-2], phi_k.shape[:-2], v.shape[:-2])
    batch = int(np.prod(lead, dtype=np.int64))
    if route == "general":
        scores = (phi_q @ np.swapaxes(phi_k, -1, -2)) * keep
        values = np.concatenate([v, np.ones(v.shape[:-1] + (1,), dtype=v.dtype)], axis=-1)
        return scores @ values, ((n, r, phi_k.shape[-2], batch), (n, phi_k.shape[-2], dv + 1, batch))
    if route == "padding":
        phi_k = phi_k * keep[..., None]
    causal = route == "causal"
    chunk = DEFAULT_CHUNK_SIZE if chunk_size is None else check_positive_int(chunk_size, "chunk_size")
    gemms: list = []
    buf, _ = linear_attention_buffers(phi_q, phi_k, v, causal=causal, chunk_size=chunk, gemms=gemms)
    return buf, tuple(gemms)


def _result(buf: np.ndarray, width: int, gemms: tuple, draws: tuple) -> RMFAResult:
    num, den = buf[..., :-1], buf[..., -1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = num / den[..., None]
    return RMFAResult(out, num, den, int((den <= 0).sum()), float(np.abs(den).min(initial=np.inf)),
                      int(out.size - np.isfinite(out).sum()), width, gemms, draws)


def _inputs(q, k, v, scale_inputs: bool):
    q, k, v = check_qkv(q, k, v)
    if scale_inputs:
        scale = q.shape[-1] ** -0.25
        q, k = q * scale, k * scale
    return q, k, v


def _group_shape(lead: tuple[int, ...], sharing: str) -> tuple[int, ...]:
    """Leading axes whose every index gets its own draw: none, the head axis (-3), or all of them."""
    if sharing == "shared":
        return ()
    if not lead:
        raise ValueError(f"draw_sharing={sharing!r} needs leading (batch, head) axes")
    return lead[-1:] if sharing == "per_head" else lead


def _draws(draw, count: int, num_features, d: int, p, n_law, rng) -> list[RMFDraw]:
    if draw is not None:
        draws = [draw] if isinstance(draw, RMFDraw) else list(draw)
        if len(draws) != count:
            raise ValueError(f"this draw_sharing needs {count} draw(s), got {len(draws)}")
        return draws
    if num_features is None:
        raise ValueError("pass num_features (and rng) or an explicit draw")
    rng = check_rng(rng)
    return [draw_rmf(num_features, d, rng=rng, p=p, n_law=n_law) for _ in range(count)]


def _grouped_features(x: np.ndarray, draws: list[RMFDraw], sharing: str, features: Callable) -> np.ndarray:
    """Φ of ``x (..., n, d)``: one draw overall, per head (axis -3) or per leading index."""
    if sharing == "shared":
        return features(x, draws[0])
    if sharing == "per_head":
        return np.stack([features(x[..., h, :, :], dr) for h, dr in enumerate(draws)], axis=-3)
    flat = x.reshape((-1,) + x.shape[-2:])
    return np.stack([features(xg, dr) for xg, dr in zip(flat, draws, strict=True)]).reshape(
        x.shape[:-1] + (-1,))


def rmfa(q, k, v, kernel="exp", *, num_features: int | None = None, p: float = 2.0, rng=None, draw=None,
         coeffs="derived", n_law: str = "geom", weight: str = "importance", mask=None, key_padding=None,
         causal: bool = False, draw_sharing: str = "shared", scale_inputs: bool = True,
         chunk_size: int | None = None, return_details: bool = False):
    r"""Random Maclaurin Feature Attention (Macformer, the RMFA display).

    Parameters
    ----------
    q, k, v : array_like, shapes ``(..., n_q, d)``, ``(..., n_k, d)``, ``(..., n_k, d_v)``
        Raw inputs; ``q/d^{1/4}`` and ``k/d^{1/4}`` are fed to Φ (``scale_inputs=False`` feeds them as they are).
    kernel : str
        Table 1 kernel; it enters only through ``a_N`` (``coeffs``).
    num_features, p, rng : int, float, Generator
        ``D``, the RMF hyperparameter, and the randomness for a fresh draw (when ``draw`` is not given).
    draw : RMFDraw or sequence of RMFDraw, optional
        Explicit draw(s), one per group under ``draw_sharing``.
    coeffs, n_law, weight
        See :func:`rmf_features` and :func:`draw_rmf`.
    mask : bool array, optional
        General ``M'`` (True = keep), ``(..., n_q, n_k)``: the quadratic route ``O(n²(D + d_v))``.
    key_padding : bool array, optional
        ``(..., n_k)`` keep flags (``M'_ai = m_i``): zero key features, linear cost.
    causal : bool
        ``M'_ai = 1[i <= a]`` by chunked prefix sums (``chunk_size``), ``O(D·d_v)`` carried state.
    draw_sharing : {"shared", "per_head", "per_batch_head"}
        One draw for the whole tensor (default: Φ acts on the last axis), one per head (axis ``-3``), or one per
        leading index (each ``(batch, head)`` matrix).
    return_details : bool
        Return :class:`RMFAResult` (numerator, denominator, diagnostics) instead of the output alone.

    Notes
    -----
    Time ``O(n·d·W + n·D·d_v)`` with ``E[W] = D/(p-1)`` (geom), memory ``O(n·(W + D) + D·d_v)``; a general mask
    costs ``O(n²(D + d_v))``. No safeguard on the denominator (see the module docstring). Randomness: the draw.

    Examples
    --------
    Identical keys: every estimate is the plain mean of the values, whatever the draw.

    >>> rmfa(np.ones((1, 4)), np.ones((3, 4)), [[0.0], [3.0], [6.0]], num_features=8, rng=0)
    array([[3.]])
    """
    q, k, v = _inputs(q, k, v, scale_inputs)
    draw_sharing = check_choice(draw_sharing, "draw_sharing", DRAW_SHARINGS)
    weight = check_choice(weight, "weight", WEIGHTS)
    check_law(p if draw is None else _first(draw).p, n_law if draw is None else _first(draw).n_law, weight)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    route, keep = _mask_route(q.shape[-2], k.shape[-2], lead, mask, key_padding, causal)
    groups = _group_shape(lead, draw_sharing)
    draws = _draws(draw, int(np.prod(groups, dtype=np.int64)), num_features, q.shape[-1], p, n_law, rng)
    q, k = (np.broadcast_to(a, lead + a.shape[-2:]) for a in (q, k))

    def features(x, dr):
        return rmf_features(x, dr, kernel, coeffs=coeffs, weight=weight)

    phi_q, phi_k = _grouped_features(q, draws, draw_sharing, features), _grouped_features(k, draws, draw_sharing,
                                                                                          features)
    buf, gemms = _buffers(phi_q, phi_k, v, route, keep, chunk_size)
    rows = int(np.prod(lead, dtype=np.int64)) // len(draws)
    projections = tuple((rows * a.shape[-2], a.shape[-1], dr.width, 1) for a in (q, k) for dr in draws)
    result = _result(buf, sum(dr.width for dr in draws), projections + tuple(gemms), tuple(draws))
    return result if return_details else result.out


def _first(draw) -> RMFDraw:
    return draw if isinstance(draw, RMFDraw) else next(iter(draw))


#: Feature entries :func:`rmfa_replicates` evaluates at once (``(n_q + n_k)·replicates·D``, ~0.4 GB of float64):
#: more replicates are drawn and evaluated in blocks (400 replicates of D = 4096 at n = 512 took ~27 GB at once).
RMFA_FEATURE_BLOCK = 50_000_000


def rmfa_replicates(q, k, v, kernel="exp", *, replicates: int, num_features: int, rng, p: float = 2.0,
                    coeffs="derived", n_law: str = "geom", weight: str = "importance", mask=None,
                    key_padding=None, causal: bool = False, scale_inputs: bool = True,
                    chunk_size: int | None = None) -> RMFAResult:
    """``replicates`` independent RMFA estimates for the same inputs, each with a fresh draw of ``D`` features.

    Vectorised: one draw of ``replicates·D`` features, whose blocks of ``D`` are the replicates' draws (iid, so
    the same law as separate calls), one projection of the inputs, and the RMFA buffers with the replicate as
    a leading axis; beyond :data:`RMFA_FEATURE_BLOCK` feature entries, the same in blocks of replicates (memory
    bounded). Inputs ``(n_q, d)``, ``(n_k, d)``, ``(n_k, d_v)``; results ``(replicates, n_q, d_v)``.
    """
    replicates = check_positive_int(replicates, "replicates")
    num_features = check_positive_int(num_features, "num_features")
    q, k, v = _inputs(q, k, v, scale_inputs)
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError("rmfa_replicates takes one (n, d) query, key and value matrix")
    route, keep = _mask_route(q.shape[0], k.shape[0], (), mask, key_padding, causal)
    rng = check_rng(rng)
    block = max(1, RMFA_FEATURE_BLOCK // ((q.shape[0] + k.shape[0]) * num_features))
    bufs, gemms, draws = [], [], []
    for start in range(0, replicates, block):
        n = min(block, replicates - start)
        big = draw_rmf(n * num_features, q.shape[-1], rng=rng, p=p, n_law=n_law)
        feats = rmf_features(np.concatenate([q, k]), big, kernel, coeffs=coeffs, weight=weight)
        feats = feats.reshape(-1, n, num_features).transpose(1, 0, 2) * math.sqrt(n)
        buf, block_gemms = _buffers(feats[:, : q.shape[0]], feats[:, q.shape[0]:], v, route, keep, chunk_size)
        bufs.append(buf)
        gemms += block_gemms
        draws.append(big)
    return _result(np.concatenate(bufs), big.width, tuple(gemms), tuple(draws))
