r"""Statistical procedures that turn measurements into evidence about one sweep cell.

Every procedure tests the *interval* null hypothesis "the claim holds at this cell up to its tolerance":
the violation — the deviation from the prediction in the violating direction, in the units of the
claim's ``tolerance`` — is at most ``tolerance``. Tolerance is the smallest effect that matters, so a
statistically significant deviation smaller than it (round-off, a pre-asymptotic correction) is not a
refutation. Each returns :class:`Evidence`:

* ``p_value`` — of the interval null (small: violated by more than the tolerance);
* ``effect`` — the observed violation; ``upper`` — its upper confidence bound at level ``1 - alpha``;
* ``resolution`` — what the support rule ``upper <= tolerance`` can resolve at this cell: the confidence
  radius (``upper - effect`` for a mean). A cell whose resolution exceeds the tolerance cannot support
  even a claim that holds exactly; one with resolution ``r`` supports a claim whose true violation is
  below ``tolerance - r``;
* ``validity`` and ``assumption`` — what the guarantee rests on: ``exact`` (the law of the statistic is
  known exactly), ``non-asymptotic`` (a finite-sample guarantee under the stated assumption) or
  ``asymptotic`` (valid in the large-sample limit).

The engine calls a claim *refuted* when Holm's procedure rejects some cell at family-wise level alpha,
and *supported* only when every cell has ``upper <= tolerance`` and no flag (an equivalence test, two
one-sided tests in spirit). A supported verdict states the weakest validity class among its cells.

Design notes (what each procedure assumes, and why it was chosen)
-----------------------------------------------------------------
**Means** (:func:`mean_test` for a fixed sample, :func:`sequential_mean` for a cell that draws in rounds
and stops when decided; expectation and moment claims, paired comparisons). Both evaluate one
*anytime-valid confidence sequence* (:mod:`rfkit.validation.sequences`), the strongest the assumptions
allow: values in a known range → a betting sequence (non-asymptotic); a variance bound from
:mod:`rfkit.theory` (``sd=``) → a Catoni-style sequence (non-asymptotic: valid for every law with that
variance, heavy tails included), run with ``max(theory variance, running sample variance)`` so a buggy
estimator with more variance is judged with its own spread; otherwise the Gaussian-mixture asymptotic
sequence (asymptotic). The p-value of the interval null is the sequence's anytime p-value at the nearest
end of the null interval. Random-feature estimators are log-normal-like, so the asymptotic sequence can
fail far in the tail: a cell without a variance bound is flagged (and cannot decide) when one replicate
carries more than 20% of the sample variance (for light tails that share is ``O(log n / n)``), when
Hill's estimate of the replicates' tail index is below 3 (:func:`tail_index`: fewer than three finite
moments, no Berry–Esseen rate; a sample that misses the tail underestimates the variance, so the other
checks look harmless exactly when the interval is too narrow), or when the first Edgeworth term of the
mean's tail probability at the boundary, ``|γ₁|(z² - 1)φ(z)/(6√n)``, exceeds the nominal level.
Replicates that are all equal are flagged unless the caller declares the quantity deterministic
(``sd=0``): a frozen generator must not look like an exact answer. An infinite theory variance flags the
cell ``infinite-variance``. The Kish effective sample size ``(Σ|x|)²/Σx²`` is reported.

**Exact evaluations** (:func:`exact_test`; identities and deterministic inequalities). No randomness:
the violation is the observed error, ``p = 0`` if it exceeds the tolerance and ``1`` otherwise. Empty
evidence is flagged, never a pass.

**Tail bounds** (:func:`binomial_test`). Exceedance counts of a fixed number of trials are binomial: the
exact one-sided binomial test of ``P(exceed) <= bound + tolerance`` and a Clopper–Pearson bound (exact).

**Rates** (:func:`slope_test`). Weighted least squares of ``log y`` on ``log x`` with delta-method
weights ``(y/se)²``, at least 5 sizes; when a χ² lack-of-fit test (level 0.05) finds the points scattering
more than their errors, the slope's standard error is inflated by ``sqrt(χ²/dof)`` and the quantile is
Student t with the fit's ``dof = points - 2`` (``points - groups - 1`` with one intercept per group, as
timings have per round); otherwise the errors are known and the quantile is normal
(asymptotic: normal errors of the log points).

**Timings** (:func:`ratio_test`). A timing is a random variable: claims about relative cost are tested
on repeated paired log-ratios (t with ``repeats - 1`` dof, asymptotic) with a margin for the machine.

**Laws** (:func:`ks_test`). One-sample Kolmogorov–Smirnov against an exact CDF (scipy ``kstest``). The
violation is the sup-distance between the true and the claimed CDF; the triangle inequality bounds it by
the observed statistic plus the statistic's noise, whose exact law (``kstwo``) gives the p-value of
"distance <= tolerance" and the upper bound (exact for continuous laws).

Levels passed in by the engine are Bonferroni levels (``alpha / cells``), never less stringent than any
step of Holm's procedure, so bounds are conservative. Calibration (false refutation and false support
at most ``alpha``, heavy-tailed nulls included) is measured in ``tests/test_calibration.py`` and published
in ``docs/statistics.md``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import optimize, stats

from rfkit.validation.sequences import VALIDITY, AsymptoticCS, BettingCS, CatoniCS

__all__ = [
    "Evidence",
    "undecided",
    "padded",
    "replicates_for_radius",
    "VALIDITY",
    "mean_test",
    "sequential_mean",
    "round_sizes",
    "ratio_test",
    "exact_test",
    "binomial_test",
    "slope_test",
    "secant_slope_test",
    "ks_test",
    "tail_index",
    "holm",
    "combine",
    "required_replicates",
    "ALTERNATIVES",
]

#: ``two-sided``: the claim is ``mean == prediction``; ``less``: ``mean <= prediction`` (a violation is
#: a larger mean); ``greater``: ``mean >= prediction``.
ALTERNATIVES = ("two-sided", "less", "greater")

_BATCHES = 32
#: A theory sd at most this fraction of ``|prediction|`` may be the round-off of a zero variance (a variance
#: computed as ``E X² - (E X)²`` carries an error of order ``eps·E X²``): if the first round's replicates
#: agree, the quantity is deterministic at that cell and is judged exactly; if they differ, the variance is
#: tiny but real and the sequence runs as usual.
_DETERMINISTIC_SD = math.sqrt(64 * np.finfo(float).eps)
#: Largest share of the sample variance one replicate may carry before the sample variance is distrusted.
_MAX_SHARE = 0.2
#: An asymptotic cell is flagged when Hill's estimate of its replicates' tail index is below this: with
#: fewer than three finite moments the normal approximation of the mean has no Berry–Esseen rate, and the
#: sample variance is low exactly in the samples that miss the tail (measured: importance weights with
#: tail index 2.5 refuted a true claim at 3.5x alpha without this check; ``docs/statistics.md``).
MIN_TAIL_INDEX = 3.0
#: Fewest replicates for which the tail index is estimated (Hill's estimator on ``max(10, sqrt(n))`` order
#: statistics); smaller asymptotic samples rely on the variance-share and Edgeworth checks only.
_TAIL_MIN_N = 100


def tail_index(x) -> float:
    r"""Hill's estimate of the tail index of ``|X - median X|`` from a sample (Hill 1975, "A simple general
    approach to inference about the tail of a distribution", Ann. Statist. 3(5)):
    ``1/α̂ = (1/k) Σ_{i<k} log(D_{(i)}/D_{(k)})`` over the ``k = max(10, ⌊√n⌋)`` largest absolute deviations
    ``D_{(0)} >= D_{(1)} >= ...`` from the median. ``α̂`` estimates the number of finite moments of the
    heavier tail (Pareto: its index; Gaussian and other light tails: large, growing with ``n``; log-normal: a
    finite-sample value that grows slowly). ``inf`` when the deviations beyond the ``k``-th are all equal.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size < 2:
        raise ValueError(f"tail_index needs at least 2 values, got {x.size}")
    d = np.abs(x - np.median(x))
    k = min(max(10, math.isqrt(x.size)), x.size - 1)
    top = -np.sort(np.partition(-d, k)[: k + 1])  # the k + 1 largest deviations, largest first
    if not top[k] > 0:
        return 0.0 if top[0] > 0 else math.inf
    h = float(np.mean(np.log(top[:k] / top[k])))
    return 1.0 / h if h > 0 else math.inf


