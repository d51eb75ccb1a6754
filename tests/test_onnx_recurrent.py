"""LSTM, GRU and RNN through tensoralg.onnx (``tensoralg/onnx/ops/recurrent.py``), compared with
onnxruntime on one-node models built with onnx.helper: directions, layouts, optional inputs,
GRU's linear_before_reset, sequence_lens, activations with alpha/beta, clip, float64, omitted
outputs, empty batches and sequences, bad input; and PyTorch exports of nn.LSTM and nn.GRU.

At opt level 3 each model runs four times: the second run records the static plan, the third
(on other inputs, so that a buffer bound to stale data shows) and the fourth run through it, and
the node must be the plan's ``recurrent kernels`` step (``onnx/plan/recurrent_steps.py``) unless
it cannot be (sequence_lens fed as an input, float16): then a generic step.

onnxruntime has no float64 or float16 kernels for these ops (such models are compared with its
float32 run); its LSTM refuses layout=1 (compared through layout 0 and transposes); it returns
zeros for Y_h/Y_c of a zero-length sequence where tensoralg returns the initial state; and it
aborts the process on an LSTM or GRU with batch 0 or zero steps (only shapes and values that
need no oracle are checked there).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import onnxruntime_outputs  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.onnx.plan import recurrent_steps  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ("Y", "Y_h", "Y_c"), "GRU": ("Y", "Y_h"), "RNN": ("Y", "Y_h")}
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
FEEDS = ("X", "initial_h", "initial_c")     # the rest are initializers by default
FED_LENGTHS = FEEDS + ("sequence_lens",)
STATIC = "recurrent kernels"                  # the kind of the static plan's step


def _inputs(op_type, steps=4, batch=3, size=5, hidden=6, directions=1, layout=0, bias=True,
            lengths=None, initial=False, peepholes=False, dtype=np.float32, seed=0):
    """Random inputs of one recurrent node, by ONNX input name (None: left out)."""
    rng = np.random.default_rng(seed)
    gates = GATES[op_type]

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(dtype)

    state = (batch, directions, hidden) if layout else (directions, batch, hidden)
    values = {
        "X": normal(*((batch, steps, size) if layout else (steps, batch, size))),
        "W": normal(directions, gates * hidden, size),
        "R": normal(directions, gates * hidden, hidden),
        "B": normal(directions, 2 * gates * hidden) if bias else None,
        "sequence_lens": None if lengths is None else np.asarray(lengths, np.int32),
        "initial_h": normal(*state) if initial else None,
        "initial_c": normal(*state) if initial and op_type == "LSTM" else None,
        "P": normal(directions, 3 * hidden) if peepholes and op_type == "LSTM" else None,
    }
    return {name: values[name] for name in INPUTS if op_type == "LSTM" or name in INPUTS[:6]}


def _model(op_type, values, outputs=None, opset=14, fed=FEEDS, **attributes):
    """A one-node model: the inputs named in ``fed`` (X and the initial states) are graph
    inputs, the others initializers; ``outputs`` default to all of the op's (an empty name
    leaves one out)."""
    outputs = list(OUTPUTS[op_type] if outputs is None else outputs)
    attributes.setdefault("hidden_size", values["R"].shape[-1])
    names = [name if value is not None else "" for name, value in values.items()]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op_type, names, outputs, name=op_type.lower(), **attributes)
    elem = helper.np_dtype_to_tensor_dtype(values["X"].dtype)
    feeds = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype),
                                           list(v.shape))
             for n, v in values.items() if v is not None and n in fed]
    constants = [numpy_helper.from_array(v, n) for n, v in values.items()
                 if v is not None and n not in fed]
    results = [helper.make_tensor_value_info(o, elem, [None] * (4 if o == "Y" else 3))
               for o in outputs if o]
    graph = helper.make_graph([node], op_type, feeds, results, constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _feeds(values, fed=FEEDS):
    return {n: v for n, v in values.items() if v is not None and n in fed}


def _other(values, fed=FEEDS, seed=7):
    """``values`` with other random values for X and the initial states, and the lengths
    reversed when they are fed; shapes and dtypes kept."""
    rng = np.random.default_rng(seed)
    other = {n: (rng.standard_normal(v.shape) * 0.5).astype(v.dtype)
             if v is not None and n in ("X", "initial_h", "initial_c") else v
             for n, v in values.items()}
    lengths = values["sequence_lens"]
    if lengths is not None and "sequence_lens" in fed:
        other["sequence_lens"] = lengths[::-1].copy()
    return other


def _as_float32(values):
    return {n: v.astype(np.float32) if v is not None and v.dtype.kind == "f" else v
            for n, v in values.items()}


def _oracle(op_type, values, outputs, opset, names, fed=FEEDS, **attributes):
    """onnxruntime's outputs, in float32 (it has no float64 or float16 kernels for these ops)
    and in layout 0 on transposed inputs and outputs (its LSTM refuses ``layout=1``)."""
    oracle = values if values["X"].dtype == np.float32 else _as_float32(values)
    if not attributes.get("layout"):
        return onnxruntime_outputs(_model(op_type, oracle, outputs, opset, fed, **attributes),
                                   _feeds(oracle, fed))
    swapped = {n: v.swapaxes(0, 1).copy() if v is not None and n in ("X", "initial_h",
                                                                    "initial_c") else v
               for n, v in oracle.items()}
    attributes = {**attributes, "layout": 0}
    got = onnxruntime_outputs(_model(op_type, swapped, outputs, opset, fed, **attributes),
                              _feeds(swapped, fed))
    return [y.transpose(2, 0, 1, 3) if name == "Y" else y.swapaxes(0, 1)
            for name, y in zip(names, got)]


def _compare(op_type, values, opt_levels=(0, 3), outputs=None, opset=14, rtol=RTOL, atol=ATOL,
             fed=FEEDS, static=True, **attributes):
    """tensoralg's outputs at each level against onnxruntime's (in float32 for a float64
    model). Level 3 runs four times (see the module docstring), and its node must be a
    ``static`` step of the plan, or a generic one."""
    model = _model(op_type, values, outputs, opset, fed, **attributes)
    names = [o for o in (OUTPUTS[op_type] if outputs is None else outputs) if o]
    other = _other(values, fed)
    first, second = ((v, _oracle(op_type, v, outputs, opset, names, fed, **attributes))
                     for v in (values, other))
    for level in opt_levels:
        compiled = tonnx.load(model, opt_level=level)
        for run, (inputs, expected) in enumerate([first, first, second, first]
                                                 if level == 3 else [first]):
            got = compiled.run(_feeds(inputs, fed))
            assert sorted(got) == sorted(names)
            for name, want in zip(names, expected):
                where = f"{op_type} {name} at opt level {level}, run {run + 1}"
                actual = got[name]
                assert actual.dtype == values["X"].dtype, where
                assert actual.shape == want.shape, where
                np.testing.assert_allclose(actual, want, rtol=rtol, atol=atol, err_msg=where)
        if level == 3:
            _assert_plan(compiled, static)
    return compiled


def _assert_plan(compiled, static):
    """The static plan has the recurrent node as its own static step (or a generic one), and
    the printed plan says so."""
    (step,) = [s for s in compiled.specialiser.latest().steps
               if s.step.node.op_type in OUTPUTS]
    assert step.kind == (STATIC if static else "generic")
    assert (f"1 {STATIC}" in compiled.ir()) == static
    if static:      # its calls compiled into the plan's sequence, unless too many
        assert ("1 compiled sequence" in compiled.ir()) != ("from Python" in step.plan)


DIRECTIONS = ("forward", "reverse", "bidirectional")


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_and_layouts(op_type, direction, layout):
    values = _inputs(op_type, directions=2 if direction == "bidirectional" else 1,
                     layout=layout, initial=True, peepholes=True)
    _compare(op_type, values, direction=direction, layout=layout)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_without_optional_inputs(op_type):
    _compare(op_type, _inputs(op_type, bias=False))


def test_lstm_with_each_optional_input_alone():
    for option in ({"initial": True}, {"peepholes": True}):
        _compare("LSTM", _inputs("LSTM", bias=False, **option))


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(linear_before_reset, direction):
    values = _inputs("GRU", directions=2 if direction == "bidirectional" else 1, initial=True)
    _compare("GRU", values, direction=direction, linear_before_reset=linear_before_reset)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("lengths", [[4, 4, 4], [2, 2, 2], [4, 1, 3], [2, 3, 1]])
def test_sequence_lens(op_type, direction, lengths):
    """Unequal lengths: zeros in Y past each length, Y_h at the last valid step; the reverse
    direction starts at each entry's own last step."""
    values = _inputs(op_type, directions=2 if direction == "bidirectional" else 1,
                     lengths=lengths, initial=True, peepholes=True)
    _compare(op_type, values, direction=direction, linear_before_reset=1) \
        if op_type == "GRU" else _compare(op_type, values, direction=direction)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU"])
