"""The text of a write transaction's settings and of its writes: every row by its primary key,
planned once per connection, and one statement per keyspace per commit.

Every statement of a write transaction finds its rows by primary key (a key, a list of keys,
a key range). Two settings, local to the transaction, keep the server's plans to that:

- ``enable_seqscan = off``: with a few hundred keys against a table of some thousands of
  small rows (a young store, the claim tables) the planner prefers reading the whole table and
  hashing the array to a few hundred index probes, and every batch then paid for the table.
- ``plan_cache_mode = force_generic_plan`` for the batch's own reads (``k = ANY(...)``, sent
  with the lock) and writes (``write_query``): psycopg prepares each statement on its first
  use; a generic plan is then made once per connection and kept. These statements have no
  join to choose and, with sequential scans off, their plan is an index probe whatever the
  table held when it was made (the trap that made the session plan every execution: a
  generic ``k = ANY(...)`` planned on an empty table scans it whole for ever after). Every
  other statement, in the transaction code between the two, keeps the session's custom plans
  (``OWN_PLANS``): a generic plan of a range join could be that trap again.

A keyspace's writes of one commit go as one statement: the deletes and the plain inserts as
data-modifying ``WITH`` parts of the upsert (their keys are disjoint: an overlay holds one
value per key). Keys the transaction read and found absent are inserted plainly, without
``ON CONFLICT``'s arbiter probe and speculative insertion; the server still rejects a
duplicate, so a wrong "absent" fails the transaction, never overwrites a row.
"""

from __future__ import annotations

import functools

__all__ = ["OWN_PLANS", "BATCH_PLANS", "WRITES_DONE", "write_settings", "write_query"]

OWN_PLANS = "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)"
"""Sent after the batch's reads: the transaction code's own statements are planned each time."""

BATCH_PLANS = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
"""Sent before the batch's writes: planned once per connection."""

WRITES_DONE = "SET LOCAL enable_seqscan TO DEFAULT"
"""Sent after a write transaction's writes, before its ``COMMIT``: what runs inside the commit
(a deferred trigger, an operator's or a fault test's) plans as any session does.
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

