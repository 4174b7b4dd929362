r"""Anytime-valid confidence sequences for a mean, one class per assumption.

A *confidence sequence* (CS) at level ``α`` is a sequence of sets ``C_t`` that contains the true mean at
**every** time ``t`` simultaneously with probability ``≥ 1 - α``. A sequential cell may therefore look
at its CS after every round of replicates and stop as soon as it is decided — the coverage guarantee
holds at the (data-dependent) stopping time, and also for a fixed sample evaluated once.

Every sequence here is built from one or two nonnegative (super)martingales ``E_t(m)`` under the point
hypothesis "mean = m" — an *e-process*. Ville's inequality ``P(∃t: E_t(m) ≥ 1/α) ≤ α`` gives the CS
``{m : E_t(m) < 1/α}`` and the anytime-valid p-value ``p_t(m) = min(1, 1/E_t(m))``. Each class exposes:

* :meth:`~_Sequence.log_e` — ``log E_t(m)`` for the one-sided alternatives "mean > m" (``side=+1``) and
  "mean < m" (``side=-1``). Each one-sided process is nondecreasing in how far ``m`` lies on the null side,
  so its p-value at the nearest point of an *interval* null is a valid p-value for the whole interval;
* :meth:`~_Sequence.bounds` — the two-sided CS at level ``α`` (``α/2`` per side), found by root-finding;
* ``validity`` and ``assumption`` — what the guarantee rests on.

The procedures (the strongest the assumptions allow, in this order):

==========================  ===============  =========================================================
class                       validity         assumption and construction
==========================  ===============  =========================================================
:class:`BettingCS`          non-asymptotic   values in a known ``[lo, hi]``; hedged capital process with
                                             predictable-plug-in bets (Waudby-Smith & Ramdas 2024)
:class:`CatoniCS`           non-asymptotic   finite variance with a known bound ``σ² ≥ Var X`` (from
                                             :mod:`rfkit.theory`); Catoni-style supermartingale
                                             (Wang & Ramdas 2023)
:class:`AsymptoticCS`       asymptotic       iid with finite variance; Gaussian-mixture asymptotic CS
                                             (Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas 2024)
==========================  ===============  =========================================================

``CatoniCS`` uses the variance bound ``σ_i² = max(σ²_theory, s²_{i-1})`` (predictable: the sample variance
of the *previous* observations), so an estimator with more variance than theory predicts is judged with
its own larger spread instead of the correct estimator's — the guarantee stays valid whenever the theory
variance is a true upper bound, and only grows more conservative otherwise.

References
----------
I. Waudby-Smith and A. Ramdas (2024). Estimating means of bounded random variables by betting. JRSS-B 86(1).
H. Wang and A. Ramdas (2023). Catoni-style confidence sequences for heavy-tailed mean estimation. SPA 163.
I. Waudby-Smith, D. Arbour, R. Sinha, E. H. Kennedy and A. Ramdas (2024). Time-uniform central limit theory and
asymptotic confidence sequences. Annals of Statistics 52(6).
S. R. Howard, A. Ramdas, J. McAuliffe and J. Sekhon (2021). Time-uniform, nonparametric, nonasymptotic
confidence sequences. Annals of Statistics 49(2) (the two-sided normal-mixture boundary).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from scipy import optimize

__all__ = ["VALIDITY", "BettingCS", "CatoniCS", "AsymptoticCS", "catoni_influence", "mixture_rho2"]

#: Validity classes, strongest first: ``exact`` (the statistic's law is known exactly), ``non-asymptotic``
#: (a finite-sample guarantee under a stated assumption), ``asymptotic`` (valid in the large-sample limit).
VALIDITY = ("exact", "non-asymptotic", "asymptotic")


def catoni_influence(x):
    r"""Catoni's widest influence function ``φ(x) = sign(x)·log(1 + |x| + x²/2)``.

    It satisfies ``-log(1 - x + x²/2) <= φ(x) <= log(1 + x + x²/2)`` for all ``x``, which is what makes
    ``exp(Σ φ(λ_i(X_i - μ)) - σ² Σλ_i²/2)`` a supermartingale (Wang & Ramdas 2023), and it grows
    only logarithmically, so one huge replicate moves the sum by ``O(log)`` — the robustness to heavy tails.
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    return np.sign(x) * np.log1p(a + 0.5 * a * a)


