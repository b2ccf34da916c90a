"""The loop-stall watchdog names the workflow, run and activity (or workflow code) that keeps
an engine's loop from turning, with the loop thread's stack, once per stall."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow


@activity
async def blocks_the_loop(seconds: float) -> str:
    time.sleep(seconds)  # the bug the watchdog is for: a blocking call in an async activity
    return "woke"


@workflow
async def stalls_in_an_activity(ctx, seconds: float):
    return await ctx.run(blocks_the_loop, seconds)


@workflow
async def stalls_in_workflow_code(ctx, seconds: float):
    await ctx.sleep(0.01)
    time.sleep(seconds)
    return "done"


APP = [stalls_in_an_activity, stalls_in_workflow_code]


def _stall_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelname == "WARNING" and "event loop stalled" in r.getMessage()]


@pytest.mark.timeout(30)
def test_a_stall_in_an_activity_is_logged_once_naming_the_workflow_run_and_activity(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="weft_actors.shard")

    async def main():
        async with Engine(str(tmp_path), app=APP, stall_threshold=0.3, heartbeat=1.0, ttl=5.0) as engine:
            handle = await engine.start(stalls_in_an_activity, 1.2, id="stuck-1")
            assert await handle.result(timeout=10) == "woke"
            await eventually(lambda: _stall_records(caplog), timeout=5)
            assert engine.stats()["loop_stalls_total"] == 1
            return handle.run_id

    run_id = run(main())
    [record] = _stall_records(caplog)  # once per stall (1.2 s < 4 x its first report)
    message = record.getMessage()
    assert "workflow 'stuck-1'" in message and f"run {run_id}" in message
    assert "activity 'blocks_the_loop' (op #0, attempt 1)" in message
    assert "time.sleep(seconds)" in message  # the loop thread's stack, down to the culprit


@pytest.mark.timeout(30)
def test_a_stall_in_workflow_code_names_the_workflow(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="weft_actors.shard")

    async def main():
        async with Engine(str(tmp_path), app=APP, stall_threshold=0.3, heartbeat=1.0, ttl=5.0) as engine:
            handle = await engine.start(stalls_in_workflow_code, 1.0, id="stuck-2")
            assert await handle.result(timeout=10) == "done"
            await eventually(lambda: _stall_records(caplog), timeout=5)

    run(main())
    message = _stall_records(caplog)[0].getMessage()
    assert "workflow 'stuck-2' (stalls_in_workflow_code)" in message and "workflow code" in message


@pytest.mark.timeout(30)
def test_a_loop_that_keeps_turning_logs_nothing(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="weft_actors.shard")

    async def main():
        async with Engine(str(tmp_path), app=APP, stall_threshold=0.3) as engine:
            await asyncio.sleep(1.0)
            assert engine.stats()["loop_stalls_total"] == 0

    run(main())
    assert _stall_records(caplog) == []


@pytest.mark.timeout(30)
def test_loop_lag_is_how_late_the_loop_turned_over_the_last_second(tmp_path):
    """``stats()["loop_lag_ms"]``: near nothing on an idle loop, the length of a block just
    after one (a ready callback waited that long), and back to near nothing a second later."""

    async def main():
        async with Engine(str(tmp_path), app=APP, stall_threshold=1.0, heartbeat=1.0, ttl=5.0) as engine:
            await asyncio.sleep(0.6)
            assert 0 <= engine.stats()["loop_lag_ms"] < 150  # idle (a shared machine may be slow)
            time.sleep(0.8)  # the loop is blocked: its tick (due every 0.25 s) fires >= 0.55 s late
            await eventually(lambda: engine.stats()["loop_lag_ms"] >= 500, timeout=2)
            await eventually(lambda: engine.stats()["loop_lag_ms"] < 150, timeout=5)

    run(main())


def test_an_engine_without_background_tasks_reports_no_loop_lag(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, background=False) as engine:
            assert engine.stats()["loop_lag_ms"] is None  # nothing measures it

    run(main())
