"""The in-process and on-disk kernel caches, seen from the public API.

Subprocesses get their own TENSORALG_CACHE_DIR (a tmp_path), so no test touches the user's cache.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.api import kernel_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# prints {"compiles": n, "ok": bool, "from_cache": [...]} after running a few einsums
CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np, scipy.sparse as sp
    import tensoralg as ta
    from tensoralg.api import kernel_cache
    A = sp.random_array((30, 20), density=0.2, format="csr", random_state=1)
    x = np.arange(20.0)
    ok = bool(np.allclose(ta.einsum("ij,j->i", A, x), A @ x))
    ok &= bool(np.allclose(ta.einsum("ij,j->i", A, x, backend="c"), A @ x))
    C = ta.einsum("ik,kj->ij", A, A.T.tocsr())
    ok &= bool(np.allclose(C.toarray(), (A @ A.T).toarray()))
    cache = kernel_cache()
    print(json.dumps({"compiles": cache.compiles, "ok": ok,
                      "from_cache": [p.kernel.from_cache for p in cache.kernels.values()]}))
""")


def run_child(cache_dir, code=CHILD):
    env = dict(os.environ, TENSORALG_CACHE_DIR=str(cache_dir))
    env.pop("TENSORALG_DISK_CACHE", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"child died ({done.returncode}):\n{done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_session_cache_is_private_and_not_the_users(session_cache_dir):
    cache = kernel_cache()
    assert cache.disk is not None
    assert cache.disk.directory == session_cache_dir
    assert stat.S_IMODE(session_cache_dir.stat().st_mode) == 0o700


def test_second_call_does_not_compile(rng):
    A = sp.random_array((13, 11), density=0.3, format="csr", random_state=4)
    x = rng.standard_normal(11)
    ta.einsum("ij,j->i", A, x, formats=[ta.DCSR, None])
    before = kernel_cache().compiles
    y = ta.einsum("ij,j->i", A, x, formats=[ta.DCSR, None])
    assert kernel_cache().compiles == before
    np.testing.assert_allclose(y, A @ x)
    # another shape and values, same formats and dtypes: still no compile
    B = sp.random_array((7, 11), density=0.5, format="csr", random_state=5)
    ta.einsum("ij,j->i", B, x, formats=[ta.DCSR, None])
    assert kernel_cache().compiles == before


def test_a_new_dtype_or_format_compiles_again(rng):
    A = sp.random_array((9, 8), density=0.3, format="csr", random_state=6)
    x = rng.standard_normal(8)
    ta.einsum("ij,j->i", A, x)
    before = kernel_cache().compiles
    y = ta.einsum("ij,j->i", A.astype(np.float32), x.astype(np.float32), formats=["ss", None])
    assert kernel_cache().compiles >= before  # compiled or read from disk, but answered right
    np.testing.assert_allclose(y, A @ x, rtol=1e-5)


def test_new_process_reuses_the_disk_cache(tmp_path):
    first = run_child(tmp_path / "k")
    assert first["ok"] and first["compiles"] >= 3 and not any(first["from_cache"])
    second = run_child(tmp_path / "k")
    assert second["ok"]
    assert second["compiles"] == 0 and all(second["from_cache"]), second


def test_cache_dir_is_created_private(tmp_path):
    run_child(tmp_path / "new" / "kernels")
    mode = stat.S_IMODE((tmp_path / "new" / "kernels").stat().st_mode)
    assert mode == 0o700, oct(mode)


def test_a_cache_dir_others_can_write_is_not_used_and_left_alone(tmp_path):
    """Kernels loaded from it could be anyone's code: the child warns, compiles without the
    disk cache (still right), and neither writes there nor changes the directory's mode."""
    d = tmp_path / "loose"
    d.mkdir()
    d.chmod(0o777)
    first = run_child(d)
    assert first["ok"] and first["compiles"] >= 3 and not any(first["from_cache"])
    assert stat.S_IMODE(d.stat().st_mode) == 0o777 and list(d.iterdir()) == []


def test_an_existing_private_enough_cache_dir_keeps_its_mode(tmp_path):
    """TENSORALG_CACHE_DIR may name a folder of the user's (a project directory, 0755):
    only one the cache creates is made owner-only."""
    d = tmp_path / "project"
    d.mkdir()
    d.chmod(0o755)
    assert run_child(d)["ok"]
    assert stat.S_IMODE(d.stat().st_mode) == 0o755 and any(d.iterdir())


def test_an_unusable_cache_dir_warns_and_runs_without_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code = "import warnings; warnings.simplefilter('error', UserWarning)\n" + CHILD
    env = dict(os.environ, TENSORALG_CACHE_DIR=str(blocker / "kernels"))
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout.splitlines()[-1])["ok"]
    assert "cannot be used" in done.stderr and "without the on-disk kernel cache" in done.stderr
    strict = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert strict.returncode != 0     # the warning is a real UserWarning, not a print


