"""``PgStore``: the store on a PostgreSQL database that engines on several hosts share.

The same named transactions as ``LmdbStore`` (``_apply``, ``_ownership``, ...) run on
``_txn.PgTxn``; what differs is where the bytes live, how writers are serialised (``_env``),
and whose clock judges leases (``_clock``: the server's).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
import time
from typing import Any, Callable

import psycopg

from ..._clock import Clock, SystemClock
from ...errors import StorageError, WeftError
from .. import _engines
from .._apply import DEFAULT_MAX_INBOX, TxnState
from .._base import ApplierCrashed, KeyspaceStore
from .._dispatch import APPLIER_OF
from .._keys import engine_key
from .._reads import Prefetch
from .._migrate import adopt_lease_clock
from .._refusals import Refusals
from ._clock import ServerClock
from ._connect import HOLD_OFF_MAX, classify
from ._engine_locks import _int4, _PgOwnership, wait_label  # noqa: F401 - _int4: tests import it from here
from ._env import PgEnvironment
from ._writer import BatchWriter
from ._batch_reads import batch_reads
from ._hints import CHANNEL, Listener, notify_payloads
from ._txn import MAX_KEY, OpLedger, Presumption
from ._schema import PgDatabases, check_version, migrate, require_store

__all__ = ["PgStore", "is_postgres_url"]

log = logging.getLogger("weft_actors.store")


def is_postgres_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


class PgStore(KeyspaceStore):
    """One connection to ``url``, used from one thread (the engine's loop thread).

    Leases are judged on the server's clock (``_clock``) unless ``clock`` is a test's own
    (not a ``SystemClock``): then that clock judges them, as on LMDB. ``clock`` is the
    clock to use from then on (the engine adopts it)."""

    env: PgEnvironment  # type: ignore[assignment]  # LMDB-shaped: ``begin()`` (``_env``)
    dbs: Any
    reads_cost_round_trips = True
    """Callers that can read in bulk should (``load_many_for_replay``, ``_reads``)."""
    rejoin_delay = HOLD_OFF_MAX
    """Seconds an engine may take to find the server again after an outage (it is not asked
    within a hold-off, ``_connect.Reachability``): silence that long after one is no hang."""

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        max_inbox: int = DEFAULT_MAX_INBOX,
        readonly: bool = False,
        create: bool = True,
        **_ignored: Any,
    ) -> None:
        self.url = url
        self.max_inbox = max_inbox
        self.readonly = readonly
        self.env = PgEnvironment(url, readonly=readonly)
        self.dbs = PgDatabases()
        conn = self.env.conn
        try:
            if readonly:  # a role that may only read: nothing is created, upgraded or written
                check_version(conn, self.env.where)
            else:
                if not create:  # an operator command: upgrade a store, never make one
                    require_store(conn, self.env.where)
                migrate(conn, self.env.where)
            if clock is None or isinstance(clock, SystemClock):  # a test's clock keeps judging leases
                sent = time.monotonic()
                row = conn.execute(
                    "SELECT system_identifier::text, extract(epoch FROM clock_timestamp())::float8 FROM pg_control_system()"
                ).fetchone()
                assert row is not None
                server_clock = ServerClock(row[0], float(row[1]), sent, time.monotonic(), host=clock)
                self.env.on_clock = server_clock.observe
                clock = server_clock
        except psycopg.Error as exc:
            self.env.close()
            raise StorageError(f"cannot open the store in PostgreSQL at {self.env.where}: {exc}", path=self.env.where, reason=classify(exc)) from exc
        except BaseException:
            self.env.close()
            raise
        self.clock = clock
        self.path = _local_dir(url)
        """Where this host keeps what is its own (stall notes): the database holds the rest."""
        self._refusals, self._presumption = Refusals(self.clock), Presumption(OpLedger(self.dbs.ops, self.dbs.workflows, self.dbs.claim_holder))
        on_server_start: Callable[[float], None] | None = None
        if isinstance(clock, ServerClock):  # leases on the server's clock: none renewed before it started
            on_server_start = self._refusals.floor
            on_server_start(self.env.server_started)
            # Nor before it opened (it saw none of an outage that ended just now: a read-only spell,
            # a server that took no writes), nor while its own round trips stalled (``on_stall``):
            # a lease lapses only once its holder had a ttl of reachable, writable store in this
            # process's sight. A dead engine's claims do not wait: they go by its death record.
            self._refusals.floor(clock.lease_now())
            self.env.on_stall = self._refusals.floor_now
        self.env.on_server_start = on_server_start
        self.commits = 0
        self.writes = 0
        self.write_failure = None
        self.promoted: list[tuple[str, str, str]] = []
        self.before_commit: Callable[[], None] | None = None
        self._engine_locks = _PgOwnership(self)  # type: ignore[arg-type]
        self._ownership = self._engine_locks
        self._incarnations = self._ownership.incarnations
        self.env.on_reconnect = self._ownership.relock
        self._writer: BatchWriter | None = None
        self._listener: Listener | None = None
        if not readonly:
            self._write(lambda txn: adopt_lease_clock(txn, self.dbs, self.clock))

    def listen(self, on_hint: Callable[[list[tuple[str | None, str]]], None]) -> None:
        """Call ``on_hint([(workflow id, kind), ...])`` (from a thread of its own) with the
        hints that other processes' transactions send (``_hints``): messages and endings of
        workflows, from any host. ``kind`` is ``workflow-touched`` or ``workflow-done``; a
        ``None`` id means "look at everything" (many at once, or hints were missed)."""
        if self._listener is None:
            self._listener = Listener(self.url, on_hint, self._own_pids)

    def _own_pids(self) -> set[int]:
        envs = [self.env] + ([self._writer.env] if self._writer is not None and self._writer.env is not None else [])
        return {pid for pid in (env.backend_pid() for env in envs) if pid is not None}

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._engine_locks.unlock_all()
        self.env.close()  # and with the connection, any engine lock still held

    def apply_async(self, engine_id: str, intents: list[Any], done: Callable[[list[Any], bool], None], loop: asyncio.AbstractEventLoop) -> None:
        """``apply`` on this store's writer thread, with a connection of its own, so that the
        loop runs on while the batch is in flight; ``done(results, committed)`` is then called
        on ``loop``. One batch at a time (the caller's contract: ``GroupCommitter``).

        Only the group commit goes there. The other calls run on the caller's thread and
        connection; a write among them waits for the store's lock like any other writer."""
        writer = self._writer
        if writer is None:
            writer = self._writer = BatchWriter(self.url, self.clock, self.env.outcomes, self.env.on_server_start, self.env.on_stall)

        def run() -> tuple[list[Any], bool]:
            before = self.commits
            try:
                results = self.apply(engine_id, intents)
            except BaseException as exc:  # apply turns store failures into results: a bug
                log.exception("store: a batch failed outside its transaction")
                error = StorageError(f"the batch could not be applied: {type(exc).__name__}: {exc}")
                return [error] * len(intents), False
            return results, self.commits != before

        writer.submit(run, done, loop)

    def get_holder_bytes(self, wid: str) -> bytes | None:
        """One statement, outside any transaction: the engine asks before each wake of an
        actor (``wake_guard``), and a snapshot's own round trips would triple its cost."""
        key = wid.encode()
        if not 0 < len(key) <= MAX_KEY:
            return None
        try:
            row = self.env.conn.execute(f"SELECT v FROM {self.dbs.claim_holder} WHERE k = %b", (key,), binary=True).fetchone()
        except psycopg.Error as exc:
            raise self.env.failed(exc, "read failed") from exc
        return None if row is None else bytes(row[0])

    def verify_lock_file(self) -> None:
        """Nothing to verify: the database, not a file, holds the write lock."""

    def within_reserve(self) -> bool:
        return False

    def waiting_on_store(self) -> bool:
        """Whether the loop is in a round trip to the server (``waiting_on_server``)."""
        return self.env.waiting_on_server()

    def writes_refused(self) -> bool:
        """Whether the server refuses writes now (a standby, ``default_transaction_read_only``)
        or cannot be reached: then no engine can renew its lease, and none is hung for it."""
        try:
            row = self.env.conn.execute("SELECT current_setting('transaction_read_only') = 'on' OR pg_is_in_recovery()").fetchone()
        except (psycopg.Error, StorageError) as exc:
            if isinstance(exc, psycopg.Error):
                self.env.failed(exc, "read failed")  # drops a broken connection
            return True
        return bool(row and row[0])

    def read(self) -> Any:
        return self.env.begin()

    def _waiting(self, engine_id: str | None, started: float) -> str | None:
        """The wait to publish for a write (``wait_label``): for ``engine_id``, else for this
        instance's engine (the first, if it registered several)."""
        if engine_id is None:
            engine_id = next(iter(self._incarnations), None)
        return None if engine_id is None else wait_label(engine_id, started)

    def _write(self, fn: Any, prefetch: Prefetch | None = None) -> Any:
        try:
            with self.env.begin(write=True, prefetch=prefetch, waiting=self._waiting(None, self.clock.lease_now())) as txn:
                result = fn(txn)
        except StorageError as exc:
            raise self._write_failed(exc) from exc
        if self.write_failure is not None:
            self._write_recovered()
        return result

    def _apply_once(self, engine_id: str, intents: list[Any], presume: bool = True) -> list[Any]:
        results: list[Any] = []
        clock, presumed = self.clock, self._presumption if presume else None
        started = clock.lease_now()
        env = self._writer.env if self._writer is not None and self._writer.is_current() and self._writer.env is not None else self.env
        try:
            with env.begin(write=True, prefetch=batch_reads(self.dbs, engine_id, intents), waiting=self._waiting(engine_id, started), presumption=presumed) as pg_txn:
                txn: Any = pg_txn  # LMDB-shaped (``_txn``)
                record = _engines.check_live(txn, self.dbs, engine_id, started, self._incarnations.get(engine_id), self._refusals.failed_at)
                now = clock.now()
                lease = clock.lease_now()
                written = self._refusals.write(txn, self.dbs) if self._refusals.pending else None
                state = TxnState(txn, self.dbs, engine_key(engine_id), now, self.max_inbox)  # type: ignore[arg-type]
                if lease >= record["expires_at"] - record["ttl"] + record["heartbeat"]:
                    record["expires_at"] = lease + record["ttl"]
                    _engines.put_engine(txn, self.dbs, state.engine_raw, record)
                for intent in intents:
                    try:
                        results.append(APPLIER_OF[type(intent)](state, intent))
                    except WeftError as exc:
                        results.append(exc)
                    except psycopg.Error:
                        raise  # the transaction's own failure: every intent's
                    except Exception as exc:
                        raise ApplierCrashed(len(results), intent, exc) from exc
                state.flush()
                payloads = notify_payloads(pg_txn, self.dbs.feed, self.dbs.visibility)
                if payloads:
                    pg_txn.notify = (CHANNEL, payloads)
                if self.before_commit is not None:
                    self.before_commit()
        except StorageError as exc:
            if presumed is not None and presumed.refuted(exc):  # nothing committed: once more, upserting (``_presume``)
                return self._apply_once(engine_id, intents, False)
            return [self._write_failed(exc)] * len(intents)
        except psycopg.Error as exc:
            return [self._write_failed(StorageError(f"PostgreSQL at {env.where}: {exc}", path=env.where))] * len(intents)
        except WeftError as exc:  # ``OutcomeUnknown`` too: its commit may yet land (``_outcome``)
            return [exc] * len(intents)
        self._batch_committed(state.promoted, written, len(intents))
        return results


def _local_dir(url: str) -> str:
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"weft-pg-{digest}")
    os.makedirs(os.path.join(path, "engines"), exist_ok=True)
    return path
