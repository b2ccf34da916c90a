"""Conformance: the workflow counts per (status, type), what ``/metrics`` reports without a
pass over the workflows, follow every status change in the transaction that makes it; the
checker finds counts that drifted from the visibility index; an older store gets them when
it is upgraded."""

from __future__ import annotations

from collections import Counter

import lmdb
import pytest

from weft_actors.store import SCHEMA_VERSION, CloseWorkflow, CreateWorkflow, LmdbStore, PurgeWorkflow, QuarantineWorkflow, check_store
from weft_actors.store._keys import count_key, visibility_group

pytestmark = pytest.mark.timeout(30)


def _listed(kit) -> Counter:
    """The counts as the exhaustive listing sees them."""
    found: Counter = Counter()
    cursor = None
    while True:
        page = kit.store.list_workflows(cursor=cursor, limit=1000)
        found.update((item["status"], item["type"]) for item in page["items"])
        cursor = page["cursor"]
        if cursor is None:
            return found


def test_counts_follow_every_status_change(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    assert store.workflow_counts() == {}
    orders = [kit.start(eid, wf_type="order") for _ in range(3)]
    kit.start(eid, wf_type="refund")
    delayed = kit.create_intent(wf_type="refund")
    (created,) = store.apply(eid, [delayed._replace(start_at=fake_clock.now() + 60)])
    assert created.status == "pending"
    assert store.workflow_counts() == {("running", "order"): 3, ("running", "refund"): 1, ("pending", "refund"): 1}

    (wid0, run0, epoch0), (wid1, run1, epoch1), (wid2, run2, epoch2) = orders
    assert kit.finish(eid, wid0, epoch0, run0) is None
    assert kit.finish(eid, wid1, epoch1, run1, status="failed", value="broken") is None
    (closed,) = store.apply(eid, [CloseWorkflow(wid2, "terminated", {"type": "WorkflowTerminated", "message": "x"})])
    assert not isinstance(closed, Exception), closed
    assert store.workflow_counts() == {
        ("completed", "order"): 1, ("failed", "order"): 1, ("terminated", "order"): 1, ("running", "refund"): 1, ("pending", "refund"): 1,
    }
    assert Counter(store.workflow_counts()) == _listed(kit)

    # A finished id started anew moves from its old group to running; a purge leaves the count.
    (again,) = store.apply(eid, [kit.create_intent(wid0, wf_type="order", if_exists="start_new")])
    assert again.created and store.workflow_counts()[("running", "order")] == 1
    (purged,) = store.apply(eid, [PurgeWorkflow(wid1)])
    assert not isinstance(purged, Exception), purged
    counts = store.workflow_counts()
    assert ("failed", "order") not in counts and ("completed", "order") not in counts  # an emptied group goes
    assert Counter(counts) == _listed(kit)


def test_a_quarantine_and_a_batch_with_a_refused_intent_keep_the_counts_exact(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid, wf_type="poison")
    (parked,) = store.apply(eid, [QuarantineWorkflow(wid, epoch, run_id)])
    assert not isinstance(parked, Exception), parked
    taken = kit.wid()
    kit.start(eid, taken, wf_type="order")
    # One transaction: a create that is refused (the id exists) and one that commits.
    fresh = kit.create_intent(wf_type="order")
    results = store.apply(eid, [kit.create_intent(taken, wf_type="order"), fresh, CreateWorkflow(kit.wid(), "order", fresh.args, fresh.run_id)])
    assert [type(result).__name__ for result in results] == ["WorkflowAlreadyExists", "Created", "Created"]
    assert store.workflow_counts() == {("quarantined", "poison"): 1, ("running", "order"): 3}
    assert Counter(store.workflow_counts()) == _listed(kit)


def test_the_checker_reports_counts_that_drifted_from_the_index(store_factory, kit, fake_clock):
    if store_factory.name != "lmdb":
        pytest.skip("written behind the store's back in its LMDB layout")
    eid = kit.engine()
    kit.start(eid, wf_type="order")
    kit.start(eid, wf_type="order")
    kit.store.release_engine(eid)
    assert [p.kind for p in check_store(store_factory.location, fake_clock.now())] == []
    with kit.store.env.begin(write=True) as txn:
        txn.put(count_key(visibility_group("running", "order")), (5).to_bytes(8, "big"), db=kit.store.dbs.meta)
        txn.put(count_key(visibility_group("failed", "ghost")), (1).to_bytes(8, "big"), db=kit.store.dbs.meta)
    problems = check_store(store_factory.location, fake_clock.now())
    assert sorted(str(p) for p in problems) == [
        "counts_mismatch: failed 'ghost': counted 1, the visibility index holds 0",
        "counts_mismatch: running 'order': counted 5, the visibility index holds 2",
    ]


def test_a_schema_3_store_gets_its_counts_when_it_is_upgraded(store_factory, kit, fake_clock):
    if store_factory.name != "lmdb":
        pytest.skip("schema 3 is an LMDB layout")
    eid = kit.engine()
    for wf_type in ("order", "order", "refund"):
        kit.start(eid, wf_type=wf_type)
    kit.store.release_engine(eid)
    expected = kit.store.workflow_counts()
    kit.store.close()
    env = lmdb.open(store_factory.location, max_dbs=32)
    try:  # as schema 3 left it: no counts
        with env.begin(write=True) as txn:
            meta = env.open_db(b"meta", txn=txn)
            for key in [key for key, _ in txn.cursor(db=meta) if key.startswith(b"count/")]:
                txn.delete(key, db=meta)
            txn.put(b"schema", b"3", db=meta)
    finally:
        env.close()
    upgraded = store_factory()
    assert upgraded.workflow_counts() == expected == {("running", "order"): 2, ("running", "refund"): 1}
    with upgraded.env.begin() as txn:
        assert txn.get(b"schema", db=upgraded.dbs.meta) == str(SCHEMA_VERSION).encode() == b"6"
    assert isinstance(upgraded, LmdbStore)
