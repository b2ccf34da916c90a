"""Newest first: the console's list of workflows, read from the store's visibility index.

The index (``status || type || wid -> updated ms``) is ordered by id so that the ``list``
call's cursor is stable (``store._listing``); it has no order by time. A console wants the
most recently changed first, so one pass over the (status, type) groups the filter selects
keeps the ``limit`` newest with a bounded heap and counts the matches by status on the way.
One pass costs about a microsecond per entry: well under the 200 ms budget at 100,000
workflows (``bench/console_list.py``), with no second index to keep in step.

Paging is by keyset: a page's cursor is its last ``(updated, id)``, and the next page holds
what sorts strictly after it (older, or as old with a greater id). A workflow changed between
two pages moves to the top, so it may be missed by a later page or seen on two: a view of the
moment, not the exhaustive listing (``python -m weft_actors list`` is that).
"""

from __future__ import annotations

import dataclasses
import heapq
from typing import Any, Iterator

import lmdb

from ..store._env import Databases
from ..store._keys import STATUS_CODES, STATUS_NAMES, group_length
from ..store._listing import _groups as visibility_groups  # the same (status, type) groups `list` pages through

__all__ = ["ListQuery", "newest_first", "STATUSES"]

STATUSES: tuple[str, ...] = tuple(STATUS_CODES)
_INVERT = bytes(range(255, -1, -1))
"""Complements every byte: ids sort the other way round, so the heap (newest first) breaks a tie
by the smaller id; a trailing 0xff keeps an id that is a prefix of another one first."""


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


def _entries(txn: lmdb.Transaction[bytes], db: Any, group: bytes, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of one group whose id starts with ``prefix``, in id order."""
    scan = txn.cursor(db=db)
    start = group + prefix
    if not scan.set_range(start):
        return
    for key, value in scan:
        if not key.startswith(start):
            return
        yield key, value


def newest_first(txn: lmdb.Transaction[bytes], dbs: Databases, query: ListQuery) -> dict[str, Any]:
    """``{"items": [{"id", "type", "status", "updated"}...], "counts": {status: n}, "total",
    "cursor": (updated ms, id) of the last item or None}``: the page of ``query``, newest
    updated first, and how many entries match the type, prefix and time filters by status
    (the status filter aside, so every status can show its count)."""
    low = -1 if query.updated_from is None else int(query.updated_from * 1000)
    high = 1 << 64 if query.updated_to is None else int(query.updated_to * 1000)
    prefix = query.prefix.encode()
    wanted = None if query.status is None else STATUS_CODES[query.status]
    after_ms, after_id = (1 << 64, b"") if query.after is None else (query.after[0], query.after[1].encode())
    counts = dict.fromkeys(STATUSES, 0)
    candidates = 0
    best: list[tuple[int, bytes, bytes]] = []  # a min-heap of (updated ms, inverted id, key)
    db = dbs.visibility
    for group in visibility_groups(txn, dbs, None, query.type):
        size = len(group)
        take = wanted is None or group[0] == wanted
        matched = 0
        for key, value in _entries(txn, db, group, prefix):
            updated = int.from_bytes(value, "big")
            if updated < low or updated > high:
                continue
            matched += 1
            if not take or updated > after_ms or (updated == after_ms and key[size:] <= after_id):
                continue  # counted only: another status, or on a page before the cursor
            candidates += 1
            if len(best) == query.limit and updated < best[0][0]:
                continue  # older than every item kept
            wid = key[size:]
            entry = (updated, wid.translate(_INVERT) + b"\xff", key)
            if len(best) < query.limit:
                heapq.heappush(best, entry)
            elif entry > best[0]:
                heapq.heapreplace(best, entry)
        counts[STATUS_NAMES[group[0]]] += matched
    items: list[dict[str, Any]] = []
    ordered = sorted(best, reverse=True)
    for updated, _, key in ordered:
        size = group_length(key)
        items.append({
            "id": key[size:].decode(),
            "type": key[3:size].decode(),
            "status": STATUS_NAMES[key[0]],
            "updated": updated / 1000.0,
        })
    cursor = None
    if candidates > len(items):  # more after this page
        cursor = (ordered[-1][0], items[-1]["id"])
    return {"items": items, "counts": counts, "total": sum(counts.values()), "cursor": cursor}
