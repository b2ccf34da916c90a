"""Real supervisor, real shard: a reply settled by a later commit than the call's own (a run's
ending answers ``result`` and ``execute``; an update's answer is committed with its handler's
op) leaves before any user code that commit's batch wakes runs, the ending workflow's
batch-mates' included. Here that code blocks the loop past the client's whole wait; one shard,
so the waiter and the blocking workflow share a loop."""

from __future__ import annotations

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client

APP = "replies_app"
WAIT = 2.0  # the client's wait for a reply (a result's budget is twice that: its wait, then this)
STALL = 3 * WAIT  # the blocking turn holds the loop past the whole budget
HEARTBEAT, TTL = 0.5, 4 * STALL  # never judged hung meanwhile: a restarted shard would answer a result
ENDS_AFTER = 1.0  # the workflow whose ending answers the caller sleeps this long first
HOLD = 1.0  # how long another workflow holds the loop around then (both timers fall inside)
ARGS = ("--heartbeat", str(HEARTBEAT), "--ttl", str(TTL))


@pytest.mark.timeout(60)
def test_a_result_is_answered_before_a_step_of_the_same_batch_blocks_the_loop(either_store):
    with RunningSupervisor(either_store, shards=1, app=APP, args=ARGS) as sup, Client(sup.endpoint, timeout=10) as patient:
        handle = patient.start("ends_beside_a_blocker", ENDS_AFTER, HOLD, STALL)
        with Client(sup.endpoint, timeout=WAIT) as client:
            assert client.get_handle(handle.id).result(timeout=WAIT) == "quick"
        assert sup.process is not None and sup.process.poll() is None


@pytest.mark.timeout(60)
def test_execute_is_answered_before_a_step_of_the_same_batch_blocks_the_loop(either_store):
    with RunningSupervisor(either_store, shards=1, app=APP, args=ARGS) as sup, Client(sup.endpoint, timeout=WAIT) as client:
        assert client.execute("ends_beside_a_blocker", ENDS_AFTER, HOLD, STALL, timeout=WAIT) == "quick"
        assert sup.process is not None and sup.process.poll() is None


@pytest.mark.timeout(60)
def test_an_update_is_answered_before_the_code_its_commit_wakes_blocks_the_loop(either_store):
    with RunningSupervisor(either_store, shards=1, app=APP, args=ARGS) as sup, Client(sup.endpoint, timeout=10) as patient:
        handle = patient.start("slow_condition_after_update", STALL)
        wait_until(lambda: _parked(patient), timeout=10, what="parked on its condition")
        with Client(sup.endpoint, timeout=WAIT) as client:
            assert client.get_handle(handle.id).update("go") == "went"
        assert sup.process is not None and sup.process.poll() is None


def _parked(client: Client) -> bool:
    return sum(shard.get("parked_actors", 0) for shard in client.stats()["shards"]) == 1
