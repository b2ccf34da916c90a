"""The ``memo`` index: top-level memo fields -> workflow ids, for ``list(memo={...})``.

``len(key)(2) || key || tag(1) || len(value)(2) || value || wid -> b""``, one entry per
indexable field of a workflow's memo. One (key, value) pair is one key prefix whose entries
are ordered by workflow id, so a listing filtered on it is a range read in the order (and
with the cursor) of every other listing (``_listing``), whatever the store holds besides.

Indexable: a memo that is a dict, its keys strings of at most ``MAX_KEY_BYTES`` bytes of UTF-8,
their values strings (at most ``MAX_VALUE_BYTES`` bytes), ints (at most ``MAX_VALUE_BYTES``
decimal digits) or bools. Any other field (a nested value, a float, an oversized string) is
stored with the memo as always but not indexed: a start never fails because of its memo's
shape, and a filter on such a value is refused (``memo_filter``) instead of finding nothing.
The bounds keep the longest entry (with a 256-byte id) under LMDB's 511-byte key limit; a memo
has its first ``MAX_INDEXED_FIELDS`` indexable fields indexed, in its own order.

The memo is written once, by the start (``_apply.create_workflow``, which indexes it in the
same transaction, and only when a memo is given); nothing changes it later. A start that
replaces a finished run (``if_exists="start_new"``) drops the old run's entries; a purge drops
them with the record; retention keeps them, as it keeps the record. ``rebuild_memo`` derives the
index from the records (the schema 6 upgrade).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Final, Iterator

from ..codec import decode_plain, unpack_record
from ..errors import InvalidRequest, SerializationError

if TYPE_CHECKING:
    from ._databases import Databases

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "MAX_FILTER_FIELDS",
    "MAX_INDEXED_FIELDS",
    "memo_prefix",
    "memo_fields",
    "memo_filter",
    "index_memo",
    "unindex_memo",
    "rebuild_memo",
    "fill_memo",
    "memo_rows",
]

MAX_KEY_BYTES: Final = 64
MAX_VALUE_BYTES: Final = 128
MAX_FILTER_FIELDS: Final = 8
"""A filter names at most this many fields (each one more point read per candidate)."""
MAX_INDEXED_FIELDS: Final = 32
"""The first this many indexable fields of a memo are indexed, the rest only stored: a start
writes a bounded number of entries, whatever the size of its memo."""

_U16: Final = struct.Struct(">H")
_STR, _INT, _BOOL = b"s", b"i", b"b"


def _encoded(key: Any, value: Any) -> bytes | None:
    """The entry prefix of one field, or None if the field is not indexable."""
    if not isinstance(key, str):
        return None
    if isinstance(value, bool):
        tag, raw = _BOOL, b"1" if value else b"0"
    elif isinstance(value, int):
        tag, raw = _INT, str(value).encode() if abs(value) < 10**MAX_VALUE_BYTES else b""
    elif isinstance(value, str):
        tag, raw = _STR, value.encode("utf-8", "surrogatepass")
    else:
        return None
    raw_key = key.encode("utf-8", "surrogatepass")
    if len(raw_key) > MAX_KEY_BYTES or len(raw) > MAX_VALUE_BYTES or (tag == _INT and not raw):
        return None
    return _U16.pack(len(raw_key)) + raw_key + tag + _U16.pack(len(raw)) + raw


def memo_prefix(key: str, value: Any) -> bytes | None:
    """The index prefix of the entries of workflows whose memo has ``key == value``."""
    return _encoded(key, value)


def memo_fields(memo: bytes | None) -> list[bytes]:
    """The entry prefixes of a stored (encoded) memo's indexable fields; none for a memo that
    is not a dict or not msgpack. Read with ``decode_plain``: a field whose value is of an app's
    class (an enum included) is never indexed, so the writer, ``check`` and ``purge`` derive
    the same entries whether or not they imported the app."""
    if memo is None:
        return []
    try:
        value = decode_plain(memo, "memo")  # the same fields in every process, app or not
    except SerializationError:
        return []
    if not isinstance(value, dict):
        return []
    found = []
    for key, field in value.items():
        prefix = _encoded(key, field)
        if prefix is not None:
            found.append(prefix)
            if len(found) == MAX_INDEXED_FIELDS:
                break
    return found


def memo_filter(memo: Any) -> list[bytes]:
    """The prefixes a ``list(memo=...)`` filter reads, in the order given; ``InvalidRequest``
    (code ``invalid_request``) for a filter that is not a non-empty dict of at most
    ``MAX_FILTER_FIELDS`` indexable fields, naming the field at fault."""
    if not isinstance(memo, dict) or not memo:
        raise InvalidRequest(f"a memo filter is a non-empty mapping of memo key to value, not {memo!r}")
    if len(memo) > MAX_FILTER_FIELDS:
        raise InvalidRequest(f"a memo filter names at most {MAX_FILTER_FIELDS} fields, not {len(memo)}", limit=MAX_FILTER_FIELDS)
    prefixes = []
    for key, value in memo.items():
        try:
            prefix = _encoded(key, value)
        except UnicodeError:
            prefix = None
        if prefix is None:
            raise InvalidRequest(
                f"memo field {key!r}={value!r} is not searchable: only top-level string keys (at most "
                f"{MAX_KEY_BYTES} bytes) with a string (at most {MAX_VALUE_BYTES} bytes), int or bool value are indexed"
            )
        prefixes.append(prefix)
    return prefixes


def index_memo(txn: Any, dbs: Databases, wid_raw: bytes, memo: bytes | None) -> None:
    """Write the entries of ``memo`` for ``wid_raw`` (the start's transaction)."""
    for prefix in memo_fields(memo):
        txn.put(prefix + wid_raw, b"", True, True, False, dbs.memo)


def unindex_memo(txn: Any, dbs: Databases, wid_raw: bytes, memo: bytes | None) -> None:
    """Delete the entries ``index_memo`` wrote for the same memo (a purge, a replaced run)."""
    for prefix in memo_fields(memo):
        txn.delete(prefix + wid_raw, b"", dbs.memo)


def rebuild_memo(txn: Any, dbs: Databases) -> int:
    """Rewrite the index from the workflow records; returns the entries written. One pass
    over the records, run once by the upgrade that adds the index."""
    txn.drop(dbs.memo, delete=False)
    written = 0
    for key, value in txn.cursor(db=dbs.workflows):
        memo = unpack_record(value).get("memo")
        for prefix in memo_fields(memo):
            txn.put(prefix + bytes(key), b"", db=dbs.memo)
            written += 1
    return written


def memo_rows(txn: Any, dbs: Databases, prefix: bytes, after: bytes) -> Iterator[bytes]:
    """Ids (UTF-8 bytes) indexed under ``prefix``, strictly after ``after``, in id order."""
    scan = txn.cursor(db=dbs.memo)
    start = prefix + after
    if not scan.set_range(start):
        return
    size = len(prefix)
    for key in scan.iternext(values=False):
        if not key.startswith(prefix):
            return
        if after and key == start:
            continue
        yield bytes(key[size:])


_FILL_BATCH: Final = 1000


def fill_memo(conn: Any, workflows: str, memo: str) -> int:
    """``rebuild_memo`` on PostgreSQL, into the (empty) ``memo`` table: the memo is codec bytes
    inside the record, which only this code reads, so the records come to the client (through
    a server-side cursor, a batch at a time) and the entries go back in batches."""
    written = 0
    batch: list[tuple[bytes, bytes]] = []
    insert = f"INSERT INTO {memo} (k, v) VALUES (%s, %s) ON CONFLICT (k) DO NOTHING"
    with conn.cursor(name="weft_memo_fill") as records:
        records.itersize = _FILL_BATCH
        records.execute(f"SELECT k, v FROM {workflows}")
        for key, value in records:
            for prefix in memo_fields(unpack_record(bytes(value)).get("memo")):
                batch.append((prefix + bytes(key), b""))
            if len(batch) >= _FILL_BATCH:
                conn.cursor().executemany(insert, batch)
                written += len(batch)
                batch = []
    if batch:
        conn.cursor().executemany(insert, batch)
        written += len(batch)
    return written
