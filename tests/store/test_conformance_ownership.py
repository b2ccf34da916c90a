"""Conformance: external closes, purge, delayed-start firing, feed and registry pruning,
re-registration of an engine id, and ``single`` mode leases."""

from __future__ import annotations

import math

import pytest

from weft_actors.codec import encode
from weft_actors.errors import EngineDeposed, FencedOut, InvalidRequest, WorkflowClosed, WorkflowNotFound
from weft_actors.store import (
    AppendInbox,
    CloseWorkflow,
    CreateWorkflow,
    FireStart,
    PurgeWorkflow,
    StepCommit,
    TimerRef,
)

from .conftest import new_run_id

TERMINATED = {"type": "WorkflowTerminated", "message": "stop", "kind": "terminated"}


def _sleeping(kit, engine_id):
    """A running workflow with a recorded sleep (op 0) and its durable timer."""
    wid, run_id, epoch = kit.start(engine_id)
    fire_at = kit.clock.now() + 60
    op = (0, encode({"kind": "sleep", "name": "sleep", "fire_at": fire_at}))
    (result,) = kit.store.apply(engine_id, [StepCommit(wid, epoch, run_id, ops=(op,), timers_put=(TimerRef(fire_at, 0, "sleep"),))])
    assert result is None
    return wid, run_id, epoch


def _advance(kit, seconds, *alive):
    """Move the clock in steps of one second, heartbeating ``alive`` so they stay live."""
    while seconds > 0:
        step = min(1.0, seconds)
        kit.clock.advance(step)
        seconds -= step
        for engine_id in alive:
            kit.store.heartbeat(engine_id)


def _listed(kit, status):
    return [item["id"] for item in kit.store.list_workflows(status=status)["items"]]


# -- external close ---------------------------------------------------------------------------


def test_close_by_a_non_owner_rotates_the_epoch_and_drops_claim_timers_and_listing(kit):
    store = kit.store
    owner, other = kit.engine(), kit.engine()
    wid, run_id, epoch = _sleeping(kit, owner)
    head = store.feed_head()

    (closed,) = store.apply(other, [CloseWorkflow(wid, "terminated", TERMINATED)])

    assert closed["epoch"] == epoch + 1 and closed["previous_owner"] == owner
    assert store.get_epoch(wid) == epoch + 1
    assert store.get_holder(wid) is None
    assert store.held_by(owner) == []
    assert store.count("timers") == 0
    record = store.get_workflow(wid)
    assert record["status"] == "terminated" and record["error"] == TERMINATED
    assert _listed(kit, "running") == [] and _listed(kit, "terminated") == [wid]
    assert store.read_feed(head) == [(head + 1, wid)]  # the owner's poll notices
    (fenced,) = store.apply(owner, [StepCommit(wid, epoch, run_id, ops=(kit.op(1),))])
    assert isinstance(fenced, FencedOut)
    assert list(store.load_ops(wid, run_id)) == [0]


def test_close_of_an_ownerless_or_pending_workflow_clears_its_index_and_start_timer(kit):
    store = kit.store
    eid = kit.engine()
    released, _, _ = kit.start(eid)
    store.release_engine(eid)
    other = kit.engine()
    pending = kit.wid()
    (created,) = store.apply(other, [CreateWorkflow(pending, "Order", encode(()), new_run_id(), start_at=kit.clock.now() + 30)])
    assert created.status == "pending" and store.count("timers") == 1

    results = store.apply(other, [CloseWorkflow(released, "terminated", TERMINATED), CloseWorkflow(pending, "terminated", TERMINATED)])

    assert [r["status"] for r in results] == ["terminated", "terminated"]
    assert store.reclaim_candidates(other) == []
    assert store.count("by_engine") == 0 and store.count("timers") == 0
    assert store.get_epoch(pending) == 1  # rotated from 0: never claimed, still fenced


