"""A group commit on PostgreSQL writes each keyspace with one statement, inserts the rows it
knows to be new without ``ON CONFLICT`` (and never overwrites a row for it), and finds the
rows it reads by their key, never by reading the table (``store/_pg/_batch_sql``).

Statements are recorded on the store's own connection (a cursor class that keeps their
text); the server, its plans and its statistics are real.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any

import psycopg
import pytest

from weft_actors.codec import encode, encode_args
from weft_actors.errors import FencedOut, StorageError
from weft_actors.store import Created, CreateWorkflow, Finish, StepCommit
from _pg_statements import BATCH, created_batch, finishing, pg_store, recorded, registered_store, writes_by_table


@pytest.mark.timeout(60)
def test_rows_read_absent_under_the_lock_are_inserted_without_on_conflict(schema_url: str) -> None:
    with registered_store(schema_url) as (store, engine):
        texts, intents, _ = created_batch(store, engine)
        writes = writes_by_table(texts)
        for table in ("weft_workflows", "weft_claim_epoch", "weft_claim_holder"):
            (statement,) = writes[table]  # read under the lock and found absent: plain inserts
            assert "ON CONFLICT" not in statement, statement
        for intent in intents:
            record = store.get_workflow(intent.wid)
            assert record is not None and record["status"] == "running" and store.get_epoch(intent.wid) == 1


@pytest.mark.timeout(60)
def test_a_commit_writes_each_keyspace_with_one_statement(schema_url: str) -> None:
    with registered_store(schema_url) as (store, engine):
        _, intents, created = created_batch(store, engine)

        # Finishing moves each workflow's index rows (a delete and an insert in the same
        # keyspaces) and drops its claim: still one statement per keyspace.
        steps = finishing(intents, created, 0, value=1)
        texts, finished = recorded(store, lambda: store.apply(engine, steps))
        assert not [result for result in finished if isinstance(result, Exception)], finished
        writes = writes_by_table(texts)
        assert {"weft_recent", "weft_visibility", "weft_claim_holder", "weft_workflows", "weft_ops"} <= set(writes)
        assert {table: len(statements) for table, statements in writes.items() if len(statements) > 1} == {}
        assert any("DELETE FROM weft_recent" in text and "INSERT INTO weft_recent" in text for text in writes["weft_recent"])

        for intent in intents:
            record = store.get_workflow(intent.wid)
            assert record is not None and record["status"] == "completed"
            assert store.get_holder(intent.wid) is None
            assert store.load_ops(intent.wid, intent.run_id)[0]["outcome"] == {"ok": 1}
        assert store.workflow_counts()[("completed", "Order")] == BATCH


@pytest.mark.timeout(60)
def test_a_row_taken_for_new_is_never_overwritten_the_transaction_fails_instead(schema_url: str) -> None:
    store = pg_store(schema_url)
    try:
        table = store.dbs.meta
        key = b"test/" + uuid.uuid4().hex.encode()
        with pytest.raises(StorageError):
            with store.env.begin(write=True) as txn:
                assert txn.get(key, db=table) is None  # read absent: the commit will insert it plainly
                txn.conn.execute(f"INSERT INTO {table} (k, v) VALUES (%b, %b)", (key, b"there"), binary=True)  # behind its back
                txn.put(key, b"mine", db=table)
        with store.env.begin() as txn:
            assert txn.get(key, db=table) is None  # the whole transaction rolled back: nothing landed
    finally:
        store.close()


def _reads_of(texts: list[str], table: str) -> list[str]:
    return [text for text in texts if text.startswith("SELECT") and re.search(rf"\b{table}\b", text)]


@pytest.mark.timeout(60)
def test_a_plain_step_reads_only_its_holder_and_the_fence_stays_exact(schema_url: str) -> None:
    with registered_store(schema_url) as (store, engine):
        _, intents, created = created_batch(store, engine)
        op = encode({"kind": "activity", "name": "charge"})
        steps = [StepCommit(intent.wid, result.epoch, intent.run_id, ops=((0, op),)) for intent, result in zip(intents, created)]
        stale = StepCommit(intents[0].wid, created[0].epoch + 1, intents[0].run_id, ops=((1, op),))  # an epoch it never held
        texts, results = recorded(store, lambda: store.apply(engine, steps + [stale]))
        assert results[:-1] == [None] * len(steps) and isinstance(results[-1], FencedOut)
        assert _reads_of(texts, "weft_claim_epoch") == [] and _reads_of(texts, "weft_workflows") == []
        assert len(_reads_of(texts, "weft_claim_holder")) == 1  # the fence: every holder at once
        assert 1 not in store.load_ops(intents[0].wid, intents[0].run_id)

        ends = [StepCommit(intent.wid, result.epoch, intent.run_id, ops=((1, op),), finish=Finish("completed", result=encode(1))) for intent, result in zip(intents, created)]
        texts, results = recorded(store, lambda: store.apply(engine, ends))
        assert results == [None] * len(ends)
        assert _reads_of(texts, "weft_claim_epoch") == [] and len(_reads_of(texts, "weft_workflows")) == 1
        assert all(store.get_workflow(intent.wid)["status"] == "completed" for intent in intents)  # type: ignore[index]


def _scans(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    row = conn.execute("SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = %s AND schemaname = current_schema()", (table,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.timeout(60)
def test_a_batch_reads_its_rows_by_key_however_small_the_table_against_the_batch(schema_url: str) -> None:
    with registered_store(schema_url) as (store, engine):
        epochs = store.dbs.claim_epoch
        with psycopg.connect(schema_url, autocommit=True) as observer:
            # Epochs of 20000 other workflows: a table of small rows, a few times the batch's pages.
            keys = [b"other-" + os.urandom(8).hex().encode() for _ in range(20_000)]
            observer.execute(f"INSERT INTO {epochs} (k, v) SELECT * FROM unnest(%b::bytea[], %b::bytea[])", (keys, [b"\0" * 8] * len(keys)), binary=True)
            observer.execute(f"ANALYZE {epochs}")
            store.env.conn.execute("SELECT pg_stat_force_next_flush()")
            deadline = time.monotonic() + 10.0
            before = _scans(observer, epochs)
            intents = [CreateWorkflow(f"w-{i}", "Order", encode_args((i,)), uuid.uuid4().hex) for i in range(300)]
            assert all(isinstance(result, Created) and result.created for result in store.apply(engine, intents))
            store.env.conn.execute("SELECT pg_stat_force_next_flush()")
            after = _scans(observer, epochs)
            while after[1] == before[1] and time.monotonic() < deadline:
                time.sleep(0.05)  # the backend reports its counts when it goes idle
                after = _scans(observer, epochs)
        assert after[1] > before[1], "the batch's read of the epochs was never counted"
        assert after[0] == before[0], f"the batch read the whole epoch table: {before} -> {after}"
