"""Conformance: the fenced handoff of an engine's claims to a named successor (both stores)."""

from __future__ import annotations

import uuid

import pytest

from weft_actors.errors import EngineDeposed, FencedOut
from weft_actors.store import CloseWorkflow, HandoffRefused, StepCommit, hand_off_claims, held_claims

TERMINATED = {"type": "WorkflowTerminated", "message": "stop", "kind": "terminated"}


def test_handoff_moves_the_claim_at_the_next_epoch_and_fences_the_old_owner(kit):
    store = kit.store
    old, new = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(old)

    assert held_claims(store, old) == [(wid, epoch)]
    moved = hand_off_claims(store, old, new, [(wid, epoch)])

    assert moved == {wid: epoch + 1}
    holder = store.get_holder(wid)
    assert holder is not None and holder[:2] == (new, epoch + 1)
    assert store.held_by(old) == [] and store.held_by(new) == [wid]
    # A late commit of the old owner, at the epoch it held: fenced out, nothing written.
    (late,) = store.apply(old, [StepCommit(wid, epoch, run_id, ops=(kit.op(0),))])
    assert isinstance(late, FencedOut)
    assert store.load_ops(wid, run_id) == {}
    (ok,) = store.apply(new, [StepCommit(wid, epoch + 1, run_id, ops=(kit.op(0),))])
    assert ok is None and list(store.load_ops(wid, run_id)) == [0]


def test_a_claim_no_longer_held_at_that_epoch_is_not_moved(kit):
    store = kit.store
    old, new, other = kit.engine(), kit.engine(), kit.engine()
    closed, _, closed_epoch = kit.start(old)
    kept, _, kept_epoch = kit.start(old)
    (result,) = store.apply(other, [CloseWorkflow(closed, "terminated", TERMINATED)])  # rotates the epoch
    assert result["epoch"] == closed_epoch + 1

    moved = hand_off_claims(store, old, new, [(closed, closed_epoch), (kept, kept_epoch + 7)])

    assert moved == {closed: None, kept: None}  # closed meanwhile; a stale epoch
    assert store.get_holder(closed) is None
    holder = store.get_holder(kept)
    assert holder is not None and holder[:2] == (old, kept_epoch)


def test_a_successor_that_is_not_live_refuses_and_nothing_moves(kit):
    store = kit.store
    old, gone = kit.engine(), kit.engine()
    wid, _, epoch = kit.start(old)
    store.mark_engine_dead(gone)

    with pytest.raises(HandoffRefused):
        hand_off_claims(store, old, gone, [(wid, epoch)])
    with pytest.raises(HandoffRefused):
        hand_off_claims(store, old, "ab" * 16, [(wid, epoch)])  # never registered
    holder = store.get_holder(wid)
    assert holder is not None and holder[:2] == (old, epoch)


def test_a_deposed_engine_hands_off_nothing(kit):
    store = kit.store
    old, new = kit.engine(), kit.engine()
    wid, _, epoch = kit.start(old)
    store.mark_engine_dead(old)

    with pytest.raises(EngineDeposed):
        hand_off_claims(store, old, new, [(wid, epoch)])
    assert store.held_by(new) == []


def test_held_claims_pages_through_every_claim(kit):
    store = kit.store
    old = kit.engine()
    started = {kit.start(old)[0] for _ in range(7)}

    seen: list[str] = []
    after = b""
    while page := held_claims(store, old, after, limit=3):
        assert len(page) <= 3
        seen += [wid for wid, _ in page]
        after = page[-1][0].encode()
    assert sorted(seen) == sorted(started) and len(seen) == 7


def test_a_successor_must_run_the_types_handed_to_it_built_in_ones_aside(kit):
    store = kit.store
    old = kit.engine()
    runs_order, runs_other = uuid.uuid4().hex, uuid.uuid4().hex
    store.register_engine(runs_order, heartbeat=kit.HEARTBEAT, ttl=kit.TTL, types=["Order"])
    store.register_engine(runs_other, heartbeat=kit.HEARTBEAT, ttl=kit.TTL, types=["Other"])
    order, _, order_epoch = kit.start(old)
    schedule, _, schedule_epoch = kit.start(old, wf_type="weft.schedule")

    with pytest.raises(HandoffRefused):
        hand_off_claims(store, old, runs_other, [(order, order_epoch)])
    with pytest.raises(HandoffRefused):  # a built-in type is run by every engine, but only if told so
        hand_off_claims(store, old, runs_order, [(schedule, schedule_epoch)])
    moved = hand_off_claims(store, old, runs_order, [(order, order_epoch), (schedule, schedule_epoch)], frozenset({"weft.schedule"}))
    assert moved == {order: order_epoch + 1, schedule: schedule_epoch + 1}


def test_a_handoff_marks_what_it_moved_for_the_successor_and_the_marks_go_when_read_or_pruned(kit):
    from weft_actors.store import clear_handed, handed_to

    store = kit.store
    old, new, bystander = kit.engine(), kit.engine(), kit.engine()
    first, _, first_epoch = kit.start(old)
    second, _, second_epoch = kit.start(old)
    gone, _, gone_epoch = kit.start(old)
    (closed,) = store.apply(bystander, [CloseWorkflow(gone, "terminated", TERMINATED)])

    moved = hand_off_claims(store, old, new, [(first, first_epoch), (second, second_epoch), (gone, gone_epoch)])

    assert moved[gone] is None
    assert sorted(handed_to(store, new)) == sorted([first, second])  # only what moved
    assert handed_to(store, old) == [] and handed_to(store, bystander) == []
    assert handed_to(store, new, limit=1) in ([first], [second])
    clear_handed(store, new, [first])
    assert handed_to(store, new) == [second]
    store.mark_engine_dead(bystander)
    with pytest.raises(EngineDeposed):  # a deposed engine clears nothing either
        clear_handed(store, bystander, [second])
    # An engine pruned from the registry takes its marks with it.
    store.release_engine(new)
    kit.clock.advance(11)
    assert new in store.prune_engines(keep=10)
    assert handed_to(store, new) == []
