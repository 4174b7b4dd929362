r"""EVA: efficient attention via control variates (Zheng et al., ICLR 2023; ``002_b2e9d84e2f6b65de.txt``).

Notation (register ``../shared/claims/eva.md``): query ``q_n``, keys ``k_m``, values ``v_m``;
``e_m = exp(q_n·k_m)``, ``Z = Σ_m e_m``, ``w_m = e_m/Z``; the positive randomized mapping
``ξ(x, ω) = exp(ω·x - ‖x‖²/2)`` (Eq 3); samples ``ω_s ~ ρ`` (the paper's proposal ``q(ω)``) with density
ratio ``r(ω) = N(ω; 0, I)/ρ(ω)``, and ``λ_{s,m} = r(ω_s) ξ(q_n, ω_s) ξ(k_m, ω_s) > 0``.

What this module provides, each a composition of rfkit's primitives:

* **proposals** — :class:`~rfkit.estimators.proposals.GaussianProposal` ``N(μ, τ²I)`` and
  :class:`~rfkit.estimators.proposals.GaussianMixtureProposal` (re-exported from
  :mod:`rfkit.estimators.proposals`: ``sample``, ``logpdf``; ``log r`` by
  :func:`~rfkit.estimators.proposals.log_ratio`); :func:`~rfkit.estimators.rfa.log_xi` (``log ξ``);
* **RFA as SNIS** (§2.2, Eq 4) — :func:`~rfkit.estimators.rfa.rfa_attention` (defined in
  :mod:`rfkit.estimators.rfa`, re-exported here): ``Σ_{s,m} λ v_m / Σ_{s,m} λ``; shared samples use
  :func:`~rfkit.estimators.attention.linear_attention` with ``form="features"`` (linear in ``N`` and ``M``,
  bidirectional or causal); query-dependent samples the direct ``O(NSMd)`` path;
* **per-token control variates** (§3.1, Eq 7) — :func:`control_variate_terms` returns
  :class:`ControlVariateTerms` (``g_m``, ``h_m``, ``g``, ``h``, ``β̂``, ``W(ω_s)``, ``f_n(ω_s)``, ``α(ω_s)``,
  all from ``log λ - log Z`` with the exact ``log Z``); :func:`control_variate_family` evaluates
  ``g̃ = Σ_m [g_m - β_m(h_m - w_m)]`` for any coefficient assignment, built by :func:`shared_coefficients`
  (RFA, Eq 7), :func:`token_coefficients` (Prop 1) and :func:`eva_coefficients` (Eq 13);
* **EVA with exact subset masses** (Eq 13 / 15) — :func:`eva_ideal`, with partitions given as label arrays
  (:data:`EXACT`, :data:`EXCLUDED`, subset indices), built by :func:`contiguous_labels`,
  :func:`partition_labels` (contiguous, random, k-means clustered, dyadic), :func:`exact_set` (local block,
  top-``|E|``, random) and :func:`block_labels` (§4.2's per-query blocks and chunks, optionally causal);
* **practical EVA** (Eq 16, Algorithm 1, App C) — :func:`eva_practical` with the register's options and
  diagnostic variants, its partition :func:`practical_partition`, the chunk summary map
  :class:`LinearLayerNorm` (``σ = LN∘Linear``, Eq 26);
* **causal EVA** (App D, Algorithm 2) — :func:`eva_causal` (parallel, mask matrices) and
  :func:`eva_causal_incremental` (token by token, set based);
* **Scatterbrain** (App G.5, Eqs 29-30) — :func:`scatterbrain_attention`.

Frames: the paper uses the unscaled kernel ``exp(q·k)`` (``frame="theory"``); ``frame="sqrt_d"`` first
replaces ``q ← d^{-1/4} q`` and ``k ← d^{-1/4} k`` (logits ``q·k/√d``). The practical estimators also take
``frame="reference_code"`` (the authors' released code: logits and chunk log-features divided by ``√d``,
proposal means from unscaled ``σ`` outputs).

Numerics: every exponential is formed in log space with a shift that cancels exactly in the ratio
(row maxima over *allowed* logits only, so causal rows never look at the future). Randomness comes only
from ``rng`` or explicit draws (``omega=``, ``eps=``), so estimators can share samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rfkit.base.checks import (
    NumericalError,
    as_float_array,
    check_choice,
    check_positive_float,
    check_positive_int,
    check_qkv,
    check_rng,
    compute_dtype,
)
from rfkit.base.laws import EXACT, EXCLUDED
from rfkit.base.numerics import half_sq_norm, logsumexp

from .proposals import GaussianMixtureProposal, GaussianProposal
from .proposals import log_ratio as _log_ratio
from .rfa import FRAMES, _in_frame, _log_features, log_xi, rfa_attention

__all__ = [
    "FRAMES",
    "PRACTICAL_FRAMES",
    "EXACT",
    "EXCLUDED",
    "MU_RULES",
    "log_xi",
    "GaussianProposal",
    "GaussianMixtureProposal",
    "rfa_attention",
    "ControlVariateTerms",
    "control_variate_terms",
    "control_variate_family",
    "shared_coefficients",
    "token_coefficients",
    "eva_coefficients",
    "contiguous_labels",
    "partition_labels",
    "exact_set",
    "block_labels",
    "PARTITION_LAYOUTS",
    "EXACT_SETS",
    "eva_ideal",
    "LinearLayerNorm",
    "PracticalPartition",
    "practical_partition",
    "EvaDetails",
    "eva_practical",
    "eva_causal",
    "eva_causal_incremental",
    "ScatterbrainParts",
    "scatterbrain_attention",
]

#: Frames of every estimator here (:data:`rfkit.estimators.rfa.FRAMES`); the practical and causal estimators also
#: accept ``"reference_code"``.
PRACTICAL_FRAMES = ("theory", "sqrt_d", "reference_code")
#: Proposal-mean rules of practical EVA: ``q̃_c + k̃_c`` (Eq 28), ``½(q̃_c + k̃_c)``, ``q̃_c``, ``0``.
MU_RULES = ("q+k", "half", "q", "zero")



# ------------------------------------------------------------------------------------------ inputs


def _exp_checked(log_values: np.ndarray, what: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        out = np.exp(log_values)
    if not np.isfinite(out).all():
        raise NumericalError(f"{what} overflows in {out.dtype}; use its log form")
    return out


# --------------------------------------------------------------------------------------- proposals


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


# ------------------------------------------------------------------------- per-token control variates


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
        return _exp_checked(self.log_h_tokens, "h_m")

    @property
    def g_tokens(self) -> np.ndarray:
        """``g_m = Σ_s α(ω_s) ξ(q_n, ω_s) ξ(k_m, ω_s) v_m`` ``(..., N, M, d_v)``, summed over ``s`` last."""
        terms = _exp_checked(self.log_lambda - math.log(self.num_samples) - self.log_z[..., None, None],
                             "g_m")
        return np.einsum("...nsm,...mv->...nmv", terms, self.v)

    @property
    def softmax_weights(self) -> np.ndarray:
        """``w_m = E[h_m]`` ``(..., N, M)``."""
        return np.exp(self.log_softmax)

    @property
    def h(self) -> np.ndarray:
        """``h = Σ_m h_m`` ``(..., N)``."""
        return _exp_checked(logsumexp(self.log_h_tokens, axis=-1), "h")

    @property
    def g(self) -> np.ndarray:
        """``g = Σ_m g_m`` ``(..., N, d_v)``."""
        log_h = self.log_h_tokens
        top = log_h.max(axis=-1, keepdims=True)
        return (np.exp(log_h - top) @ self.v) * _exp_checked(top, "g")

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


# ----------------------------------------------------------------------------------- partitions


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


def contiguous_labels(m: int, num_chunks: int, exact=None) -> np.ndarray:
    """Labels ``(M,)``: ``exact`` indices get :data:`EXACT`, the others ``num_chunks`` contiguous chunks in
    index order (equal sizes when they divide evenly, else sizes differing by one).

    Examples
    --------
    >>> contiguous_labels(6, 2, exact=[0])  # 5 keys: chunks of 3 and 2
    array([-1,  0,  0,  0,  1,  1])
    """
    m = check_positive_int(m, "m")
    labels = np.full(m, EXACT, dtype=np.int64)
    rest = np.setdiff1d(np.arange(m), np.asarray([] if exact is None else exact, dtype=np.int64))
    if num_chunks == 0:
        if rest.size:
            raise ValueError("num_chunks = 0 needs every key in the exact set")
        return labels
    num_chunks = check_positive_int(num_chunks, "num_chunks")
    if num_chunks > rest.size:
        raise ValueError(f"cannot split {rest.size} keys into {num_chunks} non-empty chunks")
    for c, part in enumerate(np.array_split(rest, num_chunks)):
        labels[part] = c
    return labels


PARTITION_LAYOUTS = ("contiguous", "random", "clustered", "dyadic")
EXACT_SETS = ("local", "top", "random")


def partition_labels(m: int, num_chunks: int, *, exact=None, layout: str = "contiguous", keys=None,
                     rng=None) -> np.ndarray:
    """Labels ``(M,)`` of a partition of ``[M] \\ E`` into ``num_chunks`` non-empty subsets (EVA §4.1).

    ``layout``: ``contiguous`` (index order, :func:`contiguous_labels`), ``random`` (a uniformly random
    assignment with the contiguous sizes), ``clustered`` (k-means on ``keys``, Lloyd iterations from a
    k-means++ start drawn from ``rng``; an emptied cluster takes the point farthest from its centre) or
    ``dyadic`` (contiguous with ``num_chunks`` a power of two: successive powers give nested refinements).
    """
    check_choice(layout, "layout", PARTITION_LAYOUTS)
    labels = contiguous_labels(m, num_chunks, exact=exact)
    if layout == "dyadic" and num_chunks & (num_chunks - 1):
        raise ValueError(f"layout='dyadic' needs num_chunks a power of two, got {num_chunks}")
    free = np.flatnonzero(labels != EXACT)
    if layout == "random":
        labels[free] = check_rng(rng).permutation(labels[free])
    elif layout == "clustered" and num_chunks:
        points = as_float_array(keys, "keys", ndim=2)[free]
        labels[free] = _kmeans(points, num_chunks, check_rng(rng))
    return labels


def _kmeans(points: np.ndarray, clusters: int, rng: np.random.Generator, iterations: int = 25) -> np.ndarray:
    centres = points[[rng.integers(points.shape[0])]]
    while centres.shape[0] < clusters:                                   # k-means++ seeding
        dist = ((points[:, None, :] - centres[None]) ** 2).sum(-1).min(axis=1)
        centres = np.vstack([centres, points[rng.choice(points.shape[0], p=dist / dist.sum()) if dist.sum() > 0
                                             else rng.integers(points.shape[0])]])
    for _ in range(iterations):
        assign = ((points[:, None, :] - centres[None]) ** 2).sum(-1).argmin(axis=1)
        for c in range(clusters):
            if not (assign == c).any():                                  # keep every subset non-empty
                far = ((points - centres[assign]) ** 2).sum(-1)
                far[np.bincount(assign, minlength=clusters)[assign] <= 1] = -1.0
                assign[int(far.argmax())] = c
            centres[c] = points[assign == c].mean(axis=0)
    return assign


def exact_set(q, k, size: int, *, kind: str = "local", position: int | None = None, rng=None) -> np.ndarray:
    """Indices of an exact set ``E`` of ``size`` keys for one query (EVA §4.1 "Partially Optimized Coefficients").

    ``kind``: ``local`` (the contiguous block of ``size`` keys containing ``position``, as a block-wise local
    attention would choose), ``top`` (the ``size`` keys with the largest ``q·k_m``) or ``random``.
    """
    check_choice(kind, "kind", EXACT_SETS)
    k = as_float_array(k, "k", ndim=2)
    m = k.shape[0]
    size = check_positive_int(size, "size", minimum=0)
    if size > m:
        raise ValueError(f"size = {size} exceeds the number of keys {m}")
    if kind == "top":
        scores = k @ as_float_array(q, "q", ndim=1)
        return np.sort(np.argsort(-scores, kind="stable")[:size])
    if kind == "random":
        return np.sort(check_rng(rng).choice(m, size=size, replace=False))
    if position is None:
        raise TypeError("kind='local' needs the query's position")
    start = min(position // size * size, m - size) if size else 0
    return np.arange(start, start + size)


def block_labels(n: int, block_size: int, num_chunks: int, *, causal: bool = False) -> np.ndarray:
    """Per-query labels ``(N, N)`` of EVA §4.2 as an exact partition: ``E^n`` = the contiguous block of
    ``n``, ``[N] \\ E^n`` split into ``num_chunks`` contiguous chunks; ``causal`` excludes keys ``m > n``
    (:data:`EXCLUDED`) and splits only ``[n] \\ E^n`` (the causal form of :func:`eva_ideal`)."""
    n = check_positive_int(n, "n")
    block_size = check_positive_int(block_size, "block_size")
    out = np.empty((n, n), dtype=np.int64)
    for i in range(n):
        start = i // block_size * block_size
        block = np.arange(start, min(start + block_size, n))
        keys = n if not causal else i + 1
        rest = np.setdiff1d(np.arange(keys), block)
        row = np.full(n, EXCLUDED, dtype=np.int64)
        row[block[block < keys]] = EXACT
        chunks = min(num_chunks, rest.size)
        for c, part in enumerate(np.array_split(rest, chunks) if chunks else []):
            row[part] = c
        out[i] = row
    return out


# ------------------------------------------------------------------------------------- EVA ideal


def eva_ideal(q, k, v, labels, *, omega, log_ratio=None, sampling: str = "shared", coefficient: str = "sampled",
              return_weights: bool = False, frame: str = "theory", dtype=np.float64):
    r"""EVA with exact subset masses (EVA §4.1, Eq 13 / Eq 15).

    .. math::  \mathrm{EVA13}(q_n) = \sum_{m∈E} w_m v_m + \sum_{c=1}^{C} π_c\,\hatβ_c(ω),\qquad
               \hatβ_c = \frac{\sum_s\sum_{m∈P_c} λ^c_{s,m} v_m}{\sum_s\sum_{m∈P_c} λ^c_{s,m}},

    ``π_c = Σ_{m∈P_c} w_m``, ``λ^c_{s,m} = r_c(ω_{c,s}) ξ(q_n, ω_{c,s}) ξ(k_m, ω_{c,s})``.

    Parameters
    ----------
    q, k, v : array_like ``(N, d)``, ``(M, d)``, ``(M, d_v)``
    labels : int array ``(M,)`` or ``(N, M)``
        :data:`EXACT` (``-1``) for ``E``, ``c = 0..C-1`` for subset ``P_c``, :data:`EXCLUDED` (``-2``) for
        keys the query does not attend (``Z`` and the masses then run over the attended keys only: the
        causal form with ``m <= n``). Per-query rows give per-query partitions.
    omega : array_like
        ``sampling="shared"``: ``(*R, S, d)`` samples common to all subsets (§4.1); ``"per_chunk"``:
        ``(*R, C, S, d)``, an independent set for each subset (App C). ``*R`` are replicate axes.
    log_ratio : array_like ``omega.shape[:-1]``, optional
        ``log r(ω)`` of the proposal(s) (default ``0``: ``ρ = N(0, I)``).
    coefficient : {"sampled", "oracle"}
        ``oracle`` replaces ``β̂_c`` by the local softmax ``β*_c`` (harness reference; ``omega`` unused).
    return_weights : bool
        Also return the effective attention ``A`` ``(*R, N, M)``: ``EVA13 = A V``, rows non-negative
        and summing to 1.

    Returns
    -------
    ndarray ``(*R, N, d_v)`` [, ndarray ``(*R, N, M)``]

    Notes
    -----
    ``π_c`` needs every ``e_m``: ``O(NMd)`` time (quadratic); ``β̂_c`` costs ``O(S|P_c|(d + d_v))`` per
    query and subset. ``E = ∅`` and ``C = 0`` (``E`` = all attended keys) are allowed. Randomness: ``omega``.

    Examples
    --------
    Singleton subsets give softmax attention for any samples (App G.1):

    >>> q, k, v = np.ones((1, 2)), np.eye(2), np.array([[0.0], [1.0]])
    >>> y = eva_ideal(q, k, v, [0, 1], omega=np.zeros((3, 2)))
    >>> bool(np.isclose(y[0, 0], 0.5))
    True
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError("eva_ideal takes unbatched q (N, d), k (M, d), v (M, d_v); replicate axes go on omega")
    q, k = _in_frame(q, k, frame)
    labels = np.broadcast_to(_labels(labels, k.shape[0]), (q.shape[0], k.shape[0]))
    check_choice(sampling, "sampling", ("shared", "per_chunk"))
    check_choice(coefficient, "coefficient", ("sampled", "oracle"))
    n_chunks = int(labels.max(initial=-1)) + 1
    omega, log_ratio = _samples(omega, log_ratio, None, None, None, q.shape[1], dt)
    core = 3 if sampling == "per_chunk" else 2
    if sampling == "per_chunk" and (omega.ndim < 3 or omega.shape[-3] < n_chunks):
        raise ValueError(f"per_chunk omega must have shape (*R, C, S, d) with C >= {n_chunks}, got {omega.shape}")
    reps = omega.shape[:-core]
    omega = omega.reshape((-1,) + omega.shape[-core:])
    log_ratio = log_ratio.reshape((-1,) + log_ratio.shape[-core + 1:])
    y = np.zeros((omega.shape[0], q.shape[0], v.shape[1]))
    weights = np.zeros((omega.shape[0],) + labels.shape) if return_weights else None
    rows, inverse = np.unique(labels, axis=0, return_inverse=True)
    for r, row in enumerate(rows):
        which = np.flatnonzero(inverse.ravel() == r)
        out, a = _eva_ideal_rows(q[which], k, v, row, omega, log_ratio, sampling, coefficient, return_weights)
        y[:, which] = out
        if return_weights:
            weights[:, which] = a
    y = y.reshape(reps + y.shape[1:])
    return (y, weights.reshape(reps + weights.shape[1:])) if return_weights else y