def test_sequence_lens_batch_first_and_gru_default(op_type):
    values = _inputs(op_type, directions=2, layout=1, lengths=[3, 4, 2], initial=True)
    _compare(op_type, values, direction="bidirectional", layout=1)


@pytest.mark.parametrize("fed", [FEEDS, FED_LENGTHS])
@pytest.mark.parametrize("level", [0, 3])
def test_sequence_of_length_zero_keeps_the_initial_state(fed, level):
    """An entry of length 0 gets zeros in Y and its initial state in Y_h and Y_c (onnxruntime
    returns zeros there); the other entries match onnxruntime. At level 3, in the static
    plan (the third and fourth runs), on other values at the third."""
    values = _inputs("LSTM", directions=2, lengths=[3, 0, 4], initial=True)
    other = _other(values)       # the same lengths
    model = _model("LSTM", values, fed=fed, direction="bidirectional")
    compiled = tonnx.load(model, opt_level=level)
    for inputs in [values, values, other, values] if level == 3 else [values]:
        expected = dict(zip(OUTPUTS["LSTM"], onnxruntime_outputs(model, _feeds(inputs, fed))))
        got = compiled.run(_feeds(inputs, fed))
        np.testing.assert_allclose(got["Y"], expected["Y"], rtol=RTOL, atol=ATOL)
        assert not got["Y"][:, :, 1].any()
        for name, initial in (("Y_h", "initial_h"), ("Y_c", "initial_c")):
            np.testing.assert_array_equal(got[name][:, 1], inputs[initial][:, 1])
            keep = [0, 2]
            np.testing.assert_allclose(got[name][:, keep], expected[name][:, keep],
                                       rtol=RTOL, atol=ATOL)
    if level == 3:
        _assert_plan(compiled, fed == FEEDS)


