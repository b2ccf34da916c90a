"""What every store backend shares: the batch apply with its crash recovery, the engine
registry delegations and the named reads, all over an environment whose ``begin()`` gives an
LMDB-shaped transaction (``LmdbStore``'s own; ``PgStore``'s tables, ``_pg._txn``)."""

from __future__ import annotations

import logging
from typing import Any, Iterable

from ..codec import unpack_record
from ..errors import StorageError, StorageFull, WeftError
from .._ratelimit import RateLimitedLog
from . import _engines, _listing, _queries
from ._memo_listing import list_by_memo
from ._feed import feed_head, read_feed
from ._flow import flow_totals
from ._keys import COUNT_PREFIX, NO_ENGINE, STATUS_CODES, engine_key, prefixed, run_prefix, split_holder, split_visibility_group, unpack_u64
from ._messages import RequestsMixin
from ._quarantine import QUARANTINED
from ._stuck import DRIVEN, STUCK
from ._reads import warm, warm_prefixes
from ._refusals import last_refusal
from ._upkeep import UpkeepMixin

__all__ = ["KeyspaceStore", "ApplierCrashed", "ReplayRows"]

log = logging.getLogger("weft_actors.store")

_WRITE_LOG = RateLimitedLog(log)
ReplayRows = tuple[dict[str, Any] | None, bytes | None, dict[int, dict[str, Any]], list[tuple[int, dict[str, Any]]]]
"""A workflow's record, holder bytes, op log and inbox (``load_for_replay``)."""
_WARM_CHUNK = 500
"""Rows one ``warm`` fetches at most (one statement each, where reads cost a round trip)."""
"""A full or read-only store fails every write: one line per interval says so."""


class ApplierCrashed(Exception):
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


