"""Limits: each enforced with a clear, typed error (or, for activities, backpressure), on the
embedded engine and across the wire: payload size, workflow id length, activity attempts in
flight, live actors, pending inbox messages."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from _processes import RunningSupervisor, wait_until
from _support import eventually, run
from weft_actors import Client, Engine, activity, workflow
from weft_actors.errors import InvalidRequest, LimitExceeded, PayloadTooLarge, WorkflowCancelled

# -- the app ------------------------------------------------------------------------------

GATE: dict[str, asyncio.Event] = {}
RUNNING: dict[str, int] = {"now": 0, "peak": 0}
STARTED: list[str] = []
THREADS = {"now": 0, "peak": 0}
THREADS_LOCK = threading.Lock()


@activity
async def gated(tag: str) -> str:
    """Counts how many run at once; waits for ``GATE[tag]`` if there is one."""
    STARTED.append(tag)
    RUNNING["now"] += 1
    RUNNING["peak"] = max(RUNNING["peak"], RUNNING["now"])
    try:
        gate = GATE.get(tag)
        if gate is not None:
            await gate.wait()
        else:
            await asyncio.sleep(0.02)
    finally:
        RUNNING["now"] -= 1
    return tag


@activity
def threaded(tag: str) -> str:
    with THREADS_LOCK:
        THREADS["now"] += 1
        THREADS["peak"] = max(THREADS["peak"], THREADS["now"])
    time.sleep(0.02)
    with THREADS_LOCK:
        THREADS["now"] -= 1
    return tag


@activity
async def slow(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@workflow
async def one_slow(ctx, seconds: float) -> float:
    return await ctx.run(slow, seconds)


@workflow
async def one_gated(ctx, tag: str) -> str:
    return await ctx.run(gated, tag)


@workflow
async def one_threaded(ctx, tag: str) -> str:
    return await ctx.run(threaded, tag)


@workflow
async def race_gated(ctx, tag: str) -> list:
    return list(await ctx.race([ctx.run(gated, tag), ctx.wait_signal("win")]))


@workflow
async def parked(ctx) -> object:
    return await ctx.wait_signal("done")


@workflow
async def counts_later(ctx, delay: float, n: int) -> int:
    """Lets its inbox fill for ``delay`` seconds, then takes ``n`` signals ``x``."""
    taken = [0]
    ctx.on_query("taken", lambda: taken[0])
    ctx.on_update("noop", lambda: None)
    await ctx.sleep(delay)
    for _ in range(n):
        await ctx.wait_signal("x")
        taken[0] += 1
    return taken[0]


APP = [one_gated, one_threaded, race_gated, parked, counts_later, one_slow]


@pytest.fixture(autouse=True)
def _reset():
    GATE.clear()
    STARTED.clear()
    RUNNING.update(now=0, peak=0)
    THREADS.update(now=0, peak=0)


# -- payload size and id length -------------------------------------------------------------


def test_payload_limit_refuses_every_kind_of_payload_and_writes_nothing(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, payload_limit=1000) as engine:
            with pytest.raises(PayloadTooLarge, match="workflow arguments is .* bytes; the limit is 1000") as info:
                await engine.start(parked, "x" * 2000, id="big-args")
            assert info.value.limit == 1000 and info.value.size > 1000
            with pytest.raises(PayloadTooLarge):
                await engine.start(parked, id="big-memo", memo="m" * 2000)
            assert engine.store.get_workflow("big-args") is None and engine.store.get_workflow("big-memo") is None
            handle = await engine.start(counts_later, 60, 1, id="small")
            with pytest.raises(PayloadTooLarge, match="signal payload"):
                await handle.signal("x", b"y" * 2000)
            with pytest.raises(PayloadTooLarge, match="update arguments"):
                await handle.update("noop", "z" * 2000)
            with pytest.raises(PayloadTooLarge):
                await engine.signal_with_start(counts_later, 60, 1, signal="x", payload="p" * 2000, id="small")
            assert engine.store.load_inbox("small") == []
            await handle.signal("x", "y" * 900)  # just under the limit
            assert len(engine.store.load_inbox("small")) == 1

    run(main())


def test_workflow_id_is_at_most_256_bytes_counted_in_utf8(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            assert (await engine.start(parked, id="a" * 256)).id == "a" * 256
            assert (await engine.start(parked, id="é" * 128)).id == "é" * 128  # 256 bytes
            for bad in ("a" * 257, "é" * 129):
                with pytest.raises(InvalidRequest, match="at most 256 bytes"):
                    await engine.start(parked, id=bad)
                with pytest.raises(InvalidRequest, match="at most 256 bytes"):
                    await engine.signal_with_start(parked, signal="done", id=bad)

    run(main())


def test_limits_cross_the_wire_as_typed_errors_and_the_supervisor_sets_them(tmp_path):
    args = ("--max-inbox", "3", "--max-live-actors", "1", "--max-active-workflows", "3", "--max-inflight-activities", "2")
    with RunningSupervisor(tmp_path / "data", shards=1, app="test_limits", args=args) as sup, Client(sup.endpoint, timeout=10) as client:
        with pytest.raises(InvalidRequest, match="at most 256 bytes"):
            client.start("parked", id="x" * 300)
        handle = client.start("counts_later", 60, 1, id="c")
        with pytest.raises(PayloadTooLarge):
            handle.update("noop", "z" * (2 << 20))
        with pytest.raises(PayloadTooLarge):
            handle.signal("x", b"y" * (2 << 20))
        for _ in range(3):
            handle.signal("x", 1)
        with pytest.raises(LimitExceeded, match="max_inbox"):
            handle.signal("x", 1)
        busy = [client.start("one_slow", 2.0) for _ in range(3)]  # "c" is parked: evicted for them
        with pytest.raises(LimitExceeded, match="max_active_workflows=3"):
            client.start("parked", id="refused")
        # Shards report stats about once a second.
        stats = wait_until(lambda: (shard := client.stats()["shards"][0]).get("activities_queued") == 1 and shard, timeout=5)
        assert stats["activities_inflight"] == 2
        assert [h.result(timeout=15) for h in busy] == [2.0] * 3
        assert client.start("parked", id="p").id == "p"  # and the next request is served


# -- activities in flight --------------------------------------------------------------------


def test_activities_beyond_the_cap_wait_in_fifo_order_and_all_finish(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, max_inflight_activities=3) as engine:
            handles = [await engine.start(one_gated, f"t{i:02d}", id=f"g{i:02d}") for i in range(12)]
            results = [await h.result(timeout=10) for h in handles]
            assert results == [f"t{i:02d}" for i in range(12)]
            assert RUNNING["peak"] == 3
            assert STARTED == sorted(STARTED)  # first come, first started
            stats = engine.stats()
            assert stats["activities_inflight"] == 0 and stats["activities_queued"] == 0

    run(main())


def test_the_cap_holds_for_thread_activities_too(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, max_inflight_activities=2, max_activity_threads=8) as engine:
            handles = [await engine.start(one_threaded, f"t{i}") for i in range(10)]
            assert [await h.result(timeout=10) for h in handles] == [f"t{i}" for i in range(10)]
            assert THREADS["peak"] == 2

    run(main())


def test_a_queued_attempt_that_loses_a_race_never_runs(tmp_path):
    async def main():
        GATE["hold"] = asyncio.Event()
        async with Engine(str(tmp_path), app=APP, max_inflight_activities=1) as engine:
            holder = await engine.start(one_gated, "hold")
            await eventually(lambda: STARTED == ["hold"])
            racer = await engine.start(race_gated, "queued")
            await eventually(lambda: engine.stats()["activities_queued"] == 1)
            assert engine.stats()["activities_inflight"] == 1
            await racer.signal("win", "signal")
            assert await racer.result(timeout=5) == [1, "signal"]
            assert engine.stats()["activities_queued"] == 1  # dropped lazily, when its turn comes
            GATE["hold"].set()
            assert await holder.result(timeout=5) == "hold"
            await eventually(lambda: engine.stats()["activities_queued"] == 0)
            assert STARTED == ["hold"]  # the cancelled attempt never started
            assert engine.stats()["activities_inflight"] == 0
            assert await (await engine.start(one_gated, "after")).result(timeout=5) == "after"

    run(main())


# -- live actors -----------------------------------------------------------------------------


def test_a_start_beyond_max_active_workflows_is_refused_while_none_can_be_evicted(tmp_path):
    async def main():
        GATE["busy"] = asyncio.Event()
        async with Engine(str(tmp_path), app=APP, max_live_actors=2, max_active_workflows=4) as engine:
            busy = [await engine.start(one_gated, "busy", id=f"b{i}") for i in range(4)]
            with pytest.raises(LimitExceeded, match="max_active_workflows=4") as info:
                await engine.start(parked, id="refused")
            assert info.value.limit == "max_active_workflows"
            assert engine.store.get_workflow("refused") is None
            with pytest.raises(LimitExceeded):
                await engine.signal_with_start(parked, signal="done", id="refused")
            later = await engine.start(parked, id="later", start_delay=0.05)  # no actor until it fires
            GATE["busy"].set()
            assert [await h.result(timeout=5) for h in busy] == ["busy"] * 4
            await eventually(lambda: "later" in engine.actors or "later" in engine.eviction.evicted)
            await later.signal("done", "fired")
            assert await later.result(timeout=5) == "fired"
            # Parked workflows do not block starts: they are evicted to make room.
            waiting = [await engine.start(parked, id=f"p{i}") for i in range(10)]
            assert len(engine.actors) <= 4
            for h in waiting:
                await h.signal("done", h.id)
            assert [await h.result(timeout=5) for h in waiting] == [h.id for h in waiting]

    run(main())


def test_max_active_workflows_must_exceed_max_live_actors(tmp_path):
    with pytest.raises(ValueError, match="max_active_workflows"):
        Engine(str(tmp_path), app=APP, max_live_actors=10, max_active_workflows=10)
    assert Engine(str(tmp_path), app=APP, max_live_actors=300_000).max_active_workflows == 600_000


# -- pending inbox messages --------------------------------------------------------------------


def test_inbox_beyond_max_inbox_refuses_signals_and_updates_until_consumed(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, max_inbox=5) as engine:
            handle = await engine.start(counts_later, 0.5, 8, id="full")
            for i in range(5):
                await handle.signal("x", i)
            with pytest.raises(LimitExceeded, match="5 messages pending in its inbox, its limit \\(max_inbox\\)") as info:
                await handle.signal("x", 5)
            assert info.value.limit == "max_inbox" and info.value.workflow_id == "full"
            with pytest.raises(LimitExceeded):
                await handle.update("noop", request_id="u-1")
            with pytest.raises(LimitExceeded):
                await engine.signal_with_start(counts_later, 0.5, 8, signal="x", id="full")
            assert len(engine.store.load_inbox("full")) == 5  # nothing refused was written
            other = await engine.start(counts_later, 0.5, 1, id="other")
            await other.signal("x", "fine")  # the cap is per workflow
            await eventually(lambda: engine.store.load_inbox("full") == [], timeout=5)
            for i in range(3):
                await handle.signal("x", 5 + i)
            assert await handle.result(timeout=5) == 8
            assert await other.result(timeout=5) == 1

    run(main())


def test_a_full_inbox_still_takes_a_cancel_request(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, max_inbox=2) as engine:
            handle = await engine.start(counts_later, 30, 5, id="c")
            await handle.signal("x", 1)
            await handle.signal("x", 2)
            with pytest.raises(LimitExceeded):
                await handle.signal("x", 3)
            await handle.cancel()
            with pytest.raises(WorkflowCancelled):
                await handle.result(timeout=5)

    run(main())
