"""``describe()``: one workflow's stored records as a person (or a script) reads them.

Every time is kept as it is stored, epoch seconds, with an ISO 8601 twin beside it
(``created`` and ``created_iso``, ...). The owner is its engine id and, from that engine's
record in the store, the process behind it (``owner_shard``: slot, pid, state): the store has
it for shards and embedded engines alike, so no supervisor needs to annotate the answer.

Op times come from the wall-clock stamps the engine writes on op records (``at0`` when an op
starts, where a start is recorded: an activity's first attempt, a timer armed, a child
started; ``at1`` with its outcome). Replay never reads them. An op whose start writes nothing
(a ``wait_signal`` or ``wait_condition`` without a timeout) started when the code reached it:
right when the op before it ended (or the run began), which is exact for an op awaited on its
own; inside ``all``/``race`` its siblings may end first, so there it is left unknown (None).
Signal handlers, updates and ``now``/``random``/``uuid``/``patched`` take no time, nor does an
activity whose only attempt ended inline (an ``async def`` that never suspended): it records
``at1`` alone. An attempt that waits for a free slot (``max_inflight_activities``) started
when it was handed to the runner.
"""

from __future__ import annotations

from typing import Any, Final

from .._isotime import with_iso
from ..codec import try_decode, try_decode_args
from ..store import TERMINAL, describe_reason, split_holder
from ..workflow import HANDLER, UPDATE
from ._describe_ops import op_payloads, stopped_outcome

__all__ = ["describe_workflow"]

_INSTANT: Final = frozenset((HANDLER, UPDATE, "now", "random", "uuid", "patch"))
"""Op kinds recorded once, at the moment they apply: they start when they end."""


def describe_workflow(workflow_id: str, snapshot: Any, input_encoded: bool = False) -> dict[str, Any]:
    """The ``describe()`` answer for ``snapshot`` (``store._queries.Snapshot``). With
    ``input_encoded`` the input stays the codec bytes of the arguments (``input_encoded``:
    True says so), for an answer that travels: its receiver decodes them, and may not know
    their types (``decode_input``), which must not cost it the rest of the answer."""
    record = snapshot.record
    owner, epoch = None, snapshot.epoch
    if snapshot.holder is not None:
        owner, epoch, _ = split_holder(snapshot.holder)
    result = record.get("result") if record["status"] == "completed" else None
    error = record.get("error")
    ended = record["updated"] if record["status"] in TERMINAL else None
    described: dict[str, Any] = {
        "id": workflow_id,
        "type": record["type"],
        "status": record["status"],
        "run_id": record["run_id"],
        **({"input": record["args"], "input_encoded": True} if input_encoded else _decoded_input(record["args"])),
        "owner": owner,
        "owner_shard": _owner_shard(snapshot.owner),
        "epoch": epoch,
        "created": record["created"],
        "updated": record["updated"],
        "ended": ended,
        "history": _history(snapshot.ops, _run_start(record), input_encoded),
        "timers": [with_iso(timer, "fire_at") for timer in snapshot.timers],
        "inbox": [{"seq": seq, "kind": m["kind"], "name": m["name"]} for seq, m in snapshot.inbox],
        **_stored_value("result", result, input_encoded),
        "error": None if error is None else {k: error.get(k) for k in ("type", "message", "traceback")},
        "nondeterminism": record.get("nondeterminism"),
        "history_pruned": record.get("history_pruned"),
        **_stored_value("memo", record.get("memo"), input_encoded),
        "parent": record.get("parent"),
        "previous_runs": [with_iso(run, "ended") for run in record.get("previous_runs") or ()],
        "lost_owners": _lost(record),
        "quarantine_lifts": _lifts(record),
        "queued": record.get("queued") is not None,
        "flow": snapshot.flow,
        **({"payloads_encoded": True} if input_encoded else {}),
    }
    return with_iso(described, "created", "updated", "ended")


def _decoded_input(args: bytes) -> dict[str, Any]:
    """``{"input": [start arguments]}`` of the current run (the arguments it continued with,
    after a continue-as-new); arguments this process cannot decode (a type it does not know)
    are ``{"input": None, "input_error": why}``, not an error: ``describe`` is what one reads
    a broken workflow with, from a process that may not import the app."""
    value, error = try_decode_args(args, "workflow arguments")
    return {"input": value} if error is None else {"input": None, "input_error": error}


