"""One test per user mistake: the exact TensorAlgebraError subclass and a helpful message."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta

A = np.ones((3, 4))
x = np.ones(4)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------
# malformed notation


@pytest.mark.parametrize("subscripts, match", [
    ("ij,j->k", r"output index k appears in no input"),
    ("ij,j->ii", r"output index i repeated"),
    ("ij,j->i->j", r"more than one '->'"),
    ("ij;j->i", r"unexpected character ';'"),
    ("ij,j-i", r"'-' must be followed by '>'"),
    ("ij,j->I1", r"unexpected character '1'"),
    ("ij,j,k->i", r"3 terms .* but 2 operands"),
    ("ij", r"1 terms .* but 2 operands"),
    ("ij,j->i,", r"',' in the output"),
    ("...i..j,j->i", r"ellipsis is exactly three dots"),
    ("ij,j->i)", r"unexpected character '\)'"),
    ("(ij,j->i", r"unexpected character '\('"),
    ("", r"empty subscripts"),
])
def test_malformed_einsum(subscripts, match):
    with pytest.raises(ta.NotationError, match=match):
        ta.einsum(subscripts, A, x)


def test_einsum_notation_error_has_position():
    with pytest.raises(ta.NotationError) as info:
        ta.einsum("ij;j->i", A, x)
    assert info.value.position == 2 and "^" in str(info.value)


def test_subscripts_not_a_string_nor_the_interleaved_form():
    # A first argument that is not a string starts NumPy's interleaved form; a sublist that
    # holds something other than integers is a TypeError, as in NumPy.
    with pytest.raises(TypeError, match="sublist"):
        ta.einsum(3, A, x)
    with pytest.raises(ta.TensorAlgebraError):
        ta.einsum(A, [0, 1], x)
    with pytest.raises(ValueError):
        ta.einsum()


@pytest.mark.parametrize("statement, match", [
    ("y(i) = A(i,j) * x(j", r"unmatched '\('"),
    ("y(i) = A(i,j) ** x(j)", r"expected an expression, found '\*'"),
    ("y(i) == A(i,j)", r"expected an expression, found '='"),
    ("y(i) = ", r"empty right side"),
    ("= A(i,j)", r"expected the output tensor's name"),
    ("y(i,i) = A(i,i)", r"index i repeated on the left side"),
    ("y(i) = foo(A(i,j))", r"unknown function 'foo'"),
    ("y(i) = sum(A(i,j))", r"sum takes an index name and an expression"),
    ("y(i) = A(i,j) x(j)", r"unexpected 'x' after the expression"),
    ("y(i) = A(i,j) + A(i)", r"tensor A is used with 1 indices here but with 2"),
    ("y(i) = relu(A(i,j), x(j))", r"relu takes 1 argument, got 2"),
    ("y(i) = 3.4.5 * A(i,j)", r"unexpected '.5'"),
    ("y(j) = sum(j, A(i,j))", r"sum over j, an index of the left side"),
    ("y(i) = A(i,,j)", r"expected an index name, found ','"),
    ("Y(i) = A(i,j) * @", r"unexpected character '@'"),
    ("y(i) = y(i) + A(i,j)", r"output y also appears on the right side"),
])
def test_malformed_statement(statement, match):
    with pytest.raises(ta.NotationError, match=match) as info:
        ta.compile(statement)
    assert info.value.text == statement


def test_formats_name_an_unknown_tensor():
    with pytest.raises(ta.NotationError, match="formats names Q"):
        ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds", "Q": "ds"})


# ---------------------------------------------------------------------------------------------
# shapes and ranks


def test_shape_mismatch_names_operand_and_index():
    with pytest.raises(ta.ShapeError, match=r"index j.*4.*5"):
        ta.einsum("ij,j->i", A, np.ones(5))


def test_shape_mismatch_in_a_chain():
    with pytest.raises(ta.ShapeError, match=r"index j.*4.*5"):
        ta.einsum("ij,jk->ik", sp.csr_array(A), np.ones((5, 2)))


def test_repeated_index_on_a_non_square_operand():
    with pytest.raises(ta.ShapeError, match=r"index i.*3.*4"):
        ta.einsum("ii->i", A)


def test_wrong_rank():
    with pytest.raises(ta.ShapeError, match=r"operand 0.*rank 2.*'ijk'.*3"):
        ta.einsum("ijk,j->i", A, x)


def test_kernel_shape_mismatch():
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    with pytest.raises(ta.ShapeError, match=r"index j.*4.*5"):
        k(A=sp.csr_array(A), x=np.ones(5))


def test_out_of_the_wrong_shape():
    with pytest.raises(ta.ShapeError, match=r"out has shape \(7,\).*\(3,\)"):
        ta.einsum("ij,j->i", A, x, out=np.zeros(7))


# ---------------------------------------------------------------------------------------------
# dtypes


@pytest.mark.parametrize("dtype", [np.clongdouble, np.longdouble, object, "U3"])
def test_unsupported_numpy_dtype(dtype):
    with pytest.raises(ta.UnsupportedError, match=r"operand 0 has dtype .*float32, float64"):
        ta.einsum("ij,j->i", A.astype(dtype), x)


def test_unsupported_scipy_dtype():
    # complex64/complex128 compute natively (tests/test_einsum_complex.py); extended
    # precision has no kernel type.
    with pytest.raises(ta.UnsupportedError, match=r"operand 0.*complex256|operand 0.*clongdouble"):
        ta.einsum("ij,j->i", sp.csr_array(A.astype(np.clongdouble)), x)


def test_string_operand_is_not_a_scalar():
    with pytest.raises(ta.UnsupportedError, match=r"operand 1.*str"):
        ta.einsum("ij,j->i", A, "abcd")


def test_list_operand_is_an_array_as_in_numpy():
    np.testing.assert_allclose(ta.einsum("ij,j->i", A, [1.0, 2.0, 3.0, 4.0]),
                               A @ np.array([1.0, 2.0, 3.0, 4.0]))
    with pytest.raises(ta.UnsupportedError, match=r"a dict is not a tensor"):
        ta.einsum("ij,j->i", A, {"x": 1})


def test_compile_with_extended_precision_dtype():
    with pytest.raises(ta.UnsupportedError, match=r"dtype .* is not supported"):
        ta.compile("y(i) = A(i,j) * x(j)", dtype=np.clongdouble)


def test_integer_kernel_with_a_float_function():
    with pytest.raises(ta.UnsupportedError, match=r"floating-point"):
        ta.compile("y(i) = sqrt(A(i,j))", dtype="int64")


@pytest.mark.parametrize("da, dx", [(np.int64, np.float64), (np.int32, np.float32),
                                    (np.float32, np.int64), (np.int32, np.int64)])
def test_mixed_int_and_float_works_as_numpy_promotes(da, dx):
    a = np.arange(12).reshape(3, 4).astype(da)
    v = np.arange(4).astype(dx)
    got = ta.einsum("ij,j->i", sp.csr_array(a), v)
    want = np.einsum("ij,j->i", a, v)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want)


# ---------------------------------------------------------------------------------------------
# non-canonical and int64 scipy inputs


def test_unsorted_duplicate_scipy_input_computed_right_and_untouched():
    m = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 2]), np.array([0, 3, 3])),
                     shape=(2, 3))
    snapshot = (m.data.copy(), m.indices.copy(), m.indptr.copy())
    y = ta.einsum("ij,j->i", m, np.array([1.0, 10.0, 100.0]))
    np.testing.assert_allclose(y, [2 * 1 + (1 + 3) * 100, 0])
    for now, before in zip((m.data, m.indices, m.indptr), snapshot):
        np.testing.assert_array_equal(now, before)


def test_scipy_with_int64_indices_works():
    m = sp.csr_array(A)
    m.indices = m.indices.astype(np.int64)
    m.indptr = m.indptr.astype(np.int64)
    np.testing.assert_allclose(ta.einsum("ij,j->i", m, x), A @ x)


# ---------------------------------------------------------------------------------------------
# corrupt ta.Tensor storage built by hand: FormatError, never a crash

GOOD = dict(pos=[0, 2, 2, 3], crd=[0, 3, 1], vals=[1.0, 2.0, 3.0])   # 3x4 CSR
CORRUPT = {
    "pos not monotone": dict(pos=[0, 2, 1, 3]),
    "pos does not start at 0": dict(pos=[1, 2, 2, 3]),
    "crd out of range": dict(crd=[0, 4, 1]),
    "negative crd": dict(crd=[0, -1, 1]),
    "pos[-1] != len(crd)": dict(pos=[0, 2, 2, 2]),
    "pos[-1] beyond crd": dict(pos=[0, 2, 2, 9]),
    "vals too short": dict(vals=[1.0, 2.0]),
    "vals too long": dict(vals=[1.0, 2.0, 3.0, 4.0]),
    "unsorted crd in s level": dict(crd=[3, 0, 1]),
    "duplicate crd in s level": dict(crd=[3, 3, 1]),
    "pos of the wrong length": dict(pos=[0, 2, 3]),
}


def _csr(**changes):
    parts = {**GOOD, **changes}
    pos = np.asarray(parts["pos"], dtype=np.int32)
    crd = np.asarray(parts["crd"], dtype=np.int32)
    return ta.Tensor((3, 4), "ds", [None, (pos, crd)], np.asarray(parts["vals"]))


def test_good_hand_built_tensor_works():
    t = _csr()
    np.testing.assert_allclose(ta.einsum("ij,j->i", t, x), t.to_numpy() @ x)


@pytest.mark.parametrize("fault", list(CORRUPT))
def test_corrupt_storage_is_a_format_error(fault):
    with pytest.raises(ta.FormatError):
        _csr(**CORRUPT[fault])


def test_corrupt_coo_singleton_level():
    with pytest.raises(ta.FormatError):
        ta.Tensor((3, 4), "uq", [(np.array([0, 2]), np.array([0, 5])),
                                 (None, np.array([1, 1]))], np.array([1.0, 2.0]))


def test_corrupt_crd_dtype():
    with pytest.raises(ta.FormatError):
        ta.Tensor((3, 4), "ds", [None, (np.array([0, 1, 1, 1]), np.array([0.5]))],
                  np.array([1.0]))


def test_corrupt_storage_in_a_subprocess_never_crashes():
    code = textwrap.dedent("""
        import numpy as np, tensoralg as ta
        cases = [([0, 2, 1, 3], [0, 3, 1], [1.0, 2.0, 3.0]),
                 ([0, 2, 2, 3], [0, 400000, 1], [1.0, 2.0, 3.0]),
                 ([0, 2, 2, 90000], [0, 3, 1], [1.0, 2.0, 3.0]),
                 ([0, 2, 2, 3], [0, 3, 1], [1.0])]
        for pos, crd, vals in cases:
            try:
                t = ta.Tensor((3, 4), "ds", [None, (np.array(pos, np.int32),
                                                    np.array(crd, np.int32))], np.array(vals))
                ta.einsum("ij,j->i", t, np.ones(4))
                print("accepted", pos, crd, vals)
            except ta.FormatError:
                print("format error")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"crashed with {done.returncode}: {done.stderr[-800:]}"
    assert done.stdout.split("\n").count("format error") == 4, done.stdout


