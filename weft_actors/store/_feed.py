"""The change feed: one entry per inbox append, tailed by every engine from its cursor.

An entry is ``seq -> append time (ms) || wid``. LMDB serialises writers, so sequence numbers
become visible in order and a cursor never skips one. Entries go only once every live
engine's cursor has passed them *and* they are older than the retention window: a lagging
engine never loses a wake, and a fresh takeover does not depend on the feed at all (the new
owner reads the whole inbox while it replays).
"""

from __future__ import annotations

import lmdb

from ._env import Databases
from ._keys import ms, pack_u64, unpack_u64

__all__ = ["feed_entry", "feed_head", "read_feed", "prune_feed"]


def feed_entry(now: float, wid: str) -> bytes:
    return pack_u64(ms(now)) + wid.encode()


def feed_head(txn: lmdb.Transaction[bytes], dbs: Databases) -> int:
    raw = txn.get(b"feed_seq", db=dbs.meta)
    return 0 if raw is None else unpack_u64(raw)[0]


def read_feed(txn: lmdb.Transaction[bytes], dbs: Databases, after: int, limit: int) -> list[tuple[int, str]]:
    """``(seq, wid)`` of the entries after ``after``, oldest first, at most ``limit``."""
    cursor = txn.cursor(db=dbs.feed)
    found: list[tuple[int, str]] = []
    if cursor.set_range(pack_u64(after + 1)):
        for key, value in cursor:
            found.append((unpack_u64(key)[0], value[8:].decode()))
            if len(found) >= limit:
                break
    return found


def prune_feed(
    txn: lmdb.Transaction[bytes],
    dbs: Databases,
    live_cursors: list[int],
    now: float,
    retention: float,
    limit: int,
) -> int:
    """Delete entries at or below every live cursor and older than ``retention`` seconds.

    With no live cursor at all nothing is deleted: the next engine to register starts from
    the head anyway, but an engine that is merely slow to heartbeat must find its wakes.
    Returns how many entries went (at most ``limit`` per call, to bound the transaction).
    """
    if not live_cursors:
        return 0
    floor = min(live_cursors)
    cutoff_ms = ms(now - retention) if now > retention else 0
    cursor = txn.cursor(db=dbs.feed)
    deleted = 0
    if not cursor.first():
        return 0
    while deleted < limit:
        key, value = cursor.item()
        if unpack_u64(key)[0] > floor or unpack_u64(value)[0] >= cutoff_ms:
            break
        deleted += 1
        if not cursor.delete():
            break
        if not cursor.key():
            break
    return deleted

