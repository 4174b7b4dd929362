"""Full-tier speed-ups of performer/convergence.py: nested-prefix errors in one pass, pilot stopping rule."""

import numpy as np
import pytest

from rfkit.theory import convergence as theory
from rfkit.validation.claims.performer import convergence as conv
from rfkit.validation.model import CellContext


@pytest.mark.parametrize("norm", ["E", "R"])
def test_prefix_errors_match_each_block(norm):
    rng = np.random.default_rng(0)
    ctx = CellContext("t", norm, {"m_cap": 2**11}, "quick", 5, 1e-3, 0.8, 0.25, rng)
    x, y = rng.standard_normal((2, 12, 3)) * 0.3
    problem = conv._softmax_problem(x, y, 0.5, norm)
    prefixes = (1, 3, 7, 12, 5)  # unsorted on purpose
    sums = conv._NestedSums(ctx, problem, 5, prefixes)
    sums.advance(6, np.array([3, 6]))
    err = sums.acc * (sums.factor / sums.m) - sums.target
    want = np.stack([theory.matrix_inf_norm(err[:, :k, :k], norm) for k in prefixes], axis=-1)
    np.testing.assert_array_equal(sums.errors(), want)


def _curve(errors):
    m = conv._m_grid(2**10)[: errors.shape[1]]
    return conv._Curve(m, errors, 0.9, 2)


def test_pilot_stops_once_its_largest_error_crossed_with_margin():
    # 16 redraws at p = 0.9: the upper quantile bound is always inf (rank 16 of 16)
    m = conv._m_grid(2**10)
    errors = np.outer(np.linspace(0.5, 1.0, 16), 1.0 / np.sqrt(m))
    curve = _curve(errors)
    assert curve.ranks[2] >= 16 and not np.isfinite(curve.m_star(0.1)[2])
    assert not conv._bracketed(curve, 0.1, pilot=False)  # a lone group keeps the old rule (runs on)
    assert conv._bracketed(curve, 0.1, pilot=True)  # max error 1/sqrt(m) crosses 0.1 at m = 100 <= 1024 / 2
    short = _curve(errors[:, m <= 150])
    assert not conv._bracketed(short, 0.1, pilot=True)  # crossed at 100 but not yet 2x beyond
