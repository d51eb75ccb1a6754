"""ONNX models on the cuda backend (``tensoralg/onnx/plan/device_executor.py``), checked on the CPU
emulator of the GPU (``tensoralg/gpu/emulate.py``) against the llvm backend and onnxruntime:
kernels launch on the device, values stay there between them, and every copy between host and
device, and every node that runs on the host, shows in the plan. On a machine with a GPU the
last tests run the same models on it (``benchmarks/gpu_check.sh``).
"""
from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest
from conftest import onnxruntime_outputs
from onnx import TensorProto, helper, numpy_helper

import tensoralg as ta
import tensoralg.gpu as gpu
import tensoralg.onnx as tonnx
from tensoralg.gpu.context import GpuContext

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
F32 = TensorProto.FLOAT


@pytest.fixture(scope="module")
def emulator():
    from tensoralg.gpu.emulate import EmulatedDriver

    return GpuContext(EmulatedDriver())


def _model(nodes, inputs, outputs, weights, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def mlp(rng, batch=16):
    """Gemm (64x32: as large as the CPU would hand to BLAS) -> Relu -> Gemm (transB)."""
    weights = {"W1": rng.standard_normal((64, 32)).astype(np.float32),
               "b1": rng.standard_normal(32).astype(np.float32),
               "W2": rng.standard_normal((5, 32)).astype(np.float32),
               "b2": rng.standard_normal(5).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], name="fc2", transB=1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, ["N", 64])],
                   [helper.make_tensor_value_info("y", F32, ["N", 5])], weights)
    return model, {"x": rng.standard_normal((batch, 64)).astype(np.float32)}


def bag(rng, reduce="ReduceSum"):
    """Gather(table, ids) -> ReduceSum/ReduceMean over the bag -> Gemm -> Relu."""
    weights = {"T": rng.standard_normal((30, 6)).astype(np.float32),
               "axes": np.array([1], np.int64),
               "W": rng.standard_normal((6, 4)).astype(np.float32),
               "b": rng.standard_normal(4).astype(np.float32)}
    nodes = [helper.make_node("Gather", ["T", "ids"], ["e"], name="gather"),
             helper.make_node(reduce, ["e", "axes"], ["pooled"], name="pool", keepdims=0),
             helper.make_node("Gemm", ["pooled", "W", "b"], ["h"], name="fc"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    model = _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 3])],
                   [helper.make_tensor_value_info("y", F32, ["N", 4])], weights, opset=18)
    return model, {"ids": rng.integers(0, 30, (7, 3)).astype(np.int64)}


def reshaped(rng):
    """MatMul -> Reshape -> Transpose -> Reshape -> Relu -> MatMul: movement between kernels."""
    weights = {"W1": rng.standard_normal((6, 8)).astype(np.float32),
               "W2": rng.standard_normal((8, 3)).astype(np.float32),
               "s3": np.array([4, 2, 4], np.int64), "s2": np.array([4, 8], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"], name="mm1"),
             helper.make_node("Reshape", ["a", "s3"], ["a3"], name="to3"),
             helper.make_node("Transpose", ["a3"], ["t3"], name="swap", perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t3", "s2"], ["t2"], name="to2"),
             helper.make_node("Relu", ["t2"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "W2"], ["y"], name="mm2")]
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, [4, 6])],
                   [helper.make_tensor_value_info("y", F32, [4, 3])], weights)
    return model, {"x": rng.standard_normal((4, 6)).astype(np.float32)}


def sliced(rng):
    """Gemm -> Slice (NumPy indexing: a host step) -> Relu -> Gemm."""
    weights = {"W1": rng.standard_normal((5, 8)).astype(np.float32),
               "b1": rng.standard_normal(8).astype(np.float32),
               "W2": rng.standard_normal((4, 2)).astype(np.float32),
               "starts": np.array([2], np.int64), "ends": np.array([6], np.int64),
               "axes": np.array([1], np.int64)}
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1"),
             helper.make_node("Slice", ["h", "starts", "ends", "axes"], ["s"], name="cut"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "W2"], ["y"], name="fc2")]
    model = _model(nodes, [helper.make_tensor_value_info("x", F32, ["N", 5])],
                   [helper.make_tensor_value_info("y", F32, ["N", 2])], weights)
    return model, {"x": rng.standard_normal((3, 5)).astype(np.float32)}


