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


def _levels_ctx(seed=3):
    return CellContext("t", "E", {"m_cap": 2**11}, "quick", 60, 1e-3, 0.8, 0.25, np.random.default_rng(seed))


def _small_problem(norm="E"):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((2, 6, 3)) * 0.4
    return conv._softmax_problem(x, y, 0.5, norm)


def test_one_pass_serves_every_level_as_its_own_pass():
    # one group (6 x 6 entries): the pass's draws are a prefix-extension of each single-level pass, so every
    # crossing each single pass bracketed is the same in the multi-level pass (levels in their order)
    problem, levels = _small_problem(), (0.5, 0.9)
    multi = conv._error_curves(_levels_ctx(), problem, 0.15, levels)
    assert [c.p for c in multi] == list(levels)
    for q, curve in zip(levels, multi, strict=True):
        single = conv._error_curve(_levels_ctx(), problem, 0.15, q)
        assert np.isfinite(single.m_star(0.15)[2])
        assert curve.m_star(0.15) == single.m_star(0.15)
        assert curve.m[-1] >= single.m[-1]
    # a scalar p is the old single pass, bit for bit
    again = conv._error_curves(_levels_ctx(), problem, 0.15, 0.9)
    np.testing.assert_array_equal(again[0].errors, conv._error_curve(_levels_ctx(), problem, 0.15, 0.9).errors)


def test_nested_prefixes_with_levels_are_prefix_major():
    problem, levels = _small_problem(), (0.5, 0.9)
    curves = conv._error_curves(_levels_ctx(), problem, 0.2, levels, prefixes=(2, 6))
    assert [c.p for c in curves] == [0.5, 0.9, 0.5, 0.9]
    datas = conv._nested_length_axes(_levels_ctx(), dict(delta=0.2, p=levels, L=[2, 6], d=3, l=0.4),
                                     [2, 4, 6], lambda ctx, pt: conv._Setup(problem, lambda delta: 1.0))
    assert [d.curves[0].p for d in datas] == list(levels)
    # a higher level needs at least as many features at every length
    assert (datas[1].m >= datas[0].m).all()


def test_levels_share_the_cells_level():
    ctx = CellContext("t", "E/s", {"m_cap": 2**11}, "quick", 60, 1e-3, 0.8, 0.25, np.random.default_rng(0))
    shares = []
    sub_test = ctx.sub_test
    ctx.sub_test = lambda k: shares.append(k) or sub_test(k)
    point = dict(d=2, l=0.5, delta=0.3, L=4, p=(0.5, 0.9), rows="sphere")
    ev = conv._ratio_evidence(ctx, point, "delta", [0.5, 0.4, 0.35, 0.3, 0.25], conv.SUFFICIENCY,
                              conv._thm4_setup("E"))
    assert ev.extra["p"] == [0.5, 0.9]
    assert {part["part"] for part in ev.extra["parts"]} == {"p = 0.5", "p = 0.9"}
    # each level's sub-tests (the δ axis' one end and the decay) ran at alpha / (2 levels * 2 sub-tests)
    assert shares and set(shares) == {4}


def test_full_grids_sweep_p_in_one_cell():
    from rfkit.validation.cells import plan

    for claim, tuple_parts in ((conv.THM4_UNIFORM, 9), (conv.ANY_PRECISION, 14)):
        specs = [s for s in plan(claim, tier="full", seed=0) if s.kind == "grid"]
        swept = [s for s in specs if isinstance(s.params["p"], (tuple, list))]
        assert len(swept) == tuple_parts
        # no cell repeats a level a tuple cell already reads at the same point
        for s in swept:
            for q in s.params["p"]:
                twin = {**s.params, "p": q}
                assert not any(dict(o.params) == twin and o.variant == s.variant for o in specs)
    for tier in ("smoke", "quick"):
        for claim in (conv.THM4_UNIFORM, conv.ANY_PRECISION):
            assert not any(isinstance(s.params.get("p"), (tuple, list)) for s in plan(claim, tier=tier, seed=0))


