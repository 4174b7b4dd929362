r"""EVA with exact subset masses (Zheng et al., ICLR 2023; ``002_b2e9d84e2f6b65de.txt``; §4.1, Eq 13 / Eq 15).

:func:`eva_ideal`: ``Σ_{m∈E} w_m v_m + Σ_c π_c β̂_c(ω)`` with the exact masses ``π_c`` (quadratic: the theory
object of the claims), partitions given as label arrays (:mod:`rfkit.estimators.eva.partitions`), samples
shared by the subsets (§4.1) or drawn per subset (App C), and the oracle coefficient ``β*_c`` (local softmax).

Frames: ``frame="theory"`` (kernel ``exp(q·k)``) or ``"sqrt_d"`` (logits ``q·k/√d``). Numerics: every
exponential in log space with a shift that cancels in the ratio. Randomness: ``omega`` only.
"""

from __future__ import annotations

import numpy as np

from rfkit.base.checks import check_choice, check_qkv, compute_dtype
from rfkit.base.laws import EXACT, EXCLUDED
from rfkit.base.numerics import half_sq_norm, logsumexp

from ..control_variates import _labels, _samples
from ..rfa import _in_frame


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
