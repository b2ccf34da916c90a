"""A client signal's request entry (which drops a resend of it) is kept like an update's
answer: through the run after the one that took it, then it goes at the next continue-as-new.
A workflow that continues as new keeps two runs' worth, however many signals it took."""

from __future__ import annotations

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors.store._keys import prefixed

PER_RUN = 10


@workflow
async def tally(ctx, total: int) -> int:
    for _ in range(PER_RUN):
        total += await ctx.wait_signal("add")
        if total >= 1000:
            return total
    return ctx.continue_as_new(total)


def _request_entries(engine: Engine, wid: str) -> int:
    store = engine.store
    prefix = prefixed(wid)
    with store.env.begin() as txn:
        cursor = txn.cursor(db=store.dbs.requests)
        count = 0
        if cursor.set_range(prefix):
            while cursor.key().startswith(prefix):
                count += 1
                if not cursor.next():
                    break
        return count


@pytest.fixture(params=["lmdb", "postgresql"])
def location(request, tmp_path) -> str:
    if request.param == "lmdb":
        return str(tmp_path)
    return request.getfixturevalue("schema_url")


@pytest.mark.timeout(90)
def test_signal_request_entries_are_pruned_at_continue_as_new(location):
    async def main():
        async with Engine(store=location, app=[tally]) as engine:
            handle = await engine.start(tally, 0, id="tally")
            for i in range(200):
                await handle.signal("add", 1, request_id=f"r{i}")
            await handle.signal("add", 1, request_id="r199")  # a resend of the latest: dropped
            await handle.signal("add", 1000, request_id="fin")
            assert await handle.result(timeout=30) == 1200
            assert (await handle.describe())["status"] == "completed"
            assert _request_entries(engine, "tally") <= 2 * PER_RUN + 1

    run(main())


@workflow
async def slow_taker(ctx, runs: int) -> list:
    if runs < 3:
        await ctx.sleep(0.01)
        return ctx.continue_as_new(runs + 1)
    await ctx.wait_signal("go")
    return [await ctx.wait_signal("add"), await ctx.wait_signal("add")]


def _runs_before(engine: Engine, wid: str) -> int:
    record = engine.store.get_workflow(wid)
    return len(record.get("previous_runs") or ()) if record else 0


@pytest.mark.timeout(90)
def test_a_signal_still_in_the_inbox_keeps_its_entry_across_runs(location):
    async def main():
        async with Engine(store=location, app=[slow_taker]) as engine:
            handle = await engine.start(slow_taker, 0, id="slow")
            await handle.signal("add", "once", request_id="a1")  # waits in the inbox for three runs
            await eventually(lambda: _runs_before(engine, "slow") == 3, timeout=10)
            await handle.signal("add", "twice", request_id="a1")  # a resend: dropped
            await handle.signal("go", None)
            await handle.signal("add", "later", request_id="a2")
            assert await handle.result(timeout=30) == ["once", "later"]
            assert _request_entries(engine, "slow") >= 1

    run(main())
