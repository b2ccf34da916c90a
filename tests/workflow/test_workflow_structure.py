"""The shape of ``weft_actors/workflow/``: no import circle and no long file.

Read from the source (AST), never by importing it. Imports under ``if TYPE_CHECKING:`` and
inside functions count: a late import still ties two files together for a reader. The context
knows its run by a small protocol, so the driver that builds it is the only one importing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _structure import sibling_imports

WORKFLOW = Path(__file__).resolve().parents[2] / "weft_actors" / "workflow"
MAX_LINES = 450

pytestmark = pytest.mark.timeout(10)


def _graph() -> dict[str, set[str]]:
    modules = {path.stem: path for path in sorted(WORKFLOW.glob("*.py")) if path.stem != "__init__"}
    return {name: sibling_imports(path) & modules.keys() - {name} for name, path in modules.items()}


def _first_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (depth first), as the path that closes it, or None."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> list[str] | None:
        if name in done:
            return None
        if name in visiting:
            return [*visiting[visiting.index(name) :], name]
        visiting.append(name)
        for imported in sorted(graph[name]):
            circle = visit(imported)
            if circle is not None:
                return circle
        visiting.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        circle = visit(name)
        if circle is not None:
            return circle
    return None


def test_workflow_imports_form_no_circle() -> None:
    graph = _graph()
    assert "_context" in graph["_driver"]  # the driver builds the context: the one direction
    assert _first_circle(graph) is None


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above can fail: a circle through a TYPE_CHECKING-style back edge is found."""
    assert _first_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _first_circle({"a": {"b"}, "b": set()}) is None


def test_no_workflow_module_is_over_the_line_limit() -> None:
    long = {path.name: n for path in WORKFLOW.glob("*.py") if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"
