"""ONNX importer: whole models run with kernels the tensoralg compiler generates.

It reaches the core only through the public API (``import tensoralg as ta``) and the program
API (``tensoralg.program``: bound calls, generated layers and movement kernels, call sequences).
Layout, in the order a model goes through it:

- ``frontend/``: ``load.py`` reads and checks a model (external data relative to the model
  file) and resolves each op; ``conditionals.py`` inlines the ``If``s decided at load and builds
  the branches of the others; ``graph.py`` is the importer's graph; ``reference.py`` evaluates
  nodes with onnx's reference implementation; ``model.py`` holds ``load``, ``CompiledModel``
  and ``InferenceSession``; ``command.py`` the ``tensoralg onnx`` command.
- ``ops/``: the explicit registry of op implementations, one module per op family, and
  ``kernels.py``, which turns nodes into TACO-style statements (broadcasting, dtypes).
- ``passes/``: the graph passes of each opt level (``pipeline.py``): folding, fusion, products,
  sparse weights, and the embedding-bag recognisers together in ``bags/``.
- ``plan/``: the memory plan, the node-by-node executor, the level-3 static plan
  (``static.py``) and its steps (``*_steps.py``), the device executor of cuda models, and the
  profile.

>>> import tensoralg.onnx as tonnx
>>> sorted(set(["MatMul", "Gemm"]) & set(tonnx.supported_ops()))
['Gemm', 'MatMul']
"""
from tensoralg.onnx.frontend.errors import InputError, ModelError
from tensoralg.onnx.frontend.graph import ValueInfo
from tensoralg.onnx.frontend.model import CompiledModel, InferenceSession, load
from tensoralg.onnx.ops import supported_ops
from tensoralg.onnx.plan.profile import Profile

__all__ = ["load", "CompiledModel", "InferenceSession", "ValueInfo", "Profile", "ModelError",
           "InputError", "supported_ops"]