@dataclass(frozen=True)
class Evidence:
    """What one cell measured and the test it got. ``effect``, ``upper`` and ``resolution`` are in tolerance
    units; ``validity`` is one of :data:`VALIDITY` and ``assumption`` says what it rests on."""

    estimate: float
    prediction: float
    stderr: float
    statistic: float
    p_value: float
    resolution: float
    effect: float
    upper: float
    n: int
    method: str
    flags: tuple[str, ...] = ()
    ess: float = math.nan
    extra: dict = field(default_factory=dict)
    validity: str = "exact"
    assumption: str = ""

    def __post_init__(self):
        if self.validity not in VALIDITY:
            raise ValueError(f"validity must be one of {VALIDITY}, got {self.validity!r}")


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


def _interval(diff: float, se: float, tol: float, law: _Law, alpha: float, alternative: str):
    """``(p, upper, resolution)`` for the null ``violation <= tol`` given a normal/t statistic."""
    v = _signed_violation(diff, alternative)
    if alternative == "two-sided":
        p = law.sf((v - tol) / se) + law.sf((v + tol) / se)
        crit = law.isf(alpha / 2)
    else:
        p = law.sf((v - tol) / se)
        crit = law.isf(alpha)
    return float(min(p, 1.0)), max(v + crit * se, 0.0), crit * se


def _sequence(*, alpha: float, t_opt: int, sd: float | None, bounds: tuple[float, float] | None):
    """The strongest confidence sequence the assumptions allow (see :mod:`rfkit.validation.sequences`)."""
    if bounds is not None:
        return BettingCS(lo=bounds[0], hi=bounds[1], alpha=alpha, t_opt=t_opt)
    if sd is not None:
        return CatoniCS(variance=sd * sd, alpha=alpha, t_opt=t_opt)
    return AsymptoticCS(alpha=alpha, t_opt=t_opt)


def _check_mean_args(alternative, scale, sd, bounds, tolerance, known_range=None):
    _check_alternative(alternative)
    if known_range is not None:
        if sd is not None or bounds is not None:
            raise ValueError("known_range runs its own pair of sequences: pass it without sd or bounds")
        if not known_range[0] <= known_range[1]:
            raise ValueError(f"known_range must be (lo, hi) with lo <= hi, got {known_range}")
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    if sd is not None and not sd >= 0:
        raise ValueError(f"sd must be >= 0 (or inf), got {sd}")
    if bounds is not None and not bounds[0] < bounds[1]:
        raise ValueError(f"bounds must be (lo, hi) with lo < hi, got {bounds}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")


def _variance_within(dev2: np.ndarray, variance: float, alpha: float) -> bool:
    """Whether the mean of the squared deviations ``dev2`` is within its one-sided level-``alpha`` normal margin
    (``z_alpha`` times their sd over √n) of ``variance``: a sample variance that theory's can explain."""
    excess = float(dev2.mean()) - variance
    return excess <= 0 or excess <= stats.norm.isf(alpha) * float(dev2.std(ddof=1)) / math.sqrt(len(dev2))


def _mean_evidence(seq, prediction: float, *, alpha: float, tolerance: float, alternative: str, scale: float,
                   sd: float | None, extra: dict, bounds: tuple[float, float] | None = None) -> Evidence:
    """Evidence of a mean from a confidence sequence after its last round (see :func:`mean_test`)."""
    n, x_all = seq.t, seq.values
    pred = prediction / scale
    center = seq.center
    diff = (center - prediction) / scale
    v = _signed_violation(diff, alternative)
    p, _ = _null_p_values(seq, prediction, tolerance, scale, alternative)
    if alternative == "two-sided":
        low, high = seq.bounds(alpha)
        upper = max(high - prediction, prediction - low) / scale
        radius = (high - low) / (2 * scale)
    elif alternative == "less":
        high = seq.upper(alpha)
        upper, radius = (high - prediction) / scale, (high - center) / scale
    else:
        low = seq.lower(alpha)
        upper, radius = (prediction - low) / scale, (center - low) / scale
    mean = float(x_all.mean())
    sample_sd = float(x_all.std(ddof=1)) if n > 1 else math.nan
    se = (max(sample_sd, sd or 0.0) if n > 1 else (sd or math.nan)) / math.sqrt(n) / scale
    flags: list[str] = []
    dev2 = (x_all - mean) ** 2
    share = float(dev2.max() / dev2.sum()) if dev2.sum() > 0 else 0.0
    degenerate = n > 1 and _all_equal(x_all)
    # a Catoni sequence is run with max(theory variance, running sample variance), so its guarantee needs only
    # that the true variance is at most theory's: distrust it (flag) when the sample variance exceeds theory's
    # even without its largest replicate by more than its own sampling noise at the cell's level (the sd of the
    # squared deviations / √n: a law of high kurtosis lifts the sample variance by chance), not when one large
    # replicate of a heavy-tailed law lifts it
    theory_governs = isinstance(seq, CatoniCS) and sd is not None and sd > 0 and (
        sample_sd <= sd or n > 2 and _variance_within(np.sort(dev2)[:-1], sd * sd, alpha))
    saturated = bounds is not None and degenerate and float(x_all[0]) in (float(bounds[0]), float(bounds[1]))
    if degenerate and sd != 0 and not saturated:
        flags.append("degenerate replicates: every replicate is equal although the quantity is random "
                     "(a frozen generator?); pass sd=0 only for a deterministic quantity")
    elif share > _MAX_SHARE and not theory_governs and not isinstance(seq, BettingCS):
        flags.append(f"heavy tails (one replicate carries {share:.0%} of the sample variance)")
    if isinstance(seq, AsymptoticCS) and not flags and n >= _TAIL_MIN_N and sample_sd > 0:
        index = tail_index(x_all)
        extra.update(tail_index=index)
        if index < MIN_TAIL_INDEX:
            flags.append(f"heavy tails (tail index {index:.2g} < {MIN_TAIL_INDEX:g} by Hill's estimator: the "
                         "normal approximation of the mean is unreliable; give theory's variance bound for a "
                         "non-asymptotic sequence)")
    if isinstance(seq, AsymptoticCS) and not flags and n > 2 and sample_sd > 0:
        gamma = float(stats.skew(x_all))
        crit = radius * scale / (sample_sd / math.sqrt(n))  # the sequence's boundary in standard errors
        nominal = alpha / 2 if alternative == "two-sided" else alpha
        edgeworth = abs(gamma) * (crit**2 - 1) * stats.norm.pdf(crit) / (6 * math.sqrt(n))
        if edgeworth > nominal:
            flags.append(f"skewed (mean skewness {gamma / math.sqrt(n):.3g} too large for the asymptotic "
                         f"sequence at level {alpha:.2g}; give theory's variance bound for a non-asymptotic one)")
    if flags:
        p = 1.0
    extra.update(center=center, replicates_share=share)
    abs_sum = float(np.abs(x_all).sum())
    ess = abs_sum**2 / float((x_all * x_all).sum()) if abs_sum > 0 else float(n)
    return Evidence(mean / scale, pred, se, diff / se if se > 0 else math.copysign(math.inf, diff) if diff else 0.0,
                    float(p), max(radius, 0.0), max(v, 0.0), max(upper, 0.0), n,
                    f"{type(seq).__name__} ({seq.assumption})", tuple(flags), ess, extra,
                    validity=seq.validity, assumption=seq.assumption)


