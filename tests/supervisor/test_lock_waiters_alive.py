"""Shards kept waiting for LMDB's write lock are not hung, however long the wait; a shard
stopped while it waits is.

A real supervisor with two shards on LMDB. The test holds the store's write lock from its own
process (as an operator's tool or a process stalled inside a transaction would) for several
grace periods (``LOCK_WAIT_GRACE`` ttls). Each shard's watchdog thread shows that its process is
alive and only waiting, so neither the supervisor nor a peer may judge it: before, both were
killed as hung once the grace ran out (the chaos run lost innocent shards that way, behind a
shard stopped just as it got the lock, before its wait slot said so). Then one waiting shard
is stopped (SIGSTOP): its stamps stop, so it is killed as hung after the grace and the other
is not. Once the lock is free, every workflow completes.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from _processes import RunningSupervisor, pid_alive, wait_until
from _support import hold_write_lock
from weft_actors import Client
from weft_actors.store import LOCK_WAIT_GRACE, open_store

APP = "supervisor_app"
HEARTBEAT, TTL = 0.25, 0.75
TIMING = ("--heartbeat", str(HEARTBEAT), "--ttl", str(TTL))
GRACE = LOCK_WAIT_GRACE * TTL
"""Before the fix, a shard waiting this long for the lock was killed as hung."""


def _waiting(store, engine_ids: list[str]) -> bool:
    return all(store.waiting_since(engine_id) > 0 for engine_id in engine_ids)


def _live_engines(client: Client) -> dict[int, str]:
    return {shard["pid"]: shard["engine_id"] for shard in client.stats()["shards"] if shard.get("engine_id")}


@pytest.mark.timeout(120)
def test_shards_kept_waiting_for_the_write_lock_are_spared_and_one_stopped_meanwhile_is_killed(tmp_path):
    data = tmp_path / "data"
    with RunningSupervisor(data, shards=2, app=APP, args=TIMING) as sup, Client(sup.endpoint, timeout=30) as client:
        engines = wait_until(lambda: len(found := _live_engines(client)) == 2 and found, timeout=20, what="two ready shards")
        handles = [client.start("slow_steps", 6, 0.02, id=f"w-{i}") for i in range(8)]
        store = open_store(str(data))
        stopped = min(engines)
        try:
            with hold_write_lock(store.env):
                # Both shards reach the lock (a heartbeat at the latest) and wait there.
                wait_until(lambda: _waiting(store, list(engines.values())), timeout=10, what="both shards waiting for the write lock")
                until = time.monotonic() + 2.5 * GRACE
                while time.monotonic() < until:
                    text = sup.log_text()
                    assert "is hung" not in text, text[-3000:]
                    assert all(pid_alive(pid) for pid in engines), text[-3000:]
                    time.sleep(0.05)
                # A process stopped while it waits shows nothing: it is judged by the grace.
                os.kill(stopped, signal.SIGSTOP)
                wait_until(lambda: not pid_alive(stopped), timeout=GRACE + 5 * TTL, what="the stopped shard killed as hung")
                time.sleep(2 * TTL)
            text = sup.log_text()
            assert text.count("is hung") == 1 and f"pid {stopped}," in text, text[-3000:]
            survivor = max(engines)
            assert pid_alive(survivor), text[-3000:]
            for handle in handles:
                assert handle.result(timeout=30) == list(range(6))
            text = sup.log_text()
            assert text.count("is hung") == 1 and "deposed" not in text, text[-3000:]
            assert pid_alive(survivor) and client.stats()["supervisor"]["hung_kills"] == 1
        finally:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
            store.close()
