"""When a schedule fires: cron strings or fixed intervals, bounded, with jitter. Pure: the
schedule workflow calls it during replay, so the same spec gives the same times forever.

A spec is a plain dict (it travels in the schedule workflow's arguments and records):
``{"cron": "0 9 * * mon-fri" | None, "every": 3600.0 | None, "offset": 0.0, "timezone": "UTC",
"start": ts | None, "end": ts | None, "jitter": 0.0}``. ``cron`` has 5 fields, or 6 with the
seconds first; it is read in ``timezone`` (a ``zoneinfo`` name), so "9 o'clock" stays 9
o'clock across daylight-saving changes. ``every`` fires at ``offset + k * every`` seconds
after the epoch (so ``every=86400, offset=3600`` is 01:00 UTC daily, whoever created it when).
Cron strings are read by ``croniter`` (``pip install 'weft_actors[cron]'``).
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timezone
from typing import Any

from .errors import InvalidRequest

__all__ = ["DEFAULT_CATCHUP_WINDOW", "OVERLAP_POLICIES", "SCHEDULE_TYPE", "as_spec", "fires_between", "jitter_of", "make_spec", "next_fire", "schedule_state"]

_MAX_CATCHUP_STEPS = 10_000
"""Cron fire times one ``fires_between`` call walks at most (~0.5 s of croniter): a
per-second cron after a month of downtime must not hold the engine's loop for minutes."""


def make_spec(
    cron: str | None = None,
    every: float | None = None,
    offset: float = 0.0,
    timezone_name: str = "UTC",
    start: float | None = None,
    end: float | None = None,
    jitter: float = 0.0,
) -> dict[str, Any]:
    """A checked spec; ``InvalidRequest`` naming the first thing wrong with it."""
    if (cron is None) == (every is None):
        raise InvalidRequest("a schedule needs exactly one of cron= and every=")
    if every is not None:
        every = _seconds(every, "every")
        if every <= 0:
            raise InvalidRequest("every= must be a positive number of seconds")
    offset = _seconds(offset, "offset")
    jitter = _seconds(jitter, "jitter")
    if jitter < 0:
        raise InvalidRequest("jitter= must not be negative")
    for name, bound in (("start", start), ("end", end)):
        if bound is not None:
            _seconds(bound, name)
    if start is not None and end is not None and end < start:
        raise InvalidRequest("end= is before start=")
    if not isinstance(timezone_name, str) or not timezone_name:
        raise InvalidRequest("timezone= must be a zoneinfo name such as 'Europe/Berlin'")
    _zone(timezone_name)
    spec = {"cron": cron, "every": every, "offset": offset, "timezone": timezone_name, "start": start, "end": end, "jitter": jitter}
    if cron is not None:
        if not isinstance(cron, str):
            raise InvalidRequest("cron= must be a string such as '*/5 * * * *'")
        next_fire(spec, 0.0 if start is None else start)  # parses it: a bad string fails here
    return spec


def next_fire(spec: dict[str, Any], after: float) -> float | None:
    """The first fire time strictly after ``after`` within the spec's bounds, or None."""
    start, end = spec.get("start"), spec.get("end")
    if start is not None and after < start:
        after = math.nextafter(start, -math.inf)  # start itself may fire
    if spec.get("every") is not None:
        every, offset = float(spec["every"]), float(spec.get("offset") or 0.0)
        k = math.floor((after - offset) / every) + 1
        fire = offset + k * every
        if fire <= after:  # float rounding at a boundary
            fire += every
    else:
        fire = _cron_next(spec, after)
    if end is not None and fire > end:
        return None
    return fire


def fires_between(spec: dict[str, Any], after: float, until: float, limit: int = _MAX_CATCHUP_STEPS) -> tuple[int, float | None]:
    """How many fire times lie in ``(after, until]``, and the last of them (None if none).

    Intervals are counted by arithmetic, however long the gap. A cron string is walked, at
    most ``limit`` fire times: past that the count stops there (a lower bound) and the last
    is ``until`` itself, so a caller moving on from it skips the rest of the gap at once."""
    start, end = spec.get("start"), spec.get("end")
    low = after if start is None else max(after, math.nextafter(start, -math.inf))
    high = until if end is None else min(until, end)
    if high <= low:
        return 0, None
    if spec.get("every") is not None:
        every, offset = float(spec["every"]), float(spec.get("offset") or 0.0)
        first = next_fire(spec, low)
        if first is None or first > high:
            return 0, None
        count = int(math.floor((high - offset) / every) - math.floor((first - offset) / every)) + 1
        last = first + (count - 1) * every
        while last > high:  # float rounding at a boundary
            count, last = count - 1, last - every
        return count, last
    walked: int = 0
    latest: float | None = None
    at = low
    while True:
        fire = next_fire(spec, at)
        if fire is None or fire > high:
            return walked, latest
        if walked == limit:
            return walked, until
        walked, latest, at = walked + 1, fire, fire