def _eva_ideal_rows(q, k, v, labels, omega, log_ratio, sampling, coefficient, want_weights):
    """Queries sharing one label row; ``omega`` ``(R, [C,] S, d)``; returns ``(R, n, d_v)`` and weights."""
    reps = omega.shape[0]
    logits = q @ k.T
    attended = labels != EXCLUDED
    if not attended.any():
        raise ValueError("a query attends to no key (every label is EXCLUDED)")
    log_z = logsumexp(logits[:, attended], axis=-1)
    exact = labels == EXACT
    w_exact = np.exp(logits[:, exact] - log_z[:, None])
    y = np.broadcast_to(w_exact @ v[exact], (reps, q.shape[0], v.shape[1])).copy()
    weights = np.zeros((reps,) + logits.shape) if want_weights else None
    if want_weights:
        weights[:, :, exact] = w_exact
    for c in range(int(labels.max(initial=-1)) + 1):
        idx = np.flatnonzero(labels == c)
        if idx.size == 0:
            continue
        log_pi = logsumexp(logits[:, idx], axis=-1) - log_z
        if coefficient == "oracle":
            inner = np.broadcast_to(np.exp(logits[:, idx] - (log_pi + log_z)[:, None]), (reps, q.shape[0], idx.size))
        else:
            om = omega[:, c] if sampling == "per_chunk" else omega
            lr = log_ratio[:, c] if sampling == "per_chunk" else log_ratio
            lq = np.einsum("nd,rsd->rns", q, om) - half_sq_norm(q)[:, None] + lr[:, None, :]
            lk = np.einsum("pd,rsd->rsp", k[idx], om) - half_sq_norm(k[idx])
            log_lam = lq[..., None] + lk[:, None]
            e = np.exp(log_lam - log_lam.max(axis=(-2, -1), keepdims=True)).sum(axis=-2)
            inner = e / e.sum(axis=-1, keepdims=True)
        pi = np.exp(log_pi)[None, :, None]
        y += pi * (inner @ v[idx])
        if want_weights:
            weights[:, :, idx] = pi * inner
    return y, weights


