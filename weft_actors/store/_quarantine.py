"""Poison workflows: counting the owners a workflow loses without progress, parking it
(``quarantined``) and lifting it again.

A workflow whose code or activity blocks the loop makes its owner miss heartbeats and lose its
lease; the next owner replays it, runs the same thing and is lost in turn. So every takeover
from an owner that was lost while holding it (dead or expired, never a graceful release, which
leaves no holder) notes on the workflow record a *progress mark*: the run and its op log's last
record. The same mark as at the previous loss means nothing was committed in between:
``lost.count`` grows; any other mark starts again at 1. It grows only on evidence: the lost
owner's stall note names the workflow, or the taker before it had replayed the workflow and
noted what it runs (``seen``; a wait on a condition or a signal records nothing in the op log,
so the log alone cannot tell it from running code). A loss before that note landed (owners lost
one after the other, faster than they commit) counts in ``lost.unseen`` instead. The taker parks the workflow once the
count reaches its ``quarantine_after`` (``QuarantineWorkflow``); ``LiftQuarantine`` makes it
``running`` and ownerless again, for any live engine to take. Costs one record write and one
cursor step per takeover of a lost owner's workflow, nothing per step.

Every workflow of a lost owner moves to the same taker, so the culprit's neighbours would be
lost with it each time. Blame narrows that: an engine whose loop stalls has its watchdog write
a *stall note* naming the workflow on the loop (``engines/<id>.stall``, removed once the
engine heartbeats again); a takeover from an engine that left one counts only that workflow.
Without a note (the process died), a workflow parked on a timer, signal, condition or child
is not counted either: only one that was running an activity or its own code. Nor is a loss
at the same mark when the store refused a commit since the previous one (full, read-only:
``_refusals``): the workflow could not progress, whoever owned it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from typing import Any, Final, NamedTuple

from ..codec import pack_record, unpack_record
from ..errors import FencedOut, InvalidRequest, WorkflowClosed, WorkflowNotFound
from ._apply import TxnState, set_visibility
from ._feed import feed_entry
from ._flow import fill_free_slots, queue_first, vacate
from ._keys import NO_ENGINE, TERMINAL, by_engine_key, fence, op_seq, pack_u64, run_prefix
from ._reads import last_rows, prefix_end

__all__ = ["QuarantineWorkflow", "LiftQuarantine", "LOOK_BACK", "note_lost_owner", "quarantine_workflow", "lift_quarantine", "describe_reason"]

QUARANTINED: Final = "quarantined"
LOOK_BACK: Final = 32
"""Op records read back from the end of the log for the lowest one still without an outcome."""
_WORKFLOW_CODE: Final = "workflow code"


class QuarantineWorkflow(NamedTuple):
    """Park ``wid`` (held by the committing engine at ``epoch``, run ``run_id``): status
    ``quarantined``, claim released, nothing driven until ``LiftQuarantine``."""

    wid: str
    epoch: int
    run_id: str


class LiftQuarantine(NamedTuple):
    """``quarantined`` -> ``running`` with no holder and the lost count reset (any engine); a
    workflow under flow control goes ``pending`` at the head of its group's queue instead."""

    wid: str


_PARKED: Final = frozenset(("sleep", "signal", "condition", "child"))
"""Op kinds a workflow waits on without running anything on the loop."""


def stall_note_path(store_path: str, engine_id: str) -> str:
    return os.path.join(store_path, "engines", engine_id + ".stall")


_SPARE_ROOT: Final = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def spare_note_path(path: str) -> str:
    """Where a stall note goes when its data directory refuses it (read-only, full): memory
    of this machine (``/dev/shm``), under a name fixed by the store's directory, so a taker on
    this machine finds it there. A stall on a read-only store would otherwise blame every
    workflow in flight on the stalled owner instead of the one that stalled it."""
    directory = os.path.dirname(os.path.realpath(path))
    tag = hashlib.blake2b(directory.encode(), digest_size=8).hexdigest()
    return os.path.join(_SPARE_ROOT, f"weft-stall-{tag}", os.path.basename(path))


