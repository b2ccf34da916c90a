"""A handoff's durable wake (``store._handed``): the handoff transaction marks each workflow
moved for its successor, whose reclaim pass drives what it was never woken for and clears
the marks. Two engines in one process, on LMDB and on PostgreSQL (``conftest``)."""

from __future__ import annotations

from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow

pytestmark = pytest.mark.timeout(60)

OPTIONS: dict[str, Any] = {"heartbeat": 0.5, "ttl": 15.0}


@workflow
async def parked(ctx) -> Any:
    return await ctx.wait_signal("go")


@workflow
async def sleeper(ctx, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


APP = [parked, sleeper]


def test_a_handed_workflow_whose_wake_is_lost_is_driven_by_the_successors_pass(tmp_path):
    async def main() -> None:
        async with Engine(str(tmp_path), app=APP, **OPTIONS) as old, Engine(str(tmp_path), app=APP, **OPTIONS) as new:
            await old.start(parked, id="p")
            await old.start(sleeper, 1.0, id="s")
            await eventually(lambda: "p" in old.actors and "s" in old.actors)
            assert await old.hand_off(new.engine_id, grace=2.0, wake=None) == 2  # no wake at all
            assert new.store.get_holder("p")[0] == new.engine_id
            # Held by a live engine, so no reclaim candidate: only the mark brings it to ``new``.
            await eventually(lambda: "p" in new.actors and "s" in new.actors, timeout=10)
            assert await new.get_handle("s").result(timeout=10) == "woke"  # its timer re-armed
            await new.signal("p", "go", "ok")
            assert await new.get_handle("p").result(timeout=10) == "ok"
            from weft_actors.store import handed_to

            await eventually(lambda: handed_to(new.store, new.engine_id) == [], timeout=5)  # cleared once read

    run(main())


def test_marks_of_a_woken_successor_are_cleared_and_stale_ones_drive_nothing(tmp_path):
    async def main() -> None:
        from weft_actors.store import handed_to

        async with Engine(str(tmp_path), app=APP, **OPTIONS) as old, Engine(str(tmp_path), app=APP, **OPTIONS) as new:
            await old.start(parked, id="p")
            await eventually(lambda: "p" in old.actors)
            assert await old.hand_off(new, grace=2.0) == 1  # woken (``adopt``)
            await eventually(lambda: "p" in new.actors)
            await eventually(lambda: handed_to(new.store, new.engine_id) == [], timeout=5)
            await new.signal("p", "go", 1)
            assert await new.get_handle("p").result(timeout=10) == 1
        async with Engine(str(tmp_path), app=APP, **OPTIONS) as first, Engine(str(tmp_path), app=APP, **OPTIONS) as second:
            await first.start(parked, id="q")
            await eventually(lambda: "q" in first.actors)
            assert await first.hand_off(second.engine_id, grace=2.0, wake=None) == 1
            await second.terminate("q", "ended before its mark was read")
            await eventually(lambda: handed_to(second.store, second.engine_id) == [], timeout=5)
            assert "q" not in second.actors
            assert (await second.describe("q"))["status"] == "terminated"

    run(main())
