"""The cost model of automatic format selection: predicted run and conversion times.

The model is data. For each expression class (``features.ExpressionFeatures.key``: which mode
of the sparse matrix is an output index, and whether it multiplies a vector or a wider dense
operand) and each candidate format it holds non-negative coefficients over ``RUN_TERMS``,
quantities that a kernel's time grows with: a fixed cost per call, per row and per column
(all of them, or only the nonempty ones), per multiply-add (serial, or spread over the threads
the runtime would use), per multiply-add whose gather is likely to miss the cache, per output
element, and per element of the dense matrix. For each pair of a source and a target format it
holds coefficients over ``CONVERSION_TERMS``. A prediction is a dot product: no matrix is
remembered, so the model says the same of two matrices with the same features.

>>> model = CostModel.load(SHIPPED_MODEL)
>>> sorted(model.classes())
['out,sum w=1', 'out,sum w>1', 'sum,out w=1', 'sum,out w>1']
>>> model.formats("out,sum w=1")
('dense', 'csr', 'csc', 'dcsr', 'dcsc', 'coo')

The model ``tensoralg`` ships (``model.json`` beside this file) is fitted by
``benchmarks/fit_selection.py``; ``ta.select.calibrate()`` fits one on the user's machine into
the cache directory, which ``current_model()`` then prefers.
"""
from __future__ import annotations

import functools
import json
import math
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

import tensoralg as ta
from tensoralg.select.features import ExpressionFeatures, MatrixFeatures

MODEL_FORMAT = "tensoralg format-selection model"
MODEL_VERSION = 1            # of the file's layout and of the terms below; bump on any change
SHIPPED_MODEL = Path(__file__).resolve().with_name("model.json")
CALIBRATED_NAME = "select-model.json"
CACHE_BYTES = 1 << 20        # a dense operand larger than this misses the cache when gathered
WORK_PER_THREAD = 400_000    # stored values per thread below which a kernel is not split
RUN_TERMS = ("call", "rows", "columns", "nonempty rows", "nonempty columns", "multiply-adds",
             "multiply-adds per thread", "cache-missing multiply-adds", "rows x width",
             "columns x width", "dense elements x width")
CONVERSION_TERMS = ("call", "rows", "columns", "entries", "dense elements")


class CostModelError(ta.TensorAlgebraError, ValueError):
    """A cost-model file cannot be used: not JSON, another layout version, missing or
    negative coefficients. The message names the file and what is wrong."""


