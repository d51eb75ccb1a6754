"""Automatic format selection: exact features of hand-made matrices, ``choose`` and its
explanation, the model file, ``calibrate`` into a temporary cache, a corrupt calibrated file,
``resolve_auto`` for ``formats="auto"``, and bad input as ``TensorAlgebraError``s."""
from __future__ import annotations

import json
import math
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.select import cost_model
from tensoralg.select.auto import Resolution, auto_positions, resolve_auto
from tensoralg.select.choose import choose
from tensoralg.select.cost_model import (
    CONVERSION_TERMS,
    RUN_TERMS,
    SHIPPED_MODEL,
    CostModel,
    CostModelError,
    RunModel,
    current_model,
    run_terms,
)
from tensoralg.select.expression import Expression
from tensoralg.select.families import FAMILIES, generate
from tensoralg.select.features import (
    OUTER_SCAN_LIMIT,
    SAMPLE,
    expression_features,
    matrix_features,
)
from tensoralg.select.fit import fit_model
from tensoralg.select.training import (
    ExperimentRecord,
    MatrixRecord,
    Measurement,
)

SMALL = np.array([[1.0, 2, 0, 0], [0, 0, 0, 0], [0, 0, 3, 0], [0, 0, 4, 5]])


# ---------------------------------------------------------------------------------------------
# features


def small_in_every_storage():
    csr = sp.csr_array(SMALL)
    return {"csr": csr, "csc": csr.tocsc(), "coo": csr.tocoo(),
            "dcsr": ta.Tensor.from_scipy(csr, format=ta.DCSR),
            "dcsc": ta.Tensor.from_scipy(csr, format=ta.DCSC),
            "Tensor csr": ta.Tensor.from_scipy(csr), "Tensor coo": ta.Tensor.from_scipy(
                csr, format=ta.COO)}


@pytest.mark.parametrize("storage", list(small_in_every_storage()))
def test_features_of_a_hand_made_matrix_are_exact_in_every_storage(storage):
    f = matrix_features(small_in_every_storage()[storage])
    # rows hold 2, 0, 1, 2 entries; columns 1, 1, 2, 1
    assert (f.shape, f.nnz, f.density) == ((4, 4), 5, 5 / 16)
    assert (f.row_mean, f.row_max, f.row_empty) == (1.25, 2, 0.25)
    assert f.row_cv == pytest.approx(math.sqrt((4 + 0 + 1 + 4) / 4 - 1.25**2) / 1.25)
    assert (f.col_mean, f.col_max, f.col_empty) == (1.25, 2, 0.0)
    assert f.col_cv == pytest.approx(math.sqrt((1 + 1 + 4 + 1) / 4 - 1.25**2) / 1.25)
    # |i - j| / 4 over (0,0) (0,1) (2,2) (3,2) (3,3); one 8x8 block holds all five entries
    assert f.bandedness == pytest.approx(0.1)
    assert f.block_density == pytest.approx(5 * 5 / (64 * 5))
    assert f.sampled == 0
    assert f.format == storage.removeprefix("Tensor ")


def test_block_density_and_bandedness_of_full_blocks():
    a = np.zeros((16, 16))
    a[:8, 8:] = 1.0                        # one full block, above the diagonal
    f = matrix_features(sp.csr_array(a))
    assert f.block_density == 1.0
    assert f.bandedness == pytest.approx(np.abs(np.arange(8)[:, None] - np.arange(8, 16)).mean()
                                         / 16)
    diagonal = matrix_features(sp.eye_array(50, format="csr"))
    # six diagonal blocks hold 8 entries each, the last one 2: (6 * 8^2 + 2^2) / (64 * 50)
    assert diagonal.bandedness == 0.0 and diagonal.block_density == pytest.approx(388 / 3200)
    assert diagonal.row_cv == diagonal.col_cv == 0.0


def test_empty_and_hypersparse_matrices():
    empty = matrix_features(sp.csr_array((5, 7)))
    assert (empty.nnz, empty.row_empty, empty.col_empty, empty.bandedness) == (0, 1.0, 1.0, 0.0)
    one = matrix_features(sp.csr_array(([2.0], ([3], [1])), shape=(1000, 10)))
    assert one.row_empty == 0.999 and one.col_empty == 0.9 and one.row_max == one.col_max == 1


