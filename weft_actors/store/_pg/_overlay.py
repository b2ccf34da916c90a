"""The pieces under an LMDB-shaped PostgreSQL transaction (``_txn``) and its cursor
(``_cursor``): the buffered writes of a keyspace, the spans of rows read, key checks and the
range queries. Plain data and pure functions; no statement runs here but the text of one.
"""

from __future__ import annotations

import bisect
from typing import Any

__all__ = ["DELETED", "MAX_KEY", "PAGE", "checked_key", "Overlay", "next_pending", "Spans", "between", "between_keys", "ranges_query", "tails_query", "ranges_params"]

DELETED: Any = object()
"""An overlay value: the key was deleted in this transaction."""

MAX_KEY = 511
"""LMDB's longest key: keys are held to it here too, so both backends refuse the same input."""

PAGE = 128
"""Rows a cursor fetches per step past its buffer (a prefix scan usually ends in the first)."""


def checked_key(key: bytes) -> bytes:
    key = bytes(key)
    if not key or len(key) > MAX_KEY:
        raise ValueError(f"a key must be 1 to {MAX_KEY} bytes, not {len(key)}")
    return key


class Overlay:
    """The buffered writes of one keyspace: key -> value or ``DELETED``, and the keys sorted."""

    __slots__ = ("values", "_sorted", "deleted")

    def __init__(self) -> None:
        self.values: dict[bytes, Any] = {}
        self._sorted: list[bytes] | None = None
        self.deleted: set[bytes] = set()
        """Every key deleted in this transaction, even if put again since: such a key may be
        stored, so it is never presumed new (``_presume``)."""

    def set(self, key: bytes, value: Any) -> None:
        if key not in self.values and self._sorted is not None:
            bisect.insort(self._sorted, key)
        self.values[key] = value

    def keys_sorted(self) -> list[bytes]:
        if self._sorted is None:
            self._sorted = sorted(self.values)
        return self._sorted


def next_pending(overlay: Overlay | None, start: bytes | None, inclusive: bool) -> tuple[bytes, Any] | None:
    """The first buffered write past ``start``."""
    if not overlay or not overlay.values:
        return None
    keys = overlay.keys_sorted()
    if start is None:
        index = 0
    else:
        index = bisect.bisect_left(keys, start) if inclusive else bisect.bisect_right(keys, start)
    if index >= len(keys):
        return None
    key = keys[index]
    return key, overlay.values[key]


class Spans:
    """Key ranges of one keyspace whose stored rows were read: ``(low, high, whole_from,
    rows)``, every stored row with ``whole_from <= k < high`` in ``rows`` (in order), kept
    sorted by ``low``. Ranges read together never overlap; one that overlaps an earlier read
    is only found by its own ``low``, which is never wrong, only a missed saving."""

    __slots__ = ("lows", "spans")

    def __init__(self) -> None:
        self.lows: list[bytes] = []
        self.spans: list[tuple[bytes, bytes, bytes, list[tuple[bytes, bytes]]]] = []

    def add(self, low: bytes, high: bytes, whole_from: bytes, rows: list[tuple[bytes, bytes]]) -> None:
        index = bisect.bisect_right(self.lows, low)
        self.lows.insert(index, low)
        self.spans.insert(index, (low, high, whole_from, rows))

    def covering(self, low: bytes, high: bytes) -> tuple[bytes, bytes, bytes, list[tuple[bytes, bytes]]] | None:
        """The span read that contains ``[low, high)``, if one does."""
        index = bisect.bisect_right(self.lows, low) - 1
        if index < 0:
            return None
        span = self.spans[index]
        return span if high <= span[1] else None


def between(rows: list[tuple[bytes, bytes]], low: bytes, high: bytes) -> list[tuple[bytes, bytes]]:
    """The rows of ``rows`` (in key order) with ``low <= k < high``."""
    start = bisect.bisect_left(rows, (low,))
    end = bisect.bisect_left(rows, (high,), lo=start)
    return rows[start:end]


def between_keys(keys: list[bytes], low: bytes, high: bytes) -> list[bytes]:
    return keys[bisect.bisect_left(keys, low) : bisect.bisect_left(keys, high)]


def ranges_query(db: str) -> str:
    """Every stored row of each range of ``ranges_params``, with its range's position."""
    return (
        f"SELECT b.i, t.k, t.v FROM unnest(%b::bytea[], %b::bytea[]) WITH ORDINALITY AS b(lo, hi, i) "
        f"JOIN {db} t ON t.k >= b.lo AND t.k < b.hi"
    )


def tails_query(db: str) -> str:
    """The last ``limit`` stored rows of each range of ``ranges_params`` (limit last)."""
    return (
        f"SELECT b.i, t.k, t.v FROM unnest(%b::bytea[], %b::bytea[]) WITH ORDINALITY AS b(lo, hi, i) "
        f"CROSS JOIN LATERAL (SELECT k, v FROM {db} WHERE k >= b.lo AND k < b.hi ORDER BY k DESC LIMIT %b) t"
    )


def ranges_params(bounds: list[tuple[bytes, bytes]]) -> tuple[list[bytes], list[bytes]]:
    return [low for low, _ in bounds], [high for _, high in bounds]
