"""Transitions a workflow goes through outside its owner's step commits: external closes
(terminate, execution timeout, cancel of a parked run), purge, and the firing of a delayed start.

None of these is fenced on a holder: they are committed by whichever live engine gets the
request. Instead each *rotates* the epoch in its own transaction, so any engine that was
driving the workflow fails its next fenced write and drops its actor: for every epoch exactly
one owner's writes survive.
"""

from __future__ import annotations

from typing import Any

from ..codec import pack_record, unpack_record
from ..errors import InvalidRequest, WorkflowClosed, WorkflowNotFound
from ._recent import delete_recent
from ._feed import feed_entry
from ._flow import admit, release
from ._intents import CloseWorkflow, FireStart, PurgeWorkflow
from ._keys import (
    DEADLINE_SEQ,
    NO_ENGINE,
    START_SEQ,
    TERMINAL,
    by_engine_key,
    expiring_key,
    holder_value,
    pack_u64,
    prefixed,
    timer_key,
    visibility_key,
)
from ._memo import unindex_memo
from ._queries import load_ops
from ._relays import OnTerminal, ReleaseSlot
from ._state import TxnState
from ._table import apply_intent
from ._writes import next_epoch, set_visibility

__all__ = ["close_workflow", "purge_workflow", "fire_start", "release_slot"]


def _load(state: TxnState, wid: str) -> dict[str, Any]:
    raw = state.txn.get(wid.encode(), db=state.dbs.workflows)
    if raw is None:
        raise WorkflowNotFound(f"workflow {wid!r} not found", workflow_id=wid)
    return unpack_record(raw)


def _drop_claim(state: TxnState, wid: str) -> str | None:
    """Delete the holder and its ``by_engine`` entry; the previous holder's engine id."""
    txn, dbs = state.txn, state.dbs
    wid_raw = wid.encode()
    holder = txn.get(wid_raw, db=dbs.claim_holder)
    if holder is not None:
        txn.delete(wid_raw, db=dbs.claim_holder)
        txn.delete(by_engine_key(holder[:16], wid), db=dbs.by_engine)
    txn.delete(by_engine_key(NO_ENGINE, wid), db=dbs.by_engine)
    return None if holder is None else holder[:16].hex()


def _delete_timers(state: TxnState, wid: str, record: dict[str, Any]) -> None:
    """Every durable timer the current run may have: found from its op log (fire and retry
    times are recorded on the op) and the record (start, deadline), never by a full scan."""
    txn, dbs = state.txn, state.dbs
    for seq, op in load_ops(txn, dbs, wid, record["run_id"]).items():
        for field in ("fire_at", "retry_at"):
            at = op.get(field)
            if at is not None:
                txn.delete(timer_key(at, wid, seq), db=dbs.timers)
    if record.get("start_at") is not None:
        txn.delete(timer_key(record["start_at"], wid, START_SEQ), db=dbs.timers)
    if record.get("deadline") is not None:
        txn.delete(timer_key(record["deadline"], wid, DEADLINE_SEQ), db=dbs.timers)


def close_workflow(state: TxnState, intent: CloseWorkflow) -> dict[str, Any]:
    wid = intent.wid
    if intent.status not in TERMINAL:
        raise InvalidRequest(f"{intent.status!r} is not a terminal status")
    record = _load(state, wid)
    if record["status"] in TERMINAL or (intent.run_id is not None and record["run_id"] != intent.run_id):
        raise WorkflowClosed(
            f"workflow {wid!r} has already finished (status {record['status']})",
            workflow_id=wid,
            status=record["status"],
        )
    old = dict(record)
    previous = _drop_claim(state, wid)
    epoch = next_epoch(state, wid.encode())
    _delete_timers(state, wid, record)
    record["status"] = intent.status
    record["result"] = None
    record["error"] = intent.error
    record["updated"] = state.now
    state.txn.put(wid.encode(), pack_record(record), db=state.dbs.workflows)
    set_visibility(state, record, wid, old)
    # A feed entry, so the owner's next poll looks at the workflow and drops its actor
    # instead of keeping it parked until some wake finds the fence moved.
    seq = state.next_feed_seq()
    state.txn.put(pack_u64(seq), feed_entry(state.now, wid), db=state.dbs.feed)
    touched = apply_intent(state, OnTerminal(wid, record)) if record.get("parent") is not None or record.get("children") else []
    return {"status": intent.status, "error": intent.error, "epoch": epoch, "previous_owner": previous, "feed_seq": seq, "touched": touched}


def purge_workflow(state: TxnState, intent: PurgeWorkflow) -> int:
    """Returns the epoch the id now has (one more than before; never reset)."""
    txn, dbs, wid = state.txn, state.dbs, intent.wid
    record = _load(state, wid)
    if record["status"] not in TERMINAL:
        raise InvalidRequest(
            f"workflow {wid!r} is {record['status']}; only a finished workflow can be purged",
            workflow_id=wid,
            status=record["status"],
        )
    _drop_claim(state, wid)
    _delete_timers(state, wid, record)
    prefix = prefixed(wid)
    for db in (dbs.ops, dbs.inbox, dbs.requests):
        cursor = txn.cursor(db=db)
        if cursor.set_range(prefix):
            while cursor.key().startswith(prefix):
                if not cursor.delete() or not cursor.key():
                    break
    txn.delete(visibility_key(record["status"], record["type"], wid), db=dbs.visibility)
    delete_recent(txn, dbs, record, wid)
    state.count(record["status"], record["type"], -1)
    txn.delete(expiring_key(record["updated"], wid), db=dbs.expiring)
    if record.get("memo") is not None:
        unindex_memo(txn, dbs, wid.encode(), record["memo"])
    txn.delete(wid.encode(), db=dbs.workflows)
    return next_epoch(state, wid.encode())


def fire_start(state: TxnState, intent: FireStart) -> int | None:
    """The new epoch, or ``None`` if the start already fired (or the run was replaced)."""
    txn, dbs, wid = state.txn, state.dbs, intent.wid
    raw = txn.get(wid.encode(), db=dbs.workflows)
    if raw is None:
        return None
    record = unpack_record(raw)
    if record["status"] != "pending" or record["run_id"] != intent.run_id or "queued" in record:
        return None
    old = dict(record)
    if "flow" in record and not record.get("slot") and not admit(state, wid, record):
        # Its time came, its group's slots did not: it waits in the queue, timer done.
        txn.delete(timer_key(record["start_at"], wid, START_SEQ), db=dbs.timers)
        txn.put(wid.encode(), pack_record(record), db=dbs.workflows)
        return None
    record["status"] = "running"
    record["updated"] = state.now
    epoch = next_epoch(state, wid.encode())
    txn.put(wid.encode(), holder_value(state.engine_raw, epoch, state.now), db=dbs.claim_holder)
    txn.put(by_engine_key(state.engine_raw, wid), b"", db=dbs.by_engine)
    txn.delete(timer_key(record["start_at"], wid, START_SEQ), db=dbs.timers)
    txn.put(wid.encode(), pack_record(record), db=dbs.workflows)
    set_visibility(state, record, wid, old)
    return epoch


def release_slot(state: TxnState, intent: ReleaseSlot) -> None:
    """A workflow holding a flow slot ended, however it ended (``set_visibility`` sees every
    end and relays it here): its slot goes to the head of its group's queue (``_flow``)."""
    release(state, intent.record)
