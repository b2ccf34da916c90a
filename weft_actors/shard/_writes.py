"""Small pieces the actor uses off its hot path: the writes several commands fold into one
commit, and how a child workflow is named and how its failure reads in the parent."""

from __future__ import annotations

import hashlib
from typing import Any

from ..store import TimerRef
from ._validate import MAX_ID_BYTES

__all__ = ["Writes", "child_id_for", "child_error"]


class Writes:
    """What the commands of one delivery write, committed together as one ``StepCommit``."""

    __slots__ = ("ops", "consume", "timers_put", "timers_del", "effects", "fields")

    def __init__(self) -> None:
        self.ops: list[tuple[int, bytes]] = []
        self.consume: list[int] = []
        self.timers_put: list[TimerRef] = []
        self.timers_del: list[TimerRef] = []
        self.effects: list[Any] = []
        self.fields: dict[str, Any] | None = None


def child_id_for(parent: str, run_id: str, seq: int) -> str:
    """The default id of the child started by op ``seq`` of run ``run_id``: stable across
    replays of that run, distinct across runs (continue-as-new reuses seqs), and within the id
    limit however long the parent's id is."""
    wid = f"{parent}/{run_id[:8]}-{seq}"
    if len(wid.encode()) <= MAX_ID_BYTES:
        return wid
    digest = hashlib.sha256(f"{parent}/{run_id}".encode()).hexdigest()[:24]
    return f"child-{digest}-{seq}"


def child_error(child_id: str, outcome: dict[str, Any]) -> dict[str, Any]:
    """The error record a parent sees (as ``ChildWorkflowError``) for a child that did not
    complete: failed, cancelled, terminated or timed out."""
    status = outcome["status"]
    error = outcome.get("error") or {}
    cause = f": {error.get('type')}: {error.get('message')}" if error.get("type") else ""
    return {
        "kind": "child",
        "code": "child_workflow_failed",
        "type": error.get("type"),
        "message": f"child workflow {child_id!r} {status.replace('_', ' ')}{cause}",
        "cause_message": error.get("message"),
        "traceback": error.get("traceback", ""),
        "child_id": child_id,
        "status": status,
    }
