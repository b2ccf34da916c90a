"""The simulated machine: engine "processes" on one store, one clock, one seeded scheduler.

Every engine is a real ``Engine`` (group committer, actors, reclaim, feed poll, wake guard)
with ``background=False`` on its own ``SimLoop``; its maintenance pass is a timer on that loop
every heartbeat, as the background task would run it. What the simulation replaces is time
(``SimClock``), the event-loop scheduling (the scheduler picks which engine runs its next
callback, and when time moves) and the process boundary (hints go through ``route_hint``,
which loses, duplicates and delays them; a killed engine's loop is simply dropped).

Faults enter through seams the engine already has: the committer's ``failpoint`` (called
before a batch, inside its transaction, after its commit) and the store's ``before_commit``,
plus the store's intent dispatch table for refusing one intent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import Any, Callable

from weft_actors import Engine
from weft_actors.errors import StorageError, StorageFull
from weft_actors.store import LmdbStore, _dispatch, _env
from weft_actors.store._engines import is_live

from _loop import SimClock, SimDeath, SimLoop
from _mirror import KEYSPACES
from _recording import RecordingEnv, StoreEnv
from sim_app import APP

__all__ = ["Node", "World"]

log = logging.getLogger("weft_actors.sim")


class Node:
    """One engine process. ``status``: up, stalled (its loop does not run until
    ``stall_until``), exited (its engine stopped or was deposed: the process ended), dead
    (killed)."""

    def __init__(self, world: World, name: str, engine_id: str) -> None:
        self.world = world
        self.name = name
        self.engine_id = engine_id
        self.loop = SimLoop(world.clock, name)
        self.status = "starting"
        self.stall_until = 0.0
        self.batches = 0
        self.armed: dict[int, str] = {}
        """batch number -> what happens to it: a death at a commit point, or a failed commit."""
        self.refuse_at: int | None = None
        """Refuse the intent with this number (counted over this engine's applied intents)."""
        self.intents_applied = 0
        self.engine = Engine(
            world.data_dir,
            app=APP,
            clock=world.clock,
            heartbeat=world.config.heartbeat,
            ttl=world.config.ttl,
            engine_id=engine_id,
            background=False,
            probe_peers=False,
            sync=False,
            map_size=world.config.map_size,
            on_commit_hint=self._hint,
            max_inflight_activities=world.config.max_inflight,
        )

    def _hint(self, kind: str, wid: str) -> None:
        self.world.route_hint(self, kind, wid)

    @property
    def runs(self) -> bool:
        """Its loop may run now (up, or exited with callbacks left: a deposed engine's
        leftovers still run, and must commit nothing)."""
        return self.status in ("up", "exited", "starting")

    # -- the committer's failpoint protocol ----------------------------------------------

    def batch(self) -> None:
        self.batches += 1

    def hit(self, point: str) -> None:
        fault = self.armed.get(self.batches)
        if fault is None:
            return
        if fault == f"die-{point}":
            del self.armed[self.batches]
            self.world.note(f"{self.name} dies at commit:{point} of batch {self.batches}")
            raise SimDeath(point)
        if fault == "mark-dead" and point == "after-commit":
            # The supervisor marks it dead right after this commit, and its heartbeat runs
            # before the commit's callbacks: its callers resume on a deposed engine.
            del self.armed[self.batches]
            self.world.note(f"{self.name} marked dead after commit of batch {self.batches}")
            self.world.confirm_dead(self, hints=False)
            self.loop.call_soon(self.world._tick_once, self)
            return
        if fault == "fail-commit" and point == "after-apply":
            del self.armed[self.batches]
            self.world.note(f"{self.name} batch {self.batches} fails whole")
            raise StorageError("simulated commit failure")


class World:
    """Holds the nodes, routes hints and applies faults; ``_scheduler`` drives it."""

    def __init__(self, seed: int, config: Any, data_dir: str) -> None:
        self.seed = seed
        self.config = config
        self.data_dir = data_dir
        self.rng = random.Random(seed)
        self.clock = SimClock()
        self.nodes: list[Node] = []
        self.trace: list[str] = []
        self.violations: list[str] = []
        self._names = 0
        self._patched: dict[type, Any] = {}
        self._applying = False
        """An intent of a batch is being applied (the refusals spare what it hands on)."""
        self.refusing: dict[bytes, Node] = {}
        self.observer = LmdbStore(data_dir, clock=self.clock, sync=False, **({} if config.map_size is None else {"map_size": config.map_size}))
        """The simulation's own view of the store (it also keeps the environment open)."""
        shared = _env._OPEN[os.path.realpath(data_dir)]
        self.recording = RecordingEnv(shared[0], shared[1], KEYSPACES + ("feed",))
        shared[0] = self.recording  # every engine's store opens this one: its writes are recorded

    def close(self) -> None:
        for node in self.nodes:
            store = getattr(node.engine, "store", None)
            if store is not None:
                store.close()
        self.observer.close()

    def note(self, line: str) -> None:
        self.trace.append(f"{self.clock.monotonic() - 1000.0:.4f} {line}")

    def violation(self, what: str) -> None:
        self.note(f"VIOLATION {what}")
        self.violations.append(what)

    # -- processes ------------------------------------------------------------------------

    def start_node(self) -> Node:
        engine_id = f"{self.rng.getrandbits(128):032x}"
        node = Node(self, f"e{self._names}", engine_id)
        self._names += 1
        self.nodes.append(node)
        self.note(f"{node.name} starts as {engine_id[:8]}")
        node.loop.create_task(self._open(node))
        return node

    async def _open(self, node: Node) -> None:
        try:
            await node.engine.open()
        except Exception as exc:  # a full store may refuse even the registration
            self.note(f"{node.name} failed to open: {type(exc).__name__}")
            node.status = "exited"
            return
        node.engine.store.env = StoreEnv(self.recording, node.engine.store)  # type: ignore[assignment]
        node.engine.committer.failpoint = node  # type: ignore[assignment]
        node.engine.store.before_commit = lambda: node.hit("after-apply")
        node.status = "up"
        node.loop.call_later(self.config.heartbeat, self._tick, node)

    def _tick(self, node: Node) -> None:
        """The maintenance task's heartbeat pass, as ``Maintenance._run`` would run it."""
        if node.engine.state != "running":
            return
        node.loop.call_later(self.config.heartbeat, self._tick, node)
        node.engine.tick()

    def _tick_once(self, node: Node) -> None:
        if node.engine.state == "running":
            node.engine.tick()

    def _hinted_pass(self, node: Node) -> None:
        if node.engine.state == "running":
            node.engine.maintenance.run_pass(heartbeat=False)

    def kill(self, node: Node, confirm: bool) -> None:
        """The process dies: nothing of it runs again. With ``confirm`` the supervisor reaps
        it, marks the engine dead at once and tells the others (an engine-dead hint)."""
        if node.status == "dead":
            return
        node.status = "dead"
        node.loop.discard()
        self.note(f"{node.name} killed (confirmed={confirm})")
        if confirm:
            self.confirm_dead(node)

    def confirm_dead(self, node: Node, hints: bool = True) -> None:
        witness = next((other for other in self.nodes if other.status == "up"), None)
        if witness is None:
            return
        witness.engine.store.mark_engine_dead(node.engine_id)
        for other in self.nodes if hints else ():
            if other.status == "up" and self.rng.random() >= self.config.hint_loss:
                other.loop.call_later(self.rng.uniform(0, self.config.hint_delay), self._hinted_pass, other)

    def stall(self, node: Node, seconds: float) -> None:
        if node.status != "up":
            return
        node.status = "stalled"
        node.stall_until = self.clock.monotonic() + seconds
        self.note(f"{node.name} stalls for {seconds:.3f}s")

    def resume_due(self) -> None:
        now = self.clock.monotonic()
        for node in self.nodes:
            if node.status == "stalled" and node.stall_until <= now:
                node.status = "up"
                self.note(f"{node.name} resumes")

    def reap_exited(self) -> None:
        """An engine that stopped or was deposed ends its process (a shard exits, code 4)."""
        for node in self.nodes:
            if node.status == "up" and node.engine.state in ("deposed", "stopped"):
                node.status = "exited"
                self.note(f"{node.name} exits ({node.engine.state})")

    def up_nodes(self) -> list[Node]:
        return [node for node in self.nodes if node.status == "up" and node.engine.state == "running"]

    # -- hints ----------------------------------------------------------------------------

    def route_hint(self, source: Node, kind: str, wid: str) -> None:
        config = self.config
        for node in self.nodes:
            if node is source or node.status in ("dead", "exited", "starting"):
                continue
            copies = 0 if self.rng.random() < config.hint_loss else 1
            if copies and self.rng.random() < config.hint_dup:
                copies = 2
            for _ in range(copies):
                node.loop.call_later(self.rng.uniform(0, config.hint_delay), node.engine.hint, wid, kind)

    # -- intent refusal (through the store's dispatch table) -----------------------------

    def patch_dispatch(self) -> None:
        table = _dispatch.APPLIER_OF
        for kind, applier in list(table.items()):
            self._patched[kind] = applier
            table[kind] = self._refusing(applier)

    def unpatch_dispatch(self) -> None:
        _dispatch.APPLIER_OF.update(self._patched)
        self._patched.clear()

    def _refusing(self, applier: Callable[..., Any]) -> Callable[..., Any]:
        def apply(state: Any, intent: Any) -> Any:
            # Only an intent of the batch is refused, never one an applier hands another
            # through the table (a step's effects, a run's end reaching its parent): those are
            # parts of their intent, which a store refuses whole, before writing anything.
            if self._applying:
                return applier(state, intent)
            node = self.refusing.get(state.engine_raw)
            if node is not None:
                node.intents_applied += 1
                if node.intents_applied == node.refuse_at:
                    node.refuse_at = None
                    self.note(f"{node.name} intent {type(intent).__name__} refused")
                    raise StorageFull("simulated refusal of one intent")
            self._applying = True
            try:
                return applier(state, intent)
            finally:
                self._applying = False

        return apply

    # -- running --------------------------------------------------------------------------

    def run_node(self, node: Node) -> None:
        """Run ``node``'s next callback, and check the commit-time invariants around it."""
        store = getattr(node.engine, "store", None)
        before = None
        was_live = True
        if store is not None and not store._closed:
            before = store.env.info()["last_txnid"]
            record = store.engine(node.engine_id)
            # ``stopping``: a handoff's (or a stop's) own transactions, fenced by the record
            was_live = record is not None and is_live(record, self.clock.lease_now()) and node.engine.state in ("running", "stopping")
        died = False
        try:
            name = node.loop.run_one()
        except SimDeath:
            died = True
            name = "died"
        # Read before a confirmed death's kill: the witness that marks it dead commits that.
        after = None if before is None else self.observer.env.info()["last_txnid"]
        if died:
            self.kill(node, confirm=self.rng.random() < self.config.confirm_death)
        self.note(f"{node.name} {name}")
        for error in node.loop.errors:
            self.violation(f"{node.name}: {error}")
        node.loop.errors.clear()
        if before is not None:
            if after != before and not was_live:
                self.violation(f"{node.name} committed while not live (engine state {node.engine.state})")
            if self.observer.env.info()["last_txnid"] != before:
                self.on_commit()

    def on_commit(self) -> None:  # replaced by the scheduler's invariant checks
        pass
