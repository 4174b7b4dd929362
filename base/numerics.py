r"""Stable log-space arithmetic and small numeric helpers shared by the estimators and the theory.

* :func:`logsumexp` — ``log Σ exp(a)``, max-shifted (``-inf`` where every term is ``-inf``).
* :func:`exp_or_raise` — ``exp(a)`` that raises :class:`~rfkit.base.checks.NumericalError` on overflow.
* :func:`log_normal` — ``log N(ω; μ, I_D)`` with the ``(2π)^{-D/2}`` factor.
* :func:`half_sq_norm` — ``‖x‖²/2`` along the last axis.
* :func:`signed_power` — ``x^e`` entrywise under a reading for negative bases (Macformer's post-SBN power).
* :func:`next_power_of_two` — the padded length of a Walsh–Hadamard transform.
* :func:`gauss_hermite_rule` — tensor Gauss–Hermite nodes and weights for Gaussian expectations.
* :func:`sin_cos` — compiled float64 ``sin`` and ``cos`` of one array (trigonometric features).
* :func:`exp_shifted_rows` — compiled float32 ``exp(x - shift)`` per row, in place (positive features).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.polynomial.hermite_e import hermegauss

from .checks import NumericalError, as_float_array, check_choice

__all__ = ["EXP_ARG_MAX", "LOG_2PI", "POWER_SIGNS", "SIN_COS_MAX", "exp_or_raise", "exp_shifted_rows",
           "gauss_hermite_rule", "half_sq_norm", "log_normal", "logsumexp", "next_power_of_two", "signed_power",
           "sin_cos"]

LOG_2PI = math.log(2 * math.pi)
#: Readings of ``x^e`` for a negative base (Macformer register ``power_sign``).
POWER_SIGNS = ("real", "signed", "abs")


def logsumexp(a, axis=None) -> np.ndarray:
    """``log Σ exp(a)`` along ``axis`` (int or tuple), max-shifted; ``-inf`` where every term is ``-inf``.

    A lean replacement of :func:`scipy.special.logsumexp` for the small arrays of the hot paths.

    Examples
    --------
    >>> float(logsumexp([0.0, 0.0]))  # log 2
    0.6931471805599453
    """
    a = np.asarray(a, dtype=np.float64)
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - top), axis=axis, keepdims=True)) + top
    return np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


def exp_or_raise(log_values, what: str, *, hint: str = "use its log form") -> np.ndarray:
    """``exp(log_values)`` entrywise, or :class:`~rfkit.base.checks.NumericalError` where any value is not finite.

    For quantities kept in log space (a kernel ``log K``, a log-weight) that are exponentiated only on request:
    the error names the quantity (``what``), the dtype it overflowed in and the way out (``hint``, e.g. the
    caller's ``log=True``). ``log_values`` keeps its dtype (float32 overflows sooner than float64).

    Examples
    --------
    >>> float(exp_or_raise(np.array(0.0), "K"))
    1.0
    >>> exp_or_raise(np.array(1000.0), "K")
    Traceback (most recent call last):
    ...
    rfkit.base.checks.NumericalError: K overflows in float64; use its log form
    """
    with np.errstate(over="ignore"):
        out = np.exp(log_values)
    if not np.isfinite(out).all():
        raise NumericalError(f"{what} overflows in {out.dtype}; {hint}")
    return out


def half_sq_norm(x: np.ndarray) -> np.ndarray:
    """``‖x‖²/2`` along the last axis."""
    return 0.5 * np.einsum("...i,...i->...", x, x)


def log_normal(omega, mean=None) -> np.ndarray:
    r"""``log N(ω; μ, I)`` with the ``(2π)^{-D/2}`` factor; ``omega (..., D)``, ``mean`` broadcasting to it
    (``None``: the standard normal).

    Examples
    --------
    >>> float(log_normal(np.zeros(1)))  # -log √(2π)
    -0.9189385332046727
    """
    w = as_float_array(omega, "omega", min_ndim=1)
    diff = w if mean is None else w - as_float_array(mean, "mean", min_ndim=1)
    return -half_sq_norm(diff) - 0.5 * w.shape[-1] * LOG_2PI


def signed_power(x, exponent, power_sign: str = "real") -> np.ndarray:
    """``x^e`` entrywise under a reading for negative bases (Macformer register ``power_sign``).

    ``real``: ``numpy.power`` (``nan`` for a negative base and a non-integer exponent); ``signed``:
    ``sign(x)|x|^e``; ``abs``: ``|x|^e``.

    Examples
    --------
    >>> signed_power([-4.0, 4.0], 0.5, "signed")
    array([-2.,  2.])
    """
    power_sign = check_choice(power_sign, "power_sign", POWER_SIGNS)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        if power_sign == "real":
            return np.power(x, exponent)
        magnitude = np.power(np.abs(x), exponent)
        return np.sign(x) * magnitude if power_sign == "signed" else magnitude


def next_power_of_two(d: int) -> int:
    """Smallest power of two ``>= d`` (``1`` for ``d <= 1``)."""
    return 1 << max(int(d) - 1, 0).bit_length()


@functools.lru_cache(maxsize=32)
def _gauss_hermite_rule(counts: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    rules = [hermegauss(n) for n in counts]
    nodes = np.stack(np.meshgrid(*(x for x, _ in rules), indexing="ij"), axis=-1).reshape(-1, len(counts))
    weights = functools.reduce(np.multiply.outer, [w / math.sqrt(2 * math.pi) for _, w in rules]).ravel()
    nodes.flags.writeable = weights.flags.writeable = False
    return nodes, weights


def gauss_hermite_rule(nodes, d: int = 1) -> tuple[np.ndarray, np.ndarray]:
    r"""The tensor (probabilists') Gauss–Hermite rule for ``E_{N(0, I_d)}[g]``: ``Σ_i w_i g(z_i)``.

    ``nodes``: the number of nodes per axis (an int, the same on each of ``d`` axes, or one count per axis).
    Returns read-only ``z (Π n_i, d)`` and ``w (Π n_i,)`` (``Σ w = 1``; exact for polynomials of degree
    ``< 2 n_i`` along axis ``i``).

    Examples
    --------
    >>> z, w = gauss_hermite_rule(3, d=2)
    >>> z.shape, round(float(w @ z[:, 0] ** 2), 12)
    ((9, 2), 1.0)
    """
    counts = (int(nodes),) * d if np.ndim(nodes) == 0 else tuple(int(n) for n in nodes)
    if not counts or min(counts) < 1:
        raise ValueError(f"a Gauss-Hermite rule needs at least one node on each of at least one axis, got {counts}")
    return _gauss_hermite_rule(counts)


#: Largest |argument| of :func:`sin_cos` (one-step Cody-Waite reduction by π/2 with a 33-bit head: the products
#: k·(π/2)_head are exact for |k| < 2^20); larger arguments go to numpy.
SIN_COS_MAX = 1e5


def sin_cos(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out[..., :m] = sin(x)`` and ``out[..., m:] = cos(x)`` for float64 ``x`` ``(..., m)``, ``out`` ``(..., 2m)``.

    numpy's float64 ``sin``/``cos`` are scalar libm calls (~20 ns a value here, ~10x ``exp``), the largest cost of
    trigonometric random features. This compiled kernel reduces ``x = k·π/2 + r``, ``|r| <= π/4`` (Cody-Waite, two
    parts), evaluates fdlibm's minimax polynomials (``__kernel_sin``/``__kernel_cos``) and picks the quadrant
    ``k mod 4``: within 2 ulp of 1 of libm for ``|x| <= SIN_COS_MAX``; beyond that numpy computes the values.

    Examples
    --------
    >>> out = np.empty((1, 2))
    >>> bool(np.allclose(sin_cos(np.array([[1.0]]), out), [[np.sin(1.0), np.cos(1.0)]], rtol=0, atol=1e-15))
    True
    """
    m = x.shape[-1]
    if not out.flags.c_contiguous or out.shape != x.shape[:-1] + (2 * m,):
        raise ValueError(f"out must be C-contiguous with shape {x.shape[:-1] + (2 * m,)}, got {out.shape}")
    flat = np.ascontiguousarray(x, dtype=np.float64).reshape(-1, m)
    target = out.reshape(-1, 2 * m)  # a view of out (C-contiguous)
    if flat.size and _sin_cos_kernel(flat, target) > SIN_COS_MAX:
        np.sin(x, out=out[..., :m])
        np.cos(x, out=out[..., m:])
    return out


@functools.cache
def _compiled_sin_cos():
    import numba

    @numba.njit(cache=True)
    def kernel(x, out):  # pragma: no cover - compiled
        rows, m = x.shape
        big = 0.0
        for i in range(rows):
            for j in range(m):
                v = x[i, j]
                big = max(big, abs(v))
                k = np.rint(v * 0.6366197723675814)
                r = (v - k * 1.57079632673412561417e+00) - k * 6.07710050650619224932e-11
                z = r * r
                s = r + r * z * (-1.66666666666666324348e-01 + z * (8.33333333332248946124e-03 + z * (
                    -1.98412698298579493134e-04 + z * (2.75573137070700676789e-06 + z * (
                        -2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)))))
                c = 1.0 - 0.5 * z + z * z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * (
                    2.48015872894767294178e-05 + z * (-2.75573143513906633035e-07 + z * (
                        2.08757232129817482790e-09 - z * 1.13596475577881948265e-11)))))
                q = np.int64(k) & 3
                odd = q & 1
                ss = c if odd else s
                cc = s if odd else c
                out[i, j] = -ss if q & 2 else ss
                out[i, m + j] = -cc if (q + 1) & 2 else cc
        return big
    return kernel


