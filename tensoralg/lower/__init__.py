"""Lowering: statement + formats → concrete loop nests (``concretize``) → ``ir.Function`` (``lower``).

Imports errors, notation, formats, ir (and schedule, once scheduling exists).
"""
from tensoralg.lower.concretize import concretize
from tensoralg.lower.lattice import Lattice, LatticePoint, build_lattice, lattice_for
from tensoralg.lower.lowerer import lower
from tensoralg.lower.program import LoopNest, OutputMode, Program, TensorInfo, TensorRole

__all__ = ["concretize", "lower", "Lattice", "LatticePoint", "build_lattice", "lattice_for",
           "LoopNest", "OutputMode", "Program", "TensorInfo", "TensorRole"]
