"""Recorded matrix products of RFA, RA and LARA (``gemms=[]``) and the complexity claims that decide on them
(validation/claims/lara/performance.py; issue 14 item 2)."""

from __future__ import annotations

import numpy as np
import pytest

from rfkit.estimators import lara as lara_est
from rfkit.estimators import ra as ra_est
from rfkit.estimators import rfa as rfa_est
from rfkit.estimators.rfa import Gemm, record_gemm
from rfkit.theory import cost
from rfkit.theory import lara as theory
from rfkit.validation import validate
from rfkit.validation.claims.lara import performance as perf

N, M, D = 96, 80, 8


def _qkv(seed=0, n=N, m=M, d=D):
    rng = np.random.default_rng(seed)
    return rng.normal(0, 0.3, (n, d)), rng.normal(0, 0.3, (m, d)), rng.normal(size=(m, d))


CALLS = {
    "rfa": lambda q, k, v, **kw: rfa_est.rfa_attention(q, k, v, num_samples=7, rng=1, **kw),
    "ra": lambda q, k, v, **kw: ra_est.ra_attention(q, k, v, num_samples=3, rng=1, **kw),
    "lara_eq34": lambda q, k, v, **kw: lara_est.lara_attention(q, k, v, C=8, rng=1, **kw),
    "lara_eq35": lambda q, k, v, **kw: lara_est.lara_attention(q, k, v, C=8, rng=1, proposal="eq35", **kw),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_recording_does_not_change_the_output(name):
    q, k, v = _qkv()
    gemms: list = []
    assert np.array_equal(CALLS[name](q, k, v), CALLS[name](q, k, v, gemms=gemms))
    assert gemms and all(isinstance(g, Gemm) and len(g) == 4 for g in gemms)


def test_recorded_products_against_the_theory_tables():
    q, k, v = _qkv()
    rec: list = []
    CALLS["rfa"](q, k, v, gemms=rec)
    assert sorted(rec) == sorted(theory.rfa_gemms(N, M, 7, D, D))
    rec = []
    CALLS["ra"](q, k, v, gemms=rec)
    # π = softmax(QKᵀ) is formed once per call (it was formed twice, in draw_ra and ra_samples, before the recorder
    # showed it)
    assert [g.name for g in rec].count("pi_logits") == 1
    assert cost.gemm_flops(rec) == cost.gemm_flops(theory.ra_gemms(N, M, D, D, 3))
    rec = []
    CALLS["lara_eq35"](q, k, v, gemms=rec)
    parts = perf._recorded_parts(rec)
    table = theory.lara_gemms(N, M, 8, D, D)
    assert cost.gemm_flops(parts["key_statistics"]) == cost.gemm_flops(table[:2])
    assert cost.gemm_flops(parts["proposals"]) == theory.proposal_flops("eq35", 8, M, D) - 8 * D  # the add is not
    rec = []
    lara_est.proposal_means("eq34", *np.ones((2, 4, D)), gemms=rec)
    assert rec == []  # eq34 is an add: no products


def test_unrecorded_forms_refuse_a_recorder():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="gemms"):
        rfa_est.rfa_attention(q, k, v, num_samples=4, rng=0, form="features", gemms=[])
    with pytest.raises(ValueError, match="gemms"):
        ra_est.ra_attention(q, k, v, rng=0, f_form="literal", gemms=[])
    with pytest.raises(ValueError, match="gemms"):
        lara_est.lara_attention(q, k, v, C=8, rng=0, form="eq28", gemms=[])


def test_recorded_count_scales_as_the_statements_say():
    flops = {}
    for n in (256, 512):
        q, k, v = _qkv(n=n, m=n)
        for name, call in CALLS.items():
            rec: list = []
            call(q, k, v, gemms=rec)
            flops.setdefault(name, []).append(cost.gemm_flops(rec))
    ratio = {name: f[1] / f[0] for name, f in flops.items()}
    assert ratio["rfa"] == pytest.approx(2.0) and ratio["lara_eq34"] == pytest.approx(2.0, rel=0.01)
    assert ratio["ra"] == pytest.approx(4.0)


def _quadratic_rfa(q, k, v, *, num_samples, rng, gemms=None):
    """A planted bug: RFA plus a query-key product (q Kᵀ in row chunks: quadratic time, linear memory)."""
    out = rfa_est.rfa_attention(q, k, v, num_samples=num_samples, rng=rng, gemms=gemms)
    for a in range(0, q.shape[0], 256):
        _ = q[a:a + 256] @ k.T
        record_gemm(gemms, "planted", q[a:a + 256].shape[0], q.shape[1], k.shape[0])
    return out


def test_a_planted_quadratic_product_in_rfa_is_refuted_by_the_recorded_count():
    result = validate([perf.RFA_LINEAR], tier="smoke", progress=False,
                      implementations={"rfa_attention": _quadratic_rfa}).claims[0]
    assert result.verdict == "refuted"
    assert result.witness["params"]["quantity"] == "time"


def _quadratic_lara(q, k, v, *, gemms=None, **kw):
    """A planted bug in LARA's apply step: every query against every key (recorded as it runs)."""
    out = lara_est.lara_attention(q, k, v, gemms=gemms, **kw)
    _ = q @ k.T
    record_gemm(gemms, "planted", q.shape[0], q.shape[1], k.shape[0])
    return out


def test_a_planted_quadratic_product_in_lara_is_caught_per_part():
    recorded = []
    for n in (2048, 4096):
        q, k, v = _qkv(n=n, m=n, d=perf.LARA_D)
        rec: list = []
        _quadratic_lara(q, k, v, C=16, rng=0, uneven="adaptive", gemms=rec)
        recorded.append(perf._recorded_parts(rec))
    slope = {part: np.log2(cost.gemm_flops(recorded[1][part]) / cost.gemm_flops(recorded[0][part]))
             for part in ("apply", "key_statistics", "total")}
    assert slope["key_statistics"] == pytest.approx(1.0)
    assert slope["apply"] > 1.8 and slope["total"] > 1.5
