"""Conformance: creating workflows (with the claim folded in), if_exists, and finishing a run."""

from __future__ import annotations

import pytest

from weft_actors.codec import decode, decode_args, encode
from weft_actors.errors import FencedOut, WorkflowAlreadyExists, WorkflowClosed
from weft_actors.store import TERMINAL, AppendInbox, Created, StepCommit


def test_create_claims_the_workflow_for_the_committing_engine_at_epoch_1(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    intent = kit.create_intent(wf_type="Order", args=(42, "x"))
    fake_clock.advance(1.5)
    now = fake_clock.now()

    (result,) = store.apply(eid, [intent])

    assert result == Created(created=True, run_id=intent.run_id, status="running", epoch=1)
    assert store.get_holder(intent.wid) == (eid, 1, pytest.approx(now, abs=1e-3))
    assert store.get_epoch(intent.wid) == 1
    assert store.held_by(eid) == [intent.wid]
    record = store.get_workflow(intent.wid)
    assert record["status"] == "running"
    assert record["type"] == "Order"
    assert record["run_id"] == intent.run_id
    assert decode_args(record["args"]) == (42, "x")
    running = store.list_workflows(status="running")["items"]
    assert [(item["id"], item["type"], item["status"]) for item in running] == [(intent.wid, "Order", "running")]


def test_unknown_workflow_reads_as_absent(kit):
    store = kit.store
    assert store.get_workflow("nope") is None
    assert store.get_holder("nope") is None
    assert store.get_epoch("nope") == 0
    assert store.list_workflows()["items"] == []


def test_if_exists_error_rejects_a_second_create_and_keeps_the_first(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, _ = kit.start(eid)

    (result,) = store.apply(eid, [kit.create_intent(wid, if_exists="error")])

    assert isinstance(result, WorkflowAlreadyExists)
    assert result.workflow_id == wid
    assert store.get_workflow(wid)["run_id"] == run_id
    assert store.get_epoch(wid) == 1
    assert store.get_holder(wid)[:2] == (eid, 1)


def test_if_exists_return_answers_with_the_existing_run_and_claims_nothing(kit):
    store = kit.store
    eid = kit.engine()
    other = kit.engine()
    wid, run_id, _ = kit.start(eid)

    intent = kit.create_intent(wid, if_exists="return")
    (result,) = store.apply(other, [intent])

    assert isinstance(result, Created)
    assert result.created is False
    assert result.run_id == run_id != intent.run_id
    assert result.status == "running"
    assert store.get_workflow(wid)["run_id"] == run_id
    assert store.get_epoch(wid) == 1
    assert store.get_holder(wid)[:2] == (eid, 1)
    assert store.held_by(other) == []


def test_if_exists_start_new_on_a_running_workflow_is_rejected(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, _ = kit.start(eid)

    (result,) = store.apply(eid, [kit.create_intent(wid, if_exists="start_new")])

    assert isinstance(result, WorkflowAlreadyExists)
    assert store.get_workflow(wid)["run_id"] == run_id
    assert store.get_epoch(wid) == 1


def test_if_exists_start_new_after_finish_starts_a_new_run_at_the_next_epoch(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    assert kit.finish(eid, wid, epoch, run_id) is None

    intent = kit.create_intent(wid, if_exists="start_new")
    (result,) = store.apply(eid, [intent])

    assert result == Created(created=True, run_id=intent.run_id, status="running", epoch=2)
    assert intent.run_id != run_id
    assert store.get_epoch(wid) == 2
    assert store.get_holder(wid)[:2] == (eid, 2)
    assert store.get_workflow(wid)["run_id"] == intent.run_id
    assert store.get_workflow(wid)["status"] == "running"
    assert kit.listed_ids(status="running") == [wid]
    assert kit.listed_ids(status="completed") == []


def test_if_exists_start_new_continues_from_the_stored_epoch_not_a_literal(kit):
    store = kit.store
    eid = kit.engine()
    other = kit.engine()
    wid, run_id, _ = kit.start(eid)
    # Push the epoch to 3 by two takeovers, then finish and reuse the id.
    assert store.takeover(other, [(wid, store.get_holder_bytes(wid))]) == {wid: 2}
    assert store.takeover(eid, [(wid, store.get_holder_bytes(wid))]) == {wid: 3}
    assert kit.finish(eid, wid, 3, run_id) is None

    (result,) = store.apply(other, [kit.create_intent(wid, if_exists="start_new")])

    assert result.created and result.epoch == 4
    assert store.get_epoch(wid) == 4


def test_finish_releases_the_claim_keeps_the_epoch_and_moves_visibility(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    keep, _, _ = kit.start(eid)

    result = kit.finish(eid, wid, epoch, run_id, value={"total": 12})

    assert result is None
    record = store.get_workflow(wid)
    assert record["status"] == "completed"
    assert decode(record["result"]) == {"total": 12}
    assert store.get_holder(wid) is None
    assert store.get_holder_bytes(wid) is None
    assert store.get_epoch(wid) == epoch
    assert store.held_by(eid) == [keep]
    assert kit.listed_ids(status="running") == [keep]
    assert kit.listed_ids(status="completed") == [wid]
    assert sorted(kit.listed_ids()) == sorted([wid, keep])


def test_finished_workflow_takes_no_more_step_commits(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    assert kit.finish(eid, wid, epoch, run_id) is None

    (result,) = store.apply(eid, [StepCommit(wid, epoch, run_id, ops=(kit.op(1),))])

    assert isinstance(result, FencedOut)
    assert store.load_ops(wid, run_id) == {}


def test_terminal_statuses_cover_every_end_of_a_run_and_exclude_live_ones():
    assert {"completed", "failed", "cancelled", "terminated", "timed_out"} <= TERMINAL
    assert "running" not in TERMINAL
    assert "pending" not in TERMINAL


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_every_terminal_status_closes_the_workflow(kit, status):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)

    assert kit.finish(eid, wid, epoch, run_id, status=status, value="why") is None

    assert store.get_workflow(wid)["status"] == status
    assert kit.listed_ids(status=status) == [wid]
    assert kit.listed_ids(status="running") == []
    assert store.get_holder(wid) is None
    (appended,) = store.apply(eid, [AppendInbox(wid, "signal", "poke", encode(1))])
    assert isinstance(appended, WorkflowClosed)
    assert appended.status == status
    (again,) = store.apply(eid, [kit.create_intent(wid, if_exists="start_new")])
    assert isinstance(again, Created) and again.created and again.epoch == epoch + 1


def test_failed_finish_stores_the_error_and_no_result(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)

    assert kit.finish(eid, wid, epoch, run_id, status="failed", value="boom") is None

    record = store.get_workflow(wid)
    assert record["status"] == "failed"
    assert record["result"] is None
    assert record["error"] == {"type": "X", "message": "boom"}


def test_finish_stamps_updated_with_the_commit_time(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    created_at = store.get_workflow(wid)["updated"]
    fake_clock.advance(2.0)

    assert kit.finish(eid, wid, epoch, run_id) is None

    record = store.get_workflow(wid)
    assert record["created"] == pytest.approx(created_at, abs=1e-3)
    assert record["updated"] == pytest.approx(fake_clock.now(), abs=1e-3)
    (item,) = store.list_workflows(status="completed")["items"]
    assert item["updated"] == pytest.approx(fake_clock.now(), abs=1e-3)


def test_step_commit_fields_merge_into_the_workflow_record(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)

    (result,) = store.apply(eid, [StepCommit(wid, epoch, run_id, fields={"memo": encode("note")})])

    assert result is None
    record = store.get_workflow(wid)
    assert decode(record["memo"]) == "note"
    assert record["status"] == "running"
    assert record["run_id"] == run_id


def test_delayed_start_is_pending_and_unclaimed(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    intent = kit.create_intent()._replace(start_at=fake_clock.now() + 60)

    (result,) = store.apply(eid, [intent])

    assert result == Created(created=True, run_id=intent.run_id, status="pending", epoch=0)
    assert store.get_holder(intent.wid) is None
    assert store.get_epoch(intent.wid) == 0
    assert store.held_by(eid) == []
    assert store.count("timers") == 1
    assert kit.listed_ids(status="pending") == [intent.wid]
    assert kit.listed_ids(status="running") == []
