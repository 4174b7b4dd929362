"""The v2 declarations of Theorems 4 and 7 and of the model-level (GPU) claims of ``performer/convergence.py``.

What is pinned: the swept lists and the cap come from the grid (cells) and ``search_params`` (searches), never from
the tier; the readings the statement's words do not make are reported beside the verdict; every cell sweeps the
list of its own tier; the untestable claims declare the domain a GPU run would have to cover.
"""

import inspect
import math

import numpy as np
import pytest

from rfkit.validation.claims import get_claim
from rfkit.validation.claims.performer import convergence as conv
from rfkit.validation.model import TIERS, CellContext

THM4, THM7 = "performer.thm4.uniform_convergence", "performer.thm7.uniform_convergence_general"
GPU = ("performer.fig3.linear_time_memory", "performer.fig3.near_optimal", "performer.appe.layers_20",
       "performer.appe.max_length")


def test_no_tier_lookup_is_left_in_the_module():
    source = inspect.getsource(conv)
    for name in ("_TIER", "_setting(", "_CAP_TIER", "ctx.tier", "per_tier("):
        assert name not in source, name


@pytest.mark.parametrize("claim_id", [THM4, THM7])
@pytest.mark.parametrize("tier", TIERS)
def test_searches_read_their_axes_and_cap_from_search_params(claim_id, tier):
    claim = get_claim(claim_id)
    assert claim.search_settings(tier) == dict(m_cap=conv._M_CAP[tier], axes=conv._M_AXES[tier])


@pytest.mark.parametrize("claim_id", [THM4, THM7])
@pytest.mark.parametrize("tier", TIERS)
def test_every_cell_sweeps_its_own_tiers_list(claim_id, tier):
    claim = get_claim(claim_id)
    key = "axis" if claim_id == THM4 else "part"
    for variant in claim.variants:
        norm = variant.split("/")[0] if claim_id == THM4 else variant.split("/")[1]
        cells = claim.cells(tier, variant)
        assert cells, (tier, variant)
        for p in cells:
            assert p["m_cap"] == conv._M_CAP[tier]
            axis = p[key]
            for name in conv._SWEPT:
                if name == axis:
                    assert p[name] == conv._M_AXES[tier][conv._sweep_key(name, norm)]
                else:
                    assert not isinstance(p[name], list)


def test_readings_the_words_do_not_make_are_reported_beside():
    thm4, thm7 = get_claim(THM4), get_claim(THM7)
    assert thm4.deciding() == ["E/s"]
    assert {v for v in thm4.variants if thm4.beside(v)} == {"E/t", "R/s"}
    # where g, h are evaluated: both readings have words in the statement and decide together
    assert thm7.deciding() == ["a/E", "b/E"]
    assert {v for v in thm7.variants if thm7.beside(v)} == {"a/R", "b/R"}
    for claim in (thm4, thm7):
        for v in claim.deciding():
            assert claim.readings[v].words


def test_thm7_names_every_kernel_and_prefactor_at_quick():
    claim = get_claim(THM7)
    kernels = {p["kernel"] for p in claim.cells("quick", "a/E")}
    assert kernels == set(claim.domain["kernel"].values)
    assert {p["gh"] for p in claim.cells("quick", "a/E")} == set(claim.domain["gh"].values)


def test_any_precision_design_is_unchanged_by_the_cap_pairing():
    claim = get_claim("performer.sec2_1.any_precision_time")
    counts = {t: [len(claim.cells(t, v)) for v in ("a/E", "a/R", "b/E", "b/R")] for t in TIERS}
    # full: l, p and the base d each move off the base point one at a time (conv._AP_BASE), not crossed; the m*
    # parts read both p of the base point from one pass (conv._AP_P_FULL), so each has one cell fewer (was 20, 25)
    assert counts == {"smoke": [2, 2, 3, 3], "quick": [4, 4, 5, 5], "full": [17, 17, 21, 21]}


@pytest.mark.parametrize("claim_id", GPU)
def test_untestable_gpu_claims_declare_what_a_gpu_run_must_cover(claim_id):
    claim = get_claim(claim_id)
    assert claim.untestable and claim.cell is None
    assert claim.domain and all(axis.words for axis in claim.domain.values())
    assert claim.hypotheses  # generated from the domain
    declared = claim.declaration()["domain"]
    assert set(declared) == set(claim.domain)


