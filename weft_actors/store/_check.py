"""The invariant checker: reads a (stopped) store and reports every broken promise.

One read transaction, one pass per keyspace. What it checks and why:

- each run's op outcomes have distinct delivery ordinals (no op outcome committed twice);
- every inbox message is pending or consumed by exactly one op, and no op consumed a
  message that is still pending (exactly-once delivery into the workflow);
- a holder's epoch equals ``claim_epoch`` and epochs are positive; no holder on a
  finished workflow; every holder has its ``by_engine`` entry and every entry its holder;
  a running workflow is held or indexed as ownerless (else no engine would reclaim it);
- each workflow record has exactly its visibility entry (with its ``updated``) and no entry
  lacks a record; a finished workflow whose history is kept has its ``expiring`` entry, and
  no other entry exists there (else the retention prune would miss or mistake it);
- every holder names an engine in the registry (a claim of an engine pruned from it would
  never be reclaimed: the reclaim pass looks for claims of registered engines only);
- every durable timer belongs to the current run of an unfinished workflow (a stale timer
  would wake a run that is gone, and leaks for ever);
- an update still ``pending`` in a running workflow has its inbox message still pending (else
  it was consumed without an answer, and its caller would wait for ever);
- no feed entry is older than the feed retention (plus slack) on a store with no live engine.
"""

from __future__ import annotations

import struct
from collections import Counter, defaultdict
from typing import Any, NamedTuple

import lmdb

from ..codec import unpack_record
from ._env import Databases
from ._keys import NO_ENGINE, TERMINAL, expiring_key, split_holder, split_timer_key, unpack_u64, visibility_key, visibility_value

__all__ = ["Problem", "check_environment", "check_store"]


class Problem(NamedTuple):
    kind: str
    workflow_id: str | None
    detail: str

    def __str__(self) -> str:
        where = f" [{self.workflow_id}]" if self.workflow_id is not None else ""
        return f"{self.kind}{where}: {self.detail}"


def _split_op_key(key: bytes) -> tuple[str, str, int]:
    (length,) = struct.unpack_from(">H", key)
    wid = key[2 : 2 + length].decode()
    run = key[2 + length : 18 + length].hex()
    (seq,) = struct.unpack_from(">I", key, 18 + length)
    return wid, run, seq


def _split_inbox_key(key: bytes) -> tuple[str, int]:
    (length,) = struct.unpack_from(">H", key)
    return key[2 : 2 + length].decode(), unpack_u64(key[2 + length :])[0]


def check_environment(txn: lmdb.Transaction[bytes], dbs: Databases, now: float, feed_retention: float) -> list[Problem]:
    problems: list[Problem] = []
    records = {key.decode(): unpack_record(value) for key, value in txn.cursor(db=dbs.workflows)}
    problems += _check_ops_and_inbox(txn, dbs)
    problems += _check_claims(txn, dbs, records)
    problems += _check_visibility(txn, dbs, records)
    problems += _check_timers_and_requests(txn, dbs, records)
    problems += _check_feed(txn, dbs, now, feed_retention)
    return problems


def _check_ops_and_inbox(txn: lmdb.Transaction[bytes], dbs: Databases) -> list[Problem]:
    problems: list[Problem] = []
    ordinals: dict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    consumed: dict[str, Counter[int]] = defaultdict(Counter)
    for key, value in txn.cursor(db=dbs.ops):
        wid, run, seq = _split_op_key(key)
        record = unpack_record(value)
        if "t" in record:
            ordinals[(wid, run)][record["t"]] += 1
            if "ok" not in record and "err" not in record:
                problems.append(Problem("op_without_outcome", wid, f"run {run} op #{seq} has t but no outcome"))
        if record.get("inbox") is not None:
            consumed[wid][record["inbox"]] += 1
    for (wid, run), counts in ordinals.items():
        for t, count in counts.items():
            if count > 1:
                problems.append(Problem("duplicate_outcome", wid, f"run {run}: {count} outcomes delivered at t={t}"))
    pending: dict[str, set[int]] = defaultdict(set)
    for key in txn.cursor(db=dbs.inbox).iternext(values=False):
        wid, seq = _split_inbox_key(key)
        pending[wid].add(seq)
    for wid, counts in consumed.items():
        for seq, count in counts.items():
            if count > 1:
                problems.append(Problem("message_consumed_twice", wid, f"inbox #{seq} consumed by {count} ops"))
            if seq in pending.get(wid, ()):
                problems.append(Problem("message_consumed_but_pending", wid, f"inbox #{seq} is consumed yet still pending"))
    return problems