def test_close_of_a_finished_or_unknown_workflow_is_refused_and_writes_nothing(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    kit.finish(eid, wid, epoch, run_id)

    finished, unknown = store.apply(eid, [CloseWorkflow(wid, "terminated", TERMINATED), CloseWorkflow("nope", "terminated")])

    assert isinstance(finished, WorkflowClosed) and isinstance(unknown, WorkflowNotFound)
    assert store.get_workflow(wid)["status"] == "completed"
    assert store.get_epoch(wid) == epoch


def test_close_for_an_older_run_does_not_close_the_current_one(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)

    (stale,) = store.apply(eid, [CloseWorkflow(wid, "timed_out", None, new_run_id())])

    assert isinstance(stale, WorkflowClosed)
    assert store.get_workflow(wid)["status"] == "running"
    assert store.get_holder(wid)[:2] == (eid, epoch)


# -- purge -----------------------------------------------------------------------------------


def test_purge_removes_a_finished_workflow_but_keeps_and_bumps_its_epoch(kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    store.apply(eid, [StepCommit(wid, epoch, run_id, ops=(kit.op(0),)), AppendInbox(wid, "signal", "late", encode(1))])
    kit.finish(eid, wid, epoch, run_id)

    (new_epoch,) = store.apply(eid, [PurgeWorkflow(wid)])

    assert new_epoch == epoch + 1 == store.get_epoch(wid)
    assert store.get_workflow(wid) is None
    assert store.load_ops(wid, run_id) == {} and store.load_inbox(wid) == []
    assert kit.listed_ids() == []
    wid2, _, epoch2 = kit.start(eid, wid)  # the id is reusable, at a later epoch
    assert epoch2 == epoch + 2


def test_purge_of_a_running_workflow_is_refused(kit):
    store = kit.store
    eid = kit.engine()
    wid, _, epoch = kit.start(eid)

    (refused,) = store.apply(eid, [PurgeWorkflow(wid)])

    assert isinstance(refused, InvalidRequest)
    assert store.get_holder(wid)[:2] == (eid, epoch)


# -- delayed start ----------------------------------------------------------------------------


def test_fire_start_claims_a_due_pending_workflow_once(kit, fake_clock):
    store = kit.store
    a, b = kit.engine(), kit.engine()
    wid, run_id = kit.wid(), new_run_id()
    store.apply(a, [CreateWorkflow(wid, "Order", encode(()), run_id, start_at=fake_clock.now() + 5, execution_timeout=60)])
    assert store.due_system_timers() == []
    _advance(kit, 5, b)
    assert [(w, kind) for _, w, kind, _ in store.due_system_timers()] == [(wid, "start")]

    first, second = store.apply(b, [FireStart(wid, run_id), FireStart(wid, run_id)])

    assert (first, second) == (1, None)
    assert store.get_holder(wid)[:2] == (b, 1)
    assert store.get_workflow(wid)["status"] == "running"
    assert store.due_system_timers() == []
    fake_clock.advance(60)
    assert [(w, kind) for _, w, kind, _ in store.due_system_timers()] == [(wid, "deadline")]


def test_finishing_a_run_deletes_its_execution_deadline(kit):
    store = kit.store
    eid = kit.engine()
    intent = CreateWorkflow(kit.wid(), "Order", encode(()), new_run_id(), execution_timeout=10)
    (created,) = store.apply(eid, [intent])
    assert store.count("timers") == 1

    kit.finish(eid, intent.wid, created.epoch, intent.run_id)

    assert store.count("timers") == 0


# -- pruning ---------------------------------------------------------------------------------


def test_feed_is_pruned_only_below_every_live_cursor_and_past_the_retention(kit, fake_clock):
    store = kit.store
    fast, slow, dead = kit.engine(), kit.engine(), kit.engine()
    wid, _, _ = kit.start(fast)
    seqs = [store.apply(fast, [AppendInbox(wid, "signal", "s", encode(n))])[0] for n in range(6)]
    store.heartbeat(slow, feed_cursor=seqs[1])
    store.heartbeat(dead, feed_cursor=0)
    store.mark_engine_dead(dead)  # a dead engine's cursor holds nothing back

    assert store.prune_feed(fast, own_cursor=seqs[-1], retention=10) == 0  # too young
    _advance(kit, 11, fast, slow)
    assert store.prune_feed(fast, own_cursor=seqs[-1], retention=10) == 2
    assert [seq for seq, _ in store.read_feed(0)] == seqs[2:]

    store.heartbeat(slow, feed_cursor=seqs[-1])
    assert store.prune_feed(fast, own_cursor=seqs[3], retention=10) == 2  # the caller's own cursor counts too
    assert [seq for seq, _ in store.read_feed(0)] == seqs[4:]
    assert store.feed_head() == seqs[-1]  # sequence numbers never go back


def test_feed_prune_by_a_deposed_engine_changes_nothing(kit, fake_clock):
    store = kit.store
    eid = kit.engine()
    wid, _, _ = kit.start(eid)
    store.apply(eid, [AppendInbox(wid, "signal", "s", encode(1))])
    fake_clock.advance(100)

    assert store.prune_feed(eid, own_cursor=10, retention=1) == 0
    assert store.count("feed") == 1


def test_ended_engines_are_pruned_after_the_window_unless_they_still_hold_claims(kit, fake_clock):
    store = kit.store
    stopped, dead_holding, live = kit.engine(), kit.engine(), kit.engine()
    store.release_engine(stopped)
    kit.start(dead_holding)
    store.mark_engine_dead(dead_holding)

    assert store.prune_engines(keep=10) == []
    _advance(kit, 9.9, live)
    assert store.prune_engines(keep=10) == []
    _advance(kit, 0.2, live)
    assert store.prune_engines(keep=10) == [stopped]
    assert set(store.engines()) == {dead_holding, live}


# -- registration ----------------------------------------------------------------------------


def test_registering_an_engine_id_again_deposes_the_old_incarnation_and_frees_its_claims(store_factory, kit):
    store = kit.store
    eid = kit.engine()
    wid, run_id, epoch = kit.start(eid)
    other = store_factory()
    other.register_engine(eid, heartbeat=kit.HEARTBEAT, ttl=kit.TTL)

    with pytest.raises(EngineDeposed, match="registered again"):
        store.heartbeat(eid)
    (result,) = store.apply(eid, [StepCommit(wid, epoch, run_id, ops=(kit.op(0),))])
    assert isinstance(result, EngineDeposed)
    assert store.get_holder(wid) is None
    observer = kit.engine()
    assert [c[0] for c in store.reclaim_candidates(observer)] == [wid]


def test_single_mode_lease_never_expires_and_heartbeat_does_not_extend_it(kit, fake_clock):
    store = kit.store
    eid = kit.engine(mode="single")
    assert store.engines()[eid]["expires_at"] == math.inf
    fake_clock.advance(10_000)

    store.heartbeat(eid)
    wid, _, _ = kit.start(eid)

    assert store.engines()[eid]["expires_at"] == math.inf
    assert store.check_engine(eid)["state"] == "live"
    store.mark_engine_dead(eid)
    with pytest.raises(EngineDeposed):
        store.check_engine(eid)


def test_release_by_an_engine_already_marked_dead_releases_nothing(kit):
    store = kit.store
    eid = kit.engine()
    wid, _, epoch = kit.start(eid)
    store.mark_engine_dead(eid)

    assert store.release_engine(eid) == 0

    assert store.get_holder(wid)[:2] == (eid, epoch)
    assert store.engines()[eid]["state"] == "dead"
