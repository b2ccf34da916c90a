"""``list_workflows``: paging through the visibility index with a cursor that never repeats.

The index holds one entry per workflow, ``status || type || wid -> updated``, so it splits
into (status, type) *groups*, each ordered by workflow id. A listing merges the groups its
filter selects (all of them, one status's, one type's across the statuses, or a single one)
into one stream ordered by workflow id, and its cursor is the last id returned.

Why by id: an id never changes, while status and ``updated`` do. Ordering by a key that moves
(the index used to be ordered by status, then ``updated``) lets a workflow that changes between
two pages be seen twice or not at all. Ordering by id, the cursor position of every workflow is
fixed for the whole listing.
"""

from __future__ import annotations

import base64
import heapq
import struct
from typing import Any, Iterator

import lmdb

from ..errors import InvalidRequest
from ._env import Databases
from ._keys import STATUS_CODES, STATUS_NAMES, group_length, split_visibility_key, unpack_u64, visibility_group

__all__ = ["list_workflows", "encode_cursor", "decode_cursor"]

_CURSOR_VERSION = 1
_ANY_STATUS = 0
_ANY_TYPE = 0xFFFF
_GROUP_END = b"\xff"  # never a byte of UTF-8, so ``group + 0xff`` sorts after every id in it
_U16 = struct.Struct(">H")


def encode_cursor(status: str | None, wf_type: str | None, last_wid: bytes) -> str:
    """``version || status code (0: any) || len(type) (0xffff: any) || type || last id``: the
    filter rides along so a cursor is refused by any other listing."""
    raw_type = b"" if wf_type is None else wf_type.encode()
    head = bytes((_CURSOR_VERSION, _ANY_STATUS if status is None else STATUS_CODES[status]))
    head += _U16.pack(_ANY_TYPE if wf_type is None else len(raw_type)) + raw_type
    return base64.urlsafe_b64encode(head + last_wid).decode()


def decode_cursor(cursor: str, status: str | None, wf_type: str | None) -> bytes:
    """The last id a cursor names (UTF-8 bytes); ``InvalidRequest`` unless the cursor is
    well formed (strict base64, this version, a valid id) and belongs to this filter."""
    try:
        raw = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True)
        version, status_code = raw[0], raw[1]
        (type_len,) = _U16.unpack_from(raw, 2)
        if version != _CURSOR_VERSION or (status_code != _ANY_STATUS and status_code not in STATUS_NAMES):
            raise ValueError("unknown cursor")
        start = 4 if type_len == _ANY_TYPE else 4 + type_len
        cursor_type = None if type_len == _ANY_TYPE else raw[4:start].decode()
        last = raw[start:]
        if not last or len(raw) < start:
            raise ValueError("no position")
        last.decode()
    except (ValueError, TypeError, IndexError, AttributeError, struct.error) as exc:
        raise InvalidRequest(f"malformed list cursor {cursor!r}") from exc
    cursor_status = None if status_code == _ANY_STATUS else STATUS_NAMES[status_code]
    if cursor_status != status or cursor_type != wf_type:
        raise InvalidRequest(f"list cursor {cursor!r} belongs to another listing")
    return last


def _groups(txn: lmdb.Transaction[bytes], dbs: Databases, status: str | None, wf_type: str | None) -> list[bytes]:
    """Prefixes of the (status, type) groups the filter selects that have any entry."""
    if status is not None and wf_type is not None:
        return [visibility_group(status, wf_type)]
    if wf_type is not None:
        return [visibility_group(name, wf_type) for name in STATUS_CODES]
    scan = txn.cursor(db=dbs.visibility)
    found = []
    prefix = b"" if status is None else bytes((STATUS_CODES[status],))
    positioned = scan.set_range(prefix)
    while positioned:
        key = scan.key()
        if not key.startswith(prefix):
            break
        group = key[: group_length(key)]
        found.append(group)
        positioned = scan.set_range(group + _GROUP_END)
    return found


def _stream(txn: lmdb.Transaction[bytes], dbs: Databases, group: bytes, after: bytes) -> Iterator[tuple[bytes, bytes, bytes]]:
    """``(wid bytes, key, value)`` of one group, ids strictly after ``after``, in id order."""
    scan = txn.cursor(db=dbs.visibility)
    start = group + after
    if not scan.set_range(start):
        return
    size = len(group)
    for key, value in scan:
        if not key.startswith(group):
            return
        if key == start and after:
            continue
        yield key[size:], key, value


def list_workflows(
    txn: lmdb.Transaction[bytes],
    dbs: Databases,
    status: str | None,
    wf_type: str | None,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """One page, ``{"items": [{"id", "type", "status", "updated"}...], "cursor": next or None}``.

    Guarantee: items come in ascending id order (UTF-8 byte order) and a page starts strictly
    after the previous page's last id, so **no workflow is listed twice** in one listing,
    whatever changes between pages. Each page is one consistent snapshot. A workflow that
    exists and matches the filter for the whole listing is **listed exactly once** — for the
    unfiltered and type-only listings even while its status changes. One that starts or stops
    matching during the listing (created, purged, or moved into or out of the filtered status)
    is listed at most once: it is listed if it matched when the page covering its id was read.
    ``cursor`` is ``None`` once nothing is left; a cursor works only with the filter it came from.
    """
    if limit <= 0:
        raise InvalidRequest("limit must be positive")
    after = decode_cursor(cursor, status, wf_type) if cursor else b""
    streams = [_stream(txn, dbs, group, after) for group in _groups(txn, dbs, status, wf_type)]
    merged = heapq.merge(*streams) if len(streams) != 1 else streams[0]
    items: list[dict[str, Any]] = []
    last = b""
    for wid_raw, key, value in merged:
        if len(items) == limit:
            return {"items": items, "cursor": encode_cursor(status, wf_type, last)}
        key_status, key_type, wid = split_visibility_key(key)
        items.append({"id": wid, "type": key_type, "status": key_status, "updated": unpack_u64(value)[0] / 1000.0})
        last = wid_raw
    return {"items": items, "cursor": None}
