"""Full-tier budgets of the performer MSE claims and the load-robust Eq 1 timing (issue 13): the Monte Carlo
routes keep every d and every m of the full grid, and the best-of-blocks slope fit still refutes a faster growth."""

import numpy as np
import pytest

from rfkit.validation.claims.performer import attention, common, moments, regimes
from rfkit.validation.engine import plan


@pytest.mark.parametrize("claim", [moments.MSE_TRIG, moments.MSE_POS, moments.MSE_HYP, moments.RELATIVE_MSE,
                                   regimes.HYP_VS_POS_2M], ids=lambda c: c.id)
def test_full_monte_carlo_route_keeps_every_d_and_m(claim):
    mc = [s.params for s in plan(claim, tier="full", seed=0) if s.kind == "grid" and s.params["route"] == "mc"]
    bound = regimes.HYP_MC_WORK if claim is regimes.HYP_VS_POS_2M else moments.MC_MSE_WORK
    assert all(p["m"] * p["d"] <= bound for p in mc)
    assert {p["m"] for p in mc} == set(common.G_M)
    assert {p["d"] for p in mc} >= set(common.G_D) - {1}


def _cubic(n):
    a = np.random.default_rng(0).standard_normal((n, n))
    return lambda: [a @ a for _ in range(4)]  # time ~ n³


def test_best_of_blocks_slope_refutes_a_cubic_growth_claimed_quadratic():
    sizes = [96, 128, 176, 240, 320]
    ev = attention._best_of_blocks_slope(sizes, [_cubic(n) for n in sizes], 2.0, blocks=4, best_of=2, alpha=1e-3,
                                         tolerance=0.25, alternative="less")
    assert ev.estimate > 2.5 and ev.effect > 0.25  # slope ~3: a violation beyond the tolerance
    ev = attention._best_of_blocks_slope(sizes, [_cubic(n) for n in sizes], 3.0, blocks=4, best_of=2, alpha=1e-3,
                                         tolerance=0.25, alternative="less")
    assert ev.effect <= 0.25
