"""Turning a finished workflow's record into what its callers see: its result, or the error
its ending stands for (``describe()`` is ``_describe``)."""

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

__all__ = ["raise_for_outcome"]

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
