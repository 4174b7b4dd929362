"""Exact variance of one replicate's squared error with orthogonal random features (rfkit.theory.softmax).

References independent of the estimators and of the theory's series: scipy quadrature over a Haar 2-frame
(d = 2), the iid cumulant formulas, and seeded Monte Carlo with its own Haar-frame sampler (QR of a Gaussian
matrix, sign-fixed) and chi(d) norms. Monte Carlo checks use a 6-sigma band on the sample's own standard error
(false-failure rate below 1e-8 per check, seeds fixed).
"""

import math

import numpy as np
import pytest
from scipy import integrate

from rfkit.theory import softmax as th


def _rayleigh_mgf(c: float) -> float:
    """``E e^{c r}`` for ``r ~ chi(2)`` (Rayleigh), by quadrature."""
    return integrate.quad(lambda r: r * math.exp(-r * r / 2 + c * r), 0, np.inf)[0]


@pytest.mark.parametrize("a, b", [(1, 1), (2, 1), (3, 1), (2, -1), (2, 2), (4, 0)])
@pytest.mark.parametrize("s", [0.25, 0.5])
def test_orthogonal_exp_moment_by_quadrature(a, b, s):
    # d = 2: a Haar 2-frame is u_1 = (cos θ, sin θ), u_2 = ±(-sin θ, cos θ), θ uniform; z = (√s, 0)
    zn = math.sqrt(s)

    def f(theta):
        return _rayleigh_mgf(a * zn * math.cos(theta)) * _rayleigh_mgf(-b * zn * math.sin(theta))

    ref = integrate.quad(f, 0, 2 * math.pi, epsabs=0, epsrel=1e-11, limit=200)[0] / (2 * math.pi)
    assert float(th._orthogonal_exp_moment(2, s, (a, b))) == pytest.approx(ref, rel=1e-9)


def test_set_partitions_are_bell_numbers():
    assert [len(th._set_partition_sizes(j)) for j in range(1, 5)] == [1, 2, 5, 15]


def _pair(d, s):
    x = np.zeros(d)
    x[0] = math.sqrt(s) / 2
    x[-1] = 0.1
    y = x.copy()
    y[-1] = -0.1  # z = x + y has ‖z‖² = s; Δ != 0
    return x, y


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
@pytest.mark.parametrize("d, m", [(2, 2), (4, 4), (2, 3), (3, 7)])
def test_mean_is_orthogonal_mse(kind, d, m):
    x, y = _pair(d, 0.3)
    assert th.orthogonal_squared_error_moments(kind, x, y, m)["mean"] == pytest.approx(
        th.orthogonal_mse(kind, x, y, m), rel=1e-12)


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
def test_single_row_blocks_are_iid(kind):
    # m = 1: one block of one row; the exact iid squared-error variance (cumulant route)
    x, y = _pair(3, 0.4)
    assert th.orthogonal_squared_error_moments(kind, x, y, 1)["var"] == pytest.approx(
        th.squared_error_moments(kind, x, y, 1)["sd"] ** 2, rel=1e-12)


def _haar_frames(n, d, k, rng):
    g = rng.standard_normal((n, d, k))
    q, r = np.linalg.qr(g)
    return (q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]).transpose(0, 2, 1)  # (n, k, d) rows


def _orf_rows(n, m, d, rng):
    blocks, rest = divmod(m, d)
    parts = [_haar_frames(n, d, d, rng) for _ in range(blocks)] + ([_haar_frames(n, d, rest, rng)] if rest else [])
    w = np.concatenate(parts, axis=1)
    return w * np.sqrt(rng.chisquare(d, size=(n, m)))[..., None]


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
@pytest.mark.parametrize("d, m, s, seed", [(2, 2, 0.25, 1), (3, 3, 0.25, 2), (2, 5, 0.25, 3), (4, 4, 0.4, 4)])
def test_fourth_moment_by_monte_carlo(kind, d, m, s, seed):
    rng = np.random.default_rng(seed)
    x, y = _pair(d, s)
    z, lam, sm = x + y, math.exp(-(x @ x + y @ y) / 2), math.exp(x @ y)
    fourth = []
    for _ in range(8):
        proj = _orf_rows(250_000, m, d, rng) @ z
        terms = lam * (np.exp(proj) if kind == "positive" else np.cosh(proj))
        fourth.append((terms.mean(axis=1) - sm) ** 4)
    fourth = np.concatenate(fourth)
    exact = th.orthogonal_squared_error_moments(kind, x, y, m)["fourth"]
    se = fourth.std(ddof=1) / math.sqrt(fourth.size)
    assert abs(fourth.mean() - exact) <= 6 * se, (fourth.mean(), exact, se)
    assert se / exact < 0.05  # the check has power: 6 se is below 30% of the value


def test_orthogonal_lowers_the_squared_error_variance_at_small_s():
    # sanity against the iid value (not a theorem we rely on): R-ORF at m = d = 4 and s = 0.25
    x, y = _pair(4, 0.25)
    orf = th.orthogonal_squared_error_moments("positive", x, y, 4)["var"]
    iid = th.squared_error_moments("positive", x, y, 4)["sd"] ** 2
    assert 0 < orf < iid


def test_rejects_trig():
    with pytest.raises(ValueError):
        th.orthogonal_squared_error_moments("trig", *_pair(2, 0.25), 2)




# ------------------------------------------------------------- beautiful terms: a range for squared errors

def test_term_range_contains_every_term():
    from rfkit.estimators.beautiful import IsotropicLaw, Maclaurin
    from rfkit.theory import beautiful as bt

    gs = {"exp": (Maclaurin.exp(), np.exp), "cosh": (Maclaurin.cosh(2.0, 0.5), lambda u: 2.0 * np.cosh(0.5 * u)),
          "1+u+u2": (Maclaurin.polynomial(1, 1, 1), lambda u: 1 + u + u * u),
          "u2": (Maclaurin.polynomial(0, 0, 1), lambda u: u * u),
          "u+u3": (Maclaurin.polynomial(0, 1, 0, 1), lambda u: u + u**3)}
    for law in (IsotropicLaw(2, "sqrt_d"), IsotropicLaw(3, "uniform"), IsotropicLaw(4, "fixed", 1.7)):
        for z_norm in (0.5, 1.5):
            big = law.radius * z_norm
            u = np.linspace(-big, big, 200_001)  # every value of ωᵀz (|ωᵀz| <= R‖z‖), the ends included
            for g, ref in gs.values():
                lo, hi = bt.term_range(g, law, z_norm)
                vals = ref(u)
                assert vals.min() >= lo - 1e-12 and vals.max() <= hi * (1 + 1e-12)
                assert vals.max() == pytest.approx(hi, rel=1e-12)  # hi = g(L) is attained
    with pytest.raises(ValueError):
        bt.term_range(Maclaurin.exp(), IsotropicLaw(2, "chi"), 0.5)


def test_lara_maps_are_the_performer_terms():
    """The lara kernel-variance cell's sd uses rfkit.theory.softmax for these maps: same relative variance."""
    from rfkit.theory import lara as lara_theory
    from rfkit.validation.claims.lara.statistical import SOFTMAX_TERMS

    x, y = np.array([0.3, -0.2, 0.1]), np.array([0.1, 0.4, -0.3])
    for fmap, kind in SOFTMAX_TERMS.items():
        sem = th.squared_error_moments(kind, x, y, 4)
        assert sem["mean"] / math.exp(2 * x @ y) == pytest.approx(
            lara_theory.kernel_relative_variance(x, y, fmap, 4), rel=1e-10)
