"""The Workflows page filtered on memo fields: newest first, found through the memo index.

The ids with the filter's first field are one range of the ``memo`` index (``store._memo``).
When there are at most ``MEMO_BUDGET`` of them, each is checked (its other fields: a point read
each; its record: status, type, ``updated``) and the page is cut from all the matches, newest
first, with exact counts, as a page with an id prefix is (``_listing._prefix_page``). Past the
budget the page is read from the ``recent`` index like an unfiltered one, each entry kept if
the memo index holds its id under every field (point reads, no record), at most
``SCAN_BUDGET`` entries a page; the counts are then those of the matches seen, lower bounds.
Either way a request reads a bounded number of entries, whatever the store holds.
"""

from __future__ import annotations

from typing import Any, Final

import lmdb

from ..codec import unpack_record
from ..store._env import Databases
from ..store._keys import STATUS_CODES, STATUS_NAMES, ms
from ..store._memo import memo_filter, memo_rows
from ._listing import SCAN_BUDGET, STATUSES, ListQuery, _bounds, _merged, _prefix_page

__all__ = ["memo_newest_first", "MEMO_BUDGET"]

MEMO_BUDGET: Final = 2_000
"""Ids of the first field checked one by one (a record read each) before the page is read
from the ``recent`` index instead."""


def _indexed(txn: lmdb.Transaction[bytes], dbs: Databases, prefixes: list[bytes], wid_raw: bytes) -> bool:
    return all(txn.get(prefix + wid_raw, db=dbs.memo) is not None for prefix in prefixes)


def _matches(txn: lmdb.Transaction[bytes], dbs: Databases, query: ListQuery, prefixes: list[bytes]) -> tuple[list[tuple[int, bytes, int, str]], int, bool]:
    """``(updated ms, id, status code, type)`` of every workflow matching the filters but the
    status, the entries read, and whether that is all of them (``MEMO_BUDGET``)."""
    low, high = _bounds(query)
    id_prefix = query.prefix.encode()
    found: list[tuple[int, bytes, int, str]] = []
    read = 0
    for wid_raw in memo_rows(txn, dbs, prefixes[0], b""):
        read += 1
        if read > MEMO_BUDGET:
            return found, read - 1, False
        if not wid_raw.startswith(id_prefix) or not _indexed(txn, dbs, prefixes[1:], wid_raw):
            continue
        raw = txn.get(wid_raw, db=dbs.workflows)
        if raw is None:
            continue
        record = unpack_record(raw)
        updated = ms(record["updated"])
        if (query.type is None or record["type"] == query.type) and low <= updated <= high:
            found.append((updated, wid_raw, STATUS_CODES[record["status"]], record["type"]))
    return found, read, True


def _scanned_page(txn: lmdb.Transaction[bytes], dbs: Databases, query: ListQuery, prefixes: list[bytes]) -> tuple[list[dict[str, Any]], tuple[int, str] | None, int, dict[str, int]]:
    """The page read from the ``recent`` index, newest first, keeping the ids the memo index
    holds under every field; its cursor, the entries read and the counts of what it saw."""
    low, high = _bounds(query)
    statuses = STATUSES if query.status is None else (query.status,)
    wanted_type = None if query.type is None else query.type.encode()
    id_prefix = query.prefix.encode()
    counts = dict.fromkeys(STATUSES, 0)
    items: list[dict[str, Any]] = []
    position: tuple[int, bytes] | None = None
    scanned = 0
    for key, value in _merged(txn, dbs, statuses, high, query.after):
        updated = (1 << 64) - 1 - int.from_bytes(key[1:9], "big")
        if updated < low:
            return items, None, scanned, counts
        wid_raw = bytes(key[9:])
        scanned += 1
        if (wanted_type is None or value == wanted_type) and wid_raw.startswith(id_prefix) and _indexed(txn, dbs, prefixes, wid_raw):
            if len(items) == query.limit:
                break
            counts[STATUS_NAMES[key[0]]] += 1
            items.append({"id": wid_raw.decode(), "type": bytes(value).decode(), "status": STATUS_NAMES[key[0]], "updated": updated / 1000.0})
            position = (updated, wid_raw)
        elif len(items) < query.limit:
            position = (updated, wid_raw)  # a page ended by the budget goes on from here
        if scanned >= SCAN_BUDGET:
            break
    else:
        return items, None, scanned, counts
    assert position is not None
    return items, (position[0], position[1].decode()), scanned, counts


def memo_newest_first(txn: lmdb.Transaction[bytes], dbs: Databases, query: ListQuery, memo: dict[str, Any]) -> dict[str, Any]:
    """``_listing.newest_first``'s answer for a query with a memo filter (``InvalidRequest``
    for a filter no index entry answers)."""
    prefixes = memo_filter(memo)
    found, scanned, exact = _matches(txn, dbs, query, prefixes)
    if exact:
        counts = dict.fromkeys(STATUSES, 0)
        for _, _, code, _ in found:
            counts[STATUS_NAMES[code]] += 1
        items, cursor = _prefix_page(found, query)
    else:
        items, cursor, read, counts = _scanned_page(txn, dbs, query, prefixes)
        scanned += read
    return {"items": items, "counts": counts, "total": sum(counts.values()), "counts_exact": exact, "cursor": cursor, "scanned": scanned}

