"""Newest first: the console's list of workflows, read a page at a time from the store's
``recent`` index (``status || ~updated || wid -> type``, ``store._recent``).

The order is stored, not computed per request: a page with a status is one range of that
index from its keyset cursor, a page over every status a merge of the nine status ranges. A
page reads about as many entries as it shows, whatever the store holds, so a console request
holds the process (and its GIL: the console runs inside the supervisor, beside the front door)
for a bounded time. Filters the index is not ordered by (type, id prefix) skip entries; so
that a rare match cannot turn a page into a pass over the store, a page reads at most
``SCAN_BUDGET`` entries and then ends early, with a cursor to go on from.

Paging is by keyset: a page's cursor is its last ``(updated, id)`` (or, for a page ended by
the budget, the last entry read), and the next page holds what sorts strictly after it (older,
or as old with a greater id). A workflow changed between two pages moves to the top, so it
may be missed by a later page or seen on two: a view of the moment, not the exhaustive listing
(``python -m weft_actors list`` is that).

The counts by status come from the per-(status, type) counts the store keeps (``meta``), one
entry per group; with an id prefix or a time range they are counted over the matching
entries, up to ``COUNT_BUDGET`` of them read (past it they are lower bounds, ``counts_exact``
false). An id prefix is looked up in the visibility index, where ids with a prefix are one
range per (status, type) group.
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Any, Iterator

import lmdb

from ..store._env import Databases
from ..store._keys import COUNT_PREFIX, STATUS_CODES, STATUS_NAMES, split_visibility_group, unpack_u64
from ..store._recent import NEWEST, recent_rows, recent_start

__all__ = ["ListQuery", "newest_first", "STATUSES", "SCAN_BUDGET", "COUNT_BUDGET"]

STATUSES: tuple[str, ...] = tuple(STATUS_CODES)
SCAN_BUDGET = 5_000
"""Index entries one page reads at most (a few milliseconds): what bounds a filtered page."""
COUNT_BUDGET = 10_000
"""Entries the counts of a prefix- or time-filtered list read at most."""


@dataclasses.dataclass(frozen=True)
class ListQuery:
    """What the Workflows page filters on; times in epoch seconds, both ends inclusive."""

    status: str | None = None
    type: str | None = None
    prefix: str = ""
    updated_from: float | None = None
    updated_to: float | None = None
    limit: int = 50
    after: tuple[int, str] | None = None
    """The previous page's last ``(updated ms, id)``."""
    memo: str = ""
    """Memo fields as typed (``customer=acme, region=eu``); read by ``_memo_page``."""


def _bounds(query: ListQuery) -> tuple[int, int]:
    low = -1 if query.updated_from is None else int(query.updated_from * 1000)
    high = NEWEST if query.updated_to is None else int(query.updated_to * 1000)
    return low, high


def _merged(txn: lmdb.Transaction[bytes], dbs: Databases, statuses: tuple[str, ...], high: int, after: tuple[int, str] | None) -> Iterator[tuple[bytes, bytes]]:
    """``(key, type)`` of the chosen statuses' entries, newest first, from the cursor (or from
    ``high``, the newest time wanted) on. Keys sort by ``~updated || wid`` past their status
    byte, so merging the status ranges on that tail is the newest-first order of them all."""
    if after is not None and after[0] <= high:
        start_ms, after_id = after[0], after[1].encode()
    else:
        start_ms, after_id = high, None
    streams = [recent_rows(txn, dbs.recent, status, start_ms, after_id) for status in statuses]
    if len(streams) == 1:
        return streams[0]
    return heapq.merge(*streams, key=lambda row: row[0][1:])


def _page(txn: lmdb.Transaction[bytes], dbs: Databases, query: ListQuery) -> tuple[list[dict[str, Any]], tuple[int, str] | None, int]:
    """The page's items, its cursor (``None``: nothing after it) and the entries it read."""
    low, high = _bounds(query)
    wanted_type = None if query.type is None else query.type.encode()
    prefix = query.prefix.encode()
    statuses = STATUSES if query.status is None else (query.status,)
    floor = recent_start(STATUSES[0], low)[1:]  # an entry's time bytes past this: older than ``low``
    items: list[dict[str, Any]] = []
    scanned = 0
    position: tuple[int, bytes] | None = None  # the last item's, or the last entry read's
    for key, value in _merged(txn, dbs, statuses, high, query.after):
        if key[1:9] > floor:
            return items, None, scanned  # older than the range: so is everything after it
        if (wanted_type is None or value == wanted_type) and key[9:].startswith(prefix):
            if len(items) == query.limit:
                break  # one more match: there is a next page
            updated = NEWEST - int.from_bytes(key[1:9], "big")
            items.append({"id": key[9:].decode(), "type": bytes(value).decode(), "status": STATUS_NAMES[key[0]], "updated": updated / 1000.0})
            position = (updated, bytes(key[9:]))
        elif len(items) < query.limit:
            position = (NEWEST - int.from_bytes(key[1:9], "big"), bytes(key[9:]))
        scanned += 1
        if scanned >= SCAN_BUDGET:
            break  # ends early (or may have no next page): go on from the position
    else:
        return items, None, scanned
    assert position is not None
    return items, (position[0], position[1].decode()), scanned


