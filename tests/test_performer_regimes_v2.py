"""v2 declarations of regimes.limit_sm_to_zero, regimes.fig2.critical_region and beautiful.lemma5 (issue 13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rfkit.theory import softmax as theory
from rfkit.validation import validate
from rfkit.validation.claims.performer import beautiful, regimes
from rfkit.validation.model import TIERS, CellContext


def _search_ctx(claim, tier="quick", restart=0):
    return CellContext(claim.id, "default", claim.search_settings(tier), "no-tier", 0, 1e-3, 0.8, claim.tolerance,
                       np.random.default_rng(0), restart=restart)


def test_limit_search_reads_search_params_and_its_witness_reproduces():
    claim = regimes.LIMIT_SM_TO_ZERO
    ev = claim.search(_search_ctx(claim))  # the tier handed in is not a tier: the search must not read it
    w = ev.extra
    assert ev.effect > claim.tolerance  # a violation
    # the witness alone reproduces the margin: a named part, path, angle, ratio, d and m, and the MSE grows
    beta = regimes._growth_exponent(w["part"], w["path"], w["angle"], w["ratio"], w["d"], w["m"])
    assert regimes._limit_margin(w["part"], beta) == pytest.approx(w["margin"])
    assert w["part"] == "positive" and w["log_mse"][1] > w["log_mse"][0]
    assert PI_HALF < w["angle"] <= math.pi


PI_HALF = math.pi / 2


def test_positive_mse_grows_on_p3_at_every_angle_closed_form():
    """The refutation is of the literal statement: x fixed, y = tv with xᵀv < 0 has SM → 0 while
    MSE_+ = e^{‖x‖²+‖y‖²+4xᵀy}(1 - e^{-‖x+y‖²})/m grows like e^{t²‖v‖²} (here checked from Lemma 2 directly)."""
    for angle in (0.51 * math.pi, 0.75 * math.pi, math.pi):
        logs = []
        for t in (10.0, 20.0):
            x, y = regimes._path_pair("P3", t, angle, 1.0, 2)
            assert x @ y < 0
            logs.append(theory.lemma2_mse("positive", x, y, 1, log=True))
        assert logs[1] > logs[0] + 100
        assert regimes._growth_exponent("positive", "P3", angle, 1.0, 2, 1) > 0


def test_limit_paths_in_one_dimension():
    x, y = regimes._path_pair("P2", 2.0, math.pi, 0.5, 1)
    assert x.shape == y.shape == (1,) and float(x @ y) == pytest.approx(-2.0)
    assert regimes._limit_domain(dict(path="P2", angle=0.75 * math.pi, ratio=1.0, d=1), "default") is False
    # P1 holds in every d: MSE_+ is identically 0 (x + y = 0), MSE_trig grows like SM^-2
    assert regimes._growth_exponent("positive", "P1", math.pi, 1.0, 1, 1) == -math.inf
    assert regimes._growth_exponent("trig", "P1", math.pi, 1.0, 1, 1) == pytest.approx(2.0, rel=1e-3)


def test_fig2_grid_is_tiers_and_mc_length_in_every_tier():
    claim = regimes.FIG2_CRITICAL_REGION
    assert isinstance(regimes.FIG2_LENGTHS, list)
    for tier in TIERS:
        assert regimes.FIG2_MC_LENGTH in claim.axes(tier)["l"]
        assert sum(p["part"] == "monte_carlo" for p in claim.cells(tier, "same_m")) > 0
    assert not claim.narrowed("same_m") and not claim.narrowed("same_features")


def test_lemma5_k_axis_covers_every_multiset_up_to_k_max():
    claim = beautiful.LEMMA5
    assert "k" in claim.domain and claim.axes("quick")["k_max"] == [6]
    assert len(beautiful._lemma5_tuples(2, 6)) == 21 and beautiful._lemma5_tuples(1, 3) == [(1,), (2,), (3,)]


def test_lemma5_law_matches_dirichlet_moments():
    """The frame-moment route (sd, kurtosis) against the Dirichlet moments of g/‖g‖."""
    for d, ks in ((2, (1, 1)), (16, (1, 3, 5, 6)), (8, (2, 4))):
        m1, m2 = (beautiful.bt.frame_moment(d, tuple(j * k for k in ks)) for j in (1, 2))
        mean, sd, _, kurt = beautiful._lemma5_law(d, ks)
        assert mean == pytest.approx(m1, rel=1e-9, abs=1e-300)
        assert sd == pytest.approx(math.sqrt(m2 - m1 * m1), rel=1e-9)
    assert beautiful._lemma5_law(2, (1, 1))[3] == pytest.approx(1.5)  # sin(2θ)/2 with θ uniform


def test_lemma5_monte_carlo_leaves_out_tuples_of_kurtosis_of_order_n():
    """The odd tuples at d = 16, s = 4 have skewness 0 but kurtosis up to 6e4: a few replicates dominate their
    running sample variance at n = 4e4, so their cells cannot resolve the tolerance (the exact part decides them)."""
    laws = {ks: beautiful._lemma5_law(16, ks) for ks in beautiful._lemma5_tuples(4, 6)}
    assert max(law[3] for law in laws.values()) > 40_000
    result = validate([beautiful.LEMMA5], tier="quick", seed=0, progress=False).claims[0]
    assert result.verdict == "supported", result.reason
    assert all(not o.evidence.flags for o in result.outcomes if o.evidence is not None)
