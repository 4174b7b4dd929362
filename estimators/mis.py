r"""Multiple importance sampling (MIS) with pluggable weighting functions (RA/LARA paper §4.1, App D, F, G.3.2).

Seed text ``000_d62fa2cae7f5a446.txt``; register ``../shared/claims/lara.md`` (``lara.est.weights``,
``lara.est.mis``). With proposals ``q_1..q_C``, ``S_c`` draws ``ω_cj ~ q_c`` each and weighting functions
``α_nc(ω)`` that sum to one over ``c``:

.. math::

    \hat g_n = \sum_c \frac{1}{S_c}\sum_j α_{nc}(ω_{cj})\frac{p_n(ω_{cj})}{q_c(ω_{cj})} f_n(ω_{cj})
    \quad(\text{Eq 8, unbiased}), \qquad
    \hat g_n^{SN} = \frac{\sum_{c,j} α_{nc}(ω_{cj}) \frac{p_n}{q_c}(ω_{cj}) f_n(ω_{cj})}
                         {\sum_{c,j} α_{nc}(ω_{cj}) \frac{p_n}{q_c}(ω_{cj})} \quad(\text{Eq 10 form}).

Weighting functions (each evaluated at a point ``ω``; ``BH_c(ω) = q_c(ω)/Σ_{c'} q_{c'}(ω)``):

* ``balance`` (Eq 36): ``BH_c(ω)``;
* ``eq9`` (Eq 9 = Eq 38, with ``β``; ``β = 1`` is Eq 9): ``BH_c(ω) + β(r'_nc - (1/C)Σ_c r'_nc)``;
* ``eq37`` (coupled): ``BH_c(ω) + q_c(ω)(r'_nc - Σ_{c''} BH_{c''}(·) r'_{nc''})``, the inner term at the
  outer sample (``eq37_inner="outer"``) or at each inner proposal's own sample (``"own"``);
* ``constant`` (``κ_nc``, default ``1/C``); ``delta`` (``δ_nc``, ``C = N``);
* Eq 27 (App D's optimal form) for given functions ``r_nc(·)``: :func:`eq27_weights`.

``r'_nc`` (G.3.2) is the query–landmark affinity, a softmax of ``q_n·q̃_c`` over queries (as printed:
the denominator sums over ``n``) or over landmarks (:func:`rprime`; ``axis``).

Design notes
------------
* **Where weights are evaluated.** An estimator evaluates ``α_nc`` at proposal ``c``'s own draws. The
  functions here take ``log_q_cross[c, j, c'] = log q_{c'}(ω_{cj})`` (every proposal density at every
  draw, ``O(C²S_c D)`` for Gaussians) and return either the *own-sample* weights ``α_nc(ω_cj)`` of shape
  ``(N, C, S_c)`` (:func:`mis_weights`) or the full table ``α_nc'(ω_cj)`` of shape ``(N, C, S_c, C)``
  (:func:`weight_table`), whose sums over the last axis are the weights' sums *at one common argument*
  (the reading of "Σ_c α_nc(ω) = 1" after Eq 9).
* **Signed weights.** ``eq9``, ``eq37`` and Eq 27 corrections are signed, so ``α`` can be ``<= 0``: every
  sum is a signed sum of max-shifted terms (``log|·|`` never taken of a signed sum), and the fraction of
  ``α <= 0`` is reported. ``alpha_floor=ε`` clamps ``α`` at ``ε`` (not in the paper; off by default).
* **Oracle.** :func:`mis_attention` evaluates the *normalised* ``p_n`` (Eq 5), ``O(C·S_c·N·M·D)``: a
  reference estimator for tests, not an efficient one (LARA, :mod:`rfkit.estimators.lara`, avoids ``Z_n``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import softmax

from rfkit.base.checks import NumericalError, as_float_array, check_choice, check_positive_int, check_qkv, check_rng

from .ra import GaussianMixtures, attention_mixture
from .rfa import _half_sq_norm, _matrix, integrand, log_normal, logsumexp, record_gemm

__all__ = [
    "WEIGHTS",
    "RPRIME_AXES",
    "EQ37_INNER",
    "GaussianProposals",
    "MISStats",
    "balance_heuristic",
    "rprime",
    "cross_log_density",
    "mis_weights",
    "weight_table",
    "eq27_weights",
    "mis_combine",
    "mis_attention",
]

WEIGHTS = ("balance", "eq9", "eq37", "constant", "delta")
RPRIME_AXES = ("queries", "landmarks")
EQ37_INNER = ("outer", "own")

_LOG_2PI = math.log(2 * math.pi)


# ------------------------------------------------------------------------------------- proposals


@dataclass(frozen=True)
class GaussianProposals:
    """``C`` unit-covariance Gaussian proposals ``q_c = N(μ_c, I)``; ``means (C, D)``.

    Follows :class:`~rfkit.estimators.proposals.Proposal` with the ``C`` proposals as the leading axis
    (``sample``, ``logpdf`` at each proposal's own points), plus ``logpdf_cross`` (every proposal at every
    point) and ``mean``, like :class:`~rfkit.estimators.ra.GaussianMixtures`; sampling is ``ω = μ_c + ε`` and
    the evaluation point is ``μ_c`` (G.3.3).
    """

    means: np.ndarray

    def __post_init__(self):
        if self.means.ndim != 2 or self.means.shape[0] == 0:
            raise ValueError(f"GaussianProposals: means must be (C, D) with C >= 1, got {self.means.shape}")

    @property
    def n_components(self) -> int:
        return self.means.shape[0]

    @property
    def dim(self) -> int:
        return self.means.shape[1]

    @property
    def unit_gaussian_means(self) -> np.ndarray:
        """``μ_c`` (unit covariance: :func:`~rfkit.estimators.proposals.log_ratio` uses its closed form)."""
        return self.means

    def logpdf_cross(self, omega, *, gemms: list | None = None) -> np.ndarray:
        """``log q_c(ω) = -‖ω - μ_c‖²/2 - (D/2) log 2π`` for every ``c``: ``(..., D)`` -> ``(..., C)`` (one GEMM,
        appended to ``gemms`` as ``cross_densities`` when a list is given)."""
        w = as_float_array(omega, "omega", min_ndim=1)
        flat = w.reshape(-1, self.dim)
        sq = _half_sq_norm(flat)[:, None] - flat @ self.means.T + _half_sq_norm(self.means)[None, :]
        record_gemm(gemms, "cross_densities", flat.shape[0], self.dim, self.n_components)
        return (-sq - 0.5 * self.dim * _LOG_2PI).reshape(w.shape[:-1] + (self.n_components,))

    def logpdf(self, omega) -> np.ndarray:
        """``log q_c`` at proposal ``c``'s own points: ``omega (C, ..., D)`` -> ``(C, ...)``."""
        w = as_float_array(omega, "omega", min_ndim=2)
        if w.shape[0] != self.n_components or w.shape[-1] != self.dim:
            raise ValueError(f"omega must have shape (C={self.n_components}, ..., D={self.dim}), got {w.shape}")
        mu = self.means.reshape((self.n_components,) + (1,) * (w.ndim - 2) + (self.dim,))
        return log_normal(w, mu)

    def mean(self) -> np.ndarray:
        return self.means

    def sample(self, rng, size: int) -> np.ndarray:
        """``size`` draws per proposal, ``(C, size, D)``: ``μ_c + ε`` with ``ε`` standard normal from ``rng``."""
        eps = check_rng(rng).standard_normal((self.n_components, check_positive_int(size, "size"), self.dim))
        return self.means[:, None, :] + eps


