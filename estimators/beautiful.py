r"""Monte Carlo estimators of *beautiful functions* (Performer ``003_4855bc6ab225d7a6.txt``, App. F.4).

A beautiful function (Definition 1, Eq 36) is

.. math::  F_{Ω,g}(z) = E_{ω∼Ω}\, g(ωᵀz),

with ``Ω`` isotropic on ``R^d`` and ``g(u) = Σ_s a_s u^s`` entire with every ``a_s ≥ 0``. The softmax
kernel is one (Remark 1, Eq 37): ``SM(x, y) = Λ·F_{N(0,I), exp}(x + y)`` with
``Λ = exp(-(‖x‖²+‖y‖²)/2)``, and so is the regularized kernel with ``Ω_reg = Unif(√d S^{d-1})``.

This module holds the two objects that define ``F`` and the estimators of Eqs 38-39:

* :class:`IsotropicLaw` — ``Ω`` as the law of ``ω = R·u`` with ``u`` uniform on ``S^{d-1}`` and an
  independent radius ``R`` (``chi``: ``Ω = N(0, I_d)``; ``sqrt_d``: ``Ω_reg``; ``uniform``: ``R`` uniform on
  ``[0, radius]``, default ``2√d``; ``fixed``: ``R = radius``). Every isotropic law has this form.
* :class:`Maclaurin` — ``g`` by its non-negative Maclaurin coefficients, with closed forms for
  ``scale·exp(rate·u)``, ``scale·cosh(rate·u)`` and polynomials.
* :func:`beautiful_terms` / :func:`beautiful_estimate` — ``X_i = g(ω_iᵀz)`` and their average,
  ``F̂^iid_m`` (iid ``ω_i``, Eq 38) or ``F̂^ort_m`` (Eq 39: pairwise orthogonal ``ω_i``, each marginally
  ``Ω``, ``m <= d``): a Haar-distributed ``m``-frame (:func:`~rfkit.estimators.orthogonal_projection`)
  with independent radii from the radial law — the construction of the proof of Theorem 5 (Eq 53).

Design notes
------------
* The law is given by its radial part because that is what both the estimator (sampling) and the theory
  (radial moments ``E‖ω‖^j``, :mod:`rfkit.theory.beautiful`) need; one object serves both.
* ``g`` is restricted to the families above, each with exact log-coefficients, so that every series in
  the theory module is evaluated from the same coefficients the estimator's ``g`` has.
* Estimators are batched: ``size`` independent estimates come from one ``(size, m, d)`` projection array.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from ._checks import as_float_array, check_choice, check_positive_float, check_positive_int, check_rng
from .projections import gaussian_projection, orthogonal_projection

__all__ = ["RADIAL_LAWS", "G_KINDS", "IsotropicLaw", "Maclaurin", "beautiful_projections", "beautiful_terms",
           "beautiful_estimate"]

#: Radial laws of :class:`IsotropicLaw`.
RADIAL_LAWS = ("chi", "sqrt_d", "uniform", "fixed")
#: Families of :class:`Maclaurin`.
G_KINDS = ("exp", "cosh", "poly")


@dataclass(frozen=True)
class IsotropicLaw:
    """An isotropic law ``Ω`` on ``R^d``: ``ω = R·u``, ``u`` uniform on ``S^{d-1}``, ``R`` independent.

    Parameters
    ----------
    d : int
        Dimension, ``d >= 1``.
    radial : {"chi", "sqrt_d", "uniform", "fixed"}
        ``chi``: ``R ~ chi(d)``, i.e. ``Ω = N(0, I_d)``; ``sqrt_d``: ``R = √d`` (``Ω_reg``); ``uniform``:
        ``R`` uniform on ``[0, radius]`` (default ``radius = 2√d``); ``fixed``: ``R = radius``.
    radius : float, optional
        Required for ``fixed``; the upper end for ``uniform``; ignored otherwise (set to ``√d`` for
        ``sqrt_d``).

    Examples
    --------
    >>> IsotropicLaw(4, "uniform").radius
    4.0
    """

    d: int
    radial: str = "chi"
    radius: float | None = None

    def __post_init__(self):
        check_positive_int(self.d, "d")
        check_choice(self.radial, "radial", RADIAL_LAWS)
        if self.radial == "fixed":
            if self.radius is None:
                raise ValueError("radius is required for the 'fixed' radial law")
            radius = check_positive_float(self.radius, "radius")
        elif self.radial == "uniform":
            radius = 2 * math.sqrt(self.d) if self.radius is None else check_positive_float(self.radius, "radius")
        elif self.radial == "sqrt_d":
            radius = math.sqrt(self.d)
        else:
            radius = None
        object.__setattr__(self, "radius", radius)

    @property
    def bounded(self) -> bool:
        """Whether ``‖ω‖`` is bounded (every law but ``chi``)."""
        return self.radial != "chi"

    def sample_radii(self, shape, rng: np.random.Generator) -> np.ndarray:
        """Independent draws of ``R = ‖ω‖`` with the given shape."""
        if self.radial == "chi":
            return np.sqrt(rng.chisquare(self.d, size=shape))
        if self.radial == "uniform":
            return self.radius * rng.random(shape)
        return np.full(shape, self.radius)


@dataclass(frozen=True)
class Maclaurin:
    """``g(u) = Σ_s a_s u^s`` with ``a_s >= 0``: ``scale·exp(rate·u)``, ``scale·cosh(rate·u)`` or a polynomial.

    Parameters
    ----------
    kind : {"exp", "cosh", "poly"}
    scale, rate : float
        For ``exp`` and ``cosh``: ``a_s = scale·rate^s/s!`` (``cosh``: even ``s`` only). ``scale > 0``,
        ``rate > 0``.
    coefficients : tuple of float
        For ``poly``: ``(a_0, a_1, ...)``, every entry ``>= 0``, not all zero.

    Examples
    --------
    >>> g = Maclaurin.polynomial(1, 1, 1)          # 1 + u + u²
    >>> float(g(np.array(2.0))), g.a0, g.a1
    (7.0, 1.0, 1.0)
    """

    kind: str
    scale: float = 1.0
    rate: float = 1.0
    coefficients: tuple[float, ...] = ()

    def __post_init__(self):
        check_choice(self.kind, "kind", G_KINDS)
        check_positive_float(self.scale, "scale")
        check_positive_float(self.rate, "rate")
        if self.kind == "poly":
            coeffs = tuple(float(check_positive_float(a, "coefficients", allow_zero=True))
                           for a in self.coefficients)
            while coeffs and coeffs[-1] == 0:
                coeffs = coeffs[:-1]
            if not coeffs:
                raise ValueError("coefficients of a polynomial g must not all be zero")
            object.__setattr__(self, "coefficients", coeffs)

    @classmethod
    def exp(cls, scale: float = 1.0, rate: float = 1.0) -> Maclaurin:
        """``g(u) = scale·exp(rate·u)``."""
        return cls("exp", scale, rate)

    @classmethod
    def cosh(cls, scale: float = 1.0, rate: float = 1.0) -> Maclaurin:
        """``g(u) = scale·cosh(rate·u)``."""
        return cls("cosh", scale, rate)

    @classmethod
    def polynomial(cls, *coefficients: float) -> Maclaurin:
        """``g(u) = a_0 + a_1 u + ...`` from ``(a_0, a_1, ...)``."""
        return cls("poly", coefficients=tuple(coefficients))

    @property
    def degree(self) -> int | None:
        """Polynomial degree, ``None`` for the entire non-polynomial families."""
        return len(self.coefficients) - 1 if self.kind == "poly" else None

    def log_coefficients(self, n: int) -> np.ndarray:
        """``log a_s`` for ``s = 0..n-1`` (``-inf`` where ``a_s = 0``)."""
        s = np.arange(n)
        if self.kind == "poly":
            a = np.zeros(n)
            k = min(n, len(self.coefficients))
            a[:k] = self.coefficients[:k]
            with np.errstate(divide="ignore"):
                return np.log(a)
        out = math.log(self.scale) + s * math.log(self.rate) - special.gammaln(s + 1)
        if self.kind == "cosh":
            out = np.where(s % 2 == 0, out, -np.inf)
        return out

    def coefficient(self, s: int) -> float:
        """``a_s``."""
        return float(np.exp(self.log_coefficients(s + 1)[s]))

    @property
    def a0(self) -> float:
        return self.coefficient(0)

    @property
    def a1(self) -> float:
        return self.coefficient(1)

    def __call__(self, u) -> np.ndarray:
        """``g(u)`` elementwise (``inf`` where ``exp``/``cosh`` exceed float64)."""
        u = np.asarray(u, dtype=np.float64)
        with np.errstate(over="ignore"):
            if self.kind == "exp":
                return self.scale * np.exp(self.rate * u)
            if self.kind == "cosh":
                return self.scale * np.cosh(self.rate * u)
        return np.polynomial.polynomial.polyval(u, self.coefficients)


def _check_law(law, name: str = "law") -> IsotropicLaw:
    if not isinstance(law, IsotropicLaw):
        raise TypeError(f"{name} must be an IsotropicLaw, got {type(law).__name__}")
    return law


def _check_g(g) -> Maclaurin:
    if not isinstance(g, Maclaurin):
        raise TypeError(f"g must be a Maclaurin series, got {type(g).__name__}")
    return g


def beautiful_projections(law: IsotropicLaw, m: int, *, rng, orthogonal: bool = False,
                          size: int | None = None) -> np.ndarray:
    """Rows ``ω_1..ω_m`` marginally ``Ω``: iid, or pairwise orthogonal (``orthogonal=True``, ``m <= d``).

    Parameters
    ----------
    law : IsotropicLaw
    m : int
        Number of rows; ``m <= d`` when ``orthogonal``.
    rng : numpy Generator or seed
    orthogonal : bool
        ``False``: iid rows ``R_i·u_i``. ``True``: directions form a Haar ``m``-frame (sign-fixed QR,
        :func:`~rfkit.estimators.orthogonal_projection`) and the radii are independent draws of the
        radial law, so every row is marginally ``Ω`` (Performer F.4, Eq 53).
    size : int, optional
        Number of independent matrices; the result then has shape ``(size, m, d)``.

    Notes
    -----
    Cost ``O(m d)`` per matrix for iid rows, ``O(m² d)`` for a Haar frame. Randomness: ``rng`` only.
    """
    law = _check_law(law)
    m = check_positive_int(m, "m")
    rng = check_rng(rng)
    d = law.d
    if orthogonal and m > d:
        raise ValueError(f"orthogonal rows need m <= d (Eq 39), got m={m}, d={d}")
    lead = () if size is None else (check_positive_int(size, "size"),)
    if orthogonal:
        directions = orthogonal_projection(m, d, rng=rng, norms="unit", size=size)
    else:
        g = gaussian_projection(m, d, rng=rng, size=size)
        directions = g / np.linalg.norm(g, axis=-1, keepdims=True)
    return directions * law.sample_radii(lead + (m,), rng)[..., None]


def beautiful_terms(z, g: Maclaurin, law: IsotropicLaw, m: int, *, rng, orthogonal: bool = False,
                    size: int | None = None) -> np.ndarray:
    r"""The terms ``X_i = g(ω_iᵀz)``, ``i = 1..m``, of one (or ``size``) estimates of ``F_{Ω,g}(z)``.

    Returns an array of shape ``(m,)`` (or ``(size, m)``). See :func:`beautiful_estimate`.
    """
    g = _check_g(g)
    law = _check_law(law)
    z = as_float_array(z, "z", ndim=1)
    if z.shape[0] != law.d:
        raise ValueError(f"z must have length law.d = {law.d}, got {z.shape[0]}")
    omega = beautiful_projections(law, m, rng=rng, orthogonal=orthogonal, size=size)
    return g(omega @ z)


def beautiful_estimate(z, g: Maclaurin, law: IsotropicLaw, m: int, *, rng, orthogonal: bool = False,
                       size: int | None = None) -> np.ndarray:
    r"""Monte Carlo estimate of the beautiful function ``F_{Ω,g}(z)``: ``F̂^iid_m`` or ``F̂^ort_m``.

    Parameters
    ----------
    z : array_like, shape ``(d,)``
    g : Maclaurin
        The entire function with non-negative coefficients.
    law : IsotropicLaw
        ``Ω``; ``law.d`` must equal ``len(z)``.
    m : int
        Number of projections (``m <= d`` when ``orthogonal``).
    rng : numpy Generator or seed
    orthogonal : bool
        Orthogonal ensemble (Eq 39) instead of iid rows (Eq 38).
    size : int, optional
        Number of independent estimates (shape ``(size,)``); a scalar array otherwise.

    Returns
    -------
    ndarray
        ``(1/m) Σ_i g(ω_iᵀz)``.

    Notes
    -----
    .. math::  \hat F^{iid}_m(z) = \frac1m \sum_{i=1}^m g(ω_i^{iid\,⊤} z),\qquad
               \hat F^{ort}_m(z) = \frac1m \sum_{i=1}^m g(ω_i^{ort\,⊤} z)

    (Performer Eqs 38-39). Both are unbiased because every ``ω_i`` is marginally ``Ω``. Cost ``O(m d)``
    per estimate plus sampling (``O(m² d)`` for the Haar frame). Randomness: ``rng`` only.

    References
    ----------
    Choromanski et al., "Rethinking Attention with Performers", ICLR 2021, App. F.4, Eqs 36-39.

    Examples
    --------
    With ``z = 0`` every estimate equals ``g(0) = a_0``:

    >>> float(beautiful_estimate(np.zeros(3), Maclaurin.exp(), IsotropicLaw(3), 2, rng=0))
    1.0
    """
    return beautiful_terms(z, g, law, m, rng=rng, orthogonal=orthogonal, size=size).mean(axis=-1)
