"""The documentation: its examples run and print what they say, and the site builds.

Every ``>>>`` example in ``README.md`` and ``docs/**/*.md`` runs through the standard
``doctest`` module, one test per file, all examples of a file in one namespace, in order. The
Markdown code fences are blanked out first (line numbers kept), so that a fence closing a block
ends the expected output the way a blank line does. Kernels compiled by the examples go to the
test session's private cache (``tests/conftest.py``).

The site is built with ``sphinx-build -W --keep-going`` (every warning is an error) when sphinx
and myst-parser are installed (``pip install -e ".[docs]"``).
"""
from __future__ import annotations

import doctest
import pathlib
import re
import subprocess
import sys
import warnings

import pytest

import tensoralg as ta

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", *DOCS.rglob("*.md")])
FENCE = re.compile(r"^[ \t]*(```|~~~).*$", re.MULTILINE)
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def page_id(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def examples_of(path: pathlib.Path) -> doctest.DocTest:
    """The page's ``>>>`` examples as one doctest, its code fences read as blank lines."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    globs = {"__name__": "__docs__"}
    return doctest.DocTestParser().get_doctest(text, globs, page_id(path), str(path), 0)


@pytest.fixture
def fresh_kernels(monkeypatch):
    """Pages print kernels' IR: compile them afresh, since statements equal up to index names
    share one kernel in a process, whose notes name the indices it was first compiled with."""
    from tensoralg import api

    monkeypatch.setattr(api, "_cache", api.KernelCache(api.CompileOptions(cache_dir=None)))


@pytest.mark.parametrize("path", PAGES, ids=page_id)
@pytest.mark.usefixtures("fresh_kernels")
def test_page_examples(path):
    test = examples_of(path)
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    threads = ta.get_num_threads()
    report: list[str] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # pages show the cause of a conversion warning
            result = runner.run(test, out=report.append)
    finally:
        ta.set_num_threads(threads)             # a page that changes it must not leak it
    assert result.failed == 0, \
        f"{result.failed} of {result.attempted} example(s) of {page_id(path)} failed:\n" \
        + "".join(report)


def test_every_page_is_checked():
    """The README and the guide hold examples; a page list that lost them would pass empty."""
    counted = {page_id(p): len(examples_of(p).examples) for p in PAGES}
    assert counted["README.md"] >= 5
    guide = [name for name in counted if name.startswith("docs/guide/")]
    assert guide and sum(counted[name] for name in guide) >= 50


def test_api_reference_lists_every_public_name():
    """docs/api.md documents each name of ``tensoralg.__all__`` and ``tensoralg.onnx.__all__``."""
    import tensoralg.onnx as tonnx

    text = (DOCS / "api.md").read_text(encoding="utf-8")
    names = [f"tensoralg.{name}" for name in ta.__all__ if name != "__version__"]
    names += [f"tensoralg.onnx.{name}" for name in tonnx.__all__]
    missing = [name for name in names if not re.search(rf"{re.escape(name)}\b", text)]
    assert not missing, f"docs/api.md does not document {', '.join(missing)}"


def test_docs_build(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
               "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, \
        f"sphinx-build failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "html" / "index.html").exists()
