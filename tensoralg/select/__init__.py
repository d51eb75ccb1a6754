"""Format selection: experiments that time an expression under every candidate format, and
automatic selection from a cost model.

The room of DESIGN.md that holds candidates, cost models, measured autotuning and experiment
records. It uses the public API only (``import tensoralg as ta``), with NumPy, SciPy and tqdm
(matplotlib, for plots, when installed).

Experiments:

- ``expression.py``: the statement to compile (einsum subscripts are rewritten as one)
- ``candidates.py``: default formats per order, labels, the capped product of choices
- ``operands.py``: converting operands, their storage bytes, results as comparable entries
- ``experiment.py``: ``experiment()``, measuring and checking each candidate
- ``records.py``: rows, environment, the table (text, CSV, JSON, Markdown)
- ``plot.py``: the table as a bar chart (matplotlib)
- ``command.py``: the ``tensoralg experiment`` command

Automatic selection (``choose``, and ``formats="auto"`` through ``auto.resolve_auto``):

- ``features.py``: cheap features of a sparse matrix and of how an expression reads it
- ``cost_model.py``: predicted run and conversion times; the model file (``model.json``,
  shipped) and the calibrated one in the cache directory
- ``choose.py``: ``choose()``, the cheapest candidate by the model, and why
- ``auto.py``: ``resolve_auto()``, what ``ta.einsum(..., formats="auto")`` converts
- ``families.py``: seeded generated matrices (uniform, power-law, banded, block, ...)
- ``training.py``: training records measured by experiments; ``fit.py``: fitting the model
- ``calibrate.py``: ``calibrate()``, refitting the model on this machine

>>> import numpy as np, tensoralg as ta
>>> t = ta.select.experiment("a = x(i) * y(i)", {"x": ta.Tensor.from_numpy(np.ones(4), "s"),
...                          "y": np.arange(4.0)}, repeats=2, progress=False)
>>> [row.label for row in t.rows]
['x=dense y=dense a=(inferred)', 'x=s y=dense a=(inferred)']
>>> ta.select.choose("a = x(i) * y(i)", {"x": np.ones(4), "y": np.ones(4)}).reason
'kept every format: no operand is sparse'
"""
from tensoralg import api as _api
from tensoralg.select.auto import resolve_auto as _resolve_auto
from tensoralg.select.calibrate import Calibration, calibrate
from tensoralg.select.candidates import DEFAULT_LIMIT, default_formats
from tensoralg.select.choose import CandidateCost, Choice, Explanation, choose
from tensoralg.select.cost_model import CostModel, CostModelError
from tensoralg.select.experiment import ResultMismatchError, experiment
from tensoralg.select.features import ExpressionFeatures, MatrixFeatures, matrix_features
from tensoralg.select.records import Environment, ExperimentRow, ExperimentTable

# ta.einsum(formats="auto") asks this room, which sits on top of the API.
_api.set_auto_formats(lambda subscripts, operands, formats:
                      tuple(_resolve_auto(subscripts, operands, formats)))

__all__ = ["experiment", "ExperimentTable", "ExperimentRow", "Environment",
           "ResultMismatchError", "default_formats", "DEFAULT_LIMIT",
           "choose", "Choice", "Explanation", "CandidateCost", "calibrate", "Calibration",
           "CostModel", "CostModelError", "matrix_features", "MatrixFeatures",
           "ExpressionFeatures"]
