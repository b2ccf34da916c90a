"""The engine registry: one record per engine, heartbeated, never a write per claim.

A record is ``{slot, pid, state, heartbeat, ttl, expires_at, started, cursor, mode,
incarnation, ended, lease_clock}``, and ``types`` (the workflow types its app registers,
``_offers``) if the engine said: optional, so records without it need no migration. ``expires_at`` and ``ended`` are readings of the lease
clock the record names (``Clock.lease_now``, e.g. ``CLOCK_BOOTTIME`` of one boot), never of
the wall clock: a jump of the wall clock expires nobody. ``started`` is wall time (for people). ``state`` is ``live``, ``stopped`` (released gracefully), ``dead``
(death confirmed) or ``expired`` (another engine acted on its expiry). An engine in ``single``
mode never heartbeats: its ``expires_at`` is infinite and only a confirmed death (or its own
release) ends it.

An engine judges its own lease by the time it read *before* it waited for the write lock
(``check_live``): a process blocked behind another one's stalled transaction has not stalled
itself, and must not depose itself for it. That is sound because every transaction that acts
on another engine's expiry (a takeover of its claims, a feed prune past its cursor) first
marks that engine ``expired`` (``mark_expired``): an engine whose stale time still passes
finds the mark, and commits nothing, once anyone has acted on its expiry.

Peers judge the same way. An engine whose process began to wait for the write lock while its
lease held (its lock file's wait slot, ``_ownership``) will pass its own check once it gets
the lock: it is blocked behind other processes' transactions, perhaps the judge's own, not
stalled. So nobody acts on its expiry while it waits, up to ``LOCK_WAIT_GRACE`` ttls
(``blocked_on_lock``); without that, one long transaction or slow fsync would depose every
engine queued behind it.
"""

from __future__ import annotations

from typing import Any, Callable, Final

import lmdb

from ..codec import pack_record, unpack_record
from ..errors import EngineDeposed, OwnershipModeMismatch
from ._env import Databases
from ._keys import engine_key

__all__ = [
    "AttestedWait",
    "LOCK_WAIT_GRACE",
    "blocked_on_lock",
    "counts_as_live",
    "expiry_time",
    "is_expired",
    "is_live",
    "check_live",
    "engine_record",
    "put_engine",
    "refuse_second_single",
    "live_records",
    "mark_expired",
    "prune_engines",
]


def expiry_time(record: dict[str, Any], failed_at: float = 0.0) -> float:
    """The lease-clock time strictly after which ``record`` is expired: ``expires_at + 2 *
    heartbeat``. ``failed_at``: when the judge last saw a whole transaction fail for the store
    (full, read-only, I/O); while every write fails nobody can renew, so a lease counts as
    renewed then (``Refusals.failed_at``)."""
    expires = record["expires_at"]
    if failed_at > 0.0:
        expires = max(expires, failed_at + record["ttl"])
    return expires + 2 * record["heartbeat"]


def is_expired(record: dict[str, Any], now: float, failed_at: float = 0.0) -> bool:
    return expiry_time(record, failed_at) < now


def is_live(record: dict[str, Any], now: float, failed_at: float = 0.0) -> bool:
    return record["state"] == "live" and not is_expired(record, now, failed_at)


LOCK_WAIT_GRACE: Final = 2.0
"""Ttls a process may wait for the write lock before it is judged by its lease again: time
for a stalled holder to be killed and its transaction rolled back, yet a bound on trusting
a wait slot whose process froze before it reached the lock."""


class AttestedWait(float):
    """A ``waiting_since`` that the lock's own server shows as a wait going on now (on
    PostgreSQL, a session queued for the lock: ``_pg._waits``), not one a process wrote
    before it may have frozen: trusted for as long as it lasts, not only ``LOCK_WAIT_GRACE``
    ttls. A writer blocked behind a stalled holder is then never judged for the stall."""

    __slots__ = ()


def blocked_on_lock(record: dict[str, Any], waiting_since: float, now: float) -> bool:
    """Whether an engine whose lease lapsed only waits for the write lock: its process began
    waiting (``waiting_since`` > 0, its wait slot) before the lease lapsed, so it commits
    once it gets the lock, and less than ``LOCK_WAIT_GRACE`` ttls ago (or the wait is an
    ``AttestedWait``)."""
    if waiting_since <= 0.0 or is_expired(record, waiting_since):
        return False
    return isinstance(waiting_since, AttestedWait) or now - waiting_since < LOCK_WAIT_GRACE * record["ttl"]


