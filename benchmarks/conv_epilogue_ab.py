"""Same-process A/B of two convolution choices, where a shared machine's drift between runs
would swamp them: activations fused into the convolutions or not, and stride-2 window kernels
reading rows split into even and odd cells or pairs of loads.

``python benchmarks/conv_epilogue_ab.py model MODEL.onnx --batch 8`` loads the model at level 3
seven times: as it is, with only ReLU and Clip fused (no Sigmoid, HardSigmoid, HardSwish or
SiLU in a convolution's epilogue), with every stride-2 window kernel on paired loads, with
unit-stride pools on masked loads, with short-K convolutions on the GEMM, with the GEMM's K
block of 384 rows instead of the one this host's L2 gives, and with convolutions of any width
scattering NCHW tiles. It
runs them one after another, round by round, one thread, and prints each variant's median
time over the default's (above 1: the default is faster).

``python benchmarks/conv_epilogue_ab.py windows`` times the window kernels alone, both ways,
on the stride-2 layers of EfficientNet, MnasNet and ResNet (batch 8), on unit-stride depthwise
layers (padded rows or masked loads) and on unit-stride max and average pools (rows reduced once,
or masked loads over the whole window), interleaved.

``python benchmarks/conv_epilogue_ab.py stems`` times stem-like and few-channel convolutions
of 48 or more output channels on patch blocks and on the generated GEMM, interleaved, outputs
checked close; ``product_steps.PATCH_FIRST_DEPTH`` and ``PATCH_FIRST_CHANNELS`` cite it. The
``model`` command also loads the model with those layers on the GEMM and with unit-stride
pools on masked loads.

``python benchmarks/conv_epilogue_ab.py kernels`` times the generated GEMM (float32, one
thread) with and without its prefetch of A and with its packed weight on and off a 64-byte
boundary, with this host's K block and with 384 rows (plain products and channels-last 3x3
convolutions), 3x3 convolutions scattering NCHW tiles with and without their output prefetch,
and the planar 1x1 kernel with its input block chosen by
``codegen.planar.block_panels``, with 32 KiB everywhere, without its prefetch of the input
planes (or prefetching them at any channel count) and without its prefetch of the output
lines, interleaved, in GFMA/s; then the channels-last copy and the transpose into NCHW with and
without their store prefetch, in GB/s.

``python benchmarks/conv_epilogue_ab.py scatter`` times the generated GEMM scattering NCHW
tiles against its channels-last product plus the transpose after it, by output width
(``runtime.gemm.SCATTER_MOST_CHANNELS`` cites it).

Prints only; the figures quoted in ``codegen/window.py``, ``codegen/activation.py``,
``codegen/gemm.py``, ``codegen/planar.py`` and ``onnx/plan/product_steps.py`` come from these
commands.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from typing import Any, Callable, Iterator

import numpy as np


@contextlib.contextmanager
def _smooth_fusion_off() -> Iterator[None]:
    """Load models with only ReLU and Clip fused into their convolutions."""
    import tensoralg.onnx.passes.folding as folding

    lone, consumers = folding._lone_activation, folding.consumers_of

    def clamps_only(node: Any, graph: Any) -> Any:
        return lone(node, graph) if node.op_type in ("Relu", "Clip") else None

    def no_silu_pairs(graph: Any) -> dict:
        # A Sigmoid read twice is never half of a SiLU pair.
        found = consumers(graph)
        sigmoids = {n.outputs[0] for n in graph.nodes if n.op_type == "Sigmoid"}
        return {name: nodes * 2 if name in sigmoids else nodes for name, nodes in found.items()}

    folding._lone_activation, folding.consumers_of = clamps_only, no_silu_pairs
    try:
        yield
    finally:
        folding._lone_activation, folding.consumers_of = lone, consumers


@contextlib.contextmanager
def _window_rows(split: bool, rule: str = "deinterleaves") -> Iterator[None]:
    """Build every window kernel with the row rule ``rule`` of ``codegen.window`` forced to
    ``split`` (``deinterleaves``: stride-2 rows split into even and odd cells, or paired
    loads; ``pads_rows``: unit-stride rows copied into padded rows, or masked loads), outside
    the kernel cache (whose key does not name the choice)."""
    import tensoralg.codegen.window as window
    import tensoralg.runtime.window as runtime

    choose, build, built = getattr(window, rule), runtime.build_llvm_module, dict(runtime._BUILT)
    setattr(window, rule, lambda *args, **kwargs: split)
    runtime.build_llvm_module = lambda *args, **kwargs: build(*args, **dict(kwargs, cache=None))
    runtime._BUILT.clear()
    try:
        yield
    finally:
        # the kernels built here stay alive through the calls and models that hold them
        setattr(window, rule, choose)
        runtime.build_llvm_module = build
        runtime._BUILT.clear()
        runtime._BUILT.update(built)


@contextlib.contextmanager
def _gemm_first() -> Iterator[None]:
    """Load models with every wide convolution on the generated GEMM before patch blocks (no
    ``PATCH_FIRST_DEPTH``/``PATCH_FIRST_CHANNELS`` rule)."""
    from tensoralg.onnx.plan import product_steps

    depth, channels = product_steps.PATCH_FIRST_DEPTH, product_steps.PATCH_FIRST_CHANNELS
    product_steps.PATCH_FIRST_DEPTH = product_steps.PATCH_FIRST_CHANNELS = 0
    try:
        yield
    finally:
        product_steps.PATCH_FIRST_DEPTH, product_steps.PATCH_FIRST_CHANNELS = depth, channels


@contextlib.contextmanager
def _k_block_unsized() -> Iterator[None]:
    """Build the generated GEMM with the K block of a host whose L2 size is unknown
    (``codegen.gemm.K_BLOCK`` rows), as every host had before the block followed L2."""
    import importlib

    import tensoralg.runtime.gemm as runtime

    # (tensoralg.codegen's own ``build`` function hides the module of that name)
    build = importlib.import_module("tensoralg.codegen.build")
    size, built = build.host_l2_bytes, dict(runtime._KERNELS)
    build.host_l2_bytes = lambda: None      # type: ignore[assignment]
    runtime._KERNELS.clear()
    try:
        yield
    finally:
        build.host_l2_bytes = size
        # The layers built inside hold the kernels' functions, not the code behind them:
        # that stays alive here, for as long as the process runs.
        _KEPT.extend(runtime._KERNELS.values())
        runtime._KERNELS.clear()
        runtime._KERNELS.update(built)


_KEPT: list = []


@contextlib.contextmanager
def _scatter_any_width() -> Iterator[None]:
    """Load models with every convolution that may scatter NCHW tiles doing so, however many
    output channels it has (no ``runtime.gemm.SCATTER_MOST_CHANNELS``)."""
    import tensoralg.runtime.gemm as runtime

    most = runtime.SCATTER_MOST_CHANNELS
    runtime.SCATTER_MOST_CHANNELS = 1 << 30
    try:
        yield
    finally:
        runtime.SCATTER_MOST_CHANNELS = most


def _interleaved(calls: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median seconds of each call, timed round by round."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(values)) for name, values in times.items()}


def compare_model(path: str, batch: int, rounds: int) -> str:
    from onnx_node_compare import feeds_of

    import tensoralg
    import tensoralg.onnx

    tensoralg.set_num_threads(1)
    feeds = feeds_of(path, batch)
    models = {"default": tensoralg.onnx.load(path, opt_level=3)}
    with _smooth_fusion_off():
        models["only ReLU/Clip fused"] = tensoralg.onnx.load(path, opt_level=3)
    for model in models.values():       # the second run builds the plan and its kernels
        for _ in range(3):
            model.run(feeds)
    for name, variant in (("paired loads", _window_rows(False)),
                          ("pools on masked loads", _window_rows(False, "separates_rows")),
                          ("GEMM before patches", _gemm_first()),
                          ("K block 384", _k_block_unsized()),
                          ("NCHW scatter at any width", _scatter_any_width())):
        with variant:       # plans and kernels are built by the first runs
            models[name] = tensoralg.onnx.load(path, opt_level=3)
            for _ in range(3):
                models[name].run(feeds)
    medians = _interleaved({name: (lambda m=m: m.run(feeds)) for name, m in models.items()},
                           rounds)
    base = medians["default"]
    return "\n".join([f"{path}, batch {batch}, one thread, median of {rounds} rounds:"] +
                     [f"  {name:22} {t * 1e3:8.1f} ms  {t / base:5.3f} x the default"
                      for name, t in medians.items()])


LAYERS = [
    # (N, C, H, kernel, mode): EfficientNet/MnasNet stride-2 depthwise layers, ResNet's pool
    (8, 96, 112, 3, "depthwise"), (8, 144, 56, 5, "depthwise"), (8, 240, 56, 3, "depthwise"),
    (8, 240, 28, 3, "depthwise"), (8, 672, 14, 5, "depthwise"), (8, 64, 112, 3, "max"),
    (8, 192, 56, 3, "max"),
]
UNIT_LAYERS = [
    # (N, C, H, kernel, mode), stride 1, "same" padding: MnasNet/EfficientNet/MobileNetV3
    # depthwise layers, GoogLeNet's inception pools
    (8, 120, 28, 5, "depthwise"), (8, 480, 14, 5, "depthwise"), (8, 1152, 7, 5, "depthwise"),
    (8, 144, 56, 3, "depthwise"), (8, 240, 28, 3, "depthwise"), (8, 672, 14, 3, "depthwise"),
    (8, 960, 7, 3, "depthwise"), (1, 192, 28, 3, "max"), (1, 480, 14, 3, "max"),
    (1, 832, 7, 3, "max"), (8, 64, 56, 3, "max"),
]
POOLS = [
    # (N, C, H, kernel, mode), stride 1, "same" padding: GoogLeNet's inception pools, YOLO's
    # SPPF, Inception-v3's average pools
    (1, 256, 28, 3, "max"), (1, 480, 14, 3, "max"), (1, 832, 7, 3, "max"), (8, 192, 28, 3, "max"),
    (1, 64, 56, 3, "max"), (1, 256, 20, 5, "max"), (1, 192, 35, 3, "average"),
    (1, 768, 17, 3, "average"), (1, 1280, 8, 3, "average"), (8, 288, 35, 3, "average"),
]


def compare_windows(rounds: int) -> str:
    """Each window kernel of :data:`LAYERS` (stride 2) and :data:`UNIT_LAYERS` (stride 1)
    built both ways of its row rule, the outputs checked equal, timed round by round."""
    from tensoralg.codegen.window import (
        ChannelGroups,
        WindowGeometry,
        deinterleaves,
        pads_rows,
        separates_rows,
    )

    rng = np.random.default_rng(0)
    lines = []
    for stride, layers, rule, ways in (
            (2, LAYERS, deinterleaves, ("split", "paired")),
            (1, [layer for layer in UNIT_LAYERS if layer[4] == "depthwise"], pads_rows,
             ("padded", "masked")),
            (1, POOLS, separates_rows, ("reduced", "masked"))):
        lines.append(f"window kernels alone, stride {stride} (median ms; {ways[1]} / {ways[0]}: "
                     f"above 1 the {ways[0]} rows are faster)")
        for n, c, h, k, mode in layers:
            pad = k // 2
            out = (h + 2 * pad - k) // stride + 1
            g = WindowGeometry(h, h, out, out, (k, k), (stride, stride), (1, 1), (pad, pad),
                               (pad, pad))
            medians = _window_pair(rng, g, n, c, mode, rule.__name__, ways, rounds)
            chosen = ways[0] if rule(g, mode, ChannelGroups(), 16) else ways[1]
            lines.append(f"  {mode:9} {k}x{k} {n}x{c:4}x{h}x{h}: {ways[0]} "
                         f"{medians[ways[0]] * 1e3:7.3f}  {ways[1]} {medians[ways[1]] * 1e3:7.3f}"
                         f"  ratio {medians[ways[1]] / medians[ways[0]]:5.2f}  (the rule picks "
                         f"{chosen})")
    return "\n".join(lines)


def _window_pair(rng: Any, g: Any, n: int, c: int, mode: str, rule: str,
                 ways: tuple[str, str], rounds: int) -> dict[str, float]:
    """One window kernel built with ``rule`` forced on and off, outputs checked equal; the
    medians of interleaved rounds."""
    import tensoralg.runtime.window as runtime

    x = rng.standard_normal((n, c, g.height, g.width)).astype(np.float32)
    extra = {} if mode == "max" else {
        "weight": rng.standard_normal((c, 1, *g.kernel)).astype(np.float32),
        "bias": rng.standard_normal(c).astype(np.float32)}
    calls, outputs = {}, {}
    for name, on in zip(ways, (True, False)):
        with _window_rows(on, rule):
            kernel = runtime.WindowKernel(g, mode, np.float32, c, **extra)
            outputs[name] = np.empty((n, c, g.out_height, g.out_width), np.float32)
            calls[name] = kernel.bind(x, outputs[name])
    for call in calls.values():
        call()
    if mode == "average":       # summed row by row, in another order
        np.testing.assert_allclose(outputs[ways[0]], outputs[ways[1]], rtol=1e-5, atol=1e-6)
    else:                       # the same taps in the same order, or maxima: exactly equal
        np.testing.assert_array_equal(outputs[ways[0]], outputs[ways[1]])
    return _interleaved(calls, rounds)


STEMS = [
    # (N, C, H, M, kernel, stride, pad): 3x3, 4x4 and 7x7 stems, few-channel layers
    (1, 3, 224, 64, 3, 2, 1), (8, 3, 224, 64, 3, 2, 1), (1, 3, 224, 96, 4, 4, 0),
    (8, 3, 224, 96, 4, 4, 0), (1, 3, 224, 64, 5, 1, 2), (1, 12, 56, 256, 3, 1, 1),
    (1, 16, 56, 64, 3, 1, 1), (8, 16, 56, 64, 3, 1, 1), (1, 3, 224, 64, 7, 2, 3),
    (8, 3, 224, 64, 7, 2, 3), (1, 3, 224, 96, 7, 2, 0), (1, 28, 56, 96, 3, 2, 1),
]


def compare_stems(rounds: int) -> str:
    """Each layer of :data:`STEMS` on patch blocks and on the generated GEMM (NCHW tiles),
    outputs checked close, timed round by round."""
    from tensoralg.runtime.gemm import ConvLayer
    from tensoralg.runtime.planar import patch_conv_of

    rng = np.random.default_rng(0)
    lines = ["convolutions of 48+ output channels, one thread (median ms; gemm / patches: above "
             "1 the patch blocks are faster)"]
    for n, c, h, m, k, stride, pad in STEMS:
        w = rng.standard_normal((m, c, k, k)).astype(np.float32)
        x = rng.standard_normal((n, c, h, h)).astype(np.float32)
        out = (h + 2 * pad - k) // stride + 1
        bias = np.zeros(m, np.float32)
        patches = patch_conv_of((c, h, h), w, bias, (0.0, float("inf")), (k, k),
                                (stride, stride), (1, 1), (pad, pad), (out, out), None, None)
        gemm = ConvLayer(w, bias, (stride, stride), (pad, pad), (pad, pad), relu=True)
        outputs = {name: np.empty((n, m, out, out), np.float32) for name in ("patches", "gemm")}
        calls = {"patches": patches.bind(x, outputs["patches"]),
                 "gemm": gemm.bind(x, outputs["gemm"])}
        for call in calls.values():
            call()
        np.testing.assert_allclose(outputs["patches"], outputs["gemm"], rtol=1e-4, atol=1e-3)
        medians = _interleaved(calls, rounds)
        lines.append(f"  {n}x{c:2}x{h}x{h} -> {m:3}, {k}x{k} stride {stride} (K = {c * k * k:3}):"
                     f" patches {medians['patches'] * 1e3:7.3f}  gemm {medians['gemm'] * 1e3:7.3f}"
                     f"  ratio {medians['gemm'] / medians['patches']:5.2f}")
    return "\n".join(lines)


GEMMS = [(600, 576, 64), (3000, 576, 64), (6272, 576, 64), (1024, 768, 3072), (256, 512, 256)]
SCATTERED = [(64, 56, 64), (16, 54, 64), (32, 54, 128), (48, 27, 192)]
POINTWISE = [(24, 72, 3136), (24, 48, 3136), (144, 24, 3136), (48, 16, 12544), (240, 40, 784),
             (16, 128, 2916), (48, 384, 729), (256, 64, 3136), (1024, 256, 196)]


def compare_kernels(rounds: int) -> str:
    """Each prefetch and blocking choice of the convolution kernels both ways: the GEMM's
    prefetch and weight alignment (:data:`GEMMS`), the scattering GEMM's output prefetch
    (:data:`SCATTERED`), the planar kernel's input block and prefetches (:data:`POINTWISE`,
    batch 8), in GFMA/s; and the channels-last copy's and transpose's store prefetch
    (:data:`COPIES`, :data:`TRANSPOSES`), in GB/s of input."""
    import tensoralg
    import tensoralg.codegen.gemm as gemm
    import tensoralg.codegen.planar as planar
    import tensoralg.runtime.planar as planar_runtime
    from tensoralg.codegen.build import build_llvm_module
    from tensoralg.runtime.gemm import _PROTOTYPE, DenseLayer
    from tensoralg.runtime.planar import PlanarConv

    tensoralg.set_num_threads(1)
    rng = np.random.default_rng(0)
    shape = gemm.GemmShape.for_host(np.float32, True)
    default = gemm.PREFETCH_BYTES
    built = {}
    for name, ahead in (("prefetch", default), ("no prefetch", 0)):
        gemm.PREFETCH_BYTES = ahead
        built[name] = build_llvm_module(lambda: gemm.gemm_module(shape), gemm.ENTRY, _PROTOTYPE,
                                        cache=None, key=None, identity=None)
    gemm.PREFETCH_BYTES = default

    def layer(w: np.ndarray, variant: str) -> DenseLayer:
        dense = DenseLayer(w, None)
        dense.function = built["no prefetch" if variant == "no prefetch" else "prefetch"][0]
        if variant == "unaligned":          # the packed weight 16 bytes past a boundary
            raw = gemm.aligned_empty((dense.packed.size + 4,), np.float32)
            moved = raw[4:].reshape(dense.packed.shape)
            moved[...] = dense.packed
            dense.packed = moved
        return dense

    lines = ["generated GEMM, float32, one thread (GFMA/s, median of interleaved rounds)"]
    for m, k, n in GEMMS:
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        calls = {v: layer(w, v).bind(a, np.empty((m, n), np.float32))
                 for v in ("default", "no prefetch", "unaligned")}
        rates = {v: m * k * n / t / 1e9 for v, t in _interleaved(calls, rounds).items()}
        lines.append(f"  {m}x{k}x{n}: " + "  ".join(f"{v} {r:5.1f}" for v, r in rates.items()))
    lines += _k_blocks(rng, rounds)
    lines.append("3x3 convolution scattering NCHW tiles, batch 8, C -> M channels at H x H "
                 "(GFMA/s)")
    gemm.SCATTER_PREFETCH = False
    unprefetched = build_llvm_module(lambda: gemm.gemm_module(shape), gemm.ENTRY, _PROTOTYPE,
                                     cache=None, key=None, identity=None)
    gemm.SCATTER_PREFETCH = True
    for c, h, m in SCATTERED:
        rates = _conv_gemm_rates(rng, (c, h, m), {"output prefetch": None,
                                                  "none": unprefetched[0]}, True, rounds)
        lines.append(f"  {c} -> {m} at {h} x {h}: " +
                     "  ".join(f"{v} {r:5.1f}" for v, r in rates.items()))
    lines.append("planar 1x1 kernel, batch 8, M <- C channels at P positions (GFMA/s)")
    variants = {}
    for name, setting in (("no prefetch", ("PREFETCH_PANELS", 0)),
                          ("prefetch at any C", ("PREFETCH_MIN_PLANES", 0)),
                          ("no output prefetch", ("OUTPUT_PREFETCH", False))):
        saved = getattr(planar, setting[0])
        setattr(planar, *setting)
        variants[name] = build_llvm_module(lambda: planar.planar_module(shape), planar.ENTRY,
                                           planar_runtime._PROTOTYPE, cache=None, key=None,
                                           identity=None)
        setattr(planar, setting[0], saved)
    for m, c, positions in POINTWISE:
        x = rng.standard_normal((8, c, positions, 1)).astype(np.float32)
        weight = rng.standard_normal((m, c)).astype(np.float32)
        calls = {}
        for name, budget in (("rule", None), ("32 KiB", planar.UNIT_BLOCK_BYTES),
                             ("no prefetch", None), ("prefetch at any C", None),
                             ("no output prefetch", None)):
            if budget is not None:
                planar.STREAM_BLOCK_BYTES, saved = budget, planar.STREAM_BLOCK_BYTES
            conv = PlanarConv(weight, None)
            if name in variants:
                conv.function = variants[name][0]
            calls[name] = conv.bind(x, np.empty((8, m, positions, 1), np.float32))
            if budget is not None:
                planar.STREAM_BLOCK_BYTES = saved
        rates = {v: 8 * m * c * positions / t / 1e9
                 for v, t in _interleaved(calls, rounds).items()}
        lines.append(f"  {m} <- {c} x {positions}: " +
                     "  ".join(f"{v} {r:5.1f}" for v, r in rates.items()))
    lines += compare_copies(rounds)
    return "\n".join(lines)


K_GEMMS = [(6272, 1152, 32), (3000, 576, 64), (1024, 768, 3072), (512, 2304, 512)]
K_CONVS = [(128, 56, 32), (128, 28, 128), (256, 14, 256), (512, 7, 512), (64, 56, 64)]


def _k_blocks(rng: Any, rounds: int) -> list[str]:
    """The generated GEMM with this host's K block (``codegen.gemm.k_block_for``, from its L2
    size) and with 384 rows, on plain products (:data:`K_GEMMS`) and on channels-last 3x3
    convolutions, batch 8 (:data:`K_CONVS`, C -> M at H x H), in GFMA/s."""
    import tensoralg.codegen.gemm as gemm
    from tensoralg.codegen.build import build_llvm_module
    from tensoralg.runtime.gemm import _PROTOTYPE, DenseLayer

    host = gemm.GemmShape.for_host(np.float32, True)
    blocks = {f"K block {host.k_block}": host.k_block, "K block 384": gemm.K_BLOCK}
    built = {name: build_llvm_module(
        lambda rows=rows: gemm.gemm_module(dataclasses.replace(host, k_block=rows)),
        gemm.ENTRY, _PROTOTYPE, cache=None, key=None, identity=None)
        for name, rows in blocks.items()}       # (function, source, what keeps the code alive)
    lines = ["generated GEMM, float32, one thread, this host's K block and 384 (GFMA/s)"]
    for m, k, n in K_GEMMS:
        a = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        calls = {}
        for name, (function, *_) in built.items():
            dense = DenseLayer(w, None)
            dense.function = function
            calls[name] = dense.bind(a, np.empty((m, n), np.float32))
        rates = {v: m * k * n / t / 1e9 for v, t in _interleaved(calls, rounds).items()}
        lines.append(f"  {m}x{k}x{n}: " + "  ".join(f"{v} {r:5.1f}" for v, r in rates.items()))
    for c, h, m in K_CONVS:
        rates = _conv_gemm_rates(rng, (c, h, m), {name: function for name, (function, *_)
                                                  in built.items()}, False, rounds)
        lines.append(f"  3x3 conv {c} -> {m} at {h} x {h}: " +
                     "  ".join(f"{v} {r:5.1f}" for v, r in rates.items()))
    return lines


def _conv_gemm_rates(rng: Any, layer: tuple[int, int, int], functions: dict[str, Any],
                     nchw: bool, rounds: int) -> dict[str, float]:
    """GFMA/s of the GEMM of a 3x3 convolution (``layer`` = C, H, M; batch 8, unit strides,
    pads 1, ReLU) run by each of ``functions`` (None: the layer's own), its input copied
    channels-last once beforehand, writing NCHW planes when ``nchw`` else channels-last
    rows."""
    from tensoralg.runtime.gemm import ConvLayer

    c, h, m = layer
    x = rng.standard_normal((8, c, h, h)).astype(np.float32)
    weight = (rng.standard_normal((m, c, 3, 3)) * 0.1).astype(np.float32)
    calls = {}
    for name, function in functions.items():
        conv = ConvLayer(weight, None, (1, 1), (1, 1), (1, 1), True)
        if function is not None:
            conv.layer.function = function
        bound = conv.bind(x, np.empty((8, m, h, h) if nchw else (8 * h * h, m), np.float32))
        bound.copy()
        calls[name] = bound.gemm
    return {v: 8 * m * c * 9 * h * h / t / 1e9 for v, t in _interleaved(calls, rounds).items()}


COPIES = [(64, 56), (16, 54), (256, 14)]            # N x C x H x H, N = 8, pads 1
TRANSPOSES = [(784, 128), (3136, 64), (784, 512), (49, 512)]   # N x P x M -> N x M x P


def compare_copies(rounds: int) -> list[str]:
    """The channels-last copy (and, as a transpose, a product into NCHW) with and without
    its store prefetch (``codegen.conv.COPY_STORE_PREFETCH``), float32, one thread, GB/s."""
    import tensoralg.codegen.conv as conv
    import tensoralg.runtime.gemm as runtime
    from tensoralg.codegen.build import build_llvm_module

    built = {}
    for name, on in (("store prefetch", True), ("none", False)):
        conv.COPY_STORE_PREFETCH = on
        built[name] = build_llvm_module(
            lambda: conv.channels_last_module(np.dtype(np.float32), 16),
            conv.CHANNELS_LAST_ENTRY, runtime._COPY_PROTOTYPE, cache=None, key=None,
            identity=None)
    conv.COPY_STORE_PREFETCH = True
    rng = np.random.default_rng(0)

    def rates(x: np.ndarray, target: np.ndarray, pads: tuple[int, int]) -> str:
        calls = {}
        for name, (function, _, _) in built.items():
            call = runtime.BoundChannelsLast(x, target.copy(), pads)
            call.function = function
            calls[name] = call
        return "  ".join(f"{v} {x.nbytes / t / 1e9:5.1f}"
                         for v, t in _interleaved(calls, rounds).items())

    lines = ["channels-last copy, 8 x C x H x H, pads 1 (GB/s of input)"]
    for c, h in COPIES:
        x = rng.standard_normal((8, c, h, h)).astype(np.float32)
        lines.append(f"  {c} x {h} x {h}: " + rates(
            x, np.zeros((8, h + 2, h + 2, c), np.float32), (1, 1)))
    lines.append("transpose 8 x P x M -> 8 x M x P (GB/s of input)")
    for p, m in TRANSPOSES:
        x = rng.standard_normal((8, p, 1, m)).astype(np.float32)
        lines.append(f"  {p} x {m}: " + rates(
            x, np.empty((8, 1, m, p), np.float32), (0, 0)))
    return lines


SCATTER_WIDTHS = (64, 128, 256, 384, 512, 1024)
SCATTER_LAYERS = [(1, 160, 7), (1, 512, 7), (3, 64, 7), (1, 160, 14), (3, 64, 14),
                  (3, 128, 14), (1, 160, 28), (3, 64, 28)]   # (kernel, C, H)


def compare_scatter(rounds: int) -> str:
    """The generated GEMM scattering NCHW tiles against its channels-last product plus the
    transpose, on 1x1 and 3x3 layers (:data:`SCATTER_LAYERS`) of each output width in
    :data:`SCATTER_WIDTHS`, batch 1 and 8 (``runtime.gemm.SCATTER_MOST_CHANNELS``)."""
    import tensoralg
    from tensoralg.api import transpose_call
    from tensoralg.runtime.gemm import ConvLayer

    tensoralg.set_num_threads(1)
    rng = np.random.default_rng(0)
    lines = ["scatter time / (channels-last product + transpose), one thread, float32 (above "
             "1: the transpose is faster); output channels " +
             ", ".join(map(str, SCATTER_WIDTHS))]
    for batch in (1, 8):
        for kernel, c, h in SCATTER_LAYERS:
            ratios = []
            for m in SCATTER_WIDTHS:
                w = (rng.standard_normal((m, c, kernel, kernel)) * 0.05).astype(np.float32)
                x = rng.standard_normal((batch, c, h, h)).astype(np.float32)
                pad = kernel // 2
                conv = ConvLayer(w, None, (1, 1), (pad, pad), (pad, pad), True)
                planes = conv.bind(x, np.empty((batch, m, h, h), np.float32))
                product = np.empty((batch * h * h, m), np.float32)
                rows = conv.bind(x, product)
                transpose = transpose_call(product.reshape(batch, h * h, m),
                                           np.empty((batch, m, h * h), np.float32))
                planes.copy()
                medians = _interleaved({"scatter": planes.gemm, "product": rows.gemm,
                                        "transpose": transpose}, rounds)
                ratios.append(medians["scatter"] / (medians["product"] + medians["transpose"]))
            lines.append(f"  batch {batch}, {kernel}x{kernel}, {c:3} -> M at {h:2} x {h:<2}: " +
                         "  ".join(f"{r:4.2f}" for r in ratios))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    model = commands.add_parser("model", help="a model seven ways, round by round")
    model.add_argument("path", help="an .onnx file")
    model.add_argument("--batch", type=int, default=8)
    model.add_argument("--rounds", type=int, default=7)
    windows = commands.add_parser("windows", help="window kernels alone, both ways of "
                                    "their row rules")
    windows.add_argument("--rounds", type=int, default=15)
    kernels = commands.add_parser("kernels", help="each prefetch and blocking choice of the "
                                                  "convolution kernels, both ways")
    kernels.add_argument("--rounds", type=int, default=9)
    stems = commands.add_parser("stems", help="short-K convolutions on patch blocks and on "
                                              "the generated GEMM")
    stems.add_argument("--rounds", type=int, default=15)
    scatter = commands.add_parser("scatter", help="NCHW scatter against the channels-last "
                                                  "product and a transpose, by output width")
    scatter.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    print(compare_model(args.path, args.batch, args.rounds) if args.command == "model" else
          compare_windows(args.rounds) if args.command == "windows" else
          compare_stems(args.rounds) if args.command == "stems" else
          compare_scatter(args.rounds) if args.command == "scatter" else
          compare_kernels(args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
