"""``list_workflows`` filtered on memo fields: read from the ``memo`` index, never a scan.

The first field of the filter is a range of the index (``_memo``), in workflow-id order; each
id in it costs one point read per further field (its index entry) and one of its record (for
status, type and ``updated``). A page therefore costs what the workflows indexed under that
field cost, whatever else the store holds: listing ``customer=acme`` among a million other
workflows reads acme's entries only. A status or type filter is checked on the record, so it
narrows the page, not the reads: put the rarest field first.

The order and the cursor's guarantee are those of ``_listing`` (ascending id; a page starts
strictly after the previous page's last id, so no workflow is listed twice). The cursor names
the filter (a digest of the fields, and the status and type) and is refused by any other.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import TYPE_CHECKING, Any, Final

from ..codec import unpack_record
from ..errors import InvalidRequest
from ._keys import STATUS_CODES, ms
from ._memo import memo_filter, memo_rows

if TYPE_CHECKING:
    from ._databases import Databases

__all__ = ["list_by_memo"]

_CURSOR_VERSION: Final = 2
"""``_listing``'s cursors are version 1: neither listing takes the other's."""
_U16: Final = struct.Struct(">H")
_DIGEST: Final = 8


def _digest(status: str | None, wf_type: str | None, prefixes: list[bytes]) -> bytes:
    """What the cursor carries of its filter: the fields in any order, the status, the type."""
    hashed = hashlib.blake2b(digest_size=_DIGEST)
    hashed.update(b"" if status is None else bytes((STATUS_CODES[status],)))
    hashed.update(b"\x00" if wf_type is None else b"\x01" + _U16.pack(len(wf_type.encode())) + wf_type.encode())
    for prefix in sorted(prefixes):
        hashed.update(_U16.pack(len(prefix)) + prefix)
    return hashed.digest()


def _encode_cursor(digest: bytes, last_wid: bytes) -> str:
    return base64.urlsafe_b64encode(bytes((_CURSOR_VERSION,)) + digest + last_wid).decode()


def _decode_cursor(cursor: str, digest: bytes) -> bytes:
    try:
        raw = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True)
        if not raw or raw[0] != _CURSOR_VERSION:
            raise ValueError("unknown cursor")
        last = raw[1 + _DIGEST :]
        if not last:
            raise ValueError("no position")
        last.decode()
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidRequest(f"malformed list cursor {cursor!r}") from exc
    if raw[1 : 1 + _DIGEST] != digest:
        raise InvalidRequest(f"list cursor {cursor!r} belongs to another listing")
    return last


def list_by_memo(
    txn: Any,
    dbs: Databases,
    status: str | None,
    wf_type: str | None,
    memo: Any,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """One page of the workflows whose memo has every field of ``memo`` (equality, top-level
    keys), in ``_listing``'s item shape and order; ``InvalidRequest`` for a filter no index
    entry can answer (``_memo.memo_filter``) or a cursor of another listing."""
    if limit <= 0:
        raise InvalidRequest("limit must be positive")
    if status is not None and status not in STATUS_CODES:
        raise InvalidRequest(f"unknown status {status!r}")
    prefixes = memo_filter(memo)
    digest = _digest(status, wf_type, prefixes)
    after = _decode_cursor(cursor, digest) if cursor else b""
    first, others = prefixes[0], prefixes[1:]
    items: list[dict[str, Any]] = []
    last = b""
    for wid_raw in memo_rows(txn, dbs, first, after):
        if any(txn.get(prefix + wid_raw, None, dbs.memo) is None for prefix in others):
            continue
        raw = txn.get(wid_raw, None, dbs.workflows)
        if raw is None:  # not in a consistent store: the index and the record go together
            continue
        record = unpack_record(raw)
        if (status is not None and record["status"] != status) or (wf_type is not None and record["type"] != wf_type):
            continue
        if len(items) == limit:
            return {"items": items, "cursor": _encode_cursor(digest, last)}
        items.append({"id": wid_raw.decode(), "type": record["type"], "status": record["status"], "updated": ms(record["updated"]) / 1000.0})
        last = wid_raw
    return {"items": items, "cursor": None}
