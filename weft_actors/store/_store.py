"""``LmdbStore``: the embedded default store. Every write is a named transaction."""

from __future__ import annotations

import fcntl
import logging
import os
from typing import Any, Iterable

import lmdb

from .._clock import Clock, SystemClock
from ..codec import unpack_record
from ..errors import EngineDeposed, StorageError, StorageFull, WeftError
from . import _engines, _queries
from ._apply import TxnState, apply_intent, next_epoch, release_claims
from ._env import DEFAULT_MAP_SIZE, check_ownership_mode, close_environment, open_environment
from ._keys import NO_ENGINE, TERMINAL, by_engine_key, engine_key, holder_value, split_holder


__all__ = ["LmdbStore"]

log = logging.getLogger("weft_actors.store")


class LmdbStore:
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
    ) -> None:
        self.path = os.path.abspath(path)
        self.clock = clock or SystemClock()
        self.env, self.dbs = open_environment(self.path, map_size=map_size, sync=sync, readonly=readonly)
        self.commits = 0
        self.writes = 0
        self._locks: dict[str, int] = {}

    def close(self) -> None:
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()
        close_environment(self.path)

    # -- writes ---------------------------------------------------------------------------

    def apply(self, engine_id: str, intents: list[Any]) -> list[Any]:
        """Apply ``intents`` in one transaction and commit once (one fsync).

        Returns one entry per intent: its result, or the ``WeftError`` that rejected it alone.
        If the transaction itself fails every entry is that error; if the engine is no longer
        live every entry is ``EngineDeposed``. Nothing is committed for a rejected intent.
        """
        now = self.clock.now()
        results: list[Any] = []
        try:
            with self.env.begin(write=True) as txn:
                record = _engines.check_live(txn, self.dbs, engine_id, now)
                state = TxnState(txn, self.dbs, engine_key(engine_id), now)
                if now >= record["expires_at"] - record["ttl"] + record["heartbeat"]:
                    # A busy engine's commits carry its heartbeat: a long loop turn full of
                    # work must not let its own lease lapse.
                    record["expires_at"] = now + record["ttl"]
                    _engines.put_engine(txn, self.dbs, state.engine_raw, record)
                for intent in intents:
                    try:
                        results.append(apply_intent(state, intent))
                    except WeftError as exc:
                        results.append(exc)
                state.flush()
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

    def _write(self, fn: Any) -> Any:
        try:
            with self.env.begin(write=True) as txn:
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

        Also takes an exclusive lock on a file named for the engine: the lock dies with the
        process, so a peer on this machine can confirm the death without waiting for expiry.
        """
        now = self.clock.now()
        if mode == "single":
            # A single engine killed a moment ago must not block its own restart.
            for other, record in self.engines().items():
                if other != engine_id and record["state"] == "live" and self.process_gone(other):
                    self.mark_engine_dead(other)

        def txn_fn(txn: lmdb.Transaction) -> None:
            check_ownership_mode(txn, self.dbs, mode)
            if mode == "single":
                _engines.refuse_second_single(txn, self.dbs, engine_id, now)
            _engines.put_engine(
                txn,
                self.dbs,
                engine_key(engine_id),
                {
                    "slot": slot,
                    "pid": pid if pid is not None else os.getpid(),
                    "state": "live",
                    "heartbeat": heartbeat,
                    "ttl": ttl,
                    "expires_at": now + ttl,
                    "started": now,
                    "cursor": self.feed_head(),
                    "mode": mode,
                },
            )

        self._write(txn_fn)
        self._lock_engine_file(engine_id)

    def heartbeat(self, engine_id: str, feed_cursor: int | None = None) -> dict[str, Any]:
        """Extend this engine's lease; ``EngineDeposed`` if it is dead, expired or gone."""
        now = self.clock.now()

        def txn_fn(txn: lmdb.Transaction) -> dict[str, Any]:
            record = _engines.check_live(txn, self.dbs, engine_id, now)
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
            _engines.put_engine(txn, self.dbs, raw, record)
            return True

        return self._write(txn_fn)

    def release_engine(self, engine_id: str) -> int:
        """Graceful stop: release every claim of the engine and mark it stopped."""

        def txn_fn(txn: lmdb.Transaction) -> int:
            raw = engine_key(engine_id)
            state = TxnState(txn, self.dbs, raw, self.clock.now())
            moved = release_claims(state)
            record = _engines.engine_record(txn, self.dbs, raw)
            if record is not None and record["state"] == "live":
                record["state"] = "stopped"
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
        running, is lost (``None``). One transaction for the whole list.
        """
        now = self.clock.now()
        me = engine_key(engine_id)

        def txn_fn(txn: lmdb.Transaction) -> dict[str, int | None]:
            _engines.check_live(txn, self.dbs, engine_id, now)
            state = TxnState(txn, self.dbs, me, now)
            won: dict[str, int | None] = {}
            for wid, expected in candidates:
                wid_raw = wid.encode()
                holder = txn.get(wid_raw, db=self.dbs.claim_holder)
                record_raw = txn.get(wid_raw, db=self.dbs.workflows)
                if holder != expected or record_raw is None or unpack_record(record_raw)["status"] != "running":
                    won[wid] = None
                    continue
                old_engine = NO_ENGINE if holder is None else holder[:16]
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
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._locks[engine_id] = fd

    def process_gone(self, engine_id: str) -> bool:
        """True when the process that registered ``engine_id`` has surely exited."""
        if engine_id in self._locks:
            return False
        path = self._lock_path(engine_id)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return True
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

    def feed_head(self) -> int:
        with self.env.begin() as txn:
            return _queries.feed_head(txn, self.dbs)

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
            return _queries.read_feed(txn, self.dbs, after, limit)

    def engines(self) -> dict[str, dict[str, Any]]:
        with self.env.begin() as txn:
            return {key.hex(): unpack_record(value) for key, value in txn.cursor(db=self.dbs.engines)}

    def held_by(self, engine_id: str) -> list[str]:
        with self.env.begin() as txn:
            return _queries.by_engine(txn, self.dbs, engine_key(engine_id))

    def reclaim_candidates(self, engine_id: str) -> list[tuple[str, bytes | None, str]]:
        """``(wid, holder bytes, type)`` of running workflows held by dead or expired engines,
        or held by nobody. The caller filters by preference and registered types."""
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
            return found

    def list_workflows(
        self, status: str | None = None, wf_type: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> dict[str, Any]:
        with self.env.begin() as txn:
            return _queries.list_workflows(txn, self.dbs, status, wf_type, limit, cursor)

    def count(self, name: str) -> int:
        with self.env.begin() as txn:
            return txn.stat(getattr(self.dbs, name))["entries"]


TERMINAL_STATUSES = TERMINAL
