"""Format selection: experiments that time an expression under every candidate format.

The room of DESIGN.md that holds candidates, cost models, measured autotuning and experiment
records. It uses the public API only (``import tensoralg as ta``), with NumPy, SciPy and tqdm
(matplotlib, for plots, when installed). Automatic selection (``formats="auto"``) is not here
yet.

- ``expression.py``: the statement to compile (einsum subscripts are rewritten as one)
- ``candidates.py``: default formats per order, labels, the capped product of choices
- ``operands.py``: converting operands, their storage bytes, results as comparable entries
- ``experiment.py``: ``experiment()``, measuring and checking each candidate
- ``records.py``: rows, environment, the table (text, CSV, JSON, Markdown)
- ``plot.py``: the table as a bar chart (matplotlib)
- ``command.py``: the ``tensoralg experiment`` command

>>> import numpy as np, tensoralg as ta
>>> t = ta.select.experiment("a = x(i) * y(i)", {"x": ta.Tensor.from_numpy(np.ones(4), "s"),
...                          "y": np.arange(4.0)}, repeats=2, progress=False)
>>> [row.label for row in t.rows]
['x=dense y=dense a=(inferred)', 'x=s y=dense a=(inferred)']
"""
from tensoralg.select.candidates import DEFAULT_LIMIT, default_formats
from tensoralg.select.experiment import ResultMismatchError, experiment
from tensoralg.select.records import Environment, ExperimentRow, ExperimentTable

__all__ = ["experiment", "ExperimentTable", "ExperimentRow", "Environment",
           "ResultMismatchError", "default_formats", "DEFAULT_LIMIT"]
