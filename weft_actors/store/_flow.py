"""Flow control of workflow starts: at most ``concurrency`` running workflows per group.

A group is a workflow type, or a type and a key computed from a start's arguments
(``@workflow(concurrency=2, concurrency_key=...)``). Its running count and its queue live in
``meta``, so every check and every change rides in the transaction of the start or ending
that causes it: two shards can never both take a group's last slot, and a slot freed by an
ending goes to the head of the queue in that ending's own commit.

A workflow that holds a slot carries ``slot: True`` in its record until it ends; one that
waits is ``pending`` with ``queued`` set to its queue key. The queue is ordered by priority
(higher first), then by arrival. A promoted workflow holds its slot at once and becomes a
due delayed start (its ``START_SEQ`` timer at the promotion time): the engine that promoted
it fires it straight after the commit if it can run the type (``TxnState.promoted``), and
any engine's maintenance pass does otherwise, so a crash between the two loses nothing.

A slot is held through continue-as-new (the chain is one workflow); it is freed by any
terminal status, however it is reached, and by quarantine (``vacate``): a parked workflow must
not stall its group until an operator acts. Lifting the quarantine queues it again ahead of
every start waiting in its group (``queue_first``), and a free slot goes to it at once.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from .._checks import MAX_PRIORITY
from ..codec import pack_record, unpack_record
from ._intents import Flow
from ._keys import START_SEQ, pack_u64, timer_key, unpack_u64
from ._state import TxnState
from ._writes import set_visibility

__all__ = [
    "Flow",
    "RUNNING_PREFIX",
    "WAITING_PREFIX",
    "QUEUE_PREFIX",
    "flow_group",
    "split_group",
    "admit",
    "release",
    "vacate",
    "queue_first",
    "fill_free_slots",
    "queue_position",
    "running_in",
    "record_flow",
    "flow_totals",
]

RUNNING_PREFIX: Final = b"flow/running/"
"""``meta`` keys ``flow/running/ || group`` -> the slots taken in the group (u64)."""
WAITING_PREFIX: Final = b"flow/waiting/"
"""``meta`` keys ``flow/waiting/ || group`` -> the entries of the group's queue (u64), kept with
them, so that ``/metrics`` reads a count per group, never the queue."""
QUEUE_PREFIX: Final = b"flow/queue/"
"""``meta`` keys ``flow/queue/ || len(group) u16 || group || 127 - priority (1) || seq (8)`` ->
the waiting workflow's id."""
_SEQ_KEY: Final = b"flow/seq"
_U16: Final = struct.Struct(">H")
_HEAD: Final = bytes((0,)) + pack_u64(0)
"""What a lifted workflow's queue key has after its group (priority byte 0, seq 0), then its
own ``2**64 - 1 - seq``: it sorts before every start's entry (whose seq is at least 1) at any
priority, and before the workflows lifted earlier."""
_U64_MAX: Final = (1 << 64) - 1


def flow_group(wf_type: str, key: str | None) -> bytes:
    """``len(type) u16 || type || key``: a type's whole group has the empty key."""
    raw = wf_type.encode()
    return _U16.pack(len(raw)) + raw + (key or "").encode()


def split_group(group: bytes) -> tuple[str, str]:
    """``(type, key)`` of a group; raises on anything else."""
    (length,) = _U16.unpack_from(group)
    if len(group) < 2 + length:
        raise ValueError("truncated flow group")
    return group[2 : 2 + length].decode(), group[2 + length :].decode()


def _queue_prefix(group: bytes) -> bytes:
    return QUEUE_PREFIX + _U16.pack(len(group)) + group


def running_in(state_txn: Any, meta: Any, group: bytes) -> int:
    stored = state_txn.get(RUNNING_PREFIX + group, db=meta)
    return 0 if stored is None else unpack_u64(stored)[0]


def _set_running(state: TxnState, group: bytes, running: int) -> None:
    _set_count(state, RUNNING_PREFIX + group, running)


def _set_count(state: TxnState, key: bytes, count: int) -> None:
    if count > 0:
        state.txn.put(key, pack_u64(count), db=state.dbs.meta)
    else:
        state.txn.delete(key, db=state.dbs.meta)


def _add_waiting(state: TxnState, group: bytes, delta: int) -> None:
    key = WAITING_PREFIX + group
    stored = state.txn.get(key, db=state.dbs.meta)
    _set_count(state, key, (0 if stored is None else unpack_u64(stored)[0]) + delta)


def record_flow(flow: Flow) -> dict[str, Any]:
    """What a workflow record keeps of its flow control (``flow``)."""
    return {"group": flow.group, "concurrency": flow.concurrency, "priority": flow.priority}


def admit(state: TxnState, wid: str, record: dict[str, Any]) -> bool:
    """Take a slot of ``record``'s group (``slot``: True) and say so, or queue it (``queued``)
    when ``concurrency`` run already. A start never overtakes the queue: slots free while
    others wait (``concurrency`` was raised) go to those first. The caller writes the record."""
    flow = record["flow"]
    group = flow["group"]
    running = running_in(state.txn, state.dbs.meta, group)
    room = flow["concurrency"] - running
    promoted = _promote(state, group, room) if room > 0 else 0
    if room > promoted:
        _set_running(state, group, running + promoted + 1)
        record["slot"] = True
        return True
    if promoted:
        _set_running(state, group, running + promoted)
    record["queued"] = _enqueue(state, group, flow["priority"], wid)
    return False


