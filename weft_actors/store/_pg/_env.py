"""The PostgreSQL connection of one store instance, and its transactions.

A write transaction first takes the store's write lock, a transaction-scoped advisory lock,
in the same statement that reads the server's clock. The lock serialises writers across every
engine on every host as LMDB's writer lock does on one machine, so each named transaction reads,
checks (the fence, the engine's own lease) and writes with nobody writing in between, and
commit order is the order of the feed's sequence numbers (a reader never sees a later entry
before an earlier one commits). A read transaction is one ``REPEATABLE READ`` snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable, Final, Iterator

import psycopg

from ...errors import StorageError
from .._disk import READ_ONLY
from .._reads import Prefetch
from ._arrays import encode, register
from ._batch_sql import BATCH_PLANS, OWN_PLANS, WRITES_DONE, write_settings
from ._lockwait import LockWait
from ._outcome import Outcomes, resolve_commit
from ._connect import CONNECT_LIMIT, READ_LIMIT, SILENT_AFTER, STALLED, UNREACHABLE, NoAnswer, Reachability, classify, open_connection
from ._presume import Presumption
from ._txn import PgTxn, ranges_params, tails_query

__all__ = ["PgEnvironment", "redact"]

log = logging.getLogger("weft_actors.store")


APPLICATION: Final = "weft_actors"
"""Every connection's ``application_name`` outside a write (``_engine_locks.wait_label`` within one)."""

LOCK_HOLD_LIMIT: Final = 2.0
"""Seconds a transaction of this store may keep the server waiting on it. The write lock is the
server's: a process stopped (SIGSTOP, a frozen VM, a host gone without a word) inside a
transaction would hold it, and every writer on every host with it, for as long as its
connection lasts. So the server ends a session idle in its transaction that long
(``idle_in_transaction_session_timeout``), and a writer that waited that long for the lock
ends a holder the server has been waiting on for as long (``PgEnvironment._take_lock``):
the lock is free again within a few seconds, less than a lease (ttl + 2 x heartbeat, 4 s by
default). Our own transactions never pause that long: their longest gap is the applying of
one batch (capped, ``GroupCommitter``)."""


def send_prefetch(conn: psycopg.Connection[Any], prefetch: Prefetch) -> list[Any]:
    """Queue the reads of ``prefetch`` on ``conn`` (in pipeline mode); ``receive_prefetch``
    takes their rows. One statement per keyspace and kind of read, whatever the row count."""
    cursors = []
    for db, keys in prefetch.keys.items():
        cursors.append(conn.execute(f"SELECT k, v FROM {db} WHERE k = ANY(%b)", (encode(keys),), binary=True))
    for db, low, high in prefetch.ranges:
        cursors.append(conn.execute(f"SELECT k, v FROM {db} WHERE k >= %b AND k < %b", (low, high), binary=True))
    for db, (bounds, limit) in prefetch.tails.items():
        cursors.append(conn.execute(tails_query(db), (*ranges_params(bounds), limit), binary=True))
    return cursors


def receive_prefetch(txn: PgTxn, prefetch: Prefetch, cursors: list[Any]) -> None:
    results = iter(cursors)
    for db, keys in prefetch.keys.items():
        txn.cached(db, keys, next(results).fetchall())
    for db, low, high in prefetch.ranges:
        txn.cached_range(db, low, high, next(results).fetchall())
    for db, (bounds, limit) in prefetch.tails.items():
        txn.cached_spans(db, bounds, next(results).fetchall(), limit)


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparsable PostgreSQL URL>"
    host, port, dbname, user = (str(info.get(name, "")) for name in ("host", "port", "dbname", "user"))
    return f"postgresql://{user + '@' if user else ''}{host}{':' + str(port) if port else ''}/{dbname}"


