"""codegen: from the imperative IR to source text and running machine code on the CPU.

Holds one emitter per target (C and CUDA share `cfamily.CFamilyEmitter`; LLVM is separate),
building and loading (`build.py`), and the on-disk kernel cache (`cache.py`). Imports only
`tensoralg.errors`, `tensoralg.ir.nodes`, the standard library and llvmlite (lazily: importing
this package does not load LLVM).
"""

from tensoralg.codegen.build import CompiledKernel, HelperKernels, build, emit_source, ir_digest
from tensoralg.codegen.cache import DiskCache, default_cache_dir

__all__ = ["CompiledKernel", "DiskCache", "HelperKernels", "build", "default_cache_dir", "emit_source", "ir_digest"]
