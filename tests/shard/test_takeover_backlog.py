"""Taking over a large backlog replays in bounded slices: the taker's loop keeps turning (its
heartbeats, commits and client calls go on), its lease never lapses, and every workflow ends.

Engine A runs ``WORKFLOWS`` workflows of ``STEPS`` activity steps each up to one more activity
that never returns there, and is then abandoned (deposed: it stops without releasing its
claims, and its lock file is free, so B's peer probe finds it gone). B opens on the same
directory and takes the whole backlog over while a ticker on its loop measures how late each
turn comes. Replaying it all in one go blocks the loop for about 1 s here (4.5 s for 16,000
workflows of 60 steps, past the ttl: the taker deposed itself).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.testing import FakeClock

WORKFLOWS = 4000
STEPS = 60
MAX_GAP = 0.4
"""Seconds the loop may stall at most during the takeover (slices are ~20 ms; the bound
leaves room for a loaded machine)."""

HOLD = {"on": False}


@activity
async def step(x: int) -> int:
    return x + 1


@activity
async def hold() -> None:
    if HOLD["on"]:
        await asyncio.sleep(3600)


@workflow
async def backlog(ctx, steps: int) -> int:
    x = 0
    for _ in range(steps):
        x = await ctx.run(step, x)
    await ctx.run(hold)
    return x


APP = [backlog]


class Ticker:
    """Re-armed ``call_later(interval)``: keeps the worst lateness of a loop turn."""

    def __init__(self, interval: float = 0.01) -> None:
        self.loop = asyncio.get_running_loop()
        self.interval = interval
        self.worst = 0.0
        self.due = self.loop.time() + interval
        self.handle = self.loop.call_later(interval, self.tick)

    def tick(self) -> None:
        self.worst = max(self.worst, self.loop.time() - self.due)
        self.due = self.loop.time() + self.interval
        self.handle = self.loop.call_later(self.interval, self.tick)


async def build_backlog(path: str) -> None:
    HOLD["on"] = True
    a = Engine(path, app=APP, probe_peers=False, max_inflight_activities=WORKFLOWS + 1)
    await a.open()
    await asyncio.gather(*(a.start(backlog, STEPS, id=f"b-{i}") for i in range(WORKFLOWS)))
    await eventually(lambda: a.activities.inflight == WORKFLOWS, timeout=60)  # all parked in hold
    a.depose("abandoned by the test")  # claims kept; its lock file is released
    # Its cancelled activity tasks end in the next loop turns: not B's to account for.
    await eventually(lambda: all(task.done() for task in a.activities.tasks), timeout=30)
    HOLD["on"] = False


@pytest.mark.timeout(180)
def test_taking_over_a_large_backlog_keeps_the_loop_turning(tmp_path):
    async def main():
        path = str(tmp_path / "data")
        await build_backlog(path)
        ticker = Ticker()
        b = Engine(path, app=APP, heartbeat=0.2, ttl=1.0)
        started = time.monotonic()
        await b.open()
        opened = time.monotonic() - started
        try:
            lease_left = []

            def all_done() -> bool:
                if b.state != "running":
                    return True
                record = b.store.engines()[b.engine_id]
                lease_left.append(record["expires_at"] - b.clock.lease_now())
                return b.metrics.workflows_completed == WORKFLOWS

            await eventually(all_done, timeout=120)
            ticker.handle.cancel()
            assert opened < MAX_GAP, f"open took {opened:.3f}s"
            assert ticker.worst < MAX_GAP, f"the loop stalled for {ticker.worst:.3f}s"
            assert min(lease_left) > 0
            assert b.state == "running"
            stats = b.stats()
            assert stats["claim_attempts_total"]["takeover"] == WORKFLOWS
            assert stats["drives_queued"] == 0 and stats["claims_active"] == 0
        finally:
            await b.close()

    run(main())



@workflow
async def steps_then_sleep(ctx, steps: int) -> int:
    x = 0
    for _ in range(steps):
        x = await ctx.run(step, x)
    await ctx.sleep(1)
    return x


@pytest.mark.timeout(180)
def test_waking_many_evicted_workflows_at_once_keeps_the_loop_turning(tmp_path):
    """Evicted workflows whose timers fire together are revived by the driver's slices, not
    all in the timer's callback (each revival replays the whole op log)."""

    async def main():
        clock = FakeClock()
        engine = Engine(str(tmp_path / "data"), app=[steps_then_sleep], clock=clock, max_live_actors=100)
        await engine.open()
        try:
            await asyncio.gather(*(engine.start(steps_then_sleep, STEPS, id=f"s-{i}") for i in range(WORKFLOWS)))
            await eventually(lambda: len(engine.eviction.evicted) >= WORKFLOWS - 100, timeout=60)
            ticker = Ticker()
            clock.advance(1.5)  # within the lease (ttl 3), which the fake clock never renews past
            engine.timers.poke()  # every timer is due: the evicted ones revive
            await eventually(lambda: engine.metrics.workflows_completed == WORKFLOWS, timeout=120)
            ticker.handle.cancel()
            assert ticker.worst < MAX_GAP, f"the loop stalled for {ticker.worst:.3f}s"
            assert engine.state == "running"
            assert engine.stats()["revivals_total"] >= WORKFLOWS - 100
        finally:
            await engine.close()

    run(main())