def test_large_matrices_are_sampled_and_close_to_exact():
    A = generate("power-law", 200_000, seed=3)
    f = matrix_features(A)
    assert f.sampled == SAMPLE and f.nnz == A.nnz
    rows = np.diff(A.indptr)
    cols = np.bincount(A.indices, minlength=A.shape[1])
    # rows: exact from pos up to OUTER_SCAN_LIMIT rows, else estimated
    exact_rows = A.shape[0] <= OUTER_SCAN_LIMIT
    assert f.row_cv == pytest.approx(rows.std() / rows.mean(), rel=1e-9 if exact_rows else 0.2)
    assert f.row_max == rows.max()
    assert f.col_cv == pytest.approx(cols.std() / cols.mean(), rel=0.25)   # columns: sampled
    coo = A.tocoo()
    band = np.abs(coo.row / A.shape[0] - coo.col / A.shape[1]).mean()
    assert f.bandedness == pytest.approx(band, abs=0.03)
    assert matrix_features(A) == f                  # the same sample every time


@pytest.mark.parametrize("subscripts, shapes, roles, access, width, key", [
    ("ij,j->i", [(6, 5), (5,)], ("out", "sum"), "rows", 1, "out,sum w=1"),
    ("ji,j->i", [(6, 5), (6,)], ("sum", "out"), "columns", 1, "sum,out w=1"),
    ("ij,jk->ik", [(6, 5), (5, 16)], ("out", "sum"), "rows", 16, "out,sum w>1"),
    ("ji,jk->ik", [(6, 5), (6, 4)], ("sum", "out"), "columns", 4, "sum,out w>1"),
    ("ij->i", [(6, 5)], ("out", "sum"), "rows", 1, "out,sum alone"),
])
def test_expression_features(subscripts, shapes, roles, access, width, key):
    operands = {name: np.ones(shape) for name, shape in zip("AB", shapes)}
    e = expression_features(Expression.parse(subscripts, len(shapes)), "A", operands)
    assert (e.roles, e.access, e.width, e.key) == (roles, access, width, key)


def test_expression_features_of_a_statement():
    e = expression_features(Expression.parse("y(j) = A(i,j) * x(i)"), "A",
                            {"A": np.ones((3, 2)), "x": np.ones(3)})
    assert (e.roles, e.access, e.output_rank, e.key) == (("sum", "out"), "columns", 1,
                                                         "sum,out w=1")


def test_generated_families_are_seeded():
    for family in FAMILIES:
        A = generate(family, 3000, seed=5)
        assert A.format == "csr" and 0 < A.nnz <= 3000
        assert (generate(family, 3000, seed=5) != A).nnz == 0
    with pytest.raises(ta.InputError, match="no matrix family 'diagonal'"):
        generate("diagonal", 10, seed=0)


# ---------------------------------------------------------------------------------------------
# the model


def toy_model(run: dict[str, list[float]], conversion: dict[str, float] | None = None,
              results: dict[str, str] | None = None) -> CostModel:
    """A model for class 'out,sum w=1' whose run time of each format is its coefficients
    over RUN_TERMS, and whose conversions from csr cost a fixed time each."""
    def padded(values, count):
        return tuple(values) + (0.0,) * (count - len(values))

    formats = {fmt: RunModel(padded(c, len(RUN_TERMS)), (results or {}).get(fmt, "dense"), 10)
               for fmt, c in run.items()}
    costs = conversion or {fmt: 0.0 for fmt in run}
    conversions = {"csr": {fmt: padded([s], len(CONVERSION_TERMS)) for fmt, s in costs.items()}}
    return CostModel({"out,sum w=1": formats}, conversions, {"source": "toy"})


def test_the_shipped_model_round_trips_through_its_file(tmp_path):
    model = CostModel.load(SHIPPED_MODEL)
    assert CostModel.from_json(model.to_json()) == model
    path = model.save(tmp_path / "copy.json")
    assert CostModel.load(path) == model
    assert set(model.classes()) == {"out,sum w=1", "sum,out w=1", "out,sum w>1", "sum,out w>1"}
    assert "fitted" in str(model)


