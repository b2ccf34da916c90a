"""Operator transactions that need no live engine: hot backup and purge.

Purge only touches finished workflows (nobody owns them), so it is safe beside running
engines; its epoch bump keeps the id safe to reuse. It runs on either backend (its transaction
is the store's own code); backup is LMDB's copy of its file, and a PostgreSQL store is backed up
by the database's own tools (``PG_BACKUP_HINT``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import lmdb

from ..errors import StorageError, WeftError
from ._state import TxnState
from ._dispatch import apply_intent
from ._intents import PurgeWorkflow
from ._keys import NO_ENGINE, TERMINAL, split_visibility_key, unpack_u64

if TYPE_CHECKING:
    from ._base import KeyspaceStore
    from ._store import LmdbStore

__all__ = ["backup", "purge_candidates", "purge", "PG_BACKUP_HINT"]

PG_BACKUP_HINT = (
    "backup copies an LMDB data directory; back up a PostgreSQL store with pg_dump "
    "(e.g. pg_dump --format=custom --file=weft.dump URL) and restore it with pg_restore"
)


def backup(store: LmdbStore, destination: str) -> int:
    """A consistent compacted copy of the live store in ``destination`` (a new or empty
    directory). LMDB copies from one read snapshot: writers are never blocked. Returns bytes.
    ``StorageError`` for a store with no LMDB file to copy (``PG_BACKUP_HINT``)."""
    if not isinstance(store.env, lmdb.Environment):
        raise StorageError(PG_BACKUP_HINT)
    os.makedirs(destination, exist_ok=True)
    if os.listdir(destination):
        raise StorageError(f"backup destination {destination} is not empty")
    try:
        store.env.copy(destination, compact=True)
    except lmdb.Error as exc:
        raise StorageError(f"backup failed: {exc}") from exc
    return os.path.getsize(os.path.join(destination, "data.mdb"))


def purge_candidates(store: KeyspaceStore, status: str | None, older_than: float | None, now: float) -> list[dict[str, Any]]:
    """Finished workflows matching ``status`` whose last change is older than ``older_than``."""
    found = []
    with store.env.begin() as txn:
        for key, value in txn.cursor(db=store.dbs.visibility):
            item_status, wf_type, wid = split_visibility_key(key)
            updated = unpack_u64(value)[0] / 1000.0
            if item_status not in TERMINAL or (status is not None and item_status != status):
                continue
            if older_than is not None and updated > now - older_than:
                continue
            found.append({"id": wid, "type": wf_type, "status": item_status, "updated": updated})
    return found


def purge(store: KeyspaceStore, workflow_ids: list[str], batch: int = 500) -> dict[str, str]:
    """Purge each id (in batches of transactions); returns id -> "purged" or the error code."""
    outcome: dict[str, str] = {}
    for start in range(0, len(workflow_ids), batch):
        chunk = workflow_ids[start : start + batch]
        with store.env.begin(write=True) as txn:
            state = TxnState(txn, store.dbs, NO_ENGINE, store.clock.now())
            for wid in chunk:
                try:
                    apply_intent(state, PurgeWorkflow(wid))
                    outcome[wid] = "purged"
                except WeftError as exc:
                    outcome[wid] = exc.code
            state.flush()
    return outcome
