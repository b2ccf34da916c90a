"""Calls added to the workload after its first findings, each for a kind of bug the first
workload could not show: queries starved by a run that keeps going ahead of its commits
(``spinner``), user code that raises ``SystemExit`` (``quitter``), a client payload whose type
tag names a module (``hostile-payload``), a delayed relay that finds its signals already
waiting, so each run starts its child and continues as new at once, the child's end landing
in the same group commit (``relay-burst``), a collector stopped with signals behind the
``stop`` in its inbox and then started anew with ``start_new`` (``leftovers``: they were the
old run's, and must not reach the new one), a parent racing its child against a signal, both
signalled in one loop turn (``kin``: the child's end and the parent's continue-as-new land in
one group commit), a terminate or cancel whose engine is marked dead right after its commit
and deposed by a heartbeat before its caller resumes (``deposed-caller``: the call took
effect, so it is a success), starts of a type under flow control, one at a time per key,
with priorities (``queued``: every one must end, and the group counts must hold).

They draw from a random stream of their own (``Random(f"{seed}:extras")``), never from the
run's: with these features left out (``--without spinner,quitter,hostile-payload``) a seed
runs exactly as it did before they existed, so the replay commands of earlier findings
still replay (``--without deposed-caller,hostile-payload,kin,leftovers,queued,quitter,relay-burst,spinner``).
"""

from __future__ import annotations

import random
from typing import Any

import msgpack

from weft_actors.supervisor._shard_ops import ShardOps

from sim_app import collector, kin, queued, quitter, relay, spinner

__all__ = ["EXTRA_FEATURES", "Extras", "QUERY_COMMITS", "TRAP_MODULE"]

EXTRA_FEATURES = ("spinner", "quitter", "hostile-payload", "relay-burst", "leftovers", "kin", "deposed-caller", "queued")
QUERY_COMMITS = 3
"""A query to a workflow whose actor is on the engine asked is answered within this many of
that engine's group commits (the promise: within one commit of its arrival; the slack covers
a commit that fails and is retried)."""
TRAP_MODULE = "sim_trap"
_EXT_CLASS = 12  # the codec's tag of a class instance by (module, qualname)


