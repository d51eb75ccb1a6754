"""IR passes: pure functions ``Function -> Function``, run in order by ``pipeline.optimize``."""
from .dead_code import read_vars, remove_dead_code
from .hoist import hoist_invariants
from .pipeline import STEPS, IRLog, optimize
from .simplify import simplify

__all__ = ["IRLog", "STEPS", "hoist_invariants", "optimize", "read_vars", "remove_dead_code",
           "simplify"]
