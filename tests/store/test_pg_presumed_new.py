"""A group commit on PostgreSQL inserts a workflow's new rows (its ops, its visibility,
``recent`` and ``expiring`` entries, its ``by_engine`` claim) without ``ON CONFLICT``
although it never read their keys (``store/_pg/_presume``): an upsert costs the server a
speculative insertion and a confirmation per row. A key presumed new that was in fact
stored is never overwritten by the plain insert: that batch commits nothing, is applied
again with upserts, and its intents all succeed.

Statements are recorded on the store's own connection (``_pg_statements``);
the server and its unique indexes are real.
"""

from __future__ import annotations

import gc
import uuid
from typing import Any

import pytest

from weft_actors.codec import encode
from weft_actors.store import StepCommit
from weft_actors.store._keys import op_key
from _pg_statements import created_batch, finishing, pg_store, recorded, registered_store, writes_by_table

PRESUMED = ("weft_ops", "weft_visibility", "weft_recent", "weft_expiring", "weft_by_engine")


@pytest.fixture(autouse=True)
def _collected() -> Any:
    """The stores' connections are collected here, not in a later test that counts Python calls."""
    yield
    gc.collect()


def _upserts(texts: list[str]) -> dict[str, int]:
    """Table -> statements that upsert into it (``ON CONFLICT`` on the table's own insert)."""
    return {table: sum("ON CONFLICT" in text for text in statements) for table, statements in writes_by_table(texts).items()}


@pytest.mark.timeout(60)
def test_a_workflows_new_rows_are_inserted_without_on_conflict(schema_url: str) -> None:
    with registered_store(schema_url) as (store, engine):
        texts, intents, created = created_batch(store, engine)
        upserts = _upserts(texts)
        assert {table: upserts[table] for table in ("weft_visibility", "weft_recent", "weft_by_engine")} == dict.fromkeys(("weft_visibility", "weft_recent", "weft_by_engine"), 0)

        texts, finished = recorded(store, lambda: store.apply(engine, finishing(intents, created, 0)))
        assert finished == [None] * len(intents)
        upserts = _upserts(texts)
        assert {table: upserts.get(table, 0) for table in PRESUMED} == dict.fromkeys(PRESUMED, 0), texts
        assert upserts["weft_workflows"] == 1  # a row that exists (read under the lock) is still upserted
        for intent in intents:
            record = store.get_workflow(intent.wid)
            assert record is not None and record["status"] == "completed"
            assert store.load_ops(intent.wid, intent.run_id)[0]["outcome"] == {"ok": 0}
            assert store.get_holder(intent.wid) is None
        assert store.held_by(engine) == []
        assert store.workflow_counts()[("completed", "Order")] == len(intents)
        assert store._presumption.refutations == 0


@pytest.mark.timeout(60)
def test_a_key_presumed_new_but_stored_is_applied_again_with_upserts(schema_url: str) -> None:
    with registered_store(schema_url) as (store, engine):
        _, intents, created = created_batch(store, engine)
        first = intents[0]
        # An op already stored under the key the step writes (behind the store's back).
        key = op_key(first.wid, first.run_id, 0)
        assert store.load_ops(first.wid, first.run_id) == {}
        with store.env.begin(write=True) as txn:
            txn.put(key, encode({"kind": "stale"}), db=store.dbs.ops)
        assert store.load_ops(first.wid, first.run_id)[0] == {"kind": "stale"}

        texts, finished = recorded(store, lambda: store.apply(engine, finishing(intents, created, 0)))
        assert finished == [None] * len(intents), finished  # every intent succeeded, none failed for the others
        assert store._presumption.refutations == 1
        ops_writes = writes_by_table(texts)["weft_ops"]
        assert ["ON CONFLICT" in text for text in ops_writes] == [False, True]  # presumed, then upserted
        assert store.write_failure is None
        for intent in intents:
            assert store.load_ops(intent.wid, intent.run_id)[0]["outcome"] == {"ok": 0}  # overwritten, as on LMDB
            assert store.get_workflow(intent.wid)["status"] == "completed"  # type: ignore[index]
        assert store.workflow_counts()[("completed", "Order")] == len(intents)

        # The next batches presume nothing for a while: a workload that rewrites such keys
        # pays one failed attempt per pause, not one per batch.
        texts, _, _ = created_batch(store, engine, "later")
        assert _upserts(texts)["weft_visibility"] == 1
        assert store._presumption.refutations == 1