class Extras:
    def __init__(self, run: Any, seed: int) -> None:
        self.run = run
        self.world = run.world
        self.workload = run.workload
        self.rng = random.Random(f"{seed}:extras")
        self.features = [name for name in EXTRA_FEATURES if name in run.config.features]

    def plan(self, start: float, seconds: float) -> None:
        if not self.features:
            return
        for _ in range(self.rng.randint(2, 8)):
            kind = self.rng.choice(self.features)
            self.run.at(start + self.rng.uniform(0.01, seconds), f"extra {kind}", lambda kind=kind: self._call(kind))

    def _call(self, kind: str) -> None:
        up = self.world.up_nodes()
        if not up:
            return
        node = self.rng.choice(up)
        rng = self.rng
        wid = f"{kind}-{rng.randint(0, 2)}"
        if kind == "spinner":
            self.workload.ledger.types.setdefault(wid, "spinner")
            count, patience, queries = rng.randint(5, 30), rng.choice([60.0, 600.0]), rng.randint(1, 3)
            self.workload.issue(node, f"spin {wid} {count}", lambda engine: self._spin(node, wid, count, patience, queries))
            self.run.at(self.run.now() + rng.uniform(0.5, 4.0), "extra stop", lambda: self._stop(wid))
        elif kind == "quitter":
            self.workload.ledger.types.setdefault(wid, "quitter")
            where = rng.choice(["at-once", "after-step"])
            self.workload.issue(node, f"start {wid} {where}", lambda engine: engine.start(quitter, where, id=wid, if_exists="start_new"))
        elif kind == "relay-burst":
            wid = f"burst-{rng.randint(0, 2)}"
            self.workload.ledger.types.setdefault(wid, "relay")
            left, delay = rng.randint(1, 4), rng.uniform(0.05, 1.0)
            self.workload.issue(node, f"burst {wid} {left}", lambda engine: self._burst(engine, wid, left, delay))
        elif kind == "kin":
            index = rng.randint(0, 2)
            wid, kid_id = f"kin-{index}", f"kid-{index}"
            self.workload.ledger.types.setdefault(wid, "kin")
            self.workload.issue(node, f"start {wid}", lambda engine: engine.start(kin, kid_id, 0, id=wid, if_exists="start_new"))
            self.run.at(self.run.now() + rng.uniform(0.05, 1.5), "extra signal kin", lambda: self._together(kid_id, wid))
        elif kind == "deposed-caller":
            known = sorted(self.workload.ledger.types)
            if not known or self.run.draining:
                return
            wid = rng.choice(known)
            node.armed[node.batches + 1] = "mark-dead"
            if rng.random() < 0.5:
                self.workload.issue(node, f"terminate {wid}", lambda engine: engine.terminate(wid, "sim"))
            else:
                self.workload.issue(node, f"cancel {wid}", lambda engine: engine.cancel(wid))
        elif kind == "queued":
            for _ in range(rng.randint(1, 4)):
                wid = f"queued-{rng.randint(0, 5)}"
                self.workload.ledger.types.setdefault(wid, "queued")
                key, delay, priority = rng.choice(["k0", "k1"]), rng.choice([0.0, 0.3, 1.0]), rng.choice([-1, 0, 0, 1])
                self.workload.issue(
                    node, f"start {wid} {key} p{priority}",
                    lambda engine, wid=wid, key=key, delay=delay, priority=priority: engine.start(queued, key, delay, id=wid, if_exists="start_new", priority=priority),
                )
        elif kind == "leftovers":
            self._leftovers(node, f"restart-{rng.randint(0, 1)}")
        else:
            target = rng.choice(sorted(self.workload.ledger.types) or ["steps-0"])
            evil = msgpack.packb(msgpack.ExtType(_EXT_CLASS, msgpack.packb([TRAP_MODULE, "Trap", {}])))
            request = {"op": "signal", "wid": target, "name": "s", "payload": evil}
            self.workload.issue(node, f"hostile signal to {target}", lambda engine: ShardOps(engine).dispatch(request))

    def _leftovers(self, node: Any, wid: str) -> None:
        """Start a collector; later send ``stop`` and a few tokens in one loop turn (one group
        commit: the tokens stay in the finished run's inbox), then ``start_new`` it."""
        rng = self.rng
        workload = self.workload
        workload.ledger.types.setdefault(wid, "collector")
        patience = rng.choice([0.5, 5.0])
        workload.issue(node, f"start {wid} return", lambda engine: self._start_collector(engine, wid, patience, "return"))

        def stop_and_more() -> None:
            up = self.world.up_nodes()
            if not up:
                return
            there = rng.choice(up)
            workload.issue(there, f"signal {wid} stop", lambda engine: engine.signal(wid, "s", "stop"))
            for _ in range(rng.randint(1, 3)):
                token = workload._token(wid)
                workload.issue(there, f"signal {wid} {token}", lambda engine, token=token: self._signal(engine, wid, token))
            again = self.run.now() + rng.uniform(0.1, 1.0)
            self.run.at(again, "extra start_new", lambda: self._restart(wid, patience))

        self.run.at(self.run.now() + rng.uniform(0.3, 2.0), "extra stop and more", stop_and_more)

    def _restart(self, wid: str, patience: float) -> None:
        up = self.world.up_nodes()
        if up:
            node = self.rng.choice(up)
            self.workload.issue(node, f"start {wid} start_new", lambda engine: self._start_collector(engine, wid, patience, "start_new"))

    async def _start_collector(self, engine: Any, wid: str, patience: float, if_exists: str) -> None:
        await engine.start(collector, [], 0, 2, patience, id=wid, if_exists=if_exists)
        self.workload.ledger.started.add(wid)

    async def _signal(self, engine: Any, wid: str, token: str) -> None:
        before = self.workload.run_of(wid)
        await engine.signal(wid, "s", token)
        self.workload._acked(wid, token, before)

    def _together(self, *wids: str) -> None:
        """Signal each of ``wids`` in one loop turn of one engine (one group commit), a terminate or cancel whose engine is marked dead right after its commit
and deposed by a heartbeat before its caller resumes (``deposed-caller``: the call took
effect, so it is a success), starts of a type under flow control, one at a time per key,
with priorities (``queued``: every one must end, and the group counts must hold)."""
        up = self.world.up_nodes()
        if up:
            node = self.rng.choice(up)
            for wid in wids:
                self.workload.issue(node, f"signal {wid} go", lambda engine, wid=wid: engine.signal(wid, "s", "go"))

    def _stop(self, wid: str) -> None:
        up = self.world.up_nodes()
        if up:
            node = self.rng.choice(up)
            self.workload.issue(node, f"signal {wid} stop", lambda engine: engine.signal(wid, "s", "stop"))

    async def _burst(self, engine: Any, wid: str, left: int, delay: float) -> None:
        await engine.start(relay, left, [["a", 0.0]], id=wid, if_exists="start_new", start_delay=delay)
        self.workload.ledger.started.add(wid)
        for index in range(left + 1):
            await engine.signal(wid, "s", f"b{index}")

    async def _spin(self, node: Any, wid: str, count: int, patience: float, queries: int) -> Any:
        """Start a spinner here and query it while its run goes ahead of its commits."""
        engine = node.engine
        await engine.start(spinner, count, patience, id=wid, if_exists="start_new")
        self.workload.ledger.started.add(wid)
        answers = []
        for _ in range(queries):
            hosted = wid in engine.actors
            before = node.batches
            answers.append(await engine.query(wid, "done"))
            waited = node.batches - before
            if hosted and waited > QUERY_COMMITS:
                self.world.violation(f"a query of {wid} on {node.name} was answered after {waited} commits")
        return answers
