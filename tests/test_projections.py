"""Random projections: Haar law of orthogonal blocks (and that the test catches a missing sign fix),
orthogonality, radial laws, block stacking.

Statistical tests here use KS tests at a per-test level chosen so that the *file's* false-failure rate
(probability, over seeds, that a correct sampler fails some test) is at most 1e-4 (Bonferroni).
"""

import numpy as np
import pytest
from scipy import stats

from rfkit.estimators import haar_orthogonal, orthogonal_projection, projection
from rfkit.estimators import projections as proj_mod
from rfkit.validation.stats import ks_test

DIMS = (2, 3, 5, 8)
N_MATRICES = 4000
FAMILY_ALPHA = 1e-4
N_TESTS = 2 * sum(DIMS) + len(DIMS)  # (e_1 and a random u) per row per d, plus chi norms per d
ALPHA = FAMILY_ALPHA / N_TESTS


def sphere_coordinate_cdf(d):
    """CDF of uᵀω̂ for ω̂ uniform on S^{d-1}: (t + 1)/2 ~ Beta((d-1)/2, (d-1)/2)."""
    law = stats.beta((d - 1) / 2, (d - 1) / 2)
    return lambda t: law.cdf((np.asarray(t) + 1) / 2)


def haar_law_evidence(d, seed):
    """KS evidence, per row i, for ω̂_iᵀe_1 and ω̂_iᵀu (u a fixed random unit vector)."""
    rng = np.random.default_rng(seed)
    q = haar_orthogonal(d, rng=rng, size=N_MATRICES)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    cdf = sphere_coordinate_cdf(d)
    return [ks_test(q[:, i, 0], cdf, alpha=ALPHA) for i in range(d)] + \
           [ks_test(q[:, i, :] @ u, cdf, alpha=ALPHA) for i in range(d)]


@pytest.mark.parametrize("d", DIMS)
def test_haar_rows_are_uniform_on_the_sphere(d):
    # seed fixed; power: each KS test detects a CDF distortion of ev.resolution (< 0.05 at n = 4000)
    for ev in haar_law_evidence(d, seed=5_108_238_777_016_002_411 + d):
        assert ev.p_value > ALPHA, ev
        assert ev.resolution < 0.05


def test_haar_law_test_catches_missing_sign_fix(monkeypatch):
    # planted bug: LAPACK's QR without the sign correction is not Haar (numpy: Q_11 <= 0 always)
    monkeypatch.setattr(proj_mod, "_sign_fix", lambda q, r: q)
    for d in DIMS:
        pvalues = [ev.p_value for ev in haar_law_evidence(d, seed=5_108_238_777_016_002_411 + d)]
        assert min(pvalues) < ALPHA


def test_sign_fix_makes_r_diagonal_positive(rng):
    g = rng.normal(size=(50, 4, 4))
    q, r = np.linalg.qr(g)
    fixed = proj_mod._sign_fix(q, r)
    # Q·diag(s) · diag(s)·R = QR and diag(s)·R has a positive diagonal
    signs = np.sign(np.diagonal(r, axis1=-2, axis2=-1))
    np.testing.assert_allclose(fixed @ (signs[..., :, None] * r), g, atol=1e-12)


@pytest.mark.parametrize("d", DIMS)
def test_chi_norms(d):
    rng = np.random.default_rng(9_221_330_448_100_551_002 + d)
    w = orthogonal_projection(N_MATRICES, d, rng=rng, norms="chi")
    ev = ks_test(np.linalg.norm(w, axis=1), stats.chi(d).cdf, alpha=ALPHA)
    assert ev.p_value > ALPHA, ev


@pytest.mark.parametrize(("m", "d"), [(1, 4), (3, 4), (4, 4), (9, 4), (64, 16), (17, 1)])
@pytest.mark.parametrize("norms", ["chi", "sqrt_d", "unit"])
def test_orthogonal_blocks(rng, m, d, norms):
    w = orthogonal_projection(m, d, rng=rng, norms=norms)
    assert w.shape == (m, d)
    row_norms = np.linalg.norm(w, axis=1)
    if norms == "sqrt_d":
        np.testing.assert_allclose(row_norms, np.sqrt(d), rtol=1e-12)
    if norms == "unit":
        np.testing.assert_allclose(row_norms, 1.0, rtol=1e-12)
    directions = w / row_norms[:, None]
    for start in range(0, m, d):
        block = directions[start:start + d]
        gram = block @ block.T
        np.testing.assert_allclose(gram, np.eye(len(block)), atol=1e-12)


def test_blocks_are_independent(rng):
    # rows of different blocks are not orthogonal (each pair's cosine is a continuous random variable)
    w = orthogonal_projection(8, 4, rng=rng, norms="unit")
    cross = w[:4] @ w[4:].T
    assert np.abs(cross).max() > 1e-3


def test_projection_by_name_and_reproducibility():
    a = projection("orthogonal", 6, 3, rng=11, norms="sqrt_d")
    b = projection("orthogonal", 6, 3, rng=np.random.default_rng(11), norms="sqrt_d")
    np.testing.assert_array_equal(a, b)
    r = projection("rademacher", 5, 7, rng=1)
    assert set(np.unique(r)) <= {-1.0, 1.0}
    s = projection("spherical", 5, 7, rng=1)
    np.testing.assert_allclose(np.linalg.norm(s, axis=1), np.sqrt(7))
    assert projection("gaussian", 5, 7, rng=1, dtype=np.float32).dtype == np.float32