def _sin_cos_kernel(x: np.ndarray, out: np.ndarray) -> float:
    """Fill ``out`` ``(R, 2m)`` from ``x`` ``(R, m)``; return ``max |x|`` (values valid where it is <= SIN_COS_MAX;
    NaN propagates into both)."""
    return _compiled_sin_cos()(x, out)


#: Largest argument :func:`exp_shifted_rows` takes (2^127 is the largest power of two its scaling forms).
EXP_ARG_MAX = 88.0
#: Below this argument float32's ``exp`` is subnormal; :func:`exp_shifted_rows` returns 0 there.
_EXP_ARG_MIN = -87.33654


def exp_shifted_rows(x: np.ndarray, shift: np.ndarray, to_max: np.ndarray | None = None) -> np.ndarray:
    """``x[i] = exp(x[i] - shift[i])`` in place, for a C-contiguous float32 ``x`` ``(R, m)`` and ``shift`` ``(R,)``;
    a row flagged in ``to_max`` (``(R,)`` bools) is first shifted by its own maximum instead, which is written into
    ``shift[i]`` (then ``shift`` must be a writable float32 array).

    numpy's float32 ``exp`` is not vectorised on every CPU (~3.5 ns a value on an AVX2 EPYC; this kernel ~1 ns),
    and the positive features of FAVOR+ take one ``exp`` per feature. This compiled kernel forms the float32
    argument ``t = x - shift`` as numpy would, reduces ``t = n·ln 2 + r`` (Cody–Waite, two parts), evaluates
    Cephes' degree-7 ``expf`` polynomial and scales by ``2^n`` built from its exponent bits: within 1 ulp of the
    correctly rounded ``exp(t)``. A row's maximum is ``np.max``'s (NaN if the row holds one) and is taken while the
    row is in cache (FAVOR+ at B·H = 8, L = 4096, m = 256, float32: 74 -> 66 ms on one thread, 54 -> 49 ms on two;
a parallel kernel was slower on two, its threads contending with BLAS's).
    Contract: ``t <= EXP_ARG_MAX`` (callers pass shifted rows, ``t <= 0``, or rows bounded by a small exponent);
    results below float32's smallest normal (``t < -87.34``) are 0 (numpy gives a subnormal, < 1.2e-38); NaN
    propagates. Raises ``ValueError`` on another dtype or layout.

    Examples
    --------
    >>> x = np.array([[0.0, 1.0, -200.0]], np.float32)
    >>> exp_shifted_rows(x, np.array([1.0], np.float32)).tolist() == [[np.float32(np.exp(-1.0)), 1.0, 0.0]]
    True
    """
    if x.dtype != np.float32 or x.ndim != 2 or not x.flags.c_contiguous:
        raise ValueError(f"x must be a C-contiguous 2-d float32 array, got {x.dtype} with shape {x.shape}")
    if to_max is None:
        shift, to_max = np.ascontiguousarray(shift, dtype=np.float32), np.zeros(x.shape[0], np.bool_)
    elif not (isinstance(shift, np.ndarray) and shift.dtype == np.float32 and shift.flags.writeable):
        raise ValueError("shift must be a writable float32 array when rows take their maximum (to_max)")
    to_max = np.ascontiguousarray(to_max, dtype=np.bool_)
    if shift.shape != x.shape[:1] or to_max.shape != x.shape[:1]:
        raise ValueError(f"shift and to_max must have shape ({x.shape[0]},), got {shift.shape} and {to_max.shape}")
    if x.size:
        _compiled_exp_rows()(x, shift, to_max)
    return x