def _check_proposals(proposals):
    if not isinstance(proposals, (GaussianProposals, GaussianMixtures)):
        raise TypeError(f"proposals must be GaussianProposals or GaussianMixtures, got {type(proposals).__name__}")
    return proposals


def cross_log_density(proposals, omega, *, gemms: list | None = None) -> np.ndarray:
    """``log_q_cross[c, j, c'] = log q_{c'}(ω_cj)`` for draws ``omega (C, S_c, D)``: shape ``(C, S_c, C)``
    (``gemms``: Gaussian proposals record their one product, :meth:`GaussianProposals.logpdf_cross`)."""
    _check_proposals(proposals)
    w = as_float_array(omega, "omega", ndim=3)
    if w.shape[0] != proposals.n_components or w.shape[2] != proposals.dim:
        raise ValueError(f"omega must have shape (C={proposals.n_components}, S_c, D={proposals.dim}), "
                         f"got {w.shape}")
    if gemms is not None:
        if not isinstance(proposals, GaussianProposals):
            raise ValueError("gemms= records Gaussian proposals' cross densities (GaussianProposals)")
        return proposals.logpdf_cross(w, gemms=gemms)
    return proposals.logpdf_cross(w)


# --------------------------------------------------------------------------------------- weights


def balance_heuristic(log_q) -> np.ndarray:
    """``BH_c(ω) = q_c(ω)/Σ_{c'} q_{c'}(ω)`` from ``log q (..., C)`` (a softmax over the last axis; Eq 36)."""
    return softmax(as_float_array(log_q, "log_q", min_ndim=1), axis=-1)


