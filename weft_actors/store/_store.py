"""``LmdbStore``: the embedded default store. Every write is a named transaction."""

from __future__ import annotations

import fcntl
import logging
import os
from typing import Any, Callable, Iterable

import lmdb

from .._clock import Clock, SystemClock
from ..codec import unpack_record
from ..errors import StorageError, StorageFull, WeftError
from . import _engines, _listing, _queries
from ._apply import DEFAULT_MAX_INBOX, TxnState, next_epoch, release_claims
from ._dispatch import APPLIER_OF
from ._quarantine import QUARANTINED, note_lost_owner, read_stall_note, stall_note_path
from ._feed import feed_head, read_feed
from ._upkeep import UpkeepMixin
from ._messages import RequestsMixin
from ._env import DEFAULT_MAP_SIZE, check_ownership_mode, close_environment, lock_file_replaced, open_environment
from ._reserve import GROWTH, StorageReserve
from ._keys import NO_ENGINE, STATUS_CODES, TERMINAL, by_engine_key, engine_key, holder_value, split_holder


__all__ = ["LmdbStore"]

log = logging.getLogger("weft_actors.store")


class _ApplierCrashed(Exception):
    """An applier raised something other than a ``WeftError``: the transaction is unusable."""

    def __init__(self, index: int, intent: Any, cause: BaseException) -> None:
        super().__init__(index)
        self.index = index
        wid = getattr(intent, "wid", None)
        log.error(
            "store: %s for workflow %r could not be applied (%s: %s); it fails alone, the rest of its batch is applied again",
            type(intent).__name__, wid, type(cause).__name__, cause, exc_info=cause,
        )
        self.error = StorageError(
            f"{type(intent).__name__} for workflow {wid!r} could not be applied: {type(cause).__name__}: {cause}",
            workflow_id=wid,
            cause=f"{type(cause).__name__}: {cause}",
        )


