r"""Importance sampling primitives: IS and self-normalized IS (SNIS) estimators, effective sample size.

For samples ``x_1..x_S ~ q`` and a target ``p`` with importance weights ``w_s = p(x_s)/q(x_s)``:

.. math::

    \hat\mu_{IS} = \frac1S \sum_s w_s f(x_s)  \quad(\text{unbiased for } E_p f \text{ if } p \text{ is normalised}),

    \hat\mu_{SNIS} = \frac{\sum_s w_s f(x_s)}{\sum_s w_s}  \quad(\text{consistent, bias } O(1/S);
    p \text{ may be unnormalised}),

    \mathrm{ESS} = \frac{(\sum_s w_s)^2}{\sum_s w_s^2} \in [1, S]  \quad(\text{Kish}).

Random-feature attention is SNIS with the ``N(0, I)`` proposal (RA/LARA ``000_d62fa2cae7f5a446.txt``
Sec 3); EVA reads it as control variates (``002_b2e9d84e2f6b65de.txt``). These primitives are the shared
core of both.

Shapes: weights (or log-weights) ``(..., S)``, the sample axis last; ``values`` ``(..., S, *event)``, the
weights aligned with its leading axes (``f`` may be vector valued). Results have shape
``(..., *event)``. Weights can be given directly (non-negative) or as log-weights (``-inf`` allowed:
weight 0); log-weights are shifted by their maximum, which cancels exactly in SNIS and is added back
(in log space) in IS.
"""

from __future__ import annotations

import numpy as np

from rfkit.base.checks import NumericalError, as_float_array, compute_dtype

__all__ = [
    "log_importance_weights",
    "is_estimate",
    "snis_estimate",
    "effective_sample_size",
]


def log_importance_weights(log_target, log_proposal, *, dtype=np.float64) -> np.ndarray:
    """``log w_s = log p(x_s) - log q(x_s)``; ``log p = -inf`` (zero target density) is allowed.

    Raises ``ValueError`` for nan, for ``log p = +inf`` and for ``log q = -inf`` (a sample the proposal
    cannot produce).
    """
    lp = as_float_array(log_target, "log_target", dtype=dtype, allow_nonfinite=True)
    lq = as_float_array(log_proposal, "log_proposal", dtype=dtype)
    if np.isnan(lp).any() or (lp == np.inf).any():
        raise ValueError("log_target must be finite or -inf")
    return lp - lq


def _shifted_weights(weights, log_weights, dtype):
    """Return ``(w̃, log_shift)`` with ``w = w̃·exp(log_shift)``, ``max w̃ = 1`` along the sample axis."""
    if (weights is None) == (log_weights is None):
        raise TypeError("give exactly one of weights= or log_weights=")
    if weights is not None:
        w = as_float_array(weights, "weights", dtype=dtype, min_ndim=1)
        if (w < 0).any():
            raise ValueError("weights must be non-negative (use log_weights for log-space input)")
        return w, np.zeros(w.shape[:-1], w.dtype)
    lw = as_float_array(log_weights, "log_weights", dtype=dtype, min_ndim=1, allow_nonfinite=True)
    if np.isnan(lw).any() or (lw == np.inf).any():
        raise ValueError("log_weights must be finite or -inf")
    shift = lw.max(axis=-1)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    return np.exp(lw - shift[..., None]), shift


def _aligned(values, w: np.ndarray, dtype) -> np.ndarray:
    f = as_float_array(values, "values", dtype=dtype, min_ndim=1)
    if f.ndim < w.ndim:
        raise ValueError(f"values (shape {f.shape}) must have the weights' axes (shape {w.shape}) first")
    try:
        np.broadcast_shapes(f.shape[: w.ndim], w.shape)
    except ValueError as exc:
        raise ValueError(f"values shape {f.shape} does not align with weights shape {w.shape}") from exc
    if f.shape[w.ndim - 1] != w.shape[-1]:
        raise ValueError(f"values have {f.shape[w.ndim - 1]} samples along axis {w.ndim - 1}, "
                         f"weights have {w.shape[-1]}")
    return f


def _weighted_sum(f: np.ndarray, w: np.ndarray) -> np.ndarray:
    event = f.ndim - w.ndim
    return np.sum(f * w.reshape(w.shape + (1,) * event), axis=w.ndim - 1)


def _expand(a: np.ndarray, event: int) -> np.ndarray:
    return a.reshape(a.shape + (1,) * event)


def is_estimate(values, *, weights=None, log_weights=None, dtype=np.float64) -> np.ndarray:
    r"""Importance sampling estimate ``(1/S) Σ_s w_s f(x_s)`` of ``E_p f``.

    Parameters
    ----------
    values : array_like ``(..., S, *event)``
        ``f(x_s)`` at samples ``x_s ~ q``.
    weights, log_weights : array_like ``(..., S)``
        Exactly one: ``p(x_s)/q(x_s)`` or its logarithm.

    Raises
    ------
    NumericalError
        If the estimate overflows the dtype.

    Examples
    --------
    >>> float(is_estimate([1.0, 2.0], weights=[0.5, 1.5]))
    1.75
    """
    dt = compute_dtype(dtype)
    w, shift = _shifted_weights(weights, log_weights, dt)
    f = _aligned(values, w, dt)
    event = f.ndim - w.ndim
    with np.errstate(over="ignore"):
        out = _weighted_sum(f, w) / w.shape[-1] * _expand(np.exp(shift), event)
    if not np.isfinite(out).all():
        raise NumericalError("importance sampling estimate overflows; rescale f or the weights")
    return out


def snis_estimate(values, *, weights=None, log_weights=None, dtype=np.float64) -> np.ndarray:
    r"""Self-normalized importance sampling estimate ``Σ_s w_s f(x_s) / Σ_s w_s``.

    Invariant to any positive rescaling of the weights (so ``p`` may be unnormalised).

    Raises
    ------
    NumericalError
        If all weights are zero along the sample axis (the estimate is undefined).

    Examples
    --------
    >>> float(snis_estimate([1.0, 2.0], weights=[1.0, 3.0]))
    1.75
    """
    dt = compute_dtype(dtype)
    w, _ = _shifted_weights(weights, log_weights, dt)
    f = _aligned(values, w, dt)
    total = w.sum(axis=-1)
    if (total == 0).any():
        raise NumericalError("all importance weights are zero along the sample axis: SNIS is undefined")
    return _weighted_sum(f, w) / _expand(total, f.ndim - w.ndim)


def effective_sample_size(*, weights=None, log_weights=None, dtype=np.float64) -> np.ndarray:
    r"""Kish's effective sample size ``(Σ w)² / Σ w²`` along the last axis, in ``[1, S]``.

    Examples
    --------
    >>> float(effective_sample_size(weights=[1.0, 1.0, 1.0, 1.0]))
    4.0
    """
    w, _ = _shifted_weights(weights, log_weights, compute_dtype(dtype))
    total = w.sum(axis=-1)
    if (total == 0).any():
        raise NumericalError("all importance weights are zero along the sample axis: ESS is undefined")
    return total**2 / np.sum(w * w, axis=-1)