def jitter_of(spec: dict[str, Any], schedule_id: str, nominal: float) -> float:
    """A delay in ``[0, jitter)`` fixed by the schedule and the fire time: spreads the starts
    of many schedules due at once, and is the same on every replay and every shard."""
    jitter = float(spec.get("jitter") or 0.0)
    if jitter <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{schedule_id}\0{nominal!r}".encode(), digest_size=8).digest()
    return jitter * (int.from_bytes(digest, "big") / 2**64)


def _cron_next(spec: dict[str, Any], after: float) -> float:
    try:
        from croniter import croniter  # type: ignore[import-untyped]
    except ImportError as exc:  # the optional extra
        raise InvalidRequest("cron schedules need croniter: pip install 'weft_actors[cron]'") from exc
    expression = spec["cron"]
    base = datetime.fromtimestamp(after, _zone(spec.get("timezone") or "UTC"))
    try:
        six = len(expression.split()) == 6
        return float(croniter(expression, base, second_at_beginning=six).get_next(float))
    except (ValueError, KeyError, TypeError) as exc:  # croniter's errors are ValueErrors
        raise InvalidRequest(f"bad cron string {expression!r}: {exc}") from exc


def _zone(name: str) -> Any:
    if name.upper() == "UTC":
        return timezone.utc
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(name)
    except (ValueError, OSError, KeyError) as exc:
        raise InvalidRequest(f"unknown timezone {name!r}") from exc


def _seconds(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequest(f"{name}= must be a finite number of seconds, not {value!r}")
    return float(value)


SCHEDULE_TYPE = "weft.schedule"
"""The workflow type of a schedule: every engine runs it, whatever its app."""
OVERLAP_POLICIES = ("skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all")
DEFAULT_CATCHUP_WINDOW = 60.0


def schedule_state(
    workflow: str,
    args: tuple[Any, ...] | list[Any],
    spec: Any,
    overlap: str = "skip",
    catchup_window: float = DEFAULT_CATCHUP_WINDOW,
    paused: bool = False,
    note: str | None = None,
) -> dict[str, Any]:
    """The first argument of a new schedule workflow (checked here, on the caller's side:
    a bad schedule is refused before anything is written)."""
    if not isinstance(workflow, str) or not workflow:
        raise InvalidRequest("a schedule needs the workflow to start (a @workflow or its name)")
    if overlap not in OVERLAP_POLICIES:
        raise InvalidRequest(f"overlap must be one of {', '.join(OVERLAP_POLICIES)}, not {overlap!r}")
    catchup_window = _seconds(catchup_window, "catchup_window")
    if catchup_window < 0:
        raise InvalidRequest("catchup_window= must not be negative")
    return {
        "workflow": workflow,
        "args": list(args),
        "spec": as_spec(spec),
        "overlap": overlap,
        "catchup_window": catchup_window,
        "paused": bool(paused),
        "note": note,
        "last": None,
        "fired": 0,
        "missed": 0,
        "skipped": 0,
        "running": [],
        "buffered": [],
        "recent": [],
        "actions": [],
        "deleted": False,
    }


def as_spec(spec: Any) -> dict[str, Any]:
    """``spec`` as a checked spec dict: a cron string, a number of seconds (an interval), a
    dict of ``make_spec``'s arguments (``timezone`` for ``timezone_name``), or a spec."""
    if isinstance(spec, str):
        return make_spec(cron=spec)
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        return make_spec(every=spec)
    if isinstance(spec, dict):
        options = dict(spec)
        if "timezone" in options:
            options["timezone_name"] = options.pop("timezone")
        known = {"cron", "every", "offset", "timezone_name", "start", "end", "jitter"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InvalidRequest(f"unknown schedule spec field(s): {', '.join(unknown)}")
        return make_spec(**options)
    raise InvalidRequest(f"a schedule spec is a cron string, an interval in seconds or a dict, not {type(spec).__name__}")
