"""Runtime: packs tensors into a kernel's ABI, validates foreign storage, wraps outputs.

Imports errors, formats, ir (to read the ABI) and codegen.
"""