def test_a_search_restart_runs_from_its_search_params():
    # restart 0 of the smoke search: d = 1 at the largest l of the smoke axes, along δ
    claim = get_claim(THM4)
    ctx = CellContext(THM4, "E/s", claim.search_settings("smoke"), "quick", 50, 1e-3, 0.8, 0.25,
                      np.random.default_rng(0), restart=0)
    ev = conv._thm4_search(ctx)
    point = ev.extra["point"]
    assert point["d"] == 1 and point["l"] == max(conv._M_AXES["smoke"]["l"])
    assert ev.extra["x"] == pytest.approx([1 / v for v in conv._M_AXES["smoke"]["delta"]])


# ------------------------------------------------------- common random numbers and pre-asymptotic trends


def _ctx(seed: int, replicates: int = 40, m_cap: int = 2**11) -> CellContext:
    return CellContext(THM4, "E/s", dict(m_cap=m_cap), "quick", replicates, 1e-3, 0.8, 0.25,
                       np.random.default_rng(seed))


def _axis(common: bool, axis: str, values: list, seed: int = 3):
    base = dict(d=2, l=1.0, delta=0.3, L=8, p=0.9, rows="ball")
    return conv._measure_axis(_ctx(seed), axis, base, values, conv._thm4_setup("E"), common)


def test_the_l_axis_shares_inputs_and_feature_draws_with_common_numbers():
    # Two equal l values: with common random numbers both curves see the same rows and the same features, so
    # their errors agree wherever both were recorded (the last curve runs further for its decay test); without,
    # they are independent draws. A sampler that ignored the shared state would fail the first assertion.
    for common in (True, False):
        data = _axis(common, "l", [1.0, 1.0])
        a, b = data.curves
        k = min(a.m.size, b.m.size)
        same = np.array_equal(a.errors[:, :k], b.errors[:, :k])
        assert same == common
    # the last curve of the l axis reaches _DECAY_REACH·d features, so its decay is read at m >= 4d
    last = _axis(True, "l", [0.5, 1.0]).curves[-1]
    assert last.m[-1] >= conv._DECAY_REACH * 2
    assert _axis(False, "l", [0.5, 1.0]).curves[-1].m[-1] < conv._DECAY_REACH * 2


def test_the_l_axis_of_thm4_e_runs_with_common_numbers_and_r_without():
    calls = []
    original = conv._measure_axes  # (the per-level form of _measure_axis, which the cells call)

    def spy(ctx, axis, base, values, setup, common=False, share=None):
        calls.append((common, share))
        raise RuntimeError("stop")

    claim = get_claim(THM4)
    for variant, want in (("E/s", True), ("E/t", True), ("R/s", False)):
        p = next(p for p in claim.cells("quick", variant) if p["axis"] == "l")
        ctx = CellContext(THM4, variant, dict(p), "quick", 10, 1e-3, 0.8, 0.25, np.random.default_rng(0))
        conv._measure_axes = spy
        try:
            with pytest.raises(RuntimeError):
                conv._thm4_cell(ctx)
        finally:
            conv._measure_axes = original
        assert calls[-1] == (want, variant.split("/")[0]), variant


def test_the_e_readings_of_a_thm4_point_measure_once_and_alike(monkeypatch):
    # E/s and E/t read the same curves two ways: the second reading of a point is served the first's measurement
    # (drawn from the point's common stream), R/s measures its own problem.
    passes = []
    original = conv._error_curves
    monkeypatch.setattr(conv, "_error_curves", lambda *a, **k: passes.append(1) or original(*a, **k))
    claim = get_claim(THM4)
    cells = {}
    for variant in ("E/s", "E/t", "R/s"):
        p = next(p for p in claim.cells("smoke", variant) if p["axis"] == "delta")
        ctx = CellContext(THM4, variant, dict(p), "smoke", 20, 1e-3, 0.8, 0.25,
                          np.random.default_rng(len(cells)))
        before = len(passes)
        cells[variant] = (p, conv._thm4_cell(ctx), len(passes) - before)
    assert cells["E/s"][0] == cells["E/t"][0]
    assert cells["E/s"][2] >= 1 and cells["E/t"][2] == 0 and cells["R/s"][2] >= 1
    m_star = [ev.extra.get("m_star") for ev in (cells["E/s"][1], cells["E/t"][1])]
    assert m_star[0] is not None and m_star[0] == m_star[1]


def test_the_length_axis_of_thm4_is_nested_with_common_numbers():
    # Nested lengths: the shorter lengths are leading blocks of one input set under shared features, so under
    # (E) the error of every redraw can only grow with L (independent input sets would cross).
    data = _axis(True, "L", [2, 4, 8, 16])
    errs = [c.errors for c in data.curves]
    assert all((errs[i] <= errs[i + 1] + 1e-15).all() for i in range(3))
    independent = _axis(False, "L", [2, 4, 8, 16])
    k = min(c.m.size for c in independent.curves)
    assert not all((independent.curves[i].errors[:, :k] <= independent.curves[i + 1].errors[:, :k] + 1e-15).all()
                   for i in range(3))


