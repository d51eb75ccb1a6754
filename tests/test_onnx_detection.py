"""Detection models' ops and general Loops (``onnx/ops/detection.py``, ``onnx/ops/control.py``):
NonMaxSuppression against onnx's reference implementation on random boxes of every layout,
RoiAlign and Loop against onnxruntime, at every opt level (level 3 three times, so that the
static plan runs), and the errors bad inputs get."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model, onnxruntime_outputs  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg import program  # noqa: E402

LEVELS = (0, 1, 2, 3)
F32, F64, I64, BOOL = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, constants=None, opset=17, shapes=None):
    return onnx_model(nodes, inputs, outputs, constants, opset, shapes)


def _check(model, feeds, expected, rtol=1e-5, atol=1e-6):
    check_every_level(model, feeds, expected, rtol=rtol, atol=atol, levels=LEVELS)


def _onnxruntime(model, feeds):
    """onnxruntime's outputs by name (conftest's oracle)."""
    return dict(zip([o.name for o in model.graph.output], onnxruntime_outputs(model, feeds)))


def _boxes(rng, count, layout, apart):
    """``count`` random boxes: ``[y1, x1, y2, x2]`` with the corners in either order, or
    ``[x_center, y_center, width, height]``; ``apart`` moves groups of them far from one
    another, as torchvision's batched_nms moves each class."""
    corner = rng.random((count, 2)) * 50
    size = rng.random((count, 2)) * rng.choice([2.0, 20.0, 60.0])
    if apart:
        corner[:, 1] += rng.integers(0, 12, count) * 1000
    if layout == 1:
        return np.concatenate([corner[:, ::-1] + size[:, ::-1] / 2, size[:, ::-1]], 1)
    first, second = corner, corner + size
    swap = rng.random(count) < 0.3
    first[swap], second[swap] = second[swap].copy(), first[swap].copy()
    return np.concatenate([first, second], 1)


NMS_INPUTS = ["boxes", "scores", "most", "iou", "least"]


@pytest.mark.parametrize("seed", range(12))
def test_non_max_suppression_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    layout, apart = seed % 2, seed % 3 == 0
    batches, classes, count = 1 + seed % 2, 1 + seed % 3, int(rng.integers(0, 300))
    boxes = np.stack([_boxes(rng, count, layout, apart) for _ in range(batches)])
    boxes = boxes.astype(np.float32)
    if count > 4:
        boxes[:, 1] = boxes[:, 0]                        # a duplicate box
        boxes[:, 2, 2:] = boxes[:, 2, :2]                # a box of no area
    scores = rng.random((batches, classes, count)).astype(np.float32)
    scores[..., ::5] = 0.5                               # ties, taken in box order
    feeds = {"boxes": boxes, "scores": scores,
             "most": np.array([rng.choice([1, 7, 10**6])], np.int64),
             "iou": np.array([rng.choice([0.0, 0.3, 0.5, 0.9])], np.float32),
             "least": np.array([rng.choice([0.2, 0.6])], np.float32)}
    names = NMS_INPUTS if seed % 4 else NMS_INPUTS[:4]     # score_threshold absent
    node = helper.make_node("NonMaxSuppression", names, ["y"], center_point_box=layout)
    model = _model([node], {n: feeds[n] for n in names}, [("y", I64, ["selected", 3])])
    feeds = {n: feeds[n] for n in names}
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    _check(model, feeds, {"y": expected})


def test_non_max_suppression_without_a_box_limit_selects_none():
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1]]], np.float32)
    scores = np.array([[[0.9, 0.8]]], np.float32)
    model = _model([helper.make_node("NonMaxSuppression", ["b", "s"], ["y"])],
                   {"b": boxes, "s": scores}, [("y", I64, ["selected", 3])])
    assert tonnx.load(model).run({"b": boxes, "s": scores})["y"].shape == (0, 3)