def mean_test(samples, prediction: float, *, alpha: float, power: float = 0.8, tolerance: float = 0.0,
              alternative: str = "two-sided", scale: float = 1.0, sd: float | None = None,
              bounds: tuple[float, float] | None = None, known_range: tuple[float, float] | None = None,
              extra: dict | None = None) -> Evidence:
    r"""Test ``E[X] = prediction`` (or ``<=``/``>=``) up to ``tolerance`` from a fixed sample of iid replicates.

    The sample is one round of the confidence sequence a sequential cell would use
    (:func:`sequential_mean`), so fixed and sequential cells share one procedure; the sequence is tuned
    for the sample's size.

    Parameters
    ----------
    samples : 1-D array
        Replicates; non-finite values flag the cell.
    prediction : float
        The claimed mean.
    alpha : float
        Level of this cell's test (the engine passes the Bonferroni level of the family).
    power : float
        Kept for the call signature of the other procedures; the reported ``resolution`` is the
        sequence's radius (what the support rule ``upper <= tolerance`` can resolve).
    tolerance : float
        Violations up to this size (in units of ``scale``) are not violations.
    alternative : {"two-sided", "less", "greater"}
        See :data:`ALTERNATIVES`.
    scale : float
        Effects are reported as ``(mean - prediction)/scale``: pass ``|target|`` for relative bias.
    sd : float, optional
        Exact per-replicate standard deviation from :mod:`rfkit.theory`: a non-asymptotic Catoni-style
        sequence with the variance bound ``max(sd², running sample variance)``; ``sd = inf`` marks an
        infinite variance (the cell cannot decide); ``sd = 0`` declares a deterministic quantity, judged
        exactly (as is an sd below ``1.2e-7·|prediction|``, the round-off of a zero closed-form variance,
        when the replicates agree).
    bounds : (lo, hi), optional
        Known range of one replicate (an indicator, a probability, a clipped quantity): a non-asymptotic
        betting sequence.
    known_range : (lo, hi), optional
        A range known to hold every replicate but loose for their spread (a convex hull's diameter against a
        small variance), where a betting sequence alone resolves little: the asymptotic sequence and the betting
        sequence on the range both run, each at ``alpha/2`` (:func:`_run_beside_range`).
    """
    del power
    _check_mean_args(alternative, scale, sd, bounds, tolerance, known_range)
    x = np.asarray(samples, dtype=np.float64).ravel()
    if known_range is not None:
        return _run_beside_range([x], prediction, alpha=alpha, tolerance=tolerance, alternative=alternative,
                                 scale=scale, known_range=known_range, t_opt=max(x.size, 1), extra=dict(extra or {}))
    return _run_sequence([x], prediction, alpha=alpha, tolerance=tolerance, alternative=alternative,
                         scale=scale, sd=sd, bounds=bounds, t_opt=max(x.size, 1), extra=dict(extra or {}))


def _undecided_evidence(n, pred, flag, extra, *, validity="asymptotic"):
    return Evidence(math.nan, pred, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, n, "mean", (flag,),
                    extra=extra, validity=validity)


def _null_p_values(seq, prediction, tolerance, scale, alternative) -> tuple[float, float]:
    """Anytime p-values ``(violated, within)`` of the interval null "violation <= tolerance" and of its
    complement, each at the nearest end of the interval (two-sided: ``α/2`` a side)."""
    lo_null, hi_null = prediction - tolerance * scale, prediction + tolerance * scale
    if alternative == "two-sided":
        return (min(1.0, 2 * min(seq.p_value(hi_null, +1), seq.p_value(lo_null, -1))),
                min(1.0, 2 * max(seq.p_value(lo_null, +1), seq.p_value(hi_null, -1))))
    if alternative == "less":
        return seq.p_value(hi_null, +1), seq.p_value(hi_null, -1)
    return seq.p_value(lo_null, -1), seq.p_value(lo_null, +1)


def _decided(seq, prediction, tolerance, scale, alternative, alpha) -> str | None:
    """``"violated"`` / ``"within"`` when the sequence already decides the interval null, else ``None``."""
    violated, within = _null_p_values(seq, prediction, tolerance, scale, alternative)
    if violated <= alpha:
        return "violated"
    return "within" if within <= alpha else None