ACTIVATIONS = [
    ("LSTM", ["HardSigmoid", "Elu", "Softsign", "Sigmoid", "LeakyRelu", "Softplus"],
     [0.3, 0.7, 1.5, 0.2], [0.4]),
    ("LSTM", ["Affine", "ScaledTanh", "ThresholdedRelu", "Sigmoid", "Relu", "Tanh"],
     [0.4, 0.8, 0.1], [0.25, 1.3]),
    ("GRU", ["Sigmoid", "LeakyRelu", "HardSigmoid", "Elu"], [0.2, 0.25, 0.8], [0.55]),
    ("RNN", ["ThresholdedRelu", "ScaledTanh"], [0.1, 1.7], [0.6]),
    ("RNN", ["Softplus", "Affine"], [0.9], [-0.2]),
]


@pytest.mark.parametrize("op_type,names,alphas,betas", ACTIVATIONS,
                         ids=[f"{a[0]}-{a[1][0]}" for a in ACTIVATIONS])
def test_activations_with_alpha_and_beta(op_type, names, alphas, betas):
    values = _inputs(op_type, directions=2, initial=True)
    _compare(op_type, values, direction="bidirectional", activations=names,
             activation_alpha=alphas, activation_beta=betas)


def test_activation_defaults_and_case():
    """LeakyRelu, HardSigmoid and Elu without alpha take the ONNX ops' defaults; names are
    matched without regard to case, as onnxruntime's LSTM does."""
    values = _inputs("LSTM")
    _compare("LSTM", values, activations=["hardsigmoid", "ELU", "LeakyRelu"])


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_clip(op_type):
    """Clip bounds every gate's pre-activation, not the cell state that h reads (a large
    initial_c keeps C beyond the bound for a few steps)."""
    values = _inputs(op_type, directions=2, initial=True, peepholes=True)
    values["X"] *= 4
    if op_type == "LSTM":
        values["initial_c"] *= 8
    _compare(op_type, values, direction="bidirectional", clip=0.7)


