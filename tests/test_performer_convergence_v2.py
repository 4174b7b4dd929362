"""The v2 declarations of Theorems 4 and 7 and of the model-level (GPU) claims of ``performer/convergence.py``.

What is pinned: the swept lists and the cap come from the grid (cells) and ``search_params`` (searches), never from
the tier; the readings the statement's words do not make are reported beside the verdict; every cell sweeps the
list of its own tier; the untestable claims declare the domain a GPU run would have to cover.
"""

import inspect

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
    assert counts == {"smoke": [2, 2, 3, 3], "quick": [4, 4, 5, 5], "full": [48, 48, 60, 60]}


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