def check_outputs(model, feeds, got, opt_level):
    """``got`` (a cuda run's outputs) against the llvm backend and, where it is installed
    (not always on the GPU machine, which may be offline), onnxruntime."""
    want = tonnx.load(model, opt_level=opt_level).run(feeds)
    try:
        oracle = onnxruntime_outputs(model, feeds)
    except ModuleNotFoundError:
        oracle = list(want.values())
    assert list(got) == list(want)
    for (name, value), reference in zip(want.items(), oracle):
        assert isinstance(got[name], np.ndarray) and got[name].dtype == value.dtype
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(got[name], reference, rtol=1e-4, atol=1e-4, err_msg=name)


def places(model):
    """Step name -> its placement in the latest run."""
    executor = model.executor
    return {step.node.name: executor.places[k] for k, step in enumerate(executor.steps)}


@needs_gxx
@pytest.mark.parametrize("opt_level", [0, 2, 3])
def test_mlp_runs_on_the_device_with_one_copy_in_and_one_out(emulator, opt_level):
    model, feeds = mlp(np.random.default_rng(0))
    compiled = tonnx.load(model, opt_level=opt_level, backend="cuda", device=emulator)
    check_outputs(model, feeds, compiled.run(feeds), opt_level)
    device = compiled.executor.device
    constants = list(device.constant_copies)
    launches = device.launches
    got = compiled.run(feeds)          # the second run: constants are on the device already
    check_outputs(model, feeds, got, opt_level)
    # fc1's product and its epilogue, Relu (fused at levels 2 and 3), fc2
    assert device.launches - launches == (4 if opt_level == 0 else 3)
    assert device.constant_copies == constants and len(constants) == 4
    steps = places(compiled)
    assert all(p.where == "device" and p.launches for p in steps.values()), steps
    copies = [c for p in steps.values() for c in p.copies]
    assert [(c.to_device, c.what) for c in copies] == [(True, "x")]
    assert [c.what for c in compiled.executor.output_copies] == ["y"]
    plan = compiled.ir()
    assert "backend cuda" in plan and "0 host step(s)" in plan and "host step (" not in plan
    assert ("static plan: not built on the cuda backend" in plan) == (opt_level == 3)
    assert all(k.backend == "cuda" for k in compiled.executor.kernels.kernels.values()
               if "A(i,k) * B" in str(k.statement))


@needs_gxx
@pytest.mark.parametrize("reduce", ["ReduceSum", "ReduceMean"])
def test_embedding_bag_runs_on_the_device(emulator, reduce):
    model, feeds = bag(np.random.default_rng(1), reduce)
    compiled = tonnx.load(model, opt_level=2, backend="cuda", device=emulator)
    for _ in range(2):
        check_outputs(model, feeds, compiled.run(feeds), 2)
    steps = places(compiled)
    executor = compiled.executor
    (step,) = [executor.places[k] for k, s in enumerate(executor.steps)
               if s.node.op_type == "EmbeddingBag"]
    # The bag matrix is built on the host from the ids (read in NumPy, as the plan says) and
    # copied over each run; the table is a constant, copied once.
    assert step.where == "device" and step.launches == 1 and step.host_inputs == ("ids",)
    assert [(c.to_device, c.what) for c in step.copies] == [(True, "host operand S (sparse)")]
    assert "host inputs read in NumPy: ids" in compiled.ir()
    assert "bag matrix in CSR" in compiled.ir()
    assert all(p.where == "device" for p in steps.values())


