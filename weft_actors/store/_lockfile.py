"""The lock file by which a peer on this machine confirms an engine's death without waiting
for its lease to expire, and the engine's *wait slot* inside it.

The wait slot is the lock file's first 8 bytes, mapped shared by the process that holds the
lock: a native double saying when that process began to wait for the write lock (the lease
clock), negated once it got it, 0.0 outside a write. A peer (or the supervisor) reads it
before it acts on an engine's lapsed lease: a process blocked behind other processes'
transactions cannot heartbeat, yet it has not stalled (``_engines.blocked_on_lock``).

``EngineLockFiles`` is the base of ``Ownership`` (the registry transactions), which the
PostgreSQL store specialises with a session advisory lock in place of the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import mmap
import os
import struct
from typing import TYPE_CHECKING, Any, Iterator, Protocol, cast

from . import _engines
from ._blame import loop_turning

if TYPE_CHECKING:
    import lmdb

    from .._clock import Clock
    from ._env import Databases
    from ._refusals import Refusals

__all__ = ["EngineLockFiles", "OwnedStore", "WaitSlot"]

log = logging.getLogger("weft_actors.store")

_SLOT = struct.Struct("d")
"""The wait slot at the start of an engine's lock file (see the module docstring)."""


class WaitSlot(Protocol):
    """A wait slot as mapped: ``slot[0]`` reads and writes the double."""

    def __getitem__(self, index: int) -> float: ...

    def __setitem__(self, index: int, value: float) -> None: ...


class OwnedStore(Protocol):
    """What the ownership transactions need of their store (``LmdbStore``, ``PgStore``):
    its place, environment and clock, its refusals, and its one way to write."""

    path: str
    env: lmdb.Environment
    dbs: Databases
    clock: Clock
    _refusals: Refusals

    def _write(self, fn: Any, prefetch: Any = None) -> Any: ...


class EngineLockFiles:
    """The lock file (and wait slot) of each engine this store instance registered, and the
    read-only mappings of its live peers' wait slots."""

    def __init__(self, store: OwnedStore) -> None:
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

    def close(self) -> None:
        """Let go of every lock file this instance holds (its engines then read as gone)."""
        for engine_id in list(self._locks):
            self._unlock(engine_id)
        self._watch({})

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
        missing or unreadable, or its process is gone (the lock is free).

        A wait whose process shows it is alive and waiting (its watchdog thread stamps the
        engine's loop slot while the loop waits for the lock: ``loop_turning``) is an
        ``AttestedWait``, trusted for as long as it lasts: a process stopped or hung as it
        got the lock, before its slot said so, stamps nothing and is judged by the grace;
        one only kept waiting (behind it, or by the lock's unfairness) is never judged for
        it, and killing it would free nothing."""
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
            since = float(_SLOT.unpack(raw)[0]) if len(raw) == _SLOT.size else 0.0
        if since > 0.0 and loop_turning(self.store.path, engine_id):
            return _engines.AttestedWait(since)
        return since

    def waiting_on_lock(self) -> bool:
        """Whether this process waits for the write lock now (a wait slot of its own says so)."""
        return any(slot[0] > 0.0 for slot in self.wait_slots)

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
