"""A jump of the wall clock, either way, deposes no engine and fires no timer early.

Leases are judged on the lease clock (``Clock.lease_now``: ``CLOCK_BOOTTIME`` on Linux, one
per machine and blind to wall-clock jumps); timers and ``ctx.now()`` keep wall time. On the
original code a +60 s jump expired every engine at its next commit (each then refused every
write as ``EngineDeposed``) and let its peers take over all its workflows.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from _support import run
from weft_actors import Engine, workflow
from weft_actors._clock import SystemClock, system_lease_clock
from weft_actors.store import LmdbStore
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(30)

HB, TTL = 0.5, 3.0


@workflow
async def sleeper(ctx, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


@workflow
async def parked(ctx) -> Any:
    return await ctx.wait_signal("go")


APP = [sleeper, parked]


async def settle(turns: int = 10) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def _open(path: Any, clock: FakeClock) -> Engine:
    engine = Engine(str(path), app=APP, clock=clock, background=False, heartbeat=HB, ttl=TTL)
    await engine.open()
    return engine


def _heartbeats(clock: FakeClock, engines: list[Engine], seconds: float) -> None:
    """Let ``seconds`` pass on every clock, a heartbeat at a time, each engine heartbeating."""
    for _ in range(round(seconds / HB)):
        clock.advance(HB)
        for engine in engines:
            engine.tick()


@pytest.mark.parametrize("jump", [60.0, -60.0])
def test_a_wall_clock_jump_deposes_no_engine_and_moves_no_workflow(tmp_path, jump):
    async def main() -> None:
        clock = FakeClock()
        a, b = await _open(tmp_path, clock), await _open(tmp_path, clock)
        try:
            for i in range(6):
                await a.start(parked, id=f"p{i}")
            await settle()
            held = {f"p{i}": a.store.get_holder(f"p{i}")[:2] for i in range(6)}

            clock.jump(jump)  # NTP, an operator, a resumed VM: the wall clock alone moves
            _heartbeats(clock, [a, b], 2 * TTL)

            assert a.state == "running" and b.state == "running"
            records = a.store.engines()
            assert records[a.engine_id]["state"] == "live" and records[b.engine_id]["state"] == "live"
            assert {wid: a.store.get_holder(wid)[:2] for wid in held} == held  # nobody took over
            for i in range(6):
                await a.get_handle(f"p{i}").signal("go", i)
            await settle(40)
            for i in range(6):
                assert await a.get_handle(f"p{i}").result(timeout=1) == i
        finally:
            await b.close()
            await a.close()

    run(main())


def test_a_backward_jump_never_fires_a_timer_early_and_a_forward_one_keeps_wall_time(tmp_path):
    async def main() -> None:
        clock = FakeClock()
        a = await _open(tmp_path, clock)
        try:
            await a.start(sleeper, 100.0, id="late")
            await settle()
            clock.jump(-60.0)
            _heartbeats(clock, [a], 100.0)  # 100 s passed; the wall clock says 40 s
            assert a.store.get_workflow("late")["status"] == "running"
            assert a.state == "running"
            _heartbeats(clock, [a], 60.0)  # the wall clock reaches the timer's time
            await settle(40)
            assert await a.get_handle("late").result(timeout=1) == "woke"

            await a.start(sleeper, 100.0, id="wall")
            await settle()
            clock.jump(60.0)  # timers are wall-clock times, as users set them
            _heartbeats(clock, [a], 40.0)
            await settle(40)
            assert await a.get_handle("wall").result(timeout=1) == "woke"
            assert a.state == "running"
        finally:
            await a.close()

    run(main())


def test_the_system_lease_clock_is_boottime_and_every_record_names_it(tmp_path):
    clock = SystemClock()
    assert time.clock_gettime(time.CLOCK_BOOTTIME) <= clock.lease_now() <= time.clock_gettime(time.CLOCK_BOOTTIME)
    assert clock.lease_clock == system_lease_clock() and clock.lease_clock.startswith("boottime:")
    store = LmdbStore(str(tmp_path / "db"))
    try:
        store.register_engine("ab" * 8, heartbeat=HB, ttl=TTL)
        record = store.engine("ab" * 8)
        assert record["lease_clock"] == clock.lease_clock
        assert clock.lease_now() < record["expires_at"] <= clock.lease_now() + TTL
    finally:
        store.close()
