"""An LMDB-shaped transaction over PostgreSQL tables: the store's named transactions run on
it unchanged.

Each keyspace is a table ``(k bytea primary key, v bytea)``. A transaction reads through to
the server (one statement per ``get``, one page per cursor step past what it fetched) and
buffers every write in memory: ``flush`` sends them as one statement per keyspace (its
deletes, its inserts and its upserts: ``_batch_sql``), so a batch of a thousand intents costs
a handful of statements to write, whatever it touched.

Reads see the transaction's own buffered writes, as LMDB's do. ``bytea`` compares byte by
byte, as LMDB's keys do, so range scans come back in the same order.
"""

from __future__ import annotations

from bisect import insort
from typing import Any

import psycopg

from ._arrays import encode
from ._batch_sql import write_query
from ._cursor import PgCursor
from ._overlay import DELETED, MAX_KEY, Overlay, Spans, between, between_keys, checked_key, ranges_params, ranges_query, tails_query
from ._presume import NOTHING_PRESUMED, OpLedger, Presumption

# The cursor and the overlay pieces live in ``_cursor`` and ``_overlay``; ``DELETED``, ``MAX_KEY``
# and the range queries are named here too, for the modules that import them from this one
# (and ``_presume``'s pieces, for the store).
__all__ = ["PgTxn", "PgCursor", "DELETED", "MAX_KEY", "ranges_params", "tails_query", "OpLedger", "Presumption"]


