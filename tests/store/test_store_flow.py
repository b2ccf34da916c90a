"""Conformance: flow control (``concurrency`` per group), against a model.

Random sequences of starts (two keys, three priorities), endings of slot holders, closes of
queued starts and firings of promoted ones, each applied as the engine would apply it; after
every step the store must agree with a plain model of slots and a priority-then-FIFO queue:
each workflow's status, whether it holds a slot or waits, its place in the queue, and the
per-type totals. Each example uses a type of its own, so one store serves them all."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from weft_actors.codec import encode_args
from weft_actors.store import CloseWorkflow, Created, CreateWorkflow, FireStart, Finish, Flow, StepCommit, flow_group

from .conftest import new_run_id

CONCURRENCY = 2
_types = itertools.count()


@pytest.mark.timeout(120)
def test_slots_and_the_queue_match_a_model_through_random_starts_and_endings(kit: Any) -> None:
    store = kit.store
    engine = kit.engine()

    class FlowModel(RuleBasedStateMachine):
        @initialize()
        def fresh_type(self) -> None:
            self.wf_type = f"T{next(_types)}"
            self.holders: dict[str, dict[str, Any]] = {}
            """wid -> {key, run_id, epoch (None until a promoted start is fired)}"""
            self.queue: dict[str, list[tuple[int, int, str]]] = {"a": [], "b": []}
            """key -> [(-priority, arrival, wid)], kept sorted: the order starts leave it"""
            self.runs: dict[str, tuple[str, str]] = {}
            """wid -> (key, run_id) of the queued"""
            self.arrivals = itertools.count()
            self.ended: set[str] = set()

        def _promoted(self) -> None:
            """What the commit just applied gave a slot, as the store reports it."""
            promoted, store.promoted = store.promoted, []
            for wid, run_id, wf_type in promoted:
                assert wf_type == self.wf_type
                key, queued_run = self.runs.pop(wid)
                assert queued_run == run_id
                head = self.queue[key].pop(0)
                assert head[2] == wid, f"promoted {wid}, but {head[2]} heads the queue"
                self.holders[wid] = {"key": key, "run_id": run_id, "epoch": None}

        def _room(self, key: str) -> int:
            return CONCURRENCY - sum(1 for h in self.holders.values() if h["key"] == key)

        @rule(key=st.sampled_from(["a", "b"]), priority=st.sampled_from([-1, 0, 0, 1]))
        def start(self, key: str, priority: int) -> None:
            wid = kit.wid(self.wf_type)
            run_id = new_run_id()
            flow = Flow(flow_group(self.wf_type, key), CONCURRENCY, priority)
            intent = CreateWorkflow(wid, self.wf_type, encode_args((key,)), run_id, "error", None, None, None, None, flow)
            (created,) = store.apply(engine, [intent])
            assert isinstance(created, Created), created
            self._promoted()
            if self._room(key) > 0 and not self.queue[key]:
                assert created.status == "running" and created.epoch > 0
                self.holders[wid] = {"key": key, "run_id": run_id, "epoch": created.epoch}
            else:
                assert created.status == "pending" and created.epoch == 0
                self.queue[key].append((-priority, next(self.arrivals), wid))
                self.queue[key].sort()
                self.runs[wid] = (key, run_id)

        @precondition(lambda self: any(h["epoch"] is not None for h in self.holders.values()))
        @rule(data=st.data())
        def finish_a_running_one(self, data: st.DataObject) -> None:
            wid = data.draw(st.sampled_from(sorted(w for w, h in self.holders.items() if h["epoch"] is not None)))
            holder = self.holders.pop(wid)
            (result,) = store.apply(engine, [StepCommit(wid, holder["epoch"], holder["run_id"], finish=Finish("completed", None))])
            assert result is None or not isinstance(result, Exception), result
            self.ended.add(wid)
            self._promoted()

        @precondition(lambda self: any(self.queue.values()) or any(h["epoch"] is None for h in self.holders.values()))
        @rule(data=st.data())
        def close_a_waiting_one(self, data: st.DataObject) -> None:
            """A cancel or terminate of a start that is queued, or promoted and not yet fired."""
            waiting = sorted([wid for entries in self.queue.values() for _, _, wid in entries] + [w for w, h in self.holders.items() if h["epoch"] is None])
            wid = data.draw(st.sampled_from(waiting))
            (result,) = store.apply(engine, [CloseWorkflow(wid, "cancelled", {"type": "WorkflowCancelled", "message": "", "kind": "cancelled"})])
            assert isinstance(result, dict), result
            if wid in self.holders:
                del self.holders[wid]
            else:
                key, _ = self.runs.pop(wid)
                self.queue[key] = [entry for entry in self.queue[key] if entry[2] != wid]
            self.ended.add(wid)
            self._promoted()

        @precondition(lambda self: any(h["epoch"] is None for h in self.holders.values()))
        @rule()
        def fire_the_promoted(self) -> None:
            for wid, holder in sorted(self.holders.items()):
                if holder["epoch"] is None:
                    (epoch,) = store.apply(engine, [FireStart(wid, holder["run_id"])])
                    assert isinstance(epoch, int) and epoch > 0, epoch
                    holder["epoch"] = epoch
            assert store.promoted == []

        @invariant()
        def the_store_agrees(self) -> None:
            for wid, holder in self.holders.items():
                snapshot = store.load_for_describe(wid)
                assert snapshot.record["status"] == ("running" if holder["epoch"] is not None else "pending")
                assert snapshot.flow["queued"] is False and snapshot.flow["running"] == CONCURRENCY - self._room(holder["key"])
            for key, entries in self.queue.items():
                for position, (_, _, wid) in enumerate(entries, 1):
                    snapshot = store.load_for_describe(wid)
                    assert snapshot.record["status"] == "pending"
                    assert (snapshot.flow["queued"], snapshot.flow["position"], snapshot.flow["key"]) == (True, position, key)
                if entries:  # nobody waits while a slot is free
                    assert self._room(key) == 0
            totals = store.flow_counts().get(self.wf_type, {"running": 0, "queued": 0})
            assert totals == {"running": len(self.holders), "queued": sum(len(entries) for entries in self.queue.values())}
            for wid in self.ended:
                assert store.get_workflow(wid)["status"] in ("completed", "cancelled")

    run_state_machine_as_test(
        FlowModel,
        settings=settings(max_examples=40, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]),
    )


def _start(kit: Any, engine: str, wf_type: str, concurrency: int, key: str = "") -> tuple[str, Created]:
    wid = kit.wid(wf_type)
    flow = Flow(flow_group(wf_type, key), concurrency, 0)
    (created,) = kit.store.apply(engine, [CreateWorkflow(wid, wf_type, encode_args(()), new_run_id(), "error", None, None, None, None, flow)])
    return wid, created


def test_a_raised_limit_gives_its_new_slots_to_those_waiting_before_a_new_start(kit: Any) -> None:
    store = kit.store
    engine = kit.engine()
    first, created = _start(kit, engine, "Raised", 1)
    assert created.status == "running"
    waiting = [_start(kit, engine, "Raised", 1) for _ in range(3)]
    assert all(created.status == "pending" for _, created in waiting)
    # The code now says 3: the next start promotes the two oldest waiting, then queues itself.
    late, created = _start(kit, engine, "Raised", 3)
    assert created.status == "pending"
    promoted, store.promoted = store.promoted, []
    assert [wid for wid, _, _ in promoted] == [waiting[0][0], waiting[1][0]]
    assert store.flow_counts()["Raised"] == {"running": 3, "queued": 2}
    assert store.load_for_describe(late).flow["position"] == 2  # behind the third one waiting
