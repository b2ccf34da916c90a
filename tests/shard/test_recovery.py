"""Recovery: a new Engine on the same directory finishes what a previous one left running,
including after kill -9; completed ops never run again, the op in flight runs again."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import FencedOut

HERE = Path(__file__).parent


def _load_crash_app():
    spec = importlib.util.spec_from_file_location("crash_app", HERE / "crash_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _run_child_until(tmp_path: Path, which: str, ready: callable) -> None:
    """Start a child process serving an Engine, wait for ``ready(log lines)``, kill -9 it."""
    log = tmp_path / "activity.log"
    env = {**os.environ, "WEFT_TEST_LOG": str(log), "WEFT_CRASH_BLOCK": "1"}
    child = subprocess.Popen([sys.executable, str(HERE / "crash_app.py"), str(tmp_path / "data"), which], env=env)
    try:
        deadline = time.monotonic() + 20
        while not ready(_lines(log)):
            assert child.poll() is None, "child engine died early"
            assert time.monotonic() < deadline, f"child never got ready: {_lines(log)}"
            time.sleep(0.01)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)


def test_kill_9_mid_workflow_then_new_engine_completes_it_without_rerunning_steps(tmp_path, monkeypatch):
    _run_child_until(tmp_path, "three", lambda lines: "start 1" in lines)
    log = tmp_path / "activity.log"
    monkeypatch.setenv("WEFT_TEST_LOG", str(log))
    monkeypatch.delenv("WEFT_CRASH_BLOCK", raising=False)
    app = _load_crash_app()

    async def main():
        async with Engine(str(tmp_path / "data"), app=app.APP) as engine:
            handle = engine.get_handle("crash")
            assert await handle.result(timeout=10) == [0, 1, 2]

    run(main())
    steps = [line for line in _lines(log) if line != "ready"]
    assert steps.count("start 0") == 1 and steps.count("done 0") == 1  # completed: never again
    assert steps.count("start 1") == 2  # in flight at the crash: at least once, so again
    assert steps.count("done 1") == 1 and steps.count("done 2") == 1


def test_sleep_that_ended_during_downtime_fires_at_once_on_recovery(tmp_path, monkeypatch):
    _run_child_until(tmp_path, "sleep", lambda lines: "ready" in lines)
    time.sleep(0.6)  # the 0.5 s sleep ends while no engine runs
    monkeypatch.setenv("WEFT_TEST_LOG", str(tmp_path / "activity.log"))
    app = _load_crash_app()

    async def main():
        async with Engine(str(tmp_path / "data"), app=app.APP) as engine:
            started = time.monotonic()
            assert await engine.get_handle("sleepy").result(timeout=5) == "woke"
            assert time.monotonic() - started < 1.0
            assert engine.store.count("timers") == 0

    run(main())


def test_retry_attempts_and_backoff_survive_a_crash(tmp_path, monkeypatch):
    _run_child_until(tmp_path, "retry", lambda lines: "flaky attempt 2" in lines)
    log = tmp_path / "activity.log"
    monkeypatch.setenv("WEFT_TEST_LOG", str(log))
    app = _load_crash_app()

    async def main():
        async with Engine(str(tmp_path / "data"), app=app.APP) as engine:
            assert await engine.get_handle("retry").result(timeout=10) == "flaky ok at 4"

    run(main())
    numbers = [int(line.split()[-1]) for line in _lines(log) if line.startswith("flaky")]
    # Attempt numbers continue after the crash instead of starting again at 1 (attempt 2 may
    # run twice: it can be killed before its failure was committed).
    assert numbers == sorted(numbers) and numbers.count(1) == 1
    assert set(numbers) == {1, 2, 3, 4}


@activity
async def record_call(tag: str) -> str:
    CALLS.append(tag)
    return tag


CALLS: list[str] = []


@workflow(name="versioned")
async def versioned_v1(ctx) -> str:
    first = await ctx.run(record_call, "a")
    await ctx.wait_signal("go")
    return first


@workflow(name="versioned")
async def versioned_v2(ctx) -> str:
    await ctx.sleep(1)  # where v1 ran an activity
    await ctx.wait_signal("go")
    return "v2"


def test_changed_workflow_body_is_flagged_as_non_determinism(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[versioned_v1]) as engine:
            await engine.start("versioned", id="v")
            await eventually(lambda: engine.actors["v"].run.waiting_signal() == "go")
        async with Engine(str(tmp_path), app=[versioned_v2]) as engine:
            described = await eventually_describe(engine, "v")
            assert described["status"] == "stuck"
            assert "activity 'record_call'" in described["nondeterminism"]
            assert "sleep" in described["nondeterminism"]
        async with Engine(str(tmp_path), app=[versioned_v1]) as engine:  # fixed code deployed
            await engine.get_handle("v").signal("go")
            assert await engine.get_handle("v").result(timeout=5) == "a"
        assert CALLS == ["a"]

    async def eventually_describe(engine, wid):
        deadline = time.monotonic() + 5
        while True:
            described = await engine.get_handle(wid).describe()
            if described["nondeterminism"] or time.monotonic() > deadline:
                return described
            await asyncio.sleep(0.01)

    run(main())


@workflow
async def waits_forever(ctx) -> str:
    return await ctx.wait_signal("never")


def test_takeover_deposes_only_that_workflow_and_the_old_owner_commits_nothing(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[waits_forever, versioned_v1]) as a, Engine(str(tmp_path), app=[waits_forever]) as b:
            await a.start(waits_forever, id="taken")
            await a.start(waits_forever, id="kept")
            holder = a.store.get_holder_bytes("taken")
            won = b.store.takeover(b.engine_id, [("taken", holder)])
            assert won == {"taken": 2}
            assert b.drive("taken", 2)
            # A's next write for "taken" is fenced out; "kept" carries on under A.
            await a.get_handle("taken").signal("never", "late")
            await eventually(lambda: "taken" not in a.actors)
            assert await b.get_handle("taken").result(timeout=5) == "late"
            assert a.stats()["claims_deposed"] == 1
            await a.get_handle("kept").signal("never", "fine")
            assert await a.get_handle("kept").result(timeout=5) == "fine"
            assert a.store.get_epoch("taken") == 2

    run(main())
