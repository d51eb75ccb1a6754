"""Format-selection experiments (``ta.select.experiment``): every candidate agrees, the table
holds one row per candidate and survives CSV/JSON, a wrong result is an error, and the
``tensoralg experiment`` command runs on a .mtx file and turns bad input into one line."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.cli import main
from tensoralg.select import ExperimentTable, ResultMismatchError, default_formats
from tensoralg.select.candidates import label
from tensoralg.select.expression import Expression
from tensoralg.select.operands import storage_bytes

SPMV = "y(i) = A(i,j) * x(j)"
MATRIX_LABELS = ["dense", "csr", "csc", "dcsr", "dcsc", "coo"]


@pytest.fixture(scope="module")
def spmv_operands():
    A = sp.random_array((30, 20), density=0.2, format="csr", random_state=1)
    return {"A": A, "x": np.random.default_rng(1).standard_normal(20)}


@pytest.fixture(scope="module")
def spmv_table(spmv_operands):
    return ta.select.experiment(SPMV, spmv_operands, repeats=3, progress=False)


# ---------------------------------------------------------------------------------------------
# experiments


def test_every_matrix_candidate_runs_and_agrees(spmv_table, spmv_operands):
    table = spmv_table
    assert [row.formats[0] for row in table.rows] == [("A", f) for f in MATRIX_LABELS]
    assert all(row.formats[1:] == (("x", "dense"), ("y", "(inferred)")) for row in table.rows)
    for row in table.rows:
        assert 0 < row.run_min_s <= row.run_median_s <= row.run_max_s
        assert 0 <= row.run_iqr_s <= row.run_max_s - row.run_min_s
        assert row.compile_s > 0 and row.first_call_s > 0 and row.conversion_s >= 0
        assert row.result_format == "dense" and row.result_bytes == 30 * 8
        assert row.timing == "bound"
    assert table.rows[0].operand_bytes == 30 * 20 * 8 + 20 * 8        # dense A and x
    assert table.fastest in table.rows
    assert table.repeats == 3 and table.warmup == 1
    assert dict(table.operands)["A"] == "30x20 csr_array float64 nnz=120"


def test_storage_bytes_of_a_known_csr():
    A = sp.csr_array(np.array([[0, 2.0, 0, 0, 1.0], [0, 0, 0, 0, 0], [3.0, 0, 0, 0, 0],
                               [0, 0, 0, 0, 0]]))
    table = ta.select.experiment(SPMV, {"A": A, "x": np.ones(5)}, candidates={"A": ["csr"]},
                                 repeats=1, progress=False)
    (row,) = table.rows
    values, crd, pos, x = 3 * 8, 3 * 4, 5 * 4, 5 * 8
    assert row.operand_bytes == values + crd + pos + x
    assert row.result_bytes == 4 * 8
    assert storage_bytes(ta.Tensor.from_scipy(A)) == values + crd + pos


def test_results_of_different_types_compare_as_numbers():
    """SpGEMM into CSR, dense and COO: a scipy array, a NumPy array and another scipy array."""
    rng = np.random.default_rng(2)
    A = sp.random_array((8, 6), density=0.3, format="csr", random_state=rng)
    B = sp.random_array((6, 7), density=0.3, format="csr", random_state=rng)
    table = ta.select.experiment("C(i,k) = A(i,j) * B(j,k)", {"A": A, "B": B},
                                 candidates={"A": ["csr"], "B": ["csr", "csc"],
                                             "C": ["csr", "dense", "coo"]},
                                 repeats=1, progress=False)
    assert [row.label for row in table.rows] == [     # by the sum of the choices' positions
        "A=csr B=csr C=csr", "A=csr B=csr C=dense", "A=csr B=csc C=csr",
        "A=csr B=csr C=coo", "A=csr B=csc C=dense", "A=csr B=csc C=coo"]
    assert {row.result_format for row in table.rows} == {"csr", "dense", "coo"}


def test_a_wrong_result_is_an_error_naming_both_assignments(monkeypatch, spmv_operands):
    real_compile = ta.compile

    class Corrupted:
        """A kernel whose results are off by one in every entry."""

        def __init__(self, kernel):
            self.kernel = kernel

        def __call__(self, **operands):
            return self.kernel(**operands) + 1.0

        def bind(self, **operands):
            raise ta.UnsupportedError("not bound: time the corrupted call")

    def compile_(statement, formats=None, **options):
        kernel = real_compile(statement, formats=formats, **options)
        return Corrupted(kernel) if formats.get("A") == ta.CSC else kernel

    monkeypatch.setattr(ta, "compile", compile_)
    with pytest.raises(ResultMismatchError, match=r"A=csc x=dense y=\(inferred\) differs from "
                                                   r"the first candidate A=dense x=dense") as err:
        ta.select.experiment(SPMV, spmv_operands, repeats=1, progress=False)
    assert isinstance(err.value, ta.TensorAlgebraError)
    assert "30 of 30 entries differ" in str(err.value)


def test_whole_assignments_keep_unnamed_tensors_as_given(spmv_operands):
    table = ta.select.experiment(SPMV, spmv_operands, candidates=[{"A": "coo"}, {}],
                                 repeats=1, progress=False)
    assert [row.label for row in table.rows] == ["A=coo x=dense y=(inferred)",
                                                 "A=csr x=dense y=(inferred)"]


def test_a_candidate_the_compiler_refuses_is_skipped_with_a_note(monkeypatch, spmv_operands):
    real_compile = ta.compile

    def compile_(statement, formats=None, **options):
        if formats.get("A") == ta.DCSC:
            raise ta.UnsupportedError("no DCSC today\nsecond line")
        return real_compile(statement, formats=formats, **options)

    monkeypatch.setattr(ta, "compile", compile_)
    table = ta.select.experiment(SPMV, spmv_operands, candidates={"A": ["csr", "dcsc"]},
                                 repeats=1, progress=False)
    assert [row.formats[0][1] for row in table.rows] == ["csr"]
    assert table.notes == ("skipped A=dcsc x=dense y=(inferred): no DCSC today",)


def test_einsum_subscripts_name_operands_a_b_and_take_positions(spmv_operands):
    table = ta.select.experiment("ij,j->i", [spmv_operands["A"], spmv_operands["x"]],
                                 candidates={0: ["csr", "ds[1,0]"]}, repeats=1, progress=False)
    assert [row.label for row in table.rows] == ["A=csr B=dense out=(inferred)",
                                                 "A=csc B=dense out=(inferred)"]


def test_three_tensors_get_every_order_and_a_capped_product_with_a_note():
    formats = default_formats(3)
    assert len(formats) == len(set(formats)) == 1 + 7 * 6 + 1     # dense, d/s x orders, COO
    assert {label(f) for f in formats} >= {"dense", "csf", "coo", "sds[2,0,1]", "dds[1,0,2]"}
    rng = np.random.default_rng(3)
    B = rng.random((5, 4, 3)) * (rng.random((5, 4, 3)) < 0.4)
    table = ta.select.experiment("y(i,j) = B(i,j,k) * c(k)",
                                 {"B": ta.Tensor.from_numpy(B, format="sss"), "c": np.ones(3)},
                                 repeats=1, limit=3, progress=False)
    assert [row.formats[0][1] for row in table.rows] == ["dense", "csf", "sss[0,2,1]"]
    (note,) = [n for n in table.notes if n.startswith("ran the first")]
    assert note.startswith("ran the first 3 of 44 format combinations (the limit); left out: "
                           "B=sss[1,0,2], ") and note.endswith("and 35 more")


def test_progress_bar_goes_to_stderr_when_asked(capsys, spmv_operands):
    ta.select.experiment(SPMV, spmv_operands, candidates={"A": ["csr", "coo"]}, repeats=1,
                         progress=True)
    captured = capsys.readouterr()
    assert "experiment: " in captured.err and "/2 [" in captured.err and captured.out == ""


@pytest.mark.parametrize("call, error, match", [
    (lambda ops: ta.select.experiment(SPMV, ops, repeats=0), ta.InputError, "repeats"),
    (lambda ops: ta.select.experiment(SPMV, list(ops.values())), ta.InputError, "dict by name"),
    (lambda ops: ta.select.experiment("ij,j->i", ops), ta.InputError, "list or tuple"),
    (lambda ops: ta.select.experiment(SPMV, ops, candidates={"Z": ["csr"]}), ta.InputError,
     "'Z', which is not a tensor"),
    (lambda ops: ta.select.experiment(SPMV, ops, candidates={"A": ["xs"]}), ta.FormatError,
     "candidates for A"),
    (lambda ops: ta.select.experiment("ij,j->i", [ops["A"]]), ta.InputError, "2 operand"),
    (lambda ops: ta.select.experiment("...i,i", [ops["A"], ops["x"]]), ta.UnsupportedError,
     "ellipsis"),
])
def test_bad_arguments_raise_tensoralg_errors(call, error, match, spmv_operands):
    with pytest.raises(error, match=match):
        call(spmv_operands)


@pytest.mark.parametrize("text, statement", [
    ("ij,j->i", "out(i) = A(i,j) * B(j)"),
    ("ij,jk", "out(i,k) = A(i,j) * B(j,k)"),
    ("i,i->", "out = A(i) * B(i)"),
    ("ii->i", "out(i) = A(i,i)"),
    ("iJ,J->i", "out(i) = A(i,jj) * B(jj)"),
])
def test_einsum_subscripts_become_statements(text, statement):
    assert Expression.parse(text).statement == statement


def test_statement_names_skip_functions_indices_and_numbers():
    e = Expression.parse("y(i) = sum(j, exp(A(i,j)) * 2.5e-3) + relu(b(i)) * alpha")
    assert (e.output, e.output_rank, e.operands) == ("y", 1, ("A", "b", "alpha"))
    assert dict(e.indices) == {"A": ("i", "j"), "b": ("i",), "alpha": ()}


# ---------------------------------------------------------------------------------------------
# the table as text and files


def test_csv_json_and_markdown_round_trip(spmv_table, tmp_path):
    table = spmv_table
    assert ExperimentTable.from_csv(table.to_csv()) == table
    assert ExperimentTable.from_json(table.to_json()) == table
    table.to_csv(tmp_path / "t.csv")
    table.to_json(tmp_path / "t.json")
    assert ExperimentTable.read(tmp_path / "t.csv") == ExperimentTable.read(tmp_path / "t.json")
    markdown = table.to_markdown(tmp_path / "t.md")
    assert (tmp_path / "t.md").read_text() == markdown
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    assert len(lines) == 2 + len(table.rows)
    assert [line.split("|")[1].strip() for line in lines[2:]] == MATRIX_LABELS
    assert f"NumPy {np.__version__}" in markdown and "in every row: x=dense" in markdown


def test_the_table_carries_its_environment(spmv_table):
    env = spmv_table.environment
    assert (env.tensoralg, env.numpy, env.scipy) == (ta.__version__, np.__version__,
                                                     scipy.__version__)
    assert env.llvmlite and env.cpu and env.date[:2] == "20"
    assert env.threads == ta.get_num_threads() and env.seed == 0
    text = str(spmv_table)
    assert text.splitlines()[0] == SPMV
    assert f"{env.threads} thread" in text and "seed 0" in text


def test_plot_writes_an_image(spmv_table, tmp_path):
    pytest.importorskip("matplotlib")
    path = spmv_table.plot(tmp_path / "t.png")
    assert path.stat().st_size > 1000


def test_plot_without_matplotlib_says_how_to_install_it(spmv_table, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ta.UnsupportedError, match=r"pip install 'tensoralg\[plot\]'"):
        spmv_table.plot(tmp_path / "t.png")


# ---------------------------------------------------------------------------------------------
# the command


@pytest.fixture(scope="module")
def mtx(tmp_path_factory):
    path = tmp_path_factory.mktemp("experiment") / "a.mtx"
    scipy.io.mmwrite(str(path), sp.random_array((30, 20), density=0.2, format="coo",
                                                random_state=1))
    return path


def test_command_runs_on_a_matrix_market_file(mtx, tmp_path, capsys):
    out = tmp_path / "r.csv"
    code = main(["experiment", SPMV, "--tensor", f"A={mtx}", "--tensor", "x=random",
                 "--out", str(out), "--repeats", "2", "--seed", "4"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.splitlines()[0] == SPMV
    table = ExperimentTable.read(out)
    assert [row.formats[0][1] for row in table.rows] == MATRIX_LABELS
    assert table.environment.seed == 4 and table.repeats == 2


def test_command_candidates_json_and_plot(mtx, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code = main(["experiment", "ij,j->i", "-t", f"A={mtx}", "-c", "A=csr,ds[1,0]",
                 "--repeats", "1", "--out", str(tmp_path / "r.json"),
                 "--plot", str(tmp_path / "r.png")])
    assert code == 0, capsys.readouterr().err
    table = ExperimentTable.read(tmp_path / "r.json")
    assert [row.label for row in table.rows] == ["A=csr B=dense out=(inferred)",
                                                 "A=csc B=dense out=(inferred)"]
    assert (tmp_path / "r.png").stat().st_size > 1000


@pytest.mark.parametrize("args, message", [
    (["-t", "Z=MTX"], "InputError: --tensor Z: y(i) = A(i,j) * x(j) has no tensor Z"),
    (["-t", "y=MTX"], "InputError: --tensor y: y is the output"),
    (["-t", "A=missing.mtx"], "InputError: --tensor A=missing.mtx: no such file"),
    (["-t", "A=MTX", "-t", "x=X7"], "ShapeError: index j: A has 20 along mode 1 but x has 7"),
    (["-t", "A=MTX", "--out", "r.xlsx"], "InputError: --out r.xlsx: unknown suffix '.xlsx'"),
    ([], "InputError: cannot tell the size of index i of A"),
])
def test_command_bad_input_is_one_line(args, message, mtx, tmp_path, capsys):
    np.save(tmp_path / "x7.npy", np.ones(7))
    args = [a.replace("MTX", str(mtx)).replace("X7", str(tmp_path / "x7.npy")) for a in args]
    assert main(["experiment", SPMV, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"tensoralg: {message}") and captured.err.count("\n") == 1


def test_command_in_a_fresh_process_has_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tensoralg", "experiment", SPMV, "-t",
                             f"A={tmp_path / 'none.mtx'}"], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ))
    assert result.returncode == 2 and result.stdout == ""
    assert "Traceback" not in result.stderr and "no such file" in result.stderr


def test_command_help_lists_experiment():
    out = io.StringIO()
    sys.stdout, saved = out, sys.stdout
    try:
        with pytest.raises(SystemExit):
            main(["experiment", "--help"])
    finally:
        sys.stdout = saved
    assert "--tensor NAME=SOURCE" in out.getvalue() and "--candidates" in out.getvalue()
