"""Engine records name their lease clock; older records are moved onto it when the store opens.

Schema 2 kept wall-clock lease times: opened read-write by schema 3 they keep the time each
lease had left, on the lease clock. A record of another boot's lease clock is of a process
that cannot run any more: it is dead, so its workflows are reclaimable at once.
"""

from __future__ import annotations

from typing import Any

import lmdb
import pytest

from weft_actors._clock import SystemClock
from weft_actors.codec import pack_record, unpack_record
from weft_actors.store import SCHEMA_VERSION, LmdbStore
from weft_actors.testing import FakeClock

ENGINE = "ab" * 8
OTHER = "cd" * 8


def _rewrite(path: str, engine_id: str, change: Any, schema: int | None = None) -> None:
    """Change an engine record (and the schema number) behind the store's back."""
    env = lmdb.open(path, max_dbs=32)
    try:
        engines, meta = env.open_db(b"engines"), env.open_db(b"meta")
        with env.begin(write=True) as txn:
            key = bytes.fromhex(engine_id)
            record = unpack_record(txn.get(key, db=engines))
            change(record)
            txn.put(key, pack_record(record), db=engines)
            if schema is not None:
                txn.put(b"schema", str(schema).encode(), db=meta)
    finally:
        env.close()


def test_a_schema_2_record_keeps_the_time_its_lease_had_left(tmp_path):
    path = str(tmp_path / "db")
    clock = FakeClock()
    store = LmdbStore(path, clock=clock)
    store.register_engine(ENGINE, heartbeat=0.5, ttl=3.0)
    store.close()
    clock.jump(500.0)  # the wall and lease clocks now differ by 500 s

    def as_schema_2(record: dict[str, Any]) -> None:
        del record["lease_clock"]
        record["expires_at"] = clock.now() + 2.0  # wall time, 2 s left

    _rewrite(path, ENGINE, as_schema_2, schema=2)
    store = LmdbStore(path, clock=clock)
    try:
        record = store.engine(ENGINE)
        assert record["lease_clock"] == "fake"
        assert record["expires_at"] == pytest.approx(clock.lease_now() + 2.0, abs=1e-6)
        assert ENGINE in store.live_engines()
        with store.read() as txn:
            assert txn.get(b"schema", db=store.dbs.meta) == str(SCHEMA_VERSION).encode()
    finally:
        store.close()


def test_a_record_of_another_boot_is_dead_and_one_of_this_boot_is_left_alone(tmp_path):
    path = str(tmp_path / "db")
    store = LmdbStore(path)
    store.register_engine(ENGINE, heartbeat=0.5, ttl=3.0)
    store.register_engine(OTHER, heartbeat=0.5, ttl=3.0)
    store.close()
    mine = SystemClock.lease_clock

    def of_another_boot(record: dict[str, Any]) -> None:
        record["lease_clock"] = mine.partition(":")[0] + ":another-boot"
        record["expires_at"] = 1e12  # a reading of another boot's clock: far ahead of this one

    _rewrite(path, OTHER, of_another_boot)
    store = LmdbStore(path)
    try:
        records = store.engines()
        assert records[OTHER]["state"] == "dead" and records[OTHER]["lease_clock"] == mine
        assert records[ENGINE]["state"] == "live" and ENGINE in store.live_engines()
        assert OTHER not in store.live_engines()
    finally:
        store.close()
