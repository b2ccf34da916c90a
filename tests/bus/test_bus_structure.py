"""The shape of ``weft_actors/bus/``: small modules whose imports form a tree.

Read from the source (AST), never by importing it: the clients are two shells over one
request core, the front door's socket loop holds its routing and its replies as objects, and
no module of the package reaches back into one that imports it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _structure import sibling_imports

BUS = Path(__file__).resolve().parents[2] / "weft_actors" / "bus"
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    return {path.stem: path for path in sorted(BUS.glob("*.py"))}


@pytest.mark.timeout(10)
def test_no_bus_module_is_over_the_line_limit() -> None:
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


@pytest.mark.timeout(10)
def test_bus_imports_form_no_circle() -> None:
    modules = _modules()
    graph = {name: sibling_imports(path) & modules.keys() - {"__init__"} for name, path in modules.items() if name != "__init__"}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        assert name not in visiting, "import circle: " + " -> ".join([*visiting[visiting.index(name) :], name])
        visiting.append(name)
        for imported in sorted(graph[name]):
            visit(imported)
        visiting.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


@pytest.mark.timeout(10)
def test_the_clients_are_shells_over_one_request_core() -> None:
    """Neither client imports the other, nor the other's transport; both stand on the core."""
    sync, asynchronous = sibling_imports(BUS / "_client.py"), sibling_imports(BUS / "_async_client.py")
    assert "_request_core" in sync and "_request_core" in asynchronous
    assert not sync & {"_async_client", "_async_transport"}
    assert not asynchronous & {"_client", "_sync_transport"}
