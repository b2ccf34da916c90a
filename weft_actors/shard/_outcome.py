"""Turning a finished workflow's record into what its callers see: its result, or the error
its ending stands for (``describe()`` is ``_describe``); likewise an update's stored answer."""

from __future__ import annotations

from typing import Any, NoReturn

from ..codec import decode
from ..errors import (
    PayloadTooLarge,
    UpdateFailed,
    UpdateRejected,
    WeftError,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowTerminated,
    WorkflowTimedOut,
)

__all__ = ["raise_for_outcome", "update_outcome"]

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


def update_outcome(wid: str, name: str, entry: dict[str, Any]) -> Any:
    """An update's answer as stored (``ok`` or ``err``): the handler's result, or the error
    the update call raises."""
    if "ok" in entry:
        return decode(entry["ok"], "update result") if entry["ok"] is not None else None
    error = entry.get("err") or {}
    if error.get("code") == "update_rejected":
        raise UpdateRejected(error.get("message", f"update {name!r} rejected"), workflow_id=wid, update=name)
    if error.get("code") == "payload_too_large":  # its result was refused, not its handler
        raise PayloadTooLarge(error.get("message", f"result of update {name!r} is too large"), workflow_id=wid, update=name)
    raise UpdateFailed(
        f"update {name!r} of workflow {wid!r} failed: {error.get('type')}: {error.get('message')}",
        workflow_id=wid,
        update=name,
        type=error.get("type"),
        cause_message=error.get("message"),
        traceback=error.get("traceback", ""),
    )
