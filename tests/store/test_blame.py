"""Blame by evidence, on both backends: a lost owner's loss is charged only to the workflow
its death record or stall note names (``store._blame``), and on PostgreSQL both live in the
database, so a taker on another host (another local directory) charges the same workflow."""

from __future__ import annotations

import time

import pytest

from weft_actors.codec import encode_args
from weft_actors.store import CreateWorkflow, LoopSlot, loop_slot_path, read_loop_slot, stall_notes

HEARTBEAT, TTL = 0.5, 1.5
RUN = "11" * 16
OWNER, TAKER = "a" * 32, "b" * 32


def _owning(store, *wids: str) -> None:
    store.register_engine(OWNER, heartbeat=HEARTBEAT, ttl=TTL)
    store.apply(OWNER, [CreateWorkflow(wid, "poison", encode_args(("k",)), RUN) for wid in wids])


def _taker(store_factory, tmp_path):
    """A second store instance, as an engine on another host opens it: on PostgreSQL its
    local directory is another one, so nothing of the lost owner's files is readable there."""
    taker = store_factory()
    if store_factory.name == "postgresql":
        taker.path = str(tmp_path / "another-host")
    return taker


def _take_all(store, clock) -> dict:
    store.register_engine(TAKER, heartbeat=HEARTBEAT, ttl=TTL)
    return store.takeover(TAKER, [(wid, holder) for wid, holder, _ in store.reclaim_candidates(TAKER)])


def _lost(store, wid: str):
    return store.get_workflow(wid).get("lost")


def test_a_death_is_charged_to_the_workflow_whose_code_held_the_loop_and_to_no_neighbour(store_factory, fake_clock, tmp_path):
    owner = store_factory()
    _owning(owner, "culprit", "neighbour")
    slot = LoopSlot(loop_slot_path(owner.path, OWNER), threshold=1.0)
    # Its process ends while this activity has held the loop for 2 s (its watchdog published it).
    slot.publish("culprit", RUN, 3, "activity", "blocks", entered=time.monotonic() - 2.0)
    assert read_loop_slot(slot.path)["wid"] == "culprit"
    assert owner.mark_engine_dead(OWNER)
    slot.close()
    taker = _taker(store_factory, tmp_path)
    won = _take_all(taker, fake_clock)
    assert set(won) == {"culprit", "neighbour"} and all(won.values())
    lost = _lost(taker, "culprit")
    assert lost["count"] == 1 and lost["reason"] == {"seq": 3, "kind": "activity", "name": "blocks"}
    assert _lost(taker, "neighbour") is None


def test_a_death_with_an_idle_loop_or_code_only_passing_through_is_charged_to_nobody(store_factory, fake_clock, tmp_path):
    """Killed from outside: between two pieces of user code (the slot left), or while one ran
    only for a moment (shorter than the stall threshold): nobody's doing, nothing counts."""
    owner = store_factory()
    _owning(owner, "w", "v")
    slot = LoopSlot(loop_slot_path(owner.path, OWNER), threshold=1.0)
    slot.publish("v", RUN, 0, "workflow code", None, entered=time.monotonic() - 5.0)
    slot.unpublish()  # the loop turned again
    assert read_loop_slot(slot.path) is None
    slot.publish("w", RUN, 0, "activity", "long", entered=time.monotonic() - 0.3)  # under the threshold
    assert owner.mark_engine_dead(OWNER)
    slot.close()
    taker = _taker(store_factory, tmp_path)
    assert all(_take_all(taker, fake_clock).values())
    assert _lost(taker, "w") is None and _lost(taker, "v") is None


def test_a_stall_note_reaches_a_taker_on_another_host_and_blames_only_what_it_names(store_factory, fake_clock, tmp_path):
    """An owner's loop stalls: its watchdog's note (a row of the database on PostgreSQL) names
    the workflow; the owner's lease lapses; a taker elsewhere charges that workflow alone."""
    owner = store_factory()
    _owning(owner, "stalls-it", "bystander")
    stall_notes(owner, OWNER).write({"wid": "stalls-it", "run_id": RUN, "kind": "workflow code", "name": None, "seq": 2, "stalled": 1.2})
    fake_clock.advance(TTL + 2)
    taker = _taker(store_factory, tmp_path)
    won = _take_all(taker, fake_clock)
    assert set(won) == {"stalls-it", "bystander"} and all(won.values())
    assert _lost(taker, "stalls-it")["reason"] == {"seq": 2, "kind": "workflow code", "name": None}
    assert _lost(taker, "bystander") is None


@pytest.mark.timeout(30)
def test_a_cleared_stall_note_blames_nobody(store_factory, fake_clock, tmp_path):
    """The engine heartbeated after its stall (it kept its lease): the note goes, and a later
    loss of that owner names nobody."""
    owner = store_factory()
    _owning(owner, "w")
    notes = stall_notes(owner, OWNER)
    notes.write({"wid": "w", "run_id": RUN, "kind": "activity", "name": "x", "seq": 0})
    notes.clear()
    fake_clock.advance(TTL + 2)
    taker = _taker(store_factory, tmp_path)
    deadline = time.monotonic() + 10
    while True:  # on PostgreSQL the note is deleted from a thread of its own
        if store_factory.name != "postgresql" or _note_gone(taker):
            break
        assert time.monotonic() < deadline, "the stall note was never removed"
        time.sleep(0.02)
    assert all(_take_all(taker, fake_clock).values())
    assert _lost(taker, "w") is None


def _note_gone(store) -> bool:
    from weft_actors.store._blame import stall_note_key
    from weft_actors.store._keys import engine_key

    with store.env.begin() as txn:
        return txn.get(stall_note_key(engine_key(OWNER)), db=store.dbs.meta) is None


def test_pruning_an_engine_removes_its_stall_note_and_loop_slot(store_factory, fake_clock, tmp_path):
    """What blamed a long-gone engine's workflows goes with its record: no note row of the
    store, no file of this machine, grows for ever with the engines that came and went."""
    import os

    store = store_factory()
    store.register_engine(OWNER, heartbeat=HEARTBEAT, ttl=TTL)
    slot = LoopSlot(loop_slot_path(store.path, OWNER), threshold=1.0)
    stall_notes(store, OWNER).write({"wid": "w", "run_id": RUN, "kind": "activity", "name": "x", "seq": 0})
    store.release_engine(OWNER)
    fake_clock.advance(60)
    assert store.prune_engines(keep=10) == [OWNER]
    assert not os.path.exists(slot.path)
    if store_factory.name == "postgresql":
        assert _note_gone(store)
    else:
        from weft_actors.store import stall_note_path

        assert not os.path.exists(stall_note_path(store.path, OWNER))
