"""rfkit.gpu RMF/RMFA: parity with rfkit.estimators.rmf on identical draws, autograd, bad input.

Parity: float64 to 1e-10 relative, float32 to 1e-4 relative (inputs inside the unit ball, D = 64).
"""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rfkit import gpu  # noqa: E402
from rfkit.estimators import rmf  # noqa: E402


def _rel(got, want) -> float:
    got = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), np.finfo(float).tiny))


@pytest.fixture
def qkv(rng):
    q, k = rng.normal(size=(2, 40, 6)) * 0.3
    return q, k, rng.normal(size=(40, 2))


@pytest.mark.parametrize("kernel", ["exp", "inv", "trigh"])
@pytest.mark.parametrize("law, weight", [("geom", "importance"), ("geom", "printed"), ("defective", "printed")])
def test_rmf_features_match_numpy(rng, kernel, law, weight):
    p = 3.0 if law == "defective" else 2.0
    draw = rmf.draw_rmf(64, 6, rng=rng, p=p, n_law=law)
    x = rng.normal(size=(5, 6)) * 0.3
    want = rmf.rmf_features(x, draw, kernel, weight=weight)
    assert _rel(gpu.rmf_features(torch.tensor(x), draw, kernel, weight=weight), want) < 1e-10
    got32 = gpu.rmf_features(torch.tensor(x, dtype=torch.float32), draw, kernel, weight=weight)
    assert got32.dtype == torch.float32 and _rel(got32, want) < 1e-4


@pytest.mark.parametrize("route", ["none", "causal", "padding", "general"])
def test_rmfa_matches_numpy(rng, qkv, route):
    q, k, v = qkv
    draw = rmf.draw_rmf(64, 6, rng=rng)
    keep = rng.random((40, 40)) < 0.6
    keep[:, 0] = True
    options = {"none": {}, "causal": dict(causal=True, chunk_size=16), "padding": dict(key_padding=keep[0]),
               "general": dict(mask=keep)}[route]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = rmf.rmfa(q, k, v, draw=draw, return_details=True, **options)
        got = gpu.rmfa(torch.tensor(q), torch.tensor(k), torch.tensor(v), draw=draw, return_details=True, **options)
    assert _rel(got.numerator, want.numerator) < 1e-10
    assert _rel(got.denominator, want.denominator) < 1e-10
    assert got.n_nonpositive == want.n_nonpositive and got.width == want.width


@pytest.mark.parametrize("causal", [False, True])
def test_rmfa_replicates_match_numpy_for_the_same_rng(qkv, causal):
    q, k, v = qkv
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = rmf.rmfa_replicates(q, k, v, replicates=6, num_features=32, rng=np.random.default_rng(5), causal=causal)
        got = gpu.rmfa_replicates(q, k, v, replicates=6, num_features=32, rng=np.random.default_rng(5), causal=causal)
    assert got.out.shape == (6, 40, 2)
    assert _rel(got.numerator, want.numerator) < 1e-10 and _rel(got.denominator, want.denominator) < 1e-10


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_through_rmfa(causal):
    draw = rmf.draw_rmf(16, 3, rng=np.random.default_rng(0))
    gen = gpu.make_generator(0, "cpu")
    q, k = (torch.randn(4, 3, generator=gen, dtype=torch.float64).mul(0.3).requires_grad_() for _ in range(2))
    v = torch.randn(4, 2, generator=gen, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda q, k, v: gpu.rmfa(q, k, v, draw=draw, causal=causal, chunk_size=2),
                                    (q, k, v))


def test_bad_input_raises(rng, qkv):
    q, k, v = qkv
    draw = rmf.draw_rmf(8, 6, rng=rng)
    with pytest.raises(TypeError):
        gpu.rmfa(q, k, v, draw=[draw, draw])
    with pytest.raises(ValueError):
        gpu.rmf_features(np.ones((2, 5)), draw)
    with pytest.raises(ValueError):
        gpu.rmfa(q, k, v[:-1], draw=draw)
    with pytest.raises(ValueError):
        gpu.rmfa_replicates(q[None], k, v, replicates=2, num_features=4, rng=0)
    with pytest.raises(ValueError):
        gpu.rmf_features(np.ones((2, 6)), draw, weight="odd")
