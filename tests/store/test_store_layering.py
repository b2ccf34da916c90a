"""The shape of ``weft_actors/store``: no import circle, no long file, and appliers that reach
each other only through the one table.

Imports are read from the source (AST), including those inside functions and under
``if TYPE_CHECKING:``: a late import still ties two files together for a reader, it only
hides the circle from the interpreter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import weft_actors.store
from _structure import circles
from weft_actors.store._dispatch import APPLIER_OF

pytestmark = pytest.mark.timeout(30)

PACKAGE = Path(weft_actors.store.__file__).parent
ROOT = PACKAGE.parent.parent
MAX_LINES = 450

# The whole store, the PostgreSQL backend included.
OUTSIDE: tuple[str, ...] = ()
INSIDE_PG: tuple[str, ...] = ()


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str) -> set[str]:
    """Every module name ``path`` imports, anywhere in the file (relative imports resolved)."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                stem = base[: len(base) - node.level + 1]
                prefix = ".".join(stem + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    return {
        name: {t for t in _imports(path, name) if t in files and t != name and not name.startswith(t + ".")}
        for name, path in files.items()
    }


def _ours(module: str) -> bool:
    return module in INSIDE_PG or not module.startswith(OUTSIDE)


def test_no_import_circle_in_the_store() -> None:
    graph = _graph()
    found = [c for c in circles(graph) if any(_ours(m) for m in c)]
    assert found == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above can fail: a two-module circle and a three-module one are both found."""
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "x": {"y"}, "y": {"z"}, "z": {"x"}}
    assert sorted(circles(graph)) == [["a", "b"], ["x", "y", "z"]]


def test_no_store_file_over_450_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_appliers_never_import_each_other() -> None:
    """The modules whose functions apply intents (every module the dispatch table names) reach
    each other through the table only; what they share sits below them."""
    appliers = {fn.__module__ for fn in APPLIER_OF.values()}
    assert len(appliers) >= 5  # the table really names the applier modules
    graph = _graph()
    crossings = {module: sorted(graph[module] & (appliers - {module})) for module in sorted(appliers)}
    assert {m: c for m, c in crossings.items() if c} == {}


def test_both_backends_apply_through_the_one_table() -> None:
    from weft_actors.store import _store
    from weft_actors.store._pg import _store as pg_store

    assert _store.APPLIER_OF is APPLIER_OF
    assert pg_store.APPLIER_OF is APPLIER_OF
