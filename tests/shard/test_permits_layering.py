"""The permit gate sits below the activity runner: ``_activities`` imports ``_permits``, never
the other way, and the gate knows a waiting attempt and the runner's start only by what it is
handed (a ``Waiter`` protocol and a function).

Read from the source (AST): imports under ``if TYPE_CHECKING:`` and inside functions count, a
late import still ties the two files together for a reader.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _structure import sibling_imports

SHARD = Path(__file__).resolve().parents[2] / "weft_actors" / "shard"

pytestmark = pytest.mark.timeout(10)


def test_the_runner_imports_the_gate_and_not_the_reverse() -> None:
    assert "_permits" in sibling_imports(SHARD / "_activities.py")
    assert "_activities" not in sibling_imports(SHARD / "_permits.py")


def test_the_import_reader_sees_type_checking_imports(tmp_path: Path) -> None:
    """The check above can fail: an import under ``if TYPE_CHECKING:`` is an edge too."""
    probe = tmp_path / "_probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._activities import ActivityRunner\n")
    assert sibling_imports(probe) == {"_activities"}
