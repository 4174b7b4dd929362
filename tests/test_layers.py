"""Layers import downward only: ``base`` < ``estimators``, ``theory`` < ``gpu`` < ``validation``.

``base`` (input checks, log-space numerics, kernel tables and laws) imports no other rfkit layer; ``estimators`` and
``theory`` import only ``base`` (a prediction never comes from the code it checks); ``gpu`` never imports
``validation`` (the torch backend's role table lives in :mod:`rfkit.validation.backends`).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Folder -> rfkit packages its modules may not import.
FORBIDDEN = {"base": ("rfkit.estimators", "rfkit.theory", "rfkit.validation", "rfkit.gpu"),
             "estimators": ("rfkit.theory", "rfkit.validation", "rfkit.gpu"),
             "theory": ("rfkit.estimators", "rfkit.validation", "rfkit.gpu"),
             "gpu": ("rfkit.theory", "rfkit.validation",)}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layers_import_downward_only(folder):
    bad = {f"{path.relative_to(ROOT)}: {name}" for path in (ROOT / folder).rglob("*.py")
           for name in _imports(path) if name.startswith(FORBIDDEN[folder])}
    assert not bad, sorted(bad)


def test_results_do_not_import_the_engine_at_run_time():
    # the engine returns ClaimResult/RunResult from rfkit.validation.results; results may name engine types only
    # for annotations (under TYPE_CHECKING)
    tree = ast.parse((ROOT / "validation" / "results.py").read_text())
    runtime = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not [n for n in runtime if isinstance(n, ast.ImportFrom) and n.module == "rfkit.validation.engine"]


def test_a_role_name_means_one_function():
    # every `ctx.impl("role", default)` in the claims names the same default function for the same role, so a
    # role's replacement (a backend, a planted bug) is called with one signature
    import importlib

    defaults: dict[str, set] = {}
    for path in (ROOT / "validation" / "claims").rglob("*.py"):
        module = importlib.import_module("rfkit.validation." + ".".join(path.relative_to(ROOT / "validation")
                                                                         .with_suffix("").parts)
                                         .removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "impl"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)):
                source = ast.unparse(node.args[1])
                try:
                    fn = eval(source, vars(module))  # noqa: S307 - our own source
                    name = f"{fn.__module__}.{fn.__qualname__}"
                except NameError:  # a local default (e.g. a partial with the cell's chunk size)
                    name = f"{path.name}: {source}"
                defaults.setdefault(node.args[0].value, set()).add(name)
    assert defaults, "no ctx.impl calls found"
    shared = {role: sorted(fns) for role, fns in defaults.items() if len(fns) > 1}
    assert not shared, shared