@numba.njit(cache=True, nogil=True)
def _catoni_sum(lam, x, m, side):  # Σ φ(side·λ_i(x_i - m)) in one pass (the sum a CatoniCS evaluates)
    total = 0.0
    for i in range(x.size):
        y = side * lam[i] * (x[i] - m)
        a = abs(y)
        v = np.log1p(a + 0.5 * a * a)
        total += v if y >= 0 else -v
    return total


@numba.njit(cache=True, nogil=True)
def _betting_sum(lam, y, mu, side, cap):  # Σ log(1 + side·min(λ_i, cap)(y_i - μ)): log capital of a bet
    total = 0.0
    for i in range(y.size):
        total += np.log1p(side * min(lam[i], cap) * (y[i] - mu))
    return total


def mixture_rho2(alpha: float, t_opt: float) -> float:
    """Mixing variance of the Gaussian-mixture boundary that minimises the CS width at time ``t_opt``
    (Waudby-Smith et al. 2024; Howard et al. 2021): ``(-2 log α + log(1 - 2 log α)) / t``."""
    la = -2.0 * math.log(alpha)
    return (la + math.log1p(la)) / max(t_opt, 1.0)


class _Sequence:
    """Shared state and the generic bounds / p-value logic. Observations are kept (``float64``)."""

    validity = "asymptotic"

    def __init__(self, *, alpha: float, t_opt: int):
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        if not t_opt >= 1:
            raise ValueError(f"t_opt must be >= 1, got {t_opt}")
        self.alpha = float(alpha)
        self.t_opt = int(t_opt)
        self._x = np.empty(0)
        self._sum1 = 0.0
        self._moments: tuple[float, float] | None = None
        self._center: float | None = None

    # -- data ------------------------------------------------------------------------------------
    def update(self, x) -> _Sequence:
        """Add a round of observations (1-D, finite)."""
        x = np.asarray(x, dtype=np.float64).ravel()
        if not np.isfinite(x).all():
            raise ValueError("confidence sequences need finite observations")
        self._x = np.concatenate([self._x, x])
        self._sum1 += float(x.sum())
        self._extend(x)
        self._moments = self._center = None
        return self

    def _extend(self, x) -> None:  # per-class predictable quantities
        pass

    @property
    def t(self) -> int:
        return int(self._x.size)

    @property
    def values(self) -> np.ndarray:
        """Every observation so far (read-only view)."""
        view = self._x.view()
        view.flags.writeable = False
        return view

    @property
    def mean(self) -> float:
        return self._sum1 / self.t if self.t else math.nan

    def _mean_sd(self) -> tuple[float, float]:
        """Sample mean and standard deviation (ddof 1), cached until the next round."""
        if self._moments is None:
            x = self._x
            self._moments = (float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0)
        return self._moments

    @property
    def center(self) -> float:
        """The point the CS is centred on (where both one-sided processes are smallest); cached per round."""
        if self._center is None:
            self._center = self._find_center()
        return self._center

    def _find_center(self) -> float:
        return self.mean

    # -- inference -------------------------------------------------------------------------------
    def log_e(self, m: float, side: int) -> float:
        """``log E_t(m)``: evidence for "mean > m" (``side=+1``) or "mean < m" (``side=-1``)."""
        raise NotImplementedError

    def p_value(self, m: float, side: int) -> float:
        """Anytime-valid one-sided p-value of "mean <= m" (``side=+1``) or "mean >= m" (``side=-1``)."""
        return math.exp(-max(self.log_e(m, side), 0.0)) if self.t else 1.0

    def bounds(self, alpha: float | None = None) -> tuple[float, float]:
        """The two-sided CS ``(lower, upper)`` at level ``alpha`` (default: the design level), ``α/2`` a side."""
        alpha = self.alpha if alpha is None else alpha
        return self.lower(alpha / 2), self.upper(alpha / 2)

    def lower(self, alpha: float) -> float:
        """One-sided lower confidence bound at level ``alpha``: ``inf {m : p(m, +1) > alpha}``."""
        return self._root(alpha, +1)

    def upper(self, alpha: float) -> float:
        """One-sided upper confidence bound at level ``alpha``."""
        return self._root(alpha, -1)

    def _scale(self) -> float:
        if not self.t:
            return 1.0
        mean, sd = self._mean_sd()
        return float(max(sd, abs(mean) * 1e-12, 1e-300))

    def _edge(self, side: int) -> float:
        """The smallest (``side=+1``) or largest possible mean."""
        return -side * math.inf

    def _root(self, alpha: float, side: int) -> float:
        if self.t == 0:
            return -side * math.inf
        target = math.log(1.0 / alpha)
        c = self.center

        def g(m):  # > 0 where m is excluded
            return self.log_e(m, side) - target

        if g(c) > 0:  # the CS is empty at its centre: cannot happen for these processes, but be safe
            return c
        edge = self._edge(side)
        step = self._radius_guess(alpha)
        far = c - side * step
        for _ in range(200):
            if side * (far - edge) <= 0:
                far = edge
                if not g(far) > 0:
                    return edge
                break
            if g(far) > 0:
                break
            step *= 1.5
            far = c - side * step
        else:
            return edge
        # the bound to 1e-5 of the distance searched (far below any tolerance a claim states)
        return float(optimize.brentq(g, *sorted((far, c)), xtol=1e-5 * step, rtol=1e-12, maxiter=200))

    def _radius_guess(self, alpha: float) -> float:
        """A first guess of the one-sided radius, to bracket the root: the fixed-``t`` sub-Gaussian radius."""
        return self._scale() * math.sqrt(2.0 * math.log(1.0 / alpha) / self.t)


