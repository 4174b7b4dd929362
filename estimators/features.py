r"""Random feature maps for the softmax kernel, kept in a factored, overflow-free form.

Every feature map returns :class:`Features`, the pair ``(values, log_scale)`` with

.. math::  φ(x_i) = \mathrm{values}_i \cdot \exp(\mathrm{log\_scale}_i),

so exponential prefactors such as ``exp(‖x‖²/2)`` never overflow. A per-row scale is exactly the kind of
constant that cancels in attention's ratio (Performer App. A.3/B.3): :func:`rfkit.estimators.attention.
linear_attention` consumes it without ever exponentiating it, and :meth:`Features.kernel` forms
``φ(x)ᵀφ(y)`` in log space. ``stabilize=False`` returns plain values (``log_scale = 0``) and raises
:class:`NumericalError` when they overflow.

Feature maps (Performer ``003_4855bc6ab225d7a6.txt``; ``ω_1..ω_m`` are the rows of ``omega``; every map
uses the ``1/√m`` convention so that ``E φ(x)ᵀφ(y)`` is the target kernel):

* trigonometric, Sec 2.3: ``φ(x) = exp(‖x‖²/2)/√m · (sin ω_1ᵀx..sin ω_mᵀx, cos ω_1ᵀx..cos ω_mᵀx)``,
  ``r = 2m``; ``φ(x)ᵀφ(y) = exp((‖x‖²+‖y‖²)/2)·(1/m)Σ cos ω_iᵀ(x-y)``, unbiased for ``SM(x, y)``.
* positive (SM⁺), Lemma 1: ``φ(x) = exp(-‖x‖²/2)/√m · (exp ω_1ᵀx .. exp ω_mᵀx)``, ``r = m``.
* hyperbolic (SM^hyp+), Lemma 1: ``φ(x) = exp(-‖x‖²/2)/√(2m) · (exp ω_iᵀx .., exp -ω_iᵀx ..)``, ``r = 2m``;
  ``φ(x)ᵀφ(y) = Λ·(1/m)Σ cosh ω_iᵀ(x+y)`` with ``Λ = exp(-(‖x‖²+‖y‖²)/2)``.

Layout: blocks ``[f_1 block | f_2 block]`` (Performer Eq 5). Unbiasedness holds for any rows with the
marginal ``N(0, I_d)`` (iid Gaussian or ORF with chi norms); rows uniform on ``√d S^{d-1}`` give the
regularized kernel SMREG instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import NumericalError, as_float_array, check_choice, check_same_last_dim
from rfkit.base.numerics import exp_shifted_rows, sin_cos

__all__ = [
    "Features",
    "project",
    "trig_features",
    "positive_features",
    "hyperbolic_features",
    "random_features",
    "FEATURE_MAPS",
]


@dataclass(frozen=True)
class Features:
    """Feature matrix in factored form: ``φ(x_i) = values[..., i, :] * exp(log_scale[..., i])``.

    Attributes
    ----------
    values : ndarray, shape ``(..., L, r)``
    log_scale : ndarray, shape ``(..., L)``
    """

    values: np.ndarray
    log_scale: np.ndarray

    def __post_init__(self):
        if self.values.ndim < 2 or self.log_scale.shape != self.values.shape[:-1]:
            raise ValueError(f"Features: log_scale shape {self.log_scale.shape} must equal values shape "
                             f"{self.values.shape} without its last axis")

    @classmethod
    def plain(cls, values, *, name: str = "features", dtype=np.float64) -> Features:
        """Wrap an ordinary feature matrix ``(..., L, r)`` (``log_scale = 0``)."""
        values = as_float_array(values, name, dtype=dtype, min_ndim=2)
        return cls(values, np.zeros(values.shape[:-1], values.dtype))

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def num_features(self) -> int:
        return self.values.shape[-1]

    def dense(self) -> np.ndarray:
        """The feature matrix itself; raises :class:`NumericalError` if it overflows."""
        with np.errstate(over="ignore"):
            out = self.values * np.exp(self.log_scale)[..., None]
        if not np.isfinite(out).all():
            raise NumericalError("feature values overflow; keep them factored (see Features)")
        return out

    def kernel(self, other: Features, *, log: bool = False):
        """Estimated Gram matrix ``φ(x_i)ᵀφ(y_j)`` of shape ``(..., N, M)``.

        With ``log=True`` returns ``(sign, logabs)`` so that the estimate is ``sign·exp(logabs)``
        (``logabs = -inf`` where the estimate is exactly 0), which never overflows.
        """
        dot = self.values @ np.swapaxes(other.values, -1, -2)
        shift = self.log_scale[..., :, None] + other.log_scale[..., None, :]
        if log:
            with np.errstate(divide="ignore"):
                return np.sign(dot), np.log(np.abs(dot)) + shift
        with np.errstate(over="ignore"):
            out = dot * np.exp(shift)
        if not np.isfinite(out).all():
            raise NumericalError("kernel estimate overflows; call kernel(..., log=True)")
        return out


def project(x, omega, *, dtype=np.float64) -> tuple[np.ndarray, np.ndarray, int]:
    """``(x, x Wᵀ, m)`` for a dense ``(m, d)`` array or a structured operator (``.apply``, ``.m``, ``.d``;
    :mod:`~rfkit.estimators.structured`). A 1-D ``x`` becomes one row."""
    x = as_float_array(x, "x", dtype=dtype, min_ndim=1)
    if x.ndim == 1:
        x = x[None, :]
    if hasattr(omega, "apply"):
        if x.shape[-1] != omega.d:
            raise ValueError(f"x and omega must share their last dimension, got {x.shape[-1]} and {omega.d}")
        return x, omega.apply(x, dtype=dtype), omega.m
    omega = as_float_array(omega, "omega", dtype=dtype, ndim=2)
    check_same_last_dim(x, omega, "x", "omega")
    return x, x @ omega.T, omega.shape[0]


def _half_sq_norm(x):
    return 0.5 * np.einsum("...i,...i->...", x, x)


#: Largest |ω_jᵀx| for which exp() is taken without a per-row shift: values then lie in
#: [e^-B, e^B], so products of two stay well inside the dtype's range (float64: e^±709, float32: e^±88).
_SAFE_EXPONENT = {np.dtype(np.float64): 150.0, np.dtype(np.float32): 20.0}  # float32: < numerics.EXP_ARG_MAX


#: Bytes of projection output per block of the fused stabiliser-and-exponent pass: a block stays in a
#: 256 KiB L2 cache between its row maximum, its shift and its exponent (one pass over memory, not three).
_ROW_BLOCK_BYTES = 1 << 18


def _exp_rows(log_phi: np.ndarray, row_offset: np.ndarray, stabilize: bool, row_bound: np.ndarray) -> Features:
    """Features ``exp(log_phi - row_offset)``, overwriting ``log_phi`` (a fresh array) in place.

    ``row_offset`` is never exponentiated when stabilising: it becomes ``log_scale``. A row whose
    ``row_bound`` (an upper bound of its ``|log_phi|``, from Cauchy-Schwarz) is small is exponentiated
    as it is; any other row moves its maximum into ``log_scale`` too (values in ``(0, 1]``). The choice
    is per row, so one token's features never depend on another token (causal attention needs this).
    Stabilised, the row maximum, the shift and the exponent are fused over cache-sized row blocks
    (:data:`_ROW_BLOCK_BYTES`); each element sees the same operations as unfused, so values are identical.
    float32 takes its row maxima, shifts and exponents in one compiled pass over the rows
    (:func:`~rfkit.base.numerics.exp_shifted_rows`: within 1 ulp of the correctly rounded exp, subnormal features
    flushed to 0).
    """
    if stabilize:
        unsafe = row_bound > _SAFE_EXPONENT[log_phi.dtype]
        compiled = log_phi.dtype == np.float32  # exp_shifted_rows: shifted rows are <= 0, safe ones <= 20
        if not unsafe.any() and not compiled:
            np.exp(log_phi, out=log_phi)
            return Features(log_phi, -row_offset)
        log_phi = np.ascontiguousarray(log_phi)  # fresh, so already contiguous unless an operator's layout
        rows = log_phi.reshape(-1, log_phi.shape[-1])  # a view of log_phi
        flags = np.broadcast_to(unsafe, log_phi.shape[:-1]).reshape(-1)
        shift = np.zeros(rows.shape[0], log_phi.dtype)  # a safe row keeps shift 0: x - 0 == x
        if compiled:  # row maxima, shifts and exponents in one compiled pass
            exp_shifted_rows(rows, shift, flags)
            return Features(log_phi, -(row_offset - shift.reshape(log_phi.shape[:-1])))
        step = max(1, _ROW_BLOCK_BYTES // max(1, rows.shape[1] * rows.itemsize))
        for s in range(0, rows.shape[0], step):
            block, block_shift = rows[s:s + step], shift[s:s + step]
            if flags[s:s + step].any():
                np.max(block, axis=-1, out=block_shift)
                np.copyto(block_shift, 0.0, where=~flags[s:s + step])
            np.subtract(block, block_shift[:, None], out=block)
            np.exp(block, out=block)
        return Features(log_phi, -(row_offset - shift.reshape(log_phi.shape[:-1])))
    log_phi -= row_offset[..., None]
    with np.errstate(over="ignore", under="ignore"):
        np.exp(log_phi, out=log_phi)
    if (log_phi == 0).any():
        raise NumericalError("unstabilized positive features underflow to 0; use stabilize=True")
    return _unstabilized(log_phi)


def _projection_bound(x: np.ndarray, omega, proj: np.ndarray) -> np.ndarray:
    """Per row, an upper bound of ``max_j |ω_jᵀx_i|``: Cauchy-Schwarz ``‖x_i‖·max_j ‖ω_j‖`` for a dense
    ``omega`` (no pass over ``proj``), the exact maximum for a structured operator."""
    if hasattr(omega, "apply"):
        return np.abs(proj).max(axis=-1)
    omega = np.asarray(omega)
    return np.sqrt(4.0 * _half_sq_norm(x) * _half_sq_norm(omega).max(initial=0.0))


def _unstabilized(values: np.ndarray) -> Features:
    if not np.isfinite(values).all():
        raise NumericalError("unstabilized features overflow; use stabilize=True")
    return Features(values, np.zeros(values.shape[:-1], values.dtype))


def trig_features(x, omega, *, stabilize: bool = True, dtype=np.float64) -> Features:
    r"""Trigonometric random features ``exp(‖x‖²/2)/√m·[sin(Wx), cos(Wx)]`` (Performer Sec 2.3).

    Parameters
    ----------
    x : array_like, shape ``(..., L, d)`` (or ``(d,)``)
        Inputs, already scaled (attention uses ``q/d^{1/4}``).
    omega : array_like ``(m, d)``, or a structured projection (H/G-ORF operator)
        Projection rows; marginally ``N(0, I_d)`` for an unbiased estimate of ``SM``.
    stabilize : bool
        Keep ``exp(‖x‖²/2)/√m`` as ``log_scale`` (default) or multiply it in (may overflow).

    Returns
    -------
    Features with ``r = 2m`` columns; values can be negative, so renormalisers can be ``<= 0``.

    Notes
    -----
    ``E φ(x)ᵀφ(y) = exp((‖x‖²+‖y‖²)/2) E cos(ωᵀ(x-y)) = SM(x, y)``. Cost ``O(Lmd)``.

    Examples
    --------
    >>> f = trig_features([[0.0, 0.0]], np.ones((3, 2)))
    >>> f.kernel(f)  # x = y = 0: SM = 1 exactly, for any omega
    array([[1.]])
    """
    x, proj, m = project(x, omega, dtype=dtype)
    values = np.empty(proj.shape[:-1] + (2 * m,), proj.dtype)
    if values.dtype == np.float64:
        sin_cos(proj, values)  # compiled: numpy's float64 sin/cos are scalar libm calls
    else:
        np.sin(proj, out=values[..., :m])
        np.cos(proj, out=values[..., m:])
    log_scale = _half_sq_norm(x) - 0.5 * np.log(m)
    if stabilize:
        return Features(values, log_scale)
    with np.errstate(over="ignore"):
        values *= np.exp(log_scale)[..., None]
    return _unstabilized(values)


def positive_features(x, omega, *, stabilize: bool = True, dtype=np.float64) -> Features:
    r"""Positive random features ``exp(ω_iᵀx - ‖x‖²/2)/√m`` (FAVOR+, Performer Lemma 1, SM⁺).

    The exponent is formed in the computation dtype before exponentiating; with ``stabilize`` each row's
    maximum exponent becomes its ``log_scale``, so ``values`` lie in ``(0, 1]``.

    Notes
    -----
    ``E φ(x)ᵀφ(y) = exp(-(‖x‖²+‖y‖²)/2) E exp(ωᵀ(x+y)) = SM(x, y)`` for ``ω ~ N(0, I_d)``. Cost ``O(Lmd)``.

    Examples
    --------
    >>> f = positive_features([[0.0, 0.0]], np.ones((4, 2)))
    >>> f.kernel(f)
    array([[1.]])
    """
    x, proj, m = project(x, omega, dtype=dtype)
    return _exp_rows(proj, _half_sq_norm(x) + 0.5 * np.log(m), stabilize, _projection_bound(x, omega, proj))


def hyperbolic_features(x, omega, *, stabilize: bool = True, dtype=np.float64) -> Features:
    r"""Hyperbolic positive features ``exp(±ω_iᵀx - ‖x‖²/2)/√(2m)`` (Performer Lemma 1, SM^hyp+).

    The antithetic halves use the identical rows ``+ω_i`` and ``-ω_i``; ``r = 2m``.

    Notes
    -----
    ``φ(x)ᵀφ(y) = Λ·(1/m)Σ_i cosh(ω_iᵀ(x+y))``, ``Λ = exp(-(‖x‖²+‖y‖²)/2)``, unbiased for ``SM(x, y)``.
    """
    x, proj, m = project(x, omega, dtype=dtype)
    log_phi = np.empty(proj.shape[:-1] + (2 * m,), proj.dtype)
    log_phi[..., :m] = proj
    np.negative(proj, out=log_phi[..., m:])
    return _exp_rows(log_phi, _half_sq_norm(x) + 0.5 * np.log(2 * m), stabilize,
                     _projection_bound(x, omega, proj))


#: Named softmax-kernel feature maps for :func:`random_features`.
FEATURE_MAPS = {
    "trig": trig_features,
    "positive": positive_features,
    "hyperbolic": hyperbolic_features,
}


def random_features(kind: str, x, omega, *, stabilize: bool = True, dtype=np.float64) -> Features:
    """Apply a feature map by name: one of :data:`FEATURE_MAPS`."""
    kind = check_choice(kind, "kind", FEATURE_MAPS)
    return FEATURE_MAPS[kind](x, omega, stabilize=stabilize, dtype=dtype)
