r"""Structured orthogonal random projections: Hadamard (H-ORF) and Givens (G-ORF) blocks.

Performer ``003_4855bc6ab225d7a6.txt`` App. B.2(2) replaces the dense Haar blocks of R-ORFs by structured
orthogonal matrices that are stored in ``O(m)`` or ``O(m log d)`` numbers and applied to a vector in
``O(m log d)`` time (the paper gives only these costs; the constructions are those it cites):

* **H-ORF** (Choromanski et al. 2017): each block is ``B = (H D_1)(H D_2)…(H D_k)``, ``H`` the normalised
  Walsh–Hadamard matrix (``HHᵀ = I``) and ``D_i`` independent diagonal matrices of iid Rademacher signs
  (default ``k = 3``). ``Bx`` costs ``k`` fast Walsh–Hadamard transforms, ``O(k·d log d)``; a block is
  stored as its ``k·d`` signs (int8).
* **G-ORF** (Choromanski et al. 2019b): each block is a product of ``K`` random Givens rotations, each on a
  uniformly random coordinate pair ``i ≠ j`` with an angle uniform on ``[0, 2π)`` (Kac's walk; default
  ``K = ⌈d log₂ d⌉``). ``Bx`` costs ``4K`` multiplications; a block is stored as ``K`` pairs and angles.

Rows. A block ``B`` is orthogonal, so its rows are unit vectors ``b_i``; projection row ``i`` is
``ω_i = ρ_i b_i`` with ``ρ_i`` drawn from a radial law exactly as in
:func:`~rfkit.estimators.projections.orthogonal_projection`: ``chi`` (``ρ ~ chi(d)``, the marginal of
``N(0, I_d)`` if ``b_i`` were Haar), ``sqrt_d`` (``ρ = √d``, the native scaling ``√d·B`` of the
literature) or ``unit``. ``m > d`` stacks ``⌈m/d⌉`` independent blocks and keeps the first ``m`` rows.
The directions are *not* Haar: these estimators are biased, with a bias the paper says tends to 0 as
``d → ∞`` (claim ``performer.b2.hg_orf_bias``).

Padding (H-ORF). ``H`` exists for powers of two only. For other ``d`` the input is zero-padded to
``d' = 2^⌈log₂ d⌉`` (``pad=True``, a choice the paper does not make) and the block is ``d'×d'``; the
projection rows are then the first ``d`` coordinates of ``ρ_i b_i`` with ``ρ_i`` drawn in dimension
``d'`` (``chi(d')`` or ``√d'``), so that a Haar ``b_i`` with ``chi(d')`` norms would again give the
``N(0, I_d)`` marginal.

The fast paths are Numba kernels that receive pre-drawn signs, pairs and angles (they never draw random
numbers) and write into arrays allocated by numpy, so :mod:`tracemalloc` sees every allocation. The dense
matrices (:meth:`HadamardProjection.dense`, :meth:`GivensProjection.dense`) are built independently of
the fast paths, from explicit Hadamard and rotation matrices: they are test oracles, not used by the
estimators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from rfkit.base.checks import as_float_array, check_choice, check_positive_int, check_rng, compute_dtype
from rfkit.base.numerics import next_power_of_two

from .projections import NORM_LAWS

__all__ = [
    "HadamardProjection",
    "GivensProjection",
    "hadamard_projection",
    "givens_projection",
    "fwht",
    "default_givens_rotations",
    "next_power_of_two",
]


def default_givens_rotations(d: int) -> int:
    """``K = ⌈d log₂ d⌉`` rotations per block (Kac's walk mixing scale; the paper leaves ``K`` open)."""
    return int(math.ceil(d * math.log2(d))) if d > 1 else 0


# --------------------------------------------------------------------------------------- kernels


@numba.njit(cache=True)
def _fwht_row(buf):
    """In-place unnormalised Walsh–Hadamard transform of one vector whose length is a power of two."""
    n = buf.shape[0]
    h = 1
    while h < n:
        for start in range(0, n, 2 * h):
            for j in range(start, start + h):
                a = buf[j]
                b = buf[j + h]
                buf[j] = a + b
                buf[j + h] = a - b
        h *= 2


@numba.njit(cache=True)
def _fwht_rows(x):
    for i in range(x.shape[0]):
        _fwht_row(x[i])


@numba.njit(cache=True)
def _hadamard_apply(x, signs, scale, out, buf):
    """``out[n, b·d' + i] = scale · ((H D_1)…(H D_k) x_n)_i`` for every block ``b`` (unnormalised H)."""
    n_vec, width = x.shape
    n_blocks, k, _ = signs.shape
    for n in range(n_vec):
        for b in range(n_blocks):
            for i in range(width):
                buf[i] = x[n, i]
            for j in range(k - 1, -1, -1):
                for i in range(width):
                    buf[i] *= signs[b, j, i]
                _fwht_row(buf)
            for i in range(width):
                out[n, b * width + i] = scale * buf[i]


@numba.njit(cache=True)
def _givens_apply(x, pairs, cos, sin, out, buf):
    """``out[n, b·d + i] = (R_K…R_1 x_n)_i`` for every block ``b``; rotation t acts on ``pairs[b, t]``."""
    n_vec, d = x.shape
    n_blocks, n_rot, _ = pairs.shape
    for n in range(n_vec):
        for b in range(n_blocks):
            for i in range(d):
                buf[i] = x[n, i]
            for t in range(n_rot):
                p = pairs[b, t, 0]
                q = pairs[b, t, 1]
                c = cos[b, t]
                s = sin[b, t]
                a = buf[p]
                e = buf[q]
                buf[p] = c * a - s * e
                buf[q] = s * a + c * e
            for i in range(d):
                out[n, b * d + i] = buf[i]


def fwht(x, *, normalize: bool = True) -> np.ndarray:
    """Fast Walsh–Hadamard transform along the last axis (length a power of two), ``O(d log d)`` per row.

    ``normalize=True`` multiplies by ``1/√d`` (the orthogonal ``H``). Returns a new array.

    Examples
    --------
    >>> fwht([1.0, 0.0, 0.0, 0.0], normalize=False)
    array([1., 1., 1., 1.])
    """
    x = as_float_array(x, "x", min_ndim=1)
    d = x.shape[-1]
    if d & (d - 1):
        raise ValueError(f"x: the last axis must have a power-of-two length, got {d}")
    out = np.ascontiguousarray(x, dtype=np.float64).reshape(-1, d).copy()
    _fwht_rows(out)
    if normalize:
        out *= 1.0 / math.sqrt(d)
    return out.reshape(x.shape)


# ---------------------------------------------------------------------------------- projections


def _draw_norms(m: int, dim: int, norms: str, rng: np.random.Generator) -> np.ndarray | None:
    """Row norms in dimension ``dim``; ``None`` stands for the constant ``√dim`` or 1 (nothing stored)."""
    if norms == "chi":
        return np.sqrt(rng.chisquare(dim, size=m))
    return None


def _constant_norm(norms: str, dim: int) -> float:
    return math.sqrt(dim) if norms == "sqrt_d" else 1.0


def _flatten(x, d: int, name: str = "x"):
    x = as_float_array(x, name, min_ndim=1)
    if x.shape[-1] != d:
        raise ValueError(f"{name} must have last dimension d={d}, got shape {x.shape}")
    return x, np.ascontiguousarray(x.reshape(-1, d), dtype=np.float64)


def _finish(out: np.ndarray, m: int, row_norms: np.ndarray | None, constant: float, lead, dtype):
    """Keep the first ``m`` rows, apply the radial law, restore the leading shape."""
    y = out[:, :m]
    y = y * row_norms if row_norms is not None else y * constant
    return y.reshape(tuple(lead) + (m,)).astype(compute_dtype(dtype), copy=False)


@dataclass(frozen=True, eq=False)
class HadamardProjection:
    """H-ORF projection ``W ∈ R^{m×d}`` kept in structured form (see the module docstring).

    Attributes
    ----------
    m, d : int
        Rows and input dimension; ``width = d'`` is the padded block size.
    signs : int8 array ``(blocks, k, d')``
        The Rademacher diagonals ``D_1..D_k`` of each block.
    row_norms : float array ``(m,)`` or None
        ``chi`` radii; ``None`` for the constant radii of ``sqrt_d`` (``√d'``) and ``unit``.
    norms : str
        The radial law.
    """

    m: int
    d: int
    signs: np.ndarray
    row_norms: np.ndarray | None
    norms: str

    @property
    def width(self) -> int:
        return self.signs.shape[-1]

    @property
    def k(self) -> int:
        return self.signs.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes that encode ``W``: the signs (one byte each) and, for ``chi``, the row norms."""
        return int(self.signs.nbytes + (0 if self.row_norms is None else self.row_norms.nbytes))

    def apply(self, x, *, dtype=np.float64) -> np.ndarray:
        """``x Wᵀ`` for ``x`` of shape ``(..., d)``: ``(..., m)``, ``O(⌈m/d'⌉·k·d' log d')`` per vector."""
        x, flat = _flatten(x, self.d)
        width = self.width
        padded = np.zeros((flat.shape[0], width)) if width != self.d else flat
        if width != self.d:
            padded[:, : self.d] = flat
        out = np.empty((flat.shape[0], self.signs.shape[0] * width))
        _hadamard_apply(padded, self.signs, width ** (-0.5 * self.k), out, np.empty(width))
        return _finish(out, self.m, self.row_norms, _constant_norm(self.norms, width), x.shape[:-1], dtype)

    def dense(self) -> np.ndarray:
        """The ``(m, d)`` matrix from explicit Hadamard and sign matrices (a test oracle, ``O(m d'²)``)."""
        from scipy.linalg import hadamard

        h = hadamard(self.width).astype(np.float64) / math.sqrt(self.width)
        blocks = []
        for signs in self.signs:
            block = np.eye(self.width)
            for s in signs:  # B = (H D_1)(H D_2)…(H D_k)
                block = block @ (h * s.astype(np.float64)[None, :])
            blocks.append(block)
        rows = np.concatenate(blocks, axis=0)[: self.m, : self.d]
        radii = self.row_norms if self.row_norms is not None else _constant_norm(self.norms, self.width)
        return rows * np.reshape(radii, (-1, 1))


@dataclass(frozen=True, eq=False)
class GivensProjection:
    """G-ORF projection ``W ∈ R^{m×d}`` kept as ``K`` Givens rotations per block (module docstring).

    Attributes
    ----------
    pairs : int32 array ``(blocks, K, 2)``
        Coordinate pairs ``(i, j)``, ``i ≠ j``, of the rotations ``R_1..R_K`` (applied in this order).
    angles : float array ``(blocks, K)``
        Rotation angles; ``R_t`` maps ``(a_i, a_j)`` to ``(a_i cos θ - a_j sin θ, a_i sin θ + a_j cos θ)``.
    row_norms, norms : as in :class:`HadamardProjection` (constant radius ``√d`` for ``sqrt_d``).
    """

    m: int
    d: int
    pairs: np.ndarray
    angles: np.ndarray
    row_norms: np.ndarray | None
    norms: str

    @property
    def rotations(self) -> int:
        return self.pairs.shape[1]

    @property
    def nbytes(self) -> int:
        """Bytes that encode ``W``: pairs, angles and, for ``chi``, the row norms."""
        return int(self.pairs.nbytes + self.angles.nbytes
                   + (0 if self.row_norms is None else self.row_norms.nbytes))

    def apply(self, x, *, dtype=np.float64) -> np.ndarray:
        """``x Wᵀ`` for ``x`` of shape ``(..., d)``: ``(..., m)``, ``O(⌈m/d⌉·K)`` per vector."""
        x, flat = _flatten(x, self.d)
        out = np.empty((flat.shape[0], self.pairs.shape[0] * self.d))
        _givens_apply(flat, self.pairs, np.cos(self.angles), np.sin(self.angles), out, np.empty(self.d))
        return _finish(out, self.m, self.row_norms, _constant_norm(self.norms, self.d), x.shape[:-1], dtype)

    def dense(self) -> np.ndarray:
        """The ``(m, d)`` matrix as a product of explicit rotation matrices (a test oracle)."""
        blocks = []
        for pairs, angles in zip(self.pairs, self.angles, strict=True):
            block = np.eye(self.d)
            for (i, j), theta in zip(pairs, angles, strict=True):
                rot = np.eye(self.d)
                rot[i, i] = rot[j, j] = math.cos(theta)
                rot[i, j], rot[j, i] = -math.sin(theta), math.sin(theta)
                block = rot @ block  # B = R_K … R_1
            blocks.append(block)
        rows = np.concatenate(blocks, axis=0)[: self.m]
        radii = self.row_norms if self.row_norms is not None else _constant_norm(self.norms, self.d)
        return rows * np.reshape(radii, (-1, 1))


def hadamard_projection(m: int, d: int, *, rng, k: int = 3, norms: str = "chi",
                        pad: bool = True) -> HadamardProjection:
    r"""Sample an H-ORF projection: ``⌈m/d'⌉`` independent blocks ``(H D_1)…(H D_k)`` (Performer B.2(2)).

    Parameters
    ----------
    m, d : int
        Rows and input dimension.
    rng : numpy Generator or seed
    k : int
        Number of ``H D`` factors per block (default 3, as in Choromanski et al. 2017).
    norms : {"chi", "sqrt_d", "unit"}
        Radial law of the rows in dimension ``d'`` (see the module docstring); ``sqrt_d`` is the native
        ``√d·B`` scaling, ``chi`` (default, as for :func:`~rfkit.estimators.projections.orthogonal_projection`)
        targets the softmax kernel.
    pad : bool
        Zero-pad inputs to ``d' = 2^⌈log₂ d⌉`` when ``d`` is not a power of two; ``False`` raises instead.

    Returns
    -------
    HadamardProjection
        Apply with ``.apply(x)`` (``O(m log d)`` per vector); ``.dense()`` is the explicit matrix.

    Notes
    -----
    Storage ``k·d'·⌈m/d'⌉`` sign bytes (``= k·m`` when ``d'`` divides ``m``) plus ``m`` norms for ``chi``:
    ``O(m)``. Randomness: the signs and norms, from ``rng`` only.

    Examples
    --------
    >>> w = hadamard_projection(4, 4, rng=0, norms="unit").dense()
    >>> bool(np.allclose(w @ w.T, np.eye(4)))
    True
    """
    m, d, k = check_positive_int(m, "m"), check_positive_int(d, "d"), check_positive_int(k, "k")
    norms = check_choice(norms, "norms", NORM_LAWS)
    rng = check_rng(rng)
    width = next_power_of_two(d)
    if width != d and not pad:
        raise ValueError(f"d={d} is not a power of two; pass pad=True to zero-pad inputs to {width}")
    blocks = -(-m // width)
    signs = (2 * rng.integers(0, 2, size=(blocks, k, width), dtype=np.int8) - 1).astype(np.int8)
    return HadamardProjection(m, d, signs, _draw_norms(m, width, norms, rng), norms)


def givens_projection(m: int, d: int, *, rng, rotations: int | None = None,
                      norms: str = "chi") -> GivensProjection:
    r"""Sample a G-ORF projection: ``⌈m/d⌉`` independent blocks of ``K`` random Givens rotations (B.2(2)).

    Parameters
    ----------
    m, d : int
        Rows and input dimension, ``d >= 2`` (a rotation needs two coordinates).
    rng : numpy Generator or seed
    rotations : int, optional
        ``K`` per block; default :func:`default_givens_rotations` ``= ⌈d log₂ d⌉``.
    norms : {"chi", "sqrt_d", "unit"}
        Radial law of the rows (module docstring).

    Returns
    -------
    GivensProjection
        ``.apply(x)`` costs ``4K`` multiplications per block and vector (``O(m log d)`` with the default
        ``K``); ``.dense()`` is the explicit matrix.

    Notes
    -----
    Kac's walk: pair ``(i, j)`` uniform among ordered pairs with ``i ≠ j``, angle uniform on ``[0, 2π)``.
    Storage ``K·⌈m/d⌉`` pairs (two int32) and angles (float64), plus ``m`` norms for ``chi``.

    Examples
    --------
    >>> w = givens_projection(3, 3, rng=0, norms="unit").dense()
    >>> bool(np.allclose(w @ w.T, np.eye(3)))
    True
    """
    m, d = check_positive_int(m, "m"), check_positive_int(d, "d", minimum=2)
    rotations = default_givens_rotations(d) if rotations is None else check_positive_int(rotations, "rotations",
                                                                                          minimum=0)
    norms = check_choice(norms, "norms", NORM_LAWS)
    rng = check_rng(rng)
    blocks = -(-m // d)
    first = rng.integers(0, d, size=(blocks, rotations))
    second = rng.integers(0, d - 1, size=(blocks, rotations))
    second = second + (second >= first)
    pairs = np.stack([first, second], axis=-1).astype(np.int32)
    angles = rng.uniform(0.0, 2 * math.pi, size=(blocks, rotations))
    return GivensProjection(m, d, pairs, angles, _draw_norms(m, d, norms, rng), norms)