class AsymptoticCS(_Sequence):
    r"""Gaussian-mixture asymptotic confidence sequence for iid means (Waudby-Smith et al. 2024).

    With the running mean ``μ̂_t`` and standard deviation ``σ̂_t``,

    .. math:: C_t = μ̂_t ± σ̂_t \sqrt{\frac{2(tρ² + 1)}{t²ρ²} \log\frac{\sqrt{tρ²+1}}{α}},

    ``ρ²`` from :func:`mixture_rho2` at ``t_opt``. Its e-value at ``m`` is the Gaussian mixture of
    ``exp(λS - λ²t/2)`` with ``S = t(μ̂ - m)/σ̂``: ``exp(ρ²S²/(2(tρ²+1))) / sqrt(tρ²+1)`` — two-sided;
    the one-sided p-values halve it in the direction of the deviation (the limiting Brownian motion is
    symmetric). **Asymptotic**: the coverage holds as ``t → ∞`` for iid data with finite variance.
    """

    validity = "asymptotic"
    assumption = "iid replicates with finite variance (time-uniform CLT)"

    def __init__(self, *, alpha: float, t_opt: int):
        super().__init__(alpha=alpha, t_opt=t_opt)
        self.rho2 = mixture_rho2(alpha, t_opt)

    def log_e(self, m, side):
        t = self.t
        if t < 2:
            return 0.0
        mean, sd = self._mean_sd()
        diff = mean - m
        if sd == 0.0:
            return math.inf if side * diff > 0 else 0.0
        s = t * diff / sd
        a = t * self.rho2 + 1.0
        log_two_sided = self.rho2 * s * s / (2.0 * a) - 0.5 * math.log(a)
        return log_two_sided + math.log(2.0) if side * diff > 0 else 0.0

    def radius(self, alpha: float) -> float:
        """Half-width of the two-sided CS at level ``alpha`` (the Gaussian-mixture boundary, closed form)."""
        t = self.t
        if t < 2:
            return math.inf
        _, sd = self._mean_sd()
        a = t * self.rho2 + 1.0
        return sd * math.sqrt(2.0 * a / (t * t * self.rho2) * math.log(math.sqrt(a) / alpha))

    def _root(self, alpha, side):
        # one-sided at level alpha = the two-sided boundary at 2·alpha (see log_e)
        if self.t < 2:
            return -side * math.inf
        return self.mean - side * self.radius(min(2.0 * alpha, 1.0))


