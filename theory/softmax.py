r"""Exact moments of the softmax-kernel random-feature estimators with iid Gaussian projections.

For a pair ``(x, y)`` let ``z = x + y``, ``Δ = x - y``, ``s = ‖z‖²``, ``t = ‖Δ‖²`` and
``Λ = exp(-(‖x‖²+‖y‖²)/2)`` (Performer ``003_4855bc6ab225d7a6.txt``, Sec 2.3, Lemma 1-2). One random
feature term with ``ω ~ N(0, I_d)`` is

* positive:    ``T = Λ exp(ωᵀz)``,                   ``ωᵀz ~ N(0, s)``;
* hyperbolic:  ``T = Λ cosh(ωᵀz)``;
* trig:        ``T = exp((‖x‖²+‖y‖²)/2) cos(ωᵀΔ)``,   ``ωᵀΔ ~ N(0, t)``;

and the estimator is the mean of ``m`` iid terms. Raw moments follow from the binomial expansion of
``cosh^k`` and ``cos^k`` and the Gaussian MGF / characteristic function:

.. math::

    E\,e^{kωᵀz} = e^{k^2 s/2},\quad
    E\cosh^k(ωᵀz) = 2^{-k}\sum_j \binom{k}{j} e^{(k-2j)^2 s/2},\quad
    E\cos^k(ωᵀΔ) = 2^{-k}\sum_j \binom{k}{j} e^{-(k-2j)^2 t/2}.

With ``k = 1, 2`` these give Lemma 2's MSEs, e.g. ``MSE(SM⁺_m) = SM²(e^{s} - 1)/m`` and
``MSE(SM^trig_m) = e^{‖x‖²+‖y‖²}(1 - e^{-t})²/(2m)`` (Eqs 8, 14, 18). Everything is computed in log
space where it can overflow and returns ``inf`` rather than overflowing silently.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ESTIMATORS", "pair_quantities", "term_raw_moment", "term_variance", "estimator_moments"]

#: Feature kinds with exact iid moments here (names as in :data:`rfkit.estimators.FEATURE_MAPS`).
ESTIMATORS = ("positive", "hyperbolic", "trig")


def pair_quantities(x, y) -> dict[str, float]:
    """``s = ‖x+y‖²``, ``t = ‖x-y‖²``, ``log Λ`` and ``log SM = xᵀy`` for one pair of vectors."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return dict(s=float((x + y) @ (x + y)), t=float((x - y) @ (x - y)),
                log_lam=float(-(x @ x + y @ y) / 2), log_sm=float(x @ y))


def _log_sum_binomial(k: int, exponent) -> float:
    """``log(2^{-k} Σ_j C(k, j) exp(exponent(k - 2j)))``."""
    terms = [math.log(math.comb(k, j)) + exponent(k - 2 * j) for j in range(k + 1)]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms)) - k * math.log(2)


def term_raw_moment(kind: str, x, y, k: int) -> float:
    """``E[T^k]`` of one feature term (see module docstring); ``inf`` if it exceeds float64."""
    if kind not in ESTIMATORS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {ESTIMATORS}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    q = pair_quantities(x, y)
    if kind == "positive":
        log_m = k * q["log_lam"] + k * k * q["s"] / 2
        return _exp_or_inf(log_m)
    if kind == "hyperbolic":
        return _exp_or_inf(k * q["log_lam"] + _log_sum_binomial(k, lambda a: a * a * q["s"] / 2))
    # trig: E cos^k can be negative for odd k; expand directly (terms are bounded by 1)
    scale = -k * q["log_lam"]
    e_cos = sum(math.comb(k, j) * math.exp(-((k - 2 * j) ** 2) * q["t"] / 2) for j in range(k + 1)) / 2**k
    return _exp_or_inf(scale) * e_cos


def _exp_or_inf(log_value: float) -> float:
    return math.exp(log_value) if log_value < 709.0 else math.inf


def term_variance(kind: str, x, y) -> float:
    """``Var[T]`` of one term in cancellation-free closed form (Performer Lemma 2, Eqs 14 and 18):

    positive ``Λ² e^s (e^s - 1)``, hyperbolic ``Λ² (e^s - 1)² / 2``, trig ``e^{‖x‖²+‖y‖²}(1 - e^{-t})² / 2``.
    """
    if kind not in ESTIMATORS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {ESTIMATORS}")
    q = pair_quantities(x, y)
    if kind == "positive":
        return _exp_or_inf(2 * q["log_lam"] + q["s"] + _log_expm1(q["s"]))
    if kind == "hyperbolic":
        return _exp_or_inf(2 * q["log_lam"] + 2 * _log_expm1(q["s"]) - math.log(2))
    return _exp_or_inf(-2 * q["log_lam"] + 2 * _log_or_ninf(-math.expm1(-q["t"])) - math.log(2))


def _log_or_ninf(value: float) -> float:
    return math.log(value) if value > 0 else -math.inf


def _log_expm1(s: float) -> float:
    """``log(e^s - 1)`` for ``s >= 0`` without overflow."""
    return s + math.log1p(-math.exp(-s)) if s > 30 else _log_or_ninf(math.expm1(s))


def estimator_moments(kind: str, x, y, m: int) -> dict[str, float]:
    """Mean, variance, standard deviation and skewness of the ``m``-term iid estimator of ``SM(x, y)``.

    The mean equals ``SM(x, y) = exp(xᵀy)`` for every kind (unbiasedness). Skewness is ``nan`` when the
    variance is 0 (e.g. ``x = y`` for trig features, or ``z = 0``).
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    mu1, mu3 = term_raw_moment(kind, x, y, 1), term_raw_moment(kind, x, y, 3)
    var1 = term_variance(kind, x, y)
    if not math.isfinite(var1):
        return dict(mean=mu1, var=math.inf, sd=math.inf, skewness=math.nan)
    third = mu3 - 3 * mu1 * var1 - mu1**3 if math.isfinite(mu3) else math.inf
    skew1 = third / var1**1.5 if var1 > 0 else math.nan
    return dict(mean=mu1, var=var1 / m, sd=math.sqrt(var1 / m), skewness=skew1 / math.sqrt(m))
