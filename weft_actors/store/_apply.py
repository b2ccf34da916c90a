"""Applying write intents inside one write transaction.

Every function checks before it writes, so an intent that raises has written nothing and
the batch's other intents still commit.
"""

from __future__ import annotations

from typing import Any, cast

import lmdb

from ..codec import pack_record, unpack_record
from ..errors import FencedOut, LimitExceeded, WorkflowAlreadyExists, WorkflowClosed, WorkflowNotFound
from ._env import Databases
from ._intents import AppendInbox, Created, CreateWorkflow, StepCommit
from ._feed import feed_entry
from ._flow import admit, record_flow, release
from ._recent import delete_recent, put_recent
from ._keys import (
    DEADLINE_SEQ,
    NO_ENGINE,
    START_SEQ,
    TERMINAL,
    by_engine_key,
    count_key,
    expiring_key,
    fence,
    holder_value,
    inbox_key,
    pack_u32,
    pack_u64,
    prefixed,
    run_prefix,
    timer_key,
    unpack_u64,
    visibility_group,
    visibility_value,
)

__all__ = ["TxnState", "APPLIERS", "DEFAULT_MAX_INBOX", "next_epoch", "set_visibility", "add_counts", "release_claims", "step_commit", "append_inbox", "create_workflow", "delete_prefix"]


DEFAULT_MAX_INBOX = 10_000
"""Signals and updates pending in one workflow's inbox at most (``append_inbox``)."""

_CAPPED_KINDS = frozenset({"signal", "update"})
"""Messages a client sends, refused at the cap; the engine's own (cancel, child done) never are."""


class TxnState:
    """Per-transaction facts shared by the intents of one batch. Whoever makes one for a
    transaction that may change a status calls ``flush`` before it commits: the feed sequence
    and the workflow counts are written once per transaction, not once per intent."""

    __slots__ = ("txn", "dbs", "engine_raw", "now", "feed_seq", "writes", "max_inbox", "counts", "promoted")

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: Databases, engine_raw: bytes, now: float, max_inbox: int = DEFAULT_MAX_INBOX) -> None:
        self.txn = txn
        self.dbs = dbs
        self.engine_raw = engine_raw
        self.now = now
        self.feed_seq: int | None = None
        self.writes = 0
        self.max_inbox = max_inbox
        self.counts: dict[bytes, int] | None = None
        """(status, type) group -> change of its workflow count in this transaction."""
        self.promoted: list[tuple[str, str, str]] | None = None
        """``(wid, run id, type)`` of the queued workflows this transaction gave a slot (``_flow``)."""

    def promote(self, wid: str, run_id: str, wf_type: str) -> None:
        if self.promoted is None:
            self.promoted = []
        self.promoted.append((wid, run_id, wf_type))

    def count(self, status: str, wf_type: str, delta: int) -> None:
        """Note that ``delta`` workflows joined (or left) the (``status``, ``wf_type``) group."""
        counts = self.counts
        if counts is None:
            counts = self.counts = {}
        group = visibility_group(status, wf_type)
        counts[group] = counts.get(group, 0) + delta

    def next_feed_seq(self) -> int:
        if self.feed_seq is None:
            stored = self.txn.get(b"feed_seq", db=self.dbs.meta)
            self.feed_seq = 0 if stored is None else unpack_u64(stored)[0]
        self.feed_seq += 1
        return self.feed_seq

    def flush(self) -> None:
        if self.feed_seq is not None:
            self.txn.put(b"feed_seq", pack_u64(self.feed_seq), db=self.dbs.meta)
        if self.counts:
            add_counts(self.txn, self.dbs, self.counts)


def add_counts(txn: lmdb.Transaction[bytes], dbs: Databases, deltas: dict[bytes, int]) -> None:
    """Apply ``deltas`` to the workflow counts (``meta``: ``count/ || group`` -> workflows in
    it, u64). A group that empties is deleted, so the counts name the groups that exist. A
    count that would go below zero (a drift ``check`` reports as ``counts_mismatch``) is
    deleted too, never left to fail the transaction."""
    db = dbs.meta
    for group, delta in deltas.items():
        if not delta:
            continue
        key = count_key(group)
        stored = txn.get(key, db=db)
        total = (0 if stored is None else unpack_u64(stored)[0]) + delta
        if total > 0:
            txn.put(key, pack_u64(total), db=db)
        elif stored is not None:
            txn.delete(key, db=db)


