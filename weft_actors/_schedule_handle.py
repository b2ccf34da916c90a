"""``ScheduleHandle``: a schedule, through the handle of its workflow.

One class for the three ways in: the handle it wraps decides. Over ``Engine`` and
``AsyncClient`` every method returns an awaitable; over ``Client`` it returns the answer.
Every change is an update of the schedule workflow: durable once it returns, answered by its
owner wherever that is, and validated there first (a bad change raises ``UpdateRejected``).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from ._schedule_spec import SCHEDULE_TYPE, as_spec, schedule_state
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
        return self._handle.update("pause", note)

    def unpause(self, note: str | None = None) -> Any:
        return self._handle.update("unpause", note)

    def trigger(self) -> Any:
        return self._handle.update("trigger")

    def backfill(self, start: Any, end: Any) -> Any:
        return self._handle.update("backfill", _epoch(start, "start"), _epoch(end, "end"))

    def update(self, **changes: Any) -> Any:
        """Change ``spec``, ``workflow``, ``args``, ``overlap`` or ``catchup_window``."""
        if "spec" in changes:
            changes["spec"] = as_spec(changes["spec"])
        if "workflow" in changes:
            changes["workflow"] = workflow_name(changes["workflow"])
        if "args" in changes:
            changes["args"] = list(changes["args"])
        return self._handle.update("update", changes)

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


def _epoch(value: Any, name: str) -> float:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise InvalidRequest(f"backfill {name}: give an aware datetime (with a timezone), or epoch seconds")
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"backfill {name} must be a datetime or epoch seconds, not {value!r}")
    return float(value)
