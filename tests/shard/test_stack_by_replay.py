"""The stack of a running workflow that no live actor of the answering engine runs: evicted
(parked beyond ``max_live_actors``) or held by another engine. It is read from a read-only
replay of its history, as a query of it is answered, with its durable timers; the workflow is
not touched (its claim, epoch and actor table stay as they were)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _support import run
from weft_actors import Engine, workflow
from weft_actors.errors import InvalidRequest
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(30)


@workflow
async def waits_for_go(ctx: Any) -> Any:
    return await ctx.wait_signal("go")


@workflow
async def naps(ctx: Any) -> str:
    await ctx.sleep(3600)
    return "rested"


APP = [waits_for_go, naps]


async def _open(path: str, clock: FakeClock, **options: Any) -> Engine:
    engine = Engine(path, app=options.pop("app", APP), clock=clock, background=False, heartbeat=5.0, ttl=30.0, **options)
    await engine.open()
    return engine


def _waits_on(stack: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert stack[0]["function"] in ("waits_for_go", "naps") and stack[0]["file"].endswith("test_stack_by_replay.py")
    return stack[-1]["waits_on"]


def test_an_evicted_workflow_shows_where_it_waits_without_being_revived(tmp_path):
    async def main() -> None:
        engine = await _open(str(tmp_path), FakeClock(), max_live_actors=1)
        try:
            for wid, body in (("old", waits_for_go), ("napping", naps), ("new", waits_for_go)):
                await engine.start(body, id=wid)
                for _ in range(10):  # its first turn, then the eviction pass
                    await asyncio.sleep(0)
            evicted = set(engine.eviction.evicted)
            assert {"old", "napping"} <= evicted, evicted
            (signal,) = _waits_on(await engine.get_handle("old").stack())
            assert (signal["kind"], signal["name"]) == ("signal", "go")
            (nap,) = _waits_on(await engine.get_handle("napping").stack())
            assert nap["kind"] == "sleep" and nap["timer"] == "sleep" and nap["fire_at"] > 0 and nap["fire_at_iso"]
            assert set(engine.eviction.evicted) == evicted and engine.stats()["revivals_total"] == 0  # untouched
            assert engine.store.get_epoch("old") == 1
        finally:
            await engine.close()

    run(main())


def test_a_workflow_held_by_another_engine_shows_where_it_waits(tmp_path):
    async def main() -> None:
        clock = FakeClock()
        owner = await _open(str(tmp_path), clock)
        other = await _open(str(tmp_path), clock)
        try:
            await owner.start(waits_for_go, id="held")
            for _ in range(10):
                await asyncio.sleep(0)
            assert "held" in owner.actors and "held" not in other.actors
            (signal,) = _waits_on(await other.get_handle("held").stack())
            assert (signal["kind"], signal["name"]) == ("signal", "go")
        finally:
            await other.close()
            await owner.close()

    run(main())


def test_an_engine_that_cannot_replay_it_says_so(tmp_path):
    async def main() -> None:
        clock = FakeClock()
        owner = await _open(str(tmp_path), clock)
        stranger = await _open(str(tmp_path), clock, app=[naps])  # does not know waits_for_go
        try:
            await owner.start(waits_for_go, id="held")
            with pytest.raises(InvalidRequest, match="cannot replay it"):
                await stranger.get_handle("held").stack()
        finally:
            await stranger.close()
            await owner.close()

    run(main())
