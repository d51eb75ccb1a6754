"""The ``tensoralg`` command, the demo, the examples, and the README's commands (its ``>>>``
examples run in test_docs.py)."""
from __future__ import annotations

import argparse
import io
import os
import pathlib
import re
import subprocess
import sys

import pytest

import tensoralg as ta
from tensoralg.cli import main, parse_format_option
from tensoralg.demo import max_abs_error, run_demo, table

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPMV = "y(i) = A(i,j) * x(j)"


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m tensoralg ARGS`` in a fresh interpreter, the way a user runs it."""
    return subprocess.run([sys.executable, "-m", "tensoralg", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=dict(os.environ))


# ---------------------------------------------------------------------------------------------
# compile


@pytest.mark.parametrize("emit, marker", [
    ("ir", "for (i64 i = range_begin; i < range_end; i++)"),
    ("c", "#include <stdint.h>"),
    ("llvm", "define "),
    ("cuda", "__global__"),
])
def test_compile_emits_each_language(emit, marker, capsys):
    assert main(["compile", SPMV, "-f", "A:csr", "--emit", emit]) == 0
    out = capsys.readouterr().out
    assert marker in out
    assert "A1_pos" in out and "A1_crd" in out


def test_compile_with_c_backend_and_several_formats(capsys):
    code = main(["compile", "C(i,j) = A(i,k) * B(k,j)", "-f", "A:ds", "-f", "B:csr", "-f",
                 "C:ds", "--backend", "c", "--dtype", "float32", "--emit", "c"])
    assert code == 0
    out = capsys.readouterr().out
    assert "float" in out and "B1_pos" in out


def test_compile_mode_order_changes_the_loop_order(capsys):
    assert main(["compile", SPMV, "-f", "A:ds:1,0", "--emit", "ir"]) == 0
    assert "loop order j, i" in capsys.readouterr().out


@pytest.mark.parametrize("text, expected", [
    ("A:ds", ("A", "ds")),
    ("A:csc", ("A", "csc")),
    ("A:ds:1,0", ("A", ta.Format("ds", order=(1, 0)))),
])
def test_parse_format_option(text, expected):
    assert parse_format_option(text) == expected


@pytest.mark.parametrize("text", ["Ads", "A:", ":ds", "A:ds:x", "A:ds:0,0"])
def test_parse_format_option_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_format_option(text)


def test_malformed_statement_exits_2_with_caret_and_no_traceback():
    result = run_cli("compile", "y(i) = A(i,j)) * x(j)", "-f", "A:ds")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert "NotationError" in lines[0]
    assert lines[1].strip() == "y(i) = A(i,j)) * x(j)"
    caret = lines[2]
    assert caret.strip() == "^"
    assert lines[1][caret.index("^")] == ")"


@pytest.mark.parametrize("args, message", [
    (["compile", SPMV, "-f", "A:dx"], "unknown level code"),
    (["compile", SPMV, "-f", "Z:ds"], "formats names Z"),
    (["demo", "--matrix", "nosuch"], "choose one of"),
])
def test_user_errors_exit_2_with_a_message(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_option_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["compile", SPMV, "--emit", "fortran"])
    assert exc.value.code == 2


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "compile" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# formats, version, demo


def test_formats_lists_levels_and_named_formats(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    for word in ("d ", "s ", "u ", "q ", "csr", "csc", "coo", "dcsr", "csf", "dense"):
        assert word in out


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"tensoralg {ta.__version__}"


def test_demo_runs_and_checks_every_kernel():
    result = run_cli("demo", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for kernel in ("SpMV", "SpMM", "SDDMM", "SpGEMM"):
        assert re.search(rf"^{kernel}\s.*\sOK\s", out, re.MULTILINE), out
    assert "FAIL" not in out
    assert "for (i64 i = range_begin; i < range_end; i++)" in out      # the SpMV's IR


def test_demo_with_c_backend_on_another_matrix():
    out = io.StringIO()
    assert run_demo("lp_ship04l", backend="c", out=out) == 0
    assert "backend c" in out.getvalue()


def test_demo_table_is_aligned():
    text = table(("a", "bb"), [("ccc", "d"), ("e", "ffff")])
    lines = text.splitlines()
    assert lines[0] == "a    bb"
    assert lines[1] == "---  ----"
    assert lines[2].index("d") == lines[3].index("ffff") == 5


def test_demo_error_measure_handles_dense_and_sparse():
    import numpy as np
    import scipy.sparse as sp

    a = sp.csr_array(np.array([[1.0, 0.0], [0.0, 2.0]]))
    assert max_abs_error(a, a) == 0.0
    assert max_abs_error(a, sp.csr_array(np.array([[1.0, 0.5], [0.0, 2.0]]))) == 0.5
    assert max_abs_error(np.ones(3), np.zeros(3)) == 1.0


# ---------------------------------------------------------------------------------------------
# README


# The README's ``>>>`` examples run in tests/test_docs.py, with the documentation's.


def test_readme_commands_match_ci():
    """The README's test command is exactly the command .ci/run runs last."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install -e . && tensoralg demo" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = ci.strip().splitlines()[-1]
    assert command == 'pip install -e ".[test,docs]" && python -m pytest -q -m "not slow"'
    assert command in readme.splitlines()


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "examples").glob("*.py")))
def test_example_runs(script):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / script)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
