"""Adversarial search over a claim's hypothesis domain: try hard to find a violation.

Random Gaussian inputs rarely hit the corners where a bound is tight; universally quantified claims
(inequalities, bounds, "for every d") are therefore also attacked by minimising the claim's *margin*
(``RHS - LHS`` for ``LHS <= RHS``; negative means violated) over the stated domain. Each search cell of
the engine is one restart: restart 0 scans the box's corners and centre (boundary values such as
``m = 1``, ``z = 0`` live there) and polishes the best; the other restarts start uniformly at random.
The local optimiser is Nelder–Mead with bounds (scipy), which needs no gradients and tolerates the
kinks of maxima and absolute values. Integer axes are rounded inside the objective.

The found point is then judged by the claim: exactly when the margin is a closed form
(:func:`margin_evidence`), or by a Monte Carlo confirmation at that point.

A margin that evaluates to NaN or ``-inf`` is a violation, not a point to steer away from: an
implementation that returns NaN/inf where the claim promises a number is wrong there. The search stops at
the first such point and returns it as the witness (``margin`` NaN or ``-inf``), and :func:`margin_evidence`
rejects it. ``+inf`` means unbounded slack (e.g. an infinite right-hand side) and is not a violation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from rfkit.validation.stats import Evidence, exact_test

__all__ = ["SearchResult", "minimize_margin", "margin_evidence"]

_MAX_CORNERS = 256


@dataclass(frozen=True)
class SearchResult:
    x: np.ndarray
    margin: float
    evaluations: int
    start: np.ndarray


def _clip_round(x, lo, hi, integer):
    x = np.clip(x, lo, hi)
    if integer is not None:
        x = np.where(integer, np.round(x), x)
    return x


def minimize_margin(margin: Callable[[np.ndarray], float], bounds: Sequence[tuple[float, float]], *,
                    rng: np.random.Generator, restart: int = 0, integer: Sequence[bool] | None = None,
                    maxiter: int = 400) -> SearchResult:
    """Minimise ``margin(x)`` over the box ``bounds`` from one start (see the module docstring).

    A NaN or ``-inf`` margin ends the search at that point (a violation; see the module docstring).
    """
    lo = np.array([b[0] for b in bounds], dtype=np.float64)
    hi = np.array([b[1] for b in bounds], dtype=np.float64)
    if not (lo <= hi).all():
        raise ValueError(f"bounds must have low <= high, got {bounds}")
    integer = None if integer is None else np.asarray(integer, dtype=bool)
    evaluations = 0

    class _Broken(Exception):
        def __init__(self, x, value):
            self.x, self.value = x, value

    def objective(x):
        nonlocal evaluations
        evaluations += 1
        point = _clip_round(x, lo, hi, integer)
        value = float(margin(point))
        if math.isnan(value) or value == -math.inf:
            raise _Broken(point, value)
        return value

    start = lo + (hi - lo) * rng.random(len(lo)) if restart else 0.5 * (lo + hi)
    try:
        if restart == 0:
            n_corners = 2 ** len(lo)
            candidates = [0.5 * (lo + hi)]
            if n_corners <= _MAX_CORNERS:
                candidates += [np.where(bits, hi, lo) for bits in itertools.product([0, 1], repeat=len(lo))]
            else:
                candidates += [np.where(rng.random(len(lo)) < 0.5, hi, lo) for _ in range(_MAX_CORNERS)]
            values = [objective(c) for c in candidates]
            start = candidates[int(np.argmin(values))]
        if np.all(lo == hi):
            x = start
        else:
            # +inf margins (unbounded slack) make the simplex's convergence test inf - inf = NaN, which reads as
            # "not converged" (the search runs on, as it should); only numpy's warning about it is silenced
            with np.errstate(invalid="ignore"):
                res = optimize.minimize(objective, start, method="Nelder-Mead",
                                        bounds=list(zip(lo, hi, strict=True)),
                                        options=dict(maxiter=maxiter, xatol=1e-10, fatol=1e-14, adaptive=True))
            x = res.x if res.fun <= objective(start) else start
        x = _clip_round(x, lo, hi, integer)
        value = float(margin(x))
    except _Broken as broken:
        return SearchResult(broken.x, broken.value, evaluations, start)
    return SearchResult(x, value, evaluations, start)


def margin_evidence(margin: float, *, tolerance: float, scale: float = 1.0, extra: dict | None = None
                    ) -> Evidence:
    """Exact evidence for a closed-form margin: violated when ``-margin/scale > tolerance``.

    A NaN or ``-inf`` margin (the implementation returned no number where the claim promises one) is a
    violation of infinite size; ``+inf`` is unbounded slack.
    """
    extra = dict(extra or {}, margin=margin)
    if math.isnan(margin) or margin == -math.inf:
        return Evidence(margin, 0.0, 0.0, math.inf, 0.0, 0.0, math.inf, math.inf, 1,
                        "exact margin (non-finite value found)", (), extra=extra, validity="exact",
                        assumption="deterministic evaluation")
    value = min(margin, 0.0) / scale if math.isfinite(margin) else 0.0
    ev = exact_test(value, 0.0, tolerance=tolerance, extra=extra)
    return Evidence(margin / scale if math.isfinite(margin) else margin, 0.0, 0.0, ev.statistic, ev.p_value,
                    ev.resolution, ev.effect, ev.upper, ev.n, "exact margin", ev.flags, ev.ess, ev.extra,
                    validity="exact", assumption="deterministic evaluation")
