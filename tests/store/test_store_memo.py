"""Conformance: ``list_workflows(memo=...)`` answers from the memo index, on every backend; the
index follows starts, replaced runs and purges, and an older store gets it on open."""

from __future__ import annotations

import lmdb
import psycopg
import pytest

from weft_actors.codec import encode, encode_args
from weft_actors.errors import InvalidRequest
from weft_actors.store import SCHEMA_VERSION, CreateWorkflow, PurgeWorkflow, check_store

from .conftest import new_run_id


def _start(kit, eid, wid, memo, wf_type="Order", if_exists="error"):
    intent = CreateWorkflow(wid, wf_type, encode_args(()), new_run_id(), if_exists=if_exists, memo=None if memo is None else encode(memo))
    (result,) = kit.store.apply(eid, [intent])
    assert result.created, result
    return intent.run_id, result.epoch


@pytest.fixture
def customers(kit):
    """a-0..a-5 for acme (a-0, a-3 in the EU, a-4 a Refund), b-0..b-4 for bolt, n-0 without memo."""
    eid = kit.engine()
    runs = {}
    for i in range(6):
        memo = {"customer": "acme", "region": "eu" if i % 3 == 0 else "us", "tier": i, "vip": i == 2, "nested": {"x": 1}}
        runs[f"a-{i}"] = _start(kit, eid, f"a-{i}", memo, wf_type="Refund" if i == 4 else "Order")
    for i in range(5):
        runs[f"b-{i}"] = _start(kit, eid, f"b-{i}", {"customer": "bolt", "region": "eu"})
    runs["n-0"] = _start(kit, eid, "n-0", None)
    return eid, runs


def test_equality_on_a_memo_field_lists_the_matching_workflows_only(kit, customers):
    assert kit.listed_ids(memo={"customer": "acme"}) == [f"a-{i}" for i in range(6)]
    assert kit.listed_ids(memo={"customer": "bolt"}) == [f"b-{i}" for i in range(5)]
    assert kit.listed_ids(memo={"customer": "nobody"}) == []
    assert kit.listed_ids(memo={"tier": 3}) == ["a-3"]
    assert kit.listed_ids(memo={"vip": True}) == ["a-2"]
    assert kit.listed_ids(memo={"tier": True}) == []  # a bool is not the int 1
    page = kit.store.list_workflows(memo={"customer": "acme", "region": "eu"})
    assert [(i["id"], i["type"], i["status"]) for i in page["items"]] == [("a-0", "Order", "running"), ("a-3", "Order", "running")]
    assert page["items"][0]["updated"] == pytest.approx(kit.clock.now(), abs=1e-3)


def test_memo_filter_combines_with_status_type_and_pagination(kit, customers):
    eid, runs = customers
    run_id, epoch = runs["a-1"]
    assert kit.finish(eid, "a-1", epoch, run_id) is None
    assert kit.listed_ids(memo={"customer": "acme"}, status="completed") == ["a-1"]
    assert kit.listed_ids(memo={"customer": "acme"}, status="running") == ["a-0", "a-2", "a-3", "a-4", "a-5"]
    assert kit.listed_ids(memo={"customer": "acme"}, wf_type="Refund") == ["a-4"]
    pages, cursor = [], None
    while True:
        page = kit.store.list_workflows(memo={"customer": "acme"}, status="running", limit=2, cursor=cursor)
        pages.append([item["id"] for item in page["items"]])
        cursor = page["cursor"]
        if cursor is None:
            break
    assert pages == [["a-0", "a-2"], ["a-3", "a-4"], ["a-5"]]
    first = kit.store.list_workflows(memo={"customer": "acme"}, limit=2)["cursor"]
    with pytest.raises(InvalidRequest, match="another listing"):
        kit.store.list_workflows(memo={"customer": "bolt"}, limit=2, cursor=first)
    with pytest.raises(InvalidRequest, match="list cursor"):
        kit.store.list_workflows(limit=2, cursor=first)  # a memo cursor is refused by a plain listing


@pytest.mark.parametrize(
    "bad",
    [{}, {"nested": {"x": 1}}, {"price": 1.5}, {"customer": "x" * 200}, {1: "a"}, ["customer", "acme"], {f"k{i}": i for i in range(9)}],
)
def test_a_filter_no_index_answers_is_refused_with_its_code(kit, customers, bad):
    with pytest.raises(InvalidRequest) as raised:
        kit.store.list_workflows(memo=bad)
    assert raised.value.code == "invalid_request"


def test_an_oversized_memo_value_is_stored_but_not_indexed(kit):
    eid = kit.engine()
    _start(kit, eid, "big", {"customer": "acme", "note": "n" * 500})
    assert kit.listed_ids(memo={"customer": "acme"}) == ["big"]
    assert kit.store.load_for_describe("big") is not None


