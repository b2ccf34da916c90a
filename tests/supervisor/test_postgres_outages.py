"""A PostgreSQL outage never ends the service, and no shard is killed for one: a real
supervisor with two shards on a dedicated server (``_postgres``; ``pg_ctl stop``/``start`` and
``ALTER SYSTEM`` here would disturb the session's server), driven by a real client.

- a read-only server (``default_transaction_read_only``) refuses writes: nothing is judged
  hung, a shard restarting meanwhile waits without counting a crash, and everything carries
  on once writes are taken again (before: both shards killed "as hung" within seconds, each
  replacement crashed at open, and the supervisor exited 3);
- the server down while a shard dies: its replacement waits for the server instead of
  exiting at once, so the restart intensity is never exceeded (before: exit 3 in seconds);
- a restart of the server: no shard is killed as hung when it returns (before: "has not
  heartbeated", a kill, and its workflows' activities run again on a peer).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Iterator

import psycopg
import pytest

from _postgres import PostgresServer, find_bindir
from _processes import RunningSupervisor, pid_alive, wait_until
from weft_actors import Client
from weft_actors.errors import StorageError

APP = "supervisor_app"
TIMING = ("--heartbeat", "0.5", "--ttl", "1.5", "--restart-limit", "3", "--restart-window", "30")
"""A lease lapses 2.5 s after its last renewal; 4 restarts in 30 s end the service."""


class Server(PostgresServer):
    """A dedicated server this test may stop, start (``PostgresServer``) and make read-only."""

    def read_only(self, on: bool) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on" if on else "ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")


@pytest.fixture
def server() -> Iterator[Server]:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (initdb, pg_ctl)")
    with Server(bindir) as running:
        yield running


def _alive_shards(client: Client) -> int:
    return sum(1 for shard in client.stats()["shards"] if shard["alive"])


def _no_kill_and_no_exit(sup: RunningSupervisor) -> None:
    text = sup.log_text()
    assert sup.process is not None and sup.process.poll() is None, text[-3000:]
    assert "is hung" not in text and "restart intensity exceeded" not in text, text[-3000:]


@pytest.mark.timeout(120)
def test_a_read_only_server_kills_no_shard_a_restart_waits_and_all_carries_on(server, tmp_path):
    with RunningSupervisor(server.url, shards=2, app=APP, args=TIMING) as sup, Client(sup.endpoint, timeout=15) as client:
        healthy, victim = sup.shard_pids
        running = [client.start("slow_steps", 30, 0.1, id=f"long-{index}") for index in range(4)]
        server.read_only(True)
        wait_until(lambda: "read-only transaction" in sup.log_text(), 20, "a refused write")
        deadline = time.monotonic() + 5.0  # two lease lapses: the original code killed both shards here
        while time.monotonic() < deadline:
            _no_kill_and_no_exit(sup)
            time.sleep(0.2)
        with pytest.raises(StorageError) as refused:
            client.start("slow_steps", 1, 0.0, id="refused").result(timeout=15)
        assert "refuses writes" in str(refused.value)
        os.kill(victim, signal.SIGKILL)  # its replacement meets the read-only server at start
        deadline = time.monotonic() + 5.0  # the original code crash-looped it to exit 3 here
        while time.monotonic() < deadline:
            _no_kill_and_no_exit(sup)
            time.sleep(0.2)
        assert pid_alive(healthy)
        assert "cannot start while the store is not writable" in sup.log_text()
        server.read_only(False)
        wait_until(lambda: _alive_shards(client) == 2, 30, "both shards ready again")
        for handle in running:
            assert len(handle.result(timeout=60)) == 30
        assert client.start("slow_steps", 1, 0.0, id="after").result(timeout=15) == [0]
        _no_kill_and_no_exit(sup)
        assert pid_alive(healthy)


@pytest.mark.timeout(120)
def test_a_shard_dying_while_the_server_is_down_waits_for_it_and_the_service_resumes(server, tmp_path):
    with RunningSupervisor(server.url, shards=2, app=APP, args=TIMING) as sup, Client(sup.endpoint, timeout=15) as client:
        healthy, victim = sup.shard_pids
        assert client.start("slow_steps", 1, 0.0, id="before").result(timeout=15) == [0]
        server.stop()
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: "cannot reach its store" in sup.log_text() or sup.process.poll() is not None, 20, "a start waiting for the store")
        deadline = time.monotonic() + 8.0  # the original code exceeded the restart intensity here
        while time.monotonic() < deadline:
            _no_kill_and_no_exit(sup)
            time.sleep(0.2)
        server.start()
        back = time.monotonic()
        wait_until(lambda: _alive_shards(client) == 2, 30, "both shards ready again")
        assert client.start("slow_steps", 2, 0.0, id="after").result(timeout=30) == [0, 1]
        assert time.monotonic() - back < 20.0
        _no_kill_and_no_exit(sup)
        assert pid_alive(healthy)


@pytest.mark.timeout(120)
def test_a_server_restart_kills_no_shard_and_reruns_no_activity(server, tmp_path):
    with RunningSupervisor(server.url, shards=2, app=APP, args=TIMING) as sup, Client(sup.endpoint, timeout=15) as client:
        pids = sup.shard_pids
        running = [client.start("slow_steps", 20, 0.1, id=f"long-{index}") for index in range(4)]
        server.stop()
        time.sleep(5.0)  # down for twice a lease
        server.start()
        for handle in running:
            assert len(handle.result(timeout=60)) == 20
        _no_kill_and_no_exit(sup)
        assert all(pid_alive(pid) for pid in pids), sup.log_text()[-3000:]
        stats = client.stats()["supervisor"]
        assert stats["hung_kills"] == 0 and stats["restarts"] == 0, stats
