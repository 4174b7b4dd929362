r"""Rounding-error bounds (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 2002, §3): the
forward error of FAVOR+ computed in a floating-point precision of unit roundoff ``u``, against which
``core.favor.float32_forward_error`` judges an implementation's float32 output."""

from __future__ import annotations

import numpy as np

__all__ = ["FLOAT32_ROUNDOFF", "gamma_n", "favor_float32_bound"]

#: Unit roundoff of IEEE binary32 (round to nearest): ``u = 2^-24``.
FLOAT32_ROUNDOFF = 2.0 ** -24


def gamma_n(n: int, u: float = FLOAT32_ROUNDOFF) -> float:
    """Higham's ``γ_n = n·u / (1 - n·u)`` (Accuracy and Stability of Numerical Algorithms, 2nd ed., Lemma 3.1)."""
    if n < 0 or n * u >= 1:
        raise ValueError(f"gamma_n needs 0 <= n·u < 1; got n={n}, u={u}")
    return n * u / (1 - n * u)


def favor_float32_bound(x, omega, length: int, u: float = FLOAT32_ROUNDOFF) -> float:
    r"""First-order worst-case forward-error bound ``η`` of FAVOR+ in a precision of unit roundoff ``u``.

    Each output is a ratio ``out_i = N_i / D_i`` of two sums over ``L`` keys and ``m`` features of positive
    terms ``φ_l(q_i)φ_l(k_j)`` (times ``v_j`` in ``N``), ``φ_l(x) = m^{-1/2}exp(t_l(x))`` with the stabilised
    argument ``t_l = ω_lᵀx - ‖x‖²/2 - s``. With the rounded inputs and projection taken as exact (both
    computations see the same ones):

    * a feature's argument is a dot product of length ``d`` plus a squared norm and a shift, so its absolute
      error is at most ``γ_{d+4}·T`` with ``T = 2·max_l |ω_l|ᵀ|x| + ‖x‖²/2`` (Higham Eq 3.4-3.5 for the dot
      products; the shift is at most ``max_l |ω_lᵀx|``; +2 for the ``d^{-1/4}`` scaling and the subtractions);
      ``exp`` turns it into a relative error, and adds its own (at most one ulp, ``2u``, for a faithfully rounded
      ``exp``): ``ε_φ = 2u + γ_{d+4}·T``;
    * ``N_i`` and ``D_i`` are nested sums of ``L·m`` products of two features (and ``v_j``): a sum over keys
      inside or outside a sum over features, each recursive, blocked or pairwise, has a depth of at most ``L + m``
      additions, plus 2 multiplications: ``|N̂_i - N_i| <= (γ_{L+m+2} + 2ε_φ)
      Σ_j a_ij|v_j|`` and ``|D̂_i - D_i| <= (γ_{L+m+1} + 2ε_φ) D_i`` (Higham Lemma 3.1, Eq 3.5; the terms of ``D``
      are positive so its bound is relative);
    * the division adds ``u``; to first order ``|out̂_i - out_i| <= η·(Σ_j a_ij|v_j| + |out_i|Σ_j a_ij)/D_i`` with

    .. math::  \eta = \gamma_{L+m+3} + 2\varepsilon_\varphi,

    i.e. the condition-scaled error (:func:`~rfkit.validation.harness.condition_scale`) is at most ``η``
    (Higham §3.1-3.4: the ratio of two sums of ``L`` positive terms is ``2γ_L`` plus the features' exp error).
    ``T`` grows as ``‖x‖²``: at large norms the features' argument, not the sums, dominates. No underflow is
    assumed: a stabiliser keeps the largest feature of a row at 1. ``x``: the scaled inputs ``d^{-1/4}q`` and
    ``d^{-1/4}k`` stacked, ``(n, d)``; ``omega``: ``(m, d)``.
    """
    x, omega = np.asarray(x, dtype=np.float64), np.asarray(omega, dtype=np.float64)
    if x.ndim != 2 or omega.ndim != 2 or x.shape[1] != omega.shape[1]:
        raise ValueError(f"favor_float32_bound needs x (n, d) and omega (m, d); got {x.shape} and {omega.shape}")
    m, d = omega.shape
    argument = 2 * float((np.abs(x) @ np.abs(omega).T).max()) + 0.5 * float((x * x).sum(axis=-1).max())
    eps_features = 2 * u + gamma_n(d + 4, u) * argument
    return gamma_n(length + m + 3, u) + 2 * eps_features
