"""Fitting the cost model to training records: non-negative least squares on relative error.

Each (expression class, format) gets the non-negative coefficients over ``RUN_TERMS`` that
minimise the sum of squared *relative* errors of the predicted run times (the fastest of the
timed calls; a 10 µs kernel counts as much as a 10 ms one), and each (source, target) pair the same over
``CONVERSION_TERMS``. Non-negative coefficients keep every prediction positive and growing
with size, so the model extrapolates sanely to matrices larger than it saw.

With a ``prior`` model (``calibrate`` passes the shipped one), each coefficient is also pulled
towards the prior's: a few measurements on a new machine move the model where they have
evidence and leave it where they have none.

>>> from tensoralg.select.training import MatrixRecord
>>> fit_model([]).run
Traceback (most recent call last):
  ...
tensoralg.errors.InputError: no training records to fit the cost model on
"""
from __future__ import annotations

import datetime
import platform
from collections import defaultdict
from typing import Iterable, Sequence

import numpy as np

import tensoralg as ta
from tensoralg.select.cost_model import (
    CostModel,
    RunModel,
    conversion_terms,
    run_terms,
)
from tensoralg.select.training import MatrixRecord

PRIOR_WEIGHT = 0.5      # how strongly a coefficient holds to the prior's (relative-error units)


def fit_model(records: Sequence[MatrixRecord], prior: CostModel | None = None,
              source: str = "") -> CostModel:
    """The cost model of ``records`` (optionally pulled towards ``prior``)."""
    if not records:
        raise ta.InputError("no training records to fit the cost model on")
    run_samples: dict[tuple[str, str], list[tuple[np.ndarray, float, str]]] = defaultdict(list)
    for record in records:
        for experiment in record.experiments:
            terms = run_terms(record.features, experiment.features, experiment.threads)
            for row in experiment.rows:
                run_samples[(experiment.features.key, row.format)].append(
                    (terms, row.fastest_s, row.result))
    # With a prior, what the records do not measure keeps the prior's coefficients.
    run: dict[str, dict[str, RunModel]] = defaultdict(dict)
    conversion: dict[str, dict[str, tuple[float, ...]]] = defaultdict(dict)
    if prior is not None:
        for key, formats in prior.run.items():
            run[key].update(formats)
        for source_format, targets in prior.conversion.items():
            conversion[source_format].update(targets)
    for (key, fmt), samples in sorted(run_samples.items(), key=lambda item: _order(item[0])):
        before = prior.run.get(key, {}).get(fmt) if prior is not None else None
        coefficients = _nonnegative_fit([s[0] for s in samples], [s[1] for s in samples],
                                        before.coefficients if before else None)
        results = [s[2] for s in samples]
        run[key][fmt] = RunModel(coefficients, max(set(results), key=results.count),
                                 len(samples))
    conversion_samples: dict[tuple[str, str], list[tuple[np.ndarray, float]]] = defaultdict(list)
    for record in records:
        terms = conversion_terms(record.features)
        for source_format, target, seconds in record.conversions:
            conversion_samples[(source_format, target)].append((terms, seconds))
    for (source_format, target), samples in conversion_samples.items():
        before_conversion = prior.conversion.get(source_format, {}).get(target) \
            if prior is not None else None
        conversion[source_format][target] = _nonnegative_fit(
            [s[0] for s in samples], [s[1] for s in samples], before_conversion)
    return CostModel(dict(run), dict(conversion), _meta(records, source, prior))


def _order(item: tuple[str, str]) -> tuple[str, int]:
    """Classes by name, formats in the candidates' order (dense, csr, csc, ...)."""
    from tensoralg.select.candidates import MATRIX_FORMATS, label

    labels = [label(f) for f in MATRIX_FORMATS]
    key, fmt = item
    return key, labels.index(fmt) if fmt in labels else len(labels)


def _nonnegative_fit(terms: Iterable[np.ndarray], seconds: Iterable[float],
                     prior: Sequence[float] | None) -> tuple[float, ...]:
    """Non-negative coefficients minimising the squared relative error of ``terms @ c``
    against ``seconds`` (plus ``PRIOR_WEIGHT`` times the squared distance to ``prior``, each
    coefficient measured by the largest share of a time it explains)."""
    from scipy.optimize import nnls

    times = np.asarray(list(seconds), dtype=np.float64)
    matrix = np.asarray(list(terms), dtype=np.float64) / times[:, None]
    scale = matrix.max(axis=0)
    scale[scale <= 0] = 1.0
    scaled = matrix / scale
    target = np.ones(len(times))
    if prior is not None:
        weight = np.sqrt(PRIOR_WEIGHT)
        scaled = np.vstack([scaled, weight * np.eye(len(scale))])
        target = np.concatenate([target, weight * np.asarray(prior) * scale])
    solution, _ = nnls(scaled, target, maxiter=50 * scaled.shape[1])
    return tuple(float(c) for c in solution / scale)


def _meta(records: Sequence[MatrixRecord], source: str, prior: CostModel | None) -> dict:
    from tensoralg.select.records import _cpu_model

    threads = sorted({e.threads for r in records for e in r.experiments})
    return {"tensoralg": ta.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "source": source or "ta.select.fit", "matrices": len(records),
            "families": sorted({r.family for r in records}),
            "cpu": _cpu_model(), "machine": platform.machine(),
            "threads": threads[0] if len(threads) == 1 else threads,
            "prior": dict(prior.meta).get("source", "") if prior is not None else ""}


def cross_validate(records: Sequence[MatrixRecord]) -> dict[str, tuple[float, float]]:
    """Per expression class, the median and 90th percentile of the relative error of
    predicted run times on each family when the model is fitted on the other families."""
    errors: dict[str, list[float]] = defaultdict(list)
    families = sorted({r.family for r in records})
    for family in families:
        training = [r for r in records if r.family != family]
        if not training:
            continue
        model = fit_model(training)
        for record in (r for r in records if r.family == family):
            for experiment in record.experiments:
                key = experiment.features.key
                if key not in model.run:
                    continue
                predicted = model.predict_run(key, record.features, experiment.features,
                                              experiment.threads)
                errors[key] += [abs(predicted[row.format] - row.fastest_s) / row.fastest_s
                                for row in experiment.rows if row.format in predicted]
    return {key: (float(np.median(values)), float(np.percentile(values, 90)))
            for key, values in sorted(errors.items())}
