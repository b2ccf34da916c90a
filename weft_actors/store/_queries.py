"""Named read queries; each takes an open transaction so callers choose the snapshot."""

from __future__ import annotations

import base64
import struct
from typing import Any

import lmdb

from ..codec import unpack_record
from ..errors import InvalidRequest
from ._env import Databases
from ._keys import (
    inbox_seq,
    op_seq,
    prefixed,
    run_prefix,
    split_visibility_key,
    unpack_u64,
    visibility_prefix,
)

__all__ = ["get_workflow", "get_epoch", "load_ops", "load_inbox", "by_engine", "list_workflows"]


def get_workflow(txn: lmdb.Transaction, dbs: Databases, wid: str) -> dict[str, Any] | None:
    raw = txn.get(wid.encode(), db=dbs.workflows)
    return None if raw is None else unpack_record(raw)


def get_epoch(txn: lmdb.Transaction, dbs: Databases, wid: str) -> int:
    raw = txn.get(wid.encode(), db=dbs.claim_epoch)
    return 0 if raw is None else unpack_u64(raw)[0]


def _scan(txn: lmdb.Transaction, db: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
    cursor = txn.cursor(db=db)
    found = []
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not key.startswith(prefix):
                break
            found.append((key, value))
    return found


def load_ops(txn: lmdb.Transaction, dbs: Databases, wid: str, run_id: str) -> dict[int, dict[str, Any]]:
    return {op_seq(key): unpack_record(value) for key, value in _scan(txn, dbs.ops, run_prefix(wid, run_id))}


def load_inbox(txn: lmdb.Transaction, dbs: Databases, wid: str) -> list[tuple[int, dict[str, Any]]]:
    return [(inbox_seq(key), unpack_record(value)) for key, value in _scan(txn, dbs.inbox, prefixed(wid))]


def by_engine(txn: lmdb.Transaction, dbs: Databases, engine_raw: bytes) -> list[str]:
    cursor = txn.cursor(db=dbs.by_engine)
    found = []
    if cursor.set_range(engine_raw):
        for key in cursor.iternext(values=False):
            if not key.startswith(engine_raw):
                break
            found.append(key[16:].decode())
    return found


def encode_cursor(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def decode_cursor(cursor: str, prefix: bytes = b"") -> bytes:
    """The visibility key a cursor names; ``InvalidRequest`` unless it is one (strict base64,
    a well-formed key) inside the listing's ``prefix``."""
    try:
        key = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True)
        split_visibility_key(key)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, struct.error) as exc:
        raise InvalidRequest(f"malformed list cursor {cursor!r}") from exc
    if not key.startswith(prefix):
        raise InvalidRequest(f"list cursor {cursor!r} belongs to another listing")
    return key


def list_workflows(
    txn: lmdb.Transaction,
    dbs: Databases,
    status: str | None,
    wf_type: str | None,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """Page through the visibility index in key order (status, type, updated, id)."""
    if limit <= 0:
        raise InvalidRequest("limit must be positive")
    prefix = visibility_prefix(status, wf_type)
    scan = txn.cursor(db=dbs.visibility)
    start = decode_cursor(cursor, prefix) if cursor else prefix
    positioned = scan.set_range(start)
    if positioned and cursor and scan.key() == start:
        positioned = scan.next()
    items: list[dict[str, Any]] = []
    last: bytes | None = None
    while positioned:
        key = scan.key()
        if not key.startswith(prefix):
            break
        key_status, key_type, updated, wid = split_visibility_key(key)
        if wf_type is not None and key_type != wf_type:
            positioned = scan.next()
            continue
        if len(items) == limit:
            return {"items": items, "cursor": encode_cursor(last)}  # type: ignore[arg-type]
        items.append({"id": wid, "type": key_type, "status": key_status, "updated": updated})
        last = key
        positioned = scan.next()
    return {"items": items, "cursor": None}
