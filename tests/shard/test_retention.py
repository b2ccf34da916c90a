"""Retention on an engine, on a fake clock: the maintenance pass prunes the op log and leftover
inbox of workflows that finished longer ago than ``retention``; records, results, listing and
claim epochs stay; a backlog is worked off over later passes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _support import run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import WorkflowClosed
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(30)

STEP = 10.0  # clock step between passes; the lease (ttl 30) outlives it


@activity
async def double(x: int) -> int:
    return 2 * x


@workflow
async def doubler(ctx, x: int) -> int:
    state = {"seen": None}
    ctx.on_query("seen", lambda: state["seen"])
    state["seen"] = await ctx.wait_signal("go")
    return await ctx.run(double, x)


def new_engine(path: Any, clock: FakeClock, **options: Any) -> Engine:
    return Engine(str(path), app=[doubler], clock=clock, background=False, heartbeat=STEP, ttl=3 * STEP, **options)


async def settle(turns: int = 10) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def finished(engine: Engine, wid: str, x: int) -> None:
    await engine.start(doubler, x, id=wid)
    await engine.signal(wid, "unread", "left over")  # before "go": the run ends soon after that
    await engine.signal(wid, "go", x)
    assert await engine.get_handle(wid).result(timeout=5) == 2 * x


def pass_time(engine: Engine, clock: FakeClock, seconds: float) -> None:
    """Advance in heartbeat-sized steps, running the maintenance pass after each."""
    for _ in range(int(seconds // STEP)):
        clock.advance(STEP)
        engine.tick()


def test_history_is_pruned_after_the_retention_and_the_record_and_result_stay(tmp_path):
    async def main():
        clock = FakeClock()
        engine = new_engine(tmp_path, clock, retention=100.0, prune_interval=STEP)
        async with engine:
            await finished(engine, "done", 21)
            handle = engine.get_handle("done")
            before = await handle.describe()
            assert [op["kind"] for op in before["history"]] == ["signal", "activity"]
            assert [m["name"] for m in before["inbox"]] == ["unread"]
            assert await handle.query("seen") == 21

            pass_time(engine, clock, 90)
            assert len((await handle.describe())["history"]) == 2

            pass_time(engine, clock, 20)
            after = await handle.describe()

            assert after["history"] == [] and after["inbox"] == []
            assert after["history_pruned"] == pytest.approx(clock.now(), abs=STEP + 1e-3)
            assert (after["status"], after["result"], after["epoch"]) == ("completed", 42, before["epoch"])
            assert await handle.result(timeout=1) == 42
            assert engine.store.get_epoch("done") == 1
            assert [i["id"] for i in (await engine.list(status="completed"))["items"]] == ["done"]
            with pytest.raises(WorkflowClosed):  # replaying no history would give a wrong answer
                await handle.query("seen")
            assert engine.stats()["histories_pruned_total"] == 1

    run(main())


def test_running_workflows_are_never_pruned(tmp_path):
    async def main():
        clock = FakeClock()
        engine = new_engine(tmp_path, clock, retention=0.0, prune_interval=STEP)
        async with engine:
            await engine.start(doubler, 1, id="parked")
            await engine.signal("parked", "unread", "kept")
            pass_time(engine, clock, 50)

            described = await engine.get_handle("parked").describe()
            assert described["status"] == "running"
            assert [m["name"] for m in described["inbox"]] == ["unread"]
            await engine.signal("parked", "go", 5)
            assert await engine.get_handle("parked").result(timeout=5) == 2

    run(main())


def test_a_backlog_is_worked_off_over_the_following_passes(tmp_path, monkeypatch):
    monkeypatch.setattr("weft_actors.shard._maintenance.HISTORY_BATCH", 3)
    monkeypatch.setattr("weft_actors.shard._maintenance.HISTORY_BUDGET", 0.0)

    async def main():
        clock = FakeClock()
        engine = new_engine(tmp_path, clock, retention=5.0, prune_interval=1000.0)
        async with engine:
            for i in range(6):
                await finished(engine, f"w{i}", i)
            await settle()
            clock.advance(STEP)
            engine.maintenance.prune()  # the interval's pass: one bounded transaction

            pruned = engine.stats()["histories_pruned_total"]
            assert 0 < pruned < 6
            for _ in range(10):  # later passes, long before the next interval
                engine.tick()
            assert engine.stats()["histories_pruned_total"] == 6
            for i in range(6):
                assert (await engine.get_handle(f"w{i}").describe())["history"] == []

    run(main())


def test_default_retention_is_seven_days_and_negative_is_refused(tmp_path):
    assert Engine(str(tmp_path), app=[doubler]).retention == 7 * 86400
    with pytest.raises(ValueError):
        Engine(str(tmp_path), app=[doubler], retention=-1)