def _bent(y: np.ndarray, rel_se: float = 0.02):
    x = np.array([0.5, 0.7, 1.0, 1.4, 2.0])
    data = conv._AxisData("l", x, y, y * (1 - rel_se), y * (1 + rel_se), np.ones(5), ())
    return conv._trend(data, "low", x=x, divisor=np.ones(5), predicted=0.0, alternative="greater",
                       test=dict(alpha=1e-3, tolerance=0.25), label="m* at the low end of l",
                       decides="decided by XYZ")


def test_a_bent_undecided_trend_is_flagged_pre_asymptotic_with_what_decides_it():
    # m* bends (local slope 2 -> 0) with 2% errors: the lack of fit is the bend; the cell stays undecided for power
    # and its flag names the local slopes and what decides it.
    x = np.array([0.5, 0.7, 1.0, 1.4, 2.0])
    bent = _bent(10 * np.minimum(x / 0.5, 2.2) ** 2 * np.array([1.0, 1.0, 1.0, 0.9, 1.1]))
    assert bent.flags and bent.flags[0].startswith("pre-asymptotic") and "decided by XYZ" in bent.flags[0]
    assert bent.p_value == 1.0
    # a straight trend within its errors is not flagged (and is decided: slope 2 >> -tolerance)
    straight = _bent(10 * (x / 0.5) ** 2)
    assert not straight.flags and straight.upper <= 0.25
    # a bent trend that is decided anyway (upper <= tolerance) keeps its verdict: no flag
    gentle = _bent(10 * (x / 0.5) ** 3 * np.array([1.0, 1.0, 1.05, 1.0, 1.0]), rel_se=0.02)
    assert gentle.upper <= 0.25 and not gentle.flags


# ------------------------------------------------------------------ full tier: thm4.no_l_dependence, censoring

NO_L = "performer.thm4.no_l_dependence"


def test_no_l_full_tier_reads_the_plateau_where_it_is_reachable_and_says_what_decides_the_rest():
    claim = get_claim(NO_L)
    cells = claim.cells("full", "E")
    long_list, short = conv._NO_L_LENGTHS["E"]["full"], conv._NO_L_SHORT
    assert {p["d"] for p in cells if p["L"] == long_list} == {conv._NO_L_PLATEAU_D}
    assert {p["d"] for p in cells if p["L"] == short} == {8, 16, 64}
    assert all(p["L"] in (long_list, short) for p in cells)
    assert max(long_list) == 1024  # the declared L axis' end is still read
    for p in claim.cells("full", "R"):
        assert p["L"] == conv._NO_L_LENGTHS["R"]["full"]
    for tier in ("smoke", "quick"):  # below the full tier nothing changes
        assert all(p["L"] == conv._NO_L_LENGTHS["E"][tier] for p in claim.cells(tier, "E"))
    assert "10^6" not in conv._no_l_decides(2) and conv._no_l_decides(2) == conv._NO_L_DECIDES
    words = conv._no_l_decides(8)
    assert "d = 8" in words and "adversarial" in words and "L >= " in words


def _curve(scale: float, m_top: int, p: float = 0.9) -> "conv._Curve":
    """A curve whose every redraw's error decays exactly like scale·m^{-1/2} (the quantile bounds coincide)."""
    m = conv._m_grid(m_top)
    errors = scale * np.ones((1000, 1)) / np.sqrt(m)[None, :]
    return conv._Curve(m, errors, p, 4)


def test_a_curve_the_half_power_law_cannot_bring_to_delta_by_the_cap_is_hopeless():
    cap, delta = 2**17, 0.01
    # m* = (scale/δ)²: just within the margin runs on, beyond it stops (read as censored) at m = 1024
    within = _curve(delta * math.sqrt(1.4 * cap), 1024)
    beyond = _curve(delta * math.sqrt(1.6 * cap), 1024)
    assert not conv._hopeless(within, delta, cap)
    assert conv._hopeless(beyond, delta, cap)
    # a curve that crosses below the cap is never stopped
    assert not conv._hopeless(_curve(delta * math.sqrt(cap / 2), 1024), delta, cap)
    # a flat (biased) curve is stopped whatever its level
    flat = conv._Curve(conv._m_grid(1024), np.full((1000, conv._m_grid(1024).size), 0.05), 0.9, 4)
    assert conv._hopeless(flat, delta, cap)
