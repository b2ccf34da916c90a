"""On PostgreSQL every read is a round trip, so what a takeover reads is named ahead: taking
over a lost engine's workflows, finding them and reading them for replay cost a handful of
statements whatever their number, not several per workflow. Read row by row, a takeover of
500 workflows held the store's write lock for about a second and pushed takeover after a
stall past its bound (``bench/takeover.py --mode stall``).

Statements are counted on the store's own connection (a cursor class that counts what it
executes); the server is real.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from weft_actors.codec import encode, encode_args
from weft_actors.store import Created, CreateWorkflow, StepCommit, stall_notes
from weft_actors.testing import FakeClock

WORKFLOWS = 200
OPS = 40  # more than the tail a takeover reads back (``LOOK_BACK``)
MOST_STATEMENTS = 20
"""Statements, not round trips: a write transaction pipelines its begin, lock and reads in
one, and its writes and commit in another."""


class CountingCursor(psycopg.Cursor):  # type: ignore[type-arg]
    executed = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        CountingCursor.executed += 1
        return super().execute(*args, **kwargs)


def statements(store: Any, call: Any) -> tuple[int, Any]:
    conn = store.env.conn
    conn.cursor_factory = CountingCursor
    CountingCursor.executed = 0
    try:
        result = call()
    finally:
        conn.cursor_factory = psycopg.Cursor
    return CountingCursor.executed, result


@pytest.mark.timeout(120)
def test_a_takeover_costs_a_handful_of_statements_whatever_the_number_of_workflows(schema_url: str) -> None:
    from weft_actors.store._pg import PgStore

    clock = FakeClock()
    store = PgStore(schema_url, clock=clock)
    try:
        lost, taker = uuid.uuid4().hex, uuid.uuid4().hex
        store.register_engine(lost, heartbeat=0.5, ttl=3.0)
        wids, runs = [], {}
        for i in range(WORKFLOWS):
            intent = CreateWorkflow(f"w-{i}", "Order", encode_args((i,)), uuid.uuid4().hex)
            (created,) = store.apply(lost, [intent])
            assert isinstance(created, Created)
            ops = tuple((seq, encode({"kind": "activity", "name": "charge", "outcome": {"ok": seq}, "t": 1.0})) for seq in range(OPS))
            ops += ((OPS, encode({"kind": "activity", "name": "ship", "attempts": 2})),)  # retrying when lost
            store.apply(lost, [StepCommit(intent.wid, created.epoch, intent.run_id, ops=ops)])
            wids.append(intent.wid)
            runs[intent.wid] = intent.run_id
        # The lost engine's watchdog named one workflow as the one on its loop: only it is charged.
        stall_notes(store, lost).write({"wid": wids[0], "run_id": runs[wids[0]], "kind": "activity", "name": "ship", "seq": OPS})
        clock.advance(10.0)  # the lost engine's lease is long gone
        store.register_engine(taker, heartbeat=0.5, ttl=3.0)

        found_cost, candidates = statements(store, lambda: store.reclaim_candidates(taker))
        assert sorted(wid for wid, _, _ in candidates) == sorted(wids)
        take_cost, won = statements(store, lambda: store.takeover(taker, [(wid, holder) for wid, holder, _ in candidates]))
        assert sorted(wid for wid, epoch in won.items() if epoch == 2) == sorted(wids)
        read_cost, rows = statements(store, lambda: store.load_many_for_replay(wids))
        for wid in wids:
            record, holder, ops_read, inbox = rows[wid]
            assert record["status"] == "running" and len(ops_read) == OPS + 1 and inbox == []
            assert holder is not None and holder[:16] == bytes.fromhex(taker)
            if wid == wids[0]:
                assert record["lost"]["reason"] == {"seq": OPS, "kind": "activity", "name": "ship"}  # the note's
            else:
                assert "lost" not in record  # a loss that names another workflow charges nothing
        beat_cost, _ = statements(store, lambda: store.heartbeat(taker))

        costs = {"reclaim_candidates": found_cost, "takeover": take_cost, "load_many_for_replay": read_cost, "heartbeat": beat_cost}
        assert all(cost <= MOST_STATEMENTS for cost in costs.values()), costs
    finally:
        store.close()
