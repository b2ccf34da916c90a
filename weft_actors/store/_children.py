"""What a workflow's ending does to its relatives, in the transaction of that ending.

A child's terminal transition (its own finish, or a terminate or timeout from outside) appends a
``child-done`` message to its parent's durable inbox in the same transaction: the parent learns
of it exactly once, wherever it runs. A parent's terminal transition (continue-as-new included)
applies each running child's ``parent_close`` policy: ``terminate`` closes the child (rotating
its epoch), ``cancel`` sends it a cancel request, ``abandon`` leaves it alone.
"""

from __future__ import annotations

from typing import Any

from ..codec import pack_record, unpack_record
from ._intents import AppendInbox, CancelOther, CloseWorkflow
from ._keys import TERMINAL
from ._queries import load_ops
from ._relays import OnTerminal, ParentClose
from ._state import TxnState
from ._table import apply_intent
from ._writes import append_inbox

__all__ = ["on_terminal", "apply_parent_close", "request_cancel", "on_terminal_intent", "parent_close_intent", "cancel_other", "CHILD_DONE", "CANCEL"]

CHILD_DONE = "child-done"
CANCEL = "cancel"
_STARTS_CHILD = frozenset(("child", "start_child"))


def _record(state: TxnState, wid: str) -> dict[str, Any] | None:
    raw = state.txn.get(wid.encode(), db=state.dbs.workflows)
    return None if raw is None else unpack_record(raw)


def on_terminal(state: TxnState, wid: str, record: dict[str, Any]) -> list[str]:
    """Call after ``record`` (``wid``'s, now terminal) is written. Returns the other workflows
    it touched, so the committing engine can wake the local ones."""
    touched: list[str] = []
    if record.get("parent") is not None and record["status"] != "continued":
        parent = notify_parent(state, wid, record)
        if parent is not None:
            touched.append(parent)
    if record.get("children"):
        touched.extend(apply_parent_close(state, wid, record))
    return touched


def notify_parent(state: TxnState, wid: str, record: dict[str, Any]) -> str | None:
    """Append ``child-done`` to the parent of ``wid``, if that parent still runs the run that
    started it (a parent that moved on or ended has nobody waiting)."""
    parent_id = record["parent"]
    parent = _record(state, parent_id)
    parent_run = record.get("parent_run")
    if parent is None or parent["status"] in TERMINAL or (parent_run is not None and parent["run_id"] != parent_run):
        return None
    outcome = {"status": record["status"], "result": record.get("result"), "error": record.get("error")}
    append_inbox(state, AppendInbox(parent_id, CHILD_DONE, wid, pack_record(outcome)))
    return parent_id


def apply_parent_close(state: TxnState, wid: str, record: dict[str, Any], run_id: str | None = None) -> list[str]:
    """Apply the ``parent_close`` policy of every child the run ``run_id`` (default: the
    record's) started and that is still open. Children are found in the run's op log."""
    run_id = run_id or record["run_id"]
    touched: list[str] = []
    for op in load_ops(state.txn, state.dbs, wid, run_id).values():
        child_id = op.get("child_id")
        if op.get("kind") not in _STARTS_CHILD or child_id is None:
            continue
        policy = op.get("parent_close", "terminate")
        if policy == "abandon":
            continue
        child = _record(state, child_id)
        if child is None or child["status"] in TERMINAL or child.get("parent") != wid or child.get("parent_run") not in (run_id, None):
            continue
        if policy == "cancel":
            if request_cancel(state, child_id) is not None:
                touched.append(child_id)
            continue
        error = {"type": "WorkflowTerminated", "message": f"parent {wid!r} closed", "kind": "terminated"}
        result = apply_intent(state, CloseWorkflow(child_id, "terminated", error))
        touched.append(child_id)
        touched.extend(result.get("touched", ()))
    return touched


def request_cancel(state: TxnState, wid: str) -> dict[str, Any] | None:
    """Ask ``wid`` to cancel: a ``cancel`` message to its inbox if it runs (its owner delivers
    the cancellation into the workflow), or an immediate close as ``cancelled`` if it has not
    started (no workflow code has run, so there is nothing to clean up). None if it is gone
    or already finished; ``{"closed": close result}`` or ``{"seq": inbox seq}`` otherwise."""
    record = _record(state, wid)
    if record is None or record["status"] in TERMINAL:
        return None
    if record["status"] == "pending" or record["status"] == "quarantined":
        # Nothing runs its code to deliver the cancel: close it now (no code ran, or it is parked).
        why = "cancelled before it started" if record["status"] == "pending" else "cancelled while quarantined"
        error = {"type": "WorkflowCancelled", "message": why, "kind": "cancelled"}
        return {"closed": apply_intent(state, CloseWorkflow(wid, "cancelled", error))}
    return {"seq": append_inbox(state, AppendInbox(wid, CANCEL, "", b""))}


def on_terminal_intent(state: TxnState, intent: OnTerminal) -> list[str]:
    """The applier of ``OnTerminal``: the end of a step or of a close reaching relatives."""
    return on_terminal(state, intent.wid, intent.record)


def parent_close_intent(state: TxnState, intent: ParentClose) -> list[str]:
    """The applier of ``ParentClose``: a run continued as new closes its children."""
    return apply_parent_close(state, intent.wid, intent.record, intent.run_id)


def cancel_other(state: TxnState, intent: CancelOther) -> dict[str, Any] | None:
    """The applier of ``CancelOther``: ``request_cancel``, for an effect of another step."""
    return request_cancel(state, intent.wid)