def rprime(queries, landmarks, *, axis: str = "queries", gemms: list | None = None) -> np.ndarray:
    r"""Query–landmark affinities ``r'_nc`` of G.3.2, shape ``(N, C)``.

    ``axis="queries"`` (as printed: the denominator sums over ``n``): ``exp(q_n·q̃_c)/Σ_{n'} exp(q_{n'}·q̃_c)``;
    ``axis="landmarks"``: ``exp(q_n·q̃_c)/Σ_{c'} exp(q_n·q̃_{c'})``. Cost ``O(NCD)``: the product ``QQ̃ᵀ``,
    appended to ``gemms`` as ``rprime`` when a list is given.
    """
    check_choice(axis, "axis", RPRIME_AXES)
    q = _matrix(queries, "queries")
    lm = _matrix(landmarks, "landmarks", q.shape[1])
    record_gemm(gemms, "rprime", q.shape[0], q.shape[1], lm.shape[0])
    return softmax(q @ lm.T, axis=0 if axis == "queries" else 1)


def _centered(r: np.ndarray) -> np.ndarray:
    return r - r.mean(axis=-1, keepdims=True)


def _check_cross(log_q_cross) -> np.ndarray:
    lq = as_float_array(log_q_cross, "log_q_cross", ndim=3, allow_nonfinite=True)
    if lq.shape[0] != lq.shape[2] or np.isnan(lq).any() or (lq == np.inf).any():
        raise ValueError(f"log_q_cross must be (C, S_c, C), finite or -inf; got shape {lq.shape}")
    return lq


def _rprime_matrix(r, n_c: int) -> np.ndarray:
    if r is None:
        raise TypeError("eq9 and eq37 weights need rprime= (N, C) (see rprime())")
    r = as_float_array(r, "rprime", ndim=2)
    if r.shape[1] != n_c:
        raise ValueError(f"rprime must have C = {n_c} columns, got shape {r.shape}")
    return r


def _own_log_q(lq: np.ndarray) -> np.ndarray:
    idx = np.arange(lq.shape[0])
    return lq[idx, :, idx]  # (C, S_c): log q_c(ω_cj)


def _constant_weights(kappa, n_queries: int | None, n_c: int) -> np.ndarray:
    if kappa is None:
        return np.full((n_queries or 1, n_c), 1.0 / n_c)
    kappa = as_float_array(kappa, "kappa", ndim=2)
    if kappa.shape[1] != n_c:
        raise ValueError(f"kappa must have C = {n_c} columns, got shape {kappa.shape}")
    return kappa


def _delta_weights(n_queries: int | None, n_c: int) -> np.ndarray:
    if n_queries is not None and n_queries != n_c:
        raise ValueError(f"delta weights need C = N proposals, got C = {n_c}, N = {n_queries}")
    return np.eye(n_c)


