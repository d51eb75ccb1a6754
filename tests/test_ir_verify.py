"""The IR verifier: one test per rule it enforces, and valid programs that must pass."""
from __future__ import annotations

import pytest

from tensoralg import ir
from tensoralg.errors import CompileError, TensorAlgebraError
from tensoralg.ir import BOOL, F32, F64, I32, I64, IRVerifyError, Ptr, param, var

n = var("n", I64)
y = var("y", Ptr(F64))
out = var("out", Ptr(Ptr(F64)))
i, j, t, u = var("i", I64), var("j", I64), var("t", F64), var("u", I64)
flag = var("flag", BOOL)
PARAMS = [param(n, "A.dim.0"), param(y, "y.vals", output=True), param(out, "out.vals", True)]


def kernel(*body) -> ir.Function:
    return ir.function("k", PARAMS, *body)


def test_valid_kernel_passes():
    w, cap = var("w", Ptr(F64)), var("cap", I64)
    ir.verify(kernel(
        ir.declare(t, 0.0),
        ir.declare(cap, 4),
        ir.allocate(w, cap, zero=True),
        ir.for_(i, 0, n,
                ir.grow(w, cap, ir.add(i, 1)),
                ir.store(w, i, ir.cast(i, F64)),
                ir.assign(t, ir.add(t, ir.load(w, i))),
                ir.if_(ir.lt(i, 3), ir.block(ir.declare(u, i), ir.assign(u, ir.add(u, 1))))),
        ir.while_(ir.const(False, BOOL)),
        ir.store(y, 0, t),
        ir.store(out, 0, w),
    ))


def rejects(fn: ir.Function, match: str) -> IRVerifyError:
    with pytest.raises(IRVerifyError, match=match) as info:
        ir.verify(fn, after="my step")
    assert "after my step" in str(info.value)
    return info.value


def test_error_is_a_compile_error():
    assert issubclass(IRVerifyError, CompileError)
    assert issubclass(IRVerifyError, TensorAlgebraError)


def test_message_names_step_and_shows_node():
    err = rejects(kernel(ir.store(y, 0, ir.add(t, 1.0))), "before it is introduced")
    assert "in:\n    t\n" in str(err)
    assert "of the statement:\n    y[0] = t + 1.0;" in str(err)


def test_use_before_declare():
    rejects(kernel(ir.store(y, 0, t), ir.declare(t, 0.0)), "'t' is used before it is introduced")


def test_counter_outside_its_loop():
    rejects(kernel(ir.for_(i, 0, n), ir.store(y, i, 0.0)), "'i' is used outside its scope")


def test_declare_outside_its_block():
    rejects(kernel(ir.if_(flag_true(), ir.declare(t, 1.0)), ir.store(y, 0, t)),
            "'t' is used outside its scope")


def flag_true() -> ir.Expr:
    return ir.const(True, BOOL)


def test_declare_visible_in_nested_blocks():
    ir.verify(kernel(ir.declare(t, 1.0), ir.if_(flag_true(), ir.while_(flag_true(), ir.store(y, 0, t)))))


def test_introduced_twice():
    rejects(kernel(ir.declare(t, 0.0), ir.declare(t, 1.0)), "'t' is introduced twice")


def test_introduced_twice_in_sibling_scopes():
    rejects(kernel(ir.for_(i, 0, n), ir.for_(i, 0, n)), "'i' is introduced twice")


def test_parameter_redeclared():
    rejects(kernel(ir.declare(n, 3)), "'n' is introduced twice")


def test_duplicate_parameters():
    with pytest.raises(IRVerifyError, match="introduced twice"):
        ir.verify(ir.function("k", [param(n, "a"), param(n, "b")]))


def test_use_with_other_dtype():
    rejects(kernel(ir.declare(u, 0), ir.store(y, 0, ir.cast(var("u", I32), F64))),
            "used as i32 but introduced as i64")


def test_assign_to_counter():
    rejects(kernel(ir.for_(i, 0, n, ir.assign(i, 0))), "changes the For counter 'i'")


def test_assign_to_parameter():
    rejects(kernel(ir.assign(n, 0)), "changes parameter 'n'")


def test_assign_dtype_mismatch():
    rejects(kernel(ir.declare(t, 0.0), ir.assign(t, ir.const(1.0, F32))),
            "Assign: value has dtype f32, target has dtype f64")


def test_declare_dtype_mismatch():
    rejects(kernel(ir.Declare(t, ir.i64(0))), "Declare: value has dtype i64")


def test_store_dtype_mismatch():
    rejects(kernel(ir.Store(y, ir.i64(0), ir.const(1.0, F32))),
            "Store: value has dtype f32, target has dtype f64")


