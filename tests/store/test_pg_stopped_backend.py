"""A PostgreSQL backend stopped (SIGSTOP) while it waited for the store's write lock is
granted the lock while stopped, and no client can end it until it resumes: every writer of
every host waits. That wait must be loud and harmless: each waiting writer names the holder
in a WARNING, nobody is judged hung or expired for waiting on the database, and writes go on
within a second of the backend's return, with nothing lost."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest

from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow
from weft_actors.store._pg import PgStore
from weft_actors.store._pg._env import LOCK_HOLD_LIMIT
from weft_actors.supervisor._liveness import judge_shards

pytestmark = pytest.mark.timeout(60)

HEARTBEAT, TTL = 0.2, 0.6


def lock_rows(conn: psycopg.Connection[Any], store: Any) -> list[tuple[int, bool]]:
    """``(pid, granted)`` of every session holding or queued for ``store``'s write lock."""
    return [
        (int(pid), bool(granted))
        for pid, granted in conn.execute(
            "SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND classid = 0 AND objid = %s::oid",
            (store.env.lock_key,),
        ).fetchall()
    ]


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class Call(threading.Thread):
    """``fn(*args)`` in a thread; ``result`` (or ``error``) and when it returned."""

    def __init__(self, fn: Any, *args: Any) -> None:
        super().__init__(daemon=True, name=getattr(fn, "__name__", "call"))
        self.fn, self.args = fn, args
        self.result: Any = None
        self.error: BaseException | None = None
        self.done_at = 0.0
        self.start()

    def run(self) -> None:
        try:
            self.result = self.fn(*self.args)
        except BaseException as exc:  # reported by the test
            self.error = exc
        self.done_at = time.monotonic()


def test_a_backend_stopped_holding_the_write_lock_is_named_and_stalls_nobody_into_a_judgment(schema_url, caplog):
    caplog.set_level(logging.WARNING, logger="weft_actors.store")
    stopped_side, waiting_side, judge = PgStore(schema_url), PgStore(schema_url), PgStore(schema_url)
    watcher = psycopg.connect(schema_url, autocommit=True)
    holder = psycopg.connect(schema_url, autocommit=True)
    stopped_pid: int | None = None
    try:
        a, b = uuid.uuid4().hex, uuid.uuid4().hex
        stopped_side.register_engine(a, heartbeat=HEARTBEAT, ttl=TTL)
        waiting_side.register_engine(b, heartbeat=HEARTBEAT, ttl=TTL)
        for store, engine in ((stopped_side, a), (waiting_side, b)):
            (held,) = store.apply(engine, [CreateWorkflow(f"held-by-{engine}", "Order", encode_args((1,)), uuid.uuid4().hex)])
            assert isinstance(held, Created), held
        try:
            # Engine a's backend queues for the lock, is stopped there, and is granted it stopped.
            holder.execute("BEGIN")
            holder.execute("SELECT pg_advisory_xact_lock(%s)", (stopped_side.env.lock_key,))
            beat = Call(stopped_side.heartbeat, a)  # on that thread's own connection
            wait_until(lambda: any(not granted for _, granted in lock_rows(watcher, stopped_side)), 10.0, "engine a's backend to queue")
            pid = next(pid for pid, granted in lock_rows(watcher, stopped_side) if not granted)
            os.kill(pid, signal.SIGSTOP)
            stopped_pid = pid
            holder.execute("ROLLBACK")
            wait_until(lambda: (pid, True) in lock_rows(watcher, stopped_side), 10.0, "the stopped backend to be granted the lock")

            # Engine b writes, and waits behind it.
            write = Call(waiting_side.apply, b, [CreateWorkflow("after-stop", "Order", encode_args((1,)), uuid.uuid4().hex)])
            wait_until(lambda: f"session {pid} " in caplog.text, LOCK_HOLD_LIMIT + 5.0, "a warning naming the stopped holder")
            warning = next(r for r in caplog.records if f"session {pid} " in r.getMessage())
            assert warning.levelno == logging.WARNING
            assert "weft_actors:" + a in warning.getMessage()  # its application names engine a
            assert "waited" in warning.getMessage() and "in its transaction for" in warning.getMessage()

            # Both engines are long silent (more than LOCK_WAIT_GRACE ttls), and both only wait
            # on the database: the supervisor's judgment and a peer's spare them, throughout.
            wait_until(lambda: judge.waiting_since(a) > 0 and judge.waiting_since(b) > 0, 5.0, "both waits to be seen")
            sampled_until = time.monotonic() + 0.5
            while time.monotonic() < sampled_until:
                judged = judge_shards(judge, [(a, 0.0), (b, 0.0)], TTL)
                assert judged.reasons == [None, None], judged.reasons
                assert judge.reclaim_candidates(uuid.uuid4().hex) == []  # a peer takes nothing of theirs
            assert write.is_alive()  # still waiting
        finally:
            if stopped_pid is not None:
                os.kill(stopped_pid, signal.SIGCONT)
            resumed = time.monotonic()
            holder.close()
        beat.join(10.0)
        write.join(10.0)
        assert beat.error is None, beat.error
        assert write.error is None, write.error
        (created,) = write.result
        assert isinstance(created, Created) and created.created, created
        assert write.done_at - resumed < 1.0, f"writes resumed {write.done_at - resumed:.2f} s after the holder's return"
        assert waiting_side.get_workflow("after-stop")["status"] == "running"
        engines = judge.engines()
        assert engines[a]["state"] == "live" and engines[b]["state"] == "live"
    finally:
        watcher.close()
        for store in (stopped_side, waiting_side, judge):
            store.close()
