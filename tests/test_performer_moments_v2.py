"""performer moments claims in the v2 declaration (domain, routes, coverage): the design covers the statement's
domain at smoke and quick, each route's ``where`` keeps meaningful combinations, and planted bugs at the points the
v2 grids newly reach (d = 1, m = 1, pairs beyond the Monte Carlo caps) are refuted."""

import math

import numpy as np
import pytest

from rfkit.estimators import Features, positive_features, trig_features
from rfkit.theory import softmax as theory
from rfkit.validation.claims.performer import common, moments
from rfkit.validation.engine import coverage_table, validate

PORTED = [moments.SM_GAUSS_IDENTITY, moments.TRIG_UNBIASED, moments.PRF_IDENTITY, moments.PRF_ESTIMATORS,
          moments.MSE_TRIG, moments.MSE_POS, moments.MSE_HYP, moments.RELATIVE_MSE, moments.SINGLE_TERM_MOMENTS]


def _run(claim, **options):
    return validate([claim], tier="smoke", seed=0, progress=False, **options).claims[0]


@pytest.mark.parametrize("claim", PORTED, ids=lambda c: c.id)
def test_domain_is_covered_at_smoke_and_quick(claim):
    assert claim.domain is not None and not claim.readings
    table = coverage_table(claim)
    for tier in ("smoke", "quick", "full"):
        for variant, row in table[tier].items():
            assert row["covered"], (tier, variant, row["coverage"])


@pytest.mark.parametrize("claim", PORTED, ids=lambda c: c.id)
def test_exact_route_reaches_the_degenerate_pairs(claim):
    """x = 0, x = y (angle 0, equal norms), x = -y (angle π, equal norms) and the largest norm are exact-route cells."""
    cells = claim.cells("quick", claim.variants[0])
    exact = [c for c in cells if c.get("route", "exact") == "exact"]
    assert all(common._is_sweep(c) for c in exact)  # one cell sweeps every pair of its tuples
    pairs = {(nx, ny, a) for c in exact for nx in c["norm_x"] for ny in c["norm_y"] for a in c["angle"]}
    for pair in [(0.0, 0.0, 0.0), (1.0, 1.0, 0.0), (1.0, 1.0, math.pi), (3.0, 3.0, math.pi), (3.0, 0.0, 0.0)]:
        assert pair in pairs, pair
    assert any(c["d"] == 1 for c in exact)


def test_routes_keep_meaningful_combinations():
    for claim in (moments.MSE_POS, moments.RELATIVE_MSE, moments.TRIG_UNBIASED, moments.PRF_ESTIMATORS):
        for cell in claim.cells("quick", claim.variants[0]):
            kind = cell.get("kind", {"performer.lemma2.mse_pos": "positive"}.get(claim.id, "trig"))
            if cell["route"] == "exact":
                assert cell.get("projection", "iid") == "iid"
                continue
            table = moments.UNBIASED_PAIRS if "unbiased" in claim.id or "prf" in claim.id else moments.MSE_PAIRS
            assert (cell["norm_x"], cell["norm_y"], cell["angle"]) in table.values()
            cap = common.MC_CAP_UNBIASED if table is moments.UNBIASED_PAIRS else common.MC_CAP_MSE
            assert common._spread(cell, kind) <= cap[kind] + 1e-12
            assert cell["d"] > 1 or cell["angle"] in (0.0, math.pi)
    series = [c for c in moments.PRF_IDENTITY.cells("quick", "default") if c["route"] == "series"]
    assert len(series) == 1


# ------------------------------------------------------------------ planted bugs the v2 grids newly reach


def _positive_wrong_for_large_inputs(x, omega):
    """Positive features 10% too large in the kernel for inputs of norm >= 2 (outside every Monte Carlo cap)."""
    f = positive_features(x, omega)
    big = np.linalg.norm(np.atleast_2d(x), axis=-1) >= 2.0
    factor = np.where(big, math.sqrt(1.1), 1.0)[:, None]
    return Features(f.values * factor, f.log_scale)


def _trig_wrong_in_one_dimension(x, omega):
    """Trigonometric features that drop one half (sin or cos) of each feature pair when d = 1 only."""
    f = trig_features(x, omega)
    if np.asarray(omega).shape[-1] != 1:
        return f
    values = np.array(f.values if isinstance(f, Features) else f, dtype=np.float64, copy=True)
    m = np.asarray(omega).shape[0]
    values[..., :m] = 0.0
    return Features(values, f.log_scale) if isinstance(f, Features) else values


def test_planted_bug_beyond_the_monte_carlo_cap_is_refuted_by_the_exact_route():
    result = _run(moments.PRF_ESTIMATORS, implementations={"feature_map.positive": _positive_wrong_for_large_inputs})
    assert result.verdict == "refuted"
    assert result.witness["params"]["route"] == "exact"


