"""Real supervisor, real shards: one poison workflow (a blocking call in an async activity)
deposes its owner and is quarantined at that first stall; the supervisor stays up, other workflows complete,
and the quarantined one is terminated, or lifted with `retry` once its code is fixed. A
workflow calling sys.exit() fails alone and no shard restarts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from _processes import TESTS, RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.errors import ServerUnavailable, WeftError, WorkflowFailed, WorkflowTerminated

APP = "quarantine_app"
HEARTBEAT, TTL = 0.2, 1.0
ARGS = ("--heartbeat", str(HEARTBEAT), "--ttl", str(TTL))
STALL = 2 * TTL + 0.5  # past ttl + 2 heartbeats: each owner is deposed while it runs the activity


def _status(client: Client, wid: str) -> str | None:
    try:
        return client.get_handle(wid).describe()["status"]
    except (ServerUnavailable, TimeoutError):  # routed to a shard that is stalled right now
        return None


def _result(client: Client, wid: str, timeout: float) -> object:
    """``result``, asked again while the shard it is routed to is stalled or restarting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.get_handle(wid).result(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        except (ServerUnavailable, TimeoutError):
            if time.monotonic() > deadline:
                raise


def _quarantine(sup: RunningSupervisor, client: Client, flag: str) -> str:
    # Its first attempt blocks the loop before the start's reply leaves: only a start that is
    # safe to send again (a fixed id, if_exists="return") is re-sent to another shard.
    handle = client.start("poisoned", flag, STALL, id="poison", if_exists="return")
    wait_until(lambda: _status(client, handle.id) == "quarantined", timeout=40, what="quarantined", interval=0.2)
    return handle.id


@pytest.mark.timeout(90)
def test_a_poison_workflow_is_quarantined_the_supervisor_stays_up_and_terminate_ends_it(tmp_path):
    flag = str(tmp_path / "fixed")
    with RunningSupervisor(tmp_path / "data", app=APP, args=ARGS) as sup, Client(sup.endpoint, timeout=5) as client:
        exiting = client.start("exits", 3)
        with pytest.raises(WorkflowFailed, match="UserCodeExit"):
            exiting.result(timeout=10)
        assert client.stats()["supervisor"]["restarts"] == 0  # sys.exit() stopped no shard
        others = [client.start("steady", 40, id=f"steady-{i}") for i in range(6)]
        wid = _quarantine(sup, client, flag)
        assert sup.process.poll() is None, sup.log_text()[-3000:]
        for handle in others:
            assert _result(client, handle.id, timeout=30) == sum(range(40))
        described = client.get_handle(wid).describe()
        assert described["lost_owners"]["count"] == 1  # at its first stall: the watchdog named it
        assert described["lost_owners"]["reason"] == "op #0 activity 'blocks_unless_fixed'"
        assert [item["id"] for item in client.list(status="quarantined")["items"]] == [wid]
        assert sum(shard.get("quarantined_workflows", 0) for shard in client.stats()["shards"]) >= 1
        log = sup.log_text()
        assert "workflow poison (poisoned) quarantined" in log and "'blocks_unless_fixed'" in log
        assert "event loop stalled" in log and "activity 'blocks_unless_fixed'" in log  # the watchdog named it
        time.sleep(2 * TTL)  # quarantined for good: nobody takes it and nothing restarts any more
        restarts = client.stats()["supervisor"]["restarts"]
        assert _status(client, wid) == "quarantined" and restarts <= 4
        client.get_handle(wid).terminate("poison")
        with pytest.raises(WorkflowTerminated):
            client.get_handle(wid).result(timeout=5)
        assert sup.process.poll() is None
        assert client.stats()["supervisor"]["restarts"] == restarts


@pytest.mark.timeout(90)
def test_retry_lifts_the_quarantine_and_fixed_code_completes_it(tmp_path):
    flag = tmp_path / "fixed"
    with RunningSupervisor(tmp_path / "data", app=APP, args=ARGS) as sup, Client(sup.endpoint, timeout=5) as client:
        wid = _quarantine(sup, client, str(flag))
        flag.write_text("deployed")  # the fix
        cli = subprocess.run(
            [sys.executable, "-m", "weft_actors", "--endpoint", sup.endpoint, "retry", wid, "--reason", "deployed the fix"],
            capture_output=True, text=True, timeout=30, env=sup.env, cwd=str(TESTS),
        )
        assert cli.returncode == 0 and cli.stdout.strip() == "ok", cli.stderr
        assert _result(client, wid, timeout=20) == "fixed"
        described = client.get_handle(wid).describe()
        assert described["status"] == "completed" and described["lost_owners"] is None
        (lift,) = described["quarantine_lifts"]  # the lift stays in its record: who, why
        assert lift["reason"] == "deployed the fix" and lift["by"].startswith("client ") and "@" in lift["by"]
        again = subprocess.run(
            [sys.executable, "-m", "weft_actors", "--endpoint", sup.endpoint, "retry", wid],
            capture_output=True, text=True, timeout=30, env=sup.env, cwd=str(TESTS),
        )
        assert again.returncode == 1 and "workflow_closed" in again.stderr
        assert sup.process.poll() is None