def _run_sequence(rounds, prediction, *, alpha, tolerance, alternative, scale, sd, bounds, t_opt, extra,
                  stop_when_decided=False) -> Evidence:
    """Feed ``rounds`` (an iterable of 1-D arrays) to the sequence until decided or exhausted."""
    pred = prediction / scale
    if sd is not None and not math.isfinite(sd):
        return _undecided_evidence(0, pred, "infinite-variance", extra, validity="exact")
    rounds = iter(rounds)
    if sd is not None and sd <= _DETERMINISTIC_SD * abs(prediction):
        # theory's variance is zero, or at the round-off of its closed form: deterministic if declared so
        # (sd = 0) or if the replicates agree; a tiny but real variance goes on to the sequence
        first = np.asarray(next(rounds, np.empty(0)), dtype=np.float64).ravel()
        if sd == 0 or _all_equal(first):
            return _deterministic(first, prediction, tolerance=tolerance, alternative=alternative, scale=scale,
                                  extra=extra)
        rounds = itertools.chain([first], rounds)
    seq = _sequence(alpha=alpha, t_opt=t_opt, sd=sd, bounds=bounds)
    status, used = "budget spent", 0
    for k, x in enumerate(rounds):
        x = np.asarray(x, dtype=np.float64).ravel()
        used += 1
        if not np.isfinite(x).all():
            extra.update(rounds=k + 1)
            bad = int((~np.isfinite(x)).sum())
            return _undecided_evidence(seq.t + x.size, pred, f"non-finite replicates ({bad} of {x.size})", extra)
        seq.update(x)  # a BettingCS refuses replicates outside its bounds
        # an asymptotic sequence is valid from a large start time on (its guarantee is a limit as the start
        # grows): it may stop only after ASYMPTOTIC_START of the planned replicates
        start = ASYMPTOTIC_START * t_opt if isinstance(seq, AsymptoticCS) else 2
        if stop_when_decided and seq.t >= start:
            decision = _decided(seq, prediction, tolerance, scale, alternative, alpha)
            if decision is not None:
                # stop only if the sample can be trusted: a flag that more rounds may lift (heavy tails,
                # skew seen in a short sample) means draw on
                ev = _mean_evidence(seq, prediction, alpha=alpha, tolerance=tolerance,
                                    alternative=alternative, scale=scale, sd=sd, bounds=bounds,
                                    extra=dict(extra, rounds=used, status=f"decided ({decision})"))
                if not any(f.startswith(("heavy tails", "skewed")) for f in ev.flags):
                    return ev
    if seq.t == 0:
        return _undecided_evidence(0, pred, "no replicates (empty evidence)", extra)
    if seq.t < 2 and sd is None and bounds is None:
        return _undecided_evidence(seq.t, pred, "a single replicate and no variance bound", extra)
    extra.update(rounds=used, status=status)
    return _mean_evidence(seq, prediction, alpha=alpha, tolerance=tolerance, alternative=alternative,
                          scale=scale, sd=sd, extra=extra, bounds=bounds)


#: Flags of an asymptotic sequence that a betting sequence on a known range does not need to worry about.
_RANGE_REMEDIES = ("heavy tails", "skewed")


def _run_beside_range(rounds, prediction, *, alpha, tolerance, alternative, scale, known_range, t_opt, extra,
                      stop_when_decided=False) -> Evidence:
    """The asymptotic sequence and a betting sequence on ``known_range`` (:func:`padded`) fed the same rounds,
    each at ``alpha/2`` (Bonferroni), so the reported p-value is twice the deciding sequence's.

    The betting sequence is valid whatever the tails but slow where the range is loose; the asymptotic one is
    tight where the sample is well behaved. The cell stops when the betting sequence decides, or when the
    asymptotic one decides on a sample it does not flag (after :data:`ASYMPTOTIC_START` of the plan, as
    :func:`sequential_mean`). After the last round: a deciding unflagged asymptotic sequence, else a deciding
    betting sequence, else the asymptotic one, unless it is flagged for heavy tails or skew, then the betting
    one (whose interval holds whatever the tails). A replicate outside the range raises ``ValueError``: the
    range was not known after all."""
    lo, hi = padded(*known_range)
    half = alpha / 2
    asymptotic, betting = AsymptoticCS(alpha=half, t_opt=t_opt), BettingCS(lo=lo, hi=hi, alpha=half, t_opt=t_opt)
    test = dict(alpha=half, tolerance=tolerance, alternative=alternative, scale=scale, sd=None)
    extra = dict(extra, known_range=[lo, hi])

    def report(ev: Evidence) -> Evidence:
        return replace(ev, p_value=min(1.0, 2.0 * ev.p_value))

    def on_range(status: str) -> Evidence:
        return _mean_evidence(betting, prediction, bounds=(lo, hi), extra=dict(extra, rounds=used, status=status,
                                                                               sequence="betting on the known range"),
                              **test)

    used = 0
    for x in rounds:
        x = np.asarray(x, dtype=np.float64).ravel()
        used += 1
        if not np.isfinite(x).all():
            bad = int((~np.isfinite(x)).sum())
            return _undecided_evidence(asymptotic.t + x.size, prediction / scale,
                                       f"non-finite replicates ({bad} of {x.size})", dict(extra, rounds=used))
        betting.update(x)
        asymptotic.update(x)
        if not stop_when_decided:
            continue
        decision = _decided(betting, prediction, tolerance, scale, alternative, half)
        if decision is not None:
            return report(on_range(f"decided ({decision}, on the known range)"))
        if asymptotic.t >= ASYMPTOTIC_START * t_opt:
            decision = _decided(asymptotic, prediction, tolerance, scale, alternative, half)
            if decision is not None:
                ev = _mean_evidence(asymptotic, prediction, extra=dict(extra, rounds=used,
                                                                       status=f"decided ({decision})"), **test)
                if not ev.flags:
                    return report(ev)
    if asymptotic.t < 2:
        return _undecided_evidence(asymptotic.t, prediction / scale, "fewer than two replicates", extra)
    ev = _mean_evidence(asymptotic, prediction, extra=dict(extra, rounds=used, status="budget spent"), **test)
    decided_asymptotic = not ev.flags and _decided(asymptotic, prediction, tolerance, scale, alternative, half)
    decision = _decided(betting, prediction, tolerance, scale, alternative, half)
    if not decided_asymptotic and (decision is not None or any(f.startswith(_RANGE_REMEDIES) for f in ev.flags)):
        ev = on_range(f"decided ({decision}, on the known range)" if decision else "budget spent")
    return report(ev)


def _all_equal(x: np.ndarray) -> bool:
    """Replicates equal up to round-off (64 ulps of the largest)."""
    return x.size > 0 and float(x.max() - x.min()) <= 64 * np.finfo(float).eps * float(np.abs(x).max())


