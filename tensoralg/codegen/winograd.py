"""A 3x3 convolution (stride 1, group 1) by Winograd's minimal filtering F(2x2, 3x3) or
F(4x4, 3x3): LLVM IR.

Each ``tile x tile`` block of outputs (a *tile*) of an output plane is, with the
``(tile + 2)``-square input patch ``d`` under it and a 3 x 3 kernel ``g`` (Lavin and Gray,
"Fast Algorithms for Convolutional Neural Networks", 2016)::

    Y = A^T [(G g G^T) * (B^T d B)] A      (* elementwise)

Summed over input channels, the elementwise products become one matrix product per position
``xi`` of the transformed patch (16 for F(2x2), 36 for F(4x4)): ``M[xi] = V[xi] @ U[xi]``,
with ``V[xi]`` (tiles x C) the transformed input and ``U[xi]`` (C x M) the transformed
weight, made once at load (``runtime/winograd.py``). Per channel pair, F(2x2) does 16
multiply-adds for 4 outputs and F(4x4) 36 for 16, where the direct convolution does 9 an
output: 2.25x and 4x fewer, all of them in the generated GEMM (``codegen/gemm.py``, called
through a function pointer with each product's addresses). F(4x4)'s transforms scale by up to
8, so its float32 sums round 5-9 times as far from the exact ones as F(2x2)'s (see
:data:`F4`).

This module holds the driver around those products. Tiles are taken in blocks whose
transformed input and products stay in L2 (the block is chosen by ``runtime/winograd.py``);
for each block it

1. transforms the input: the input was copied once into a zero-bordered channels-last buffer
   (``codegen/conv.channels_last_module``), so a tile's input vectors of ``lanes`` channels
   are contiguous loads, and ``B^T d B`` is vector arithmetic (F(2x2): 32 additions); the
   results go to ``V[xi][tile]``, channels contiguous (the GEMM's rows);
2. runs the products into ``M[xi][tile]`` (output channels contiguous);
3. transforms the products back (``A^T m A``; F(2x2): 24 vector additions for 4 outputs),
   adds the bias and applies the activation in registers. Runs of up to ``lanes / tile``
   tiles along a tile row make each output row ``lanes`` contiguous columns per channel: the
   column vectors (a vector of ``lanes`` output channels each) are transposed in registers
   (64 two-source shuffles for 16 lanes) and stored as one masked row segment per channel;
   columns past the output's edge are masked off. Against scattering each output vector into
   its NCHW planes, the transposed stores took the transforms of a 32 -> 128 layer at 54 x
   54, batch 8, from 3.5 to 2.2 ms, and of a 64 -> 256 one at 27 x 27 from 2.0 to 1.2 ms
   (F(2x2), float32 on AVX-512, one thread, ad hoc, 2026-12-05).

F(2x2)'s transforms take only additions and subtractions of the input and products (``G``'s
halves apply to the weight, in float64, at load), so its rounding differs from a direct
convolution's by a few units in the last place of the sums; F(4x4)'s by 5-9 times more
(``benchmarks/winograd.py`` prints both against a float64 convolution): within the float32
tolerances the ONNX tests and benchmarks hold every kernel to.
"""
from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True, eq=False)
class Transform:
    """Winograd's F(tile x tile, 3x3): input ``b_t`` (patch x patch), weight ``g`` (patch x 3)
    and output ``a_t`` (tile x patch) transforms, patch = tile + 2."""

    tile: int
    b_t: np.ndarray
    g: np.ndarray
    a_t: np.ndarray

    @property
    def patch(self) -> int:
        """Inputs a tile reads, per axis."""
        return self.tile + 2

    @property
    def positions(self) -> int:
        """Products a tile takes: one GEMM per position of the transformed patch."""
        return self.patch * self.patch


# F(2x2, 3x3) (Lavin and Gray): coefficients 0 and +-1 in the input and output transforms.
F2 = Transform(
    2, np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
    np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64),
    np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64))