def write_stall_note(path: str, note: dict[str, Any]) -> None:
    """Atomically (a rename): a reader sees the whole note or none. In ``spare_note_path``
    if the data directory refuses it; raises ``OSError`` if both do."""
    try:
        _write_note(path, note)
    except OSError:
        spare = spare_note_path(path)
        os.makedirs(os.path.dirname(spare), exist_ok=True)
        _write_note(spare, note)


def _write_note(path: str, note: dict[str, Any]) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        json.dump(note, out)
    os.replace(temporary, path)


def read_stall_note(path: str) -> dict[str, Any] | None:
    """The note at ``path`` or at its ``spare_note_path``, the later if both are there."""
    notes = [note for note in (_read_note(path), _read_note(spare_note_path(path))) if note is not None]
    return max(notes, key=lambda note: note.get("at") or 0.0) if notes else None


def remove_stall_note(path: str) -> None:
    for where in (path, spare_note_path(path)):
        try:
            os.unlink(where)
        except OSError:
            pass


def _read_note(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as source:
            note = json.load(source)
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) and isinstance(note.get("wid"), str) else None


def note_lost_owner(
    state: TxnState,
    wid: str,
    record: dict[str, Any],
    stall: dict[str, Any] | None = None,
    *,
    lease: float | None = None,
    refused: float | None = None,
    epoch: int | None = None,
) -> dict[str, Any] | None:
    """In the takeover transaction of ``wid`` from an owner that was lost holding it: update
    and write ``record["lost"]`` (``count``, ``mark``, ``reason``) and return it; None (and
    nothing written) if the loss is not ``wid``'s doing: ``stall``, the lost engine's stall
    note, names another workflow, or ``wid`` was parked on something that runs nothing.

    ``lease`` is the takeover's lease-clock time and ``refused`` the store's last refusal
    (``_refusals``): a loss at the same mark as the previous one, with a refusal between them
    and no stall note naming ``wid``, is the store's doing: the count stays. ``epoch`` is the
    lost owner's: its replay noted ``seen`` with it, or it was lost before it replayed ``wid``."""
    if stall is not None and stall["wid"] != wid:
        return None
    txn, dbs = state.txn, state.dbs
    prefix = run_prefix(wid, record["run_id"])
    tail = [(op_seq(key), value) for key, value in last_rows(txn, dbs.ops, prefix, prefix_end(prefix), LOOK_BACK)]
    mark = [record["run_id"], tail[0][0], zlib.crc32(tail[0][1])] if tail else [record["run_id"], -1, 0]
    previous: dict[str, Any] = record.get("lost") or {}
    same = previous.get("mark") == mark
    if stall is not None and stall.get("run_id") == record["run_id"]:
        reason = {"seq": stall.get("seq"), "kind": stall.get("kind"), "name": stall.get("name")}
    elif same and previous.get("reason"):
        reason = previous["reason"]
    else:
        reason = _reason_from_log(tail)
    if stall is None and reason.get("kind") in _PARKED:
        return None
    count, unseen = 1, 0
    if same:
        count, unseen = previous.get("count", 0), previous.get("unseen", 0)
        since = previous.get("lease_at")
        if stall is None and refused is not None and since is not None and refused >= since:
            pass  # the store refused commits since the last loss: nobody could progress
        elif stall is not None or (epoch is not None and previous.get("seen") == epoch):
            count += 1  # evidence: its stall note, or the last taker replayed it and noted what it runs
        else:
            unseen += 1  # the last taker was lost before it had replayed it: a cascade
    lost = {"count": count, "mark": mark, "reason": reason, "at": state.now}
    if unseen:
        lost["unseen"] = unseen
    if lease is not None:
        lost["lease_at"] = lease
    record["lost"] = lost
    txn.put(wid.encode(), pack_record(record), db=dbs.workflows)
    return lost


def _reason_from_log(tail: list[tuple[int, bytes]]) -> dict[str, Any]:
    """The lowest op at the end of the log still without an outcome (a timer, a retrying
    activity, a child); else the workflow's own code, or an op it started that records
    nothing until it ends (an activity's first attempt), after the last recorded op."""
    pending = None
    for seq, raw in tail:
        op = unpack_record(raw)
        if "t" not in op:
            pending = {"seq": seq, "kind": op.get("kind"), "name": op.get("name")}
    if pending is not None:
        return pending
    return {"seq": tail[0][0] + 1 if tail else 0, "kind": _WORKFLOW_CODE, "name": None}