def _stored_value(name: str, data: bytes | None, encoded: bool) -> dict[str, Any]:
    """``{name: value}`` of the workflow's result or memo: decoded here, or for an answer that
    travels (``encoded``) left as codec bytes for the receiver (``bus``), as the input is. A
    value of a type the decoding process has not registered is ``None`` with a
    ``<name>_error`` beside it: it costs that field, never the rest of the answer."""
    if data is None or encoded:
        return {name: data}
    value, error = try_decode(data, f"workflow {name}")
    return {name: value} if error is None else {name: None, f"{name}_error": error}


def _owner_shard(engine: dict[str, Any] | None) -> dict[str, Any] | None:
    """The owner engine's process as its record in the store names it (``slot`` is None for
    an embedded engine); None when the holder's record is gone."""
    if engine is None:
        return None
    return {"slot": engine.get("slot"), "pid": engine.get("pid"), "state": engine.get("state")}


def _run_start(record: dict[str, Any]) -> float:
    """When the current run began: the end of the run it continues, else its start (a delayed
    start's time, if later than its creation)."""
    previous = record.get("previous_runs") or ()
    if previous and isinstance(previous[-1].get("ended"), (int, float)):
        return float(previous[-1]["ended"])
    start_at = record.get("start_at")
    return max(record["created"], start_at) if isinstance(start_at, (int, float)) else record["created"]


def _outcome(record: dict[str, Any]) -> str:
    if "err" in record:
        return "error"
    if "t" in record:
        return "ok"
    return "pending"


def _history(ops: dict[int, dict[str, Any]], run_start: float, encoded: bool = False) -> list[dict[str, Any]]:
    history = []
    moved_on: float | None = run_start
    """The latest end of an op before the current one: when the code reached it."""
    for seq in sorted(ops):
        op = ops[seq]
        kind = op.get("kind")
        entry: dict[str, Any] = {"seq": seq, "kind": kind, "name": op.get("name"), "outcome": _outcome(op)}
        if "attempts" in op:
            entry["attempts"] = op["attempts"]
        if "child_id" in op:
            entry["child_id"] = op["child_id"]
        if "err" in op:
            stopped = stopped_outcome(op["err"])
            if stopped is None:
                entry["error"] = {"type": op["err"].get("type"), "message": op["err"].get("message")}
            else:
                entry["outcome"] = stopped
        entry.update(op_payloads(op, encoded))
        ended = op.get("at1") if "t" in op else None
        if "at0" in op:
            started = op["at0"]
        elif kind in _INSTANT or (kind == "activity" and "at1" in op):
            started = ended  # applied at once, or an activity that ended in the turn it started
        elif "in" in op:
            started = None  # a leaf of all/race: its siblings may have ended before it started
        else:
            started = moved_on
        entry["started"] = started
        entry["ended"] = ended
        entry["duration"] = ended - started if isinstance(started, (int, float)) and isinstance(ended, (int, float)) else None
        history.append(with_iso(entry, "started", "ended"))
        if "t" in op:  # it ended: the code may have moved on from here
            if not isinstance(ended, (int, float)):
                moved_on = None  # recorded before ops were stamped: when is unknown
            elif moved_on is None or ended > moved_on:
                moved_on = ended
    return history


def _lifts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The quarantines lifted from this workflow (``store._lifts``): when, by whom, why, and
    what it had been quarantined for, oldest first."""
    return [with_iso({**lift, "quarantined_for": describe_reason(lift.get("quarantined_for"))}, "at") for lift in record.get("lifted") or ()]


def _lost(record: dict[str, Any]) -> dict[str, Any] | None:
    """How many lost owners were charged to this run (its code held their loop) without
    progress, and doing what (a quarantined workflow's reason); None if none was."""
    lost = record.get("lost")
    if not lost or lost.get("mark", (None,))[0] != record["run_id"]:
        return None
    found = {
        "count": lost.get("count", 0),
        "reason": describe_reason(lost.get("reason")),
        "op": lost.get("reason"),
        "at": lost.get("at"),
    }
    return with_iso(found, "at")
