"""Conformance: takeover as a CAS on the holder bytes, reclaim candidates, graceful release,
and epochs that only ever grow."""

from __future__ import annotations

import pytest

from weft_actors.codec import encode
from weft_actors.errors import EngineDeposed, FencedOut
from weft_actors.store import AppendInbox, StepCommit, split_holder


def _expire(kit, engine_id):
    """Advance the clock 1 ms past ``engine_id``'s expiry boundary (read from its record)."""
    record = kit.store.engines()[engine_id]
    kit.clock.advance(record["expires_at"] + 2 * record["heartbeat"] - kit.clock.now() + 0.001)


def test_takeover_with_the_bytes_read_wins_at_the_next_epoch(kit, fake_clock):
    store = kit.store
    loser, winner = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(loser)
    read = store.get_holder_bytes(wid)
    assert split_holder(read)[:2] == (loser, epoch)
    fake_clock.advance(0.25)

    won = store.takeover(winner, [(wid, read)])

    assert won == {wid: epoch + 1}
    assert store.get_epoch(wid) == epoch + 1
    assert store.get_holder(wid) == (winner, epoch + 1, pytest.approx(fake_clock.now(), abs=1e-3))
    assert store.held_by(winner) == [wid]
    assert store.held_by(loser) == []
    # The winner can now write; the loser cannot.
    assert store.apply(winner, [StepCommit(wid, epoch + 1, run_id, ops=(kit.op(1),))]) == [None]
    (fenced,) = store.apply(loser, [StepCommit(wid, epoch, run_id, ops=(kit.op(2),))])
    assert isinstance(fenced, FencedOut)
    assert list(store.load_ops(wid, run_id)) == [1]


def test_takeover_with_stale_bytes_loses_and_changes_nothing(kit):
    store = kit.store
    a, b, c = kit.engine(), kit.engine(), kit.engine()
    wid, _, epoch = kit.start(a)
    stale = store.get_holder_bytes(wid)
    assert store.takeover(b, [(wid, stale)]) == {wid: epoch + 1}
    current = store.get_holder_bytes(wid)

    assert store.takeover(c, [(wid, stale)]) == {wid: None}

    assert store.get_holder_bytes(wid) == current
    assert store.get_epoch(wid) == epoch + 1
    assert store.held_by(c) == []
    assert store.held_by(b) == [wid]


def test_takeover_expecting_no_holder_loses_to_a_held_claim(kit):
    store = kit.store
    owner, other = kit.engine(), kit.engine()
    wid, _, epoch = kit.start(owner)

    assert store.takeover(other, [(wid, None)]) == {wid: None}

    assert store.get_holder(wid)[:2] == (owner, epoch)
    assert store.get_epoch(wid) == epoch


def test_takeover_of_a_finished_or_unknown_workflow_loses(kit):
    store = kit.store
    owner, other = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(owner)
    assert kit.finish(owner, wid, epoch, run_id) is None

    assert store.takeover(other, [(wid, None), ("unknown", None)]) == {wid: None, "unknown": None}

    assert store.get_epoch(wid) == epoch
    assert store.get_holder(wid) is None
    assert store.get_epoch("unknown") == 0


def test_takeover_handles_each_candidate_on_its_own(kit):
    store = kit.store
    dead, taker = kit.engine(), kit.engine()
    good, _, _ = kit.start(dead)
    bad, _, _ = kit.start(dead)
    store.mark_engine_dead(dead)

    won = store.takeover(taker, [(good, store.get_holder_bytes(good)), (bad, b"\x00" * 32)])

    assert won == {good: 2, bad: None}
    assert store.held_by(taker) == [good]
    assert store.get_holder(bad)[:2] == (dead, 1)


def test_takeover_by_a_deposed_engine_is_refused_and_changes_nothing(kit):
    store = kit.store
    owner, deposed = kit.engine(), kit.engine()
    wid, _, epoch = kit.start(owner)
    read = store.get_holder_bytes(wid)
    store.mark_engine_dead(deposed)

    with pytest.raises(EngineDeposed):
        store.takeover(deposed, [(wid, read)])

    assert store.get_holder_bytes(wid) == read
    assert store.get_epoch(wid) == epoch


def test_reclaim_candidates_lists_workflows_of_a_dead_engine(kit):
    store = kit.store
    dead, live = kit.engine(), kit.engine()
    a, _, _ = kit.start(dead, wf_type="Order")
    b, _, _ = kit.start(dead, wf_type="Refund")
    mine, _, _ = kit.start(live)
    store.mark_engine_dead(dead)

    candidates = store.reclaim_candidates(live)

    assert sorted(candidates) == sorted(
        [(a, store.get_holder_bytes(a), "Order"), (b, store.get_holder_bytes(b), "Refund")]
    )
    assert mine not in {wid for wid, _, _ in candidates}


