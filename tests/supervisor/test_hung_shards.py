"""Stuck processes, with a real supervisor and real shard processes: a shard stalled while it
holds the store's write lock is killed and replaced and deposes no other shard; what a
stalled shard held is answered by the others within the stall bound; requests sent before
any shard is ready wait for one."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from _processes import RunningSupervisor, pid_alive, wait_until
from weft_actors import AsyncClient, Client
from weft_actors.errors import ServerUnavailable

APP = "supervisor_app"
HEARTBEAT, TTL = 0.5, 1.5
TIMING = ("--heartbeat", str(HEARTBEAT), "--ttl", str(TTL))
STALL_BOUND = TTL + 2 * HEARTBEAT + 0.5
"""The issue's bound on answering what a stalled shard held, before normal latency."""


def _owner_pid(client: Client, wid: str) -> int | None:
    owner = client.get_handle(wid).describe()["owner"]
    for shard in client.stats()["shards"]:
        if shard.get("engine_id") == owner:
            return shard["pid"]
    return None


def _continue(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # killed as hung already


@pytest.mark.timeout(120)
def test_a_shard_stalled_holding_the_write_lock_is_killed_and_replaced_and_deposes_no_other(tmp_path):
    marker = tmp_path / "stalled-pid"
    env = {"WEFT_FAILPOINT": "commit:after-apply:12:stop", "WEFT_FAILPOINT_ONCE": str(marker)}
    with RunningSupervisor(tmp_path / "data", shards=3, app=APP, args=TIMING, env=env) as sup, Client(sup.endpoint, timeout=15) as client:
        pids = sup.shard_pids
        # Fixed ids and if_exists="return": a start held by the stalled shard is sent on safely.
        handles = [client.start("slow_steps", 4, 0.05, id=f"h-{i}", if_exists="return") for i in range(30)]
        wait_until(marker.exists, timeout=30, what="a shard stalled at its failpoint")
        stalled = int(wait_until(lambda: marker.read_text(), timeout=5))
        assert stalled in pids
        try:
            stopped_at = time.monotonic()
            wait_until(lambda: not pid_alive(stalled), timeout=15, what="the hung shard killed")
            assert time.monotonic() - stopped_at < TTL + 3.0
            for h in handles:
                assert h.result(timeout=30) == [0, 1, 2, 3]
        finally:
            _continue(stalled)
        stats = wait_until(lambda: (s := client.stats()) and all(sh["alive"] for sh in s["shards"]) and s, timeout=15)
        now = {shard["pid"] for shard in stats["shards"]}
        assert set(pids) - {stalled} <= now and stalled not in now  # the others never restarted
        assert stats["supervisor"]["restarts"] == 1 and stats["supervisor"]["hung_kills"] == 1
    log = sup.log_text()
    assert "is hung" in log and "killing it" in log
    assert "was deposed" not in log


@pytest.mark.timeout(120)
def test_what_a_stalled_shard_held_is_answered_within_the_stall_bound(tmp_path):
    with RunningSupervisor(tmp_path / "data", shards=2, app=APP, args=TIMING) as sup, Client(sup.endpoint, timeout=10) as client:
        steps = [client.start("slow_steps", 6, 0.25, id=f"r-{i}") for i in range(10)]
        stalled = _owner_pid(client, steps[0].id)
        mine = [h for h in steps if _owner_pid(client, h.id) == stalled]
        waiters = []
        for i in range(50):  # a few parked workflows of the shard that will stall
            handle = client.start("waiter", f"t{i}", id=f"q-{i}")
            if _owner_pid(client, handle.id) == stalled:
                handle.signal("item", i)
                waiters.append(handle)
                if len(waiters) == 3:
                    break
        for handle in waiters:
            wait_until(lambda: handle.query("received") != [], timeout=10)
        assert mine and waiters

        async def ask() -> dict[str, float]:
            answered: dict[str, float] = {}
            began = time.monotonic()
            async with AsyncClient(sup.endpoint, timeout=20) as async_client:

                async def timed(name: str, call) -> None:
                    await call
                    answered[name] = time.monotonic() - began

                await asyncio.gather(
                    *(timed(f"result {h.id}", async_client.get_handle(h.id).result(timeout=20)) for h in mine),
                    *(timed(f"query {h.id}", async_client.get_handle(h.id).query("received")) for h in waiters),
                    *(timed(f"describe {h.id}", async_client.get_handle(h.id).describe()) for h in waiters),
                )
            return answered

        os.kill(stalled, signal.SIGSTOP)
        try:
            answered = asyncio.run(ask())
        finally:
            _continue(stalled)
    late = {name: round(t, 2) for name, t in answered.items() if t > STALL_BOUND + (2.5 if name.startswith("result") else 1.0)}
    # Normal latency: a result also waits for the rest of its workflow (at most 1.5 s of steps).
    assert late == {}, f"answered after the stall bound ({STALL_BOUND} s): {late}"


@pytest.mark.timeout(60)
def test_requests_sent_before_any_shard_is_ready_wait_for_one_and_stats_say_so(tmp_path):
    sup = RunningSupervisor(tmp_path / "data", shards=1, app=APP, env={"WEFT_TEST_SLOW_SHARDS": "2"})
    try:
        sup.start(wait_ready=False)
        with Client(sup.endpoint, timeout=10) as client:
            assert client.ping() == "pong"  # the front door answers before any shard is ready
            before = client.stats()
            handle = client.start("echo", "early", id="early")  # held until the shard is ready
            assert before.get("ready") is False
            assert handle.result(timeout=10) == "early"
            assert client.stats()["ready"] is True
        sup.wait_ready_line()
    finally:
        sup.kill()


@pytest.mark.timeout(60)
def test_a_request_that_no_shard_takes_in_time_is_server_unavailable(tmp_path):
    args = ("--ready-timeout", "0.5")
    sup = RunningSupervisor(tmp_path / "data", shards=1, app=APP, args=args, env={"WEFT_TEST_SLOW_SHARDS": "30"})
    try:
        sup.start(wait_ready=False)
        with Client(sup.endpoint, timeout=10) as client:
            assert client.ping() == "pong"
            began = time.monotonic()
            with pytest.raises(ServerUnavailable, match="no shard became ready within 0.5s"):
                client.start("echo", "early")
            assert time.monotonic() - began < 5
    finally:
        sup.kill()
