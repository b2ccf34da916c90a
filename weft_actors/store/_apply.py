"""Applying the engine's own write intents inside one write transaction: a start, an owner's
step, a plain inbox append, and the graceful release of an engine's claims.

Every function checks before it writes, so an intent that raises has written nothing and
the batch's other intents still commit. A step with effects, and the ending of a workflow
with relatives, go on through the table (``_table``) to the appliers that own them.

The start and the step, and the write primitives they call (``_writes``), pass the database
(and ``put``'s flags: dupdata, overwrite, append) positionally: py-lmdb's keyword parsing
cost 10k to 14k of 624k instructions per workflow in ``bench/engine_throughput.py``. The
PostgreSQL transaction takes the same positions.
"""

from __future__ import annotations

from typing import Any, cast

from ..codec import pack_record, unpack_record
from ..errors import FencedOut, WorkflowAlreadyExists, WorkflowNotFound
from ._flow import admit, record_flow
from ._intents import AppendInbox, Created, CreateWorkflow, StepCommit, StepResult
from ._keys import DEADLINE_SEQ, NO_ENGINE, START_SEQ, TERMINAL, by_engine_key, holder_value, inbox_key, pack_u32, pack_u64, prefixed, run_prefix, timer_key
from ._memo import index_memo, unindex_memo
from ._relays import EffectfulStep, OnTerminal
from ._state import DEFAULT_MAX_INBOX, TxnState
from ._table import apply_intent
from ._writes import append_inbox, delete_prefix, next_epoch, set_visibility

# ``TxnState`` lives below the appliers (``_state``); it is named here too for the PostgreSQL
# store, which imports it from this module.
__all__ = ["TxnState", "APPLIERS", "DEFAULT_MAX_INBOX", "release_claims", "step_commit", "create_workflow"]


def create_workflow(state: TxnState, intent: CreateWorkflow) -> Created:
    txn, dbs, wid = state.txn, state.dbs, intent.wid
    wid_raw = wid.encode()
    existing_raw = txn.get(wid_raw, None, dbs.workflows)
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
                txn.delete(timer_key(at, wid, seq), b"", dbs.timers)
        # Messages and request ids belong to one run. What the finished run left in its inbox
        # was never applied (an update's caller was told ``WorkflowClosed``), and its answers
        # are not the new run's: a reused request id is a new request.
        prefix = prefixed(wid)
        delete_prefix(txn, dbs.inbox, prefix)
        delete_prefix(txn, dbs.requests, prefix)
        if existing.get("memo") is not None:  # the new run's memo replaces the old one's entries
            unindex_memo(txn, dbs, wid_raw, existing["memo"])
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
    if intent.trace is not None:  # the start's trace context: every owner's spans go under it
        record["trace"] = intent.trace
    if intent.flow is not None:
        record["flow"] = record_flow(intent.flow)
        if not pending and not admit(state, wid, record):
            pending = True  # queued: started when a slot frees
    epoch = 0
    if pending:
        if "queued" not in record:
            txn.put(timer_key(cast(float, intent.start_at), wid, START_SEQ), pack_record({"kind": "start", "run_id": intent.run_id}), True, True, False, dbs.timers)
    else:
        record["status"] = "running"
        epoch = next_epoch(state, wid_raw)
        txn.put(wid_raw, holder_value(state.engine_raw, epoch, state.now), True, True, False, dbs.claim_holder)
        txn.put(by_engine_key(state.engine_raw, wid), b"", True, True, False, dbs.by_engine)
    if record["deadline"] is not None:
        txn.put(timer_key(record["deadline"], wid, DEADLINE_SEQ), pack_record({"kind": "deadline", "run_id": intent.run_id}), True, True, False, dbs.timers)
    txn.put(wid_raw, pack_record(record), True, True, False, dbs.workflows)
    if intent.memo is not None:
        index_memo(txn, dbs, wid_raw, intent.memo)
    set_visibility(state, record, wid, existing)
    return Created(True, intent.run_id, record["status"], epoch)


def step_commit(state: TxnState, intent: StepCommit) -> Any:
    """The owner's step, fenced on its claim. Returns None, or a ``StepResult`` when the step
    had effects (``_effects``) or touched relatives (a parent to notify, children to close)."""
    txn, dbs = state.txn, state.dbs
    wid, epoch, run_id, ops, consume, timers_put, timers_del, finish, fields, effects = intent
    wid_raw = wid.encode()
    holder = txn.get(wid_raw, None, dbs.claim_holder)
    if holder is None or holder[:24] != state.engine_raw + pack_u64(epoch):
        raise FencedOut(f"this engine no longer holds workflow {wid!r} at epoch {epoch}", workflow_id=wid, epoch=epoch)
    if effects:
        return apply_intent(state, EffectfulStep(intent))  # the rare path
    record: dict[str, Any] | None = None
    old: dict[str, Any] | None = None
    if finish is not None or fields:
        raw = txn.get(wid_raw, None, dbs.workflows)
        if raw is None:
            raise WorkflowNotFound(f"workflow {wid!r} not found", workflow_id=wid)
        record = unpack_record(raw)
        if record["run_id"] != run_id:
            raise FencedOut(f"workflow {wid!r} moved to run {record['run_id']}", workflow_id=wid, epoch=epoch)
        old = dict(record)
    if ops:
        prefix = run_prefix(wid, run_id)
        for seq, packed in ops:
            txn.put(prefix + pack_u32(seq), packed, True, True, False, dbs.ops)
    for seq in consume:
        txn.delete(inbox_key(wid, seq), b"", dbs.inbox)
    for timer in timers_del:
        txn.delete(timer_key(timer.fire_at, wid, timer.seq), b"", dbs.timers)
    for timer in timers_put:
        txn.put(
            timer_key(timer.fire_at, wid, timer.seq),
            pack_record({"kind": timer.kind, "run_id": run_id}),
            True, True, False, dbs.timers,
        )
    if record is None:
        return None
    if fields:
        record.update(fields)
        if finish is None and old is not None and record["status"] != old["status"]:  # parked as ``stuck`` (``_stuck``)
            record["updated"] = state.now
            set_visibility(state, record, wid, old)
    if finish is not None:
        record["status"] = finish.status
        record["result"] = finish.result
        record["error"] = finish.error
        record["updated"] = state.now
        record.pop("nondeterminism", None)  # fixed code carried it to the end
        txn.delete(wid_raw, b"", dbs.claim_holder)
        txn.delete(by_engine_key(state.engine_raw, wid), b"", dbs.by_engine)
        if record.get("deadline") is not None:
            txn.delete(timer_key(record["deadline"], wid, DEADLINE_SEQ), b"", dbs.timers)
        set_visibility(state, record, wid, old)
    txn.put(wid_raw, pack_record(record), True, True, False, dbs.workflows)
    if finish is not None and (record.get("parent") is not None or record.get("children")):
        return StepResult(touched=tuple(apply_intent(state, OnTerminal(wid, record))))
    return None


APPLIERS: dict[type, Any] = {
    CreateWorkflow: create_workflow,
    StepCommit: step_commit,
    AppendInbox: append_inbox,
}
"""Intent type -> applier; ``_dispatch`` adds the lifecycle transitions."""


def release_claims(state: TxnState) -> int:
    """Graceful release: every holder of this engine goes; its running workflows move to the
    ``NO_ENGINE`` index so that any live engine reclaims them at once, each entry's value
    naming this engine (``released_by``: whoever takes one over can say from whom)."""
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
        txn.put(NO_ENGINE + wid_raw, prefix, db=dbs.by_engine)
        moved += 1
    return moved
