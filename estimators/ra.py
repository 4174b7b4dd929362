r"""Randomized attention (RA): the unbiased estimator of softmax attention that samples from ``p_n`` (§3.2, G.2).

Seed text ``000_d62fa2cae7f5a446.txt``; register ``../shared/claims/lara.md`` (``lara.est.ra``,
``lara.est.ra_biased``). Merged coordinates as in :mod:`rfkit.estimators.rfa`.

Softmax attention is an expectation (Prop 3.2): ``μ_n = Σ_m π_nm v_m = E_{p_n}[f_n]`` with the
query-specific Gaussian mixture (Eq 5 = Eq 29)

.. math::  p_n(ω) = \sum_m π_{nm} N(ω; q_n + k_m, I), \qquad π_{nm} = \mathrm{softmax}_m(q_n·k_m),

and ``f_n`` of Eq 6. RA averages ``f_n`` over ``S`` draws from ``p_n`` per query (Eq 30: ``z ~ π_n``,
``ε ~ N(0, I)``, ``ω = q_n + k_z + ε``); biased RA (Eq 31) draws ``ω' = q_n + K^Tπ_n + ε`` instead.

Design notes
------------
* :class:`GaussianMixtures` is the one implementation of identity-covariance Gaussian mixtures with
  shared component offsets, ``q_c(ω) = Σ_m ρ_cm N(ω; b_c + o_m, I)``: RA's targets ``p_n`` (``b = q``,
  ``o = k``, ``ρ = π``), Corollary C.1's symmetric targets (``½[N(b+o) + N(-b-o)]``) and LARA's Eq 32
  mixture proposals. Densities are log-sum-exps of matrix products (``O(points·C·M)`` plus one GEMM).
* Categorical indices are drawn by the inverse CDF on float64 probabilities from pre-drawn uniforms, in a
  Numba kernel (per row: one max-shifted cumulative sum and a binary search per draw), so that every
  random number is explicit and reproducible; the Gaussian part is reparameterised (``ε`` pre-drawn).
* ``f_n`` is evaluated in log space: the ``simplified`` form uses the positive map's query cancellation
  (:func:`rfkit.estimators.rfa.integrand`); queries are processed in chunks so that memory stays
  ``O(chunk·S·M)``. The estimator is quadratic in the sequence length (G.2: ``O(S·N·M)``).
* Evaluation modes (G.2): ``sample`` (default), ``index_only`` (``z ~ π_n``, ``ε := 0``), ``mean``
  (``ω := q_n + K^Tπ_n``); biased RA: ``sample`` or ``mean``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from rfkit.base.checks import as_float_array, check_choice, check_positive_int, check_qkv, check_rng

from .rfa import NONNEGATIVE_MAPS, _half_sq_norm, _matrix, integrand, logsumexp, over_heads, record_gemm

__all__ = [
    "RA_EVAL_MODES",
    "BIASED_EVAL_MODES",
    "GaussianMixtures",
    "softmax_log_weights",
    "attention_mixture",
    "categorical_from_uniforms",
    "RADraws",
    "draw_ra",
    "ra_samples",
    "ra_attention",
    "biased_ra_attention",
    "ra_algorithm1",
]

RA_EVAL_MODES = ("sample", "index_only", "mean")
BIASED_EVAL_MODES = ("sample", "mean")

_LOG_2PI = math.log(2 * math.pi)
#: Queries processed at once by RA (bounds the ``(chunk, S, M)`` logits).
_CHUNK_ELEMENTS = 4_000_000


# ------------------------------------------------------------------------------------- mixtures


def softmax_log_weights(q, k, *, gemms: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(log π, log Z)``: ``log π_nm = q_n·k_m - log Z_n``, ``log Z_n = LSE_m(q_n·k_m)``; cost ``O(NMD)`` (the
    product ``QKᵀ``, recorded in ``gemms`` as ``pi_logits`` when a list is given)."""
    q = _matrix(q, "q")
    k = _matrix(k, "k", q.shape[1])
    logits = q @ k.T
    record_gemm(gemms, "pi_logits", q.shape[0], q.shape[1], k.shape[0])
    log_z = logsumexp(logits, axis=-1)
    return logits - log_z[:, None], log_z


