"""The outcome of a commit whose connection broke: asked of the server, never guessed.

A connection lost during ``COMMIT`` leaves the client not knowing whether the server made it.
``txid_status`` of the transaction, on a new connection, says ``committed`` or ``aborted``;
``in progress`` means the old session is still finishing it (a slow WAL flush, a synchronous
standby, a stopped backend), and it may yet land. Reporting that as failed would tell a caller
that a start, a signal or a step was lost when it may be in the store, and the engine would
replay the workflow over it. So an in-progress commit is waited out for ``OUTCOME_WAIT``
seconds; past that its batch gets ``OutcomeUnknown``, and the transaction stays *pending*:
every later read of the same store instance asks the server again first, and fails while
it is still in progress, so nothing is replayed from a state that commit may still change.
(Writes need no such check: the pending transaction holds the store's write lock until it
ends, so the next writer's lock is granted only once its outcome is final.)
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Final, Protocol

import psycopg

from ...errors import OutcomeUnknown, StorageError

__all__ = ["OUTCOME_WAIT", "Outcomes", "resolve_commit"]

log = logging.getLogger("weft_actors.store")

OUTCOME_WAIT: Final = 5.0
"""Seconds a batch's caller waits for a commit the server still has in progress."""


class Outcomes:
    """The transactions of one store instance whose outcome is still unknown, shared by the
    connections of its threads (the loop's and the group commit's)."""

    __slots__ = ("_pending", "_lock")

    def __init__(self) -> None:
        self._pending: set[int] = set()
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def add(self, xid: int) -> None:
        with self._lock:
            self._pending.add(xid)

    def settle(self, conn: psycopg.Connection[Any], where: str) -> None:
        """Before a read: ask the server about each pending transaction (one statement) and
        forget those that ended; raise ``StorageError`` while one is still in progress."""
        with self._lock:
            pending = sorted(self._pending)
        if not pending:
            return
        rows = conn.execute("SELECT x, txid_status(x) FROM unnest(%s::bigint[]) AS x", (pending,)).fetchall()
        open_ = [int(xid) for xid, status in rows if status == "in progress"]
        with self._lock:
            self._pending.difference_update(int(xid) for xid, status in rows if status != "in progress")
        if open_:
            raise StorageError(
                f"PostgreSQL at {where}: an earlier commit of this store (transaction {open_[0]}) is still in progress on "
                "the server and may yet land: reads wait for its outcome",
                path=where,
            )
        log.warning("store: PostgreSQL at %s: the earlier commits of unknown outcome have ended (%s)", where, pending)


class _Environment(Protocol):
    """What ``resolve_commit`` needs of the environment whose commit broke."""

    where: str
    outcomes: Outcomes

    def connect(self) -> psycopg.Connection[Any]: ...

    def _drop(self) -> None: ...


def resolve_commit(env: _Environment, xid: int) -> bool:
    """Whether transaction ``xid``, whose connection broke during its commit, committed (its
    connection is dropped first). Waits out ``in progress`` and a server that cannot be
    reached for ``OUTCOME_WAIT`` seconds, then raises ``OutcomeUnknown`` and leaves ``xid``
    pending in ``env.outcomes``."""
    env._drop()
    deadline = time.monotonic() + OUTCOME_WAIT
    pause = 0.005
    status: str | None = "unknown"
    while True:
        try:
            row = env.connect().execute("SELECT txid_status(%s)", (xid,)).fetchone()
            status = None if row is None else row[0]
        except (psycopg.Error, StorageError) as exc:
            env._drop()
            status = f"unknown ({exc})"
        if status == "committed":
            log.warning("store: PostgreSQL at %s: the connection broke during a commit that the server had made", env.where)
            return True
        if status == "aborted":
            return False
        if status is None or time.monotonic() >= deadline:  # None: too old for the server to say
            env.outcomes.add(xid)
            log.error(
                "store: PostgreSQL at %s: the connection broke during a commit whose outcome is still %s after %.0f s "
                "(transaction %s); its batch is answered OutcomeUnknown",
                env.where, status or "unknown", OUTCOME_WAIT, xid,
            )
            raise OutcomeUnknown(
                f"PostgreSQL at {env.where}: the connection broke during the commit and the server has not finished it "
                f"after {OUTCOME_WAIT:.0f} s (transaction {xid}): it may or may not have been applied"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
