"""Retention: once a finished workflow is older than the retention period, its op logs (every
run), its leftover inbox and its answered update requests go; its record, result or error,
visibility entry and claim epoch stay, so ``result()``, ``describe()`` and ``list()`` keep
answering and the id stays fenced.

Finished workflows whose history is still kept are indexed in ``expiring`` by the time they
ended (``updated ms || wid``), maintained by the transactions that change a status. The prune
walks that index from the oldest entry, so its cost is the work it does, never the number of
workflows kept. Each call is bounded (``limit`` deletions); a workflow with a longer history
is finished by the next call, which resumes at the same entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..codec import pack_record, unpack_record
from ._keys import TERMINAL, expiring_key, ms, prefixed, unpack_u64

if TYPE_CHECKING:
    import lmdb

    from ._env import Databases

__all__ = ["PruneResult", "prune_history"]


class PruneResult(NamedTuple):
    """What one bounded prune did. ``more``: it stopped at its limit with more already due."""

    workflows: int
    entries: int
    more: bool


def _delete_prefix(txn: lmdb.Transaction[bytes], db: Any, prefix: bytes, budget: int) -> tuple[int, bool]:
    """Delete up to ``budget`` keys starting with ``prefix``; ``(deleted, all gone)``."""
    cursor = txn.cursor(db=db)
    deleted = 0
    if not cursor.set_range(prefix):
        return 0, True
    while cursor.key().startswith(prefix):
        if deleted >= budget:
            return deleted, False
        deleted += 1
        if not cursor.delete() or not cursor.key():
            break
    return deleted, True


def prune_history(txn: lmdb.Transaction[bytes], dbs: Databases, now: float, retention: float, limit: int) -> PruneResult:
    """Prune the history of finished workflows that ended more than ``retention`` seconds
    before ``now``, oldest first, deleting at most about ``limit`` keys.

    A workflow's record gets ``history_pruned`` (the time) once all of its history is gone, in
    the transaction that deletes its ``expiring`` entry. An entry that no longer matches its
    record (which the index's writers never leave behind) is dropped without touching anything.
    """
    if limit <= 0 or now <= retention:
        return PruneResult(0, 0, False)
    cutoff = ms(now - retention)
    scan = txn.cursor(db=dbs.expiring)
    due: list[bytes] = []
    if scan.first():
        for key in scan.iternext(values=False):
            if unpack_u64(key)[0] >= cutoff or len(due) >= limit:
                break
            due.append(key)
    budget = limit
    workflows = entries = 0
    for key in due:
        wid_raw = key[8:]
        raw = txn.get(wid_raw, db=dbs.workflows)
        record = None if raw is None else unpack_record(raw)
        if (
            record is None
            or record["status"] not in TERMINAL
            or record.get("history_pruned")
            or expiring_key(record["updated"], wid_raw.decode()) != key
        ):
            txn.delete(key, db=dbs.expiring)
            continue
        prefix = prefixed(wid_raw.decode())
        for db in (dbs.ops, dbs.inbox, dbs.requests):  # each keyed by ``prefixed(wid)`` first
            deleted, complete = _delete_prefix(txn, db, prefix, budget)
            entries += deleted
            budget -= deleted
            if not complete:
                return PruneResult(workflows, entries, True)
        record["history_pruned"] = now
        txn.put(wid_raw, pack_record(record), db=dbs.workflows)
        txn.delete(key, db=dbs.expiring)
        workflows += 1
        budget -= 1
        if budget <= 0:
            return PruneResult(workflows, entries, True)
    return PruneResult(workflows, entries, len(due) >= limit)
