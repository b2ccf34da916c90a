"""A group commit's rows cost the writer thread little Python on PostgreSQL: a buffered
``put``/``delete`` makes no Python call of its own, and the batch's ``bytea[]`` parameters
are built in one pass (``store/_pg/_arrays``), never by psycopg's per-item list dumper.
The rows still land byte for byte (a real server reads them back).

Python calls are counted with ``sys.setprofile``; the store, its connection and the server
are real.
"""

from __future__ import annotations

import gc
import sys
from typing import Any, Callable

import psycopg
import pytest
from psycopg.adapt import PyFormat, Transformer

from weft_actors.testing import FakeClock

ROWS = 300


def _store(schema_url: str) -> Any:
    from weft_actors.store._pg import PgStore

    return PgStore(schema_url, clock=FakeClock())


def python_calls(call: Callable[[], Any]) -> tuple[list[tuple[str, str]], Any]:
    """``(file, function)`` of every Python function ``call`` entered, and its result. The
    collector is off meanwhile: a collection runs other code's ``gc.callbacks`` (hypothesis
    registers one) inside whatever allocated, which is not a call the code under test made."""
    seen: list[tuple[str, str]] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.append((frame.f_code.co_filename, frame.f_code.co_name))

    collecting = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
    return seen[1:], result  # the first is ``call`` itself


def test_pg_arrays_are_what_psycopg_would_send(schema_url: str) -> None:
    from weft_actors.store._pg._arrays import encode, register

    cases = [[], [b"a"], [b"", b"\x00\xff", b"k" * 70000], [bytes([i % 256]) * (i % 7 + 1) for i in range(500)]]
    with psycopg.connect(schema_url, autocommit=True) as conn:
        register(conn)
        dumper = Transformer(conn).get_dumper([b"x"], PyFormat.BINARY)
        for items in cases:
            if items:
                assert encode(items).data == bytes(dumper.dump(items))
            row = conn.execute("SELECT %b::bytea[], cardinality(%b::bytea[])", (encode(items), encode(items)), binary=True).fetchone()
            assert row is not None
            assert [bytes(item) for item in row[0]] == items and row[1] == len(items)


@pytest.mark.timeout(60)
def test_pg_batch_rows_cost_no_python_call_per_row(schema_url: str) -> None:
    store = _store(schema_url)
    db = store.dbs.meta
    try:
        with store.env.begin(write=True) as txn:
            for index in range(ROWS):
                txn.put(b"old-%04d" % index, b"before", db=db)
        with store.env.begin(write=True) as txn:
            txn.fetch(db, [b"new-%04d" % index for index in range(ROWS)])  # read, found absent: plain inserts

            def rows() -> None:
                for index in range(ROWS):
                    txn.put(b"new-%04d" % index, b"v%d" % index, db=db)
                    txn.put(memoryview(b"old-%04d" % index), bytearray(b"after"), db=db)
                for index in range(0, ROWS, 3):
                    txn.delete(b"old-%04d" % index, db=db)

            calls, _ = python_calls(rows)
            entered = [name for _, name in calls]
            assert entered.count("put") == 2 * ROWS and entered.count("delete") == ROWS // 3
            within = [call for call in calls if call[1] not in ("put", "delete")]
            assert [name for _, name in within] == ["_overlay", "__init__"], f"{len(within)} Python calls within {len(calls)} buffered rows (one keyspace's overlay made once), e.g. {within[:3]}"
            assert txn.get(b"new-0001", db=db) == b"v1" and txn.get(memoryview(b"old-0000"), db=db) is None
            with pytest.raises(ValueError):
                txn.put(b"", b"x", db=db)
            with pytest.raises(ValueError):
                txn.delete(b"k" * 512, db=db)
            with pytest.raises(ValueError):
                txn.get(b"", db=db)
            flush = txn.flush
            calls, written = python_calls(flush)
            assert written == ROWS * 2  # a deleted key was put first: one row each
            dumped = [name for path, name in calls if path.replace("\\", "/").endswith("psycopg/types/array.py")]
            assert dumped == [], f"psycopg dumped the batch's arrays item by item: {dumped[:3]}"
        with store.env.begin() as txn:
            stored = dict(txn.range_rows(db, b"new-", b"old-\xff"))
        for index in range(ROWS):
            assert stored[b"new-%04d" % index] == b"v%d" % index
            assert stored.get(b"old-%04d" % index) == (None if index % 3 == 0 else b"after")
        with store.env.begin() as txn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            txn.put(b"k", b"v", db=db)
    finally:
        store.close()
