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
``_Reader``, which reports what it cannot read (``unreadable_record``: keyspace and key;
``unreadable_keyspace``: LMDB or PostgreSQL itself failed part-way) and leaves it out of the
checks; a check that still fails on what it did read is reported as ``check_failed`` and the
others go on.

Both backends are checked by this same code: a ``PgStore``'s transactions are LMDB-shaped
(``_pg._txn``) and its ``dbs`` name tables where LMDB's name handles.
"""

from __future__ import annotations

import struct
from collections import Counter, defaultdict
from typing import Any, Callable, Iterator, NamedTuple, cast

import lmdb

from .._clock import Clock, SystemClock
from ..codec import unpack_record
from ._env import Databases
from ._flow import QUEUE_PREFIX, RUNNING_PREFIX, WAITING_PREFIX
from ._keys import (
    COUNT_PREFIX,
    NO_ENGINE,
    STATUS_CODES,
    TERMINAL,
    expiring_key,
    group_length,
    split_holder,
    split_timer_key,
    split_visibility_group,
    unpack_u64,
    visibility_key,
    visibility_value,
)

__all__ = ["Problem", "check_environment", "check_counts", "check_flow", "check_store"]


class Problem(NamedTuple):
    kind: str
    workflow_id: str | None
    detail: str

    def __str__(self) -> str:
        where = f" [{self.workflow_id}]" if self.workflow_id is not None else ""
        return f"{self.kind}{where}: {self.detail}"


def _split_op_key(key: bytes) -> tuple[str, str, int]:
    (length,) = struct.unpack_from(">H", key)
    if len(key) != 22 + length:
        raise ValueError(f"an op key of {len(key)} bytes for a workflow id of {length}")
    wid = key[2 : 2 + length].decode()
    run = key[2 + length : 18 + length].hex()
    (seq,) = struct.unpack_from(">I", key, 18 + length)
    return wid, run, seq


def _split_inbox_key(key: bytes) -> tuple[str, int]:
    (length,) = struct.unpack_from(">H", key)
    return key[2 : 2 + length].decode(), _u64(key[2 + length :])


def _split_request_key(key: bytes) -> tuple[str, str]:
    (length,) = struct.unpack_from(">H", key)
    if len(key) < 2 + length:
        raise ValueError("key shorter than its workflow id")
    return key[2 : 2 + length].decode(), key[2 + length :].decode(errors="replace")


def _split_by_engine_key(key: bytes) -> tuple[bytes, str]:
    if len(key) < 17:
        raise ValueError("key shorter than an engine id and a workflow id")
    return bytes(key[:16]), key[16:].decode()


def _u64(value: bytes) -> int:
    if len(value) != 8:
        raise ValueError(f"{len(value)} bytes where a 64-bit number belongs")
    return unpack_u64(value)[0]


def _feed_stamp(value: bytes) -> int:
    if len(value) < 8:
        raise ValueError(f"a feed entry of {len(value)} bytes")
    return unpack_u64(value[:8])[0]


def _holder(value: bytes) -> tuple[str, int, float]:
    if len(value) != 32:
        raise ValueError(f"{len(value)} bytes where a 32-byte holder belongs")
    return split_holder(value)


def _guess_wid(key: bytes) -> str | None:
    """The workflow id at the start of a length-prefixed key, when it can be read at all."""
    try:
        (length,) = struct.unpack_from(">H", key)
        return key[2 : 2 + length].decode() if len(key) >= 2 + length else None
    except (struct.error, UnicodeDecodeError):
        return None


def _record_of(fields: dict[str, type | tuple[type, ...]]) -> Callable[[bytes], dict[str, Any]]:
    """A decoder that also insists on the fields (and their types) the checks rely on."""

    def decode(value: bytes) -> dict[str, Any]:
        record = unpack_record(value)
        if type(record) is not dict:
            raise ValueError(f"a {type(record).__name__}, not a record")
        for name, kind in fields.items():
            if name not in record:
                raise ValueError(f"field {name!r} is missing")
            if not isinstance(record[name], kind):
                raise ValueError(f"field {name!r} is a {type(record[name]).__name__}")
        return record

    return decode


_NUMBER = (int, float)
_WORKFLOW = _record_of({"status": str, "type": str, "run_id": (str, bytes), "updated": _NUMBER})
_ENGINE = _record_of({"state": str, "expires_at": _NUMBER, "heartbeat": _NUMBER})
_PLAIN = _record_of({})


def _read_errors(txn: Any) -> tuple[type[Exception], ...]:
    """What a failed read raises in ``txn``: LMDB's errors, and for any other transaction (a
    ``PgTxn``) the PostgreSQL driver's too. The driver is an optional extra: imported only
    when a transaction may be its."""
    if isinstance(txn, lmdb.Transaction):
        return (lmdb.Error,)
    try:
        import psycopg
    except ImportError:
        return (lmdb.Error,)
    return (lmdb.Error, psycopg.Error)


def _read_failure(exc: Exception) -> str:
    """What failed, on one line as every problem is (PostgreSQL's messages go on to quote
    the statement on lines of their own)."""
    if isinstance(exc, lmdb.Error):
        return f"LMDB failed while reading it ({exc})"
    first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"PostgreSQL failed while reading it ({first_line})"


class _Reader:
    """Walks keyspaces in one transaction; what cannot be read becomes a problem, not a crash."""

    def __init__(self, txn: lmdb.Transaction[bytes], dbs: Databases) -> None:
        self.txn = txn
        self.dbs = dbs
        self.problems: list[Problem] = []
        self.pending_inbox: dict[str, set[int]] | None = None
        self.read_errors = _read_errors(txn)

    def raw(self, name: str, values: bool = True) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` of keyspace ``name`` (value ``b""`` without ``values``)."""
        try:
            cursor = self.txn.cursor(db=getattr(self.dbs, name))
            if values:
                for key, value in cursor:
                    yield key, value
            else:
                for key in cursor.iternext(values=False):
                    yield key, b""
        except self.read_errors as exc:
            self.problems.append(
                Problem("unreadable_keyspace", None, f"{name}: {_read_failure(exc)}; the rest of it was not checked")
            )

    def entries(
        self,
        name: str,
        key: Callable[[bytes], Any] | None = None,
        value: Callable[[bytes], Any] | None = None,
        wid: Callable[[bytes], str | None] = _guess_wid,
        values: bool = True,
    ) -> Iterator[tuple[Any, Any]]:
        """``(decoded key, decoded value)`` of each entry both decoders accept; the others
        are reported with their keyspace and key."""
        for raw_key, raw_value in self.raw(name, values):
            try:
                decoded_key = raw_key if key is None else key(raw_key)
                decoded_value = raw_value if value is None else value(raw_value)
            except Exception as exc:
                self.problems.append(
                    Problem("unreadable_record", wid(raw_key), f"{name} key {bytes(raw_key)!r}: {type(exc).__name__}: {exc}")
                )
                continue
            yield decoded_key, decoded_value