def test_kept_boxes_finds_the_same_boxes_as_testing_every_pair():
    """The generated loop lists kept boxes by x cell; a plain greedy walk is the oracle."""
    rng = np.random.default_rng(4)
    for count, spread in [(0, 1.0), (1, 1.0), (500, 1.0), (500, 1e4), (2000, 50.0)]:
        low = rng.random((count, 2)) * spread
        high = low + rng.random((count, 2)) * 30
        low[::7, 0] = np.nan                             # boxes that overlap nothing
        kept = program.kept_boxes(low[:, 0], high[:, 0], low[:, 1], high[:, 1], 0.4, 10**9)
        expected = []
        for r in range(count):
            if all(not _overlap(low[r], high[r], low[q], high[q], 0.4) for q in expected):
                expected.append(r)
        assert kept.tolist() == expected, count


def _overlap(low_a, high_a, low_b, high_b, threshold):
    width = min(high_a[0], high_b[0]) - max(low_a[0], low_b[0])
    height = min(high_a[1], high_b[1]) - max(low_a[1], low_b[1])
    if not (width > 0 and height > 0):
        return False
    area_a = (high_a[0] - low_a[0]) * (high_a[1] - low_a[1])
    area_b = (high_b[0] - low_b[0]) * (high_b[1] - low_b[1])
    inter = width * height
    return area_a > 0 and area_b > 0 and inter / (area_a + area_b - inter) > threshold


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("how", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_roi_align_matches_onnxruntime(mode, how, sampling_ratio, dtype):
    rng = np.random.default_rng(sampling_ratio)
    x = rng.standard_normal((2, 3, 12, 10)).astype(dtype)
    corner = rng.random((9, 2)) * 40 - 6                 # some regions reach outside
    size = rng.random((9, 2)) * 30
    rois = np.concatenate([corner, corner + size], 1).astype(dtype)
    rois[0] = [5.0, 5.0, 5.0, 5.0]                       # a region of no area
    batch = rng.integers(0, 2, 9).astype(np.int64)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode,
                            coordinate_transformation_mode=how, output_height=3,
                            output_width=4, sampling_ratio=sampling_ratio,
                            spatial_scale=0.25)
    model = _model([node], {"x": x, "rois": rois, "batch": batch},
                   [("y", F32 if dtype == np.float32 else F64, [9, 3, 3, 4])], opset=16)
    feeds = {"x": x, "rois": rois, "batch": batch}
    tolerance = 1e-5 if dtype == np.float32 else 1e-10
    _check(model, feeds, _onnxruntime(model, feeds), rtol=tolerance, atol=tolerance)


def test_roi_align_of_opset_10_has_no_half_pixel_shift():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 2, 8, 8)).astype(np.float32)
    rois = np.array([[1.0, 1.0, 6.0, 5.0], [0.0, 0.0, 0.5, 0.5]], np.float32)
    batch = np.zeros(2, np.int64)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=2,
                            output_width=2, sampling_ratio=2)
    model = _model([node], {"x": x, "rois": rois, "batch": batch}, [("y", F32, [2, 2, 2, 2])],
                   opset=11)
    feeds = {"x": x, "rois": rois, "batch": batch}
    _check(model, feeds, _onnxruntime(model, feeds))


def test_roi_align_refuses_bad_regions():
    x = np.zeros((1, 2, 4, 4), np.float32)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], name="pool")
    model = _model([node], {"x": x, "rois": np.zeros((1, 4), np.float32),
                            "batch": np.zeros(1, np.int64)}, [("y", F32, ["r", 2, 1, 1])],
                   opset=16, shapes={"rois": ["r", "c"], "batch": ["r"]})
    compiled = tonnx.load(model)
    good = np.array([[0.0, 0.0, 2.0, 2.0]], np.float32)
    with pytest.raises(ta.ShapeError, match=r"node pool .*batch_indices must lie in \[0, 1\)"):
        compiled.run({"x": x, "rois": good, "batch": np.array([1])})
    with pytest.raises(ta.ShapeError, match="node pool .*not finite"):
        compiled.run({"x": x, "rois": np.array([[0, 0, np.inf, 2]], np.float32),
                      "batch": np.zeros(1, np.int64)})
    with pytest.raises(ta.ShapeError, match="node pool .*samples"):
        compiled.run({"x": x, "rois": np.array([[0, 0, 1e9, 1e9]], np.float32),
                      "batch": np.zeros(1, np.int64)})
    with pytest.raises(ta.ShapeError, match=r"node pool .*rois \(R, 4\)"):
        compiled.run({"x": x, "rois": np.zeros((1, 5), np.float32),
                      "batch": np.zeros(1, np.int64)})


