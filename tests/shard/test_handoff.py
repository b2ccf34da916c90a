"""``Engine.hand_off``: a graceful drain to a named successor on the same store (two engines in
one process; on LMDB and on PostgreSQL, ``conftest.ON_BOTH_BACKENDS``).

The heartbeat is long (5 s): a reclaim pass never runs within a test, so a workflow the
successor drives was woken by the handoff, not taken over by a pass.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import pytest

import weft_actors.shard._handoff as handoff_module
from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import EngineStopped, Overloaded

pytestmark = pytest.mark.timeout(60)

OPTIONS: dict[str, Any] = {"heartbeat": 5.0, "ttl": 15.0}
CALLS: collections.Counter[str] = collections.Counter()
GATES: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    CALLS.clear()
    GATES.clear()


@activity
async def gated(tag: str) -> str:
    """Counts its runs; the first waits for ``GATES[tag]`` if the test made one."""
    CALLS[tag] += 1
    gate = GATES.get(tag)
    if gate is not None:
        await gate.wait()
    return f"{tag}:{CALLS[tag]}"


@workflow
async def charge_then_wait(ctx, tag: str) -> list:
    charged = await ctx.run(gated, tag)
    return [charged, await ctx.wait_signal("go")]


@workflow
async def parked(ctx) -> Any:
    return await ctx.wait_signal("go")


@workflow
async def sleeper(ctx, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


APP = [charge_then_wait, parked, sleeper]


def _holder(engine: Engine, wid: str) -> tuple[str, int] | None:
    found = engine.store.get_holder(wid)
    return None if found is None else found[:2]


def test_a_workflow_mid_activity_is_handed_over_and_its_activity_runs_once(tmp_path):
    async def main() -> None:
        async with Engine(str(tmp_path), app=APP, **OPTIONS) as old, Engine(str(tmp_path), app=APP, **OPTIONS) as new:
            GATES["pay"] = asyncio.Event()
            await old.start(charge_then_wait, "pay", id="w")
            await eventually(lambda: CALLS["pay"] == 1)
            epoch = _holder(old, "w")[1]
            task = asyncio.ensure_future(old.hand_off(new, grace=20.0))
            await eventually(lambda: old.starts.handing_off)
            with pytest.raises(Overloaded) as refused:  # new work goes elsewhere meanwhile
                await old.start(parked, id="late")
            assert refused.value.context["reason"] == "handing_off"
            await asyncio.sleep(0.05)
            assert not task.done()  # the running attempt is waited for
            GATES["pay"].set()
            assert await asyncio.wait_for(task, 20) == 1
            assert old.state == "stopped"
            assert _holder(new, "w") == (new.engine_id, epoch + 1)
            ops = new.store.load_ops("w", new.store.get_workflow("w")["run_id"])
            assert any(op.get("kind") == "activity" for op in ops.values())  # its outcome committed before the move
            await eventually(lambda: "w" in new.actors)  # driven on the wake, not at a pass
            await new.signal("w", "go", "ok")
            assert await new.get_handle("w").result(timeout=10) == ["pay:1", "ok"]
            assert CALLS["pay"] == 1  # ran exactly once

    run(main())


def test_parked_workflows_move_in_batches_and_finish_on_the_successor(tmp_path, monkeypatch):
    monkeypatch.setattr(handoff_module, "BATCH", 4)

    async def main() -> None:
        async with Engine(str(tmp_path), app=APP, **OPTIONS) as old, Engine(str(tmp_path), app=APP, **OPTIONS) as new:
            signalled = [f"s{i}" for i in range(6)]
            timed = [f"t{i}" for i in range(3)]
            for wid in signalled:
                await old.start(parked, id=wid)
            for wid in timed:
                await old.start(sleeper, 1.0, id=wid)
            await eventually(lambda: all(wid in old.actors for wid in signalled + timed))
            waiting = asyncio.ensure_future(new.get_handle("s0").result(timeout=20))  # held by ``old`` as it starts to wait
            woken: list[list[str]] = []

            def wake(wids: list[str]) -> None:
                woken.append(wids)
                new.adopt(wids)

            assert await old.hand_off(new.engine_id, grace=5.0, wake=wake) == 9
            assert [len(batch) for batch in woken] == [4, 4, 1]  # more than one batch
            assert old.store is not None and all(_holder(new, wid)[0] == new.engine_id for wid in signalled + timed)
            assert new.store.held_by(old.engine_id) == []
            for wid in signalled:
                await new.signal(wid, "go", wid)
            for wid in signalled:
                assert await new.get_handle(wid).result(timeout=10) == wid
            assert await asyncio.wait_for(waiting, 10) == "s0"  # answered by the successor
            for wid in timed:  # their timers were re-armed by the successor
                assert await new.get_handle(wid).result(timeout=10) == "woke"

    run(main())


def test_a_successor_that_is_gone_falls_back_to_a_release(tmp_path):
    async def main() -> None:
        async with Engine(str(tmp_path), app=APP, **OPTIONS) as old, Engine(str(tmp_path), app=APP, **OPTIONS) as other:
            await old.start(parked, id="w")
            await eventually(lambda: "w" in old.actors)
            assert await old.hand_off("ab" * 16, grace=1.0) == 0
            assert old.state == "stopped"
            assert _holder(other, "w") is None  # released, as at a stop
            assert other.store.released_by(["w"]) == {"w": old.engine_id}
            other.hint()  # a peer's reclaim pass takes it
            await eventually(lambda: _holder(other, "w") is not None and _holder(other, "w")[0] == other.engine_id)
            await other.signal("w", "go", 1)
            assert await other.get_handle("w").result(timeout=10) == 1

    run(main())


def test_calls_on_the_handing_engine_after_it_stopped_are_refused(tmp_path):
    async def main() -> None:
        async with Engine(str(tmp_path), app=APP, **OPTIONS) as old, Engine(str(tmp_path), app=APP, **OPTIONS) as new:
            assert await old.hand_off(new, grace=1.0) == 0
            assert await old.hand_off(new, grace=1.0) is None  # not running any more
            with pytest.raises(EngineStopped):
                await old.start(parked, id="x")

    run(main())
