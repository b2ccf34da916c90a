"""A schedule is a workflow: ``weft.schedule``, which every engine runs.

So it is durable, owned and fenced like any workflow, taken over after a crash, and tested
with the same time-skipping clock. Each fire starts the scheduled workflow as an abandoned
child (``ctx.start_child``) with the id ``<schedule id>/<fire time ISO>``: the start is part
of the commit that records the fire, so a fire time starts exactly one workflow whoever owns
the schedule and whatever crashes, and a repeated id is refused rather than started twice.
The child's ending comes back through ``on_child_done``, which is what the overlap policies
wait on. Operators act through updates (``pause``, ``unpause``, ``trigger``, ``backfill``,
``update``, ``delete``) and read it through the ``describe`` query (``ScheduleHandle``).
"""

from __future__ import annotations

from typing import Any, Final

from .._isotime import iso_utc
from .._schedule_checks import check_backfill, check_changes
from .._schedule_spec import SCHEDULE_TYPE, check_note, fires_between, jitter_of, next_fire
from ..errors import WorkflowAlreadyExists
from ._api import workflow
from ._schedule_id import fired_id

__all__ = ["run_schedule", "fired_id", "NEXT_SHOWN"]

RECENT_KEPT: Final = 10
"""Fired runs ``describe`` lists (the newest)."""
NEXT_SHOWN: Final = 5
"""Upcoming fire times ``describe`` lists."""
BACKFILL_PER_TURN: Final = 5
"""Fire times of a backfill started per loop turn; the turn then waits ``BREATH``."""
BREATH: Final = 0.1
"""Seconds the loop waits after a turn that did work when more is due at once (a catch-up,
a backfill). A run reads its inbox only while it waits, and only once its timer is not due
yet: without these waits a burst would hold a ``pause`` or ``delete`` until its end."""
MAX_WAIT: Final = 30 * 86400.0
"""The longest single wait: a fire time years away is waited for in turns of this length."""
TIMER_SLACK: Final = 5.0
"""Lateness always on time, whatever ``catchup_window`` says: a run reloaded by its timer
(after eviction) sees the fire late by that reload, which is not downtime."""
ON_TIME: Final = "weft.schedule.on-time"
"""The marker (``ctx.patched``) that records a late fire judged on time by its live owner."""
MAX_BUFFERED: Final = 1000
"""Fire times ``buffer_all`` keeps waiting at most (later ones are counted as skipped)."""
STEPS_PER_RUN: Final = 200
"""Loop turns before the schedule continues as new: its history stays short forever."""