def next_epoch(state: TxnState, wid_raw: bytes) -> int:
    """``stored epoch + 1``, written back: the fencing token is never a literal, never reset."""
    stored = state.txn.get(wid_raw, db=state.dbs.claim_epoch)
    epoch = (0 if stored is None else unpack_u64(stored)[0]) + 1
    state.txn.put(wid_raw, pack_u64(epoch), db=state.dbs.claim_epoch)
    return epoch


def set_visibility(state: TxnState, record: dict[str, Any], wid: str, old: dict[str, Any] | None) -> None:
    """Move ``wid``'s index entries from ``old`` (its previous record, if any) to ``record``:
    its visibility and ``recent`` entries, and, for a finished workflow whose history is kept, its ``expiring``
    entry (what the retention prune scans, oldest first). Called by every transaction that
    changes a status, in that transaction; the workflow counts by (status, type) follow
    (``TxnState.count``, written at ``flush``)."""
    dbs, txn = state.dbs, state.txn
    counts = state.counts
    if counts is None:
        counts = state.counts = {}
    wid_raw = wid.encode()
    if old is not None:
        group = visibility_group(old["status"], old["type"])
        txn.delete(group + wid_raw, db=dbs.visibility)  # its visibility_key
        counts[group] = counts.get(group, 0) - 1
        delete_recent(txn, dbs, old, wid)
        if old["status"] in TERMINAL and not old.get("history_pruned"):
            txn.delete(expiring_key(old["updated"], wid), db=dbs.expiring)
    group = visibility_group(record["status"], record["type"])
    counts[group] = counts.get(group, 0) + 1
    txn.put(group + wid_raw, visibility_value(record["updated"]), db=dbs.visibility)
    put_recent(txn, dbs, record, wid)
    if record["status"] in TERMINAL:
        txn.put(expiring_key(record["updated"], wid), b"", db=dbs.expiring)
        if "flow" in record and old is not None and old["status"] not in TERMINAL:
            release(state, record)


def create_workflow(state: TxnState, intent: CreateWorkflow) -> Created:
    txn, dbs, wid = state.txn, state.dbs, intent.wid
    wid_raw = wid.encode()
    existing_raw = txn.get(wid_raw, db=dbs.workflows)
    existing = None if existing_raw is None else unpack_record(existing_raw)
    if existing is not None:
        status = existing["status"]
        if intent.if_exists == "return":
            return Created(False, existing["run_id"], status, 0)
        if intent.if_exists != "start_new" or status not in TERMINAL:
            raise WorkflowAlreadyExists(
                f"workflow {wid!r} already exists (status {status})", workflow_id=wid, status=status
            )
        for at, seq in ((existing.get("start_at"), START_SEQ), (existing.get("deadline"), DEADLINE_SEQ)):
            if at is not None:  # the previous run's unowned timers go with it
                txn.delete(timer_key(at, wid, seq), db=dbs.timers)
        # Messages and request ids belong to one run. What the finished run left in its inbox
        # was never applied (an update's caller was told ``WorkflowClosed``), and its answers
        # are not the new run's: a reused request id is a new request.
        prefix = prefixed(wid)
        delete_prefix(txn, dbs.inbox, prefix)
        delete_prefix(txn, dbs.requests, prefix)
    pending = intent.start_at is not None and intent.start_at > state.now
    record: dict[str, Any] = {
        "type": intent.wf_type,
        "args": intent.args,
        "status": "pending",
        "run_id": intent.run_id,
        "created": state.now,
        "updated": state.now,
        "memo": intent.memo,
        "parent": intent.parent,
        "start_at": intent.start_at,
        "deadline": None
        if intent.execution_timeout is None
        else max(state.now, intent.start_at or state.now) + intent.execution_timeout,
        "result": None,
        "error": None,
    }
    if intent.flow is not None:
        record["flow"] = record_flow(intent.flow)
        if not pending and not admit(state, wid, record):
            pending = True  # queued: started when a slot frees
    epoch = 0
    if pending:
        if "queued" not in record:
            txn.put(timer_key(cast(float, intent.start_at), wid, START_SEQ), pack_record({"kind": "start", "run_id": intent.run_id}), db=dbs.timers)
    else:
        record["status"] = "running"
        epoch = next_epoch(state, wid_raw)
        txn.put(wid_raw, holder_value(state.engine_raw, epoch, state.now), db=dbs.claim_holder)
        txn.put(by_engine_key(state.engine_raw, wid), b"", db=dbs.by_engine)
    if record["deadline"] is not None:
        txn.put(timer_key(record["deadline"], wid, DEADLINE_SEQ), pack_record({"kind": "deadline", "run_id": intent.run_id}), db=dbs.timers)
    txn.put(wid_raw, pack_record(record), db=dbs.workflows)
    set_visibility(state, record, wid, existing)
    return Created(True, intent.run_id, record["status"], epoch)


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


