"""A memo (or a result) holding a value of the app's own class beside plain fields: the memo
index written by the process that runs the app is the one ``check`` expects and ``purge``
deletes, and ``describe`` answers a client that never imported the class, though neither
imports the app (real LMDB, real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _processes import RunningSupervisor
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)

TESTS = Path(__file__).parent

START = """
import asyncio, sys
from weft_actors import Engine
import memo_type_app

async def main():
    async with Engine(store=sys.argv[1], app=memo_type_app) as engine:
        for wid, memo in (("typed-1", {"customer": "acme", "where": memo_type_app.Point(1, 2)}), ("plain-1", {"customer": "acme"})):
            await (await engine.start("quick", id=wid, memo=memo)).result(timeout=20)
        print(sorted(item["id"] for item in (await engine.list(memo={"customer": "acme"}))["items"]))

asyncio.run(main())
"""


def _run(*args: str, app: bool = False) -> subprocess.CompletedProcess[str]:
    path = [str(TESTS)] if app else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, env=env)


def test_check_and_purge_without_the_app_agree_with_the_index_the_app_wrote(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    started = _run("-c", START, data, app=True)
    assert started.returncode == 0 and started.stdout.strip() == "['plain-1', 'typed-1']", started.stderr[-2000:]
    checked = _run("-m", "weft_actors.check", "--data", data)
    assert checked.returncode == 0 and "0 problem(s)" in checked.stdout, checked.stdout + checked.stderr
    purged = _run("-m", "weft_actors", "purge", "--id", "typed-1", "--data", data, "--yes")
    assert purged.returncode == 0, purged.stderr
    checked = _run("-m", "weft_actors.check", "--data", data)
    assert checked.returncode == 0 and "0 problem(s)" in checked.stdout, checked.stdout + checked.stderr


STARTS = """
import sys
from weft_actors import Client
import memo_type_app

with Client(sys.argv[1], timeout=20) as client:
    client.start("located", id="typed-2", memo={"customer": "acme", "where": memo_type_app.Point(1, 2)}).result(timeout=20)
"""


def test_describe_answers_a_client_that_does_not_know_the_memo_or_result_type(tmp_path: Path) -> None:
    with RunningSupervisor(tmp_path / "data", shards=1, app="memo_type_app") as sup, Client(sup.endpoint, timeout=20) as client:
        started = _run("-c", STARTS, sup.endpoint, app=True)
        assert started.returncode == 0, started.stderr[-2000:]
        described = client.get_handle("typed-2").describe()  # this process never registered Point
        assert described["status"] == "completed" and described["type"] == "located"
        assert described["memo"] is None and "memo_type_app.Point" in described["memo_error"]
        assert described["result"] is None and "memo_type_app.Point" in described["result_error"]
        shown = _run("-m", "weft_actors", "describe", "typed-2", "--endpoint", sup.endpoint, "--json")
        assert shown.returncode == 0 and '"memo_error"' in shown.stdout, shown.stderr