@pytest.mark.timeout(60)
def test_an_op_written_again_and_the_ops_of_a_workflow_created_elsewhere_are_upserted(schema_url: str) -> None:
    with registered_store(schema_url) as (store, engine), registered_store(schema_url) as (other, elsewhere):
        _, intents, created = created_batch(store, engine)
        started = encode({"kind": "timer", "fire_at": 5.0})
        steps = [StepCommit(intent.wid, result.epoch, intent.run_id, ops=((0, started),)) for intent, result in zip(intents, created)]
        texts, results = recorded(store, lambda: store.apply(engine, steps))
        assert results == [None] * len(steps)
        assert ["ON CONFLICT" in text for text in writes_by_table(texts)["weft_ops"]] == [False]  # the first write of op 0

        # The timer fires: op 0 is written again with its outcome. A plain insert would be
        # refused (and the batch applied again): the ledger knows op 0 was written.
        texts, results = recorded(store, lambda: store.apply(engine, finishing(intents, created, 0)))
        assert results == [None] * len(intents)
        assert ["ON CONFLICT" in text for text in writes_by_table(texts)["weft_ops"]] == [True]
        assert all(store.load_ops(intent.wid, intent.run_id)[0]["outcome"] == {"ok": 0} for intent in intents)

        # A workflow another store created: this one never saw its ops, so it presumes none.
        _, theirs, theirs_created = created_batch(other, elsewhere, "theirs")
        texts, results = recorded(other, lambda: other.apply(elsewhere, [StepCommit(i.wid, r.epoch, i.run_id, ops=((0, started),)) for i, r in zip(theirs, theirs_created)]))
        assert results == [None] * len(theirs)
        ledger = store._presumption.ledger
        assert not any(key.endswith(intent.wid.encode()) for intent in theirs for key in ledger.highest)
        assert store._presumption.refutations == 0 and other._presumption.refutations == 0
        assert ledger.highest == {}, "finished workflows stay in the ledger"


@pytest.mark.timeout(60)
def test_a_key_deleted_and_put_again_in_one_batch_is_upserted(schema_url: str) -> None:
    store = pg_store(schema_url)
    try:
        table, key = store.dbs.visibility, b"\x01\x00\x05Order" + uuid.uuid4().hex.encode()
        with store.env.begin(write=True) as txn:
            txn.put(key, b"before", db=table)
        with store.env.begin(write=True, presumption=store._presumption) as txn:  # as a group commit
            txn.delete(key, db=table)  # a status left and entered again in one batch (the flow queue does)
            txn.put(key, b"after", db=table)
        with store.env.begin() as txn:
            assert txn.get(key, db=table) == b"after"
    finally:
        store.close()


@pytest.mark.timeout(60)
def test_a_workflow_taken_over_and_back_presumes_none_of_its_ops(schema_url: str) -> None:
    from weft_actors.store._keys import engine_key, holder_value

    with registered_store(schema_url) as (store, engine):
        _, intents, created = created_batch(store, engine)
        first = intents[0]
        # Meanwhile another engine held it (epoch 2) and wrote its op 0; then it came back here
        # at epoch 3. Written behind the batch path, as those claims are.
        with store.env.begin(write=True) as txn:
            txn.put(op_key(first.wid, first.run_id, 0), encode({"kind": "timer", "fire_at": 9.0}), db=store.dbs.ops)
            txn.put(first.wid.encode(), holder_value(engine_key(engine), 3, 0.0), db=store.dbs.claim_holder)
        epochs = [3] + [result.epoch for result in created[1:]]
        op = encode({"kind": "timer", "fire_at": 9.0, "outcome": {"ok": 0}})
        steps = [StepCommit(intent.wid, epoch, intent.run_id, ops=((0, op),)) for intent, epoch in zip(intents, epochs)]
        results = store.apply(engine, steps)
        assert results == [None] * len(steps), results
        assert store._presumption.refutations == 0, "an op another engine wrote was presumed new"
        assert store.load_ops(first.wid, first.run_id)[0]["outcome"] == {"ok": 0}
