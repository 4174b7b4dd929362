"""Tests of the anytime-valid confidence sequences of :mod:`rfkit.validation.sequences`.

* ``BettingCS`` against the authors' code: the bets, the capital processes and the grid CS of ``confseq``
  0.0.11 (reference numbers pinned below; how they were produced is stated next to them);
* ``AsymptoticCS`` against the closed form of Waudby-Smith et al. (2024) (its Gaussian-mixture CS) and its Gaussian
  mixture, computed independently here;
* ``CatoniCS`` and ``BettingCS``: the (super)martingale property by *exact* expectation over every path
  of small discrete laws (no simulation, so no false failures);
* time-uniform coverage by simulation: the fraction of paths whose sequence *ever* misses the mean, at
  every ``t`` up to 2000, must not be significantly above ``alpha``.

Statistical tests state their seed, budget and false-failure probability next to them; each uses a
one-sided Clopper–Pearson lower bound at confidence ``1 - FALSE_FAILURE`` (0.1% per test).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from rfkit.validation.sequences import AsymptoticCS, BettingCS, CatoniCS, catoni_influence, mixture_rho2

#: Probability that a statistical test below fails although the sequence is valid (per test).
FALSE_FAILURE = 1e-3


def cp_lower(k: int, n: int, delta: float = FALSE_FAILURE) -> float:
    """One-sided Clopper–Pearson lower confidence bound at level ``1 - delta`` for ``k`` of ``n``."""
    return float(stats.beta.ppf(delta, k, n - k + 1)) if k > 0 else 0.0


# ------------------------------------------------------------------------------------------------------
# BettingCS against confseq 0.0.11
# ------------------------------------------------------------------------------------------------------
# Reference numbers produced once (throwaway script, not in the repository) by the pure-Python modules of
# confseq 0.0.11 (sdist, src/confseq/betting.py and betting_strategies.py; `multiprocess` stubbed out and
# `np.float_ = np.float64` set for numpy 2), with alpha = 0.05, on the data Y below:
#   CONFSEQ_LAMBDAS  = lambda_predmix_eb(Y, alpha=alpha/2, fixed_n=30)          (truncation=inf, prior 1/2, 1/4)
#   CONFSEQ_LOG_K*_m = log(betting_mart(Y, m, alpha=alpha, lambdas_fn_positive=lam, lambdas_fn_negative=lam,
#                                       theta=1 (K+) or 0 (K-), trunc_scale=1/2))  at every t = 1..30,
#     where lam = lambda x, m: lambda_predmix_eb(x, alpha=alpha/2, fixed_n=30);
#   CONFSEQ_FINAL[m] = the same two log capitals at t = 30;
#   CONFSEQ_CS_*     = betting_cs(Y, lambdas_fns_positive=lam, lambdas_fns_negative=lam, alpha=alpha,
#                                 breaks=10000, running_intersection=False, theta=1/2, trunc_scale=1/2)
#                      at t = 10 and t = 30 (grid points, widened outward by 1/breaks).
# Our BettingCS with t_opt = 30 bets exactly lambda_predmix_eb(., alpha/2, fixed_n=t_opt) while t <= t_opt
# (its max(i, t_opt) design keeps decaying after t_opt, where confseq's fixed_n bets stay constant).
Y = np.array([0.31, 0.12, 0.58, 0.27, 0.05, 0.44, 0.19, 0.73, 0.36, 0.22,
              0.09, 0.41, 0.28, 0.15, 0.66, 0.33, 0.24, 0.51, 0.07, 0.38,
              0.29, 0.17, 0.47, 0.25, 0.34, 0.11, 0.62, 0.21, 0.30, 0.26])
CONFSEQ_LAMBDAS = [
    0.991817114070793, 1.377989025708445, 1.581099602699401, 1.710712987958882, 1.891934113268783,
    1.900436767691467, 2.019873726085244, 2.124852298576594, 1.958907340738046, 2.06482489296324, 2.137874068118694,
    2.138101867507437, 2.214034952328191, 2.294054011332905, 2.327588502416491, 2.236690435749251,
    2.305495273085505, 2.360361280542721, 2.381586362379132, 2.352041772881043, 2.406482321370993,
    2.461289080598134, 2.485668757645208, 2.510788727439366, 2.555340736661107, 2.605568026053501,
    2.597574326636389, 2.536499888676551, 2.566291253453378, 2.609597081525747,
]
CONFSEQ_LOG_KPLUS_02 = [
    0.103548769729885, -0.01325375909423, 0.45726089519707, 0.570366260174517, 0.236584237893119, 0.612349179750539,
    0.591943658744395, 1.346266705978863, 1.618905068011725, 1.659371637320817, 1.39127498231143, 1.76214960643389,
    1.925222759079956, 1.803391000256487, 2.531273228741521, 2.786511979733516, 2.874724128854117,
    3.423834641662092, 3.053341482841163, 3.40636703924126, 3.60241348480417, 3.525706645144728, 4.039207027291559,
    4.156990062947942, 4.457094655398281, 4.202202405769491, 4.920042198919807, 4.944734811510179,
    5.167878362824389, 5.307640305199548,
]
CONFSEQ_LOG_KMINUS_02 = [
    -0.071227509288368, -0.022437345118936, -0.293590115619506, -0.338326009460897, -0.24871385077121,
    -0.411232780268985, -0.405002230518349, -0.80734721129027, -0.912707726948096, -0.925286509154956,
    -0.858796767886123, -0.999496649989258, -1.050789944376809, -1.020018285710055, -1.358993652549387,
    -1.443734881004477, -1.469052688988767, -1.684414099860922, -1.60629632059697, -1.725643078229536,
    -1.783537056648439, -1.764960671075503, -1.949785358087576, -1.981534056402157, -2.073101249927647,
    -2.018376350238401, -2.322865541006563, -2.329135154020158, -2.393673675157729, -2.431894887977927,
]
CONFSEQ_LOG_KPLUS_045 = [
    -0.149491678480189, -0.606250080975904, -0.471330763076533, -0.694474314390743, -1.282260979292862,
    -1.293434279890987, -1.634360866861581, -1.363485912726181, -1.468846428384007, -1.763963479323306,
    -2.274789103089297, -2.320251477166054, -2.529601706347928, -2.935066814456093, -2.725346283474023,
    -2.868447127114697, -3.134150292847703, -3.069611771710131, -3.618177723458969, -3.699146785992636,
    -3.894891363118732, -4.267566648403905, -4.24558774168513, -4.496902169966036, -4.62726398782928,
    -5.101721967424395, -4.928702803292754, -5.238857731596593, -5.421179288390548, -5.658309081679498,
]
CONFSEQ_LOG_KMINUS_045 = [
    0.119801199812621, 0.382165464280112, 0.256396076991078, 0.407945975118279, 0.718100903422119,
    0.727150738942037, 0.939325258885672, 0.645564140357509, 0.724207267676622, 0.91407603010596, 1.19720228602188,
    1.232920368623959, 1.376627089290134, 1.617789146107022, 1.405945150046746, 1.509485828987586,
    1.684202786396321, 1.628113319745278, 1.924845227716977, 1.986538796722317, 2.122340337881378,
    2.349113657246167, 2.330764518577971, 2.497818603241137, 2.593128783045462, 2.862461716829046,
    2.694580844189886, 2.891940278348381, 3.019773649858266, 3.179105688427522,
]
CONFSEQ_FINAL = {
    0.15: (8.054287621484926, -3.2432583090525497),
    0.3: (-0.44679137069169605, -0.5502586808570752),
    0.6: (-8.701527170736561, 8.691928566256708),
}
CONFSEQ_CS_T10 = (0.0527, 0.6642)
CONFSEQ_CS_T30 = (0.22550000000000003, 0.4668)
CONFSEQ_BREAKS = 10_000


def _betting(lo=0.0, hi=1.0, t_opt=30, alpha=0.05):
    return BettingCS(lo=lo, hi=hi, alpha=alpha, t_opt=t_opt)


@pytest.mark.parametrize("m, plus, minus", [(0.2, CONFSEQ_LOG_KPLUS_02, CONFSEQ_LOG_KMINUS_02),
                                            (0.45, CONFSEQ_LOG_KPLUS_045, CONFSEQ_LOG_KMINUS_045)])
def test_betting_capital_matches_confseq_at_every_t(m, plus, minus):
    # log K_t^±(m) after each prefix of Y equals confseq's betting_mart with the same bets (which checks
    # the bets lambda_predmix_eb(., alpha/2, fixed_n=30) and the 1/(2m), 1/(2(1-m)) truncation too)
    for t in range(1, Y.size + 1):
        cs = _betting().update(Y[:t])
        assert cs.log_e(m, +1) == pytest.approx(plus[t - 1], abs=1e-12)
        assert cs.log_e(m, -1) == pytest.approx(minus[t - 1], abs=1e-12)


@pytest.mark.parametrize("m", sorted(CONFSEQ_FINAL))
def test_betting_final_capital_matches_confseq(m):
    cs = _betting().update(Y)
    assert cs.log_e(m, +1) == pytest.approx(CONFSEQ_FINAL[m][0], abs=1e-12)
    assert cs.log_e(m, -1) == pytest.approx(CONFSEQ_FINAL[m][1], abs=1e-12)


def test_betting_bets_are_confseq_lambda_predmix_eb():
    # one observation at a time: log K_t - log K_{t-1} = log(1 + λ_t (y_t - m)) recovers the bet λ_t at an m
    # where the truncation 1/(2m) never binds (m = 0.04: cap 12.5; no y_t equals it)
    m, prev, bets = 0.04, 0.0, []
    cs = _betting()
    for y in Y:
        cs.update([y])
        cur = cs.log_e(m, +1)
        bets.append(math.expm1(cur - prev) / (y - m))
        prev = cur
    np.testing.assert_allclose(bets, CONFSEQ_LAMBDAS, rtol=1e-9)


@pytest.mark.parametrize("t, ref", [(10, CONFSEQ_CS_T10), (30, CONFSEQ_CS_T30)])
def test_betting_cs_matches_confseq_grid(t, ref):
    # confseq's grid CS is (first grid point kept - 1/breaks, last kept + 1/breaks): ours lies within
    # one grid step inside it (up to the root-finder's tolerance, ~1e-5 of its search step)
    low, high = _betting().update(Y[:t]).bounds(0.05)
    step, slack = 1.0 / CONFSEQ_BREAKS, 1e-6
    assert ref[0] - slack <= low <= ref[0] + step + slack
    assert ref[1] - step - slack <= high <= ref[1] + slack


def test_betting_is_affine_equivariant():
    lo, hi = -2.0, 5.0
    x = lo + (hi - lo) * Y
    a = _betting().update(Y)
    b = _betting(lo, hi).update(x)
    for m in (0.2, 0.45):
        assert b.log_e(lo + (hi - lo) * m, +1) == pytest.approx(a.log_e(m, +1), abs=1e-12)
    # the bounds are roots found to ~1e-5 of the search step (sequences._root), so compare to 1e-5 of the range
    (la, ha), (lb, hb) = a.bounds(0.05), b.bounds(0.05)
    assert lb == pytest.approx(lo + (hi - lo) * la, abs=1e-5 * (hi - lo))
    assert hb == pytest.approx(lo + (hi - lo) * ha, abs=1e-5 * (hi - lo))


@pytest.mark.parametrize("cls, kwargs", [(BettingCS, dict(lo=0.0, hi=1.0)), (CatoniCS, dict(variance=0.04)),
                                         (AsymptoticCS, {})])
def test_rounds_give_the_same_process_as_one_update(cls, kwargs):
    # the bets are predictable, so feeding the data in rounds (as sequential_mean does) changes nothing
    whole = cls(alpha=0.05, t_opt=20, **kwargs).update(Y)
    parts = cls(alpha=0.05, t_opt=20, **kwargs)
    for chunk in np.split(Y, [7, 8, 20]):
        parts.update(chunk)
    for m in (0.1, 0.3, 0.5):
        for side in (+1, -1):
            assert parts.log_e(m, side) == pytest.approx(whole.log_e(m, side), abs=1e-12)
    np.testing.assert_allclose(parts.bounds(0.05), whole.bounds(0.05), atol=1e-5)  # roots to ~1e-5 of the step


# ------------------------------------------------------------------------------------------------------
# AsymptoticCS against Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas (2024), the Gaussian-mixture CS for iid means
# ------------------------------------------------------------------------------------------------------
def _thm22_radius(x: np.ndarray, alpha: float, t_opt: int) -> tuple[float, float]:
    """Centre and radius of the Gaussian-mixture asymptotic CS, written out here independently:
    ``μ̂_t ± sqrt( 2(t σ̂² r² + 1)/(t² r²) · log( sqrt(t σ̂² r² + 1)/α ) )`` with the mixing scale in data
    units ``r = ρ/σ̂_t`` and ``ρ² = (-2 log α + log(1 - 2 log α))/t_opt`` (the width-optimal mixing variance
    for standardised data at ``t_opt``); ``σ̂_t`` the sample standard deviation (``ddof=1``)."""
    t = x.size
    mean, sd = float(np.mean(x)), float(np.std(x, ddof=1))
    rho2 = (-2.0 * math.log(alpha) + math.log(1.0 - 2.0 * math.log(alpha))) / t_opt
    r2 = rho2 / sd**2
    a = t * sd**2 * r2 + 1.0
    return mean, math.sqrt(2.0 * a / (t * t * r2) * math.log(math.sqrt(a) / alpha))


@pytest.mark.parametrize("alpha", [0.05, 1e-3])
@pytest.mark.parametrize("t_opt", [50, 1000])
@pytest.mark.parametrize("t", [20, 300])
def test_asymptotic_cs_is_theorem_2_2(alpha, t_opt, t):
    x = np.random.default_rng(20_240_622).gamma(2.0, 3.0, t)
    cs = AsymptoticCS(alpha=alpha, t_opt=t_opt).update(x)
    assert cs.rho2 == pytest.approx(mixture_rho2(alpha, t_opt), rel=1e-15)
    assert mixture_rho2(alpha, t_opt) == pytest.approx(
        (-2 * math.log(alpha) + math.log1p(-2 * math.log(alpha))) / t_opt, rel=1e-15)
    centre, radius = _thm22_radius(x, alpha, t_opt)
    low, high = cs.bounds(alpha)
    assert low == pytest.approx(centre - radius, abs=1e-9 * radius)
    assert high == pytest.approx(centre + radius, abs=1e-9 * radius)
    # the one-sided bounds are the two-sided CS at level 2α
    assert cs.upper(alpha / 2) == pytest.approx(high, abs=1e-9 * radius)


def test_asymptotic_e_value_is_the_gaussian_mixture():
    # E_t(m) = ∫ exp(λS - λ²t/2) N(λ; 0, ρ²) dλ with S = t(μ̂ - m)/σ̂ (two-sided); one-sided = 2× in the
    # direction of the deviation, 1 (log 0) against it
    x = np.random.default_rng(7).normal(0.3, 2.0, 400)
    cs = AsymptoticCS(alpha=0.01, t_opt=300).update(x)
    t, mean, sd = x.size, x.mean(), x.std(ddof=1)
    for m in (0.0, 0.2, 0.5):
        s = t * (mean - m) / sd
        mix, _ = integrate.quad(
            lambda lam, s=s: math.exp(lam * s - lam * lam * t / 2) * stats.norm.pdf(lam, 0, math.sqrt(cs.rho2)),
            -np.inf, np.inf, epsabs=0, epsrel=1e-12)
        side = +1 if mean > m else -1
        assert cs.log_e(m, side) == pytest.approx(math.log(2 * mix), abs=1e-9)
        assert cs.log_e(m, -side) == 0.0


# ------------------------------------------------------------------------------------------------------
# CatoniCS: the supermartingale, exactly
# ------------------------------------------------------------------------------------------------------
def _two_point(mu: float, sd: float, p: float):
    """Law with P(a) = p, P(b) = 1 - p, mean mu, variance sd²."""
    return np.array([mu + sd * math.sqrt((1 - p) / p), mu - sd * math.sqrt(p / (1 - p))]), np.array([p, 1 - p])


#: Discrete laws (values, probabilities): mean and variance computed from them.
LAWS = {
    "two-point symmetric": _two_point(0.0, 1.0, 0.5),
    "two-point skewed": _two_point(1.0, 2.0, 0.05),
    "three-point": (np.array([-1.0, 0.0, 3.0]), np.array([0.3, 0.6, 0.1])),
    "three-point shifted": (np.array([2.0, 5.0, 40.0]), np.array([0.5, 0.49, 0.01])),
}


def _moments(values, probs):
    mu = float(probs @ values)
    return mu, float(probs @ (values - mu) ** 2)


@pytest.mark.parametrize("law", sorted(LAWS))
@pytest.mark.parametrize("lam", [0.01, 0.3, 1.0, 2.5, 10.0, 100.0])
@pytest.mark.parametrize("side", [+1, -1])
def test_catoni_one_step_supermartingale_exact(law, lam, side):
    # E[exp(φ(±λ(X - μ)) - λ²σ²/2)] <= 1 exactly (enumeration), for Var X = σ²
    values, probs = LAWS[law]
    mu, var = _moments(values, probs)
    e = float(probs @ np.exp(catoni_influence(side * lam * (values - mu)) - lam * lam * var / 2))
    assert e <= 1 + 1e-12


def test_catoni_supermartingale_check_can_fail():
    # the same expectation with a variance bound 4× too small exceeds 1: the enumeration is a real check
    values, probs = LAWS["two-point symmetric"]
    mu, var = _moments(values, probs)
    e = float(probs @ np.exp(catoni_influence(1.0 * (values - mu)) - var / 4 / 2))
    assert e > 1.2


def _path_expectation(make, values, probs, steps, m, side) -> float:
    """Exact E[E_t(m)] over every path of ``steps`` iid draws from the discrete law (``make()`` a new CS)."""
    total = 0.0
    for idx in itertools.product(range(values.size), repeat=steps):
        cs = make().update(values[list(idx)])
        total += float(np.prod(probs[list(idx)])) * math.exp(cs.log_e(m, side))
    return total


@pytest.mark.parametrize("law", sorted(LAWS))
@pytest.mark.parametrize("alpha, t_opt", [(0.05, 1), (0.05, 4), (1e-3, 2), (0.5, 4)])
@pytest.mark.parametrize("side", [+1, -1])
def test_catoni_class_is_a_supermartingale_over_all_paths(law, alpha, t_opt, side):
    # CatoniCS as implemented (predictable σ_i² = max(σ², s²_{i-1}), λ_i from t_opt): E[M_4(μ)] <= 1 and the
    # process at t = 1..4 too, by enumeration of all paths (2^4 or 3^4), so no simulation error
    values, probs = LAWS[law]
    mu, var = _moments(values, probs)
    for steps in (1, 2, 4):
        e = _path_expectation(lambda: CatoniCS(variance=var, alpha=alpha, t_opt=t_opt), values, probs, steps, mu, side)
        assert e <= 1 + 1e-12, (steps, e)


def test_catoni_class_fails_with_a_too_small_variance_bound():
    # planted error: the bound σ²/10 (the sample-variance floor only starts at the third step) — the
    # enumeration must see the expectation exceed 1
    values, probs = LAWS["two-point symmetric"]
    mu, var = _moments(values, probs)
    e = _path_expectation(lambda: CatoniCS(variance=var / 10, alpha=0.05, t_opt=2), values, probs, 2, mu, +1)
    assert e > 1.0


# ------------------------------------------------------------------------------------------------------
# BettingCS: the capital process is a martingale, exactly
# ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values, m", [((0.1, 0.9), 0.3), ((0.0, 1.0), 0.5), ((0.7, 0.95), 0.9), ((0.0, 0.2), 0.02)])
@pytest.mark.parametrize("lo, hi", [(0.0, 1.0), (-2.0, 5.0)])
@pytest.mark.parametrize("side", [+1, -1])
@pytest.mark.parametrize("steps", [1, 2, 5])
def test_betting_capital_is_a_martingale_exact(values, m, lo, hi, side, steps):
    # two-point law on [0, 1] with mean m (mapped to [lo, hi]): E[K_t^±(m)] = 1 exactly for t = 1, 2, 5,
    # including where the 1/(2m) or 1/(2(1-m)) truncation binds (m = 0.9, m = 0.02)
    a, b = values
    p = (m - b) / (a - b)
    vals = lo + (hi - lo) * np.array([a, b])
    e = _path_expectation(lambda: BettingCS(lo=lo, hi=hi, alpha=0.05, t_opt=3), vals, np.array([p, 1 - p]), steps,
                          lo + (hi - lo) * m, side)
    assert e == pytest.approx(1.0, abs=1e-12)


# ------------------------------------------------------------------------------------------------------
# Time-uniform coverage by simulation
# ------------------------------------------------------------------------------------------------------
T_PATH = 2000


def _running_log_e(cs, x: np.ndarray, m: float, side: int) -> np.ndarray:
    """``log E_t(m)`` at every ``t = 1..len(x)`` from ONE pass: the bets are predictable, so the process at
    ``t`` is a cumulative sum of per-observation terms. Uses the classes' stored bets (``_lam``, ``_sig2``);
    :func:`test_running_log_e_matches_public_api` checks it against ``log_e`` of prefixes."""
    cs.update(x)
    if isinstance(cs, CatoniCS):
        terms = catoni_influence(side * cs._lam * (x - m)) - 0.5 * cs._sig2 * cs._lam**2
        return np.cumsum(terms)
    if isinstance(cs, BettingCS):
        y, mu = (x - cs.lo) / (cs.hi - cs.lo), (m - cs.lo) / (cs.hi - cs.lo)
        cap = 0.5 / (mu if side > 0 else 1.0 - mu)
        return np.cumsum(np.log1p(side * np.minimum(cs._lam, cap) * (y - mu)))
    t = np.arange(1, x.size + 1)
    mean = np.cumsum(x) / t
    var = (np.cumsum(x * x) - t * mean * mean) / np.maximum(t - 1, 1)
    s = t * (mean - m) / np.sqrt(np.maximum(var, 1e-300))
    a = t * cs.rho2 + 1.0
    out = cs.rho2 * s * s / (2 * a) - 0.5 * np.log(a) + math.log(2.0)
    out[side * (mean - m) <= 0] = 0.0
    out[0] = 0.0  # t = 1: no variance, no evidence
    return out


def _ever_misses(make, sample, mu, paths, seed, alpha, t_min=1) -> int:
    """Paths (of ``T_PATH`` draws) whose two-sided CS at level ``alpha`` excludes ``mu`` at some ``t >= t_min``:
    the CS excludes ``mu`` exactly when a one-sided process reaches ``log(2/α)``."""
    rng = np.random.default_rng(seed)
    thr, misses = math.log(2.0 / alpha), 0
    for _ in range(paths):
        x = sample(rng, T_PATH)
        hit = False
        for side in (+1, -1):
            le = _running_log_e(make(), x, mu, side)
            hit |= bool((le[t_min - 1:] >= thr).any())
        misses += hit
    return misses


LOGNORMAL_S = 1.5
LOGNORMAL_MEAN = math.exp(LOGNORMAL_S**2 / 2)
LOGNORMAL_VAR = (math.exp(LOGNORMAL_S**2) - 1) * math.exp(LOGNORMAL_S**2)

COVERAGE_CASES = {
    # name: (make, sample, true mean, first t checked)
    "catoni normal": (lambda: CatoniCS(variance=1.0, alpha=0.05, t_opt=500),
                      lambda rng, n: rng.normal(1.0, 1.0, n), 1.0, 1),
    "catoni log-normal": (lambda: CatoniCS(variance=LOGNORMAL_VAR, alpha=0.05, t_opt=500),
                          lambda rng, n: rng.lognormal(0.0, LOGNORMAL_S, n), LOGNORMAL_MEAN, 1),
    # asymptotic: its guarantee is for large t, so from t = 100 on (sequential cells look at >= 500)
    "asymptotic normal": (lambda: AsymptoticCS(alpha=0.05, t_opt=500),
                          lambda rng, n: rng.normal(1.0, 1.0, n), 1.0, 100),
    "betting bernoulli": (lambda: BettingCS(lo=0.0, hi=1.0, alpha=0.05, t_opt=500),
                          lambda rng, n: rng.binomial(1, 0.3, n).astype(float), 0.3, 1),
}


@pytest.mark.parametrize("name", sorted(COVERAGE_CASES))
def test_running_log_e_matches_public_api(name):
    make, sample, mu, _ = COVERAGE_CASES[name]
    x = sample(np.random.default_rng(11), T_PATH)
    for side in (+1, -1):
        run = _running_log_e(make(), x, mu, side)
        for t in (2, 3, 17, 500, 1999, 2000):
            assert run[t - 1] == pytest.approx(make().update(x[:t]).log_e(mu, side), abs=1e-9)


@pytest.mark.parametrize("name", sorted(COVERAGE_CASES))
def test_time_uniform_coverage(name):
    # seed 2024 + case index, 2000 paths of 2000 draws, alpha = 0.05, checked at EVERY t (from t_min):
    # fails when the one-sided 99.9% Clopper–Pearson lower bound of the ever-miss rate exceeds alpha, so a
    # valid sequence fails with probability <= 0.001 (over seeds).
    make, sample, mu, t_min = COVERAGE_CASES[name]
    paths, alpha = 2000, 0.05
    misses = _ever_misses(make, sample, mu, paths, 2024 + sorted(COVERAGE_CASES).index(name), alpha, t_min)
    assert cp_lower(misses, paths) <= alpha, f"{name}: {misses}/{paths} paths missed the mean"


def test_time_uniform_check_catches_a_peeked_fixed_sample_interval():
    # the same check applied to a pointwise 95% normal interval looked at every t (planted error: not a CS)
    # must fail: the ever-miss rate is far above 5%. Seed 5, 500 paths of 2000.
    rng, paths, misses = np.random.default_rng(5), 500, 0
    z = stats.norm.isf(0.025)
    t = np.arange(1, T_PATH + 1)
    for _ in range(paths):
        x = rng.normal(0.0, 1.0, T_PATH)
        misses += bool((np.abs(np.cumsum(x) / t) > z / np.sqrt(t)).any())
    assert cp_lower(misses, paths) > 0.05
