"""Shared fixtures. Statistical tests state their seed, replicates and false-failure rate inline."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    # A fixed 64-bit literal seed (scipy.stats style): tests are deterministic.
    return np.random.default_rng(8_413_902_254_617_310_051)
