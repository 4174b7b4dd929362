"""Every source folder with an ``__init__.py`` is listed as a package in pyproject.toml, so that a plain
(non-editable) ``pip install .`` — the README's main command — installs it."""

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[1]


def test_every_source_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folder_of = {package: folder for package, folder in config["package-dir"].items()}
    found = set()
    for package, folder in folder_of.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    assert found == set(config["packages"])
