"""Checks of the changes an operator sends a schedule (``update``, ``backfill``).

Run twice: by ``ScheduleHandle`` on the caller's side, so a bad change raises
``InvalidRequest`` naming its field before anything is sent, and by the schedule workflow's
update validators on its owner, the authority (a change from an older client, a backfill
span counted against the spec in force), which refuse it before anything is recorded. So
an invalid change never reaches the schedule's state: it stays as it was.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Final

from ._schedule_spec import OVERLAP_POLICIES, instant_field, as_spec, check_window, fires_between
from .errors import InvalidRequest

__all__ = ["MAX_BACKFILL", "UPDATABLE", "backfill_bound", "check_backfill", "check_changes"]

MAX_BACKFILL: Final = 1000
"""Fire times one ``backfill`` call may span: a longer range is refused, not cut short."""
UPDATABLE: Final = ("workflow", "args", "overlap", "catchup_window", "spec")


def check_changes(changes: Any) -> dict[str, Any]:
    """``changes`` checked whole and normalised (the spec as a checked spec dict, ``args``
    as a list): one bad field refuses them all, so nothing of them is applied."""
    if not isinstance(changes, dict) or not changes:
        raise InvalidRequest("update needs a dict of changes")
    unknown = sorted(str(key) for key in set(changes) - set(UPDATABLE))
    if unknown:
        raise InvalidRequest(f"a schedule has no field(s) {', '.join(unknown)}")
    checked = dict(changes)
    if "overlap" in checked and checked["overlap"] not in OVERLAP_POLICIES:
        raise InvalidRequest(f"overlap must be one of {', '.join(OVERLAP_POLICIES)}, not {checked['overlap']!r}")
    if "spec" in checked:
        checked["spec"] = as_spec(checked["spec"])
    if "workflow" in checked and (not isinstance(checked["workflow"], str) or not checked["workflow"]):
        raise InvalidRequest("workflow must be a workflow type name")
    if "args" in checked:
        if not isinstance(checked["args"], (list, tuple)):
            raise InvalidRequest("args must be a list")
        checked["args"] = list(checked["args"])
    if "catchup_window" in checked:
        checked["catchup_window"] = check_window(checked["catchup_window"])
    return checked


def backfill_bound(value: Any, name: str) -> float:
    """A backfill ``start`` or ``end``: an aware datetime or epoch seconds, years 1970-9999."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            raise InvalidRequest(f"backfill {name}: give an aware datetime (with a timezone), or epoch seconds")
        value = value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"backfill {name} must be a datetime or epoch seconds, not {value!r}")
    return instant_field(value, f"backfill {name}")


def check_backfill(spec: dict[str, Any] | None, start: Any, end: Any) -> tuple[float, float]:
    """The bounds of a backfill, checked; with ``spec``, also that the range spans at most
    ``MAX_BACKFILL`` fire times of it (counted by arithmetic, or a bounded cron walk)."""
    low, high = backfill_bound(start, "start"), backfill_bound(end, "end")
    if high < low:
        raise InvalidRequest("backfill end is before its start")
    if spec is not None:
        count, _ = fires_between(spec, low - 1e-6, high, limit=MAX_BACKFILL + 1)
        if count > MAX_BACKFILL:
            raise InvalidRequest(f"backfill spans more than {MAX_BACKFILL} fire times; split the range (start, end)", limit=MAX_BACKFILL)
    return low, high