def _enqueue(state: TxnState, group: bytes, priority: int, wid: str) -> bytes:
    key = _queue_prefix(group) + bytes((MAX_PRIORITY - priority,)) + pack_u64(_next_seq(state))
    _put_entry(state, group, key, wid)
    return key


def _next_seq(state: TxnState) -> int:
    txn, meta = state.txn, state.dbs.meta
    stored = txn.get(_SEQ_KEY, db=meta)
    seq = (0 if stored is None else unpack_u64(stored)[0]) + 1
    txn.put(_SEQ_KEY, pack_u64(seq), db=meta)
    return seq


def _put_entry(state: TxnState, group: bytes, key: bytes, wid: str) -> None:
    state.txn.put(key, wid.encode(), db=state.dbs.meta)
    _add_waiting(state, group, 1)


def release(state: TxnState, record: dict[str, Any]) -> None:
    """``record`` reached a terminal status: it leaves the queue, or frees its slot, which the
    head of the queue takes in this same transaction."""
    flow = record["flow"]
    group = flow["group"]
    queued = record.get("queued")
    if queued is not None and state.txn.delete(queued, db=state.dbs.meta):
        _add_waiting(state, group, -1)
    if not record.get("slot"):
        return
    _free_slot(state, flow)


def vacate(state: TxnState, record: dict[str, Any]) -> None:
    """``record`` is being quarantined: the slot it holds (if any) goes to the head of its
    group's queue in this transaction, and it holds none until it is lifted (``queue_first``).
    The caller writes the record."""
    if record.pop("slot", None):
        _free_slot(state, record["flow"])


def _free_slot(state: TxnState, flow: dict[str, Any]) -> None:
    group = flow["group"]
    running = max(0, running_in(state.txn, state.dbs.meta, group) - 1)
    running += _promote(state, group, flow["concurrency"] - running)
    _set_running(state, group, running)


def queue_first(state: TxnState, wid: str, record: dict[str, Any]) -> None:
    """A lifted quarantine (``record``, holding no slot): ``pending`` at the head of its
    group's queue, ahead of every start waiting there (it had run before them). The caller
    writes the record, then calls ``fill_free_slots``, which promotes it if a slot is free."""
    group = record["flow"]["group"]
    key = _queue_prefix(group) + _HEAD + pack_u64(_U64_MAX - _next_seq(state))
    _put_entry(state, group, key, wid)
    record["status"] = "pending"
    record["queued"] = key


def fill_free_slots(state: TxnState, flow: dict[str, Any]) -> None:
    """Give the free slots of ``flow``'s group, if any, to the head of its queue."""
    group = flow["group"]
    running = running_in(state.txn, state.dbs.meta, group)
    promoted = _promote(state, group, flow["concurrency"] - running)
    if promoted:
        _set_running(state, group, running + promoted)


def _promote(state: TxnState, group: bytes, room: int) -> int:
    """Give up to ``room`` free slots to the head of ``group``'s queue; how many were given."""
    if room <= 0:
        return 0
    txn, dbs = state.txn, state.dbs
    prefix = _queue_prefix(group)
    cursor = txn.cursor(db=dbs.meta)
    given = taken = 0
    while given < room and cursor.set_range(prefix) and cursor.key().startswith(prefix):
        key, wid = bytes(cursor.key()), bytes(cursor.value()).decode()
        cursor.delete()
        taken += 1
        raw = txn.get(wid.encode(), db=dbs.workflows)
        if raw is None:
            continue
        record = unpack_record(raw)
        if record["status"] != "pending" or record.get("queued") != key:
            continue  # a stale entry: that workflow left the queue another way
        old = dict(record)
        del record["queued"]
        record["slot"] = True
        record["start_at"] = state.now
        record["updated"] = state.now
        txn.put(timer_key(state.now, wid, START_SEQ), pack_record({"kind": "start", "run_id": record["run_id"]}), db=dbs.timers)
        txn.put(wid.encode(), pack_record(record), db=dbs.workflows)
        set_visibility(state, record, wid, old)
        state.promote(wid, record["run_id"], record["type"])
        given += 1
    if taken:
        _add_waiting(state, group, -taken)
    return given


def queue_position(txn: Any, meta: Any, queued: bytes) -> int:
    """1 for the head of the queue: the entries before ``queued`` in its group, plus one.
    A scan of those entries: describe is no hot path, and queues are read in order anyway."""
    (length,) = _U16.unpack_from(queued, len(QUEUE_PREFIX))
    prefix = queued[: len(QUEUE_PREFIX) + 2 + length]
    cursor = txn.cursor(db=meta)
    position = 1
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if key >= queued or not key.startswith(prefix):
                break
            position += 1
    return position


def flow_totals(txn: Any, meta: Any) -> dict[str, dict[str, int]]:
    """``{type: {"running": slots taken, "queued": starts waiting}}`` over every group of each
    type with any: one entry per group read, never a queue."""
    totals: dict[str, dict[str, int]] = {}
    for prefix, field in ((RUNNING_PREFIX, "running"), (WAITING_PREFIX, "queued")):
        cursor = txn.cursor(db=meta)
        if not cursor.set_range(prefix):
            continue
        for key, value in cursor:
            if not key.startswith(prefix):
                break
            wf_type, _ = split_group(key[len(prefix):])
            entry = totals.setdefault(wf_type, {"running": 0, "queued": 0})
            entry[field] += unpack_u64(value)[0]
    return totals
