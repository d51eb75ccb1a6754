"""The core's program API: the calls and call sequences a front end builds its plans from.

``ta.einsum`` and ``ta.compile`` run one statement. A front end that runs whole programs (the
ONNX importer, or a user's own graph runner) needs two more things from the core: calls whose
operands are fixed once, so that a run pays no dispatch, and a way to join many such calls into
one native function. This module is that surface; the importer reaches the core only through
it and the public ``tensoralg`` names (``tests/test_layering.py`` holds that line).

**Calls.** Each is an object with its operands bound; calling it runs it, ``rebind(name,
array)`` points one input at another array of the same shape, and ``native(slots)`` hands it to
a sequence with the inputs named in ``slots`` read from the sequence's slots at each run.

- a statement with its schedule: ``ta.compile(statement, formats, schedule=...).bind(...)``
  gives a :class:`BoundCall` (threads split it as the schedule says);
- dense layers and convolutions on the generated GEMM: :func:`dense_layer`,
  :func:`quantized_layer` and :func:`quantized_conv` (dynamically quantized products and
  convolutions on the int8 GEMM, where :func:`int8_gemm_supported`),
  :func:`conv_layer`, :func:`winograd_conv` (3x3 layers by F(2x2, 3x3), where
  :func:`winograd_pays`), :func:`grouped_conv` (one GEMM per group, channel blocks read and
  written in place), :func:`direct_conv` (weights compiled into the code), :func:`gram_call`
  (``X @ X^T``), :func:`im2row_call` (patch rows for a convolution), and NCHW convolutions
  without layout copies: :func:`pointwise_conv` (1x1 on whole planes; :func:`planar_pays`
  says where it runs), :func:`patch_conv_of`
  (few input channels, patch blocks that stay in L1; :func:`compiled_conv_gathers` says when a
  weights-compiled-in kernel would gather instead);
- fused activations: every convolution and dense-layer call takes an :class:`Activation`
  (ReLU, Clip, Sigmoid, SiLU, HardSigmoid, HardSwish, GELU; :data:`RELU`, :data:`SILU`, ... and
  ``Activation.clip(low, high)``) and applies it in registers before storing its results;
- generated window and row kernels: :func:`window_kernel` (pooling, depthwise convolution),
  :func:`softmax_kernel`, :func:`top_k` (the best ``k`` values of rows),
  :func:`kept_boxes` (greedy non-maximum suppression of boxes), :func:`pooled_regions`
  (regions of interest pooled by bilinear samples, with :class:`RoiSamples`),
  :func:`row_extreme` (a row's largest or smallest value), :func:`value_range` (a tensor's
  smallest and largest value in one pass), :func:`scattered_extremes` (rows combined by max
  or min into a table at row indices: ONNX ``ScatterElements``);
- data movement: :func:`gather_call` (rows of a table by id), :func:`copy_call`,
  :func:`transpose_call` (batched matrices transposed, a channels-last product into NCHW),
  :func:`block_copy_call`, :func:`interpolation_call` (a Resize's pass over the last axis,
  its few taps an output gathered), :func:`grid_sample_call` (bilinear GridSample, its taps
  computed in the kernel), :func:`broadcast_call` (elementwise ops with NumPy broadcasting,
  mixed dtypes), :func:`cumsum_call` (running sums, ONNX ``CumSum``), :func:`extreme_call`
  (a prebound row max or min, ONNX ``ReduceMax``/``ReduceMin``), :func:`ids_call` (ids checked and turned into a CSR level), :func:`bag_max_call`
  (max bags of table rows over a CSR level), :func:`bag_keep_call` (a bag matrix's values
  without padding ids), and
  :class:`RowCompressor` (dense rows into CSR for a sparse kernel).

**Sequences.** :class:`CallSequence` compiles a list of native calls into one function; a
:class:`Slot` is an input address written into the sequence's slot array before each run, and a
:class:`NativeGroup` runs its calls concurrently on the native thread pool.

>>> import numpy as np, tensoralg as ta
>>> from tensoralg import program
>>> table, rows = np.arange(12.0).reshape(4, 3), np.empty((2, 3))
>>> gather = program.gather_call(table, np.array([2, 0]), rows, "gather rows")
>>> layer = ta.compile("y(i) = R(i,j) * w(j)").bind(R=rows, w=np.ones(3))
>>> ids = np.array([3, 1])                       # read through slot 0 at each run
>>> seq = program.CallSequence([gather.native({"ids": program.Slot(0, 0)}),
...                             layer.native({})], slots=1)
>>> seq.slots[0] = ids.ctypes.data
>>> seq.run(), layer.out.tolist()
(0, [30.0, 12.0])

A non-zero ``run()`` is 1 + the index of the call that failed (an id out of range, a failed
allocation); the caller raises an error naming that call. The arrays every call reads or writes
must outlive the sequence: the caller keeps the call objects.
"""
from __future__ import annotations

from tensoralg.api import (
    GELU,
    HARD_SWISH,
    INTERPOLATION_TAPS,
    RELU,
    SIGMOID,
    SILU,
    Activation,
    BoundCall,
    CallSequence,
    DenseLayer,
    Int8Epilogue,
    NativeGroup,
    QuantizedConv,
    QuantizedLayer,
    RoiSamples,
    RowCompressor,
    Slot,
    as_activation,
    bag_keep_call,
    bag_max_call,
    block_copy_call,
    broadcast_call,
    canonical_csr,
    compiled_conv_gathers,
    conv_layer,
    copy_call,
    cumsum_call,
    data_address,
    dense_layer,
    direct_conv,
    erf_text,
    extreme_call,
    gather_call,
    gram_call,
    grid_sample_call,
    grouped_conv,
    ids_call,
    im2row_call,
    int8_gemm_supported,
    interpolation_call,
    kept_boxes,
    kernel_cache,
    patch_conv_of,
    planar_pays,
    pointwise_conv,
    pooled_regions,
    quantize_parameters_call,
    quantized_conv,
    quantized_layer,
    row_extreme,
    scattered_extremes,
    softmax_kernel,
    top_k,
    transpose_call,
    value_range,
    window_kernel,
    winograd_conv,
    winograd_host,
    winograd_pays,
    winograd_tile,
)

__all__ = [
    "Activation", "GELU", "HARD_SWISH", "RELU", "SIGMOID", "SILU", "as_activation", "erf_text",
    "BoundCall", "CallSequence", "DenseLayer", "NativeGroup", "RowCompressor", "Slot",
    "bag_keep_call", "bag_max_call", "block_copy_call", "broadcast_call", "canonical_csr", "compiled_conv_gathers", "conv_layer",
    "copy_call", "cumsum_call", "extreme_call", "quantize_parameters_call",
    "Int8Epilogue", "QuantizedConv", "QuantizedLayer", "int8_gemm_supported", "quantized_conv",
    "quantized_layer", "grouped_conv", "patch_conv_of", "planar_pays",
    "pointwise_conv", "pooled_regions", "RoiSamples",
    "data_address", "dense_layer", "direct_conv", "gather_call", "gram_call", "ids_call",
    "im2row_call", "grid_sample_call", "INTERPOLATION_TAPS", "interpolation_call", "kept_boxes", "kernel_cache", "row_extreme", "scattered_extremes", "softmax_kernel", "top_k", "transpose_call", "value_range",
    "window_kernel", "winograd_conv", "winograd_host", "winograd_pays", "winograd_tile",
]