def _check_claims(txn: lmdb.Transaction[bytes], dbs: Databases, records: dict[str, dict[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    epochs = {key.decode(): unpack_u64(value)[0] for key, value in txn.cursor(db=dbs.claim_epoch)}
    holders = {key.decode(): value for key, value in txn.cursor(db=dbs.claim_holder)}
    indexed: dict[str, bytes] = {}
    ownerless: set[str] = set()
    for key in txn.cursor(db=dbs.by_engine).iternext(values=False):
        engine_raw, wid = key[:16], key[16:].decode()
        if engine_raw == NO_ENGINE:
            ownerless.add(wid)
        elif wid in indexed:
            problems.append(Problem("by_engine_duplicate", wid, "indexed under two engines"))
        else:
            indexed[wid] = engine_raw
    for wid, epoch in epochs.items():
        if epoch < 1:
            problems.append(Problem("epoch_not_positive", wid, f"claim_epoch is {epoch}"))
    engines = {bytes(key) for key in txn.cursor(db=dbs.engines).iternext(values=False)}
    for wid, holder in holders.items():
        engine_id, epoch, _ = split_holder(holder)
        record = records.get(wid)
        if holder[:16] not in engines:
            problems.append(Problem("holder_engine_unknown", wid, f"held by {engine_id}, which is not in the engine registry"))
        if epoch != epochs.get(wid):
            problems.append(Problem("holder_epoch_mismatch", wid, f"holder epoch {epoch}, claim_epoch {epochs.get(wid)}"))
        if record is None:
            problems.append(Problem("holder_without_workflow", wid, f"held by {engine_id}"))
        elif record["status"] in TERMINAL:
            problems.append(Problem("holder_on_terminal", wid, f"status {record['status']} still held by {engine_id}"))
        if indexed.get(wid) != holder[:16]:
            problems.append(Problem("by_engine_missing", wid, f"holder {engine_id} has no by_engine entry"))
    for wid, engine_raw in indexed.items():
        held = holders.get(wid)
        if held is None or held[:16] != engine_raw:
            problems.append(Problem("by_engine_stale", wid, f"indexed under {engine_raw.hex()} without that holder"))
    for wid, record in records.items():
        if record["status"] == "running" and wid not in holders and wid not in ownerless:
            problems.append(Problem("running_unreclaimable", wid, "running, no holder, not indexed as ownerless"))
    for wid in ownerless:
        record = records.get(wid)
        if record is None or record["status"] != "running":
            problems.append(Problem("ownerless_not_running", wid, "indexed as ownerless but not running"))
    return problems


def _check_visibility(txn: lmdb.Transaction[bytes], dbs: Databases, records: dict[str, dict[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    entries = dict(txn.cursor(db=dbs.visibility))
    expected = set()
    expiring = set(txn.cursor(db=dbs.expiring).iternext(values=False))
    expected_expiring = set()
    for wid, record in records.items():
        key = visibility_key(record["status"], record["type"], wid)
        expected.add(key)
        if entries.get(key) != visibility_value(record["updated"]):
            problems.append(Problem("visibility_missing", wid, f"no {record['status']} entry at its updated time"))
        if record["status"] in TERMINAL and not record.get("history_pruned"):
            due = expiring_key(record["updated"], wid)
            expected_expiring.add(due)
            if due not in expiring:
                problems.append(Problem("expiring_missing", wid, "finished with its history kept, but not indexed for retention"))
    for key in entries.keys() - expected:
        problems.append(Problem("visibility_stale", None, f"entry {key!r} matches no record"))
    for key in expiring - expected_expiring:
        problems.append(Problem("expiring_stale", None, f"entry {key!r} matches no finished record"))
    return problems


def _check_timers_and_requests(txn: lmdb.Transaction[bytes], dbs: Databases, records: dict[str, dict[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    for key, value in txn.cursor(db=dbs.timers):
        fire_at, seq, wid = split_timer_key(key)
        record = records.get(wid)
        timer = unpack_record(value)
        if record is None or record["status"] in TERMINAL:
            status = "missing" if record is None else record["status"]
            problems.append(Problem("timer_stale", wid, f"{timer.get('kind')} timer #{seq} at {fire_at:.3f} of a workflow that is {status}"))
        elif timer.get("run_id") not in (None, record["run_id"]):
            problems.append(Problem("timer_stale", wid, f"{timer.get('kind')} timer #{seq} of run {timer.get('run_id')}, not the current run"))
    pending: dict[str, set[int]] = defaultdict(set)
    for key in txn.cursor(db=dbs.inbox).iternext(values=False):
        wid, seq = _split_inbox_key(key)
        pending[wid].add(seq)
    for key, value in txn.cursor(db=dbs.requests):
        (length,) = struct.unpack_from(">H", key)
        wid = key[2 : 2 + length].decode()
        entry = unpack_record(value)
        record = records.get(wid)
        if record is None or record["status"] in TERMINAL or entry.get("state") != "pending":
            continue
        if entry.get("inbox") not in pending.get(wid, ()):
            request_id = key[2 + length :].decode(errors="replace")
            problems.append(Problem("request_unanswered", wid, f"update {request_id!r} is pending, but its inbox message #{entry.get('inbox')} is gone"))
    return problems


def _check_feed(txn: lmdb.Transaction[bytes], dbs: Databases, now: float, feed_retention: float) -> list[Problem]:
    live = False
    for _, value in txn.cursor(db=dbs.engines):
        record = unpack_record(value)
        if record.get("state") == "live" and record["expires_at"] + 2 * record["heartbeat"] >= now:
            live = True
    if live:
        return []  # a running engine prunes on its own schedule
    problems = []
    cursor = txn.cursor(db=dbs.feed)
    if cursor.first():
        age = now - unpack_u64(cursor.value())[0] / 1000.0
        # Slack: pruning runs on an interval, and entries above a lagging cursor must stay.
        if age > 2 * feed_retention + 3600:
            problems.append(Problem("feed_beyond_retention", None, f"oldest feed entry is {age:.0f} s old"))
    return problems


def check_store(path: str, now: float, feed_retention: float = 3600.0) -> list[Problem]:
    """Open the store at ``path`` read-only and check it (safe beside running engines too)."""
    from ._store import LmdbStore

    store = LmdbStore(path, readonly=True)
    try:
        with store.env.begin() as txn:
            return check_environment(txn, store.dbs, now, feed_retention)
    finally:
        store.close()
