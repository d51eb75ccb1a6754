"""The ONNX backend node tests (``onnx.backend.test.case.node``) through tensoralg.onnx.

Every case whose ops are all supported runs at opt level 0 and is compared with the expected
outputs that onnx ships; the case either passes or is named in SKIPS with the reason. The
per-op pass count is printed by ``test_node_case_summary`` (run with ``-s``).
"""
from __future__ import annotations

import collections
import dataclasses
import fnmatch
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402
from onnx.backend.test.case import node as node_cases  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

# Test names (fnmatch patterns) we skip, each with the reason.
SKIPS = {
    # Element types NumPy has no dtype for (ml_dtypes float8/int4/bfloat16...) and strings:
    # load raises UnsupportedError naming the type.
    "test_cast*FLOAT8*": "float8 element types are not supported",
    "test_cast*FLOAT4E2M1*": "float4 element types are not supported",
    "test_cast*INT4*": "int4/uint4 element types are not supported",
    "test_cast*INT2*": "int2/uint2 element types are not supported",
    "test_cast*BFLOAT16*": "bfloat16 is not supported",
    "test_cast*STRING*": "string tensors are not supported",
    "test_cast*e8m0*": "float8 e8m0 is not supported",
    "test_equal_string*": "string tensors are not supported",
    "test_*quantizelinear_e4m3*": "float8 element types are not supported",
    "test_*quantizelinear_e5m2*": "float8 element types are not supported",
    "test_*quantizelinear_*int4*": "int4/uint4 element types are not supported",
    "test_*quantizelinear_*int2*": "int2/uint2 element types are not supported",
    "test_*quantizelinear_float4e2m1*": "float4 element types are not supported",
    # Non-tensor graph values.
    "test_identity_sequence": "sequence values are not supported",
    "test_identity_opt": "optional values are not supported",
    # Training-mode semantics: the importer is for inference (UnsupportedError at load/run).
    "test_training_dropout*": "Dropout with training_mode=True",
    # Added with Conv/pooling/normalisation/Einsum/Expand/GatherND (tests/test_onnx_ops_extra.py).
    "test_*bfloat16*": "bfloat16 is not supported",
    "test_*_bf16*": "bfloat16 is not supported",
    # Resize: every mode, antialiased too, is supported (tests/test_onnx_ops_coverage.py).
    # If: branches whose outputs are sequences or optionals.
    "test_if_seq": "sequence values are not supported",
    "test_if_opt": "optional values are not supported",
    # Loop: loops that carry sequences or optionals (an embedding bag's are recognised apart).
    "test_loop13_seq": "sequence values are not supported",
    "test_loop16_seq_none": "optional values are not supported",
}

# Cases whose expected outputs (from onnx's reference implementation) differ from onnxruntime's,
# compared with onnxruntime instead, each with the reason.
ONNXRUNTIME_ORACLE = {
    "test_maxunpool_export_with_output_shape":
        "the reference scatters into the inferred shape and pads that into output_shape; "
        "onnxruntime (and tensoralg) read the indices as flat positions in output_shape, as "
        "MaxPool's Indices of an input of that shape are",
    "test_resize_downsample_scales_linear_align_corners":
        "align_corners divides by the fractional output size scale * in - 1 in the reference, "
        "by the integer output size - 1 in onnxruntime (and tensoralg)",
    "test_resize_downsample_scales_cubic_align_corners":
        "align_corners divides by the fractional output size scale * in - 1 in the reference, "
        "by the integer output size - 1 in onnxruntime (and tensoralg)",
}


# Random draws: the expected values are one generator's stream (NumPy's legacy seeding), and
# tensoralg draws from PCG64 (distributions: tests/test_onnx_sampling.py). These cases are held
# to their outputs' dtypes, shapes and the set of values the expected output takes.
RANDOM_CASES = ("test_bernoulli*",)


def _skip_reason(name: str) -> str | None:
    for pattern, reason in SKIPS.items():
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


def _cases() -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    supported = set(tonnx.supported_ops())
    return [_at_least_opset_11(c) for c in cases
            if {n.op_type for n in c.model.graph.node} <= supported]


