"""``ScheduleHandle``: a schedule, through the handle of its workflow.

One class for the three ways in: the handle it wraps decides. Over ``Engine`` and
``AsyncClient`` every method returns an awaitable; over ``Client`` it returns the answer.
Every change is an update of the schedule workflow: durable once it returns, answered by its
owner wherever that is. It is checked here first (``InvalidRequest`` naming the field, before
anything is sent), and again by the owner, which refuses what only it can judge (a backfill
spanning too many fire times of the spec in force) with ``UpdateRejected``.
"""

from __future__ import annotations

from typing import Any

from ._schedule_checks import check_backfill, check_changes
from ._schedule_spec import SCHEDULE_TYPE, check_note, schedule_state
from .errors import InvalidRequest

__all__ = ["ScheduleHandle", "new_schedule", "SCHEDULE_TYPE"]


class ScheduleHandle:
    """``describe`` (next fire times, recent runs, missed and skipped counts), ``pause``,
    ``unpause``, ``trigger`` (fire now), ``backfill(start, end)`` (start every fire time in
    that range that has not started), ``update(**changes)`` and ``delete``."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.id: str = handle.id

    def __repr__(self) -> str:
        return f"ScheduleHandle({self.id!r})"

    def describe(self) -> Any:
        return self._handle.query("describe")

    def pause(self, note: str | None = None) -> Any:
        return self._handle.update("pause", check_note(note))

    def unpause(self, note: str | None = None) -> Any:
        return self._handle.update("unpause", check_note(note))

    def trigger(self) -> Any:
        return self._handle.update("trigger")

    def backfill(self, start: Any, end: Any) -> Any:
        return self._handle.update("backfill", *check_backfill(None, start, end))

    def update(self, **changes: Any) -> Any:
        """Change ``spec``, ``workflow``, ``args``, ``overlap`` or ``catchup_window``: all
        of them or, if one is invalid, none."""
        if "workflow" in changes:
            changes["workflow"] = workflow_name(changes["workflow"])
        return self._handle.update("update", check_changes(changes))

    def delete(self) -> Any:
        """Stop it: it fires no more (the runs it started go on); it stays describable."""
        return self._handle.update("delete")

    @property
    def workflow_handle(self) -> Any:
        """The schedule workflow's own handle (``result`` waits for its deletion)."""
        return self._handle


def new_schedule(workflow: Any, args: tuple[Any, ...], spec: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The schedule workflow's argument for ``create_schedule`` (checked here)."""
    unknown = sorted(set(options) - {"overlap", "catchup_window", "paused", "note"})
    if unknown:
        raise InvalidRequest(f"create_schedule got unknown option(s): {', '.join(unknown)}")
    if spec is None:
        raise InvalidRequest("create_schedule needs spec= (a cron string, an interval in seconds, or a dict)")
    return schedule_state(workflow_name(workflow), args, spec, **options)


def workflow_name(workflow: Any) -> str:
    if isinstance(workflow, str):
        return workflow
    definition = getattr(workflow, "__weft_workflow__", None)
    if definition is None:
        raise InvalidRequest(f"{workflow!r} is not a @workflow (or a workflow type name)")
    return str(definition.name)

