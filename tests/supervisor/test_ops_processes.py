"""Real supervisor, real shards, the CLI: what a running workflow is doing now. ``describe``
lists a 600 s activity within a second of its start and a retried activity's last failure;
``stack`` prints where a workflow waits; a deploy whose replay diverges makes a workflow
``stuck``: listed by ``list --status stuck``, counted in ``stats`` and ``/metrics``, and kept
across a restart."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import urllib.request
import sys
import time
from typing import Any

import pytest

from _processes import TESTS, RunningSupervisor, free_port, wait_until
from weft_actors import AsyncClient, Client

pytestmark = pytest.mark.timeout(120)

APP = "ops_app"
ARGS = ("--heartbeat", "0.2", "--ttl", "0.6")


def _workflow_counts(port: int, wf_type: str) -> dict[str, float]:
    """``status -> count`` of ``weft_workflows{type=wf_type}`` on ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = re.findall(r'^weft_workflows\{type="' + re.escape(wf_type) + r'",status="(\w+)"\} (\S+)$', text, re.MULTILINE)
    return {status: float(value) for status, value in found}


def _cli(sup: RunningSupervisor, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "weft_actors", "--endpoint", sup.endpoint, *args],
        capture_output=True, text=True, timeout=30, env=sup.env,
    )


def test_describe_lists_pending_activities_and_stack_shows_where_it_waits(tmp_path):
    with RunningSupervisor(tmp_path / "data", shards=2, app=APP, args=ARGS) as sup, Client(sup.endpoint, timeout=10) as client:
        started = time.time()
        client.start("in_a_long_activity", id="long-1")
        pending = wait_until(lambda: client.get_handle("long-1").describe()["pending_activities"], timeout=5, what="pending activity")
        assert time.time() - started < 1.0
        [entry] = pending
        described = client.get_handle("long-1").describe()
        assert (entry["name"], entry["state"], entry["attempt"]) == ("long_call", "running", 1)
        assert entry["shard"]["pid"] in sup.shard_pids and entry["shard"] == {"slot": described["owner_shard"]["slot"], "pid": described["owner_shard"]["pid"]}

        client.start("retrying", 3, id="flaky-1")
        wait_until(lambda: client.get_handle("flaky-1").describe()["pending_activities"][0]["state"] == "retry_wait", timeout=10, what="a retry")
        shown = _cli(sup, "--json", "describe", "flaky-1")
        assert shown.returncode == 0, shown.stderr
        [retried] = json.loads(shown.stdout)["pending_activities"]
        assert retried["last_failure"]["type"] == "RuntimeError" and retried["last_failure"]["message"] == "downstream said no for 3"
        assert retried["next_retry"] > time.time() + 30 and retried["attempt"] == 2
        readable = _cli(sup, "describe", "flaky-1").stdout
        assert "downstream said no for 3" in readable and "next_retry" in readable

        client.start("approval", id="ap-1")
        wait_until(lambda: client.get_handle("ap-1").describe()["stack"], timeout=5, what="a stack")
        stack = _cli(sup, "stack", "ap-1")
        assert stack.returncode == 0, stack.stderr
        app_file = str(TESTS / "ops_app.py")
        source = (TESTS / "ops_app.py").read_text().splitlines()
        outer = 1 + source.index("    return await _approval(ctx)")
        inner = 1 + source.index('    return await ctx.wait_signal("approve")')
        assert stack.stdout.splitlines()[1:] == [
            f'  File "{app_file}", line {outer}, in approval',
            f'  File "{app_file}", line {inner}, in _approval',
            "    -> signal 'approve' (op #0)",
        ]
        assert json.loads(_cli(sup, "--json", "stack", "ap-1").stdout)[-1]["waits_on"][0]["name"] == "approve"
        assert asyncio.run(_async_stack(sup.endpoint, "ap-1"))[-1]["waits_on"][0]["name"] == "approve"
        unknown = _cli(sup, "stack", "no-such")
        assert unknown.returncode == 1 and "error: workflow_not_found" in unknown.stderr
        client.get_handle("ap-1").signal("approve", True)
        assert client.get_handle("ap-1").result(timeout=10) is True
        ended = _cli(sup, "stack", "ap-1")
        assert ended.returncode == 1 and "error: workflow_closed" in ended.stderr and "completed" in ended.stderr


def test_a_deploy_whose_replay_diverges_makes_the_workflow_stuck_listed_counted_and_kept(tmp_path):
    port = free_port()
    args = (*ARGS, "--metrics-port", str(port))
    data = tmp_path / "data"
    with RunningSupervisor(data, shards=2, app=APP, args=args) as sup, Client(sup.endpoint, timeout=10) as client:
        client.start("shifting", id="sh-1")
        wait_until(lambda: client.get_handle("sh-1").describe()["history"][:1] and client.get_handle("sh-1").describe()["history"][0]["outcome"] == "ok", what="first step")
        assert sup.terminate() == 0
    for _ in range(2):  # the diverging deploy, then a restart of it: stuck both times
        with RunningSupervisor(data, shards=2, app=APP, args=args, env={"WEFT_OPS_APP_VARIANT": "2"}) as sup, Client(sup.endpoint, timeout=10) as client:
            described = wait_until(lambda: _stuck(client, "sh-1"), timeout=20, what="stuck")
            assert "activity 'step'" in described["nondeterminism"] and "sleep" in described["nondeterminism"]
            listed = _cli(sup, "list", "--status", "stuck")
            assert listed.returncode == 0 and "sh-1" in listed.stdout and "stuck" in listed.stdout, listed.stderr
            assert [item["id"] for item in client.list(status="stuck")["items"]] == ["sh-1"]
            assert client.list(status="running")["items"] == []
            wait_until(lambda: sum(shard.get("stuck_workflows", 0) for shard in client.stats()["shards"]) >= 1, timeout=10, what="stats")  # sent each second
            wait_until(lambda: _workflow_counts(port, "shifting").get("stuck") == 1, timeout=10, what="metric")
            assert _workflow_counts(port, "shifting")["running"] == 0
            assert "workflow sh-1 is stuck" in sup.log_text()
            assert sup.terminate() == 0
    with RunningSupervisor(data, shards=2, app=APP, args=args) as sup, Client(sup.endpoint, timeout=10) as client:  # the fix
        wait_until(lambda: client.get_handle("sh-1").describe()["status"] == "running" and client.get_handle("sh-1").describe()["stack"], timeout=20, what="running again")
        client.get_handle("sh-1").signal("go")
        assert client.get_handle("sh-1").result(timeout=10) == "done"
        assert client.list(status="stuck")["items"] == []


def _stuck(client: Client, wid: str) -> dict[str, Any] | None:
    described = client.get_handle(wid).describe()
    return described if described["status"] == "stuck" else None


async def _async_stack(endpoint: str, wid: str) -> list[dict[str, Any]]:
    async with AsyncClient(endpoint, timeout=10) as client:
        return await client.get_handle(wid).stack()
