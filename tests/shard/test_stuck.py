"""A workflow whose replay diverges from its history after a code change is ``stuck``: a
status in the store (listed, counted, kept across restarts) with the divergence in
``describe``; the next owner that replays it with code that fits makes it ``running`` again.
Real engines on one store, the code changed between them (two apps of one workflow name)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.admin import replay_history
from weft_actors.history import export_history
from weft_actors.store import check_store, open_store

pytestmark = pytest.mark.timeout(60)


@activity
async def step(tag: str) -> str:
    return tag


@workflow(name="shifting")
async def shifting_v1(ctx) -> str:
    first = await ctx.run(step, "a")
    await ctx.wait_signal("go")
    return first


@workflow(name="shifting")
async def shifting_fails(ctx) -> str:
    await ctx.run(step, "a")
    raise ValueError("the fix gives up")


@workflow(name="shifting")
async def shifting_v2(ctx) -> str:
    await ctx.sleep(1)  # where v1 ran an activity: replay diverges at op #0
    await ctx.wait_signal("go")
    return "v2"


async def _described_when(engine: Engine, wid: str, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while not done(described := await engine.get_handle(wid).describe()):
        assert time.monotonic() < deadline, f"never: {described['status']} {described['nondeterminism']}"
        await asyncio.sleep(0.01)
    return described


def test_a_diverging_replay_is_stuck_listed_counted_kept_and_cleared_by_code_that_replays(tmp_path, store_backend):
    async def main():
        async with Engine(str(tmp_path), app=[shifting_v1]) as engine:
            await engine.start("shifting", id="s-1")
            await engine.start("shifting", id="s-2")
            await eventually(lambda: all(engine.actors[w].run.waiting_signal() == "go" for w in ("s-1", "s-2") if w in engine.actors) and len(engine.actors) == 2)
        async with Engine(str(tmp_path), app=[shifting_v2]) as engine:  # a deploy whose code diverges
            described = await _described_when(engine, "s-1", lambda d: d["status"] == "stuck")
            assert "activity 'step'" in described["nondeterminism"] and "sleep" in described["nondeterminism"]
            await _described_when(engine, "s-2", lambda d: d["status"] == "stuck")
            assert sorted(item["id"] for item in (await engine.list(status="stuck"))["items"]) == ["s-1", "s-2"]
            assert (await engine.list(status="running"))["items"] == []
            assert engine.stats()["stuck_workflows"] == 2
        if store_backend == "lmdb":  # released stuck workflows are consistent: ownerless, to be retried
            assert [p for p in check_store(str(tmp_path), time.time())] == []
            # Checking a fix before deploying it: a stuck run has not ended, so a fix that fails it
            # is what replay expects, not a divergence.
            store = open_store(str(tmp_path), readonly=True)
            try:
                recorded = export_history(store, "s-1")
            finally:
                store.close()
            report = replay_history(recorded, [shifting_fails])
            assert (report["status"], report["ok"], report["next"]) == ("stuck", True, "fail")
        async with Engine(str(tmp_path), app=[shifting_v2]) as engine:  # still the wrong code: stuck again
            described = await _described_when(engine, "s-1", lambda d: d["status"] == "stuck" and d["owner"] == engine.engine_id)
            assert "activity 'step'" in described["nondeterminism"]
        async with Engine(str(tmp_path), app=[shifting_v1]) as engine:  # the fix: it replays, and runs on
            described = await _described_when(engine, "s-1", lambda d: d["status"] == "running" and d["owner"] == engine.engine_id)
            assert described["nondeterminism"] is None
            assert (await engine.list(status="stuck"))["items"] == []
            assert engine.stats()["stuck_workflows"] == 0
            await engine.get_handle("s-1").signal("go")
            assert await engine.get_handle("s-1").result(timeout=5) == "a"
            await engine.get_handle("s-2").terminate("done with it")
        if store_backend == "lmdb":  # the counts followed every move (stuck, running again)
            assert [p for p in check_store(str(tmp_path), time.time())] == []

    run(main())