# ---------------------------------------------------------------------------------------------
# options


def test_unknown_backend():
    with pytest.raises(ta.UnsupportedError, match=r"unknown backend 'tpu'.*llvm, c, cuda"):
        ta.einsum("ij,j->i", A, x, backend="tpu")


@pytest.mark.parametrize("backend", [["llvm"], 3, {"llvm": 1}])
def test_a_backend_that_is_no_string_is_refused_before_and_after_a_remembered_call(backend):
    ta.einsum("ij,j->i", A, x, backend="llvm")       # a remembered replay for this call exists
    for _ in range(2):
        with pytest.raises(ta.UnsupportedError, match=r"unknown backend"):
            ta.einsum("ij,j->i", A, x, backend=backend)


def test_unknown_backend_in_compile():
    with pytest.raises(ta.UnsupportedError, match=r"unknown backend 'tpu'"):
        ta.compile("y(i) = A(i,j) * x(j)", backend="tpu")


def test_malformed_schedules_are_notation_errors():
    with pytest.raises(ta.NotationError, match=r"expected '\('"):
        ta.compile("y(i) = A(i,j) * x(j)", schedule="reorder")
    with pytest.raises(ta.NotationError, match=r"must be scheduling commands"):
        ta.einsum("ij,j->i", A, x, schedule=[3])
    with pytest.raises(ta.NotationError, match=r"has no index k"):
        ta.einsum("ij,j->i", A, x, schedule="reorder(k, i)")


