"""Rebalancing across hosts converges (``shard._membership``): engines on one PostgreSQL store
join and leave, and after each change every parked workflow ends on its preferred engine over
the live ones, each moved at most once for the change, none moved back. Engines in one
process, on real PostgreSQL (``conftest`` routes the store)."""

from __future__ import annotations

from typing import Any

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors._placement import preferred

pytestmark = [pytest.mark.timeout(90), pytest.mark.parametrize("store_backend", ["postgresql"], indirect=True)]

OPTIONS: dict[str, Any] = {"heartbeat": 0.2, "ttl": 15.0}
WORKFLOWS = 30


@workflow
async def parked(ctx) -> Any:
    return await ctx.wait_signal("go")


def moved(*engines: Engine) -> int:
    return sum(engine._host.maintenance.membership.moved for engine in engines)


def acted_on(engine: Engine, live: set[Engine]) -> bool:
    """``engine`` rebalanced over exactly ``live`` and its batches are over."""
    membership = engine._host.maintenance.membership
    task = membership._task
    return membership._acted == frozenset(e.engine_id for e in live) and (task is None or task.done())


def on_preferred(engines: list[Engine], wids: list[str]) -> bool:
    ids = [engine.engine_id for engine in engines]
    store = engines[0].store
    return all((store.get_holder(wid) or (None,))[0] == preferred(wid, ids) for wid in wids)  # None: released, not taken yet


def test_joins_and_leaves_converge_and_move_each_workflow_at_most_once(tmp_path) -> None:
    wids = [f"w{i}" for i in range(WORKFLOWS)]

    async def main() -> None:
        async with Engine(str(tmp_path), app=[parked], **OPTIONS) as a:
            for wid in wids:
                await a.start(parked, id=wid)
            await eventually(lambda: all(wid in a.actors for wid in wids))
            async with Engine(str(tmp_path), app=[parked], **OPTIONS) as b:
                await eventually(lambda: on_preferred([a, b], wids), timeout=15)
                first = [wid for wid in wids if preferred(wid, [a.engine_id, b.engine_id]) == b.engine_id]
                assert first and moved(a) == len(first) and moved(b) == 0  # once each, none back
                async with Engine(str(tmp_path), app=[parked], **OPTIONS) as c:
                    await eventually(lambda: on_preferred([a, b, c], wids), timeout=15)
                    ids = [a.engine_id, b.engine_id, c.engine_id]
                    second = [wid for wid in wids if preferred(wid, ids) == c.engine_id]
                    assert moved(a, b) == len(first) + len(second) and moved(c) == 0
                before = moved(a, b)
                # c left (released its workflows, taken back by the reclaim pass): nothing else moves
                await eventually(lambda: on_preferred([a, b], wids), timeout=15)
                await eventually(lambda: acted_on(a, {a, b}) and acted_on(b, {a, b}), timeout=15)
                assert moved(a, b) == before
                for wid in wids:
                    await a.signal(wid, "go", wid)
                for wid in wids:
                    assert await a.get_handle(wid).result(timeout=15) == wid

    run(main())
