"""A takeover after a supervisor was killed names whom it took the workflows from: the engine,
its shard and host, and what became of it (its shards end and release their workflows when
their supervisor dies), not ``nobody``."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest

from _processes import RunningSupervisor, pid_alive, wait_until
from weft_actors import Client

pytestmark = pytest.mark.timeout(90)


def test_a_takeover_after_a_killed_supervisor_names_the_engine_it_came_from(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with RunningSupervisor(data, shards=1) as first:
        with Client(first.endpoint, timeout=20) as client:
            client.start("sleeper", 3600, id="ts-nap-1")
            owner = wait_until(lambda: client.get_handle("ts-nap-1").describe().get("owner"), 20, "the workflow owned")
        shard_pid = first.shard_pids[0]
        os.kill(first.process.pid, signal.SIGKILL)  # the supervisor only: its shard notices and ends
        first.process.wait(10)
        wait_until(lambda: not pid_alive(shard_pid), 30, "the orphaned shard ended")
        with RunningSupervisor(data, shards=1) as second:
            line = wait_until(
                lambda: next((l for l in second.stderr_lines if "workflow ts-nap-1 (sleeper) taken over from" in l), None),
                30, "the takeover logged",
            )
            with Client(second.endpoint, timeout=20) as client:
                client.get_handle("ts-nap-1").terminate("done")
    assert "nobody" not in line, line
    engine_id = owner if isinstance(owner, str) else owner.get("engine_id", "")
    assert f"taken over from engine {engine_id} (shard 0 of host {socket.gethostname()}, pid {shard_pid}, " in line, line
    assert "stopped: released its workflows" in line, line
