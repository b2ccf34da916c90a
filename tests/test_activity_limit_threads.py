"""``@activity(concurrency=N)`` on a plain function: the permit is held until the attempt's
thread really ends, not when its outcome is reported. A call whose ``start_to_close`` passed,
or whose workflow was cancelled, runs on in its thread and still counts against the limit."""

from __future__ import annotations

import threading
import time

import pytest

from _support import eventually, run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.errors import WorkflowCancelled
from weft_actors.store._permits import read_permits

_LOCK = threading.Lock()
RUNNING = {"now": 0, "peak": 0, "calls": 0}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RUNNING.update(now=0, peak=0, calls=0)


@activity(concurrency=1)
def slow_one_at_a_time(seconds: float) -> float:
    with _LOCK:
        RUNNING["now"] += 1
        RUNNING["calls"] += 1
        RUNNING["peak"] = max(RUNNING["peak"], RUNNING["now"])
    try:
        time.sleep(seconds)
    finally:
        with _LOCK:
            RUNNING["now"] -= 1
    return seconds


@workflow
async def overrun(ctx, seconds: float) -> float:
    return await ctx.run(slow_one_at_a_time, seconds, start_to_close=0.05, retry=RetryPolicy(max_attempts=1))


@workflow
async def patient(ctx, seconds: float) -> float:
    return await ctx.run(slow_one_at_a_time, seconds)


APP = [overrun, patient]


@pytest.mark.timeout(30)
def test_a_thread_past_its_start_to_close_keeps_its_permit_until_it_returns(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handles = [await engine.start(overrun, 0.4) for _ in range(4)]
            for handle in handles:
                with pytest.raises(Exception, match="start_to_close"):
                    await handle.result(timeout=20)
            await eventually(lambda: RUNNING["calls"] == 4 and RUNNING["now"] == 0, timeout=10)
            assert RUNNING["peak"] == 1, RUNNING
            await eventually(lambda: read_permits(engine.store, "slow_one_at_a_time")["held"] == {}, timeout=5)

    run(main())


@pytest.mark.timeout(30)
def test_a_cancelled_workflows_thread_keeps_its_permit_until_it_returns(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            first = await engine.start(patient, 0.5)
            await eventually(lambda: RUNNING["now"] == 1, timeout=10)
            second = await engine.start(patient, 0.01)
            await first.cancel()
            with pytest.raises(WorkflowCancelled):
                await first.result(timeout=10)
            assert await second.result(timeout=10) == 0.01
            assert RUNNING["peak"] == 1, RUNNING

    run(main())