def _damage(cache_dir, how):
    files = [p for p in cache_dir.iterdir() if p.is_file()]
    assert files
    for p in files:
        data = bytearray(p.read_bytes())
        if how == "truncate":
            data = data[: len(data) // 2]
        elif how == "empty":
            data = bytearray()
        elif how == "flip-header":
            data[3] ^= 0xFF
        else:  # flip a byte in the machine code
            data[-20] ^= 0x5A
        p.write_bytes(bytes(data))


@pytest.mark.parametrize("how", [
    "flip-payload",
    pytest.param("truncate", marks=pytest.mark.slow),
    pytest.param("empty", marks=pytest.mark.slow),
    pytest.param("flip-header", marks=pytest.mark.slow),
])
def test_corrupted_cache_files_are_rebuilt(tmp_path, how):
    d = tmp_path / how
    run_child(d)
    _damage(d, how)
    again = run_child(d)
    assert again["ok"], how
    assert again["compiles"] >= 3 and not any(again["from_cache"]), (how, again)
    third = run_child(d)  # rebuilt entries are good again
    assert third["ok"] and third["compiles"] == 0, (how, third)


def test_stale_entry_from_another_compiler_build_is_not_loaded(tmp_path):
    """An entry stored under a kernel's key by a different compiler build (other lowering, other
    ABI) must not be run: here the stored machine code is that of another statement, renamed.

    Reproduces a crash ("double free or corruption") seen when ~/.cache/tensoralg held kernels
    built by an older checkout with the same version string.
    """
    code = CHILD + textwrap.dedent("""
        import dataclasses
        from tensoralg.codegen import build
        progs = list(kernel_cache().kernels.values())
        spmv = [p for p in progs if p.key.backend == "llvm" and "A(" in p.key.statement
                and p.key.out_format is None and p.program.output.format.is_dense][0]
        other = [p for p in progs if p is not spmv and p.key.backend == "llvm"][0]
        disk = kernel_cache().disk
        for f in disk.directory.iterdir():
            f.unlink()
        fake = dataclasses.replace(other.function, name=spmv.function.name)
        build(fake, "llvm", cache=disk, key=spmv.key.digest())   # stored under spmv's entry
    """)
    run_child(tmp_path / "k", code)
    again = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, TENSORALG_CACHE_DIR=str(tmp_path / "k")))
    assert again.returncode == 0, f"a stale cache entry was loaded and run (rc {again.returncode}):\n{again.stderr[-600:]}"
    assert json.loads(again.stdout.strip().splitlines()[-1])["ok"], "stale entry gave a wrong answer"


def test_disk_cache_off_still_works(tmp_path):
    env = dict(os.environ, TENSORALG_CACHE_DIR=str(tmp_path / "off"), TENSORALG_DISK_CACHE="0")
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["ok"]
    assert not (tmp_path / "off").exists() or not any((tmp_path / "off").iterdir())


