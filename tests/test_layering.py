"""Imports only point down the room table of DESIGN.md (parsed with ast, never imported)."""
from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "tensoralg"
LEAVES = {"errors", "_version"}   # every room may import these

# room -> rooms it may import (besides itself and LEAVES)
ALLOWED = {
    "errors": set(),
    "_version": set(),
    "notation": set(),
    "ir": set(),
    "formats": {"notation"},
    "schedule": {"notation"},
    "lower": {"notation", "ir", "formats", "schedule"},
    "codegen": {"ir"},
    "runtime": {"ir", "formats", "codegen"},
    "gpu": {"ir", "formats", "schedule", "lower", "codegen"},   # the cuda backend's runtime
    "data": {"formats"},
    # contraction paths: a plan over einsum's operands, read through notation only
    "contract_path": {"notation"},
    "api": {"notation", "ir", "formats", "schedule", "lower", "codegen", "runtime", "gpu",
            "contract_path"},
    "tune": {"notation", "schedule", "api"},   # autotuning sits beside api.py, on top of it
    "arrays": {"formats", "api", "gpu"},              # ta.Tensor's operators, on top of api.py
    "program": {"api"},        # the calls and call sequences front ends build plans from
}
PUBLIC_API_ROOMS = {"onnx", "select", "dask", "cli", "__main__", "demo"}  # the public API only
PUBLIC_API = {"__init__", "api", "data", "gpu", "program"}  # what those rooms may import (data:
# bundled files; gpu: the documented device API, tensoralg.gpu.to_device and friends)


def room_of(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def imported_rooms(path: pathlib.Path) -> list[tuple[int, str, str]]:
    """(line, module text, room) for each tensoralg import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package_parts = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)]
                module = ".".join(base + ((node.module,) if node.module else ()))
                names = [module] if node.module else [f"{module}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
                if node.module == "tensoralg":
                    names = [f"tensoralg.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "tensoralg":
                continue
            room = parts[1] if len(parts) > 1 else "__init__"
            found.append((node.lineno, name, room))
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "test" not in p.name)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path):
    room = room_of(path)
    if room == "__init__":
        return  # the package's public names
    bad = []
    for line, name, target in imported_rooms(path):
        target = target.removesuffix(".py")
        if target == room or target in LEAVES:
            continue
        if room in PUBLIC_API_ROOMS:
            if target not in PUBLIC_API and target not in PUBLIC_API_ROOMS:
                bad.append(f"line {line}: {name} (the {room} room may use the public API only)")
            continue
        if room not in ALLOWED:
            bad.append(f"line {line}: {name} (room {room!r} is not in DESIGN.md's table)")
            continue
        if target not in ALLOWED[room]:
            bad.append(f"line {line}: {name} ({room} may import {sorted(ALLOWED[room])})")
    assert not bad, f"{path.relative_to(PACKAGE)} imports upward:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_api_and_convert_know_scipy(path):
    rel = path.relative_to(PACKAGE).as_posix()
    if rel in ("api.py", "formats/convert.py") or room_of(path) in PUBLIC_API_ROOMS | {"data"}:
        return
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        mods = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            mods = [node.module or ""]
        for m in mods:
            assert m.split(".")[0] not in ("scipy", "sparse"), f"{rel}:{node.lineno} imports {m}"


def test_the_table_covers_every_room():
    rooms = {room_of(p) for p in MODULES} - {"__init__"}
    unknown = rooms - set(ALLOWED) - PUBLIC_API_ROOMS
    assert not unknown, f"rooms missing from the layering table: {unknown}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "onnx").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_importer_reaches_the_core_through_the_program_api(path: pathlib.Path):
    """The ONNX importer uses ``tensoralg`` and ``tensoralg.program``, not ``api.py``'s
    internals (``ta.api.X`` or ``from tensoralg.api import``)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    imported = [node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "tensoralg.api"]
    attributes = [node.lineno for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr == "api"
                  and isinstance(node.value, ast.Name) and node.value.id == "ta"]
    assert not imported and not attributes, \
        f"{path.name}: reaches tensoralg.api directly (lines {attributes}); use tensoralg.program"
