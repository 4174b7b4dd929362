r"""Statistical procedures that turn measurements into evidence about one sweep cell.

Every procedure tests the *interval* null hypothesis "the claim holds at this cell up to its tolerance":
the violation — the deviation from the prediction in the violating direction, in the units of the
claim's ``tolerance`` — is at most ``tolerance``. Tolerance is the smallest effect that matters, so a
statistically significant deviation smaller than it (round-off, a pre-asymptotic correction) is not a
refutation. Each returns :class:`Evidence`:

* ``p_value`` — of the interval null (small: violated by more than the tolerance);
* ``effect`` — the observed violation; ``upper`` — its upper confidence bound at level ``1 - alpha``;
* ``mde`` — the minimal detectable effect: the deviation from the prediction detected with probability
  ``power`` at level ``alpha`` (``(z_α + z_β)·se`` for normal statistics), the cell's resolution.

The engine calls a claim *refuted* when Holm's procedure rejects some cell at family-wise level alpha,
and *supported* only when every cell has ``upper <= tolerance`` and ``mde <= tolerance``: with
confidence ``1 - alpha`` every deviation it looked at is within the tolerance, and it could have
resolved one of that size (an equivalence test, two one-sided tests in spirit).

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
for every distribution with that variance; without one, the cell is flagged ``skewed`` and can neither
refute nor support. Sample skewness itself understates heavy tails, so without an exact variance a cell
is also flagged when a single replicate carries more than 20% of the sample variance (for finite-variance
light tails that share is ``O(log n / n)``). An infinite exact variance flags the cell
``infinite-variance``. The Kish effective sample size ``(Σ|x|)²/Σx²`` is reported, a direct view of how
few draws dominate.

**Exact evaluations** (:func:`exact_test`; identities and deterministic inequalities). No randomness:
the violation is the observed error, ``p = 0`` if it exceeds the tolerance and ``1`` otherwise.

**Tail bounds** (:func:`binomial_test`). Exceedance counts are binomial: the exact one-sided binomial
test (scipy ``binomtest``) of ``P(exceed) <= bound + tolerance`` and a Clopper–Pearson interval; the
mde is the excess probability over the bound detected with the given power, from exact binomial
quantiles.

**Rates** (:func:`slope_test`). Weighted least squares of ``log y`` on ``log x`` with delta-method
weights ``(y/se)²``; the slope's standard error is inflated by ``sqrt(χ²/dof)`` when the points scatter
more than their errors (curvature, pre-asymptotic sizes), so lack of fit widens the interval rather than
making a false refutation.

**Laws** (:func:`ks_test`). One-sample Kolmogorov–Smirnov against an exact CDF (scipy ``kstest``). The
violation is the sup-distance between the true and the claimed CDF; the triangle inequality bounds it by
the observed statistic plus the statistic's noise, whose exact law (``kstwo``) gives the p-value of
"distance <= tolerance" and the upper bound.

Levels passed in by the engine are Bonferroni levels (``alpha / cells``), never less stringent than any
step of Holm's procedure, so the power statements and bounds are conservative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

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
    "combine",
    "required_replicates",
    "ALTERNATIVES",
]

#: ``two-sided``: the claim is ``mean == prediction``; ``less``: ``mean <= prediction`` (a violation is
#: a larger mean); ``greater``: ``mean >= prediction``.
ALTERNATIVES = ("two-sided", "less", "greater")

_BATCHES = 32
#: Largest share of the sample variance one replicate may carry before the sample variance is distrusted.
_MAX_SHARE = 0.2


@dataclass(frozen=True)
class Evidence:
    """What one cell measured and the test it got. ``effect``, ``upper`` and ``mde`` are in tolerance units."""

    estimate: float
    prediction: float
    stderr: float
    statistic: float
    p_value: float
    mde: float
    effect: float
    upper: float
    n: int
    method: str
    flags: tuple[str, ...] = ()
    ess: float = math.nan
    extra: dict = field(default_factory=dict)


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"unknown alternative {alternative!r}; expected one of {ALTERNATIVES}")


def _signed_violation(diff: float, alternative: str) -> float:
    """Deviation in the violating direction (negative: on the claim's side; two-sided: ``|diff|``)."""
    if alternative == "two-sided":
        return abs(diff)
    return diff if alternative == "less" else -diff


@dataclass(frozen=True)
class _Law:
    """Sampling law of a standardised statistic: normal (``dof = inf``) or Student t."""

    dof: float = math.inf

    def sf(self, z):
        return stats.norm.sf(z) if math.isinf(self.dof) else stats.t.sf(z, self.dof)

    def isf(self, q):
        return stats.norm.isf(q) if math.isinf(self.dof) else stats.t.isf(q, self.dof)

    def ppf(self, q):
        return stats.norm.ppf(q) if math.isinf(self.dof) else stats.t.ppf(q, self.dof)


def _interval(diff: float, se: float, tol: float, law: _Law, alpha: float, power: float, alternative: str):
    """``(p, upper, mde, crit)`` for the null ``violation <= tol`` given a normal/t statistic."""
    v = _signed_violation(diff, alternative)
    if alternative == "two-sided":
        p = law.sf((v - tol) / se) + law.sf((v + tol) / se)
        crit = law.isf(alpha / 2)
    else:
        p = law.sf((v - tol) / se)
        crit = law.isf(alpha)
    upper = max(v + law.isf(alpha) * se, 0.0) if alternative != "two-sided" else v + crit * se
    return float(min(p, 1.0)), upper, (crit + law.ppf(power)) * se, crit


def mean_test(samples, prediction: float, *, alpha: float, power: float = 0.8, tolerance: float = 0.0,
              alternative: str = "two-sided", scale: float = 1.0, sd: float | None = None,
              skewness: float | None = None, extra: dict | None = None) -> Evidence:
    r"""Test ``E[X] = prediction`` (or ``<=``/``>=``) up to ``tolerance`` from iid replicates.

    Parameters
    ----------
    samples : 1-D array
        Replicates; non-finite values flag the cell.
    prediction : float
        The claimed mean.
    alpha, power : float
        Level of this cell's test (the engine passes the Bonferroni level of the family) and the power
        at which the minimal detectable effect is stated.
    tolerance : float
        Violations up to this size (in units of ``scale``) are not violations.
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
    pred = prediction / scale
    if n < 2 * _BATCHES and sd is None:
        raise ValueError(f"mean_test needs at least {2 * _BATCHES} replicates without an exact sd, got {n}")
    if not np.isfinite(x).all():
        return Evidence(math.nan, pred, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, n, "mean",
                        ("non-finite replicates",), extra=extra)
    mean = float(x.mean())
    abs_sum = float(np.abs(x).sum())
    ess = abs_sum**2 / float((x * x).sum()) if abs_sum > 0 else float(n)
    diff = (mean - prediction) / scale
    if sd is not None and not math.isfinite(sd):
        return Evidence(mean / scale, pred, math.inf, math.nan, 1.0, math.inf, _signed_violation(diff, alternative),
                        math.inf, n, "mean (exact variance)", ("infinite-variance",), ess, extra)
    if float(x.max() - x.min()) <= 64 * np.finfo(float).eps * float(np.abs(x).max()):
        sd = 0.0  # replicates equal up to round-off: the mean is known exactly
    if sd is not None:
        se, law, method = sd / math.sqrt(n) / scale, _Law(), "z (exact variance)"
    else:
        batches = x[: n - n % _BATCHES].reshape(_BATCHES, -1).mean(axis=1)
        se = float(batches.std(ddof=1) / math.sqrt(_BATCHES)) / scale
        law, method = _Law(_BATCHES - 1), "batch-means t"
    v = _signed_violation(diff, alternative)
    if se == 0:  # degenerate replicates: the mean is known exactly
        return Evidence(mean / scale, pred, 0.0, math.inf if v > tolerance else 0.0,
                        0.0 if v > tolerance else 1.0, 0.0, max(v, 0.0), max(v, 0.0), n,
                        method + " (degenerate)", (), ess, extra)
    p, upper, mde, crit = _interval(diff, se, tolerance, law, alpha, power, alternative)
    flags: list[str] = []
    dev2 = (x - mean) ** 2
    share = float(dev2.max() / dev2.sum()) if sd is None else 0.0
    if share > _MAX_SHARE:
        flags.append(f"heavy tails (one replicate carries {share:.0%} of the sample variance)")
        p = 1.0
    gamma = skewness if skewness is not None else float(stats.skew(x))
    nominal = alpha / 2 if alternative == "two-sided" else alpha
    edgeworth = abs(gamma) * (crit**2 - 1) * stats.norm.pdf(crit) / (6 * math.sqrt(n))
    if edgeworth > nominal:
        if sd is not None:
            # distribution-free: Chebyshev (two-sided) / Cantelli (one-sided) with the exact variance
            k = (v - tolerance) / se
            two = alternative == "two-sided"
            p = 1.0 if k <= 0 else float(min(1.0, 1 / k**2 if two else 1 / (1 + k**2)))
            width = math.sqrt(1 / alpha) if two else math.sqrt(1 / alpha - 1)
            upper, mde = max(v + width * se, 0.0), (width + stats.norm.ppf(power)) * se
            method += ", Chebyshev (skewed mean)"
        else:
            flags.append(f"skewed (mean skewness {gamma / math.sqrt(n):.3g} too large for the normal "
                         f"approximation at level {alpha:.2g})")
            p = 1.0
    return Evidence(mean / scale, pred, se, diff / se, p, mde, max(v, 0.0), upper, n, method, tuple(flags),
                    ess, extra)


def exact_test(value, reference, *, tolerance: float, scale=1.0, extra: dict | None = None) -> Evidence:
    """Deterministic comparison: ``effect = max |value - reference| / scale`` against ``tolerance``.

    ``scale`` may be an array (e.g. a condition-scaled magnitude per entry).
    """
    v = np.asarray(value, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.abs(v - r) / np.asarray(scale, dtype=np.float64)
    extra = dict(extra or {})
    if not np.isfinite(err).all():
        return Evidence(math.nan, 0.0, 0.0, math.nan, 1.0, math.inf, math.nan, math.inf, int(err.size), "exact",
                        ("non-finite values",), extra=extra)
    worst = float(err.max(initial=0.0))
    violated = worst > tolerance
    return Evidence(worst, 0.0, 0.0, worst, 0.0 if violated else 1.0, 0.0, worst, worst, int(err.size), "exact",
                    extra=extra)


def binomial_test(exceed: int, n: int, bound: float, *, alpha: float, power: float = 0.8,
                  tolerance: float = 0.0, extra: dict | None = None) -> Evidence:
    """Exact test of ``P(exceed) <= bound`` (up to ``tolerance``) from ``exceed`` exceedances in ``n`` trials.

    ``estimate`` is the exceedance frequency, ``stderr`` its binomial standard error, ``extra`` gets the
    Clopper–Pearson interval at level ``1 - 2 alpha`` (its upper end is ``bound + upper``).
    """
    extra = dict(extra or {})
    bound = float(bound)
    null = min(max(bound + tolerance, 0.0), 1.0)
    res = stats.binomtest(int(exceed), int(n), null, alternative="greater")
    ci = stats.binomtest(int(exceed), int(n)).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    extra.update(ci_low=float(ci.low), ci_high=float(ci.high))
    freq = exceed / n
    if bound + tolerance >= 1:
        mde = 0.0  # no law exceeds the bound by more than the tolerance: nothing to detect
    else:
        c = int(stats.binom.isf(alpha, n, bound)) + 1  # reject "P <= bound" when exceed >= c
        if stats.binom.sf(c - 1, n, 1.0) < power:
            mde = math.inf
        else:
            p1 = optimize.brentq(lambda p: stats.binom.sf(c - 1, n, p) - power, bound, 1.0)
            mde = p1 - bound
    se = math.sqrt(max(freq * (1 - freq), 1e-300) / n)
    return Evidence(freq, bound, se, float(exceed), float(res.pvalue), mde, max(freq - bound, 0.0),
                    max(float(ci.high) - bound, 0.0), int(n), "exact binomial (Clopper-Pearson)", extra=extra)


def slope_test(x, y, y_se, predicted_slope: float, *, alpha: float, power: float = 0.8, tolerance: float = 0.0,
               alternative: str = "two-sided", extra: dict | None = None) -> Evidence:
    """Log-log slope of ``y`` against ``x`` (WLS with delta-method weights) versus ``predicted_slope``.

    ``y_se`` are the standard errors of ``y``. ``alternative="less"`` encodes "slope <= prediction"
    (e.g. "grows no faster than x^s", or "decays at least as fast as x^s" with s < 0).
    """
    _check_alternative(alternative)
    extra = dict(extra or {})
    x, y, se = (np.asarray(a, dtype=np.float64).ravel() for a in (x, y, y_se))
    if (y <= 0).any() or not np.isfinite(y).all() or (se <= 0).any() or x.size < 3:
        return Evidence(math.nan, predicted_slope, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf,
                        int(x.size), "log-log WLS",
                        ("slope undefined (non-positive values or fewer than 3 points)",), extra=extra)
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
    p, upper, mde, _ = _interval(diff, slope_se, tolerance, _Law(), alpha, power, alternative)
    return Evidence(slope, predicted_slope, slope_se, diff / slope_se, p, mde,
                    max(_signed_violation(diff, alternative), 0.0), upper, int(x.size), "log-log WLS slope",
                    extra=extra)


def ks_test(samples, cdf, *, alpha: float, power: float = 0.8, tolerance: float = 0.0,
            extra: dict | None = None) -> Evidence:
    """One-sample Kolmogorov–Smirnov test that the law of ``samples`` is within ``tolerance`` of ``cdf``."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    n = x.size
    stat = float(stats.kstest(x, cdf).statistic)
    crit = float(stats.kstwo.isf(alpha, n))
    p = float(stats.kstwo.sf(stat - tolerance, n)) if stat > tolerance else 1.0
    mde = crit + stats.norm.ppf(power) / (2 * math.sqrt(n))
    return Evidence(stat, 0.0, 1 / (2 * math.sqrt(n)), stat, p, mde, stat, stat + crit, n, "Kolmogorov-Smirnov",
                    extra=dict(extra or {}))


def holm(p_values, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down procedure: ``(reject, adjusted p-values)``.

    Adjusted ``p̃_(i) = max_{j <= i} min(1, (n - j + 1) p_(j))`` over the sorted p-values; reject where
    ``p̃ <= alpha``. Identical to ``statsmodels.stats.multitest.multipletests(method="holm")`` (a test checks
    it), written out because that function runs ``gc.collect()`` on every call, which cost a third of a
    whole-registry smoke run.
    """
    p = np.asarray(p_values, dtype=np.float64)
    if p.size == 0:
        return np.zeros(0, bool), np.zeros(0)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(np.minimum(1.0, p[order] * np.arange(p.size, 0, -1)))
    adjusted = np.empty_like(p)
    adjusted[order] = stepped
    return adjusted <= alpha, adjusted


def flagged(evidence: Evidence, reason: str) -> Evidence:
    """``evidence`` that cannot refute (``p_value = 1``) and carries ``reason`` as a flag: the cell is
    undecidable (e.g. an expectation that need not exist), so the claim cannot be supported either."""
    return replace(evidence, flags=evidence.flags + (reason,), p_value=1.0)


def combine(evidences: list[Evidence], *, method: str | None = None, extra: dict | None = None) -> Evidence:
    """One cell's evidence from several sub-tests of the same hypothesis (Bonferroni inside the cell).

    The sub-tests must have been run at level ``alpha / len(evidences)``; the combined p-value is
    ``min(1, k · min p)``, the effect and mde are the worst of the parts, flags are merged. The part with
    the smallest p-value supplies estimate, prediction and statistic.
    """
    if not evidences:
        raise ValueError("combine needs at least one Evidence")
    k = len(evidences)
    worst = min(evidences, key=lambda e: e.p_value)
    flags = tuple(dict.fromkeys(f for e in evidences for f in e.flags))
    parts = dict(extra or {})
    parts.setdefault("parts", k)
    return Evidence(worst.estimate, worst.prediction, worst.stderr, worst.statistic,
                    min(1.0, k * worst.p_value), max(e.mde for e in evidences),
                    max((e.effect for e in evidences if not math.isnan(e.effect)), default=math.nan),
                    max(e.upper for e in evidences), sum(e.n for e in evidences),
                    method or f"{worst.method} (Bonferroni over {k})", flags, extra=parts)


def required_replicates(rel_sd: float, *, alpha: float, tolerance: float, power: float = 0.8,
                        skewness: float | None = None, alternative: str = "two-sided",
                        resolution: float = 0.5) -> float:
    """Replicates a mean test with exact moments needs at one cell (a sample-size calculation).

    Enough for a minimal detectable effect of ``resolution · tolerance``,
    ``n = ((z_α + z_β) rel_sd / (resolution · tolerance))²``, and, given the exact skewness of one
    replicate, for the normal approximation to pass :func:`mean_test`'s Edgeworth check,
    ``n >= (|γ|(z² - 1)φ(z) / (6 α'))²`` (``α'`` the one-sided level). It depends only on exact moments,
    never on outcomes, so sizing cells with it cannot steer a verdict. Returns ``inf`` when ``rel_sd`` is.
    """
    _check_alternative(alternative)
    level = alpha / 2 if alternative == "two-sided" else alpha
    z = stats.norm.isf(level)
    need = ((z + stats.norm.ppf(power)) * rel_sd / (resolution * tolerance)) ** 2
    if skewness is not None and math.isfinite(skewness):
        need = max(need, (abs(skewness) * (z * z - 1) * stats.norm.pdf(z) / (6 * level)) ** 2)
    return need
