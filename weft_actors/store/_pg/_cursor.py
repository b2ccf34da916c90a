"""LMDB's cursor over a PostgreSQL keyspace: stored rows, fetched a page at a time, merged
with the transaction's buffered writes (``_txn.PgTxn.cursor`` makes one)."""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any, Iterator, Protocol

from ._overlay import DELETED, PAGE, Overlay, next_pending

__all__ = ["PgCursor", "CursorTxn"]


class CursorTxn(Protocol):
    """What a cursor needs of its transaction (``PgTxn``): its buffered writes, a page of
    stored rows, and its writes."""

    _overlays: dict[str, Overlay]

    def rows_from(self, db: str, after: bytes | None, inclusive: bool, limit: int, reverse: bool = False) -> list[tuple[bytes, bytes]]: ...

    def put(self, key: bytes, value: bytes, dupdata: bool = True, overwrite: bool = True, append: bool = False, db: str = "") -> bool: ...

    def delete(self, key: bytes, value: bytes = b"", db: str = "") -> bool: ...


class PgCursor:
    """LMDB's cursor operations that the store uses, over the stored rows merged with the
    transaction's buffered writes. Positioned on one key, or unpositioned (``key() == b""``)."""

    __slots__ = ("_txn", "_db", "_key", "_value", "_ahead", "_ahead_done", "_fetch_from")

    def __init__(self, txn: CursorTxn, db: str) -> None:
        self._txn = txn
        self._db = db
        self._key = b""
        self._value = b""
        self._ahead: deque[tuple[bytes, bytes]] = deque()
        """Stored rows past the current key, in order, contiguous from it."""
        self._ahead_done = False
        """No stored row lies past the last of ``_ahead``."""
        self._fetch_from: tuple[bytes | None, bool] = (None, True)
        """Where the next page of stored rows starts: (key, inclusive)."""

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def item(self) -> tuple[bytes, bytes]:
        return self._key, self._value

    # -- moving ------------------------------------------------------------------------------

    def first(self) -> bool:
        return self._seek(None)

    def set_range(self, key: bytes) -> bool:
        return self._seek(bytes(key))

    def next(self) -> bool:
        if not self._key:
            return self.first()
        return self._land(self._key, inclusive=False)

    def last(self) -> bool:
        return self._back(None, inclusive=True)

    def prev(self) -> bool:
        if not self._key:
            return self.last()
        return self._back(self._key, inclusive=False)

    def _seek(self, start: bytes | None) -> bool:
        self._restart(start, True)
        return self._land(start, inclusive=True)

    def _restart(self, start: bytes | None, inclusive: bool) -> None:
        self._ahead = deque()
        self._ahead_done = False
        self._fetch_from = (start, inclusive)

    def _land(self, start: bytes | None, inclusive: bool) -> bool:
        """Move to the first key past ``start`` among stored rows and buffered writes."""
        overlay = self._txn._overlays.get(self._db)
        while True:
            stored = self._peek_stored(start, inclusive)
            pending = next_pending(overlay, start, inclusive)
            if pending is not None and (stored is None or pending[0] <= stored[0]):
                key, value = pending
                if value is DELETED:
                    start, inclusive = key, False
                    continue
                return self._at(key, value)
            if stored is None:
                return self._at(b"", b"")
            return self._at(*stored)

    def _peek_stored(self, start: bytes | None, inclusive: bool) -> tuple[bytes, bytes] | None:
        ahead = self._ahead
        while True:
            while ahead:
                key = ahead[0][0]
                if start is None or key > start or (inclusive and key == start):
                    return ahead[0]
                ahead.popleft()
            if self._ahead_done:
                return None
            after, after_inclusive = self._fetch_from
            rows = self._txn.rows_from(self._db, after, after_inclusive, PAGE)
            ahead.extend(rows)
            self._ahead_done = len(rows) < PAGE
            if rows:
                self._fetch_from = (rows[-1][0], False)

    def _back(self, before: bytes | None, inclusive: bool) -> bool:
        """Move to the last key at/before ``before`` (from the end with ``None``)."""
        overlay = self._txn._overlays.get(self._db)
        while True:
            rows = self._txn.rows_from(self._db, before, inclusive, 1, reverse=True)
            stored = rows[0] if rows else None
            pending = None
            if overlay and overlay.values:
                keys = overlay.keys_sorted()
                if before is None:
                    index = len(keys)
                else:
                    index = bisect.bisect_right(keys, before) if inclusive else bisect.bisect_left(keys, before)
                if index > 0:
                    pending = (keys[index - 1], overlay.values[keys[index - 1]])
            if pending is not None and (stored is None or pending[0] >= stored[0]):
                key, value = pending
                if value is DELETED:
                    before, inclusive = key, False
                    continue
                self._restart(key, False)
                return self._at(key, value)
            if stored is None:
                self._restart(None, True)
                return self._at(b"", b"")
            self._restart(stored[0], False)
            return self._at(*stored)

    def _at(self, key: bytes, value: bytes) -> bool:
        self._key, self._value = key, value
        return bool(key)

    # -- iterating ---------------------------------------------------------------------------

    def iternext(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        """From the current item (the first, if unpositioned) to the end, as LMDB's does."""
        if not self._key and not self.first():
            return
        while self._key:
            if keys and values:
                yield self._key, self._value
            elif keys:
                yield self._key
            else:
                yield self._value
            if not self._land(self._key, inclusive=False):
                return

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self.iternext()

    # -- writing -----------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes, **_: Any) -> bool:
        self._txn.put(key, value, db=self._db)
        if bytes(key) == self._key:
            self._value = bytes(value)
        return True

    def delete(self) -> bool:
        """Delete the current key and move to the next, as LMDB's does; False if unpositioned."""
        if not self._key:
            return False
        self._txn.delete(self._key, db=self._db)
        self._land(self._key, inclusive=False)
        return True
