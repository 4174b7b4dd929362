"""`rfkit validate --backend torch`: role implementations, verdicts equal to the numpy backend, usage errors."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rfkit import gpu  # noqa: E402
from rfkit.estimators import Features, orthogonal_projection, positive_features  # noqa: E402
from rfkit.validation import backends  # noqa: E402
from rfkit.validation.adapters import known_roles  # noqa: E402
from rfkit.validation.cells import backend_implementations, plan  # noqa: E402
from rfkit.validation.claims import get_claim  # noqa: E402
from rfkit.validation.cli import main  # noqa: E402
from rfkit.validation.engine import validate  # noqa: E402

#: Claims whose every role the torch backend covers (feature maps, linear attention, R-ORF sampling, RMF).
AGREEMENT_CLAIMS = ["core.linear_attention.exact", "core.causal.no_future_leak", "core.features.unbiased",
                    "core.orf.haar_law", "macformer.derived.rmf_feature_moments", "macformer.thm1.rmfa_unbiased",
                    "eva.appd.causal_no_future_leak", "lara.sec4_3.ra_special_case"]
#: ~5 s for both backends on the shared machine. (macformer.thm1.rmfa_unbiased is refuted on both backends.)
SLOW_AGREEMENT = {"core.linear_attention.exact", "core.features.unbiased"}


@pytest.fixture(autouse=True)
def one_torch_thread():
    # Small tensors on a shared 2-core machine: torch's spinning intra-op threads only add contention.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_implementations_cover_known_roles_only():
    roles = backends.implementations("cpu")
    assert set(roles) <= set(known_roles())
    assert {"feature_map.positive", "linear_attention", "orthogonal_projection", "rmf_features",
            "rmfa_replicates", "eva_causal", "ra_attention"} <= set(roles)


def test_roles_take_and_return_numpy(rng):
    roles = backends.implementations("cpu")
    w = orthogonal_projection(8, 4, rng=rng)
    x = rng.normal(size=(6, 4))
    f = roles["feature_map.positive"](x, w)
    want = positive_features(x, w)
    assert isinstance(f, Features) and isinstance(f.values, np.ndarray)
    np.testing.assert_allclose(f.dense(), want.dense(), rtol=1e-12)
    out = roles["linear_attention"](f, f, rng.normal(size=(6, 2)), causal=True)
    assert isinstance(out, np.ndarray) and out.shape == (6, 2)
    sample = roles["orthogonal_projection"](4, 4, rng=np.random.default_rng(0), size=2)
    assert isinstance(sample, np.ndarray) and sample.shape == (2, 4, 4)
    again = roles["orthogonal_projection"](4, 4, rng=np.random.default_rng(0), size=2)
    np.testing.assert_array_equal(sample, again)  # seeded from the cell's numpy generator
    assert roles["orthogonal_projection"](3, 2, rng=0, dtype=np.float32).dtype == np.float32


def test_boolean_masks_reach_the_torch_roles_as_masks(rng):
    # the adapter converted every array to float64, so a general or causal mask was rejected ("must be a boolean
    # array") and the thm1 cells with masks failed on the torch backend
    from rfkit.estimators.rmf import rmfa_replicates

    q, k, v = rng.normal(scale=0.3, size=(3, 5, 4))
    mask = np.tril(np.ones((5, 5), dtype=bool))
    got = backends.implementations("cpu")["rmfa_replicates"](q, k, v, "exp", replicates=3, num_features=8,
                                                             rng=np.random.default_rng(1), mask=mask)
    want = rmfa_replicates(q, k, v, "exp", replicates=3, num_features=8, rng=np.random.default_rng(1), mask=mask)
    np.testing.assert_allclose(got.out, want.out, rtol=1e-10)


def test_cells_build_backend_implementations_from_strings():
    claim = get_claim("core.linear_attention.exact")
    spec = plan(claim, tier="smoke", seed=0, backend="torch")[0]
    assert spec.implementations == {}  # nothing torch-specific travels with the cell
    ctx = spec.context()
    assert set(ctx.implementations) == set(backend_implementations("torch", "cpu"))
    assert backend_implementations("numpy") == {}
    assert spec.describe()["backend"] == "torch" and spec.describe()["device"] == "cpu"
    with pytest.raises(ValueError, match="backend"):
        backend_implementations("jax")
    with pytest.raises(ValueError, match="backend"):
        validate([claim], tier="smoke", backend="jax")


@pytest.mark.parametrize("claim_id", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_AGREEMENT else c
                                      for c in AGREEMENT_CLAIMS])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the Macformer checks' own nan divisions, on both backends
def test_smoke_verdicts_agree_with_numpy_backend(claim_id):
    claim = get_claim(claim_id)
    numpy_run = validate([claim], tier="smoke", progress=False)
    torch_run = validate([claim], tier="smoke", backend="torch", progress=False)
    assert not numpy_run.failed and not torch_run.failed
    assert torch_run.claims[0].verdict == numpy_run.claims[0].verdict


def test_cli_runs_the_torch_backend(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["validate", "--claim", "core.orf.haar_law", "--tier", "smoke", "--backend", "torch",
                 "--no-figures", "--quiet", "--out", str(out)]) == 0
    assert json.loads((out / "verdicts.json").read_text())["claims"][0]["verdict"] == "supported"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here: --device cuda is valid usage")
def test_cli_device_cuda_without_cuda_is_a_usage_error(tmp_path, capsys):
    assert main(["validate", "--claim", "core.orf.haar_law", "--backend", "torch", "--device", "cuda",
                 "--out", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_cli_device_cuda_needs_the_torch_backend(tmp_path, capsys):
    assert main(["validate", "--claim", "core.orf.haar_law", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "--backend torch" in capsys.readouterr().err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA backend runs only on CUDA hosts")
def test_smoke_verdicts_agree_on_cuda():
    claims = [get_claim(c) for c in AGREEMENT_CLAIMS]
    numpy_run = validate(claims, tier="smoke", progress=False)
    cuda_run = validate(claims, tier="smoke", backend="torch", device="cuda", progress=False)
    assert not cuda_run.failed
    assert [c.verdict for c in cuda_run.claims] == [c.verdict for c in numpy_run.claims]


def test_planted_bug_in_the_torch_path_is_refuted(monkeypatch):
    # Causal attention computed bidirectionally leaks the future: the torch backend must run (and refute) it.
    def leaky(q_features, k_features, v, *, causal, chunk_size=None):
        return gpu.linear_attention(q_features, k_features, v, causal=False)

    monkeypatch.setattr("rfkit.validation.backends._linear_attention", leaky)
    backend_implementations.cache_clear()
    try:
        run = validate([get_claim("core.causal.no_future_leak")], tier="smoke", backend="torch", progress=False)
    finally:
        backend_implementations.cache_clear()
    assert run.claims[0].verdict == "refuted"


def test_ra_role_runs_the_forms_the_torch_path_lacks_on_numpy(rng):
    """Claims sweep RA's feature maps and evaluation modes: those run on the numpy reference, the default on torch."""
    from rfkit.estimators.ra import draw_ra, ra_attention

    ra = backends.implementations("cpu")["ra_attention"]
    q, k, v = rng.normal(size=(3, 5, 4)) * 0.5
    draws = draw_ra(q, k, 2, rng=np.random.default_rng(1))
    np.testing.assert_allclose(ra(q, k, v, draws=draws), ra_attention(q, k, v, draws=draws), rtol=1e-10)
    literal = ra(q, k, v, draws=draws, f_form="literal")
    np.testing.assert_array_equal(literal, ra_attention(q, k, v, draws=draws, f_form="literal"))
