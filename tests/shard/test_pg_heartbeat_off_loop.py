"""On PostgreSQL an engine's heartbeat waits for the store's write lock in a thread of its own:
while another session holds the lock (a stalled holder: a stopped backend, a slow peer), the
engine's loop keeps turning. Before, the heartbeat waited on the loop, which then stopped for
as long as the holder held on: under load a shard whose own heartbeat transaction was caught
by a stopped backend was killed as hung (``test_pg_stopped_own_backend``), and every workflow
of the engine waited meanwhile."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest

from _support import eventually, run
from weft_actors import Engine, workflow

HOLD = 1.5
"""Seconds an outside session holds the write lock: under the waiters' 2 s bound on an idle
holder (they end it past that), and six heartbeats long."""


@workflow
async def idle(ctx) -> str:
    return "done"


def _hold_the_lock(url: str, lock_key: int, held: threading.Event, let_go: threading.Event) -> None:
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (lock_key,))
        held.set()
        let_go.wait(HOLD + 5)
        holder.execute("SELECT pg_advisory_unlock(%s)", (lock_key,))


@pytest.mark.timeout(60)
def test_a_heartbeat_waiting_for_the_write_lock_leaves_the_loop_turning(schema_url):
    async def main() -> None:
        async with Engine(store=schema_url, app=[idle], heartbeat=0.25, ttl=10.0) as engine:
            lock_key = engine.store.env.lock_key
            loop = asyncio.get_running_loop()
            beats = engine.store.engines()[engine.engine_id]["expires_at"]
            held, let_go = threading.Event(), threading.Event()
            holder = threading.Thread(target=_hold_the_lock, args=(schema_url, lock_key, held, let_go))
            holder.start()  # a thread of its own: the loop's stalls cannot stretch the hold
            try:
                assert await loop.run_in_executor(None, held.wait, 10)
                worst = 0.0
                until = time.monotonic() + HOLD
                while time.monotonic() < until:
                    due = loop.time() + 0.01
                    await asyncio.sleep(0.01)
                    worst = max(worst, loop.time() - due)
            finally:
                let_go.set()
                await loop.run_in_executor(None, holder.join, 10)
            assert worst < 0.5, f"the loop stood still for {worst:.2f} s behind the heartbeat's wait"
            # the heartbeat took the lock once it was free: the lease goes on
            await eventually(lambda: engine.store.engines()[engine.engine_id]["expires_at"] > beats + HOLD, timeout=5)
            assert engine.state == "running"
            assert await (await engine.start(idle, id="after")).result(timeout=5) == "done"

    run(main())
