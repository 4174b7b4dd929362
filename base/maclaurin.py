r"""Dot-product kernels with non-negative Maclaurin coefficients (Macformer, Table 1) and the random Maclaurin
degree law (Macformer, Definition 3) — the definitions that estimators and theory both name.

A dot-product kernel is ``K(x, y) = f(x·y)`` with ``f(t) = Σ_{N>=0} a_N t^N`` (radius of convergence ``R_f``).
Macformer uses five of them, registered in :data:`MACLAURIN_KERNELS` under their Table 1 names:

=======  ======================  ======================================  =====================
name     f(t) as printed         a_N as printed                          domain of the closed form
=======  ======================  ======================================  =====================
exp      exp(t)                  1/N!                                    all t
inv      1/(1 - t)               1                                       t < 1
log      1 - log(1 - t)          1/min(1, N)                             t < 1
trigh    sinh(t) + cosh(t)       1/N!                                    all t
sqrt     2 - sqrt(1 - t)         max(1, 2N - 3)/(2^N N!)                 t <= 1
=======  ======================  ======================================  =====================

Each :class:`MaclaurinKernel` carries the printed closed form (numpy), its sympy expression (from which
:mod:`rfkit.theory.maclaurin` derives the true coefficients exactly), the printed coefficient formula in exact
rational arithmetic (``None`` where it has no value: ``1/min(1, 0)`` is ``1/0``), and the log of the true
coefficients in closed form (tests compare it with the sympy expansion). Arguments outside a closed form's domain
raise ``ValueError`` (``inv`` at ``t = 1`` is a pole; clipping would hide it).

The RMF degree law: ``P[N = n] = (1 - 1/p) p^{-n}`` (``geom``) or the printed ``p^{-(n+1)}`` (``defective``,
which sums to ``1/(p - 1)``), with feature weights ``c_N² = a_N p^{N+1}`` (``printed``) or ``a_N/π_N``
(``importance``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import special

from .checks import check_choice, check_positive_float

__all__ = ["MaclaurinKernel", "MACLAURIN_KERNELS", "get_maclaurin_kernel", "kernel_values", "N_LAWS", "WEIGHTS",
           "log_degree_mass", "log_weight_squared", "check_law"]

N_LAWS = ("geom", "defective")
WEIGHTS = ("printed", "importance")
_VALID = {("geom", "printed"), ("geom", "importance"), ("defective", "printed")}


@dataclass(frozen=True)
class MaclaurinKernel:
    """A dot-product kernel ``f(t) = Σ a_N t^N`` with ``a_N >= 0``.

    Attributes
    ----------
    name : str
    expression : str
        ``f`` as printed, a sympy expression in ``t`` (the theory module expands it).
    closed_form : callable
        ``f`` as printed, elementwise on numpy arrays (no domain check: see :func:`kernel_values`).
    printed : callable
        ``N -> Fraction | None``: the printed ``a_N`` in exact arithmetic (``None``: undefined at ``N``).
    log_coefficient : callable
        ``N (int array) -> log a_N`` of the true coefficients, in closed form (``-inf`` for ``a_N = 0``).
    radius : float
        Radius of convergence ``R_f`` of the series (``inf`` for entire functions).
    boundary_decay : float
        ``α`` with ``a_N ~ C N^{-α} R_f^{-N}`` (decides convergence of coefficient series on ``|t| = R_f``).
    domain_max : float
        Largest argument of the closed form; ``domain_closed`` says whether it is included.
    """

    name: str
    expression: str
    closed_form: Callable[[np.ndarray], np.ndarray]
    printed: Callable[[int], Fraction | None]
    log_coefficient: Callable[[np.ndarray], np.ndarray]
    radius: float
    boundary_decay: float
    domain_max: float = math.inf
    domain_closed: bool = True
    exponential: bool = False

    def in_domain(self, t: np.ndarray) -> np.ndarray:
        """Boolean mask of arguments where the printed closed form is defined (nan is outside)."""
        t = np.asarray(t)
        return t <= self.domain_max if self.domain_closed else t < self.domain_max


def _log_factorial(n: np.ndarray) -> np.ndarray:
    return special.gammaln(np.asarray(n, dtype=np.float64) + 1.0)


def _log_inverse_n(n: np.ndarray) -> np.ndarray:
    n = np.asarray(n, dtype=np.float64)
    return -np.log(np.maximum(n, 1.0))


def _log_sqrt_coefficient(n: np.ndarray) -> np.ndarray:
    """``a_0 = 1``, ``a_N = (2N-3)!!/(2^N N!)`` for ``N >= 1`` with ``(2N-3)!! = (2N-2)!/(2^{N-1}(N-1)!)``."""
    n = np.asarray(n, dtype=np.float64)
    m = np.maximum(n, 1.0)
    log_double_factorial = special.gammaln(2 * m - 1) - (m - 1) * math.log(2) - special.gammaln(m)
    log_a = log_double_factorial - m * math.log(2) - _log_factorial(m)
    return np.where(n == 0, 0.0, log_a)


def _printed_sqrt(n: int) -> Fraction:
    return Fraction(max(1, 2 * n - 3), 2**n * math.factorial(n))


def _printed_log(n: int) -> Fraction | None:
    return None if min(1, n) == 0 else Fraction(1, min(1, n))


def _trigh(t):
    # sinh t + cosh t, evaluated as e^t: the same function, while the printed sum cancels catastrophically for
    # t << 0 (float64 sinh(-20) + cosh(-20) is exactly 0) and gives -inf + inf = nan at a -inf fill.
    return np.exp(t)


def _inv(t):
    return 1.0 / (1.0 - t)


def _log(t):
    return 1.0 - np.log1p(-t)


def _sqrt(t):
    return 2.0 - np.sqrt(1.0 - t)


#: Table 1's kernels.
MACLAURIN_KERNELS: dict[str, MaclaurinKernel] = {
    "exp": MaclaurinKernel("exp", "exp(t)", np.exp, lambda n: Fraction(1, math.factorial(n)),
                           lambda n: -_log_factorial(n), math.inf, math.inf, exponential=True),
    "inv": MaclaurinKernel("inv", "1/(1 - t)", _inv, lambda n: Fraction(1),
                           lambda n: np.zeros(np.shape(n)), 1.0, 0.0, 1.0, False),
    "log": MaclaurinKernel("log", "1 - log(1 - t)", _log, _printed_log, _log_inverse_n, 1.0, 1.0, 1.0, False),
    "trigh": MaclaurinKernel("trigh", "sinh(t) + cosh(t)", _trigh, lambda n: Fraction(1, math.factorial(n)),
                             lambda n: -_log_factorial(n), math.inf, math.inf, exponential=True),
    "sqrt": MaclaurinKernel("sqrt", "2 - sqrt(1 - t)", _sqrt, _printed_sqrt, _log_sqrt_coefficient, 1.0, 1.5,
                            1.0, True),
}

def get_maclaurin_kernel(kernel) -> MaclaurinKernel:
    """A kernel by name (a key of :data:`MACLAURIN_KERNELS`) or a :class:`MaclaurinKernel` itself."""
    if isinstance(kernel, MaclaurinKernel):
        return kernel
    return MACLAURIN_KERNELS[check_choice(kernel, "kernel", MACLAURIN_KERNELS)]


def kernel_values(kernel, t) -> np.ndarray:
    """``f(t)`` by the printed closed form; ``ValueError`` if some ``t`` lies outside its domain.

    Examples
    --------
    >>> kernel_values("inv", [0.0, 0.5])
    array([1., 2.])
    """
    spec = get_maclaurin_kernel(kernel)
    t = np.asarray(t, dtype=np.float64)
    outside = ~spec.in_domain(t)
    if outside.any():
        bound = "<=" if spec.domain_closed else "<"
        largest = float(np.max(t[~np.isnan(t)], initial=-np.inf))
        raise ValueError(f"kernel {spec.name!r} is defined for t {bound} {spec.domain_max:g}; "
                         f"{int(outside.sum())} argument(s) lie outside (largest {largest:.6g}, "
                         f"{int(np.isnan(t).sum())} nan)")
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return spec.closed_form(t)



# ------------------------------------------------------------------------------- RMF degree law


def log_degree_mass(n: np.ndarray, p: float, n_law: str) -> np.ndarray:
    """``log π_n`` of the degree law (``geom``: ``(1 - 1/p) p^{-n}``; ``defective``: ``p^{-(n+1)}``)."""
    n = np.asarray(n, dtype=np.float64)
    if n_law == "geom":
        return math.log1p(-1.0 / p) - n * math.log(p)
    return -(n + 1.0) * math.log(p)


def log_weight_squared(n: np.ndarray, log_a: np.ndarray, p: float, n_law: str, weight: str) -> np.ndarray:
    """``log c_n²``: ``log a_n + (n+1) log p`` (printed) or ``log a_n - log π_n`` (importance)."""
    n = np.asarray(n, dtype=np.float64)
    if weight == "printed":
        return log_a + (n + 1.0) * math.log(p)
    return log_a - log_degree_mass(n, p, n_law)


def check_law(p: float, n_law: str, weight: str) -> float:
    """Validate ``p > 1`` and the (law, weight) pair; ``defective`` needs ``p >= 2``."""
    p = check_positive_float(p, "p")
    if p <= 1:
        raise ValueError(f"p must be > 1 (Definition 3), got {p}")
    n_law = check_choice(n_law, "n_law", N_LAWS)
    weight = check_choice(weight, "weight", WEIGHTS)
    if (n_law, weight) not in _VALID:
        raise ValueError(f"(n_law, weight) = ({n_law}, {weight}) is not a valid pair; expected one of {sorted(_VALID)}")
    if n_law == "defective" and p < 2:
        raise ValueError(f"the defective law needs p >= 2 (its masses sum to 1/(p-1) <= 1), got p = {p}")
    return p
