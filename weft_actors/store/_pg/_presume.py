"""Keys a group commit inserts plainly although it never read them: the keyspaces whose
every key names something new.

An ``INSERT ... ON CONFLICT`` (an upsert) first probes the key's index, inserts the row as
speculative, then confirms it: a third WAL record and a second lock of the heap page per
row. Most of a workflow's rows go into keyspaces whose keys are made for the write and never
existed: an op (``run || seq``), the visibility and ``recent`` entries of a new status
(``status || type || id``, ``status || time || id``), an ``expiring`` entry, a ``by_engine``
claim. The writes of those keyspaces that the transaction did not read are therefore sent as
plain inserts (``PgTxn.flush``): on ``bench/engine_throughput.py`` about 10 of a workflow's
12 rows, some 1.5 µs of the database's CPU each.

A presumption, not a trust: the primary key still refuses a duplicate, so a key that did
exist (a delete and a put of the same key in one batch, a rare rewrite) fails the whole
transaction and overwrites nothing. ``Presumption.refuted`` then has the batch applied
once more with every unread key upserted, and presumes nothing for the next ``PAUSE``
batches, so a workload that keeps rewriting such keys pays for one failed attempt in
``PAUSE``, not one per batch.
"""

from __future__ import annotations

import logging
from typing import Final

import psycopg

from ._schema import table_of

__all__ = ["PRESUMED_NEW", "NOTHING_PRESUMED", "PAUSE", "Presumption"]

log = logging.getLogger("weft_actors.store")

PRESUMED_NEW: Final = frozenset(table_of(name) for name in ("ops", "visibility", "recent", "expiring", "by_engine"))
"""The tables whose unread keys a batch inserts without ``ON CONFLICT``."""

NOTHING_PRESUMED: Final[frozenset[str]] = frozenset()

PAUSE: Final = 100
"""Batches that presume nothing after one that found a presumed key present."""


class Presumption:
    """Whether a store's next batch presumes its unread keys new (one per store; used on the
    writer thread only, one batch at a time)."""

    __slots__ = ("_paused", "refutations")

    def __init__(self) -> None:
        self._paused = 0
        self.refutations = 0
        """Batches applied again because a presumed-new key was present (for tests)."""

    def tables(self) -> frozenset[str]:
        """The tables the next batch may presume about."""
        if self._paused:
            self._paused -= 1
            return NOTHING_PRESUMED
        return PRESUMED_NEW

    def refuted(self, exc: BaseException) -> bool:
        """Whether a presuming batch failed with ``exc`` because a key it inserted plainly was
        already there (a duplicate key: nothing of the batch committed). If so the caller
        applies the batch again without presuming, and the next ``PAUSE`` batches presume
        nothing."""
        cause = exc.__cause__
        if not isinstance(cause, psycopg.errors.UniqueViolation):
            return False
        self._paused = PAUSE
        self.refutations += 1
        log.info("store: a batch found a key it presumed new already stored (%s); applied again with upserts", cause)
        return True
