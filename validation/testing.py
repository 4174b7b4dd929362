"""Statistical assertions for a user's pytest suite: regression-test estimator math with stated power.

Each assertion runs one of :mod:`rfkit.validation.stats`' procedures and raises ``AssertionError`` with
the evidence (the witness) when the estimator violates the property by more than ``tolerance`` at level
``alpha``, when the test cannot be trusted (heavy tails), or — given a ``tolerance`` — when it cannot
establish the property to within it (its resolution or its upper confidence bound on the violation
exceeds ``tolerance``). It returns the :class:`~rfkit.validation.stats.Evidence` otherwise; its
``validity`` says what the pass rests on.

The mean assertions take either a fixed array of replicates or a *sampler* ``draw(rng, n) -> n
replicates``: with a sampler the same anytime-valid confidence sequence as ``rfkit validate`` runs in
rounds and stops as soon as the property is decided, spending at most ``budget`` replicates. A
deterministic test (fixed seed) fails with probability at most ``alpha`` over seeds when the property
holds: choose ``alpha`` as the false-failure rate you accept.

One declaration assertion, for a claims module's tests: :func:`assert_readings_cover_domain` (the cells of a
tier cover the domain of every deciding reading, as the engine requires before it supports the claim).

Example
-------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> ev = assert_unbiased(rng.normal(1.0, 1.0, 10_000), 1.0, tolerance=0.1)
>>> ev.p_value > 1e-3
True
>>> ev = assert_unbiased(lambda rng, n: rng.normal(1.0, 1.0, n), 1.0, tolerance=0.1, sd=1.0)
>>> ev.validity, ev.n < 100_000
('non-asymptotic', True)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rfkit.validation.domain import domain_coverage
from rfkit.validation.model import Claim
from rfkit.validation.stats import Evidence, binomial_test, mean_test, sequential_mean, slope_test

__all__ = ["assert_unbiased", "assert_moment_matches", "assert_tail_bound", "assert_rate",
           "assert_readings_cover_domain"]


def _describe(ev: Evidence) -> str:
    return (f"estimate {ev.estimate:.6g} vs prediction {ev.prediction:.6g} (stderr {ev.stderr:.3g}, "
            f"statistic {ev.statistic:.3g}, p = {ev.p_value:.3g}, n = {ev.n}, {ev.method}; "
            f"resolution {ev.resolution:.3g}; validity {ev.validity})")


def _mean(samples, target, *, alpha, tolerance, scale, sd, bounds, budget, seed, power) -> Evidence:
    kw = dict(alpha=alpha, tolerance=tolerance or 0.0, scale=scale, sd=sd, bounds=bounds, power=power)
    if callable(samples):
        return sequential_mean(samples, target, rng=np.random.default_rng(seed), budget=budget, **kw)
    return mean_test(samples, target, **kw)


def _judge(ev: Evidence, what: str, alpha: float, tolerance: float | None) -> Evidence:
    if ev.flags:
        raise AssertionError(f"cannot test {what}: {'; '.join(ev.flags)} — {_describe(ev)}")
    if ev.p_value < alpha:
        raise AssertionError(f"{what} violated at alpha = {alpha:g}: {_describe(ev)}")
    if tolerance is not None and not ev.upper <= tolerance:
        if not ev.resolution <= tolerance:
            raise AssertionError(f"test of {what} underpowered: its confidence radius {ev.resolution:.3g} exceeds "
                                 f"tolerance {tolerance:g}; add replicates — {_describe(ev)}")
        raise AssertionError(f"{what} not established: a violation up to {ev.upper:.3g} (> tolerance "
                             f"{tolerance:g}) cannot be excluded — {_describe(ev)}")
    return ev


Sampler = Callable[[np.random.Generator, int], np.ndarray]


def assert_unbiased(samples: np.ndarray | Sampler, target: float, *, alpha: float = 1e-3,
                    tolerance: float | None = None, relative: bool = True, sd: float | None = None,
                    bounds: tuple[float, float] | None = None, budget: int = 100_000, seed: int = 0,
                    power: float = 0.8) -> Evidence:
    """Assert ``E[estimate] = target`` from iid replicates of an estimator (an array, or a sampler).

    ``tolerance`` is the smallest bias that matters (relative to ``|target|`` when ``relative``);
    ``sd`` a bound on the per-replicate standard deviation if known (a non-asymptotic Catoni-style
    sequence; else asymptotic), ``bounds`` the range of one replicate if bounded (a betting sequence).
    ``budget`` and ``seed`` apply to a sampler.
    """
    scale = abs(target) if relative and target != 0 else 1.0
    ev = _mean(samples, target, alpha=alpha, tolerance=tolerance, scale=scale, sd=sd, bounds=bounds,
               budget=budget, seed=seed, power=power)
    return _judge(ev, "unbiasedness", alpha, tolerance)


def assert_moment_matches(squared_errors: np.ndarray | Sampler, predicted: float, *, alpha: float = 1e-3,
                          tolerance: float | None = None, sd: float | None = None, budget: int = 100_000,
                          seed: int = 0, power: float = 0.8) -> Evidence:
    """Assert ``E[(T - θ)²] = predicted`` (an MSE or variance formula) from replicates' squared errors
    (an array, or a sampler of them). Effects are relative: ``estimate = MSE_hat / predicted`` against 1.
    """
    if not predicted > 0:
        raise ValueError(f"predicted must be > 0, got {predicted}")
    ev = _mean(squared_errors, predicted, alpha=alpha, tolerance=tolerance, scale=predicted, sd=sd, bounds=None,
               budget=budget, seed=seed, power=power)
    return _judge(ev, "the moment formula", alpha, tolerance)


def assert_tail_bound(exceedances: int, n: int, bound: float, *, alpha: float = 1e-3,
                      tolerance: float | None = None, power: float = 0.8) -> Evidence:
    """Assert ``P(exceed) <= bound`` from ``exceedances`` out of ``n`` independent trials."""
    ev = binomial_test(exceedances, n, bound, alpha=alpha, power=power, tolerance=tolerance or 0.0)
    return _judge(ev, f"the tail bound {bound:g}", alpha, tolerance)


def assert_rate(x, y, y_se, slope: float, *, alpha: float = 1e-3, tolerance: float | None = None,
                alternative: str = "two-sided", power: float = 0.8) -> Evidence:
    """Assert that ``y`` scales as ``x**slope`` (log-log slope, WLS with the standard errors ``y_se``)."""
    ev = slope_test(x, y, y_se, slope, alpha=alpha, power=power, alternative=alternative,
                    tolerance=tolerance or 0.0)
    if tolerance is not None and math.isnan(ev.estimate):
        raise AssertionError(f"rate undefined: {'; '.join(ev.flags)}")
    return _judge(ev, f"the rate x^{slope:g}", alpha, tolerance)


def assert_readings_cover_domain(claim: Claim, tier: str) -> None:
    """Assert that the grid of ``tier`` covers the domain of every deciding reading of ``claim``.

    For each reading in ``claim.deciding()`` (neither a narrowing nor reported beside the verdict),
    :func:`~rfkit.validation.domain.domain_coverage` of ``claim.reading_domain(reading)`` by
    ``claim.cells(tier, reading)`` (the axes in ``claim.searched`` count as covered by the search) must hold:
    otherwise the engine could never support the claim at that tier. Raises ``AssertionError`` with
    ``(claim id, tier, reading, the missing parts)`` for the first reading that is not covered, or when the
    claim declares no domain.

    Example (in a paper's test module)::

        @pytest.mark.parametrize("tier", ["smoke", "quick"])
        @pytest.mark.parametrize("claim_id", IDS)
        def test_every_deciding_reading_covers_its_domain(claim_id, tier):
            assert_readings_cover_domain(get_claim(claim_id), tier)
    """
    if claim.domain is None:
        raise AssertionError(f"claim {claim.id} declares no domain, so no reading of it can cover one")
    for reading in claim.deciding():
        covered, text = domain_coverage(claim.reading_domain(reading), claim.cells(tier, reading), claim.searched)
        if not covered:
            raise AssertionError((claim.id, tier, reading, text))