@dataclass(frozen=True)
class GaussianMixtures:
    r"""``C`` mixtures with identity covariance sharing ``M`` offsets:

    ``q_c(ω) = Σ_m ρ_cm N(ω; b_c + o_m, I)``, or with ``symmetric=True``
    ``q_c(ω) = Σ_m ρ_cm ½[N(ω; b_c + o_m, I) + N(ω; -b_c - o_m, I)]`` (Corollary C.1).

    Attributes
    ----------
    base : ndarray ``(C, D)``
    offsets : ndarray ``(M, D)``
    log_weights : ndarray ``(C, M)``, normalised along ``M`` (``-inf`` allowed)
    symmetric : bool
    """

    base: np.ndarray
    offsets: np.ndarray
    log_weights: np.ndarray
    symmetric: bool = False

    def __post_init__(self):
        c, d = self.base.shape
        m = self.offsets.shape[0]
        if self.offsets.shape != (m, d) or self.log_weights.shape != (c, m):
            raise ValueError(f"GaussianMixtures: base {self.base.shape}, offsets {self.offsets.shape} and "
                             f"log_weights {self.log_weights.shape} must be (C, D), (M, D), (C, M)")
        if not np.allclose(logsumexp(self.log_weights, axis=-1), 0.0, atol=1e-9):
            raise ValueError("GaussianMixtures: log_weights must be normalised along M")

    @property
    def n_components(self) -> int:
        """Number of mixtures ``C``."""
        return self.base.shape[0]

    @property
    def dim(self) -> int:
        return self.base.shape[1]

    def _log_components(self, omega: np.ndarray, rows: slice, sign: float) -> np.ndarray:
        """``LSE_m(log ρ_cm + σω·(b_c+o_m) - ‖b_c+o_m‖²/2)`` for ``omega (P, D)`` and the mixtures ``rows``."""
        base = self.base[rows]
        wb = sign * (omega @ base.T)                              # (P, C')
        wo = sign * (omega @ self.offsets.T)                      # (P, M)
        centers = _half_sq_norm(base)[:, None] + base @ self.offsets.T + _half_sq_norm(self.offsets)[None, :]
        return wb + logsumexp(self.log_weights[rows][None] + wo[:, None, :] - centers[None], axis=-1)

    def _finish(self, omega: np.ndarray, plus: np.ndarray, minus: np.ndarray | None) -> np.ndarray:
        quad = -_half_sq_norm(omega)[:, None] - 0.5 * self.dim * _LOG_2PI
        if minus is None:
            return quad + plus
        return quad + np.logaddexp(plus, minus) - math.log(2.0)

    @property
    def unit_gaussian_means(self) -> None:
        """Mixtures are not unit Gaussians: :func:`~rfkit.estimators.proposals.log_ratio` uses :meth:`logpdf`."""
        return None

    def logpdf_cross(self, omega) -> np.ndarray:
        """``log q_c(ω)`` for every mixture at every point: ``omega (..., D)`` -> ``(..., C)``.

        Cost ``O(P·C·M + P·(C + M)·D)`` for ``P`` points.
        """
        w = as_float_array(omega, "omega", min_ndim=1)
        flat = w.reshape(-1, self.dim)
        every = slice(None)
        plus = self._log_components(flat, every, 1.0)
        minus = self._log_components(flat, every, -1.0) if self.symmetric else None
        return self._finish(flat, plus, minus).reshape(w.shape[:-1] + (self.n_components,))

    def logpdf(self, omega) -> np.ndarray:
        """``log q_c(ω_c·)`` of each mixture at its own points: ``omega (C, ..., D)`` -> ``(C, ...)``.

        Cost ``O(P·M·D)`` for ``P`` points in total (no cross terms).
        """
        w = as_float_array(omega, "omega", min_ndim=2)
        if w.shape[0] != self.n_components or w.shape[-1] != self.dim:
            raise ValueError(f"omega must have shape (C={self.n_components}, ..., D={self.dim}), got {w.shape}")
        out = np.empty(w.shape[:-1])
        for c in range(self.n_components):
            pts = w[c].reshape(-1, self.dim)
            row = slice(c, c + 1)
            plus = self._log_components(pts, row, 1.0)
            minus = self._log_components(pts, row, -1.0) if self.symmetric else None
            out[c] = self._finish(pts, plus, minus)[:, 0].reshape(w.shape[1:-1])
        return out

    def mean(self) -> np.ndarray:
        """Mixture means ``b_c + Σ_m ρ_cm o_m`` (0 for symmetric mixtures), shape ``(C, D)``."""
        if self.symmetric:
            return np.zeros_like(self.base)
        return self.base + np.exp(self.log_weights) @ self.offsets

    def reparameterize(self, z, eps, sign=None) -> np.ndarray:
        """Reparameterised draws ``ω = σ(b_c + o_z) + ε``: ``z (C, S)`` indices, ``eps (C, S, D)``, ``sign (C, S)``."""
        z = np.asarray(z)
        eps = as_float_array(eps, "eps", ndim=3)
        if z.shape != eps.shape[:2] or eps.shape[0] != self.n_components or eps.shape[2] != self.dim:
            raise ValueError(f"z {z.shape} and eps {eps.shape} must be (C, S) and (C, S, D) with "
                             f"C = {self.n_components}, D = {self.dim}")
        centers = self.base[:, None, :] + self.offsets[z]
        if sign is not None:
            centers = centers * np.asarray(sign, dtype=np.float64)[..., None]
        elif self.symmetric:
            raise ValueError("symmetric mixtures need sign= (±1 per draw)")
        return centers + eps

    def sample(self, rng, size: int) -> np.ndarray:
        """``size`` draws from each mixture, shape ``(C, size, D)`` (uniforms, normals and signs from ``rng``)."""
        z, eps, sign = _draw_mixture(self.log_weights, self.dim, size, rng, self.symmetric)
        return self.reparameterize(z, eps, sign)


