"""Generated C kernels under AddressSanitizer and UBSan: splits, tails, register tiles (also
jammed into two-dimensional ones), jams and thread ranges never read or write out of bounds,
on sizes that cross each of their widths.

The kernels are built with ``CC="gcc -fsanitize=address,undefined"`` (``CC`` may carry flags:
a test-only setting, never the default) in a separate Python process that preloads the ASan
runtime, so every NumPy buffer gets red zones; any report fails the process.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import numpy as np, scipy.sparse as sp, tensoralg as ta
    rng = np.random.default_rng(0)
    I, J, K = 37, 70, 9          # across splits, a 32-wide tile and its halves, jams of 4
    A = sp.random_array((I, J), density=0.15, format="csr", random_state=1)
    A = sp.csr_array(A.toarray() * (rng.random((I, 1)) > 0.3))     # all-zero rows
    B = sp.random_array((I, J), density=0.15, format="csr", random_state=2)
    P, Q = rng.standard_normal((I, K)), rng.standard_normal((K, J))
    x, W = rng.standard_normal(J), rng.standard_normal((J, K))
    V = rng.standard_normal((J, 61))  # zero-started tiles of 32, 16, 8 and 4 lanes, then a rest
    cases = [
        ("y(i) = A(i,j) * x(j)", {"A": "csr"}, dict(A=A, x=x), A @ x),
        ("y(i) = A(i,j) * x(j)", {"A": "csc"}, dict(A=A.tocsc(), x=x), A @ x),
        ("C(i,k) = A(i,j) * W(j,k)", {"A": "csr"}, dict(A=A, W=W), A @ W),
        ("C(i,k) = A(i,j) * V(j,k)", {"A": "csr"}, dict(A=A, V=V), A @ V),
        ("C(i,j) = A(i,j) * P(i,k) * Q(k,j)", {"A": "csr"}, dict(A=A, P=P, Q=Q),
         A.multiply(P @ Q)),
        ("C(i,j) = A(i,j) + B(i,j)", {"A": "csr", "B": "csr"}, dict(A=A, B=B), A + B),
        ("C(i,j) = max(sum(k, P(i,k) * Q(k,j)) + x(j), 0)", {}, dict(P=P, Q=Q, x=x),
         np.maximum(P @ Q + x, 0)),
    ]
    schedules = [None, "split({outer}, 5); parallelize({outer}0, {reduction}threads=3)",
                 "tile(64); jam(2); unroll({inner}, 3)", "serial(); tile(0); jam(1)",
                 # a cache block of the innermost loop, moved outermost (a block cut short)
                 "split({inner}, 7, b0, b1); reorder(b0, {outer}, b1); "
                 "parallelize({outer}, {reduction}threads=3)"]
    count = 0
    for statement, formats, operands, expected in cases:
        plain = ta.compile(statement, formats=formats)
        order = plain.schedule.commands[0].indices
        reduction = "" if order[0] in plain.statement.lhs.indices else "reduction=partials, "
        for text in schedules:
            schedule = text and text.format(outer=order[0], inner=order[-1], reduction=reduction)
            try:
                k = ta.compile(statement, formats=formats, backend="c", schedule=schedule)
            except ta.CompileError:
                continue        # a split of a loop over a compressed level, refused by name
            got = k(**operands)
            got = got.toarray() if hasattr(got, "toarray") else np.asarray(got)
            want = expected.toarray() if hasattr(expected, "toarray") else expected
            assert np.allclose(got, want), (statement, schedule)
            count += 1
    # Two-dimensional register tiles (rows jammed over a row's tiles of 64, 32, 16 and 8
    # lanes and its rest), whole and in cache blocks of k, over row counts around the jam
    # and thread ranges that cut groups short.
    for rows in (1, 5, 13, 37):
        for text in ("gemm(loops); tile(256); jam(4, tiles=6)",
                     "gemm(loops); split(k, 4, k0, k1); reorder(k0, i, k1, j); jam(2, tiles=5)",
                     "gemm(loops); jam(4, tiles=3); parallelize(i, threads=3)"):
            k = ta.compile("C(i,j) = P(i,k) * Q(k,j)", backend="c", schedule=text)
            assert np.allclose(k(P=P[:rows], Q=Q), P[:rows] @ Q), (rows, text)
            count += 1
        # a stack of products: each product's rows jammed inside the thread range
        S, T = rng.standard_normal((3, rows, K)), rng.standard_normal((3, K, J))
        k = ta.compile("C(b,i,j) = S(b,i,k) * T(b,k,j)", backend="c",
                       schedule="gemm(loops); jam(4, tiles=6); parallelize(b, threads=2)")
        assert np.allclose(k(S=S, T=T), S @ T), rows
        count += 1
    # Position splits: chunks and thread ranges of nonzeros, rows found by binary search.
    for text in ["fuse({o}, {i}, f); pos(f, p, A); split(p, 5)",
                 "fuse({o}, {i}, f); pos(f, p, A); split(p, 3); "
                 "parallelize(p0, reduction=partials, threads=3)"]:
        for statement, fmt, operands, expected in cases[:3]:
            outer, inner = ("j", "i") if fmt["A"] == "csc" else ("i", "j")
            k = ta.compile(statement, formats=fmt, backend="c",
                           schedule=text.format(o=outer, i=inner))
            assert np.allclose(k(**operands), expected), (statement, text)
            count += 1
    # Thread ranges over a CSF tensor's fibres (positions of its first level), into a DCSR
    # output sharing its first two levels and into a dense one.
    dense_t = rng.standard_normal((I, 6, K)) * (rng.random((I, 6, K)) < 0.2)
    dense_t[::3] = 0                                              # empty slices
    T, v = ta.Tensor.from_numpy(dense_t, "csf"), rng.standard_normal(K)
    for out in ("dcsr", "dense"):
        for text in (None, "parallelize(i, threads=3)", "parallelize(i, threads=7)"):
            k = ta.compile("Y(i,j) = T(i,j,k) * v(k)", formats={"T": "csf", "Y": out},
                           backend="c", schedule=text)
            got = k(T=T, v=v)
            got = got.to_numpy() if hasattr(got, "to_numpy") else got
            assert np.allclose(got, dense_t @ v), (out, text)
            count += 1
    # A counted sum (lower/counted.py) given wrong counts: reported, never written past.
    import tensoralg.api as api
    counter = api.kernel_cache().rows
    original = counter.pos
    summed = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr"},
                        backend="c", schedule="parallelize(i, threads=3)")
    assert np.allclose(summed(A=A, B=B).toarray(), (A + B).toarray())
    for shift in (-1, 1):
        def wrong(*args, shift=shift, **kwargs):
            pos = original(*args, **kwargs)
            counts = np.maximum(np.diff(pos) + shift, 0)
            return np.r_[0, np.cumsum(counts)].astype(pos.dtype)
        counter.pos = wrong
        try:
            summed(A=A, B=B)
            raise AssertionError("a wrong count went unnoticed")
        except ta.KernelRuntimeError:
            count += 1
        finally:
            counter.pos = original
    print("kernels", count)
""")


def _sanitizer_runtime() -> str | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    path = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True,
                          text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


def test_scheduled_c_kernels_stay_in_bounds_under_sanitizers(tmp_path):
    runtime = _sanitizer_runtime()
    if runtime is None:
        pytest.skip("gcc with AddressSanitizer is not installed")
    env = dict(os.environ, LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
               CC="gcc -fsanitize=address,undefined -fno-sanitize-recover=all",
               TENSORALG_CACHE_DIR=str(tmp_path), TENSORALG_DISK_CACHE="0",
               PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert int(result.stdout.split("kernels")[-1]) >= 24
