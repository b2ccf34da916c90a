"""Conformance: one intent whose applier raises something unforeseen fails alone. The rest of
its group commit commits, and the failed intent leaves nothing behind, not even what it had
written before it raised."""

from __future__ import annotations

from weft_actors.codec import encode
from weft_actors.errors import StorageError
from weft_actors.store import AppendInbox, Created, CreateWorkflow


def test_an_applier_that_raises_mid_way_fails_alone_and_leaves_no_trace(kit):
    store = kit.store
    eid = kit.engine()
    before = kit.create_intent()
    # Claims the workflow, then packs a deadline timer key that does not fit: it raises
    # (OverflowError/struct.error) after its first writes.
    bad = kit.create_intent()._replace(execution_timeout=1e300)
    after = kit.create_intent()

    results = store.apply(eid, [before, bad, after])

    assert isinstance(results[0], Created) and results[0].created
    assert isinstance(results[2], Created) and results[2].created
    assert isinstance(results[1], StorageError)
    assert bad.wid in str(results[1]) and "CreateWorkflow" in str(results[1])
    assert store.get_workflow(before.wid)["status"] == "running"
    assert store.get_workflow(after.wid)["status"] == "running"
    assert store.get_workflow(bad.wid) is None
    assert store.get_holder(bad.wid) is None
    assert sorted(store.held_by(eid)) == sorted([before.wid, after.wid])
    assert store.count("timers") == 0


def test_several_crashing_intents_each_fail_alone(kit):
    store = kit.store
    eid = kit.engine()
    wid, _, _ = kit.start(eid)
    intents = [
        CreateWorkflow("", "Order", encode([]), "00" * 16),  # an empty key: LMDB refuses it
        AppendInbox(wid, "signal", "go", encode(1)),
        kit.create_intent()._replace(start_at=1e300),
        AppendInbox("", "signal", "go", encode(1)),
    ]

    results = store.apply(eid, intents)

    assert isinstance(results[0], StorageError)
    assert isinstance(results[1], int)
    assert isinstance(results[2], StorageError)
    assert isinstance(results[3], StorageError)
    assert [seq for seq, _ in store.load_inbox(wid)] == [results[1]]


def test_a_batch_of_only_crashing_intents_answers_each(kit):
    store = kit.store
    eid = kit.engine()
    results = store.apply(eid, [AppendInbox("", "signal", "go", encode(1))] * 3)
    assert len(results) == 3 and all(isinstance(r, StorageError) for r in results)
