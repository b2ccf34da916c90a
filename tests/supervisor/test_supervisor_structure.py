"""The shape of ``weft_actors/supervisor/``: no module over the line limit and no import circle.

Read from the source (AST), never by importing it. The supervisor holds its concerns as parts
(slots, the live-engine view, the socket directory, the store's counts) that never import it
back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _structure import sibling_imports

SUPERVISOR = Path(__file__).resolve().parents[2] / "weft_actors" / "supervisor"
MAX_LINES = 450

pytestmark = pytest.mark.timeout(10)


def test_no_supervisor_module_is_over_the_line_limit() -> None:
    long = {path.name: n for path in SUPERVISOR.glob("*.py") if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


def test_no_part_of_the_supervisor_imports_it_back() -> None:
    modules = {path.stem: path for path in SUPERVISOR.glob("*.py") if path.stem not in ("__init__", "__main__")}
    parts = sibling_imports(SUPERVISOR / "_supervisor.py") & modules.keys()
    assert {"_slot", "_live", "_ipc", "_counts"} <= parts
    back = {name for name, path in modules.items() if name != "_supervisor" and "_supervisor" in sibling_imports(path)}
    assert back == set()
