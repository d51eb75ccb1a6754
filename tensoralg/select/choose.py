"""``choose``: pick the storage of an expression's sparse operand from features and a cost model.

No candidate runs: the decision reads cheap features of the operand (``features.py``), looks
up the expression's class in the cost model (``cost_model.py``) and takes the format whose
predicted cost is smallest, the conversion from the operand's own format included. On a
10^6-entry CSR matrix with 10^5 rows the whole decision takes under a millisecond: medians of
0.39-0.61 ms (uniform and power-law matrices; SpMV, its transpose, SpMM) on the shared 2-core
machine of ``benchmarks/RESULTS.md``, where ``benchmarks/selection.py`` measures it; 0.36 ms
is the median over its held-out cases.

The model covers expressions with one sparse matrix multiplied by dense operands (SpMV, its
transpose, SpMM and its transpose, and any einsum of the same shape). For anything else (two
sparse operands, 3-tensors, a sparse vector), ``choose`` keeps every operand's own format and
says why.

>>> import numpy as np, scipy.sparse as sp, tensoralg as ta
>>> A = sp.random_array((300, 300), density=0.02, format="csr", random_state=0)
>>> choice = ta.select.choose("ij,j->i", [A, np.ones(300)])
>>> choice.formats
{0: 'csr', 1: 'dense', 'out': '(inferred)'}
"""
from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence  # (typing's aliases check isinstance slowly)
from dataclasses import dataclass
from typing import Any

import numpy as np

import tensoralg as ta
from tensoralg.select import operands as ops
from tensoralg.select.candidates import label
from tensoralg.select.cost_model import CostModel, current_model
from tensoralg.select.experiment import MAX_DENSE_BYTES
from tensoralg.select.expression import Expression
from tensoralg.select.features import (
    ExpressionFeatures,
    MatrixFeatures,
    expression_features,
    matrix_features,
)

INFERRED = "(inferred)"


@dataclass(frozen=True)
class CandidateCost:
    """One candidate's predicted seconds: a call, the conversion, and their sum over
    ``calls`` calls per conversion (``cost_s = run_s + conversion_s / calls``)."""

    format: str
    run_s: float
    conversion_s: float
    cost_s: float


