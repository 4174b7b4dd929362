"""Input validation shared by every public estimator function (numpy and torch backends).

Design notes
------------
* Invalid input is an error, never a silently wrong number: wrong shapes, non-finite values, invalid
  parameters and unknown names raise ``ValueError``; arrays of a non-numeric or complex dtype and
  arguments of the wrong type raise ``TypeError``. Every message names the offending argument.
* Real integer and floating arrays are accepted and converted to the *computation dtype*, which is
  ``float64`` (the reference) unless the caller asks for ``float32``. Booleans, complex numbers,
  strings and objects are rejected: a boolean array passed as queries is almost certainly a mistake
  (masks have their own argument), and complex inputs have no meaning for these kernels.
* Randomness follows SPEC 7: ``rng`` is anything :func:`numpy.random.default_rng` accepts.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable

import numpy as np

__all__ = [
    "NumericalError",
    "NonPositiveDenominatorWarning",
    "as_float_array",
    "as_mask",
    "check_choice",
    "check_positive_int",
    "check_positive_float",
    "check_rng",
    "compute_dtype",
    "check_same_last_dim",
    "check_qkv",
    "real_array",
]

_FLOAT_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


class NumericalError(FloatingPointError):
    """A result cannot be represented (overflow, a zero denominator): raised instead of returning nan/inf."""


class NonPositiveDenominatorWarning(RuntimeWarning):
    """A renormaliser (row sum of an estimated attention matrix) was <= 0; signed features can do this."""


def compute_dtype(dtype) -> np.dtype:
    """Return the computation dtype; only float64 (reference) and float32 are supported."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float64 or float32, got {dtype!r}") from exc
    if dt not in _FLOAT_DTYPES:
        raise TypeError(f"dtype must be float64 or float32, got {dt}")
    return dt


def real_array(x, name: str) -> np.ndarray:
    """``x`` as a numpy array of real numbers (integer or floating; no copy for an ndarray); ``TypeError``
    naming ``name`` otherwise. The numpy and torch conversions share it."""
    if isinstance(x, np.ndarray):
        arr = x
    else:
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name} must be array-like of real numbers: {exc}") from exc
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers (integer or floating), got dtype {arr.dtype}")
    return arr


def as_float_array(x, name: str, *, dtype=np.float64, min_ndim: int = 0, ndim: int | None = None,
                   allow_nonfinite: bool = False) -> np.ndarray:
    """Convert ``x`` to a floating array of the computation dtype, validating it.

    Raises ``TypeError`` for non-real dtypes and ``ValueError`` for a wrong number of dimensions,
    empty trailing axes or non-finite entries (unless ``allow_nonfinite``).
    """
    dt = compute_dtype(dtype)
    arr = real_array(x, name)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {arr.shape}")
    arr = arr.astype(dt, copy=False)
    if not allow_nonfinite and not np.isfinite(arr).all():
        bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} contains {bad} non-finite value(s) (nan or inf)")
    return arr


def as_mask(mask, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Validate a boolean mask that must broadcast to ``shape``; True means *attend*."""
    arr = np.asarray(mask)
    if arr.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array (True = attend), got dtype {arr.dtype}")
    try:
        np.broadcast_shapes(arr.shape, shape)
    except ValueError as exc:
        raise ValueError(f"{name} of shape {arr.shape} does not broadcast to {shape}") from exc
    return arr


def check_positive_int(value, name: str, *, minimum: int = 1) -> int:
    """Return ``value`` as an ``int`` if it is an integer >= ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_positive_float(value, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value}")
    return value


def check_choice(value, name: str, options: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``options``; otherwise raise naming the valid choices."""
    options = tuple(options)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {options}, got {value!r}")
    if value not in options:
        raise ValueError(f"unknown {name} {value!r}; expected one of {options}")
    return value


def check_rng(rng) -> np.random.Generator:
    """SPEC 7: accept a Generator, a seed, a SeedSequence or a BitGenerator."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        raise TypeError("rng is required (a numpy Generator or a seed): rfkit keeps no global random state")
    try:
        return np.random.default_rng(rng)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"rng must be a numpy Generator or anything default_rng accepts, got {rng!r}") from exc


def check_same_last_dim(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"{name_a} and {name_b} must share their last dimension, got "
                         f"{a.shape[-1]} and {b.shape[-1]}")


def check_qkv(q, k, v, convert: Callable = as_float_array, *, matrices: bool = False, same_length: bool = False,
              **options):
    """Validate attention inputs ``q (..., N, D)``, ``k (..., M, D)``, ``v (..., M, D_v)`` for any backend.

    ``convert(x, name, **options)`` validates one array (:func:`as_float_array` for numpy,
    :func:`rfkit.gpu.as_tensor` with ``dtype=``/``device=`` for torch); it gets ``ndim=2`` when ``matrices``
    (one head, at least one query and key) and ``min_ndim=2`` otherwise. ``same_length``: self-attention
    (``N = M``). Raises ``ValueError`` naming the mismatched dimensions.
    """
    shape = dict(ndim=2) if matrices else dict(min_ndim=2)
    q, k, v = (convert(x, name, **shape, **options) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    check_same_last_dim(q, k, "q", "k")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of rows, got {k.shape[-2]} and {v.shape[-2]}")
    if same_length and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"self-attention needs q, k and v of the same length, got {q.shape[-2]} and {k.shape[-2]}")
    if matrices and (q.shape[0] == 0 or k.shape[0] == 0):
        raise ValueError("q and k need at least one row each")
    return q, k, v
