"""IR passes: pure functions ``Function -> Function``, run in order by ``pipeline.optimize``."""
from .dead_code import read_vars, remove_dead_code
from .hoist import hoist_invariants
from .pipeline import STEPS, IRLog, optimize
from .simplify import simplify
from .tile import TILE_BYTES, tile_accumulators
from .transpose import LINE_BYTES, tile_transposes
from .workspace import row_workspaces

__all__ = ["IRLog", "STEPS", "hoist_invariants", "optimize", "read_vars", "remove_dead_code",
           "simplify", "LINE_BYTES", "TILE_BYTES", "row_workspaces", "tile_accumulators",
           "tile_transposes"]
