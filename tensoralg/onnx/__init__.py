"""ONNX importer: whole models run with kernels the tensoralg compiler generates.

It imports only the public API (``import tensoralg as ta``). Layout: ``load.py`` reads and
checks a model (external data relative to the model file) and resolves each op in the explicit
registry of ``ops/`` (one module per op family); ``conditionals.py`` inlines the ``If``s decided
at load and builds the branches of the others, ``bag_loops.py`` recognises the embedding-bag
``Loop``s, ``reference.py`` evaluates nodes with onnx's reference implementation; ``passes.py`` holds the graph passes of each opt level (``einsum_products.py``: Einsums that are matrix products become MatMuls); ``window_steps.py`` gives a level-3 plan its generated pooling, depthwise-convolution and softmax kernels; ``kernels.py`` turns nodes into
TACO-style statements (broadcasting, dtypes) compiled by ``ta.compile``; ``executor.py`` runs
the plan; ``profile.py`` times it; ``model.py`` holds ``load``, ``CompiledModel`` and
``InferenceSession``.

>>> import tensoralg.onnx as tonnx
>>> sorted(set(["MatMul", "Gemm"]) & set(tonnx.supported_ops()))
['Gemm', 'MatMul']
"""
from tensoralg.onnx.errors import InputError, ModelError
from tensoralg.onnx.graph import ValueInfo
from tensoralg.onnx.model import CompiledModel, InferenceSession, load
from tensoralg.onnx.ops import supported_ops
from tensoralg.onnx.profile import Profile

__all__ = ["load", "CompiledModel", "InferenceSession", "ValueInfo", "Profile", "ModelError",
           "InputError", "supported_ops"]
