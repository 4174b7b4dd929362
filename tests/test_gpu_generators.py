"""Every random draw in ``rfkit.gpu`` takes a generator on the tensors' device from one helper (issue 16, item 5).

torch refuses a generator on another device ("Expected a 'cuda' device type for generator but found 'cpu'"),
so a CPU generator given with CUDA tensors must become a generator on the CUDA device. CPU-only machines check
the helper's contract (and its derivation path, with the device construction stubbed) and, by reading the
source, that no ``rfkit.gpu`` draw gets a generator the helper did not make; a CUDA machine also runs the draws.
"""

import ast
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rfkit import gpu  # noqa: E402
from rfkit.gpu import _core  # noqa: E402

GPU_DIR = Path(gpu.__file__).parent
#: torch calls that draw random numbers (functions and in-place tensor methods).
RANDOM_CALLS = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "normal", "normal_",
                "multinomial", "randperm", "bernoulli", "bernoulli_", "uniform_", "exponential_", "random_",
                "cauchy_", "geometric_", "log_normal_", "poisson"}
HELPER = "as_generator"


def test_helper_returns_a_generator_on_the_tensors_device():
    x = torch.zeros(3)
    for rng in (0, np.random.default_rng(1), gpu.make_generator(2, "cpu")):
        assert _core.as_generator(rng, x.device).device == x.device
    same = gpu.make_generator(3, "cpu")
    assert _core.as_generator(same, x.device) is same  # already there: used as is (draws unchanged)
    with pytest.raises(TypeError, match="rng must be"):
        _core.as_generator(None, x.device)


def test_generator_on_another_device_seeds_one_on_the_tensors_device(monkeypatch):
    """A CPU generator asked for ``cuda``: a new generator is made for ``cuda``, seeded reproducibly from it."""
    made, callers = [], [gpu.make_generator(7, "cpu"), gpu.make_generator(7, "cpu")]

    def fake_make_generator(seed, device=None):
        made.append((seed, torch.device(device)))
        return torch.Generator().manual_seed(seed)

    monkeypatch.setattr(_core, "make_generator", fake_make_generator)
    monkeypatch.setattr(_core, "_same_device", lambda a, b: a.type == b.type)
    _core.as_generator(callers[0], "cuda")
    _core.as_generator(callers[1], torch.device("cuda", 0))
    assert [device.type for _, device in made] == ["cuda", "cuda"]
    assert made[0][0] == made[1][0]  # the same caller generator gives the same derived seed


def _calls(tree):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _name(func):
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _functions(tree):
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _from_helper(expr, scope, functions, depth=0) -> bool:
    """Whether ``expr`` (a generator expression in function ``scope``) is the helper's result: a direct call,
    a name assigned from one in that function, or a parameter every in-module call site passes such a value."""
    if depth > 4:
        return False
    if isinstance(expr, ast.Call):
        return _name(expr.func) == HELPER
    if not isinstance(expr, ast.Name) or scope is None:
        return False
    assigned = [n.value for n in ast.walk(scope) if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == expr.id for t in n.targets)]
    if assigned:
        return all(_from_helper(value, scope, functions, depth + 1) for value in assigned)
    params = [a.arg for a in scope.args.args + scope.args.kwonlyargs]
    if expr.id not in params:
        return False
    position = scope.args.args.index(next(a for a in scope.args.args if a.arg == expr.id)) \
        if expr.id in [a.arg for a in scope.args.args] else None
    sites = []
    for caller in functions.values():
        for call in _calls(caller):
            if _name(call.func) != scope.name:
                continue
            value = next((kw.value for kw in call.keywords if kw.arg == expr.id), None)
            if value is None and position is not None and position < len(call.args):
                value = call.args[position]
            sites.append((value, caller))
    return bool(sites) and all(v is not None and _from_helper(v, c, functions, depth + 1) for v, c in sites)


def _on_its_own_device(call, gen) -> bool:
    """``torch.randint(..., generator=g, device=g.device)``: the draw lands on the generator's own device, so it
    cannot mismatch (e.g. one draw from the caller's generator seeding a numpy or device generator)."""
    device = next((kw.value for kw in call.keywords if kw.arg == "device"), None)
    return (isinstance(gen, ast.Name) and isinstance(device, ast.Attribute) and device.attr == "device"
            and isinstance(device.value, ast.Name) and device.value.id == gen.id)


