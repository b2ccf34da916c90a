"""Through the real supervisor: blame lands on the workflow that stalls a shard, and only on
it. A blocking activity among 20 long-running workflows on 3 shards is quarantined after its
first stall (its shard killed as hung once), and each neighbour's activity runs at most twice
(once more on the taker of the killed shard's workflows, never again after that)."""

from __future__ import annotations

import time

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.errors import ServerUnavailable

APP = "blame_app"
HEARTBEAT, TTL = 0.2, 1.0
ARGS = ("--heartbeat", str(HEARTBEAT), "--ttl", str(TTL))
STALL = 6.0  # far past ttl + 2 heartbeats: the shard is killed as hung while it blocks
LONG = 8.0  # each neighbour's activity is in flight through the stall and the takeover


def _status(client: Client, wid: str) -> str | None:
    try:
        return client.get_handle(wid).describe()["status"]
    except (ServerUnavailable, TimeoutError):  # routed to a shard that is stalled right now
        return None


def _runs(path) -> int:
    try:
        return len(path.read_text().splitlines())
    except FileNotFoundError:
        return 0


@pytest.mark.timeout(120)
def test_a_blocking_activity_among_20_neighbours_is_quarantined_at_its_first_stall(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    with RunningSupervisor(tmp_path / "data", shards=3, app=APP, args=ARGS) as sup, Client(sup.endpoint, timeout=10) as client:
        neighbours = [client.start("long_running", str(runs / f"n-{i}"), LONG, id=f"n-{i}") for i in range(20)]
        wait_until(lambda: all(_runs(runs / f"n-{i}") >= 1 for i in range(20)), timeout=20, what="every neighbour's activity running")
        # Its first attempt may block the loop before the start's reply leaves: only a start
        # that is safe to send again (a fixed id, if_exists="return") is re-sent to another shard.
        poison = client.start("blocker", STALL, id="poison", if_exists="return")
        assert poison.id == "poison"
        wait_until(lambda: _status(client, "poison") == "quarantined", timeout=40, what="quarantined", interval=0.2)
        described = client.get_handle("poison").describe()
        assert described["lost_owners"]["count"] == 1
        assert described["lost_owners"]["reason"] == "op #0 activity 'blocks'"
        for handle in neighbours:
            assert handle.result(timeout=40) == "done"
            assert client.get_handle(handle.id).describe()["lost_owners"] is None  # never charged
        counts = {f"n-{i}": _runs(runs / f"n-{i}") for i in range(20)}
        assert max(counts.values()) <= 2, counts  # taken over at most once
        assert any(count == 2 for count in counts.values()), counts  # the stalled shard held some
        time.sleep(2 * TTL)  # parked for good: nothing stalls or restarts any more
        assert _status(client, "poison") == "quarantined"
        assert client.stats()["supervisor"]["restarts"] == 1  # the one shard killed as hung
        assert sup.process.poll() is None


def _owner_pid(client: Client, wid: str) -> int | None:
    """The pid of the shard that holds ``wid`` now (None while it has no live owner)."""
    try:
        owner = client.get_handle(wid).describe().get("owner")
        shards = client.stats()["shards"]
    except (ServerUnavailable, TimeoutError):
        return None
    for shard in shards:
        if owner is not None and shard.get("engine_id") == owner and shard.get("alive"):
            return shard["pid"]
    return None


@pytest.mark.timeout(120)
def test_owners_killed_from_outside_during_a_long_activity_charge_the_workflow_nothing(tmp_path):
    """Item 2's innocent workflow: its owner is SIGKILLed three times (an OOM killer, an
    operator) while its activity waits: nothing of its code was on the loop, so no death is
    charged to it; it is not quarantined, and it completes."""
    import os
    import signal

    runs = tmp_path / "runs"
    runs.mkdir()
    with RunningSupervisor(tmp_path / "data", shards=2, app=APP, args=ARGS) as sup, Client(sup.endpoint, timeout=10) as client:
        handle = client.start("long_running", str(runs / "innocent"), 3.0, id="innocent")
        killed: list[int] = []
        for kill in range(3):
            wait_until(lambda: _runs(runs / "innocent") > kill, timeout=30, what=f"its activity running (run {kill + 1})")
            pid = wait_until(lambda: _owner_pid(client, "innocent"), timeout=30, what="its owner's pid")
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            wait_until(lambda: _owner_pid(client, "innocent") not in (None, *killed) or _status(client, "innocent") not in (None, "running"), timeout=30, what="a new owner", interval=0.1)
            assert _status(client, "innocent") in (None, "running")  # never quarantined
        assert handle.result(timeout=40) == "done"
        described = client.get_handle("innocent").describe()
        assert described["status"] == "completed" and described["lost_owners"] is None
        assert sup.process.poll() is None
