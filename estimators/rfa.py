r"""Random feature attention (RFA) as self-normalised importance sampling (RA/LARA paper, Secs 2.2-3.1).

Seed text ``000_d62fa2cae7f5a446.txt`` (Zheng, Wang, Kong, "Linear Complexity Randomized Self-attention
Mechanism", ICML 2022); register ``../shared/claims/lara.md`` (``lara.est.feature_maps``, ``lara.est.rfa``,
``lara.est.snis``). Inputs are in *merged* coordinates (footnote 2): ``q = D^{-1/4} q_raw``,
``k = D^{-1/4} k_raw``, so the kernel is ``exp(q·k)`` and ``ω ~ N(0, I_D)`` in the same coordinates.

Randomized mappings ``ξ(x, ω) ∈ ℝ^l`` (Eq 1, App C), with ``exp(x·y) = E_ω[ξ(x,ω)ᵀξ(y,ω)]``:

* ``positive`` (Performer, the paper's choice): ``l = 1``, ``ξ = exp(ω·x - ‖x‖²/2)``;
* ``trig_sincos``: ``l = 2``, ``ξ = exp(‖x‖²/2) [sin ω·x, cos ω·x]``;
* ``trig_cos_phase``: ``l = 1``, ``ξ = √2 exp(‖x‖²/2) cos(ω·x + b)``, ``b ~ U(0, 2π)`` drawn with ``ω``;
* ``hyperbolic``: ``l = 2``, ``ξ = exp(-‖x‖²/2)/√2 [exp ω·x, exp -ω·x]``.

RFA (Eq 2) with samples ``ω_1..ω_S`` shared by all queries is

.. math::  \mathrm{RFA}(q_n) = \frac{\sum_s ξ(q_n,ω_s)^T \sum_m ξ(k_m,ω_s) v_m^T}
                                   {\sum_s ξ(q_n,ω_s)^T \sum_m ξ(k_m,ω_s)},

which is SNIS (Prop 3.1) of ``E_{p_n}[f_n]`` with proposal ``N(0, I)``, unnormalised target
``p̃_n(ω) = N(ω; 0, I) ξ(q_n,ω)ᵀ Σ_m ξ(k_m,ω)`` and integrand (Eq 6)
``f_n(ω) = ξ(q_n,ω)ᵀ Σ_m ξ(k_m,ω) v_mᵀ / ξ(q_n,ω)ᵀ Σ_m ξ(k_m,ω)``.

Design notes
------------
* **Log space.** For the non-negative maps every exponential is formed in log space: the positive map's
  key statistics are ``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)`` and ``F_s = Σ_m softmax_m(ω_s·k_m -
  ‖k_m‖²/2) v_m`` (the query's factor ``ξ(q_n, ω)`` cancels in ``f_n``: *query cancellation*), and
  ``RFA(q_n) = Σ_s softmax_s(ω_s·q_n + log Den_s) F_s`` (the *softmax form*). No raw ``exp(ω·k)`` is ever
  taken, so any norms work. Signed (trigonometric) maps keep their ``exp(‖x‖²/2)`` factors as separate
  log scales (:class:`~rfkit.estimators.features.Features`) and use signed sums; renormalisers ``<= 0``
  are counted, never hidden.
* **One implementation per formula.** The footnote-3 feature vectors ``φ(x, w) = S^{-1/2}[ξ(x,ω_1), ...,
  ξ(x,ω_S)]`` reuse :mod:`rfkit.estimators.features` (same ``1/√m`` convention and block layout); SNIS
  reuses :func:`rfkit.estimators.importance.snis_estimate`. ``log ξ`` itself is computed here from its
  formula (the features module keeps exponentials, whose logs lose precision far in the tails).
* **One RFA.** :func:`rfa_attention` is the package's only RFA (re-exported as
  ``rfkit.estimators.rfa_attention`` and by :mod:`rfkit.estimators.eva`): the RA paper's Eq 2 and EVA's
  ``RFA_ρ`` (Eq 4) with any :class:`~rfkit.estimators.proposals.Proposal`. It offers the stable softmax form
  (positive map, default), the Eq 2 feature form through :func:`~rfkit.estimators.attention.linear_attention`
  (every map; causal by prefix sums), the literal ``O(NMS)`` double sum of Eq 2 (and EVA's per-query
  samples) and the literal loops of Algorithm 2 (Numba, max-shifted), so identity claims compare independent
  computations.

Shapes: ``q (N, D)``, ``k (M, D)``, ``v (M, D_v)``, ``omega (S, D)`` (or ``(N, S, D)`` for per-query samples
where stated); outputs ``(N, D_v)``. Randomness: ``rng`` (SPEC 7) or explicit ``omega`` / ``phase``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numba
import numpy as np
from scipy.special import softmax

from rfkit.base.checks import (
    NumericalError,
    as_float_array,
    check_choice,
    check_positive_int,
    check_qkv,
    check_rng,
    compute_dtype,
)
from rfkit.base.numerics import half_sq_norm, log_normal, logsumexp
from rfkit.base.numerics import half_sq_norm as _half_sq_norm

from .attention import linear_attention
from .features import Features, hyperbolic_features, positive_features, trig_features
from .importance import effective_sample_size, snis_estimate
from .proposals import log_ratio as proposal_log_ratio

__all__ = [
    "XI_MAPS",
    "NONNEGATIVE_MAPS",
    "logsumexp",
    "RFA_FORMS",
    "KeyStatistics",
    "RFAStats",
    "log_normal",
    "draw_rfa_samples",
    "xi",
    "pair_log_kernel",
    "rf_features",
    "key_statistics",
    "integrand",
    "log_implied_target",
    "rfa_log_weights",
    "rfa_snis",
    "FRAMES",
    "log_xi",
    "rfa_attention",
    "rfa_algorithm2",
    "over_heads",
    "Gemm",
    "record_gemm",
]

class Gemm(tuple):
    """One executed matrix product, recorded as :mod:`rfkit.theory.cost`'s ``(n, k, p, count)`` (``count``
    products of ``(n×k)·(k×p)``; :func:`rfkit.theory.cost.gemm_flops` sums them) with a ``name``."""

    def __new__(cls, name: str, n: int, k: int, p: int, count: int = 1):
        self = super().__new__(cls, (int(n), int(k), int(p), int(count)))
        self.name = name
        return self

    def __getnewargs__(self):
        return (self.name, *self)

    def __repr__(self) -> str:
        return f"Gemm({self.name!r}, {', '.join(map(str, self))})"


def record_gemm(gemms: list | None, name: str, n: int, k: int, p: int, count: int = 1) -> None:
    """Append ``Gemm(name, n, k, p, count)`` to ``gemms`` (nothing when ``gemms`` is ``None``)."""
    if gemms is not None:
        gemms.append(Gemm(name, n, k, p, count))


#: Randomized mappings of App C (names as in the register).
XI_MAPS = ("positive", "trig_sincos", "trig_cos_phase", "hyperbolic")
#: Maps whose pair products are non-negative, so that the implied target is a density (App C).
NONNEGATIVE_MAPS = ("positive", "hyperbolic")
#: Computational forms of :func:`rfa_attention`.
RFA_FORMS = ("softmax", "features", "double_sum", "algorithm")

_HALF_LOG_2 = 0.5 * math.log(2.0)


# ------------------------------------------------------------------------------------------ inputs


def over_heads(fn):
    """Let an attention estimator take ``(..., N, D)`` inputs: leading batch/head axes broadcast and the
    estimator runs once per (batch, head), in row-major order.

    Random draws come from ``rng`` head after head (independent heads); explicit draws (``omega=``, ``draws=``)
    are shared by every head. With ``return_stats=True`` the statistics are returned as a list, one per head.
    """

    @functools.wraps(fn)
    def wrapper(q, k, v, *args, **kwargs):
        arrays = [as_float_array(a, name, min_ndim=2) for a, name in ((q, "q"), (k, "k"), (v, "v"))]
        if all(a.ndim == 2 for a in arrays):
            return fn(*arrays, *args, **kwargs)
        lead = np.broadcast_shapes(*(a.shape[:-2] for a in arrays))
        arrays = [np.broadcast_to(a, lead + a.shape[-2:]) for a in arrays]
        if "rng" in kwargs:
            kwargs["rng"] = check_rng(kwargs["rng"])
        results = [fn(*(a[idx] for a in arrays), *args, **kwargs) for idx in np.ndindex(lead)]
        if kwargs.get("return_stats") or kwargs.get("return_samples"):
            outs = np.stack([r[0] for r in results]).reshape(lead + results[0][0].shape)
            return outs, [r[1] for r in results]
        return np.stack(results).reshape(lead + results[0].shape)

    return wrapper



#: Coordinate frames: ``theory`` (merged coordinates, kernel ``exp(q·k)``), ``sqrt_d`` (logits ``q·k/√d``).
FRAMES = ("theory", "sqrt_d")


def _in_frame(q, k, frame: str):
    """Inputs in the theory coordinates of ``frame`` (``sqrt_d``: ``d^{-1/4}`` on both sides)."""
    check_choice(frame, "frame", FRAMES)
    if frame == "sqrt_d":
        scale = q.shape[-1] ** -0.25
        return q * scale, k * scale
    return q, k


def log_xi(x, omega, *, dtype=np.float64) -> np.ndarray:
    r"""``log ξ(x_i, ω_s) = ω_s·x_i - ‖x_i‖²/2`` (the positive randomized mapping; EVA §2.2, RA paper Eq 1).

    Parameters
    ----------
    x : array_like ``(..., L, d)``
    omega : array_like ``(..., S, d)`` (leading axes broadcast with ``x``'s)

    Returns
    -------
    ndarray ``(..., L, S)``

    Examples
    --------
    >>> log_xi([[1.0, 0.0]], [[2.0, 0.0], [0.0, 0.0]])
    array([[ 1.5, -0.5]])
    """
    x = as_float_array(x, "x", dtype=dtype, min_ndim=2)
    omega = as_float_array(omega, "omega", dtype=dtype, min_ndim=2)
    if x.shape[-1] != omega.shape[-1]:
        raise ValueError(f"x and omega must share their last dimension, got {x.shape[-1]} and {omega.shape[-1]}")
    return x @ np.swapaxes(omega, -1, -2) - half_sq_norm(x)[..., None]


def _log_features(x, omega, log_ratio=None) -> Features:
    """Positive features ``exp(log ξ(x, ω_s) [+ log r_s])`` factored per row (values in ``(0, 1]``)."""
    lf = log_xi(x, omega)
    if log_ratio is not None:
        lf = lf + log_ratio[..., None, :]
    top = lf.max(axis=-1)
    return Features(np.exp(lf - top[..., None]), top)


def _matrix(x, name: str, d: int | None = None) -> np.ndarray:
    arr = as_float_array(x, name, ndim=2)
    if d is not None and arr.shape[1] != d:
        raise ValueError(f"{name} must have {d} columns (the dimension D), got shape {arr.shape}")
    return arr


def _omega(omega, d: int, *, per_query: int | None = None) -> np.ndarray:
    """``(S, D)`` shared samples, or ``(N, S, D)`` per-query samples when ``per_query = N`` is allowed."""
    arr = as_float_array(omega, "omega", min_ndim=2)
    if arr.shape[-1] != d:
        raise ValueError(f"omega must have D = {d} columns, got shape {arr.shape}")
    if arr.ndim == 3 and per_query is not None and arr.shape[0] == per_query:
        return arr
    if arr.ndim != 2:
        raise ValueError(f"omega must have shape (S, D){' or (N, S, D)' if per_query else ''}, got {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError("omega needs at least one sample (S >= 1)")
    return arr


def _phase(phase, feature_map: str, n_samples: int):
    if feature_map != "trig_cos_phase":
        if phase is not None:
            raise ValueError(f"phase is only used by the trig_cos_phase map, not {feature_map!r}")
        return None
    if phase is None:
        raise ValueError("the trig_cos_phase map needs phase= (one b ~ U(0, 2π) per sample; draw_rfa_samples)")
    b = as_float_array(phase, "phase", ndim=1)
    if b.shape[0] != n_samples:
        raise ValueError(f"phase must have one entry per sample ({n_samples}), got {b.shape[0]}")
    return b


def draw_rfa_samples(num_samples: int, d: int, *, rng, feature_map: str = "positive"):
    """``(omega, phase)``: ``num_samples`` iid ``ω ~ N(0, I_d)`` and, for ``trig_cos_phase``, ``b ~ U(0, 2π)``
    (else None).

    Randomness: ``S·d`` standard normals (and ``S`` uniforms) from ``rng``; no orthogonal coupling (G.1).
    """
    S = check_positive_int(num_samples, "num_samples")
    d = check_positive_int(d, "d")
    check_choice(feature_map, "feature_map", XI_MAPS)
    gen = check_rng(rng)
    omega = gen.standard_normal((S, d))
    phase = gen.uniform(0.0, 2 * math.pi, size=S) if feature_map == "trig_cos_phase" else None
    return omega, phase


# ------------------------------------------------------------------------------------ feature maps


def xi(x, omega, *, feature_map: str = "positive", phase=None) -> tuple[np.ndarray, np.ndarray]:
    r"""The randomized mapping ``ξ(x_i, ω_s)`` in signed log form: ``(sign, log|ξ|)``, shape ``(L, S, l)``.

    Formulas (App C): positive ``log ξ = ω·x - ‖x‖²/2``; hyperbolic ``±ω·x - ‖x‖²/2 - ½ log 2``; trig_sincos
    ``‖x‖²/2 + log|sin ω·x|, log|cos ω·x|``; trig_cos_phase ``½ log 2 + ‖x‖²/2 + log|cos(ω·x + b)|``.
    ``log|ξ| = -inf`` where ``ξ = 0``. Cost ``O(L·S·D)``.
    """
    check_choice(feature_map, "feature_map", XI_MAPS)
    x = _matrix(x, "x")
    w = _omega(omega, x.shape[1])
    b = _phase(phase, feature_map, w.shape[0])
    proj = x @ w.T
    half = _half_sq_norm(x)[:, None, None]
    if feature_map == "positive":
        return np.ones(proj.shape + (1,)), proj[..., None] - half
    if feature_map == "hyperbolic":
        logs = np.stack([proj, -proj], axis=-1) - half - _HALF_LOG_2
        return np.ones_like(logs), logs
    if feature_map == "trig_sincos":
        vals = np.stack([np.sin(proj), np.cos(proj)], axis=-1)
        extra = half
    else:
        vals = np.cos(proj + b)[..., None]
        extra = half + _HALF_LOG_2
    with np.errstate(divide="ignore"):
        return np.sign(vals), np.log(np.abs(vals)) + extra


def pair_log_kernel(q, k, omega, *, feature_map: str = "positive", phase=None) -> tuple[np.ndarray, np.ndarray]:
    r"""``ξ(q_n, ω)ᵀ ξ(k_m, ω)`` in signed log form, shape ``(N, S, M)``.

    ``omega`` is ``(S, D)`` (shared) or ``(N, S, D)`` (per query). Closed forms of the pair products:
    positive ``ω·(q+k) - (‖q‖²+‖k‖²)/2``; hyperbolic ``log ½(e^{ω·(q+k)} + e^{-ω·(q+k)}) - (‖q‖²+‖k‖²)/2``
    (the sum of its two components, by ``logaddexp``); trig_sincos
    ``e^{(‖q‖²+‖k‖²)/2} cos(ω·(q-k))``; trig_cos_phase ``2e^{(‖q‖²+‖k‖²)/2} cos(ω·q+b) cos(ω·k+b)``.
    Cost ``O(N·S·M·D)`` for per-query samples, ``O(S(N+M)D + NSM)`` for shared ones.
    """
    check_choice(feature_map, "feature_map", XI_MAPS)
    q = _matrix(q, "q")
    k = _matrix(k, "k", q.shape[1])
    w = _omega(omega, q.shape[1], per_query=q.shape[0])
    if w.ndim == 2:
        w = np.broadcast_to(w, (q.shape[0],) + w.shape)
    b = _phase(phase, feature_map, w.shape[1])
    wq = np.einsum("nsd,nd->ns", w, q)[..., None]          # (N, S, 1)
    wk = w @ k.T                                            # (N, S, M)
    half = _half_sq_norm(q)[:, None, None] + _half_sq_norm(k)[None, None, :]
    if feature_map == "positive":
        return np.ones(wk.shape), wq + wk - half
    if feature_map == "hyperbolic":  # ½(e^{ω·q}e^{ω·k} + e^{-ω·q}e^{-ω·k}), the two components of ξᵀξ
        t = wq + wk
        return np.ones(wk.shape), np.logaddexp(t, -t) - math.log(2.0) - half
    if feature_map == "trig_sincos":
        vals = np.cos(wq - wk)
        extra = half
    else:
        vals = np.cos(wq + b[None, :, None]) * np.cos(wk + b[None, :, None])
        extra = half + math.log(2.0)
    with np.errstate(divide="ignore"):
        return np.sign(vals), np.log(np.abs(vals)) + extra


def rf_features(x, omega, *, feature_map: str = "positive", phase=None) -> Features:
    r"""Footnote-3 random features ``φ(x, w) = S^{-1/2} [ξ(x,ω_1), ..., ξ(x,ω_S)]`` as :class:`Features`.

    ``φ(x)ᵀφ(y) = (1/S) Σ_s ξ(x,ω_s)ᵀξ(y,ω_s)``. Positive, trig_sincos and hyperbolic reuse
    :mod:`rfkit.estimators.features` (identical formulas, block layout ``[f_1 block | f_2 block]``);
    trig_cos_phase is ``√(2/S) cos(ω_s·x + b_s)`` with log-scale ``‖x‖²/2``. Cost ``O(L·S·D)``.
    """
    check_choice(feature_map, "feature_map", XI_MAPS)
    x = _matrix(x, "x")
    w = _omega(omega, x.shape[1])
    b = _phase(phase, feature_map, w.shape[0])
    if feature_map == "positive":
        return positive_features(x, w)
    if feature_map == "hyperbolic":
        return hyperbolic_features(x, w)
    if feature_map == "trig_sincos":
        return trig_features(x, w)
    values = math.sqrt(2.0 / w.shape[0]) * np.cos(x @ w.T + b)
    return Features(values, _half_sq_norm(x))


# ------------------------------------------------------------------------------- SNIS ingredients


@dataclass(frozen=True)
class KeyStatistics:
    r"""Positive-map key statistics of Algorithm 2/3 in normalised form.

    ``Den_s = Σ_m ξ(k_m,ω_s) = exp(log_den[s])`` and ``Num_s = Σ_m ξ(k_m,ω_s) v_mᵀ = Den_s · F[s]``, where
    ``F_s = Σ_m softmax_m(ω_s·k_m - ‖k_m‖²/2) v_m = f(ω_s)`` is the (query-free) integrand.
    """

    log_den: np.ndarray
    F: np.ndarray


def key_statistics(k, v, omega, *, gemms: list | None = None) -> KeyStatistics:
    r"""``log Den_s = LSE_m(ω_s·k_m - ‖k_m‖²/2)`` and ``F_s = Σ_m softmax_m(·) v_m`` (positive map).

    ``omega (..., D)``: any leading shape (``(S, D)`` for RFA/LARA, ``(N, S, D)`` for RA); results have the
    leading shape (``F`` gains a last axis ``D_v``). Cost ``O(#ω · M · (D + D_v))`` (two matrix products,
    appended to ``gemms`` as ``key_logits`` and ``key_values`` when a list is given).
    """
    k = _matrix(k, "k")
    v = _matrix(v, "v")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"k and v must have the same number of rows, got {k.shape[0]} and {v.shape[0]}")
    w = as_float_array(omega, "omega", min_ndim=1)
    if w.shape[-1] != k.shape[1]:
        raise ValueError(f"omega must have D = {k.shape[1]} columns, got shape {w.shape}")
    flat = w.reshape(-1, w.shape[-1])
    logits = flat @ k.T - _half_sq_norm(k)
    log_den = logsumexp(logits, axis=-1)
    F = np.exp(logits - log_den[:, None]) @ v
    record_gemm(gemms, "key_logits", flat.shape[0], k.shape[1], k.shape[0])
    record_gemm(gemms, "key_values", flat.shape[0], k.shape[0], v.shape[1])
    return KeyStatistics(log_den.reshape(w.shape[:-1]), F.reshape(w.shape[:-1] + (v.shape[1],)))


def _signed_ratio(sign: np.ndarray, log_abs: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``Σ_m s_m e^{l_m} v_m / Σ_m s_m e^{l_m}`` along the last axis of ``(…, M)`` (max-shifted, signed)."""
    shift = log_abs.max(axis=-1, keepdims=True)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    a = sign * np.exp(log_abs - shift)
    den = a.sum(axis=-1)
    if (den == 0).any():
        raise NumericalError("the integrand's denominator ξ(q,ω)ᵀΣ_m ξ(k_m,ω) is exactly 0 at some ω")
    return (a @ v) / den[..., None]


def integrand(q, k, v, omega, *, feature_map: str = "positive", form: str = "literal", phase=None,
              gemms: list | None = None) -> np.ndarray:
    r"""The integrand ``f_n(ω)`` of Eq 6 at every sample, shape ``(N, S, D_v)``.

    ``form="literal"``: Eq 6 with ``ξ(q_n, ω)`` kept in numerator and denominator (signed log space;
    every map). ``form="simplified"`` (positive map only): ``Σ_m softmax_m(ω·k_m - ‖k_m‖²/2) v_m``, which
    does not involve ``q_n`` (register ``lara.derived.query_cancellation``). ``omega`` is ``(S, D)`` (shared)
    or ``(N, S, D)`` (per query, as in RA). Cost ``O(N·S·M·(D + D_v))`` (literal), ``O(S·M·(D + D_v))``
    (simplified, shared samples). ``gemms``: records the simplified form's products (see :func:`key_statistics`;
    the literal form raises ``ValueError``).
    """
    check_choice(form, "form", ("literal", "simplified"))
    if gemms is not None and form != "simplified":
        raise ValueError("gemms= records the simplified integrand's matrix products only")
    q, k, v = check_qkv(q, k, v, matrices=True)
    w = _omega(omega, q.shape[1], per_query=q.shape[0])
    if form == "simplified":
        if feature_map != "positive":
            raise ValueError("the simplified integrand holds for the positive map only (query cancellation)")
        F = key_statistics(k, v, w, gemms=gemms).F
        return F if w.ndim == 3 else np.broadcast_to(F, (q.shape[0],) + F.shape)
    sign, log_abs = pair_log_kernel(q, k, w, feature_map=feature_map, phase=phase)
    return _signed_ratio(sign, log_abs, v)


def log_implied_target(q, k, omega, *, feature_map: str = "positive") -> np.ndarray:
    r"""``log p̃_n(ω_s) = log N(ω_s; 0, I) + log ξ(q_n,ω_s)ᵀ Σ_m ξ(k_m,ω_s)``, shape ``(N, S)`` (§4.2, App C).

    Non-negative maps only (the trigonometric products are signed: no density, App C). With
    ``Z_n = Σ_m exp(q_n·k_m)``, ``p̃_n/Z_n`` is the Eq 5 mixture (positive) or Corollary C.1's symmetric
    mixture (hyperbolic). ``omega`` ``(S, D)`` or ``(N, S, D)``. Cost ``O(S(N + M)D)`` (positive, shared
    samples), ``O(N·S·M·D)`` otherwise.
    """
    check_choice(feature_map, "feature_map", NONNEGATIVE_MAPS)
    q = _matrix(q, "q")
    k = _matrix(k, "k", q.shape[1])
    w = _omega(omega, q.shape[1], per_query=q.shape[0])
    if feature_map == "positive" and w.ndim == 2:
        stats = key_statistics(k, np.zeros((k.shape[0], 1)), w)
        return log_normal(w) + q @ w.T - _half_sq_norm(q)[:, None] + stats.log_den
    _, log_abs = pair_log_kernel(q, k, w, feature_map=feature_map)
    return log_normal(w) + logsumexp(log_abs, axis=-1)


def rfa_log_weights(q, k, omega, *, feature_map: str = "positive", log_proposal=None) -> np.ndarray:
    r"""SNIS log-weights ``log w̃_ns = log p̃_n(ω_s) - log q(ω_s)``, shape ``(N, S)`` (Eq 3, Eq 4).

    ``log_proposal`` (shape ``(S,)``) is ``log q(ω_s)`` of the proposal the samples came from; default
    ``N(0, I)``, for which ``log w̃ = log ξ(q_n,ω)ᵀ Σ_m ξ(k_m,ω)`` (Eq 4 times ``Z_n``).
    """
    w = as_float_array(omega, "omega", min_ndim=2)
    log_target = log_implied_target(q, k, w, feature_map=feature_map)
    log_q = log_normal(w) if log_proposal is None else as_float_array(log_proposal, "log_proposal")
    if log_proposal is not None and log_q.shape != log_target.shape[-1:] and log_q.shape != log_target.shape:
        raise ValueError(f"log_proposal must have shape (S,) = {log_target.shape[-1:]}, got {log_q.shape}")
    return log_target - log_q


def rfa_snis(q, k, v, omega, *, feature_map: str = "positive", log_proposal=None, f_form: str = "literal"
             ) -> tuple[np.ndarray, np.ndarray]:
    r"""RFA in its SNIS reading (Prop 3.1 / Cor C.1): ``Σ_s w̃_ns f_n(ω_s) / Σ_s w̃_ns``; returns ``(y, ess)``.

    Composes :func:`rfa_log_weights` and :func:`integrand` with
    :func:`~rfkit.estimators.importance.snis_estimate` (weights a softmax over ``s`` of ``log w̃``) and
    :func:`~rfkit.estimators.importance.effective_sample_size` (Kish, per query). ``omega`` may come from
    any proposal (pass its ``log_proposal``): the general-proposal SNIS of Eq 3. Non-negative maps only.
    Cost ``O(N·S·M·(D + D_v))`` with the literal integrand.
    """
    q, k, v = check_qkv(q, k, v, matrices=True)
    w = _omega(omega, q.shape[1])
    log_w = rfa_log_weights(q, k, w, feature_map=feature_map, log_proposal=log_proposal)
    f = integrand(q, k, v, w, feature_map=feature_map, form=f_form)
    return snis_estimate(f, log_weights=log_w), effective_sample_size(log_weights=log_w)


# ----------------------------------------------------------------------------------------- RFA


@dataclass(frozen=True)
class RFAStats:
    """Diagnostics of one RFA call: Kish ESS of the SNIS weights per query (non-negative maps; nan for
    signed maps), and the count and minimum of renormalisers ``<= 0`` (signed maps; 0 otherwise)."""

    ess: np.ndarray
    n_nonpositive: int
    min_denominator: float


def _softmax_form(q, k, v, w, log_ratio=None, gemms=None) -> tuple[np.ndarray, np.ndarray]:
    stats = key_statistics(k, v, w, gemms=gemms)
    logits = q @ w.T + stats.log_den
    record_gemm(gemms, "query_logits", q.shape[0], q.shape[1], w.shape[0])
    record_gemm(gemms, "output", q.shape[0], w.shape[0], v.shape[1])
    if log_ratio is not None:
        logits = logits + log_ratio
    weights = softmax(logits, axis=-1)
    return weights @ stats.F, (weights.sum(-1) ** 2) / (weights * weights).sum(-1)


def _double_sum(q, k, v, w, feature_map, phase) -> tuple[np.ndarray, np.ndarray]:
    """Eq 2's first form: ``Σ_m Σ_s ξ(q_n,ω_s)ᵀξ(k_m,ω_s) v_m / Σ_m Σ_s (·)``, an ``(N, M, S)`` sum per query."""
    out = np.empty((q.shape[0], v.shape[1]))
    dens = np.empty(q.shape[0])
    for n in range(q.shape[0]):
        sign, log_abs = pair_log_kernel(q[n:n + 1], k, w, feature_map=feature_map, phase=phase)
        shift = log_abs.max()
        gram = (sign[0] * np.exp(log_abs[0] - shift)).sum(axis=0)  # Σ_s, shape (M,)
        dens[n] = gram.sum()
        out[n] = gram @ v / dens[n]
    return out, dens


def _default_form(feature_map: str, per_query: bool, causal: bool) -> str:
    if per_query:
        return "double_sum"
    if causal or feature_map != "positive":
        return "features"
    return "softmax"


def _check_options(feature_map, form, per_query, causal, weighted, phase, dt, return_stats):
    """Raise ``ValueError`` for the combinations :func:`rfa_attention` does not define."""
    if feature_map != "trig_cos_phase" and phase is not None:
        raise ValueError(f"phase is only used by the trig_cos_phase map, not {feature_map!r}")
    if form in ("softmax", "algorithm") and feature_map != "positive":
        raise ValueError(f"form {form!r} is for the positive map; use 'features' or 'double_sum'")
    if per_query and (form != "double_sum" or feature_map != "positive"):
        raise ValueError("per-query samples (per_query=True) are evaluated by the positive map's double sum "
                         f"(form='double_sum'), not form={form!r} with the {feature_map!r} map")
    if per_query and return_stats:
        raise ValueError("return_stats needs shared samples (per_query=False)")
    if causal and not (form == "features" or per_query):
        raise ValueError("causal RFA is the features form's prefix sums or the per-query double sum, "
                         f"not form={form!r}")
    if weighted and feature_map != "positive":
        raise ValueError("a proposal other than N(0, I) (proposal=, log_ratio=) needs the positive map, "
                         f"not {feature_map!r}")
    if weighted and form in ("algorithm", "double_sum") and not per_query:
        raise ValueError(f"form {form!r} with shared samples is RFA's N(0, I) formula: no proposal= or log_ratio=")
    if dt != np.float64 and (form in ("softmax", "algorithm") or (form == "double_sum" and not per_query)
                             or feature_map != "positive"):
        raise ValueError(f"dtype={dt} is offered by the positive map's features form and per-query double sum; "
                         f"form {form!r} with the {feature_map!r} map computes in float64")


def _draw_per_head(num_samples, d, lead, rng, feature_map):
    """``N(0, I)`` draws (and phases) head after head (independent heads): ``lead + (S, d)`` and ``lead + (S,)``."""
    if not lead:
        return draw_rfa_samples(num_samples, d, rng=rng, feature_map=feature_map)
    gen = check_rng(rng)
    draws = [draw_rfa_samples(num_samples, d, rng=gen, feature_map=feature_map) for _ in np.ndindex(lead)]
    omega = np.stack([w for w, _ in draws]).reshape(lead + (num_samples, d))
    phase = None if draws[0][1] is None else np.stack([b for _, b in draws]).reshape(lead + (num_samples,))
    return omega, phase


def _rfa_matrix(q, k, v, w, phase, log_ratio, feature_map, form, gemms=None,
                causal: bool = False) -> tuple[np.ndarray, RFAStats]:
    """One head: ``q (N, D)``, ``k (M, D)``, ``v (M, D_v)``, shared ``w (S, D)``; ``causal`` only with the
    features form (:func:`_check_options` refuses it with the others)."""
    w = _omega(w, q.shape[1])
    phase = _phase(phase, feature_map, w.shape[0])
    ess = np.full(q.shape[0], np.nan)
    nonpositive, min_den = 0, math.nan
    if form == "softmax":
        out, ess = _softmax_form(q, k, v, w, log_ratio, gemms)
    elif form == "algorithm":
        out = rfa_algorithm2(q, k, v, w)
    elif form == "double_sum":
        out, dens = _double_sum(q, k, v, w, feature_map, phase)
        nonpositive, min_den = int((dens <= 0).sum()), float(dens.min())
    else:
        if feature_map == "positive":
            fq, fk = _log_features(q, w, log_ratio), _log_features(k, w)
        else:
            fq = rf_features(q, w, feature_map=feature_map, phase=phase)
            fk = rf_features(k, w, feature_map=feature_map, phase=phase)
        out, att = linear_attention(fq, fk, v, causal=causal, return_stats=True)
        nonpositive, min_den = att.n_nonpositive, att.min_denominator
    return out, RFAStats(ess, nonpositive, min_den)


def rfa_attention(q, k, v, *, num_samples: int | None = None, omega=None, rng=None, proposal=None, log_ratio=None,
                  feature_map: str = "positive", phase=None, form: str | None = None, per_query: bool = False,
                  causal: bool = False, frame: str = "theory", dtype=np.float64, return_stats: bool = False,
                  gemms: list | None = None):
    r"""Random feature attention: RFA as self-normalised importance sampling, for any proposal ``ρ``.

    .. math::  \mathrm{RFA}_ρ(q_n) = \frac{\sum_s r(ω_s)\, ξ(q_n,ω_s)^T \sum_m ξ(k_m,ω_s) v_m^T}
                                         {\sum_s r(ω_s)\, ξ(q_n,ω_s)^T \sum_m ξ(k_m,ω_s)},
               \qquad ω_s \sim ρ,\quad r = N(\,\cdot\,; 0, I)/ρ,

    the RA/LARA paper's Eq 2 (``ρ = N(0, I)``, ``r ≡ 1``), which Prop 3.1 reads as SNIS of softmax attention
    ``E_{p_n}[f_n]`` (target ``p̃_n(ω) = N(ω; 0, I) ξ(q_n,ω)ᵀΣ_m ξ(k_m,ω)``, integrand Eq 6), and EVA's
    ``RFA_ρ`` (§2.2, Eq 4: ``Σ_{s,m} λ_{s,m} v_m / Σ_{s,m} λ_{s,m}``, ``λ_{s,m} = r(ω_s) ξ(q_n,ω_s) ξ(k_m,ω_s)``).

    Conventions: *merged coordinates* (RA paper footnote 2; EVA's ``frame="theory"``): the kernel is
    ``exp(q·k)``, so raw queries and keys enter as ``D^{-1/4} q``, ``D^{-1/4} k`` (or pass ``frame="sqrt_d"``);
    ``ω ~ N(0, I_D)`` in the same coordinates; ``ξ`` is one of :data:`XI_MAPS` (App C).

    Parameters
    ----------
    q, k, v : array_like ``(..., N, D)``, ``(..., M, D)``, ``(..., M, D_v)``
        Leading batch/head axes broadcast (with ``omega``'s leading axes too).
    num_samples : int, optional
        ``S``, drawn from ``rng`` when ``omega`` is not given: from ``proposal`` (one call of its
        ``sample(rng, num_samples)``), else ``N(0, I)`` (and phases) head after head (independent heads).
    omega : array_like ``(..., S, D)``, optional
        Explicit samples shared by all queries (shared by every head unless they carry leading axes), or with
        ``per_query=True`` ``(..., N, S, D)``: one sample set per query.
    rng : SPEC 7 seed or ``numpy.random.Generator``
    proposal : :class:`~rfkit.estimators.proposals.Proposal`, optional
        ``ρ`` (default ``N(0, I)``): draws ``num_samples`` with ``rng``, and gives ``log r`` through
        :func:`~rfkit.estimators.proposals.log_ratio`. Positive map.
    log_ratio : array_like ``omega.shape[:-1]``, optional
        ``log r(ω_s)`` directly (overrides ``proposal``'s).
    feature_map : {"positive", "trig_sincos", "trig_cos_phase", "hyperbolic"}
    phase : array_like ``(..., S)``, optional
        The phases ``b_s`` of ``trig_cos_phase`` (drawn with ``omega`` when it is drawn).
    form : {"softmax", "features", "double_sum", "algorithm"}, optional
        ``softmax`` (default for the positive map): ``y_n = Σ_s softmax_s(ω_s·q_n + log Den_s + log r_s) F_s``
        (register ``lara.derived.rfa_softmax_form``); ``features`` (default for the other maps and for
        ``causal``): Eq 2 as linear attention on footnote-3 features (positive map: ``r(ω)ξ(q, ω)`` and
        ``ξ(k, ω)`` in log-factored form), signed where the map is, causal by prefix sums; ``double_sum``
        (default for ``per_query``): the literal first form of Eq 2, ``O(NMS)`` (per-query samples: a joint
        log-sum-exp over ``(s, m)``, ``O(NSMD)``); ``algorithm``: the literal loops of Algorithm 2 (positive
        map, Numba).
    per_query : bool
        ``omega`` holds one sample set per query (positive map, ``double_sum``).
    causal : bool
        Query ``n`` uses keys ``m <= n`` (``N == M``; ``features`` or per-query ``double_sum``).
    frame : {"theory", "sqrt_d"}
        ``sqrt_d`` first replaces ``q, k`` by ``D^{-1/4} q, D^{-1/4} k`` (logits ``q·k/√D``).
    dtype : float64 or float32
        Computation dtype of the positive map's ``features`` and per-query forms (the others are float64).
    return_stats : bool
        Also return :class:`RFAStats` (a list, one per head, for inputs with leading axes).
    gemms : list, optional
        A list to which every matrix product executed is appended as a :class:`Gemm` (``(n, k, p, count)``
        with a name: ``key_logits``, ``key_values``, ``query_logits``, ``output``; per head). Softmax form only
        (other forms raise ``ValueError``); nothing is recorded when ``None``.

    Returns
    -------
    ndarray ``(..., N, D_v)`` (and the statistics).

    Notes
    -----
    Cost ``O(S(N + M)(D + D_v))`` time and ``O(S(N + M) + S·D_v)`` memory (softmax, features); the double
    sum is ``O(NMS(D + D_v))``. Combinations that are not defined (e.g. ``form="softmax"`` with a signed
    map, ``causal`` with the softmax form, a proposal with a map other than the positive one) raise
    ``ValueError``. Randomness: ``S·D`` standard normals per head (plus ``S`` phases), or the proposal's draws.

    Examples
    --------
    One key: every form returns its value.

    >>> rfa_attention([[0.3, -0.2]], [[1.0, 0.5]], [[7.0]], num_samples=4, rng=0)
    array([[7.]])

    With ``k = 0`` all keys look alike: the output is the mean of the values, for any proposal.

    >>> from rfkit.estimators.proposals import GaussianProposal
    >>> rfa_attention(np.ones((1, 2)), np.zeros((3, 2)), [[0.0], [3.0], [6.0]], num_samples=4, rng=0,
    ...               proposal=GaussianProposal(np.ones(2)), form="features", causal=False)
    array([[3.]])
    """
    check_choice(feature_map, "feature_map", XI_MAPS)
    check_choice(frame, "frame", FRAMES)
    form = check_choice(form or _default_form(feature_map, per_query, causal), "form", RFA_FORMS)
    dt = compute_dtype(dtype)
    _check_options(feature_map, form, per_query, causal, proposal is not None or log_ratio is not None, phase,
                   dt, return_stats)
    if gemms is not None and (form != "softmax" or per_query):
        raise ValueError(f"gemms= records the softmax form's matrix products, not form={form!r}"
                         + (" with per-query samples" if per_query else ""))
    q, k, v = check_qkv(q, k, v, dtype=dt)
    q, k = _in_frame(q, k, frame)
    d = q.shape[-1]
    if proposal is not None and proposal.dim != d:
        raise ValueError(f"the proposal lives in dimension {proposal.dim}, the inputs in {d}")
    if omega is None:
        if num_samples is None or rng is None:
            raise TypeError("give omega=, or num_samples= and rng= to draw the samples")
        if proposal is not None:
            omega = proposal.sample(rng, num_samples)
        elif per_query:
            raise ValueError("per-query samples are not drawn here: give omega (..., N, S, D) or a proposal")
        else:
            lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
            omega, phase = _draw_per_head(check_positive_int(num_samples, "num_samples"), d, lead, rng, feature_map)
    omega = as_float_array(omega, "omega", dtype=dt, min_ndim=2)
    if omega.shape[-1] != d:
        raise ValueError(f"omega must have D = {d} columns (the input dimension), got shape {omega.shape}")
    if omega.shape[-2] == 0:
        raise ValueError("omega needs at least one sample (S >= 1)")
    if log_ratio is None and proposal is not None:
        log_ratio = proposal_log_ratio(proposal, omega)
    if log_ratio is not None:
        log_ratio = as_float_array(log_ratio, "log_ratio", dtype=dt)
        if log_ratio.shape != omega.shape[:-1]:
            raise ValueError(f"log_ratio must have shape {omega.shape[:-1]} (omega without its last axis), "
                             f"got {log_ratio.shape}")
    if per_query:
        return _rfa_direct(q, k, v, omega, 0.0 if log_ratio is None else log_ratio, causal)
    if form == "features" and feature_map == "positive" and not return_stats:
        return linear_attention(_log_features(q, omega, log_ratio), _log_features(k, omega), v, causal=causal,
                                dtype=dt)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], omega.shape[:-2])
    if not lead:
        out, stats = _rfa_matrix(q, k, v, omega, phase, log_ratio, feature_map, form, gemms, causal)
        return (out, stats) if return_stats else out
    q, k, v = (np.broadcast_to(a, lead + a.shape[-2:]) for a in (q, k, v))
    omega = np.broadcast_to(omega, lead + omega.shape[-2:])
    log_ratio = None if log_ratio is None else np.broadcast_to(log_ratio, lead + log_ratio.shape[-1:])
    phase = None if phase is None else np.asarray(phase)
    results = [_rfa_matrix(q[i], k[i], v[i], omega[i], None if phase is None else phase if phase.ndim == 1 else
                           phase[i], None if log_ratio is None else log_ratio[i], feature_map, form, gemms, causal)
               for i in np.ndindex(lead)]
    out = np.stack([r[0] for r in results]).reshape(lead + results[0][0].shape)
    return (out, [r[1] for r in results]) if return_stats else out


