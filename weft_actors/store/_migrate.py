"""Upgrading a store written by an older schema version, in the transaction that opens it.

Version 1 kept ``updated`` inside visibility keys (``status || type || updated || wid``) and
had no ``expiring`` index. Both indexes are derived from the workflow records, so the upgrade
rebuilds them from the records; nothing else changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..codec import unpack_record
from ._keys import TERMINAL, expiring_key, visibility_key, visibility_value

if TYPE_CHECKING:
    import lmdb

    from ._env import Databases

__all__ = ["upgrade"]


def rebuild_indexes(txn: lmdb.Transaction[bytes], dbs: Databases) -> int:
    """Rewrite the visibility and ``expiring`` indexes from the records; returns their count."""
    txn.drop(dbs.visibility, delete=False)
    txn.drop(dbs.expiring, delete=False)
    count = 0
    for key, value in txn.cursor(db=dbs.workflows):
        record = unpack_record(value)
        wid = key.decode()
        txn.put(visibility_key(record["status"], record["type"], wid), visibility_value(record["updated"]), db=dbs.visibility)
        if record["status"] in TERMINAL and not record.get("history_pruned"):
            txn.put(expiring_key(record["updated"], wid), b"", db=dbs.expiring)
        count += 1
    return count


def upgrade(txn: lmdb.Transaction[bytes], dbs: Databases, version: int) -> None:
    """Bring a store of schema ``version`` to the current one (the caller writes the number)."""
    if version < 2:
        rebuild_indexes(txn, dbs)
