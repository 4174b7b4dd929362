r"""Random features of two classical kernels that third-party libraries implement (``rfkit audit`` compares them
with these references, written from the papers):

* :func:`random_phase_features` — Rahimi & Recht (2007)'s random Fourier features with a random phase for the
  Gaussian kernel ``k(x, y) = exp(-γ‖x - y‖²)``:

  .. math::  z(x) = \sqrt{2/m}\,\cos(Wx + b), \quad W_{ij} \sim N(0, 2γ), \quad b_i \sim U[0, 2π],

  so that ``E z(x)ᵀz(y) = k(x, y)`` (scikit-learn's ``RBFSampler``; rfkit's own estimators use the paired
  ``[sin, cos]`` map of :func:`rfkit.estimators.features.trig_features`, whose variance is smaller:
  :mod:`rfkit.theory.rff`);
* :func:`polynomial_maclaurin_features` — Kar & Karnick (2012, Sec 4)'s random Maclaurin features of the
  polynomial kernel ``(γ xᵀy + c)^p`` at a fixed degree: with ``x̃ = [√γ x, √c]`` and Rademacher ``w_{ij}``,

  .. math::  z_i(x) = m^{-1/2} \prod_{j=1}^{p} w_{ij}^\top x̃, \qquad E\, z(x)^\top z(y) = (x̃^\top ỹ)^p.

  (Macformer's random Maclaurin features of a general dot-product kernel, with a random degree, are
  :mod:`rfkit.estimators.rmf`.)

Both draw ``size`` independent maps at once and return ``(size, n, r)`` for inputs ``x (n, d)``.
"""

from __future__ import annotations

import math

import numpy as np

from rfkit.base.checks import as_float_array, check_positive_float, check_positive_int, check_rng

__all__ = ["random_phase_features", "polynomial_maclaurin_features"]


def _inputs(x) -> np.ndarray:
    x = as_float_array(x, "x")
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"x must be a non-empty (n, d) matrix, got shape {x.shape}")
    return x


def random_phase_features(x, *, gamma: float, m: int, rng, size: int = 1) -> np.ndarray:
    """``size`` independent random-phase maps of the Gaussian kernel ``exp(-γ‖x - y‖²)`` with ``m`` frequencies
    (see the module docstring): ``(size, n, m)``."""
    x = _inputs(x)
    gamma = check_positive_float(gamma, "gamma")
    m, size, rng = check_positive_int(m, "m"), check_positive_int(size, "size"), check_rng(rng)
    omega = math.sqrt(2 * gamma) * rng.standard_normal((size, m, x.shape[-1]))
    phase = rng.uniform(0.0, 2 * math.pi, size=(size, 1, m))
    return math.sqrt(2.0 / m) * np.cos(np.einsum("nd,smd->snm", x, omega) + phase)


def polynomial_maclaurin_features(x, *, gamma: float, degree: int, coef0: float, m: int, rng,
                                  size: int = 1) -> np.ndarray:
    """``size`` independent fixed-degree random Maclaurin maps of ``(γ xᵀy + c)^p`` with ``m`` components (see
    the module docstring): ``(size, n, m)``."""
    x = _inputs(x)
    gamma = check_positive_float(gamma, "gamma")
    coef0 = check_positive_float(coef0, "coef0", allow_zero=True)
    degree, m = check_positive_int(degree, "degree"), check_positive_int(m, "m")
    size, rng = check_positive_int(size, "size"), check_rng(rng)
    xt = np.concatenate([math.sqrt(gamma) * x, np.full((x.shape[0], 1), math.sqrt(coef0))], axis=1)
    w = rng.choice([-1.0, 1.0], size=(size, degree, m, xt.shape[1]))
    return np.prod(np.einsum("nd,spmd->spnm", xt, w), axis=1) / math.sqrt(m)