def _at_least_opset_11(case):
    """The importer takes opsets 11 and later and tells users to convert older models with
    onnx.version_converter; the few cases generated at an older opset (Not's, at opset 1) are
    converted the same way."""
    opset = max((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")),
                default=11)
    if opset >= 11:
        return case
    from onnx import version_converter

    return dataclasses.replace(case, model=version_converter.convert_version(case.model, 11))


CASES = _cases()


def _array(value):
    return numpy_helper.to_array(value) if hasattr(value, "data_type") else np.asarray(value)


def _label(case) -> str:
    ops = sorted({n.op_type for n in case.model.graph.node})
    return ops[0] if len(ops) == 1 else "expanded:" + case.model.graph.node[-1].op_type


def run_case(case, opt_level: int = 0, repeat: int = 1) -> None:
    """Load ``case.model`` and compare every data set with onnx's outputs (each data set run
    ``repeat`` times: at level 3 the third run goes through the static plan), or with
    onnxruntime's for the cases of ``ONNXRUNTIME_ORACLE``."""
    model = tonnx.load(case.model, opt_level=opt_level)
    for inputs, outputs in case.data_sets:
        feeds = {v.name: _array(x) for v, x in zip(model.inputs, inputs)}
        if case.name in ONNXRUNTIME_ORACLE:
            outputs = _onnxruntime_outputs(case.model, feeds)
        for _ in range(repeat):
            _compare(model, feeds, outputs, case)


def _onnxruntime_outputs(model, feeds) -> list:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _compare(model, feeds, outputs, case) -> None:
    got = model.run(feeds)
    for info, expected in zip(model.outputs, outputs):
        expected = _array(expected)
        actual = got[info.name]
        assert actual.dtype == expected.dtype, f"{info.name}: dtype {actual.dtype}"
        assert actual.shape == expected.shape, f"{info.name}: shape {actual.shape}"
        if any(fnmatch.fnmatchcase(case.name, p) for p in RANDOM_CASES):
            assert set(np.unique(actual)) <= set(np.unique(expected)) | {0, 1}, info.name
            continue
        if expected.dtype.kind == "f":
            # float16 results are computed in float32 and rounded once per node; onnx's
            # reference rounds inside a node too (a softmax's sum), so they may differ by one
            # float16 unit in the last place (2^-10 relative), above 1e-4.
            rtol = 2e-3 if expected.dtype == np.float16 else 1e-4
            np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                       rtol=max(case.rtol, rtol), atol=max(case.atol, 1e-6))
        else:
            np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case):
    reason = _skip_reason(case.name)
    if reason is not None:
        # A skipped case must fail with a clear tensoralg error, never pass silently or crash.
        with pytest.raises(ta.TensorAlgebraError):
            run_case(case)
        pytest.skip(reason)
    run_case(case)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_static_plan(case):
    """Level 3, three runs per data set: the second records the static plan, the third uses it;
    then runs on new values, through the plan."""
    if _skip_reason(case.name) is not None:
        pytest.skip(_skip_reason(case.name))
    run_case(case, opt_level=3, repeat=3)
    if any(fnmatch.fnmatchcase(case.name, p) for p in RANDOM_CASES):
        return          # two models draw different values
    # New float values, same shapes: the plan must not have baked any input value in.
    fast, reference = tonnx.load(case.model, opt_level=3), tonnx.load(case.model, opt_level=0)
    rng = np.random.default_rng(0)
    for inputs, _ in case.data_sets:
        feeds = {v.name: _array(x) for v, x in zip(fast.inputs, inputs)}
        for _ in range(2):
            fast.run(feeds)
        changed = {name: (a * rng.uniform(0.5, 1.5, a.shape)).astype(a.dtype)
                   if a.dtype.kind == "f" else a for name, a in feeds.items()}
        expected = reference.run(changed)
        for name, actual in fast.run(changed).items():
            np.testing.assert_allclose(actual, expected[name], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_node_case_summary(capsys):
    """Print the pass count per op; every case is a pass or a listed skip."""
    counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    unexpected = []
    for case in CASES:
        row = counts[_label(case)]
        row[2] += 1
        if _skip_reason(case.name) is not None:
            row[1] += 1
            continue
        try:
            run_case(case)
            row[0] += 1
        except Exception as err:  # noqa: BLE001 - collected and reported below
            unexpected.append(f"{case.name}: {type(err).__name__}: {err}")
    with capsys.disabled():
        print("\nONNX node tests: op, passed, skipped (listed), total")
        for label, (passed, skipped, total) in sorted(counts.items()):
            print(f"  {label:32s} {passed:4d} {skipped:4d} {total:4d}")
        print(f"  {'all':32s} {sum(r[0] for r in counts.values()):4d} "
              f"{sum(r[1] for r in counts.values()):4d} {len(CASES):4d}")
    assert not unexpected, "\n".join(unexpected)


def test_every_supported_op_has_node_cases():
    covered = {n.op_type for c in CASES for n in c.model.graph.node}
    assert {"MatMul", "Gemm", "Softmax", "ReduceMax", "Gather", "Slice"} <= covered
