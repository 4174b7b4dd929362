"""Full-tier sweep cells of the beautiful-function tail claims (Lemma 4, Theorem 5, Theorem 3's sharper claim):
one cell sweeps tuples of ``m`` and ``mult``; coverage, per-point tests and planted bugs."""

import math
from dataclasses import replace

import pytest

from rfkit.estimators.beautiful import IsotropicLaw
from rfkit.theory import beautiful as bt
from rfkit.validation.cells import plan
from rfkit.validation.claims import claims_in
from rfkit.validation.claims.performer import beautiful as claims
from rfkit.validation.engine import coverage_table
from rfkit.validation.stats import required_replicates

BY_ID = {c.id.removeprefix("performer."): c for c in claims_in(claims)}
SWEPT = ("lemma4.iid_chernoff", "thm5.ort_tail", "thm3.ort_sharper")


def _full_grid(name):
    return [s for s in plan(BY_ID[name], tier="full", seed=0) if s.kind == "grid"]


@pytest.mark.parametrize("name", SWEPT)
def test_full_tier_still_covers_every_axis(name):
    for reading, row in coverage_table(BY_ID[name])["full"].items():
        assert row["covered"], (name, reading, row["coverage"])


@pytest.mark.parametrize("name, points", [("lemma4.iid_chernoff", 25), ("thm5.ort_tail", 5),
                                          ("thm3.ort_sharper", 5)])
def test_full_cells_sweep_the_points_of_the_old_product(name, points):
    # the full product's cells (a covering design of a large product also runs the quick tier's single points)
    axes = BY_ID[name].axes("full")
    specs = [s for s in _full_grid(name) if all(s.params[k] in axes[k] for k in axes)]
    per_cell = {len(s.params["mult"]) * len(claims._as_tuple(s.params["m"])) for s in specs}
    assert per_cell == {points}


def test_theta_minimiser_of_lemma4_is_shared_across_m():
    # Lemma 4's log-bound is m·(log M_X(θ) ∓ θa): the m = 1 minimiser gives every m's tightest bound
    g, law = claims.G_FAMILIES["cosh"], IsotropicLaw(4, "uniform", 2.0 * 2)
    a = 1.5 * bt.beautiful_value(g, law, 1.0)
    for sign in (-1, 1):
        bound = claims._lemma4_bound(sign, claims._mgf_memo(g, law, 1.0))
        one = claims.Tail(g, law, 1.0, 1, a)
        theta_star = bt.minimize_over_theta(lambda th, b=bound, t=one: b(t, th).key, lo=1e-8, hi=1e8, points=25)[0]
        for m in (1, 2, 8, 16):
            tail = claims.Tail(g, law, 1.0, m, a)
            _, shared, _ = claims._tightest_at(bound, tail, theta_star)
            _, direct, _ = claims._tightest(claims._lemma4_bound(sign), tail)
            assert shared.sign == direct.sign
            assert shared.log_abs == pytest.approx(direct.log_abs, rel=1e-7, abs=1e-9)


def _cell(name, variant, **want):
    """A cell at a point of the full product (the full tier runs a covering design of it, which need not hold it)."""
    spec = next(s for s in _full_grid(name) if s.variant == variant)
    assert all(v in BY_ID[name].axes("full")[k] for k, v in want.items())
    return replace(spec, params={**spec.params, **want})


def test_planted_centred_mgf_is_refuted_by_a_full_sweep_cell(monkeypatch):
    # Bug: the MGF of X - E X in place of X's (the bound loses e^{θmF}); the sweep cell's memo must see it
    spec = _cell("lemma4.iid_chernoff", "minus", omega="reg", g="exp", d=2, z=1.0)
    assert spec.claim.cell(spec.context()).p_value > spec.alpha
    exact = bt.log_mgf
    monkeypatch.setattr(bt, "log_mgf", lambda g, law, zn, theta, **k: exact(g, law, zn, theta, **k)
                        - theta * bt.beautiful_value(g, law, zn))
    ev = spec.claim.cell(spec.context())
    assert ev.p_value < spec.alpha
    assert ev.extra["points"] == 25


