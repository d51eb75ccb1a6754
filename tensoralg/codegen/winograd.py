"""A 3x3 convolution (stride 1, group 1) by Winograd's minimal filtering F(2x2, 3x3): LLVM IR.

Each 2 x 2 block of outputs (a *tile*) of an output plane is, with the 4 x 4 input patch ``d``
under it and a 3 x 3 kernel ``g`` (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016)::

    Y = A^T [(G g G^T) * (B^T d B)] A      (* elementwise, 16 products where direct takes 36)

Summed over input channels, the 16 elementwise products become 16 matrix products, one per
position ``xi`` of the 4 x 4 transformed tile: ``M[xi] = V[xi] @ U[xi]``, with ``V[xi]``
(tiles x C) the transformed input and ``U[xi]`` (C x M) the transformed weight, made once at
load (``runtime/winograd.py``). A 3x3 layer thus does 16 multiply-adds per channel pair for 4
outputs instead of 36: 2.25x fewer, all of them in the generated GEMM (``codegen/gemm.py``,
called through a function pointer with each product's addresses).

This module holds the driver around those products. Tiles are taken in blocks whose
transformed input and products stay in L2 (the block is chosen by ``runtime/winograd.py``);
for each block it

1. transforms the input: the input was copied once into a zero-bordered channels-last buffer
   (``codegen/conv.channels_last_module``), so a tile's 16 input vectors of ``lanes`` channels
   are contiguous loads, and ``B^T d B`` is 32 vector additions; the 16 results go to
   ``V[xi][tile]``, channels contiguous (the GEMM's rows);
2. runs the 16 products into ``M[xi][tile]`` (output channels contiguous);
3. transforms the products back (``A^T m A``: 24 vector additions for 4 outputs), adds the
   bias and applies the activation in registers. Runs of up to ``lanes / 2`` tiles along a
   tile row make each output row ``lanes`` contiguous columns per channel: the column vectors
   (a vector of ``lanes`` output channels each) are transposed in registers (64 two-source
   shuffles for 16 lanes) and stored as one masked row segment per channel; columns past an
   odd output edge are masked off. Against scattering each output vector into its NCHW
   planes, the transposed stores took the transforms of a 32 -> 128 layer at 54 x 54, batch
   8, from 3.5 to 2.2 ms, and of a 64 -> 256 one at 27 x 27 from 2.0 to 1.2 ms (float32 on
   AVX-512, one thread, ad hoc, 2026-12-05).

The transforms take only additions and subtractions of the input and products (``G``'s halves
apply to the weight, in float64, at load), so the rounding differs from a direct convolution's
by a few units in the last place of the sums: within the float32 tolerances the ONNX tests and
benchmarks hold every kernel to.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from tensoralg.codegen.activation import emit_activation
from tensoralg.codegen.gemm import vector_intrinsics
from tensoralg.codegen.llvm_helpers import (
    counted_loop,
    entry_alloca,
    if_then,
    while_loop,
)

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_winograd"
TILE = 2          # outputs a tile, per axis (F(2x2, 3x3))
PATCH = 4         # inputs a tile, per axis
POSITIONS = PATCH * PATCH

# The transforms of F(2x2, 3x3) (Lavin and Gray): input B^T, weight G, output A^T.
B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def transformed_weight(weight: np.ndarray) -> np.ndarray:
    """``G g G^T`` of every kernel of ``weight`` (M, C, 3, 3), in float64, as ``U[xi]``
    (16, C, M): the right-hand side of position ``xi``'s product.

    >>> w = np.zeros((1, 1, 3, 3)); w[0, 0, 1, 1] = 1.0     # the identity kernel
    >>> transformed_weight(w)[:, 0, 0].reshape(4, 4)[1:3, 1:3].tolist()
    [[0.25, -0.25], [-0.25, 0.25]]
    """
    u = np.einsum("ai,mcij,bj->abcm", G, np.asarray(weight, np.float64), G)
    return u.reshape(POSITIONS, weight.shape[1], weight.shape[0])


def _combine(builder: ir.IRBuilder, rows: list[Any], matrix: np.ndarray) -> list[Any]:
    """``matrix @ rows`` for a matrix of 0 and +-1 entries, as vector additions."""
    out = []
    for coefficients in matrix:
        value = None
        for coefficient, row in zip(coefficients, rows):
            if coefficient == 0:
                continue
            if value is None:
                value = row if coefficient > 0 else builder.fneg(row)
            else:
                value = builder.fadd(value, row) if coefficient > 0 else \
                    builder.fsub(value, row)
        out.append(value)
    return out


def _transpose(b: ir.IRBuilder, vectors: list[Any], lanes: int) -> list[Any]:
    """The ``lanes`` x ``lanes`` matrix whose rows are ``vectors``, transposed: vector ``l``
    holds lane ``l`` of every input. Four stages of two-source shuffles, each swapping the
    off-diagonal blocks of a pair of vectors ``s`` apart (s = lanes / 2, ..., 1).

    >>> m = ir.Module(); f = ir.Function(m, ir.FunctionType(ir.VoidType(), ()), name="f")
    >>> b = ir.IRBuilder(f.append_basic_block())
    >>> v = [ir.Constant(ir.VectorType(ir.FloatType(), 2), [k, k + 10]) for k in (1, 2)]
    >>> len(_transpose(b, v, 2))
    2
    """
    step = lanes // 2
    while step:
        swapped: list[Any] = [None] * lanes
        for k in range(lanes):
            if k & step:
                continue
            low = [lane if not lane & step else lanes + lane - step for lane in range(lanes)]
            high = [lane + step if not lane & step else lanes + lane for lane in range(lanes)]
            for target, picks in ((k, low), (k + step, high)):
                swapped[target] = b.shuffle_vector(vectors[k], vectors[k + step], ir.Constant(
                    ir.VectorType(I32, lanes), picks))
        vectors, step = swapped, step // 2
    return vectors


def winograd_module(dtype: np.dtype, lanes: int, activation: Any) -> ir.Module:
    """The module exporting ``int32 tensoralg_winograd(P, OUT, V, MP, U, GEMM, BIAS, begin,
    end, block, tiles_h, tiles_w, C, M, p_row, p_image, OH, OW, out_image, u_stride, k_block,
    v_stride, m_stride)``: tiles ``[begin, end)`` (numbered image by image, row by row) of the
    3x3 convolution of the zero-bordered channels-last input ``P`` (its rows ``p_row`` and
    images ``p_image`` elements apart, the top-left border already in it) into the NCHW
    ``OUT`` (images ``out_image`` apart), with the scratch ``V`` (16 x block x C) and ``MP``
    (16 x block x M), the 16 packed transformed weights at ``U``, ``u_stride`` elements apart,
    and the generated GEMM at ``GEMM`` (``codegen/gemm.py``'s entry, K blocks of ``k_block``).
    The 16 slabs of ``V`` lie ``v_stride`` elements apart and those of ``MP`` ``m_stride``
    (a line past a multiple of 4 KiB, so that the 16 streams do not share an L1 set).
    ``BIAS`` holds the M values added to every output (zeros for a Conv without one; the
    products get it without their bias flag, so they do not read it). ``activation`` is
    baked in. Returns the first non-zero status of a product, else 0.

    >>> "tensoralg_winograd" in str(winograd_module(np.dtype(np.float32), 16, None))
    True
    """
    dtype = np.dtype(dtype)
    scalar = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    module = ir.Module(name=f"winograd_{dtype.name}")
    vector, mask_type, _, load, store = vector_intrinsics(module, scalar, lanes)
    gemm_type = ir.FunctionType(I32, (POINTER, I64, POINTER, I64, I64, POINTER, I64, POINTER,
                                      I32, I64, I64, *[I64] * 9))
    fn = ir.Function(module, ir.FunctionType(I32, (*[POINTER] * 5, gemm_type.as_pointer(),
                                                   POINTER, *[I64] * 16)), name=ENTRY)
    (padded, out, v_scratch, m_scratch, u, gemm, bias, begin, end, block, tiles_h,
     tiles_w, channels, out_channels, p_row, p_image, out_h, out_w, out_image, u_stride,
     k_block, v_stride, m_stride) = fn.args
    for pointer in (padded, out, v_scratch, m_scratch):
        pointer.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    align = ir.Constant(I32, dtype.itemsize)
    index_vector = ir.VectorType(I64, lanes)
    iota = ir.Constant(index_vector, list(range(lanes)))

    def const(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return b.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    def splat_index(value: ir.Value) -> ir.Value:
        first = b.insert_element(ir.Constant(index_vector, ir.Undefined), value,
                                 ir.Constant(I32, 0))
        return b.shuffle_vector(first, ir.Constant(index_vector, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def lanes_mask(count: ir.Value) -> ir.Value:
        return b.icmp_signed("<", iota, splat_index(count))

    def smaller(x: ir.Value, y: ir.Value) -> ir.Value:
        return b.select(b.icmp_signed("<", x, y), x, y)

    zeros = ir.Constant(vector, None)
    in_vectors = b.sdiv(b.add(channels, const(lanes - 1)), const(lanes))
    out_vectors = b.sdiv(b.add(out_channels, const(lanes - 1)), const(lanes))
    per_image = b.mul(tiles_h, tiles_w)
    plane = b.mul(out_h, out_w)
    status = entry_alloca(b, I32, "status")
    b.store(ir.Constant(I32, 0), status)
    first, r, c0, xi = (entry_alloca(b, I64, n) for n in ("first", "r", "c0", "xi"))

    def tile_at(index: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        image = b.sdiv(index, per_image)
        rest = b.sub(index, b.mul(image, per_image))
        row = b.sdiv(rest, tiles_w)
        return image, row, b.sub(rest, b.mul(row, tiles_w))

    blocks = b.sdiv(b.add(b.sub(end, begin), b.sub(block, const(1))), block)
    with counted_loop(b, first, const(0), lambda: blocks, "block"):
        t0 = b.add(begin, b.mul(b.load(first, typ=I64), block))
        rows = smaller(block, b.sub(end, t0))
        # 1. the input transform of the block's tiles
        with counted_loop(b, r, const(0), lambda: rows, "in"):
            row = b.load(r, typ=I64)
            image, th, tw = tile_at(b.add(t0, row))
            corner = b.add(b.mul(image, p_image),
                           b.add(b.mul(b.mul(th, const(TILE)), p_row),
                                 b.mul(b.mul(tw, const(TILE)), channels)))
            with counted_loop(b, c0, const(0), lambda: in_vectors, "in.c"):
                c = b.mul(b.load(c0, typ=I64), const(lanes))
                mask = lanes_mask(b.sub(channels, c))
                patch = [[b.call(load, [at(padded, b.add(corner, b.add(b.add(
                    b.mul(const(i), p_row), b.mul(const(j), channels)), c))), align, mask,
                    zeros]) for j in range(PATCH)] for i in range(PATCH)]
                # B^T d, then (.) B: columns of each row
                rows_t = [_combine(b, [patch[i][j] for i in range(PATCH)], B_T)
                          for j in range(PATCH)]          # rows_t[j][a] = (B^T d)[a][j]
                for a in range(PATCH):
                    values = _combine(b, [rows_t[j][a] for j in range(PATCH)], B_T)
                    for bb, value in enumerate(values):
                        position = a * PATCH + bb
                        where = b.add(b.add(b.mul(const(position), v_stride),
                                            b.mul(row, channels)), c)
                        b.call(store, [value, at(v_scratch, where), align, mask])
        # 2. the 16 products
        with counted_loop(b, xi, const(0), lambda: const(POSITIONS), "xi"):
            position = b.load(xi, typ=I64)
            done = b.call(gemm, [
                at(v_scratch, b.mul(position, v_stride)), channels,
                at(u, b.mul(position, u_stride)), channels, out_channels,
                at(m_scratch, b.mul(position, m_stride)), out_channels,
                bias, ir.Constant(I32, 0), const(0), rows, k_block, k_block,
                b.select(b.icmp_signed(">", rows, const(0)), rows, const(1)), const(1),
                const(0), const(0), const(0), const(0), const(1)])
            with if_then(b, b.icmp_signed("!=", done, ir.Constant(I32, 0)), "failed"):
                b.store(done, status)
        # 3. the output transform, bias, activation, stores. Runs of up to lanes / 2 tiles
        # along one tile row: each output row of a run is `lanes` contiguous columns per
        # output channel, so the vectors of channels for its columns are transposed in
        # registers into one row segment per channel, a plain masked store each (a scatter
        # costs about a cycle an element).
        first_tile = entry_alloca(b, I64, "run.first")
        b.store(const(0), first_tile)
        with while_loop(b, lambda: b.icmp_signed("<", b.load(first_tile, typ=I64), rows),
                        "out.runs"):
            row0 = b.load(first_tile, typ=I64)
            image, th, tw = tile_at(b.add(t0, row0))
            count = smaller(smaller(const(lanes // 2), b.sub(tiles_w, tw)),
                            b.sub(rows, row0))
            oy, ox = b.mul(th, const(TILE)), b.mul(tw, const(TILE))
            columns_left = smaller(b.mul(count, const(TILE)), b.sub(out_w, ox))
            column_mask = lanes_mask(columns_left)
            none = ir.Constant(mask_type, [0] * lanes)
            origin = b.add(b.mul(image, out_image), b.add(b.mul(oy, out_w), ox))
            with counted_loop(b, c0, const(0), lambda: out_vectors, "runs.m"):
                m = b.mul(b.load(c0, typ=I64), const(lanes))
                mask = lanes_mask(b.sub(out_channels, m))
                shift = b.call(load, [at(bias, m), align, mask, zeros])
                for i in range(TILE):
                    grid_rows = [a for a in range(PATCH) if A_T[i][a] != 0]
                    with if_then(b, b.icmp_signed("<", b.add(oy, const(i)), out_h),
                                 f"runrow{i}"):
                        segment = []
                        for k in range(lanes // 2):
                            # a tile past the run repeats its last: its columns are
                            # masked off
                            tile = b.add(row0, smaller(const(k), b.sub(count, const(1))))
                            at_tile = b.add(b.mul(tile, out_channels), m)
                            grid = {(a, j): b.call(load, [at(m_scratch, b.add(b.mul(
                                const(a * PATCH + j), m_stride), at_tile)), align, mask,
                                zeros]) for a in grid_rows for j in range(PATCH)}
                            across = [_combine(b, [grid.get((a, j), zeros)
                                                   for a in range(PATCH)], A_T[i:i + 1])[0]
                                      for j in range(PATCH)]
                            segment += [emit_activation(b, b.fadd(value, shift), activation)
                                        for value in _combine(b, across, A_T)]
                        rows_of = _transpose(b, segment, lanes)
                        start = at(out, b.add(origin, b.add(b.mul(m, plane),
                                                            b.mul(const(i), out_w))))
                        for lane, values in enumerate(rows_of):
                            kept = b.select(b.icmp_signed("<", b.add(m, const(lane)),
                                                          out_channels), column_mask, none)
                            b.call(store, [values, at(start, b.mul(const(lane), plane)),
                                           align, kept])
            b.store(b.add(row0, count), first_tile)
    b.ret(b.load(status, typ=I32))
    return module


__all__ = ["A_T", "B_T", "ENTRY", "G", "transformed_weight", "winograd_module"]
