"""The id of a workflow a schedule started: ``<schedule id>/<fire time ISO>``, and back."""

from __future__ import annotations

import datetime as _dt
import re
from typing import NamedTuple

from .._isotime import iso_utc

__all__ = ["ScheduledFire", "fired_id", "scheduled_fire"]

_FIRED = re.compile(r"^(?P<schedule>.+)/(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)$")


class ScheduledFire(NamedTuple):
    schedule_id: str
    fire_time: _dt.datetime
    """The nominal fire time (aware, UTC), before any jitter."""


def fired_id(schedule_id: str, nominal: float) -> str:
    """The id of the workflow a schedule starts for fire time ``nominal`` (epoch seconds)."""
    return f"{schedule_id}/{iso_utc(nominal)}"


def scheduled_fire(workflow_id: str) -> ScheduledFire | None:
    match = _FIRED.match(workflow_id)
    if match is None:
        return None
    at = _dt.datetime.strptime(match["at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.timezone.utc)
    return ScheduledFire(match["schedule"], at)
