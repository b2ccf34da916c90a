"""Real supervisor, real shards: a start is answered as soon as its commit lands, before the
new workflow's first turn runs. A first turn that blocks the loop (a blocking call in an
``async def`` activity) past the client's wait and past the supervisor's hung judgment must
not turn the committed start into ``OutcomeUnknown`` or a timeout."""

from __future__ import annotations

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client

APP = "quarantine_app"
HEARTBEAT, TTL = 0.2, 1.0
WAIT = 2.0  # the client's wait for an answer
STALL = 2 * TTL + WAIT  # the first attempt holds the loop past both


@pytest.mark.timeout(60)
def test_a_start_whose_first_turn_blocks_the_loop_is_answered_with_its_handle(tmp_path):
    flag = tmp_path / "fixed"
    args = ("--heartbeat", str(HEARTBEAT), "--ttl", str(TTL))
    with RunningSupervisor(tmp_path / "data", app=APP, args=args) as sup, Client(sup.endpoint, timeout=WAIT) as client:
        handle = client.start("poisoned", str(flag), STALL)  # no id: never re-sent, so it must be answered
        assert handle.id and handle.run_id
        flag.touch()  # the fix is deployed: the next owner's attempt returns at once
        with Client(sup.endpoint, timeout=10) as patient:
            wait_until(lambda: _status(patient, handle.id) in ("completed", "quarantined"), timeout=40, what="the workflow ran", interval=0.2)
        assert sup.process is not None and sup.process.poll() is None


def _status(client: Client, wid: str) -> str | None:
    try:
        return client.get_handle(wid).describe()["status"]
    except Exception:  # routed to a shard that is stalled or restarting right now
        return None