def _rfa_direct(q, k, v, omega, log_ratio, causal):
    """Query-dependent samples ``omega (..., N, S, d)``: joint log-sum-exp over ``(s, m)`` (EVA App A)."""
    if omega.ndim < 3 or omega.shape[-3] != q.shape[-2]:
        raise ValueError(f"per_query omega must have shape (..., N, S, d) with N = {q.shape[-2]}, got {omega.shape}")
    lq = np.einsum("...nd,...nsd->...ns", q, omega) - half_sq_norm(q)[..., None] + log_ratio
    lk = np.einsum("...md,...nsd->...nsm", k, omega) - half_sq_norm(k)[..., None, None, :]
    log_lam = lq[..., None] + lk
    if causal:
        log_lam = np.where(np.tri(q.shape[-2], k.shape[-2], dtype=bool)[:, None, :], log_lam, -np.inf)
    weights = np.exp(log_lam - log_lam.max(axis=(-2, -1), keepdims=True)).sum(axis=-2)
    return (weights @ v) / weights.sum(axis=-1, keepdims=True)


@numba.njit(cache=True)
def _shifted_key_sums(k, v, omega):  # pragma: no cover - compiled
    """Per sample ``s``: ``N_s = Σ_m ξ(k_m, ω_s) v_m`` and ``D_s = Σ_m ξ(k_m, ω_s)`` (positive map), both stored
    divided by ``exp(c_s)``, ``c_s = max_m log ξ(k_m, ω_s)``; returns ``(N, D, c)``. The key loop of Algorithms 2
    and 3."""
    n_k, d = k.shape
    n_s = omega.shape[0]
    dv = v.shape[1]
    num_s = np.zeros((n_s, dv))
    den_s = np.zeros(n_s)
    log_c = np.empty(n_s)
    logits = np.empty(n_k)
    for s in range(n_s):
        top = -np.inf
        for m in range(n_k):
            acc = 0.0
            half = 0.0
            for i in range(d):
                acc += omega[s, i] * k[m, i]
                half += k[m, i] * k[m, i]
            logits[m] = acc - 0.5 * half
            top = max(top, logits[m])
        log_c[s] = top
        for m in range(n_k):
            e = math.exp(logits[m] - top)
            den_s[s] += e
            for j in range(dv):
                num_s[s, j] += e * v[m, j]
    return num_s, den_s, log_c


