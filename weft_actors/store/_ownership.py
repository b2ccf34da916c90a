"""Engine liveness and ownership: registering an engine, its heartbeat, its end (confirmed
dead, or released on a graceful stop), the takeover of workflows from lost engines, and the
lock file by which a peer on this machine confirms a death without waiting for expiry.

The lock file also carries the engine's *wait slot*: its first 8 bytes, mapped shared by the
process that holds the lock, are a native double saying when that process began to wait
for the write lock (the lease clock), negated once it got it, 0.0 outside a write. A peer
(or the supervisor) reads it before it acts on an engine's lapsed lease: a process blocked
behind other processes' transactions cannot heartbeat, yet it has not stalled
(``_engines.blocked_on_lock``)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import mmap
import os
import struct
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, cast

from ..codec import unpack_record
from . import _engines
from ._apply import TxnState, next_epoch, release_claims
from ._disk import storage_failure
from ._env import check_ownership_mode
from ._feed import feed_head
from ._keys import NO_ENGINE, by_engine_key, engine_key, holder_value, prefixed
from ._blame import blame_of, death_blame, stall_note_key
from ._quarantine import LOOK_BACK, note_lost_owner
from ._reads import Prefetch, prefix_end
from ._refusals import REFUSED_KEY

if TYPE_CHECKING:
    import lmdb

    from ._store import LmdbStore

__all__ = ["Ownership"]

log = logging.getLogger("weft_actors.store")

_SLOT = struct.Struct("d")
"""The wait slot at the start of an engine's lock file (see the module docstring)."""


class WaitSlot(Protocol):
    """A wait slot as mapped: ``slot[0]`` reads and writes the double."""

    def __getitem__(self, index: int) -> float: ...

    def __setitem__(self, index: int, value: float) -> None: ...


