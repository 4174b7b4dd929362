r"""Random Fourier features of the Gaussian kernel: exact moments of the random-phase and the paired maps.

The Gaussian kernel in scikit-learn's parametrisation is ``k(Δ) = exp(-γ‖Δ‖²)``, ``Δ = x - y``; by Bochner's
theorem ``k(Δ) = E cos(ωᵀΔ)`` for ``ω ~ N(0, 2γ I_d)`` (Rahimi & Recht 2007, Eq 2). Two maps estimate it with
``m`` random frequencies ``ω_1..ω_m``:

* **random phase** (Rahimi & Recht 2007, Claim 1; scikit-learn's ``RBFSampler``):
  ``z(x) = √(2/m)·cos(Wx + b)``, ``b_i ~ U[0, 2π]``, ``m`` features. Per frequency,
  ``2 cos(ωᵀx + b) cos(ωᵀy + b) = cos(ωᵀΔ) + cos(ωᵀ(x + y) + 2b)``; the second term has mean 0 and
  variance 1/2 and is uncorrelated with the first, so one term has

  ``Var = (1 + k(2Δ))/2 - k(Δ)² + 1/2 = 1 + k(2Δ)/2 - k(Δ)²``;

* **paired** (Sutherland & Schneider 2015, Eq 1; GPyTorch's ``RFFKernel``, rfkit's trigonometric map):
  ``z(x) = m^{-1/2}·[cos(Wx), sin(Wx)]``, ``2m`` features; one term is ``cos(ωᵀΔ)`` and

  ``Var = E cos²(ωᵀΔ) - k(Δ)² = (1 + k(2Δ))/2 - k(Δ)²``,

using ``E cos(2ωᵀΔ) = k(2Δ) = exp(-4γ‖Δ‖²)``. The random-phase map's term variance is larger by exactly 1/2
for every ``Δ`` (Sutherland & Schneider 2015, Sec 2), at the same number of frequencies. The estimate (the mean
of ``m`` iid terms) has variance ``Var/m``; its mean is ``k(Δ)`` for both maps.

Higher moments (for the spread of the squared error, :func:`rff_squared_error_sd`): with ``C = cos(ωᵀΔ)``,
``E C^j`` follows from ``cos^j`` as a sum of ``cos(iωᵀΔ)`` and ``E cos(iωᵀΔ) = k(iΔ) = exp(-γ i²‖Δ‖²)``; the
random-phase term is ``T = C + P``, ``P = cos(ωᵀ(x + y) + 2b)``, whose moments given ``ω`` are those of the cosine
of a uniform angle (``0, 1/2, 0, 3/8``), so ``E T² = E C² + 1/2``, ``E T³ = E C³ + (3/2) E C`` and
``E T⁴ = E C⁴ + 3 E C² + 3/8``.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["RFF_MAPS", "gaussian_kernel_value", "rff_term_variance", "rff_variance", "rff_term_raw_moments",
           "rff_squared_error_sd"]

#: The two random-Fourier-feature maps of the Gaussian kernel this module has moments for.
RFF_MAPS = ("phase", "paired")


def _check(sq_dist: float, gamma: float) -> None:
    if not (math.isfinite(sq_dist) and sq_dist >= 0):
        raise ValueError(f"sq_dist must be a finite number >= 0, got {sq_dist}")
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a finite number > 0, got {gamma}")


def gaussian_kernel_value(sq_dist: float, gamma: float) -> float:
    """``k(Δ) = exp(-γ‖Δ‖²)`` from ``sq_dist = ‖Δ‖²`` (scikit-learn's ``rbf_kernel`` parametrisation).

    >>> gaussian_kernel_value(0.0, 2.0)
    1.0
    """
    _check(sq_dist, gamma)
    return math.exp(-gamma * sq_dist)


def rff_term_variance(kind: str, sq_dist: float, gamma: float) -> float:
    """Variance of one frequency's term of the ``kind`` map (``"phase"`` or ``"paired"``), module docstring.

    ``phase``: ``1 + k(2Δ)/2 - k(Δ)²``; ``paired``: ``(1 + k(2Δ))/2 - k(Δ)²``, with ``k(2Δ) = exp(-4γ‖Δ‖²)``.

    >>> rff_term_variance("paired", 0.0, 1.0)  # Δ = 0: every term is cos(0) = 1
    0.0
    >>> rff_term_variance("phase", 0.0, 1.0)   # the random phase still contributes its 1/2
    0.5
    """
    if kind not in RFF_MAPS:
        raise ValueError(f"unknown random Fourier feature map {kind!r}; expected one of {RFF_MAPS}")
    k1 = gaussian_kernel_value(sq_dist, gamma)
    k2 = gaussian_kernel_value(4.0 * sq_dist, gamma)
    paired = 0.5 * (1.0 + k2) - k1 * k1
    return max(paired, 0.0) + (0.5 if kind == "phase" else 0.0)


def rff_variance(kind: str, sq_dist: float, gamma: float, m: int) -> float:
    """Variance ``rff_term_variance(kind, ...)/m`` of the ``m``-frequency estimate of ``k(Δ)``."""
    if not (isinstance(m, numbers.Integral) and m >= 1):
        raise ValueError(f"m must be an integer >= 1, got {m!r}")
    return rff_term_variance(kind, sq_dist, gamma) / m


def rff_term_raw_moments(kind: str, sq_dist: float, gamma: float) -> tuple[float, float, float, float]:
    """``(E T, E T², E T³, E T⁴)`` of one frequency's term ``T`` of the ``kind`` map (module docstring).

    ``E C = k₁``, ``E C² = (1 + k₂)/2``, ``E C³ = (3k₁ + k₃)/4``, ``E C⁴ = (3 + 4k₂ + k₄)/8`` with
    ``k_i = exp(-γ i²‖Δ‖²)``.

    >>> rff_term_raw_moments("phase", 0.0, 1.0)  # C = 1: T = 1 + P
    (1.0, 1.5, 2.5, 4.375)
    """
    if kind not in RFF_MAPS:
        raise ValueError(f"unknown random Fourier feature map {kind!r}; expected one of {RFF_MAPS}")
    k = [gaussian_kernel_value(i * i * sq_dist, gamma) for i in range(5)]
    c1, c2, c3, c4 = k[1], (1 + k[2]) / 2, (3 * k[1] + k[3]) / 4, (3 + 4 * k[2] + k[4]) / 8
    if kind == "paired":
        return c1, c2, c3, c4
    return c1, c2 + 0.5, c3 + 1.5 * c1, c4 + 3 * c2 + 0.375


def rff_squared_error_sd(kind: str, sq_dist: float, gamma: float, m: int) -> float:
    """Standard deviation of the squared error ``(k̂ - k(Δ))²`` of the ``m``-frequency estimate.

    For a mean of ``m`` iid terms with central moments ``σ², μ₄``: ``E(k̂ - k)⁴ = μ₄/m³ + 3(m - 1)σ⁴/m³``, so
    ``Var (k̂ - k)² = E(k̂ - k)⁴ - σ⁴/m²``.
    """
    var = rff_variance(kind, sq_dist, gamma, m)
    e1, e2, e3, e4 = rff_term_raw_moments(kind, sq_dist, gamma)
    mu4 = e4 - 4 * e1 * e3 + 6 * e1 * e1 * e2 - 3 * e1**4
    sigma2 = var * m
    fourth = mu4 / m**3 + 3 * (m - 1) * sigma2 * sigma2 / m**3
    return math.sqrt(max(fourth - var * var, 0.0))