@needs_gxx
@pytest.mark.parametrize("opt_level", [1, 3])
def test_reshape_and_transpose_between_kernels_stay_on_the_device(emulator, opt_level):
    model, feeds = reshaped(np.random.default_rng(2))
    compiled = tonnx.load(model, opt_level=opt_level, backend="cuda", device=emulator)
    for _ in range(2):
        check_outputs(model, feeds, compiled.run(feeds), opt_level)
    steps = places(compiled)
    assert steps["to3"].where == steps["to2"].where == "device"
    assert steps["to3"].launches == 0 and steps["swap"].launches == 1
    assert all(p.where == "device" for p in steps.values()), steps
    copies = [c.what for p in steps.values() for c in p.copies]
    assert copies == ["x"]
    assert "transpose on the device" in compiled.ir()


@needs_gxx
def test_a_host_step_is_visible_with_its_copies(emulator):
    model, feeds = sliced(np.random.default_rng(3))
    compiled = tonnx.load(model, opt_level=1, backend="cuda", device=emulator)
    check_outputs(model, feeds, compiled.run(feeds), 1)
    check_outputs(model, feeds, compiled.run(feeds), 1)
    steps = places(compiled)
    cut = steps["cut"]
    assert cut.where == "host step" and "indexing" in cut.reason
    # h comes back to the host for the Slice; its result goes to the device for the Relu.
    assert [(c.to_device, c.what) for c in cut.copies] == [(False, "h")]
    assert [(c.to_device, c.what) for c in steps["relu"].copies] == [(True, "s")]
    assert steps["fc1"].where == steps["relu"].where == steps["fc2"].where == "device"
    plan = compiled.ir()
    assert "cut: Slice(h, starts, ends, axes) -> s  :  host step (CPU, llvm kernels): " \
           "indexing of a device value; 1 copy(ies) to the host (h (" in plan
    assert "1 host step(s)" in plan
    profile = compiled.profile(feeds)
    assert any(row.node == "cut" and row.plan.startswith("host step") for row in profile.rows)
    assert profile.memory is None and any("device:" in note for note in profile.notes)