class CatoniCS(_Sequence):
    r"""Catoni-style confidence sequence from a variance bound (Wang & Ramdas 2023).

    Under ``E X = μ`` and ``Var X <= σ²``,
    ``M_t^±(μ) = exp(Σ_{i<=t} φ(±λ_i(X_i - μ)) - σ² Σ λ_i²/2)`` are nonnegative supermartingales for
    Catoni's influence function ``φ`` (:func:`catoni_influence`) and any predictable ``λ_i > 0``. Here
    ``σ_i² = max(σ²_bound, s²_{i-1})`` (see the module docstring) and

    .. math:: λ_i = \sqrt{\frac{2 \log(2/α)}{σ_i² \max(i, t_{opt})}},

    constant (the fixed-``n`` optimum at ``t_opt``) up to the planned size and decaying as ``1/\sqrt i``
    after it, so a cell that is given more budget keeps tightening. **Non-asymptotic**: valid at every
    ``t`` for every distribution whose variance is at most ``σ²_bound`` — heavy tails included.
    """

    validity = "non-asymptotic"

    def __init__(self, *, variance: float, alpha: float, t_opt: int):
        super().__init__(alpha=alpha, t_opt=t_opt)
        if not (variance >= 0 and math.isfinite(variance)):
            raise ValueError(f"variance bound must be finite and >= 0, got {variance}")
        self.variance = float(variance)
        self.assumption = f"variance <= {self.variance:.6g} (closed form from rfkit.theory) or the sample's"
        self._lam = np.empty(0)
        self._sig2 = np.empty(0)
        self._sum = 0.0
        self._sumsq = 0.0
        self._shift: float | None = None
        self._penalty = 0.0

    def _extend(self, x):
        n0 = self._lam.size
        i = np.arange(n0 + 1, n0 + x.size + 1, dtype=np.float64)
        # sample variance of the observations *before* each one (predictable)
        if x.size == 0:
            return
        if self._shift is None:
            self._shift = float(x[0])  # sums of shifted values: no cancellation when |mean| >> sd
        z = x - self._shift
        csum = self._sum + np.concatenate([[0.0], np.cumsum(z)[:-1]])
        csq = self._sumsq + np.concatenate([[0.0], np.cumsum(z * z)[:-1]])
        prev = i - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            s2 = np.where(prev >= 2, (csq - csum * csum / np.maximum(prev, 1)) / np.maximum(prev - 1, 1), 0.0)
        sig2 = np.maximum(self.variance, np.maximum(s2, 0.0))
        sig2 = np.where(sig2 > 0, sig2, np.finfo(float).tiny)
        lam = np.sqrt(2.0 * math.log(2.0 / self.alpha) / (sig2 * np.maximum(i, self.t_opt)))
        self._lam = np.concatenate([self._lam, lam])
        self._sig2 = np.concatenate([self._sig2, sig2])
        self._penalty += float((sig2 * lam * lam).sum())  # σ² Σ λ_i² (σ_i² per step)
        self._sum += float(z.sum())
        self._sumsq += float((z * z).sum())

    def _find_center(self) -> float:
        """The Catoni M-estimate: the ``m`` where ``Σ φ(λ_i(X_i - m)) = 0``."""
        lam, x = self._lam, self._x
        lo, hi = float(x.min()), float(x.max())
        if lo == hi:
            return lo
        mean, sd = self._mean_sd()
        near = 4.0 * sd / math.sqrt(self.t)  # bracket near the mean first (the sum is decreasing in m)
        if _catoni_sum(lam, x, mean - near, 1.0) >= 0 >= _catoni_sum(lam, x, mean + near, 1.0):
            lo, hi = mean - near, mean + near
        return float(optimize.brentq(lambda m: _catoni_sum(lam, x, m, 1.0), lo, hi,
                                     xtol=1e-6 * self._scale() / math.sqrt(self.t), rtol=1e-12))

    def _radius_guess(self, alpha):
        # φ(u) ≈ u for small u: the sub-Gaussian radius (σ²Σλ²/2 + log(1/α)) / Σλ, a slight underestimate
        return (0.5 * self._penalty + math.log(1.0 / alpha)) / float(self._lam.sum())

    def log_e(self, m, side):
        if self.t == 0:
            return 0.0
        return _catoni_sum(self._lam, self._x, float(m), float(side)) - 0.5 * self._penalty


