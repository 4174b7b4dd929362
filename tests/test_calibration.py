"""Calibration of the verdict statistics (:mod:`rfkit.validation.calibration`).

The smoke test simulates every (procedure, null law) pair at a small size and fails when some false
refutation or false support rate is *significantly* above ``alpha``: the one-sided Clopper–Pearson lower
bound of the rate, Bonferroni-corrected over all cases at family error 0.001, exceeds ``alpha``. So a
correctly calibrated suite fails with probability at most 0.001 (over seeds); the seeds are fixed, so the
outcome is deterministic. The planted-bug tests show that the same check does fail on broken procedures.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from rfkit.validation import calibration as cal
from rfkit.validation import stats as stats_module
from rfkit.validation.sequences import CatoniCS
from rfkit.validation.stats import binomial_test, mean_test

FAMILY_ERROR = 1e-3
SEED = 20_240_601


@pytest.fixture(scope="module")
def smoke() -> pd.DataFrame:
    # every standard procedure × applicable law; 150 simulations per case, n = 500, budget 1000, alpha 0.05
    return cal.simulate("smoke", seed=SEED)


def test_smoke_calibration_holds(smoke):
    # false-failure probability <= FAMILY_ERROR = 0.001 (Bonferroni over all cases, see the module docstring)
    bad = cal.miscalibrated(smoke, family_error=FAMILY_ERROR)
    assert bad.empty, "\n" + bad.to_string()


def test_smoke_covers_every_procedure_and_law(smoke):
    procs, laws = cal.standard_procedures(), cal.standard_laws()
    pairs = {(p.name, law.name) for p in procs.values() for law in laws.values() if p.applies(law)}
    assert set(zip(smoke.procedure, smoke.law, strict=True)) == pairs
    assert {"normal", "log-normal", "pareto", "IS weights", "bernoulli", "beta"} <= set(smoke.law)
    table = cal.calibration_table(smoke)
    assert len(table) == len(pairs)
    validity = dict(zip(table.procedure, table.validity, strict=True))
    assert validity["mean_test Catoni (sd)"] == "non-asymptotic"
    assert validity["mean_test betting (bounds)"] == "non-asymptotic"
    assert validity["mean_test asymptotic"] == "asymptotic"
    assert validity["binomial_test"] == "exact"
    assert (table.false_refutation_cp_upper >= table.false_refutation).all()


def test_laws_have_the_stated_moments():
    # closed forms against a large sample (seed 3, 400k draws; |error| < 6 standard errors: false-failure
    # probability < 1e-8 per law for the light-tailed ones). Heavy laws: the mean only, and a loose bound.
    laws = cal.standard_laws()
    rng = np.random.default_rng(3)
    for name in ("normal", "bernoulli", "beta"):
        law = laws[name]
        x = law.sample(rng, 400_000)
        assert abs(x.mean() - law.mean) < 6 * law.sd / math.sqrt(x.size)
        assert x.std() == pytest.approx(law.sd, rel=0.01)
    assert laws["log-normal"].skewness == pytest.approx(33.47, abs=0.01)
    assert laws["pareto"].mean == pytest.approx(5 / 3) and laws["pareto"].sd**2 == pytest.approx(2.5 / (1.5**2 * 0.5))


def test_importance_weight_moments_by_quadrature():
    # E_q[w] = 1 and E_q[w²] = s²/sqrt(2s² - 1) exp(a²/(2s² - 1)), checked by numerical integration
    from scipy import integrate, stats

    for a, s2 in [(0.5, 0.6), (1.0, 1.0), (0.0, 2.0), (1.5, 0.8)]:
        mean, var = cal.importance_weight_moments(a, s2)
        p, q = stats.norm(a, 1.0), stats.norm(0.0, math.sqrt(s2))
        m1, _ = integrate.quad(p.pdf, -np.inf, np.inf)
        m2, _ = integrate.quad(lambda x, p=p, q=q: math.exp(2 * p.logpdf(x) - q.logpdf(x)), -60, 60,
                               points=[0.0, a], epsabs=0, epsrel=1e-10, limit=200)
        assert mean == 1.0 and m1 == pytest.approx(1.0)
        assert var == pytest.approx(m2 - 1.0, rel=1e-8)
    assert cal.importance_weight_moments(0.5, 0.5)[1] == math.inf
    # the sampler draws w = p/q at X ~ q: its sample mean is near 1 (seed 4, 10^6 draws; 6 se: p < 1e-8)
    law = cal.standard_laws()["IS weights"]
    w = law.sample(np.random.default_rng(4), 1_000_000)
    assert abs(w.mean() - 1.0) < 6 * law.sd / 1000


def test_clopper_pearson_is_exact():
    from scipy import stats

    low, high = cal.clopper_pearson([0, 3, 10], [10, 10, 10], 0.95)
    assert low[0] == 0 and high[2] == 1
    ci = stats.binomtest(3, 10).proportion_ci(0.95, method="exact")
    assert (low[1], high[1]) == (pytest.approx(ci.low), pytest.approx(ci.high))


def test_tolerance_in_se():
    assert [cal.tolerance_in_se(a) for a in (0.05, 0.01, 1e-3)] == [4.0, 4.5, 5.5]


def test_markdown_renders(smoke, tmp_path):
    out = tmp_path / "statistics.md"
    cal.write_markdown(str(out), size="smoke", seed=SEED, long=smoke)
    text = out.read_text()
    assert "python -m rfkit.validation.calibration --out docs/statistics.md" in text
    assert "PyFrameObject" in text and "expectation" in text
    assert "| mean_test Catoni (sd) | normal |" in text


# ------------------------------------------------------------------------------------------------------
# Planted bugs: the same check must flag a broken procedure
# ------------------------------------------------------------------------------------------------------
PLANTED = cal.Size(sims=200, n=500, budget=1000, alphas=(0.05,))


def _flagged(procedure: cal.Procedure, law: str, error: str) -> pd.DataFrame:
    # seed SEED, 200 simulations per case, n = 500; detection (an effect far above alpha) is certain in
    # practice: the smallest planted rate below is ~16% against alpha = 5%
    long = cal.simulate(PLANTED, seed=SEED, workers=1, procedures=[procedure], laws=[cal.standard_laws()[law]])
    bad = cal.miscalibrated(long, family_error=FAMILY_ERROR)
    return bad[bad.error == error]


def test_planted_third_width_interval_is_flagged():
    # an interval a third as wide as the asymptotic sequence (replicates shrunk towards their mean by 3)
    def third_width(x, prediction, *, law, alpha, tolerance):
        return mean_test(x.mean() + (x - x.mean()) / 3, prediction, alpha=alpha, tolerance=tolerance,
                         scale=prediction)

    assert len(_flagged(cal.Procedure("third width", "fixed", third_width), "normal", "false refutation"))


class _NoFloorCatoni(CatoniCS):
    """Planted bug: Catoni bets and penalty from the variance bound alone (no sample-variance floor)."""

    def _extend(self, x):
        n0 = self._lam.size
        super()._extend(x)
        i = np.arange(n0 + 1, n0 + x.size + 1, dtype=np.float64)
        old = float((self._sig2[n0:] * self._lam[n0:] ** 2).sum())
        self._sig2[n0:] = self.variance
        self._lam[n0:] = np.sqrt(2.0 * math.log(2.0 / self.alpha) / (self.variance * np.maximum(i, self.t_opt)))
        if hasattr(self, "_penalty"):  # the running σ²Σλ² the process subtracts
            self._penalty += float((self._sig2[n0:] * self._lam[n0:] ** 2).sum()) - old


def test_planted_catoni_with_a_tenfold_too_small_variance_is_flagged(monkeypatch):
    # CatoniCS given a variance bound 10× too small, with its sample-variance floor removed
    monkeypatch.setattr(stats_module, "CatoniCS", _NoFloorCatoni)

    def small_variance(x, prediction, *, law, alpha, tolerance):
        return mean_test(x, prediction, alpha=alpha, tolerance=tolerance, scale=prediction, sd=law.sd / math.sqrt(10))

    assert len(_flagged(cal.Procedure("catoni var/10", "fixed", small_variance), "normal", "false refutation"))


def test_tenfold_too_small_variance_is_harmless_with_the_floor():
    # the same wrong bound through the real CatoniCS: the floor max(σ², s²_{i-1}) (light tails) and the
    # heavy-tail flag (heavy tails) keep it calibrated — so the check does not cry wolf. 150 simulations per
    # case, seed SEED; false-failure probability <= 0.001 as in the smoke test.
    def small_variance(x, prediction, *, law, alpha, tolerance):
        return mean_test(x, prediction, alpha=alpha, tolerance=tolerance, scale=prediction, sd=law.sd / math.sqrt(10))

    laws = cal.standard_laws()
    long = cal.simulate(dataclasses.replace(PLANTED, sims=150), seed=SEED, workers=1,
                        procedures=[cal.Procedure("catoni var/10 (floor)", "fixed", small_variance)],
                        laws=[laws["normal"], laws["log-normal"]])
    assert cal.miscalibrated(long, family_error=FAMILY_ERROR).empty


def test_planted_not_refuted_means_supported_is_flagged():
    # the classic error "absence of evidence is evidence of absence": support whenever p > alpha
    def lax(x, prediction, *, law, alpha, tolerance):
        ev = mean_test(x, prediction, alpha=alpha, tolerance=tolerance, scale=prediction, sd=law.sd)
        return dataclasses.replace(ev, upper=0.99 * tolerance, resolution=0.0) if ev.p_value > alpha else ev

    assert len(_flagged(cal.Procedure("lax support", "fixed", lax), "normal", "false support"))


def test_planted_binomial_without_tolerance_is_flagged():
    # binomial_test that forgets the tolerance (tests P <= bound instead of P <= bound + tolerance)
    def strict(exceed, n, bound, *, alpha, tolerance):
        return binomial_test(exceed, n, bound, alpha=alpha, tolerance=0.0)

    assert len(_flagged(cal.Procedure("binomial, no tolerance", "binomial", strict, needs="bernoulli"),
                        "bernoulli", "false refutation"))


@pytest.fixture(scope="module")
def full() -> pd.DataFrame:
    # the published size (docs/statistics.md): 1000 simulations per case at alpha 0.05 and 0.01, 2000 at
    # 0.001 (false refutation only). About 10 minutes on 2 cores.
    return cal.simulate("full", seed=0)


def _by_validity(long: pd.DataFrame, validity: set[str]) -> pd.DataFrame:
    bad = cal.miscalibrated(long, family_error=FAMILY_ERROR)  # Bonferroni over ALL cases of the full run
    keep = set(long.loc[long.validity.isin(validity), "procedure"])
    return bad[bad.procedure.isin(keep)]


@pytest.mark.slow
def test_full_calibration_holds_for_guaranteed_procedures(full):
    # non-asymptotic (Catoni, betting) and exact (binomial) procedures carry a finite-sample guarantee:
    # no case may be significantly above alpha. False-failure probability <= 0.001 (Bonferroni over all cases).
    bad = _by_validity(full, {"non-asymptotic", "exact"})
    assert bad.empty, "\n" + bad.to_string()


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="known finding (docs/statistics.md): the asymptotic sequence without a "
                   "variance bound falsely refutes at several times alpha = 0.001 on heavy-tailed laws (importance "
                   "weights with tail index 2.5, sequential cells) and the heavy-tail flags do not catch it")
def test_full_calibration_holds_for_asymptotic_procedures(full):
    # the same check for the asymptotic procedures (validity "asymptotic": no finite-sample guarantee)
    bad = _by_validity(full, {"asymptotic"})
    assert bad.empty, "\n" + bad.to_string()