def _deterministic(x, prediction, *, tolerance, alternative, scale, extra) -> Evidence:
    """A quantity declared deterministic (``sd = 0``): judged exactly.

    Its replicates are computed values of one number, so they may differ by the computation's round-off (a sum of
    ``P`` softmax terms times a constant value differs from it by ``~P`` ulps). The verdict cannot depend on which
    replicate is the true value: it is decided when every replicate gives the same decision and their spread is
    within round-off (:data:`_DETERMINISTIC_SD` of their magnitude, the precision the sequential cells already
    grant a closed form). Replicates spread further, or on both sides of the tolerance, are flagged."""
    x = np.asarray(x, dtype=np.float64).ravel()
    pred = prediction / scale
    if x.size == 0:
        return _undecided_evidence(0, pred, "no replicates (empty evidence)", extra)
    if not np.isfinite(x).all():
        return _undecided_evidence(x.size, pred, "non-finite replicates", extra)
    mean = float(x.mean())
    # the difference of two floating-point numbers carries round-off: a violation at the tolerance up to 64 ulps
    # of the compared magnitudes is the edge of the null, not beyond it
    magnitude = max(float(np.abs(x).max()), abs(prediction))
    roundoff = 64 * np.finfo(float).eps * magnitude / scale
    each = np.maximum(_signed_violation((x - prediction) / scale, alternative), 0.0)
    v = max(_signed_violation((mean - prediction) / scale, alternative), 0.0)
    violated_each = each > tolerance + roundoff
    flags = ()
    if not _all_equal(x):
        spread = float(x.max() - x.min())
        if spread > _DETERMINISTIC_SD * magnitude:
            flags = (f"replicates differ although the quantity was declared deterministic (sd = 0): spread "
                     f"{spread:.3g}, beyond round-off ({_DETERMINISTIC_SD:.2g} of their magnitude {magnitude:.3g})",)
        elif violated_each.any() and not violated_each.all():
            flags = (f"replicates of a deterministic quantity differ by round-off ({spread:.3g}) across the "
                     f"tolerance: some violate it, some do not",)
        extra = dict(extra or {}, roundoff_spread=spread)
    violated = bool(violated_each.all()) and not flags
    return Evidence(mean / scale, pred, 0.0, math.inf if violated else 0.0, 0.0 if violated else 1.0, 0.0, v,
                    float(each.max()), x.size, "exact (deterministic, sd = 0)", flags, extra=extra,
                    validity="exact", assumption="the quantity is deterministic (replicates equal up to round-off)")


#: Replicates of the first round of a sequential cell, as a fraction of its planned budget (then doubling).
FIRST_ROUND = 1 / 32
#: Smallest first round.
MIN_ROUND = 500
#: Fraction of its planned replicates an asymptotic sequential cell draws before it may stop (heavy-tailed
#: importance weights stopped at the first look of 500 refuted at 6x alpha in the calibration).
ASYMPTOTIC_START = 0.25


def round_sizes(budget: int, planned: int | None = None) -> list[int]:
    """Round sizes of a sequential cell: ``planned/32`` (at least :data:`MIN_ROUND`), doubling, until
    ``budget`` is spent. A larger ``budget`` (more given by the engine) extends the same schedule, so the
    first rounds — and their seeds — are those of the smaller one."""
    planned = budget if planned is None else planned
    size, total, out = max(MIN_ROUND, int(planned * FIRST_ROUND)), 0, []
    while total < budget:
        n = min(size, budget - total)
        out.append(n)
        total += n
        size *= 2
    return out


def sequential_mean(draw, prediction: float, *, rng: np.random.Generator, budget: int, alpha: float,
                    planned: int | None = None, tolerance: float = 0.0, alternative: str = "two-sided",
                    scale: float = 1.0, sd: float | None = None, bounds: tuple[float, float] | None = None,
                    known_range: tuple[float, float] | None = None, extra: dict | None = None,
                    power: float = 0.8) -> Evidence:
    r"""A sequential mean cell: draw replicates in rounds and stop as soon as the cell is decided.

    ``draw(rng, n)`` returns ``n`` iid replicates. Round ``k`` draws with its own generator, seeded from
    ``rng`` and ``k`` only, so a cell re-run with a larger ``budget`` repeats its first rounds exactly and
    the result does not depend on scheduling. After each round the confidence sequence of
    :func:`mean_test` (tuned for ``planned`` replicates, default ``budget``) is checked; the cell stops
    when the interval null is rejected (``violated``) or the whole sequence lies within the tolerance
    (``within``). Stopping there is valid because the sequence covers at every time simultaneously.
    ``extra`` records ``rounds``, ``status`` and ``budget``; ``Evidence.n`` is the replicates used.
    ``sd``, ``bounds``, ``known_range`` as in :func:`mean_test`.
    """
    del power
    _check_mean_args(alternative, scale, sd, bounds, tolerance, known_range)
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    base = int(rng.integers(2**63))
    planned = budget if planned is None else planned
    extra = dict(extra or {}, budget=int(budget), planned=int(planned), sequential=True)
    rounds = (draw(np.random.default_rng([base, k]), n) for k, n in enumerate(round_sizes(budget, planned)))
    if known_range is not None:
        return _run_beside_range(rounds, prediction, alpha=alpha, tolerance=tolerance, alternative=alternative,
                                 scale=scale, known_range=known_range, t_opt=planned, extra=extra,
                                 stop_when_decided=True)
    return _run_sequence(rounds, prediction, alpha=alpha, tolerance=tolerance, alternative=alternative,
                         scale=scale, sd=sd, bounds=bounds, t_opt=planned, extra=extra, stop_when_decided=True)


