"""Graceful handoffs in the simulation (feature ``handoff``): an engine told to drain to a
named successor (``Engine.hand_off``), as the supervisor does on ``SIGUSR1``.

A handoff picks an up engine and another up engine as its successor, with a grace of 0 s,
0.3 s or 2 s. The wake (the supervisor's control pipe: reliable, but late by up to the hint
delay) reaches the successor unless it is dead by then. The handing engine then exits and
the supervisor starts a fresh one, as after any exit. The claims move one per transaction
(``BATCH`` lowered to 1), with a loop turn between two, and after each batch, with even odds,
another engine terminates one of the claims not moved yet (as an operator's command would): a
write that lands between the handoff's read of a claim and its write, which the handoff's
fence must leave alone. With the fence removed (``store._handoff.SKIP_FENCE``) the
handoff writes a holder onto the terminated workflow, and the store checker names it
(``holder_on_finished``, ``test_sim.test_a_missing_handoff_fence_is_found``).

Its draws come from a random stream of its own (``Random(f"{seed}:handoff")``): with the
feature left out, a seed runs as it did before it existed.
"""

from __future__ import annotations

import random
from typing import Any

import weft_actors.shard._handoff as engine_handoff
from weft_actors.store import CloseWorkflow

__all__ = ["Handoffs"]

TERMINATED = {"type": "WorkflowTerminated", "message": "sim handoff", "kind": "terminated"}


class Handoffs:
    def __init__(self, run: Any, seed: int) -> None:
        self.run = run
        self.world = run.world
        self.workload = run.workload
        self.rng = random.Random(f"{seed}:handoff")
        self.enabled = "handoff" in run.config.features

    def plan(self, start: float, seconds: float) -> None:
        if not self.enabled:
            return
        engine_handoff.BATCH = 1  # restored by ``restore``
        for _ in range(self.rng.randint(1, 3)):
            self.run.at(start + self.rng.uniform(0.5, seconds), "handoff", self._hand_off)

    @staticmethod
    def restore() -> None:
        engine_handoff.BATCH = engine_handoff.HANDOFF_BATCH

    def _hand_off(self) -> None:
        if self.run.draining:
            return
        up = self.world.up_nodes()
        if len(up) < 2:
            return
        rng = self.rng
        node, successor = rng.sample(up, 2)
        grace = rng.choice([0.0, 0.3, 2.0])
        world = self.world
        world.note(f"{node.name} hands off to {successor.name} (grace {grace})")

        def wake(wids: list[str]) -> None:
            self._interfere(node, successor)
            if successor.status != "dead":
                successor.loop.call_later(rng.uniform(0, world.config.hint_delay), successor.engine.adopt, list(wids))

        async def drain() -> None:
            moved = await node.engine.hand_off(successor.engine_id, grace, wake=wake)
            world.note(f"{node.name} handed {moved} workflows to {successor.name}")

        node.loop.create_task(drain())

    def _interfere(self, node: Any, successor: Any) -> None:
        """With even odds, terminate one workflow the handing engine still holds, as an
        operator's command from another process would: one transaction of another live engine,
        committed between two batches of the handoff (before that claim's own batch)."""
        if self.rng.random() < 0.5:
            return
        left = sorted(self.world.observer.held_by(node.engine_id))
        others = [other for other in self.world.up_nodes() if other is not node and other.engine.state == "running"]
        if not left or not others:
            return
        wid = self.rng.choice(left)
        through = self.rng.choice(others)
        store = through.engine.store
        record = store.get_workflow(wid)
        if record is None:
            return
        (result,) = store.apply(through.engine_id, [CloseWorkflow(wid, "terminated", TERMINATED)])
        ok = not isinstance(result, Exception)
        self.world.note(f"{through.name} terminates {wid} mid-handoff: {'ok' if ok else type(result).__name__}")
        if ok:
            self.workload.ledger.terminated.append((wid, record["run_id"]))
