"""One test per user mistake: each gets a clear TensorAlgebraError naming the node or input."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17, check=True):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if check:
        onnx.checker.check_model(model)
    return model


def _relu_model():
    return _model([helper.make_node("Relu", ["x"], ["y"], name="act")],
                  [helper.make_tensor_value_info("x", F32, ["N", 3])],
                  [helper.make_tensor_value_info("y", F32, ["N", 3])])


def test_malformed_protobuf_bytes():
    with pytest.raises(tonnx.ModelError, match="not a valid ONNX protobuf|holds no graph"):
        tonnx.load(b"\x08\x01\x12\xff\xff garbage")


def test_missing_file():
    with pytest.raises(tonnx.ModelError, match="cannot read model"):
        tonnx.load("/nonexistent/model.onnx")


def test_model_failing_the_checker():
    model = _model([helper.make_node("Relu", ["nowhere"], ["y"])],
                   [helper.make_tensor_value_info("x", F32, [3])],
                   [helper.make_tensor_value_info("y", F32, [3])], check=False)
    with pytest.raises(tonnx.ModelError, match="onnx.checker"):
        tonnx.load(model)


def test_output_declared_without_a_shape_says_how_to_declare_it():
    model = _model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", F32, [2, 3])],
                   [helper.make_tensor_value_info("y", F32, None)], check=False)
    with pytest.raises(tonnx.ModelError, match="declared without a shape; give it one"):
        tonnx.load(model)


def test_unsupported_op_is_refused_at_load_naming_node_and_inputs():
    model = _model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("MaxRoiPool", ["r", "rois"], ["y"], name="pool",
                                     pooled_shape=[1, 1])],
                   [helper.make_tensor_value_info("x", F32, [1, 2, 3, 3]),
                    helper.make_tensor_value_info("rois", F32, [1, 5])],
                   [helper.make_tensor_value_info("y", F32, [1, 2, 1, 1])])
    with pytest.raises(ta.UnsupportedError,
                       match=r"node pool \(MaxRoiPool, inputs \['r', 'rois'\]\)"):
        tonnx.load(model)


def test_old_opset_and_bad_opt_level():
    with pytest.raises(ta.UnsupportedError, match="opset 9"):
        tonnx.load(_model([helper.make_node("Relu", ["x"], ["y"])],
                          [helper.make_tensor_value_info("x", F32, [3])],
                          [helper.make_tensor_value_info("y", F32, [3])], opset=9))
    with pytest.raises(ta.UnsupportedError, match="opt_level"):
        tonnx.load(_relu_model(), opt_level=7)


def test_missing_input():
    with pytest.raises(tonnx.InputError, match="missing input 'x'"):
        tonnx.load(_relu_model()).run({})


def test_unknown_input():
    with pytest.raises(tonnx.InputError, match="unknown input.*'z'"):
        tonnx.load(_relu_model()).run({"x": np.ones((1, 3), np.float32), "z": 1})


def test_wrong_input_dtype():
    with pytest.raises(tonnx.InputError, match="'x' must be float32, got float64"):
        tonnx.load(_relu_model()).run({"x": np.ones((1, 3))})


def test_wrong_input_shape():
    with pytest.raises(tonnx.InputError, match=r"'x' has shape \(2, 4\)"):
        tonnx.load(_relu_model()).run({"x": np.ones((2, 4), np.float32)})


def test_out_of_range_embedding_index_names_the_node():
    table = numpy_helper.from_array(np.ones((5, 2), np.float32), "table")
    model = _model([helper.make_node("Gather", ["table", "ids"], ["y"], name="lookup")],
                   [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
                   [helper.make_tensor_value_info("y", F32, ["N", 2])], [table])
    with pytest.raises(ta.ShapeError, match="node lookup.*ids"):
        tonnx.load(model).run({"ids": np.array([1, 9], np.int64)})


def test_incompatible_broadcast_names_the_node():
    model = _model([helper.make_node("Add", ["a", "b"], ["y"], name="plus")],
                   [helper.make_tensor_value_info("a", F32, ["A", "B"]),
                    helper.make_tensor_value_info("b", F32, ["C"])],
                   [helper.make_tensor_value_info("y", F32, ["A", "B"])])
    with pytest.raises(ta.ShapeError, match="node plus.*do not broadcast"):
        tonnx.load(model).run({"a": np.ones((2, 3), np.float32),
                               "b": np.ones((4,), np.float32)})


def test_session_unknown_output_name():
    session = tonnx.InferenceSession(_relu_model().SerializeToString())
    with pytest.raises(tonnx.InputError, match="unknown output"):
        session.run(["nope"], {"x": np.ones((1, 3), np.float32)})


def _overridable_model():
    """y = x @ W, with the initializer W also listed as a graph input (older exporters did
    this for every weight; ONNX lets a run feed W instead)."""
    w = np.zeros((4, 5), np.float32)
    w[1, 2] = 3.0                         # mostly zeros: level 3 compresses it
    return _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")],
                  [helper.make_tensor_value_info("x", F32, ["N", 4]),
                   helper.make_tensor_value_info("W", F32, [4, 5])],
                  [helper.make_tensor_value_info("y", F32, ["N", 5])],
                  [numpy_helper.from_array(w, "W"),
                   numpy_helper.from_array(np.ones(1, np.float32), "unused")])


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_an_overridable_initializer_is_fed_at_level_0_and_refused_above(level):
    """Level 0 runs the nodes as loaded and takes the fed W (checked against the
    initializer's shape and dtype); higher levels compiled W in and refuse the feed rather
    than ignore it (level 3 used to run with the compressed default, silently)."""
    model = tonnx.load(_overridable_model(), opt_level=level)
    x = np.ones((2, 4), np.float32)
    w = np.arange(20, dtype=np.float32).reshape(4, 5)
    np.testing.assert_array_equal(model.run({"x": x})["y"][0], [0, 0, 3, 0, 0])
    if level == 0:
        np.testing.assert_array_equal(model.run({"x": x, "W": w})["y"], x @ w)
        with pytest.raises(tonnx.InputError, match="replaces an initializer of shape"):
            model.run({"x": x, "W": np.ones((4, 6), np.float32)})
        with pytest.raises(tonnx.InputError, match="replaces an initializer"):
            model.run({"x": x, "W": w.astype(np.float64)})
    else:
        with pytest.raises(tonnx.InputError, match="opt_level=0 to feed 'W'"):
            model.run({"x": x, "W": w})
    # An initializer that is not an input is not a feed, at any level.
    with pytest.raises(tonnx.InputError, match="unknown input.*'unused'"):
        model.run({"x": x, "unused": np.ones(1, np.float32)})


@pytest.mark.parametrize("argument", [["--batch", "-1"], ["--repeat", "0"], ["--batch", "two"]])
def test_cli_refuses_bad_counts(tmp_path, argument, capsys):
    from tensoralg.cli import main
    path = tmp_path / "relu.onnx"
    onnx.save(_relu_model(), path)
    with pytest.raises(SystemExit) as exit_:
        main(["onnx", "profile", str(path), *argument])
    assert exit_.value.code == 2
    assert argument[0] in capsys.readouterr().err


def test_an_opset_newer_than_onnx_knows_is_refused():
    model = _relu_model()
    model.opset_import[0].version = 99
    with pytest.raises(tonnx.ModelError, match="opset 99.*knows opsets up to"):
        tonnx.load(model)


@pytest.mark.parametrize("level", [0, 1, 3])
def test_a_constant_too_large_to_make_loads_and_fails_clearly_at_run(level):
    """Folding would have made a 400 TB constant at load (a raw MemoryError); it is left to
    run time (passes.MAX_FOLDED_ELEMENTS), where running out of memory names the node. (More
    than a 47-bit address space: no machine hands it out, whatever its overcommit policy.)"""
    fill = numpy_helper.from_array(np.array([1.0], np.float32))
    model = _model([helper.make_node("ConstantOfShape", ["s"], ["c"], name="big", value=fill),
                    helper.make_node("Add", ["c", "x"], ["y"])],
                   [helper.make_tensor_value_info("x", F32, [1])],
                   [helper.make_tensor_value_info("y", F32, [10**7, 10**7])],
                   [numpy_helper.from_array(np.array([10**7, 10**7], np.int64), "s")])
    compiled = tonnx.load(model, opt_level=level)
    with pytest.raises(ta.KernelRuntimeError, match="node big.*out of memory"):
        compiled.run({"x": np.ones(1, np.float32)})


def test_every_unsupported_node_is_named_at_once():
    model = _model([helper.make_node("MaxRoiPool", ["x", "rois"], ["a"], name="first",
                                     pooled_shape=[1, 1]),
                    helper.make_node("Relu", ["a"], ["b"]),
                    helper.make_node("MaxRoiPool", ["b", "rois"], ["y"], name="second",
                                     pooled_shape=[1, 1])],
                   [helper.make_tensor_value_info("x", F32, [1, 2, 3, 3]),
                    helper.make_tensor_value_info("rois", F32, [1, 5])],
                   [helper.make_tensor_value_info("y", F32, [1, 2, 1, 1])], opset=18)
    with pytest.raises(ta.UnsupportedError, match=r"(?s)node first \(MaxRoiPool.*1 more node.*"
                                                  r"node second \(MaxRoiPool"):
        tonnx.load(model)