def exact_test(value, reference, *, tolerance: float, scale=1.0, extra: dict | None = None) -> Evidence:
    """Deterministic comparison: ``effect = max |value - reference| / scale`` against ``tolerance``.

    ``scale`` may be an array (e.g. a condition-scaled magnitude per entry). Non-finite values and empty
    evidence are flagged (they can neither refute nor support).
    """
    v = np.asarray(value, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.abs(v - r) / np.asarray(scale, dtype=np.float64)
    extra = dict(extra or {})
    if err.size == 0:
        return Evidence(math.nan, 0.0, 0.0, math.nan, 1.0, math.inf, math.nan, math.inf, 0, "exact",
                        ("no values compared (empty evidence)",), extra=extra)
    if not np.isfinite(err).all():
        return Evidence(math.nan, 0.0, 0.0, math.nan, 1.0, math.inf, math.nan, math.inf, int(err.size), "exact",
                        ("non-finite values",), extra=extra)
    worst = float(err.max())
    violated = worst > tolerance
    return Evidence(worst, 0.0, 0.0, worst, 0.0 if violated else 1.0, 0.0, worst, worst, int(err.size), "exact",
                    extra=extra, validity="exact", assumption="deterministic evaluation")


def binomial_test(exceed: int, n: int, bound: float, *, alpha: float, power: float = 0.8,
                  tolerance: float = 0.0, extra: dict | None = None) -> Evidence:
    """Exact test of ``P(exceed) <= bound`` (up to ``tolerance``) from ``exceed`` exceedances in ``n`` trials.

    ``estimate`` is the exceedance frequency, ``stderr`` its binomial standard error, ``upper`` the
    one-sided Clopper–Pearson bound at level ``1 - alpha`` minus the bound, ``resolution`` that bound
    minus the frequency (what the support rule resolves). ``extra`` gets the two-sided interval.
    """
    del power
    extra = dict(extra or {})
    if n < 1:
        return Evidence(math.nan, float(bound), math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, 0,
                        "exact binomial", ("no trials (empty evidence)",), extra=extra)
    if not 0 <= exceed <= n:
        raise ValueError(f"exceed must be in [0, n], got {exceed} of {n}")
    bound = float(bound)
    null = min(max(bound + tolerance, 0.0), 1.0)
    res = stats.binomtest(int(exceed), int(n), null, alternative="greater")
    ci = stats.binomtest(int(exceed), int(n)).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    extra.update(ci_low=float(ci.low), ci_high=float(ci.high))
    freq = exceed / n
    se = math.sqrt(max(freq * (1 - freq), 1e-300) / n)
    return Evidence(freq, bound, se, float(exceed), float(res.pvalue), max(float(ci.high) - freq, 0.0),
                    max(freq - bound, 0.0), max(float(ci.high) - bound, 0.0), int(n),
                    "exact binomial (Clopper-Pearson)", extra=extra, validity="exact",
                    assumption="independent trials with a common exceedance probability")


#: Fewest sizes a log-log slope is fitted on (3 points leave one degree of freedom for the scatter).
MIN_SLOPE_POINTS = 5
#: Level of the χ² lack-of-fit test that decides whether a slope's stated errors explain its scatter.
LACK_OF_FIT_LEVEL = 0.05


def slope_test(x, y, y_se, predicted_slope: float, *, alpha: float, power: float = 0.8, tolerance: float = 0.0,
               alternative: str = "two-sided", groups=None, y_cov=None, extra: dict | None = None) -> Evidence:
    """Log-log slope of ``y`` against ``x`` (WLS with delta-method weights) versus ``predicted_slope``.

    ``y_se`` are the standard errors of ``y``. Correlated points (e.g. Monte Carlo means at several sizes from
    common random numbers, where replicate r's estimate at every size reuses its draws) pass ``y_cov`` instead,
    the covariance matrix of ``y`` (``y_se`` may then be None): the fit is generalised least squares with
    ``Cov(log y) ≈ D⁻¹ y_cov D⁻¹``, ``D = diag(y)`` (delta method), and χ² is ``rᵀ Cov(log y)⁻¹ r``: the
    interval keeps its level whatever the correlation (the independent-error one may be too wide or too narrow;
    tests/test_stats_v2.py checks the coverage by simulation on nested common-random-number paths).
    ``alternative="less"`` encodes "slope <= prediction" (e.g. "grows no faster than x^s", or "decays at least
    as fast as x^s" with s < 0). Needs at least
    :data:`MIN_SLOPE_POINTS` distinct sizes. When a χ² lack-of-fit test (level :data:`LACK_OF_FIT_LEVEL`)
    finds the points scattering beyond their errors, the standard error is inflated by ``sqrt(χ²/dof)`` — an
    estimated variance factor — and the interval uses Student t with ``points - 2`` degrees of freedom;
    otherwise the errors are taken as known and the quantile is normal. ``groups`` (one label per point) gives
    each group its own intercept (fixed effects: e.g. the rounds of a timing, each on a machine of its own
    speed), one common slope, and ``points - groups - 1`` degrees of freedom.
    """
    del power
    _check_alternative(alternative)
    extra = dict(extra or {})
    x, y = (np.asarray(a, dtype=np.float64).ravel() for a in (x, y))
    if y_cov is not None:
        y_cov = np.asarray(y_cov, dtype=np.float64)
        if y_cov.shape != (y.size, y.size) or not np.allclose(y_cov, y_cov.T, rtol=1e-10, atol=0.0):
            raise ValueError(f"y_cov must be a symmetric ({y.size}, {y.size}) covariance matrix, got shape "
                             f"{y_cov.shape}")
        se = np.sqrt(np.clip(np.diag(y_cov), 0.0, None))
    else:
        se = np.asarray(y_se, dtype=np.float64).ravel()
    labels = np.zeros(x.size, int) if groups is None else np.unique(np.asarray(groups).ravel(),
                                                                        return_inverse=True)[1]
    if labels.size != x.size:
        raise ValueError(f"groups must label every point: {labels.size} labels for {x.size} points")
    if (y <= 0).any() or not np.isfinite(y).all() or (se <= 0).any() or np.unique(x).size < MIN_SLOPE_POINTS \
            or x.size - labels.max() - 2 < 1:  # a fit needs at least one degree of freedom beyond its parameters
        return Evidence(math.nan, predicted_slope, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf,
                        int(x.size), "log-log WLS",
                        (f"slope undefined (non-positive values, fewer than {MIN_SLOPE_POINTS} sizes, or no "
                         "degree of freedom left by the groups' intercepts)",),
                        extra=extra, validity="asymptotic")
    lx, ly = np.log(x), np.log(y)
    # the weight matrix: the inverse covariance of log y (diagonal for independent points)
    weight = np.diag((y / se) ** 2) if y_cov is None else _inverse_pd(y_cov / np.outer(y, y), "y_cov")
    n_groups = int(labels.max()) + 1
    design = np.column_stack([np.eye(n_groups)[labels], lx])
    cov = np.linalg.inv(design.T @ weight @ design)
    beta = cov @ (design.T @ weight @ ly)
    resid = ly - design @ beta
    dof = x.size - n_groups - 1
    chi2 = float(resid @ weight @ resid)
    # A lack-of-fit test decides whether the stated errors explain the scatter. If they do, the errors are
    # known and the quantile is normal (under the model the slope is independent of χ², so this is exact
    # conditionally on passing); if not, the error is scaled by sqrt(χ²/dof), an estimated variance factor,
    # and the quantile is Student t with the fit's degrees of freedom.
    misfit = chi2 > stats.chi2.isf(LACK_OF_FIT_LEVEL, dof)
    inflate = math.sqrt(chi2 / dof) if misfit else 1.0
    slope, slope_se = float(beta[-1]), math.sqrt(cov[-1, -1]) * inflate
    extra.update(intercept=float(beta[:-1].mean()), chi2=chi2, dof=dof, inflation=inflate)
    if n_groups > 1:
        extra.update(groups=n_groups)
    diff = slope - predicted_slope
    law = _Law(dof) if misfit else _Law()
    p, upper, resolution = _interval(diff, slope_se, tolerance, law, alpha, alternative)
    quantile = f"t, {dof} dof, errors scaled by the scatter" if misfit else "normal, errors explain the scatter"
    fit = "log-log WLS slope" if y_cov is None else "log-log GLS slope (correlated points)"
    return Evidence(slope, predicted_slope, slope_se, diff / slope_se, p, resolution,
                    max(_signed_violation(diff, alternative), 0.0), upper, int(x.size),
                    f"{fit} ({quantile})", extra=extra, validity="asymptotic",
                    assumption="normal errors of the log points")


def secant_slope_test(x, replicates, predicted_slope: float, *, bound: float, alpha: float, power: float = 0.8,
                      tolerance: float = 0.0, alternative: str = "two-sided", extra: dict | None = None) -> Evidence:
    r"""Log-log secant slope ``(log y_last - log y_first) / log(x_last / x_first)`` of the means ``y`` of bounded
    replicates ``(R, sizes)`` (row r: replicate r's value at every size ``x``, increasing; every value in
    ``[0, bound]``) versus ``predicted_slope``. **Non-asymptotic**: valid for any joint law on the range.

    The slope is ``s`` exactly when ``m_last = e^{s·L} m_first`` (``L = log(x_last/x_first)``, ``m`` the column
    means), so "slope <= s" is "the mean of ``z_s = Y_last - e^{s·L} Y_first`` is <= 0", a mean of values in
    ``[-e^{s·L}·bound, bound]``: a betting confidence sequence (:class:`~rfkit.validation.sequences.BettingCS`,
    Waudby-Smith & Ramdas 2024) on ``z_s`` tests it with no assumption but the range. The columns may be correlated
    (nested common random numbers: replicate r reuses its draws at every size); the difference ``z_s`` is then
    less spread than its terms, which the bets use. The p-value is that of the interval null at its nearest end
    (``predicted ± tolerance``); the confidence bounds of the slope are where the one-sided tests start to
    reject, found by root-finding in ``s``. The range term is what makes the test honest where rare draws carry
    the mean (a heavy-tailed squared error): a mass the replicates have not seen can be at most ``bound`` times
    its probability, and the bounds widen until they cover it, where a normal quantile on the sample variance
    would not. The means between the ends are reported (``extra["means"]``), not tested. Where the first or last
    mean is 0 the secant is undefined and the cell undecided. ``stderr`` is the radius over the normal quantile of
    the level (for display: the test does not use it).
    """
    del power
    _check_alternative(alternative)
    extra = dict(extra or {})
    x = np.asarray(x, dtype=np.float64).ravel()
    r = np.asarray(replicates, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] != x.size or r.shape[0] < 3:
        raise ValueError(f"replicates must be (R >= 3, {x.size}): one column per size, got shape {r.shape}")
    if x.size < 2 or not x[-1] > x[0] > 0:
        raise ValueError(f"x must hold >= 2 increasing positive sizes, got {x.tolist()}")
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"bound must be finite and > 0, got {bound}")
    if not (np.isfinite(r).all() and (r >= 0).all() and (r <= bound).all()):
        raise ValueError(f"replicates must be finite and in [0, bound = {bound:.6g}]")
    n, span = r.shape[0], math.log(x[-1] / x[0])
    y = r.mean(axis=0)
    extra.update(means=y.tolist(), mean_se=(r.std(axis=0, ddof=1) / math.sqrt(n)).tolist(), bound=bound)
    method, assumption = "log-log secant slope (betting confidence sequence on the end columns)", \
        f"replicates in [0, {bound:.6g}]"
    if not (y[0] > 0 and y[-1] > 0):
        return Evidence(math.nan, predicted_slope, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, int(r.size),
                        method, ("secant undefined (a zero end mean)",), extra=extra, validity="non-asymptotic",
                        assumption=assumption)
    slope = math.log(y[-1] / y[0]) / span

    def log_e(s: float, side: int) -> float:
        """Evidence for "slope > s" (``side=+1``) or "slope < s" (``side=-1``)."""
        k = math.exp(min(s * span, 700.0))
        seq = BettingCS(lo=-k * bound, hi=bound, alpha=alpha, t_opt=n).update(r[:, -1] - k * r[:, 0])
        return seq.log_e(0.0, side)

    def p_value(s: float, side: int) -> float:
        return math.exp(-max(log_e(s, side), 0.0))

    def bound_at(level: float, side: int) -> float:
        """The one-sided confidence bound of the slope: upper (``side=-1``) or lower (``side=+1``)."""
        target, step = math.log(1.0 / level), 0.05
        if log_e(slope, side) >= target:
            return slope
        while not log_e(slope - side * step, side) >= target:
            step *= 2.0
            if step > 1e3 / span:
                return -side * math.inf
        return float(optimize.brentq(lambda s: log_e(s, side) - target, *sorted((slope, slope - side * step)),
                                     xtol=1e-4, rtol=1e-10))

    lo_null, hi_null = predicted_slope - tolerance, predicted_slope + tolerance
    if alternative == "two-sided":
        p = min(1.0, 2 * min(p_value(hi_null, +1), p_value(lo_null, -1)))
        low, high = bound_at(alpha / 2, +1), bound_at(alpha / 2, -1)
        upper, radius = max(high - predicted_slope, predicted_slope - low), (high - low) / 2
    elif alternative == "less":
        p = p_value(hi_null, +1)
        high = bound_at(alpha, -1)
        upper, radius = high - predicted_slope, high - slope
    else:
        p = p_value(lo_null, -1)
        low = bound_at(alpha, +1)
        upper, radius = predicted_slope - low, slope - low
    diff = slope - predicted_slope
    se = radius / stats.norm.isf(alpha / 2 if alternative == "two-sided" else alpha)
    return Evidence(slope, predicted_slope, se, diff / se if se > 0 else math.inf, float(min(p, 1.0)),
                    max(radius, 0.0), max(_signed_violation(diff, alternative), 0.0), max(upper, 0.0), int(r.size),
                    method, extra=extra, validity="non-asymptotic", assumption=assumption)