def test_planted_bug_in_one_dimension_is_refuted():
    result = _run(moments.TRIG_UNBIASED, implementations={"feature_map.trig": _trig_wrong_in_one_dimension})
    assert result.verdict == "refuted"
    assert result.witness["params"]["d"] == 1


def test_planted_lemma2_error_at_m_1_is_refuted(monkeypatch):
    true = theory.lemma2_mse
    monkeypatch.setattr(theory, "lemma2_mse",
                        lambda kind, x, y, m, **kw: true(kind, x, y, m, **kw) * (1.5 if m == 1 else 1.0))
    result = _run(moments.MSE_POS)
    assert result.verdict == "refuted"
    assert result.witness["params"]["m"] == 1


# ------------------------------------------------------------------ single-term moments: the exact route


def _mp_term_moment(kind, x, y, k, centre=0.0):
    """``E[(T - centre)^k]`` of the true term by mpmath quadrature over the 1-D law of ωᵀz (or ωᵀΔ), split at the
    peaks ``rz`` of the exponentials."""
    import mpmath as mp

    with mp.workdps(30):
        lam = mp.e ** (-(float(x @ x) + float(y @ y)) / 2)
        if kind == "trig":
            sd = mp.sqrt(float((x - y) @ (x - y)))
            f = lambda u: (mp.cos(sd * u) / lam - centre) ** k  # noqa: E731
        else:
            sd = mp.sqrt(float((x + y) @ (x + y)))
            g = mp.exp if kind == "positive" else mp.cosh
            f = lambda u: (lam * g(sd * u) - centre) ** k  # noqa: E731
        peaks = sorted({0.0} | ({float(j * sd) for j in range(-k, k + 1)} if kind != "trig" else set()))
        return float(mp.quad(lambda u: f(u) * mp.npdf(u), [-mp.inf, *peaks, mp.inf]))


@pytest.mark.parametrize("kind, pair, k, central", [
    ("positive", (1.0, 1.0, 0.0), 4, False), ("positive", (3.0, 2.0, math.pi / 3), 2, True),
    ("hyperbolic", (3.0, 2.0, math.pi / 3), 2, False), ("hyperbolic", (2.0, 3.0, 0.9 * math.pi), 4, True),
    ("trig", (2.0, 3.0, 0.9 * math.pi), 3, False), ("trig", (0.25, 1.0, 2.0), 4, True)])
def test_exact_term_moment_matches_mpmath(kind, pair, k, central):
    """The exact route's quadrature (recentred Gauss–Hermite mixture / trapezoid along Δ) against mpmath, at
    ‖z‖ up to 4.4 and k‖Δ‖ up to 14, where a plain Gauss–Hermite rule misses the peaks."""
    from rfkit.estimators import FEATURE_MAPS
    from rfkit.validation.harness import controlled_pair

    x, y = controlled_pair(*pair, 2, np.random.default_rng(0))
    centre = math.exp(float(x @ y)) if central else 0.0
    value = moments._exact_term_moment(FEATURE_MAPS[kind], kind, x, y, k, centre)
    assert value == pytest.approx(_mp_term_moment(kind, x, y, k, centre), rel=1e-8)


def test_planted_wrong_power_at_large_z_is_refuted_by_the_exact_route(monkeypatch):
    """E ψ^k with the exponent k²s/2 off by 0.1·k·s/2 where ‖x+y‖² > 1 only (beyond the Monte Carlo cap 0.1)."""
    true = theory.term_raw_moment

    def wrong(kind, x, y, k):
        s = float((x + y) @ (x + y))
        return true(kind, x, y, k) * (math.exp(0.05 * k * s) if kind == "positive" and s > 1.0 else 1.0)

    monkeypatch.setattr(theory, "term_raw_moment", wrong)
    result = _run(moments.SINGLE_TERM_MOMENTS)
    assert result.verdict == "refuted"
    assert result.witness["params"]["route"] == "exact"
    nx, ny, angle = result.witness["extra"]["worst_pair"]
    assert common._spread(dict(norm_x=nx, norm_y=ny, angle=angle), "positive") > moments.MC_CAP_POWER


def test_witness_names_the_one_wrong_pair_of_the_sweep(monkeypatch):
    """Eq 8 wrong at one pair of the smoke sweep only (‖x‖ = 0.5, ‖y‖ = 3, angle 2π/3): the exact cell that sweeps
    it is the witness and its extra names that pair."""
    true = theory.lemma2_mse

    def planted(kind, x, y, m, **kw):
        hit = math.isclose(float(x @ x), 0.25) and math.isclose(float(y @ y), 9.0) and \
            math.isclose(float(x @ y), -0.75)
        return true(kind, x, y, m, **kw) * (1.5 if hit else 1.0)

    monkeypatch.setattr(theory, "lemma2_mse", planted)
    result = _run(moments.MSE_POS)
    assert result.verdict == "refuted"
    assert result.witness["params"]["route"] == "exact"
    assert result.witness["extra"]["worst_pair"] == pytest.approx([0.5, 3.0, 2 * math.pi / 3])