def _kept_counts(txn: lmdb.Transaction[bytes], dbs: Databases) -> Iterator[tuple[bytes, int]]:
    """``(group, workflows)`` of every (status, type) group: the counts the store keeps in
    ``meta``, one entry per group that has any workflow."""
    cursor = txn.cursor(db=dbs.meta)
    if cursor.set_range(COUNT_PREFIX):
        for key, value in cursor:
            if not key.startswith(COUNT_PREFIX):
                return
            yield bytes(key[len(COUNT_PREFIX):]), unpack_u64(value)[0]


def _groups(txn: lmdb.Transaction[bytes], dbs: Databases, wf_type: str | None) -> list[bytes]:
    return [group for group, _ in _kept_counts(txn, dbs) if wf_type is None or split_visibility_group(group)[1] == wf_type]


def _stored_counts(txn: lmdb.Transaction[bytes], dbs: Databases, wf_type: str | None) -> dict[str, int]:
    """Workflows by status (of ``wf_type``, or of every type): the counts the store keeps."""
    counts = dict.fromkeys(STATUSES, 0)
    for group, found in _kept_counts(txn, dbs):
        status, group_type = split_visibility_group(group)
        if wf_type is None or group_type == wf_type:
            counts[status] += found
    return counts


_Match = tuple[int, bytes, int, str]
"""``(updated ms, id, status code, type)``"""


def _prefix_matches(txn: lmdb.Transaction[bytes], dbs: Databases, query: ListQuery) -> tuple[list[_Match], int, bool]:
    """Every workflow whose id has the query's prefix and that matches its type and time
    filters (any status), from each (status, type) group's range of such ids in the visibility
    index (``status || type || wid -> updated``); the entries read; and whether that is all of
    them (false past ``COUNT_BUDGET`` entries read)."""
    low, high = _bounds(query)
    prefix = query.prefix.encode()
    found: list[_Match] = []
    read = 0
    for group in _groups(txn, dbs, query.type):
        scan = txn.cursor(db=dbs.visibility)
        start = group + prefix
        if not scan.set_range(start):
            continue
        size, wf_type = len(group), bytes(group[3:]).decode()
        for key, value in scan:
            if not key.startswith(start):
                break
            read += 1
            if read > COUNT_BUDGET:
                return found, read - 1, False
            updated = int.from_bytes(value, "big")
            if low <= updated <= high:
                found.append((updated, bytes(key[size:]), group[0], wf_type))
    return found, read, True


def _prefix_page(found: list[_Match], query: ListQuery) -> tuple[list[dict[str, Any]], tuple[int, str] | None]:
    """The page of ``query`` among all the prefix matches, newest first from its cursor."""
    wanted = None if query.status is None else STATUS_CODES[query.status]
    rows = sorted((-updated, wid, code, wf_type) for updated, wid, code, wf_type in found if wanted is None or code == wanted)
    if query.after is not None:
        after = (-query.after[0], query.after[1].encode())
        rows = [row for row in rows if (row[0], row[1]) > after]
    page = rows[: query.limit]
    items = [{"id": wid.decode(), "type": wf_type, "status": STATUS_NAMES[code], "updated": -neg / 1000.0} for neg, wid, code, wf_type in page]
    return items, ((-page[-1][0], page[-1][1].decode()) if len(rows) > query.limit else None)


def _time_counts(txn: lmdb.Transaction[bytes], dbs: Databases, query: ListQuery) -> tuple[dict[str, int], bool]:
    """Workflows by status matching the type and time filters, counted over each status's
    time range in the ``recent`` index, and whether the counts are exact (``COUNT_BUDGET``
    entries read were enough)."""
    low, high = _bounds(query)
    wanted_type = None if query.type is None else query.type.encode()
    floor = recent_start(STATUSES[0], low)[1:]
    counts = dict.fromkeys(STATUSES, 0)
    read = 0
    for status in STATUSES:
        for key, value in recent_rows(txn, dbs.recent, status, high, None):
            if key[1:9] > floor:
                break
            read += 1
            if read > COUNT_BUDGET:
                return counts, False
            if wanted_type is None or value == wanted_type:
                counts[status] += 1
    return counts, True


def newest_first(txn: lmdb.Transaction[bytes], dbs: Databases, query: ListQuery) -> dict[str, Any]:
    """``{"items": [{"id", "type", "status", "updated"}...], "counts": {status: n}, "total",
    "counts_exact", "cursor": (updated ms, id) to go on from, or None, "scanned"}``: the page of
    ``query``, newest updated first, in one snapshot, and how many workflows match the type,
    prefix and time filters by status (the status filter aside, so every status can show its
    count). ``scanned`` is how many index entries the page read.

    With an id prefix, the page is cut from all the matches when there are at most
    ``COUNT_BUDGET`` ids with that prefix (looking an id up), else read from the ``recent``
    index like any other, skipping the ids without the prefix."""
    if query.prefix:
        found, scanned, exact = _prefix_matches(txn, dbs, query)
        counts = dict.fromkeys(STATUSES, 0)
        for _, _, code, _ in found:
            counts[STATUS_NAMES[code]] += 1
        if exact:
            items, cursor = _prefix_page(found, query)
        else:
            items, cursor, read = _page(txn, dbs, query)
            scanned += read
    else:
        items, cursor, scanned = _page(txn, dbs, query)
        if query.updated_from is not None or query.updated_to is not None:
            counts, exact = _time_counts(txn, dbs, query)
        else:
            counts, exact = _stored_counts(txn, dbs, query.type), True
    return {"items": items, "counts": counts, "total": sum(counts.values()), "counts_exact": exact, "cursor": cursor, "scanned": scanned}
