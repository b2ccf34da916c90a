"""Store operations of the maintenance pass: liveness reads, due system timers, and pruning
of the feed, of the registry and of finished workflows' history, so none grows forever."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codec import unpack_record
from . import _engines
from ._blame import remove_engine_notes, stall_note_key
from ._handed import drop_handed
from ._feed import prune_feed
from ._reads import Prefetch
from ._retention import PruneResult, prune_history
from ._keys import SYSTEM_TIMER_SEQS, engine_key, ms, pack_u64, split_timer_key

if TYPE_CHECKING:
    import lmdb

    from .._clock import Clock
    from ._env import Databases
    from ._ownership import Ownership
    from ._refusals import Refusals

__all__ = ["UpkeepMixin"]


class UpkeepMixin:
    """Mixed into ``LmdbStore``; uses its environment, databases, clock and write helper."""

    env: lmdb.Environment
    dbs: Databases
    clock: Clock
    path: str
    _incarnations: dict[str, str]
    _ownership: Ownership
    _refusals: Refusals

    def _write(self, fn: Any, prefetch: Prefetch | None = None) -> Any:  # provided by the store
        raise NotImplementedError

    def check_engine(self, engine_id: str) -> dict[str, Any]:
        """Read-only liveness check of this process's engine (for ``single`` mode, which has
        no heartbeat write): ``EngineDeposed`` if it is dead, expired or registered again."""
        with self.env.begin() as txn:
            return _engines.check_live(txn, self.dbs, engine_id, self.clock.lease_now(), self._incarnations.get(engine_id), self._refusals.failed_at)

    def live_engines(self) -> dict[str, dict[str, Any]]:
        """Records of the engines that are live now (state ``live`` and not expired)."""
        with self.env.begin() as txn:
            return _engines.live_records(txn, self.dbs, self.clock.lease_now())

    def due_system_timers(self, limit: int = 1000) -> list[tuple[float, str, str, str]]:
        """``(fire_at, wid, kind, run_id)`` of due delayed starts and execution deadlines.

        These have no owner to fire them (a pending workflow has no holder; a deadline must
        fire even if the owner is stuck), so every engine's pass looks for them. Timers of
        ops are skipped: their owners keep those in memory.
        """
        now_key = pack_u64(ms(self.clock.now()) + 1)
        found: list[tuple[float, str, str, str]] = []
        with self.env.begin() as txn:
            cursor = txn.cursor(db=self.dbs.timers)
            if not cursor.first():
                return found
            for key, value in cursor:
                if key >= now_key:
                    break
                fire_at, seq, wid = split_timer_key(key)
                if seq in SYSTEM_TIMER_SEQS:
                    record = unpack_record(value)
                    found.append((fire_at, wid, record["kind"], record["run_id"]))
                    if len(found) >= limit:
                        break
        return found

    def next_timer(self) -> float | None:
        """The fire time of the earliest durable timer of any kind (op timers, delayed
        starts, execution deadlines), or None if there is none: what a time-skipping test
        clock jumps to."""
        with self.env.begin() as txn:
            cursor = txn.cursor(db=self.dbs.timers)
            if not cursor.first():
                return None
            return split_timer_key(cursor.key())[0]

    def prune_feed(self, engine_id: str, own_cursor: int, retention: float, limit: int = 10_000) -> int:
        """Delete feed entries below every live engine's cursor and older than ``retention``.

        ``own_cursor`` stands in for the caller's stored cursor, which may lag (a ``single``
        engine never writes it). Returns how many entries were deleted.
        """

        def txn_fn(txn: lmdb.Transaction[bytes]) -> int:
            now = self.clock.now()
            lease = self.clock.lease_now()
            waiting_since, failed_at = self._ownership.waiting_since, self._refusals.failed_at
            live = _engines.live_records(txn, self.dbs, lease, waiting_since, failed_at)
            cursors = [own_cursor if eid == engine_id else int(r.get("cursor") or 0) for eid, r in live.items()]
            if engine_id not in live:
                return 0  # a deposed engine changes nothing
            for key in list(txn.cursor(db=self.dbs.engines).iternext(values=False)):
                if key.hex() not in live:  # its cursor is passed over: it must never commit again
                    _engines.mark_expired(txn, self.dbs, key, lease, waiting_since, failed_at)
            return prune_feed(txn, self.dbs, cursors, now, retention, limit)

        return self._write(txn_fn)

    def prune_history(self, retention: float, engine_id: str | None = None, limit: int = 5_000) -> PruneResult:
        """Delete the op logs (every run) and leftover inbox of workflows that finished more
        than ``retention`` seconds ago, oldest first, about ``limit`` keys per call (one
        transaction). Records, results, listing entries and claim epochs stay. With
        ``engine_id``, a deposed engine changes nothing. ``more`` says another call has work."""

        def txn_fn(txn: lmdb.Transaction[bytes]) -> PruneResult:
            now = self.clock.now()
            if engine_id is not None and engine_id not in _engines.live_records(txn, self.dbs, self.clock.lease_now()):
                return PruneResult(0, 0, False)
            return prune_history(txn, self.dbs, now, retention, limit)

        return self._write(txn_fn)

    def prune_engines(self, keep: float) -> list[str]:
        """Delete registry records of engines that ended more than ``keep`` seconds ago and
        hold no claim, their stall notes in the store, and their files on this machine (lock
        file, loop slot, stall note). Returns the ids deleted."""

        def txn_fn(txn: lmdb.Transaction[bytes]) -> list[str]:
            gone = _engines.prune_engines(txn, self.dbs, self.clock.lease_now(), keep)
            for engine_id in gone:  # none left for a taker: its workflows have all moved
                txn.delete(stall_note_key(engine_key(engine_id)), db=self.dbs.meta)
                drop_handed(txn, self.dbs, engine_key(engine_id))
            return gone

        gone = self._write(txn_fn)
        for engine_id in gone:
            self._ownership.remove_files(engine_id)
            remove_engine_notes(self.path, engine_id)
        return gone

    def engine(self, engine_id: str) -> dict[str, Any] | None:
        """One engine's registry record, or ``None``."""
        with self.env.begin() as txn:
            return _engines.engine_record(txn, self.dbs, engine_key(engine_id))