class KeyspaceStore(UpkeepMixin, RequestsMixin):
    """The backend-independent part of a store. A backend provides ``env``, ``dbs``,
    ``clock``, ``_ownership``, ``_refusals``, ``_write(fn)`` and ``_apply_once``."""

    write_failure: StorageError | StorageFull | None
    max_inbox: int
    commits: int
    writes: int
    promoted: list[tuple[str, str, str]]
    _lock_lost: StorageError | None = None
    """Set once the backend found it must never write again (``LmdbStore``: its lock file)."""

    def _apply_once(self, engine_id: str, intents: list[Any]) -> list[Any]:
        raise NotImplementedError

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
        except ApplierCrashed as crash:
            refused = {crash.index: crash.error}
        while True:  # the rare path: each pass drops one more crashing intent
            positions = [i for i in range(len(intents)) if i not in refused]
            if not positions:
                return [refused[i] for i in range(len(intents))]
            try:
                results = self._apply_once(engine_id, [intents[i] for i in positions])
            except ApplierCrashed as crash:
                refused[positions[crash.index]] = crash.error
                continue
            merged: list[Any] = [None] * len(intents)
            for i, result in zip(positions, results):
                merged[i] = result
            for i, error in refused.items():
                merged[i] = error
            return merged

    def _write_failed(self, error: StorageError | StorageFull) -> StorageError | StorageFull:
        """Note a transaction that failed for the store, not for its content (full, read-only,
        I/O): reported by ``write_state`` until a commit succeeds, logged once per interval."""
        self.write_failure = error
        self._refusals.note(failed=True)
        _WRITE_LOG.error("store", "store: writes fail: %s", error)
        return error

    def _write_recovered(self) -> None:
        _WRITE_LOG.warning("recovered", "store: writes succeed again (they failed with: %s)", self.write_failure)
        self.write_failure = None

    def last_refusal(self) -> float | None:
        """Lease-clock time of the last commit the store refused for itself, this process's
        own if it is not written yet (``_refusals``); None if none ever was."""
        if self._refusals.pending:
            return self._refusals.latest
        with self.env.begin() as txn:
            return last_refusal(txn, self.dbs)

    def renewals_blocked_until(self) -> float:
        """Lease-clock time up to which, as far as this process saw, no engine could renew its
        lease: its last transaction that failed for the store, round trip that stalled
        (PostgreSQL) or server start (``Refusals.failed_at``). Silence counts from no earlier."""
        return self._refusals.failed_at

    def write_state(self) -> str:
        """``ok``, or why the last write failed: ``disk_full``/``map_full``, ``read_only``, ``error``."""
        failure = self.write_failure
        if failure is None:
            return "ok"
        reason = getattr(failure, "reason", None)
        return reason or ("map_full" if isinstance(failure, StorageFull) else "error")

    def _batch_committed(self, promoted: list[tuple[str, str, str]] | None, written: float | None, intents: int) -> None:
        """The bookkeeping after a batch's transaction committed (either backend's ``_apply_once``)."""
        if self.write_failure is not None:
            self._write_recovered()
        if promoted:
            self.promoted.extend(promoted)
        if written is not None:
            self._refusals.committed(written)
        self.commits += 1
        self.writes += intents

    # -- engines (the transactions are ``Ownership``'s) ---------------------------------

    def register_engine(
        self,
        engine_id: str,
        *,
        heartbeat: float,
        ttl: float,
        mode: str = "workflow-lease",
        slot: int | None = None,
        pid: int | None = None,
        types: Iterable[str] | None = None,
    ) -> None:
        """Record a new live engine and lock its lock file; a refused one writes nothing.
        ``types``: the workflow types its app registers, kept in its record (``_offers``)."""
        self._ownership.register_engine(engine_id, heartbeat=heartbeat, ttl=ttl, mode=mode, slot=slot, pid=pid, types=types)

    def heartbeat(self, engine_id: str, feed_cursor: int | None = None) -> dict[str, Any]:
        """Extend this engine's lease (one write); ``EngineDeposed`` if it is no longer live."""
        return self._ownership.heartbeat(engine_id, feed_cursor)

    def mark_engine_dead(self, engine_id: str) -> bool:
        """Confirmed death: the engine's claims become reclaimable at once. Idempotent."""
        return self._ownership.mark_engine_dead(engine_id)

    def release_engine(self, engine_id: str) -> int:
        """Graceful stop: release every claim of the engine and mark it stopped."""
        return self._ownership.release_engine(engine_id)

    def takeover(self, engine_id: str, candidates: Iterable[tuple[str, bytes | None]]) -> dict[str, int | None]:
        """CAS each ``(wid, holder bytes read)`` to this engine; the new epoch, or ``None`` if lost."""
        return self._ownership.takeover(engine_id, candidates)

    def waiting_since(self, engine_id: str) -> float:
        """When ``engine_id``'s process began to wait for the write lock (its lock file's wait
        slot; negated once it got it, 0.0 outside a write or if its process is gone)."""
        return self._ownership.waiting_since(engine_id)

    def waiting_on_store(self) -> bool:
        """Whether this process's loop waits on its store now (LMDB: for the write lock), so
        its watchdog shows it alive, only kept waiting (``LoopWatchdog``'s ``waiting``)."""
        return self._ownership.waiting_on_lock()

    def process_gone(self, engine_id: str) -> bool:
        """True when the process that registered ``engine_id`` has surely exited (its lock
        file exists and is free; a missing one proves nothing)."""
        return self._ownership.process_gone(engine_id)

    def restore_lock_files(self) -> None:
        """Recreate the lock files of this instance's engines if they were deleted."""
        self._ownership.restore_lock_files()

    # -- reads ----------------------------------------------------------------------------

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

    def load_for_replay(self, wid: str) -> ReplayRows:
        """Record, holder bytes, op log and inbox of ``wid``, read in one snapshot."""
        with self.env.begin() as txn:
            return self._replay_rows(txn, wid)

    def load_many_for_replay(self, wids: list[str]) -> dict[str, ReplayRows]:
        """``load_for_replay`` of each of ``wids``, all read in one snapshot: where reads cost
        a round trip, a handful of statements for the lot instead of several per workflow."""
        dbs = self.dbs
        with self.env.begin() as txn:
            keys = [wid.encode() for wid in wids]
            warm(txn, dbs.workflows, keys)
            warm(txn, dbs.claim_holder, keys)
            records = {wid: _queries.get_workflow(txn, dbs, wid) for wid in wids}
            warm_prefixes(txn, dbs.ops, [run_prefix(wid, record["run_id"]) for wid, record in records.items() if record is not None])
            warm_prefixes(txn, dbs.inbox, [prefixed(wid) for wid, record in records.items() if record is not None])
            return {wid: self._replay_rows(txn, wid) for wid in wids}

    def _replay_rows(self, txn: Any, wid: str) -> ReplayRows:
        record = _queries.get_workflow(txn, self.dbs, wid)
        if record is None:
            return None, None, {}, []
        holder = txn.get(wid.encode(), db=self.dbs.claim_holder)
        ops = _queries.load_ops(txn, self.dbs, wid, record["run_id"])
        return record, holder, ops, _queries.load_inbox(txn, self.dbs, wid)

    def load_for_describe(self, wid: str) -> _queries.Snapshot | None:
        """What ``describe`` shows of ``wid`` (``_queries.snapshot``), in one snapshot."""
        with self.env.begin() as txn:
            return _queries.snapshot(txn, self.dbs, wid)

    def read_feed(self, after: int, limit: int = 10_000) -> list[tuple[int, str]]:
        with self.env.begin() as txn:
            return read_feed(txn, self.dbs, after, limit)

    def engines(self) -> dict[str, dict[str, Any]]:
        with self.env.begin() as txn:
            return {key.hex(): unpack_record(value) for key, value in txn.cursor(db=self.dbs.engines)}

    def held_by(self, engine_id: str) -> list[str]:
        with self.env.begin() as txn:
            return _queries.by_engine(txn, self.dbs, engine_key(engine_id))

    def released_by(self, wids: list[str]) -> dict[str, str]:
        """The engine (id) that released each of ``wids`` at its stop, for those with no holder
        whose release recorded it (a takeover names it; never claimed: absent)."""
        found: dict[str, str] = {}
        with self.env.begin() as txn:
            for wid in wids:
                value = txn.get(NO_ENGINE + wid.encode(), db=self.dbs.by_engine)
                if value:
                    found[wid] = bytes(value).hex()
        return found

    def reclaim_candidates(self, engine_id: str, limit: int | None = None) -> list[tuple[str, bytes | None, str]]:
        """``(wid, holder bytes, type)`` of running workflows held by dead or expired engines,
        or held by nobody (the first ``limit`` of them, if given). The caller filters by
        preference and registered types."""
        now = self.clock.lease_now()
        waiting_since = self._ownership.waiting_since
        failed_at = self._refusals.failed_at
        with self.env.begin() as txn:
            gone = [NO_ENGINE]
            for key, value in txn.cursor(db=self.dbs.engines):
                if key.hex() == engine_id:
                    continue
                if not _engines.counts_as_live(unpack_record(value), key.hex(), now, waiting_since, failed_at):
                    gone.append(key)
            found: list[tuple[str, bytes | None, str]] = []
            for engine_raw in gone:
                wids = _queries.by_engine(txn, self.dbs, engine_raw)
                for start in range(0, len(wids), _WARM_CHUNK):
                    chunk = wids[start : start + _WARM_CHUNK]
                    keys = [wid.encode() for wid in chunk]
                    warm(txn, self.dbs.workflows, keys)
                    warm(txn, self.dbs.claim_holder, keys)
                    for wid, key in zip(chunk, keys):
                        record = _queries.get_workflow(txn, self.dbs, wid)
                        if record is None or record["status"] not in DRIVEN:
                            continue
                        found.append((wid, txn.get(key, db=self.dbs.claim_holder), record["type"]))
                        if len(found) == limit:
                            return found
            return found

    def list_workflows(
        self, status: str | None = None, wf_type: str | None = None, limit: int = 100, cursor: str | None = None, memo: Any = None
    ) -> dict[str, Any]:
        """One page in workflow-id order, read in one snapshot (guarantee: ``_listing``); with
        ``memo`` (``{key: value}``, every field equal) read from the memo index (``_memo_listing``)."""
        with self.env.begin() as txn:
            if memo is not None:
                return list_by_memo(txn, self.dbs, status, wf_type, memo, limit, cursor)
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

    def count_stuck(self) -> int:
        """How many workflows are ``stuck`` now (``_stuck``): their visibility group's size."""
        prefix = bytes((STATUS_CODES[STUCK],))
        with self.env.begin() as txn:
            cursor = txn.cursor(db=self.dbs.visibility)
            if not cursor.set_range(prefix):
                return 0
            return sum(1 for key in cursor.iternext(values=False) if key.startswith(prefix))

    def workflow_counts(self) -> dict[tuple[str, str], int]:
        """How many workflows the store holds per ``(status, type)``: the counts kept in
        ``meta`` by every transaction that changes a status, so reading them costs one entry
        per group, never a pass over the workflows."""
        with self.env.begin() as txn:
            found = {}
            cursor = txn.cursor(db=self.dbs.meta)
            if cursor.set_range(COUNT_PREFIX):
                for key, value in cursor:
                    if not key.startswith(COUNT_PREFIX):
                        break
                    found[split_visibility_group(key[len(COUNT_PREFIX):])] = unpack_u64(value)[0]
            return found

    def flow_counts(self) -> dict[str, dict[str, int]]:
        """``{type: {"running", "queued"}}`` of the types under flow control (``_flow``): one
        count per group read, never a queue."""
        with self.env.begin() as txn:
            return flow_totals(txn, self.dbs.meta)

    def count(self, name: str) -> int:
        with self.env.begin() as txn:
            return txn.stat(getattr(self.dbs, name))["entries"]