def mis_weights(kind: str, log_q_cross, *, rprime=None, beta: float = 1.0, eq37_inner: str = "outer",
                kappa=None, n_queries: int | None = None, alpha_floor: float | None = None) -> np.ndarray:
    r"""Own-sample weights ``α_nc(ω_cj)``, shape ``(N, C, S_c)`` (``N = 1`` for query-free weights).

    Parameters
    ----------
    kind : {"balance", "eq9", "eq37", "constant", "delta"}
    log_q_cross : ``(C, S_c, C)``, ``log q_{c'}(ω_cj)`` (:func:`cross_log_density`)
    rprime : ``(N, C)``, for ``eq9`` and ``eq37``
    beta : float
        Correction coefficient of the β variant of Eq 9/38 (``beta = 1``: Eq 9; G.3.2 prefers 2).
    eq37_inner : {"outer", "own"}
        Where Eq 37's inner sum ``Σ_{c''} BH_{c''}(·) r'_{nc''}`` is evaluated: at ``ω_cj`` or at each
        ``ω_{c''j}`` (the ``j``-th draw of proposal ``c''``).
    kappa : ``(N, C)`` or ``(1, C)``, constants for ``constant`` (default ``1/C``)
    n_queries : int, optional
        ``N`` (checked against ``C`` for ``delta``).
    alpha_floor : float, optional
        Clamp ``α`` at this value (not in the paper).

    Notes
    -----
    Cost ``O(N·C·S_c)`` beyond ``log_q_cross`` (``eq37`` outer: ``O(N·C²·S_c)``).
    """
    check_choice(kind, "kind", WEIGHTS)
    lq = _check_cross(log_q_cross)
    n_c, s_c = lq.shape[:2]
    bh_all = softmax(lq, axis=-1)                           # (C, S_c, C'): BH_c'(ω_cj)
    bh_own = bh_all[np.arange(n_c), :, np.arange(n_c)]     # (C, S_c)
    if kind == "balance":
        alpha = bh_own[None]
    elif kind == "eq9":
        r = _rprime_matrix(rprime, n_c)
        alpha = bh_own[None] + beta * _centered(r)[:, :, None]
    elif kind == "eq37":
        check_choice(eq37_inner, "eq37_inner", EQ37_INNER)
        r = _rprime_matrix(rprime, n_c)
        q_own = np.exp(_own_log_q(lq))                      # (C, S_c)
        if eq37_inner == "outer":
            inner = np.einsum("cjk,nk->ncj", bh_all, r)     # Σ_c'' BH_c''(ω_cj) r'_nc''
        else:
            inner = np.einsum("kj,nk->nj", bh_own, r)[:, None, :]  # Σ_c'' BH_c''(ω_c''j) r'_nc''
        alpha = bh_own[None] + q_own[None] * (r[:, :, None] - inner)
    elif kind == "constant":
        base = _constant_weights(kappa, n_queries, n_c)
        alpha = np.broadcast_to(base[:, :, None], base.shape + (s_c,))
    else:
        alpha = np.broadcast_to(_delta_weights(n_queries, n_c)[:, :, None], (n_c, n_c, s_c))
    alpha = np.asarray(alpha, dtype=np.float64)
    return alpha if alpha_floor is None else np.maximum(alpha, float(alpha_floor))


def weight_table(kind: str, log_q_cross, *, rprime=None, beta: float = 1.0, kappa=None,
                 n_queries: int | None = None) -> np.ndarray:
    r"""Every weight at every draw: ``table[n, c, j, c'] = α_nc'(ω_cj)``, shape ``(N, C, S_c, C)``.

    Each ``α_nc'`` is evaluated at the *common* argument ``ω_cj`` (Eq 37's inner sum at that argument too),
    so ``table.sum(-1)`` is ``Σ_c α_nc(ω)`` at ``ω = ω_cj`` (reading A of ``lara.eq9.weights_sum_to_one``);
    the own-sample weights are its diagonal ``c' = c``. Cost ``O(N·C²·S_c)``.
    """
    check_choice(kind, "kind", WEIGHTS)
    lq = _check_cross(log_q_cross)
    n_c, s_c = lq.shape[:2]
    bh = softmax(lq, axis=-1)[None]                                    # (1, C, S_c, C')
    if kind == "balance":
        return bh
    if kind == "eq9":
        return bh + beta * _centered(_rprime_matrix(rprime, n_c))[:, None, None, :]
    if kind == "eq37":
        r = _rprime_matrix(rprime, n_c)
        inner = np.einsum("cjk,nk->ncj", bh[0], r)[..., None]
        return bh + np.exp(lq)[None] * (r[:, None, None, :] - inner)
    base = _constant_weights(kappa, n_queries, n_c) if kind == "constant" else _delta_weights(n_queries, n_c)
    return np.broadcast_to(base[:, None, None, :], (base.shape[0], n_c, s_c, n_c)).copy()


