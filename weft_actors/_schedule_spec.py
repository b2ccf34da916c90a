"""When a schedule fires: cron strings or fixed intervals, bounded, with jitter. Pure: the
schedule workflow calls it during replay, so the same spec gives the same times forever.

A spec is a plain dict (it travels in the schedule workflow's arguments and records):
``{"cron": "0 9 * * mon-fri" | None, "every": 3600.0 | None, "offset": 0.0, "timezone": "UTC",
"start": ts | None, "end": ts | None, "jitter": 0.0}``. ``cron`` has 5 fields, or 6 with the
seconds first; it is read in ``timezone`` (a ``zoneinfo`` name), so "9 o'clock" stays 9
o'clock across daylight-saving changes. ``every`` fires at ``offset + k * every`` seconds
after the epoch (so ``every=86400, offset=3600`` is 01:00 UTC daily, whoever created it when).
Cron strings are read by ``croniter`` (``pip install 'weft_actors[cron]'``).

Every field is checked before anything is written, against the ranges the engine's timers
take (``_checks``): ``every`` from ``MIN_INTERVAL`` to a century, ``jitter`` up to a century,
``start`` and ``end`` within years 1970 to 9999, ``offset`` as far either way. So a spec
accepted here never fails the schedule workflow later, and every loop over its fire times
is bounded.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timezone
from typing import Any, Final, Iterator

from ._checks import MAX_INSTANT, MAX_SECONDS
from .errors import InvalidRequest

__all__ = ["DEFAULT_CATCHUP_WINDOW", "MIN_INTERVAL", "OVERLAP_POLICIES", "SCHEDULE_TYPE", "as_spec", "check_window", "instant_field", "fires_between", "jitter_of", "make_spec", "next_fire", "schedule_state", "check_note", "MAX_NOTE"]

MIN_INTERVAL: Final = 1.0
"""The shortest ``every``, in seconds (a cron string fires at most once a second too): a
schedule starts at most one workflow a second, so its run always has time to read its inbox
(``pause``, ``delete``) between fires, and a fire time is always a step of the float grid."""

_MAX_CATCHUP_STEPS = 1000
"""Cron fire times one ``fires_between`` call walks at most (~0.1-0.2 s of one croniter
iterator; a fresh croniter per step costs four times that): a per-second cron after a month
of downtime must not hold the engine's loop, and every schedule on it, for seconds."""


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
        if not MIN_INTERVAL <= every <= MAX_SECONDS:
            raise InvalidRequest(f"every= must be from {MIN_INTERVAL:g} second to a century ({MAX_SECONDS:.0f} s), not {every!r}")
    offset = instant_field(offset, "offset", -MAX_INSTANT)
    jitter = _seconds(jitter, "jitter")
    if not 0.0 <= jitter <= MAX_SECONDS:
        raise InvalidRequest(f"jitter= must be from 0 to a century ({MAX_SECONDS:.0f} s), not {jitter!r}")
    start = None if start is None else instant_field(start, "start")
    end = None if end is None else instant_field(end, "end")
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
        if fire <= after:  # float rounding at a boundary (strictly later, whatever the step)
            fire = max(fire + every, math.nextafter(after, math.inf))
    else:
        fire = _cron_next(spec, after)
    if (end is not None and fire > end) or fire > MAX_INSTANT:
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
        if last > high:  # float rounding at a boundary: one step back, never a walk
            count, last = count - 1, min(last - every, high)  # (min: a step below the float grid)
        return (count, last) if count > 0 else (0, None)
    walked: int = 0
    latest: float | None = None
    for fire in _cron_fires(spec, low):
        if fire > high:
            break
        if walked == limit:
            return walked, until
        walked, latest = walked + 1, fire
    return walked, latest


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
    try:
        base = datetime.fromtimestamp(after, _zone(spec.get("timezone") or "UTC"))
        six = len(expression.split()) == 6
        return float(croniter(expression, base, second_at_beginning=six).get_next(float))
    except OverflowError:  # past year 9999: no more fire times (``next_fire`` says None)
        return math.inf
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # croniter's errors are ValueErrors
        if after >= MAX_INSTANT - 2 * 366 * 86400.0:
            return math.inf  # the calendar ends before the next match
        raise InvalidRequest(f"bad cron string {expression!r}: {exc}") from exc


def _cron_fires(spec: dict[str, Any], after: float) -> Iterator[float]:
    """The cron fire times after ``after``, in order, from one croniter (which the caller
    stops); it ends where the calendar does (year 9999)."""
    from croniter import croniter

    expression = spec["cron"]
    try:
        base = datetime.fromtimestamp(after, _zone(spec.get("timezone") or "UTC"))
        times = croniter(expression, base, second_at_beginning=len(expression.split()) == 6)
        while True:
            fire = float(times.get_next(float))
            if fire > MAX_INSTANT:
                return
            yield fire
    except (OverflowError, ValueError, KeyError, TypeError, AttributeError):
        return  # the spec parsed when it was made: only the calendar's end gets here


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


def instant_field(value: Any, name: str, low: float = 0.0) -> float:
    """``value`` as epoch seconds from ``low`` (1970 unless said) to the end of year 9999:
    the times a fire time, its workflow id and its timer can all hold."""
    at = _seconds(value, name)
    if not low <= at <= MAX_INSTANT:
        raise InvalidRequest(f"{name}= must be epoch seconds from {low:.0f} to {MAX_INSTANT:.0f}, not {value!r}")
    return at


def check_window(value: Any) -> float:
    """A ``catchup_window`` as seconds from 0 to a century."""
    window = _seconds(value, "catchup_window")
    if not 0.0 <= window <= MAX_SECONDS:
        raise InvalidRequest(f"catchup_window= must be from 0 to a century ({MAX_SECONDS:.0f} s), not {value!r}")
    return window


SCHEDULE_TYPE = "weft.schedule"
"""The workflow type of a schedule: every engine runs it, whatever its app."""
OVERLAP_POLICIES = ("skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all")
DEFAULT_CATCHUP_WINDOW = 60.0


MAX_NOTE: Final = 500
"""Characters of a schedule's note (``pause``/``unpause``/``create_schedule``): a note, not a
payload. The schedule's state carries it into every ``describe`` of the schedule and onto the
Schedules page beside every other schedule, so a longer one is refused, not kept."""


def check_note(note: Any = None) -> str | None:
    """``note`` if it is None or text of at most ``MAX_NOTE`` characters, else ``InvalidRequest``."""
    if note is not None and not isinstance(note, str):
        raise InvalidRequest(f"a schedule's note must be text, not {type(note).__name__}")
    if note is not None and len(note) > MAX_NOTE:
        raise InvalidRequest(f"a schedule's note is at most {MAX_NOTE} characters, not {len(note)}", limit=MAX_NOTE)
    return note


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
    catchup_window = check_window(catchup_window)
    note = check_note(note)
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
        "backfills": [],
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
        unknown = sorted(str(key) for key in set(options) - known)
        if unknown:
            raise InvalidRequest(f"unknown schedule spec field(s): {', '.join(unknown)}")
        return make_spec(**options)
    raise InvalidRequest(f"a schedule spec is a cron string, an interval in seconds or a dict, not {type(spec).__name__}")
