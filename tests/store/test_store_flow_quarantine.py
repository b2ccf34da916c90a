"""Conformance: flow control and quarantine. A quarantined workflow gives its concurrency slot
to the head of its group's queue in the quarantine's own commit, so a poison workflow never
stalls its group until an operator acts; lifting the quarantine queues it again at the head of
that queue, ahead of every start waiting there, and a free slot goes to it at once."""

from __future__ import annotations

from typing import Any

import pytest

from weft_actors.codec import encode_args
from weft_actors.store import Created, CreateWorkflow, FireStart, Finish, Flow, LiftQuarantine, QuarantineWorkflow, StepCommit, check_store, flow_group

from .conftest import new_run_id


def _start(kit: Any, engine: str, wf_type: str, concurrency: int = 1, priority: int = 0) -> tuple[str, str, Created]:
    wid = kit.wid(wf_type)
    run_id = new_run_id()
    flow = Flow(flow_group(wf_type, "k"), concurrency, priority)
    (created,) = kit.store.apply(engine, [CreateWorkflow(wid, wf_type, encode_args(()), run_id, "error", None, None, None, None, flow)])
    assert isinstance(created, Created), created
    return wid, run_id, created


def _promoted(store: Any) -> list[str]:
    promoted, store.promoted = store.promoted, []
    return [wid for wid, _, _ in promoted]


def _fire(store: Any, engine: str, wid: str, run_id: str) -> int:
    (epoch,) = store.apply(engine, [FireStart(wid, run_id)])
    assert isinstance(epoch, int) and epoch > 0, epoch
    return epoch


def _position(store: Any, wid: str) -> int | None:
    flow = store.load_for_describe(wid).flow
    return flow["position"] if flow["queued"] else None


def _checked(store_factory: Any, kit: Any) -> None:
    if store_factory.name == "lmdb":  # the checker reads the LMDB layout
        assert check_store(store_factory.location, kit.clock.now()) == []


@pytest.mark.timeout(60)
def test_a_quarantine_gives_its_slot_to_the_head_of_the_queue_and_a_lift_queues_it_first(store_factory: Any, kit: Any) -> None:
    store = kit.store
    engine = kit.engine()
    poison, poison_run, created = _start(kit, engine, "Limited")
    assert created.status == "running"
    second, second_run, _ = _start(kit, engine, "Limited")
    urgent, urgent_run, _ = _start(kit, engine, "Limited", priority=127)  # the highest priority
    assert (_position(store, urgent), _position(store, second)) == (1, 2)

    (parked,) = store.apply(engine, [QuarantineWorkflow(poison, created.epoch, poison_run)])
    assert not isinstance(parked, Exception), parked
    assert _promoted(store) == [urgent]  # in the quarantine's own commit
    assert store.get_workflow(poison)["status"] == "quarantined" and not store.get_workflow(poison).get("slot")
    assert store.flow_counts()["Limited"] == {"running": 1, "queued": 1}
    urgent_epoch = _fire(store, engine, urgent, urgent_run)
    _checked(store_factory, kit)

    (lifted,) = store.apply(engine, [LiftQuarantine(poison)])
    assert lifted["status"] == "pending", lifted
    assert _promoted(store) == []  # no slot is free: it waits, at the head, ahead of priority 127
    assert store.get_workflow(poison)["status"] == "pending"
    assert (_position(store, poison), _position(store, second)) == (1, 2)
    assert store.flow_counts()["Limited"] == {"running": 1, "queued": 2}
    _checked(store_factory, kit)

    (result,) = store.apply(engine, [StepCommit(urgent, urgent_epoch, urgent_run, finish=Finish("completed", None))])
    assert not isinstance(result, Exception), result
    assert _promoted(store) == [poison]  # the lifted one takes the freed slot first
    poison_epoch = _fire(store, engine, poison, poison_run)
    assert poison_epoch > created.epoch and store.get_workflow(poison)["status"] == "running"
    (result,) = store.apply(engine, [StepCommit(poison, poison_epoch, poison_run, finish=Finish("completed", None))])
    assert not isinstance(result, Exception), result
    assert _promoted(store) == [second]
    _fire(store, engine, second, second_run)
    assert store.flow_counts()["Limited"] == {"running": 1, "queued": 0}
    _checked(store_factory, kit)


@pytest.mark.timeout(60)
def test_a_lift_with_a_free_slot_promotes_the_workflow_at_once(store_factory: Any, kit: Any) -> None:
    store = kit.store
    engine = kit.engine()
    poison, poison_run, created = _start(kit, engine, "Alone")
    (parked,) = store.apply(engine, [QuarantineWorkflow(poison, created.epoch, poison_run)])
    assert not isinstance(parked, Exception), parked
    assert store.flow_counts().get("Alone", {"running": 0, "queued": 0}) == {"running": 0, "queued": 0}
    (lifted,) = store.apply(engine, [LiftQuarantine(poison)])
    assert not isinstance(lifted, Exception), lifted
    assert _promoted(store) == [poison]  # in the lift's own commit
    assert store.flow_counts()["Alone"] == {"running": 1, "queued": 0}
    _fire(store, engine, poison, poison_run)
    assert store.get_workflow(poison)["status"] == "running"
    _checked(store_factory, kit)


@pytest.mark.timeout(60)
def test_several_lifted_workflows_each_go_to_the_head_of_the_queue(store_factory: Any, kit: Any) -> None:
    store = kit.store
    engine = kit.engine()
    first, first_run, first_created = _start(kit, engine, "Many", concurrency=2)
    later, later_run, later_created = _start(kit, engine, "Many", concurrency=2)
    waiting, _, _ = _start(kit, engine, "Many", concurrency=2)
    (parked,) = store.apply(engine, [QuarantineWorkflow(first, first_created.epoch, first_run)])
    assert _promoted(store) == [waiting]
    (parked,) = store.apply(engine, [QuarantineWorkflow(later, later_created.epoch, later_run)])
    assert not isinstance(parked, Exception), parked
    assert store.flow_counts()["Many"] == {"running": 1, "queued": 0}  # the promoted one
    _, _, blocker = _start(kit, engine, "Many", concurrency=2)
    assert blocker.status == "running"  # it takes the last slot
    store.apply(engine, [LiftQuarantine(first)])
    store.apply(engine, [LiftQuarantine(later)])
    assert (_position(store, later), _position(store, first)) == (1, 2)  # each lift goes to the head
    _checked(store_factory, kit)
