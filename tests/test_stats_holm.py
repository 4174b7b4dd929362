"""Holm's procedure equals statsmodels' reference implementation (deterministic; hypothesis-generated p-values)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.multitest import multipletests

from rfkit.validation.stats import holm

P_VALUES = st.lists(st.one_of(st.sampled_from([0.0, 1e-300, 1e-3, 0.5, 1.0]), st.floats(0.0, 1.0)),
                    min_size=1, max_size=40)


@settings(max_examples=25, deadline=None)
@given(P_VALUES, st.sampled_from([1e-3, 0.05, 0.5]))
def test_holm_equals_statsmodels(p, alpha):
    reject, adjusted = holm(p, alpha)
    ref_reject, ref_adjusted, _, _ = multipletests(np.array(p), alpha=alpha, method="holm")
    np.testing.assert_array_equal(reject, ref_reject)
    np.testing.assert_allclose(adjusted, ref_adjusted, rtol=1e-15, atol=0)


def test_holm_of_nothing_is_empty():
    reject, adjusted = holm([], 0.05)
    assert reject.size == adjusted.size == 0