def step_commit(state: TxnState, intent: StepCommit) -> Any:
    """The owner's step, fenced on its claim. Returns None, or a ``StepResult`` when the step
    had effects (``_effects``) or touched relatives (a parent to notify, children to close)."""
    txn, dbs = state.txn, state.dbs
    wid, epoch, run_id, ops, consume, timers_put, timers_del, finish, fields, effects = intent
    wid_raw = wid.encode()
    holder = txn.get(wid_raw, db=dbs.claim_holder)
    if holder is None or holder[:24] != state.engine_raw + pack_u64(epoch):
        raise FencedOut(f"this engine no longer holds workflow {wid!r} at epoch {epoch}", workflow_id=wid, epoch=epoch)
    if effects:
        from ._effects import step_with_effects  # the rare path; imported late (an import cycle)

        return step_with_effects(state, intent)
    record: dict[str, Any] | None = None
    old: dict[str, Any] | None = None
    if finish is not None or fields:
        raw = txn.get(wid_raw, db=dbs.workflows)
        if raw is None:
            raise WorkflowNotFound(f"workflow {wid!r} not found", workflow_id=wid)
        record = unpack_record(raw)
        if record["run_id"] != run_id:
            raise FencedOut(f"workflow {wid!r} moved to run {record['run_id']}", workflow_id=wid, epoch=epoch)
        old = dict(record)
    if ops:
        prefix = run_prefix(wid, run_id)
        for seq, packed in ops:
            txn.put(prefix + pack_u32(seq), packed, db=dbs.ops)
    for seq in consume:
        txn.delete(inbox_key(wid, seq), db=dbs.inbox)
    for timer in timers_del:
        txn.delete(timer_key(timer.fire_at, wid, timer.seq), db=dbs.timers)
    for timer in timers_put:
        txn.put(
            timer_key(timer.fire_at, wid, timer.seq),
            pack_record({"kind": timer.kind, "run_id": run_id}),
            db=dbs.timers,
        )
    if record is None:
        return None
    if fields:
        record.update(fields)
    if finish is not None:
        record["status"] = finish.status
        record["result"] = finish.result
        record["error"] = finish.error
        record["updated"] = state.now
        record.pop("nondeterminism", None)  # fixed code carried it to the end
        txn.delete(wid_raw, db=dbs.claim_holder)
        txn.delete(by_engine_key(state.engine_raw, wid), db=dbs.by_engine)
        if record.get("deadline") is not None:
            txn.delete(timer_key(record["deadline"], wid, DEADLINE_SEQ), db=dbs.timers)
        set_visibility(state, record, wid, old)
    txn.put(wid_raw, pack_record(record), db=dbs.workflows)
    if finish is not None and (record.get("parent") is not None or record.get("children")):
        from ._children import on_terminal
        from ._effects import StepResult

        return StepResult(touched=tuple(on_terminal(state, wid, record)))
    return None


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


APPLIERS: dict[type, Any] = {
    CreateWorkflow: create_workflow,
    StepCommit: step_commit,
    AppendInbox: append_inbox,
}
"""Intent type -> applier; ``_dispatch`` adds the lifecycle transitions."""


def release_claims(state: TxnState) -> int:
    """Graceful release: every holder of this engine goes; its running workflows move to the
    ``NO_ENGINE`` index so that any live engine reclaims them at once."""
    txn, dbs = state.txn, state.dbs
    moved = 0
    prefix = state.engine_raw
    cursor = txn.cursor(db=dbs.by_engine)
    keys = []
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not key.startswith(prefix):
                break
            keys.append(key)
    for key in keys:
        wid_raw = key[16:]
        holder = txn.get(wid_raw, db=dbs.claim_holder)
        if holder is not None and holder[:16] == prefix:
            txn.delete(wid_raw, db=dbs.claim_holder)
        txn.delete(key, db=dbs.by_engine)
        txn.put(NO_ENGINE + wid_raw, b"", db=dbs.by_engine)
        moved += 1
    return moved