@pytest.mark.parametrize("text, message", [
    ("not json", "is not JSON"),
    ('{"format": "something else"}', "is not a tensoralg format-selection model"),
    (None, "layout version 0"),
    ("negative", "malformed"),
])
def test_bad_model_files_are_named(text, message):
    document = json.loads(CostModel.load(SHIPPED_MODEL).to_json())
    if text is None:
        document["version"] = 0
        text = json.dumps(document)
    elif text == "negative":
        first = next(iter(document["run"].values()))
        next(iter(first.values()))["coefficients"][0] = -1.0
        text = json.dumps(document)
    with pytest.raises(CostModelError, match=message):
        CostModel.from_json(text, "the test model")


def test_fit_recovers_linear_costs():
    """Times that are exactly 2 µs + 3 ns per multiply-add are fitted back to that."""
    records = []
    for k, nnz in enumerate((2_000, 8_000, 30_000, 90_000)):
        A = generate("uniform", nnz, seed=k)
        features = matrix_features(A)
        e = expression_features(Expression.parse("ij,j->i", 2), "A",
                                {"A": A, "B": np.ones(A.shape[1])})
        terms = run_terms(features, e, threads=1)
        seconds = 2e-6 + 3e-9 * terms[RUN_TERMS.index("multiply-adds")]
        rows = (Measurement("csr", seconds, 1e-4, "dense", "bound"),)
        records.append(MatrixRecord(f"m{k}", "uniform", features,
                                    (("csr", "csr", 1e-5 + 1e-9 * features.nnz),),
                                    (ExperimentRecord("ij,j->i", e, 1, rows),)))
    model = fit_model(records)
    for record in records:
        e = record.experiments[0]
        predicted = model.predict_run("out,sum w=1", record.features, e.features, 1)["csr"]
        assert predicted == pytest.approx(e.rows[0].run_s, rel=1e-3)
        assert model.predict_conversion("csr", record.features)["csr"] == pytest.approx(
            record.conversions[0][2], rel=1e-3)
    assert MatrixRecord.from_dict(json.loads(json.dumps(records[0].to_dict()))) == records[0]


# ---------------------------------------------------------------------------------------------
# choose


@pytest.fixture(scope="module")
def spmv_operands():
    A = sp.random_array((400, 300), density=0.02, format="csr", random_state=2)
    return [A, np.ones(300)]


def test_choose_picks_the_cheapest_candidate_of_the_model(spmv_operands):
    # csc runs in 1 µs and dcsr in 2 µs; converting to csc costs 1 ms, to dcsr nothing
    model = toy_model({"csr": [5e-6], "csc": [1e-6], "dcsr": [2e-6]},
                      {"csr": 0.0, "csc": 1e-3, "dcsr": 0.0})
    choice = choose("ij,j->i", spmv_operands, model=model)
    assert choice.formats == {0: "dcsr", 1: "dense", "out": "(inferred)"}
    assert choice.explanation is None and choice.reason.startswith("dcsr: predicted")
    reused = choose("ij,j->i", spmv_operands, model=model, calls=math.inf)
    assert reused.formats[0] == "csc"                       # the conversion no longer counts
    assert choose("ij,j->i", spmv_operands, model=model, calls=1000).formats[0] == "csc"


def test_explain_gives_features_costs_and_a_reason(spmv_operands):
    model = toy_model({"csr": [1e-6], "csc": [4e-6], "coo": [9e-6]},
                      {"csr": 0.0, "csc": 2e-3, "coo": 1e-3})
    choice = choose("ij,j->i", spmv_operands, explain=True, model=model)
    ex = choice.explanation
    assert choice.formats[0] == "csr"
    assert ex.operand == 0 and ex.features == matrix_features(spmv_operands[0])
    assert ex.expression.key == "out,sum w=1"
    assert [c.format for c in ex.candidates] == ["csr", "coo", "csc"]
    assert [c.cost_s for c in ex.candidates] == pytest.approx([1e-6, 1.009e-3, 2.004e-3])
    assert ex.reason == choice.reason == "kept csr: predicted 1 µs; the next best, coo, runs slower"
    assert ex.decision_s > 0 and ex.model.startswith("cost model")
    text = str(choice)
    assert text.startswith("ij,j->i: 0=csr 1=dense out=(inferred)")
    for part in ("operand 0: 400x300 csr nnz=", "read as A(i,j)", "candidate", "reason: kept csr"):
        assert part in text


