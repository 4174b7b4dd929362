"""rfkit.gpu mirrors rfkit.estimators: every public torch function has its numpy counterpart at the same path,
and its keyword names are numpy's (``num_samples``, ``omega``, ``rng``, ...)."""

import importlib
import inspect
import pkgutil

import pytest

torch = pytest.importorskip("torch")

import rfkit.gpu  # noqa: E402

#: Execution-only keywords of the torch functions: the computation dtype (numpy's float64 reference takes it on
#: some functions only) and how causal chunks are combined (a scan or chunk-parallel: the same buffers in exact
#: arithmetic), nothing else.
BACKEND_KEYWORDS = {"dtype", "causal_algorithm"}


def _public_gpu_functions():
    for info in pkgutil.iter_modules(rfkit.gpu.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"rfkit.gpu.{info.name}")
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                yield info.name, name, obj


FUNCTIONS = list(_public_gpu_functions())


def test_the_walk_covers_the_estimators():
    names = {(module, name) for module, name, _ in FUNCTIONS}
    assert {("rfa", "rfa_attention"), ("ra", "ra_attention"), ("lara", "lara_attention"),
            ("eva", "eva_practical"), ("favor", "favor_attention")} <= names


@pytest.mark.parametrize(("module", "name", "fn"), FUNCTIONS, ids=[f"{m}.{n}" for m, n, _ in FUNCTIONS])
def test_every_gpu_function_mirrors_numpy(module, name, fn):
    numpy_module = importlib.import_module(f"rfkit.estimators.{module}")
    reference = getattr(numpy_module, name, None)
    assert callable(reference), f"rfkit.gpu.{module}.{name} has no counterpart rfkit.estimators.{module}.{name}"
    keywords = {p.name for p in inspect.signature(fn).parameters.values()}
    numpy_keywords = {p.name for p in inspect.signature(reference).parameters.values()}
    assert keywords - BACKEND_KEYWORDS <= numpy_keywords, (
        f"rfkit.gpu.{module}.{name} has keywords numpy lacks: {sorted(keywords - BACKEND_KEYWORDS - numpy_keywords)}")


def test_the_top_level_names_are_the_module_functions():
    from rfkit import estimators
    assert rfkit.gpu.rfa_attention is importlib.import_module("rfkit.gpu.rfa").rfa_attention
    assert estimators.rfa_attention is importlib.import_module("rfkit.estimators.rfa").rfa_attention
    for name in rfkit.gpu.__all__:
        assert getattr(rfkit.gpu, name) is not None


def test_unsupported_options_raise_not_implemented_naming_them():
    q = torch.zeros((3, 2), dtype=torch.float64)
    v = torch.ones((3, 1), dtype=torch.float64)
    omega = torch.ones((4, 2), dtype=torch.float64)
    rfkit.gpu.rfa_attention(q, q, v, omega=omega, causal=True)  # RFA runs every numpy option (test_gpu_rfa_forms)
    with pytest.raises(NotImplementedError, match="eval_mode"):
        rfkit.gpu.ra_attention(q, q, v, rng=0, eval_mode="mean")
    with pytest.raises(NotImplementedError, match="weights='balance'"):
        rfkit.gpu.lara_attention(q, q, v, C=1, rng=0, weights="balance")
