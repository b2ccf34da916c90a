"""The state one write transaction shares among the intents of its batch.

Below every applier: they all take a ``TxnState``, and the stores make one per transaction.
"""

from __future__ import annotations

import lmdb

from ._databases import Databases
from ._keys import count_key, pack_u64, unpack_u64, visibility_group

__all__ = ["TxnState", "DEFAULT_MAX_INBOX", "add_counts"]


DEFAULT_MAX_INBOX = 10_000
"""Signals and updates pending in one workflow's inbox at most (``append_inbox``)."""


class TxnState:
    """Per-transaction facts shared by the intents of one batch. Whoever makes one for a
    transaction that may change a status calls ``flush`` before it commits: the feed sequence
    and the workflow counts are written once per transaction, not once per intent."""

    __slots__ = ("txn", "dbs", "engine_raw", "now", "feed_seq", "writes", "max_inbox", "counts", "promoted")

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: Databases, engine_raw: bytes, now: float, max_inbox: int = DEFAULT_MAX_INBOX) -> None:
        self.txn = txn
        self.dbs = dbs
        self.engine_raw = engine_raw
        self.now = now
        self.feed_seq: int | None = None
        self.writes = 0
        self.max_inbox = max_inbox
        self.counts: dict[bytes, int] | None = None
        """(status, type) group -> change of its workflow count in this transaction."""
        self.promoted: list[tuple[str, str, str]] | None = None
        """``(wid, run id, type)`` of the queued workflows this transaction gave a slot (``_flow``)."""

    def promote(self, wid: str, run_id: str, wf_type: str) -> None:
        if self.promoted is None:
            self.promoted = []
        self.promoted.append((wid, run_id, wf_type))

    def count(self, status: str, wf_type: str, delta: int) -> None:
        """Note that ``delta`` workflows joined (or left) the (``status``, ``wf_type``) group."""
        counts = self.counts
        if counts is None:
            counts = self.counts = {}
        group = visibility_group(status, wf_type)
        counts[group] = counts.get(group, 0) + delta

    def next_feed_seq(self) -> int:
        if self.feed_seq is None:
            stored = self.txn.get(b"feed_seq", db=self.dbs.meta)
            self.feed_seq = 0 if stored is None else unpack_u64(stored)[0]
        self.feed_seq += 1
        return self.feed_seq

    def flush(self) -> None:
        if self.feed_seq is not None:
            self.txn.put(b"feed_seq", pack_u64(self.feed_seq), db=self.dbs.meta)
        if self.counts:
            add_counts(self.txn, self.dbs, self.counts)


def add_counts(txn: lmdb.Transaction[bytes], dbs: Databases, deltas: dict[bytes, int]) -> None:
    """Apply ``deltas`` to the workflow counts (``meta``: ``count/ || group`` -> workflows in
    it, u64). A group that empties is deleted, so the counts name the groups that exist. A
    count that would go below zero (a drift ``check`` reports as ``counts_mismatch``) is
    deleted too, never left to fail the transaction."""
    db = dbs.meta
    for group, delta in deltas.items():
        if not delta:
            continue
        key = count_key(group)
        stored = txn.get(key, db=db)
        total = (0 if stored is None else unpack_u64(stored)[0]) + delta
        if total > 0:
            txn.put(key, pack_u64(total), db=db)
        elif stored is not None:
            txn.delete(key, db=db)
