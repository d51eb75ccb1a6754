"""A linear or cubic (and antialiased) Resize in the static plan (``plan/resize_steps.py``):
one prebound CSR kernel per resized axis, against onnxruntime, over coordinate modes, scales
and sizes, axes, downsampling and float64; the pass order (the contiguous last axis first);
what keeps the node's own run (tf_crop_and_resize, nearest mode but for whole-factor
upsampling of the last axes, which is one compiled broadcast copy).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

from tensoralg.onnx.ops.resize import resize_passes

PLANNED = "interpolation, one prebound kernel per axis"


def _model(x_shape, *, sizes=None, scales=None, dtype=np.float32, opset=18, **attributes):
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    inits, names = [], ["x", "", ""]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        names[2] = "scales"
    else:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        names.append("sizes")
    nodes = [h.make_node("Resize", names, ["r"], name="resize", **attributes),
             h.make_node("Relu", ["r"], ["y"], name="act")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", kind, list(x_shape))],
                         [h.make_tensor_value_info("y", kind, [None] * len(x_shape))], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


CASES = [
    # (x shape, keyword arguments)
    ((1, 21, 28, 28), dict(sizes=[1, 21, 224, 224], mode="linear")),       # LR-ASPP's head
    ((2, 3, 7, 9), dict(scales=[1.0, 1.0, 2.0, 2.0], mode="linear",
                        coordinate_transformation_mode="align_corners")),
    ((1, 4, 10, 12), dict(scales=[1.0, 1.0, 0.5, 0.75], mode="linear")),    # downsampling
    ((1, 2, 5, 6), dict(sizes=[9, 11], axes=[2, 3], mode="linear",
                        coordinate_transformation_mode="pytorch_half_pixel")),
    ((2, 3, 8), dict(sizes=[2, 3, 20], mode="linear",
                     coordinate_transformation_mode="asymmetric")),         # 1-D, last axis
    ((1, 2, 4, 5, 6), dict(scales=[1.0, 1.0, 2.0, 1.5, 1.0], mode="linear")),  # 3-D
    ((1, 3, 6, 6), dict(sizes=[1, 3, 12, 12], mode="linear",
                        coordinate_transformation_mode="half_pixel_symmetric")),
    # cubic: DINOv2's position-embedding interpolation (bicubic, pytorch_half_pixel)
    ((1, 64, 8, 8), dict(sizes=[1, 64, 11, 6], mode="cubic",
                         coordinate_transformation_mode="pytorch_half_pixel")),
    ((2, 3, 5, 7), dict(scales=[1.0, 1.0, 2.0, 0.5], mode="cubic", cubic_coeff_a=-0.5,
                        exclude_outside=1)),
    ((1, 2, 3, 9), dict(sizes=[1, 2, 1, 4], mode="cubic",
                        coordinate_transformation_mode="align_corners")),
    # antialiased shrinking (torch's interpolate(..., antialias=True)): the filter widens
    ((1, 3, 24, 20), dict(sizes=[1, 3, 7, 9], mode="linear", antialias=1)),
    ((1, 3, 24, 20), dict(sizes=[1, 3, 5, 30], mode="cubic", antialias=1)),
    ((2, 2, 17, 13), dict(scales=[1.0, 1.0, 0.3, 0.5], mode="cubic", antialias=1,
                          exclude_outside=1, coordinate_transformation_mode="asymmetric")),
    ((1, 2, 16), dict(sizes=[1, 2, 3], mode="linear", antialias=1,
                      coordinate_transformation_mode="align_corners")),
]


@pytest.mark.parametrize("x_shape, kwargs", CASES)
def test_planned_linear_resize_matches_onnxruntime(x_shape, kwargs):
    model = _model(x_shape, **kwargs)
    feeds = {"x": np.random.default_rng(len(x_shape)).standard_normal(x_shape)
             .astype(np.float32)}
    compiled = planned_model(model, feeds)
    np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-5, atol=1e-6)
    rows = {r.node: r.plan for r in compiled.profile(feeds, repeat=1).rows}
    assert PLANNED in rows["resize"], rows["resize"]
    # the pass over the last axis gathers its taps, the others run the CSR statement
    for part in rows["resize"].split(": ", 1)[1].split("; "):
        axis = int(part.split()[1])
        kind = "(taps gathered)" if axis == len(x_shape) - 1 else "(CSR)"
        assert part.endswith(kind), rows["resize"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode, coordinates", [("linear", "align_corners"),
                                               ("linear", "half_pixel"),
                                               ("cubic", "pytorch_half_pixel")])
def test_the_gathered_last_axis_keeps_infinities_and_nans_as_the_node_does(
        mode, coordinates, dtype):
    import tensoralg.onnx as tonnx

    model = _model((2, 3, 5, 7), scales=[1.0, 1.0, 2.0, 2.0], mode=mode, dtype=dtype,
                   coordinate_transformation_mode=coordinates)
    x = np.random.default_rng(4).standard_normal((2, 3, 5, 7)).astype(dtype)
    x[0, 0, 2, 3], x[1, 2, 4, 6], x[0, 1, 0, 0] = np.inf, -np.inf, np.nan
    feeds = {"x": x}
    want = tonnx.load(model, opt_level=0).run(feeds)["y"]     # the node's CSR passes
    compiled = planned_model(model, feeds)
    assert "(taps gathered)" in str(compiled.profile(feeds, repeat=1))
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-6, atol=1e-6)


def test_float64_planned_resize_matches_the_nodes_own_run():
    import tensoralg.onnx as tonnx

    model = _model((1, 2, 5, 5), sizes=[1, 2, 15, 10], mode="linear", dtype=np.float64)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 2, 5, 5))}
    node_by_node = tonnx.load(model, opt_level=0).run(feeds)["y"]
    np.testing.assert_allclose(planned_model(model, feeds).run(feeds)["y"], node_by_node,
                               rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("kwargs", [
    dict(sizes=[1, 2, 10, 10], mode="nearest"),
    dict(sizes=[1, 2, 6, 6], mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
         extrapolation_value=7.0),
])
def test_other_modes_keep_the_nodes_own_run(kwargs):
    extra = {}
    if kwargs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        extra["roi"] = True
    model = _model((1, 2, 5, 5), opset=18, **kwargs)
    if extra:
        model.graph.initializer.append(numpy_helper.from_array(
            np.array([0, 0, -0.2, 0.1, 1, 1, 1.3, 0.9], np.float32), "roi"))
        model.graph.node[0].input[1] = "roi"
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)}
    compiled = planned_model(model, feeds)
    np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-5, atol=1e-6)
    rows = {r.node: r.plan for r in compiled.profile(feeds, repeat=1).rows}
    assert PLANNED not in rows["resize"]


def test_the_contiguous_last_axis_runs_first_when_upsampling():
    _, passes = resize_passes("resize", (1, 21, 28, 28), np.float32, None, None,
                              np.array([1, 21, 224, 224]), axes=None,
                              coordinate_transformation_mode="half_pixel",
                              keep_aspect_ratio_policy="stretch", mode="linear",
                              nearest_mode="floor")
    assert [p.axis for p in passes] == [3, 2]
    _, passes = resize_passes("resize", (1, 3, 40, 10), np.float32, None,
                              np.array([1, 1, 0.5, 4.0], np.float32), None, axes=None,
                              coordinate_transformation_mode="half_pixel",
                              keep_aspect_ratio_policy="stretch", mode="linear",
                              nearest_mode="floor")
    assert [p.axis for p in passes] == [2, 3]       # the shrinking axis first


REPEATED = "nearest upsampling by whole factors"


@pytest.mark.parametrize("x_shape, kwargs, repeated", [
    ((1, 3, 5, 7), dict(scales=[1.0, 1.0, 2.0, 2.0]), True),          # U-Net, FPN, VAE: 2x
    ((2, 4, 6, 6), dict(scales=[1.0, 1.0, 2.0, 2.0], nearest_mode="floor",
                        coordinate_transformation_mode="asymmetric"), True),  # torch's export
    ((1, 2, 4, 5), dict(sizes=[1, 2, 12, 10]), True),                 # 3 x 2
    ((1, 2, 4, 5), dict(scales=[1.0, 1.0, 1.0, 3.0]), True),          # the last axis only
    ((1, 2, 4, 5), dict(scales=[1.0, 1.0, 4.0, 1.0]), True),          # rows only
    ((1, 2, 4, 6), dict(scales=[1.0, 1.0, 1.5, 1.5]), False),         # not a whole factor
    ((1, 2, 4, 6), dict(scales=[1.0, 1.0, 2.0, 2.0],
                        coordinate_transformation_mode="align_corners"), True),   # it is, here
    ((1, 2, 4, 6), dict(scales=[1.0, 1.0, 3.0, 1.0],
                        coordinate_transformation_mode="align_corners"), False),  # 0, 0, 1, ...
    ((2, 3, 4, 5), dict(scales=[2.0, 1.0, 1.0, 1.0]), False),         # an outer axis
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nearest_whole_factor_upsampling_is_one_broadcast_copy(x_shape, kwargs, repeated,
                                                               dtype):
    model = _model(x_shape, mode="nearest", dtype=dtype, **kwargs)
    feeds = {"x": np.random.default_rng(3).standard_normal(x_shape).astype(dtype)}
    compiled = planned_model(model, feeds)
    want = onnxruntime_outputs(model, feeds)[0] if dtype == np.float32 else None
    got = compiled.run(feeds)["y"]
    if want is not None:
        np.testing.assert_array_equal(got, want)
    else:                                  # onnxruntime has no float64 Resize: NumPy's take
        from tensoralg.onnx import load
        np.testing.assert_array_equal(got, load(model, opt_level=0).run(feeds)["y"])
    assert (REPEATED in str(compiled.profile(feeds))) == repeated


@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
def test_a_resize_to_its_own_size_is_a_compiled_copy(mode):
    x_shape = (1, 3, 2, 2)            # a pyramid level already at the target size (UperNet)
    model = _model(x_shape, sizes=list(x_shape), mode=mode)
    feeds = {"x": np.random.default_rng(9).standard_normal(x_shape).astype(np.float32)}
    compiled = planned_model(model, feeds)
    np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-6, atol=1e-6)
    rows = {r.node: r.plan for r in compiled.profile(feeds, repeat=1).rows}
    assert "a resize to the input's own size: one compiled copy" in rows["resize"], rows["resize"]
