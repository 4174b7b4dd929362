r"""Dot-product kernels with non-negative Maclaurin coefficients (Macformer Table 1) and exact kernelized attention.

A dot-product kernel is ``K(x, y) = f(x·y)`` with ``f(t) = Σ_{N>=0} a_N t^N`` (radius of convergence ``R_f``).
Macformer (``004_803b6fd9a1d4a879.txt``, Table 1) uses five of them, registered here under their Table 1 names:

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
coefficients in closed form (for the estimator at any ``N``; tests compare it with the sympy expansion). The
Gram functions are registered in :data:`rfkit.estimators.kernels.KERNELS` on import.

Design notes
------------
* Arguments outside a closed form's domain raise ``ValueError`` naming the kernel and the largest argument:
  attention is not defined there, and clipping would hide that (``inv`` at ``t = 1`` is a pole).
* :func:`kernelized_attention` is Definition 2 in the masked form of the RMFA display: the multiplicative ``M'``
  form (masked weights are 0) by default, or the *masked fill* form ``f(S ⊙ M)`` of Definition 1 with one of
  :data:`MASK_FILLS`. ``exp`` and ``trigh`` are evaluated at ``S - max_row S`` (log-sum-exp); the shift cancels
  in the ratio because both are exponentials. ``trigh`` (printed ``sinh + cosh``) is evaluated as ``e^t``, its
  numerically stable form (the printed sum cancels catastrophically for ``t ≪ 0``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import special

from ._checks import NumericalError, as_float_array, as_mask, check_choice, check_same_last_dim
from .kernels import KERNELS, dot_product_kernel

__all__ = ["MaclaurinKernel", "MACLAURIN_KERNELS", "MASK_FILLS", "get_maclaurin_kernel", "kernel_values",
           "kernel_scores", "masked_fill", "kernelized_attention", "KernelAttentionStats"]


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

#: Masked-fill semantics of Definition 1's ``S ⊙ M`` (``M`` boolean, True = keep).
MASK_FILLS = ("additive", "neg_inf", "neg_1e9", "dtype_min")


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


def kernel_scores(kernel, t, *, mode: str = "closed_form", coefficients=None) -> np.ndarray:
    """``f(t)``: closed form (:func:`kernel_values`) or the truncated series ``Σ_{N<=N_max} a_N t^N``.

    ``coefficients`` (series mode): the sequence ``a_0..a_{N_max}`` (e.g. from
    :func:`rfkit.theory.maclaurin.coefficient_values`), evaluated by Horner's rule.
    """
    mode = check_choice(mode, "mode", ("closed_form", "series"))
    if mode == "closed_form":
        return kernel_values(kernel, t)
    if coefficients is None:
        raise ValueError("series mode needs the coefficients a_0..a_N_max")
    a = as_float_array(coefficients, "coefficients", ndim=1)
    t = np.asarray(t, dtype=np.float64)
    out = np.full(t.shape, a[-1])
    for coefficient in a[-2::-1]:
        out = out * t + coefficient
    return out


def masked_fill(scores: np.ndarray, keep: np.ndarray, fill: str) -> np.ndarray:
    """Definition 1's ``S ⊙ M``: masked positions (``keep = False``) replaced per :data:`MASK_FILLS`."""
    fill = check_choice(fill, "mask_fill", MASK_FILLS)
    if fill == "additive":
        return scores + np.where(keep, 0.0, -np.inf)
    value = {"neg_inf": -np.inf, "neg_1e9": -1e9, "dtype_min": np.finfo(scores.dtype).min}[fill]
    return np.where(keep, scores, value)


@dataclass(frozen=True)
class KernelAttentionStats:
    """Diagnostics of one kernelized-attention call: non-finite outputs and non-positive renormalisers."""

    n_nonfinite: int
    n_nonpositive: int
    n_rows: int


def _keep_mask(n: int, m: int, lead: tuple[int, ...], mask, causal: bool) -> np.ndarray:
    keep = np.ones(lead + (n, m), dtype=bool)
    if mask is not None:
        keep = keep & as_mask(mask, "mask", lead + (n, m))
    if causal:
        if n != m:
            raise ValueError(f"causal attention needs as many queries as keys, got {n} and {m}")
        keep = keep & np.tri(n, m, dtype=bool)
    return keep


