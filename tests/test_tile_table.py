"""Register tiles built on demand (codegen/tile_table.py, runtime/tile_table.py).

The generated GEMM, pointwise and patch convolutions keep only their one-row tiles in the
driver module; a bound call builds the other tiles it will run. These tests hold the
prediction to the driver (a binding that misses a tile would run it row by row: correct,
slower, and counted), and the row-by-row path itself to NumPy.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tensoralg.codegen import gemm as gemm_codegen
from tensoralg.codegen import planar as planar_codegen
from tensoralg.codegen.conv import ConvGeometry
from tensoralg.codegen.gemm import GemmShape
from tensoralg.runtime.gemm import ConvLayer, DenseLayer
from tensoralg.runtime.planar import PlanarConv, patch_conv
from tensoralg.runtime.threads import KernelThreads
from tensoralg.runtime.winograd import WinogradConv

SHAPES = [GemmShape(np.dtype(np.float32), 16, 4), GemmShape(np.dtype(np.float64), 8, 4),
          GemmShape(np.dtype(np.float32), 8, 2), GemmShape(np.dtype(np.float64), 4, 2)]


def _driver_gemm_tiles(shape: GemmShape, columns: int, rows: int) -> set[tuple[int, int]]:
    """The tiles the GEMM driver's loops run, walked one panel and one row block at a time
    (as ``codegen/gemm._driver`` emits them)."""
    found = set()
    for j0 in range(0, max(columns, 0), shape.nr):
        ncols = columns - j0
        vectors = -(-ncols // shape.lanes) if ncols < shape.nr else shape.vectors
        mr = shape.rows_for(vectors)
        blocks = -(-rows // mr) if rows > 0 else 0
        for q in range(blocks):
            count = (q + 1) * rows // blocks - q * rows // blocks
            found.add((count, vectors))
    return found


def _driver_planar_tiles(shape: GemmShape, channels: int, positions: int
                         ) -> set[tuple[int, int]]:
    """The tiles the planar and patch drivers run: tiles of MR channels by panels."""
    found = set()
    for m0 in range(0, channels, planar_codegen.MR):
        for j0 in range(0, positions, shape.nr):
            ncols = min(positions - j0, shape.nr)
            found.add((min(channels - m0, planar_codegen.MR), -(-ncols // shape.lanes)))
    return found


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.dtype}-{s.nr}")
def test_predicted_tiles_are_the_drivers(shape):
    for rows in [0, 1, 2, 5, 6, 7, 11, 12, 13, 25, 49, 97, 256, 1001]:
        for columns in [0, 1, shape.lanes - 1, shape.lanes, shape.lanes + 1, shape.nr - 1,
                        shape.nr, shape.nr + 1, 2 * shape.nr + shape.lanes, 400]:
            assert gemm_codegen.tile_variants(shape, columns, rows) == \
                _driver_gemm_tiles(shape, columns, rows), (rows, columns)
            assert planar_codegen.tile_variants(shape, rows, columns) == \
                _driver_planar_tiles(shape, rows, columns), (rows, columns)


def _conv_reference(x, w, b, strides=(1, 1), pads=(0, 0)):
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0],) * 2, (pads[1],) * 2))
    kh, kw = w.shape[2:]
    windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    windows = windows[:, :, ::strides[0], ::strides[1]]
    return np.einsum("nchwij,mcij->nmhw", windows, w.astype(np.float64)) + \
        b[None, :, None, None]


def _fallbacks() -> int:
    from tensoralg.runtime.gemm import gemm_tiles
    from tensoralg.runtime.planar import _patches, planar_kernel

    total = 0
    for dtype in (np.float32, np.float64):
        shape, _, _, planar = planar_kernel(np.dtype(dtype), None)
        total += gemm_tiles(np.dtype(dtype)).fallbacks + planar.fallbacks + \
            _patches(shape, None)[2].fallbacks
    return total


@pytest.mark.parametrize("threads", [None, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_bound_call_builds_the_tiles_it_runs(dtype, threads):
    pool = KernelThreads(threads) if threads else None
    rng = np.random.default_rng(5)
    before = _fallbacks()
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}
    for m, k, n in [(1, 9, 3), (7, 33, 70), (49, 64, 17), (300, 200, 130), (1001, 40, 5)]:
        a, w = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
        np.testing.assert_allclose(DenseLayer(w, threads=pool)(a), a @ w, **tol)
    for n, c, hw, m in [(1, 8, (7, 7), 13), (2, 16, (12, 10), 70), (3, 5, (9, 31), 6)]:
        x = rng.standard_normal((n, c, *hw)).astype(dtype)
        w = rng.standard_normal((m, c, 3, 3)).astype(dtype)
        b = rng.standard_normal(m).astype(dtype)
        want = _conv_reference(x, w, b, pads=(1, 1))
        conv = ConvLayer(w, b, (1, 1), (1, 1), (1, 1), threads=pool)
        out = np.empty((n, m, *hw), dtype)
        conv.bind(x, out)()
        np.testing.assert_allclose(out, want, **tol)
        out = np.empty((n, m, *hw), dtype)
        WinogradConv(w, b, (1, 1), (1, 1), threads=pool).bind(x, out)()
        np.testing.assert_allclose(out, want, **tol)
        pointwise = w[:, :, 1, 1]
        np.testing.assert_allclose(PlanarConv(pointwise, b, threads=pool)(x),
                                   _conv_reference(x, pointwise[:, :, None, None], b), **tol)
    x = rng.standard_normal((2, 3, 40, 41)).astype(dtype)
    for m in (5, 16, 26):
        w = rng.standard_normal((m, 3, 3, 3)).astype(dtype)
        b = rng.standard_normal(m).astype(dtype)
        g = ConvGeometry(3, 40, 41, m, 20, 21, (3, 3), (2, 2), (1, 1), (1, 1), 1)
        conv = patch_conv(g, w, b, threads=pool)
        assert conv is not None
        np.testing.assert_allclose(conv(x), _conv_reference(x, w, b, (2, 2), (1, 1)), **tol)
    assert _fallbacks() == before


_WITHOUT_TILES = textwrap.dedent("""
    import json, sys
    import numpy as np
    from tensoralg.runtime import tile_table
    from tensoralg.runtime.gemm import DenseLayer, gemm_tiles

    if sys.argv[1] == "none":
        tile_table.TileTable.ensure = lambda self, variants: None   # every tile row by row
    a = np.random.default_rng(0).standard_normal((1, 40)).astype(np.float32)
    DenseLayer(np.ones((40, 70), np.float32))(a)
    print(json.dumps(sorted(gemm_tiles(np.dtype(np.float32)).built())))
