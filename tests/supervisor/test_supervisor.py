"""Integration tests: a real supervisor, real shard processes, real sockets on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import msgpack
import pytest
import zmq

from _processes import RunningSupervisor, pid_alive, wait_until
from weft_actors import Client
from weft_actors.errors import (
    PayloadTooLarge,
    ServerUnavailable,
    UnknownQuery,
    UnknownWorkflowType,
    WorkflowAlreadyExists,
    WorkflowNotFound,
)

APP = "supervisor_app"
FAST = ("--heartbeat", "0.2", "--ttl", "0.6")


def _owner_pid(client: Client, wid: str) -> int | None:
    try:
        owner = client.get_handle(wid).describe()["owner"]
    except ServerUnavailable:  # routed to a shard that is stalled right now
        return None
    for shard in client.stats()["shards"]:
        if shard.get("engine_id") == owner:
            return shard["pid"]
    return None


def test_every_client_call_round_trips(tmp_path):
    with RunningSupervisor(tmp_path / "data", app=APP) as sup, Client(sup.endpoint, timeout=10) as client:
        assert client.ping() == "pong"
        handle = client.start("waiter", "t", id="w-1")
        assert handle.id == "w-1"
        with pytest.raises(WorkflowAlreadyExists):
            client.start("waiter", "t", id="w-1")
        with pytest.raises(UnknownWorkflowType):
            client.start("no_such_workflow")
        handle.signal("item", (1, "two"))
        wait_until(lambda: handle.query("received") == [(1, "two")])
        with pytest.raises(UnknownQuery):
            handle.query("nope")
        handle.signal("item", None)
        assert handle.result(timeout=10) == ["t", [(1, "two")]]
        described = handle.describe()
        assert described["status"] == "completed" and described["id"] == "w-1"
        assert [op["kind"] for op in described["history"]] == ["signal", "signal"]
        listed = client.list(status="completed")
        assert [item["id"] for item in listed["items"]] == ["w-1"]
        stats = client.stats()
        assert stats["supervisor"]["shards"] == 2 and len(stats["shards"]) == 2
        with pytest.raises(WorkflowNotFound):
            client.get_handle("missing").result(timeout=5)
        echo = client.start("echo", {"a": {1, 2}})
        assert echo.result(timeout=10) == {"a": {1, 2}}


def test_cli_round_trip(tmp_path):
    with RunningSupervisor(tmp_path / "data", app=APP) as sup:
        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "weft_actors", "--endpoint", sup.endpoint, *args],
                capture_output=True, text=True, timeout=30, env=sup.env,
            )

        assert cli("start", "waiter", '["cli"]', "--id", "c-1").returncode == 0
        assert cli("signal", "c-1", "item", '"x"').returncode == 0
        assert cli("signal", "c-1", "item", "null").returncode == 0
        done = cli("--json", "result", "c-1", "--timeout", "10")
        assert done.returncode == 0 and '"x"' in done.stdout
        failed = cli("signal", "c-1", "item", "1")
        assert failed.returncode == 1 and "workflow_closed" in failed.stderr
        assert "c-1" in cli("list").stdout
        assert cli("--json", "stats").returncode == 0
        assert cli("describe", "c-1").returncode == 0


def test_signal_reaches_a_workflow_owned_by_another_shard(tmp_path):
    # Round-robin routing sends most requests to a shard that does not own the workflow:
    # the append is committed there, and the owner picks it up (hint, or its feed poll).
    args = ("--routing", "round-robin")
    with RunningSupervisor(tmp_path / "data", app=APP, args=args) as sup, Client(sup.endpoint) as client:
        handles = [client.start("waiter", f"t{i}", id=f"x-{i}") for i in range(12)]
        owners = {_owner_pid(client, h.id) for h in handles}
        assert owners == set(sup.shard_pids)  # both shards own some
        for h in handles:
            h.signal("item", h.id)
            h.signal("item", None)
        for h in handles:
            assert h.result(timeout=10) == [h.id.replace("x-", "t"), [h.id]]


def test_kill_9_of_a_shard_under_load_completes_everything_and_restarts_the_slot(tmp_path):
    with RunningSupervisor(tmp_path / "data", app=APP, args=FAST) as sup, Client(sup.endpoint) as client:
        handles = [client.start("slow_steps", 4, 0.15, id=f"s-{i}") for i in range(60)]
        victim = sup.shard_pids[0]
        time.sleep(0.2)  # let both shards get into the middle of the activities
        os.kill(victim, signal.SIGKILL)
        for i, h in enumerate(handles):
            assert h.result(timeout=30) == [0, 1, 2, 3]
        stats = wait_until(lambda: (s := client.stats()) and all(sh["alive"] for sh in s["shards"]) and s)
        assert stats["supervisor"]["restarts"] == 1
        assert victim not in [shard["pid"] for shard in stats["shards"]]


def test_sigstop_past_ttl_is_taken_over_and_the_stalled_shard_is_gone(tmp_path):
    with RunningSupervisor(tmp_path / "data", app=APP, args=FAST) as sup, Client(sup.endpoint, timeout=2) as client:
        handles = [client.start("waiter", f"t{i}", id=f"p-{i}") for i in range(10)]
        pids = sup.shard_pids
        owned = {pid: [h for h in handles if _owner_pid(client, h.id) == pid] for pid in pids}
        stalled = max(owned, key=lambda pid: len(owned[pid]))
        os.kill(stalled, signal.SIGSTOP)
        try:
            # ttl 0.6 + 2 x heartbeat 0.2 = 1.0 s to expiry; the live shard takes them over.
            for h in owned[stalled]:
                wait_until(lambda: _owner_pid(client, h.id) not in (None, stalled), timeout=10)
            for h in handles:
                h.signal("item", 1)
                h.signal("item", None)
            for h in handles:
                assert h.result(timeout=10)[1] == [1]
        finally:
            try:
                os.kill(stalled, signal.SIGCONT)
            except ProcessLookupError:
                pass  # killed as hung already
        # Killed as hung by the supervisor (or, woken, it finds itself deposed and exits).
        wait_until(lambda: not pid_alive(stalled), timeout=10)
        for h in handles:
            assert h.describe()["status"] == "completed"


def test_restart_intensity_exceeded_exits_non_zero(tmp_path):
    sup = RunningSupervisor(tmp_path / "data", app=APP, args=("--restart-limit", "2", "--restart-window", "30"), env={"WEFT_TEST_CRASH_SHARDS": "1"})
    try:
        sup.process = subprocess.Popen(sup.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=sup.env, start_new_session=True)
        code = sup.process.wait(30)
        assert code == 3
        assert "restart intensity exceeded" in sup.process.stderr.read()
    finally:
        sup.kill()


def test_sigterm_drains_and_a_restarted_supervisor_finishes_every_workflow(tmp_path):
    data = tmp_path / "data"
    with RunningSupervisor(data, app=APP) as sup, Client(sup.endpoint) as client:
        handles = [client.start("waiter", f"t{i}", id=f"d-{i}") for i in range(8)]
        handles[0].signal("item", "before")
        assert sup.terminate(timeout=30) == 0
        assert "draining" in sup.log_text()
    with RunningSupervisor(data, app=APP) as sup, Client(sup.endpoint) as client:
        for h in handles:
            client.get_handle(h.id).signal("item", None)
        results = [client.get_handle(h.id).result(timeout=15) for h in handles]
        assert results[0] == ["t0", ["before"]]
        assert all(r[1] == [] for r in results[1:])


def test_garbage_and_oversized_requests_get_typed_errors_and_the_next_is_served(tmp_path):
    with RunningSupervisor(tmp_path / "data", app=APP) as sup:
        context = zmq.Context()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 10_000)
        sock.connect(sup.endpoint)
        try:
            def ask(frame: bytes) -> dict:
                sock.send(frame)
                return msgpack.unpackb(sock.recv(), raw=False)

            cases = [
                b"\xc1garbage",
                msgpack.packb([1, 2, 3]),
                msgpack.packb({"v": 99, "id": "a", "op": "ping"}),
                msgpack.packb({"v": 1, "id": "b", "op": "explode"}),
                msgpack.packb({"v": 1, "id": "c", "op": "signal", "wid": 5, "name": "x", "payload": b""}),
                msgpack.packb({"v": 1, "id": "d", "op": "start", "workflow": "echo", "args": b"\x93\x01"}),
            ]
            for frame in cases:
                reply = ask(frame)
                assert reply["error"]["code"] in ("invalid_request", "serialization_error"), reply
            big = msgpack.packb({"v": 1, "id": "e", "op": "signal", "wid": "w", "name": "n", "payload": b"x" * (2 << 20)}, use_bin_type=True)
            assert ask(big)["error"]["code"] in ("payload_too_large",)
            assert ask(msgpack.packb({"v": 1, "id": "f", "op": "ping"}))["ok"] == "pong"
        finally:
            sock.close(0)
            context.term()
        with Client(sup.endpoint) as client:
            with pytest.raises(PayloadTooLarge):
                client.start("echo", "x" * (2 << 20))
            assert client.start("echo", 1).result(timeout=10) == 1


def test_curve_refuses_unauthorized_clients_and_serves_authorized_ones(tmp_path):
    import zmq.auth

    keys = tmp_path / "keys"
    authorized = tmp_path / "authorized"
    keys.mkdir()
    authorized.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(keys), "server")
    client_public, client_secret = zmq.auth.create_certificates(str(keys), "client")
    _, stranger_secret = zmq.auth.create_certificates(str(keys), "stranger")
    os.replace(client_public, authorized / "client.key")
    args = ("--curve-secret-key", server_secret, "--curve-authorized-keys", str(authorized))
    with RunningSupervisor(tmp_path / "data", app=APP, args=args) as sup:
        with Client(sup.endpoint, timeout=10, curve_server_key=server_public, curve_secret_key=client_secret) as client:
            assert client.start("echo", "secret").result(timeout=10) == "secret"
        with Client(sup.endpoint, timeout=1.5, curve_server_key=server_public, curve_secret_key=stranger_secret) as stranger:
            with pytest.raises(ServerUnavailable):
                stranger.ping()
        with Client(sup.endpoint, timeout=1.5) as plain:
            with pytest.raises(ServerUnavailable):
                plain.ping()


def test_workflows_complete_with_the_hint_proxy_disabled(tmp_path):
    with RunningSupervisor(tmp_path / "data", app=APP, args=("--no-hints", *FAST)) as sup, Client(sup.endpoint) as client:
        handles = [client.start("waiter", f"t{i}", id=f"n-{i}") for i in range(6)]
        for h in handles:
            h.signal("item", 7)
            h.signal("item", None)
        for h in handles:
            assert h.result(timeout=10)[1] == [7]
        slow = client.start("slow_steps", 2, 0.05)
        assert slow.result(timeout=10) == [0, 1]


def test_stats_and_prometheus_metrics_show_shards_and_the_supervisor(tmp_path):
    import urllib.request

    from _processes import free_port

    port = free_port()
    with RunningSupervisor(tmp_path / "data", app=APP, args=("--metrics-port", str(port))) as sup, Client(sup.endpoint) as client:
        echo = client.start("echo", 1)
        assert echo.result(timeout=10) == 1
        stats = wait_until(lambda: (s := client.stats()) and all("commits_total" in sh for sh in s["shards"]) and s)
        for shard in stats["shards"]:
            assert {"pid", "engine_id", "live_actors", "parked_actors", "claims_active", "commits_per_s", "restarts"} <= set(shard)
        assert stats["supervisor"]["uptime_s"] > 0 and stats["supervisor"]["restarts"] == 0
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "weft_supervisor_uptime_s" in text
        assert 'weft_shard_commits_total{slot="0"}' in text
        assert echo.id not in text  # workflow ids are never labels
        # Types are, of the store's counts only: a bounded set, named by the app's code.
        assert [line for line in text.splitlines() if "echo" in line and not line.startswith("#")] == [
            f'weft_workflows{{type="echo",status="{status}"}} {int(status == "completed")}'
            for status in ("pending", "running", "completed", "failed", "cancelled", "terminated", "timed_out", "continued", "quarantined", "stuck")
        ]


def test_execute_starts_and_returns_the_result_in_one_request(tmp_path):
    from weft_actors import AsyncClient
    from weft_actors.errors import WorkflowFailed

    with RunningSupervisor(tmp_path / "data", app=APP, args=FAST) as sup, Client(sup.endpoint, timeout=10) as client:
        assert client.execute("echo", {"n": (1, 2)}, id="ex-1") == {"n": (1, 2)}
        assert client.get_handle("ex-1").describe()["status"] == "completed"
        with pytest.raises(WorkflowFailed, match="no thanks"):
            client.execute("failing", "no thanks")
        with pytest.raises(WorkflowAlreadyExists):
            client.execute("echo", 2, id="ex-1")
        # Longer than its timeout: TimeoutError, and the workflow goes on to finish.
        with pytest.raises(TimeoutError):
            client.execute("slow_steps", 2, 0.5, id="ex-slow", timeout=0.3)
        assert client.get_handle("ex-slow").result(timeout=10) == [0, 1]

        async def from_async() -> list:
            async with AsyncClient(sup.endpoint, timeout=10) as async_client:
                first = await async_client.execute("echo", "a")
                later = await async_client.execute("slow_steps", 1, 0.2, timeout=5)
                with pytest.raises(TimeoutError):
                    await async_client.execute("slow_steps", 2, 0.5, timeout=0.3)
                return [first, later]

        import asyncio

        assert asyncio.run(from_async()) == ["a", [0]]


def test_socket_directories_of_dead_supervisors_are_removed_at_start(tmp_path, monkeypatch):
    import tempfile as tempfile_module

    from weft_actors.supervisor._supervisor import _remove_stale_ipc_dirs

    monkeypatch.setattr(tempfile_module, "tempdir", str(tmp_path))
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(timeout=30)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        dead_dir = tmp_path / f"weft-ipc-{done.pid}-abc"
        live_dir = tmp_path / f"weft-ipc-{alive.pid}-def"
        other = tmp_path / "weft-ipc-notapid-x"
        for path in (dead_dir, live_dir, other):
            path.mkdir()
            (path / "shards").write_text("")
        _remove_stale_ipc_dirs()
        assert not dead_dir.exists()
        assert live_dir.exists() and other.exists()
    finally:
        alive.kill()
        alive.wait(timeout=30)