def test_reclaim_candidates_lists_workflows_of_an_expired_engine(kit, fake_clock):
    store = kit.store
    stalled = kit.engine()
    wid, _, _ = kit.start(stalled)
    fake_clock.advance(2.0)
    live = kit.engine()  # registered later, so it outlives the stalled one

    assert store.reclaim_candidates(live) == []  # not expired yet
    _expire(kit, stalled)

    assert store.reclaim_candidates(live) == [(wid, store.get_holder_bytes(wid), "Order")]
    assert store.takeover(live, [(wid, store.get_holder_bytes(wid))]) == {wid: 2}
    assert store.reclaim_candidates(live) == []


def test_reclaim_candidates_never_lists_a_live_engines_workflows(kit, fake_clock):
    store = kit.store
    a, b = kit.engine(), kit.engine()
    kit.start(a)
    kit.start(b)
    # Up to the exact boundary both are still live.
    record = store.engines()[a]
    fake_clock.advance(record["expires_at"] + 2 * record["heartbeat"] - fake_clock.now())

    assert store.reclaim_candidates(a) == []
    assert store.reclaim_candidates(b) == []


def test_reclaim_candidates_skip_finished_workflows_of_a_dead_engine(kit):
    store = kit.store
    dead, live = kit.engine(), kit.engine()
    done, run_id, epoch = kit.start(dead)
    open_, _, _ = kit.start(dead)
    assert kit.finish(dead, done, epoch, run_id) is None
    store.mark_engine_dead(dead)

    assert [wid for wid, _, _ in store.reclaim_candidates(live)] == [open_]


def test_release_engine_drops_holders_keeps_epochs_and_makes_workflows_reclaimable(kit):
    store = kit.store
    leaving, staying = kit.engine(), kit.engine()
    a, _, _ = kit.start(leaving)
    b, _, _ = kit.start(leaving)
    finished, run_id, epoch = kit.start(leaving)
    assert kit.finish(leaving, finished, epoch, run_id) is None
    kept, _, _ = kit.start(staying)

    moved = store.release_engine(leaving)

    assert moved == 2
    assert store.get_holder(a) is None and store.get_holder(b) is None
    assert store.get_epoch(a) == 1 and store.get_epoch(b) == 1
    assert store.held_by(leaving) == []
    assert store.get_workflow(a)["status"] == "running"
    assert sorted(store.reclaim_candidates(staying)) == sorted([(a, None, "Order"), (b, None, "Order")])
    assert store.get_holder(kept)[:2] == (staying, 1)

    assert store.takeover(staying, [(a, None), (b, None)]) == {a: 2, b: 2}
    assert store.reclaim_candidates(staying) == []
    assert sorted(store.held_by(staying)) == sorted([a, b, kept])


def test_loser_of_a_takeover_is_fenced_on_finish_too(kit):
    store = kit.store
    loser, winner = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(loser)
    store.takeover(winner, [(wid, store.get_holder_bytes(wid))])

    assert isinstance(kit.finish(loser, wid, epoch, run_id), FencedOut)

    assert store.get_workflow(wid)["status"] == "running"
    assert kit.finish(winner, wid, epoch + 1, run_id) is None
    assert store.get_workflow(wid)["status"] == "completed"
    assert store.held_by(winner) == []


def test_epochs_only_grow_across_release_takeover_and_id_reuse(kit):
    store = kit.store
    e1, e2, e3 = kit.engine(), kit.engine(), kit.engine()
    issued = []

    wid, run_id, epoch = kit.start(e1)
    issued.append(epoch)
    store.release_engine(e1)
    assert store.get_epoch(wid) == issued[-1]  # release keeps the epoch
    issued.append(store.takeover(e2, [(wid, None)])[wid])
    assert kit.finish(e2, wid, issued[-1], run_id) is None
    assert store.get_epoch(wid) == issued[-1]  # finish keeps the epoch
    (created,) = store.apply(e3, [kit.create_intent(wid, if_exists="start_new")])
    issued.append(created.epoch)
    store.mark_engine_dead(e3)
    issued.append(store.takeover(e2, [(wid, store.get_holder_bytes(wid))])[wid])

    assert issued == [1, 2, 3, 4]
    assert store.get_epoch(wid) == 4


def test_reused_id_fences_out_the_previous_generations_owner(kit):
    store = kit.store
    old, new = kit.engine(), kit.engine()
    wid, run_id, epoch = kit.start(old)
    assert kit.finish(old, wid, epoch, run_id) is None
    intent = kit.create_intent(wid, if_exists="start_new")
    (created,) = store.apply(new, [intent])

    (result,) = store.apply(old, [StepCommit(wid, epoch, intent.run_id, ops=(kit.op(1),))])

    assert isinstance(result, FencedOut)
    assert store.load_ops(wid, intent.run_id) == {}
    assert store.get_holder(wid)[:2] == (new, created.epoch)


def test_signal_to_a_released_workflow_is_kept_for_the_next_owner(kit):
    store = kit.store
    leaving, taker = kit.engine(), kit.engine()
    wid, _, _ = kit.start(leaving)
    store.release_engine(leaving)

    (seq,) = store.apply(taker, [AppendInbox(wid, "signal", "go", encode(1))])
    assert store.takeover(taker, [(wid, None)]) == {wid: 2}

    assert [s for s, _ in store.load_inbox(wid)] == [seq]