def test_the_index_follows_a_replaced_run_and_a_purge(kit, customers):
    eid, runs = customers
    for wid in ("a-0", "b-0"):
        run_id, epoch = runs[wid]
        assert kit.finish(eid, wid, epoch, run_id) is None
    _start(kit, eid, "a-0", {"customer": "bolt"}, if_exists="start_new")
    assert kit.listed_ids(memo={"customer": "acme"}) == [f"a-{i}" for i in range(1, 6)]
    assert kit.listed_ids(memo={"customer": "bolt"}) == ["a-0"] + [f"b-{i}" for i in range(5)]
    kit.store.apply(eid, [PurgeWorkflow("b-0")])
    assert kit.listed_ids(memo={"customer": "bolt"}) == ["a-0"] + [f"b-{i}" for i in range(1, 5)]
    assert kit.listed_ids(memo={"region": "eu"}) == ["a-3"] + [f"b-{i}" for i in range(1, 5)]


def _drop_memo_index(backend) -> None:
    """Make the store what schema 5 wrote: no memo keyspace, version 5."""
    if backend.name == "lmdb":
        env = lmdb.open(backend.location, max_dbs=32)
        try:
            with env.begin(write=True) as txn:
                txn.drop(env.open_db(b"memo", txn=txn), delete=True)
        finally:
            env.close()
    else:
        with psycopg.connect(backend.location, autocommit=True) as conn:
            conn.execute("DROP TABLE weft_memo")
    backend.set_schema_version(5)


def test_a_schema_5_store_gets_the_index_built_when_opened(store_factory, kit, customers, fake_clock):
    kit.store.close()
    _drop_memo_index(store_factory)
    kit.store = store_factory()
    assert kit.listed_ids(memo={"customer": "acme", "region": "eu"}) == ["a-0", "a-3"]
    assert kit.listed_ids(memo={"customer": "bolt"}) == [f"b-{i}" for i in range(5)]
    kit.store.close()
    assert store_factory.get_schema_version() == SCHEMA_VERSION == 6
    assert [p.kind for p in check_store(store_factory.location, fake_clock.now())] == []


class _Counting:
    """A real LMDB transaction that counts the entries it reads (gets and cursor steps)."""

    def __init__(self, txn):
        self.txn, self.reads = txn, 0

    def get(self, *args):
        self.reads += 1
        return self.txn.get(*args)

    def cursor(self, db):
        outer, scan = self, self.txn.cursor(db=db)

        class _Cursor:
            def set_range(self, key):
                outer.reads += 1
                return scan.set_range(key)

            def iternext(self, values=True):
                for item in scan.iternext(values=values):
                    outer.reads += 1
                    yield item

        return _Cursor()


def test_the_listing_reads_the_matching_entries_only_not_the_store(store_factory, kit):
    if store_factory.name != "lmdb":
        pytest.skip("the read count is taken on LMDB's transaction")
    from weft_actors.store._memo_listing import list_by_memo

    eid = kit.engine()
    others = [CreateWorkflow(f"o-{i:05d}", "Order", encode_args(()), new_run_id(), memo=encode({"customer": f"c{i % 50}", "region": "eu"})) for i in range(3000)]
    for start in range(0, len(others), 500):
        kit.store.apply(eid, others[start : start + 500])
    for wid in ("m-1", "x-2", "z-3"):
        _start(kit, eid, wid, {"customer": "acme", "region": "eu"})
    with kit.store.env.begin() as txn:
        counting = _Counting(txn)
        page = list_by_memo(counting, kit.store.dbs, "running", None, {"customer": "acme", "region": "eu"}, 100, None)
    assert [item["id"] for item in page["items"]] == ["m-1", "x-2", "z-3"]
    # per match: its index entry, the second field's entry and the record; one seek and one step past the end
    assert counting.reads <= 3 * 3 + 2, counting.reads


def test_a_memo_has_its_first_32_indexable_fields_indexed(kit):
    eid = kit.engine()
    memo = {"skip": [1], **{f"k{i:02d}": i for i in range(40)}}
    _start(kit, eid, "wide", memo)
    assert kit.listed_ids(memo={"k31": 31}) == ["wide"]
    assert kit.listed_ids(memo={"k32": 32}) == []  # stored, not indexed: a start writes at most 32 entries
    assert kit.store.count("memo") == 32


def _tamper(backend, remove: bytes, add: bytes) -> None:
    """Delete one memo index entry and write a stray one, behind the store's back."""
    if backend.name == "lmdb":
        env = lmdb.open(backend.location, max_dbs=32)
        try:
            with env.begin(write=True) as txn:
                memo = env.open_db(b"memo", txn=txn)
                assert txn.delete(remove, db=memo)
                txn.put(add, b"", db=memo)
        finally:
            env.close()
    else:
        with psycopg.connect(backend.location, autocommit=True) as conn:
            assert conn.execute("DELETE FROM weft_memo WHERE k = %s", (remove,)).rowcount == 1
            conn.execute("INSERT INTO weft_memo (k, v) VALUES (%s, '')", (add,))


def test_the_checker_finds_a_missing_and_a_stray_memo_entry(store_factory, kit, customers, fake_clock):
    from weft_actors.store._memo import memo_prefix

    kit.store.close()
    assert [p.kind for p in check_store(store_factory.location, fake_clock.now())] == []
    _tamper(store_factory, memo_prefix("region", "us") + b"a-1", memo_prefix("customer", "acme") + b"gone-1")
    found = {(p.kind, p.workflow_id) for p in check_store(store_factory.location, fake_clock.now())}
    assert found == {("memo_index_missing", "a-1"), ("memo_index_orphan", "gone-1")}
