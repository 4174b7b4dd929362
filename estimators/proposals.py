r"""Proposal distributions ``ρ(ω)`` for importance-sampled random features: one protocol, one log ratio.

Every proposal in rfkit (EVA's :class:`GaussianProposal` / :class:`GaussianMixtureProposal`, the MIS family
:class:`~rfkit.estimators.mis.GaussianProposals`, the mixtures :class:`~rfkit.estimators.ra.GaussianMixtures`,
LARA's :class:`~rfkit.estimators.lara.LaraProposals`) follows :class:`Proposal`:

* ``dim`` — the dimension ``d`` of ``ω``;
* ``sample(rng, size)`` — ``size`` iid draws per proposal, shape ``(..., size, d)`` (the leading axes are the
  proposal's batch: one proposal per query, chunk or mixture component ``c``);
* ``logpdf(omega)`` — ``log ρ(ω)`` for ``omega (..., S, d)`` with the same leading axes, shape ``(..., S)``:
  each proposal at its own points.

Families of ``C`` proposals also offer ``logpdf_cross(omega)``: every proposal at every point, ``(..., d)`` ->
``(..., C)`` (the balance heuristic's table). :func:`log_ratio` is the density ratio to ``N(0, I)`` used by every
estimator (EVA's ``r(ω)``, LARA's ``N(ω; 0, I)/q_c(ω)``): the closed form ``-ω·μ + ‖μ‖²/2`` for unit-covariance
Gaussians (a proposal says it is one through ``unit_gaussian_means``), ``log N(ω; 0, I) - log ρ(ω)`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from rfkit.base.checks import as_float_array, check_positive_float, check_positive_int, check_rng
from rfkit.base.numerics import LOG_2PI, half_sq_norm, log_normal, logsumexp

__all__ = ["Proposal", "GaussianProposal", "GaussianMixtureProposal", "log_ratio"]


@runtime_checkable
class Proposal(Protocol):
    """A proposal ``ρ`` (or a batch of them along leading axes): ``dim``, ``sample(rng, size)``, ``logpdf(omega)``."""

    @property
    def dim(self) -> int: ...

    def sample(self, rng, size: int) -> np.ndarray:
        """``size`` iid draws per proposal: shape ``(..., size, dim)``."""
        ...

    def logpdf(self, omega) -> np.ndarray:
        """``log ρ(ω)`` at ``omega (..., S, dim)`` (each proposal at its own points): shape ``(..., S)``."""
        ...


def log_ratio(proposal, omega) -> np.ndarray:
    r"""``log N(ω; 0, I) - log ρ(ω)`` at ``omega (..., S, d)`` drawn from ``proposal``: shape ``(..., S)``.

    Unit-covariance Gaussians ``N(μ, I)`` (``proposal.unit_gaussian_means`` not ``None``): the closed form
    ``-ω·μ + ‖μ‖²/2`` (register ``lara.derived.gaussian_density_ratio``; no cancellation of ``‖ω‖²/2``);
    otherwise the difference of log densities.

    Examples
    --------
    >>> log_ratio(GaussianProposal(np.zeros(2)), np.ones((3, 2)))
    array([0., 0., 0.])
    """
    omega = as_float_array(omega, "omega", min_ndim=1)
    mu = getattr(proposal, "unit_gaussian_means", None)
    if mu is None:
        return log_normal(omega) - proposal.logpdf(omega)
    mu = mu[..., None, :] if mu.ndim > 1 else mu
    return -np.einsum("...i,...i->...", omega, mu) + half_sq_norm(mu)


@dataclass(frozen=True)
class GaussianProposal:
    r"""Proposal ``ρ = N(μ, τ² I_d)``; ``mean`` may carry leading axes (one proposal per query or chunk).

    Examples
    --------
    >>> p = GaussianProposal(np.zeros(2))
    >>> p.sample(0, 3).shape
    (3, 2)
    """

    mean: np.ndarray
    scale: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "mean", as_float_array(self.mean, "mean", min_ndim=1))
        object.__setattr__(self, "scale", check_positive_float(self.scale, "scale"))

    @property
    def dim(self) -> int:
        return self.mean.shape[-1]

    @property
    def unit_gaussian_means(self) -> np.ndarray | None:
        """``μ`` when ``τ = 1`` (the closed-form :func:`log_ratio`), else ``None``."""
        return self.mean if self.scale == 1.0 else None

    def sample(self, rng, size: int) -> np.ndarray:
        """``size`` iid draws: shape ``mean.shape[:-1] + (size, d)``."""
        rng = check_rng(rng)
        size = check_positive_int(size, "size")
        noise = rng.standard_normal(self.mean.shape[:-1] + (size, self.dim))
        return self.mean[..., None, :] + self.scale * noise

    def logpdf(self, omega) -> np.ndarray:
        """``log ρ(ω)`` for ``ω`` of shape ``(..., S, d)`` (``mean`` broadcast over the sample axis)."""
        omega = as_float_array(omega, "omega", min_ndim=1)
        z = (omega - self.mean[..., None, :]) / self.scale if self.mean.ndim > 1 else (omega - self.mean) / self.scale
        return -half_sq_norm(z) - self.dim * (0.5 * LOG_2PI + math.log(self.scale))


@dataclass(frozen=True)
class GaussianMixtureProposal:
    r"""Proposal ``ρ = Σ_j π_j N(μ_j, τ_j² I_d)`` (a full-support non-Gaussian proposal for "any ρ" sweeps)."""

    means: np.ndarray
    scales: np.ndarray
    weights: np.ndarray

    def __post_init__(self):
        means = as_float_array(self.means, "means", ndim=2)
        scales = as_float_array(self.scales, "scales", ndim=1)
        weights = as_float_array(self.weights, "weights", ndim=1)
        if not (scales.shape[0] == weights.shape[0] == means.shape[0]):
            raise ValueError("means, scales and weights need one entry per component")
        if (scales <= 0).any() or (weights < 0).any() or not np.isclose(weights.sum(), 1.0):
            raise ValueError("scales must be > 0 and weights a probability vector")
        object.__setattr__(self, "means", means)
        object.__setattr__(self, "scales", scales)
        object.__setattr__(self, "weights", weights)

    @property
    def dim(self) -> int:
        return self.means.shape[-1]

    def sample(self, rng, size: int) -> np.ndarray:
        """``size`` iid draws, shape ``(size, d)``: a component index, then its Gaussian."""
        rng = check_rng(rng)
        size = check_positive_int(size, "size")
        comp = rng.choice(self.weights.shape[0], size=size, p=self.weights)
        return self.means[comp] + self.scales[comp, None] * rng.standard_normal((size, self.dim))

    def logpdf(self, omega) -> np.ndarray:
        """``log ρ(ω) = LSE_j(log π_j + log N(ω; μ_j, τ_j² I))`` for ``omega (..., d)``."""
        omega = as_float_array(omega, "omega", min_ndim=1)
        z = (omega[..., None, :] - self.means) / self.scales[:, None]
        comp = -half_sq_norm(z) - self.dim * (0.5 * LOG_2PI + np.log(self.scales))
        with np.errstate(divide="ignore"):
            return logsumexp(comp + np.log(self.weights), axis=-1)