@needs_gxx
def test_inference_session_takes_the_cuda_backend(emulator):
    model, feeds = mlp(np.random.default_rng(4), batch=3)
    session = tonnx.InferenceSession(model, backend="cuda", device=emulator)
    (got,) = session.run(None, feeds)
    np.testing.assert_allclose(got, onnxruntime_outputs(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_unknown_backends_and_a_device_without_cuda_are_refused():
    model, _ = mlp(np.random.default_rng(5))
    with pytest.raises(ta.UnsupportedError, match=r"backend 'metal'.*llvm, c, cuda"):
        tonnx.load(model, backend="metal")
    with pytest.raises(ta.UnsupportedError, match="device= is for backend='cuda'"):
        tonnx.load(model, backend="llvm", device=object())


@pytest.fixture
def no_gpu_context(monkeypatch):
    """The process's GPU context forgotten, so that loading opens one again."""
    import tensoralg.gpu.context as context

    monkeypatch.setattr(context, "_context", None)
    monkeypatch.setattr(context, "_failure", None)
    return monkeypatch


def _missing(module):
    def make():
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)
    return make


def test_without_pycuda_or_cuda_python_the_error_says_so(no_gpu_context):
    import tensoralg.gpu.driver as driver

    no_gpu_context.setattr(driver, "PycudaDriver", _missing("pycuda"))
    no_gpu_context.setattr(driver, "CudaPythonDriver", _missing("cuda"))
    model, _ = mlp(np.random.default_rng(6))
    with pytest.raises(ta.UnsupportedError,
                       match="pycuda is not installed; cuda-python is not installed"):
        tonnx.load(model, backend="cuda")


def test_without_a_visible_gpu_the_error_says_so(no_gpu_context):
    import tensoralg.gpu.driver as driver

    def no_device():
        raise RuntimeError("cuInit failed: no CUDA-capable device is detected")

    no_gpu_context.setattr(driver, "PycudaDriver", _missing("pycuda"))
    no_gpu_context.setattr(driver, "CudaPythonDriver", no_device)
    model, _ = mlp(np.random.default_rng(7))
    with pytest.raises(ta.UnsupportedError, match="cannot reach a GPU: cuInit failed: no "
                                                  "CUDA-capable device"):
        tonnx.load(model, backend="cuda")


REASON = gpu.available()
on_gpu = pytest.mark.skipif(REASON is not None, reason=f"no GPU: {REASON}")


@on_gpu
@pytest.mark.parametrize("build", [mlp, bag, reshaped, sliced])
def test_models_on_the_gpu(build):
    model, feeds = build(np.random.default_rng(8))
    compiled = tonnx.load(model, opt_level=2, backend="cuda")
    for _ in range(2):
        check_outputs(model, feeds, compiled.run(feeds), 2)
    assert compiled.executor.device.launches > 0


@needs_gxx
def test_device_values_answer_what_the_ops_ask_and_refuse_the_rest(emulator):
    from tensoralg.onnx.ops.kernels import KernelSet
    from tensoralg.onnx.plan.device_values import Device, DeviceValue, HostNeeded

    device = Device(emulator)
    device.kernels = KernelSet("cuda", device=device)
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    da, db = (DeviceValue(device.upload(x, name), device) for name, x in (("a", a), ("b", b)))
    # .T is a view that a product reads transposed; np.matmul is one kernel
    np.testing.assert_allclose(device.download(np.matmul(da, db.T), "y"), a @ b.T, rtol=1e-12)
    np.testing.assert_allclose(device.download(np.matmul(db.T.T, da.T), "y"), b @ a.T,
                               rtol=1e-12)
    np.testing.assert_allclose(device.download(np.matmul(da.T, a), "y"), a.T @ a, rtol=1e-12)
    t = rng.standard_normal((2, 3, 4))
    dt = DeviceValue(device.upload(t, "t"), device)
    np.testing.assert_array_equal(device.download(np.transpose(dt, (2, 0, 1)), "y"),
                                  np.transpose(t, (2, 0, 1)))
    assert np.expand_dims(dt, (0, 2)).shape == (1, 2, 1, 3, 4)
    assert np.squeeze(dt.reshape(1, 6, 1, 4)).shape == (6, 4)
    assert np.reshape(dt, (-1, 4)).shape == (6, 4) and dt.reshape(4, -1).shape == (4, 6)
    assert dt.astype(np.float64, copy=False) is dt
    for refused in (lambda: np.asarray(dt), lambda: dt[0], lambda: dt + 1, lambda: dt.max(),
                    lambda: np.concatenate([dt, dt]), lambda: np.exp(dt),
                    lambda: dt.astype(np.float32), lambda: np.ascontiguousarray(dt)):
        with pytest.raises(HostNeeded):
            refused()
    assert not hasattr(dt, "__array_interface__")
    with pytest.raises(ValueError):
        dt.reshape(5, 5)


@needs_gxx
@pytest.mark.parametrize("batch", [3, 16])
def test_sparse_weights_run_as_sparse_kernels_on_the_device(emulator, batch):
    model, feeds = mlp(np.random.default_rng(10), batch)
    init = model.graph.initializer[0]            # W1: 85% zeros, a sparse weight at level 3
    weight = numpy_helper.to_array(init).copy()
    weight[np.random.default_rng(11).random(weight.shape) < 0.85] = 0
    init.CopyFrom(numpy_helper.from_array(weight, init.name))
    compiled = tonnx.load(model, opt_level=3, backend="cuda", device=emulator)
    for _ in range(2):
        check_outputs(model, feeds, compiled.run(feeds), 3)
    steps = places(compiled)
    assert all(p.where == "device" for p in steps.values()), steps
    assert [c.what for p in steps.values() for c in p.copies] == ["x"]
    assert "[B: csc" in compiled.ir()            # the CSC form, whatever the batch
    assert any("sparse" in c.what for c in compiled.executor.device.constant_copies)
