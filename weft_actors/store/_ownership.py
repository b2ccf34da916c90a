"""Engine liveness and ownership: registering an engine, its heartbeat, its end (confirmed
dead, or released on a graceful stop), and the takeover of workflows from lost engines.

The lock file by which a peer on this machine confirms a death without waiting for expiry,
and the wait slot in it, are ``_lockfile``'s: ``Ownership`` builds on them."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any, Iterable

from ..codec import unpack_record
from . import _engines
from ._apply import release_claims
from ._disk import storage_failure
from ._env import check_ownership_mode
from ._feed import feed_head
from ._keys import NO_ENGINE, by_engine_key, engine_key, holder_value, prefixed
from ._blame import blame_of, death_blame, stall_note_key
from ._lockfile import EngineLockFiles, OwnedStore
from ._quarantine import LOOK_BACK, note_lost_owner
from ._reads import Prefetch, prefix_end
from ._refusals import REFUSED_KEY
from ._state import TxnState
from ._stuck import DRIVEN, STUCK, resume_stuck
from ._writes import next_epoch

if TYPE_CHECKING:
    import lmdb

__all__ = ["Ownership"]


class Ownership(EngineLockFiles):
    """The engine registry transactions of one store (``OwnedStore``), which holds this and
    delegates to it. Keeps what is per store instance, not in the environment: the lock file
    held for each engine this instance registered (``EngineLockFiles``), and the incarnation
    it registered, which every commit of that engine checks (``incarnations``, read by
    ``LmdbStore.apply`` too)."""

    def __init__(self, store: OwnedStore) -> None:
        super().__init__(store)
        self.incarnations: dict[str, str] = {}
        """engine id -> the incarnation this instance registered: a record re-registered by
        someone else is no longer ours, and every commit checks that."""

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
        """Record a new live engine; check the ownership-mode marker first. ``types`` (the
        workflow types its app registers) go into the record as a sorted list; without them
        the record has no ``types`` and readers take it to run any (``_offers``).

        A refused engine (another mode, or a second live one in ``single`` mode) writes
        nothing. Also takes an exclusive lock on a file named for the engine: the lock dies
        with the process, so a peer on this machine can confirm the death without waiting for
        expiry. In ``single`` mode the record never expires (there are no heartbeats).
        """
        store = self.store
        incarnation = os.urandom(8).hex()
        raw = engine_key(engine_id)
        offered = None if types is None else sorted(types)

        def txn_fn(txn: lmdb.Transaction[bytes]) -> None:
            now = store.clock.now()
            lease = store.clock.lease_now()
            check_ownership_mode(txn, store.dbs, mode)
            if mode == "single":
                # A single engine killed a moment ago must not block its own restart. Probed
                # after the marker check, in this transaction: a refused engine writes nothing.
                for key, value in list(txn.cursor(db=store.dbs.engines)):
                    record = unpack_record(value)
                    if key.hex() != engine_id and record["state"] == "live" and self.process_gone(key.hex()):
                        record["state"] = "dead"
                        record["ended"] = lease
                        _engines.put_engine(txn, store.dbs, key, record)
                _engines.refuse_second_single(txn, store.dbs, engine_id, lease)
            if _engines.engine_record(txn, store.dbs, raw) is not None:
                # The same id registered again: the old incarnation is deposed by its next
                # commit, and whatever it held becomes reclaimable now instead of never.
                release_claims(TxnState(txn, store.dbs, raw, now))
            fresh: dict[str, Any] = {
                "slot": slot,
                "pid": pid if pid is not None else os.getpid(),
                "host": socket.gethostname(),  # read by people: where the engine ran (a takeover names it)
                "state": "live",
                "heartbeat": heartbeat,
                "ttl": ttl,
                "expires_at": float("inf") if mode == "single" else lease + ttl,
                "started": now,
                "lease_clock": store.clock.lease_clock,
                "cursor": feed_head(txn, store.dbs),
                "mode": mode,
                "incarnation": incarnation,
                "ended": None,
            }
            if offered is not None:
                fresh["types"] = offered
            _engines.put_engine(txn, store.dbs, raw, fresh)

        # Locked before the record exists: a peer that sees the record live and probes the
        # lock must never find it free while this engine is starting.
        try:
            self._lock_engine_file(engine_id)
        except OSError as exc:  # a read-only directory, most likely
            raise storage_failure(exc, store.path, "cannot create the engine's lock file") from exc
        try:
            store._write(txn_fn)
        except BaseException:
            if engine_id in self._locks:  # refused: leave no trace, not even the lock file
                try:
                    os.unlink(self._lock_path(engine_id))
                except OSError:
                    pass
                self._unlock(engine_id)
            raise
        self.incarnations[engine_id] = incarnation

    def heartbeat(self, engine_id: str, feed_cursor: int | None = None) -> dict[str, Any]:
        """Extend this engine's lease; ``EngineDeposed`` if it is dead, expired, gone or
        registered again by someone else. One write, whatever the number of claims. The lease
        is judged by the time before the wait for the write lock, and extended from the time
        after it (see ``_engines``)."""
        store = self.store
        started = store.clock.lease_now()

        def txn_fn(txn: lmdb.Transaction[bytes]) -> dict[str, Any]:
            record = _engines.check_live(txn, store.dbs, engine_id, started, self.incarnations.get(engine_id), store._refusals.failed_at)
            if record["mode"] != "single":
                record["expires_at"] = store.clock.lease_now() + record["ttl"]
            if feed_cursor is not None:
                record["cursor"] = feed_cursor
            _engines.put_engine(txn, store.dbs, engine_key(engine_id), record)
            return record

        record = store._write(txn_fn, engine_reads(store.dbs, [engine_key(engine_id)]))
        self.watch_peers()
        return record

    def mark_engine_dead(self, engine_id: str) -> bool:
        """Confirmed death: the engine's claims become reclaimable at once. Idempotent."""
        store = self.store

        def txn_fn(txn: lmdb.Transaction[bytes]) -> bool:
            raw = engine_key(engine_id)
            record = _engines.engine_record(txn, store.dbs, raw)
            if record is None or record["state"] == "dead":
                return False
            # ``blame``: the workflow whose code held its loop as it died, if one did (``_blame``)
            record["state"], record["ended"], record["blame"] = "dead", store.clock.lease_now(), death_blame(store.path, engine_id)
            _engines.put_engine(txn, store.dbs, raw, record)
            return True

        return store._write(txn_fn)

    def release_engine(self, engine_id: str) -> int:
        """Graceful stop: release every claim of the engine and mark it stopped, so that any
        live engine reclaims its running workflows at once. A no-op for an engine that is no
        longer this instance's live registration (dead, expired, or registered again): a
        deposed engine commits nothing, and its claims are reclaimable anyway."""
        store = self.store
        started = store.clock.lease_now()  # its own lease, judged as in ``apply``

        def txn_fn(txn: lmdb.Transaction[bytes]) -> int:
            raw = engine_key(engine_id)
            record = _engines.engine_record(txn, store.dbs, raw)
            mine = self.incarnations.get(engine_id)
            now = store.clock.now()
            if record is None or not _engines.is_live(record, started, store._refusals.failed_at) or (mine is not None and record.get("incarnation") != mine):
                return 0
            moved = release_claims(TxnState(txn, store.dbs, raw, now))
            record["state"] = "stopped"
            record["ended"] = store.clock.lease_now()
            _engines.put_engine(txn, store.dbs, raw, record)
            return moved

        moved = store._write(txn_fn)
        self._unlock(engine_id)
        return moved

    def takeover(self, engine_id: str, candidates: Iterable[tuple[str, bytes | None]]) -> dict[str, int | None]:
        """CAS each ``(wid, holder bytes read)`` to this engine; epoch + 1 for every winner.

        A candidate whose holder changed since it was read, or whose workflow is no longer
        running, is lost (``None``). One transaction for the whole list. An engine taken from
        that has expired is marked ``expired`` here (``_engines.mark_expired``), so it commits
        nothing more however stale the time it judges its own lease by; one live after all (it
        renewed since the candidates were read, or waits for the write lock: candidates are
        never read from such an engine, ``reclaim_candidates``) is not marked and only loses
        that workflow: its writes for it are fenced out by the new epoch.
        """
        store = self.store
        me = engine_key(engine_id)
        started = store.clock.lease_now()  # its own lease, judged as in ``apply``
        candidates = list(candidates)

        def txn_fn(txn: lmdb.Transaction[bytes]) -> dict[str, int | None]:
            mine = _engines.check_live(txn, store.dbs, engine_id, started, self.incarnations.get(engine_id), store._refusals.failed_at)
            now = store.clock.now()
            lease = store.clock.lease_now()  # others' expiry is judged holding the lock
            if mine["mode"] != "single" and lease >= mine["expires_at"] - mine["ttl"] + mine["heartbeat"]:
                mine["expires_at"] = lease + mine["ttl"]  # carries its heartbeat, as in apply
                _engines.put_engine(txn, store.dbs, me, mine)
            state = TxnState(txn, store.dbs, me, now)
            won: dict[str, int | None] = {}
            stalls: dict[bytes, dict[str, Any] | None] = {}  # lost engine -> whom its loss blames
            if refusals.pending:  # this process's own, written before it judges by it
                written[0] = refusals.write(txn, store.dbs)
            marked: set[bytes] = set()
            for wid, expected in candidates:
                wid_raw = wid.encode()
                holder = txn.get(wid_raw, db=store.dbs.claim_holder)
                record_raw = txn.get(wid_raw, db=store.dbs.workflows)
                record = None if record_raw is None else unpack_record(record_raw)
                if holder != expected or record is None or record["status"] not in DRIVEN:
                    won[wid] = None
                    continue
                if holder is not None:  # its owner was lost holding it (a release leaves no holder)
                    lost_engine = holder[:16]
                    blame = stalls[lost_engine] if lost_engine in stalls else blame_of(txn, store.dbs, store.path, lost_engine)
                    note_lost_owner(state, wid, record, stalls.setdefault(lost_engine, blame), lease=lease)
                if record["status"] == STUCK:  # code that replays may have been deployed: try again
                    resume_stuck(state, wid, record)
                old_engine = NO_ENGINE if holder is None else holder[:16]
                if holder is not None and old_engine not in marked:
                    marked.add(old_engine)
                    if old_engine != me:
                        _engines.mark_expired(txn, store.dbs, old_engine, lease, self.waiting_since, store._refusals.failed_at)
                txn.delete(by_engine_key(old_engine, wid), db=store.dbs.by_engine)
                epoch = next_epoch(state, wid_raw)
                txn.put(wid_raw, holder_value(me, epoch, now), db=store.dbs.claim_holder)
                txn.put(by_engine_key(me, wid), b"", db=store.dbs.by_engine)
                won[wid] = epoch
            state.flush()  # the counts a resumed ``stuck`` workflow moved, if any
            return won

        refusals = store._refusals
        written: list[float | None] = [None]
        won = store._write(txn_fn, takeover_reads(store.dbs, me, candidates))
        if written[0] is not None:
            refusals.committed(written[0])
        return won

def engine_reads(dbs: Any, engines: list[bytes]) -> Prefetch:
    """What a transaction that judges these engines reads first: their records, and the
    store's last refusal."""
    reads = Prefetch()
    reads.keys[dbs.engines] = engines
    reads.keys[dbs.meta] = [REFUSED_KEY]
    return reads


def takeover_reads(dbs: Any, me: bytes, candidates: list[tuple[str, bytes | None]]) -> Prefetch:
    """What ``takeover`` reads of each candidate: its holder, record and epoch, its lost
    engine's record and stall note, and the tail of its op log (``note_lost_owner``)."""
    reads = engine_reads(dbs, list({me} | (lost := {holder[:16] for _, holder in candidates if holder is not None})))
    reads.keys[dbs.meta] += [stall_note_key(engine) for engine in lost]
    wids = list({wid.encode() for wid, _ in candidates})
    for db in (dbs.claim_holder, dbs.workflows, dbs.claim_epoch):
        reads.keys[db] = wids
    tails = [(prefix, prefix_end(prefix)) for prefix in {prefixed(wid) for wid, _ in candidates}]
    reads.tails[dbs.ops] = (sorted(tails), LOOK_BACK)
    return reads