class Ownership:
    """The engine registry transactions of one ``LmdbStore``, which holds this and delegates
    to it. Keeps what is per store instance, not in the environment: the lock file held for
    each engine this instance registered, and the incarnation it registered, which every
    commit of that engine checks (``incarnations``, read by ``LmdbStore.apply`` too)."""

    def __init__(self, store: LmdbStore) -> None:
        self.store = store
        self._locks: dict[str, int] = {}
        self._slots: dict[str, tuple[mmap.mmap, memoryview[float]]] = {}
        self.wait_slots: tuple[WaitSlot, ...] = ()
        """The wait slot of every engine this instance holds the lock file of: a write of
        this process publishes its wait in each (a process waits for the lock once, whichever
        of its engines it writes for)."""
        self._peers: dict[str, tuple[mmap.mmap, memoryview[float], float]] = {}
        self.peer_slots: tuple[tuple[WaitSlot, float], ...] = ()
        """``(wait slot, heartbeat)`` of every other live engine, mapped read-only
        (``watch_peers``): a write of this process gives way to a peer that has waited for
        the lock longer than its heartbeat (``LmdbStore``)."""
        self.incarnations: dict[str, str] = {}
        """engine id -> the incarnation this instance registered: a record re-registered by
        someone else is no longer ours, and every commit checks that."""

    def close(self) -> None:
        """Let go of every lock file this instance holds (its engines then read as gone)."""
        for engine_id in list(self._locks):
            self._unlock(engine_id)
        self._watch({})

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
                if holder != expected or record is None or record["status"] != "running":
                    won[wid] = None
                    continue
                if holder is not None:  # its owner was lost holding it (a release leaves no holder)
                    lost_engine = holder[:16]
                    blame = stalls[lost_engine] if lost_engine in stalls else blame_of(txn, store.dbs, store.path, lost_engine)
                    note_lost_owner(state, wid, record, stalls.setdefault(lost_engine, blame), lease=lease)
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
            return won

        refusals = store._refusals
        written: list[float | None] = [None]
        won = store._write(txn_fn, takeover_reads(store.dbs, me, candidates))
        if written[0] is not None:
            refusals.committed(written[0])
        return won

    # -- liveness by lock file ------------------------------------------------------------

    def _lock_path(self, engine_id: str) -> str:
        return os.path.join(self.store.path, "engines", engine_id + ".lock")

    def _lock_engine_file(self, engine_id: str) -> None:
        os.makedirs(os.path.join(self.store.path, "engines"), exist_ok=True)
        fd = os.open(self._lock_path(engine_id), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # The id's previous incarnation still runs and holds it; peers then see this id
            # as alive until that process exits, which only delays a takeover.
            os.close(fd)
            log.warning("engine %s: lock file is held by its previous incarnation", engine_id)
            return
        try:
            self._map_slot(engine_id, fd)
        except BaseException:
            os.close(fd)
            raise
        self._locks[engine_id] = fd

    def _map_slot(self, engine_id: str, fd: int) -> None:
        # Written, not truncated to size: a sparse page of a full disk would be allocated
        # only when the mapping is first written, and that failing is a SIGBUS, not an error.
        if os.pwrite(fd, _SLOT.pack(0.0), 0) != _SLOT.size:
            raise OSError(errno.ENOSPC, "could not write the engine's wait slot")
        mapped = mmap.mmap(fd, _SLOT.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        view = memoryview(mapped).cast("d")
        view[0] = 0.0
        self._slots[engine_id] = (mapped, view)
        self.wait_slots = tuple(cast(WaitSlot, view) for _, view in self._slots.values())

    def _unlock(self, engine_id: str) -> None:
        """Let go of one engine's lock file and unmap its wait slot."""
        slot = self._slots.pop(engine_id, None)
        if slot is not None:
            mapped, view = slot
            self.wait_slots = tuple(cast(WaitSlot, view) for _, view in self._slots.values())
            view.release()
            mapped.close()
        fd = self._locks.pop(engine_id, None)
        if fd is not None:
            os.close(fd)

    def watch_peers(self) -> None:
        """Map the wait slots of the other engines that count as live, and unmap the rest.
        The heartbeat runs it: an engine that starts or ends is seen within one interval."""
        store = self.store
        with store.env.begin() as txn:
            live = _engines.live_records(txn, store.dbs, store.clock.lease_now(), self.waiting_since)
        self._watch({engine_id: record for engine_id, record in live.items() if engine_id not in self._slots})

    def _watch(self, peers: dict[str, dict[str, Any]]) -> None:
        for engine_id in [engine_id for engine_id in self._peers if engine_id not in peers]:
            mapped, view, _ = self._peers.pop(engine_id)
            view.release()
            mapped.close()
        for engine_id, record in peers.items():
            if engine_id in self._peers:
                continue
            try:
                fd = os.open(self._lock_path(engine_id), os.O_RDONLY)
            except OSError:
                continue
            try:
                if os.fstat(fd).st_size < _SLOT.size:
                    continue  # not published yet (or an older version's file): next interval
                mapped = mmap.mmap(fd, _SLOT.size, mmap.MAP_SHARED, mmap.PROT_READ)
            except OSError:
                continue
            finally:
                os.close(fd)
            self._peers[engine_id] = (mapped, memoryview(mapped).cast("d"), float(record["heartbeat"]))
        self.peer_slots = tuple((cast(WaitSlot, view), heartbeat) for _, view, heartbeat in self._peers.values())

    def waiting_since(self, engine_id: str) -> float:
        """When ``engine_id``'s process began to wait for the write lock, as its wait slot
        says (negated: when it got it); 0.0 when it is not in a write, its lock file is
        missing or unreadable, or its process is gone (the lock is free)."""
        slot = self._slots.get(engine_id)
        if slot is not None:
            return float(cast(WaitSlot, slot[1])[0])
        with self._peer_lock(engine_id) as probe:
            if probe is None or not probe[1]:
                return 0.0  # no file, or free: nobody waits behind it any more
            try:
                raw = os.pread(probe[0], _SLOT.size, 0)
            except OSError:
                return 0.0
            return _SLOT.unpack(raw)[0] if len(raw) == _SLOT.size else 0.0

    @contextlib.contextmanager
    def _peer_lock(self, engine_id: str) -> Iterator[tuple[int, bool] | None]:
        """Another engine's lock file, opened read-only (flock needs no write access: a
        read-only store probes too), and whether its process holds it; None when it is
        missing or unreadable (unknown, never dead). A free file stays locked by this probe
        for the block."""
        try:
            fd = os.open(self._lock_path(engine_id), os.O_RDONLY)
        except OSError:
            yield None
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = False
            except BlockingIOError:
                held = True
            except OSError:
                yield None
                return
            yield fd, held
        finally:
            os.close(fd)

    def remove_files(self, engine_id: str) -> None:
        """Delete the lock file of an engine pruned from the registry (its notes: ``_upkeep``)."""
        try:
            os.unlink(self._lock_path(engine_id))
        except OSError:
            pass

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
            old_slot = self._slots.pop(engine_id)
            del self._locks[engine_id]
            self._lock_engine_file(engine_id)
            if engine_id in self._locks:
                os.close(fd)
                old_slot[1].release()
                old_slot[0].close()
            else:  # someone else holds the new file: keep ours (and its slot)
                self._locks[engine_id] = fd
                self._slots[engine_id] = old_slot
                self.wait_slots = tuple(cast(WaitSlot, view) for _, view in self._slots.values())

    def process_gone(self, engine_id: str) -> bool:
        """True when the process that registered ``engine_id`` has surely exited: its lock
        file exists and is free. A missing lock file proves nothing (it may have been deleted
        under a live engine): confirmed death then comes from the supervisor's reaping or
        from the lease's expiry."""
        if engine_id in self._locks:
            return False
        path = self._lock_path(engine_id)
        with self._peer_lock(engine_id) as probe:
            if probe is None or probe[1]:
                return False
        try:
            os.unlink(path)
        except OSError:  # gone already, or a read-only directory: the free lock proved it anyway
            pass
        return True


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
