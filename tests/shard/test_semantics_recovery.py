"""Every semantics feature resumed after kill -9 mid-run gives the result of an uninterrupted run.

One child process (``semantics_app.py``) starts a workflow per feature family, drives each into
the middle of an op (an update applied and a condition passed, a race in flight with a signal
buffered, a child mid-activity, a continued run with a signal carried over, a cleanup activity
after a cancel, a patched branch) and is killed with SIGKILL. A new engine on the same directory
finishes them all; the same calls on a fresh directory without a crash give the reference results.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from weft_actors import Engine
from weft_actors.store import check_store

pytestmark = pytest.mark.timeout(60)

HERE = Path(__file__).parent


def _load_app() -> Any:
    spec = importlib.util.spec_from_file_location("semantics_app", HERE / "semantics_app.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class Runs:
    def __init__(self, recovered: dict[str, Any], reference: dict[str, Any], log: list[str], data: Path) -> None:
        self.recovered = recovered
        self.reference = reference
        self.log = log
        self.data = data

    def count(self, line: str) -> int:
        return self.log.count(line)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("semantics")
    log = base / "crashed.log"
    env = {**os.environ, "WEFT_TEST_LOG": str(log), "WEFT_CRASH_BLOCK": "1"}
    child = subprocess.Popen([sys.executable, str(HERE / "semantics_app.py"), str(base / "data")], env=env)
    app = _load_app()
    try:
        deadline = time.monotonic() + 30
        while not (set(app.BLOCKED) | {"ready"}) <= set(_lines(log)):
            assert child.poll() is None, "child engine died early"
            assert time.monotonic() < deadline, f"child never got ready: {_lines(log)}"
            time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)

    saved = {key: os.environ.get(key) for key in ("WEFT_TEST_LOG", "WEFT_CRASH_BLOCK")}
    os.environ.pop("WEFT_CRASH_BLOCK", None)
    try:
        os.environ["WEFT_TEST_LOG"] = str(log)

        async def recover() -> dict[str, Any]:
            async with Engine(str(base / "data"), app=app.APP) as engine:
                return await app.after_crash(engine)

        recovered = asyncio.run(recover())
        crashed_log = _lines(log)
        os.environ["WEFT_TEST_LOG"] = str(base / "reference.log")

        async def uninterrupted() -> dict[str, Any]:
            async with Engine(str(base / "reference"), app=app.APP) as engine:
                await app.before_crash(engine)
                return await app.after_crash(engine)

        reference = asyncio.run(uninterrupted())
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return Runs(recovered, reference, crashed_log, base / "data")


def test_updates_and_conditions_resume_and_a_retried_request_is_answered_once(runs: Runs) -> None:
    assert runs.recovered["upd"] == runs.reference["upd"] == {"items": ["a", "b"], "middle": "upd"}
    assert runs.recovered["retried update"] == 2  # answered from the record, the handler not re-run
    assert runs.count("start upd") == 2  # in flight at the kill: run again


def test_a_race_in_flight_resumes_and_the_buffered_signal_is_still_there(runs: Runs) -> None:
    assert runs.recovered["race"] == runs.reference["race"] == [(1, "go!"), [42, "more!"]]
    assert runs.count("done race") == 0  # the losing activity was cancelled after the restart too


def test_a_parent_waiting_on_a_child_mid_activity_completes(runs: Runs) -> None:
    assert runs.recovered["parent"] == runs.reference["parent"] == ["kid!", "kid-2!"]
    assert runs.count("start kid") == 2 and runs.count("start kid-2") == 1


def test_a_continued_run_resumes_with_the_signal_carried_over(runs: Runs) -> None:
    assert runs.recovered["loop"] == runs.reference["loop"] == [2, "loop", "sig"]


def test_a_cancelled_workflow_finishes_its_cleanup_and_ends_cancelled(runs: Runs) -> None:
    assert runs.recovered["cancel"] == runs.reference["cancel"] == "cancelled"
    assert runs.count("start cancel-me") == 1  # its cancellation was recorded: never run again
    assert runs.count("start cleanup") == 2 and runs.count("done cleanup") == 1


def test_a_patched_run_keeps_its_branch_across_the_crash(runs: Runs) -> None:
    assert runs.recovered["patch"] == runs.reference["patch"] == ["new", "patch"]


def test_the_recovered_store_keeps_every_invariant(runs: Runs) -> None:
    # No outcome committed twice, every message consumed at most once, claims and indexes in step.
    assert check_store(str(runs.data), time.time()) == []