def test_lstm_input_forget():
    values = _inputs("LSTM", directions=2, lengths=[4, 2, 3], initial=True, peepholes=True)
    _compare("LSTM", values, direction="bidirectional", input_forget=1)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_float64(op_type):
    values = _inputs(op_type, directions=2, lengths=[4, 2, 3], initial=True, peepholes=True,
                     dtype=np.float64)
    _compare(op_type, values, direction="bidirectional", rtol=1e-4, atol=1e-5)


def test_float16_computes_in_float32():
    """float16 runs generically at level 3 too (the static step takes float32 and float64)."""
    values = _inputs("GRU", directions=2, lengths=[4, 2, 3], initial=True, dtype=np.float16)
    _compare("GRU", values, direction="bidirectional", rtol=2e-3, atol=2e-3, static=False)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_opset_7(op_type):
    values = _inputs(op_type, initial=True)
    _compare(op_type, values, opset=11, direction="reverse")


@pytest.mark.parametrize("outputs", [("", "Y_h"), ("Y",), ("", "", "Y_c"), ("", "Y_h", "Y_c"),
                                     ("Y", "", "Y_c")])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("lengths", [None, [4, 2, 1]])
def test_omitted_outputs(outputs, layout, lengths):
    values = _inputs("LSTM", directions=2, layout=layout, lengths=lengths, initial=True)
    _compare("LSTM", values, outputs=outputs, direction="bidirectional", layout=layout)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_batch_of_one_and_large_sizes_use_blas(op_type):
    """Batch 1 (no batch index in the step statements), and sizes where the products go to
    BLAS, as the plan says."""
    _compare(op_type, _inputs(op_type, steps=5, batch=1, hidden=4))
    values = _inputs(op_type, steps=6, batch=40, size=48, hidden=40, directions=2,
                     lengths=np.arange(40) % 6 + 1, initial=True)
    compiled = _compare(op_type, values, direction="bidirectional", linear_before_reset=1,
                        rtol=1e-3, atol=1e-4) \
        if op_type == "GRU" else _compare(op_type, values, direction="bidirectional",
                                          rtol=1e-3, atol=1e-4)
    notes = " ".join(compiled.executor.notes(compiled.executor.steps[0]))
    assert "BLAS" in notes and f"{op_type}: input projection as one product over 6" in notes


def test_hidden_size_of_one():
    _compare("GRU", _inputs("GRU", hidden=1, lengths=[4, 2, 3]))


def test_plan_says_what_the_op_became():
    compiled = _compare("LSTM", _inputs("LSTM", steps=20), opt_levels=(0,))
    assert ("LSTM: input projection as one product over 20 steps, per step 1 product + "
            "2 statements") in compiled.ir()


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("batch,hidden", [(1, 6), (3, 1), (1, 1)])
@pytest.mark.parametrize("layout", [0, 1])
def test_batch_and_hidden_of_one(op_type, batch, hidden, layout):
    """Statements without a batch or a hidden index (their states are vectors), both layouts,
    both directions, an entry ending early where there are several."""
    values = _inputs(op_type, batch=batch, hidden=hidden, directions=2, layout=layout,
                     lengths=[3] if batch == 1 else [4, 1, 3], initial=True, peepholes=True)
    _compare(op_type, values, direction="bidirectional", layout=layout)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_fed_sequence_lens_run_generically(op_type, direction):
    """Lengths fed as an input may change from run to run (they do here: the third run has
    others): the node stays a generic step of the static plan."""
    values = _inputs(op_type, directions=2 if direction == "bidirectional" else 1,
                     lengths=[4, 1, 3], initial=True)
    _compare(op_type, values, fed=FED_LENGTHS, static=False, direction=direction)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