class LmdbStore(UpkeepMixin, RequestsMixin):
    """One LMDB environment, opened in the process that uses it (never across a fork).

    Not thread-safe for writes: one thread (the engine's loop thread) commits.
    """

    def __init__(
        self,
        path: str,
        *,
        clock: Clock | None = None,
        map_size: int = DEFAULT_MAP_SIZE,
        sync: bool = True,
        readonly: bool = False,
        max_inbox: int = DEFAULT_MAX_INBOX,
    ) -> None:
        self.path = os.path.abspath(path)
        self.max_inbox = max_inbox
        self.clock = clock or SystemClock()
        self.env, self.dbs = open_environment(self.path, map_size=map_size, sync=sync, readonly=readonly)
        self._real_path = os.path.realpath(self.path)
        """The path the environment was opened at (resolved once: ``verify_lock_file`` runs
        every maintenance pass, and resolving costs a ``stat`` per path component)."""
        self._reserve = StorageReserve(self.env, self.dbs)
        self.commits = 0
        self.writes = 0
        self._locks: dict[str, int] = {}
        self._closed = False
        self._incarnations: dict[str, str] = {}
        """engine id -> the incarnation this instance registered: a record re-registered by
        someone else is no longer ours, and every commit checks that."""
        self._lock_lost: StorageError | None = None
        """Set once ``lock.mdb`` is found replaced: from then on nothing is written."""
        self.before_commit: Callable[[], None] | None = None
        """Called inside ``apply``'s transaction once every intent is applied, just before the
        commit: the crash-test failpoint ``commit:after-apply`` (``None`` otherwise)."""
        self.write_wait: Any = None
        """A shared slot (``write_wait[0]``, e.g. a ``multiprocessing.RawArray("d", 1)``) where
        this process publishes when it began to wait for the write lock (0.0 while it does
        not wait): its supervisor tells a shard blocked behind another's stalled transaction
        from a hung one by it. ``None``: nothing is published."""

    def close(self) -> None:
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()
        if not self._closed:  # the environment is shared: release this instance's use once
            self._closed = True
            close_environment(self.path)

    # -- writes ---------------------------------------------------------------------------

    def apply(self, engine_id: str, intents: list[Any]) -> list[Any]:
        """Apply ``intents`` in one transaction and commit once (one fsync).

        Returns one entry per intent: its result, or the ``WeftError`` that rejected it alone.
        If the transaction itself fails every entry is that error; if the engine is no longer
        live every entry is ``EngineDeposed``. Nothing is committed for a rejected intent.
        Within the storage reserve (``_reserve``) intents that only add data get ``StorageFull``.

        An applier checks before it writes, so a ``WeftError`` leaves nothing behind. Any other
        exception (a bug, or input no check foresaw) may have left part of its writes in the
        transaction: the whole transaction is aborted, that intent gets a ``StorageError``
        naming the original error, and the batch is applied again without it. A nested
        transaction per intent would make this cheaper to recover from but costs ~20 % of
        the hot path, so the recovery is the rare path instead.
        """
        if self._lock_lost is not None:
            return [self._lock_lost] * len(intents)
        try:
            return self._apply_once(engine_id, intents)
        except _ApplierCrashed as crash:
            refused = {crash.index: crash.error}
        while True:  # the rare path: each pass drops one more crashing intent
            positions = [i for i in range(len(intents)) if i not in refused]
            if not positions:
                return [refused[i] for i in range(len(intents))]
            try:
                results = self._apply_once(engine_id, [intents[i] for i in positions])
            except _ApplierCrashed as crash:
                refused[positions[crash.index]] = crash.error
                continue
            merged: list[Any] = [None] * len(intents)
            for i, result in zip(positions, results):
                merged[i] = result
            for i, error in refused.items():
                merged[i] = error
            return merged

    def _apply_once(self, engine_id: str, intents: list[Any]) -> list[Any]:
        results: list[Any] = []
        # This engine's own lease is judged by the time before it waited for the write lock:
        # a wait behind another process's stalled transaction is no stall of its own. A stale
        # time cannot pass once anyone acted on its expiry (they mark it; see ``_engines``).
        started = self.clock.now()
        wait = self.write_wait
        if wait is not None:
            wait[0] = started
        try:
            with self.env.begin(write=True) as txn:
                if wait is not None:
                    wait[0] = 0.0
                record = _engines.check_live(txn, self.dbs, engine_id, started, self._incarnations.get(engine_id))
                now = self.clock.now()  # for the records and the lease: read holding the lock
                full = self._reserve.check(txn)
                if full is not None and all(type(intent) in GROWTH for intent in intents):
                    raise full  # nothing to commit, not even the lease extension below
                state = TxnState(txn, self.dbs, engine_key(engine_id), now, self.max_inbox)
                if now >= record["expires_at"] - record["ttl"] + record["heartbeat"]:
                    # A busy engine's commits carry its heartbeat: a long loop turn full of
                    # work must not let its own lease lapse.
                    record["expires_at"] = now + record["ttl"]
                    _engines.put_engine(txn, self.dbs, state.engine_raw, record)
                for intent in intents:
                    kind = type(intent)
                    if full is not None and kind in GROWTH:
                        results.append(full)
                        continue
                    try:
                        results.append(APPLIER_OF[kind](state, intent))
                    except WeftError as exc:
                        results.append(exc)
                    except Exception as exc:
                        if isinstance(exc, lmdb.Error) and not isinstance(exc, lmdb.BadValsizeError):
                            raise  # the transaction's own failure (map full, I/O): every intent's
                        raise _ApplierCrashed(len(results), intent, exc) from exc
                state.flush()
                if self.before_commit is not None:
                    self.before_commit()
        except WeftError as exc:
            return [exc] * len(intents)
        except lmdb.MapFullError as exc:
            error = StorageFull(f"store is full (map size {self.env.info()['map_size']} bytes): {exc}")
            return [error] * len(intents)
        except lmdb.Error as exc:
            error = StorageError(f"commit failed: {exc}")
            return [error] * len(intents)
        self.commits += 1
        self.writes += len(intents)
        return results

    def verify_lock_file(self) -> None:
        """Raise ``StorageError`` (naming the file) if ``lock.mdb`` was deleted or replaced
        since this process opened the store; from then on this instance commits nothing.

        Every non-batch write runs it, and the engine's maintenance pass (each heartbeat and
        hint), so the commit path itself pays only one attribute test.
        """
        if self._lock_lost is None:
            self._lock_lost = lock_file_replaced(self._real_path)
            if self._lock_lost is not None:
                log.error("%s", self._lock_lost)
        if self._lock_lost is not None:
            raise self._lock_lost

    def _write(self, fn: Any) -> Any:
        self.verify_lock_file()
        wait = self.write_wait
        if wait is not None:
            wait[0] = self.clock.now()
        try:
            with self.env.begin(write=True) as txn:
                if wait is not None:
                    wait[0] = 0.0
                return fn(txn)
        except lmdb.MapFullError as exc:
            raise StorageFull(f"store is full: {exc}") from exc
        except lmdb.Error as exc:
            raise StorageError(f"commit failed: {exc}") from exc

    def register_engine(
        self,
        engine_id: str,
        *,
        heartbeat: float,
        ttl: float,
        mode: str = "workflow-lease",
        slot: int | None = None,
        pid: int | None = None,
    ) -> None:
        """Record a new live engine; check the ownership-mode marker first.

        A refused engine (another mode, or a second live one in ``single`` mode) writes
        nothing. Also takes an exclusive lock on a file named for the engine: the lock dies
        with the process, so a peer on this machine can confirm the death without waiting for
        expiry. In ``single`` mode the record never expires (there are no heartbeats).
        """
        incarnation = os.urandom(8).hex()
        raw = engine_key(engine_id)

        def txn_fn(txn: lmdb.Transaction) -> None:
            now = self.clock.now()
            check_ownership_mode(txn, self.dbs, mode)
            if mode == "single":
                # A single engine killed a moment ago must not block its own restart. Probed
                # after the marker check, in this transaction: a refused engine writes nothing.
                for key, value in list(txn.cursor(db=self.dbs.engines)):
                    record = unpack_record(value)
                    if key.hex() != engine_id and record["state"] == "live" and self.process_gone(key.hex()):
                        record["state"] = "dead"
                        record["ended"] = now
                        _engines.put_engine(txn, self.dbs, key, record)
                _engines.refuse_second_single(txn, self.dbs, engine_id, now)
            if _engines.engine_record(txn, self.dbs, raw) is not None:
                # The same id registered again: the old incarnation is deposed by its next
                # commit, and whatever it held becomes reclaimable now instead of never.
                release_claims(TxnState(txn, self.dbs, raw, now))
            _engines.put_engine(
                txn,
                self.dbs,
                raw,
                {
                    "slot": slot,
                    "pid": pid if pid is not None else os.getpid(),
                    "state": "live",
                    "heartbeat": heartbeat,
                    "ttl": ttl,
                    "expires_at": float("inf") if mode == "single" else now + ttl,
                    "started": now,
                    "cursor": feed_head(txn, self.dbs),
                    "mode": mode,
                    "incarnation": incarnation,
                    "ended": None,
                },
            )

        # Locked before the record exists: a peer that sees the record live and probes the
        # lock must never find it free while this engine is starting.
        self._lock_engine_file(engine_id)
        try:
            self._write(txn_fn)
        except BaseException:
            fd = self._locks.pop(engine_id, None)
            if fd is not None:  # refused: leave no trace, not even the lock file
                try:
                    os.unlink(self._lock_path(engine_id))
                except OSError:
                    pass
                os.close(fd)
            raise
        self._incarnations[engine_id] = incarnation

    def heartbeat(self, engine_id: str, feed_cursor: int | None = None) -> dict[str, Any]:
        """Extend this engine's lease; ``EngineDeposed`` if it is dead, expired, gone or
        registered again by someone else. One write, whatever the number of claims. The lease
        is judged by the time before the wait for the write lock, and extended from the time
        after it (see ``_engines``)."""
        started = self.clock.now()

        def txn_fn(txn: lmdb.Transaction) -> dict[str, Any]:
            record = _engines.check_live(txn, self.dbs, engine_id, started, self._incarnations.get(engine_id))
            now = self.clock.now()
            if record["mode"] != "single":
                record["expires_at"] = now + record["ttl"]
            if feed_cursor is not None:
                record["cursor"] = feed_cursor
            _engines.put_engine(txn, self.dbs, engine_key(engine_id), record)
            return record

        return self._write(txn_fn)

    def mark_engine_dead(self, engine_id: str) -> bool:
        """Confirmed death: the engine's claims become reclaimable at once. Idempotent."""

        def txn_fn(txn: lmdb.Transaction) -> bool:
            raw = engine_key(engine_id)
            record = _engines.engine_record(txn, self.dbs, raw)
            if record is None or record["state"] == "dead":
                return False
            record["state"] = "dead"
            record["ended"] = self.clock.now()
            _engines.put_engine(txn, self.dbs, raw, record)
            return True

        return self._write(txn_fn)

    def release_engine(self, engine_id: str) -> int:
        """Graceful stop: release every claim of the engine and mark it stopped, so that any
        live engine reclaims its running workflows at once. A no-op for an engine that is no
        longer this instance's live registration (dead, expired, or registered again): a
        deposed engine commits nothing, and its claims are reclaimable anyway."""
        started = self.clock.now()  # its own lease, judged as in ``apply``

        def txn_fn(txn: lmdb.Transaction) -> int:
            raw = engine_key(engine_id)
            record = _engines.engine_record(txn, self.dbs, raw)
            mine = self._incarnations.get(engine_id)
            now = self.clock.now()
            if record is None or not _engines.is_live(record, started) or (mine is not None and record.get("incarnation") != mine):
                return 0
            moved = release_claims(TxnState(txn, self.dbs, raw, now))
            record["state"] = "stopped"
            record["ended"] = now
            _engines.put_engine(txn, self.dbs, raw, record)
            return moved

        moved = self._write(txn_fn)
        fd = self._locks.pop(engine_id, None)
        if fd is not None:
            os.close(fd)
        return moved

    def takeover(self, engine_id: str, candidates: Iterable[tuple[str, bytes | None]]) -> dict[str, int | None]:
        """CAS each ``(wid, holder bytes read)`` to this engine; epoch + 1 for every winner.

        A candidate whose holder changed since it was read, or whose workflow is no longer
        running, is lost (``None``). One transaction for the whole list. An engine taken from
        that has expired is marked ``expired`` here (``_engines.mark_expired``), so it commits
        nothing more however stale the time it judges its own lease by; one still live (it
        renewed since the candidates were read) only loses that workflow: its writes for it
        are fenced out by the new epoch.
        """
        me = engine_key(engine_id)
        started = self.clock.now()  # its own lease, judged as in ``apply``

        def txn_fn(txn: lmdb.Transaction) -> dict[str, int | None]:
            mine = _engines.check_live(txn, self.dbs, engine_id, started, self._incarnations.get(engine_id))
            now = self.clock.now()  # others' expiry is judged holding the lock
            if mine["mode"] != "single" and now >= mine["expires_at"] - mine["ttl"] + mine["heartbeat"]:
                mine["expires_at"] = now + mine["ttl"]  # carries its heartbeat, as in apply
                _engines.put_engine(txn, self.dbs, me, mine)
            state = TxnState(txn, self.dbs, me, now)
            won: dict[str, int | None] = {}
            stalls: dict[bytes, dict[str, Any] | None] = {}  # lost engine -> its stall note
            marked: set[bytes] = set()
            for wid, expected in candidates:
                wid_raw = wid.encode()
                holder = txn.get(wid_raw, db=self.dbs.claim_holder)
                record_raw = txn.get(wid_raw, db=self.dbs.workflows)
                record = None if record_raw is None else unpack_record(record_raw)
                if holder != expected or record is None or record["status"] != "running":
                    won[wid] = None
                    continue
                if holder is not None:  # its owner was lost holding it (a release leaves no holder)
                    lost_engine = holder[:16]
                    if lost_engine not in stalls:
                        stalls[lost_engine] = read_stall_note(stall_note_path(self.path, lost_engine.hex()))
                    note_lost_owner(state, wid, record, stalls[lost_engine])
                old_engine = NO_ENGINE if holder is None else holder[:16]
                if holder is not None and old_engine not in marked:
                    marked.add(old_engine)
                    if old_engine != me:
                        _engines.mark_expired(txn, self.dbs, old_engine, now)
                txn.delete(by_engine_key(old_engine, wid), db=self.dbs.by_engine)
                epoch = next_epoch(state, wid_raw)
                txn.put(wid_raw, holder_value(me, epoch, now), db=self.dbs.claim_holder)
                txn.put(by_engine_key(me, wid), b"", db=self.dbs.by_engine)
                won[wid] = epoch
            return won

        return self._write(txn_fn)

    # -- liveness by lock file ------------------------------------------------------------

    def _lock_path(self, engine_id: str) -> str:
        return os.path.join(self.path, "engines", engine_id + ".lock")

    def _lock_engine_file(self, engine_id: str) -> None:
        os.makedirs(os.path.join(self.path, "engines"), exist_ok=True)
        fd = os.open(self._lock_path(engine_id), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # The id's previous incarnation still runs and holds it; peers then see this id
            # as alive until that process exits, which only delays a takeover.
            os.close(fd)
            log.warning("engine %s: lock file is held by its previous incarnation", engine_id)
            return
        self._locks[engine_id] = fd

    def restore_lock_files(self) -> None:
        """Recreate the lock file of each engine this instance holds if it was deleted or
        replaced: without it peers cannot confirm this engine's death (they only wait for its
        lease to expire). Cheap (one ``stat`` per engine); the maintenance pass runs it."""
        for engine_id, fd in list(self._locks.items()):
            path = self._lock_path(engine_id)
            try:
                held = os.fstat(fd)
                current = os.stat(path)
                if (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino):
                    continue
            except FileNotFoundError:
                pass
            except OSError:
                continue
            log.warning("engine %s: its lock file %s was deleted or replaced; recreating it", engine_id, path)
            del self._locks[engine_id]
            self._lock_engine_file(engine_id)
            if engine_id in self._locks:
                os.close(fd)
            else:
                self._locks[engine_id] = fd  # someone else holds the new file: keep ours

    def process_gone(self, engine_id: str) -> bool:
        """True when the process that registered ``engine_id`` has surely exited: its lock
        file exists and is free. A missing lock file proves nothing (it may have been deleted
        under a live engine): confirmed death then comes from the supervisor's reaping or
        from the lease's expiry."""
        if engine_id in self._locks:
            return False
        path = self._lock_path(engine_id)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return True

    # -- reads ----------------------------------------------------------------------------

    def read(self) -> lmdb.Transaction:
        return self.env.begin()

    def within_reserve(self) -> bool:
        """Whether growth is refused now (``_reserve``): the store's pages reach into its reserve."""
        with self.env.begin() as txn:
            return self._reserve.check(txn) is not None

    def feed_head(self) -> int:
        with self.env.begin() as txn:
            return feed_head(txn, self.dbs)

    def get_workflow(self, wid: str) -> dict[str, Any] | None:
        with self.env.begin() as txn:
            return _queries.get_workflow(txn, self.dbs, wid)

    def get_holder(self, wid: str) -> tuple[str, int, float] | None:
        with self.env.begin() as txn:
            raw = txn.get(wid.encode(), db=self.dbs.claim_holder)
            return None if raw is None else split_holder(raw)

    def get_holder_bytes(self, wid: str) -> bytes | None:
        with self.env.begin() as txn:
            return txn.get(wid.encode(), db=self.dbs.claim_holder)

    def get_epoch(self, wid: str) -> int:
        with self.env.begin() as txn:
            return _queries.get_epoch(txn, self.dbs, wid)

    def load_ops(self, wid: str, run_id: str) -> dict[int, dict[str, Any]]:
        with self.env.begin() as txn:
            return _queries.load_ops(txn, self.dbs, wid, run_id)

    def load_inbox(self, wid: str) -> list[tuple[int, dict[str, Any]]]:
        with self.env.begin() as txn:
            return _queries.load_inbox(txn, self.dbs, wid)

    def load_for_replay(self, wid: str) -> tuple[dict[str, Any] | None, bytes | None, dict[int, dict[str, Any]], list[tuple[int, dict[str, Any]]]]:
        """Record, holder bytes, op log and inbox of ``wid``, read in one snapshot."""
        with self.env.begin() as txn:
            record = _queries.get_workflow(txn, self.dbs, wid)
            if record is None:
                return None, None, {}, []
            holder = txn.get(wid.encode(), db=self.dbs.claim_holder)
            ops = _queries.load_ops(txn, self.dbs, wid, record["run_id"])
            return record, holder, ops, _queries.load_inbox(txn, self.dbs, wid)

    def read_feed(self, after: int, limit: int = 10_000) -> list[tuple[int, str]]:
        with self.env.begin() as txn:
            return read_feed(txn, self.dbs, after, limit)

    def engines(self) -> dict[str, dict[str, Any]]:
        with self.env.begin() as txn:
            return {key.hex(): unpack_record(value) for key, value in txn.cursor(db=self.dbs.engines)}

    def held_by(self, engine_id: str) -> list[str]:
        with self.env.begin() as txn:
            return _queries.by_engine(txn, self.dbs, engine_key(engine_id))

    def reclaim_candidates(self, engine_id: str, limit: int | None = None) -> list[tuple[str, bytes | None, str]]:
        """``(wid, holder bytes, type)`` of running workflows held by dead or expired engines,
        or held by nobody (the first ``limit`` of them, if given). The caller filters by
        preference and registered types."""
        now = self.clock.now()
        with self.env.begin() as txn:
            gone = [NO_ENGINE]
            for key, value in txn.cursor(db=self.dbs.engines):
                if key.hex() == engine_id:
                    continue
                if not _engines.is_live(unpack_record(value), now):
                    gone.append(key)
            found: list[tuple[str, bytes | None, str]] = []
            for engine_raw in gone:
                for wid in _queries.by_engine(txn, self.dbs, engine_raw):
                    record = _queries.get_workflow(txn, self.dbs, wid)
                    if record is None or record["status"] != "running":
                        continue
                    found.append((wid, txn.get(wid.encode(), db=self.dbs.claim_holder), record["type"]))
                    if len(found) == limit:
                        return found
            return found

    def list_workflows(
        self, status: str | None = None, wf_type: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> dict[str, Any]:
        """One page in workflow-id order, read in one snapshot (guarantee: ``_listing``)."""
        with self.env.begin() as txn:
            return _listing.list_workflows(txn, self.dbs, status, wf_type, limit, cursor)

    def count_quarantined(self) -> int:
        """How many workflows are quarantined now: a scan of their visibility group, which
        holds the few parked poison workflows there are."""
        prefix = bytes((STATUS_CODES[QUARANTINED],))
        found = 0
        with self.env.begin() as txn:
            cursor = txn.cursor(db=self.dbs.visibility)
            if cursor.set_range(prefix):
                for key in cursor.iternext(values=False):
                    if not key.startswith(prefix):
                        break
                    found += 1
        return found

    def count(self, name: str) -> int:
        with self.env.begin() as txn:
            return txn.stat(getattr(self.dbs, name))["entries"]


TERMINAL_STATUSES = TERMINAL
