"""``ctx.all``/``ctx.race`` on the embedded engine: concurrent ops, cancelled losers (a running
activity sees the cancellation, a losing timer is deleted, a losing ``wait_signal`` leaves its
signal buffered), errors like ``asyncio.gather``, and the same ending after a restart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.errors import ActivityError

pytestmark = pytest.mark.timeout(20)

EVENTS: list[str] = []
GATES: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _clear() -> None:
    EVENTS.clear()
    GATES.clear()


@activity
async def gated(tag: str) -> str:
    """Waits for ``GATES[tag]`` if the test made one; notes a cancellation."""
    EVENTS.append(f"start {tag}")
    try:
        gate = GATES.get(tag)
        if gate is not None:
            await gate.wait()
    except asyncio.CancelledError:
        EVENTS.append(f"cancelled {tag}")
        raise
    EVENTS.append(f"done {tag}")
    return tag


@activity(retry=RetryPolicy(max_attempts=1))
async def fails(message: str) -> None:
    raise ValueError(message)


@workflow
async def deadline(ctx, seconds: float) -> Any:
    return await ctx.race([ctx.run(gated, "work"), ctx.sleep(seconds)])


@workflow
async def signal_or_timer(ctx) -> Any:
    index, value = await ctx.race([ctx.wait_signal("approve"), ctx.sleep(0.05)])
    second = await ctx.wait_signal("approve")
    return [index, value, second]


@workflow
async def fan_out(ctx) -> Any:
    return await ctx.all([ctx.run(gated, "a"), ctx.run(gated, "b"), ctx.wait_signal("c")])


@workflow
async def fan_out_failing(ctx) -> Any:
    try:
        await ctx.all([ctx.run(gated, "slow"), ctx.run(fails, "broken"), ctx.sleep(30)])
    except ActivityError as exc:
        return ["failed", exc.cause_message]
    return "no"


@workflow
async def first_come(ctx) -> Any:
    await ctx.wait_signal("start")
    winner = await ctx.race([ctx.wait_signal("a"), ctx.wait_signal("b")])
    rest = await ctx.wait_signal("a")
    return [winner, rest]


APP = [deadline, signal_or_timer, fan_out, fan_out_failing, first_come]


def test_with_both_branches_satisfiable_the_earliest_message_wins_and_the_other_stays_buffered(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(first_come, id="fc")
            await handle.signal("b", "B")  # both buffered before the race is entered
            await handle.signal("a", "A")
            await handle.signal("start")
            assert await handle.result(timeout=5) == [(1, "B"), "A"]
            history = (await handle.describe())["history"]
            assert [(op["name"], op["outcome"]) for op in history] == [("start", "ok"), ("a", "lost_race"), ("b", "ok"), ("a", "ok")]

    run(main())


def test_a_timer_winning_a_race_cancels_the_running_activity(tmp_path):
    async def main():
        GATES["work"] = asyncio.Event()
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(deadline, 0.05, id="d")
            assert await handle.result(timeout=5) == (1, None)
            await eventually(lambda: "cancelled work" in EVENTS)
            history = (await handle.describe())["history"]
            assert [(op["kind"], op["outcome"]) for op in history] == [("activity", "lost_race"), ("sleep", "ok")]
            assert "error" not in history[0]  # stopped by the race: not a failure
            assert engine.store.count("timers") == 0

    run(main())


def test_an_activity_winning_a_race_deletes_the_losing_timer(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(deadline, 60, id="d")
            assert await handle.result(timeout=5) == (0, "work")
            assert engine.store.count("timers") == 0
            assert len(engine.timers) == 0 or all(entry[2] is None for entry in engine.timers._heap)

    run(main())


def test_a_losing_wait_signal_leaves_its_signal_buffered_for_the_next_wait(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(signal_or_timer, id="s")
            await eventually(lambda: engine.actors["s"].run.waiting_signal() == "approve" and engine.actors["s"].run.waiting_seq == 2)
            await handle.signal("approve", "late but kept")
            assert await handle.result(timeout=5) == [1, None, "late but kept"]
            ops = {op["seq"]: op for op in (await handle.describe())["history"]}
            assert ops[0]["outcome"] == "lost_race" and "error" not in ops[0]
            assert ops[2]["outcome"] == "ok"

    run(main())


def test_race_outcome_is_the_same_after_a_restart(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            await engine.start(signal_or_timer, id="s")
            await eventually(lambda: engine.actors["s"].run.waiting_seq == 2)  # the race is settled
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = engine.get_handle("s")
            await eventually(lambda: "s" in engine.actors)
            assert engine.actors["s"].run.waiting_seq == 2  # replay settled it the same way
            await handle.signal("approve", "yes")
            assert await handle.result(timeout=5) == [1, None, "yes"]

    run(main())


def test_all_runs_ops_concurrently_and_returns_results_in_order(tmp_path):
    async def main():
        GATES["a"] = asyncio.Event()
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(fan_out, id="f")
            await eventually(lambda: "done b" in EVENTS and "start a" in EVENTS)
            await handle.signal("c", "sig")
            GATES["a"].set()
            assert await handle.result(timeout=5) == ["a", "b", "sig"]

    run(main())


def test_the_first_error_in_all_propagates_and_cancels_the_rest(tmp_path):
    async def main():
        GATES["slow"] = asyncio.Event()
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(fan_out_failing, id="f")
            assert await handle.result(timeout=5) == ["failed", "broken"]
            await eventually(lambda: "cancelled slow" in EVENTS)
            assert engine.store.count("timers") == 0

    run(main())
