"""``describe()`` from the live actor: the pending activities (name, attempt, times, the shard
and process running it; for one being retried its last failure and next retry time, which a
takeover keeps) and the stack of the running workflow (each await's file, line and op), and
``stack()`` with its errors."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.errors import InvalidRequest, WorkflowClosed, WorkflowNotFound

pytestmark = pytest.mark.timeout(60)

HERE = os.path.abspath(__file__)


@activity(start_to_close=700)
async def long_call(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@activity(retry=RetryPolicy(max_attempts=5, initial_interval=30.0, backoff=1.0))
async def flaky(n: int) -> str:
    raise RuntimeError(f"downstream said no for {n}")


@workflow
async def in_a_long_activity(ctx) -> str:
    return await ctx.run(long_call, 600.0)


@workflow
async def retrying(ctx) -> str:
    return await ctx.run(flaky, 3)


async def _approval(ctx) -> Any:
    return await ctx.wait_signal("approve")  # LINE_APPROVAL


def _ready(state: dict[str, Any]) -> bool:
    return bool(state.get("ready"))


@workflow
async def layered(ctx) -> Any:
    state: dict[str, Any] = {}
    ctx.on_signal("ready", lambda value: state.update(ready=value))
    first = await _approval(ctx)  # LINE_CALL
    index, _ = await ctx.race([ctx.sleep(300), ctx.wait_condition(lambda: _ready(state))])  # LINE_RACE
    return [first, index]


def _line(marker: str) -> int:
    with open(HERE) as source:
        return next(number for number, text in enumerate(source, 1) if text.rstrip().endswith(f"# {marker}"))


async def _described_when(engine: Engine, wid: str, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while not done(described := await engine.get_handle(wid).describe()):
        assert time.monotonic() < deadline, f"never: {described.get('pending_activities')} {described.get('stack')}"
        await asyncio.sleep(0.01)
    return described


def test_an_activity_in_flight_is_listed_with_its_attempt_times_and_process_within_a_second(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[in_a_long_activity]) as engine:
            started = time.time()
            await engine.start(in_a_long_activity, id="long-1")
            described = await _described_when(engine, "long-1", lambda d: d["pending_activities"])
            assert time.time() - started < 1.0
            [pending] = described["pending_activities"]
            assert (pending["seq"], pending["name"], pending["state"], pending["attempt"]) == (0, "long_call", "running", 1)
            assert started - 1 <= pending["started"] <= time.time() and pending["started_iso"].endswith("Z")
            assert pending["scheduled"] == pending["started"] == pending["first_started"]
            assert pending["next_retry"] is None and pending["last_failure"] is None
            assert pending["shard"] == {"slot": None, "pid": os.getpid()}
            [frame] = described["stack"]
            assert (frame["function"], frame["file"]) == ("in_a_long_activity", HERE)
            assert frame["waits_on"] == [{"seq": 0, "kind": "activity", "name": "long_call", "attempt": 1}]
            await engine.get_handle("long-1").terminate("enough")
            described = await engine.get_handle("long-1").describe()
            assert described["pending_activities"] == [] and described["stack"] is None

    run(main())


def test_a_retried_activity_shows_its_last_failure_and_next_retry_and_a_takeover_keeps_them(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[retrying]) as engine:
            await engine.start(retrying, id="flaky-1")
            described = await _described_when(engine, "flaky-1", lambda d: d["pending_activities"] and d["pending_activities"][0]["state"] == "retry_wait")
            [pending] = described["pending_activities"]
            assert (pending["name"], pending["attempt"], pending["started"]) == ("flaky", 2, None)
            failure = pending["last_failure"]
            assert (failure["type"], failure["message"]) == ("RuntimeError", "downstream said no for 3")
            assert "raise RuntimeError" in failure["traceback"] and "downstream said no for 3" in failure["traceback"]
            assert pending["next_retry"] == pending["scheduled"] and 25 < pending["next_retry"] - time.time() <= 30
            [frame] = described["stack"]
            [waiting] = frame["waits_on"]
            assert (waiting["kind"], waiting["name"], waiting["timer"], waiting["attempt"]) == ("activity", "flaky", "retry", 2)
            assert waiting["fire_at"] == pending["next_retry"]
        async with Engine(str(tmp_path), app=[retrying]) as taker:  # a new owner replays it
            described = await _described_when(taker, "flaky-1", lambda d: d["owner"] == taker.engine_id and d["stack"])
            [pending] = described["pending_activities"]
            assert pending["last_failure"] == failure and pending["attempt"] == 2 and pending["state"] == "retry_wait"
            await taker.get_handle("flaky-1").terminate("enough")

    run(main())


def test_stack_names_each_await_with_its_file_line_and_op_and_refuses_what_does_not_run(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[layered]) as engine:
            handle = await engine.start(layered, id="st-1")
            stack = await _stack_when(handle, lambda s: s[-1]["waits_on"][0]["kind"] == "signal")
            assert [(f["function"], f["file"], f["line"]) for f in stack] == [
                ("layered", HERE, _line("LINE_CALL")), ("_approval", HERE, _line("LINE_APPROVAL")),
            ]
            assert stack[-1]["waits_on"] == [{"seq": 0, "kind": "signal", "name": "approve"}]
            await handle.signal("approve", "yes")
            stack = await _stack_when(handle, lambda s: s[-1]["line"] == _line("LINE_RACE"))
            assert [f["function"] for f in stack] == ["layered"]
            sleep, condition = stack[0]["waits_on"]
            assert (sleep["kind"], sleep["timer"]) == ("sleep", "sleep") and 290 < sleep["fire_at"] - time.time() <= 300
            assert sleep["fire_at_iso"].endswith("Z")
            assert condition["kind"] == "condition" and "<lambda>" in condition["name"]
            assert condition["predicate"] == {"file": HERE, "line": _line("LINE_RACE")}
            await handle.signal("ready", True)
            assert await handle.result(timeout=5) == ["yes", 1]
            with pytest.raises(WorkflowClosed) as ended:
                await handle.stack()
            assert ended.value.code == "workflow_closed" and "completed" in str(ended.value)
            with pytest.raises(WorkflowNotFound):
                await engine.get_handle("no-such").stack()
            later = await engine.start(layered, id="st-later", start_delay=600)
            with pytest.raises(InvalidRequest) as waiting:
                await later.stack()
            assert waiting.value.code == "invalid_request" and "pending" in str(waiting.value)

    async def _stack_when(handle: Any, done: Any) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 10
        while True:
            stack = await handle.stack()
            if stack and "waits_on" in stack[-1] and stack[-1]["waits_on"] and done(stack):
                return stack
            assert time.monotonic() < deadline, f"never: {stack}"
            await asyncio.sleep(0.01)

    run(main())
