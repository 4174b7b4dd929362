"""rfkit.gpu practical/causal EVA: parity with rfkit.estimators.eva given the same noise, autograd, bad input.

Parity: float64 to 1e-10 relative, float32 to 1e-4 relative.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rfkit import gpu  # noqa: E402
from rfkit.estimators import eva  # noqa: E402

N, D = 32, 4


def _t(a, dtype=torch.float64):
    return torch.tensor(a, dtype=dtype)


def _rel(got, want) -> float:
    return float(np.abs(got.detach().numpy() - want).max() / np.abs(want).max())


@pytest.fixture
def qkv(rng):
    q, k = rng.normal(size=(2, N, D)) * 0.7
    return q, k, rng.normal(size=(N, 3))


@pytest.mark.parametrize("domain", ["all", "complement"])
@pytest.mark.parametrize("block, chunks", [(8, 4), (0, 4), (8, 0), (4, 2)])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("chunk_logit", ["representative", "lse"])
def test_eva_practical_matches_numpy(rng, qkv, domain, block, chunks, mode, chunk_logit):
    q, k, v = qkv
    part = eva.practical_partition(N, block_size=block, num_chunks=chunks, partition_domain=domain)
    eps = rng.normal(size=part.chunks.shape[:2] + (D,))
    options = dict(block_size=block, num_chunks=chunks, partition_domain=domain, mode=mode, chunk_logit=chunk_logit)
    want = eva.eva_practical(q, k, v, eps=eps, **options)
    assert _rel(gpu.eva_practical(_t(q), _t(k), _t(v), eps=_t(eps), **options), want) < 1e-10


@pytest.mark.parametrize("frame, mu_rule", [("reference_code", "half"), ("sqrt_d", "q"), ("theory", "zero")])
def test_eva_practical_with_layer_norm_summaries_matches_numpy(rng, qkv, frame, mu_rule):
    q, k, v = qkv
    sigma = eva.LinearLayerNorm.random_init(D, rng=rng)
    eps = rng.normal(size=(1, 4, D))
    options = dict(block_size=8, num_chunks=4, sigma_q=sigma, sigma_k=sigma, frame=frame, mu_rule=mu_rule, pool="max")
    want = eva.eva_practical(q, k, v, eps=eps, **options)
    assert _rel(gpu.eva_practical(_t(q), _t(k), _t(v), eps=_t(eps), **options), want) < 1e-10


def test_eva_practical_batched_and_float32(rng):
    q, k, v = rng.normal(size=(3, 2, 3, N, D)) * 0.5
    eps = rng.normal(size=(2, 3, 1, 4, D))
    want = eva.eva_practical(q, k, v, block_size=8, num_chunks=4, eps=eps)
    got = gpu.eva_practical(_t(q), _t(k), _t(v), block_size=8, num_chunks=4, eps=_t(eps))
    assert got.shape == want.shape and _rel(got, want) < 1e-10
    got32 = gpu.eva_practical(*(_t(a, torch.float32) for a in (q, k, v)), block_size=8, num_chunks=4,
                              eps=_t(eps, torch.float32))
    assert got32.dtype == torch.float32 and _rel(got32, want) < 1e-4


@pytest.mark.parametrize("n", [32, 30])
@pytest.mark.parametrize("chunk_mask", ["alg2", "before_own_chunk"])
@pytest.mark.parametrize("window", ["block", "overlapping"])
def test_eva_causal_matches_numpy(rng, qkv, n, chunk_mask, window):
    q, k, v = (a[:n] for a in qkv)
    eps = rng.normal(size=(n // 4, D))
    options = dict(block_size=8, chunk_size=4, chunk_mask=chunk_mask, window=window)
    want = eva.eva_causal(q, k, v, eps=eps, **options)
    assert _rel(gpu.eva_causal(_t(q), _t(k), _t(v), eps=_t(eps), **options), want) < 1e-10


def test_eva_causal_output_ignores_future_tokens(rng, qkv):
    q, k, v = (_t(a) for a in qkv)
    gen = gpu.make_generator(0, "cpu")
    eps = torch.randn(N // 4, D, generator=gen, dtype=torch.float64)
    full = gpu.eva_causal(q, k, v, block_size=8, chunk_size=4, eps=eps)
    changed = [a.clone() for a in (q, k, v)]
    for a in changed:
        a[20:] = 30.0 * torch.randn(a[20:].shape, generator=gen, dtype=torch.float64)
    assert torch.equal(gpu.eva_causal(*changed, block_size=8, chunk_size=4, eps=eps)[:20], full[:20])


def test_generator_noise_is_reproducible(qkv):
    q, k, v = qkv
    a = gpu.eva_practical(q, k, v, block_size=8, num_chunks=4, rng=gpu.make_generator(1, "cpu"))
    b = gpu.eva_practical(q, k, v, block_size=8, num_chunks=4, rng=gpu.make_generator(1, "cpu"))
    c = gpu.eva_practical(q, k, v, block_size=8, num_chunks=4, rng=gpu.make_generator(2, "cpu"))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("causal", [False, True])
def test_gradcheck_through_eva(causal):
    gen = gpu.make_generator(3, "cpu")
    q, k, v = (torch.randn(8, 2, generator=gen, dtype=torch.float64).mul(0.5).requires_grad_() for _ in range(3))
    eps = torch.randn(4, 2, generator=gen, dtype=torch.float64)
    if causal:
        def fn(q, k, v):
            return gpu.eva_causal(q, k, v, block_size=2, chunk_size=2, eps=eps)
    else:
        def fn(q, k, v):
            return gpu.eva_practical(q, k, v, block_size=2, num_chunks=2, eps=eps[None, :2])
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_bad_input_raises(qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match="rng"):
        gpu.eva_practical(q, k, v, block_size=8, num_chunks=4)
    with pytest.raises(ValueError):
        gpu.eva_practical(q, k[:-1], v[:-1], block_size=8, num_chunks=4, mode="eval")
    with pytest.raises(ValueError):
        gpu.eva_practical(q, k, v, block_size=7, num_chunks=4, mode="eval")
    with pytest.raises(ValueError):
        gpu.eva_practical(q, k, v, block_size=8, num_chunks=4, eps=np.ones((1, 3, D)))
    with pytest.raises(ValueError):
        gpu.eva_causal(q, k, v, block_size=8, chunk_size=4, eps=np.ones((2, D)))
    with pytest.raises(ValueError):
        gpu.eva_causal(q, k, v, block_size=8, chunk_size=4, chunk_mask="none", mode="eval")