# F(4x4, 3x3) by Toom-Cook at the points 0, 1, -1, 2, -1/2 and infinity: 36 products for 16
# outputs, where F(2x2) takes 64 for them and the direct convolution 144. Lavin and Gray's
# points 0, +-1, +-2 scale the input by up to 5 and the products by up to 8; these scale by at
# most 5/2 and 8, and a float32 NumPy emulation of one tile (64 channels, 20 draws; ad hoc,
# 2026-12-07) rounded to 2.3e-6 of an output's scale on average where Lavin and Gray's rounded
# to 4.4e-6 (F(2x2): 4.0e-7) -- the points Barabasz et al. ("Error analysis and improving the
# accuracy of Winograd convolution", 2020) recommend over +-2.
F4 = Transform(
    4, np.array([[1, 3 / 2, -2, -3 / 2, 1, 0], [0, -1, -5 / 2, -1 / 2, 1, 0],
                 [0, 1, 1 / 2, -5 / 2, 1, 0], [0, -1 / 2, -1, 1 / 2, 1, 0],
                 [0, 2, -1, -2, 1, 0], [0, 1, 3 / 2, -2, -3 / 2, 1]], np.float64),
    np.array([[1, 0, 0], [-1 / 3, -1 / 3, -1 / 3], [1 / 3, -1 / 3, 1 / 3],
              [1 / 15, 2 / 15, 4 / 15], [-16 / 15, 8 / 15, -4 / 15], [0, 0, 1]], np.float64),
    np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -1 / 2, 0], [0, 1, 1, 4, 1 / 4, 0],
              [0, 1, -1, 8, -1 / 8, 1]], np.float64))
TRANSFORMS = {2: F2, 4: F4}


def transformed_weight(weight: np.ndarray, tile: int = 2) -> np.ndarray:
    """``G g G^T`` of every kernel of ``weight`` (M, C, 3, 3) for F(tile x tile, 3x3), in
    float64, as ``U[xi]`` (positions, C, M): the right-hand side of position ``xi``'s product.

    >>> w = np.zeros((1, 1, 3, 3)); w[0, 0, 1, 1] = 1.0     # the identity kernel
    >>> transformed_weight(w)[:, 0, 0].reshape(4, 4)[1:3, 1:3].tolist()
    [[0.25, -0.25], [-0.25, 0.25]]
    >>> transformed_weight(w, 4).shape
    (36, 1, 1)
    """
    transform = TRANSFORMS[tile]
    # (optimize: contracted one axis at a time, 4-5x faster than the one loop for 36 positions)
    u = np.einsum("ai,mcij,bj->abcm", transform.g, np.asarray(weight, np.float64), transform.g,
                  optimize=True)
    return u.reshape(transform.positions, weight.shape[1], weight.shape[0])


def _combine(builder: ir.IRBuilder, rows: list[Any], matrix: np.ndarray) -> list[Any]:
    """``matrix @ rows`` as vector arithmetic: additions and subtractions for the +-1 entries,
    a product by a splatted constant for the others, zeros skipped."""
    out = []
    for coefficients in matrix:
        value = None
        for coefficient, row in zip(coefficients, rows):
            if coefficient == 0:
                continue
            magnitude = abs(float(coefficient))
            term = row if magnitude == 1 else builder.fmul(
                row, ir.Constant(row.type, [magnitude] * row.type.count))
            if value is None:
                value = term if coefficient > 0 else builder.fneg(term)
            else:
                value = builder.fadd(value, term) if coefficient > 0 else \
                    builder.fsub(value, term)
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