@workflow(name=SCHEDULE_TYPE)
async def run_schedule(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Fire ``state["workflow"]`` at each time of ``state["spec"]`` until deleted."""
    sid = ctx.workflow_id
    changes = [0]  # bumped by every handler: the loop re-plans

    def changed() -> None:
        changes[0] += 1

    def child_done(child_id: str, status: str) -> None:
        if child_id in state["running"]:
            state["running"].remove(child_id)
        for entry in state["recent"]:
            if entry["id"] == child_id:
                entry["status"] = status
        if state["buffered"] and not state["running"]:
            changed()  # a buffered fire may start now; otherwise the loop need not wake

    def act(action: dict[str, Any]) -> None:
        state["actions"].append(action)
        changed()

    def pause(note: str | None = None) -> None:
        state["paused"], state["note"] = True, note
        changed()

    def unpause(note: str | None = None) -> None:
        state["paused"], state["note"] = False, note
        act({"kind": "resume"})  # what fell due while paused is not caught up

    def update(changes_: dict[str, Any]) -> None:
        checked = check_changes(changes_)  # as validated: all of it applies
        state.update(checked)
        if "spec" in checked:
            act({"kind": "resume"})  # the new spec counts from now
        changed()

    def backfill(start: float, end: float) -> None:
        act({"kind": "backfill", "start": start, "end": end})

    def delete() -> None:
        state["deleted"] = True
        changed()

    ctx.on_child_done(child_done)
    ctx.on_update("pause", pause, check_note)  # the owner's check: an older client's note too
    ctx.on_update("unpause", unpause, check_note)
    ctx.on_update("trigger", lambda: act({"kind": "trigger"}))
    ctx.on_update("backfill", backfill, lambda start, end: check_backfill(state["spec"], start, end))
    ctx.on_update("update", update, check_changes)
    ctx.on_update("delete", delete)
    ctx.on_query("describe", lambda: _describe(sid, state))

    async def start(nominal: float) -> bool:
        wid = fired_id(sid, nominal)
        try:
            await ctx.start_child(state["workflow"], *state["args"], id=wid)
        except WorkflowAlreadyExists:
            state["skipped"] += 1  # that fire time started its workflow already (a backfill)
            return False
        state["running"].append(wid)
        state["fired"] += 1
        state["recent"] = [*state["recent"], {"id": wid, "nominal": nominal, "status": "running"}][-RECENT_KEPT:]
        return True

    async def backfill_some(now: float) -> bool:
        """Start up to ``BACKFILL_PER_TURN`` fire times of the backfills asked for (each
        checked to span at most ``MAX_BACKFILL``), ``BREATH`` after the last ones at the
        soonest, whatever woke the loop: True if any started."""
        pending = state["backfills"]
        if not pending or now < state.get("backfill_at", 0.0):
            return False
        state["backfill_at"] = now + BREATH
        taken = 0
        while pending and taken < BACKFILL_PER_TURN:
            at, end = pending[0]
            nominal = next_fire(state["spec"], at)
            if nominal is None or nominal > end:
                pending.pop(0)
                continue
            pending[0][0] = nominal
            await start(nominal)  # one that started already is counted as skipped
            taken += 1
        return taken > 0

    async def fire(nominal: float, overlap: str) -> None:
        if not state["running"] or overlap == "allow_all":
            await start(nominal)
        elif overlap == "skip":
            state["skipped"] += 1
        elif overlap == "buffer_one" or overlap == "buffer_all":
            limit = 1 if overlap == "buffer_one" else MAX_BUFFERED
            if len(state["buffered"]) < limit:
                state["buffered"].append(nominal)
            else:
                state["skipped"] += 1
        elif overlap == "cancel_other":
            for running in list(state["running"]):
                await ctx.cancel_child(running)
            state["buffered"] = [nominal]  # starts once the cancelled ones have ended
        else:  # terminate_other: they end in this very commit; the new one starts now
            for running in list(state["running"]):
                await ctx.terminate_child(running, f"schedule {sid!r}: overlap policy terminate_other at {iso_utc(nominal)}")
            state["running"] = []
            await start(nominal)

    up_since: list[float] = []  # when this incarnation of the run first saw live time

    async def clock() -> float:
        now = (await ctx.now()).timestamp()
        if not up_since and not ctx.is_replaying:
            up_since.append(now)
        return now

    async def on_time(now: float, wake: float) -> bool:
        """Whether a fire due at ``wake`` starts, or came due while no engine ran this
        schedule, longer ago than the catch-up window (missed). Lateness within the window
        needs only recorded times; a later fire asks when this incarnation came up (live
        only, so its verdict is recorded by a marker that every replay reads back)."""
        tolerance = max(state["catchup_window"], TIMER_SLACK)
        if now - wake <= tolerance:
            return True
        if ctx.is_replaying or (up_since[0] if up_since else now) - wake <= tolerance:
            return await ctx.patched(ON_TIME)  # replaying: was it marked? live: mark it
        return False

    state.setdefault("backfills", [])
    for _ in range(STEPS_PER_RUN):
        now = await clock()
        if state["last"] is None:
            state["last"] = now  # created now: the first fire is the next time after this
        worked = False
        while state["buffered"] and not state["running"]:
            await start(state["buffered"].pop(0))
            worked = True
        actions, state["actions"] = state["actions"], []
        for action in actions:
            kind = action["kind"]
            if kind == "trigger":
                await fire(now, state["overlap"])
                worked = True
            elif kind == "backfill":
                state["backfills"].append([float(action["start"]) - 1e-6, float(action["end"])])
            elif kind == "resume":
                state["last"] = max(state["last"], now)
        if state["deleted"]:
            return _describe(sid, state)
        worked = await backfill_some(now) or worked
        nominal = None if state["paused"] else next_fire(state["spec"], state["last"])
        wake = None if nominal is None else nominal + jitter_of(state["spec"], sid, nominal)
        if wake is not None and wake <= now and not worked:
            if not await on_time(now, wake):
                # Came due during downtime, before the catch-up window: those are missed.
                cutoff = now - max(state["catchup_window"], TIMER_SLACK)
                count, latest = fires_between(state["spec"], state["last"], cutoff)
                state["missed"] += count
                state["last"] = latest if latest is not None else cutoff
                continue
            state["last"] = nominal
            await fire(nominal, state["overlap"])  # type: ignore[arg-type]
            worked = True
            nominal = None if state["paused"] else next_fire(state["spec"], state["last"])
            wake = None if nominal is None else nominal + jitter_of(state["spec"], sid, nominal)
        seen = changes[0]
        waits = [ctx.wait_condition(lambda: changes[0] != seen)]
        delays = [max(0.0, state.get("backfill_at", now) - now)] if state["backfills"] else []
        if wake is not None:  # after work, what is due at once waits a breath: the inbox first
            delays.append(max(BREATH if worked else 0.0, wake - now))
        if delays:
            waits.append(ctx.sleep(min(min(delays), MAX_WAIT)))
        await ctx.race(waits)
    return ctx.continue_as_new(state)  # type: ignore[no-any-return]


def _describe(sid: str, state: dict[str, Any]) -> dict[str, Any]:
    upcoming: list[float] = []
    if not state["paused"] and not state["deleted"] and state["last"] is not None:
        at = state["last"]
        while len(upcoming) < NEXT_SHOWN:
            nominal = next_fire(state["spec"], at)
            if nominal is None:
                break
            upcoming.append(nominal)
            at = nominal
    return {
        "id": sid,
        "workflow": state["workflow"],
        "spec": state["spec"],
        "overlap": state["overlap"],
        "catchup_window": state["catchup_window"],
        "paused": state["paused"],
        "note": state["note"],
        "deleted": state["deleted"],
        "next": upcoming,
        "next_iso": [iso_utc(t) for t in upcoming],
        "last_fire": state["last"],
        "last_fire_iso": iso_utc(state["last"]),
        "recent": [{**entry, "nominal_iso": iso_utc(entry["nominal"])} for entry in state["recent"]],
        "running": list(state["running"]),
        "buffered": len(state["buffered"]),
        "fired": state["fired"],
        "missed": state["missed"],
        "skipped": state["skipped"],
    }
