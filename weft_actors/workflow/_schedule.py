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
from .._schedule_spec import OVERLAP_POLICIES, SCHEDULE_TYPE, as_spec, fires_between, jitter_of, next_fire
from ..errors import InvalidRequest, WorkflowAlreadyExists
from ._api import workflow
from ._schedule_id import fired_id

__all__ = ["run_schedule", "fired_id", "NEXT_SHOWN"]

RECENT_KEPT: Final = 10
"""Fired runs ``describe`` lists (the newest)."""
NEXT_SHOWN: Final = 5
"""Upcoming fire times ``describe`` lists."""
MAX_BACKFILL: Final = 1000
"""Fire times one ``backfill`` call starts at most."""
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
        changed()

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
        for key in ("workflow", "args", "overlap", "catchup_window"):
            if key in changes_:
                state[key] = list(changes_[key]) if key == "args" else changes_[key]
        if "spec" in changes_:
            state["spec"] = as_spec(changes_["spec"])
            act({"kind": "resume"})  # the new spec counts from now
        changed()

    def check_update(changes_: Any) -> None:
        if not isinstance(changes_, dict) or not changes_:
            raise InvalidRequest("update needs a dict of changes")
        unknown = sorted(set(changes_) - {"workflow", "args", "overlap", "catchup_window", "spec"})
        if unknown:
            raise InvalidRequest(f"a schedule has no field(s) {', '.join(unknown)}")
        if "overlap" in changes_ and changes_["overlap"] not in OVERLAP_POLICIES:
            raise InvalidRequest(f"overlap must be one of {', '.join(OVERLAP_POLICIES)}")
        if "spec" in changes_:
            as_spec(changes_["spec"])
        if "workflow" in changes_ and (not isinstance(changes_["workflow"], str) or not changes_["workflow"]):
            raise InvalidRequest("workflow must be a workflow type name")
        if "args" in changes_ and not isinstance(changes_["args"], (list, tuple)):
            raise InvalidRequest("args must be a list")
        window = changes_.get("catchup_window", 0.0)
        if isinstance(window, bool) or not isinstance(window, (int, float)) or not window >= 0:
            raise InvalidRequest("catchup_window must be a number of seconds, not negative")

    def check_backfill(start: Any, end: Any) -> None:
        for name, value in (("start", start), ("end", end)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidRequest(f"backfill {name} must be epoch seconds")
        if end < start:
            raise InvalidRequest("backfill end is before its start")

    def delete() -> None:
        state["deleted"] = True
        changed()

    ctx.on_child_done(child_done)
    ctx.on_update("pause", pause)
    ctx.on_update("unpause", unpause)
    ctx.on_update("trigger", lambda: act({"kind": "trigger"}))
    ctx.on_update("backfill", lambda start, end: act({"kind": "backfill", "start": start, "end": end}), check_backfill)
    ctx.on_update("update", update, check_update)
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

    for _ in range(STEPS_PER_RUN):
        now = (await ctx.now()).timestamp()
        if state["last"] is None:
            state["last"] = now  # created now: the first fire is the next time after this
        while state["buffered"] and not state["running"]:
            await start(state["buffered"].pop(0))
        actions, state["actions"] = state["actions"], []
        for action in actions:
            kind = action["kind"]
            if kind == "trigger":
                await fire(now, state["overlap"])
            elif kind == "backfill":
                at, started = float(action["start"]) - 1e-6, 0
                while started < MAX_BACKFILL:
                    nominal = next_fire(state["spec"], at)
                    if nominal is None or nominal > action["end"]:
                        break
                    started += await start(nominal)
                    at = nominal
            elif kind == "resume":
                state["last"] = max(state["last"], now)
        if state["deleted"]:
            return _describe(sid, state)
        nominal = None if state["paused"] else next_fire(state["spec"], state["last"])
        if nominal is not None and now - nominal - jitter_of(state["spec"], sid, nominal) > state["catchup_window"]:
            # Down (or paused by an outage) past the catch-up window: those are missed.
            count, latest = fires_between(state["spec"], state["last"], now - state["catchup_window"])
            state["missed"] += count
            state["last"] = latest if latest is not None else now
            continue
        seen = changes[0]
        waits = [ctx.wait_condition(lambda: changes[0] != seen)]
        if nominal is not None:
            wake = nominal + jitter_of(state["spec"], sid, nominal)
            waits.append(ctx.sleep(max(0.0, wake - now)))
        index, _ = await ctx.race(waits)
        if index == 1:
            if (await ctx.now()).timestamp() - wake > state["catchup_window"]:
                continue  # woken long after (an outage): the next turn counts what was missed
            state["last"] = nominal
            await fire(nominal, state["overlap"])  # type: ignore[arg-type]
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
