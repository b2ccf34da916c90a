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
- no feed entry is older than the feed retention (plus slack) on a store with no live engine;
- flow control: each group's running count is the workflows holding its slots, within its
  concurrency; queued workflows and queue entries match; no queue waits behind nobody;
- the workflow counts per (status, type) (in ``meta``, what ``/metrics`` reports) are those of
  the visibility index (checked by ``check_store``, over the whole store only).

A corrupted store must not crash the checker: every key and record is decoded through
``Reader``, which reports what it cannot read (``unreadable_record``: keyspace and key;
``unreadable_keyspace``: LMDB or PostgreSQL itself failed part-way) and leaves it out of the
checks; a check that still fails on what it did read is reported as ``check_failed`` and the
others go on.

Both backends are checked by this same code: a ``PgStore``'s transactions are LMDB-shaped
(``_pg._txn``) and its ``dbs`` name tables where LMDB's name handles.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Callable, cast

import lmdb

from .._clock import Clock, SystemClock
from ..codec import unpack_record
from ._databases import Databases
from ._check_read import (
    ENGINE_FIELDS,
    Problem,
    Reader,
    decode_holder,
    decode_wid,
    feed_stamp,
    readable_key,
    split_by_engine_key,
    split_inbox_key,
    split_op_key,
    split_request_key,
    record_of,
    u64,
    workflow_decoder,
)
from ._check_totals import check_counts, check_flow
from ._check_memo import check_memo
from ._stuck import DRIVEN
from ._keys import NO_ENGINE, TERMINAL, expiring_key, split_timer_key, visibility_key, visibility_value

__all__ = ["Problem", "check_environment", "check_counts", "check_flow", "check_store"]


def _unpack(value: bytes) -> Any:
    # ``unpack_record`` is looked up in this module at each call: the decoder stays this
    # module's to replace (the simulator's incremental check substitutes a cached one).
    return unpack_record(value)


_valid_workflow = workflow_decoder(_unpack)
_ENGINE = record_of(ENGINE_FIELDS, _unpack)
_PLAIN = record_of({}, _unpack)


def check_environment(
    txn: lmdb.Transaction[bytes],
    dbs: Databases,
    now: float,
    feed_retention: float,
    lease_now: float | None = None,
    lease_clock: Clock | None = None,
) -> list[Problem]:
    """Every invariant but the whole-store ones (``check_counts``, ``check_flow``), in one
    read transaction. ``lease_clock``: the store's, whose reading judges the engine records
    kept on it (a ``PgStore``'s is the server's); ``None``: this host's real one."""
    reader = Reader(txn, dbs)
    records = dict(reader.entries("workflows", decode_wid, _valid_workflow, wid=readable_key))
    problems: list[Problem] = []
    checks: list[tuple[Callable[..., list[Problem]], tuple[Any, ...]]] = [
        (_check_ops_and_inbox, (reader,)),
        (_check_claims, (reader, records)),
        (_check_visibility, (reader, records)),
        (_check_timers_and_requests, (reader, records)),
        (_check_feed, (reader, now, feed_retention, lease_now, lease_clock)),
    ]
    for check, args in checks:
        try:
            problems += check(*args)
        except Exception as exc:  # a corruption no decoder foresaw: report it, check the rest
            problems.append(Problem("check_failed", None, f"{check.__name__.lstrip('_')}: {type(exc).__name__}: {exc}"))
    return reader.problems + problems


def _check_ops_and_inbox(reader: Reader) -> list[Problem]:
    problems: list[Problem] = []
    ordinals: dict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    consumed: dict[str, Counter[int]] = defaultdict(Counter)
    for (wid, run, seq), record in reader.entries("ops", split_op_key, _PLAIN):
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
    pending = _pending_inbox(reader)
    for wid, counts in consumed.items():
        for seq, count in counts.items():
            if count > 1:
                problems.append(Problem("message_consumed_twice", wid, f"inbox #{seq} consumed by {count} ops"))
            if seq in pending.get(wid, ()):
                problems.append(Problem("message_consumed_but_pending", wid, f"inbox #{seq} is consumed yet still pending"))
    return problems