def test_choose_with_the_shipped_model_and_a_statement(spmv_operands):
    A, x = spmv_operands
    choice = choose("y(i) = A(i,j) * x(j)", {"A": A, "x": x}, explain=True)
    assert set(choice.formats) == {"A", "x", "y"} and choice.formats["x"] == "dense"
    assert choice.formats["A"] in {c.format for c in choice.explanation.candidates}
    assert choice.explanation.candidates == tuple(sorted(choice.explanation.candidates,
                                                         key=lambda c: c.cost_s))
    huge = sp.csr_array((np.ones(3), ([0, 5, 9], [1, 2, 3])), shape=(20000, 20000))
    assert "dense" not in {c.format for c in choose(
        "ij,j->i", [huge, np.ones(20000)], explain=True).explanation.candidates}  # 3.2 GB


def test_same_result_keeps_a_dense_result_dense(spmv_operands):
    model = toy_model({"csr": [5e-6], "dcsr": [1e-6]}, results={"dcsr": "csr"})
    assert choose("ij,j->i", spmv_operands, model=model).formats[0] == "dcsr"
    assert choose("ij,j->i", spmv_operands, model=model, same_result=True).formats[0] == "csr"


@pytest.mark.parametrize("subscripts, operands, reason", [
    ("ij,jk->ik", [sp.eye_array(3, format="csr"), sp.eye_array(3, format="csr")],
     "A, B are all sparse"),
    ("i,i->", [ta.Tensor.from_numpy(np.ones(3), "s"), np.ones(3)], "A has 1 mode(s)"),
    ("ij,j->i", [np.ones((3, 3)), np.ones(3)], "no operand is sparse"),
])
def test_what_the_model_does_not_cover_is_kept(subscripts, operands, reason):
    choice = choose(subscripts, operands, explain=True)
    assert reason in choice.reason and choice.reason.startswith("kept every format")
    assert choice.explanation.candidates == ()


def test_an_expression_class_without_data_is_kept(spmv_operands):
    choice = choose("ij->i", spmv_operands[:1], explain=True)
    assert choice.formats[0] == "csr"
    assert "no data for expressions of class 'out,sum alone'" in choice.reason


@pytest.mark.parametrize("expr, operands, error, match", [
    ("ij,j->i", "A", ta.InputError, "the operands are a list"),
    ("ij,j->i", {"A": 1}, ta.InputError, "list or tuple"),
    ("ij,j->i", [np.ones((2, 2))], ta.InputError, "names 2 operand"),
    ("ij,j->i", [np.ones((2, 2)), "x"], ta.InputError, "operand 1 \\(B\\) is a str"),
    ("ij,j->i", [np.ones((2, 2)), None], ta.InputError, "is a NoneType, not a tensor"),
    ("ij,j->i", [np.ones((2, 2)), np.ones((2, 2))], ta.ShapeError, "has 2 mode"),
    ("i$,j->i", [np.ones((2, 2)), np.ones(2)], ta.NotationError, "einsum subscripts"),
    (42, [np.ones(2)], ta.NotationError, "must be a string"),
    ("y(i) = A(i,j) * x(j)", {"A": np.ones((2, 2))}, ta.InputError, "missing x"),
    ("y(i) = A(i,j) * x(j)", {"A": np.ones((2, 2)), "x": np.ones(2), "z": 1.0},
     ta.InputError, "no operand named z"),
])
def test_bad_input_is_a_tensoralg_error(expr, operands, error, match):
    with pytest.raises(error, match=match) as caught:
        choose(expr, operands)
    assert isinstance(caught.value, ta.TensorAlgebraError)


