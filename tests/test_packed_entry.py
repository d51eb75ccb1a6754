"""The packed entry of every built kernel (codegen/packed.py): one buffer of 8-byte slots.

A kernel called through ``CompiledKernel.call`` must do exactly what the plain ctypes entry
does, for every parameter type (int32, int64, bool, float32, float64, pointers), on both CPU
backends, from a fresh build and from the disk cache; arguments that do not pack go to the
plain entry.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from tensoralg.codegen.build import build
from tensoralg.codegen.cache import DiskCache
from tensoralg.codegen.packed import c_entry, packed_caller, slot_format
from tensoralg.ir import build as b
from tensoralg.ir.nodes import Ptr, Scalar

BACKENDS = ["llvm", "c"]


def _mixed():
    """``out[k] = a*i32 + b*i64 + (flag ? f32 : 0) + f64`` for k in [0, n), as float64, with
    ``n`` int32; each parameter type once, so that a slot read with the wrong width or kind
    changes the result."""
    n, i32, i64 = b.var("n", Scalar.I32), b.var("p32", Scalar.I32), b.var("p64", Scalar.I64)
    flag, f32, f64 = b.var("flag", Scalar.BOOL), b.var("q32", Scalar.F32), b.var("q64", Scalar.F64)
    out, k = b.var("out", Ptr(Scalar.F64)), b.var("k", Scalar.I64)
    value = b.add(b.add(b.add(b.mul(b.cast(i32, Scalar.F64), 1000.0),
                              b.mul(b.cast(i64, Scalar.F64), 10.0)),
                        b.select(flag, b.cast(f32, Scalar.F64), b.const(0.0, Scalar.F64))),
                  b.add(f64, b.cast(k, Scalar.F64)))
    params = [b.param(n, "n"), b.param(i32, "p32"), b.param(i64, "p64"), b.param(flag, "flag"),
              b.param(f32, "q32"), b.param(f64, "q64"), b.param(out, "out", output=True)]
    return b.function("packed_mixed", params,
                      b.for_(k, 0, b.cast(n, Scalar.I64), b.store(out, k, value)))


def _expected(n, p32, p64, flag, q32, q64):
    return p32 * 1000.0 + p64 * 10.0 + (float(np.float32(q32)) if flag else 0.0) + q64 + \
        np.arange(n)


@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_entry_matches_the_plain_entry_for_every_parameter_type(backend):
    kernel = build(_mixed(), backend)
    assert kernel.call is not None and kernel.call is not kernel.function
    for args in [(5, -7, 2**40 + 3, True, 0.1, -2.5), (3, 2**31 - 1, -(2**62), False, 1e30, 0.0),
                 (0, 0, 0, True, 0.0, 0.0)]:
        n = args[0]
        packed, plain = np.full(max(n, 1), np.nan), np.full(max(n, 1), np.nan)
        assert kernel.call(*args, packed.ctypes.data) == 0
        assert kernel.function(*args, plain.ctypes.data) == 0
        np.testing.assert_array_equal(packed, plain)
        if n:
            np.testing.assert_array_equal(packed, _expected(*args))
        else:
            assert np.isnan(packed).all()        # n = 0 writes nothing


@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_entry_is_kept_in_the_disk_cache(backend, tmp_path):
    cache = DiskCache(tmp_path)
    first = build(_mixed(), backend, cache=cache, key="packed-mixed")
    again = build(_mixed(), backend, cache=cache, key="packed-mixed")
    assert again.from_cache and again.call is not again.function
    out = np.empty(4)
    assert again.call(4, 1, 2, True, 0.5, 0.25, out.ctypes.data) == 0
    np.testing.assert_array_equal(out, _expected(4, 1, 2, True, 0.5, 0.25))
    assert first.call is not None


def test_arguments_that_do_not_pack_go_to_the_plain_entry():
    kernel = build(_mixed(), "llvm")
    out = np.empty(2)
    # A ctypes object where an address is expected: struct cannot pack it, ctypes can.
    assert kernel.call(2, 1, 1, False, 0.0, 0.0, ctypes.c_void_p(out.ctypes.data)) == 0
    np.testing.assert_array_equal(out, _expected(2, 1, 1, False, 0.0, 0.0))
    with pytest.raises(TypeError):          # the plain entry's own error for a missing argument
        kernel.call(2, 1, 1, False, 0.0)


def test_packed_calls_from_several_threads_do_not_share_arguments():
    kernel = build(_mixed(), "llvm")
    outs = [np.empty(64) for _ in range(8)]
    errors = []

    def work(t):
        for _ in range(200):
            if kernel.call(64, t, t, True, float(t), float(t), outs[t].ctypes.data) != 0:
                errors.append(t)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for t, out in enumerate(outs):
        np.testing.assert_array_equal(out, _expected(64, t, t, True, float(t), float(t)))


def test_slot_format_and_c_entry_read_each_type_from_its_slot():
    fn = _mixed()
    assert slot_format(fn.params) == "=qqqqddq"
    text = c_entry(fn.name, fn.params)
    assert "(int32_t)slots[1].i" in text and "slots[3].i != 0" in text
    assert "(float)slots[4].d" in text and "slots[5].d" in text and "slots[6].p" in text


def test_without_a_packed_entry_the_caller_is_the_plain_function():
    def plain(*args):
        return len(args)

    assert packed_caller(plain, 0, []) is plain
