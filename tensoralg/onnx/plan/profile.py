"""The profile of one run: time per node, sorted, with its share of the total."""
from __future__ import annotations

from dataclasses import dataclass

from tensoralg.onnx.plan.memory import MemoryStats


@dataclass(frozen=True, slots=True)
class ProfileRow:
    node: str
    op_type: str
    seconds: float
    percent: float
    plan: str


@dataclass(frozen=True, slots=True)
class Profile:
    """Rows sorted by time, slowest first, and the memory of one run; ``str()`` gives the
    table. ``peak_bytes`` (alive at once) and ``total_bytes`` (sum of every buffer a node
    produced) come from :class:`~tensoralg.onnx.plan.memory.MemoryTrace`; ``planned_bytes`` is the
    arena total of the lifetime reuse plan (held by the static plan at level 3)."""

    rows: tuple[ProfileRow, ...]
    total: float
    memory: MemoryStats | None = None
    notes: tuple[str, ...] = ()          # printed under the table

    @property
    def peak_bytes(self) -> int:
        return self.memory.peak if self.memory else 0

    @property
    def total_bytes(self) -> int:
        return self.memory.total if self.memory else 0

    @property
    def planned_bytes(self) -> int:
        return self.memory.planned if self.memory else 0

    @staticmethod
    def from_times(times: list[tuple[str, str, float, str]],
                   memory: MemoryStats | None = None, notes: tuple[str, ...] = ()
                   ) -> "Profile":
        total = sum(t for _, _, t, _ in times)
        rows = tuple(sorted((ProfileRow(n, op, t, 100.0 * t / total if total else 0.0, plan)
                             for n, op, t, plan in times), key=lambda r: -r.seconds))
        return Profile(rows, total, memory, notes)

    def __str__(self) -> str:
        width = max([4] + [len(r.node) for r in self.rows])
        ops = max([2] + [len(r.op_type) for r in self.rows])
        lines = [f"{'node':<{width}}  {'op':<{ops}}  {'time (ms)':>10}  {'%':>6}  plan"]
        for r in self.rows:
            lines.append(f"{r.node:<{width}}  {r.op_type:<{ops}}  {r.seconds * 1e3:>10.3f}  "
                         f"{r.percent:>6.1f}  {r.plan}")
        lines.append(f"{'total':<{width}}  {'':<{ops}}  {self.total * 1e3:>10.3f}  {100.0:>6.1f}")
        if self.memory is not None:
            lines.append(str(self.memory))
        lines.extend(self.notes)
        return "\n".join(lines)
