"""``python -m weft_actors check`` is the store checker (``python -m weft_actors.check``), the
name a new user types first beside ``backup``, ``purge`` and ``replay``."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from weft_actors import Engine, workflow


@workflow
async def tiny(ctx) -> int:
    return 1


@pytest.mark.timeout(60)
def test_check_is_a_command_of_the_cli(tmp_path: Path) -> None:
    data = str(tmp_path / "data")

    async def populate() -> None:
        async with Engine(data, app=[tiny]) as engine:
            assert await (await engine.start(tiny, id="t-1")).result(timeout=10) == 1

    asyncio.run(populate())
    done = subprocess.run([sys.executable, "-m", "weft_actors", "check", "--data", data], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().endswith(f"0 problem(s) found in {data}"), done.stdout + done.stderr
    missing = subprocess.run([sys.executable, "-m", "weft_actors", "check", "--data", str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.startswith("error: storage_error: no weft_actors store"), missing.stderr
    listed = subprocess.run([sys.executable, "-m", "weft_actors", "--help"], capture_output=True, text=True, timeout=60)
    assert "    check " in listed.stdout
