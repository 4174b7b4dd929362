r"""Random projection matrices ``W ∈ R^{m×d}`` (rows ``ω_1..ω_m``) for random features.

Samplers (Performer ``003_4855bc6ab225d7a6.txt`` Sec 2.4, App B.2, F.4 Eqs 53-54):

* :func:`gaussian_projection` — rows iid ``N(0, I_d)`` (targets SM and ``K_gauss``).
* :func:`spherical_projection` — rows iid uniform on the sphere of radius ``√d`` (targets SMREG).
* :func:`orthogonal_projection` — orthogonal random features (ORF): inside each block of ``d`` rows the
  directions are a Haar-distributed orthonormal frame; the row norms are drawn independently of the
  directions (``norms="chi"`` gives each row the marginal ``N(0, I_d)``, unbiased for SM;
  ``norms="sqrt_d"`` gives the marginal uniform on ``√d S^{d-1}``, the regularized kernel; ``"unit"``
  is diagnostic). ``m > d`` stacks ``⌈m/d⌉`` independent blocks and keeps the first ``m`` rows.
* :func:`rademacher_projection` — iid ±1 entries.

Haar sampling: the QR factorisation of a Gaussian matrix ``G = QR`` is unique only up to the signs of
``diag(R)``; LAPACK's Householder QR ties those signs to ``G`` (numpy gives ``R_11 = -sign(G_11)‖G_1‖``),
so the raw ``Q`` is *not* Haar. Multiplying column ``j`` of ``Q`` by ``sign(R_jj)`` (with
``sign(0) := 1``) makes ``R``'s diagonal positive, which makes the factorisation unique and ``Q`` Haar
(Mezzadri 2007, "How to generate random matrices from the classical compact groups").

Every sampler takes ``rng`` (SPEC 7) and draws nothing from global state.
"""

from __future__ import annotations

import numpy as np

from rfkit.base.checks import check_choice, check_positive_int, check_rng, compute_dtype

__all__ = [
    "haar_orthogonal",
    "gaussian_projection",
    "spherical_projection",
    "orthogonal_projection",
    "rademacher_projection",
    "projection",
    "PROJECTIONS",
    "NORM_LAWS",
]

#: Radial laws for the rows of an orthogonal projection.
NORM_LAWS = ("chi", "sqrt_d", "unit")