def test_formats_list_of_the_wrong_length():
    with pytest.raises(ta.ShapeError, match=r"formats has 1 entries but einsum has 2 operands"):
        ta.einsum("ij,j->i", A, x, formats=["ds"])


def test_formats_dict_names_a_missing_operand():
    with pytest.raises(ta.ShapeError, match=r"formats names operand 5"):
        ta.einsum("ij,j->i", A, x, formats={5: "ds"})


def test_formats_not_a_list_or_dict():
    with pytest.raises(ta.UnsupportedError, match=r"formats must be \"auto\", a list"):
        ta.einsum("ij,j->i", A, x, formats="ds")


@pytest.mark.parametrize("fmt, match", [
    ("dsq", r"singleton level .* must follow a non-unique level"),
    ("xy", r"unknown level code 'x'"),
    ("dsd", r"3 levels but the tensor has 2 modes"),
])
def test_bad_operand_format(fmt, match):
    with pytest.raises(ta.FormatError, match=match):
        ta.einsum("ij,j->i", A, x, formats=[fmt, None])


@pytest.mark.parametrize("out_format, match", [
    ("banana", r"unknown level code 'b'"),
    ("ds", r"2 levels but the tensor has 1 modes"),
    (42, r"cannot read 42 as a format"),
    (ta.Format("ds", order=(1, 0)), r"levels|modes"),
])
def test_out_format_nonsense(out_format, match):
    with pytest.raises(ta.FormatError, match=match):
        ta.einsum("ij,j->i", A, x, out_format=out_format)


