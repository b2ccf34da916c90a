"""The engine liveness locks on PostgreSQL: a session advisory lock per registered engine,
where LMDB has a lock file, and the label a waiting write transaction publishes.

Their own piece because they are the registry's one PostgreSQL-specific concern (``Ownership``
is shared with LMDB): how a lock is named, taken again after a new connection, and probed to
judge a peer gone. ``_store.PgStore`` holds one ``_PgOwnership`` and labels its writes with
``wait_label``; ``_waits`` reads those labels back.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any, Final

import psycopg

from ...codec import unpack_record
from .. import _engines
from .._keys import engine_key
from .._ownership import Ownership
from ._env import PgEnvironment
from ._liveness import relock_engine
from ._waits import waiting_since

__all__ = ["_PgOwnership", "wait_label"]

log = logging.getLogger("weft_actors.store")


class _PgOwnership(Ownership):
    """The registry transactions, with a session advisory lock where LMDB has a lock file.

    The engine's connection holds a lock named for the engine for as long as the engine is
    registered; the server lets go of it when that connection ends. Unlike a lock file, that
    is no proof of death: a connection also ends under a live process (a network blip, a
    restarted server, an administrator's ``pg_terminate_backend``), which then reconnects
    and takes its lock again (``relock``). So a free lock is a hint only: ``process_gone``
    holds an engine gone once its lock is free *and* its lease has expired on the judge's
    lease clock (the server's), or it has no lease (``single`` mode, where a free lock is the
    only sign a successor has). The engine's own supervisor confirms a death at once.
    A write transaction publishes its wait for the write lock as LMDB's wait slot does: it
    names its engine and the lease time it read before the wait in its ``application_name``
    (``wait_label``), which every session sees beside the lock it waits for (``pg_locks``)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self._relock: set[str] = set()
        """This instance's engines whose lock went with a failed connection, not taken again yet."""

    @property
    def _env(self) -> PgEnvironment:
        return self.store.env  # type: ignore[return-value]  # a PgStore's (typed as LMDB's)

    def _engine_lock(self, engine_id: str) -> tuple[int, int]:
        return self._env.lock_key, _int4(engine_id)

    def _lock_engine_file(self, engine_id: str) -> None:
        row = self._env.conn.execute("SELECT pg_try_advisory_lock(%s, %s)", self._engine_lock(engine_id)).fetchone()
        if not (row and row[0]):
            log.warning("engine %s: its lock is held by its previous incarnation", engine_id)
            return
        self._locks[engine_id] = 0

    def _unlock(self, engine_id: str) -> None:
        self._relock.discard(engine_id)  # released: not to be taken again
        if self._locks.pop(engine_id, None) is not None:
            conn = self._env.connection()
            if conn is not None:
                try:
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", self._engine_lock(engine_id))
                except psycopg.Error:
                    pass  # the connection is gone, and the lock with it

    def unlock_all(self) -> None:
        """Let go of every engine lock of this instance now, before its connection closes:
        the server frees a closed session's locks only once its backend has noticed, a
        moment later, and a peer asking meanwhile would not yet see the engine gone."""
        for engine_id in list(self._locks):
            self._unlock(engine_id)

    def relock(self) -> None:
        """After a new connection: take again the locks of this instance's engines. A peer
        probing one (``process_gone``) holds it for a moment: what cannot be had now is asked
        for again at each maintenance pass (``restore_lock_files``)."""
        self._relock.update(self._locks)
        self._locks.clear()
        self.restore_lock_files()

    def restore_lock_files(self) -> None:
        """Take the locks lost with a connection that failed and not taken again yet."""
        for engine_id in list(self._relock):
            if engine_id not in self.incarnations:
                self._relock.discard(engine_id)  # released or never finished registering
                continue
            if relock_engine(self._env, self._engine_lock(engine_id)):
                self._relock.discard(engine_id)
                self._locks[engine_id] = 0
                log.info("engine %s: its liveness lock is held again after a new connection", engine_id)

    def watch_peers(self) -> None:
        pass

    def waiting_since(self, engine_id: str) -> float:
        """When ``engine_id``'s process began to wait for the write lock, as its waiting
        transaction published it (``wait_label``, ``_waits``: an ``AttestedWait``); negated,
        when it got the lock, while its transaction holds it (``PgEnvironment._take_lock``), as
        LMDB's wait slot says; 0.0 if no session of it waits or holds now. A wait outranks a
        hold."""
        return waiting_since(self._env.conn, self._env.lock_key, _WAIT_LABEL, engine_id)

    def remove_files(self, engine_id: str) -> None:
        pass

    def process_gone(self, engine_id: str) -> bool:
        """True when a registered engine's lock is free and its lease has expired (or it has
        none): a free lock alone only says its connection ended (see the class docstring).
        An id with no record proves nothing."""
        if engine_id in self._locks or engine_id in self._relock:
            return False
        conn = self._env.conn  # maybe inside a write transaction (``register_engine``)
        found = conn.execute(f"SELECT v FROM {self.store.dbs.engines} WHERE k = %b", (engine_key(engine_id),), binary=True).fetchone()
        if found is None:
            return False
        store = self.store
        record = unpack_record(found[0])
        if record["mode"] != "single" and _engines.counts_as_live(record, engine_id, store.clock.lease_now(), self.waiting_since, store._refusals.failed_at):
            return False  # its lease holds: the lock may be free only for a moment
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", self._engine_lock(engine_id)).fetchone()
        if not (row and row[0]):
            return False
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", self._engine_lock(engine_id))
        return True


_WAIT_LABEL: Final = "weft_actors:"


def wait_label(engine_id: str, started: float) -> str:
    """The ``application_name`` of a write transaction of ``engine_id`` that read the lease
    time ``started`` before it waited for the write lock (at most 63 bytes, the server's limit)."""
    return f"{_WAIT_LABEL}{engine_id}:{started:.3f}"


def _int4(engine_id: str) -> int:
    """A signed 32-bit number for ``engine_id`` (a collision only keeps a dead engine looking
    alive until its lease expires: the safe way to be wrong)."""
    value = int.from_bytes(hashlib.blake2b(engine_id.encode(), digest_size=4).digest(), "big")
    return value - (1 << 32) if value >= 1 << 31 else value
