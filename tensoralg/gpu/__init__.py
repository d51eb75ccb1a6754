"""gpu: running kernels on an NVIDIA GPU (the cuda backend's runtime).

The CUDA source comes from ``codegen/cuda.py``; this room loads it (through pycuda, or
NVIDIA's cuda-python where pycuda cannot be built), moves tensors to and from the device, picks
a mapping per call and launches. It imports ``errors``, ``ir``, ``formats``, ``schedule``,
``lower`` (to lower a compiled program again with the GPU's pass settings) and ``codegen``;
``api.py`` calls `run` for ``backend="cuda"``.

>>> import tensoralg.gpu as gpu
>>> reason = gpu.available()     # None where a GPU and pycuda or cuda-python are present
>>> reason is None or "pip install" in reason
True
"""
from tensoralg.gpu.context import GpuContext, GpuKernel, available, gpu_context
from tensoralg.gpu.execute import launch, run
from tensoralg.gpu.function import gpu_function, gpu_plan, pass_options
from tensoralg.gpu.memory import (
    DeviceArray,
    DeviceTensor,
    as_cupy,
    dense_tensor,
    from_cupy,
    is_cupy,
    to_device,
    to_host,
    upload,
)


def cuda_source(compiled: object) -> str:
    """The CUDA translation unit the GPU runs for ``compiled`` (an ``api.CompiledProgram``),
    with every mapping its plan allows; needs no GPU.

    >>> # print(cuda_source(kernel._default))
    """
    from tensoralg.codegen.cuda import cuda_program

    return cuda_program(gpu_function(compiled), None,
                        disjoint_rows=not gpu_plan(compiled).partials).source


__all__ = ["DeviceArray", "DeviceTensor", "GpuContext", "GpuKernel", "as_cupy", "available",
           "cuda_source", "dense_tensor", "from_cupy", "gpu_context", "gpu_function", "gpu_plan",
           "is_cupy", "launch", "pass_options", "run", "to_device", "to_host", "upload"]