@numba.njit(cache=True)
def _alg2_kernel(q, k, v, omega, out):  # pragma: no cover - compiled
    n_q, d = q.shape
    n_s = omega.shape[0]
    dv = v.shape[1]
    num_s, den_s, log_c = _shifted_key_sums(k, v, omega)  # for s = 1..S: N_s, D_s (max-shifted by c_s)
    lq = np.empty(n_s)
    for n in range(n_q):  # for n = 1..N: N = Σ_s ξ(q_n, ω_s) N_s, D = Σ_s ξ(q_n, ω_s) D_s
        half = 0.0
        for i in range(d):
            half += q[n, i] * q[n, i]
        top = -np.inf
        for s in range(n_s):
            acc = 0.0
            for i in range(d):
                acc += omega[s, i] * q[n, i]
            lq[s] = acc - 0.5 * half + log_c[s]
            top = max(top, lq[s])
        den = 0.0
        for j in range(dv):
            out[n, j] = 0.0
        for s in range(n_s):
            e = math.exp(lq[s] - top)
            den += e * den_s[s]
            for j in range(dv):
                out[n, j] += e * num_s[s, j]
        for j in range(dv):
            out[n, j] /= den


def rfa_algorithm2(q, k, v, omega) -> np.ndarray:
    r"""Algorithm 2 (G.1) literally: loops over ``s`` (``N_s``, ``D_s``) and over ``n`` (``N``, ``D``, ``N/D``).

    Positive map, float64, Numba-compiled explicit loops. Each ``N_s, D_s`` is stored divided by
    ``exp(c_s)``, ``c_s = max_m log ξ(k_m, ω_s)``, and each query's sums over ``s`` are shifted by their
    maximum; both shifts cancel in ``N/D`` (the only change to the printed algorithm). Cost ``O(S(N+M)(D+D_v))``.
    """
    q, k, v = check_qkv(q, k, v, matrices=True)
    w = _omega(omega, q.shape[1])
    out = np.empty((q.shape[0], v.shape[1]))
    _alg2_kernel(np.ascontiguousarray(q), np.ascontiguousarray(k), np.ascontiguousarray(v),
                 np.ascontiguousarray(w), out)
    return out