@pytest.mark.parametrize("calls", [0, -1, "many", True])
def test_calls_must_be_positive(calls, spmv_operands):
    with pytest.raises(ta.InputError, match="calls must be a positive number"):
        choose("ij,j->i", spmv_operands, calls=calls)


# ---------------------------------------------------------------------------------------------
# the calibrated model


@pytest.fixture
def calibrated_file(session_cache_dir):
    """The calibrated model's path in the test session's private cache, removed after."""
    path = cost_model.calibrated_path()
    assert path is not None and path.parent == session_cache_dir
    yield path
    path.unlink(missing_ok=True)


def fake_measure(name, family, matrix, *, width, repeats, seed):
    """A training record without experiments: csr runs 1 ns per multiply-add, 10x the
    shipped model's guess or so, whatever the matrix."""
    features = matrix_features(matrix)
    e = expression_features(Expression.parse("ij,j->i", 2), "A",
                            {"A": matrix, "B": np.ones(matrix.shape[1])})
    seconds = 1e-9 * features.nnz
    rows = (Measurement("csr", seconds, 0.0, "dense", "bound", seconds),)
    return MatrixRecord(name, family, features, (("csr", "csr", 1e-6),),
                        (ExperimentRecord("ij,j->i", e, 1, rows),))


def test_calibrate_measures_within_its_budget_and_keeps_the_prior(tmp_path, monkeypatch):
    calibrate_module = sys.modules["tensoralg.select.calibrate"]
    monkeypatch.setattr(calibrate_module, "measure_matrix", fake_measure)
    result = ta.select.calibrate(progress=False, budget_s=0, directory=tmp_path)
    assert result.matrices == 1 and result.path == tmp_path / "select-model.json"
    assert CostModel.load(result.path) == result.model
    shipped = CostModel.load(SHIPPED_MODEL)
    # what was measured moved; what was not kept the shipped coefficients
    assert result.model.run["out,sum w=1"]["csr"] != shipped.run["out,sum w=1"]["csr"]
    assert result.model.run["sum,out w>1"] == shipped.run["sum,out w>1"]
    assert result.model.meta["prior"] == shipped.meta["source"]
    many = ta.select.calibrate(progress=False, budget_s=30, directory=tmp_path)
    assert many.matrices == 3 * len(FAMILIES)          # every size of every family fits


@pytest.mark.slow
def test_calibrate_with_a_tiny_budget_writes_a_model_choose_prefers(calibrated_file):
    result = ta.select.calibrate(progress=False, budget_s=0, seed=1)
    assert result.path == calibrated_file and result.matrices == 1
    assert "calibrated on 1 generated matrices" in str(result)
    stored = CostModel.load(calibrated_file)
    assert stored == result.model
    assert stored.meta["source"] == "ta.select.calibrate(seed=1)"
    assert stored.meta["tensoralg"] == ta.__version__
    assert current_model() == stored
    # classes and formats the one matrix measured stay, pulled towards the shipped model
    assert set(stored.classes()) == set(CostModel.load(SHIPPED_MODEL).classes())


def test_calibrate_into_a_directory_and_bad_arguments(tmp_path):
    with pytest.raises(ta.InputError, match="budget_s"):
        ta.select.calibrate(budget_s=-1)
    with pytest.raises(ta.InputError, match="seed"):
        ta.select.calibrate(seed=-2)


@pytest.mark.parametrize("content", ["{ not json", "null", "wrong version", "old tensoralg"])
def test_a_corrupt_calibrated_file_is_ignored_with_a_warning(calibrated_file, content):
    shipped = CostModel.load(SHIPPED_MODEL)
    if content == "wrong version":
        document = json.loads(shipped.to_json())
        document["version"] = 999
        content = json.dumps(document)
    elif content == "old tensoralg":
        content = CostModel(shipped.run, shipped.conversion,
                            {**shipped.meta, "tensoralg": "0.0.1"}).to_json()
    calibrated_file.write_text(content)
    with pytest.warns(UserWarning, match="using the model tensoralg ships"):
        model = current_model()
    assert model == shipped
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # once per state of the file
        assert current_model() == shipped