def generator_violations(source: str, module: str) -> list[str]:
    """Random draws in ``source`` whose generator is missing or not made by the helper, and generators built
    outside ``rfkit.gpu._core``."""
    tree = ast.parse(source)
    functions = _functions(tree)
    enclosing = {id(call): f for f in functions.values() for call in _calls(f)}
    bad = []
    for call in _calls(tree):
        name = _name(call.func)
        if name == "Generator" and module != "_core.py":
            bad.append(f"{module}:{call.lineno} builds a torch.Generator (use rfkit.gpu._core.{HELPER})")
        if name not in RANDOM_CALLS:
            continue
        gen = next((kw.value for kw in call.keywords if kw.arg == "generator"), None)
        if gen is None:
            bad.append(f"{module}:{call.lineno} {name} draws without generator= (torch's global RNG)")
        elif module != "_core.py" and not _on_its_own_device(call, gen) \
                and not _from_helper(gen, enclosing.get(id(call)), functions):
            bad.append(f"{module}:{call.lineno} {name} takes a generator not made by {HELPER}")
    return bad


def test_every_draw_in_gpu_uses_the_helper():
    modules = sorted(GPU_DIR.glob("*.py"))
    assert {"lara.py", "ra.py", "rfa.py", "eva.py", "favor.py"} <= {p.name for p in modules}
    bad = [v for p in modules for v in generator_violations(p.read_text(), p.name)]
    assert not bad, "\n".join(bad)
    draws = sum(_name(c.func) in RANDOM_CALLS for p in modules for c in _calls(ast.parse(p.read_text())))
    assert draws >= 6  # the scan sees the draws (lara, ra x2, rfa, eva, favor)


@pytest.mark.parametrize("planted", [
    # the bug: a CPU generator made in place for a CUDA tensor
    "def f(mu):\n    return torch.randn(3, generator=torch.Generator(), device=mu.device)\n",
    # the caller's generator used as is
    "def f(mu, rng):\n    return torch.randn(3, generator=rng, device=mu.device)\n",
    # a helper-made name reassigned to the raw rng
    "def f(mu, rng):\n    g = as_generator(rng, mu.device)\n    g = rng\n    return torch.randn(3, generator=g)\n",
    # a parameter fed with the raw rng at its call site
    "def _d(mu, g):\n    return torch.randn(3, generator=g)\n\ndef f(mu, rng):\n    return _d(mu, rng)\n",
    # torch's global generator
    "def f(mu):\n    return mu.new_empty(3).normal_()\n",
])
def test_the_scan_catches_planted_bugs(planted):
    assert generator_violations(planted, "planted.py")


def test_the_scan_accepts_the_helper_patterns():
    ok = ("def f(mu, rng):\n    g = as_generator(rng, mu.device)\n    return torch.randn(3, generator=g)\n\n"
          "def _d(mu, g):\n    return torch.randn(3, generator=g, device=g.device)\n\n"
          "def h(mu, rng):\n    return _d(mu, as_generator(rng, mu.device))\n\n"
          "def seed(rng):\n    return torch.randint(0, 9, (1,), generator=rng, device=rng.device)\n")
    assert generator_violations(ok, "ok.py") == []


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
@pytest.mark.parametrize("draw", ["lara", "ra", "rfa", "eva", "favor"])
def test_cpu_generator_drives_cuda_draws(draw):
    rng = np.random.default_rng(0)
    q, k, v = (torch.as_tensor(rng.normal(size=(16, 4)) * 0.5, device="cuda") for _ in range(3))
    gen = gpu.make_generator(0, "cpu")
    calls = dict(
        lara=lambda: gpu.lara_attention(q, k, v, C=4, rng=gen),
        ra=lambda: gpu.ra_attention(q, k, v, num_samples=2, rng=gen),
        rfa=lambda: gpu.rfa_attention(q, k, v, num_samples=8, rng=gen),
        eva=lambda: gpu.eva_practical(q, k, v, block_size=4, num_chunks=2, rng=gen),
        favor=lambda: gpu.favor_attention(q, k, v, m=8, rng=gen, causal=True),
    )
    out = calls[draw]()
    assert out.device.type == "cuda" and bool(torch.isfinite(out).all())
