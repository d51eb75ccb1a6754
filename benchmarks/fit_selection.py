#!/usr/bin/env python
"""Fit the format-selection cost model that tensoralg ships (``tensoralg/select/model.json``).

    python benchmarks/fit_selection.py [--quick] [--repeats 5] [--out MODEL.json]
    python benchmarks/fit_selection.py --records results/fit_selection-....json   # refit only

Measures every matrix of ``selection_data.fit_set()`` (the training real matrices and the seven
generated families at five sizes, seed 0; never the held-out ones ``selection.py`` judges the
model on): its features, its conversions from each source format to each candidate, and
``ta.select.experiment`` of SpMV, transposed SpMV and SpMM (8, 16 or 32 columns, in turn) and
its transpose under every candidate format. The records go to
``results/fit_selection-<YYYYMMDD-HHMMSS>-<commit>.json`` (rewritten after each matrix, so an
interrupted run keeps what it measured); then the model is fitted (``ta.select.fit``) and
written. ``--records`` refits from such a file without measuring (the features are computed
again, by the current code, from the regenerated or reread matrices). It prints, per expression
class, the fit's leave-one-family-out error: how well the model predicts matrices of a family
it was not fitted on. Takes about 10 minutes on 2 cores (``--quick``: a few small matrices, for
a check of the script).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import record  # benchmarks/record.py, beside this file
import selection_data as data

import tensoralg as ta
from tensoralg.select.cost_model import SHIPPED_MODEL
from tensoralg.select.fit import cross_validate, fit_model
from tensoralg.select.training import MatrixRecord, measure_matrix


def measure(entries, seed: int, repeats: int, out: Path, begun: dict) -> list[MatrixRecord]:
    records: list[MatrixRecord] = []
    start = time.perf_counter()
    for k, (name, family, nnz) in enumerate(entries):
        matrix = data.load(name, family, nnz, seed)
        if matrix is None:
            print(f"{name}: not available here, skipped", flush=True)
            continue
        width = data.WIDTHS[k % len(data.WIDTHS)]
        t0 = time.perf_counter()
        records.append(measure_matrix(name, family, matrix, width=width, repeats=repeats,
                                      seed=seed))
        print(f"{name}: {matrix.shape[0]}x{matrix.shape[1]}, nnz {matrix.nnz}, width {width}: "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        record.write("fit_selection", payload(records, seed, repeats, start), begun, out)
    return records


def refreshed(records: list[MatrixRecord]) -> list[MatrixRecord]:
    """The records with each matrix's features computed again by the current code (cheap:
    the matrices are regenerated or read, never timed), so that a refit after a change to
    ``features.py`` sees the features ``choose`` will compute."""
    entries = {name: (family, nnz) for name, family, nnz in data.fit_set()}
    out = []
    for r in records:
        family, nnz = entries.get(r.name, (r.family, None))
        matrix = data.load(r.name, family, nnz, data.FIT_SEED)
        out.append(r if matrix is None else
                   dataclasses.replace(r, features=ta.select.matrix_features(matrix)))
    return out


def payload(records: list[MatrixRecord], seed: int, repeats: int, start: float) -> dict:
    return {"seed": seed, "repeats": repeats, "threads": ta.get_num_threads(),
            "elapsed_s": time.perf_counter() - start,
            "records": [r.to_dict() for r in records]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, help="refit from this records file")
    parser.add_argument("--quick", action="store_true", help="a few small matrices only")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per candidate")
    parser.add_argument("--out", type=Path, default=SHIPPED_MODEL,
                        help="where to write the model (default: the one tensoralg ships)")
    args = parser.parse_args(argv)
    if args.records is not None:
        document = json.loads(args.records.read_text())
        records = refreshed([MatrixRecord.from_dict(r) for r in document["records"]])
        source = args.records.name
    else:
        entries = data.fit_set()
        if args.quick:
            entries = [e for e in entries if e[2] is not None and e[2] <= 20_000][:6]
        begun = record.start()
        stamp = begun["date"].strftime("%Y%m%d-%H%M%S")
        out = record.RESULTS / record.file_name("fit_selection", stamp, begun["git"]["short"])
        print(f"{len(entries)} matrices; records in {out}", flush=True)
        records = measure(entries, data.FIT_SEED, args.repeats, out, begun)
        source = out.name
    model = fit_model(records, source=f"benchmarks/fit_selection.py from {source}")
    for key, error in cross_validate(records).items():
        print(f"{key:16s} leave-one-family-out error of the run-time model: median "
              f"{error[0]:.0%}, 90th percentile {error[1]:.0%}")
    model.save(args.out)
    print(f"wrote {args.out} ({len(records)} matrices)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