def eq27_weights(log_q, r, *, argument: str = "common") -> np.ndarray:
    r"""App D's weighting form (Eq 27) for given values of ``r_nc(·)``.

    ``α_c = BH_c + q_c(r_c - Σ_{c''} BH_{c''} r_{c''})`` with ``q_c`` the *normalised* proposal density.

    * ``argument="common"``: ``log_q (..., C)`` and ``r (..., C)`` at one point ``ω``; returns ``α (..., C)``.
    * ``argument="own"``: ``log_q (..., C, C)`` with ``log_q[..., c, c'] = log q_{c'}(ω_c)`` and
      ``r[..., c, c'] = r_{c'}(ω_c)``; every term of ``α_c`` at its own sample ``ω_c``; returns ``(..., C)``.
    * ``argument="typeset"``: the G.3.2 display as typeset: inner numerators and ``r`` at ``ω_{c''}``,
      inner denominators at ``ω_c``: ``α_c = BH_c(ω_c) + q_c(ω_c)(r_c(ω_c) - Σ_{c''} q_{c''}(ω_{c''})
      r_{c''}(ω_{c''}) / Σ_{c'} q_{c'}(ω_c))``; same shapes as ``own``.

    Products ``q_c(·)·(·)`` are formed from ``log q`` (no underflow of the density alone). Cost ``O(C²)``.
    """
    check_choice(argument, "argument", ("common", "own", "typeset"))
    lq = as_float_array(log_q, "log_q", min_ndim=1, allow_nonfinite=True)
    r = as_float_array(r, "r", min_ndim=1)
    if lq.shape != r.shape:
        raise ValueError(f"log_q and r must have the same shape, got {lq.shape} and {r.shape}")
    if argument == "common":
        bh = softmax(lq, axis=-1)
        inner = (bh * r).sum(axis=-1, keepdims=True)
        return bh + np.exp(lq) * (r - inner)
    if lq.ndim < 2 or lq.shape[-1] != lq.shape[-2]:
        raise ValueError(f"argument={argument!r} needs (..., C, C) cross matrices, got {lq.shape}")
    idx = np.arange(lq.shape[-1])
    own_lq, own_r = lq[..., idx, idx], r[..., idx, idx]
    bh_own = np.exp(own_lq - logsumexp(lq, axis=-1))
    if argument == "own":
        inner = (softmax(lq, axis=-1) * r).sum(axis=-1)
        return bh_own + np.exp(own_lq) * (own_r - inner)
    # q_c(ω_c)·Σ_c'' q_c''(ω_c'') r_c''(ω_c'')/Σ_c' q_c'(ω_c) = BH_c(ω_c)·Σ_c'' q_c''(ω_c'') r_c''(ω_c''): no 0/0
    return bh_own + np.exp(own_lq) * own_r - bh_own * (np.exp(own_lq) * own_r).sum(axis=-1, keepdims=True)


# ------------------------------------------------------------------------------------- estimator


@dataclass(frozen=True)
class MISStats:
    """Diagnostics of an MIS/LARA call, per query where shaped ``(N,)``.

    ``frac_nonpositive_alpha``: fraction of ``α_nc(ω_cj) <= 0``; ``relative_denominator``: ``|Σ a| / Σ|a|``
    of the (self-normalised) denominator's terms (1 for non-negative terms; near 0 is ill-conditioned);
    ``ess``: ``(Σ|a|)²/Σa²`` of the terms.
    """

    frac_nonpositive_alpha: float
    relative_denominator: np.ndarray
    ess: np.ndarray