# compiles a few kernels whose lowering differs (sparse output, position split, CSF, threads) and
# prints what a user can see of them; with LOWER_FORBIDDEN set, lowering raises
LOWERED_CHILD = textwrap.dedent("""
    import json, os
    import numpy as np, scipy.sparse as sp
    import tensoralg as ta
    import tensoralg.api as api
    if os.environ.get("LOWER_FORBIDDEN"):
        def refuse(*args, **kwargs):
            raise AssertionError("lowered again although the disk cache holds the program")
        api.lower = api.concretize = refuse
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=1)
    B = sp.random_array((30, 25), density=0.2, format="csr", random_state=2)
    x = np.arange(30.0)
    T = ta.Tensor.from_numpy(np.random.default_rng(0).random((6, 5, 4)) * (
        np.random.default_rng(1).random((6, 5, 4)) < 0.3), "sss")
    kernels = [
        ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}),
        ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"}),
        ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"}),
        ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"},
                   schedule="fuse(i, j, f); pos(f, p, A); split(p, 7)"),
    ]
    results = [kernels[0](A=A, x=x), kernels[1](A=A, B=B.T.tocsr().T.tocsr()).toarray(),
               kernels[2](A=A, B=A).toarray(), kernels[3](A=A, x=x)]
    m = ta.compile("M(i,r) = T(i,j,k) * P(j,r) * Q(k,r)", formats={"T": "sss"})
    P, Q = np.ones((5, 3)), np.arange(12.0).reshape(4, 3)
    results.append(m(T=T, P=P, Q=Q))
    expected = [A @ x, (A @ B).toarray(), (A + A).toarray(), A @ x,
                np.einsum("ijk,jr,kr->ir", T.to_numpy(), P, Q)]
    print(json.dumps({
        "ok": all(bool(np.allclose(r.to_numpy() if isinstance(r, ta.Tensor) else r, e))
                  for r, e in zip(results, expected)),
        "schedules": [str(k.schedule) for k in kernels + [m]],
        "ir": [k.source("ir") for k in kernels + [m]],
        "compiles": api.kernel_cache().compiles}))
""")


def _run_without_lowering(cache_dir):
    env = dict(os.environ, TENSORALG_CACHE_DIR=str(cache_dir), LOWER_FORBIDDEN="1")
    done = subprocess.run([sys.executable, "-c", LOWERED_CHILD], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_new_process_takes_the_lowered_program_from_the_disk_cache(tmp_path):
    first = run_child(tmp_path / "k", LOWERED_CHILD)
    assert first["ok"] and first["compiles"] >= 5
    second = _run_without_lowering(tmp_path / "k")
    assert second["ok"] and second["compiles"] == 0
    assert second["schedules"] == first["schedules"]
    assert second["ir"] == first["ir"]


def test_a_damaged_lowered_entry_is_lowered_again(tmp_path):
    run_child(tmp_path / "k", LOWERED_CHILD)
    damaged = list((tmp_path / "k").glob("lowered-*.kernel"))
    assert len(damaged) >= 5
    for path in damaged:
        data = bytearray(path.read_bytes())
        data[-5] ^= 0x33
        path.write_bytes(bytes(data))
    with pytest.raises(AssertionError, match="lowered again"):
        _run_without_lowering(tmp_path / "k")      # a damaged entry is never unpickled
    again = run_child(tmp_path / "k", LOWERED_CHILD)
    assert again["ok"] and again["compiles"] == 0     # machine code still good, IR rebuilt
    assert _run_without_lowering(tmp_path / "k")["ok"]   # and stored again, whole


def test_the_garbage_collector_pauses_only_while_a_kernel_compiles(monkeypatch):
    import gc

    import tensoralg.api as api

    seen = []
    original = api.lower

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(api, "lower", spy)
    assert gc.isenabled()
    ta.compile("y(i) = A(i,j) * x(j) * 3.25", formats={"A": "csr"})
    assert seen == [False] and gc.isenabled()
    gc.disable()          # a caller that paused it keeps it paused
    try:
        ta.compile("y(i) = A(i,j) * x(j) * 5.75", formats={"A": "csr"})
        assert seen == [False, False] and not gc.isenabled()
    finally:
        gc.enable()