def counts_as_live(
    record: dict[str, Any], engine_id: str, now: float, waiting_since: Callable[[str], float], failed_at: float = 0.0
) -> bool:
    """``is_live``, or expired but ``blocked_on_lock``: an engine no peer may act on the
    expiry of (``waiting_since`` is read only for an expired record: a file read)."""
    if record["state"] != "live":
        return False
    return not is_expired(record, now, failed_at) or blocked_on_lock(record, waiting_since(engine_id), now)


def engine_record(txn: lmdb.Transaction[bytes], dbs: Databases, engine_raw: bytes) -> dict[str, Any] | None:
    value = txn.get(engine_raw, db=dbs.engines)
    return None if value is None else unpack_record(value)


def put_engine(txn: lmdb.Transaction[bytes], dbs: Databases, engine_raw: bytes, record: dict[str, Any]) -> None:
    txn.put(engine_raw, pack_record(record), db=dbs.engines)


def check_live(
    txn: lmdb.Transaction[bytes], dbs: Databases, engine_id: str, now: float, incarnation: str | None = None, failed_at: float = 0.0
) -> dict[str, Any]:
    """Raise ``EngineDeposed`` unless ``engine_id``'s record is live and still the one this
    process registered (``incarnation``): a deposed engine commits nothing.

    The engine's own transactions pass the time read before they waited for the write lock:
    any state but ``live`` is refused whatever ``now`` says, so a stale ``now`` can only pass
    while nobody has acted on the engine's expiry (see the module docstring)."""
    record = engine_record(txn, dbs, engine_key(engine_id))
    if record is None:
        raise EngineDeposed(f"engine {engine_id} is not registered", engine_id=engine_id)
    if record["state"] != "live":
        raise EngineDeposed(f"engine {engine_id} is marked {record['state']}", engine_id=engine_id)
    if is_expired(record, now, failed_at):
        raise EngineDeposed(f"engine {engine_id} has expired", engine_id=engine_id)
    if incarnation is not None and record.get("incarnation") != incarnation:
        raise EngineDeposed(f"engine {engine_id} was registered again by another process", engine_id=engine_id)
    return record


def mark_expired(
    txn: lmdb.Transaction[bytes], dbs: Databases, engine_raw: bytes, now: float, waiting_since: Callable[[str], float], failed_at: float = 0.0
) -> bool:
    """In a transaction about to act on ``engine_raw``'s expiry: mark a ``live`` record that
    has expired at ``now`` as ``expired``. True if that engine can never commit again (its
    record is gone, not live, or now marked), False if it is live after all: it renewed its
    lease since the caller read it, or it is blocked on the write lock (``waiting_since``
    reads its wait slot, only for a record that has expired)."""
    record = engine_record(txn, dbs, engine_raw)
    if record is None or record["state"] != "live":
        return True
    if not is_expired(record, now, failed_at) or blocked_on_lock(record, waiting_since(engine_raw.hex()), now):
        return False
    record["state"] = "expired"
    record["ended"] = now
    put_engine(txn, dbs, engine_raw, record)
    return True


def refuse_second_single(txn: lmdb.Transaction[bytes], dbs: Databases, engine_id: str, now: float) -> None:
    """In ``single`` mode a second live engine is refused."""
    for key, value in txn.cursor(db=dbs.engines):
        if key.hex() == engine_id:
            continue
        if is_live(unpack_record(value), now):
            raise OwnershipModeMismatch(
                f"ownership mode 'single' allows one live engine; {key.hex()} is live",
                live_engine=key.hex(),
            )


def live_records(
    txn: lmdb.Transaction[bytes], dbs: Databases, now: float, waiting_since: Callable[[str], float] | None = None, failed_at: float = 0.0
) -> dict[str, dict[str, Any]]:
    """The live engines' records by id; with ``waiting_since``, those ``counts_as_live``."""
    found = {}
    for key, value in txn.cursor(db=dbs.engines):
        record = unpack_record(value)
        if is_live(record, now) if waiting_since is None else counts_as_live(record, key.hex(), now, waiting_since, failed_at):
            found[key.hex()] = record
    return found


def prune_engines(txn: lmdb.Transaction[bytes], dbs: Databases, now: float, keep: float) -> list[str]:
    """Delete the records of engines that can never commit again (stopped, dead, or expired),
    hold no claim any more, and ended more than ``keep`` seconds ago. Returns their ids."""
    gone: list[str] = []
    by_engine = txn.cursor(db=dbs.by_engine)
    for key, value in list(txn.cursor(db=dbs.engines)):
        record = unpack_record(value)
        if is_live(record, now):
            continue
        ended = record.get("ended") or record["expires_at"] + 2 * record["heartbeat"]
        if ended + keep >= now:
            continue
        if by_engine.set_range(key) and by_engine.key().startswith(key):
            continue  # its workflows still wait for a taker
        txn.delete(key, db=dbs.engines)
        gone.append(key.hex())
    return gone