UNSEEN_FACTOR: Final = 3
"""A workflow is quarantined after ``quarantine_after`` losses on evidence, or after this many
times as many losses before any taker could replay it (one that kills whoever replays it)."""


def pending_reason(commands: list[Any]) -> dict[str, Any]:
    """What a replayed run is about to execute (its first op command), for the record of a
    workflow that was already lost without progress: the next loss then names it exactly."""
    for cmd in commands:
        if cmd.kind == "op":
            return {"seq": cmd.seq, "kind": cmd.op.kind, "name": cmd.op.name}
    return {"seq": None, "kind": _WORKFLOW_CODE, "name": None}


def describe_reason(reason: dict[str, Any] | None) -> str:
    if not reason:
        return "unknown"
    if reason.get("kind") == _WORKFLOW_CODE:
        after = reason.get("seq")
        return _WORKFLOW_CODE if not after else f"{_WORKFLOW_CODE}, or an activity it started, after op #{after - 1}"
    return f"op #{reason.get('seq')} {reason.get('kind')} {reason.get('name')!r}"


def _load(state: TxnState, wid: str) -> dict[str, Any]:
    raw = state.txn.get(wid.encode(), db=state.dbs.workflows)
    if raw is None:
        raise WorkflowNotFound(f"workflow {wid!r} not found", workflow_id=wid)
    return unpack_record(raw)


def _touch(state: TxnState, wid: str, record: dict[str, Any], old: dict[str, Any]) -> None:
    record["updated"] = state.now
    state.txn.put(wid.encode(), pack_record(record), db=state.dbs.workflows)
    set_visibility(state, record, wid, old)
    seq = state.next_feed_seq()  # callers waiting elsewhere look again
    state.txn.put(pack_u64(seq), feed_entry(state.now, wid), db=state.dbs.feed)


def quarantine_workflow(state: TxnState, intent: QuarantineWorkflow) -> dict[str, Any]:
    txn, dbs, wid = state.txn, state.dbs, intent.wid
    wid_raw = wid.encode()
    holder = txn.get(wid_raw, db=dbs.claim_holder)
    if holder is None or holder[:24] != fence(state.engine_raw, intent.epoch):
        raise FencedOut(f"this engine no longer holds workflow {wid!r} at epoch {intent.epoch}", workflow_id=wid, epoch=intent.epoch)
    record = _load(state, wid)
    if record["status"] != "running" or record["run_id"] != intent.run_id:
        raise FencedOut(f"workflow {wid!r} is no longer running run {intent.run_id}", workflow_id=wid, epoch=intent.epoch)
    old = dict(record)
    txn.delete(wid_raw, db=dbs.claim_holder)
    txn.delete(by_engine_key(state.engine_raw, wid), db=dbs.by_engine)
    record["status"] = QUARANTINED
    if "flow" in record:
        vacate(state, record)  # its concurrency slot goes to the next in its queue, now
    _touch(state, wid, record, old)
    return record.get("lost") or {}


def lift_quarantine(state: TxnState, intent: LiftQuarantine) -> dict[str, Any]:
    wid = intent.wid
    record = _load(state, wid)
    if record["status"] != QUARANTINED:
        cls = WorkflowClosed if record["status"] in TERMINAL else InvalidRequest
        raise cls(f"workflow {wid!r} is {record['status']}, not quarantined", workflow_id=wid, status=record["status"])
    old = dict(record)
    lost = record.pop("lost", None) or {}
    if "flow" in record and not record.get("slot"):  # it gave its slot up when parked
        queue_first(state, wid, record)
        _touch(state, wid, record, old)
        fill_free_slots(state, record["flow"])
        return {"status": "pending", "lost": lost}
    record["status"] = "running"
    state.txn.put(by_engine_key(NO_ENGINE, wid), b"", db=state.dbs.by_engine)
    _touch(state, wid, record, old)
    return {"status": "running", "lost": lost}
