"""The examples in the docstrings of ``rfkit.base``, ``rfkit.estimators`` and ``rfkit.theory`` run and print what
they show (the API reference is only as good as its examples)."""

import doctest
import importlib
import pkgutil

import numpy as np
import pytest

PACKAGES = ("rfkit.base", "rfkit.estimators", "rfkit.theory")
MODULES = sorted(info.name for pkg in PACKAGES
                 for info in pkgutil.walk_packages(importlib.import_module(pkg).__path__, prefix=f"{pkg}."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    with np.printoptions(legacy=False):
        result = doctest.testmod(module, extraglobs={"np": np}, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples of {name} failed"
