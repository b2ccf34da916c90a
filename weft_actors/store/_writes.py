"""Write primitives the appliers share, each inside one transaction (a ``TxnState``).

They sit below the appliers and call none of them; the one effect that belongs to an applier
(a freed flow slot, when ``set_visibility`` sees a workflow end) goes through the table
(``_table.apply_intent``).

``next_epoch`` and ``set_visibility``, on every start and end, pass the database (and
``put``'s flags) positionally, as the start and the step do (``_apply``).
"""

from __future__ import annotations

from typing import Any

import lmdb

from ..codec import pack_record, unpack_record
from ..errors import FencedOut, LimitExceeded, WorkflowClosed, WorkflowNotFound
from ._feed import feed_entry
from ._intents import AppendInbox
from ._keys import TERMINAL, fence, inbox_key, pack_u64, prefixed, unpack_u64, visibility_group, visibility_value
from ._recent import recent_head
from ._relays import ReleaseSlot
from ._state import TxnState
from ._table import apply_intent

__all__ = ["next_epoch", "set_visibility", "delete_prefix", "check_fence", "append_inbox", "check_inbox_room", "request_key"]

_CAPPED_KINDS = frozenset({"signal", "update"})
"""Messages a client sends, refused at the cap; the engine's own (cancel, child done) never are."""


def next_epoch(state: TxnState, wid_raw: bytes) -> int:
    """``stored epoch + 1``, written back: the fencing token is never a literal, never reset."""
    stored = state.txn.get(wid_raw, None, state.dbs.claim_epoch)
    epoch = (0 if stored is None else unpack_u64(stored)[0]) + 1
    state.txn.put(wid_raw, pack_u64(epoch), True, True, False, state.dbs.claim_epoch)
    return epoch


def set_visibility(state: TxnState, record: dict[str, Any], wid: str, old: dict[str, Any] | None) -> None:
    """Move ``wid``'s index entries from ``old`` (its previous record, if any) to ``record``:
    its visibility and ``recent`` entries, and, for a finished workflow whose history is kept, its ``expiring``
    entry (what the retention prune scans, oldest first). Called by every transaction that
    changes a status, in that transaction; the workflow counts by (status, type) follow
    (``TxnState.count``, written at ``flush``).

    Twice per workflow (its start, its end): the keys are built here from cached heads
    (``visibility_group``, ``recent_head``, ``visibility_value``) and the encoded id, not by
    a helper per key (``bench/engine_throughput.py``: 641k -> 627k instructions per workflow)."""
    dbs, txn = state.dbs, state.txn
    counts = state.counts
    if counts is None:
        counts = state.counts = {}
    wid_raw = wid.encode()
    if old is not None:
        status, updated = old["status"], old["updated"]
        group = visibility_group(status, old["type"])
        txn.delete(group + wid_raw, b"", dbs.visibility)  # its visibility_key
        txn.delete(recent_head(status, updated) + wid_raw, b"", dbs.recent)  # its recent_key
        counts[group] = counts.get(group, 0) - 1
        if status in TERMINAL and not old.get("history_pruned"):
            txn.delete(visibility_value(updated) + wid_raw, b"", dbs.expiring)  # its expiring_key
    status, updated = record["status"], record["updated"]
    group = visibility_group(status, record["type"])
    counts[group] = counts.get(group, 0) + 1
    stamp = visibility_value(updated)
    txn.put(group + wid_raw, stamp, True, True, False, dbs.visibility)
    txn.put(recent_head(status, updated) + wid_raw, group[3:], True, True, False, dbs.recent)  # -> the type, as encoded in its group
    if status in TERMINAL:
        txn.put(stamp + wid_raw, b"", True, True, False, dbs.expiring)  # its expiring_key: updated ms || id
        if "flow" in record and old is not None and old["status"] not in TERMINAL:
            apply_intent(state, ReleaseSlot(record))


def delete_prefix(txn: lmdb.Transaction[bytes], db: Any, prefix: bytes) -> int:
    """Delete every key of ``db`` that starts with ``prefix``; how many went."""
    cursor = txn.cursor(db=db)
    deleted = 0
    if cursor.set_range(prefix):
        while cursor.key().startswith(prefix):
            deleted += 1
            if not cursor.delete() or not cursor.key():
                break
    return deleted


def check_fence(state: TxnState, wid: str, epoch: int) -> None:
    holder = state.txn.get(wid.encode(), db=state.dbs.claim_holder)
    if holder is None or holder[:24] != fence(state.engine_raw, epoch):
        raise FencedOut(f"this engine no longer holds workflow {wid!r} at epoch {epoch}", workflow_id=wid, epoch=epoch)


def request_key(wid: str, request_id: str) -> bytes:
    """``requests`` key of ``wid``'s request ``request_id`` (an update's answer, a sent signal)."""
    return prefixed(wid) + request_id.encode()


def append_inbox(state: TxnState, intent: AppendInbox) -> int:
    txn, dbs, wid = state.txn, state.dbs, intent.wid
    raw = txn.get(wid.encode(), db=dbs.workflows)
    if raw is None:
        raise WorkflowNotFound(f"workflow {wid!r} not found", workflow_id=wid)
    status = unpack_record(raw)["status"]
    if status in TERMINAL:
        raise WorkflowClosed(
            f"workflow {wid!r} has finished (status {status}); it takes no more {intent.kind}s",
            workflow_id=wid,
            status=status,
        )
    if intent.kind in _CAPPED_KINDS:
        check_inbox_room(state, wid, intent.kind)
    seq = state.next_feed_seq()
    message = {
        "kind": intent.kind,
        "name": intent.name,
        "payload": intent.payload,
        "request_id": intent.request_id,
        "at": state.now,
    }
    txn.put(inbox_key(wid, seq), pack_record(message), db=dbs.inbox)
    txn.put(pack_u64(seq), feed_entry(state.now, wid), db=dbs.feed)
    return seq


def check_inbox_room(state: TxnState, wid: str, kind: str) -> None:
    """``LimitExceeded`` if ``wid`` has ``max_inbox`` messages pending. Counted by a prefix scan
    that stops at the cap: a key or two for a workflow that keeps up with its inbox, and at
    most ``max_inbox`` keys (a millisecond or so) for one that has fallen that far behind."""
    prefix = prefixed(wid)
    cursor = state.txn.cursor(db=state.dbs.inbox)
    if not cursor.set_range(prefix):
        return
    limit = state.max_inbox
    pending = 0
    for key in cursor.iternext(values=False):
        if not key.startswith(prefix):
            return
        pending += 1
        if pending >= limit:
            raise LimitExceeded(
                f"workflow {wid!r} has {limit} messages pending in its inbox, its limit (max_inbox); "
                f"this {kind} is refused until the workflow consumes some",
                workflow_id=wid,
                limit="max_inbox",
                value=limit,
            )