def test_static_step_in_python_and_in_the_profile(op_type):
    """A timed run calls the static step's Python form (each call rebinding its inputs) rather
    than the compiled sequence: the same outputs; the profile says what the step runs."""
    values = _inputs(op_type, directions=2, layout=1, lengths=[4, 2, 3], initial=True)
    compiled = _compare(op_type, values, direction="bidirectional", layout=1)
    other = _other(values)
    names = OUTPUTS[op_type]
    expected = _oracle(op_type, other, None, 14, names, direction="bidirectional", layout=1)
    got = compiled.specialiser.run(_feeds(other), timer=lambda step, seconds: None)
    for name, want in zip(names, expected):
        np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL, err_msg=name)
    profile = str(compiled.profile(_feeds(values)))
    assert f"{op_type} as one sequence of prebound calls, 4 steps x 2 direction(s)" in profile


def test_too_many_calls_run_from_python(monkeypatch):
    """Past ``MAX_NATIVE_CALLS`` calls in its iterations, the step runs its calls from Python
    rather than have the plan compile them (seconds for thousands of calls)."""
    monkeypatch.setattr(recurrent_steps, "MAX_NATIVE_CALLS", 8)
    values = _inputs("GRU", directions=2, lengths=[4, 2, 3], initial=True)
    compiled = _compare("GRU", values, opt_levels=(3,), direction="bidirectional")
    (step,) = compiled.specialiser.latest().steps
    assert "run from Python" in step.plan and "compiled sequence" not in compiled.ir()


def test_static_plan_of_a_long_lstm():
    """Every length full in layout 0: each step writes its state straight into Y (no Y
    gather); 20 steps, one compiled sequence, and the plan line names the GEMMs."""
    compiled = _compare("LSTM", _inputs("LSTM", steps=20, batch=4, hidden=16, initial=True))
    (step,) = compiled.specialiser.latest().steps
    assert "Y written in place" in step.plan and "generated GEMM" in step.plan


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("initial", [False, True])
def test_empty_sequence(op_type, initial):
    """Zero steps: empty Y; Y_h (and Y_c) the initial state, zeros without one (onnxruntime
    returns zeros either way, and aborts on a GRU)."""
    values = _inputs(op_type, steps=0, directions=2, initial=initial)
    model = _model(op_type, values, direction="bidirectional")
    for level in (0, 3):
        compiled = tonnx.load(model, opt_level=level)
        for inputs in [values, values, _other(values)] if level == 3 else [values]:
            got = compiled.run(_feeds(inputs))
            assert got["Y"].shape == (0, 2, 3, 6)
            for name, state in (("Y_h", "initial_h"), ("Y_c", "initial_c"))[:len(got) - 1]:
                want = inputs[state] if initial else np.zeros((2, 3, 6), np.float32)
                np.testing.assert_array_equal(got[name], want)
    _assert_plan(compiled, static=False)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layout", [0, 1])
def test_empty_batch(op_type, layout):
    """Batch 0: empty outputs of the right shapes (onnxruntime aborts on LSTM and GRU)."""
    values = _inputs(op_type, batch=0, directions=2, layout=layout, lengths=[], initial=True)
    model = _model(op_type, values, direction="bidirectional", layout=layout)
    for level in (0, 3):
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(3 if level == 3 else 1):
            got = compiled.run(_feeds(values))
            assert got["Y"].shape == ((0, 4, 2, 6) if layout else (4, 2, 0, 6))
            assert got["Y_h"].shape == ((0, 2, 6) if layout else (2, 0, 6))
    _assert_plan(compiled, static=False)


# ---------------------------------------------------------------------------------------------
# errors

def _load_error(op_type, values, error, match, **attributes):
    with pytest.raises(error, match=match):
        model = tonnx.load(_model(op_type, values, **attributes))
        model.run(_feeds(values))


