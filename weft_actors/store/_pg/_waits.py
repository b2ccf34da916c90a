"""Reading other engines' waits for the write lock from the server, and trusting them.

A write transaction names its engine and the lease time it read before its wait in its
``application_name`` (``_engine_locks.wait_label``). The server shows that name beside the session's
queued lock in ``pg_locks``, which is better evidence than LMDB's wait slot: the wait is the
server's own, and it cannot outlive its process by long, since each request for the lock gives
up after ``LOCK_HOLD_LIMIT`` (``lock_timeout``) unless the process asks again. So such a wait
is an ``AttestedWait``: trusted for as long as it lasts, not only ``LOCK_WAIT_GRACE`` ttls. A
writer behind a backend that stalled holding the lock (a SIGSTOP of the server process, which
no client can end until it resumes) then waits as long as that takes, and nobody judges it
hung or expired for it. A session granted the lock while the server still runs its statement
(``active``) waits on the server too: its backend was stopped, not its process.

Between two requests for the lock a writer is out of the queue for a round trip or two
(``_lockwait``); it keeps its name for the session meanwhile (``PgEnvironment._take_lock``),
so a session that bears it, holds no lock, and changed state less than ``REQUEUE_GRACE``
seconds ago still waits. Its next commit gives the session its plain name back.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg

from .._engines import AttestedWait

__all__ = ["REQUEUE_GRACE", "waiting_since"]

REQUEUE_GRACE: Final = 1.0
"""Seconds a writer between two requests for the lock still counts as waiting."""

_QUERY: Final = (
    "SELECT a.application_name FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid "
    "AND l.locktype = 'advisory' AND l.classid = 0 AND l.objid = %s::oid AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "WHERE a.datname = current_database() AND a.application_name LIKE %s AND ("
    "(l.pid IS NOT NULL AND (NOT l.granted OR a.state = 'active' OR a.application_name LIKE '%%:-%%')) "
    "OR (l.pid IS NULL AND a.state_change > clock_timestamp() - make_interval(secs => %s)))"
)


def waiting_since(conn: psycopg.Connection[Any], lock_key: int, prefix: str, engine_id: str) -> float:
    """When ``engine_id``'s process began to wait for the write lock (an ``AttestedWait``);
    else, negated, when a transaction of it that holds the lock got it (its label's time is
    negative then: ``PgEnvironment._take_lock``); else 0.0."""
    try:
        rows = conn.execute(_QUERY, (lock_key, f"{prefix}{engine_id}:%", REQUEUE_GRACE)).fetchall()
    except psycopg.Error:
        return 0.0  # proves nothing either way: the lease alone judges
    published = [_label_time(name) for (name,) in rows]
    waits = [since for since in published if since > 0.0]
    if waits:
        return AttestedWait(min(waits))
    holds = [since for since in published if since < 0.0]
    return max(holds) if holds else 0.0


def _label_time(name: str) -> float:
    """The time a wait label ends with (negative once the lock is held), or 0.0."""
    try:
        return float(name.rpartition(":")[2])
    except ValueError:
        return 0.0