def _loop_model(trip, condition, inner_if=False):
    """``Loop(trip, cond, acc)``: ``acc += x * i`` each iteration, the condition false once
    ``acc``'s sum passes ``limit``, a scan output of ``acc`` per iteration, the body reading
    the outer ``x`` and ``limit``; ``inner_if`` doubles ``acc`` on odd iterations through
    an If in the body."""
    nodes = [helper.make_node("Cast", ["i"], ["i_f"], to=F32),
             helper.make_node("Mul", ["x", "i_f"], ["step"]),
             helper.make_node("Add", ["acc_in", "step"], ["grown"])]
    if inner_if:
        then = helper.make_graph([helper.make_node("Add", ["grown", "grown"], ["twice"])],
                                 "then", [], [helper.make_tensor_value_info("twice", F32, None)])
        other = helper.make_graph([helper.make_node("Identity", ["grown"], ["same"])],
                                  "else", [], [helper.make_tensor_value_info("same", F32, None)])
        nodes += [helper.make_node("Mod", ["i", "two"], ["odd_i"]),
                  helper.make_node("Cast", ["odd_i"], ["odd"], to=BOOL),
                  helper.make_node("If", ["odd"], ["acc_out"], then_branch=then,
                                   else_branch=other)]
    else:
        nodes.append(helper.make_node("Identity", ["grown"], ["acc_out"]))
    nodes += [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
              helper.make_node("Less", ["total", "limit"], ["cond_out"]),
              helper.make_node("Identity", ["acc_out"], ["scan"])]
    body = helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", BOOL, []),
         helper.make_tensor_value_info("acc_in", F32, None)],
        [helper.make_tensor_value_info("cond_out", BOOL, []),
         helper.make_tensor_value_info("acc_out", F32, None),
         helper.make_tensor_value_info("scan", F32, None)],
        [numpy_helper.from_array(np.array(2, np.int64), "two")])
    loop = helper.make_node("Loop", [trip, condition, "acc0"], ["acc", "scans"], body=body,
                            name="loop")
    inputs = {"x": np.arange(3, dtype=np.float32), "acc0": np.ones(3, np.float32),
              "limit": np.array(40.0, np.float32)}
    constants = {"n": np.array(6, np.int64), "go": np.array(True)}
    return _model([loop], inputs, [("acc", F32, [3]), ("scans", F32, ["n", 3])],
                  constants), inputs


@pytest.mark.parametrize("trip, condition", [("n", ""), ("", "go"), ("n", "go")])
@pytest.mark.parametrize("inner_if", [False, True])
def test_loops_match_onnxruntime(trip, condition, inner_if):
    model, feeds = _loop_model(trip, condition, inner_if)
    _check(model, feeds, _onnxruntime(model, feeds))


def test_a_loop_of_no_iteration_gives_its_initial_values():
    model, feeds = _loop_model("n", "")
    feeds["limit"] = np.array(-1.0, np.float32)          # false after the first iteration
    _check(model, feeds, _onnxruntime(model, feeds))
    zero = model.graph.initializer[0]
    zero.CopyFrom(numpy_helper.from_array(np.array(0, np.int64), "n"))
    got = tonnx.load(model).run(feeds)
    np.testing.assert_array_equal(got["acc"], feeds["acc0"])
    assert got["scans"].shape[0] == 0
