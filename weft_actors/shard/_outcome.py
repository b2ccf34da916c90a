"""Turning stored records into what callers see: results, errors, ``describe()``."""

from __future__ import annotations

from typing import Any, NoReturn

from ..codec import decode
from ..errors import (
    WeftError,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTerminated,
    WorkflowTimedOut,
)
from ..store import describe_reason, split_holder

__all__ = ["raise_for_outcome", "describe_workflow"]

_ENDINGS: dict[str, type[WeftError]] = {
    "cancelled": WorkflowCancelled,
    "terminated": WorkflowTerminated,
    "timed_out": WorkflowTimedOut,
}


def raise_for_outcome(workflow_id: str, record: dict[str, Any]) -> Any:
    """The result of a finished workflow, or the error its ending stands for."""
    status = record["status"]
    if status == "completed":
        return decode(record["result"], "workflow result")
    error = record.get("error") or {}
    if status == "failed":
        raise WorkflowFailed(
            f"workflow {workflow_id!r} failed: {error.get('type')}: {error.get('message')}",
            workflow_id=workflow_id,
            type=error.get("type"),
            cause_message=error.get("message"),
            traceback=error.get("traceback", ""),
        )
    cls = _ENDINGS.get(status)
    if cls is not None:
        _raise(cls(f"workflow {workflow_id!r} {status.replace('_', ' ')}", workflow_id=workflow_id, reason=error.get("message")))
    raise WeftError(f"workflow {workflow_id!r} ended with status {status}", workflow_id=workflow_id)


def _raise(error: WeftError) -> NoReturn:
    raise error


def _outcome(record: dict[str, Any]) -> str:
    if "err" in record:
        return "error"
    if "t" in record:
        return "ok"
    return "pending"


def describe_workflow(
    workflow_id: str,
    record: dict[str, Any],
    holder: bytes | None,
    ops: dict[int, dict[str, Any]],
    inbox: list[tuple[int, dict[str, Any]]],
    epoch: int,
) -> dict[str, Any]:
    owner = None
    if holder is not None:
        owner, epoch, _ = split_holder(holder)
    history = []
    for seq in sorted(ops):
        op = ops[seq]
        entry: dict[str, Any] = {"seq": seq, "kind": op.get("kind"), "name": op.get("name"), "outcome": _outcome(op)}
        if "attempts" in op:
            entry["attempts"] = op["attempts"]
        if "child_id" in op:
            entry["child_id"] = op["child_id"]
        if "err" in op:
            entry["error"] = {"type": op["err"].get("type"), "message": op["err"].get("message")}
        history.append(entry)
    result = None
    if record["status"] == "completed" and record.get("result") is not None:
        result = decode(record["result"], "workflow result")
    error = record.get("error")
    return {
        "id": workflow_id,
        "type": record["type"],
        "status": record["status"],
        "run_id": record["run_id"],
        "owner": owner,
        "epoch": epoch,
        "created": record["created"],
        "updated": record["updated"],
        "history": history,
        "inbox": [{"seq": seq, "kind": m["kind"], "name": m["name"]} for seq, m in inbox],
        "result": result,
        "error": None if error is None else {k: error.get(k) for k in ("type", "message", "traceback")},
        "nondeterminism": record.get("nondeterminism"),
        "history_pruned": record.get("history_pruned"),
        "memo": None if record.get("memo") is None else decode(record["memo"], "memo"),
        "parent": record.get("parent"),
        "previous_runs": list(record.get("previous_runs") or ()),
        "lost_owners": _lost(record),
    }


def _lost(record: dict[str, Any]) -> dict[str, Any] | None:
    """How many owners in a row were lost running this run without progress, and doing what
    (a quarantined workflow's reason); None if none was."""
    lost = record.get("lost")
    if not lost or lost.get("mark", (None,))[0] != record["run_id"]:
        return None
    return {
        "count": lost.get("count", 0),
        "unconfirmed": lost.get("unseen", 0),
        "reason": describe_reason(lost.get("reason")),
        "op": lost.get("reason"),
        "at": lost.get("at"),
    }