class PgTxn:
    """One transaction on ``conn`` (already begun by the caller). ``db`` arguments are table
    names. Not thread-safe, like the connection under it."""

    __slots__ = ("conn", "write", "_overlays", "_cache", "_complete", "_spans", "notify", "presumption")

    def __init__(self, conn: psycopg.Connection[Any], write: bool) -> None:
        self.conn = conn
        self.write = write
        self._overlays: dict[str, Overlay] = {}
        self._cache: dict[str, dict[bytes, bytes | None]] = {}
        """Rows read from the server in this transaction (``None``: absent). Nobody else
        writes while a write transaction holds the store's lock, and a read transaction is
        one snapshot, so a row read once stays what it was."""
        self.notify: tuple[str, list[str]] | None = None
        """``(channel, payloads)`` to ``NOTIFY`` in this transaction, in order (``_hints``)."""
        self._complete: dict[str, list[tuple[bytes, bytes]]] = {}
        """Key ranges ``[low, high)`` whose every stored row is in ``_cache``: a key there
        that the cache lacks is absent, with no statement to ask."""
        self._spans: dict[str, Spans] = {}
        """Stored rows of key ranges, read whole or by their tail, for the range reads."""
        self.presumption: Presumption | None = None
        """What this transaction's new rows are known by, past its reads (``_presume``)."""

    # -- point operations ----------------------------------------------------------------

    def get(self, key: bytes, default: Any = None, db: str = "") -> bytes | None:
        if type(key) is not bytes:
            key = bytes(key)
        if not key or len(key) > MAX_KEY:
            checked_key(key)  # raises
        overlay = self._overlays.get(db)
        if overlay is not None:
            value = overlay.values.get(key)
            if value is not None:
                return default if value is DELETED else value
        cache = self._cache.get(db)
        if cache is None:
            cache = self._cache[db] = {}
        elif key in cache:
            found = cache[key]
            return default if found is None else found
        ranges = self._complete.get(db)
        if ranges is not None and any(low <= key < high for low, high in ranges):
            return default
        row = self.conn.execute(f"SELECT v FROM {db} WHERE k = %b", (key,), binary=True).fetchone()
        found = None if row is None else row[0]
        cache[key] = found
        return default if found is None else found

    def cached(self, db: str, keys: list[bytes], rows: list[tuple[bytes, bytes]]) -> None:
        """``rows`` are every stored row of ``keys`` (read by the caller): the ``get``s of
        those keys that follow cost no statement."""
        cache = self._cache.setdefault(db, {})
        for key in keys:
            cache.setdefault(key, None)
        for key, value in rows:
            cache[key] = value

    def cached_range(self, db: str, low: bytes, high: bytes, rows: list[tuple[bytes, bytes]]) -> None:
        """``rows`` are every stored row with ``low <= k < high``."""
        cache = self._cache.setdefault(db, {})
        for key, value in rows:
            cache[key] = value
        self._complete.setdefault(db, []).append((low, high))

    def fetch(self, db: str, keys: list[bytes]) -> None:
        """Read the rows of ``keys`` not yet read, in one statement (``_reads.warm``)."""
        cache = self._cache.setdefault(db, {})
        wanted = list({key for key in (bytes(key) for key in keys) if key not in cache and 0 < len(key) <= MAX_KEY})
        if wanted:
            self.cached(db, wanted, self.conn.execute(f"SELECT k, v FROM {db} WHERE k = ANY(%b)", (wanted,), binary=True).fetchall())

    def fetch_ranges(self, db: str, bounds: list[tuple[bytes, bytes]]) -> None:
        """Read every stored row of each ``[low, high)`` of ``bounds``, in one statement."""
        spans = self._spans.setdefault(db, Spans())
        bounds = [bound for bound in bounds if spans.covering(*bound) is None]
        if bounds:
            cursor = self.conn.execute(ranges_query(db), ranges_params(bounds), binary=True)
            self.cached_spans(db, bounds, cursor.fetchall(), None)

    def cached_spans(self, db: str, bounds: list[tuple[bytes, bytes]], rows: list[tuple[int, bytes, bytes]], limit: int | None) -> None:
        """``rows`` are ``(position in bounds, from 1; key; value)``: every stored row of each
        range or, with ``limit``, its last ``limit`` rows (``ranges_query``, ``tails_query``)."""
        found: list[list[tuple[bytes, bytes]]] = [[] for _ in bounds]
        cache = self._cache.setdefault(db, {})
        for position, key, value in rows:
            found[position - 1].append((key, value))
            cache[key] = value
        spans = self._spans.setdefault(db, Spans())
        for (low, high), span_rows in zip(bounds, found):
            span_rows.sort()
            whole = limit is None or len(span_rows) < limit
            spans.add(low, high, low if whole else span_rows[0][0], span_rows)

    def put(self, key: bytes, value: bytes, dupdata: bool = True, overwrite: bool = True, append: bool = False, db: str = "") -> bool:
        """LMDB's ``put`` and its positions (the hot appliers pass ``db`` positionally); its
        flags are the defaults every caller uses (a key's new value replaces the old).

        Every row a batch writes passes here: the checks of ``checked_key`` and
        ``Overlay.set`` are inlined, without a call of their own."""
        overlay = self._overlays.get(db)
        if overlay is None:
            overlay = self._overlay(db)
        if type(key) is not bytes:
            key = bytes(key)
        if not key or len(key) > MAX_KEY:
            checked_key(key)  # raises
        values = overlay.values
        if overlay._sorted is not None and key not in values:
            insort(overlay._sorted, key)
        values[key] = value if type(value) is bytes else bytes(value)
        return True

    def delete(self, key: bytes, value: bytes = b"", db: str = "") -> bool:
        overlay = self._overlays.get(db)
        if overlay is None:
            overlay = self._overlay(db)
        if type(key) is not bytes:
            key = bytes(key)
        if not key or len(key) > MAX_KEY:
            checked_key(key)  # raises
        values = overlay.values
        if overlay._sorted is not None and key not in values:
            insort(overlay._sorted, key)
        values[key] = DELETED
        overlay.deleted.add(key)
        return True

    def pending(self, db: str) -> tuple[dict[bytes, Any], dict[bytes, bytes | None], set[bytes]]:
        """The buffered writes of ``db`` (key -> value or ``DELETED``), the rows read of it
        (``None``: absent) and every key deleted in it: a view, not to be changed."""
        overlay = self._overlays.get(db)
        if overlay is None:
            return {}, self._cache.get(db, _NOTHING_READ), set()
        return overlay.values, self._cache.get(db, _NOTHING_READ), overlay.deleted

    def overlay_values(self, db: str) -> list[Any]:
        """This transaction's buffered values of ``db`` (``DELETED`` for a delete)."""
        overlay = self._overlays.get(db)
        return [] if overlay is None else list(overlay.values.values())

    def overlay_items(self, db: str) -> list[tuple[bytes, Any]]:
        overlay = self._overlays.get(db)
        return [] if overlay is None else list(overlay.values.items())

    def cursor(self, db: str = "") -> PgCursor:
        return PgCursor(self, db)

    def stat(self, db: str) -> dict[str, int]:
        """``entries``: the rows of ``db`` as this transaction sees them."""
        row = self.conn.execute(f"SELECT count(*) FROM {db}").fetchone()
        entries = int(row[0]) if row else 0
        overlay = self._overlays.get(db)
        if overlay:
            stored = self._stored(db, list(overlay.values))
            for key, value in overlay.values.items():
                entries += (value is not DELETED) - (key in stored)
        return {"entries": entries}

    def drop(self, db: str, delete: bool = False) -> None:
        """Empty ``db`` (the table itself stays: ``delete`` is LMDB's, and ignored)."""
        self.conn.execute(f"DELETE FROM {db}")
        self._overlays.pop(db, None)
        self._cache[db] = {}

    def _stored(self, db: str, keys: list[bytes]) -> set[bytes]:
        rows = self.conn.execute(f"SELECT k FROM {db} WHERE k = ANY(%b)", (keys,), binary=True)
        return {row[0] for row in rows}

    def _overlay(self, db: str) -> Overlay:
        if not self.write:
            raise psycopg.errors.ReadOnlySqlTransaction(f"write to {db} in a read transaction")
        overlay = self._overlays.get(db)
        if overlay is None:
            overlay = self._overlays[db] = Overlay()
        return overlay

    # -- range reads -------------------------------------------------------------------------

    def range_rows(self, db: str, low: bytes, high: bytes) -> list[tuple[bytes, bytes]]:
        """Every row with ``low <= k < high`` as this transaction sees it, in key order: one
        statement, or none if the range was read (``fetch_ranges``, a prefetch)."""
        span = self._spans.get(db)
        known = None if span is None else span.covering(low, high)
        if known is not None and known[2] <= low:
            stored = between(known[3], low, high)
        else:
            stored = self.conn.execute(f"SELECT k, v FROM {db} WHERE k >= %b AND k < %b ORDER BY k", (low, high), binary=True).fetchall()
        return self._merged(db, stored, low, high)

    def last_rows(self, db: str, low: bytes, high: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """The last ``limit`` rows with ``low <= k < high`` as this transaction sees them, the
        last first: one statement, or none if the range's tail was read (a prefetch)."""
        span = self._spans.get(db)
        known = None if span is None else span.covering(low, high)
        if known is not None:
            start = max(low, known[2])
            merged = self._merged(db, between(known[3], start, high), start, high)
            if known[2] <= low or len(merged) >= limit:
                return merged[::-1][:limit]
        overlay = self._overlays.get(db)
        pending = 0 if overlay is None else len(between_keys(overlay.keys_sorted(), low, high))
        stored = self.conn.execute(
            f"SELECT k, v FROM {db} WHERE k >= %b AND k < %b ORDER BY k DESC LIMIT %b", (low, high, limit + pending), binary=True
        ).fetchall()
        stored.reverse()
        merged = self._merged(db, stored, stored[0][0] if len(stored) == limit + pending else low, high)
        return merged[::-1][:limit]

    def _merged(self, db: str, stored: list[tuple[bytes, bytes]], low: bytes, high: bytes) -> list[tuple[bytes, bytes]]:
        """``stored`` (the stored rows of ``[low, high)``, in order) with this transaction's
        buffered writes there applied."""
        overlay = self._overlays.get(db)
        if overlay is None or not overlay.values:
            return list(stored)
        pending = between_keys(overlay.keys_sorted(), low, high)
        if not pending:
            return list(stored)
        rows = {key: value for key, value in stored}
        for key in pending:
            value = overlay.values[key]
            if value is DELETED:
                rows.pop(key, None)
            else:
                rows[key] = value
        return sorted(rows.items())

    def rows_from(self, db: str, after: bytes | None, inclusive: bool, limit: int, reverse: bool = False) -> list[tuple[bytes, bytes]]:
        """Up to ``limit`` stored rows of ``db`` past ``after`` (from the end when ``None``),
        in key order (descending with ``reverse``), ignoring this transaction's writes."""
        order = "DESC" if reverse else "ASC"
        if after is None:
            query = f"SELECT k, v FROM {db} ORDER BY k {order} LIMIT %b"
            params: tuple[Any, ...] = (limit,)
        else:
            op = ("<=" if inclusive else "<") if reverse else (">=" if inclusive else ">")
            query = f"SELECT k, v FROM {db} WHERE k {op} %b ORDER BY k {order} LIMIT %b"
            params = (after, limit)
        rows = self.conn.execute(query, params, binary=True).fetchall()
        cache = self._cache.setdefault(db, {})
        for key, value in rows:
            cache[key] = value
        return rows

    # -- the end -----------------------------------------------------------------------------

    def flush(self) -> int:
        """Send every buffered write: one statement per keyspace (``_batch_sql.write_query``),
        and the transaction's ``notify`` payloads if it has any (one statement). Returns the rows.

        A key this transaction read and found absent is inserted without ``ON CONFLICT``: the
        write lock keeps anyone else from adding it since, and a duplicate would still fail.
        So is a key it did not read that its ``presumption`` holds new (``_presume``)."""
        written = 0
        presumed = NOTHING_PRESUMED if self.presumption is None else self.presumption.prepare(self)
        if self.notify is not None:
            self.conn.execute("SELECT pg_notify(%s, p) FROM unnest(%s::text[]) AS p", self.notify)
        for db, overlay in self._overlays.items():
            cache = self._cache.get(db, _NOTHING_READ)
            presume = db in presumed
            deleted = overlay.deleted
            deletes: list[bytes] = []
            new_k: list[bytes] = []
            new_v: list[bytes] = []
            puts_k: list[bytes] = []
            puts_v: list[bytes] = []
            for key, value in overlay.values.items():
                if value is DELETED:
                    deletes.append(key)
                    continue
                found = cache.get(key, DELETED)  # DELETED: not read
                if found is None or (presume and found is DELETED and key not in deleted):
                    new_k.append(key)
                    new_v.append(value)
                else:
                    puts_k.append(key)
                    puts_v.append(value)
            if not (deletes or new_k or puts_k):
                continue
            params: list[Any] = []  # arrays encoded here, in one pass each (``_arrays``)
            if deletes:
                params.append(encode(deletes))
            if new_k:
                params += (encode(new_k), encode(new_v))
            if puts_k:
                params += (encode(puts_k), encode(puts_v))
            self.conn.execute(write_query(db, bool(deletes), bool(new_k), bool(puts_k)), params, binary=True)
            written += len(deletes) + len(new_k) + len(puts_k)
        self._overlays.clear()
        return written


_NOTHING_READ: dict[bytes, bytes | None] = {}
"""The cache of a keyspace this transaction read nothing of (never written to)."""
