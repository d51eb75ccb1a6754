"""GridSample (``onnx/ops/grid_sample.py``) against onnxruntime: every mode, padding and
``align_corners``, on grids that reach well past the image (so that clamping, reflection and
zero padding all act), at every opt level (level 3 three times, for the static plan); and the
errors bad inputs get."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402


def _model(x, grid, opset, **attributes):
    out = [x.shape[0], x.shape[1], *grid.shape[1:-1]]
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    return onnx_model([helper.make_node("GridSample", ["x", "grid"], ["y"], **attributes)],
                      {"x": x, "grid": grid}, [("y", elem, out)], opset=opset)


def _check(model, feeds, rtol=1e-5, atol=1e-5):
    check_every_level(model, feeds, rtol=rtol, atol=atol)


def _grid(rng, shape, reach=1.6):
    """Coordinates in [-reach, reach], with exact pixel centres and halves among them."""
    grid = rng.uniform(-reach, reach, shape).astype(np.float32)
    grid.reshape(-1)[::5] = np.round(grid.reshape(-1)[::5] * 8) / 8
    return grid


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_opset_16_matches_onnxruntime(mode, padding_mode, align_corners):
    rng = np.random.default_rng(hash((mode, padding_mode, align_corners)) % 2 ** 32)
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    grid = _grid(rng, (2, 5, 6, 2))
    model = _model(x, grid, 16, mode=mode, padding_mode=padding_mode,
                   align_corners=align_corners)
    _check(model, {"x": x, "grid": grid})


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_opset_20_names_and_float64(mode):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 6, 5))
    grid = _grid(rng, (1, 8, 3, 2)).astype(np.float64)
    model = _model(x, grid, 20, mode=mode, padding_mode="border")
    _check(model, {"x": x, "grid": grid}, rtol=1e-9, atol=1e-9)


def test_volumetric_opset_20():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 4, 5, 3)).astype(np.float32)
    grid = _grid(rng, (2, 3, 4, 2, 3))
    for mode in ("linear", "nearest"):
        _check(_model(x, grid, 20, mode=mode, padding_mode="zeros"), {"x": x, "grid": grid})


def test_an_identity_grid_gives_the_input_back():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 4, 6)).astype(np.float32)
    ys, xs = np.meshgrid(np.linspace(-1, 1, 4), np.linspace(-1, 1, 6), indexing="ij")
    grid = np.stack([xs, ys], axis=-1)[None].astype(np.float32)
    got = tonnx.load(_model(x, grid, 16, align_corners=1)).run({"x": x, "grid": grid})["y"]
    np.testing.assert_allclose(got, x, rtol=1e-6, atol=1e-6)


def test_bad_grid_samples_get_clear_errors():
    x = np.ones((1, 1, 3, 3), np.float32)
    grid = np.zeros((1, 2, 2, 2), np.float32)
    with pytest.raises(ta.UnsupportedError, match="mode 'linear'"):
        tonnx.load(_model(x, grid, 16, mode="linear"), opt_level=0).run({"x": x, "grid": grid})
    bad = grid.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ta.InputError, match="NaN"):
        tonnx.load(_model(x, grid, 16), opt_level=0).run({"x": x, "grid": bad})
    from tensoralg.onnx.ops.grid_sample import grid_sample
    from tensoralg.onnx.ops.kernels import KernelSet, NodeContext

    node = NodeContext("n", "GridSample", ("x", "grid"), ("y",), 16, KernelSet("llvm"))
    with pytest.raises(ta.ShapeError, match="must be"):
        grid_sample(node, x, np.zeros((1, 2, 2, 3), np.float32))
    with pytest.raises(ta.UnsupportedError, match="padding_mode"):
        grid_sample(node, x, grid, padding_mode="wrap")
    empty = grid_sample(node, x, np.zeros((1, 0, 2, 2), np.float32))
    assert empty.shape == (1, 1, 0, 2)
    assert TensorProto.FLOAT == helper.np_dtype_to_tensor_dtype(empty.dtype)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_taps_gathered_from_the_planes_match_the_sampling_matrix(mode, dtype):
    # 2-D (1, 4 or 16 taps a point) and 3-D linear (8) gather each image's taps from its NCHW
    # planes; 3-D cubic (64 taps a point) keeps the CSR contraction. Both against the
    # matrix route, image by image with different grids, and zero padding's masked taps.
    from tensoralg.onnx.ops import grid_sample as gs

    rng = np.random.default_rng(6)
    for x_shape, grid_shape in (((3, 5, 7, 9), (3, 4, 11, 2)),
                                ((2, 2, 4, 5, 3), (2, 3, 4, 2, 3))):
        x = rng.standard_normal(x_shape).astype(dtype)
        grid = _grid(rng, grid_shape).astype(dtype)
        sizes, points = x.shape[2:], int(np.prod(grid.shape[1:-1]))
        matrix = gs.sampling_matrix(grid, sizes, mode, "zeros", False)
        columns = np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])
        want = np.moveaxis((matrix @ columns).reshape(x.shape[0], points, x.shape[1]), -1, 1)
        got = gs.sampled_by_taps(x, grid, mode, "zeros", False)
        if mode == "cubic" and len(sizes) == 3:
            assert got is None
            continue
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode, route", [("bilinear", "computed in a generated kernel"),
                                         ("bicubic", "gathered from the NCHW planes")])
def test_the_ops_routes(mode, route):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    grid = _grid(rng, (2, 5, 5, 2))
    model = tonnx.load(_model(x, grid, 16, mode=mode), opt_level=3)
    for _ in range(3):
        model.run({"x": x, "grid": grid})
    assert route in str(model.profile({"x": x, "grid": grid}))


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
def test_points_far_outside_read_as_outside_points(mode, padding_mode):
    # finite but past an int64 index: as onnxruntime, no warning, no garbage index
    import warnings

    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    grid = _grid(rng, (1, 3, 4, 2))
    far = grid.copy()
    far[0, 0, :3] = [[1e30, 0.0], [-1e30, 0.5], [0.0, 3e20]]
    near = grid.copy()
    near[0, 0, :3] = [[50.0, 0.0], [-50.0, 0.5], [0.0, 50.0]]      # outside all the same
    model = _model(x, grid, 16, mode=mode, padding_mode=padding_mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = tonnx.load(model).run({"x": x, "grid": far})["y"]
    want = tonnx.load(model).run({"x": x, "grid": near})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("padding", ["zeros", "border"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_bilinear_kernel_is_the_gathered_route_to_the_bit(padding, align_corners, dtype):
    # coordinates computed in the kernel exactly as in NumPy, corners summed in one order
    from tensoralg import program
    from tensoralg.onnx.ops import grid_sample as gs

    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 4, 7, 9)).astype(dtype)
    grid = _grid(rng, (3, 6, 37, 2), reach=1.3).astype(dtype)   # 222 points: a masked tail
    grid[0, 0, :4] = [[1e30, 0.0], [-1e30, 0.5], [0.0, 3e9], [1e12, -1e12]]   # far outside
    want = gs.sampled_by_taps(x, grid, "linear", padding, align_corners)
    out = np.empty_like(want)
    program.grid_sample_call(x, grid, out, align_corners, padding)()
    np.testing.assert_array_equal(out, want)
