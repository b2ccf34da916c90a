"""A finished workflow is freed by reference counting alone: nothing of it waits for the
collector. A shard runs with a raised collector threshold and a frozen heap (``tune_gc``), so a
cycle left per workflow piles up until a full pass, which then stalls the shard for all of
them at once (about 0.7 s per 50,000 workflows: starts refused at half of capacity)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from weft_actors import Engine, activity, workflow
from weft_actors.supervisor._wait_deadlines import WaitDeadlines


@activity
async def add_one(x: int) -> int:
    return x + 1


@workflow
async def three_steps(ctx, x: int) -> int:  # type: ignore[no-untyped-def]
    a = await ctx.run(add_one, x)
    b = await ctx.run(add_one, a)
    return await ctx.run(add_one, b)


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.timeout(60)
def test_finished_workflows_leave_no_cycle_for_the_collector(tmp_path, collector_off) -> None:  # type: ignore[no-untyped-def]
    async def main() -> int:
        async with Engine(store=str(tmp_path / "db"), app=[three_steps]) as engine:
            await asyncio.gather(*(engine.execute(three_steps, i) for i in range(50)))  # warm: caches, imports
            gc.collect()
            results = await asyncio.gather(*(engine.execute(three_steps, i) for i in range(300)))
            assert results == [i + 3 for i in range(300)]
            return gc.collect()

    unreachable = asyncio.run(main())
    assert unreachable == 0, f"{unreachable} objects of 300 finished workflows were left for the collector"


class _Call:
    deadline: float

    def expired(self) -> None:
        pass


@pytest.mark.timeout(10)
def test_a_wait_that_ended_or_ran_out_is_freed_without_the_collector(collector_off) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        deadlines = WaitDeadlines(asyncio.get_running_loop())
        ended, expiring = _Call(), _Call()
        ended_ref, expiring_ref = weakref.ref(ended), weakref.ref(expiring)
        # A call holds its token, as the shard's waiting calls do: the cycle that must not stay.
        ended.token = deadlines.add(ended, 30.0)  # type: ignore[attr-defined]
        expiring.token = deadlines.add(expiring, 0.01)  # type: ignore[attr-defined]
        deadlines.ended(ended.token)  # type: ignore[attr-defined]
        del ended
        await asyncio.sleep(0.05)
        del expiring
        assert ended_ref() is None, "an ended call was kept alive by its wait's entry"
        assert expiring_ref() is None, "an expired call was kept alive by its wait's entry"

    asyncio.run(main())
