"""An engine blocked on the store's write lock (another process stalled inside a transaction)
is not stalled itself: when the lock is granted, past what would have been its expiry, it is
still running, not deposed, and its workflows go on. On a fake clock, with another thread
holding the lock; the engine's loop thread (the test's) blocks on it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from _support import hold_write_lock, run
from weft_actors import Engine, workflow
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(30)

HB, TTL = 0.5, 3.0
PAST_EXPIRY = 10.0


@workflow
async def waiter(ctx) -> str:
    return await ctx.wait_signal("go")


def _advance_once_blocked(env, clock: FakeClock, blocked: threading.Thread):
    """Hold the write lock; once ``blocked`` waits for it, run the clock past expiry and let
    go. Returns the thread doing that and the lock's context (exit it to release)."""
    hold = hold_write_lock(env)
    wait_blocked = hold.__enter__()

    def advance() -> None:
        try:
            wait_blocked(blocked)
            clock.advance(PAST_EXPIRY)
        finally:
            hold.__exit__(None, None, None)

    thread = threading.Thread(target=advance, daemon=True)
    thread.start()
    return thread


def _engine(path, clock: FakeClock) -> Engine:
    return Engine(str(path), app=[waiter], clock=clock, heartbeat=HB, ttl=TTL, background=False, probe_peers=False)


def test_a_heartbeat_blocked_on_the_write_lock_past_expiry_does_not_depose_the_engine(tmp_path):
    async def main() -> None:
        clock = FakeClock()
        engine = _engine(tmp_path, clock)
        await engine.open()
        try:
            handle = await engine.start(waiter, id="w")
            helper = _advance_once_blocked(engine.store.env, clock, threading.current_thread())
            engine.tick()  # its heartbeat waits for the lock while the clock runs 10 s
            helper.join(10)
            assert engine.state == "running"
            await engine.signal("w", "go", "still mine")
            assert await handle.result(timeout=5) == "still mine"
            assert (await handle.describe())["epoch"] == 1
        finally:
            await engine.close()

    run(main())


def test_a_group_commit_blocked_on_the_write_lock_past_expiry_is_applied(tmp_path):
    async def main() -> None:
        clock = FakeClock()
        engine = _engine(tmp_path, clock)
        await engine.open()
        try:
            handle = await engine.start(waiter, id="w")
            await asyncio.sleep(0)
            helper = _advance_once_blocked(engine.store.env, clock, threading.current_thread())
            await engine.signal("w", "go", "committed")  # its commit waits for the lock
            helper.join(10)
            assert engine.state == "running"
            assert await handle.result(timeout=5) == "committed"
            engine.tick()  # the lease was carried by that commit
            assert engine.state == "running"
        finally:
            await engine.close()

    run(main())
