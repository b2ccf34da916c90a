"""Upgrading a store written by an older schema version, in the transaction that opens it.

Version 1 kept ``updated`` inside visibility keys (``status || type || updated || wid``) and
had no ``expiring`` index. Both indexes are derived from the workflow records, so the upgrade
rebuilds them from the records. Version 2 judged engine leases by the wall clock; version 3
by a lease clock each engine record names (``adopt_lease_clock``, run at every read-write
open, moves older records onto it). Version 4 keeps the number of workflows per (status,
type) in ``meta`` (``count/`` keys: what ``/metrics`` reports without scanning); the upgrade
counts the visibility index once. An older version would not keep those counts, so it refuses a
version-4 store. Version 5 adds the ``recent`` index (newest first per status, ``_recent``),
derived from the visibility index once. Version 6 adds the ``memo`` index (``_memo``), built
from the records once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..codec import pack_record, unpack_record
from ._memo import rebuild_memo
from ._recent import rebuild_recent
from ._keys import COUNT_PREFIX, TERMINAL, count_key, expiring_key, group_length, pack_u64, visibility_key, visibility_value

if TYPE_CHECKING:
    import lmdb

    from .._clock import Clock
    from ._databases import Databases

__all__ = ["upgrade", "adopt_lease_clock", "rebuild_counts", "count_groups"]


def rebuild_indexes(txn: lmdb.Transaction[bytes], dbs: Databases) -> int:
    """Rewrite the visibility and ``expiring`` indexes from the records; returns their count.
    The ``recent`` index follows the visibility index (``upgrade``)."""
    txn.drop(dbs.visibility, delete=False)
    txn.drop(dbs.expiring, delete=False)
    count = 0
    for key, value in txn.cursor(db=dbs.workflows):
        record = unpack_record(value)
        wid = key.decode()
        txn.put(visibility_key(record["status"], record["type"], wid), visibility_value(record["updated"]), db=dbs.visibility)
        if record["status"] in TERMINAL and not record.get("history_pruned"):
            txn.put(expiring_key(record["updated"], wid), b"", db=dbs.expiring)
        count += 1
    rebuild_counts(txn, dbs)
    return count


def count_groups(txn: lmdb.Transaction[bytes], dbs: Databases) -> dict[bytes, int]:
    """The visibility index's entries per (status, type) group: one pass over its keys."""
    counts: dict[bytes, int] = {}
    group = b""
    found = 0
    for key in txn.cursor(db=dbs.visibility).iternext(values=False):
        if not group or not key.startswith(group):
            if found:
                counts[group] = found
            group, found = bytes(key[: group_length(key)]), 0
        found += 1
    if found:
        counts[group] = found
    return counts


def rebuild_counts(txn: lmdb.Transaction[bytes], dbs: Databases) -> int:
    """Rewrite the workflow counts (``meta``, ``count/`` keys) from the visibility index;
    returns the workflows counted."""
    cursor = txn.cursor(db=dbs.meta)
    if cursor.set_range(COUNT_PREFIX):
        while cursor.key().startswith(COUNT_PREFIX):
            if not cursor.delete() or not cursor.key():
                break
    counts = count_groups(txn, dbs)
    for group, found in counts.items():
        txn.put(count_key(group), pack_u64(found), db=dbs.meta)
    return sum(counts.values())


def upgrade(txn: lmdb.Transaction[bytes], dbs: Databases, version: int) -> None:
    """Bring a store of schema ``version`` to the current one (the caller writes the number)."""
    if version < 2:
        rebuild_indexes(txn, dbs)  # the counts too
    elif version < 4:
        rebuild_counts(txn, dbs)
    if version < 5:
        rebuild_recent(txn, dbs)
    if version < 6:
        rebuild_memo(txn, dbs)


def adopt_lease_clock(txn: lmdb.Transaction[bytes], dbs: Databases, clock: Clock) -> int:
    """Bring every engine record to ``clock``'s lease clock, in the transaction that opens the
    store read-write; returns how many records changed (none, once they all agree).

    A record without ``lease_clock`` was written by schema 2, whose lease times were wall-clock
    times: they are moved onto the lease clock keeping the time each lease had left. A record
    of the real lease clock of another boot is of a process that cannot be running any more
    (its lease readings mean nothing now): a live one is dead, and an ended one ended now, so
    its claims are reclaimable at once and its record is pruned in its time. Records of a fake
    clock (tests) are never touched by a real one, and the other way round.
    """
    mine = clock.lease_clock
    changed = 0
    for key, value in list(txn.cursor(db=dbs.engines)):
        record = unpack_record(value)
        theirs = record.get("lease_clock")
        if theirs == mine:
            continue
        if theirs is None:
            shift = clock.lease_now() - clock.now()
            for field in ("expires_at", "ended"):
                if isinstance(record.get(field), (int, float)) and record[field] != float("inf"):
                    record[field] += shift
        elif theirs.partition(":")[0] == mine.partition(":")[0] and ":" in mine:
            if record["state"] == "live":
                record["state"] = "dead"
            record["ended"] = clock.lease_now()
            if record["expires_at"] != float("inf"):
                record["expires_at"] = min(record["expires_at"], clock.lease_now())
        else:
            continue
        record["lease_clock"] = mine
        txn.put(key, pack_record(record), db=dbs.engines)
        changed += 1
    return changed
