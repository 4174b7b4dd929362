"""Layers import downward only: ``estimators`` and ``theory`` never import ``validation`` or ``gpu``, and ``gpu``
never imports ``validation`` (the torch backend's role table lives in :mod:`rfkit.validation.backends`).

``theory`` still imports shared definitions from ``estimators`` (kernel tables, log-densities); moving those into a
base module below both is the remaining step of the "Claims v2" issue, so this test does not forbid it yet.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Folder -> rfkit packages its modules may not import.
FORBIDDEN = {"estimators": ("rfkit.validation", "rfkit.gpu"), "theory": ("rfkit.validation", "rfkit.gpu"),
             "gpu": ("rfkit.validation",)}


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