def kernelized_attention(q, k, v, kernel="exp", *, mask=None, causal: bool = False, scale: float | None = None,
                         mask_fill: str | None = None, mode: str = "closed_form", coefficients=None,
                         on_nonfinite: str = "raise", return_stats: bool = False):
    r"""Exact kernelized attention (Macformer Definition 2, masked form of the RMFA display).

    .. math::  \mathrm{attn}_K(Q, K, V)_a = \frac{\sum_i M'_{ai} f(x_{ai}) V_i}{\sum_j M'_{aj} f(x_{aj})},
               \qquad x_{ai} = \mathrm{scale}\; q_a \cdot k_i,

    or, with ``mask_fill``, Definition 1's literal form ``Σ_i f((S ⊙ M)_ai) V_i / Σ_j f((S ⊙ M)_aj)``.
    With ``kernel="exp"`` this is softmax attention.

    Parameters
    ----------
    q, k, v : array_like, shapes ``(..., n_q, d)``, ``(..., n_k, d)``, ``(..., n_k, d_v)``
    kernel : str or MaclaurinKernel
        One of :data:`MACLAURIN_KERNELS`.
    mask : bool array, optional
        ``M'`` (True = keep), broadcastable to ``(..., n_q, n_k)``; combined with ``causal``.
    scale : float, optional
        Score scale, default ``1/√d``.
    mask_fill : str, optional
        ``None`` (multiplicative ``M'``, default) or one of :data:`MASK_FILLS`.
    mode, coefficients
        ``closed_form`` (Table 1's ``f``) or ``series`` (see :func:`kernel_scores`).
    on_nonfinite : {"raise", "propagate"}
        What to do with non-finite outputs: raise :class:`NumericalError` (default) or return them (IEEE) and
        count them in the stats.
    return_stats : bool
        Also return :class:`KernelAttentionStats`.

    Raises
    ------
    ValueError
        A score outside the kernel's domain (e.g. ``x >= 1`` for ``inv``), or a query with no kept key.

    Notes
    -----
    Cost ``O(n_q n_k (d + d_v))`` time, ``O(n_q n_k)`` memory. Deterministic.

    Examples
    --------
    Three keys with equal scores: the plain mean of the values.

    >>> kernelized_attention(np.zeros((1, 2)), np.zeros((3, 2)), [[0.0], [3.0], [6.0]], "inv")
    array([[3.]])
    """
    q = as_float_array(q, "q", min_ndim=2)
    k = as_float_array(k, "k", min_ndim=2)
    v = as_float_array(v, "v", min_ndim=2)
    check_same_last_dim(q, k, "q", "k")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of rows, got {k.shape[-2]} and {v.shape[-2]}")
    on_nonfinite = check_choice(on_nonfinite, "on_nonfinite", ("raise", "propagate"))
    spec = get_maclaurin_kernel(kernel)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    lead = np.broadcast_shapes(scores.shape[:-2], v.shape[:-2])
    keep = _keep_mask(q.shape[-2], k.shape[-2], lead, mask, causal)
    if not keep.any(axis=-1).all():
        raise ValueError("a query row keeps no key: its attention is 0/0 (excluded by definition)")
    weights = _weights(spec, np.broadcast_to(scores, keep.shape), keep, mask_fill, mode, coefficients)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        num = weights @ v
        den = weights.sum(axis=-1)
        out = num / den[..., None]
    stats = KernelAttentionStats(int(out.size - np.isfinite(out).sum()), int((den <= 0).sum()), int(den.size))
    if stats.n_nonfinite and on_nonfinite == "raise":
        raise NumericalError(f"kernelized attention ({spec.name}) has {stats.n_nonfinite} non-finite output(s)")
    return (out, stats) if return_stats else out


def _weights(spec: MaclaurinKernel, scores, keep, mask_fill, mode, coefficients) -> np.ndarray:
    """Unnormalised attention weights ``f(x)`` (row-shifted for exponential kernels in closed form)."""
    shifted = spec.exponential and mode == "closed_form"
    if mask_fill is None:
        if shifted:
            scores = scores - np.where(keep, scores, -np.inf).max(axis=-1, keepdims=True)
        kept = kernel_scores(spec, np.where(keep, scores, 0.0), mode=mode, coefficients=coefficients)
        return np.where(keep, kept, 0.0)
    filled = masked_fill(scores, keep, mask_fill)
    if shifted:
        filled = filled - filled.max(axis=-1, keepdims=True)
    return kernel_scores(spec, filled, mode=mode, coefficients=coefficients)


def _register() -> None:
    """Add Table 1's Gram functions ``K(x, y) = f(x·y)`` to the shared kernel registry."""
    for name, spec in MACLAURIN_KERNELS.items():
        gram = dot_product_kernel(lambda t, spec=spec: kernel_values(spec, t), name)
        existing = KERNELS.get(name)
        if existing is not None and getattr(existing, "__name__", "") != gram.__name__:
            raise RuntimeError(f"kernel name {name!r} is already registered by another module")
        KERNELS.setdefault(name, gram)


_register()
