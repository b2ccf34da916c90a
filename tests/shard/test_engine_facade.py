"""``Engine`` is a facade over composed parts: nothing is mixed into it, no module of the shard
imports it (each part declares the ``Protocol`` it needs of the runtime it is handed), and the
attributes callers read on it are its runtime's, one value each.

The import check reads the source (AST): imports under ``if TYPE_CHECKING:`` and inside
functions count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _structure import sibling_imports
from weft_actors import Engine, workflow

SHARD = Path(__file__).resolve().parents[2] / "weft_actors" / "shard"

pytestmark = pytest.mark.timeout(30)


@workflow
async def noop(ctx) -> None:
    return None


def test_nothing_is_mixed_into_the_engine() -> None:
    assert Engine.__bases__ == (object,)


def test_no_module_of_the_shard_imports_the_engine() -> None:
    importers = sorted(path.name for path in SHARD.glob("*.py") if path.name not in ("__init__.py", "_engine.py") and "_engine" in sibling_imports(path))
    assert importers == []


def test_an_engine_attribute_is_its_runtimes_one_value(tmp_path: Path) -> None:
    """A setting set on the engine (as a test or an operator's harness does) is the one its
    parts read, and what the engine shows is what they hold."""
    engine = Engine(str(tmp_path), app=[noop], retention=60.0)
    runtime = engine._host
    assert engine.retention == runtime.retention == 60.0
    engine.retention = 0.0
    assert runtime.retention == 0.0
    assert engine.actors is runtime.actors and engine.eviction is runtime.eviction
