"""The profile of one run: time per node, sorted, with its share of the total."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ProfileRow:
    node: str
    op_type: str
    seconds: float
    percent: float
    plan: str


@dataclass(frozen=True, slots=True)
class Profile:
    """Rows sorted by time, slowest first; ``str()`` gives the table."""

    rows: tuple[ProfileRow, ...]
    total: float

    @staticmethod
    def from_times(times: list[tuple[str, str, float, str]]) -> "Profile":
        total = sum(t for _, _, t, _ in times)
        rows = tuple(sorted((ProfileRow(n, op, t, 100.0 * t / total if total else 0.0, plan)
                             for n, op, t, plan in times), key=lambda r: -r.seconds))
        return Profile(rows, total)

    def __str__(self) -> str:
        width = max([4] + [len(r.node) for r in self.rows])
        ops = max([2] + [len(r.op_type) for r in self.rows])
        lines = [f"{'node':<{width}}  {'op':<{ops}}  {'time (ms)':>10}  {'%':>6}  plan"]
        for r in self.rows:
            lines.append(f"{r.node:<{width}}  {r.op_type:<{ops}}  {r.seconds * 1e3:>10.3f}  "
                         f"{r.percent:>6.1f}  {r.plan}")
        lines.append(f"{'total':<{width}}  {'':<{ops}}  {self.total * 1e3:>10.3f}  {100.0:>6.1f}")
        return "\n".join(lines)
