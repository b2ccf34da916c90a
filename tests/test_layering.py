"""The layers of the whole package: each room (a subpackage, or a top-level module) imports
only rooms of lower layers, never one beside it or above it, no modules import each other in a
circle, and no file grows past the line limit.

Read from the source (AST), never by importing it: imports under ``if TYPE_CHECKING:`` and
inside functions count, since a late import still ties two files together for a reader (it
only hides the circle from the interpreter). ``docs/architecture.md`` draws the same list.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _structure import circles, module_imports

PACKAGE = Path(__file__).resolve().parents[1] / "weft_actors"
TOP = PACKAGE.name

pytestmark = pytest.mark.timeout(30)

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors"}),  # the error codes every room raises
    frozenset({"codec", "history", "_checks", "_clock", "_isotime", "_ratelimit", "_placement", "_cli_json", "_cli_output", "_cli_errors", "_cli_start", "_endpoint_text", "_cli_memo", "_cli_stack", "_tracing"}),
    frozenset({"_schedule_spec"}),
    frozenset({"_schedule_checks"}),
    frozenset({"workflow", "_schedule_handle"}),  # workflow: the deterministic core, no I/O
    frozenset({"store", "bus", "_replay"}),  # durable state; ZeroMQ clients and the front door: strangers
    frozenset({"shard", "console"}),  # the engine on the store; the web console over a client
    frozenset({"supervisor"}),  # shard processes, the front door, the console
    frozenset({TOP, "admin", "check", "_cli_schedule", "_cli_shards"}),  # the package's door (its __init__); operator tools
    frozenset({"cli", "testing", "examples"}),
    frozenset({"__main__", "pytest_plugin"}),
)
"""Lowest first. A room may import the rooms of every layer below its own, and none of its
own layer but itself: rooms of one layer know nothing of each other."""


def room(module: str) -> str:
    """The room of a dotted module name: its subpackage or top-level module under the package
    (the package's ``__init__`` is a room of its own, named like the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(layers: tuple[frozenset[str], ...]) -> dict[str, int]:
    return {name: level for level, rooms in enumerate(layers) for name in rooms}


def crossings(graph: dict[str, set[str]], layers: tuple[frozenset[str], ...]) -> list[str]:
    """Each import of ``graph`` from one room into another that is not in a lower layer, as
    ``"importer -> imported"``."""
    level = layer_of(layers)
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            here, there = room(module), room(target)
            if here != there and level[there] >= level[here]:
                found.append(f"{module} -> {target}")
    return found


def test_every_room_has_a_layer() -> None:
    rooms = {room(module) for module in module_imports(PACKAGE)}
    declared = layer_of(LAYERS)
    assert sum(len(rooms) for rooms in LAYERS) == len(declared), "a room is declared twice"
    assert sorted(rooms - declared.keys()) == [], "place each new room in LAYERS (and in docs/architecture.md)"
    assert sorted(declared.keys() - rooms) == [], "a declared room no longer exists"


def test_no_room_imports_one_beside_or_above_it() -> None:
    assert crossings(module_imports(PACKAGE), LAYERS) == []


def test_no_import_circle_among_the_modules() -> None:
    assert circles(module_imports(PACKAGE)) == []


MAX_LINES = 450
LONG_FOR_NOW: set[str] = set()
"""Files still over ``MAX_LINES``, each to be split by concern; none may join them."""


def test_no_file_over_the_line_limit() -> None:
    long = {str(path.relative_to(PACKAGE)): n for path in sorted(PACKAGE.rglob("*.py")) if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert sorted(long.keys() - LONG_FOR_NOW) == [], f"files over {MAX_LINES} lines: {long}"


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A circle tied only by a ``TYPE_CHECKING`` import is found, and so are an import of a
    higher room and one of a room in the same layer (a late one, inside a function)."""
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from ._a import A\n")
    (package / "low" / "_a.py").write_text("from ._b import B\nA = B\n")
    (package / "low" / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._a import A\nB = 1\n"
        "def late():\n    from ..high import H\n    from .. import side\n"
    )
    (package / "high.py").write_text("H = 1\n")
    (package / "side.py").write_text("")
    graph = module_imports(package)
    assert graph["pkg.low._b"] == {"pkg.low._a", "pkg.high", "pkg.side"}
    assert circles(graph) == [["pkg.low._a", "pkg.low._b"]]
    layers = (frozenset({"low", "side"}), frozenset({"high"}))
    assert crossings(graph, layers) == ["pkg.low._b -> pkg.high", "pkg.low._b -> pkg.side"]
