"""The slow tier's list names files that exist, and the everyday tier still has tests from
every package of the suite (each directory but the whole-system runs: chaos, sim)."""

from __future__ import annotations

from pathlib import Path

from _tiers import SLOW_FILES

TESTS = Path(__file__).parent
WHOLE_SYSTEM = {"chaos", "sim"}
"""Directories of whole-system budget runs only: in the full suite alone."""


def test_every_slow_file_exists():
    assert sorted(name for name in SLOW_FILES if not (TESTS / name).is_file()) == []


def test_the_everyday_tier_covers_every_test_directory():
    directories = {path.parent for path in TESTS.rglob("test_*.py") if path.parent.name not in WHOLE_SYSTEM}
    quick = {path.parent for path in TESTS.rglob("test_*.py") if path.relative_to(TESTS).as_posix() not in SLOW_FILES}
    assert sorted(str(d.relative_to(TESTS)) for d in directories - quick) == []