def test_wrong_weight_shapes_name_the_node_and_the_expected_shape():
    values = _inputs("LSTM")
    values["W"] = values["W"][:, :-1]
    _load_error("LSTM", values, ta.ShapeError, r"lstm.*W has shape \(1, 23, 5\), expected "
                r"\(1, 24, 5\)")
    values = _inputs("GRU", directions=2)
    values["initial_h"] = np.zeros((1, 3, 6), np.float32)
    _load_error("GRU", values, ta.ShapeError, r"initial_h has shape \(1, 3, 6\), expected "
                r"\(2, 3, 6\)", direction="bidirectional")
    values = _inputs("RNN")
    _load_error("RNN", values, ta.ShapeError, r"W has shape \(1, 6, 5\), expected \(1, 4, 5\)",
                hidden_size=4)


def test_bad_sequence_lens():
    values = _inputs("GRU", lengths=[5, 1, 2])
    _load_error("GRU", values, ta.ShapeError, r"sequence_lens \[5, 1, 2\] must lie in \[0, 4\]")


@pytest.mark.parametrize("attributes,match", [
    ({"activations": ["Sigmoid", "Bogus", "Tanh"]}, "activation 'Bogus' is not one of"),
    ({"activations": ["Sigmoid", "Tanh"]}, "takes 3 activations"),
    ({"direction": "sideways"}, "direction 'sideways'"),
    ({"activations": ["ThresholdedRelu", "Tanh", "Tanh"]}, "needs its alpha"),
    ({"clip": -1.0}, "clip must be positive"),
    ({"layout": 2}, "layout must be 0 or 1"),
    ({"hidden_size": 0}, "hidden_size must be at least 1"),
])
def test_bad_attributes_are_refused_at_load(attributes, match):
    values = _inputs("LSTM")
    with pytest.raises(ta.UnsupportedError, match=match):
        tonnx.load(_model("LSTM", values, **attributes))


def test_layout_before_opset_14_is_refused():
    values = _inputs("RNN")
    with pytest.raises(ta.TensorAlgebraError, match="layout"):
        tonnx.load(_model("RNN", values, opset=13, layout=1))


# ---------------------------------------------------------------------------------------------
# PyTorch exports

def _export(module, example, path):
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        torch.onnx.export(module, (example,), str(path), input_names=["x"], dynamo=False,
                          opset_version=17)
    return tonnx.load(str(path), opt_level=3)


def _assert_static_steps(compiled, count):
    """The plan's recurrent nodes (whose initial states and layers' inputs other nodes make)
    are ``count`` static steps, in one compiled sequence with the steps around them."""
    plan = compiled.specialiser.latest()
    kinds = [s.kind for s in plan.steps if s.step.node.op_type in OUTPUTS]
    assert kinds == [STATIC] * count
    assert "1 compiled sequence" in plan.describe()


@pytest.mark.filterwarnings("ignore")    # the TorchScript exporter's deprecation and tracer notes
def test_torch_lstm_batch_first_two_layers(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.LSTM(5, 7, num_layers=2, batch_first=True).eval()
    example = torch.randn(3, 6, 5)
    compiled = _export(module, example, tmp_path / "lstm.onnx")
    with torch.no_grad():
        want = module(example)
    for _ in range(3):
        got = list(compiled.run({"x": example.numpy()}).values())
    _assert_static_steps(compiled, 2)
    np.testing.assert_allclose(got[0], want[0].numpy(), rtol=RTOL, atol=ATOL)
    for actual, expected in zip(got[1:], want[1]):
        np.testing.assert_allclose(actual, expected.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.filterwarnings("ignore")
def test_torch_bidirectional_gru(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    module = torch.nn.GRU(4, 6, bidirectional=True).eval()
    example = torch.randn(5, 2, 4)
    compiled = _export(module, example, tmp_path / "gru.onnx")
    with torch.no_grad():
        want = module(example)
    for _ in range(3):
        got = list(compiled.run({"x": example.numpy()}).values())
    _assert_static_steps(compiled, 1)
    np.testing.assert_allclose(got[0], want[0].numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got[1], want[1].numpy(), rtol=RTOL, atol=ATOL)
