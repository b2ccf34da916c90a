"""While its PostgreSQL server is down, an engine's maintenance pass is retried at the
heartbeat, not in a spin. Before, a peer's lease expiry that had come due while the server
was down kept the pass's wait at zero (the pass that should have moved it on failed): the loop
ran failing passes back to back, a core busy and the loop stalled for as long as the outage
lasted (36k suppressed log lines per 10 s in the fault runs)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from _postgres import PostgresServer, find_bindir
from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors.store._pg import PgStore

HEARTBEAT, TTL = 0.2, 1.0
DOWN = 3.0
"""Seconds the server stays down once the peer's lease has come due."""


@workflow
async def idle(ctx) -> str:
    return "done"


@pytest.mark.timeout(90)
def test_a_peer_expiry_due_while_the_server_is_down_does_not_make_the_pass_spin():
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed")
    with PostgresServer(bindir) as server:
        peer_store = PgStore(server.url)
        peer = uuid.uuid4().hex
        peer_store.register_engine(peer, heartbeat=HEARTBEAT, ttl=TTL)

        async def main() -> None:
            async with Engine(store=server.url, app=[idle], heartbeat=HEARTBEAT, ttl=TTL) as engine:
                await eventually(lambda: engine.maintenance.reclaimer.next_expiry is not None, timeout=5)
                peer_store.close()
                server.stop()  # the peer's lease comes due while nobody can reach the server
                due = engine.maintenance.reclaimer.next_expiry
                assert due is not None
                while engine.clock.lease_now() < due + 0.2:
                    await _turn()
                cpu, started = time.process_time(), time.monotonic()
                while time.monotonic() - started < DOWN:
                    await _turn()
                busy = (time.process_time() - cpu) / DOWN
                server.start()
                assert busy < 0.5, f"the process was busy {busy:.0%} of the outage: the maintenance pass spins"
                await eventually(lambda: engine.stats()["storage"] == "ok" and engine.state == "running", timeout=15)
                assert await (await engine.start(idle, id="after")).result(timeout=10) == "done"

        run(main())


async def _turn() -> None:
    await asyncio.sleep(0.05)
