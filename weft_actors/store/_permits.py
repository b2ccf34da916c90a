"""Activity permits: a rate limit and a concurrency limit per activity name, for every engine
sharing the store.

Both are applied inside the group commit's write transaction (no transaction of their own):
that transaction already serialises every engine of the store, so a permit is counted once
whichever engine takes it. Neither is fenced by a workflow claim: a permit a deposed engine
takes only wastes one (its entry is dropped once it is not live).

Rate: GCRA. ``meta`` ``permit_rate/ || len-prefixed name`` holds the theoretical arrival time
(TAT, a big-endian f64 of wall time): a permit is allowed while ``TAT - now <= (burst - 1) *
interval``, and each one granted moves the TAT on by ``interval``. A TAT further ahead than
``burst * interval`` (a grant never puts it further) means the wall clock went back: it is
clamped, so a jump back delays permits by one burst at most, not by the jump.

Concurrency: ``meta`` ``permit_held/ || len-prefixed name || engine id (16 bytes)`` -> how many
attempts that engine runs (u64). Each engine is the authority on its own entry: it sends the
count it holds (``engine_held``), which is written as is (plus what is granted). So every write
is idempotent, a lost or repeated one is mended by the next, and an engine that is not live
any more (dead, stopped, expired, gone) holds nothing: its entries are deleted when seen.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Final, NamedTuple

from ..errors import InvalidRequest
from ._engines import engine_record
from ._keys import pack_u64, prefixed, unpack_u64
from ._state import TxnState

__all__ = ["TakePermits", "HoldPermits", "take_permits", "hold_permits", "read_permits", "RATE_PREFIX", "HELD_PREFIX"]

RATE_PREFIX: Final = b"permit_rate/"
HELD_PREFIX: Final = b"permit_held/"
_F64: Final = struct.Struct(">d")
_EPSILON: Final = 1e-6
"""Seconds: float rounding must not deny a permit at the very time it was promised (a wall
time of ~1.7e9 s is a float to within ~2.4e-7 s)."""


class TakePermits(NamedTuple):
    """Ask for up to ``wanted`` permits of activity ``name`` for the committing engine, which
    holds ``engine_held`` of its concurrency permits now. Returns ``(granted, retry_at)``:
    ``retry_at`` (wall time) is when the rate allows the next one, if the rate is what held
    the grant below ``wanted``; None otherwise (concurrency held it: ask again on a release)."""

    name: str
    engine_held: int
    wanted: int
    rate_interval: float | None
    burst: int
    concurrency: int | None


class HoldPermits(NamedTuple):
    """Write the committing engine's count of concurrency permits of ``name`` (after
    releases): ``engine_held``, its entry deleted at 0."""

    name: str
    engine_held: int


def take_permits(state: TxnState, intent: TakePermits) -> tuple[int, float | None]:
    if intent.wanted < 1 or intent.engine_held < 0:
        raise InvalidRequest(f"permits of {intent.name!r}: wanted {intent.wanted}, held {intent.engine_held}")
    name = prefixed(intent.name)
    granted = intent.wanted
    if intent.concurrency is not None:
        granted = min(granted, max(0, intent.concurrency - _held_by_others(state, name) - intent.engine_held))
    retry_at = None
    if intent.rate_interval is not None and granted > 0:
        granted, retry_at = _take_rate(state, RATE_PREFIX + name, granted, intent.rate_interval, intent.burst)
        if granted == intent.wanted:
            retry_at = None
    if intent.concurrency is not None:
        _write_held(state, HELD_PREFIX + name + state.engine_raw, intent.engine_held + granted)
    return granted, retry_at


def hold_permits(state: TxnState, intent: HoldPermits) -> None:
    if intent.engine_held < 0:
        raise InvalidRequest(f"permits of {intent.name!r}: held {intent.engine_held}")
    _write_held(state, HELD_PREFIX + prefixed(intent.name) + state.engine_raw, intent.engine_held)


def _take_rate(state: TxnState, key: bytes, wanted: int, interval: float, burst: int) -> tuple[int, float | None]:
    """Up to ``wanted`` permits by GCRA: ``(granted, when the next is allowed if not all)``."""
    txn, db, now = state.txn, state.dbs.meta, state.now
    stored = txn.get(key, db=db)
    tat = now if stored is None else _F64.unpack(stored)[0]
    clamped = tat > now + burst * interval  # the clock went back: see the module docstring
    if clamped:
        tat = now + burst * interval
    tat = max(tat, now)
    slack = (burst - 1) * interval - (tat - now)  # how far the TAT may still move on, now
    room = 0 if slack < -_EPSILON else int(math.floor((slack + _EPSILON) / interval)) + 1
    granted = min(wanted, room)
    tat += granted * interval
    if granted or clamped:
        txn.put(key, _F64.pack(tat), db=db)
    return granted, tat - (burst - 1) * interval if granted < wanted else None


def _held_by_others(state: TxnState, name: bytes) -> int:
    """The concurrency permits of ``name`` live engines other than this one hold; the
    entries of engines that are not live are deleted on the way."""
    txn, dbs = state.txn, state.dbs
    prefix = HELD_PREFIX + name
    own = prefix + state.engine_raw
    held, stale = 0, []
    cursor = txn.cursor(db=dbs.meta)
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not key.startswith(prefix):
                break
            if key == own:
                continue
            record = engine_record(txn, dbs, key[len(prefix):])
            if record is None or record["state"] != "live":
                stale.append(key)
            else:
                held += unpack_u64(value)[0]
    for key in stale:
        txn.delete(key, db=dbs.meta)
    return held


def _write_held(state: TxnState, key: bytes, count: int) -> None:
    if count > 0:
        state.txn.put(key, pack_u64(count), db=state.dbs.meta)
    else:
        state.txn.delete(key, db=state.dbs.meta)


def read_permits(store: Any, name: str) -> dict[str, Any]:
    """What the store holds for activity ``name`` (a read, for tests and inspection):
    ``{"tat": the rate's TAT or None, "held": {engine id: permits}}``."""
    raw = prefixed(name)
    with store.env.begin() as txn:
        stored = txn.get(RATE_PREFIX + raw, db=store.dbs.meta)
        held = {}
        prefix = HELD_PREFIX + raw
        cursor = txn.cursor(db=store.dbs.meta)
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not key.startswith(prefix):
                    break
                held[key[len(prefix):].hex()] = unpack_u64(value)[0]
    return {"tat": None if stored is None else _F64.unpack(stored)[0], "held": held}
