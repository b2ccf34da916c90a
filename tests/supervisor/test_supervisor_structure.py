"""The shape of ``weft_actors/supervisor/``: no module over the line limit and no import circle.

Read from the source (AST), never by importing it. The supervisor holds its concerns as parts
(slots, the live-engine view, the socket directory, the store's counts) that never import it
back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SUPERVISOR = Path(__file__).resolve().parents[2] / "weft_actors" / "supervisor"
MAX_LINES = 450

pytestmark = pytest.mark.timeout(10)


def _sibling_imports(path: Path) -> set[str]:
    """The sibling modules ``path`` imports (``from . import _x``, ``from ._x import y``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
    return found


def test_no_supervisor_module_is_over_the_line_limit() -> None:
    long = {path.name: n for path in SUPERVISOR.glob("*.py") if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


def test_no_part_of_the_supervisor_imports_it_back() -> None:
    modules = {path.stem: path for path in SUPERVISOR.glob("*.py") if path.stem not in ("__init__", "__main__")}
    parts = _sibling_imports(SUPERVISOR / "_supervisor.py") & modules.keys()
    assert {"_slot", "_live", "_ipc", "_counts"} <= parts
    back = {name for name, path in modules.items() if name != "_supervisor" and "_supervisor" in _sibling_imports(path)}
    assert back == set()
