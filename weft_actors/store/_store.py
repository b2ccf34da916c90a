"""``LmdbStore``: the embedded default store. Every write is a named transaction."""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Final, Any

import lmdb

from .._clock import Clock, SystemClock
from ..errors import StorageError, StorageFull, WeftError
from . import _engines
from ._apply import DEFAULT_MAX_INBOX, TxnState
from ._base import ApplierCrashed, KeyspaceStore
from ._disk import storage_failure
from ._dispatch import APPLIER_OF
from ._env import DEFAULT_MAP_SIZE, close_environment, lock_file_replaced, open_environment
from ._ownership import Ownership
from ._reads import Prefetch
from ._refusals import Refusals
from ._reserve import GROWTH, StorageReserve
from ._keys import TERMINAL, engine_key


__all__ = ["LmdbStore"]

log = logging.getLogger("weft_actors.store")

GIVE_WAY_MAX: Final = 0.05
"""Seconds a write waits at most for a starving peer to get the write lock (``_give_way``)."""
GIVE_WAY_POLL: Final = 0.0005



class LmdbStore(KeyspaceStore):
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
        create: bool = True,
    ) -> None:
        self.path = os.path.abspath(path)
        self.max_inbox = max_inbox
        self.clock = clock or SystemClock()
        self.env, self.dbs = open_environment(self.path, map_size=map_size, sync=sync, readonly=readonly, clock=self.clock, create=create)
        self._real_path = os.path.realpath(self.path)
        """The path the environment was opened at (resolved once: ``verify_lock_file`` runs
        every maintenance pass, and resolving costs a ``stat`` per path component)."""
        self._reserve = StorageReserve(self.env, self.dbs)
        self._refusals = Refusals(self.clock)
        self.commits = 0
        self.writes = 0
        self.gave_way = 0
        """How many times a write of this process let a starving peer take the lock first."""
        self._given_way: set[float] = set()
        self._closed = False
        self._ownership = Ownership(self)
        self._incarnations = self._ownership.incarnations  # the same dict: every commit reads it
        self.write_failure: StorageError | StorageFull | None = None
        """Why the last transaction failed for the store itself (``None`` once one commits)."""
        self._lock_lost: StorageError | None = None
        """Set once ``lock.mdb`` is found replaced: from then on nothing is written."""
        self.promoted: list[tuple[str, str, str]] = []
        """``(wid, run id, type)`` of queued workflows that committed transactions gave a slot
        (``_flow``), for the engine to fire at once; whoever reads it empties it."""
        self.before_commit: Callable[[], None] | None = None
        """Called inside ``apply``'s transaction once every intent is applied, just before the
        commit: the crash-test failpoint ``commit:after-apply`` (``None`` otherwise)."""

    def close(self) -> None:
        self._ownership.close()
        if not self._closed:  # the environment is shared: release this instance's use once
            self._closed = True
            close_environment(self.path)

    def _apply_once(self, engine_id: str, intents: list[Any]) -> list[Any]:
        results: list[Any] = []
        written: float | None = None  # the refusal time this transaction writes, if any
        # This engine's own lease is judged by the time before it waited for the write lock:
        # a wait behind another process's stalled transaction is no stall of its own. A stale
        # time cannot pass once anyone acted on its expiry (they mark it; see ``_engines``).
        clock = self.clock
        started = clock.lease_now()
        if self._ownership.peer_slots:
            self._give_way(started)
        slots = self._ownership.wait_slots  # published for peers and the supervisor (``_ownership``)
        for slot in slots:
            slot[0] = started
        try:
            with self.env.begin(write=True) as txn:
                if slots:
                    got = -clock.lease_now()
                    for slot in slots:
                        slot[0] = got
                record = _engines.check_live(txn, self.dbs, engine_id, started, self._incarnations.get(engine_id), self._refusals.failed_at)
                now = clock.now()  # for the records: read holding the lock
                lease = clock.lease_now()  # for the lease (wall-clock jumps do not move it)
                refusals = self._refusals
                if refusals.pending:
                    written = refusals.write(txn, self.dbs)
                full = self._reserve.check(txn)
                if full is not None:
                    refusals.note()
                    if all(type(intent) in GROWTH for intent in intents):
                        raise full  # nothing to commit, not even the lease extension below
                    written = refusals.write(txn, self.dbs)
                state = TxnState(txn, self.dbs, engine_key(engine_id), now, self.max_inbox)
                if lease >= record["expires_at"] - record["ttl"] + record["heartbeat"]:
                    # A busy engine's commits carry its heartbeat: a long loop turn full of
                    # work must not let its own lease lapse.
                    record["expires_at"] = lease + record["ttl"]
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
                        raise ApplierCrashed(len(results), intent, exc) from exc
                state.flush()
                if self.before_commit is not None:
                    self.before_commit()
        except WeftError as exc:
            return [exc] * len(intents)
        except lmdb.MapFullError as exc:
            self._refusals.note(failed=True)
            error: WeftError = StorageFull(f"store is full (map size {self.env.info()['map_size']} bytes): {exc}")
            return [error] * len(intents)
        except lmdb.Error as exc:  # a full disk is StorageFull too (``_disk``)
            error = self._write_failed(storage_failure(exc, self.path, "commit failed"))
            return [error] * len(intents)
        finally:
            for slot in slots:
                slot[0] = 0.0
        self._batch_committed(state.promoted, written, len(intents))
        return results

    def _give_way(self, now: float) -> None:
        """Before taking the write lock, let a peer that has waited for it longer than its
        heartbeat go first: LMDB's lock is not fair, and a process that commits again at
        once wins it over a waiter that was woken but not yet run, so on a loaded machine a
        waiter can starve past its lease while the others commit. Each wait is given way
        to once, for ``GIVE_WAY_MAX`` at most (a peer that died waiting holds nobody up)."""
        for slot, heartbeat in self._ownership.peer_slots:
            since = slot[0]
            if since <= 0.0 or now - since <= heartbeat or since in self._given_way:
                continue
            if len(self._given_way) > 64:
                self._given_way.clear()
            self._given_way.add(since)
            self.gave_way += 1
            deadline = time.monotonic() + GIVE_WAY_MAX
            while slot[0] == since and time.monotonic() < deadline:
                time.sleep(GIVE_WAY_POLL)

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

    def _write(self, fn: Any, prefetch: Prefetch | None = None) -> Any:
        """``fn(txn)`` in one write transaction, committed. ``prefetch`` is for stores whose
        reads cost a round trip (``_reads``): LMDB reads in place."""
        self.verify_lock_file()
        slots = self._ownership.wait_slots
        if slots:
            started = self.clock.lease_now()
            if self._ownership.peer_slots:
                self._give_way(started)
            for slot in slots:
                slot[0] = started
        try:
            with self.env.begin(write=True) as txn:
                if slots:
                    got = -self.clock.lease_now()
                    for slot in slots:
                        slot[0] = got
                result = fn(txn)
        except lmdb.MapFullError as exc:
            self._refusals.note(failed=True)
            raise StorageFull(f"store is full: {exc}") from exc
        except (lmdb.Error, OSError) as exc:
            raise self._write_failed(storage_failure(exc, self.path, "commit failed")) from exc
        finally:
            for slot in slots:
                slot[0] = 0.0
        if self.write_failure is not None:
            self._write_recovered()
        return result

    def read(self) -> lmdb.Transaction[bytes]:
        return self.env.begin()

    def within_reserve(self) -> bool:
        """Whether growth is refused now (``_reserve``): the store's pages reach into its reserve."""
        with self.env.begin() as txn:
            return self._reserve.check(txn) is not None



TERMINAL_STATUSES = TERMINAL