class PgEnvironment:
    """``begin(write=...)`` as LMDB's environment has it. Each thread gets a connection of its
    own (a psycopg connection serves one thread at a time, and LMDB lets every thread read), made
    again after a failure. The thread that made the environment owns the engines' session locks
    (``on_reconnect`` re-takes them on its new connection). ``on_clock(server_now, sent,
    received)`` gets the server's clock as each transaction read it."""

    def __init__(self, url: str, *, connect_timeout: float = CONNECT_LIMIT, connect_now: bool = True, readonly: bool = False) -> None:
        self.url = url
        self.where = redact(url)
        self.readonly = readonly
        """Refuse every write transaction (a store opened read-only, as LMDB's can be)."""
        self._connect_timeout = connect_timeout
        self._reachability = Reachability()
        self._local = threading.local()
        self._owner = threading.get_ident()
        self._all: list[psycopg.Connection[Any]] = []
        self._all_lock = threading.Lock()
        self.lock_key = 0
        self.on_clock: Callable[[float, float, float], None] | None = None
        self.outcomes = Outcomes()
        """Commits of unknown outcome (``_outcome``): a store shares one among its connections."""
        self.on_reconnect: Callable[[], None] | None = None
        self.server_started = 0.0
        """When the server last started (its clock), as this environment's newest connection
        read it: nobody could renew a lease before then (``Refusals.floor``)."""
        self.on_server_start: Callable[[float], None] | None = None
        """Called after the owner thread's connection replaces one that failed (its session
        locks went with it)."""
        self.on_stall: Callable[[], None] | None = None
        """Called after a round trip of any of its connections waited past ``STALLED``."""
        self._owner_connected = False
        self._owner_pid: int | None = None
        self._owner_conn: Any = None
        if connect_now:  # else the first transaction connects (and a failure is that transaction's)
            self.connect()

    def connect(self) -> psycopg.Connection[Any]:
        """The calling thread's connection, made if it has none or its last one failed."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            return conn
        wait = self._reachability.held_off()
        if wait > 0.0:  # lost a moment ago: fail at once rather than wait out another attempt
            raise StorageError(f"cannot connect to PostgreSQL at {self.where}: it was lost; trying again in {wait:.1f} s", path=self.where, reason=UNREACHABLE)
        began = time.monotonic()
        try:
            conn = open_connection(self.url, self._connect_timeout, autocommit=True, application_name=APPLICATION)
        except psycopg.Error as exc:
            self._reachability.lost(silent=time.monotonic() - began >= SILENT_AFTER)
            raise StorageError(f"cannot connect to PostgreSQL at {self.where}: {exc}".strip(), path=self.where, reason=UNREACHABLE) from exc
        self._reachability.reached()
        conn.on_stall = self._stalled
        if time.monotonic() - began > STALLED:  # held up as a round trip can be (``_connect``)
            self._stalled()
        conn.prepare_threshold = 0  # every statement repeats: prepare on first use
        register(conn)  # a batch's arrays, encoded in one pass (``_arrays``)
        try:
            # A generic plan made while a keyspace was empty (a new database) scans it whole for
            # ever after: ``k = ANY(...)`` of a batch then costs O(table). Plan each execution.
            conn.execute("SET plan_cache_mode = force_custom_plan")
            conn.execute(f"SET idle_in_transaction_session_timeout = {int(LOCK_HOLD_LIMIT * 1000)}")
            row = conn.execute(
                "SELECT hashtext(current_schema() || '/weft_actors/write') & 2147483647, "
                "extract(epoch FROM pg_postmaster_start_time())::float8"
            ).fetchone()
        except psycopg.Error as exc:  # a server shutting down as the session began
            conn.close()
            raise StorageError(f"cannot connect to PostgreSQL at {self.where}: {exc}".strip(), path=self.where, reason=UNREACHABLE) from exc
        self.lock_key = int(row[0]) if row else 0  # >= 0: pg_locks shows it as (classid 0, objid key)
        if row is not None and float(row[1]) > self.server_started:
            self.server_started = float(row[1])
            if self.on_server_start is not None:
                self.on_server_start(self.server_started)
        self._lock_timeout = write_settings(int(LOCK_HOLD_LIMIT * 1000))  # and the plans (``_batch_sql``)
        self._lock_query = (
            f"SELECT pg_advisory_xact_lock({self.lock_key}), extract(epoch FROM clock_timestamp())::float8, txid_current(), "
            "extract(epoch FROM clock_timestamp() - statement_timestamp())::float8"
        )
        # The same, publishing the wait before it and the hold after it (``_take_lock``): a
        # target list is evaluated in order, so the row is (label, lock, clock, xid, wait, label).
        self._held_query = (
            f"SELECT set_config('application_name', %s, true), pg_advisory_xact_lock({self.lock_key}), "
            "extract(epoch FROM clock_timestamp())::float8, txid_current(), "
            "extract(epoch FROM clock_timestamp() - statement_timestamp())::float8, set_config('application_name', %s || "
            "round((%s::float8 + extract(epoch FROM clock_timestamp() - statement_timestamp())::float8)::numeric, 3)::text, true)"
        )
        self._local.conn = conn
        with self._all_lock:
            self._all = [kept for kept in self._all if not kept.closed] + [conn]
        if threading.get_ident() == self._owner:
            self._owner_pid = conn.info.backend_pid
            self._owner_conn = conn
            if self._owner_connected and self.on_reconnect is not None:
                self.on_reconnect()
            self._owner_connected = True
        return conn

    def _stalled(self) -> None:
        if self.on_stall is not None:
            self.on_stall()

    def waiting_on_server(self) -> bool:
        """Whether the owner thread (an engine's loop) is in a round trip to the server now,
        begun within its bound: it waits on its store and is not hung; its watchdog stamps its
        loop as turning meanwhile (a network cut held it up, or a stalled server)."""
        conn = self._owner_conn
        since = 0.0 if conn is None else conn.waiting_since
        return since > 0.0 and time.monotonic() - since <= READ_LIMIT + 1.0

    def backend_pid(self) -> int | None:
        """The server pid of the owner thread's connection (whichever thread asks)."""
        return self._owner_pid

    def connection(self) -> psycopg.Connection[Any] | None:
        """The calling thread's open connection, if any, without making one."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        return None if conn is None or conn.closed else conn

    @property
    def conn(self) -> psycopg.Connection[Any]:
        return self.connect()

    def close(self) -> None:
        """Close every thread's connection (and with the owner's, the engines' session locks)."""
        with self._all_lock:
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except psycopg.Error:
                pass
        self._local = threading.local()

    def _drop(self) -> None:
        """Forget the calling thread's connection after a failure (the next use makes one)."""
        conn = self.connection()
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass
        self._local.conn = None

    @contextlib.contextmanager
    def begin(self, write: bool = False, prefetch: Prefetch | None = None, waiting: str | None = None, presumption: Presumption | None = None) -> Iterator[PgTxn]:
        """One transaction: committed when the block ends, rolled back if it raises.
        ``psycopg`` failures become ``StorageError`` (the connection is dropped and made
        again by the next transaction).

        A write transaction's first round trip takes the lock, reads the server's clock and
        reads what ``prefetch`` names (``_reads.Prefetch``) all at once (``_take_lock``): the
        transaction code's reads of those rows then cost nothing. ``waiting`` becomes the
        transaction's ``application_name`` before it asks for the lock: what other sessions
        see of its wait (``_engine_locks.wait_label``). ``presumption`` is what its writes presume new
        (``_presume``: a group commit's)."""
        if write and self.readonly:
            raise StorageError(f"the store at {self.where} was opened read-only: nothing can be written", path=self.where)
        conn = self.connect()
        try:
            txn, xid = self._start(conn, write, prefetch, waiting)
        except psycopg.Error as exc:
            if not conn.broken:
                raise self.failed(exc, "could not begin a transaction") from exc
            # The session had ended before this transaction began (a network blip, a restarted
            # server, an administrator): nothing of it can have committed, so it begins once
            # more on a new connection, which takes the engines' locks again (``on_reconnect``).
            log.warning("store: PostgreSQL at %s: the connection had ended (%s); connecting again", self.where, exc)
            self._drop()
            conn = self.connect()
            try:
                txn, xid = self._start(conn, write, prefetch, waiting)
            except psycopg.Error as again:
                raise self.failed(again, "could not begin a transaction") from again
        txn.presumption = presumption
        try:
            yield txn
        except psycopg.Error as exc:
            self._rollback(conn)
            raise self.failed(exc, "read failed") from exc
        except BaseException:
            self._rollback(conn)
            raise
        try:
            if write:
                with conn.pipeline():
                    conn.execute(BATCH_PLANS)
                    txn.flush()
                    conn.execute(WRITES_DONE)
                    conn.execute("COMMIT")
            else:
                conn.execute("COMMIT")
        except psycopg.Error as exc:
            # The session ended during COMMIT (broken, or the server's last word before it
            # hung up, e.g. ``AdminShutdown``, read before its hang-up): the server may have
            # made the commit, so it is asked, never guessed (unknown: ``OutcomeUnknown``).
            if write and xid is not None and (conn.broken or classify(exc) == UNREACHABLE) and resolve_commit(self, xid):
                return
            self._rollback(conn)
            raise self.failed(exc, "commit failed" if write else "read failed") from exc

    def _start(self, conn: psycopg.Connection[Any], write: bool, prefetch: Prefetch | None, waiting: str | None) -> tuple[PgTxn, int | None]:
        """Begin a transaction on ``conn``: for a write, take the lock (``_take_lock``); for a
        read, a snapshot. Either reads the server's clock for ``on_clock``. Returns the
        transaction and, for a write, its server transaction id."""
        xid: int | None = None
        txn = PgTxn(conn, write)
        if write:
            row, sent = self._take_lock(conn, txn, prefetch, waiting)
            if row is not None:
                xid = int(row[2])
                if self.on_clock is not None:
                    received = time.monotonic()
                    # The reading was taken once the lock was held: the wait (row[3]) is
                    # not network time, so it must not pull the midpoint back by half.
                    self.on_clock(float(row[1]), min(sent + max(float(row[3]), 0.0), received), received)
        else:  # the snapshot and a reading of the server's clock in one round trip
            if self.outcomes.pending:  # nothing is read over a commit that may yet land
                self.outcomes.settle(conn, self.where)
            sent = time.monotonic()
            with conn.pipeline():
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                row = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
            if self.on_clock is not None and row is not None:
                self.on_clock(float(row[0]), sent, time.monotonic())
        return txn, xid

    def _take_lock(self, conn: psycopg.Connection[Any], txn: PgTxn, prefetch: Prefetch | None, waiting: str | None = None) -> tuple[Any, float]:
        """Begin, take the store's write lock, read the server's clock and what ``prefetch``
        names, in one pipelined round trip; returns the lock statement's row and the local
        monotonic time that round trip was sent at (the clock reading lies after it by at
        least the row's wait, ``row[3]``).

        The wait is bounded by ``LOCK_HOLD_LIMIT``: past it, the holder is ended if the server
        has been waiting on it, not working for it, for that long, the holders are named in a
        warning (``_lockwait``), and the lock is asked for again. Its process may have stopped between two messages
        of a pipeline, where the server's own idle timer does not run, or its host may be
        gone without a word. Ended, its transaction is rolled back: nothing it did commits.

        ``waiting`` (``label:started``) is published before the wait; the statement that gets
        the lock publishes ``label:-held`` (``started`` plus the server's wait, negated), as
        LMDB's wait slot is negated: a peer or the supervisor then sees a process committing
        what it waited for, not a silent one."""
        wait: LockWait | None = None
        while True:
            sent = time.monotonic()
            try:
                with conn.pipeline():
                    conn.execute("BEGIN")
                    conn.execute(self._lock_timeout)
                    if waiting is None:
                        lock = conn.execute(self._lock_query)
                    else:
                        if wait is not None:  # its commit gives the session its plain name back
                            conn.execute("SELECT set_config('application_name', %s, false)", (APPLICATION,))
                        label, _, started = waiting.rpartition(":")
                        lock = conn.execute(self._held_query, (waiting, label + ":-", float(started)))
                    reads = [] if prefetch is None else send_prefetch(conn, prefetch)
                    conn.execute(OWN_PLANS)
                    row = lock.fetchone()
                    if prefetch is not None:
                        receive_prefetch(txn, prefetch, reads)
                return (row if waiting is None or row is None else row[1:]), sent
            except psycopg.errors.LockNotAvailable:
                with conn.pipeline():  # still named as waiting between two requests (``_waits``)
                    conn.execute("ROLLBACK")
                    if waiting is not None:
                        conn.execute("SELECT set_config('application_name', %s, false)", (waiting,))
                if wait is None:
                    wait = LockWait(self.lock_key, LOCK_HOLD_LIMIT, self.where)
                wait.timed_out(conn)

    def _rollback(self, conn: psycopg.Connection[Any]) -> None:
        try:
            if not conn.closed:
                conn.execute("ROLLBACK")
        except psycopg.Error:
            self._drop()

    def failed(self, exc: psycopg.Error, what: str) -> StorageError:
        """``exc`` as a ``StorageError``; the connection is dropped if it is broken."""
        conn = self.connection()
        if isinstance(exc, psycopg.OperationalError) or conn is None or conn.broken:
            self._drop()
        reason = classify(exc)
        if reason == READ_ONLY:
            what += ": the server refuses writes (a standby, or default_transaction_read_only); retried until it takes them"
        elif reason == UNREACHABLE:
            self._reachability.lost(silent=isinstance(exc, NoAnswer))
            what += ": the server cannot be reached; retried until it can"
        return StorageError(f"PostgreSQL at {self.where}: {what}: {type(exc).__name__}: {exc}".strip(), path=self.where, reason=reason)
