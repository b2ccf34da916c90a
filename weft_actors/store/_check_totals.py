"""The whole-store checks of the invariant checker (``_check``): the workflow counts and
flow control's slots and queues, which only hold over every workflow of a store, never over a
view of some."""

from __future__ import annotations

import struct
from collections import Counter

import lmdb

from ._databases import Databases
from ._flow import QUEUE_PREFIX, RUNNING_PREFIX, WAITING_PREFIX
from ._check_read import Problem, u64, Reader, decode_wid, readable_key, valid_workflow
from ._keys import COUNT_PREFIX, TERMINAL, group_length, split_visibility_group

__all__ = ["check_counts", "check_flow"]


def check_flow(txn: lmdb.Transaction[bytes], dbs: Databases) -> list[Problem]:
    """Flow control (``_flow``): each group's running count is the unfinished workflows that
    hold its slots, never more than its ``concurrency``; every queued workflow has its queue
    entry and every entry its queued workflow; a group with nobody running has no queue
    (its head would never start). Over the whole store only, as ``check_counts``: a group's
    count is about every workflow in it."""
    reader = Reader(txn, dbs)
    records = dict(reader.entries("workflows", decode_wid, valid_workflow, wid=readable_key))
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
            running[key[len(RUNNING_PREFIX):]] = u64(value)
        elif key.startswith(WAITING_PREFIX):
            counted[key[len(WAITING_PREFIX):]] = u64(value)
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
    reader = Reader(txn, dbs)
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
                stored[bytes(key[len(COUNT_PREFIX):])] = u64(value)
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
