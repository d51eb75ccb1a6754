"""ONNX Col2Im (opset 18; PyTorch's ``nn.Fold``, as transformers' MobileViTV2 folds its
patches): against onnxruntime (2-D) and ONNX's reference (other ranks) at every opt level,
with overlapping, strided, dilated and padded blocks; bad shapes are ShapeErrors."""
from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402


def _model(image, block, dtype=np.float32, channels=2, batch=2, symbolic=False,
           **attributes):
    rank = len(image)
    dilations = attributes.get("dilations", [1] * rank)
    strides = attributes.get("strides", [1] * rank)
    pads = attributes.get("pads", [0] * (2 * rank))
    counts = [(image[d] + pads[d] + pads[d + rank] - dilations[d] * (block[d] - 1) - 1)
              // strides[d] + 1 for d in range(rank)]
    x = np.random.default_rng(3).standard_normal(
        (batch, channels * math.prod(block), math.prod(counts))).astype(dtype)
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attributes)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = onnx_model([node], {"x": x}, [("y", elem, ["N", "C", *image] if symbolic else
                                            [batch, channels, *image])],
                       {"image": np.array(image, np.int64), "block": np.array(block, np.int64)},
                       opset=18, shapes={"x": ["N", "R", "L"]} if symbolic else None)
    return model, {"x": x}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("image, block, attributes", [
    ([6, 6], [2, 2], {"strides": [2, 2]}),                       # MobileViTV2: no overlap
    ([5, 7], [3, 3], {}),                                        # overlapping blocks sum
    ([9, 8], [3, 2], {"strides": [2, 3], "dilations": [2, 1]}),
    ([4, 5], [3, 3], {"pads": [1, 1, 1, 1]}),                    # the padding is cut off
    ([5, 5], [2, 3], {"pads": [0, 2, 1, 0], "strides": [1, 2]}),
])
def test_col2im_matches_onnxruntime(image, block, attributes, dtype):
    """onnxruntime implements Col2Im for float32 only: float64 against ONNX's reference."""
    model, feeds = _model(image, block, dtype, **attributes)
    want = None if dtype == np.float32 else {"y": ReferenceEvaluator(model).run(None, feeds)[0]}
    check_every_level(model, feeds, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("image, block, attributes", [
    ([10], [3], {"strides": [2]}), ([4, 4, 5], [2, 2, 3], {"pads": [0, 1, 0, 1, 0, 1]})])
def test_col2im_other_ranks_match_the_reference(image, block, attributes):
    model, feeds = _model(image, block, **attributes)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    check_every_level(model, feeds, {"y": want}, rtol=1e-6, atol=1e-6)


def test_col2im_bad_shapes_are_shape_errors():
    model, feeds = _model([6, 6], [2, 2], symbolic=True, strides=[2, 2])
    compiled = tonnx.load(model, opt_level=0)
    with pytest.raises(ta.ShapeError, match="Col2Im.*blocks"):
        compiled.run({"x": feeds["x"][:, :, :-1]})
    with pytest.raises(ta.ShapeError, match="Col2Im.*C \\* 4 rows"):
        compiled.run({"x": feeds["x"][:, :-1, :]})
