"""Conformance: ``prune_history`` deletes the op logs and inbox of workflows finished longer
ago than the retention, in bounded batches, and keeps records, results, listing entries and
claim epochs."""

from __future__ import annotations

import pytest

from weft_actors.codec import decode, encode
from weft_actors.store import AppendInbox, CloseWorkflow, CreateWorkflow, PurgeWorkflow, PutRequest, StepCommit

DAY = 86400.0


def _with_history(kit, eid, ops: int = 3, messages: int = 1, wf_type: str = "Order"):
    """A running workflow with ``ops`` recorded ops and ``messages`` pending inbox messages."""
    wid, run_id, epoch = kit.start(eid, wf_type=wf_type)
    assert kit.store.apply(eid, [StepCommit(wid, epoch, run_id, ops=tuple(kit.op(i) for i in range(ops)))]) == [None]
    for n in range(messages):
        (seq,) = kit.store.apply(eid, [AppendInbox(wid, "signal", f"unread-{n}", encode(n))])
        assert isinstance(seq, int)
    return wid, run_id, epoch


def _later(kit, fake_clock, seconds: float) -> str:
    """Advance the clock by ``seconds`` (leases lapse) and register a fresh engine."""
    fake_clock.advance(seconds)
    return kit.engine()


def test_history_of_a_workflow_finished_longer_ago_than_the_retention_is_pruned(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = _with_history(kit, eid)
    assert kit.finish(eid, wid, epoch, run_id, value="kept") is None
    ended = fake_clock.now()

    eid = _later(kit, fake_clock, 7 * DAY - 1)
    early = store.prune_history(7 * DAY, eid)
    assert (early.workflows, early.entries) == (0, 0)
    assert len(store.load_ops(wid, run_id)) == 3

    eid = _later(kit, fake_clock, 2)
    done = store.prune_history(7 * DAY, eid)

    assert (done.workflows, done.entries, done.more) == (1, 4, False)
    assert store.load_ops(wid, run_id) == {}
    assert store.load_inbox(wid) == []
    record = store.get_workflow(wid)
    assert record["status"] == "completed"
    assert decode(record["result"]) == "kept"
    assert record["updated"] == pytest.approx(ended, abs=1e-3)
    assert record["history_pruned"] == pytest.approx(fake_clock.now(), abs=1e-3)
    assert store.get_epoch(wid) == epoch  # claim epochs are never pruned
    assert [(i["id"], i["status"]) for i in store.list_workflows()["items"]] == [(wid, "completed")]
    assert store.prune_history(7 * DAY, eid) == (0, 0, False)


def test_running_and_recent_workflows_keep_their_history(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    running, running_run, _ = _with_history(kit, eid)
    old, old_run, old_epoch = _with_history(kit, eid)
    assert kit.finish(eid, old, old_epoch, old_run) is None
    eid = _later(kit, fake_clock, 3)
    recent, recent_run, recent_epoch = _with_history(kit, eid)
    assert kit.finish(eid, recent, recent_epoch, recent_run, "failed") is None

    eid = _later(kit, fake_clock, 2)
    result = store.prune_history(4.0, eid)

    assert result.workflows == 1
    assert store.load_ops(old, old_run) == {}
    assert len(store.load_ops(recent, recent_run)) == 3 and len(store.load_inbox(recent)) == 1
    assert len(store.load_ops(running, running_run)) == 3 and len(store.load_inbox(running)) == 1


def test_every_finished_status_is_pruned_including_external_closes(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    closed, closed_run, _ = _with_history(kit, eid)
    assert isinstance(store.apply(eid, [CloseWorkflow(closed, "terminated", {"message": "x"})])[0], dict)
    failed, failed_run, failed_epoch = _with_history(kit, eid)
    assert kit.finish(eid, failed, failed_epoch, failed_run, "failed") is None

    eid = _later(kit, fake_clock, 10)
    assert store.prune_history(5.0, eid).workflows == 2

    assert store.load_ops(closed, closed_run) == {} and store.load_inbox(closed) == []
    assert store.load_ops(failed, failed_run) == {}
    assert store.get_workflow(closed)["status"] == "terminated"


def test_op_logs_of_every_run_of_the_id_are_pruned(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, first_run, epoch = _with_history(kit, eid)
    assert kit.finish(eid, wid, epoch, first_run) is None
    second = kit.create_intent(wid, if_exists="start_new")
    (created,) = store.apply(eid, [second])
    assert store.apply(eid, [StepCommit(wid, created.epoch, second.run_id, ops=(kit.op(0),))]) == [None]
    assert kit.finish(eid, wid, created.epoch, second.run_id) is None

    eid = _later(kit, fake_clock, 10)
    result = store.prune_history(5.0, eid)

    assert result.workflows == 1
    assert store.load_ops(wid, first_run) == {}
    assert store.load_ops(wid, second.run_id) == {}


def test_start_new_replacing_a_finished_run_keeps_the_history_until_the_new_run_ends(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, first_run, epoch = _with_history(kit, eid)
    assert kit.finish(eid, wid, epoch, first_run) is None
    (created,) = store.apply(eid, [kit.create_intent(wid, if_exists="start_new")])
    assert created.created

    eid = _later(kit, fake_clock, 10)

    assert store.prune_history(5.0, eid) == (0, 0, False)
    assert len(store.load_ops(wid, first_run)) == 3  # the id is running again


def test_pruning_is_bounded_per_call_and_resumes_where_it_stopped(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    finished = []
    for _ in range(5):
        wid, run_id, epoch = _with_history(kit, eid, ops=4, messages=0)
        assert kit.finish(eid, wid, epoch, run_id) is None
        finished.append((wid, run_id))
    eid = _later(kit, fake_clock, 10)

    calls = []
    while True:
        result = store.prune_history(5.0, eid, limit=3)
        calls.append(result)
        assert result.entries <= 3
        if not result.more:
            break
        assert len(calls) < 50

    assert sum(r.entries for r in calls) == 20
    assert sum(r.workflows for r in calls) == 5
    assert len(calls) >= 7
    for wid, run_id in finished:
        assert store.load_ops(wid, run_id) == {}
        assert store.get_workflow(wid)["history_pruned"] is not None


def test_oldest_finished_workflows_go_first(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    order = []
    for _ in range(3):
        wid, run_id, epoch = _with_history(kit, eid, ops=1, messages=0)
        assert kit.finish(eid, wid, epoch, run_id) is None
        order.append((wid, run_id))
        eid = _later(kit, fake_clock, 1)
    eid = _later(kit, fake_clock, 10)

    assert store.prune_history(1.0, eid, limit=2).workflows == 1

    assert store.load_ops(*order[0]) == {}
    assert all(store.load_ops(*later) for later in order[1:])


def test_purge_and_start_new_after_pruning_still_work(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    purged, purged_run, purged_epoch = _with_history(kit, eid)
    reused, reused_run, reused_epoch = _with_history(kit, eid)
    for wid, run_id, epoch in ((purged, purged_run, purged_epoch), (reused, reused_run, reused_epoch)):
        assert kit.finish(eid, wid, epoch, run_id) is None
    eid = _later(kit, fake_clock, 10)
    assert store.prune_history(5.0, eid).workflows == 2

    assert store.apply(eid, [PurgeWorkflow(purged)]) == [purged_epoch + 1]
    (created,) = store.apply(eid, [CreateWorkflow(reused, "Order", b"\x90", "cd" * 16, "start_new")])

    assert store.get_workflow(purged) is None
    assert created.created and created.epoch == reused_epoch + 1
    assert "history_pruned" not in store.get_workflow(reused)
    assert [i["id"] for i in store.list_workflows()["items"]] == [reused]


def test_a_deposed_engine_prunes_nothing(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = _with_history(kit, eid)
    assert kit.finish(eid, wid, epoch, run_id) is None
    fake_clock.advance(60)  # the engine's lease lapsed long ago

    assert store.prune_history(5.0, eid) == (0, 0, False)
    assert len(store.load_ops(wid, run_id)) == 3
    assert store.prune_history(5.0).workflows == 1  # without an engine (an operator's call)


def test_answered_update_requests_of_the_workflow_go_too(kit, fake_clock):
    """Update answers are kept per workflow under its id (``requests``); retention drops them
    with the rest of the history, and nothing of another workflow."""
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = _with_history(kit, eid, messages=0)
    kept, kept_run, kept_epoch = _with_history(kit, eid, messages=0)
    for owner, owner_run, owner_epoch in ((wid, run_id, epoch), (kept, kept_run, kept_epoch)):
        answer = PutRequest("req-1", {"ok": encode(1)})  # what an answered update leaves behind
        (result,) = store.apply(eid, [StepCommit(owner, owner_epoch, owner_run, effects=(answer,))])
        assert not isinstance(result, Exception), result
    assert store.count("requests") == 2
    assert kit.finish(eid, wid, epoch, run_id) is None
    eid = _later(kit, fake_clock, 10)

    assert store.prune_history(5.0, eid).workflows == 1

    assert store.count("requests") == 1
