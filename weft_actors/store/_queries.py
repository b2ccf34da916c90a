"""Named read queries; each takes an open transaction so callers choose the snapshot.

Listing lives in ``_listing``."""

from __future__ import annotations

from typing import Any, NamedTuple

import lmdb

from ..codec import unpack_record
from ._env import Databases
from ._flow import queue_position, running_in, split_group
from ._reads import prefix_rows
from ._keys import DEADLINE_SEQ, START_SEQ, inbox_seq, op_seq, prefixed, run_prefix, timer_key, unpack_u64

__all__ = ["get_workflow", "get_epoch", "load_ops", "load_inbox", "by_engine", "Snapshot", "snapshot", "durable_timers"]


class Snapshot(NamedTuple):
    """What ``describe`` shows of one workflow, read in one transaction."""

    record: dict[str, Any]
    holder: bytes | None
    ops: dict[int, dict[str, Any]]
    inbox: list[tuple[int, dict[str, Any]]]
    epoch: int
    owner: dict[str, Any] | None
    """The holder's engine record (slot, pid, state, ...), if the holder names one."""
    timers: list[dict[str, Any]]
    """Its durable timers (``durable_timers``)."""
    flow: dict[str, Any] | None = None
    """Its flow control (``flow_state``), if its type has any."""


def get_workflow(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str) -> dict[str, Any] | None:
    raw = txn.get(wid.encode(), db=dbs.workflows)
    return None if raw is None else unpack_record(raw)


def get_epoch(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str) -> int:
    raw = txn.get(wid.encode(), db=dbs.claim_epoch)
    return 0 if raw is None else unpack_u64(raw)[0]


def load_ops(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str, run_id: str) -> dict[int, dict[str, Any]]:
    return {op_seq(key): unpack_record(value) for key, value in prefix_rows(txn, dbs.ops, run_prefix(wid, run_id))}


def load_inbox(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str) -> list[tuple[int, dict[str, Any]]]:
    return [(inbox_seq(key), unpack_record(value)) for key, value in prefix_rows(txn, dbs.inbox, prefixed(wid))]


def by_engine(txn: lmdb.Transaction[bytes], dbs: Databases, engine_raw: bytes) -> list[str]:
    return [key[16:].decode() for key, _ in prefix_rows(txn, dbs.by_engine, engine_raw)]


def durable_timers(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str, record: dict[str, Any], ops: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """``{"kind", "seq", "fire_at"}`` of each durable timer of ``wid``, earliest first. The
    timers keyspace is ordered by fire time, not by workflow, so they are found where the
    records name them (a pending op's ``fire_at``/``retry_at``, the record's ``start_at`` and
    ``deadline``) and each is looked up: one point read per timer, never a scan, and only
    timers that exist are listed. ``seq`` is None for a delayed start or a deadline."""
    found: list[dict[str, Any]] = []
    for seq, op in ops.items():
        if "t" in op:
            continue
        for field in ("fire_at", "retry_at"):
            at = op.get(field)
            if isinstance(at, (int, float)):
                stored = txn.get(timer_key(at, wid, seq), db=dbs.timers)
                if stored is not None:
                    found.append({"kind": unpack_record(stored).get("kind"), "seq": seq, "fire_at": at})
    for field, seq, kind in (("start_at", START_SEQ, "start"), ("deadline", DEADLINE_SEQ, "deadline")):
        at = record.get(field)
        if isinstance(at, (int, float)) and txn.get(timer_key(at, wid, seq), db=dbs.timers) is not None:
            found.append({"kind": kind, "seq": None, "fire_at": at})
    found.sort(key=lambda timer: timer["fire_at"])
    return found


def snapshot(txn: lmdb.Transaction[bytes], dbs: Databases, wid: str) -> Snapshot | None:
    """``wid``'s record, holder, current run's op log, inbox, epoch, owner engine record and
    durable timers; None if there is no such workflow."""
    record = get_workflow(txn, dbs, wid)
    if record is None:
        return None
    holder = txn.get(wid.encode(), db=dbs.claim_holder)
    ops = load_ops(txn, dbs, wid, record["run_id"])
    owner = None
    if holder is not None:
        raw = txn.get(bytes(holder[:16]), db=dbs.engines)
        owner = None if raw is None else unpack_record(raw)
    flow = flow_state(txn, dbs, record)
    return Snapshot(record, holder, ops, load_inbox(txn, dbs, wid), get_epoch(txn, dbs, wid), owner, durable_timers(txn, dbs, wid, record, ops), flow)


def flow_state(txn: lmdb.Transaction[bytes], dbs: Databases, record: dict[str, Any]) -> dict[str, Any] | None:
    """``{key, concurrency, priority, running, queued, position}`` of a workflow under flow
    control: ``running`` counts its group's slots taken now, ``position`` is 1 for the next
    to start (None unless ``queued``)."""
    flow = record.get("flow")
    if flow is None:
        return None
    queued = record.get("queued")
    _, key = split_group(flow["group"])
    return {
        "key": key or None,
        "concurrency": flow["concurrency"],
        "priority": flow["priority"],
        "running": running_in(txn, dbs.meta, flow["group"]),
        "queued": queued is not None,
        "position": None if queued is None else queue_position(txn, dbs.meta, queued),
    }