def test_m_star_and_variance_cells_run_with_one_blas_thread():
    # threaded BLAS spent ~14x the CPU on the small batched QR / products of these cells (results identical)
    from rfkit.validation.harness import single_threaded

    wrapper = single_threaded(lambda ctx: ctx).__code__
    for claim, checks in ((conv.THM4_UNIFORM, dict(cell=conv._thm4_cell, search=conv._thm4_search)),
                          (conv.THM7_GENERAL, dict(cell=conv._thm7_cell, search=conv._thm7_search)),
                          (conv.ANY_PRECISION, dict(cell=conv._any_precision_cell)),
                          (conv.VARIANCE_VS_M, dict(cell=conv._variance_cell))):
        for attr, check in checks.items():
            fn = getattr(claim, attr)
            assert fn.__code__ is wrapper and fn.__wrapped__ is check, (claim.id, attr)


def test_work_cap_censors_m_star_and_names_the_work_it_would_need(monkeypatch):
    # 60 redraws of 6 x 6 entries cost 2160 products per feature; uncapped, δ = 0.05 is bracketed at some m_hi.
    # A cap of 48 features (block aligned, d = 3) must stop the pass there, censor m*_hi and say what it needs;
    # the same seed and the cap lifted bracket it (the cap, not the draws, censored it).
    problem = _small_problem()
    free = conv._error_curve(_levels_ctx(), problem, 0.05, 0.9)
    assert np.isfinite(free.m_star(0.05)[2]) and free.m[-1] > 48 and free.work_per_feature == 0.0
    assert free.censored_note(0.05) is None
    monkeypatch.setattr(conv, "_MAX_WORK", 2160 * 48)
    capped = conv._error_curve(_levels_ctx(), problem, 0.05, 0.9)
    assert capped.m[-1] <= 48 and capped.work_per_feature == 2160
    assert not np.isfinite(capped.m_star(0.05)[2])
    note = capped.censored_note(0.05)
    assert note is not None and "last grid point m = 45" in note and "needs m ≈" in note
    data = conv._AxisData("L", np.array([6.0]), *(np.array([v]) for v in capped.m_star(0.05)),
                          np.array([1.0]), (capped,), 0.05)
    ev = conv._trend(data, "high", x=[6.0], divisor=[1.0], predicted=0.0, alternative="less", test={},
                     label="m* against L", span=None)
    assert "work cap" in ev.flags[0]


def test_bounded_trend_is_not_refuted_by_a_climbing_finite_sweep():
    # thm4.no_l_dependence (E): m*(L) = 34 -> 222 over L = 1-64 (the full tier's d = 8 ball cell, slope ~0.4 with
    # tight errors) refuted flatness, which "a sufficient m exists for every L" does not assert. Read as
    # boundedness, the climb is flagged pre-asymptotic (cannot refute); a plateau still supports; the plain reading
    # still rejects (planted: without `bounded` the same data refute)
    x = np.array([1.0, 4.0, 8.0, 16.0, 32.0, 64.0])
    m = 34.0 * x**0.4
    data = conv._AxisData("L", x, m, 0.98 * m, 1.02 * m, np.full(6, 1e3), (), 0.1)
    test = dict(alpha=1e-3, tolerance=0.25, power=0.8)
    kwargs = dict(x=x, divisor=np.ones(6), predicted=0.0, alternative="less", test=test, label="m* against L",
                  decides="decided by longer L")
    plain = conv._trend(data, "high", **kwargs)
    assert plain.p_value < 1e-3 and not plain.flags
    bounded = conv._trend(data, "high", bounded=True, **kwargs)
    assert bounded.p_value == 1.0 and bounded.flags[0].startswith("pre-asymptotic") and "longer L" in bounded.flags[0]
    flat = conv._AxisData("L", x, np.full(6, 200.0), np.full(6, 196.0), np.full(6, 204.0), np.full(6, 1e3), (), 0.1)
    plateau = conv._trend(flat, "high", bounded=True, **kwargs)
    assert not plateau.flags and plateau.upper <= 0.25
