"""Real supervisor, real shards: a client call is answered as soon as its commit lands, before
the user code that commit wakes runs. Work that blocks the loop right then (a blocking call in
an ``async def`` activity: a new workflow's first turn, a signalled workflow's next step) past
the client's wait and past the supervisor's hung judgment must not turn the committed call into
``OutcomeUnknown`` or a timeout."""

from __future__ import annotations

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.errors import WeftError

APP = "quarantine_app"
HEARTBEAT, TTL = 0.2, 1.0
WAIT = 2.0  # the client's wait for an answer
STALL = 2 * TTL + WAIT  # the first attempt holds the loop past both


@pytest.mark.timeout(60)
def test_a_start_whose_first_turn_blocks_the_loop_is_answered_with_its_handle(either_store, tmp_path):
    flag = tmp_path / "fixed"
    args = ("--heartbeat", str(HEARTBEAT), "--ttl", str(TTL))
    with RunningSupervisor(either_store, app=APP, args=args) as sup, Client(sup.endpoint, timeout=WAIT) as client:
        handle = client.start("poisoned", str(flag), STALL)  # no id: never re-sent, so it must be answered
        assert handle.id and handle.run_id
        flag.touch()  # the fix is deployed: the next owner's attempt returns at once
        with Client(sup.endpoint, timeout=10) as patient:
            wait_until(lambda: _status(patient, handle.id) in ("completed", "quarantined"), timeout=40, what="the workflow ran", interval=0.2)
        assert sup.process is not None and sup.process.poll() is None


@pytest.mark.timeout(60)
def test_a_signal_whose_workflow_then_blocks_the_loop_is_acknowledged(either_store):
    # Never judged hung meanwhile: a restarted shard would answer the client's resend instead.
    stall = 3 * WAIT
    args = ("--heartbeat", str(HEARTBEAT), "--ttl", str(4 * stall))
    with RunningSupervisor(either_store, app="replies_app", args=args) as sup, Client(sup.endpoint, timeout=10) as patient:
        handle = patient.start("blocks_after_signal", stall)
        wait_until(lambda: _waits_for_signal(patient), timeout=10, what="parked on its signal")
        with Client(sup.endpoint, timeout=WAIT) as client:
            client.get_handle(handle.id).signal("go")  # its owner takes it in the append's commit, then blocks
        assert sup.process is not None and sup.process.poll() is None


def _status(client: Client, wid: str) -> str | None:
    try:
        return client.get_handle(wid).describe()["status"]
    except (WeftError, TimeoutError):  # routed to a shard that is stalled or restarting right now
        return None


def _waits_for_signal(client: Client) -> bool:
    """Its actor is parked (on ``wait_signal``, which records nothing until it resolves)."""
    return sum(shard.get("parked_actors", 0) for shard in client.stats()["shards"]) == 1