def mis_combine(values, log_ratio, alpha, *, normalise: bool, gemms: list | None = None) -> tuple[np.ndarray, MISStats]:
    r"""Signed MIS sums: ``Σ_{c,j} a_ncj f_ncj`` (``normalise=False``, Eq 8) or ``Σ a f / Σ a`` (Eq 10 form),
    ``a_ncj = α_ncj exp(log_ratio_ncj) / S_c``.

    ``values (N|1, C, S_c, D_v)``, ``log_ratio (N, C, S_c)`` (``log p_n - log q_c`` or ``log p̃_n - log q_c``),
    ``alpha (N|1, C, S_c)``. Terms are shifted by each query's maximum ``log_ratio`` (which cancels in the
    ratio and is added back in log space otherwise). Raises :class:`NumericalError` for an exactly zero
    self-normalised denominator or an overflowing unnormalised estimate. ``gemms``: query-free values are one
    product ``(N×CS_c)·(CS_c×D_v)``, appended as ``output`` when a list is given (per-query values raise).
    """
    lr = as_float_array(log_ratio, "log_ratio", ndim=3, allow_nonfinite=True)
    if np.isnan(lr).any() or (lr == np.inf).any():
        raise ValueError("log_ratio must be finite or -inf")
    alpha = as_float_array(alpha, "alpha", ndim=3)
    f = as_float_array(values, "values", ndim=4)
    s_c = lr.shape[2]
    shift = lr.max(axis=(1, 2))
    shift = np.where(np.isfinite(shift), shift, 0.0)
    a = alpha * np.exp(lr - shift[:, None, None]) / s_c                # (N, C, S_c)
    if f.shape[0] == 1:  # query-free values (positive map): one matrix product
        num = a.reshape(a.shape[0], -1) @ f.reshape(-1, f.shape[-1])
        record_gemm(gemms, "output", a.shape[0], a.shape[1] * a.shape[2], f.shape[-1])
    elif gemms is not None:
        raise ValueError("gemms= records query-free values (one product), not per-query values")
    else:
        num = np.einsum("ncj,ncjd->nd", a, f)
    den = a.sum(axis=(1, 2))
    abs_sum = np.abs(a).sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        stats = MISStats(float((alpha <= 0).mean()), np.abs(den) / abs_sum, abs_sum**2 / (a * a).sum(axis=(1, 2)))
    if normalise:
        if (den == 0).any():
            raise NumericalError("the self-normalised MIS denominator is exactly 0 for some query")
        return num / den[:, None], stats
    with np.errstate(over="ignore"):
        out = num * np.exp(shift)[:, None]
    if not np.isfinite(out).all():
        raise NumericalError("the unnormalised MIS estimate overflows")
    return out, stats


def mis_attention(q, k, v, proposals, *, num_samples: int = 1, omega=None, rng=None, weights: str = "balance",
                  rprime=None, beta: float = 1.0, eq37_inner: str = "outer", kappa=None, alpha=None,
                  normalise: bool = False, f_form: str = "simplified", alpha_floor: float | None = None,
                  return_stats: bool = False):
    r"""MIS estimate of softmax attention with the *exact* normalised target ``p_n`` (Eq 8; oracle).

    Parameters
    ----------
    q, k, v : array_like ``(N, D)``, ``(M, D)``, ``(M, D_v)`` (merged coordinates; positive map)
    proposals : GaussianProposals or GaussianMixtures
        ``C`` proposals (``rfkit.estimators.lara.lara_proposals`` builds the paper's families; the
        ``exact`` family is ``attention_mixture(q, k)``, with ``C = N``).
    num_samples : int
        Draws per proposal, ``S_c`` (footnote 5; default 1).
    omega : array_like ``(C, S_c, D)``, optional
        Pre-drawn samples (shareable with LARA); else ``proposals.sample(rng, num_samples)``.
    weights, rprime, beta, eq37_inner, kappa, alpha_floor
        See :func:`mis_weights`; ``alpha`` ``(N, C, S_c)`` overrides them with explicit weight values.
    normalise : bool
        Self-normalise (the ratio form whose ``Z_n`` cancels: compare LARA's Eq 10).
    f_form : {"simplified", "literal"}
        Integrand form (:func:`rfkit.estimators.rfa.integrand`).

    Notes
    -----
    ``log p_n(ω) = LSE_m(log π_nm + log N(ω; q_n + k_m, I))``: cost ``O(C·S_c·N·M·D)`` in total, for tests.
    Unbiased when ``Σ_c α_nc(ω) = 1`` for every ``ω`` (App F) and ``normalise=False``.
    """
    q, k, v = check_qkv(q, k, v, matrices=True)
    _check_proposals(proposals)
    if omega is None:
        omega = proposals.sample(rng, num_samples)
    omega = as_float_array(omega, "omega", ndim=3)
    lq = cross_log_density(proposals, omega)
    if alpha is None:
        alpha = mis_weights(weights, lq, rprime=rprime, beta=beta, eq37_inner=eq37_inner, kappa=kappa,
                            n_queries=q.shape[0], alpha_floor=alpha_floor)
    n_c, s_c, d = omega.shape
    flat = omega.reshape(-1, d)
    log_p = attention_mixture(q, k).logpdf_cross(flat).T.reshape(q.shape[0], n_c, s_c)
    log_ratio = log_p - _own_log_q(lq)[None]
    f = integrand(q, k, v, flat, form=f_form)                 # (N, C·S_c, D_v)
    f = f.reshape(f.shape[0], n_c, s_c, v.shape[1])
    out, stats = mis_combine(f, log_ratio, alpha, normalise=normalise)
    return (out, stats) if return_stats else out
