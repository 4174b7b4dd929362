r"""Statistical procedures that turn measurements into evidence: a p-value and a power statement.

Every procedure returns :class:`Evidence` for the null hypothesis *"the claim holds at this cell"*:
a p-value (small = the claim is violated here), the observed violation ``effect`` and the minimal
detectable effect ``mde`` — the smallest violation this cell would detect with probability ``power`` at
level ``alpha`` — both in the units of the claim's ``tolerance``. The engine combines cells with Holm's
procedure and calls a claim *supported* only where every ``mde <= tolerance``.

Design notes (what each procedure assumes, and why it was chosen)
-----------------------------------------------------------------
**Means** (:func:`mean_test`; expectation and moment claims, paired comparisons). The mean of ``n``
iid replicates is compared with the prediction by a z statistic. Its standard error comes from the
exact per-replicate standard deviation when theory provides it (``sd=``), else from *batch means*
(``B = 32`` batches, t with ``B-1`` degrees of freedom), which stays valid for heavy-tailed replicates
whose variance is finite. Random-feature estimators are log-normal-like, so the normal approximation of
the mean can fail far in the tail even when the variance is finite: the first-order Edgeworth term of the
mean's tail probability at the critical value, ``|γ₁| (z² - 1) φ(z) / (6√n)``, is compared with the
nominal tail probability. When it is larger the normal p-value cannot be trusted: with an exact
variance the test falls back to Chebyshev's (two-sided) or Cantelli's (one-sided) inequality, which hold
for every distribution with that variance; without one, the cell is flagged ``skewed`` and cannot
refute or support. An infinite exact variance flags the cell ``infinite-variance``. The Kish effective
sample size ``(Σ|x|)²/Σx²`` of the replicates is reported, a direct view of how few draws dominate.

**Exact evaluations** (:func:`exact_test`; identities and deterministic inequalities). No randomness:
the violation is the observed error beyond round-off, ``p = 0`` if it exceeds the tolerance and ``1``
otherwise, ``mde = 0``.

**Tail bounds** (:func:`binomial_test`). Exceedance counts are binomial: the exact one-sided binomial
test (scipy ``binomtest``) of ``P(exceed) <= bound`` and a Clopper–Pearson interval; the mde is the
smallest excess probability over the bound detected with the given power, from exact binomial
quantiles.

**Rates** (:func:`slope_test`). Weighted least squares of ``log y`` on ``log x`` with delta-method
weights ``(y/se)²``; the slope's standard error is inflated by ``sqrt(χ²/dof)`` when the points scatter
more than their errors (curvature, pre-asymptotic sizes), so lack of fit widens the interval rather than
making a false refutation.

**Laws** (:func:`ks_test`). One-sample Kolmogorov–Smirnov against an exact CDF (scipy ``kstest``, exact
distribution of the statistic); the mde is the sup-distance between CDFs that the test detects with the
given power (critical value plus the power quantile of the statistic's noise, ``≈ z_β/(2√n)``).

Minimal detectable effects use the Bonferroni level the engine passes in (``alpha / cells``), which is
never less stringent than any step of Holm's procedure, so the power statements are conservative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

__all__ = [
    "Evidence",
    "mean_test",
    "exact_test",
    "binomial_test",
    "slope_test",
    "ks_test",
    "holm",
    "ALTERNATIVES",
]

#: ``two-sided``: the claim is ``mean == prediction``; ``less``: ``mean <= prediction`` (a violation is
#: a larger mean); ``greater``: ``mean >= prediction``.
ALTERNATIVES = ("two-sided", "less", "greater")

_BATCHES = 32


@dataclass(frozen=True)
class Evidence:
    """What one cell measured and the test it got. Units of ``effect``/``mde`` are the tolerance's."""

    estimate: float
    prediction: float
    stderr: float
    statistic: float
    p_value: float
    mde: float
    effect: float
    n: int
    method: str
    flags: tuple[str, ...] = ()
    ess: float = math.nan
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True if no flag prevents this cell from supporting the claim."""
        return not self.flags


def _z_crit(alpha: float, alternative: str) -> float:
    return stats.norm.isf(alpha / 2 if alternative == "two-sided" else alpha)


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"unknown alternative {alternative!r}; expected one of {ALTERNATIVES}")


def _signed_violation(diff: float, alternative: str) -> float:
    """Size of the deviation in the violating direction (0 if on the claim's side)."""
    if alternative == "two-sided":
        return abs(diff)
    return max(diff, 0.0) if alternative == "less" else max(-diff, 0.0)


def _normal_p(z: float, alternative: str) -> float:
    if alternative == "two-sided":
        return float(2 * stats.norm.sf(abs(z)))
    return float(stats.norm.sf(z) if alternative == "less" else stats.norm.cdf(z))


def mean_test(samples, prediction: float, *, alpha: float, power: float = 0.8,
              alternative: str = "two-sided", scale: float = 1.0, sd: float | None = None,
              skewness: float | None = None, extra: dict | None = None) -> Evidence:
    r"""Test ``E[X] = prediction`` (or ``<=``/``>=``) from iid replicates ``X_1..X_n``.

    Parameters
    ----------
    samples : 1-D array
        Replicates; non-finite values flag the cell.
    prediction : float
        The claimed mean.
    alpha : float
        Level of this cell's test (the engine passes the Bonferroni level of the family).
    power : float
        Power at which the minimal detectable effect is stated.
    alternative : {"two-sided", "less", "greater"}
        See :data:`ALTERNATIVES`.
    scale : float
        Effects are reported as ``(mean - prediction)/scale``: pass ``|target|`` for relative bias.
    sd, skewness : float, optional
        Exact per-replicate standard deviation and skewness (from :mod:`rfkit.theory`); ``sd = inf``
        marks an infinite variance.
    """
    _check_alternative(alternative)
    x = np.asarray(samples, dtype=np.float64).ravel()
    n = x.size
    extra = dict(extra or {})
    if n < 2 * _BATCHES and sd is None:
        raise ValueError(f"mean_test needs at least {2 * _BATCHES} replicates without an exact sd, got {n}")
    if not np.isfinite(x).all():
        return Evidence(math.nan, prediction / scale, math.nan, math.nan, 1.0, math.inf, math.nan, n,
                        "mean", ("non-finite replicates",), extra=extra)
    mean = float(x.mean())
    abs_sum = float(np.abs(x).sum())
    ess = abs_sum**2 / float((x * x).sum()) if abs_sum > 0 else float(n)
    flags: list[str] = []
    if sd is not None and not math.isfinite(sd):
        return Evidence(mean / scale, prediction / scale, math.inf, math.nan, 1.0, math.inf, math.nan, n,
                        "mean (exact variance)", ("infinite-variance",), ess, extra)
    if sd is not None:
        se, dof, method = sd / math.sqrt(n), math.inf, "z (exact variance)"
    else:
        batches = x[: n - n % _BATCHES].reshape(_BATCHES, -1).mean(axis=1)
        se, dof, method = float(batches.std(ddof=1) / math.sqrt(_BATCHES)), _BATCHES - 1, "batch-means t"
    diff = mean - prediction
    if se == 0:
        # degenerate replicates: the mean is known exactly
        violated = _signed_violation(diff, alternative) > 0
        return Evidence(mean / scale, prediction / scale, 0.0, math.inf if violated else 0.0,
                        0.0 if violated else 1.0, 0.0, _signed_violation(diff, alternative) / scale, n,
                        method + " (degenerate)", (), ess, extra)
    z = diff / se
    if math.isinf(dof):
        p = _normal_p(z, alternative)
        crit = _z_crit(alpha, alternative)
        mde = (crit + stats.norm.ppf(power)) * se
    else:
        tail = stats.t.sf(abs(z) if alternative == "two-sided" else (z if alternative == "less" else -z), dof)
        p = float(min(1.0, 2 * tail) if alternative == "two-sided" else tail)
        crit = stats.t.isf(alpha / 2 if alternative == "two-sided" else alpha, dof)
        mde = (crit + stats.t.ppf(power, dof)) * se
    gamma = skewness if skewness is not None else float(stats.skew(x))
    nominal = alpha / 2 if alternative == "two-sided" else alpha
    edgeworth = abs(gamma) * (crit**2 - 1) * stats.norm.pdf(crit) / (6 * math.sqrt(n))
    if edgeworth > nominal:
        if sd is not None:
            # distribution-free: Chebyshev (two-sided) / Cantelli (one-sided) with the exact variance
            k = _signed_violation(diff, alternative) / se
            p = 1.0 if k == 0 else float(min(1.0, 1 / k**2 if alternative == "two-sided" else 1 / (1 + k**2)))
            mde = se * (math.sqrt(1 / alpha) if alternative == "two-sided" else math.sqrt(1 / alpha - 1))
            mde += stats.norm.ppf(power) * se
            method += ", Chebyshev (skewed mean)"
        else:
            flags.append(f"skewed (mean skewness {gamma / math.sqrt(n):.3g} too large for the normal "
                         f"approximation at level {alpha:.2g})")
            p = 1.0
    return Evidence(mean / scale, prediction / scale, se / scale, z, p, mde / scale,
                    _signed_violation(diff, alternative) / scale, n, method, tuple(flags), ess, extra)


def exact_test(value, reference, *, tolerance: float, scale=1.0, extra: dict | None = None) -> Evidence:
    """Deterministic comparison: ``effect = max |value - reference| / scale`` against ``tolerance``.

    ``scale`` may be an array (e.g. a condition-scaled magnitude per entry).
    """
    v = np.asarray(value, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    err = np.abs(v - r) / np.asarray(scale, dtype=np.float64)
    if not np.isfinite(err).all():
        return Evidence(math.nan, 0.0, 0.0, math.nan, 1.0, math.inf, math.nan, int(err.size), "exact",
                        ("non-finite values",), extra=dict(extra or {}))
    worst = float(err.max(initial=0.0))
    violated = worst > tolerance
    return Evidence(worst, 0.0, 0.0, worst, 0.0 if violated else 1.0, 0.0, worst, int(err.size), "exact",
                    extra=dict(extra or {}))


def binomial_test(exceed: int, n: int, bound: float, *, alpha: float, power: float = 0.8,
                  extra: dict | None = None) -> Evidence:
    """Exact test of ``P(exceed) <= bound`` from ``exceed`` exceedances in ``n`` trials.

    ``estimate`` is the exceedance frequency, ``stderr`` its binomial standard error, ``extra`` gets the
    Clopper–Pearson interval at level ``1 - alpha``.
    """
    extra = dict(extra or {})
    bound = float(bound)
    res = stats.binomtest(int(exceed), int(n), min(max(bound, 0.0), 1.0), alternative="greater")
    ci = res.proportion_ci(confidence_level=1 - alpha, method="exact")
    extra.update(ci_low=float(ci.low), ci_high=float(ci.high))
    freq = exceed / n
    if bound >= 1:
        mde = math.inf  # a bound of 1 or more cannot be violated
    else:
        c = int(stats.binom.isf(alpha, n, bound)) + 1  # reject when exceed >= c
        if stats.binom.sf(c - 1, n, 1.0) < power:
            mde = math.inf
        else:
            p1 = optimize.brentq(lambda p: stats.binom.sf(c - 1, n, p) - power, bound, 1.0)
            mde = p1 - bound
    se = math.sqrt(max(freq * (1 - freq), 1e-300) / n)
    return Evidence(freq, bound, se, float(exceed), float(res.pvalue), mde, max(freq - bound, 0.0), int(n),
                    "exact binomial (Clopper-Pearson)", extra=extra)


def slope_test(x, y, y_se, predicted_slope: float, *, alpha: float, power: float = 0.8,
               alternative: str = "two-sided", extra: dict | None = None) -> Evidence:
    """Log-log slope of ``y`` against ``x`` (WLS with delta-method weights) versus ``predicted_slope``.

    ``y_se`` are the standard errors of ``y``. ``alternative="less"`` encodes "slope <= prediction"
    (e.g. "grows no faster than x^s", or "decays at least as fast as x^s" with s < 0).
    """
    _check_alternative(alternative)
    extra = dict(extra or {})
    x, y, se = (np.asarray(a, dtype=np.float64).ravel() for a in (x, y, y_se))
    if (y <= 0).any() or not np.isfinite(y).all() or (se <= 0).any() or x.size < 3:
        return Evidence(math.nan, predicted_slope, math.nan, math.nan, 1.0, math.inf, math.nan, int(x.size),
                        "log-log WLS", ("slope undefined (non-positive values or fewer than 3 points)",),
                        extra=extra)
    lx, ly, w = np.log(x), np.log(y), (y / se) ** 2
    design = np.column_stack([np.ones_like(lx), lx])
    cov = np.linalg.inv(design.T @ (design * w[:, None]))
    beta = cov @ (design.T @ (w * ly))
    resid = ly - design @ beta
    dof = x.size - 2
    chi2 = float((w * resid**2).sum())
    inflate = max(1.0, math.sqrt(chi2 / dof)) if dof > 0 else 1.0
    slope, slope_se = float(beta[1]), math.sqrt(cov[1, 1]) * inflate
    extra.update(intercept=float(beta[0]), chi2=chi2, dof=dof, inflation=inflate)
    diff = slope - predicted_slope
    z = diff / slope_se
    mde = (_z_crit(alpha, alternative) + stats.norm.ppf(power)) * slope_se
    return Evidence(slope, predicted_slope, slope_se, z, _normal_p(z, alternative), mde,
                    _signed_violation(diff, alternative), int(x.size), "log-log WLS slope", extra=extra)


def ks_test(samples, cdf, *, alpha: float, power: float = 0.8, extra: dict | None = None) -> Evidence:
    """One-sample Kolmogorov–Smirnov test of ``samples`` against the exact ``cdf`` (a callable)."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    res = stats.kstest(x, cdf, method="exact" if x.size <= 10_000 else "asymp")
    crit = float(stats.kstwo.isf(alpha, x.size))
    mde = crit + stats.norm.ppf(power) / (2 * math.sqrt(x.size))
    return Evidence(float(res.statistic), 0.0, 1 / (2 * math.sqrt(x.size)), float(res.statistic),
                    float(res.pvalue), mde, float(res.statistic), int(x.size), "Kolmogorov-Smirnov",
                    extra=dict(extra or {}))


def holm(p_values, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down procedure (statsmodels): ``(reject, adjusted p-values)``."""
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(p_values, dtype=np.float64)
    if p.size == 0:
        return np.zeros(0, bool), np.zeros(0)
    reject, adjusted, _, _ = multipletests(p, alpha=alpha, method="holm")
    return reject, adjusted