def test_thm5_sweep_cell_keeps_the_negative_bound_refutation():
    # Theorem 5's correction makes the bound negative for g = exp/1000 (the quick tier's exact witness)
    spec = _cell("thm5.ort_tail", "default", omega="reg", g="exp/1000", d=2, m="d", z=1.0)
    ev = spec.claim.cell(spec.context())
    assert ev.p_value < spec.alpha and ev.effect > spec.claim.tolerance


def test_sharper_sweep_draws_what_each_point_needs_at_its_level():
    spec = next(s for s in _full_grid("thm3.ort_sharper") if s.variant == "probability_level"
                and s.params["family"] == "smreg" and s.params["d"] == 2)
    ctx = spec.context()
    k = len(spec.params["mult"])
    need = math.ceil(required_replicates(math.sqrt(0.5), alpha=ctx.alpha / k, tolerance=ctx.tolerance,
                                         power=ctx.power, alternative="less"))
    assert need < ctx.replicates
    ev = spec.claim.cell(ctx)
    assert ev.n == k * need  # every point tested on `need` pairs (the samples are shared)
    assert ev.resolution <= ctx.tolerance


def test_thm5_full_grid_keeps_the_z_ends_and_the_search_moves_z_over_the_declared_range():
    claim = BY_ID["thm5.ort_tail"]
    assert "z" in claim.searched
    assert {s.params["z"] for s in _full_grid("thm5.ort_tail")} == {0.0, 1.0, 4.0}
    space = claims._beautiful_space(claims.THM5_OMEGAS, claims.THM5_G, claims.TAIL_D, lambda d: d)
    lo, hi = space.bounds[4]
    assert not space.integer[4] and lo <= 0.05 and hi == claim.domain["z"].up_to[1]


def test_eq54_draws_what_its_exact_moments_need_and_still_catches_a_planted_bias(monkeypatch):
    spec = next(s for s in plan(BY_ID["eq54.orf_moment_factorization"], tier="full", seed=0)
                if s.params["law"] == "gaussian" and s.params["tuple"] == "4,2" and s.params["d"] == 4
                and s.params["side"] == "ort")
    ctx = spec.context()
    ev = spec.claim.cell(ctx)
    assert ev.n < ctx.replicates  # sized from the moments, not the tier's round 2e6
    assert ev.upper <= spec.claim.tolerance  # and still resolves the tolerance
    # Bug: the orthogonal side predicted with the iid form (Eq 56 for Eq 55)
    exact = claims._eq54_prediction
    monkeypatch.setattr(claims, "_eq54_prediction", lambda law, zn, ks, ort: exact(law, zn, ks, False))
    assert spec.claim.cell(spec.context()).p_value < spec.alpha


@pytest.mark.parametrize("name", ["thm5.ort_tail", "lemma4.iid_chernoff"])
def test_sweep_cell_tests_each_point_as_the_one_point_cell_does(name):
    # quick runs scalar (m, mult) through the one-point cell, full the tuple sweep: at quick's points both must
    # test the same bound (θ, value); only their draws differ (the sweep shares them across its points)
    import dataclasses

    specs = [s for s in plan(BY_ID[name], tier="quick", seed=0) if s.kind == "grid"][::7][:4]
    for spec in specs:
        one = spec.claim.cell(spec.context())
        m, mult = spec.params["m"], spec.params["mult"]
        sweep = dataclasses.replace(spec, params=dict(spec.params, m=(m, m), mult=(mult,)))
        both = spec.claim.cell(sweep.context())
        assert both.prediction == pytest.approx(one.prediction, rel=1e-9, abs=1e-12), spec.params
        assert both.extra["worst_theta"] == pytest.approx(one.extra["theta"], rel=1e-6), spec.params
