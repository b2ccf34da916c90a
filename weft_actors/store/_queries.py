"""Named read queries; each takes an open transaction so callers choose the snapshot.

Listing lives in ``_listing``."""

from __future__ import annotations

from typing import Any

import lmdb

from ..codec import unpack_record
from ._env import Databases
from ._keys import inbox_seq, op_seq, prefixed, run_prefix, unpack_u64

__all__ = ["get_workflow", "get_epoch", "load_ops", "load_inbox", "by_engine"]


def get_workflow(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str) -> dict[str, Any] | None:
    raw = txn.get(wid.encode(), db=dbs.workflows)
    return None if raw is None else unpack_record(raw)


def get_epoch(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str) -> int:
    raw = txn.get(wid.encode(), db=dbs.claim_epoch)
    return 0 if raw is None else unpack_u64(raw)[0]


def _scan(txn: lmdb.Transaction[bytes], db: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
    cursor = txn.cursor(db=db)
    found = []
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not key.startswith(prefix):
                break
            found.append((key, value))
    return found


def load_ops(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str, run_id: str) -> dict[int, dict[str, Any]]:
    return {op_seq(key): unpack_record(value) for key, value in _scan(txn, dbs.ops, run_prefix(wid, run_id))}


def load_inbox(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str) -> list[tuple[int, dict[str, Any]]]:
    return [(inbox_seq(key), unpack_record(value)) for key, value in _scan(txn, dbs.inbox, prefixed(wid))]


def by_engine(txn: lmdb.Transaction[bytes], dbs: Databases, engine_raw: bytes) -> list[str]:
    cursor = txn.cursor(db=dbs.by_engine)
    found = []
    if cursor.set_range(engine_raw):
        for key in cursor.iternext(values=False):
            if not key.startswith(engine_raw):
                break
            found.append(key[16:].decode())
    return found