def _inverse_pd(matrix: np.ndarray, name: str) -> np.ndarray:
    """Inverse of a symmetric positive-definite matrix (Cholesky), or ValueError naming ``name``."""
    try:
        chol = np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        raise ValueError(f"{name} must be positive definite (a singular or indefinite covariance cannot weight a "
                         "fit)") from None
    inv_chol = np.linalg.inv(chol)
    return inv_chol.T @ inv_chol


def ratio_test(a, b, predicted_ratio: float, *, alpha: float, tolerance: float, alternative: str = "less",
               margin: float = 0.0, extra: dict | None = None) -> Evidence:
    r"""Repeated paired timings (or costs) ``a_i``, ``b_i``: test ``a/b`` against ``predicted_ratio``.

    The statistic is the mean of ``log(a_i/b_i)`` (pairs measured back to back share the machine's state),
    compared with ``log(predicted_ratio)`` by a t interval with ``repeats - 1`` degrees of freedom; effects
    are in log units (``tolerance = log(1.25)``: 25%). ``margin`` (log units) widens the null for what the
    machine can add — another CPU than the paper's, another core's load. ``alternative="less"``: the claim
    is ``a/b <= predicted`` (a violation is a larger ratio). Asymptotic (normal log-ratios).
    """
    _check_alternative(alternative)
    a, b = (np.asarray(v, dtype=np.float64).ravel() for v in (a, b))
    extra = dict(extra or {})
    if a.shape != b.shape:
        raise ValueError(f"a and b must pair up, got shapes {a.shape} and {b.shape}")
    if a.size < 3 or (a <= 0).any() or (b <= 0).any() or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return Evidence(math.nan, math.log(predicted_ratio), math.nan, math.nan, 1.0, math.inf, math.nan, math.inf,
                        int(a.size), "paired log-ratio t", ("need >= 3 positive finite paired measurements",),
                        extra=extra, validity="asymptotic")
    r = np.log(a / b)
    mean, se = float(r.mean()), float(r.std(ddof=1) / math.sqrt(r.size))
    se = max(se, 1e-12 * max(abs(mean), 1.0))
    diff = mean - math.log(predicted_ratio)
    tol = tolerance + margin
    p, upper, resolution = _interval(diff, se, tol, _Law(r.size - 1), alpha, alternative)
    extra.update(ratios=np.exp(r).tolist(), margin=margin)
    return Evidence(math.exp(mean), predicted_ratio, se, diff / se, p, resolution,
                    max(_signed_violation(diff, alternative), 0.0), max(upper - margin, 0.0), int(r.size),
                    f"paired log-ratio t ({r.size - 1} dof, machine margin {margin:.3g})", extra=extra,
                    validity="asymptotic", assumption="normal log-ratios of repeated paired timings")


