"""pytest-benchmark suite of rfkit's hot kernels, for regression tracking (issue 16, item 2).

Not part of the test run: ``[tool.pytest.ini_options] testpaths`` names ``tests`` and ``notebooks`` only, so a
plain ``pytest`` never collects this folder. Run it explicitly::

    pytest benchmarks --benchmark-autosave                # store a baseline under .benchmarks/
    pytest benchmarks --benchmark-compare --benchmark-compare-fail=median:25%   # fail on a 25% regression
    pytest benchmarks --benchmark-disable                 # a smoke run: each kernel once, no timing

Shapes are the bench's (``rfkit bench``): 8 heads (batch × heads), ``L = 2048``, ``d = 64``, ``m = 256``,
float32 and float64; the projection is given (drawn once outside the timer) so that the kernels, not the
sampler, are timed (``rfkit bench``'s peer rows time the sampler too). Compare runs only on the same machine.
"""

import importlib.util

import numpy as np
import pytest

from rfkit.estimators import linear_attention, orthogonal_projection, positive_features, softmax_attention
from rfkit.estimators.eva import eva_practical
from rfkit.estimators.favor import favor_attention
from rfkit.estimators.rmf import draw_rmf, rmfa

HEADS, L, D, M = 8, 2048, 64, 256
DTYPES = ["float32", "float64"]
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _qkv(dtype, heads=HEADS, length=L):
    rng = np.random.default_rng(1)
    return tuple(rng.standard_normal((heads, length, D)).astype(dtype) for _ in range(3))


@pytest.fixture(params=DTYPES)
def dtype(request):
    return request.param


@pytest.fixture
def omega(dtype):
    return orthogonal_projection(M, D, rng=2, dtype=dtype)


def test_positive_features(benchmark, dtype, omega):
    q, _, _ = _qkv(dtype)
    benchmark(positive_features, q * D ** -0.25, omega, dtype=dtype)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_linear_attention_from_features(benchmark, dtype, omega, causal):
    q, k, v = _qkv(dtype)
    qf, kf = (positive_features(x * D ** -0.25, omega, dtype=dtype) for x in (q, k))
    benchmark(linear_attention, qf, kf, v, causal=causal, dtype=dtype)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_favor_attention(benchmark, dtype, omega, causal):
    q, k, v = _qkv(dtype)
    benchmark(favor_attention, q, k, v, omega=omega, causal=causal, dtype=dtype)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_softmax_attention(benchmark, dtype, causal):
    q, k, v = _qkv(dtype, heads=1)
    benchmark(softmax_attention, q[0], k[0], v[0], causal=causal, dtype=dtype)


def test_eva_practical(benchmark, dtype):
    q, k, v = _qkv(dtype, heads=1)
    rng = np.random.default_rng(3)
    benchmark(eva_practical, q[0], k[0], v[0], block_size=64, num_chunks=32, rng=rng, dtype=dtype)


def test_rmfa(benchmark):
    q, k, v = _qkv("float64", heads=1)
    draw = draw_rmf(M, D, rng=2)
    benchmark(rmfa, q[0], k[0], v[0], draw=draw)


@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_torch_favor_attention(benchmark, dtype, omega, causal):
    import torch

    from rfkit import gpu

    q, k, v = (torch.from_numpy(x) for x in _qkv(dtype))
    w = torch.from_numpy(omega)

    def call():
        with torch.no_grad():
            return gpu.favor_attention(q, k, v, omega=w, causal=causal)

    benchmark(call)
