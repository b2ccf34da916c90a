"""LMDB: a schema-1 store (``updated`` inside visibility keys, no ``expiring`` index) is upgraded
when opened read-write, and refused read-only until then."""

from __future__ import annotations

import struct

import lmdb
import pytest

from weft_actors.errors import SchemaVersionError
from weft_actors.store import SCHEMA_VERSION, LmdbStore, check_store


def _v1_key(status_code: int, wf_type: str, updated_ms: int, wid: str) -> bytes:
    raw_type = wf_type.encode()
    return bytes((status_code,)) + struct.pack(">H", len(raw_type)) + raw_type + struct.pack(">Q", updated_ms) + wid.encode()


def _downgrade_to_v1(path: str) -> None:
    """Rewrite the indexes as schema 1 had them and drop the ``expiring`` keyspace."""
    env = lmdb.open(path, max_dbs=32, map_size=1 << 30)
    try:
        with env.begin(write=True) as txn:
            visibility = env.open_db(b"visibility", txn=txn)
            old = [(key, value) for key, value in txn.cursor(db=visibility)]
            txn.drop(visibility, delete=False)
            for key, value in old:
                type_len = struct.unpack_from(">H", key, 1)[0]
                wid = key[3 + type_len :].decode()
                updated_ms = struct.unpack(">Q", value)[0]
                txn.put(_v1_key(key[0], key[3 : 3 + type_len].decode(), updated_ms, wid), b"", db=visibility)
            txn.drop(env.open_db(b"expiring", txn=txn), delete=True)
            txn.put(b"schema", b"1", db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


@pytest.fixture
def lmdb_only(store_factory):
    if store_factory.name != "lmdb":
        pytest.skip("schema 1 is an LMDB layout")
    return store_factory


def test_a_schema_1_store_is_upgraded_on_a_read_write_open(lmdb_only, kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    runs = {wid: kit.start(eid, wid, wf_type=wf_type) for wid, wf_type in [("b", "T"), ("a", "U"), ("c", "T")]}
    _, run_id, epoch = runs["c"]
    assert kit.finish(eid, "c", epoch, run_id) is None
    expected = store.list_workflows()["items"]
    store.close()
    _downgrade_to_v1(lmdb_only.location)

    with pytest.raises(SchemaVersionError):
        LmdbStore(lmdb_only.location, readonly=True).close()

    upgraded = lmdb_only()

    assert upgraded.list_workflows()["items"] == expected
    assert upgraded.list_workflows(status="completed")["items"] == [i for i in expected if i["id"] == "c"]
    assert upgraded.count("expiring") == 1
    upgraded.close()
    assert check_store(lmdb_only.location, fake_clock.now()) == []
    reopened = lmdb_only()
    assert reopened.count("visibility") == 3
    with reopened.read() as txn:
        assert txn.get(b"schema", db=reopened.dbs.meta) == str(SCHEMA_VERSION).encode()


def test_the_checker_verifies_the_expiring_index_and_accepts_pruned_histories(lmdb_only, kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    runs = {wid: kit.start(eid, wid) for wid in ("old", "new")}
    for wid, (_, run_id, epoch) in runs.items():
        assert kit.finish(eid, wid, epoch, run_id) is None
        fake_clock.advance(2)
        store.heartbeat(eid)
    fake_clock.advance(2)
    assert store.prune_history(4.5).workflows == 1
    assert check_store(lmdb_only.location, fake_clock.now()) == []

    with store.env.begin(write=True) as txn:
        txn.drop(store.dbs.expiring, delete=False)
        txn.put(b"\x00" * 8 + b"ghost", b"", db=store.dbs.expiring)

    kinds = {(p.kind, p.workflow_id) for p in check_store(lmdb_only.location, fake_clock.now())}
    assert kinds == {("expiring_missing", "new"), ("expiring_stale", None)}