""")


def test_a_batch_of_one_builds_no_tiles(tmp_path):
    # A fresh process and cache: a one-row product needs only the driver's own tiles.
    env = dict(os.environ, TENSORALG_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TILES, "predicted"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


_ROW_BY_ROW = textwrap.dedent("""
    import json
    import numpy as np
    from tensoralg.codegen.conv import ConvGeometry
    from tensoralg.runtime import tile_table
    from tensoralg.runtime.gemm import DenseLayer, gemm_tiles
    from tensoralg.runtime.planar import PlanarConv, _patches, patch_conv, planar_kernel
    from tensoralg.runtime.threads import KernelThreads
    from tensoralg.runtime.winograd import WinogradConv

    tile_table.TileTable.ensure = lambda self, variants: None   # every tile row by row
    rng = np.random.default_rng(1)
    errors = []
    for dtype in (np.float32, np.float64):
        for m, k, n in [(7, 33, 70), (49, 64, 17), (300, 500, 130)]:
            a = rng.standard_normal((m, k)).astype(dtype)
            w = rng.standard_normal((k, n)).astype(dtype)
            b = rng.standard_normal(n).astype(dtype)
            got = DenseLayer(w, b, relu=True, threads=KernelThreads(2))(a)
            errors.append(float(np.abs(got - np.maximum(a @ w + b, 0)).max()))
        x = rng.standard_normal((2, 16, 12, 10)).astype(dtype)
        w = rng.standard_normal((70, 16, 3, 3)).astype(dtype)
        b = rng.standard_normal(70).astype(dtype)
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        want = np.einsum("nchwij,mcij->nmhw", windows, w) + b[None, :, None, None]
        out = np.empty((2, 70, 12, 10), dtype)
        WinogradConv(w, b, (1, 1), (1, 1)).bind(x, out)()
        errors.append(float(np.abs(out - want).max()))
        pointwise = w[:, :, 1, 1]
        got = PlanarConv(pointwise, b)(x)
        errors.append(float(np.abs(
            got - np.einsum("mc,nchw->nmhw", pointwise, x) - b[None, :, None, None]).max()))
        x = rng.standard_normal((2, 3, 40, 41)).astype(dtype)
        w = rng.standard_normal((26, 3, 3, 3)).astype(dtype)
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        want = np.einsum("nchwij,mcij->nmhw", windows[:, :, ::2, ::2], w) + \
            b[None, :26, None, None]
        g = ConvGeometry(3, 40, 41, 26, 20, 21, (3, 3), (2, 2), (1, 1), (1, 1), 1)
        errors.append(float(np.abs(patch_conv(g, w, b[:26])(x) - want).max()))
    shape = planar_kernel(np.dtype(np.float32), None)[0]
    counts = [gemm_tiles(np.dtype(np.float32)).fallbacks,
              planar_kernel(np.dtype(np.float32), None)[3].fallbacks,
              _patches(shape, None)[2].fallbacks]
    print(json.dumps({"errors": errors, "fallbacks": counts}))
""")


def test_tiles_not_built_run_row_by_row(tmp_path):
    # The driver never skips a tile it lacks: it runs the tile's rows through its one-row
    # tile (and counts it). Checked in a process whose bindings build no tiles at all.
    env = dict(os.environ, TENSORALG_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", _ROW_BY_ROW], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert max(found["errors"]) < 1e-3, found
    assert all(count > 0 for count in found["fallbacks"]), found
