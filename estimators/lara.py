r"""Linear randomized attention (LARA): self-normalised MIS with shared proposals (§4, App E, G.3).

Seed text ``000_d62fa2cae7f5a446.txt``; register ``../shared/claims/lara.md`` (``lara.est.landmarks``,
``lara.est.proposals``, ``lara.est.lara``). Merged coordinates as in :mod:`rfkit.estimators.rfa`; positive
map. With ``C`` proposals ``q_c`` (built from segment landmarks), draws ``ω_c ~ q_c`` shared by all queries
and weights ``α_nc`` (:mod:`rfkit.estimators.mis`):

.. math::

    \mathrm{LARA}(q_n) = \frac{\sum_c α_{nc}(ω_c) \frac{p̃_n(ω_c)}{q_c(ω_c)} f_n(ω_c)}
                              {\sum_c α_{nc}(ω_c) \frac{p̃_n(ω_c)}{q_c(ω_c)}}     \quad(\text{Eq 10})
     = \frac{\sum_c α'_{nc} ξ(q_n,ω_c)^T \sum_m ξ(k_m,ω_c) v_m^T}{\sum_c α'_{nc} ξ(q_n,ω_c)^T \sum_m ξ(k_m,ω_c)}
       \quad(\text{Eq 28}),\quad α'_{nc} = α_{nc}(ω_c) \frac{N(ω_c; 0, I)}{q_c(ω_c)}.

Proposal families (G.3.1; ``q̃_c``, ``k̃_c`` segment landmarks): ``eq32`` mixture
``Σ_m ρ_cm N(q̃_c + k_m, I)``, ``ρ_c = softmax(q̃_c·k_m)``; ``eq33`` ``N(q̃_c + Σ_m ρ_cm k_m, I)``; ``eq34``
(the paper's default) ``N(q̃_c + k̃_c, I)``; ``eq35`` in three readings (``printed_C``, ``printed_M``,
``landmark_attention``: see :func:`proposal_means`); ``standard`` ``N(0, I)`` (RFA as a special case);
``exact`` ``q_n = p_n`` with ``C = N`` (RA as a special case); ``custom`` user means.

Design notes
------------
* **Linear cost.** The default ``form="softmax"`` evaluates the register's log-space weights
  ``ℓ_nc = log|α_nc| + ω_c·q_n - ‖q_n‖²/2 + log Den_c + log N(ω_c; 0, I) - log q_c(ω_c)`` and
  ``y_n = Σ_c s_nc e^{ℓ_nc - L_n} F_c / Σ_c s_nc e^{ℓ_nc - L_n}`` (``F_c``, ``Den_c`` from
  :func:`rfkit.estimators.rfa.key_statistics`, shared by all queries): ``O(C(N + M)(D + D_v) + C²D)``. For
  Gaussian proposals ``log N(ω; 0, I) - log q_c(ω) = -ω·μ_c + ‖μ_c‖²/2`` exactly (no cancellation of
  ``‖ω‖²/2``). ``form="eq10"`` uses the explicit ``p̃_n`` and the literal ``f_n`` (``O(NCM)``, for
  identity checks), ``form="eq28"`` the ``α'`` form with unnormalised ``Num_c``/``Den_c``.
* **Signed weights** (``eq9``, ``eq37``) are carried as signs with max-shifted magnitudes; the fraction of
  ``α <= 0``, the conditioning ``|Σ a|/Σ|a|`` of each denominator and the ESS are reported
  (:class:`~rfkit.estimators.mis.MISStats`).
* **Modes** (G.3.3): ``train`` draws ``ω_c ~ q_c`` (``S_c`` per proposal, footnote 5); ``eval`` uses the
  proposal means (``ω_c = μ_c``; for the Eq 32 mixture, the mixture mean, a choice the paper leaves open).
* LARA is bidirectional only (H.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
from scipy.special import softmax

from rfkit.base.checks import as_float_array, check_choice, check_positive_int, check_qkv

from .mis import (
    EQ37_INNER,
    RPRIME_AXES,
    WEIGHTS,
    GaussianProposals,
    MISStats,
    cross_log_density,
    mis_combine,
    mis_weights,
    rprime,
)
from .proposals import log_ratio
from .ra import GaussianMixtures, attention_mixture
from .rfa import (
    _half_sq_norm,
    _matrix,
    _shifted_key_sums,
    integrand,
    key_statistics,
    log_implied_target,
    log_normal,
    logsumexp,
    over_heads,
    record_gemm,
)

__all__ = [
    "PROPOSALS",
    "EQ35_READINGS",
    "LAYOUTS",
    "LARA_FORMS",
    "ALG3_READINGS",
    "LaraProposals",
    "segment_bounds",
    "segment_landmarks",
    "proposal_means",
    "lara_proposals",
    "lara_attention",
    "lara_algorithm3",
]

PROPOSALS = ("eq32", "eq33", "eq34", "eq35", "standard", "exact", "custom")
EQ35_READINGS = ("printed_C", "printed_M", "landmark_attention")
LAYOUTS = ("1d", "2d")
LARA_FORMS = ("softmax", "eq10", "eq28")
ALG3_READINGS = ("P1", "P2")
_LOG_2PI = math.log(2 * math.pi)


# ------------------------------------------------------------------------------------- landmarks


def segment_bounds(n: int, c: int, *, uneven: str = "error") -> tuple[np.ndarray, np.ndarray]:
    """Segment ``i`` covers tokens ``[start_i, end_i)``: ``T = n/c`` each, or the adaptive-pooling windows
    ``[⌊i n/c⌋, ⌈(i+1) n/c⌉)`` when ``c`` does not divide ``n`` and ``uneven="adaptive"``."""
    n = check_positive_int(n, "n")
    c = check_positive_int(c, "C")
    check_choice(uneven, "uneven", ("error", "adaptive"))
    if c > n:
        raise ValueError(f"C = {c} landmarks need at least C tokens, got {n}")
    if n % c and uneven == "error":
        raise ValueError(f"{n} tokens do not split into C = {c} equal segments; use uneven='adaptive'")
    i = np.arange(c)
    return (i * n) // c, -((-(i + 1) * n) // c)


def segment_landmarks(x, C: int, *, layout: str = "1d", grid: tuple[int, int] | None = None,
                      windows: tuple[int, int] | None = None, uneven: str = "error") -> np.ndarray:
    r"""Segment means (G.3.1): ``x̃_c = (1/T) Σ_{t=1}^T x_{(c-1)T+t}``, shape ``(C, D)``.

    ``layout="2d"`` (H.2, PVTv2): tokens on a ``grid = (H, W)`` (row-major, ``N = HW``) averaged over a
    ``windows = (h, w)`` grid of windows, ``C = hw`` (row-major). ``uneven`` as :func:`segment_bounds`, per
    axis. Cost ``O(ND)`` (prefix sums).
    """
    check_choice(layout, "layout", LAYOUTS)
    x = _matrix(x, "x")
    n = x.shape[0]
    C = check_positive_int(C, "C")
    cs = np.concatenate([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
    if layout == "1d":
        start, end = segment_bounds(n, C, uneven=uneven)
        return (cs[end] - cs[start]) / (end - start)[:, None]
    if grid is None or windows is None:
        raise TypeError("layout='2d' needs grid=(H, W) and windows=(h, w)")
    (h_tok, w_tok), (h_win, w_win) = grid, windows
    if h_tok * w_tok != n or h_win * w_win != C:
        raise ValueError(f"grid {grid} must hold N = {n} tokens and windows {windows} C = {C} landmarks")
    image = np.zeros((h_tok + 1, w_tok + 1, x.shape[1]))
    image[1:, 1:] = np.cumsum(np.cumsum(x.reshape(h_tok, w_tok, -1), axis=0), axis=1)
    r0, r1 = segment_bounds(h_tok, h_win, uneven=uneven)
    c0, c1 = segment_bounds(w_tok, w_win, uneven=uneven)
    r0, r1, c0, c1 = r0[:, None], r1[:, None], c0[None, :], c1[None, :]
    total = image[r1, c1] - image[r0, c1] - image[r1, c0] + image[r0, c0]
    return (total / ((r1 - r0) * (c1 - c0))[..., None]).reshape(C, -1)


# ------------------------------------------------------------------------------------- proposals


def proposal_means(family: str, q_landmarks, k_landmarks=None, k=None, *,
                   eq35_reading: str = "landmark_attention", gemms: list | None = None) -> np.ndarray:
    r"""Means ``μ_c`` of the Gaussian proposal families, shape ``(C, D)`` (G.3.1).

    * ``eq33``: ``q̃_c + Σ_m softmax_m(q̃_c·k_m) k_m`` (needs ``k``), ``O(CMD)``;
    * ``eq34``: ``q̃_c + k̃_c``, ``O(CD)``;
    * ``eq35``, ``printed_C``: ``q̃_c + [Σ_{c'} e^{k̃_c·k̃_{c'}} / Σ_{c'=1}^{C} e^{k̃_c·k̃_{c'}}] k̃_c`` (the
      printed formula, normaliser over the ``C`` landmarks); ``printed_M``: the same with the normaliser
      ``Σ_{m=1}^M e^{k̃_c·k_m}`` over the individual keys (needs ``k``, ``O(CMD)``); ``landmark_attention``:
      ``q̃_c + Σ_{c'} softmax_{c'}(k̃_c·k̃_{c'}) k̃_{c'}`` (the verbal description), ``O(C²D)``;
    * ``standard``: ``0``.

    ``gemms``: a list to which every matrix product executed is appended as a
    :class:`~rfkit.estimators.rfa.Gemm` (names ``proposal_*``; eq34 and standard perform none).
    """
    check_choice(family, "family", ("eq33", "eq34", "eq35", "standard"))
    ql = _matrix(q_landmarks, "q_landmarks")
    if family == "standard":
        return np.zeros_like(ql)
    if family == "eq33":
        keys = _matrix(k, "k", ql.shape[1])
        record_gemm(gemms, "proposal_logits", ql.shape[0], ql.shape[1], keys.shape[0])
        record_gemm(gemms, "proposal_means", ql.shape[0], keys.shape[0], keys.shape[1])
        return ql + softmax(ql @ keys.T, axis=-1) @ keys
    kl = _matrix(k_landmarks, "k_landmarks", ql.shape[1])
    if kl.shape[0] != ql.shape[0]:
        raise ValueError(f"q_landmarks and k_landmarks must have the same C, got {ql.shape[0]} and {kl.shape[0]}")
    if family == "eq34":
        return ql + kl
    check_choice(eq35_reading, "eq35_reading", EQ35_READINGS)
    gram = kl @ kl.T
    record_gemm(gemms, "proposal_gram", kl.shape[0], kl.shape[1], kl.shape[0])
    if eq35_reading == "landmark_attention":
        record_gemm(gemms, "proposal_means", kl.shape[0], kl.shape[0], kl.shape[1])
        return ql + softmax(gram, axis=-1) @ kl
    if eq35_reading == "printed_M":
        record_gemm(gemms, "proposal_key_logits", kl.shape[0], kl.shape[1], _matrix(k, "k", ql.shape[1]).shape[0])
    log_num = logsumexp(gram, axis=-1)
    log_den = log_num if eq35_reading == "printed_C" else logsumexp(kl @ _matrix(k, "k", ql.shape[1]).T, axis=-1)
    return ql + np.exp(log_num - log_den)[:, None] * kl


@dataclass(frozen=True)
class LaraProposals:
    """The proposals of one LARA call and the landmarks they came from (``None`` where not used).

    Follows :class:`~rfkit.estimators.proposals.Proposal` by delegating to ``proposals`` (``dim``,
    ``sample(rng, size) -> (C, size, D)``, ``logpdf`` at each proposal's own points, ``logpdf_cross``, ``mean``).
    """

    proposals: GaussianProposals | GaussianMixtures
    q_landmarks: np.ndarray | None
    k_landmarks: np.ndarray | None

    @property
    def n_components(self) -> int:
        return self.proposals.n_components

    @property
    def dim(self) -> int:
        return self.proposals.dim

    @property
    def unit_gaussian_means(self) -> np.ndarray | None:
        return self.proposals.unit_gaussian_means

    def sample(self, rng, size: int) -> np.ndarray:
        return self.proposals.sample(rng, size)

    def logpdf(self, omega) -> np.ndarray:
        return self.proposals.logpdf(omega)

    def logpdf_cross(self, omega) -> np.ndarray:
        return self.proposals.logpdf_cross(omega)

    def mean(self) -> np.ndarray:
        return self.proposals.mean()


def lara_proposals(q, k, C: int | None = None, *, proposal: str = "eq34", eq35_reading: str = "landmark_attention",
                   means=None, layout: str = "1d", grid=None, windows=None, uneven: str = "error",
                   gemms: list | None = None) -> LaraProposals:
    """Build a proposal family (see the module docstring) from queries/keys; ``C`` landmarks of each.

    ``custom`` takes ``means (C, D)``; ``exact`` needs ``C = N`` (or ``None``) and returns RA's ``p_n``.
    Query landmarks are computed for every family except ``exact`` (LARA's ``r'`` needs them). ``gemms``:
    records the matrix products executed (see :func:`proposal_means`; ``eq32`` and ``exact``: ``Q̃Kᵀ``, ``QKᵀ``).
    """
    check_choice(proposal, "proposal", PROPOSALS)
    q = _matrix(q, "q")
    k = _matrix(k, "k", q.shape[1])
    if proposal == "exact":
        if C not in (None, q.shape[0]):
            raise ValueError(f"the exact family has C = N = {q.shape[0]} proposals, got C = {C}")
        return LaraProposals(attention_mixture(q, k, gemms=gemms), q, None)
    if proposal == "custom":
        mu = _matrix(means, "means", q.shape[1])
        C = mu.shape[0] if C is None else C
        if mu.shape[0] != C:
            raise ValueError(f"means must have C = {C} rows, got {mu.shape[0]}")
        ql = segment_landmarks(q, C, layout=layout, grid=grid, windows=windows, uneven=uneven)
        return LaraProposals(GaussianProposals(mu), ql, None)
    if C is None:
        raise TypeError(f"proposal {proposal!r} needs the number of landmarks C")
    options = dict(layout=layout, grid=grid, windows=windows, uneven=uneven)
    if proposal == "standard":  # N(0, I) for every c: landmarks only serve r' (none when C > N)
        ql = segment_landmarks(q, C, **options) if C <= q.shape[0] else None
        return LaraProposals(GaussianProposals(np.zeros((C, q.shape[1]))), ql, None)
    ql = segment_landmarks(q, C, **options)
    if proposal == "eq32":
        log_rho = ql @ k.T
        record_gemm(gemms, "proposal_logits", ql.shape[0], ql.shape[1], k.shape[0])
        log_rho = log_rho - logsumexp(log_rho, axis=-1)[:, None]
        return LaraProposals(GaussianMixtures(ql, k, log_rho), ql, None)
    kl = segment_landmarks(k, C, **options) if proposal in ("eq34", "eq35") else None
    mu = proposal_means(proposal, ql, kl, k, eq35_reading=eq35_reading, gemms=gemms)
    return LaraProposals(GaussianProposals(mu), ql, kl)


# ------------------------------------------------------------------------------------------ LARA


def _draws(lp: LaraProposals, mode: str, num_samples: int, omega, rng) -> np.ndarray:
    props = lp.proposals
    if omega is not None:
        w = as_float_array(omega, "omega", ndim=3)
        if w.shape[0] != props.n_components or w.shape[2] != props.dim:
            raise ValueError(f"omega must have shape (C={props.n_components}, S_c, D={props.dim}), got {w.shape}")
        return w
    if mode == "eval":
        return props.mean()[:, None, :]
    return props.sample(rng, num_samples)


def _weights(lp: LaraProposals, q, w, *, weights, beta, rprime_axis, eq37_inner, kappa, alpha, alpha_floor,
             gemms=None):
    """The MIS weights ``(N, C, S_c)`` at the draws ``w`` ``(C, S_c, D)``: the given ``alpha``, or the ``weights``
    rule on the cross log-densities (computed only then: O(C²·S_c·D))."""
    if alpha is not None:
        a = as_float_array(alpha, "alpha", ndim=3)
        if a.shape[1:] != w.shape[:2]:
            raise ValueError(f"alpha must have shape (N, C, S_c) with (C, S_c) = {w.shape[:2]}, got {a.shape}")
        return a
    lq = cross_log_density(lp.proposals, w, gemms=gemms)
    r = None
    if weights in ("eq9", "eq37"):
        check_choice(rprime_axis, "rprime_axis", RPRIME_AXES)
        r = rprime(q, lp.q_landmarks, axis=rprime_axis, gemms=gemms)
    return mis_weights(weights, lq, rprime=r, beta=beta, eq37_inner=eq37_inner, kappa=kappa,
                       n_queries=q.shape[0], alpha_floor=alpha_floor)


def _softmax_form(q, k, v, omega, lp, alpha, gemms=None):
    stats = key_statistics(k, v, omega, gemms=gemms)                      # (C, S_c), (C, S_c, D_v)
    ratio = log_ratio(lp.proposals, omega)                                # (C, S_c)
    log_xq = np.einsum("nd,cjd->ncj", q, omega) - _half_sq_norm(q)[:, None, None]
    n_c, s_c, d = omega.shape
    # log_ratio's closed form contracts each ω_cj with μ_c (C products (S_c×D)·(D×1))
    record_gemm(gemms, "log_ratio", s_c, d, 1, n_c)
    record_gemm(gemms, "query_logits", q.shape[0], d, n_c * s_c)
    return mis_combine(stats.F[None], log_xq + (stats.log_den + ratio)[None], alpha, normalise=True, gemms=gemms)


def _eq10_form(q, k, v, omega, lp, alpha):
    n_c, s_c, d = omega.shape
    flat = omega.reshape(-1, d)
    log_pt = log_implied_target(q, k, flat).reshape(q.shape[0], n_c, s_c)
    log_q = lp.proposals.logpdf(omega)
    f = integrand(q, k, v, flat, form="literal").reshape(q.shape[0], n_c, s_c, v.shape[1])
    return mis_combine(f, log_pt - log_q[None], alpha, normalise=True)


def _eq28_form(q, k, v, omega, lp, alpha):
    n_c, s_c, d = omega.shape
    log_xk = np.einsum("cjd,md->cjm", omega, k) - _half_sq_norm(k)       # log ξ(k_m, ω_cj)
    shift = log_xk.max(axis=-1)                                           # c_cj
    e = np.exp(log_xk - shift[..., None])
    num, den = e @ v, e.sum(axis=-1)                                      # N_cj, D_cj (/ e^{c_cj})
    log_alpha_prime = (log_normal(omega) - lp.proposals.logpdf(omega))[None]
    log_xq = np.einsum("nd,cjd->ncj", q, omega) - _half_sq_norm(q)[:, None, None]
    log_t = log_alpha_prime + log_xq + shift[None]
    top = log_t.max(axis=(1, 2), keepdims=True)
    t = alpha * np.exp(log_t - top) / s_c
    num_q = np.einsum("ncj,cjd->nd", t, num)
    den_q = np.einsum("ncj,cj->n", t, den)
    abs_terms = np.abs(t) * den[None]
    stats = MISStats(float((alpha <= 0).mean()), np.abs(den_q) / abs_terms.sum(axis=(1, 2)),
                     abs_terms.sum(axis=(1, 2)) ** 2 / (abs_terms**2).sum(axis=(1, 2)))
    return num_q / den_q[:, None], stats


_FORMS = {"softmax": _softmax_form, "eq10": _eq10_form, "eq28": _eq28_form}


@over_heads
def lara_attention(q, k, v, *, C: int | None = None, proposals: LaraProposals | None = None, rng=None, omega=None,
                   proposal: str = "eq34", eq35_reading: str = "landmark_attention", means=None,
                   weights: str = "eq9", beta: float = 1.0, rprime_axis: str = "queries", eq37_inner: str = "outer",
                   kappa=None, alpha=None, mode: str = "train", num_samples: int = 1, alpha_floor: float | None = None,
                   form: str = "softmax", layout: str = "1d", grid=None, windows=None, uneven: str = "error",
                   return_stats: bool = False, gemms: list | None = None):
    r"""Linear randomized attention ``LARA(q_n, K, V)`` (Eq 10; Algorithm 3; G.3), bidirectional.

    Parameters
    ----------
    q, k, v : array_like ``(..., N, D)``, ``(..., M, D)``, ``(..., M, D_v)`` (merged coordinates, positive map;
        leading batch/head axes broadcast, see :func:`rfkit.estimators.rfa.over_heads`)
    C : int
        Number of landmarks = proposals = samples (footnote 5).
    proposals : LaraProposals, optional
        Pre-built proposals (:func:`lara_proposals`); otherwise built from ``proposal``, ``eq35_reading``,
        ``means``, ``layout``, ``grid``, ``windows``, ``uneven``.
    rng, omega
        Randomness: ``rng`` (SPEC 7), or explicit draws ``omega (C, S_c, D)`` (shareable with
        :func:`rfkit.estimators.mis.mis_attention`).
    weights : {"eq9", "balance", "eq37", "constant", "delta"}
        ``eq9`` with ``beta`` (Eq 9/38 and its β variant), ``rprime_axis`` (``queries`` as printed, or
        ``landmarks``); ``eq37`` with ``eq37_inner``; ``constant`` with ``kappa``; explicit ``alpha
        (N, C, S_c)`` overrides (e.g. App D's optimal weights). ``alpha_floor`` clamps (not in the paper).
    mode : {"train", "eval"}
        ``train``: ``ω_c ~ q_c`` (``num_samples`` each); ``eval``: ``ω_c = μ_c`` (G.3.3).
    num_samples : int
        Draws per proposal, ``S_c`` (footnote 5; default 1).
    form : {"softmax", "eq10", "eq28"}
        See the module notes: the linear-cost log-space form (default), Eq 10 with explicit ``p̃_n`` and
        literal ``f_n`` (quadratic), or Eq 28 with ``α'_nc`` and unnormalised key statistics.
    return_stats : bool
        Also return :class:`~rfkit.estimators.mis.MISStats` (fraction of ``α <= 0``, denominator
        conditioning ``|Σa|/Σ|a|`` and ESS per query).
    gemms : list, optional
        A list to which every matrix product and einsum contraction executed is appended as a
        :class:`~rfkit.estimators.rfa.Gemm` (``proposal_*``, ``cross_densities``, ``rprime``, ``key_logits``,
        ``key_values``, ``log_ratio``, ``query_logits``, ``output``); the softmax form with Gaussian proposals
        (not ``exact``/``eq32``) and weights other than ``eq37`` only (others raise ``ValueError``); nothing
        is recorded when ``None``. The products inside rfkit.estimators.mis (cross densities, ``r'``, the
        output) are recorded here from their operands' shapes.

    Notes
    -----
    Cost (softmax form, ``S_c = 1``): landmarks ``O((N+M)D)``; proposals ``O(CD)`` (eq34), ``O(C²D)``
    (eq35 landmark_attention), ``O(CMD)`` (eq33, eq35 printed_M, eq32 sampling); key statistics
    ``O(CM(D + D_v))``; balance heuristic ``O(C²D)`` (``O(C²MD)`` for eq32); ``r'`` ``O(NCD)``; outputs
    ``O(NC(D + D_v))``: linear in ``N`` and ``M`` for fixed ``C``. Memory ``O(C(N + M) + C·D_v)``.
    Randomness: ``C·S_c·D`` normals (plus ``C·S_c`` uniforms for eq32).

    Examples
    --------
    One key: every estimate is its value.

    >>> lara_attention(np.zeros((4, 2)), [[0.5, 0.5]], [[3.0]], C=1, rng=0)
    array([[3.],
           [3.],
           [3.],
           [3.]])
    """
    check_choice(mode, "mode", ("train", "eval"))
    check_choice(form, "form", tuple(_FORMS))
    check_choice(weights, "weights", WEIGHTS)
    check_choice(eq37_inner, "eq37_inner", EQ37_INNER)
    if gemms is not None and (form != "softmax" or weights == "eq37" or proposal in ("exact", "eq32")):
        raise ValueError("gemms= records the softmax form with Gaussian proposals and weights other than eq37")
    q, k, v = check_qkv(q, k, v, matrices=True)
    if proposals is None:
        proposals = lara_proposals(q, k, C, proposal=proposal, eq35_reading=eq35_reading, means=means,
                                   layout=layout, grid=grid, windows=windows, uneven=uneven, gemms=gemms)
    elif gemms is not None and not isinstance(proposals.proposals, GaussianProposals):
        raise ValueError("gemms= records LARA with Gaussian proposals (GaussianProposals)")
    if not isinstance(proposals, LaraProposals):
        raise TypeError(f"proposals must be a LaraProposals (see lara_proposals), got {type(proposals).__name__}")
    if proposals.proposals.dim != q.shape[1]:
        raise ValueError(f"proposals have D = {proposals.proposals.dim}, queries {q.shape[1]}")
    w = _draws(proposals, mode, check_positive_int(num_samples, "num_samples"), omega, rng)
    a = _weights(proposals, q, w, weights=weights, beta=beta, rprime_axis=rprime_axis, eq37_inner=eq37_inner,
                 kappa=kappa, alpha=alpha, alpha_floor=alpha_floor, gemms=gemms)
    out, stats = (_softmax_form(q, k, v, w, proposals, a, gemms) if form == "softmax"
                  else _FORMS[form](q, k, v, w, proposals, a))
    return (out, stats) if return_stats else out


@numba.njit(cache=True)
def _alg3_kernel(q, k, v, omega, alpha, log_q_own, p2, out):  # pragma: no cover - compiled
    n_q, d = q.shape
    n_c = omega.shape[0]
    dv = v.shape[1]
    num_c, den_c, log_c = _shifted_key_sums(k, v, omega)  # for c = 1..C: N_c, D_c (max-shifted by log_c)
    half_w = np.empty(n_c)
    for c in range(n_c):
        hw = 0.0
        for i in range(d):
            hw += 0.5 * omega[c, i] * omega[c, i]
        half_w[c] = hw
    log_t = np.empty(n_c)
    log_2pi = math.log(2.0 * math.pi)
    for n in range(n_q):  # for n = 1..N: α'_nc, N = Σ_c α'_nc ξ(q_n, ω_c) N_c, D likewise, y_n = N/D
        half_q = 0.0
        for i in range(d):
            half_q += 0.5 * q[n, i] * q[n, i]
        top = -np.inf
        for c in range(n_c):
            if p2:  # α · N(ω_c; 0, I/q_c(ω_c)): covariance 1/q_c(ω_c) times I
                qc = math.exp(log_q_own[c])
                log_density = -0.5 * d * (log_2pi - log_q_own[c]) - qc * half_w[c]
            else:   # α · N(ω_c; 0, I)/q_c(ω_c)
                log_density = -half_w[c] - 0.5 * d * log_2pi - log_q_own[c]
            acc = 0.0
            for i in range(d):
                acc += omega[c, i] * q[n, i]
            log_t[c] = log_density + acc - half_q + log_c[c]
            top = max(top, log_t[c])
        den = 0.0
        for j in range(dv):
            out[n, j] = 0.0
        for c in range(n_c):
            t = alpha[n, c] * math.exp(log_t[c] - top)
            den += t * den_c[c]
            for j in range(dv):
                out[n, j] += t * num_c[c, j]
        for j in range(dv):
            out[n, j] /= den


def lara_algorithm3(q, k, v, omega, alpha, log_q_own, *, reading: str = "P1") -> np.ndarray:
    r"""Algorithm 3 (G.3.1) literally: loops over ``c`` (``N_c``, ``D_c``) and ``n`` (``α'``, ``N``, ``D``, ``N/D``).

    ``omega (C, D)`` one draw per proposal, ``alpha (N, C)`` the weights at those draws, ``log_q_own (C,)``
    ``= log q_c(ω_c)``. The printed line ``α'_nc ← α_nc(ω_c) N(ω_c; 0, I/q_c(ω_c)`` has an unbalanced
    parenthesis: ``reading="P1"`` is ``α N(ω_c; 0, I)/q_c(ω_c)`` (§4.3, App E), ``"P2"`` is
    ``α N(ω_c; 0, q_c(ω_c)^{-1} I)`` (a Gaussian with covariance ``I/q_c(ω_c)``). Positive map, float64,
    Numba loops; ``N_c``, ``D_c`` are stored divided by ``exp(max_m log ξ(k_m, ω_c))`` and each query's
    terms are shifted by their maximum (both cancel in ``N/D``). Cost ``O(C(N + M)(D + D_v))``.
    """
    check_choice(reading, "reading", ALG3_READINGS)
    q, k, v = check_qkv(q, k, v, matrices=True)
    w = _matrix(omega, "omega", q.shape[1])
    a = as_float_array(alpha, "alpha", ndim=2)
    lq = as_float_array(log_q_own, "log_q_own", ndim=1)
    if a.shape != (q.shape[0], w.shape[0]) or lq.shape != (w.shape[0],):
        raise ValueError(f"alpha must be (N, C) = {(q.shape[0], w.shape[0])} and log_q_own (C,), got "
                         f"{a.shape} and {lq.shape}")
    out = np.empty((q.shape[0], v.shape[1]))
    _alg3_kernel(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v), np.ascontiguousarray(w),
                 np.ascontiguousarray(a), np.ascontiguousarray(lq), reading == "P2", out)
    return out
