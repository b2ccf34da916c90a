"""The text of a write transaction's settings and of its writes: every row by its primary key,
planned once per connection, and one statement per keyspace per commit.

Every statement of a write transaction finds its rows by primary key (a key, a list of keys,
a key range). Two settings, local to the transaction, keep the server's plans to that:

- ``enable_seqscan = off``: with a few hundred keys against a table of some thousands of
  small rows (a young store, the claim tables) the planner prefers reading the whole table and
  hashing the array to a few hundred index probes, and every batch then paid for the table.
- ``plan_cache_mode = force_generic_plan``: psycopg prepares each statement on its first use;
  a generic plan is then made once per connection and kept. With sequential scans off the
  plan is an index probe whatever the table held when it was made (the trap that made the
  session plan every execution: a generic ``k = ANY(...)`` planned on an empty table scans it
  whole for ever after). Read transactions keep the session's custom plans.

The keyspaces a batch reads by the same keys (each intent's workflow record, holder and
epoch) are read in one statement, the keys joined to each table, each key sent and returned
once.

A keyspace's writes of one commit go as one statement: the deletes and the plain inserts as
data-modifying ``WITH`` parts of the upsert (their keys are disjoint: an overlay holds one
value per key). Keys the transaction read and found absent are inserted plainly, without
``ON CONFLICT``'s arbiter probe and speculative insertion; the server still rejects a
duplicate, so a wrong "absent" fails the transaction, never overwrites a row.
"""

from __future__ import annotations

import functools

__all__ = ["WRITES_DONE", "write_settings", "write_query", "key_groups", "keys_query"]

WRITES_DONE = "SET LOCAL enable_seqscan TO DEFAULT"
"""Sent after a write transaction's writes, before its ``COMMIT``: what runs inside the commit
(a deferred trigger of an operator's, ``tests/_commit_cutter``'s) plans as any session does.
A plpgsql loop over a table without an index ran several times slower with scans off."""


def write_settings(lock_timeout_ms: int) -> str:
    """The statement that sets a write transaction up (one, in its first round trip)."""
    return (
        f"SELECT set_config('lock_timeout', '{int(lock_timeout_ms)}', true), set_config('enable_seqscan', 'off', true), "
        "set_config('plan_cache_mode', 'force_generic_plan', true)"
    )


@functools.cache
def write_query(db: str, deletes: bool, inserts: bool, upserts: bool) -> str:
    """One statement that deletes the keys of a ``bytea[]`` (if ``deletes``), inserts the
    ``(k, v)`` of two arrays that are known absent (if ``inserts``) and upserts the ``(k, v)``
    of two more (if ``upserts``), its parameters in that order. At least one part."""
    parts = []
    if deletes:
        parts.append(f"DELETE FROM {db} WHERE k = ANY(%b::bytea[])")
    if inserts:
        parts.append(f"INSERT INTO {db} (k, v) SELECT * FROM unnest(%b::bytea[], %b::bytea[])")
    if upserts:
        parts.append(f"INSERT INTO {db} (k, v) SELECT * FROM unnest(%b::bytea[], %b::bytea[]) ON CONFLICT (k) DO UPDATE SET v = excluded.v")
    if not parts:
        raise ValueError("a write statement needs at least one part")
    *before, last = parts
    if not before:
        return last
    return "WITH " + ", ".join(f"w{index} AS ({part})" for index, part in enumerate(before)) + " " + last


def key_groups(keys_of: dict[str, list[bytes]]) -> list[tuple[tuple[str, ...], list[bytes]]]:
    """``keys_of`` (keyspace -> keys) as ``(keyspaces, keys)``: the keyspaces given the very same
    list of keys (``_store.batch_reads``) together, in their first one's order."""
    groups: dict[int, tuple[list[str], list[bytes]]] = {}
    for db, keys in keys_of.items():
        groups.setdefault(id(keys), ([], keys))[0].append(db)
    return [(tuple(dbs), keys) for dbs, keys in groups.values()]


@functools.cache
def keys_query(dbs: tuple[str, ...]) -> str:
    """The rows of the keys of one ``bytea[]`` parameter in each of ``dbs``: ``(k, v)`` for one
    keyspace, ``(k, v of the first or NULL, v of the second or NULL, ...)`` for several."""
    if len(dbs) == 1:
        return f"SELECT k, v FROM {dbs[0]} WHERE k = ANY(%b)"
    joins = " ".join(f"LEFT JOIN {db} AS t{index} ON t{index}.k = u.k" for index, db in enumerate(dbs))
    return f"SELECT u.k, {', '.join(f't{index}.v' for index in range(len(dbs)))} FROM unnest(%b::bytea[]) AS u(k) {joins}"