def _workflow_id(key: bytes) -> str:
    return key.decode()


def _readable_key(key: bytes) -> str | None:
    try:
        return key.decode()
    except UnicodeDecodeError:
        return None


def _valid_workflow(value: bytes) -> dict[str, Any]:
    record = _WORKFLOW(value)
    if record["status"] not in STATUS_CODES:
        raise ValueError(f"unknown status {record['status']!r}")
    return record


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
    reader = _Reader(txn, dbs)
    records = dict(reader.entries("workflows", _workflow_id, _valid_workflow, wid=_readable_key))
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


def _check_ops_and_inbox(reader: _Reader) -> list[Problem]:
    problems: list[Problem] = []
    ordinals: dict[tuple[str, str], Counter[int]] = defaultdict(Counter)
    consumed: dict[str, Counter[int]] = defaultdict(Counter)
    for (wid, run, seq), record in reader.entries("ops", _split_op_key, _PLAIN):
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


def _check_claims(reader: _Reader, records: dict[str, dict[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    epochs = dict(reader.entries("claim_epoch", _workflow_id, _u64, wid=_readable_key))
    holders = dict(reader.entries("claim_holder", _workflow_id, _holder_entry, wid=_readable_key))
    indexed: dict[str, bytes] = {}
    ownerless: set[str] = set()
    by_engine = reader.entries("by_engine", _split_by_engine_key, wid=lambda key: _readable_key(key[16:]), values=False)
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
        if record is None or record["status"] != "running":
            problems.append(Problem("ownerless_not_running", wid, "indexed as ownerless but not running"))
    return problems


def _holder_entry(value: bytes) -> tuple[bytes, tuple[str, int, float]]:
    return bytes(value), _holder(value)


def _check_visibility(reader: _Reader, records: dict[str, dict[str, Any]]) -> list[Problem]:
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


def _pending_inbox(reader: _Reader) -> dict[str, set[int]]:
    """Pending inbox sequence numbers per workflow (read once: two checks use them)."""
    if reader.pending_inbox is None:
        pending: dict[str, set[int]] = defaultdict(set)
        for (wid, seq), _ in reader.entries("inbox", _split_inbox_key, values=False):
            pending[wid].add(seq)
        reader.pending_inbox = pending
    return reader.pending_inbox


def _check_timers_and_requests(reader: _Reader, records: dict[str, dict[str, Any]]) -> list[Problem]:
    problems: list[Problem] = []
    for (fire_at, seq, wid), timer in reader.entries("timers", split_timer_key, _PLAIN, wid=_timer_wid):
        record = records.get(wid)
        if record is None or record["status"] in TERMINAL:
            status = "missing" if record is None else record["status"]
            problems.append(Problem("timer_stale", wid, f"{timer.get('kind')} timer #{seq} at {fire_at:.3f} of a workflow that is {status}"))
        elif timer.get("run_id") not in (None, record["run_id"]):
            problems.append(Problem("timer_stale", wid, f"{timer.get('kind')} timer #{seq} of run {timer.get('run_id')}, not the current run"))
    pending = _pending_inbox(reader)
    for (wid, request_id), entry in reader.entries("requests", _split_request_key, _PLAIN):
        record = records.get(wid)
        if record is None or record["status"] in TERMINAL or entry.get("state") != "pending":
            continue
        if entry.get("inbox") not in pending.get(wid, ()):
            problems.append(Problem("request_unanswered", wid, f"update {request_id!r} is pending, but its inbox message #{entry.get('inbox')} is gone"))
    return problems


def _check_feed(reader: _Reader, now: float, feed_retention: float, lease_now: float | None, lease_clock: Clock | None = None) -> list[Problem]:
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
    for _, stamp in reader.entries("feed", value=_feed_stamp, wid=lambda key: None):
        age = now - stamp / 1000.0
        # Slack: pruning runs on an interval, and entries above a lagging cursor must stay.
        if age > 2 * feed_retention + 3600:
            problems.append(Problem("feed_beyond_retention", None, f"oldest feed entry is {age:.0f} s old"))
        break  # the oldest entry only
    return problems


def check_flow(txn: lmdb.Transaction[bytes], dbs: Databases) -> list[Problem]:
    """Flow control (``_flow``): each group's running count is the unfinished workflows that
    hold its slots, never more than its ``concurrency``; every queued workflow has its queue
    entry and every entry its queued workflow; a group with nobody running has no queue
    (its head would never start). Over the whole store only, as ``check_counts``: a group's
    count is about every workflow in it."""
    reader = _Reader(txn, dbs)
    records = dict(reader.entries("workflows", _workflow_id, _valid_workflow, wid=_readable_key))
    problems: list[Problem] = []
    held: Counter[bytes] = Counter()
    limit: dict[bytes, int] = {}
    queued: dict[bytes, str] = {}
    for wid, record in records.items():
        flow = record.get("flow")
        if flow is None or record["status"] in TERMINAL:
            continue
        group = bytes(flow["group"])
        limit[group] = max(limit.get(group, 0), flow["concurrency"])
        if record.get("slot"):
            held[group] += 1
        if record.get("queued") is not None:
            if record["status"] != "pending":
                problems.append(Problem("flow_queued_not_pending", wid, f"queued yet {record['status']}"))
            queued[bytes(record["queued"])] = wid
    running: dict[bytes, int] = {}
    counted: dict[bytes, int] = {}
    waiting: Counter[bytes] = Counter()
    entries: Counter[bytes] = Counter()
    for key, value in reader.raw("meta"):
        key = bytes(key)
        if key.startswith(RUNNING_PREFIX):
            running[key[len(RUNNING_PREFIX):]] = _u64(value)
        elif key.startswith(WAITING_PREFIX):
            counted[key[len(WAITING_PREFIX):]] = _u64(value)
        elif key.startswith(QUEUE_PREFIX):
            wid = bytes(value).decode(errors="replace")
            (length,) = struct.unpack_from(">H", key, len(QUEUE_PREFIX))
            group = key[len(QUEUE_PREFIX) + 2 : len(QUEUE_PREFIX) + 2 + length]
            entries[group] += 1
            if queued.pop(key, None) != wid:
                problems.append(Problem("flow_queue_orphan", wid, "a queue entry of a workflow that does not wait in it"))
                continue
            waiting[group] += 1
    for key, wid in queued.items():
        problems.append(Problem("flow_queued_lost", wid, "queued, but its queue entry is gone: it would never start"))
    for group in sorted(held.keys() | running.keys() | entries.keys() | counted.keys()):
        name = repr(group)
        if entries.get(group, 0) != counted.get(group, 0):
            problems.append(Problem("flow_count_mismatch", None, f"group {name}: counted {counted.get(group, 0)} queued, its queue holds {entries.get(group, 0)}"))
        if held.get(group, 0) != running.get(group, 0):
            problems.append(Problem("flow_count_mismatch", None, f"group {name}: counted {running.get(group, 0)} running, {held.get(group, 0)} hold a slot"))
        if held.get(group, 0) > limit.get(group, 0):
            problems.append(Problem("flow_over_limit", None, f"group {name}: {held[group]} hold a slot, concurrency {limit.get(group, 0)}"))
        if waiting.get(group) and not held.get(group):
            problems.append(Problem("flow_queue_stuck", None, f"group {name}: {waiting[group]} wait and none runs"))
    return problems  # what it could not read, check_environment reports


def check_counts(txn: lmdb.Transaction[bytes], dbs: Databases) -> list[Problem]:
    """The workflow counts (``meta``, ``count/`` keys) against the visibility index, group by
    group. Only meaningful over the whole store (a view of some workflows' entries would
    disagree with the whole store's counts)."""
    reader = _Reader(txn, dbs)
    indexed: Counter[bytes] = Counter()
    for key, _ in reader.raw("visibility", values=False):
        try:
            indexed[bytes(key[: group_length(key)])] += 1
        except (struct.error, IndexError):
            continue  # an unreadable visibility key: ``_check_visibility`` reports it
    stored: dict[bytes, int] = {}
    for key, value in reader.raw("meta"):
        if bytes(key).startswith(COUNT_PREFIX):
            try:
                stored[bytes(key[len(COUNT_PREFIX):])] = _u64(value)
            except ValueError as exc:
                reader.problems.append(Problem("unreadable_record", None, f"meta key {bytes(key)!r}: {exc}"))
    problems = []
    for group in sorted(indexed.keys() | stored.keys()):
        if indexed.get(group, 0) != stored.get(group, 0):
            try:
                status, wf_type = split_visibility_group(group)
                name = f"{status} {wf_type!r}"
            except (ValueError, KeyError, IndexError, UnicodeDecodeError, struct.error):
                name = repr(group)
            problems.append(Problem("counts_mismatch", None, f"{name}: counted {stored.get(group, 0)}, the visibility index holds {indexed.get(group, 0)}"))
    return reader.problems + problems


def check_store(location: str, now: float, feed_retention: float = 3600.0) -> list[Problem]:
    """Open the store at ``location`` (a directory, read-only; or a ``postgresql://`` URL) and
    check it in one read transaction (safe beside running engines too)."""
    from ._open import open_store
    from ._store import LmdbStore

    store = cast(LmdbStore, open_store(location, readonly=True))  # or a PgStore: the same reads
    try:
        with store.env.begin() as txn:
            problems = check_environment(txn, store.dbs, now, feed_retention, lease_clock=store.clock)
            for whole_store_check in (check_counts, check_flow):
                try:
                    problems += whole_store_check(txn, store.dbs)
                except Exception as exc:  # as check_environment: report it, never crash
                    problems.append(Problem("check_failed", None, f"{whole_store_check.__name__}: {type(exc).__name__}: {exc}"))
            return problems
    finally:
        store.close()
