"""Keys a group commit inserts plainly although it never read them: the keyspaces whose
every key names something new, and the ops this store knows it has not written yet.

An ``INSERT ... ON CONFLICT`` (an upsert) first probes the key's index, inserts the row as
speculative, then confirms it: a third WAL record and a second lock of the heap page per
row. Most of a workflow's rows are made for the write and never existed, so the writes that
the transaction did not read are sent as plain inserts (``PgTxn.flush``) where that is known:

- the visibility and ``recent`` entries of a new status (``status || type || id``,
  ``status || time || id``), an ``expiring`` entry, a ``by_engine`` claim: every key of
  those keyspaces (``PRESUMED_NEW``) unless this transaction deleted it first;
- an op (``prefixed(id) || run || seq``) past the highest this store has written for a
  workflow it created itself and has held since (``OpLedger``): an op is written again when
  it resolves (a timer, a signal, a child, an activity's retries), never is a later one there
  before it.

On ``bench/engine_throughput.py`` that is about 10 of a workflow's 12 rows, some 1.5 µs of
the database's CPU each. It stays a presumption, not a trust: the primary key still refuses
a duplicate, so a key that did exist (a store another engine wrote to meanwhile, a rewrite
not foreseen here) fails the whole transaction and overwrites nothing.
``Presumption.refuted`` then has the batch applied once more with every unread key upserted
and presumes nothing for the next ``PAUSE`` batches.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Protocol

import psycopg

from ._overlay import DELETED
from ._schema import table_of

__all__ = ["PRESUMED_NEW", "NOTHING_PRESUMED", "PAUSE", "LEDGER_LIMIT", "Presumption", "OpLedger"]

log = logging.getLogger("weft_actors.store")

PRESUMED_NEW: Final = frozenset(table_of(name) for name in ("visibility", "recent", "expiring", "by_engine"))
"""The tables whose keys, unread and not deleted in the transaction, a batch inserts plainly."""

NOTHING_PRESUMED: Final[frozenset[str]] = frozenset()

PAUSE: Final = 100
"""Batches that presume nothing after one that found a presumed key present."""

LEDGER_LIMIT: Final = 1_000_000
"""Workflows the ``OpLedger`` follows at most (about 100 bytes each); past it, it starts over."""


class Pending(Protocol):
    """What the ledger reads of a transaction about to flush (``PgTxn``)."""

    def pending(self, db: str) -> tuple[dict[bytes, Any], dict[bytes, bytes | None], set[bytes]]: ...

    def cached(self, db: str, keys: list[bytes], rows: list[tuple[bytes, bytes]]) -> None: ...


class OpLedger:
    """For each workflow this store created (its id read absent under the write lock: no op of
    it was stored, ``_retention`` and purges take its ops with it) and still holds at the epoch
    it created it with, the highest op key written for it since. An op key above it has never
    been written: ``note`` marks it known absent in the transaction. A workflow leaves the
    ledger when its claim goes (its end, a release) or is seen at another epoch (it was taken
    over, perhaps to come back: another engine may have written its ops meanwhile); one this
    store did not create is never in it, and its ops are upserted."""

    __slots__ = ("_ops", "_workflows", "_holders", "highest")

    def __init__(self, ops: str, workflows: str, holders: str) -> None:
        self._ops = ops
        self._workflows = workflows
        self._holders = holders
        self.highest: dict[bytes, tuple[bytes, bytes]] = {}
        """``prefixed(id)`` -> (its holder's fence, the highest op key written for it; the
        prefix itself: none)."""

    def note(self, txn: Pending, presume: bool) -> None:
        """Follow what ``txn`` writes and, if ``presume``, mark its new ops known absent."""
        highest = self.highest
        held, holders_read, _ = txn.pending(self._holders)
        values, cache, _ = txn.pending(self._workflows)
        for key, value in values.items():
            if value is not DELETED and key in cache and cache[key] is None:  # created here
                holder = held.get(key)
                if holder is not None and holder is not DELETED:  # claimed at its start
                    prefix = len(key).to_bytes(2, "big") + key
                    highest.setdefault(prefix, (holder[:24], prefix))
        values, cache, deleted = txn.pending(self._ops)
        new: list[bytes] = []
        known = highest.get
        for key, value in values.items():  # a few per workflow, on the writer thread: kept lean
            prefix = key[: 2 + (key[0] << 8 | key[1])]
            entry = known(prefix)
            if entry is None or key <= entry[1]:
                continue
            holder = holders_read.get(prefix[2:]) or held.get(prefix[2:])  # the fence checked, else the claim made here
            if holder is None or holder is DELETED or holder[:24] != entry[0]:
                del highest[prefix]  # held at another epoch than it was created with, or not known
                continue
            highest[prefix] = (entry[0], key)
            if presume and value is not DELETED and key not in cache and key not in deleted:
                new.append(key)
        if new:
            txn.cached(self._ops, new, [])
        for key, value in held.items():
            if value is DELETED:
                highest.pop(len(key).to_bytes(2, "big") + key, None)
        if len(highest) > LEDGER_LIMIT:
            highest.clear()


class Presumption:
    """What a store's batches presume (one per store; used on the writer thread only, one
    batch at a time)."""

    __slots__ = ("_paused", "_presumed", "ledger", "refutations")

    def __init__(self, ledger: OpLedger) -> None:
        self._paused = 0
        self._presumed = False
        self.ledger = ledger
        self.refutations = 0
        """Batches applied again because a presumed-new key was present (for tests)."""

    def prepare(self, txn: Pending) -> frozenset[str]:
        """Called as ``txn`` flushes: marks its new ops, returns the tables it may presume about."""
        self._presumed = not self._paused
        self.ledger.note(txn, self._presumed)
        if self._paused:
            self._paused -= 1
            return NOTHING_PRESUMED
        return PRESUMED_NEW

    def refuted(self, exc: BaseException) -> bool:
        """Whether a batch failed with ``exc`` because a key it presumed new was already there
        (a duplicate key: nothing of the batch committed). If so the caller applies the batch
        again without presuming, the next ``PAUSE`` batches presume nothing and the ledger
        starts over."""
        cause = exc.__cause__
        if not (self._presumed and isinstance(cause, psycopg.errors.UniqueViolation)):
            return False
        self._presumed = False
        self._paused = PAUSE
        self.ledger.highest.clear()
        self.refutations += 1
        log.info("store: a batch found a key it presumed new already stored (%s); applied again with upserts", cause)
        return True
