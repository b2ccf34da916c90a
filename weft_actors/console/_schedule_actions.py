"""The schedule page's data and actions, each one ``ScheduleHandle`` call through the client,
as the CLI's ``schedule`` commands.

A schedule is a workflow whose updates are its actions: ``pause`` and ``unpause`` (with an
optional ``note``), ``trigger``, ``backfill`` (``start`` and ``end``, ISO 8601 or epoch
seconds) and ``delete``. The schedule checks its own arguments (a backfill over too many fire
times, an end before its start): their refusal is the client's error, shown on the page.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .._schedule_spec import SCHEDULE_TYPE
from ..bus import Client
from ..errors import InvalidRequest, WorkflowNotFound
from ._data import parse_time

__all__ = ["SCHEDULE_ACTIONS", "run_schedule_action", "schedule"]


def _note(form: Mapping[str, str]) -> str | None:
    return form.get("note", "").strip() or None


def _backfill(client: Client, sid: str, form: Mapping[str, str]) -> None:
    start, end = form.get("start", "").strip(), form.get("end", "").strip()
    if not start or not end:
        raise InvalidRequest("a backfill needs a start and an end (ISO 8601, e.g. 2025-01-31T00:00:00Z)")
    client.get_schedule(sid).backfill(parse_time(start, "backfill start"), parse_time(end, "backfill end"))


SCHEDULE_ACTIONS: dict[str, Callable[[Client, str, Mapping[str, str]], None]] = {
    "pause": lambda client, sid, form: client.get_schedule(sid).pause(_note(form)),
    "unpause": lambda client, sid, form: client.get_schedule(sid).unpause(_note(form)),
    "trigger": lambda client, sid, form: client.get_schedule(sid).trigger(),
    "backfill": _backfill,
    "delete": lambda client, sid, form: client.get_schedule(sid).delete(),
}


def run_schedule_action(client: Client, sid: str, action: str, form: Mapping[str, str]) -> None:
    """Do ``action`` on schedule ``sid``; raises the client's error (``InvalidRequest``...)."""
    handler = SCHEDULE_ACTIONS.get(action)
    if handler is None:
        raise InvalidRequest(f"unknown schedule action {action!r}; one of {', '.join(SCHEDULE_ACTIONS)}")
    schedule(client, sid)  # a workflow of another type is no schedule: refused, not updated
    handler(client, sid, form)


def schedule(client: Client, sid: str) -> dict[str, Any]:
    """Schedule ``sid`` as its ``describe`` says, with its workflow's status; a workflow that
    is no schedule is ``WorkflowNotFound`` (``schedule ... not found``)."""
    try:
        described = client.get_handle(sid).describe()
    except WorkflowNotFound:  # said as the CLI's ``schedule`` commands say it
        raise WorkflowNotFound(f"schedule {sid!r} not found", workflow_id=sid) from None
    if described.get("type") != SCHEDULE_TYPE:
        raise WorkflowNotFound(f"schedule {sid!r} not found (workflow {sid!r} is a {described.get('type')!r})", workflow_id=sid)
    return {**client.get_schedule(sid).describe(), "status": described["status"]}
