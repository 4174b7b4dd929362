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

EVA's per-token control variates (EVA §3.1, Eq 7): for shared samples ``ω_s ~ ρ`` of one query row,
:func:`control_variate_terms` returns :class:`ControlVariateTerms` (``g_m``, ``h_m``, ``g``, ``h``, ``β̂``,
``W(ω_s)``, ``f_n(ω_s)``, ``α(ω_s)``, all from ``log λ - log Z`` with the exact ``log Z``);
:func:`control_variate_family` evaluates ``g̃ = Σ_m [g_m - β_m(h_m - w_m)]`` for any coefficient assignment,
built by :func:`shared_coefficients` (RFA, Eq 7), :func:`token_coefficients` (Prop 1) and
:func:`eva_coefficients` (Eq 13). Notation as in :mod:`rfkit.estimators.eva` (re-exported there).

Shapes: a base estimate ``(..., p)`` with its control ``(...)``; replicates on an explicit ``axis``.
Randomness: none here (the replicates or samples are the caller's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import NumericalError, as_float_array, check_qkv, compute_dtype
from rfkit.base.laws import EXACT, EXCLUDED
from rfkit.base.numerics import exp_or_raise, logsumexp

from .importance import is_estimate, snis_estimate
from .proposals import GaussianProposal
from .proposals import log_ratio as _log_ratio
from .rfa import _in_frame, log_xi

__all__ = [
    "control_variate_estimate",
    "optimal_coefficient",
    "control_variate_mean",
    "SnisControlVariate",
    "snis_control_variate",
    "ControlVariateTerms",
    "control_variate_terms",
    "control_variate_family",
    "shared_coefficients",
    "token_coefficients",
    "eva_coefficients",
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


# ------------------------------------------------------------------------- EVA per-token control variates

def _draw(proposal, rng, num_samples, d):
    proposal = GaussianProposal(np.zeros(d)) if proposal is None else proposal
    if proposal.dim != d:
        raise ValueError(f"the proposal lives in dimension {proposal.dim}, the inputs in {d}")
    if rng is None or num_samples is None:
        raise TypeError("give omega=, or num_samples= and rng= to draw from the proposal")
    omega = proposal.sample(rng, num_samples)
    return omega, _log_ratio(proposal, omega)


def _samples(omega, log_ratio, proposal, rng, num_samples, d, dtype):
    """``(omega, log_ratio)``: given draws (weights from ``proposal`` or ``log_ratio``, default ``N(0, I)``)."""
    if omega is None:
        omega, log_ratio = _draw(proposal, rng, num_samples, d)
    omega = as_float_array(omega, "omega", dtype=dtype, min_ndim=2)
    if omega.shape[-1] != d:
        raise ValueError(f"omega must have {d} columns (the input dimension), got shape {omega.shape}")
    if log_ratio is None:
        no_ratio = np.zeros(omega.shape[:-1], dtype)
        log_ratio = _log_ratio(proposal, omega) if proposal is not None else no_ratio
    log_ratio = as_float_array(log_ratio, "log_ratio", dtype=dtype)
    if log_ratio.shape != omega.shape[:-1]:
        raise ValueError(f"log_ratio must have shape {omega.shape[:-1]} (omega without its last axis), "
                         f"got {log_ratio.shape}")
    return omega, log_ratio


def _labels(labels, m: int) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"labels must be integers ({EXACT} exact, {EXCLUDED} excluded, 0..C-1 subsets), "
                        f"got dtype {arr.dtype}")
    if arr.ndim not in (1, 2) or arr.shape[-1] != m:
        raise ValueError(f"labels must have shape (M,) or (N, M) with M = {m}, got {arr.shape}")
    if (arr < EXCLUDED).any():
        raise ValueError(f"labels must be >= {EXCLUDED}")
    return arr.astype(np.int64)


@dataclass(frozen=True)
class ControlVariateTerms:
    r"""The control-variate objects of EVA §3.1 for one sample set per query row (theory objects).

    All are formed from ``log λ_{s,m} - log Z`` with the exact ``log Z = LSE_m(q_n·k_m)``:

    * ``h_m = Σ_s α(ω_s) ξ(q_n, ω_s) ξ(k_m, ω_s) = Σ_s λ_{s,m}/(SZ)``, ``g_m = h_m v_m`` (Eq 7);
    * ``h = Σ_m h_m = (1/S)Σ_s W(ω_s)``, ``g = Σ_m g_m = (1/S)Σ_s W(ω_s) f_n(ω_s)``, ``β̂ = g/h`` (Eq 6);
    * ``W(ω_s) = p_n(ω_s)/ρ(ω_s)``, ``f_n(ω_s)`` (Eq 3), ``α(ω_s) = r(ω_s)/(SZ)``;
    * ``w_m = e_m/Z = E[h_m]`` (Eq 22).

    Attributes
    ----------
    log_lambda : ndarray ``(..., N, S, M)``
    log_z : ndarray ``(..., N)``
    log_ratio : ndarray ``(..., S)``
    log_softmax : ndarray ``(..., N, M)``, ``log w_m``
    v : ndarray ``(..., M, d_v)``
    """

    log_lambda: np.ndarray
    log_z: np.ndarray
    log_ratio: np.ndarray
    log_softmax: np.ndarray
    v: np.ndarray

    @property
    def num_samples(self) -> int:
        return self.log_lambda.shape[-2]

    @property
    def log_h_tokens(self) -> np.ndarray:
        """``log h_m`` ``(..., N, M)``."""
        return (logsumexp(self.log_lambda, axis=-2) - math.log(self.num_samples)
                - self.log_z[..., None])

    @property
    def h_tokens(self) -> np.ndarray:
        """``h_m`` ``(..., N, M)``."""
        return exp_or_raise(self.log_h_tokens, "h_m")

    @property
    def g_tokens(self) -> np.ndarray:
        """``g_m = Σ_s α(ω_s) ξ(q_n, ω_s) ξ(k_m, ω_s) v_m`` ``(..., N, M, d_v)``, summed over ``s`` last."""
        terms = exp_or_raise(self.log_lambda - math.log(self.num_samples) - self.log_z[..., None, None],
                             "g_m")
        return np.einsum("...nsm,...mv->...nmv", terms, self.v)

    @property
    def softmax_weights(self) -> np.ndarray:
        """``w_m = E[h_m]`` ``(..., N, M)``."""
        return np.exp(self.log_softmax)

    @property
    def h(self) -> np.ndarray:
        """``h = Σ_m h_m`` ``(..., N)``."""
        return exp_or_raise(logsumexp(self.log_h_tokens, axis=-1), "h")

    @property
    def g(self) -> np.ndarray:
        """``g = Σ_m g_m`` ``(..., N, d_v)``."""
        log_h = self.log_h_tokens
        top = log_h.max(axis=-1, keepdims=True)
        return (np.exp(log_h - top) @ self.v) * exp_or_raise(top, "g")

    @property
    def coefficient(self) -> np.ndarray:
        """``β̂ = g/h`` ``(..., N, d_v)`` (the RFA/SNIS estimate; ``Z`` cancels)."""
        return _softmax_average(self.log_h_tokens, self.v[..., None, :, :])

    @property
    def log_importance_weights(self) -> np.ndarray:
        """``log W(ω_s) = log p_n(ω_s) - log ρ(ω_s)`` ``(..., N, S)``."""
        return logsumexp(self.log_lambda, axis=-1) - self.log_z[..., None]

    @property
    def f(self) -> np.ndarray:
        """``f_n(ω_s) = Σ_m ξ(q_n,ω_s)ξ(k_m,ω_s) v_m / Σ_m ξ(q_n,ω_s)ξ(k_m,ω_s)`` ``(..., N, S, d_v)``."""
        return _softmax_average(self.log_lambda, self.v[..., None, None, :, :])

    @property
    def log_alpha(self) -> np.ndarray:
        """``log α(ω_s) = log r(ω_s) - log S - log Z`` ``(..., N, S)``."""
        return self.log_ratio[..., None, :] - math.log(self.num_samples) - self.log_z[..., None]


def _softmax_average(log_weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``Σ_m softmax(log_weights)_m values_m`` over the last axis of ``log_weights`` (``values`` ``(..., M, d_v)``
    broadcast against ``log_weights`` without its last axis)."""
    w = np.exp(log_weights - log_weights.max(axis=-1, keepdims=True))
    return (w[..., None, :] @ values)[..., 0, :] / w.sum(axis=-1)[..., None]


def control_variate_terms(q, k, v, *, omega=None, proposal=None, num_samples: int | None = None, rng=None,
                          log_ratio=None, log_normalizer=None, frame: str = "theory",
                          dtype=np.float64) -> ControlVariateTerms:
    r"""The per-token control variates ``g_m``, ``h_m`` of RFA (EVA §3.1, Eq 7) for shared samples.

    Parameters
    ----------
    q, k, v : array_like ``(..., N, d)``, ``(..., M, d)``, ``(..., M, d_v)``
    omega, proposal, num_samples, rng, log_ratio
        Samples ``(..., S, d)`` and their ``log r`` as in :func:`rfa_attention` (default ``ρ = N(0, I)``).
    log_normalizer : array_like ``(..., N)``, optional
        ``log Z`` to normalise by (default ``LSE_m(q_n·k_m)`` over the given keys). Pass the full ``log Z``
        when ``k`` holds one subset of the keys (per-chunk sampling).

    Returns
    -------
    ControlVariateTerms

    Notes
    -----
    Cost ``O(NSM(d + d_v))`` and ``O(NSM)`` memory, and it needs the exact ``Z`` of every query: a
    quadratic theory object (the oracle of the claims), not an efficient estimator. Randomness: ``omega``.
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    q, k = _in_frame(q, k, frame)
    omega, log_ratio = _samples(omega, log_ratio, proposal, rng, num_samples, q.shape[-1], dt)
    lq = log_xi(q, omega) + log_ratio[..., None, :]
    lk = log_xi(k, omega)
    log_lam = lq[..., :, :, None] + np.swapaxes(lk, -1, -2)[..., None, :, :]
    logits = q @ np.swapaxes(k, -1, -2)
    log_z = logsumexp(logits, axis=-1) if log_normalizer is None else as_float_array(
        log_normalizer, "log_normalizer", dtype=dt)
    return ControlVariateTerms(log_lam, np.broadcast_to(log_z, log_lam.shape[:-2]), log_ratio,
                               logits - log_z[..., None], np.broadcast_to(v, log_lam.shape[:-3] + v.shape[-2:]))


def control_variate_family(terms: ControlVariateTerms, coefficients, *, per_token: bool = False) -> np.ndarray:
    r"""``g̃(ω; {β_m}) = Σ_m [g_m(ω) - β_m (h_m(ω) - w_m)]`` (EVA Eq 7, Prop 1, Eq 13).

    Parameters
    ----------
    terms : ControlVariateTerms
    coefficients : array_like, broadcastable to ``(..., N, M, d_v)``
        ``β_m`` per query and key: a constant vector, :func:`shared_coefficients` (Eq 7, equals RFA),
        :func:`token_coefficients` (Prop 1, equals softmax) or :func:`eva_coefficients` (Eq 13).
    per_token : bool
        Return the terms ``g̃_m`` ``(..., N, M, d_v)`` instead of their sum.
    """
    beta = as_float_array(coefficients, "coefficients", min_ndim=1)
    tokens = terms.g_tokens - beta * (terms.h_tokens - terms.softmax_weights)[..., None]
    return tokens if per_token else tokens.sum(axis=-2)


def shared_coefficients(terms: ControlVariateTerms) -> np.ndarray:
    """Assignment (i): ``β_m = β̂(ω)`` for every key (Eq 7; the family then equals RFA)."""
    beta = terms.coefficient
    return np.broadcast_to(beta[..., None, :], beta.shape[:-1] + (terms.v.shape[-2], beta.shape[-1]))


def token_coefficients(terms: ControlVariateTerms) -> np.ndarray:
    """Assignment (ii): ``β_m = v_m`` (Prop 1; the family then equals softmax attention)."""
    return np.broadcast_to(terms.v[..., None, :, :], terms.log_z.shape + terms.v.shape[-2:])


def eva_coefficients(terms: ControlVariateTerms, labels) -> np.ndarray:
    """Assignment (iii): ``β_m = v_m`` on ``E`` (label :data:`EXACT`), ``β̂_c(ω) = Σ_{P_c} g_m/Σ_{P_c} h_m``
    on subset ``c`` (Eq 13). ``labels`` ``(M,)`` or ``(N, M)``; :data:`EXCLUDED` keys get coefficient 0."""
    labels = _labels(labels, terms.v.shape[-2])
    beta = np.zeros(terms.log_z.shape + terms.v.shape[-2:])
    log_h = terms.log_h_tokens
    full = np.broadcast_to(labels, log_h.shape)
    for c in range(int(labels.max(initial=-1)) + 1):
        in_c = full == c
        if not in_c.any():
            continue
        with np.errstate(invalid="ignore"):  # rows without a key of subset c are not selected below
            beta_c = _softmax_average(np.where(in_c, log_h, -np.inf), terms.v[..., None, :, :])
        beta = np.where(in_c[..., None], beta_c[..., None, :], beta)
    return np.where((full == EXACT)[..., None], np.broadcast_to(terms.v[..., None, :, :], beta.shape), beta)