# --------------------------------------------------------------------------------- practical EVA


@dataclass(frozen=True)
class LinearLayerNorm:
    r"""Chunk summary map ``σ(x) = LayerNorm(x Wᵀ + b)`` with gain and shift (EVA Eq 26, App C).

    ``LayerNorm(y) = gain·(y - mean(y))/sqrt(var(y) + eps) + shift`` over the last axis (biased variance,
    as torch). Use :meth:`identity_init` (``W = I``, ``b = 0``, gain 1, shift 0) or :meth:`random_init`
    (xavier-uniform weight with gain ``1/√2``, the authors' released initialisation).
    """

    weight: np.ndarray
    bias: np.ndarray
    gain: np.ndarray
    shift: np.ndarray
    eps: float = 1e-5

    def __post_init__(self):
        w = as_float_array(self.weight, "weight", ndim=2)
        d = w.shape[0]
        if w.shape != (d, d):
            raise ValueError(f"weight must be square (d, d), got {w.shape}")
        for name in ("bias", "gain", "shift"):
            arr = as_float_array(getattr(self, name), name, ndim=1)
            if arr.shape != (d,):
                raise ValueError(f"{name} must have shape ({d},), got {arr.shape}")
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "weight", w)
        check_positive_float(self.eps, "eps")

    @classmethod
    def identity_init(cls, d: int) -> LinearLayerNorm:
        d = check_positive_int(d, "d")
        return cls(np.eye(d), np.zeros(d), np.ones(d), np.zeros(d))

    @classmethod
    def random_init(cls, d: int, *, rng, gain: float = 2 ** -0.5) -> LinearLayerNorm:
        d = check_positive_int(d, "d")
        bound = gain * math.sqrt(6.0 / (2 * d))
        weight = check_rng(rng).uniform(-bound, bound, size=(d, d))
        return cls(weight, np.zeros(d), np.ones(d), np.zeros(d))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.weight.T + self.bias
        centred = y - y.mean(axis=-1, keepdims=True)
        return self.gain * centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + self.eps) + self.shift


@dataclass(frozen=True)
class PracticalPartition:
    """Index arrays of practical EVA's partition (App C, "Partitioning Strategy").

    Attributes
    ----------
    queries : int ``(B, b_q)``
        The query positions of each block (every position exactly once).
    exact : int ``(B, e)``
        The key positions of ``E^n`` for the block's queries (``e = |E|``; padded where ``exact_valid`` is
        False).
    exact_valid : bool ``(B, e)``
    chunks : int ``(G, C, l)``
        Chunk key positions: ``G = 1`` (``partition_domain="all"``, shared by every query) or ``G = B``
        (``"complement"``: chunks of ``[M] \\ E^n``, one set per block).
    """

    queries: np.ndarray
    exact: np.ndarray
    exact_valid: np.ndarray
    chunks: np.ndarray

    @property
    def num_chunks(self) -> int:
        return self.chunks.shape[1]

    def chunk_group(self) -> np.ndarray:
        """For each block, the index of its chunk set along ``chunks``' first axis."""
        blocks = self.queries.shape[0]
        return np.arange(blocks) if self.chunks.shape[0] == blocks else np.zeros(blocks, np.int64)


