"""The ``recent`` index: every workflow by status, newest status change first, stored.

``status(1) || ~updated ms(8) || wid -> type``. The visibility index is ordered by id (what
keeps ``list``'s cursor stable, ``_listing``); this one is ordered by time within each status,
so a newest-first page is a range read from a keyset cursor ``(updated ms, id)``: one status
is one range, every status a merge of nine. A page then costs what it returns, whatever the
store holds; computing the order per request (a pass over the whole visibility index) cost
1.4 s at 200,000 workflows and starved everything else in the process that ran it.

The entry moves with the visibility entry (``_writes.set_visibility``, purge) in the same
transaction, so the two never disagree; ``rebuild_recent`` derives it from the visibility
index (the schema 5 upgrade).
"""

from __future__ import annotations

import functools
import struct
from typing import TYPE_CHECKING, Any, Final, Iterator

from ._keys import STATUS_CODES, group_length, ms

if TYPE_CHECKING:
    import lmdb

    from ._databases import Databases

__all__ = ["recent_key", "recent_head", "recent_start", "delete_recent", "rebuild_recent", "fill_recent", "recent_rows", "NEWEST"]

_U64: Final = struct.Struct(">Q")
_MAX: Final = (1 << 64) - 1
NEWEST: Final = _MAX
"""An ``updated ms`` no entry reaches: a page from the newest on."""


def recent_start(status: str, updated_ms: int) -> bytes:
    """Where entries of ``status`` updated at ``updated_ms`` or earlier begin."""
    return bytes((STATUS_CODES[status],)) + _U64.pack(_MAX - min(max(updated_ms, 0), _MAX))


_STATUS_BYTE: Final = {name: bytes((code,)) for name, code in STATUS_CODES.items()}


@functools.lru_cache(maxsize=1024)
def recent_head(status: str, updated: float) -> bytes:
    """``status(1) || ~updated ms(8)``, the part of a ``recent_key`` before the id. Cached, as
    ``ms``: one transaction stamps every workflow whose status it changes with the same
    ``now``, so ``_writes.set_visibility`` builds each key with a cache hit and a concatenation
    (three Python calls fewer per started and finished workflow than building it here)."""
    return _STATUS_BYTE[status] + _U64.pack(_MAX - ms(updated))


def recent_key(status: str, updated: float, wid: str) -> bytes:
    return recent_head(status, updated) + wid.encode()


def delete_recent(txn: Any, dbs: Databases, record: dict[str, Any], wid: str) -> None:
    txn.delete(recent_key(record["status"], record["updated"], wid), db=dbs.recent)


def rebuild_recent(txn: lmdb.Transaction[bytes], dbs: Databases) -> int:
    """Rewrite the ``recent`` index from the visibility index; returns the entries written."""
    txn.drop(dbs.recent, delete=False)
    written = 0
    for key, value in txn.cursor(db=dbs.visibility):
        size = group_length(key)
        updated_ms = _U64.unpack_from(value)[0]
        txn.put(bytes((key[0],)) + _U64.pack(_MAX - updated_ms) + bytes(key[size:]), bytes(key[3:size]), db=dbs.recent)
        written += 1
    return written


_FILL_SQL: Final = """
INSERT INTO {recent} (k, v)
SELECT substring(k FROM 1 FOR 1)
       || int8send(~(('x' || encode(v, 'hex'))::bit(64)::bigint))
       || substring(k FROM 4 + (get_byte(k, 1) << 8) + get_byte(k, 2)),
       substring(k FROM 4 FOR (get_byte(k, 1) << 8) + get_byte(k, 2))
FROM {visibility}
"""
"""``rebuild_recent`` in one statement on PostgreSQL: the bitwise complement of a u64 below 2**63
is the two's complement bytes of ``~x`` as a bigint."""


def fill_recent(conn: Any, visibility: str, recent: str) -> None:
    """Fill the (empty) ``recent`` table from the visibility table, inside the server."""
    conn.execute(_FILL_SQL.format(recent=recent, visibility=visibility))


def recent_rows(txn: Any, db: Any, status: str, before_ms: int, after_id: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """``(key, type)`` of ``status``'s entries from the position ``(before_ms, after_id)`` on,
    newest first: strictly after that id at that time when ``after_id`` is given (a page's
    cursor), else from entries updated at ``before_ms`` or earlier."""
    scan = txn.cursor(db=db)
    start = recent_start(status, before_ms)
    prefix = start[:1]
    if after_id is not None:
        start += after_id + b"\x00"  # the first key strictly after the cursor's own
    if not scan.set_range(start):
        return
    for key, value in scan:
        if not key.startswith(prefix):
            return
        yield key, value