def run_terms(matrix: MatrixFeatures, expression: ExpressionFeatures, threads: int
              ) -> np.ndarray:
    """The values of ``RUN_TERMS`` for one matrix, read by one expression on ``threads``.

    >>> from tensoralg.select.features import ExpressionFeatures, MatrixFeatures
    >>> f = MatrixFeatures((100, 50), 400, "csr", 0.08, 4.0, 9, 0.5, 0.1, 8.0, 12, 0.4, 0.0,
    ...                    0.0, 0.1)
    >>> e = ExpressionFeatures("A", ("i", "j"), ("out", "sum"), "rows", 1, 1, 1)
    >>> dict(zip(RUN_TERMS, run_terms(f, e, threads=2).tolist()))["nonempty rows"]
    90.0
    """
    m, n = matrix.shape
    entries, width = matrix.nnz, expression.width
    multiply_adds = float(entries) * width
    # The runtime splits a kernel over threads by the stored values it touches: the
    # operands' and the output's.
    work = entries + (m + n) * width
    threads_used = max(1, min(threads, work // WORK_PER_THREAD))
    footprint = (m + n) * width * 8
    spread = min(1.0, 3.0 * matrix.bandedness)        # 0 on the diagonal, 1 when scattered
    missing = spread * max(0.0, 1.0 - CACHE_BYTES / footprint) if footprint else 0.0
    return np.array([1.0, m, n, m * (1.0 - matrix.row_empty), n * (1.0 - matrix.col_empty),
                     multiply_adds, multiply_adds / threads_used, multiply_adds * missing,
                     m * width, n * width, float(m) * n * width])


def conversion_terms(matrix: MatrixFeatures) -> np.ndarray:
    """The values of ``CONVERSION_TERMS`` for one matrix."""
    m, n = matrix.shape
    return np.array([1.0, m, n, float(matrix.nnz), float(m) * n])


@dataclass(frozen=True)
class RunModel:
    """The coefficients of one format in one expression class, what its result came back as
    (``dense`` or a sparse storage), and how many measurements they were fitted on."""

    coefficients: tuple[float, ...]
    result: str
    samples: int


@dataclass(frozen=True)
class CostModel:
    """Run-time models by expression class and format, conversion models by source and
    target format, and where the model comes from (``meta``: version, date, machine)."""

    run: Mapping[str, Mapping[str, RunModel]]
    conversion: Mapping[str, Mapping[str, tuple[float, ...]]]
    meta: Mapping[str, Any] = field(default_factory=dict)

    def classes(self) -> tuple[str, ...]:
        return tuple(self.run)

    def formats(self, key: str) -> tuple[str, ...]:
        """The formats the model predicts for expression class ``key`` (none if unknown)."""
        return tuple(self.run.get(key, {}))

    def predict_run(self, key: str, matrix: MatrixFeatures, expression: ExpressionFeatures,
                    threads: int) -> dict[str, float]:
        """Predicted seconds per call of each format of class ``key``."""
        formats, table = self._run_table(key)
        times = table @ run_terms(matrix, expression, threads)
        return dict(zip(formats, times.tolist()))

    def predict_conversion(self, source: str, matrix: MatrixFeatures) -> dict[str, float]:
        """Predicted seconds to store a matrix held as ``source`` in each target format
        (a source the model does not know is read as COO, the slowest path)."""
        targets, table = self._conversion_table(source if source in self.conversion else "coo")
        return dict(zip(targets, (table @ conversion_terms(matrix)).tolist()))

    @functools.cached_property
    def _tables(self) -> dict[tuple[str, str], tuple[tuple[str, ...], np.ndarray]]:
        tables = {}
        for key, formats in self.run.items():
            tables[("run", key)] = (tuple(formats), np.array(
                [formats[f].coefficients for f in formats]).reshape(len(formats), -1))
        for source, targets in self.conversion.items():
            tables[("conversion", source)] = (tuple(targets), np.array(
                [targets[t] for t in targets]).reshape(len(targets), -1))
        return tables

    def _run_table(self, key: str) -> tuple[tuple[str, ...], np.ndarray]:
        return self._tables[("run", key)]

    def _conversion_table(self, source: str) -> tuple[tuple[str, ...], np.ndarray]:
        return self._tables[("conversion", source)]

    # -- the file ------------------------------------------------------------------------------

    def to_json(self) -> str:
        """The model as JSON (the layout ``from_json`` reads)."""
        document = {
            "format": MODEL_FORMAT, "version": MODEL_VERSION, "meta": dict(self.meta),
            "run_terms": list(RUN_TERMS), "conversion_terms": list(CONVERSION_TERMS),
            "run": {key: {fmt: {"coefficients": list(model.coefficients),
                                "result": model.result, "samples": model.samples}
                          for fmt, model in formats.items()}
                    for key, formats in self.run.items()},
            "conversion": {source: {target: list(c) for target, c in targets.items()}
                           for source, targets in self.conversion.items()},
        }
        return json.dumps(document, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "the model") -> "CostModel":
        """Read and check a model; ``CostModelError`` names what is wrong."""
        try:
            document = json.loads(text)
        except ValueError as err:
            raise CostModelError(f"{where} is not JSON: {err}") from None
        if not isinstance(document, dict) or document.get("format") != MODEL_FORMAT:
            raise CostModelError(f"{where} is not a {MODEL_FORMAT}")
        if document.get("version") != MODEL_VERSION or \
                document.get("run_terms") != list(RUN_TERMS) or \
                document.get("conversion_terms") != list(CONVERSION_TERMS):
            raise CostModelError(f"{where} has layout version {document.get('version')!r}; "
                                 f"this tensoralg reads version {MODEL_VERSION}")
        try:
            run = {str(key): {str(fmt): RunModel(_coefficients(entry["coefficients"],
                                                               len(RUN_TERMS)),
                                                 str(entry["result"]), int(entry["samples"]))
                              for fmt, entry in formats.items()}
                   for key, formats in document["run"].items()}
            conversion = {str(source): {str(target): _coefficients(c, len(CONVERSION_TERMS))
                                        for target, c in targets.items()}
                          for source, targets in document["conversion"].items()}
            meta = dict(document.get("meta", {}))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise CostModelError(f"{where} is malformed: {err}") from None
        if not run or not conversion:
            raise CostModelError(f"{where} holds no run-time or no conversion model")
        return cls(run, conversion, meta)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CostModel":
        """Read a model file (``CostModelError`` when it cannot be used)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise CostModelError(f"cannot read the cost model {os.fspath(path)}: {err}") from None
        return cls.from_json(text, f"the cost model {os.fspath(path)}")

    def save(self, path: str | os.PathLike) -> Path:
        """Write the model to ``path`` atomically (a reader sees the old file or the new)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(self.to_json())
        os.replace(temporary, path)
        return path

    def __str__(self) -> str:
        meta = self.meta
        return (f"cost model for {len(self.run)} expression classes, fitted "
                f"{meta.get('date', '?')} on {meta.get('matrices', '?')} matrices "
                f"({meta.get('source', '?')}; {meta.get('cpu', '?')}, "
                f"{meta.get('threads', '?')} threads)")


def _coefficients(values: Any, count: int) -> tuple[float, ...]:
    numbers = tuple(float(v) for v in values)
    if len(numbers) != count or not all(math.isfinite(v) and v >= 0 for v in numbers):
        raise ValueError(f"expected {count} finite non-negative coefficients, got {values!r}")
    return numbers


# -- which model ------------------------------------------------------------------------------


def calibrated_path() -> Path | None:
    """Where ``calibrate()`` stores its model: the kernel cache's directory (None when the
    on-disk cache is off, ``TENSORALG_DISK_CACHE=0``)."""
    from tensoralg import api

    directory = api.kernel_cache().options.cache_dir
    return directory / CALIBRATED_NAME if directory is not None else None


def current_model() -> CostModel:
    """The calibrated model of this machine when there is a usable one, else the shipped one.

    A calibrated file that cannot be used (corrupt, another layout version, written by another
    tensoralg version) is ignored with a warning, once per state of the file.
    """
    path = calibrated_path()
    if path is not None:
        try:
            stat = path.stat()
        except OSError:
            stat = None
        if stat is not None:
            model = _calibrated(str(path), stat.st_mtime_ns, stat.st_size)
            if model is not None:
                return model
    return _shipped()


@functools.lru_cache(maxsize=4)
def _calibrated(path: str, mtime_ns: int, size: int) -> CostModel | None:
    """The calibrated model at ``path`` as it is now (the file's time and size key the
    cache, so a new calibration is read again), or None with a warning."""
    try:
        model = CostModel.load(path)
    except CostModelError as err:
        warnings.warn(f"{err}; using the model tensoralg ships (run ta.select.calibrate() "
                      f"to write a new one)", stacklevel=4)
        return None
    fitted_with = model.meta.get("tensoralg")
    if fitted_with != ta.__version__:
        warnings.warn(f"the calibrated cost model {path} was fitted by tensoralg "
                      f"{fitted_with}, not {ta.__version__}; using the model tensoralg ships "
                      f"(run ta.select.calibrate() again)", stacklevel=4)
        return None
    return model


@functools.lru_cache(maxsize=1)
def _shipped() -> CostModel:
    return CostModel.load(SHIPPED_MODEL)
