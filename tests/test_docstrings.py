"""The examples in tensoralg's docstrings run and print what they say (``doctest``)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil
import warnings

import pytest

import tensoralg

MODULES = sorted(info.name for info in pkgutil.walk_packages(tensoralg.__path__, "tensoralg.")
                 if not info.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # examples that show a conversion warning's cause
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
