"""Macformer fig4a / ratio-bias machinery: the infinite mean NMSE of the toy protocol (the argument that makes the
log_of_mean and linear readings undecidable), the control variates and helpers the cells use."""

import math

import numpy as np
import pytest

from rfkit.validation.claims.macformer.common import _jackknife
from rfkit.validation.claims.macformer.figures import INFINITE_MEAN_NMSE, _ols_slope


def _presbn_by_hand(x: np.ndarray) -> np.ndarray:
    """Pre-SBN of ``x (draws, n, d)`` written out (feature_batch statistics, row norm) and RMFA's ``d^{-1/4}``."""
    z = (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-12)
    z = z / np.linalg.norm(z, axis=-1, keepdims=True)
    return z * x.shape[-1] ** -0.25


def test_denominator_has_a_positive_density_at_zero_when_every_feature_has_degree_one():
    """With every feature of degree 1 (probability 4^-D at p = 2) the RMFA denominator of a query is the bilinear
    form (4/D)·q̃ᵀ(Σ_t ω_tω_tᵀ)Σ_j k̃_j of the continuous pre-SBN inputs: P(|μ̂| < ε) ∝ ε near 0 (a positive density),
    so E[1/μ̂²] = ∞ and, the numerator being nonzero there, E[NMSE] = ∞ (INFINITE_MEAN_NMSE). Seeded (seed 0,
    100000 draws): the halving checks allow 4 binomial sd (+0.05), the √M growth 20% (observed counts 2794, 1391,
    673 and ratio 2.01: false failure far below 1e-4)."""
    rng = np.random.default_rng(0)
    draws, n, d, num_features = 100_000, 8, 16, 2
    q = _presbn_by_hand(rng.standard_normal((draws, n, d)))[:, 0]
    k = _presbn_by_hand(rng.standard_normal((draws, n, d)))
    omega = rng.integers(0, 2, size=(draws, num_features, d)) * 2.0 - 1.0
    phi_q = 2.0 * np.einsum("rfd,rd->rf", omega, q)  # c_1 = 2: a_1 = 1, π_1 = 1/4
    phi_k = 2.0 * np.einsum("rfd,rjd->rf", omega, k)  # Σ_j φ_f(k̃_j)
    mu = (phi_q * phi_k).mean(axis=1)
    scale = np.median(np.abs(mu))
    counts = [int((np.abs(mu) < eps * scale).sum()) for eps in (0.04, 0.02, 0.01)]
    assert min(counts) > 200 and (mu > 0).any() and (mu < 0).any()
    # a positive, finite density at 0: halving ε halves the count (within Poisson noise)
    for wide, narrow in zip(counts, counts[1:], strict=False):
        assert narrow / wide == pytest.approx(0.5, abs=4 * math.sqrt(0.25 / wide) + 0.05)
    # hence the truncated second moment E[min(μ̂⁻², M)] grows like √M (it would converge if E[μ̂⁻²] were finite)
    inv2 = (scale / mu) ** 2
    growth = [np.minimum(inv2, m).mean() for m in (1e4, 4e4)]
    assert growth[1] / growth[0] == pytest.approx(2.0, rel=0.2)
    assert "infinite mean" in INFINITE_MEAN_NMSE


def test_length_proxy_has_the_same_law_at_every_length():
    """proxy(n) = Σ_c (Σ_{i<=n} V_ic)²/n is χ²_d at every n (V iid N(0, 1)), so its log-log slope has mean 0: the
    control variate of fig4a.error_increases_with_length. Seeded (seed 1, 1500 draws), 4 standard errors."""
    rng = np.random.default_rng(1)
    lengths = [128, 181, 256, 362, 512]
    v = rng.standard_normal((1500, 512, 16))
    sums = np.cumsum(v, axis=1)
    proxy = np.stack([(sums[:, n - 1] ** 2).sum(axis=1) / n for n in lengths], axis=1)
    slopes = _ols_slope(lengths, np.log(proxy))
    assert abs(slopes.mean()) < 4 * slopes.std() / math.sqrt(slopes.size)
    assert proxy.mean(axis=0) == pytest.approx(np.full(len(lengths), 16.0), rel=0.03)


def test_ols_slope_recovers_a_power_law():
    x = np.array([2.0, 4.0, 8.0, 16.0, 32.0])
    assert _ols_slope(x, np.log(3.0 * x**-1.5)) == pytest.approx(-1.5)


def test_jackknife_is_exact_for_a_linear_statistic_and_unbiased_for_a_ratio():
    rng = np.random.default_rng(2)
    values = rng.standard_normal((50, 3))
    weights = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(_jackknife(values, lambda m: m @ weights), values @ weights)
    # θ = log(mean): the jackknife removes the O(1/R) bias of the plug-in estimate (seeded, 4000 samples of 20:
    # plug-in bias -1/(2R) = -0.025, jackknife bias O(1/R²), Monte Carlo error of each mean about 0.004)
    truth, plug, jack = math.log(2.0), [], []
    for _ in range(4000):
        x = rng.exponential(2.0, size=(20, 1))
        plug.append(math.log(x.mean()))
        jack.append(_jackknife(x, lambda m: np.log(m[:, 0])).mean())
    assert abs(np.mean(jack) - truth) < abs(np.mean(plug) - truth) / 3


@pytest.mark.parametrize("claim_id, variant, params", [
    ("macformer.fig4a.error_decreases_with_d", "log_of_mean|log", dict(length=128)),
    ("macformer.fig4a.error_decreases_with_d", "mean_of_log|linear", dict(length=128)),
    ("macformer.fig4a.error_increases_with_length", "log_of_mean", dict(D=16)),
])
def test_mean_nmse_readings_are_flagged_from_theory_without_drawing(claim_id, variant, params):
    from rfkit.validation.claims import get_claim
    from rfkit.validation.model import CellContext

    ctx = CellContext(claim_id, variant, params, "quick", 0, 1e-3, 0.8, 0.05, np.random.default_rng(0))
    ev = get_claim(claim_id).cell(ctx)
    assert ev.n == 0 and ev.p_value == 1.0 and ev.flags == (INFINITE_MEAN_NMSE,)