def test_format_with_a_bad_mode_order():
    with pytest.raises(ta.FormatError, match=r"not a permutation"):
        ta.Format("ds", order=(0, 0))


def test_kernel_missing_operand():
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    with pytest.raises(ta.ShapeError, match=r"needs operand\(s\) x"):
        k(A=sp.csr_array(A))


def test_kernel_extra_operand():
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    with pytest.raises(ta.ShapeError, match=r"has no operand\(s\) z"):
        k(A=sp.csr_array(A), x=x, z=x)


def test_kernel_operand_in_another_format_warns_once():
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    with pytest.warns(UserWarning, match=r"operand A .* converting"):
        np.testing.assert_allclose(k(A=A, x=x), A @ x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k(A=A, x=x)


def test_cuda_einsum():
    with pytest.raises(ta.UnsupportedError, match=r"cuda.*llvm"):
        ta.einsum("ij,j->i", A, x, backend="cuda")


def test_cuda_kernel_prints_and_without_a_gpu_says_why_it_cannot_run():
    from tensoralg import gpu

    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"}, backend="cuda")
    assert "__global__" in k.source("cuda")
    if gpu.available() is None:
        pytest.skip("a GPU is reachable: the kernel runs (tests/test_cuda_gpu.py)")
    with pytest.raises(ta.UnsupportedError, match=r"cannot run kernels here: .*tensoralg\[cuda\]"):
        k(A=sp.csr_array(A), x=x)
    with pytest.raises(ta.UnsupportedError, match="bind"):
        k.bind(A=sp.csr_array(A), x=x)


def test_unknown_source_language():
    k = ta.compile("y(i) = A(i,j) * x(j)")
    with pytest.raises(ta.UnsupportedError, match=r"wasm"):
        k.source("wasm")


def test_every_error_is_a_tensor_algebra_error():
    for cls in (ta.NotationError, ta.ShapeError, ta.FormatError, ta.CompileError,
                ta.UnsupportedError, ta.KernelRuntimeError):
        assert issubclass(cls, ta.TensorAlgebraError)


# ---------------------------------------------------------------------------------------------
# arguments of einsum and compile (an adversarial pass found these raw or silent)


def test_a_dtype_that_would_truncate_float_operands_is_refused():
    a = np.array([[0.5, 1.7], [2.9, 0.0]])
    with pytest.raises(ta.InputError, match="operand 0 holds float64 values.*truncate to int32"):
        ta.einsum("ij,j->i", a, np.ones(2), dtype="int32")
    k = ta.compile("y(i) = A(i,j) * x(j)", dtype="int64")
    with pytest.raises(ta.InputError, match="operand A holds float64"):
        k(A=a, x=np.ones(2, np.int64))
    # Widening and same-kind narrowing stay allowed, as NumPy's same_kind rule has them.
    assert ta.einsum("ij,j->i", a.astype(np.int64), np.ones(2, np.int64), dtype="float64").dtype \
        == np.float64
    assert ta.einsum("ij,j->i", a, np.ones(2), dtype="float32", casting="same_kind").dtype \
        == np.float32
    # NumPy's default rule, "safe", refuses float64 -> float32, as a TypeError.
    with pytest.raises(TypeError, match="casting='safe' does not allow"):
        ta.einsum("ij,j->i", a, np.ones(2), dtype="float32")
    assert ta.einsum("ij,j->i", a, np.ones(2), dtype="int32", casting="unsafe").tolist() == \
        [1, 2]


@pytest.mark.parametrize("call, error, match", [
    (lambda: ta.einsum("ij,j->i", A, x, dtype="floaty"), ta.InputError, "not a dtype"),
    (lambda: ta.compile("y(i) = x(i)", dtype="floaty"), ta.InputError, "not a dtype"),
    (lambda: ta.einsum("ij,j->i", A, x, formats={"A": "csr"}), ta.InputError,
     "keyed by operand position"),
    (lambda: ta.compile(5), ta.NotationError, "must be a string"),
    (lambda: ta.compile(None), ta.NotationError, "must be a string"),
    (lambda: ta.compile("y(i) = x(i)", formats=["csr"]), ta.InputError, "must be a dict"),
    (lambda: ta.Format(5), ta.FormatError, "string of level codes"),
    (lambda: ta.Format(None), ta.FormatError, "string of level codes"),
    (lambda: ta.Format("ds", order=("a", 1)), ta.FormatError, "sequence of integers"),
    (lambda: ta.dense(1.5), ta.FormatError, "integer of at least 0"),
    (lambda: ta.dense(-1), ta.FormatError, "integer of at least 0"),
], ids=["einsum-dtype", "compile-dtype", "einsum-formats-by-name", "compile-int",
        "compile-none", "compile-formats-list", "format-int", "format-none", "format-order",
        "dense-float", "dense-negative"])
def test_bad_arguments_get_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_out_receives_a_sparse_result_densely_or_is_refused_clearly():
    a = sp.csr_array(np.diag([1.0, 2.0]))
    out = np.full((2, 2), 7.0)
    assert ta.einsum("ij,ij->ij", a, a, out=out) is out       # NumPy always fills out
    np.testing.assert_array_equal(out, np.diag([1.0, 4.0]))
    read_only = np.zeros((2, 2))
    read_only.flags.writeable = False
    for bad, match in [([1.0], "must be a NumPy array"), (np.zeros((2, 2), np.int64),
                                                          "cannot hold the float64 result"),
                       (read_only, "read-only"), (np.zeros(3), "shape")]:
        with pytest.raises(ta.TensorAlgebraError, match=match):
            ta.einsum("ij,ij->ij", a, a, out=bad)
    with pytest.raises(ta.InputError, match="pass one or the other"):
        ta.einsum("ij,ij->ij", a, a, out=np.zeros((2, 2)), out_format="csr")


def test_a_very_long_sum_is_a_notation_error_not_a_recursion_error():
    statement = "y(i) = " + " + ".join(["A(i,j)"] * 400)
    try:
        got = ta.compile(statement)(A=np.ones((3, 3)))
    except ta.NotationError as err:
        assert "nested too deeply" in str(err) and len(str(err)) < 400
    else:
        np.testing.assert_allclose(got, np.full(3, 1200.0))


@pytest.mark.parametrize("field, value", [
    ("indptr", np.array([1, 1, 2, 3], np.int32)), ("indptr", np.array([0, 1, 2, 5], np.int32)),
    ("indptr", np.array([0, 1, 3], np.int32)), ("data", np.array([1.0, 1.0])),
    ("indices", np.array([0.0, 1.0, 2.0]))],
    ids=["indptr-start", "indptr-end", "indptr-short", "data-short", "float-indices"])
def test_corrupt_scipy_arrays_handed_in_fresh_are_format_errors(field, value):
    a = sp.csr_array(np.eye(3))
    setattr(a, field, value)
    with pytest.raises(ta.FormatError, match="scipy csr input|index arrays must hold integers"):
        ta.einsum("ij,j->i", a, np.ones(3))


@pytest.mark.parametrize("operand", [None, {}])
def test_none_or_a_dict_is_not_a_tensor(operand):
    with pytest.raises(ta.UnsupportedError, match="is not a tensor"):
        ta.einsum("ij,j->i", A, operand)


def test_big_endian_arrays_are_read_as_numpy_reads_them():
    a = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(ta.einsum("ij,j->i", a.astype(">f8"), x.astype(">f8")), a @ x)
    np.testing.assert_array_equal(ta.einsum("ij->i", a.astype(">i4")), a.sum(axis=1))


@pytest.mark.parametrize("statement, dtype", [("y(i) = 3000000000 * x(i)", "int32"),
                                              ("y(i) = 9223372036854775808 * x(i)", "int64"),
                                              ("y(i) = 1e39 * x(i)", "float32")])
def test_a_literal_the_dtype_cannot_hold_is_an_input_error(statement, dtype):
    with pytest.raises(ta.InputError, match="does not fit in " + dtype):
        ta.compile(statement, dtype=dtype)


def test_an_infinite_literal_is_allowed():
    k = ta.compile("y(i) = where(gt(x(i), 0), x(i), -1e400)", dtype="float32")
    np.testing.assert_array_equal(k(x=np.array([1.0, -1.0], np.float32)), [1.0, -np.inf])


def test_binding_a_sparse_operand_that_must_be_copied_warns():
    """A bound call reads its operands' arrays in place; a sparse operand stored otherwise
    than the kernel takes it (CSC, other values dtype, unsorted indices) is copied once, and
    later changes to it would go unseen: say so. A canonical one binds silently."""
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    a = sp.csr_array(np.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 5]]))
    x3 = np.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call = k.bind(A=a, x=x3)
    a.data *= 10
    np.testing.assert_array_equal(call(), a @ x3)          # used in place
    for other in (a.tocsc(), a.astype(np.float32)):
        with pytest.warns(UserWarning, match="was copied into csr.*will not see later changes"):
            k.bind(A=other, x=x3)
    # No stored values (an all-zero weight): nothing a later change could miss, no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(k.bind(A=sp.csr_array((2, 3)), x=x3)(), [0.0, 0.0])


def test_arguments_of_the_wrong_type_are_type_errors_as_in_numpy():
    with pytest.raises(TypeError, match="out must be a NumPy array"):
        ta.einsum("", 0.0, out="test")
    with pytest.raises(TypeError, match="not a dtype"):
        ta.einsum("", 0.0, dtype="bad_data_type")
    with pytest.raises(ta.InputError):                  # and still tensoralg's own error
        ta.einsum("", 0.0, out="test")
