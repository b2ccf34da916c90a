"""A writer's long wait for the store's write lock: who holds it, said out loud, and a
stopped client holding it ended.

A write asks for the lock for ``LOCK_HOLD_LIMIT`` seconds at a time (``lock_timeout``).
Each time that runs out, ``LockWait.timed_out`` looks at the sessions holding the lock in one
statement: it ends a holder whose client has sent nothing for that long (the server waits on
it: a stopped process, a lost host; its transaction is rolled back), and it names every
holder in a WARNING -- pid, client, application (a weft writer's names its engine), state,
what it waits on and since when -- at once, and every ``REPORT_EVERY`` seconds while the
wait goes on. A holder the server itself has stopped (a SIGSTOP of its backend) cannot be
ended by anyone until it resumes; the warning is then the operator's only clue, so it is
never silent. The writer is out of the lock's queue only for that statement's round trip.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

import psycopg

__all__ = ["LockWait", "REPORT_EVERY"]

log = logging.getLogger("weft_actors.store")

REPORT_EVERY: Final = 10.0
"""Seconds between two warnings of one writer's wait, after the first."""

_HOLDERS: Final = (
    "SELECT CASE WHEN a.wait_event = 'ClientRead' AND a.state_change < clock_timestamp() - make_interval(secs => %s) "
    "THEN pg_terminate_backend(a.pid) ELSE false END, "
    "a.pid, coalesce(a.client_addr::text, 'local'), a.application_name, a.state, "
    "coalesce(a.wait_event_type || ':' || a.wait_event, 'running'), "
    "extract(epoch FROM clock_timestamp() - coalesce(a.xact_start, a.backend_start))::float8, "
    "extract(epoch FROM clock_timestamp() - a.state_change)::float8 "
    "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.classid = 0 AND l.objid = %s::oid "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND a.pid <> pg_backend_pid()"
)


class LockWait:
    """One write's wait for the lock (made when it first times out)."""

    __slots__ = ("_lock_key", "_limit", "_where", "_began", "_reported")

    def __init__(self, lock_key: int, limit: float, where: str) -> None:
        self._lock_key = lock_key
        self._limit = limit
        self._where = where
        self._began = time.monotonic() - limit
        self._reported = 0.0

    def timed_out(self, conn: psycopg.Connection[Any]) -> None:
        """After a request for the lock ran out (its transaction rolled back): end a stalled
        client holding it, and name the holders when a warning is due."""
        holders = conn.execute(_HOLDERS, (self._limit, self._lock_key)).fetchall()
        for ended, pid, client, application, state, _, _, idle in holders:
            if ended:
                log.warning(
                    "store: ended PostgreSQL session %s (client %s, %s, %s): it held the write lock and "
                    "sent nothing for %.0f s (a stopped process or a lost host); its transaction is rolled back",
                    pid, client, application, state, idle,
                )
        now = time.monotonic()
        if self._reported and now - self._reported < REPORT_EVERY:
            return
        self._reported = now
        named = "; ".join(
            f"session {pid} (client {client}, application {application!r}, {state}, {waiting}, in its transaction for {age:.1f} s, "
            f"in this state for {idle:.1f} s)"
            for ended, pid, client, application, state, waiting, age, idle in holders
            if not ended
        )
        log.warning(
            "store: PostgreSQL at %s: a write has waited %.1f s for the store's write lock, held by %s",
            self._where, now - self._began, named or "a session that has just let go of it",
        )