def attention_mixture(q, k, *, feature_map: str = "positive", gemms: list | None = None) -> GaussianMixtures:
    """RA's targets ``p_n`` (Eq 5; Corollary C.1 for the hyperbolic map) as :class:`GaussianMixtures`."""
    check_choice(feature_map, "feature_map", NONNEGATIVE_MAPS)
    q = _matrix(q, "q")
    k = _matrix(k, "k", q.shape[1])
    log_pi, _ = softmax_log_weights(q, k, gemms=gemms)
    return GaussianMixtures(q, k, log_pi, symmetric=feature_map == "hyperbolic")


# ------------------------------------------------------------------------------------- sampling


@numba.njit(cache=True)
def _inverse_cdf(log_weights, uniforms, out):  # pragma: no cover - compiled
    n_rows, n_cat = log_weights.shape
    n_draws = uniforms.shape[1]
    cum = np.empty(n_cat)
    for r in range(n_rows):
        top = -np.inf
        for j in range(n_cat):
            top = max(top, log_weights[r, j])
        total = 0.0
        for j in range(n_cat):
            total += math.exp(log_weights[r, j] - top)
            cum[j] = total
        for s in range(n_draws):
            target = uniforms[r, s] * total
            lo, hi = 0, n_cat - 1
            while lo < hi:  # first j with cum[j] > target
                mid = (lo + hi) // 2
                if cum[mid] > target:
                    hi = mid
                else:
                    lo = mid + 1
            while lo > 0 and cum[lo] == cum[lo - 1]:  # never land on a zero-probability category
                lo -= 1
            out[r, s] = lo


def categorical_from_uniforms(log_weights, uniforms) -> np.ndarray:
    r"""Inverse-CDF categorical draws: row ``r`` returns ``z`` with ``P(z = j) ∝ exp(log_weights[r, j])``.

    ``log_weights (R, M)`` (unnormalised, ``-inf`` allowed), ``uniforms (R, S)`` in ``[0, 1)``; returns
    ``(R, S)`` int64. Numba kernel, ``O(R(M + S log M))``; deterministic given the uniforms.
    """
    lw = as_float_array(log_weights, "log_weights", ndim=2, allow_nonfinite=True)
    if np.isnan(lw).any() or (lw == np.inf).any() or not np.isfinite(lw.max(axis=1)).all():
        raise ValueError("log_weights must be finite or -inf, with a finite entry in every row")
    u = as_float_array(uniforms, "uniforms", ndim=2)
    if u.shape[0] != lw.shape[0] or (u < 0).any() or (u >= 1).any():
        raise ValueError(f"uniforms must be (R={lw.shape[0]}, S) in [0, 1), got shape {u.shape}")
    out = np.empty(u.shape, dtype=np.int64)
    _inverse_cdf(np.ascontiguousarray(lw), np.ascontiguousarray(u), out)
    return out


