"""``tensoralg demo`` on a user's Matrix Market file, and its one-line errors for bad names."""
from __future__ import annotations

import gzip
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from tensoralg.cli import main
from tensoralg.demo import MATRICES, load_matrix

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def small_mtx(tmp_path):
    """A 30 x 20 random sparse matrix written by scipy, as the user's own file."""
    A = sp.random(30, 20, density=0.15, format="csr", random_state=np.random.default_rng(3))
    path = tmp_path / "mine.mtx"
    scipy.io.mmwrite(path, A)
    return path, A


def _one_line_error(capsys, *words):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for word in words:
        assert word in err, err
    return err


def test_demo_runs_on_a_mtx_path(small_mtx, capsys):
    path, A = small_mtx
    assert main(["demo", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"demo: {path}, 30 x 20, nnz {A.nnz}" in out
    assert "All results match scipy." in out and "FAIL" not in out


def test_demo_runs_on_a_gzipped_mtx_path_given_with_the_option(small_mtx, tmp_path, capsys):
    path, A = small_mtx
    gz = tmp_path / "mine.mtx.gz"
    with open(path, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert main(["demo", "--matrix", str(gz)]) == 0
    out = capsys.readouterr().out
    assert f"demo: {gz}, 30 x 20, nnz {A.nnz}" in out
    assert "All results match scipy." in out


def test_load_matrix_reads_the_file_as_float64_csr(small_mtx):
    path, A = small_mtx
    label, B = load_matrix(str(path))
    assert label == str(path)
    assert B.dtype == np.float64 and B.format == "csr"
    assert abs(B - A).max() == 0


def test_an_integer_matrix_file_becomes_float64(tmp_path):
    path = tmp_path / "int.mtx"
    scipy.io.mmwrite(path, sp.csr_matrix(np.eye(4, dtype=np.int64) * 3))
    _, B = load_matrix(str(path))
    assert B.dtype == np.float64 and B.toarray().tolist() == (np.eye(4) * 3).tolist()


def test_an_unknown_name_lists_the_bundled_matrices(capsys):
    assert main(["demo", "nosuch"]) == 2
    _one_line_error(capsys, "'nosuch'", "neither a file nor a bundled matrix", *MATRICES,
                    ".mtx.gz")


def test_a_missing_mtx_path_lists_the_bundled_matrices(tmp_path, capsys):
    assert main(["demo", str(tmp_path / "absent.mtx")]) == 2
    _one_line_error(capsys, "absent.mtx", *MATRICES)


def test_a_directory_is_refused(tmp_path, capsys):
    assert main(["demo", str(tmp_path)]) == 2
    _one_line_error(capsys, "is a directory", *MATRICES)


@pytest.mark.parametrize("name, content, message", [
    ("broken.mtx", b"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 x\n",
     "line 3"),
    ("short.mtx", b"%%MatrixMarket matrix coordinate real general\n3 3 5\n1 1 1.0\n",
     "announces 5 entries"),
    ("garbage.mtx", b"\x00\xff\xfe not a matrix\n", "line 1"),
    ("broken.mtx.gz", b"not gzip at all", "cannot read"),
    ("matrix.txt", b"1 2 3\n", "Matrix Market files"),
])
def test_a_corrupt_or_foreign_file_is_one_line_error(tmp_path, capsys, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["demo", str(path)]) == 2
    _one_line_error(capsys, "FormatError", name, message)


def test_an_empty_name_is_refused(capsys):
    assert main(["demo", ""]) == 2
    _one_line_error(capsys, "empty", *MATRICES)


def test_two_different_matrices_are_a_usage_error(small_mtx, capsys):
    path, _ = small_mtx
    with pytest.raises(SystemExit) as exc:
        main(["demo", str(path), "--matrix", "lp_ship04l"])
    assert exc.value.code == 2
    assert "give one" in capsys.readouterr().err


def test_the_command_prints_no_traceback_for_an_unknown_name():
    result = subprocess.run([sys.executable, "-m", "tensoralg", "demo", "nosuch.mtx.gz"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT,
                            env=dict(os.environ))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "tensoralg: FormatError: 'nosuch.mtx.gz' is neither a file nor a bundled matrix; "
        "choose one of the bundled matrices bcspwr10, lp_ship04l, ca-GrQc, or give the path "
        "of a .mtx or .mtx.gz file"]
