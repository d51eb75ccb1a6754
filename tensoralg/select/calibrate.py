"""``calibrate``: refit the cost model on this machine and keep it in the cache directory.

The shipped model was measured on one machine; kernels, conversions and caches run at other
speeds elsewhere. ``calibrate`` measures small generated matrices of every family here (the
training expressions under every candidate format, as ``benchmarks/fit_selection.py`` does),
until its time budget runs out, and refits the model with the shipped one as a prior: the new
measurements move each coefficient where they have evidence. The model goes to
``select-model.json`` in the kernel cache's directory (``$TENSORALG_CACHE_DIR``, else
``~/.cache/tensoralg``), which ``choose`` then prefers.
"""
from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import tensoralg as ta
from tensoralg.select.cost_model import (
    CALIBRATED_NAME,
    CostModel,
    _shipped,
    calibrated_path,
)
from tensoralg.select.families import FAMILIES, generate
from tensoralg.select.fit import fit_model
from tensoralg.select.training import MatrixRecord, measure_matrix

CALIBRATION_SIZES = (2_000, 10_000, 50_000)     # entries: small, so that a minute covers many
WIDTH = 16


@dataclass(frozen=True)
class Calibration:
    """What ``calibrate`` did: the model, where it was stored (None: not stored), how many
    matrices it measured and how long it took."""

    model: CostModel
    path: Path | None
    matrices: int
    seconds: float

    def __str__(self) -> str:
        where = f"stored in {self.path}" if self.path is not None else "not stored"
        return (f"calibrated on {self.matrices} generated matrices in {self.seconds:.0f} s; "
                f"{where}")


def calibrate(progress: bool = True, budget_s: float = 120.0, seed: int = 0, *,
              directory: str | os.PathLike | None = None) -> Calibration:
    """Measure generated matrices for about ``budget_s`` seconds, refit the cost model, and
    store it in the cache directory (or ``directory``), where ``choose`` finds it.

    At least one matrix is measured whatever the budget; the families are taken in turn,
    smallest first, so a short budget still sees every family once. ``seed`` draws the
    matrices. ``progress`` shows a tqdm bar on stderr.

    >>> import tensoralg as ta
    >>> result = ta.select.calibrate(budget_s=60)          # doctest: +SKIP
    >>> print(result)                                      # doctest: +SKIP
    calibrated on 14 generated matrices in 61 s; stored in /home/me/.cache/tensoralg/select-model.json
    """
    if not isinstance(budget_s, (int, float)) or isinstance(budget_s, bool) or budget_s < 0:
        raise ta.InputError(f"calibrate: budget_s must be a number of seconds, not "
                            f"{budget_s!r}")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ta.InputError(f"calibrate: seed must be a non-negative integer, not {seed!r}")
    start = time.perf_counter()
    plan = [(family, nnz) for nnz in CALIBRATION_SIZES for family in FAMILIES]
    records: list[MatrixRecord] = []
    bar = _bar(len(plan)) if progress else None
    try:
        for family, nnz in plan:
            elapsed = time.perf_counter() - start
            # stop before a matrix that would likely overrun the budget (one always runs)
            if records and elapsed + elapsed / len(records) > budget_s:
                break
            matrix = generate(family, nnz, seed)
            records.append(measure_matrix(f"{family}-{nnz}", family, matrix, width=WIDTH,
                                          repeats=3, seed=seed))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    model = fit_model(records, prior=_shipped(), source=f"ta.select.calibrate(seed={seed})")
    path = Path(directory) / CALIBRATED_NAME if directory is not None else calibrated_path()
    if path is None:
        warnings.warn("the on-disk cache is off (TENSORALG_DISK_CACHE=0): the calibrated "
                      "model is returned but not stored; pass directory= to keep it",
                      stacklevel=2)
    else:
        model.save(path)
    return Calibration(model, path, len(records), time.perf_counter() - start)


def _bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="calibrate", unit="matrix", file=sys.stderr, leave=False)