def _check_claims(reader: Reader, records: dict[str, dict[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    epochs = dict(reader.entries("claim_epoch", decode_wid, u64, wid=readable_key))
    holders = dict(reader.entries("claim_holder", decode_wid, _holder_entry, wid=readable_key))
    indexed: dict[str, bytes] = {}
    ownerless: set[str] = set()
    by_engine = reader.entries("by_engine", split_by_engine_key, wid=lambda key: readable_key(key[16:]), values=False)
    for (engine_raw, wid), _ in by_engine:
        if engine_raw == NO_ENGINE:
            ownerless.add(wid)
        elif wid in indexed:
            problems.append(Problem("by_engine_duplicate", wid, "indexed under two engines"))
        else:
            indexed[wid] = engine_raw
    for wid, epoch in epochs.items():
        if epoch < 1:
            problems.append(Problem("epoch_not_positive", wid, f"claim_epoch is {epoch}"))
    engines = {bytes(key) for key, _ in reader.raw("engines", values=False)}
    for wid, (holder, (engine_id, epoch, _)) in holders.items():
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
        if held is None or held[0][:16] != engine_raw:
            problems.append(Problem("by_engine_stale", wid, f"indexed under {engine_raw.hex()} without that holder"))
    for wid, record in records.items():
        if record["status"] == "running" and wid not in holders and wid not in ownerless:
            problems.append(Problem("running_unreclaimable", wid, "running, no holder, not indexed as ownerless"))
    for wid in ownerless:
        record = records.get(wid)
        if record is None or record["status"] not in DRIVEN:
            problems.append(Problem("ownerless_not_running", wid, "indexed as ownerless but not running"))
    return problems


def _holder_entry(value: bytes) -> tuple[bytes, tuple[str, int, float]]:
    return bytes(value), decode_holder(value)


def _check_visibility(reader: Reader, records: dict[str, dict[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    entries = {bytes(key): bytes(value) for key, value in reader.raw("visibility")}
    expected = set()
    expiring = {bytes(key) for key, _ in reader.raw("expiring", values=False)}
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


def _timer_wid(key: bytes) -> str | None:
    try:
        return key[12:].decode()
    except UnicodeDecodeError:
        return None


def _pending_inbox(reader: Reader) -> dict[str, set[int]]:
    """Pending inbox sequence numbers per workflow (read once: two checks use them)."""
    if reader.pending_inbox is None:
        pending: dict[str, set[int]] = defaultdict(set)
        for (wid, seq), _ in reader.entries("inbox", split_inbox_key, values=False):
            pending[wid].add(seq)
        reader.pending_inbox = pending
    return reader.pending_inbox


def _check_timers_and_requests(reader: Reader, records: dict[str, dict[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    for (fire_at, seq, wid), timer in reader.entries("timers", split_timer_key, _PLAIN, wid=_timer_wid):
        record = records.get(wid)
        if record is None or record["status"] in TERMINAL:
            status = "missing" if record is None else record["status"]
            problems.append(Problem("timer_stale", wid, f"{timer.get('kind')} timer #{seq} at {fire_at:.3f} of a workflow that is {status}"))
        elif timer.get("run_id") not in (None, record["run_id"]):
            problems.append(Problem("timer_stale", wid, f"{timer.get('kind')} timer #{seq} of run {timer.get('run_id')}, not the current run"))
    pending = _pending_inbox(reader)
    for (wid, request_id), entry in reader.entries("requests", split_request_key, _PLAIN):
        record = records.get(wid)
        if record is None or record["status"] in TERMINAL or entry.get("state") != "pending":
            continue
        if entry.get("inbox") not in pending.get(wid, ()):
            problems.append(Problem("request_unanswered", wid, f"update {request_id!r} is pending, but its inbox message #{entry.get('inbox')} is gone"))
    return problems


def _check_feed(reader: Reader, now: float, feed_retention: float, lease_now: float | None, lease_clock: Clock | None = None) -> list[Problem]:
    """``lease_now``: the time engine leases are judged by; ``None``: the reading of
    ``lease_clock`` (this host's real clock by default) for records kept on that clock (their
    ``lease_clock``), ``now`` for others (a fake clock's)."""
    live = False
    real = lease_clock or SystemClock()
    for _, record in reader.entries("engines", value=_ENGINE, wid=lambda key: None):
        if lease_now is not None:
            judged = lease_now
        else:
            judged = real.lease_now() if record.get("lease_clock") == real.lease_clock else now
        if record["state"] == "live" and record["expires_at"] + 2 * record["heartbeat"] >= judged:
            live = True
    if live:
        return []  # a running engine prunes on its own schedule
    problems = []
    for _, stamp in reader.entries("feed", value=feed_stamp, wid=lambda key: None):
        age = now - stamp / 1000.0
        # Slack: pruning runs on an interval, and entries above a lagging cursor must stay.
        if age > 2 * feed_retention + 3600:
            problems.append(Problem("feed_beyond_retention", None, f"oldest feed entry is {age:.0f} s old"))
        break  # the oldest entry only
    return problems


def check_store(location: str, now: float, feed_retention: float = 3600.0) -> list[Problem]:
    """Open the store at ``location`` (a directory, read-only; or a ``postgresql://`` URL) and
    check it in one read transaction (safe beside running engines too)."""
    from ._open import open_store
    from ._store import LmdbStore

    store = cast(LmdbStore, open_store(location, readonly=True))  # or a PgStore: the same reads
    try:
        with store.env.begin() as txn:
            problems = check_environment(txn, store.dbs, now, feed_retention, lease_clock=store.clock)
            for whole_store_check in (check_counts, check_flow, check_memo):
                try:
                    problems += whole_store_check(txn, store.dbs)
                except Exception as exc:  # as check_environment: report it, never crash
                    problems.append(Problem("check_failed", None, f"{whole_store_check.__name__}: {type(exc).__name__}: {exc}"))
            return problems
    finally:
        store.close()
