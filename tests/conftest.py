"""Shared fixtures of the test suite: a seeded rng, random operands, densify, real matrices.

The kernel cache of the whole session lives in a private temporary directory: the environment
variable is set here, at import time, before any test can make tensoralg create its cache, so
tests never read or pollute the user's real cache (``~/.cache/tensoralg``).
"""
from __future__ import annotations

import atexit
import os
import pathlib
import shutil
import tempfile

_SESSION_CACHE = tempfile.mkdtemp(prefix="tensoralg-test-cache-")
os.environ["TENSORALG_CACHE_DIR"] = _SESSION_CACHE
atexit.register(shutil.rmtree, _SESSION_CACHE, True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import tensoralg as ta  # noqa: E402

try:  # register hypothesis profiles once for the whole suite
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "default", max_examples=60, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile(
        "ci", max_examples=200, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile(   # local bug hunting: fresh random examples every run
        "deep", max_examples=1000, deadline=None, derandomize=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass

SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
BUNDLED = ("bcspwr10", "lp_ship04l", "ca-GrQc", "collegemsg")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running tests (deselect with -m 'not slow')")


# ---------------------------------------------------------------------------------------------
# helpers (plain functions, importable as `from conftest import ...`)


def densify(x) -> np.ndarray:
    """Any operand or result as a dense numpy array (scalars as 0-d arrays)."""
    if isinstance(x, ta.Tensor):
        return np.asarray(x.to_numpy())
    if sp.issparse(x):
        return np.asarray(x.toarray())
    if hasattr(x, "todense") and not isinstance(x, np.ndarray):  # pydata sparse
        return np.asarray(x.todense())
    return np.asarray(x)


def random_dense(shape, density, rng, dtype=np.float64) -> np.ndarray:
    """A dense array with about ``density`` of its entries nonzero.

    ``density`` may be a float in [0, 1] or the string "one" (exactly one nonzero when possible).
    Values avoid 0 so that the pattern is exactly what was drawn; integers are small.
    """
    shape = tuple(shape)
    size = int(np.prod(shape)) if shape else 1
    out = np.zeros(size, dtype=dtype)
    if size == 0:
        return out.reshape(shape)
    if density == "one":
        mask = np.zeros(size, dtype=bool)
        mask[rng.integers(size)] = True
    else:
        mask = rng.random(size) < density
    count = int(mask.sum())
    if np.dtype(dtype).kind in "iu":
        values = rng.integers(1, 5, size=count) * rng.choice([-1, 1], size=count)
    else:
        values = rng.uniform(0.5, 2.0, size=count) * rng.choice([-1.0, 1.0], size=count)
    out[mask] = values.astype(dtype)
    return out.reshape(shape)


def random_operand(shape, density, fmt, rng, dtype=np.float64):
    """A random operand of ``shape``: dense numpy for fmt None / all-dense, else a ta.Tensor."""
    a = random_dense(shape, density, rng, dtype)
    if fmt is None:
        return a
    if len(shape) == 0:
        return a
    return ta.Tensor.from_numpy(a, format=fmt)


def shared_data_path(name: str) -> pathlib.Path | None:
    """Path of a file of ../shared/data (matrices or tensors), or None when it is not there."""
    for sub, ext in (("matrices", ".mtx.gz"), ("tensors", ".tns.gz")):
        path = SHARED_DATA / sub / f"{name}{ext}"
        if path.exists():
            return path
    return None


_REAL_CACHE: dict[str, ta.Tensor] = {}


def real_matrix(name: str) -> ta.Tensor:
    """A real matrix/tensor as a ta.Tensor: bundled via tensoralg.data, else ../shared/data.

    Skips the test when the file is not available.
    """
    if name in _REAL_CACHE:
        return _REAL_CACHE[name]
    if name in BUNDLED:
        from tensoralg.data import load

        tensor = load(name)
    else:
        path = shared_data_path(name)
        if path is None:
            pytest.skip(f"{name} is not available (no ../shared/data)")
        tensor = ta.read(str(path))
    _REAL_CACHE[name] = tensor
    return tensor


def real_scipy(name: str) -> sp.csr_array:
    """A real matrix as a canonical scipy CSR array (float64)."""
    t = real_matrix(name)
    m = sp.csr_array(t.to_scipy())
    m.sum_duplicates()
    m.sort_indices()
    return m.astype(np.float64)


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240601)


@pytest.fixture
def session_cache_dir() -> pathlib.Path:
    return pathlib.Path(_SESSION_CACHE)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/* from the current compiler output")


@pytest.fixture
def golden(request):
    """Compare text with tests/golden/<name>; ``--update-golden`` rewrites the file instead."""
    directory = pathlib.Path(__file__).parent / "golden"
    update = request.config.getoption("--update-golden")

    class Golden:
        def check(self, name: str, text: str) -> None:
            path = directory / name
            if update:
                directory.mkdir(exist_ok=True)
                path.write_text(text)
                return
            assert path.exists(), f"no golden file {path}; run pytest --update-golden"
            assert text == path.read_text(), (
                f"{name} changed; if on purpose, run pytest --update-golden and review the diff")

    return Golden()


@pytest.fixture
def two_threads():
    """Kernels bound during the test split over two threads; the count is restored after."""
    before = ta.get_num_threads()
    ta.set_num_threads(2)
    yield
    ta.set_num_threads(before)


@pytest.fixture
def counted_calls(monkeypatch):
    """The number of row ranges of every call whose rows are counted first
    (``api._counted_product``: sparse products and scheduled sums, ``lower/counted.py``)."""
    import tensoralg.api as api

    seen: list[int] = []
    original = api._counted_product

    def spy(compiled, tensors, sizes, shape, value_dtype, bounds):
        seen.append(len(bounds) - 1)
        return original(compiled, tensors, sizes, shape, value_dtype, bounds)

    monkeypatch.setattr(api, "_counted_product", spy)
    return seen


@pytest.fixture
def partial_calls(monkeypatch):
    """The number of ranges of every call split into partial outputs
    (``api._run_partials``: ``parallelize(..., reduction=partials)``)."""
    import tensoralg.api as api

    seen: list[int] = []
    original = api._run_partials

    def spy(compiled, args, bounds, output):
        seen.append(len(bounds) - 1)
        return original(compiled, args, bounds, output)

    monkeypatch.setattr(api, "_run_partials", spy)
    return seen


def split_product() -> tuple:
    """A CSR x dense product bound under two threads (two ranges) and its expected output;
    the caller sets the thread count."""
    a = sp.random(3000, 2000, density=0.2, format="csr", random_state=3)
    b = np.random.default_rng(3).standard_normal((2000, 16))
    call = ta.compile("Y(i,j) = A(i,k) * B(k,j)", formats={"A": "ds"}).bind(A=a, B=b)
    assert len(call.calls) == 2
    return call, a @ b


def split_sum_product() -> tuple:
    """A bound call whose kernel adds into its output rather than assigning it (two nests write
    ``Y``: the product and ``C``), under two threads, and its expected output."""
    a = sp.random(3000, 2000, density=0.2, format="csr", random_state=3)
    b = np.random.default_rng(3).standard_normal((2000, 16))
    c = np.random.default_rng(4).standard_normal((3000, 16))
    call = ta.compile("Y(i,j) = A(i,k) * B(k,j) + C(i,j)", formats={"A": "ds"}).bind(
        A=a, B=b, C=c)
    assert len(call.calls) == 2 and not call.overwrites
    return call, a @ b + c


def passes_in_forked_child(check) -> None:
    """Fork, run ``check()`` in the child under a 30 s alarm (a hang becomes a failure) and
    assert that it returned True there."""
    import signal

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                     # child: report, never return
        try:
            signal.alarm(30)
            os.write(write, b"1" if check() else b"0")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    result = os.read(read, 1)
    os.close(read)
    assert result == b"1", f"the child failed (status {status})"



def onnx_model(nodes, inputs: dict, outputs, constants: dict | None = None, opset: int = 17,
               shapes: dict | None = None, ir_version: int = 8):
    """A checked ONNX model of ``nodes``: its inputs typed as the arrays ``inputs`` (their
    shapes, or ``shapes[name]``, symbolic dimensions allowed), ``outputs`` as
    ``(name, element type, shape)`` and ``constants`` as initializers."""
    import onnx
    from onnx import helper, numpy_helper

    shapes = shapes or {}
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                       shapes.get(n, list(a.shape))) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, elem, shape) for n, elem, shape in outputs],
        [numpy_helper.from_array(a, n) for n, a in (constants or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    return model


def onnxruntime_outputs(model, feeds: dict) -> list[np.ndarray]:
    """onnxruntime's outputs of ``model`` on ``feeds``, one CPU thread: the ONNX tests' oracle."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check_every_level(model, feeds: dict, expected: dict | None = None, rtol: float = 1e-5,
                      atol: float = 1e-6, levels=(0, 1, 2, 3)):
    """``model``'s outputs at every opt level (level 3 run three times, so that its static plan
    runs) against ``expected`` (by name; onnxruntime's when None): same dtypes and shapes,
    floats within ``rtol``/``atol``, other values equal. Returns the last compiled model."""
    import tensoralg.onnx as tonnx

    if expected is None:
        expected = dict(zip([o.name for o in model.graph.output],
                            onnxruntime_outputs(model, feeds)))
    compiled = None
    for level in levels:
        compiled = tonnx.load(model, opt_level=level)
        for run in range(3 if level == 3 else 1):
            got = compiled.run(feeds)
            for name, want in expected.items():
                where = f"{name} at opt level {level}, run {run + 1}"
                assert got[name].dtype == want.dtype and got[name].shape == want.shape, \
                    (where, got[name].dtype, want.dtype, got[name].shape, want.shape)
                if want.dtype.kind in "fc":
                    np.testing.assert_allclose(got[name], want, rtol=rtol, atol=atol,
                                               err_msg=where)
                else:
                    np.testing.assert_array_equal(got[name], want, err_msg=where)
    return compiled


def planned_model(model, feeds: dict):
    """``model`` loaded at level 3 and run until its static plan is built (level 3 plans on
    the second run and uses the plan from the third)."""
    import tensoralg.onnx as tonnx

    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run(feeds)
    assert compiled.specialiser.latest() is not None
    return compiled
