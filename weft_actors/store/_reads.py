"""Reads named ahead, and range reads a transaction can answer in bulk.

On LMDB a read is a memory access: transaction code reads row by row, in place. On
PostgreSQL each read is a round trip, and a takeover or a burst of replays that reads row by
row spends its time waiting on the network (holding the store's write lock, for a takeover).
So the code that knows what it will read says so first:

- ``Prefetch``: the rows a write transaction will read, fetched with its lock;
- ``warm``: rows a read transaction is about to read one by one, fetched in one statement;
- ``prefix_rows`` and ``last_rows``: range reads, one statement each (or none, prefetched).

A transaction that has such methods (``_pg._txn.PgTxn``) answers them itself; for an LMDB
transaction ``warm`` does nothing and the range reads walk a cursor, as before.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Prefetch", "warm", "warm_prefixes", "prefix_rows", "last_rows", "prefix_end"]


class Prefetch:
    """Rows a write transaction will read, fetched in its first round trip where reads cost
    one: exact keys per keyspace, key ranges read whole (their absent keys are then known
    absent), and ``tails``: the last ``limit`` rows of each range of a keyspace."""

    __slots__ = ("keys", "ranges", "tails")

    def __init__(self) -> None:
        self.keys: dict[str, list[bytes]] = {}
        self.ranges: list[tuple[str, bytes, bytes]] = []
        self.tails: dict[str, tuple[list[tuple[bytes, bytes]], int]] = {}
        """keyspace -> ([(low, high), ...], limit)."""


def prefix_end(prefix: bytes) -> bytes:
    """The first key past every key that starts with ``prefix`` (``prefix`` must not be all
    0xff bytes: none of the store's are)."""
    stripped = prefix.rstrip(b"\xff")
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def warm(txn: Any, db: Any, keys: list[bytes]) -> None:
    """Fetch the rows of ``keys`` now, in one statement where reads cost a round trip: the
    ``get``s of them that follow are then answered from memory."""
    fetch = getattr(txn, "fetch", None)
    if fetch is not None and keys:
        fetch(db, keys)


def warm_prefixes(txn: Any, db: Any, prefixes: list[bytes]) -> None:
    """Fetch every row under each of ``prefixes`` now, in one statement where reads cost a
    round trip: ``prefix_rows`` of them is then answered from memory."""
    fetch = getattr(txn, "fetch_ranges", None)
    if fetch is not None and prefixes:
        fetch(db, [(prefix, prefix_end(prefix)) for prefix in prefixes])


def prefix_rows(txn: Any, db: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
    """Every ``(key, value)`` whose key starts with ``prefix``, in key order."""
    ranged = getattr(txn, "range_rows", None)
    if ranged is not None:
        return ranged(db, prefix, prefix_end(prefix))  # type: ignore[no-any-return]
    cursor = txn.cursor(db=db)
    found = []
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not key.startswith(prefix):
                break
            found.append((key, value))
    return found


def last_rows(txn: Any, db: Any, low: bytes, high: bytes, limit: int) -> list[tuple[bytes, bytes]]:
    """The last ``limit`` rows with ``low <= key < high``, the last first."""
    ranged = getattr(txn, "last_rows", None)
    if ranged is not None:
        return ranged(db, low, high, limit)  # type: ignore[no-any-return]
    cursor = txn.cursor(db=db)
    moved = cursor.prev() if cursor.set_range(high) else cursor.last()
    found: list[tuple[bytes, bytes]] = []
    while moved and len(found) < limit:
        key = cursor.key()
        if key < low:
            break
        found.append((key, cursor.value()))
        moved = cursor.prev()
    return found
