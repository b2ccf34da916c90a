"""The durable mark a handoff leaves for its successor: ``meta`` keys ``handed/<engine><wid>``.

A workflow handed to a live engine is no reclaim candidate (its holder is live), so if the
successor never hears of it (a wake lost: a control pipe broken, a supervisor gone between
the handoff and its relay) nobody drives it until that successor stops or dies. So the
handoff transaction also writes one mark per workflow moved, under the successor's engine
key: the successor's maintenance pass reads its own prefix each pass (one short range read,
empty but for a handoff), drives what it holds and does not run yet, and clears the marks it
read. The wake is only the fast path; the mark is what makes the handoff's wake durable.

A mark names a workflow that may have moved on since (ended, handed on, taken over): the
reader drives only what it still holds, so a stale mark costs a read, never a wrong drive.
Marks of an engine pruned from the registry go with it (``prune_engines``).
"""

from __future__ import annotations

from typing import Any, Final

from . import _engines
from ._keys import engine_key

__all__ = ["HANDED_PREFIX", "handed_key", "handed_to", "clear_handed", "drop_handed"]

HANDED_PREFIX: Final = b"handed/"
MARKS_READ: Final = 500
"""Marks one maintenance pass reads at most (the rest are read by the next passes)."""


def handed_key(engine_raw: bytes, wid: str) -> bytes:
    """The mark of ``wid`` handed to the engine whose key is ``engine_raw``."""
    return HANDED_PREFIX + engine_raw + wid.encode()


def handed_to(store: Any, engine_id: str, limit: int = MARKS_READ) -> list[str]:
    """The workflows marked as handed to ``engine_id``, up to ``limit``: one read snapshot."""
    prefix = HANDED_PREFIX + engine_key(engine_id)
    found: list[str] = []
    with store.env.begin() as txn:
        cursor = txn.cursor(db=store.dbs.meta)
        if not cursor.set_range(prefix):
            return found
        for key in cursor.iternext(values=False):
            key = bytes(key)
            if not key.startswith(prefix) or len(found) >= limit:
                break
            found.append(key[len(prefix) :].decode())
    return found


def clear_handed(store: Any, engine_id: str, wids: list[str]) -> None:
    """Delete the marks of ``wids`` handed to ``engine_id`` (they were read and acted on).
    ``EngineDeposed`` if ``engine_id`` is no longer live: a deposed engine commits nothing."""
    raw = engine_key(engine_id)
    started = store.clock.lease_now()  # its own lease, judged as in ``apply``
    incarnation = store._ownership.incarnations.get(engine_id)

    def txn_fn(txn: Any) -> None:
        _engines.check_live(txn, store.dbs, engine_id, started, incarnation, store._refusals.failed_at)
        for wid in wids:
            txn.delete(handed_key(raw, wid), db=store.dbs.meta)

    store._write(txn_fn)


def drop_handed(txn: Any, dbs: Any, engine_raw: bytes) -> None:
    """Delete every mark left for ``engine_raw`` (an engine pruned from the registry), in
    the caller's transaction."""
    prefix = HANDED_PREFIX + engine_raw
    cursor = txn.cursor(db=dbs.meta)
    keys: list[bytes] = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not bytes(key).startswith(prefix):
                break
            keys.append(bytes(key))
    for key in keys:
        txn.delete(key, db=dbs.meta)