def _draw_mixture(log_weights, d: int, S: int, rng, symmetric: bool):
    S = check_positive_int(S, "num_samples")
    gen = check_rng(rng)
    n = log_weights.shape[0]
    z = categorical_from_uniforms(log_weights, gen.random((n, S)))
    eps = gen.standard_normal((n, S, d))
    sign = np.where(gen.random((n, S)) < 0.5, -1.0, 1.0) if symmetric else None
    return z, eps, sign


@dataclass(frozen=True)
class RADraws:
    """Explicit randomness of RA: component indices ``z (N, S)``, noise ``eps (N, S, D)`` and, for the
    hyperbolic map, signs ``sign (N, S)`` (``None`` otherwise)."""

    z: np.ndarray
    eps: np.ndarray
    sign: np.ndarray | None = None


def draw_ra(q, k, num_samples: int = 1, *, rng, feature_map: str = "positive", gemms: list | None = None) -> RADraws:
    """Pre-draw RA's randomness (Eq 30): ``num_samples`` per query of ``z ~ Categorical(π_n)``, ``ε ~ N(0, I)``
    (and ``σ = ±1``). ``gemms``: records ``QKᵀ`` (see :func:`softmax_log_weights`)."""
    mix = attention_mixture(q, k, feature_map=feature_map, gemms=gemms)
    return RADraws(*_draw_mixture(mix.log_weights, mix.dim, num_samples, rng, mix.symmetric))



def ra_samples(q, k, draws: RADraws, *, feature_map: str = "positive", eval_mode: str = "sample",
               gemms: list | None = None) -> np.ndarray:
    """The samples ``ω_ns`` of RA, shape ``(N, S, D)``: ``σ(q_n + k_z) + ε`` (``ε := 0`` for ``index_only``;
    ``q_n + K^Tπ_n`` for ``mean``, one per query). ``gemms``: records ``QKᵀ`` (``mean``: also ``πK``)."""
    check_choice(eval_mode, "eval_mode", RA_EVAL_MODES)
    return _mixture_samples(attention_mixture(q, k, feature_map=feature_map, gemms=gemms), draws, feature_map,
                            eval_mode, gemms)


def _mixture_samples(mix: GaussianMixtures, draws: RADraws | None, feature_map: str, eval_mode: str,
                     gemms: list | None) -> np.ndarray:
    """:func:`ra_samples` given the mixture ``p_n`` (formed once per call of :func:`ra_attention`)."""
    if eval_mode == "mean":
        if feature_map != "positive":
            raise ValueError("eval_mode 'mean' is defined for the positive map (the symmetric mean is 0)")
        record_gemm(gemms, "pi_keys", mix.base.shape[0], mix.offsets.shape[0], mix.offsets.shape[1])
        return mix.mean()[:, None, :]
    eps = draws.eps if eval_mode == "sample" else np.zeros_like(draws.eps)
    return mix.reparameterize(draws.z, eps, draws.sign)


