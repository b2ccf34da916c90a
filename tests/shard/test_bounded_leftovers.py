"""What a finished wait or a finished run leaves behind is bounded: a cancelled in-memory timer
holds no actor until its original fire time, and a chain of runs keeps the update requests of
its last two runs only."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors.shard._actor import Actor

pytestmark = pytest.mark.timeout(30)


@workflow
async def patient(ctx) -> Any:
    return await ctx.wait_signal("go", timeout=86400.0)  # a one-day timeout, nearly always cancelled


def _live_actors() -> int:
    gc.collect()
    return sum(1 for obj in gc.get_objects() if type(obj) is Actor)


def test_a_cancelled_timer_keeps_no_finished_actor_alive(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[patient]) as engine:
            count = 200  # a few times the cancelled entries the heap tolerates (COMPACT_MIN)
            handles = [await engine.start(patient, id=f"p{i}") for i in range(count)]
            await eventually(lambda: all(engine.actors[h.id].run.waiting_signal() == "go" for h in handles))
            assert len(engine.timers) == count
            for handle in handles:
                await handle.signal("go", handle.id)
            for handle in handles:
                assert await handle.result(timeout=5) == handle.id
            assert not engine.actors
            assert _live_actors() == 0  # the heap's cancelled entries hold none of them
            assert len(engine.timers) == 0
            assert engine.timers.heap_size <= 64  # rebuilt whenever cancelled entries dominated

    run(main())


@workflow
async def ledger(ctx, n: int) -> Any:
    state = {"applied": False}

    def add(x: int) -> list[int]:
        state["applied"] = True
        return [n, x]

    ctx.on_update("add", add)
    await ctx.wait_condition(lambda: state["applied"])
    return ctx.continue_as_new(n + 1)


def test_a_chain_of_runs_keeps_the_update_requests_of_its_last_two_runs_only(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=[ledger]) as engine:
            await engine.start(ledger, 0, id="l")
            for i in range(40):
                assert await engine.update("l", "add", i, request_id=f"r{i}") == [i, i]
            await eventually(lambda: engine.store.get_workflow("l")["run_id"] and len(engine.store.get_workflow("l")["previous_runs"]) == 20)
            await eventually(lambda: engine.actors["l"].run.waiting_seq is not None)
            assert engine.store.count("requests") <= 2
            # The last run's answer is kept through the next run: a retry still gets it.
            assert await engine.update("l", "add", 39, request_id="r39") == [39, 39]

    run(main())
