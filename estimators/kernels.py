"""Exact kernels: the softmax kernel, the Gaussian kernel and dot-product kernels K(x, y) = f(xᵀy).

All kernels here are *Gram* functions: ``kernel(x, y)`` with ``x`` of shape ``(..., N, d)`` and ``y`` of
shape ``(..., M, d)`` returns the ``(..., N, M)`` matrix ``K[..., i, j] = K(x_i, y_j)``; leading
dimensions broadcast. They are the exact targets the random-feature estimators are compared with.

Conventions (Performer, ``003_4855bc6ab225d7a6.txt`` Sec 2.3, Eq 6):

* ``SM(x, y) = exp(xᵀy)``; softmax attention with logits ``qᵀk/√d`` uses ``SM(q/d^{1/4}, k/d^{1/4})``.
* ``K_gauss(x, y) = exp(-‖x - y‖²/2)``, so ``SM(x, y) = exp(‖x‖²/2) K_gauss(x, y) exp(‖y‖²/2)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rfkit.base.checks import NumericalError, as_float_array, check_same_last_dim
from rfkit.base.numerics import exp_or_raise

__all__ = [
    "softmax_kernel",
    "gaussian_kernel",
    "dot_product_kernel",
    "get_kernel",
    "KERNELS",
]


def _pair(x, y, dtype):
    x = as_float_array(x, "x", dtype=dtype, min_ndim=2)
    y = as_float_array(y, "y", dtype=dtype, min_ndim=2)
    check_same_last_dim(x, y, "x", "y")
    return x, y


def softmax_kernel(x, y, *, log: bool = False, dtype=np.float64) -> np.ndarray:
    r"""Softmax kernel Gram matrix ``SM(x_i, y_j) = exp(x_iᵀ y_j)`` (Performer Eq 6).

    Parameters
    ----------
    x, y : array_like, shapes ``(..., N, d)`` and ``(..., M, d)``
    log : bool
        Return ``log SM = x_iᵀ y_j`` instead (never overflows).
    dtype : float64 (default) or float32

    Raises
    ------
    NumericalError
        If ``exp`` overflows and ``log`` is False.

    Examples
    --------
    >>> softmax_kernel([[1.0, 0.0]], [[2.0, 0.0]])
    array([[7.3890561]])
    """
    x, y = _pair(x, y, dtype)
    logk = x @ np.swapaxes(y, -1, -2)
    return logk if log else exp_or_raise(logk, "softmax_kernel", hint="call it with log=True")


def gaussian_kernel(x, y, *, log: bool = False, dtype=np.float64) -> np.ndarray:
    r"""Gaussian kernel Gram matrix ``K_gauss(x_i, y_j) = exp(-‖x_i - y_j‖²/2)``.

    The squared distance is computed as ``‖x‖² + ‖y‖² - 2xᵀy`` (a matrix product) and clipped at 0,
    where round-off could make it slightly negative.

    Examples
    --------
    >>> gaussian_kernel([[0.0, 0.0]], [[1.0, 1.0]])
    array([[0.36787944]])
    """
    x, y = _pair(x, y, dtype)
    sq = (np.einsum("...i,...i->...", x, x)[..., :, None] + np.einsum("...i,...i->...", y, y)[..., None, :]
          - 2.0 * (x @ np.swapaxes(y, -1, -2)))
    logk = -0.5 * np.maximum(sq, 0.0)
    return logk if log else np.exp(logk)


def dot_product_kernel(f: Callable[[np.ndarray], np.ndarray], name: str | None = None):
    """Build the Gram function of the dot-product kernel ``K(x, y) = f(xᵀy)``.

    ``f`` is applied elementwise to the matrix of inner products. The returned function raises
    ``NumericalError`` if ``f`` produces non-finite values (e.g. outside its domain).
    """
    label = name or getattr(f, "__name__", "f")

    def kernel(x, y, *, dtype=np.float64):
        x, y = _pair(x, y, dtype)
        with np.errstate(all="ignore"):
            out = np.asarray(f(x @ np.swapaxes(y, -1, -2)), dtype=dtype)
        if not np.isfinite(out).all():
            raise NumericalError(f"dot-product kernel {label!r} is not finite at these inputs "
                                 "(outside its domain or overflowing)")
        return out

    kernel.__name__ = f"dot_product_kernel[{label}]"
    kernel.__doc__ = f"Gram matrix of the dot-product kernel K(x, y) = {label}(xᵀy)."
    return kernel


#: Named exact kernels (Gram functions). Paper modules may register further dot-product kernels.
KERNELS: dict[str, Callable[..., np.ndarray]] = {
    "softmax": softmax_kernel,
    "gaussian": gaussian_kernel,
}


def get_kernel(kernel) -> Callable[..., np.ndarray]:
    """Resolve a kernel given by name (a key of :data:`KERNELS`) or as a Gram callable."""
    if callable(kernel):
        return kernel
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be a name or a callable, got {kernel!r}")
    try:
        return KERNELS[kernel]
    except KeyError:
        raise ValueError(f"unknown kernel {kernel!r}; expected one of {tuple(KERNELS)} or a callable") from None