def winograd_module(dtype: np.dtype, lanes: int, activation: Any, tile: int = 2
                    ) -> ir.Module:
    """The module exporting ``int32 tensoralg_winograd(P, OUT, V, MP, U, GEMM, BIAS, begin,
    end, block, tiles_h, tiles_w, C, M, p_row, p_image, OH, OW, out_image, u_stride, k_block,
    v_stride, m_stride)``: tiles ``[begin, end)`` (numbered image by image, row by row) of the
    3x3 convolution by F(tile x tile, 3x3) of the zero-bordered channels-last input ``P``
    (its rows ``p_row`` and images ``p_image`` elements apart, the top-left border already in
    it) into the NCHW ``OUT`` (images ``out_image`` apart), with the scratch ``V`` (P x block
    x C) and ``MP`` (P x block x M) for the P positions of the transformed patch (16 or 36),
    the P packed transformed weights at ``U``, ``u_stride`` elements apart, and the generated
    GEMM at ``GEMM`` (``codegen/gemm.py``'s entry, K blocks of ``k_block``). The slabs of
    ``V`` lie ``v_stride`` elements apart and those of ``MP`` ``m_stride`` (a line past a
    multiple of 4 KiB, so that the P streams do not share an L1 set). ``lanes`` must be a
    multiple of ``tile``.
    ``BIAS`` holds the M values added to every output (zeros for a Conv without one; the
    products get it without their bias flag, so they do not read it). ``activation`` is
    baked in. Returns the first non-zero status of a product, else 0.

    >>> "tensoralg_winograd" in str(winograd_module(np.dtype(np.float32), 16, None, tile=4))
    True
    """
    dtype = np.dtype(dtype)
    transform = TRANSFORMS[tile]
    if lanes % tile:
        raise ValueError(f"winograd_module: {lanes} lanes do not hold whole {tile}-column tiles")
    side, positions = transform.patch, transform.positions
    b_t, a_t = transform.b_t, transform.a_t
    run = lanes // tile                 # tiles whose output columns fill one vector
    scalar = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    module = ir.Module(name=f"winograd_{tile}_{dtype.name}")
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
                           b.add(b.mul(b.mul(th, const(tile)), p_row),
                                 b.mul(b.mul(tw, const(tile)), channels)))
            with counted_loop(b, c0, const(0), lambda: in_vectors, "in.c"):
                c = b.mul(b.load(c0, typ=I64), const(lanes))
                mask = lanes_mask(b.sub(channels, c))
                patch = [[b.call(load, [at(padded, b.add(corner, b.add(b.add(
                    b.mul(const(i), p_row), b.mul(const(j), channels)), c))), align, mask,
                    zeros]) for j in range(side)] for i in range(side)]
                # B^T d, then (.) B: columns of each row
                rows_t = [_combine(b, [patch[i][j] for i in range(side)], b_t)
                          for j in range(side)]          # rows_t[j][a] = (B^T d)[a][j]
                for a in range(side):
                    values = _combine(b, [rows_t[j][a] for j in range(side)], b_t)
                    for bb, value in enumerate(values):
                        position = a * side + bb
                        where = b.add(b.add(b.mul(const(position), v_stride),
                                            b.mul(row, channels)), c)
                        b.call(store, [value, at(v_scratch, where), align, mask])
        # 2. the 16 products
        with counted_loop(b, xi, const(0), lambda: const(positions), "xi"):
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
        # 3. the output transform, bias, activation, stores. Runs of up to `run` tiles along
        # one tile row: each output row of a run is `lanes` contiguous columns per output
        # channel, so the vectors of channels for its columns are transposed in registers
        # into one row segment per channel, a plain masked store each (a scatter costs about
        # a cycle an element). Each tile's products are loaded and transformed once, all its
        # rows at a time.
        first_tile = entry_alloca(b, I64, "run.first")
        b.store(const(0), first_tile)
        with while_loop(b, lambda: b.icmp_signed("<", b.load(first_tile, typ=I64), rows),
                        "out.runs"):
            row0 = b.load(first_tile, typ=I64)
            image, th, tw = tile_at(b.add(t0, row0))
            count = smaller(smaller(const(run), b.sub(tiles_w, tw)), b.sub(rows, row0))
            oy, ox = b.mul(th, const(tile)), b.mul(tw, const(tile))
            columns_left = smaller(b.mul(count, const(tile)), b.sub(out_w, ox))
            column_mask = lanes_mask(columns_left)
            none = ir.Constant(mask_type, [0] * lanes)
            origin = b.add(b.mul(image, out_image), b.add(b.mul(oy, out_w), ox))
            with counted_loop(b, c0, const(0), lambda: out_vectors, "runs.m"):
                m = b.mul(b.load(c0, typ=I64), const(lanes))
                mask = lanes_mask(b.sub(out_channels, m))
                shift = b.call(load, [at(bias, m), align, mask, zeros])
                outputs: list[list[Any]] = [[] for _ in range(tile)]   # per output row
                for k in range(run):
                    # a tile past the run repeats its last: its columns are masked off
                    tile_k = b.add(row0, smaller(const(k), b.sub(count, const(1))))
                    at_tile = b.add(b.mul(tile_k, out_channels), m)
                    grid = [[b.call(load, [at(m_scratch, b.add(b.mul(
                        const(a * side + j), m_stride), at_tile)), align, mask, zeros])
                        for j in range(side)] for a in range(side)]
                    # A^T m: across[j][i] = (A^T m)[i][j]
                    across = [_combine(b, [grid[a][j] for a in range(side)], a_t)
                              for j in range(side)]
                    for i in range(tile):
                        outputs[i] += [emit_activation(b, b.fadd(value, shift), activation)
                                       for value in _combine(b, [across[j][i] for j in
                                                                 range(side)], a_t)]
                for i in range(tile):
                    with if_then(b, b.icmp_signed("<", b.add(oy, const(i)), out_h),
                                 f"runrow{i}"):
                        rows_of = _transpose(b, outputs[i], lanes)
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


__all__ = ["ENTRY", "F2", "F4", "TRANSFORMS", "Transform", "transformed_weight",
           "winograd_module"]
