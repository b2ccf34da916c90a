"""Poison workflows: counting the owners a workflow loses without progress, parking it
(``quarantined``) and lifting it again.

A workflow whose code or activity blocks the loop makes its owner miss heartbeats and lose its
lease (or be killed as hung); the next owner replays it and runs the same thing. Every workflow
of a lost owner moves to a taker, but a loss is charged only on evidence (``_blame``): the lost
engine's death record or stall note names the workflow and run whose code held its loop. A
loss that names nobody (an owner killed from outside while its loop was idle, a lost host) or
another workflow counts nothing, so neighbours are never charged. A charged takeover notes on
the workflow record a *progress mark*: the run and its op log's last record. The same mark as
at the previous charged loss means nothing was committed in between: ``lost.count`` grows; any
other mark starts again at 1. The taker parks the workflow once the count reaches its
``quarantine_after`` (default 1: at the first attributed stall or death;
``QuarantineWorkflow``); ``LiftQuarantine`` makes it ``running`` and ownerless again, for any
live engine to take. Costs one record write and one cursor step per charged takeover, nothing
per step.

On one machine a stall note is a file (``engines/<id>.stall``, removed once the engine
heartbeats again, with a spare in memory if the data directory refuses it); on PostgreSQL it
is a row of the store (``_blame.stall_note_key``), which takers on every host read.
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
from ._feed import feed_entry
from ._flow import fill_free_slots, queue_first, vacate
from ._keys import NO_ENGINE, TERMINAL, by_engine_key, fence, op_seq, pack_u64, run_prefix
from ._lifts import note_lift
from ._reads import last_rows, prefix_end
from ._state import TxnState
from ._writes import set_visibility

__all__ = ["QuarantineWorkflow", "LiftQuarantine", "LOOK_BACK", "note_lost_owner", "quarantine_workflow", "lift_quarantine", "describe_reason"]

QUARANTINED: Final = "quarantined"
LOOK_BACK: Final = 1
"""Op records read back from the end of the log: the last one is the progress mark."""
_WORKFLOW_CODE: Final = "workflow code"


class QuarantineWorkflow(NamedTuple):
    """Park ``wid`` (held by the committing engine at ``epoch``, run ``run_id``): status
    ``quarantined``, claim released, nothing driven until ``LiftQuarantine``."""

    wid: str
    epoch: int
    run_id: str


class LiftQuarantine(NamedTuple):
    """``quarantined`` -> ``running`` with no holder and the lost count reset (any engine); a
    workflow under flow control goes ``pending`` at the head of its group's queue instead.
    The lift stays in the record (``lifted``): when, ``by`` whom, ``reason``."""

    wid: str
    by: str | None = None
    reason: str | None = None


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


def note_lost_owner(state: TxnState, wid: str, record: dict[str, Any], blame: dict[str, Any] | None, *, lease: float | None = None) -> dict[str, Any] | None:
    """In the takeover transaction of ``wid`` from an owner that was lost holding it: charge
    the loss to ``wid`` if ``blame`` (the lost engine's death record or stall note) names it
    and its run, update and write ``record["lost"]`` (``count``, ``mark``, ``reason``) and
    return it; None, and nothing written, for a loss that names nobody or another workflow:
    an owner killed from outside, a lost host, a dropped connection is nobody's doing.
    ``lease`` is the takeover's lease-clock time."""
    if blame is None or blame.get("wid") != wid or blame.get("run_id") != record["run_id"]:
        return None
    txn, dbs = state.txn, state.dbs
    prefix = run_prefix(wid, record["run_id"])
    tail = last_rows(txn, dbs.ops, prefix, prefix_end(prefix), LOOK_BACK)  # the newest first
    mark = [record["run_id"], op_seq(tail[0][0]), zlib.crc32(tail[0][1])] if tail else [record["run_id"], -1, 0]
    previous: dict[str, Any] = record.get("lost") or {}
    count = previous.get("count", 0) + 1 if previous.get("mark") == mark else 1
    reason = {"seq": blame.get("seq"), "kind": blame.get("kind"), "name": blame.get("name")}
    lost: dict[str, Any] = {"count": count, "mark": mark, "reason": reason, "at": state.now}
    if lease is not None:
        lost["lease_at"] = lease
    record["lost"] = lost
    txn.put(wid.encode(), pack_record(record), db=dbs.workflows)
    return lost


def describe_reason(reason: dict[str, Any] | None) -> str:
    if not reason:
        return "unknown"
    if reason.get("kind") == _WORKFLOW_CODE:
        return _WORKFLOW_CODE if reason.get("seq") is None else f"{_WORKFLOW_CODE} at op #{reason['seq']}"
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
    note_lift(record, lost, state.now, intent.by, intent.reason)
    if "flow" in record and not record.get("slot"):  # it gave its slot up when parked
        queue_first(state, wid, record)
        _touch(state, wid, record, old)
        fill_free_slots(state, record["flow"])
        return {"status": "pending", "lost": lost}
    record["status"] = "running"
    state.txn.put(by_engine_key(NO_ENGINE, wid), b"", db=state.dbs.by_engine)
    _touch(state, wid, record, old)
    return {"status": "running", "lost": lost}
