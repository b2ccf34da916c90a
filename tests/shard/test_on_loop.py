"""The "on the loop now" record: an engine records in its loop slot which workflow's code runs
on its loop (a workflow turn, a query, a step of an ``async def`` activity); its watchdog
names that code in the slot's shared file while it holds the loop, and nothing while the loop
turns or a plain ``def`` activity runs in a thread; the stall note is made from it, so it
names the workflow, run, op and activity exactly."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from _support import eventually, run
from weft_actors import ActivityInfo, Engine, activity, workflow
from weft_actors.store import loop_slot_path, read_loop_slot

RELEASE = threading.Event()


@activity
async def blocks_the_loop(seconds: float) -> str:
    await asyncio.sleep(0.01)  # a step after a suspension blocks too: each step is published
    time.sleep(seconds)
    return "woke"


@activity
def waits_in_a_thread() -> str:
    RELEASE.wait(10)
    return "released"


@workflow
async def stalls_in_an_activity(ctx, seconds: float):
    await ctx.sleep(0.01)
    return await ctx.run(blocks_the_loop, seconds)


@workflow
async def stalls_in_workflow_code(ctx, seconds: float):
    await ctx.sleep(0.01)
    time.sleep(seconds)
    return "done"


@workflow
async def slow_to_query(ctx):
    def state(seconds: float) -> str:
        time.sleep(seconds)
        return "queried"

    ctx.on_query("state", state)
    return await ctx.run(waits_in_a_thread)


APP = [stalls_in_an_activity, stalls_in_workflow_code, slow_to_query]


class _Kept:
    """The engine's own stall notes, with every note it wrote kept for the test to read
    (the engine removes a note at its next heartbeat)."""

    def __init__(self, notes) -> None:
        self.notes = notes
        self.written: list[dict] = []

    def write(self, note: dict) -> None:
        self.written.append(note)
        self.notes.write(note)

    def clear(self) -> None:
        self.notes.clear()


def _watching(engine: Engine) -> _Kept:
    kept = _Kept(engine.watchdog.notes)
    engine.watchdog.notes = kept
    return kept


@pytest.mark.timeout(30)
def test_a_stall_note_names_the_activity_step_on_the_loop_from_the_slot(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, stall_threshold=0.2, heartbeat=1.0, ttl=5.0) as engine:
            kept = _watching(engine)
            slot = loop_slot_path(engine.store.path, engine.engine_id)
            assert read_loop_slot(slot) is None  # idle
            handle = await engine.start(stalls_in_an_activity, 0.8, id="stuck-a")
            assert await handle.result(timeout=10) == "woke"
            await eventually(lambda: kept.written, timeout=5)
            [note] = kept.written
            assert (note["wid"], note["run_id"], note["kind"], note["name"], note["seq"]) == ("stuck-a", handle.run_id, "activity", "blocks_the_loop", 1)
            assert note["held"] >= 0.2 and note["stalled"] >= 0.2
            await eventually(lambda: read_loop_slot(slot) is None, timeout=5)  # cleared once the loop turns

    run(main())


@pytest.mark.timeout(30)
def test_workflow_code_and_a_query_handler_are_named_and_a_thread_activity_is_not(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, stall_threshold=0.2, heartbeat=1.0, ttl=5.0) as engine:
            kept = _watching(engine)
            slot = loop_slot_path(engine.store.path, engine.engine_id)
            handle = await engine.start(stalls_in_workflow_code, 0.6, id="stuck-w")
            assert await handle.result(timeout=10) == "done"
            await eventually(lambda: kept.written, timeout=5)
            assert [(n["wid"], n["kind"], n["seq"]) for n in kept.written] == [("stuck-w", "workflow code", 1)]
            RELEASE.clear()
            slow = await engine.start(slow_to_query, id="slow")
            await eventually(lambda: read_loop_slot(slot) is None, timeout=5)
            await asyncio.sleep(0.3)  # its plain activity runs in a thread: the loop stays free
            assert read_loop_slot(slot) is None
            assert await engine.query("slow", "state", 0.6) == "queried"
            await eventually(lambda: len(kept.written) == 2, timeout=5)
            assert (kept.written[1]["wid"], kept.written[1]["kind"], kept.written[1]["name"]) == ("slow", "query", "state")
            RELEASE.set()
            assert await slow.result(timeout=10) == "released"

    run(main())


@pytest.mark.timeout(30)
def test_code_that_comes_on_late_in_a_stall_of_engine_code_is_not_named(tmp_path):
    """A stall of the engine's own code (a large replay, a big commit) names nobody, though a
    step of user code comes on just as the stall crosses the threshold: the slot says how long
    that piece itself held the loop, not how long since the loop last turned. (Before, such a
    step was noted as holding the loop for the whole stall, and a takeover quarantined it.)"""

    async def main():
        async with Engine(str(tmp_path), app=APP, stall_threshold=0.5, heartbeat=1.0, ttl=5.0) as engine:
            kept = _watching(engine)
            slot = engine.activities.on_loop
            assert slot is not None
            step = ActivityInfo("k", "innocent", "run-1", 3, 1, "quick")
            time.sleep(0.45)  # engine code: nobody's on the loop
            slot.current = step  # a step comes on as the stall passes the threshold ...
            time.sleep(0.3)  # ... and holds the loop for less than it
            slot.current = None
            await asyncio.sleep(0.3)
            assert engine.watchdog.stalls == 1  # the stall was seen
            assert kept.written == []
            time.sleep(0.1)  # a step that holds the loop past the threshold itself is named
            slot.current = step
            time.sleep(0.8)
            slot.current = None
            await eventually(lambda: kept.written, timeout=5)
            [note] = kept.written
            assert (note["wid"], note["kind"], note["name"], note["seq"]) == ("innocent", "activity", "quick", 3)
            assert 0.5 <= note["held"] <= 0.8

    run(main())
