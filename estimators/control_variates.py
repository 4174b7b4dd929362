r"""Control variates: a base estimate corrected by a control of known mean (EVA ``002_b2e9d84e2f6b65de.txt``).

For a base estimate ``g ∈ R^p`` of ``E[g]`` and a scalar control ``h`` with known mean ``E[h]``
(EVA Eq 5 / App B.1 Eq 19):

.. math::

    \tilde g = g - β\,(h - E[h]),\qquad E[\tilde g] = E[g]\ \text{for a constant } β ∈ R^p,

and the coefficient minimising ``Tr Var[g̃]`` is ``β* = Cov[h, g] / Var[h]`` (Eq 20), one coefficient
per output dimension. :func:`control_variate_estimate` applies a given coefficient;
:func:`optimal_coefficient` estimates Eq 20 from replicates; :func:`control_variate_mean` is the
classic Monte Carlo estimator ``ḡ - β̂(h̄ - E h)`` with ``β̂`` estimated from the same (or pilot)
replicates.

SNIS as a control variate (EVA Eq 6, App B.2). With ``g = (1/S)Σ_s w_s f(x_s)`` (the IS estimate of
``E_p f``), ``h = (1/S)Σ_s w_s`` (the IS estimate of ``1``) and the ratio ``β̂ = g/h`` (the SNIS
estimate), ``SNIS = g - β̂(h - 1)`` for every sample set: :func:`snis_control_variate` returns the four
pieces, computed by :func:`~rfkit.estimators.importance.is_estimate` and
:func:`~rfkit.estimators.importance.snis_estimate` (one source of truth). The coefficient ``β̂``
depends on the samples, so this estimator is biased for finite ``S`` (B.2); it is consistent.

Shapes: a base estimate ``(..., p)`` with its control ``(...)``; replicates on an explicit ``axis``.
Randomness: none here (the replicates are the caller's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import NumericalError, as_float_array, compute_dtype

from .importance import is_estimate, snis_estimate

__all__ = [
    "control_variate_estimate",
    "optimal_coefficient",
    "control_variate_mean",
    "SnisControlVariate",
    "snis_control_variate",
]


def _base_and_control(base, control, dtype):
    g = as_float_array(base, "base", dtype=dtype, min_ndim=1)
    h = as_float_array(control, "control", dtype=dtype)
    try:
        np.broadcast_shapes(h.shape, g.shape[:-1])
    except ValueError as exc:
        raise ValueError(f"control (shape {h.shape}) must broadcast to base without its last axis "
                         f"(shape {g.shape[:-1]})") from exc
    return g, h


def control_variate_estimate(base, control, control_mean, coefficient, *, dtype=np.float64) -> np.ndarray:
    r"""``g̃ = g - β(h - E[h])`` (EVA Eq 5 / Eq 19) with a given coefficient.

    Parameters
    ----------
    base : array_like ``(..., p)``
        The base estimate ``g`` (vector valued; ``p = 1`` for a scalar).
    control : array_like ``(...)``
        The scalar control ``h``, broadcastable to ``base`` without its last axis.
    control_mean : array_like
        ``E[h]``, broadcastable to ``control``.
    coefficient : array_like ``()`` or ``(..., p)``
        ``β``: one shared scalar or one coefficient per output dimension (per-dimension coefficients).

    Returns
    -------
    ndarray ``(..., p)``

    Notes
    -----
    Unbiased for ``E[g]`` when ``β`` is a constant (independent of the draws). Cost ``O(p)`` per estimate.

    Examples
    --------
    >>> control_variate_estimate([2.0, 4.0], 1.5, 1.0, [2.0, 4.0])
    array([1., 2.])
    """
    dt = compute_dtype(dtype)
    g, h = _base_and_control(base, control, dt)
    mean = as_float_array(control_mean, "control_mean", dtype=dt)
    beta = as_float_array(coefficient, "coefficient", dtype=dt)
    if beta.ndim and beta.shape[-1] not in (1, g.shape[-1]):
        raise ValueError(f"coefficient must be a scalar or have {g.shape[-1]} entries on its last axis, "
                         f"got shape {beta.shape}")
    return g - beta * (h - mean)[..., None]


def optimal_coefficient(base_samples, control_samples, *, axis: int = 0, dtype=np.float64) -> np.ndarray:
    r"""Sample version of Eq 20, ``β* = Cov[h, g] / Var[h]``, one coefficient per output dimension.

    Parameters
    ----------
    base_samples : array_like
        Replicates of ``g`` with the replicate axis ``axis`` and the output dimension last.
    control_samples : array_like
        Replicates of ``h`` (the same replicate axis, no output axis).

    Raises
    ------
    NumericalError
        If the control's sample variance is 0 (the coefficient is undefined).
    """
    dt = compute_dtype(dtype)
    g = np.moveaxis(as_float_array(base_samples, "base_samples", dtype=dt, min_ndim=2), axis, 0)
    h = np.moveaxis(as_float_array(control_samples, "control_samples", dtype=dt, min_ndim=1), axis, 0)
    if h.shape[0] != g.shape[0] or h.shape[0] < 2:
        raise ValueError(f"base_samples and control_samples need the same number (>= 2) of replicates along "
                         f"axis {axis}, got {g.shape[0]} and {h.shape[0]}")
    dh = h - h.mean(axis=0)
    dg = g - g.mean(axis=0)
    var = np.sum(dh * dh, axis=0)
    if (var == 0).any():
        raise NumericalError("the control has zero sample variance: the optimal coefficient is undefined")
    return np.sum(dh[..., None] * dg, axis=0) / var[..., None]


def control_variate_mean(base_samples, control_samples, control_mean, *, coefficient=None, axis: int = 0,
                         dtype=np.float64) -> np.ndarray:
    r"""Monte Carlo control-variate estimate ``ḡ - β(h̄ - E[h])`` from iid replicates.

    ``coefficient=None`` estimates ``β`` by :func:`optimal_coefficient` from the same replicates (the
    standard, slightly biased ``O(1/n)`` regression estimator); pass a coefficient from a pilot run for
    an unbiased estimate.
    """
    dt = compute_dtype(dtype)
    g = np.moveaxis(as_float_array(base_samples, "base_samples", dtype=dt, min_ndim=2), axis, 0)
    h = np.moveaxis(as_float_array(control_samples, "control_samples", dtype=dt, min_ndim=1), axis, 0)
    beta = optimal_coefficient(g, h, axis=0, dtype=dt) if coefficient is None else coefficient
    return control_variate_estimate(g.mean(axis=0), h.mean(axis=0), control_mean, beta, dtype=dt)


@dataclass(frozen=True)
class SnisControlVariate:
    """The pieces of EVA Eq 6: ``snis = base - coefficient·(control - 1)``.

    Attributes
    ----------
    base : ndarray ``(..., *event)``
        ``g = (1/S)Σ_s w_s f(x_s)`` (importance sampling estimate of ``E_p f``).
    control : ndarray ``(...)``
        ``h = (1/S)Σ_s w_s``, with ``E[h] = 1`` for normalised weights.
    coefficient : ndarray ``(..., *event)``
        ``β̂ = g/h`` (the SNIS estimate itself).
    estimate : ndarray ``(..., *event)``
        ``g - β̂(h - 1)``, equal to ``β̂`` for every sample set.
    """

    base: np.ndarray
    control: np.ndarray
    coefficient: np.ndarray
    estimate: np.ndarray


def snis_control_variate(values, *, weights=None, log_weights=None, dtype=np.float64) -> SnisControlVariate:
    r"""SNIS written as a control-variate estimate (EVA Eq 6): ``Σ w f/Σ w = g - β̂(h - E h)``.

    Parameters
    ----------
    values : array_like ``(..., S, *event)``
        ``f(x_s)`` at samples ``x_s ~ q``.
    weights, log_weights : array_like ``(..., S)``
        Exactly one: normalised importance weights ``p(x_s)/q(x_s)`` (so that ``E[h] = 1``) or their logs.

    Raises
    ------
    NumericalError
        If ``g`` or ``h`` overflow (use log-weights shifted by a constant: the SNIS estimate is invariant,
        ``g`` and ``h`` are not).

    Examples
    --------
    >>> cv = snis_control_variate([1.0, 3.0], weights=[0.5, 1.5])
    >>> float(cv.estimate), float(cv.coefficient)
    (2.5, 2.5)
    """
    base = is_estimate(values, weights=weights, log_weights=log_weights, dtype=dtype)
    ones = np.ones(np.shape(weights if weights is not None else log_weights))
    control = is_estimate(ones, weights=weights, log_weights=log_weights, dtype=dtype)
    coefficient = snis_estimate(values, weights=weights, log_weights=log_weights, dtype=dtype)
    event = base.ndim - control.ndim
    estimate = base - coefficient * (control - 1.0).reshape(control.shape + (1,) * event)
    if not np.isfinite(estimate).all():
        raise NumericalError("control-variate pieces of SNIS are not finite")
    return SnisControlVariate(base, control, coefficient, estimate)
