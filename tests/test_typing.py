"""The public API type-checks from a user's point of view: a sample app (``typing_app.py``)
passes ``mypy --strict``, and the wheel ships ``py.typed`` (PEP 561), so a user's mypy reads
the package's hints instead of treating it as untyped."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@pytest.mark.timeout(180)
def test_a_user_app_passes_mypy_strict() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental", str(TESTS / "typing_app.py")],
        capture_output=True, text=True, timeout=170, cwd=TESTS, env={"MYPYPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(180)
def test_the_wheel_ships_py_typed(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, timeout=170,
    )
    (wheel,) = tmp_path.glob("weft_actors-*.whl")
    assert "weft_actors/py.typed" in zipfile.ZipFile(wheel).namelist()
