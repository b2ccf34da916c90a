"""A live engine takes over a stalled peer's workflows as soon as the peer's lease expires,
not at its own next heartbeat: its maintenance loop wakes at the first peer expiry it knows
of. Up to a heartbeat was lost in each takeover after a stall before (the phase between the
peer's expiry and the taker's next pass).

The peer is a registration with a short lease that nobody renews (its lock file is held by
this very process, so it never looks gone: only its lease can end it). The taker's own
heartbeat is longer than the whole wait the test allows.
"""

from __future__ import annotations

import time
import uuid

import pytest

from _support import eventually, run
from weft_actors import Engine, workflow
from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow

pytestmark = pytest.mark.timeout(60)

TAKER_HEARTBEAT = 4.0
PEER_HEARTBEAT, PEER_TTL = 0.1, 0.3  # expires 0.5 s after it registers (ttl + 2 x heartbeat)
WITHIN = 2.0
"""Seconds from the peer's registration to the workflow's end: the expiry (0.5 s) and slack
for a loaded machine, and well short of the taker's next heartbeat."""


@workflow
async def stranded(ctx) -> str:
    return "done"


def test_a_stalled_peers_workflow_is_taken_over_when_its_lease_expires(tmp_path) -> None:
    async def main() -> None:
        taker = Engine(str(tmp_path / "data"), app=[stranded], heartbeat=TAKER_HEARTBEAT, ttl=3 * TAKER_HEARTBEAT)
        await taker.open()
        try:
            store = taker.store
            peer = uuid.uuid4().hex
            registered = time.monotonic()
            store.register_engine(peer, heartbeat=PEER_HEARTBEAT, ttl=PEER_TTL)
            (created,) = store.apply(peer, [CreateWorkflow("stranded-1", "stranded", encode_args(()), uuid.uuid4().hex)])
            assert isinstance(created, Created) and created.status == "running"
            taker.maintenance.hint()  # a pass that learns of the peer (as a heartbeat would)
            await eventually(lambda: (store.get_workflow("stranded-1") or {}).get("status") == "completed", timeout=WITHIN + 5)
            took = time.monotonic() - registered
            assert took < WITHIN, f"taken over {took:.2f} s after the peer registered"
            assert took >= PEER_TTL + 2 * PEER_HEARTBEAT - 0.05  # not before its lease ran out
        finally:
            await taker.close()

    run(main())
