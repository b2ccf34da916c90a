"""Conformance: schema versions, reopening, and a store that runs out of room."""

from __future__ import annotations

import pytest

from weft_actors.codec import decode_args, encode
from weft_actors.errors import SchemaVersionError, StorageFull, WeftError
from weft_actors.store import SCHEMA_VERSION, AppendInbox, Created, StepCommit


def test_reopening_keeps_every_acknowledged_write(store_factory, kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    assert store.apply(eid, [StepCommit(wid, epoch, run_id, ops=(kit.op(1),))]) == [None]
    store.close()

    reopened = store_factory()

    assert reopened.get_workflow(wid)["run_id"] == run_id
    assert list(reopened.load_ops(wid, run_id)) == [1]
    assert reopened.get_holder(wid)[:2] == (eid, epoch)
    assert reopened.held_by(eid) == [wid]
    assert eid in reopened.engines()
    assert [item["id"] for item in reopened.list_workflows()["items"]] == [wid]


def test_store_of_the_current_schema_version_reopens(store_factory, backend_hook):
    store_factory().close()
    backend_hook("set_schema_version")(SCHEMA_VERSION)

    store = store_factory()

    assert store.list_workflows()["items"] == []


def test_store_with_a_newer_schema_is_refused_naming_both_versions(store_factory, backend_hook):
    store_factory().close()
    newer = SCHEMA_VERSION + 1
    backend_hook("set_schema_version")(newer)

    with pytest.raises(SchemaVersionError) as info:
        store_factory()

    message = str(info.value)
    assert str(newer) in message
    assert str(SCHEMA_VERSION) in message
    assert info.value.stored_version == newer
    assert info.value.code_version == SCHEMA_VERSION
    # Refusing does not rewrite the stored version, and refuses again next time.
    assert backend_hook("get_schema_version")() == newer
    with pytest.raises(SchemaVersionError):
        store_factory()


def test_storage_full_fails_the_batch_and_keeps_what_was_acknowledged(kit, backend_hook):
    store = backend_hook("open_small")()
    eid = kit.engine(store)
    acknowledged: list[tuple[str, str]] = []
    big = ("x" * 2000,)
    failed = None
    for _ in range(200):
        intents = [kit.create_intent(args=big), kit.create_intent(args=big)]
        commits, writes = store.commits, store.writes
        results = store.apply(eid, intents)
        if any(isinstance(r, WeftError) for r in results):
            failed = (intents, results, commits, writes)
            break
        assert all(isinstance(r, Created) and r.created for r in results)
        acknowledged += [(i.wid, i.run_id) for i in intents]
    assert failed is not None, "the small store never filled up"
    assert len(acknowledged) >= 4, "the small store should hold a few workflows first"

    intents, results, commits, writes = failed
    assert len(results) == 2
    assert all(isinstance(r, StorageFull) for r in results), results
    assert "full" in str(results[0])
    assert (store.commits, store.writes) == (commits, writes)
    for intent in intents:
        assert store.get_workflow(intent.wid) is None
        assert store.get_epoch(intent.wid) == 0
    for wid, run_id in acknowledged:
        record = store.get_workflow(wid)
        assert record["run_id"] == run_id
        assert decode_args(record["args"]) == big
        assert store.get_holder(wid)[:2] == (eid, 1)
    listed = set()
    cursor = None
    while True:
        page = store.list_workflows(limit=7, cursor=cursor)
        listed |= {item["id"] for item in page["items"]}
        cursor = page["cursor"]
        if cursor is None:
            break
    assert listed == {wid for wid, _ in acknowledged}
    assert set(store.held_by(eid)) == listed
    assert store.engines()[eid]["state"] == "live"

    # A full store keeps failing cleanly: a batch that needs at least as much room is refused
    # whole, and its small intent (the signal) is not half-applied either.
    wid, _ = acknowledged[0]
    again = store.apply(
        eid, [kit.create_intent(args=big), kit.create_intent(args=big), AppendInbox(wid, "signal", "go", encode("y"))]
    )
    assert len(again) == 3
    assert all(isinstance(r, StorageFull) for r in again), again
    assert store.load_inbox(wid) == []
    assert store.read_feed(0) == []


def test_closing_an_instance_twice_leaves_other_instances_working(store_factory, kit):
    first = kit.store
    second = store_factory()
    eid = kit.engine(second)

    first.close()
    first.close()

    wid, _, _ = kit.start(eid, store=second)
    assert second.get_workflow(wid)["status"] == "running"
    assert [item["id"] for item in second.list_workflows()["items"]] == [wid]