def _average_integrand(q, k, v, omega, feature_map: str, f_form: str, gemms=None) -> np.ndarray:
    """``(1/S) Σ_s f_n(ω_ns)`` in query chunks (memory ``O(chunk·S·M)``)."""
    n, s = omega.shape[:2]
    chunk = max(1, _CHUNK_ELEMENTS // max(1, s * k.shape[0]))
    out = np.empty((n, v.shape[1]))
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        f = integrand(q[a:b], k, v, omega[a:b], feature_map=feature_map, form=f_form, gemms=gemms)
        out[a:b] = f.mean(axis=1)
    return out


@over_heads
def ra_attention(q, k, v, *, num_samples: int = 1, rng=None, draws: RADraws | None = None,
                 feature_map: str = "positive", eval_mode: str = "sample", f_form: str = "simplified",
                 return_samples: bool = False, gemms: list | None = None):
    r"""Randomized attention ``RA(q_n, K, V) = (1/S) Σ_s f_n(ω_ns)``, ``ω_ns ~ p_n`` iid per query (§3.2, G.2).

    Parameters
    ----------
    q, k, v : array_like ``(..., N, D)``, ``(..., M, D)``, ``(..., M, D_v)`` (merged coordinates; leading
        batch/head axes broadcast, see :func:`rfkit.estimators.rfa.over_heads`)
    num_samples : int
        Samples per query, ``S`` (G.2 uses ``S = 1``).
    rng, draws
        Randomness: ``rng`` (SPEC 7), or pre-drawn :class:`RADraws` (``z``, ``ε``, ``σ``; :func:`draw_ra`).
    feature_map : {"positive", "hyperbolic"}
        Hyperbolic (Corollary C.1): ``ω = σ(q_n + k_z) + ε``, ``σ = ±1`` with probability ½, integrand
        ``f_n^hyp`` (which depends on ``q_n``).
    eval_mode : {"sample", "index_only", "mean"}
        G.2's evaluation variants (see the module notes).
    f_form : {"simplified", "literal"}
        ``simplified`` (positive map): ``Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m``; ``literal``: Eq 6 with
        ``ξ(q_n, ω)`` kept, in log space (the only form for the hyperbolic map).
    return_samples : bool
        Also return the samples ``ω (N, S, D)``.
    gemms : list, optional
        A list to which every matrix product executed is appended as a :class:`~rfkit.estimators.rfa.Gemm`
        (``pi_logits`` ``QKᵀ`` each time ``π`` is formed, ``key_logits`` and ``key_values`` per query chunk);
        ``f_form="simplified"`` only (the literal form raises ``ValueError``); nothing when ``None``.

    Notes
    -----
    Unbiased for softmax attention (Prop 3.2). Cost: ``π`` in ``O(NMD)``, ``f`` in ``O(S·N·M·(D + D_v))``;
    memory ``O(NM)`` plus ``O(chunk·S·M)``: quadratic in the sequence length.

    Examples
    --------
    One key: ``p_n`` has one component and ``f_n ≡ v``.

    >>> ra_attention([[0.1, 0.2]], [[0.3, -0.4]], [[2.0, -1.0]], rng=0)
    array([[ 2., -1.]])
    """
    check_choice(feature_map, "feature_map", NONNEGATIVE_MAPS)
    check_choice(eval_mode, "eval_mode", RA_EVAL_MODES)
    q, k, v = check_qkv(q, k, v, matrices=True)
    if feature_map == "hyperbolic" and f_form == "simplified":
        f_form = "literal"  # the hyperbolic integrand keeps q_n (no query cancellation)
    if gemms is not None and f_form != "simplified":
        raise ValueError("gemms= records the simplified integrand's matrix products, not f_form='literal'")
    mix = attention_mixture(q, k, feature_map=feature_map, gemms=gemms)  # π formed once (QKᵀ)
    if draws is None and eval_mode != "mean":
        draws = RADraws(*_draw_mixture(mix.log_weights, mix.dim, num_samples, rng, mix.symmetric))
    omega = _mixture_samples(mix, draws, feature_map, eval_mode, gemms)
    out = _average_integrand(q, k, v, omega, feature_map, f_form, gemms)
    return (out, omega) if return_samples else out


@over_heads
def biased_ra_attention(q, k, v, *, num_samples: int = 1, rng=None, eps=None, eval_mode: str = "sample",
                        f_form: str = "simplified", return_samples: bool = False):
    r"""Biased RA (Eq 31, G.2): ``(1/S) Σ_s f_n(ω'_ns)`` with ``ω'_ns = q_n + K^Tπ_n + ε_ns``, no reweighting.

    ``eval_mode="mean"`` uses the deterministic ``ω' = q_n + K^Tπ_n`` (one "sample"). ``eps (N, S, D)``
    may be given; otherwise ``num_samples`` per query drawn from ``rng``. Positive map. Cost as :func:`ra_attention`.
    """
    check_choice(eval_mode, "eval_mode", BIASED_EVAL_MODES)
    q, k, v = check_qkv(q, k, v, matrices=True)
    center = attention_mixture(q, k).mean()[:, None, :]
    if eval_mode == "mean":
        omega = center
    else:
        if eps is None:
            count = check_positive_int(num_samples, "num_samples")
            eps = check_rng(rng).standard_normal((q.shape[0], count, q.shape[1]))
        eps = as_float_array(eps, "eps", ndim=3)
        if eps.shape[0] != q.shape[0] or eps.shape[2] != q.shape[1]:
            raise ValueError(f"eps must have shape (N={q.shape[0]}, S, D={q.shape[1]}), got {eps.shape}")
        omega = center + eps
    out = _average_integrand(q, k, v, omega, "positive", f_form)
    return (out, omega) if return_samples else out


@numba.njit(cache=True)
def _alg1_kernel(q, k, v, z, eps, out):  # pragma: no cover - compiled
    n_q, d = q.shape
    n_k = k.shape[0]
    n_s = z.shape[1]
    dv = v.shape[1]
    omega = np.empty(d)
    logits = np.empty(n_k)
    num = np.empty(dv)
    for n in range(n_q):
        half_q = 0.0
        for i in range(d):
            half_q += 0.5 * q[n, i] * q[n, i]
        for j in range(dv):
            out[n, j] = 0.0
        for s in range(n_s):
            for i in range(d):  # ω_ns = K a_ns + q_n + ε_s
                omega[i] = k[z[n, s], i] + q[n, i] + eps[n, s, i]
            log_xq = -half_q
            for i in range(d):
                log_xq += omega[i] * q[n, i]
            top = -np.inf
            for m in range(n_k):
                acc = 0.0
                half = 0.0
                for i in range(d):
                    acc += omega[i] * k[m, i]
                    half += k[m, i] * k[m, i]
                logits[m] = log_xq + acc - 0.5 * half
                top = max(top, logits[m])
            den = 0.0  # D_ns = ξ(q_n, ω) Σ_m ξ(k_m, ω), shifted by exp(-top)
            for j in range(dv):
                num[j] = 0.0
            for m in range(n_k):
                e = math.exp(logits[m] - top)
                den += e
                for j in range(dv):
                    num[j] += e * v[m, j]
            for j in range(dv):
                out[n, j] += num[j] / den / n_s


def ra_algorithm1(q, k, v, z, eps) -> np.ndarray:
    r"""Algorithm 1 (G.2) literally, on given ``z (N, S)`` and ``ε (N, S, D)``: per query and sample,
    ``ω_ns = K a_ns + q_n + ε_s``, ``N_ns = ξ(q_n,ω) Σ_m ξ(k_m,ω) v_m``, ``D_ns = ξ(q_n,ω) Σ_m ξ(k_m,ω)``,
    ``y_n = (1/S) Σ_s N_ns/D_ns``.

    Positive map, float64, Numba loops; ``N_ns`` and ``D_ns`` share one max shift (it cancels). ``O(SNM(D+D_v))``.
    """
    q, k, v = check_qkv(q, k, v, matrices=True)
    z = np.asarray(z)
    if z.ndim != 2 or z.shape[0] != q.shape[0] or not np.issubdtype(z.dtype, np.integer):
        raise ValueError(f"z must be an integer array of shape (N={q.shape[0]}, S), got {z.shape} {z.dtype}")
    if z.size and (z.min() < 0 or z.max() >= k.shape[0]):
        raise ValueError(f"z must index keys 0..{k.shape[0] - 1}")
    eps = as_float_array(eps, "eps", ndim=3)
    if eps.shape != z.shape + (q.shape[1],):
        raise ValueError(f"eps must have shape {z.shape + (q.shape[1],)}, got {eps.shape}")
    out = np.empty((q.shape[0], v.shape[1]))
    _alg1_kernel(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v),
                 np.ascontiguousarray(z, dtype=np.int64), np.ascontiguousarray(eps), out)
    return out
