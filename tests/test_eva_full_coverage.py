"""The full tier covers the declared domain of eva claims whose full grid once missed the values their ``where``
selects (deterministic: plans only).

The first complete eva full run (b483649) found three claims supported at quick and 'not covered' at full: the
Monte Carlo route of appb2.importance_weight_mean and eq22.per_token_cv_mean runs at d = 4, which their full grids
lacked (so S was tested at 1 only), eq22's quadrature route at M = 1, 8 (the full grid had 1, 3, 16, 64), and
prop2.local_softmax_optimal's full grid lacked the end M = 1; eq16.reduction_from_eq13 runs σ = LN∘Linear at
identity init at N = 16 only, which its full grid lacked; appb1.variance_never_larger ran its closed forms at s = 0.3
only, which its full grid lacked (reading R2 had no full cell)."""

from __future__ import annotations

import pytest

from rfkit.validation.cells import plan
from rfkit.validation.claims import get_claim
from rfkit.validation.engine import variant_coverage


@pytest.mark.parametrize("claim_id", ["eva.appb2.importance_weight_mean", "eva.eq22.per_token_cv_mean",
                                      "eva.prop2.local_softmax_optimal", "eva.eq16.reduction_from_eq13",
                                      "eva.appb1.variance_never_larger"])
def test_full_tier_covers_the_declared_domain(claim_id):
    claim = get_claim(claim_id)
    specs = plan(claim, tier="full", seed=0)
    for variant in claim.variants:
        covered, text = variant_coverage(claim, [s for s in specs if s.variant == variant])
        assert covered, (variant, text)
