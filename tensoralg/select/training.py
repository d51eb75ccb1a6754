"""Training records: what the cost model is fitted from, measured by experiments.

One ``MatrixRecord`` per matrix holds its features, the measured time of converting it from
each source format to each candidate format, and one ``ExperimentRecord`` per training
expression: the expression's features and, per candidate format, the median run time that
``ta.select.experiment`` measured (plus its conversion time from CSR, the result's storage and
how the calls were timed). Records are plain values that round-trip through JSON, so a model
can be refitted without measuring again (``benchmarks/fit_selection.py --records``).

The training expressions are the four products of one sparse matrix with one dense operand,
read along rows or along columns, with a vector or with a dense matrix of ``width`` columns:

>>> [subscripts for subscripts, _ in TRAINING_EXPRESSIONS]
['ij,j->i', 'ji,j->i', 'ij,jk->ik', 'ji,jk->ik']
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

import tensoralg as ta
from tensoralg.select import operands as ops
from tensoralg.select.candidates import MATRIX_FORMATS, label
from tensoralg.select.expression import Expression
from tensoralg.select.features import (
    ExpressionFeatures,
    MatrixFeatures,
    expression_features,
    matrix_features,
)

# (subscripts, whether the dense operand is a matrix of `width` columns)
TRAINING_EXPRESSIONS = (("ij,j->i", False), ("ji,j->i", False), ("ij,jk->ik", True),
                        ("ji,jk->ik", True))
SOURCES = ("csr", "csc", "coo", "dcsr", "dcsc")     # the storage an operand may come in
DENSE_LIMIT_BYTES = 1 << 26      # measure the dense candidate up to this size (64 MiB)
# An experiment checks every result against the first, entry by entry: a dense output of
# millions of entries takes seconds a check. Wide products keep theirs under this many
# entries by taking fewer columns (a power of two, at least 2), or are left out.
WIDE_OUTPUT_LIMIT = 1 << 20
CONVERSION_BUDGET_S = 0.05       # repeat a conversion while it takes less than this in all


@dataclass(frozen=True)
class Measurement:
    """One candidate format of one experiment: the median and the fastest run time, the
    conversion from CSR, the result's storage and how calls were timed (``bound``/``call``).
    The model is fitted to the fastest run: on a shared machine the median of a few calls
    still catches other work now and then, the fastest rarely."""

    format: str
    run_s: float
    conversion_s: float
    result: str
    timing: str
    run_min_s: float = 0.0

    @property
    def fastest_s(self) -> float:
        """The fastest run (the median for records made before it was kept)."""
        return self.run_min_s or self.run_s


@dataclass(frozen=True)
class ExperimentRecord:
    """The candidates of one expression on one matrix, with the threads that ran them."""

    expression: str
    features: ExpressionFeatures
    threads: int
    rows: tuple[Measurement, ...]


@dataclass(frozen=True)
class MatrixRecord:
    """A matrix's features, conversion times ``(source, target, seconds)``, and experiments."""

    name: str
    family: str
    features: MatrixFeatures
    conversions: tuple[tuple[str, str, float], ...]
    experiments: tuple[ExperimentRecord, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain values for JSON."""
        return {"name": self.name, "family": self.family, "features": self.features.as_dict(),
                "conversions": [list(c) for c in self.conversions],
                "experiments": [{"expression": e.expression,
                                 "features": dataclasses.asdict(e.features),
                                 "threads": e.threads,
                                 "rows": [dataclasses.asdict(r) for r in e.rows]}
                                for e in self.experiments]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MatrixRecord":
        """Read back what ``to_dict`` wrote."""
        features = MatrixFeatures(**{**data["features"],
                                     "shape": tuple(data["features"]["shape"])})
        experiments = tuple(
            ExperimentRecord(e["expression"], _expression_features(e["features"]),
                             int(e["threads"]), tuple(Measurement(**r) for r in e["rows"]))
            for e in data["experiments"])
        return cls(data["name"], data["family"], features,
                   tuple((str(s), str(t), float(v)) for s, t, v in data["conversions"]),
                   experiments)


def _expression_features(data: dict[str, Any]) -> ExpressionFeatures:
    return ExpressionFeatures(data["operand"], tuple(data["indices"]), tuple(data["roles"]),
                              data["access"], int(data["width"]), int(data["output_rank"]),
                              int(data["dense_operands"]))


def measure_matrix(name: str, family: str, matrix: Any, *, width: int = 16, repeats: int = 5,
                   seed: int = 0, expressions: Sequence[tuple[str, bool]] = TRAINING_EXPRESSIONS
                   ) -> MatrixRecord:
    """Measure one matrix (a canonical scipy CSR array): its conversions and every training
    expression under every candidate format (dense only up to ``DENSE_LIMIT_BYTES``; wide
    products with ``width`` columns, fewer when the output would pass ``WIDE_OUTPUT_LIMIT``)."""
    m, n = matrix.shape
    formats = [f for f in MATRIX_FORMATS if not f.is_dense or m * n * 8 <= DENSE_LIMIT_BYTES]
    conversions = measure_conversions(matrix, formats)
    rng = np.random.default_rng(seed)
    experiments = []
    for subscripts, wide in expressions:
        expression = Expression.parse(subscripts, 2)
        length = n if expression.indices["A"][1] == expression.indices["B"][0] else m
        columns = _columns(width, m + n - length) if wide else 1
        if columns < 2 and wide:
            continue
        dense = rng.standard_normal((length, columns) if wide else length)
        table = ta.select.experiment(subscripts, [matrix, dense], candidates={0: formats},
                                     repeats=repeats, seed=seed, progress=False)
        rows = tuple(Measurement(row.formats[0][1], row.run_median_s, row.conversion_s,
                                 row.result_format, row.timing, row.run_min_s)
                     for row in table.rows)
        features = expression_features(expression, "A", {"A": matrix, "B": dense})
        experiments.append(ExperimentRecord(subscripts, features, ta.get_num_threads(), rows))
    return MatrixRecord(name, family, matrix_features(matrix), conversions, tuple(experiments))


def _columns(width: int, output_rows: int) -> int:
    """``width``, or the largest power of two that keeps the output under WIDE_OUTPUT_LIMIT."""
    if output_rows * width <= WIDE_OUTPUT_LIMIT:
        return width
    fits = WIDE_OUTPUT_LIMIT // max(output_rows, 1)
    return 1 << (fits.bit_length() - 1) if fits >= 2 else 0


def measure_conversions(matrix: Any, targets: Iterable[ta.Format],
                        sources: Sequence[str] = SOURCES) -> tuple[tuple[str, str, float], ...]:
    """Seconds to store ``matrix`` (a scipy CSR array), given in each of ``sources``, as each
    target format: the median of a few conversions (one when it is slow)."""
    given = {"csr": lambda: matrix, "csc": matrix.tocsc, "coo": matrix.tocoo,
             "dcsr": lambda: ta.Tensor.from_scipy(matrix, format=ta.DCSR),
             "dcsc": lambda: ta.Tensor.from_scipy(matrix, format=ta.DCSC)}
    dtype = np.dtype(np.float64)
    targets = list(targets)
    found = []
    for source in sources:
        operand = given[source]()
        for target in targets:
            seconds = _median_time(lambda: ops.stored(operand, target, dtype))
            found.append((source, label(target), seconds))
    return tuple(found)


def _median_time(work: Callable[[], Any]) -> float:
    times: list[float] = []
    while not times or (len(times) < 3 and sum(times) < CONVERSION_BUDGET_S):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return float(np.median(times))