def _grid_windows(grid: tuple[int, int], side: int) -> np.ndarray:
    """Row-major token indices of the ``side × side`` windows of an ``H × W`` grid, window by window."""
    h, w = grid
    if h % side or w % side:
        raise ValueError(f"the grid {grid} must be divisible by the window side {side}")
    idx = np.arange(h * w).reshape(h // side, side, w // side, side)
    return idx.transpose(0, 2, 1, 3).reshape(-1, side * side)


def _square_side(size: int, what: str) -> int:
    side = math.isqrt(size)
    if side * side != size:
        raise ValueError(f"2d layout: {what} = {size} must be a perfect square")
    return side


def practical_partition(n_tokens: int, *, block_size: int, num_chunks: int, partition_domain: str = "all",
                        layout: str = "1d", grid: tuple[int, int] | None = None,
                        window: str = "block") -> PracticalPartition:
    r"""The partition ``{E^n, P_1^n, ..., P_C^n}`` of practical EVA (§4.2, App C).

    Parameters
    ----------
    n_tokens : int
        ``N = M`` (self-attention).
    block_size : int
        ``|E|``: contiguous blocks (``layout="1d"``) or ``√|E| × √|E|`` windows of the ``grid``
        (``"2d"``); 0 means no exact set (every query in one group, ``E = ∅``).
    num_chunks : int
        ``C`` (0: local attention only). Chunks are contiguous (1d) or square patches of side
        ``√(M/C)`` (2d, ``partition_domain="all"``); with ``"complement"`` the keys outside ``E^n`` are
        listed in index order (1d) or window by window (2d, windows of side ``√|E|``) and split into
        ``C`` equal runs; an empty complement (``|E| = M``) leaves no chunk.
    window : {"block", "overlapping"}
        ``overlapping`` (1d, App E.3): ``E^n`` = the block of ``n`` plus ``block_size/2`` tokens of each
        neighbouring block (``|E| = 2·block_size``), truncated at the sequence ends; domain ``all`` only.
    """
    n = check_positive_int(n_tokens, "n_tokens")
    b = check_positive_int(block_size, "block_size", minimum=0)
    c = check_positive_int(num_chunks, "num_chunks", minimum=0)
    check_choice(partition_domain, "partition_domain", ("all", "complement"))
    check_choice(layout, "layout", ("1d", "2d"))
    check_choice(window, "window", ("block", "overlapping"))
    if layout == "2d" and (grid is None or grid[0] * grid[1] != n):
        raise ValueError(f"layout='2d' needs grid=(H, W) with H·W = {n}, got {grid}")
    queries, exact, valid = _exact_sets(n, b, layout, grid, window)
    if c == 0:
        return PracticalPartition(queries, exact, valid, np.zeros((1, 0, 0), np.int64))
    if partition_domain == "all":
        chunks = _all_chunks(n, c, layout, grid)[None]
    else:
        if window == "overlapping":
            raise ValueError("window='overlapping' is defined with partition_domain='all' only")
        chunks = _complement_chunks(n, c, exact, layout, grid, b)
    return PracticalPartition(queries, exact, valid, chunks)


def _exact_sets(n, b, layout, grid, window):
    if b == 0:
        return np.arange(n)[None], np.zeros((1, 0), np.int64), np.zeros((1, 0), bool)
    if layout == "2d":
        if window != "block":
            raise ValueError("window='overlapping' is defined for layout='1d' only")
        blocks = _grid_windows(grid, _square_side(b, "block_size"))
        return blocks, blocks, np.ones(blocks.shape, bool)
    if n % b:
        raise ValueError(f"n_tokens = {n} must be a multiple of block_size = {b} (padding is not implemented)")
    blocks = np.arange(n).reshape(-1, b)
    if window == "block":
        return blocks, blocks, np.ones(blocks.shape, bool)
    if b % 2:
        raise ValueError("window='overlapping' needs an even block_size")
    exact = blocks[:, :1] + np.arange(-b // 2, b + b // 2)
    valid = (exact >= 0) & (exact < n)
    return blocks, np.clip(exact, 0, n - 1), valid


def _all_chunks(n, c, layout, grid):
    if n % c:
        raise ValueError(f"num_chunks = {c} must divide n_tokens = {n}")
    if layout == "1d":
        return np.arange(n).reshape(c, n // c)
    return _grid_windows(grid, _square_side(n // c, "chunk size M/C"))


def _complement_chunks(n, c, exact, layout, grid, block):
    """Chunks of ``[M] \\ E^n`` per block: the remaining keys in index order (1d) or window by window (2d, windows
    of the exact set's side, so that removing ``E^n`` removes one window), split into ``c`` equal runs."""
    if layout == "1d":
        order = np.arange(n)
    else:
        order = _grid_windows(grid, _square_side(block if block else n // c, "window size")).ravel()
    rest = [order[~np.isin(order, e)] for e in exact]
    size = rest[0].size
    if size == 0:
        return np.zeros((exact.shape[0], 0, 0), np.int64)
    if size % c:
        raise ValueError(f"num_chunks = {c} must divide the {size} keys outside each exact set")
    return np.stack([r.reshape(c, size // c) for r in rest])


@dataclass(frozen=True)
class EvaDetails:
    """What one practical/causal EVA call computed (diagnostics and the effective attention).

    Attributes
    ----------
    partition : PracticalPartition or None (causal)
    omega : ndarray ``(..., G, C, S, d)``, the samples used (``ω_c = μ_c`` in eval mode)
    mu : ndarray ``(..., G, C, d)``, proposal means
    k_tilde, q_tilde : ndarray ``(..., G, C, d)``, chunk representatives ``σ(pool)``
    coefficients : ndarray, ``β̂_c``: ``(..., G, C, d_v)`` (single sample, query-free) or per query
        ``(..., N, C, d_v)``
    attention : ndarray ``(..., N, M)``, effective attention ``A`` with ``Y = A V`` (rows sum to 1)
    """

    partition: PracticalPartition | None
    omega: np.ndarray
    mu: np.ndarray
    k_tilde: np.ndarray
    q_tilde: np.ndarray
    coefficients: np.ndarray
    attention: np.ndarray


@dataclass(frozen=True)
class _Options:
    sigma_q: Callable
    sigma_k: Callable
    pool: str
    mu_rule: object
    num_samples: int
    mode: str
    logit_scale: float
    coefficient: str
    chunk_logit: str
    chunk_logit_offset: float


def _identity(x):
    return x


def _options(d, *, sigma_q, sigma_k, pool, mu_rule, num_samples, mode, frame, coefficient, chunk_logit,
             chunk_logit_offset) -> _Options:
    check_choice(pool, "pool", ("mean", "max"))
    check_choice(mode, "mode", ("train", "eval"))
    check_choice(frame, "frame", PRACTICAL_FRAMES)
    check_choice(coefficient, "coefficient", ("sampled", "oracle"))
    check_choice(chunk_logit, "chunk_logit", ("representative", "lse"))
    if isinstance(mu_rule, str):
        check_choice(mu_rule, "mu_rule", MU_RULES)
    num_samples = check_positive_int(num_samples, "num_samples")
    if frame == "reference_code" and num_samples > 1:
        raise ValueError("frame='reference_code' is the single-sample released code; use num_samples=1")
    for name, fn in (("sigma_q", sigma_q), ("sigma_k", sigma_k)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{name} must be None (identity) or a callable on (..., d) arrays")
    offset = float(chunk_logit_offset)
    if not math.isfinite(offset):
        raise ValueError("chunk_logit_offset must be finite")
    return _Options(sigma_q or _identity, sigma_k or _identity, pool, mu_rule, num_samples, mode,
                    d ** -0.5 if frame == "reference_code" else 1.0, coefficient, chunk_logit, offset)


def _pool(x: np.ndarray, how: str) -> np.ndarray:
    return x.mean(axis=-2) if how == "mean" else x.max(axis=-2)


def _proposal_mean(q_tilde, k_tilde, rule) -> np.ndarray:
    if not isinstance(rule, str):
        return np.broadcast_to(as_float_array(rule, "mu_rule"), k_tilde.shape)
    return {"q+k": lambda: q_tilde + k_tilde, "half": lambda: 0.5 * (q_tilde + k_tilde), "q": lambda: q_tilde,
            "zero": lambda: np.zeros_like(k_tilde)}[rule]()


def _chunk_samples(mu, opts: _Options, rng, eps, dtype):
    """``ω_{c,s} = μ_c + ε_{c,s}`` (train) or ``μ_c`` (eval, or oracle coefficients, which use no sample):
    shape ``mu.shape[:-1] + (S, d)``."""
    shape = mu.shape[:-1] + (opts.num_samples, mu.shape[-1])
    if opts.mode == "eval" or opts.coefficient == "oracle":
        return np.broadcast_to(mu[..., None, :], shape)
    if eps is None:
        if rng is None:
            raise TypeError("mode='train' needs rng= or eps= (the chunk noise)")
        return mu[..., None, :] + check_rng(rng).standard_normal(shape)
    eps = as_float_array(eps, "eps", dtype=dtype)
    if opts.num_samples == 1:
        eps = eps[..., None, :]
    try:
        eps = np.broadcast_to(eps, shape)
    except ValueError as exc:
        raise ValueError(f"eps must broadcast to {shape[:-2] + shape[-1:]} (one sample per chunk) or to "
                         f"{shape} (num_samples > 1), got {eps.shape}") from exc
    return mu[..., None, :] + eps


@dataclass(frozen=True)
class _ChunkStats:
    k_tilde: np.ndarray   # (..., G, C, d)
    q_tilde: np.ndarray
    mu: np.ndarray
    omega: np.ndarray     # (..., G, C, S, d)
    log_feat: np.ndarray  # (..., G, C, S, l): log ξ(k_m, ω_{c,s}) (times the logit scale)
    chunk_keys: np.ndarray   # (..., G, C, l, d)
    chunk_values: np.ndarray  # (..., G, C, l, d_v)


def _chunk_stats(q, k, v, chunks, opts: _Options, rng, eps, dtype) -> _ChunkStats:
    """Chunk representatives, proposals, samples and key log-features from the chunk's tokens only."""
    kc, qc, vc = k[..., chunks, :], q[..., chunks, :], v[..., chunks, :]
    k_tilde = opts.sigma_k(_pool(kc, opts.pool))
    q_tilde = opts.sigma_q(_pool(qc, opts.pool))
    mu = _proposal_mean(q_tilde, k_tilde, opts.mu_rule)
    omega = _chunk_samples(mu, opts, rng, eps, dtype)
    log_feat = (np.einsum("...sd,...ld->...sl", omega, kc) - half_sq_norm(kc)[..., None, :]) * opts.logit_scale
    return _ChunkStats(k_tilde, q_tilde, mu, omega, log_feat, kc, vc)


def _no_chunks(nb: int, d: int, dv: int, num_samples: int) -> _ChunkStats:
    """Empty chunk statistics (``C = 0``: local attention only)."""
    empty = np.zeros((nb, 1, 0, d))
    return _ChunkStats(empty, empty, empty, np.zeros((nb, 1, 0, num_samples, d)),
                       np.zeros((nb, 1, 0, num_samples, 0)), np.zeros((nb, 1, 0, 0, d)), np.zeros((nb, 1, 0, 0, dv)))


def _single_sample_coefficients(stats: _ChunkStats):
    """Query-free ``β̂_c = Σ_{m∈P_c} softmax_m(log ξ(k_m, ω_c)) v_m`` (App C) and its inner weights."""
    lf = stats.log_feat[..., 0, :]
    inner = np.exp(lf - lf.max(axis=-1, keepdims=True))
    inner /= inner.sum(axis=-1, keepdims=True)
    return (inner[..., None, :] @ stats.chunk_values)[..., 0, :], inner


def _multi_sample_coefficients(qb, stats: _ChunkStats, group, want_inner: bool):
    """Per-query ``β̂_c(q_n)`` from ``S`` samples per chunk (App C, multi-sample form) and inner weights.

    ``β̂_c(q_n) = Σ_{s,m} softmax_{(s,m)}(log r_c(ω_{c,s}) + log ξ(q_n, ω_{c,s}) + log ξ(k_m, ω_{c,s})) v_m``,
    factored as query weights ``u = r_c ξ(q_n, ·)`` times per-sample key sums ``Σ_m ξ(k_m, ω_{c,s}) v_m``:
    ``O(N C S (d + d_v))`` time and ``O(N C S + C S d_v)`` memory. The inner weights over ``P_c`` (``O(N M)``)
    are formed only when ``want_inner`` (details requested); otherwise ``None``.
    """
    omega, mu = stats.omega[..., group, :, :, :], stats.mu[..., group, :, :]
    log_r = -np.einsum("...csd,...cd->...cs", omega, mu) + half_sq_norm(mu)[..., None]
    lf = stats.log_feat[..., group, :, :, :]
    shift = lf.max(axis=-1)
    key_w = np.exp(lf - shift[..., None])                          # (..., B, C, S, l)
    lq = np.einsum("...bqd,...bcsd->...bqcs", qb, omega) - half_sq_norm(qb)[..., None, None]
    a = lq + (log_r + shift)[..., None, :, :]
    u = np.exp(a - a.max(axis=-1, keepdims=True))                  # (..., B, q, C, S)
    values = stats.chunk_values[..., group, :, :, :]
    numerator = np.einsum("...bqcs,...bcsv->...bqcv", u, key_w @ values)
    denominator = np.einsum("...bqcs,...bcs->...bqc", u, key_w.sum(axis=-1))
    beta = numerator / denominator[..., None]
    if not want_inner:
        return beta, None
    inner = np.einsum("...bqcs,...bcsl->...bqcl", u, key_w)
    return beta, inner / inner.sum(axis=-1, keepdims=True)


def _oracle_coefficients(qb, stats: _ChunkStats, group, scale):
    """``β*_c(q_n)``: the local softmax of ``P_c`` (diagnostic (a); quadratic)."""
    kc, vc = stats.chunk_keys[..., group, :, :, :], stats.chunk_values[..., group, :, :, :]
    logits = np.einsum("...bqd,...bcld->...bqcl", qb, kc) * scale
    inner = np.exp(logits - logits.max(axis=-1, keepdims=True))
    inner /= inner.sum(axis=-1, keepdims=True)
    return np.einsum("...bqcl,...bclv->...bqcv", inner, vc), inner


def _chunk_logits(qb, stats: _ChunkStats, group, opts: _Options):
    if opts.chunk_logit == "lse":
        kc = stats.chunk_keys[..., group, :, :, :]
        logits = logsumexp(np.einsum("...bqd,...bcld->...bqcl", qb, kc) * opts.logit_scale, axis=-1)
    else:
        logits = np.einsum("...bqd,...bcd->...bqc", qb, stats.k_tilde[..., group, :, :]) * opts.logit_scale
    return logits + opts.chunk_logit_offset


def _joint_softmax(local_logits, chunk_logits):
    """Weights of one softmax over ``[local ‖ chunk]`` logits (Eq 16's normaliser), shifted by the row
    maximum of the allowed (finite) logits only."""
    top = np.maximum(local_logits.max(axis=-1, initial=-np.inf), chunk_logits.max(axis=-1, initial=-np.inf))
    if not np.isfinite(top).all():
        raise ValueError("a query row has no allowed logit (nothing to attend)")
    a_loc = np.exp(local_logits - top[..., None])
    a_chk = np.exp(chunk_logits - top[..., None])
    total = a_loc.sum(axis=-1) + a_chk.sum(axis=-1)
    return a_loc / total[..., None], a_chk / total[..., None]


def _flatten_batch(*arrays):
    lead = np.broadcast_shapes(*(a.shape[:-2] for a in arrays))
    return lead, [np.broadcast_to(a, lead + a.shape[-2:]).reshape((-1,) + a.shape[-2:]) for a in arrays]


def eva_practical(q, k, v, *, block_size: int, num_chunks: int, partition_domain: str = "all", layout: str = "1d",
                  grid: tuple[int, int] | None = None, window: str = "block", sigma_q=None, sigma_k=None,
                  pool: str = "mean", mu_rule="q+k", num_samples: int = 1, mode: str = "train", rng=None, eps=None,
                  frame: str = "theory", coefficient: str = "sampled", chunk_logit: str = "representative",
                  chunk_logit_offset: float = 0.0, position_bias=None, return_details: bool = False,
                  dtype=np.float64):
    r"""Practical EVA (EVA §4.2, Eq 16, Algorithm 1, App C).

    .. math::  y_n = \frac{\sum_{m∈E^n} e_m v_m + \sum_c \exp(q_n·\tilde k_c)\,\hatβ_c}
                          {\sum_{m∈E^n} e_m + \sum_c \exp(q_n·\tilde k_c)},\qquad
               \hatβ_c = \sum_{m∈P_c} \frac{ξ(k_m, ω_c)}{\sum_{m'∈P_c} ξ(k_{m'}, ω_c)} v_m,

    one joint softmax over the ``|E^n| + C`` logits ``[q_n·k_m (m ∈ E^n) ‖ q_n·k̃_c]``;
    ``k̃_c = σ_k(pool_{m∈P_c} k_m)``, ``q̃_c = σ_q(pool of the chunk's queries)`` (Eq 26),
    ``ρ_c = N(μ_c, I)`` (Eq 28), ``ω_c = μ_c + ε_c`` (train) or ``μ_c`` (eval: Algorithm 1's
    "set ω_c = E[ω]").

    Parameters
    ----------
    q, k, v : array_like ``(..., N, d)``, ``(..., N, d)``, ``(..., N, d_v)`` (self-attention, leading
        batch/head axes broadcast)
    block_size, num_chunks, partition_domain, layout, grid, window
        The partition (:func:`practical_partition`): ``|E|``, ``C``, ``"all"`` (App C's implementation,
        default) or ``"complement"`` (§4.2's description), ``"1d"`` or ``"2d"`` (``grid=(H, W)``),
        ``"block"`` or ``"overlapping"``.
    sigma_q, sigma_k : callable, optional
        Chunk summary maps on ``(..., d)`` (default identity); e.g. :class:`LinearLayerNorm`.
    pool : {"mean", "max"}
    mu_rule : {"q+k", "half", "q", "zero"} or array
        ``μ_c``: ``q̃_c + k̃_c`` (Eq 28, default), ``½(q̃_c + k̃_c)`` (released bidirectional code), ``q̃_c``,
        ``0``, or a given vector / array broadcastable to ``(..., G, C, d)``.
    num_samples : int
        ``S = 1`` (default): query-free ``β̂_c``, ``O(C d_v)`` memory. ``S > 1``: App C's multi-sample
        per-query coefficient ``β̂_c(q_n)`` (``O(NC d_v)`` memory).
    mode : {"train", "eval"}
    rng, eps
        Train-mode noise: ``eps`` ``(..., G, C, d)`` (or ``(..., G, C, S, d)``), else drawn from ``rng``
        (independently per batch element and head).
    frame : {"theory", "sqrt_d", "reference_code"}
        See the module docstring.
    coefficient : {"sampled", "oracle"}
        Diagnostic (a): ``β̂_c := β*_c(q_n)`` (local softmax; quadratic; no noise is drawn).
    chunk_logit : {"representative", "lse"}
        Diagnostic (b): ``q_n·k̃_c`` replaced by ``LSE_{m∈P_c}(q_n·k_m)`` (quadratic).
    chunk_logit_offset : float
        Diagnostic (c): added to every chunk logit (default 0).
    position_bias : array_like ``(b_q, e)``, optional
        Additive bias on the local logits (T5-style relative positions; default none).
    return_details : bool
        Also return :class:`EvaDetails` (samples, coefficients, effective attention ``A``).

    Returns
    -------
    ndarray ``(..., N, d_v)`` [, EvaDetails]

    Notes
    -----
    Cost: chunk statistics ``O(Md + Cd²)``; logits ``O(N(|E| + C)d)``; outputs ``O(N(|E| + C)d_v)``;
    memory ``O(N(|E| + C))``: linear in ``N`` for fixed ``|E|`` and ``C`` (``"complement"`` computes one
    chunk set per block, ``O(N M d/|E|)``). ``C = 0`` is block-local attention. Randomness: ``ε`` only.

    Examples
    --------
    One block holding every token and no chunk is softmax attention:

    >>> y = eva_practical(np.zeros((3, 2)), np.zeros((3, 2)), [[0.0], [3.0], [6.0]], block_size=3, num_chunks=0)
    >>> y[:, 0]
    array([3., 3., 3.])
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    n, d = q.shape[-2], q.shape[-1]
    if k.shape[-2] != n:
        raise ValueError(f"practical EVA is self-attention: q and k need the same length, got {n} and {k.shape[-2]}")
    opts = _options(d, sigma_q=sigma_q, sigma_k=sigma_k, pool=pool, mu_rule=mu_rule, num_samples=num_samples,
                    mode=mode, frame=frame, coefficient=coefficient, chunk_logit=chunk_logit,
                    chunk_logit_offset=chunk_logit_offset)
    q, k = _in_frame(q, k, "sqrt_d" if frame == "sqrt_d" else "theory")
    part = practical_partition(n, block_size=block_size, num_chunks=num_chunks, partition_domain=partition_domain,
                               layout=layout, grid=grid, window=window)
    lead, (q, k, v) = _flatten_batch(q, k, v)
    bias = None if position_bias is None else as_float_array(position_bias, "position_bias", dtype=dt, ndim=2)
    if bias is not None and bias.shape != (part.queries.shape[1], part.exact.shape[1]):
        raise ValueError(f"position_bias must have shape {(part.queries.shape[1], part.exact.shape[1])}, "
                         f"got {bias.shape}")
    y, details = _practical_core(q, k, v, part, opts, rng, _flat_eps(eps, lead, opts, dt), bias, return_details,
                                 dt)
    y = y.reshape(lead + y.shape[1:])
    return (y, _reshape_details(details, lead)) if return_details else y


def _flat_eps(eps, lead, opts: _Options, dtype):
    """Noise with the batch axes flattened like the inputs (noise without batch axes is broadcast)."""
    if eps is None:
        return None
    eps = as_float_array(eps, "eps", dtype=dtype, min_ndim=3)
    core = 3 if opts.num_samples == 1 else 4
    if eps.ndim <= core:
        return eps
    return np.broadcast_to(eps, lead + eps.shape[-core:]).reshape((-1,) + eps.shape[-core:])


def _practical_core(q, k, v, part: PracticalPartition, opts: _Options, rng, eps, bias, want_details, dtype):
    group = part.chunk_group()
    qb = q[:, part.queries]                                                # (nb, B, bq, d)
    local = np.einsum("nbqd,nbed->nbqe", qb, k[:, part.exact]) * opts.logit_scale
    if bias is not None:
        local = local + bias
    local = np.where(part.exact_valid[None, :, None, :], local, -np.inf)
    if part.num_chunks:
        stats = _chunk_stats(q, k, v, part.chunks, opts, rng, eps, dtype)
        beta, inner = _coefficients(qb, stats, group, opts, want_details)
        chunk = _chunk_logits(qb, stats, group, opts)
    else:
        stats = _no_chunks(q.shape[0], q.shape[-1], v.shape[-1], opts.num_samples)
        beta, inner = np.zeros((q.shape[0], 1, 0, v.shape[-1])), np.zeros((q.shape[0], 1, 0, 0))
        chunk = np.zeros(local.shape[:-1] + (0,))
    a_loc, a_chk = _joint_softmax(local, chunk)
    out = a_loc @ v[:, part.exact]
    if part.num_chunks:
        out = out + (np.einsum("nbqc,nbqcv->nbqv", a_chk, beta) if beta.ndim == 5 else a_chk @ beta[:, group])
    y = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=dtype)
    y[:, part.queries] = out
    if not want_details:
        return y, None
    attention = _effective_attention(q.shape[0], q.shape[1], part, group, a_loc, a_chk, inner)
    return y, EvaDetails(part, stats.omega, stats.mu, stats.k_tilde, stats.q_tilde, beta, attention)


def _coefficients(qb, stats: _ChunkStats, group, opts: _Options, want_inner: bool):
    """``β̂_c`` and its inner weights: query-free ``(nb, G, C, ·)`` (one sample) or ``(nb, B, bq, C, ·)``
    (multi-sample inner weights only when ``want_inner``)."""
    if opts.coefficient == "oracle":
        return _oracle_coefficients(qb, stats, group, opts.logit_scale)
    if opts.num_samples == 1:
        return _single_sample_coefficients(stats)
    return _multi_sample_coefficients(qb, stats, group, want_inner)


def _effective_attention(nb, n, part: PracticalPartition, group, a_loc, a_chk, inner):
    """``A`` with ``Y = A V``: local weights on ``E^n`` plus ``a_c`` times the weights inside ``β̂_c``."""
    attention = np.zeros((nb, n, n))
    rows = np.broadcast_to(part.queries[:, :, None], a_loc.shape[1:])
    cols = np.broadcast_to(part.exact[:, None, :], a_loc.shape[1:])
    local = np.where(part.exact_valid[:, None, :], a_loc, 0.0)
    if part.num_chunks:
        w = inner[:, group][:, :, None] if inner.ndim == 4 else inner        # (nb, B, 1 or bq, C, l)
        contrib = a_chk[..., None] * w
        chunk_rows = np.broadcast_to(part.queries[:, :, None, None], contrib.shape[1:])
        chunk_cols = np.broadcast_to(part.chunks[group][:, None], contrib.shape[1:])
    for i in range(nb):
        np.add.at(attention[i], (rows, cols), local[i])
        if part.num_chunks:
            np.add.at(attention[i], (chunk_rows, chunk_cols), contrib[i])
    return attention


def _reshape_details(details: EvaDetails, lead) -> EvaDetails:
    def back(a):
        return a.reshape(lead + a.shape[1:])

    return EvaDetails(details.partition, back(details.omega), back(details.mu), back(details.k_tilde),
                      back(details.q_tilde), back(details.coefficients), back(details.attention))


# ------------------------------------------------------------------------------------- causal EVA


def _causal_windows(n: int, block: int, window: str):
    """Local key positions ``(nB, e)``, their validity and the intra-window mask ``(nB, b, e)``.

    ``window="block"``: keys ``b^n..n`` (Algorithm 2's ``M^E_{i,j} = 1[i <= j]`` on the block);
    ``"overlapping"``: the whole previous block plus ``b^n..n``.
    """
    n_blocks = -(-n // block)
    starts = np.arange(n_blocks) * block
    tri = np.tri(block, dtype=bool)                                     # query i attends key t <= i
    if window == "block":
        keys = starts[:, None] + np.arange(block)
        mask = np.broadcast_to(tri, (n_blocks, block, block))
    else:
        keys = starts[:, None] + np.arange(-block, block)
        mask = np.broadcast_to(np.concatenate([np.ones((block, block), bool), tri], axis=1),
                               (n_blocks, block, 2 * block))
    valid = (keys >= 0) & (keys < n)
    return np.clip(keys, 0, n - 1), mask & valid[:, None, :]


def _causal_chunk_mask(n: int, block: int, chunk: int, n_chunks: int, rule: str, window: str) -> np.ndarray:
    """Allowed chunks ``(N, C)`` through Algorithm 2's ``M^P_{c,t} = 1[c <= t]``.

    ``t`` is the most recent chunk lying entirely left of the local window (``alg2``: chunks ending at or
    before the window start) or the chunk before ``n``'s own chunk (``before_own_chunk``, the released
    code); ``t = -1`` (first block) allows none.
    """
    pos = np.arange(n)
    start = pos // block * block - (block if window == "overlapping" else 0)
    t = np.maximum(start, 0) // chunk - 1 if rule == "alg2" else pos // chunk - 1
    m_p = np.tri(n_chunks, dtype=bool).T                                 # M^P[c, t] = 1[c <= t]
    allowed = np.zeros((n, n_chunks), bool)
    has = t >= 0
    allowed[has] = m_p[:, t[has]].T
    return allowed


def _causal_options(d, **kw):
    return _options(d, num_samples=1, coefficient="sampled", chunk_logit="representative", chunk_logit_offset=0.0,
                    **kw)


def eva_causal(q, k, v, *, block_size: int, chunk_size: int, chunk_mask: str = "alg2", window: str = "block",
               sigma_q=None, sigma_k=None, pool: str = "mean", mu_rule="q+k", mode: str = "train", rng=None,
               eps=None, frame: str = "theory", return_details: bool = False, dtype=np.float64):
    r"""Causal EVA (EVA §4.2 "Extension to Autoregressive Modeling", App D, Algorithm 2), in parallel.

    .. math::  y_n = \frac{\sum_{m∈E^n} M^E_{m-b^n, n-b^n} e_m v_m + \sum_c M^P_{c,t} \exp(q_n·\tilde k_c)\hatβ_c}
                          {\sum_{m∈E^n} M^E_{m-b^n, n-b^n} e_m + \sum_c M^P_{c,t} \exp(q_n·\tilde k_c)},

    blocks of ``block_size`` (``b^n`` the first position of ``n``'s block), chunks of ``chunk_size``
    (``C = ⌊N/chunk_size⌋`` complete chunks, the same for every query), ``M^E`` the intra-block lower
    triangle and ``M^P_{c,t} = 1[c <= t]`` with ``t`` the most recent chunk left of ``E^n`` (the printed
    upper limit ``m`` of the ``R_n`` sum is read as ``C``).

    Parameters
    ----------
    q, k, v : array_like ``(..., N, d)``, ``(..., N, d)``, ``(..., N, d_v)``
    block_size, chunk_size : int
        Any ``N`` is allowed: the last block may be partial and an incomplete last chunk is never used.
    chunk_mask : {"alg2", "before_own_chunk"}
        ``alg2``: chunks that end at or before ``b^n``; ``before_own_chunk`` (released code): chunks with a
        smaller index than the chunk of ``n`` (with chunks shorter than blocks these overlap ``E^n``).
    window : {"block", "overlapping"}
        ``overlapping``: ``E^n`` = the previous block plus the current block up to ``n`` (``alg2`` then
        keeps chunks ending before the previous block).
    sigma_q, sigma_k, pool, mu_rule, mode, rng, frame
        As in :func:`eva_practical` (one sample per chunk).
    eps : array_like ``(..., C', d)`` with ``C' >= C``, optional
        Train-mode noise of chunk ``c`` in row ``c`` (so a prefix of the sequence reuses the same noise).
    return_details : bool
        Also return :class:`EvaDetails` (``attention`` is lower triangular).

    Notes
    -----
    Every statistic of chunk ``c`` (``k̃_c``, ``q̃_c``, ``μ_c``, ``ω_c``, ``β̂_c``) uses the tokens of chunk
    ``c`` only, and a query uses a chunk only when all its positions precede the query; row maxima run
    over allowed logits only. Output row ``n`` therefore depends on tokens ``<= n`` only.
    Cost ``O(N(|E| + C)(d + d_v))``, no recurrence over tokens. Randomness: ``ε`` only.
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    n, d = q.shape[-2], q.shape[-1]
    if k.shape[-2] != n:
        raise ValueError(f"causal EVA is self-attention: q and k need the same length, got {n} and {k.shape[-2]}")
    block = check_positive_int(block_size, "block_size")
    chunk = check_positive_int(chunk_size, "chunk_size")
    check_choice(chunk_mask, "chunk_mask", ("alg2", "before_own_chunk"))
    check_choice(window, "window", ("block", "overlapping"))
    opts = _causal_options(d, sigma_q=sigma_q, sigma_k=sigma_k, pool=pool, mu_rule=mu_rule, mode=mode, frame=frame)
    q, k = _in_frame(q, k, "sqrt_d" if frame == "sqrt_d" else "theory")
    lead, (q, k, v) = _flatten_batch(q, k, v)
    n_chunks = n // chunk
    noise = _chunk_noise(eps, lead, n_chunks, dt)
    keys, local_mask = _causal_windows(n, block, window)
    n_blocks = keys.shape[0]
    pad = n_blocks * block - n
    qp = np.concatenate([q, np.zeros((q.shape[0], pad, d))], axis=1).reshape(q.shape[0], n_blocks, block, d)
    local = np.einsum("nbqd,nbed->nbqe", qp, k[:, keys]) * opts.logit_scale
    local = np.where(local_mask[None], local, -np.inf)
    chunks = np.arange(n_chunks * chunk).reshape(1, n_chunks, chunk)
    if n_chunks:
        stats = _chunk_stats(q, k, v, chunks, opts, rng, noise, dt)
        beta, inner = _single_sample_coefficients(stats)
        chunk_logits = (q @ np.swapaxes(stats.k_tilde[:, 0], -1, -2)) * opts.logit_scale
    else:
        stats = _no_chunks(q.shape[0], d, v.shape[-1], 1)
        beta, inner = np.zeros((q.shape[0], 1, 0, v.shape[-1])), np.zeros((q.shape[0], 1, 0, 0))
        chunk_logits = np.zeros((q.shape[0], n, 0))
    allowed = _causal_chunk_mask(n, block, chunk, n_chunks, chunk_mask, window)
    chunk_logits = np.where(allowed, chunk_logits, -np.inf)
    chunk_logits = np.concatenate([chunk_logits, np.full((q.shape[0], pad, n_chunks), -np.inf)], axis=1)
    chunk_logits = chunk_logits.reshape(q.shape[0], n_blocks, block, n_chunks)
    a_loc, a_chk = _joint_softmax(local, chunk_logits)
    out = a_loc @ v[:, keys] + a_chk @ beta
    y = out.reshape(q.shape[0], n_blocks * block, -1)[:, :n].astype(dt, copy=False)
    y = y.reshape(lead + y.shape[1:])
    if not return_details:
        return y
    attention = _causal_attention(n, keys, a_loc, a_chk, inner, chunks[0])
    details = EvaDetails(None, stats.omega, stats.mu, stats.k_tilde, stats.q_tilde, beta, attention)
    return y, _reshape_details(details, lead)


def _chunk_noise(eps, lead, n_chunks, dtype):
    if eps is None:
        return None
    eps = as_float_array(eps, "eps", dtype=dtype, min_ndim=2)
    if eps.shape[-2] < n_chunks:
        raise ValueError(f"eps must hold at least {n_chunks} chunk rows, got shape {eps.shape}")
    eps = eps[..., :n_chunks, :]
    if eps.ndim > 2:
        eps = np.broadcast_to(eps, lead + eps.shape[-2:]).reshape((-1,) + eps.shape[-2:])
    return eps[..., None, :, :]


def _causal_attention(n, keys, a_loc, a_chk, inner, chunk_positions):
    nb, n_blocks, block = a_loc.shape[:3]
    attention = np.zeros((nb, n_blocks * block, n))
    rows = np.broadcast_to((np.arange(n_blocks)[:, None] * block + np.arange(block))[:, :, None], a_loc.shape[1:])
    cols = np.broadcast_to(keys[:, None, :], a_loc.shape[1:])
    n_chunks = chunk_positions.shape[0]
    if n_chunks:
        contrib = a_chk[..., None] * inner[:, 0][:, None, None]          # (nb, nB, b, C, l)
        chunk_rows = np.broadcast_to(rows[..., :1, None], contrib.shape[1:])
        chunk_cols = np.broadcast_to(chunk_positions, contrib.shape[1:])
    for i in range(nb):
        np.add.at(attention[i], (rows, cols), a_loc[i])
        if n_chunks:
            np.add.at(attention[i], (chunk_rows, chunk_cols), contrib[i])
    return attention[:, :n]


def eva_causal_incremental(q, k, v, *, block_size: int, chunk_size: int, chunk_mask: str = "alg2",
                           window: str = "block", sigma_q=None, sigma_k=None, pool: str = "mean", mu_rule="q+k",
                           mode: str = "train", rng=None, eps=None, frame: str = "theory",
                           dtype=np.float64) -> np.ndarray:
    r"""Causal EVA token by token: the set-based reference of :func:`eva_causal` (App D).

    At step ``n`` the state holds the completed chunks' ``(k̃_c, β̂_c)`` (a chunk's statistics are formed
    when its last token arrives, from its own tokens) and the tokens of the current window; ``y_n`` is one
    softmax over ``{q_n·k_m : m ∈ E^n, m <= n}`` and ``{q_n·k̃_c : c allowed}``, the sets of Algorithm 2
    written out directly. Same parameters as :func:`eva_causal` for unbatched ``q, k`` ``(N, d)``,
    ``v`` ``(N, d_v)``; with ``rng`` the noise is drawn as :func:`eva_causal` draws it (``(C, d)``).
    Cost ``O(N(|E| + C)(d + d_v))`` in a Python loop (a reference, not a fast path).
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    if q.ndim != 2 or k.shape[0] != q.shape[0]:
        raise ValueError("eva_causal_incremental takes unbatched self-attention inputs q, k (N, d), v (N, d_v)")
    n, d = q.shape
    block = check_positive_int(block_size, "block_size")
    chunk = check_positive_int(chunk_size, "chunk_size")
    check_choice(chunk_mask, "chunk_mask", ("alg2", "before_own_chunk"))
    check_choice(window, "window", ("block", "overlapping"))
    opts = _causal_options(d, sigma_q=sigma_q, sigma_k=sigma_k, pool=pool, mu_rule=mu_rule, mode=mode, frame=frame)
    q, k = _in_frame(q, k, "sqrt_d" if frame == "sqrt_d" else "theory")
    n_chunks = n // chunk
    if mode == "train" and eps is None:
        if rng is None:
            raise TypeError("mode='train' needs rng= or eps= (the chunk noise)")
        eps = check_rng(rng).standard_normal((n_chunks, d))
    noise = None if mode == "eval" else as_float_array(eps, "eps", dtype=dt, ndim=2)
    completed: list[tuple[np.ndarray, np.ndarray]] = []
    y = np.empty((n, v.shape[1]), dtype=dt)
    for t in range(n):
        if (t + 1) % chunk == 0 and len(completed) < n_chunks:
            completed.append(_one_chunk(q, k, v, t + 1 - chunk, t + 1, opts,
                                        None if noise is None else noise[len(completed)]))
        start = t // block * block - (block if window == "overlapping" else 0)
        keys = np.arange(max(start, 0), t + 1)
        last = (max(start, 0) // chunk if chunk_mask == "alg2" else t // chunk)
        usable = completed[:last]
        logits = np.concatenate([k[keys] @ q[t], [q[t] @ kt for kt, _ in usable]]) * opts.logit_scale
        values = np.concatenate([v[keys], np.array([beta for _, beta in usable]).reshape(-1, v.shape[1])])
        weights = np.exp(logits - logits.max())
        y[t] = weights @ values / weights.sum()
    return y


def _one_chunk(q, k, v, start, stop, opts: _Options, noise):
    """``(k̃_c, β̂_c)`` of the chunk ``start..stop-1`` from its own tokens (single sample)."""
    k_tilde = opts.sigma_k(_pool(k[start:stop], opts.pool))
    q_tilde = opts.sigma_q(_pool(q[start:stop], opts.pool))
    omega = _proposal_mean(q_tilde, k_tilde, opts.mu_rule)
    if noise is not None:
        omega = omega + noise
    log_feat = (k[start:stop] @ omega - half_sq_norm(k[start:stop])) * opts.logit_scale
    inner = np.exp(log_feat - log_feat.max())
    return k_tilde, inner @ v[start:stop] / inner.sum()


# ------------------------------------------------------------------------------------- Scatterbrain


@dataclass(frozen=True)
class ScatterbrainParts:
    """Eq 29's ``y'_n = numerator·exp(log_scale)`` and Eq 30's ``Ẑ_n = denominator·exp(log_scale)``."""

    numerator: np.ndarray
    denominator: np.ndarray
    log_scale: np.ndarray


def _block_mask(n: int, m: int, block_size: int) -> np.ndarray:
    if n != m:
        raise ValueError(f"block_size needs self-attention (N == M), got N={n}, M={m}")
    b = check_positive_int(block_size, "block_size")
    pos = np.arange(n) // b
    return pos[:, None] == pos[None, :]


def scatterbrain_attention(q, k, v, *, omega, exact=None, block_size: int | None = None, normalize: bool = True,
                           method: str = "direct", return_parts: bool = False, frame: str = "theory",
                           dtype=np.float64):
    r"""Scatterbrain as written in EVA App G.5 (Eqs 29-30).

    .. math::  y'_n = \sum_{m∉E} φ(q_n,ω)^⊤φ(k_m,ω) v_m + \sum_{m∈E} e_m v_m,\qquad
               y_n = y'_n/\hat Z_n,\quad \hat Z_n = \sum_{m∉E} φ(q_n,ω)^⊤φ(k_m,ω) + \sum_{m∈E} e_m,

    ``E = Supp_n(S)``, ``φ(x, ω) = S^{-1/2}[ξ(x, ω_1), ..., ξ(x, ω_S)]`` with ``ω_s ~ N(0, I)``.

    Parameters
    ----------
    q, k, v : array_like ``(..., N, d)``, ``(..., M, d)``, ``(..., M, d_v)``
    omega : array_like ``(S, d)``
    exact : bool array broadcastable to ``(..., N, M)``, optional
        ``E`` per query (True = exact). Or ``block_size``: ``E^n`` the contiguous block of ``n`` (``N = M``).
    normalize : bool
        Eq 30 (default) or Eq 29's ``y'_n`` (raises :class:`NumericalError` if it overflows).
    method : {"direct", "linear"}
        ``direct``: the out-of-window feature sum formed directly (no cancellation; ``O(NM(S + d))``,
        the theory reference); ``linear`` (``block_size`` only): global feature sums minus the in-window
        ones, ``O(S(N + M)(d + d_v) + N|E|(d + d_v))`` (the efficient form).
    return_parts : bool
        Return :class:`ScatterbrainParts` instead.

    Notes
    -----
    Randomness: ``omega`` only. App G.5 shows ``y'_n/Z`` is EVA with a shared coefficient on ``[M] \ E``
    whatever that coefficient is.
    """
    dt = compute_dtype(dtype)
    q, k, v = check_qkv(q, k, v, dtype=dt)
    q, k = _in_frame(q, k, frame)
    omega = as_float_array(omega, "omega", dtype=dt, ndim=2)
    check_choice(method, "method", ("direct", "linear"))
    if (exact is None) == (block_size is None):
        raise TypeError("give exactly one of exact= (a mask) or block_size=")
    if method == "linear":
        if block_size is None:
            raise ValueError("method='linear' is implemented for block_size= exact sets")
        num, den, log_scale = _scatterbrain_linear(q, k, v, omega, block_size)
    else:
        mask = _block_mask(q.shape[-2], k.shape[-2], block_size) if block_size is not None else \
            np.asarray(exact)
        if mask.dtype != np.bool_:
            raise TypeError(f"exact must be a boolean mask (True = exact), got dtype {mask.dtype}")
        num, den, log_scale = _scatterbrain_direct(q, k, v, omega, mask)
    if return_parts:
        return ScatterbrainParts(num, den, log_scale)
    if normalize:
        return num / den[..., None]
    return num * _exp_checked(log_scale, "Eq 29's unnormalised output")[..., None]


def _scatterbrain_direct(q, k, v, omega, mask):
    sign, log_feat = _log_features(q, omega).kernel(_log_features(k, omega), log=True)
    logits = np.where(mask, q @ np.swapaxes(k, -1, -2), log_feat - math.log(omega.shape[0]))
    top = logits.max(axis=-1)
    weights = np.exp(logits - top[..., None])
    return weights @ v, weights.sum(axis=-1), top


def _scatterbrain_linear(q, k, v, omega, block_size):
    n = q.shape[-2]
    inside = _block_mask(n, k.shape[-2], block_size)
    lq, lk = log_xi(q, omega), log_xi(k, omega)
    ref = lk.max(axis=-2, keepdims=True)                                # key shift c_s (bidirectional)
    vo = np.concatenate([v, np.ones(v.shape[:-1] + (1,))], axis=-1)
    kw = np.exp(lk - ref)                                               # (..., M, S)
    total = np.swapaxes(kw, -1, -2) @ vo                                # (..., S, d_v + 1)
    b = block_size
    n_blocks = -(-n // b)
    pad = n_blocks * b - n
    kw_b = np.concatenate([kw, np.zeros(kw.shape[:-2] + (pad, kw.shape[-1]))], axis=-2)
    vo_b = np.concatenate([vo, np.zeros(vo.shape[:-2] + (pad, vo.shape[-1]))], axis=-2)
    kw_b = kw_b.reshape(kw.shape[:-2] + (n_blocks, b, kw.shape[-1]))
    vo_b = vo_b.reshape(vo.shape[:-2] + (n_blocks, b, vo.shape[-1]))
    per_block = np.swapaxes(kw_b, -1, -2) @ vo_b                        # (..., nB, S, d_v + 1)
    outside = total[..., None, :, :] - per_block
    a = lq + ref - math.log(omega.shape[0])                             # (..., N, S)
    exact_logits = np.where(inside, q @ np.swapaxes(k, -1, -2), -np.inf)
    top = np.maximum(a.max(axis=-1), exact_logits.max(axis=-1))
    block_of = np.arange(n) // b
    feat = np.einsum("...ns,...nsv->...nv", np.exp(a - top[..., None]), outside[..., block_of, :, :])
    buf = feat + np.exp(exact_logits - top[..., None]) @ vo
    return buf[..., :-1], buf[..., -1], top