@functools.cache
def _compiled_exp_rows():
    import numba

    lo, hi = np.float32(_EXP_ARG_MIN), np.float32(EXP_ARG_MAX)
    log2e, ln2_hi, ln2_lo = np.float32(1.44269504088896341), np.float32(0.693359375), np.float32(-2.12194440e-4)
    p0, p1, p2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3)
    p3, p4, p5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1)
    zero, one, half = np.float32(0.0), np.float32(1.0), np.float32(0.5)

    @numba.njit(cache=True)
    def kernel(x, shift, to_max):  # pragma: no cover - compiled
        rows, m = x.shape
        bits = np.empty(m, np.int32)
        scale = bits.view(np.float32)  # 2^n per column of the current row, from its exponent bits
        for i in range(rows):
            if to_max[i]:  # the row's maximum while it is in cache
                top = x[i, 0]
                for j in range(1, m):
                    v = x[i, j]
                    if v > top or v != v:  # np.max: a NaN anywhere makes the maximum NaN
                        top = v if top == top else top
                shift[i] = top
            s = shift[i]
            for j in range(m):  # branch-free, so that LLVM vectorises it
                t = x[i, j] - s
                c = min(max(t, lo), hi)
                n = np.floor(c * log2e + half)
                r = c - n * ln2_hi - n * ln2_lo
                y = (((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * (r * r) + r + one
                bits[j] = (np.int32(n) + np.int32(127)) << 23
                x[i, j] = zero if t < lo else y
            for j in range(m):
                x[i, j] = x[i, j] * scale[j]
    return kernel