def _sign_fix(q: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Return ``Q·diag(sign(diag R))`` with ``sign(0) = 1``: the unique QR with positive ``diag(R)``."""
    signs = np.where(np.diagonal(r, axis1=-2, axis2=-1) < 0, -1.0, 1.0)
    return q * signs[..., None, :]


def haar_orthogonal(d: int, *, rng, size: int | None = None, dtype=np.float64) -> np.ndarray:
    """Haar-distributed orthogonal ``d×d`` matrices (QR of a Gaussian matrix with the sign fix).

    Parameters
    ----------
    d : int
        Dimension, ``d >= 1``.
    rng : numpy Generator or seed
    size : int, optional
        Number of independent matrices; the result then has shape ``(size, d, d)``.
    dtype : float64 or float32
        The factorisation always runs in float64; the result is cast.

    Examples
    --------
    >>> q = haar_orthogonal(3, rng=0)
    >>> bool(np.allclose(q @ q.T, np.eye(3)))
    True
    """
    d = check_positive_int(d, "d")
    dt = compute_dtype(dtype)
    rng = check_rng(rng)
    shape = (d, d) if size is None else (check_positive_int(size, "size"), d, d)
    g = rng.standard_normal(shape)
    q, r = np.linalg.qr(g)
    return _sign_fix(q, r).astype(dt, copy=False)


def _radial(shape: tuple[int, ...], d: int, norms: str, rng: np.random.Generator) -> np.ndarray:
    if norms == "chi":
        return np.sqrt(rng.chisquare(d, size=shape))
    if norms == "sqrt_d":
        return np.full(shape, np.sqrt(d))
    return np.ones(shape)


def _shape(m: int, d: int, size: int | None) -> tuple[int, ...]:
    return (m, d) if size is None else (check_positive_int(size, "size"), m, d)


def gaussian_projection(m: int, d: int, *, rng, size: int | None = None, dtype=np.float64) -> np.ndarray:
    """Rows iid ``N(0, I_d)``: ``W`` of shape ``(m, d)`` (``(size, m, d)`` for ``size`` independent draws).

    Unbiased projections for SM and ``K_gauss``.
    """
    m, d = check_positive_int(m, "m"), check_positive_int(d, "d")
    return check_rng(rng).standard_normal(_shape(m, d, size)).astype(compute_dtype(dtype), copy=False)


def spherical_projection(m: int, d: int, *, rng, size: int | None = None, dtype=np.float64) -> np.ndarray:
    """Rows iid uniform on the sphere of radius ``√d`` (``√d·g/‖g‖``, ``g ~ N(0, I_d)``); SMREG's law."""
    m, d = check_positive_int(m, "m"), check_positive_int(d, "d")
    g = check_rng(rng).standard_normal(_shape(m, d, size))
    w = np.sqrt(d) * g / np.linalg.norm(g, axis=-1, keepdims=True)
    return w.astype(compute_dtype(dtype), copy=False)


def _haar_frame(d: int, k: int, rng: np.random.Generator, lead: tuple[int, ...]) -> np.ndarray:
    """``k <= d`` Haar-orthonormal rows in ``R^d``: the thin QR of a ``d×k`` Gaussian, sign-fixed."""
    q, r = np.linalg.qr(rng.standard_normal(lead + (d, k)))
    return np.swapaxes(_sign_fix(q, r), -1, -2)


def orthogonal_projection(m: int, d: int, *, rng, norms: str = "chi", size: int | None = None,
                          dtype=np.float64) -> np.ndarray:
    """Orthogonal random features: Haar-orthonormal directions in blocks of ``d`` rows, independent norms.

    Parameters
    ----------
    m, d : int
        Number of rows and dimension. ``m > d`` stacks ``⌈m/d⌉`` independent Haar blocks (the last one
        partial): rows in different blocks are independent, rows in one block exactly orthogonal.
    rng : numpy Generator or seed
    norms : {"chi", "sqrt_d", "unit"}
        Radial law of each row, independent of the directions and of each other: ``chi`` (each row is
        marginally ``N(0, I_d)``; unbiased for SM), ``sqrt_d`` (marginally uniform on ``√d S^{d-1}``;
        the regularized softmax kernel SMREG), ``unit`` (diagnostic).
    size : int, optional
        Number of independent projection matrices; the result then has shape ``(size, m, d)``.

    Notes
    -----
    A block of ``k <= d`` rows is a Haar ``k``-frame, the sign-fixed thin QR of a ``d×k`` Gaussian matrix
    (the first ``k`` columns of a Haar orthogonal matrix). Cost ``O(m d²)`` per matrix; storage ``O(md)``.

    Examples
    --------
    >>> w = orthogonal_projection(4, 4, rng=0, norms="unit")
    >>> bool(np.allclose(w @ w.T, np.eye(4)))
    True
    """
    m, d = check_positive_int(m, "m"), check_positive_int(d, "d")
    norms = check_choice(norms, "norms", NORM_LAWS)
    rng = check_rng(rng)
    lead = () if size is None else (check_positive_int(size, "size"),)
    full, rest = divmod(m, d)
    parts = []
    if full:
        blocks = _haar_frame(d, d, rng, lead + (full,))
        parts.append(blocks.reshape(lead + (full * d, d)))
    if rest:
        parts.append(_haar_frame(d, rest, rng, lead))
    directions = np.concatenate(parts, axis=-2) if len(parts) > 1 else parts[0]
    w = directions * _radial(lead + (m,), d, norms, rng)[..., None]
    return w.astype(compute_dtype(dtype), copy=False)


def rademacher_projection(m: int, d: int, *, rng, size: int | None = None, dtype=np.float64) -> np.ndarray:
    """Entries iid uniform on ``{-1, +1}``: ``W`` of shape ``(m, d)`` (or ``(size, m, d)``)."""
    m, d = check_positive_int(m, "m"), check_positive_int(d, "d")
    signs = check_rng(rng).integers(0, 2, size=_shape(m, d, size), dtype=np.int8)
    return (2 * signs - 1).astype(compute_dtype(dtype))


#: Named samplers for :func:`projection`.
PROJECTIONS = {
    "gaussian": gaussian_projection,
    "spherical": spherical_projection,
    "orthogonal": orthogonal_projection,
    "rademacher": rademacher_projection,
}


def projection(kind: str, m: int, d: int, *, rng, size: int | None = None, dtype=np.float64,
               **options) -> np.ndarray:
    """Draw a projection matrix by name: one of :data:`PROJECTIONS` (``options`` go to the sampler)."""
    kind = check_choice(kind, "kind", PROJECTIONS)
    return PROJECTIONS[kind](m, d, rng=rng, size=size, dtype=dtype, **options)