@dataclass(frozen=True)
class Explanation:
    """Why ``choose`` picked what it picked: the sparse operand's features and the
    expression's, every candidate's predicted cost (cheapest first), a one-line reason, the
    model used, and how long the decision took."""

    operand: str | int | None
    features: MatrixFeatures | None
    expression: ExpressionFeatures | None
    candidates: tuple[CandidateCost, ...]
    reason: str
    model: str
    calls: float
    decision_s: float

    def __str__(self) -> str:
        lines = []
        if self.features is not None:
            lines.append(f"operand {self.operand}: {self.features}")
        if self.expression is not None:
            lines.append(f"read as {self.expression} (class {self.expression.key!r})")
        if self.candidates:
            per = "" if self.calls == 1 else f" (conversion over {self.calls:g} calls)"
            lines.append(f"{'candidate':10} {'run':>10} {'convert':>10} {'cost' + per:>10}")
            lines += [f"{c.format:10} {_duration(c.run_s):>10} {_duration(c.conversion_s):>10} "
                      f"{_duration(c.cost_s):>10}" for c in self.candidates]
        lines.append(f"reason: {self.reason}")
        lines.append(f"model: {self.model}; decided in {_duration(self.decision_s)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Choice:
    """The formats ``choose`` picked: ``formats`` maps each operand (by position for einsum
    subscripts, by name for a statement) and the output to a format label (``csr``,
    ``dense``, ...; the output's is ``(inferred)``: the compiler infers it from the
    operands'). ``reason`` says why in one line; ``explanation`` holds the features and
    every candidate's predicted cost when ``choose`` was asked to explain."""

    expression: str
    formats: Mapping[str | int, str]
    reason: str
    explanation: Explanation | None = None

    def __str__(self) -> str:
        head = f"{self.expression}: " + " ".join(f"{key}={fmt}"
                                                for key, fmt in self.formats.items())
        if self.explanation is None:
            return f"{head}\nreason: {self.reason}"
        return f"{head}\n{self.explanation}"


def choose(expr: str, operands: Mapping[str, Any] | Sequence[Any], explain: bool = False, *,
           calls: float = 1, same_result: bool = False, model: CostModel | None = None
           ) -> Choice:
    """Pick formats for ``expr``'s sparse operand from its features and the cost model.

    ``expr`` and ``operands`` are as for ``ta.select.experiment``: einsum subscripts with a
    list of operands, or a statement with a dict by name. ``calls`` is how many calls share
    one conversion (1: convert for this call alone, as ``einsum`` does; ``math.inf``: the
    conversion does not count). ``same_result=True`` leaves out formats whose result comes
    back in another storage than the operand's own format gives (a dense result stays
    dense). ``model`` defaults to the calibrated model of this machine, else the shipped one.

    >>> import numpy as np, scipy.sparse as sp, tensoralg as ta
    >>> A = sp.random_array((2000, 2000), density=0.002, format="csr", random_state=0)
    >>> choice = ta.select.choose("ji,j->i", [A, np.ones(2000)], explain=True)
    >>> [c.format for c in choice.explanation.candidates][0] == choice.formats[0]
    True
    >>> choice.explanation.expression.access
    'columns'
    """
    start = time.perf_counter()
    if not (isinstance(calls, (int, float)) and not isinstance(calls, bool) and calls > 0):
        raise ta.InputError(f"choose: calls must be a positive number (math.inf: conversions "
                            f"do not count), not {calls!r}")
    if isinstance(operands, (str, bytes)):
        raise ta.InputError(f"choose: the operands are a list (einsum subscripts) or a dict by "
                            f"name (a statement), not a {type(operands).__name__}")
    count = len(operands) if isinstance(operands, Sequence) else None
    expression = _parse(expr, count)
    given = expression.bind(operands)
    _check_operands(expression, given)
    key = {name: k for k, name in enumerate(expression.operands)} if expression.einsum else \
        {name: name for name in expression.operands}
    formats: dict[str | int, str] = {key[name]: _own_label(given[name])
                                     for name in expression.operands}
    formats[expression.output] = INFERRED
    sparse = [name for name in expression.operands if ops.is_sparse(given[name])]
    model = model if model is not None else current_model()
    if len(sparse) != 1 or ops.rank(given[sparse[0]]) != 2:
        reason = _why_kept(sparse, given)
        explanation = Explanation(None, None, None, (), reason, str(model), calls,
                                  time.perf_counter() - start) if explain else None
        return Choice(expression.text, formats, reason, explanation)
    name = sparse[0]
    matrix = matrix_features(given[name])
    reading = expression_features(expression, name, given)
    candidates = _costs(model, matrix, reading, calls, same_result)
    current = formats[key[name]]
    if not candidates:
        reason = (f"kept {current}: the cost model has no data for expressions of class "
                  f"{reading.key!r} ({', '.join(model.classes())} are known)")
    else:
        formats[key[name]] = candidates[0].format
        reason = _reason(candidates, current)
    explanation = Explanation(key[name], matrix, reading, candidates, reason, str(model), calls,
                              time.perf_counter() - start) if explain else None
    return Choice(expression.text, formats, reason, explanation)


@functools.lru_cache(maxsize=256)
def _parsed(text: str, count: int | None) -> Expression:
    return Expression.parse(text, count)


def _parse(expr: Any, count: int | None) -> Expression:
    return _parsed(expr, count) if isinstance(expr, str) else Expression.parse(expr, count)


def _check_operands(expression: Expression, given: Mapping[str, Any]) -> None:
    """Every operand is there, is a tensor, and has as many modes as the expression says."""
    missing = [name for name in expression.operands if name not in given]
    extra = [name for name in given if name not in expression.indices]
    if missing or extra:
        raise ta.InputError(f"{expression.text!r} has the operands "
                            f"{', '.join(expression.operands)}: "
                            + (f"missing {', '.join(missing)}" if missing else
                               f"no operand named {', '.join(map(str, extra))}"))
    for position, name in enumerate(expression.operands):
        operand = given[name]
        what = f"operand {position} ({name})" if expression.einsum else f"operand {name}"
        if operand is None or isinstance(operand, (str, bytes, dict)) or not (
                hasattr(operand, "shape") or isinstance(operand, (int, float, np.number))):
            raise ta.InputError(f"{expression.text!r}: {what} is a {type(operand).__name__}, "
                                f"not a tensor; pass a NumPy array, a scipy.sparse matrix or a "
                                f"ta.Tensor")
        expected = len(expression.indices[name])
        if ops.rank(operand) != expected:
            raise ta.ShapeError(f"{expression.text!r}: {what} has {ops.rank(operand)} "
                                f"mode(s) but the expression indexes it with {expected}")


def _own_label(operand: Any) -> str:
    """The label of an operand's storage, read without converting it."""
    if isinstance(operand, ta.Tensor):
        return label(operand.format)
    if ops.is_sparse(operand):
        kind = getattr(operand, "format", None)
        if isinstance(kind, str):
            return kind                  # scipy: csr, csc, coo, bsr, ...
        return "coo" if hasattr(operand, "coords") else "csr"     # pydata COO, GCXS
    return "dense"


def _why_kept(sparse: list[str], given: Mapping[str, Any]) -> str:
    if not sparse:
        return "kept every format: no operand is sparse"
    if len(sparse) > 1:
        return (f"kept every format: the cost model covers one sparse matrix with dense "
                f"operands, and {', '.join(sparse)} are all sparse")
    return (f"kept every format: the cost model covers sparse matrices, and {sparse[0]} has "
            f"{ops.rank(given[sparse[0]])} mode(s)")


def _costs(model: CostModel, matrix: MatrixFeatures, reading: ExpressionFeatures, calls: float,
           same_result: bool) -> tuple[CandidateCost, ...]:
    """Every candidate the model knows for this class, cheapest first."""
    if reading.key not in model.run:
        return ()
    runs = model.predict_run(reading.key, matrix, reading, ta.get_num_threads())
    conversions = model.predict_conversion(matrix.format, matrix)
    results = model.run[reading.key]
    own_result = results[matrix.format].result if matrix.format in results else None
    m, n = matrix.shape
    costs = []
    for fmt, run_s in runs.items():
        if fmt == "dense" and m * n * 8 > MAX_DENSE_BYTES:
            continue                   # as experiments leave it out: too large to store
        if same_result and own_result is not None and results[fmt].result != own_result:
            continue
        conversion_s = conversions.get(fmt, math.inf)
        cost = run_s + (conversion_s / calls if math.isfinite(calls) else 0.0)
        costs.append(CandidateCost(fmt, run_s, conversion_s, cost))
    return tuple(sorted(costs, key=lambda c: c.cost_s))


def _reason(candidates: tuple[CandidateCost, ...], current: str) -> str:
    best = candidates[0]
    if best.format == current:
        if len(candidates) == 1:
            return f"kept {current}: the only candidate"
        second = candidates[1]
        why = "runs slower" if second.run_s >= best.run_s else \
            f"runs in {_duration(second.run_s)} but converting to it costs " \
            f"{_duration(second.conversion_s)}"
        return (f"kept {current}: predicted {_duration(best.cost_s)}; the next best, "
                f"{second.format}, {why}")
    own = next((c for c in candidates if c.format == current), None)
    against = f"against {_duration(own.cost_s)} for {current} as given" if own is not None \
        else f"({current} is not a candidate: it is converted anyway)"
    return (f"{best.format}: predicted {_duration(best.cost_s)} (run "
            f"{_duration(best.run_s)}, convert {_duration(best.conversion_s)}) {against}")


def _duration(seconds: float) -> str:
    """``8.7 µs``, ``1.25 ms``, ``2.51 s``: three significant digits."""
    if not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"
