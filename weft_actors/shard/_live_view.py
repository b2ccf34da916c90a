"""What ``describe()`` adds from the live actor: the pending activities and the stack.

Computed when ``describe`` is asked, from what the owner's actor already holds (its ops in
flight, its attempts and timers, its run's op records and suspended coroutines): nothing is
kept or written for it on the hot path. The one durable part is an activity's last failure,
written with the retry that follows it (``_attempts``), so it is shown after a takeover too.
An engine that does not run the workflow answers from the store alone: the activities whose
outcome is not recorded, with what their records say (no attempt in flight is known there),
and the stack of a read-only replay of it (``_reads``), as a query of it would be answered.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from .._isotime import with_iso
from ..workflow import stack_of

if TYPE_CHECKING:
    from ..workflow import WorkflowRun
    from ._actor import Actor

__all__ = ["add_live_parts", "stack_with_timers"]


def add_live_parts(described: dict[str, Any], actor: Actor | None, ops: Mapping[int, dict[str, Any]]) -> None:
    """Set ``pending_activities`` and ``stack`` (None unless ``actor``, this engine's live
    actor of the workflow, is suspended in its run) on ``described``."""
    shard = described.get("owner_shard") or {}
    if actor is None or actor.closed or actor.stuck:
        described["pending_activities"] = _stored_pending(ops, shard) if described["status"] == "running" else []
        described["stack"] = None
        return
    described["pending_activities"] = _live_pending(actor, {"slot": shard.get("slot"), "pid": os.getpid()})
    described["stack"] = _stack(actor)


def _last_failure(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The failure of the attempt before a retry, as its retry recorded it (type, message,
    traceback; the message alone on a record written before the type and traceback were)."""
    failure = record.get("last_failure")
    if failure is not None:
        return dict(failure)
    if record.get("last_error") is not None:
        return {"type": None, "message": record["last_error"], "traceback": None}
    return None


def _live_pending(actor: Actor, shard: dict[str, Any]) -> list[dict[str, Any]]:
    pending = []
    history = actor.run.history
    for seq in sorted(actor.ops):
        op = actor.ops[seq].op
        if op is None or op.kind != "activity":
            continue
        record = history.get(seq) or {}
        done = record.get("attempts", 0)
        flight = actor.attempts.get(seq)
        retry_at = record.get("retry_at")
        started = flight[2] if flight is not None else None
        if flight is not None:
            state = "running"
        elif retry_at is not None:
            state = "retry_wait"
        else:
            state = "scheduled"  # ended inline; its outcome is being recorded
        entry = {
            "seq": seq,
            "name": op.name,
            "state": state,
            "attempt": done + 1,
            "scheduled": retry_at if done else record.get("at0", started),
            "started": started,
            "first_started": record.get("at0", started),
            "next_retry": retry_at if flight is None else None,
            "last_failure": _last_failure(record),
            "shard": shard,
        }
        pending.append(with_iso(entry, "scheduled", "started", "first_started", "next_retry"))
    return pending


def _stored_pending(ops: Mapping[int, dict[str, Any]], shard: dict[str, Any]) -> list[dict[str, Any]]:
    pending = []
    for seq in sorted(ops):
        record = ops[seq]
        if record.get("kind") != "activity" or "t" in record or "err" in record:
            continue
        done = record.get("attempts", 0)
        entry = {
            "seq": seq,
            "name": record.get("name"),
            "state": "retry_wait" if record.get("retry_at") is not None else "unknown",
            "attempt": done + 1,
            "scheduled": record.get("retry_at"),
            "started": None,
            "first_started": record.get("at0"),
            "next_retry": record.get("retry_at"),
            "last_failure": _last_failure(record),
            "shard": {"slot": shard.get("slot"), "pid": shard.get("pid")},
        }
        pending.append(with_iso(entry, "scheduled", "started", "first_started", "next_retry"))
    return pending


def _stack(actor: Actor) -> list[dict[str, Any]]:
    """``stack_of`` the run, each awaited op with what the engine knows of it: a timer's
    fire time (a sleep, a wait's timeout, a retry's backoff), an activity's attempt."""
    timers = {seq: (entry[0].kind, entry[0].fire_at) for seq, entry in actor.timers.items()}
    return stack_with_timers(actor.run, timers)


def stack_with_timers(run: WorkflowRun, timers: Mapping[int, tuple[str, float]]) -> list[dict[str, Any]]:
    """``stack_of(run)``, each awaited op with its timer (``seq -> (kind, fire_at)``: the
    live actor's, or the store's for a run replayed to answer) and an activity's attempt."""
    frames = stack_of(run)
    history = run.history
    for frame in frames:
        if "waits_on" not in frame:
            continue
        waits_on = []
        for entry in frame["waits_on"]:
            seq = entry["seq"]
            timer = timers.get(seq)
            if timer is not None:
                entry["timer"], entry["fire_at"] = timer
            if entry["kind"] == "activity":
                entry["attempt"] = (history.get(seq) or {}).get("attempts", 0) + 1
            waits_on.append(with_iso(entry, "fire_at"))
        frame["waits_on"] = waits_on
    return frames
