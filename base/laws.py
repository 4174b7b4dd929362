r"""The laws, function families and label conventions that parameterise the estimators, named by the theory.

* :class:`IsotropicLaw` and :class:`Maclaurin` — ``Ω`` and ``g`` of a beautiful function
  ``F_{Ω,g}(z) = E g(ωᵀz)`` (Performer, App F.4, Definition 1 / Eq 36): the estimator samples ``ω`` from the
  law and the theory integrates its radial moments, from the same object.
* :data:`GENERALIZED_FUNCTIONS` — the elementwise ``f`` of generalized attention (Performer, App D.3-D.4).
* :data:`EXACT`, :data:`EXCLUDED` — labels of EVA's partition arrays (a key in the exact set ``E``; a key not
  attended).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from .checks import check_choice, check_positive_float, check_positive_int

__all__ = ["RADIAL_LAWS", "G_KINDS", "IsotropicLaw", "Maclaurin", "GENERALIZED_FUNCTIONS", "EXACT", "EXCLUDED"]

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


# ------------------------------------------------------------------ generalized attention


def _relu(u):
    return np.maximum(u, 0.0)


def _gelu(u):
    return u * special.ndtr(u)


def _elu_plus_one(u):
    return np.where(u > 0, u + 1.0, np.exp(np.minimum(u, 0.0)))


def _identity(u):
    return np.asarray(u, dtype=np.float64).copy()


#: Elementwise ``f`` of generalized attention (Performer D.3: sigmoid, exponential, ReLU, absolute, gelu,
#: cosine, tanh, identity; D.4: elu + 1 of the Linear Transformer).
GENERALIZED_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": _relu,
    "sigmoid": special.expit,
    "exp": np.exp,
    "abs": np.abs,
    "gelu": _gelu,
    "cos": np.cos,
    "tanh": np.tanh,
    "identity": _identity,
    "elu_plus_one": _elu_plus_one,
}


# ------------------------------------------------------------------ EVA partitions

#: Label of a key treated exactly (the set ``E``) in a partition label array.
EXACT = -1
#: Label of a key that is not attended at all (e.g. a future key in the causal form).
EXCLUDED = -2