def ks_test(samples, cdf, *, alpha: float, power: float = 0.8, tolerance: float = 0.0,
            extra: dict | None = None) -> Evidence:
    """One-sample Kolmogorov–Smirnov test that the law of ``samples`` is within ``tolerance`` of ``cdf``.

    A 2-D ``samples`` of shape ``(n, k)`` tests its ``k`` columns (each against ``cdf``, which must accept an
    array) at the Bonferroni level ``alpha / k`` in one vectorised pass: the p-value is ``min(1, k · min p)``,
    the effect the largest distance (as :func:`combine` over ``k`` one-column tests would give).
    """
    del power
    x = np.asarray(samples, dtype=np.float64)
    x = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    n, k = x.shape
    if n == 0 or k == 0:
        return Evidence(math.nan, 0.0, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, 0,
                        "Kolmogorov-Smirnov", ("no samples (empty evidence)",), extra=dict(extra or {}))
    f = np.asarray(cdf(np.sort(x, axis=0)), dtype=np.float64)
    i = np.arange(1, n + 1, dtype=np.float64)[:, None]
    distances = np.maximum((i / n - f).max(axis=0), (f - (i - 1) / n).max(axis=0))
    worst = int(np.argmax(distances))
    stat = float(distances[worst])
    crit = float(stats.kstwo.isf(alpha / k, n))
    p = min(1.0, k * float(stats.kstwo.sf(stat - tolerance, n))) if stat > tolerance else 1.0
    info = dict(extra or {})
    if k > 1:
        info.update(columns=k, worst_column=worst)
    return Evidence(stat, 0.0, 1 / (2 * math.sqrt(n)), stat, p, crit, stat, stat + crit, n * k,
                    "Kolmogorov-Smirnov" + (f" (Bonferroni over {k} columns)" if k > 1 else ""),
                    extra=info, validity="exact", assumption="iid samples, continuous claimed CDF")


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


def padded(lo: float, hi: float) -> tuple[float, float]:
    """Known bounds ``[lo, hi]`` of a replicate widened by their round-off (1e-9 of their width and magnitude): a
    convex combination computed in floating point may leave the exact hull of its points by a few ulps."""
    pad = 1e-9 * max(hi - lo, abs(lo), abs(hi), np.finfo(float).tiny)
    return lo - pad, hi + pad


def undecided(reason: str, *, extra: dict | None = None) -> Evidence:
    """A cell that no sample can decide (the quantity it would test has no value: an expectation that does not
    exist, a prediction that diverges): it cannot refute (``p_value = 1``), has no resolution, and carries
    ``reason`` as its flag, so the claim is not supported either."""
    return Evidence(estimate=math.nan, prediction=math.nan, stderr=math.inf, statistic=math.nan, p_value=1.0,
                    resolution=math.inf, effect=math.nan, upper=math.inf, n=0, method="undecided", flags=(reason,),
                    extra=dict(extra or {}), validity="asymptotic")


def flagged(evidence: Evidence, reason: str) -> Evidence:
    """``evidence`` that cannot refute (``p_value = 1``) and carries ``reason`` as a flag: the cell is
    undecidable (e.g. an expectation that need not exist), so the claim cannot be supported either."""
    return replace(evidence, flags=evidence.flags + (reason,), p_value=1.0)


def combine(evidences: list[Evidence], *, method: str | None = None, extra: dict | None = None) -> Evidence:
    """One cell's evidence from several sub-tests of the same hypothesis (Bonferroni inside the cell).

    The sub-tests must have been run at level ``alpha / len(evidences)``; the combined p-value is
    ``min(1, k · min p)``, the effect and resolution are the worst of the parts, flags are merged, and the
    validity is the weakest of the parts'. The part with the smallest p-value supplies estimate,
    prediction and statistic; the assumption lists every distinct assumption of the parts at the weakest
    validity (a deterministic check beside a KS test rests on both). Sequential parts' budget bookkeeping is
    kept, so the engine extends a cell whose sequential part spent its budget undecided.
    """
    if not evidences:
        raise ValueError("combine needs at least one Evidence")
    k = len(evidences)
    worst = min(evidences, key=lambda e: e.p_value)
    flags = tuple(dict.fromkeys(f for e in evidences for f in e.flags))
    parts = dict(extra or {})
    parts.setdefault("parts", k)
    weakest = max(evidences, key=lambda e: VALIDITY.index(e.validity))
    # what the combined validity rests on: every distinct assumption of the parts at the weakest class
    assumption = "; ".join(dict.fromkeys(e.assumption for e in evidences
                                         if e.validity == weakest.validity and e.assumption))
    sequential = [e for e in evidences if e.extra.get("sequential")]
    if sequential:
        # the engine's budget bookkeeping: the cell is undecided if any sequential part spent its budget
        # undecided; each part drew up to the cell's budget, so the cell used the most any part used
        spent = any(e.extra.get("status") == "budget spent" for e in sequential)
        parts.update(sequential=True, planned=max(e.extra["planned"] for e in sequential),
                     budget=max(e.extra["budget"] for e in sequential), used=max(e.n for e in sequential),
                     status="budget spent" if spent else "decided (all parts)")
    return Evidence(worst.estimate, worst.prediction, worst.stderr, worst.statistic,
                    min(1.0, k * worst.p_value), max(e.resolution for e in evidences),
                    max((e.effect for e in evidences if not math.isnan(e.effect)), default=math.nan),
                    max(e.upper for e in evidences), sum(e.n for e in evidences),
                    method or f"{worst.method} (Bonferroni over {k})", flags, extra=parts,
                    validity=weakest.validity, assumption=assumption)


def weakest_validity(evidences) -> str:
    """The weakest validity class among ``evidences`` (``exact`` for none)."""
    return max((e.validity for e in evidences), key=VALIDITY.index, default="exact")


def replicates_for_radius(n: float, radius: float, target: float) -> float:
    """Replicates at which a confidence radius of ``radius`` from ``n`` replicates falls to ``target`` on the
    ``1/√n`` law (a mean of iid replicates with finite variance, an order-statistic interval of a continuous law,
    a Monte Carlo error in ``n`` features): ``n·(radius/target)²``. An extrapolation from an outcome: what would
    decide an undecided cell, or a futility stop (a cell that stops for futility stays undecided, so it cannot
    refute or support anything it would not have)."""
    return n * (radius / target) ** 2


def required_replicates(rel_sd: float, *, alpha: float, tolerance: float, power: float = 0.8,
                        skewness: float | None = None, alternative: str = "two-sided",
                        resolution: float = 0.5) -> float:
    """Replicates a mean test with exact moments needs at one cell (a sample-size calculation).

    Enough for a confidence radius of about ``resolution · tolerance`` (a normal approximation),
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