class BettingCS(_Sequence):
    r"""Betting confidence sequence for a mean of values in ``[lo, hi]`` (Waudby-Smith & Ramdas 2024).

    On ``Y = (X - lo)/(hi - lo) ∈ [0, 1]`` and a candidate mean ``m``, the capital processes
    ``K_t^+(m) = Π(1 + λ_i^+(Y_i - m))`` and ``K_t^-(m) = Π(1 - λ_i^-(Y_i - m))`` are nonnegative martingales
    under mean ``m`` when the bets ``λ_i^+ ∈ [0, 1/m)``, ``λ_i^- ∈ [0, 1/(1-m))`` are predictable. The bets
    are their predictable plug-in, truncated at ``1/(2m)`` and ``1/(2(1-m))`` as they recommend:

    .. math:: λ_i = \min\Big(\sqrt{\frac{2\log(2/α)}{\hat σ²_{i-1}\, \max(i, t_{opt})}}, c\Big),
              \hat σ²_i = \frac{1/4 + Σ_{j<=i}(Y_j - \hat μ_j)²}{i + 1}, \hat μ_i = \frac{1/2 + Σ_{j<=i} Y_j}{i + 1}.

    ``K^+`` alone tests "mean <= m", ``K^-`` "mean >= m" (the two-sided CS is their hedge at ``α/2`` each).
    **Non-asymptotic**: valid at every ``t`` for any law on ``[lo, hi]``.
    """

    validity = "non-asymptotic"

    def __init__(self, *, lo: float, hi: float, alpha: float, t_opt: int):
        super().__init__(alpha=alpha, t_opt=t_opt)
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            raise ValueError(f"need finite bounds lo < hi, got [{lo}, {hi}]")
        self.lo, self.hi = float(lo), float(hi)
        self.assumption = f"values in [{self.lo:.6g}, {self.hi:.6g}]"
        self._ycache: np.ndarray | None = None
        self._lam = np.empty(0)
        self._s = 0.0
        self._v = 0.25

    def update(self, x):
        x = np.asarray(x, dtype=np.float64).ravel()
        if ((x < self.lo) | (x > self.hi)).any():
            raise ValueError(f"observations outside the declared range [{self.lo}, {self.hi}]")
        return super().update(x)

    def _extend(self, x):
        if x.size == 0:
            return
        y = (x - self.lo) / (self.hi - self.lo)
        n0 = self._lam.size
        i = np.arange(n0 + 1, n0 + y.size + 1, dtype=np.float64)
        cs = self._s + np.cumsum(y)
        mu = (0.5 + cs) / (i + 1)  # μ̂_i after observation i
        v = self._v + np.cumsum((y - mu) ** 2)
        var_prev = np.concatenate([[self._v / (n0 + 1)], (v / (i + 1))[:-1]])
        lam = np.sqrt(2.0 * math.log(2.0 / self.alpha) / (var_prev * np.maximum(i, self.t_opt)))
        self._lam = np.concatenate([self._lam, lam])
        self._s = float(cs[-1])
        self._v = float(v[-1])

    def _y(self, m):
        if self._ycache is None or self._ycache.size != self.t:
            self._ycache = (self._x - self.lo) / (self.hi - self.lo)
        return self._ycache, (m - self.lo) / (self.hi - self.lo)

    def log_e(self, m, side):
        if self.t == 0:
            return 0.0
        y, mu = self._y(m)
        if (mu <= 0.0 and side < 0) or (mu >= 1.0 and side > 0):
            return 0.0  # "mean >= lo" / "mean <= hi" hold for every law on the range: no evidence against
        if mu < 0.0 or mu > 1.0:
            return math.inf  # a mean outside the range is impossible
        cap = math.inf if (mu == 0.0 or mu == 1.0) else 0.5 / (mu if side > 0 else 1.0 - mu)
        return _betting_sum(self._lam, y, float(mu), float(side), cap)

    def _scale(self) -> float:
        return max(super()._scale(), 1e-12 * (self.hi - self.lo))

    def _edge(self, side):
        return self.lo if side > 0 else self.hi