def test_store_to_non_pointer():
    rejects(kernel(ir.declare(u, 0), ir.Store(u, ir.i64(0), ir.i64(1))), "Store to non-pointer 'u'")


def test_store_index_not_integer():
    rejects(kernel(ir.Store(y, ir.const(0.0, F64), ir.const(1.0, F64))), "Store index must be an integer")


def test_if_condition_not_bool():
    rejects(kernel(ir.if_(n, ir.comment("x"))), "condition of an If must be bool, got i64")


def test_while_condition_not_bool():
    rejects(kernel(ir.while_(ir.i64(0))), "condition of a While must be bool")


def test_select_condition_not_bool():
    rejects(kernel(ir.store(y, 0, ir.select(n, ir.const(1.0, F64), 0.0))), "condition of a Select must be bool")


def test_for_bounds_not_integer():
    c = var("c", F64)
    rejects(kernel(ir.For(c, ir.const(0.0, F64), ir.const(1.0, F64), ir.block())),
            "For counter 'c' must be an integer")


def test_for_bounds_differ_from_counter():
    k = var("k", I32)
    rejects(kernel(ir.For(k, ir.const(0, I32), n, ir.block())), "For stop: value has dtype i64")


def test_load_index_not_integer():
    rejects(kernel(ir.store(y, 0, ir.load(y, ir.const(1.5, F64)))), "Load index must be an integer")


def test_grow_capacity_not_i64():
    w, cap = var("w", Ptr(F64)), var("cap", I32)
    rejects(kernel(ir.declare(cap, 4), ir.allocate(w, ir.cast(cap, I64)), ir.grow(w, cap, 8)),
            "capacity 'cap' must be an i64 local")


def test_grow_capacity_not_local():
    w = var("w", Ptr(F64))
    rejects(kernel(ir.allocate(w, n), ir.grow(w, n, 8)), "Grow capacity changes parameter 'n'")


def test_grow_of_parameter():
    cap = var("cap", I64)
    rejects(kernel(ir.declare(cap, 1), ir.grow(y, cap, 8)), "Grow changes parameter 'y'")


def test_free_of_non_pointer():
    rejects(kernel(ir.declare(u, 0), ir.free(u)), "Free of non-pointer 'u'")


def test_allocate_count_not_integer():
    w = var("w", Ptr(F64))
    rejects(kernel(ir.Allocate(w, ir.const(2.0, F64))), "Allocate count must be an integer")


def test_logical_operands_not_bool():
    rejects(kernel(ir.if_(ir.Binary("and", n, n), ir.comment("x"))), "'and' needs bool operands")


def test_not_of_integer():
    rejects(kernel(ir.if_(ir.eq(ir.Unary("not", n), n), ir.comment("x"))), "'not' needs a bool")


def test_arithmetic_on_bool():
    rejects(kernel(ir.if_(ir.Binary("+", flag_true(), flag_true()), ir.comment("x"))),
            "'\\+' needs numeric operands")


@pytest.mark.parametrize("op", sorted(ir.BITWISE_OPS))
def test_bit_operations_on_floats_or_bools(op):
    rejects(kernel(ir.declare(t, 0.0), ir.store(y, 0, ir.Binary(op, t, t))),
            f"'{op}' needs integer operands")
    rejects(kernel(ir.if_(ir.Binary(op, flag_true(), flag_true()), ir.comment("x"))),
            f"'{op}' needs integer operands")


def test_ctz_of_a_float():
    rejects(kernel(ir.declare(t, 0.0), ir.store(y, 0, ir.ctz(t))),
            "'ctz' needs an integer operand")


def test_float_math_on_integer():
    rejects(kernel(ir.store(y, 0, ir.cast(ir.unary("sqrt", n), F64))), "'sqrt' needs a float")


def test_constant_out_of_range():
    rejects(kernel(ir.declare(var("s", I32), ir.Const(2**31, I32))), "not a value of i32")


def test_constant_of_wrong_kind():
    rejects(kernel(ir.declare(u, ir.Const(1.5, I64))), "not a value of i64")


def test_long_node_is_shortened():
    body = [ir.comment(str(x)) for x in range(40)]
    k = var("k", I32)
    err = rejects(kernel(ir.For(k, ir.const(0, I32), n, ir.block(*body))), "For stop")
    assert "..." in str(err) and "// 39" not in str(err)


def test_not_a_function():
    with pytest.raises(IRVerifyError, match="expects a Function"):
        ir.verify(ir.block())  # type: ignore[arg-type]
