"""The time-skipping environment (``weft_actors.testing.TimeSkippingEnvironment``): workflow
time jumps to the next timer whenever nothing else can happen, so a workflow that waits for
weeks ends in real milliseconds, with its timers fired in order, a signal sent at a chosen
virtual time, its execution timeout honoured, and never past a running activity."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

import pytest

from _support import run
from weft_actors import activity, workflow
from weft_actors.errors import WorkflowTimedOut
from weft_actors.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.timeout(60)
log = logging.getLogger(__name__)

DAY = 86_400.0
SENT: list[str] = []


@activity
async def remind(order: str, kind: str) -> str:
    SENT.append(f"{kind}:{order}")
    return kind


@workflow
async def approval(ctx, order: str) -> dict:
    """A human approval: a reminder after each day without an answer, an escalation after
    three, then a 30-day cooling-off period before it is final."""
    decision: dict = {}
    ctx.on_signal("decide", lambda value: decision.update(value=value))
    waited = 0
    while "value" not in decision:
        index, _ = await ctx.race([ctx.wait_condition(lambda: "value" in decision), ctx.sleep(DAY)])
        if index == 1:
            waited += 1
            await ctx.run(remind, order, "escalation" if waited == 3 else "reminder")
    decided_at = await ctx.now()
    await ctx.sleep(30 * DAY)
    return {"value": decision["value"], "days_waited": waited, "decided_at": decided_at.timestamp()}


@workflow
async def long_nap(ctx) -> str:
    await ctx.sleep(30 * DAY)
    return "woke"


@workflow
async def stamps(ctx) -> list[float]:
    times = [(await ctx.now()).timestamp()]
    for seconds in (3600.0, DAY, 0.25):
        await ctx.sleep(seconds)
        times.append((await ctx.now()).timestamp())
    return times


@activity
async def takes_a_while(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@workflow
async def activity_against_a_timer(ctx) -> int:
    index, _ = await ctx.race([ctx.run(takes_a_while, 0.3), ctx.sleep(10.0)])
    return index


@workflow
async def started_late(ctx) -> float:
    return (await ctx.now()).timestamp()


APP = [approval, long_nap, stamps, activity_against_a_timer, started_late]


def test_a_thirty_day_approval_with_reminders_a_signal_and_a_timeout_ends_at_once():
    SENT.clear()

    async def main() -> None:
        began = time.perf_counter()
        async with TimeSkippingEnvironment(app=APP) as env:
            start = env.now()
            handle = await env.engine.start(approval, "o-1", execution_timeout=60 * DAY)
            await env.sleep(3 * DAY + 3600)  # three days without an answer
            assert SENT == ["reminder:o-1", "reminder:o-1", "escalation:o-1"]
            await handle.signal("decide", "approved")
            result = await env.result(handle)
            assert result["value"] == "approved" and result["days_waited"] == 3
            assert result["decided_at"] == pytest.approx(start + 3 * DAY + 3600, abs=1.0)
            assert env.now() >= result["decided_at"] + 30 * DAY
            assert env.skipped >= 33 * DAY
        log.info("33 days of workflow time in %.3f s", time.perf_counter() - began)

    run(main())


def test_an_execution_timeout_ends_a_workflow_that_would_sleep_longer():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            start = env.now()
            handle = await env.engine.start(long_nap, execution_timeout=7 * DAY)
            with pytest.raises(WorkflowTimedOut):
                await env.result(handle)
            assert start + 7 * DAY <= env.now() < start + 8 * DAY

    run(main())


def test_sleep_fires_each_timer_in_order_at_its_own_time():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            handle = await env.engine.start(stamps)
            await env.sleep(2 * DAY)
            times = await env.result(handle)
            steps = [later - earlier for earlier, later in zip(times, times[1:])]
            assert steps == pytest.approx([3600.0, DAY, 0.25], abs=0.01)

    run(main())


def test_time_does_not_skip_past_a_running_activity():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            start = env.now()
            assert await env.execute(activity_against_a_timer) == 0  # the activity won
            assert env.now() - start < 10.0

    run(main())


def test_a_delayed_start_starts_when_its_virtual_time_comes():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            start = env.now()
            handle = await env.engine.start(started_late, start_delay=3 * DAY)
            assert await env.result(handle) == pytest.approx(start + 3 * DAY, abs=1.0)

    run(main())


def test_nothing_skips_outside_sleep_and_result():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            start = env.now()
            handle = await env.engine.start(long_nap)
            await asyncio.sleep(0.1)  # real time: workflow time stays put
            assert env.now() == start
            assert (await handle.describe())["status"] == "running"
            assert await env.result(handle) == "woke"
            assert env.now() == pytest.approx(start + 30 * DAY, abs=0.01)

    run(main())
