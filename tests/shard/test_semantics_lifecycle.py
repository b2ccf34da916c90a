"""Continue-as-new, cancellation, signal-with-start, start options and ``patched`` on the
embedded engine."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.codec import decode
from weft_actors.errors import WorkflowAlreadyExists, WorkflowCancelled, WorkflowClosed, WorkflowTimedOut
from weft_actors.testing import FakeClock
from weft_actors.workflow import WorkflowRun, workflow_definition

pytestmark = pytest.mark.timeout(20)

EVENTS: list[str] = []
GATE: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _clear() -> None:
    EVENTS.clear()
    GATE.clear()


@activity(retry=RetryPolicy(max_attempts=1))
async def step(tag: str) -> str:
    EVENTS.append(f"start {tag}")
    try:
        gate = GATE.get(tag)
        if gate is not None:
            await gate.wait()
    except asyncio.CancelledError:
        EVENTS.append(f"cancelled {tag}")
        raise
    EVENTS.append(f"done {tag}")
    return tag


# -- continue as new --------------------------------------------------------------------------


@workflow
async def counter(ctx, n: int, seen: list) -> Any:
    if n < 3:
        await ctx.run(step, f"round {n}")
        return ctx.continue_as_new(n + 1, seen + [ctx.run_id])
    first = await ctx.wait_signal("item")
    second = await ctx.wait_signal("item")
    return {"n": n, "items": [first, second], "runs": len(set(seen + [ctx.run_id]))}


def test_continue_as_new_starts_a_fresh_run_keeping_buffered_signals(tmp_path):
    async def main():
        GATE["round 1"] = asyncio.Event()
        async with Engine(str(tmp_path), app=[counter]) as engine:
            handle = await engine.start(counter, 0, [], id="c")
            await eventually(lambda: "start round 1" in EVENTS)
            await handle.signal("item", "a")  # buffered while runs 1 and 2 never wait for it
            await handle.signal("item", "b")
            GATE["round 1"].set()
            assert await handle.result(timeout=5) == {"n": 3, "items": ["a", "b"], "runs": 4}
            described = await handle.describe()
            assert [run["status"] for run in described["previous_runs"]] == ["continued"] * 3
            assert described["run_id"] not in {run["run_id"] for run in described["previous_runs"]}
            assert [op["kind"] for op in described["history"]] == ["signal", "signal"]  # a fresh log
            old_runs = [run["run_id"] for run in described["previous_runs"]]
            assert all(engine.store.load_ops("c", run_id) == {} for run_id in old_runs)
            assert engine.store.get_epoch("c") == 4  # the claim stayed fenced: rotated per run

    run(main())


def test_result_follows_a_chain_of_runs_across_a_restart(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[counter]) as engine:
            handle = await engine.start(counter, 0, [], id="c")
            await eventually(lambda: "c" in engine.actors and engine.actors["c"].run.waiting_signal() == "item")
            first_run = handle.run_id
        async with Engine(str(tmp_path), app=[counter]) as engine:
            handle = engine.get_handle("c")
            await handle.signal("item", 1)
            await handle.signal("item", 2)
            assert (await handle.result(timeout=5))["items"] == [1, 2]
            assert (await handle.describe())["previous_runs"][0]["run_id"] == first_run

    run(main())


@workflow
async def forever(ctx, n: int) -> Any:
    await ctx.sleep(0.01)
    return ctx.continue_as_new(n + 1)


def test_execution_timeout_spans_the_chain_of_runs(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[forever], heartbeat=0.05, ttl=0.15) as engine:
            handle = await engine.start(forever, 0, id="f", execution_timeout=0.3)
            with pytest.raises(WorkflowTimedOut):
                await handle.result(timeout=5)
            assert len((await handle.describe())["previous_runs"]) >= 3

    run(main())


# -- cancellation -----------------------------------------------------------------------------


@workflow
async def careful(ctx, swallow: bool) -> Any:
    try:
        await ctx.run(step, "work")
    except asyncio.CancelledError:
        cleaned = await ctx.run(step, "cleanup")
        if swallow:
            return f"recovered after {cleaned}"
        raise
    return "finished"


def test_cancel_during_a_running_activity_runs_cleanup_and_ends_cancelled(tmp_path):
    async def main():
        GATE["work"] = asyncio.Event()
        async with Engine(str(tmp_path), app=[careful]) as engine:
            handle = await engine.start(careful, False, id="k")
            await eventually(lambda: "start work" in EVENTS)
            await handle.cancel()
            with pytest.raises(WorkflowCancelled):
                await handle.result(timeout=5)
            assert EVENTS == ["start work", "cancelled work", "start cleanup", "done cleanup"]
            described = await handle.describe()
            assert described["status"] == "cancelled"
            assert [(op["kind"], op["outcome"]) for op in described["history"]] == [("activity", "error"), ("activity", "ok")]
            with pytest.raises(WorkflowClosed):
                await handle.cancel()

    run(main())


def test_a_workflow_that_handles_cancellation_and_returns_completes(tmp_path):
    async def main():
        GATE["work"] = asyncio.Event()
        async with Engine(str(tmp_path), app=[careful]) as engine:
            handle = await engine.start(careful, True, id="k")
            await eventually(lambda: "start work" in EVENTS)
            await handle.cancel()
            await handle.cancel()  # a repeated request changes nothing
            assert await handle.result(timeout=5) == "recovered after cleanup"
            assert (await handle.describe())["status"] == "completed"

    run(main())


def test_cancel_of_a_workflow_that_has_not_started_closes_it(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[careful]) as engine:
            handle = await engine.start(careful, False, id="later", start_delay=3600)
            await handle.cancel()
            with pytest.raises(WorkflowCancelled):
                await handle.result(timeout=5)
            assert engine.store.count("timers") == 0 and EVENTS == []

    run(main())


def test_cancel_is_applied_by_the_owner_even_when_sent_to_another_engine(tmp_path):
    async def main():
        clock = FakeClock()
        GATE["work"] = asyncio.Event()
        options = {"clock": clock, "heartbeat": 0.5, "ttl": 3.0, "background": False}
        async with Engine(str(tmp_path), app=[careful], **options) as owner, Engine(str(tmp_path), app=[careful], **options) as other:
            await owner.start(careful, False, id="k")
            await eventually(lambda: "start work" in EVENTS)
            await other.cancel("k")
            if not hasattr(owner.store, "listen"):  # on PostgreSQL the commit's NOTIFY may have told it
                assert "cancelled work" not in EVENTS  # the owner has not polled yet
            clock.advance(0.5)
            owner.tick()
            await eventually(lambda: owner.store.get_workflow("k")["status"] == "cancelled")
            assert EVENTS[-1] == "done cleanup"

    run(main())


# -- signal with start, start options -------------------------------------------------------


@workflow
async def mailbox(ctx) -> Any:
    got = [await ctx.wait_signal("mail")]
    try:
        while True:
            got.append(await ctx.wait_signal("mail", timeout=0.05))
    except TimeoutError:
        return got


def test_signal_with_start_creates_and_signals_atomically_or_just_signals(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[mailbox]) as engine:
            first = await engine.signal_with_start(mailbox, signal="mail", payload=1, id="m", memo={"owner": "me"})
            second = await engine.signal_with_start(mailbox, signal="mail", payload=2, id="m")
            assert second.run_id == first.run_id  # the running workflow was just signalled
            assert await first.result(timeout=5) == [1, 2]
            described = await first.describe()
            assert described["memo"] == {"owner": "me"}
            with pytest.raises(WorkflowAlreadyExists):
                await engine.signal_with_start(mailbox, signal="mail", payload=3, id="m")
            with pytest.raises(WorkflowClosed):
                await engine.signal_with_start(mailbox, signal="mail", payload=3, id="m", if_exists="return")
            third = await engine.signal_with_start(mailbox, signal="mail", payload=4, id="m", if_exists="start_new")
            assert third.run_id != first.run_id
            assert await third.result(timeout=5) == [4]

    run(main())


def test_signal_with_start_of_a_delayed_start_keeps_the_signal_until_it_runs(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[mailbox], heartbeat=0.05, ttl=0.15) as engine:
            handle = await engine.signal_with_start(mailbox, signal="mail", payload="early", id="d", start_delay=0.1)
            assert (await handle.describe())["status"] == "pending"
            assert await handle.result(timeout=5) == ["early"]

    run(main())


# -- patched --------------------------------------------------------------------------------


@workflow(name="shipping")
async def shipping_v1(ctx) -> str:
    await ctx.wait_signal("go")
    return await ctx.run(step, "v1 path")


@workflow(name="shipping")
async def shipping_v2(ctx) -> str:
    await ctx.wait_signal("go")
    if await ctx.patched("express"):
        return await ctx.run(step, "v2 path")
    return await ctx.run(step, "v1 path")


def test_patched_keeps_old_runs_on_the_old_path_and_sends_new_runs_down_the_new_one(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[shipping_v1]) as engine:
            await engine.start("shipping", id="done-before")
            await engine.signal("done-before", "go")
            assert await engine.get_handle("done-before").result(timeout=5) == "v1 path"
            await engine.start("shipping", id="waiting-before")
        async with Engine(str(tmp_path), app=[shipping_v2]) as engine:  # the change is deployed
            await engine.start("shipping", id="after")
            await engine.signal("after", "go")
            await engine.signal("waiting-before", "go")
            assert await engine.get_handle("after").result(timeout=5) == "v2 path"
            # It had not reached the patch point before the change, so it takes the new path too.
            assert await engine.get_handle("waiting-before").result(timeout=5) == "v2 path"
            # A run that passed the point before the change replays down the old path, no marker.
            record = engine.store.get_workflow("done-before")
            replay = WorkflowRun(workflow_definition(shipping_v2), "done-before", record["run_id"], (), engine.store.load_ops("done-before", record["run_id"]))
            (final,) = replay.start()
            assert final.kind == "complete" and decode(final.payload) == "v1 path"
            kinds = [op["kind"] for op in (await engine.get_handle("after").describe())["history"]]
            assert kinds == ["signal", "patch", "activity"]

    run(main())