# ---------------------------------------------------------------------------------------------
# formats="auto"


def test_auto_positions():
    assert auto_positions("auto", 2) == [0, 1]
    assert auto_positions(["auto", None, "csr"], 3) == [0]
    assert auto_positions({0: "csr", 2: "auto"}, 3) == [2]
    assert auto_positions(None, 2) == auto_positions("csr", 2) == auto_positions(5, 1) == []


def test_resolve_auto_converts_only_what_the_model_says(spmv_operands, monkeypatch):
    choose_module = sys.modules["tensoralg.select.choose"]   # (the package's name: the function)
    model = toy_model({"csr": [5e-6], "csc": [1e-6], "dcsr": [1e-7]},
                      {"csr": 0.0, "csc": 0.0, "dcsr": 0.0}, results={"dcsr": "csr"})
    monkeypatch.setattr(choose_module, "current_model", lambda: model)
    resolution = resolve_auto("ij,j->i", tuple(spmv_operands), "auto")
    assert isinstance(resolution, Resolution)
    formats, explanation = resolution
    assert formats == {0: "csc", 1: None}           # dcsr would return a sparse result
    assert explanation.startswith("formats='auto' stored A as csc (given csr), kept B (dense): "
                                  "csc: predicted")
    assert "toy" not in explanation or "cost model" in explanation
    assert resolve_auto("ij,j->i", tuple(spmv_operands), [None, "auto"]).formats == {1: None}
    assert resolve_auto("ij,j->i", tuple(spmv_operands), {0: "csr"}) == Resolution({}, "")


def test_resolve_auto_keeps_formats_when_it_cannot_decide():
    operands = (sp.eye_array(3, format="csr"), np.ones(4), np.ones(2))
    resolution = resolve_auto("ij,j->i", operands, "auto")
    assert resolution.formats == {0: None, 1: None, 2: None}
    assert resolution.explanation.startswith("formats='auto' kept every operand's format:")


def test_resolve_auto_with_the_shipped_model_keeps_the_result_kind(spmv_operands):
    formats, explanation = resolve_auto("ij,jk->ik", (spmv_operands[0], np.ones((300, 16))),
                                        "auto")
    assert formats[1] is None and formats[0] in (None, "csc", "dcsc", "dense")
    assert explanation.startswith("formats='auto' ")


def test_what_resolve_auto_returns_is_what_einsum_takes(spmv_operands, monkeypatch):
    """The wiring api.py will use: "auto" entries replaced by resolve_auto's answer."""
    choose_module = sys.modules["tensoralg.select.choose"]
    model = toy_model({"csr": [5e-6], "csc": [1e-6]}, {"csr": 0.0, "csc": 0.0})
    monkeypatch.setattr(choose_module, "current_model", lambda: model)
    A, x = spmv_operands
    formats, _ = resolve_auto("ij,j->i", (A, x), ["auto", "auto"])
    assert formats == {0: "csc", 1: None}
    y = ta.einsum("ij,j->i", A, x, formats=[formats[0], formats[1]])
    np.testing.assert_allclose(y, A @ x)


def test_einsum_formats_auto_runs_through_the_chooser(caplog):
    import logging

    A = sp.random_array((300, 200), density=0.02, format="csr", random_state=3)
    x, B = np.arange(200.0), np.ones((200, 16))
    with caplog.at_level(logging.INFO, logger="tensoralg"):
        np.testing.assert_allclose(ta.einsum("ij,j->i", A, x, formats="auto"), A @ x,
                                   rtol=1e-12)
    assert "formats='auto'" in caplog.text
    np.testing.assert_allclose(ta.einsum("ji,j->i", A, np.ones(300), formats=["auto", None]),
                               A.T @ np.ones(300), rtol=1e-12)
    np.testing.assert_allclose(ta.einsum("ij,jk->ik", A, B, formats={0: "auto"}), A @ B,
                               rtol=1e-12)
    with pytest.raises(ta.UnsupportedError, match="formats must be"):
        ta.einsum("ij,j->i", A, x, formats="fast")
