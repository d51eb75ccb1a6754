"""Which of three kernels a CSR row loop with the adaptive tail runs (``vectorize(j, 8,
tail=adaptive)``; lowering's ``scheduling.row_choice``, which the compiler gives SpMV-like
kernels itself).

A loop over a row's few stored entries ends in a scalar loop whose exit branch mispredicts
whenever a row's length differs from the row before; vectorized with its tail masked, a row
of up to 8 entries runs as one masked vector instead, which costs more than a scalar loop the
branch predictor has learnt. So the kernel that keeps the scalar remainder runs a matrix whose
consecutive rows mostly repeat their lengths, and its variant with the tail masked one where at
least ``ADAPTIVE_CHANGES`` of them differ. Measured on one thread, SpMV, development VM
(2026-12-06, ``python benchmarks/row_loops.py``; masked / remainder time): on graphs and
power-law rows (share 0.61-0.98: ca-GrQc, wiki-Vote, ego-Facebook, R-MAT, rows of 5 below a
dense row, a 1e6 x 64 matrix of ~3 a row) 0.39-0.84; on regular ones (share 0.00-0.36:
luxembourg_osm, bcspwr10, cryg2500, bayer10, an arrow, a diagonal, a band) 1.0-2.4; between,
within ~20% either way (adder_dcop_05, 0.77, and rajat01, 0.67, lose 7-19%). Against the plain
kernel everywhere (``python benchmarks/row_loops.py --choice``: an A/B in one process, SpMV,
geometric means of tensoralg / scipy, 2026-12-06): the 16 real
matrices 0.871 -> 0.815 on one thread and 0.649 -> 0.639 on two (a split call of a few tens of
µs gains little from faster rows); with the two generated 2e4 matrices and the 13 structures of
``benchmarks/zoo.py``, 0.890 -> 0.780 on one thread and 0.580 -> 0.528 on two (cryg2500 1.40 ->
0.97, a 2-D Laplacian 0.72 -> 0.48, wiki-Vote 0.57 -> 0.44, two threads); a matrix of under
CHOICE_MIN_VALUES stored values keeps the plain kernel (below).

Whether a variant pays is also the host's: on an AMD EPYC the masked tail ran 1.2-2.4x the
plain loop's time on those same power-law matrices (a gathered vector in L1 or L2; it won
again from 2^15 rows) and the unrolled loop 0.98-1.2x, so ``api.row_variant_pays`` measures
each variant against the plain kernel once per process and size class of the rows, and a
matrix whose rows ask for a variant keeps the plain kernel where it does not pay (SpMV, two
threads, tensoralg / scipy on that host: ca-GrQc 1.58 -> 1.09, rajat01 1.27 -> 0.82,
adder_dcop_05 1.64 -> 1.11; ad hoc, 2026-12-06).

The share is computed once per ``pos`` array, by NumPy, over at most ``ROW_BLOCKS`` blocks of
``ROW_BLOCK_PAIRS`` consecutive rows spread over the matrix (every row of a matrix of up to
16385 rows; ~30 µs for larger ones), and remembered while that array lives, so a choice is a
function of the matrix alone: every call, thread count and range run the same kernel on it
(once built: a variant is compiled at the second call that asks for it, so that a one-off call
costs no second compile; ``api._row_kernel``).
"""
from __future__ import annotations

import numpy as np

from tensoralg.runtime.args import ArrayMemo

ADAPTIVE_CHANGES = 0.6
ROW_BLOCKS, ROW_BLOCK_PAIRS = 32, 512
# Mean entries a row where rows that mostly repeat their lengths take the loop unrolled four
# times: below 8 LLVM's vectorized loop never runs and its scalar remainder takes one entry an
# iteration. One thread, SpMV, unrolled / plain time: 0.64-0.88 at 4-5 entries a row
# (cryg2500, a 2-D Laplacian, bcspwr10), 0.97-1.06 at 7 (a band, bayer10) (`python
# benchmarks/row_loops.py --choice`, 2026-12-06); 1.04-1.05 at 1-3 (luxembourg_osm, an arrow, a
# diagonal) and 0.98-1.07 from 9 up with unroll(j, 4) given as a schedule (ad hoc, same day).
UNROLLED_ROWS = (4.0, 8.0)
UNROLL = 4
# Below this many stored values the plain kernel runs whatever the rows: the loop can gain at
# most a few hundred ns there, under a call's fixed costs, while a variant costs its first call
# a compile (a 30 x 30 SpMV of 86 values ran in 1.13x scipy's time plain, 1.30-1.42x masked,
# two threads, 2026-12-06).
CHOICE_MIN_VALUES = 8192


def changing_share(pos: np.ndarray) -> float:
    """The share of (sampled) consecutive rows whose lengths differ, for a compressed level's
    ``pos`` array (one entry more than rows); 0 for fewer than two rows.

    >>> changing_share(np.array([0, 2, 4, 5, 6, 8]))      # lengths 2, 2, 1, 1, 2
    0.5
    """
    rows = pos.shape[0] - 1
    pairs = rows - 1
    if pairs <= 0:
        return 0.0
    if pairs <= ROW_BLOCKS * ROW_BLOCK_PAIRS:
        lengths = np.diff(pos)
        return float(np.count_nonzero(lengths[1:] != lengths[:-1])) / pairs
    starts = np.linspace(0, rows - ROW_BLOCK_PAIRS - 1, ROW_BLOCKS).astype(np.int64)
    window = pos[starts[:, None] + np.arange(ROW_BLOCK_PAIRS + 2)]
    lengths = np.diff(window, axis=1)
    changed = np.count_nonzero(lengths[:, 1:] != lengths[:, :-1])
    return float(changed) / (ROW_BLOCKS * ROW_BLOCK_PAIRS)


MASKED, UNROLLED, PLAIN = "masked", "unrolled", ""


def row_loop_kind(pos: np.ndarray) -> str:
    """Which kernel the rows of the compressed level with this ``pos`` array take: ``MASKED``
    where at least ``ADAPTIVE_CHANGES`` of consecutive rows differ in length; else
    ``UNROLLED`` where rows hold ``UNROLLED_ROWS`` entries on average (a scalar loop LLVM
    leaves one entry an iteration, unrolled four times); else, or below ``CHOICE_MIN_VALUES``
    stored values, ``PLAIN``.

    >>> regular = np.arange(0, 50_000, 5)
    >>> irregular = np.cumsum(np.tile([0, 1, 2], 4000))
    >>> row_loop_kind(regular), row_loop_kind(irregular), row_loop_kind(regular[:100])
    ('unrolled', 'masked', '')
    """
    rows, stored = pos.shape[0] - 1, int(pos[-1]) - int(pos[0])
    if rows < 1 or stored < CHOICE_MIN_VALUES:
        return PLAIN
    if changing_share(pos) >= ADAPTIVE_CHANGES:
        return MASKED
    return UNROLLED if UNROLLED_ROWS[0] <= stored / rows < UNROLLED_ROWS[1] else PLAIN


# The kind of this ``pos`` array's rows, while it lives.
row_kernel_kind = ArrayMemo(row_loop_kind)

__all__ = ["ADAPTIVE_CHANGES", "CHOICE_MIN_VALUES", "MASKED", "PLAIN", "ROW_BLOCKS", "ROW_BLOCK_PAIRS", "UNROLL",
           "UNROLLED", "UNROLLED_ROWS", "changing_share", "row_kernel_kind", "row_loop_kind"]
