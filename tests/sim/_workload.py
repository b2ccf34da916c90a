"""The workload: client calls generated from the seed, each run as a task on the loop of the
engine that "received" it, with what every caller saw kept in a ledger for the invariants.

Ids come from small pools, so starts collide (each ``if_exists``), signals and updates hit
workflows in every state, and request ids are reused on purpose.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from weft_actors.errors import WeftError

from sim_app import collector, looper, parent, racer, relay, steps

__all__ = ["Ledger", "Workload", "TRANSIENT", "AMBIGUOUS"]

AMBIGUOUS = "?"
"""The run of an acknowledged signal when a new run was created during the call."""

TRANSIENT = frozenset({"engine_deposed", "engine_stopped", "storage_full", "storage_error", "fenced_out", "limit_exceeded", "timeout"})
"""Outcomes that say nothing about the workflow: the engine asked could not answer."""

TYPES = {"steps": steps, "collector": collector, "parent": parent, "racer": racer, "looper": looper, "relay": relay}


@dataclass
class Ledger:
    """What the clients did and saw."""

    types: dict[str, str] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    sent: dict[str, set[str]] = field(default_factory=dict)
    acked: dict[str, dict[str, str | None]] = field(default_factory=dict)
    """workflow -> acknowledged token -> the run current at the acknowledgement."""
    updates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    waiters: list[tuple[Any, str, Any]] = field(default_factory=list)
    """(node, wid, task) of every ``result()`` call."""
    tokens: int = 0
    terminated: list[tuple[str, str]] = field(default_factory=list)
    """(workflow, run) of every acknowledged terminate."""


def outcome_of(exc: BaseException) -> str:
    if isinstance(exc, WeftError):
        if exc.code == "storage_error" and "simulated" not in str(exc):
            return f"UNEXPECTED storage_error: {exc}"  # no storage fault was injected
        return exc.code
    if isinstance(exc, TimeoutError):
        return "timeout"
    return f"UNEXPECTED {type(exc).__name__}: {exc}"


def _current_run(engine: Any, wid: str) -> str | None:
    """The run of ``wid`` current now (None if unknown): the run a call was answered in."""
    try:
        record = engine.store.get_workflow(wid)
    except Exception:  # the engine's store is gone (killed): unknown
        return None
    return None if record is None else record["run_id"]


class Workload:
    def __init__(self, world: Any, rng: random.Random) -> None:
        self.world = world
        self.rng = rng
        self.ledger = Ledger()
        self.features = world.config.features

    # -- generation -----------------------------------------------------------------------

    def _plan(self) -> list[Any]:
        rng = self.rng
        plan = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice("aaafs")
            if kind == "a":
                plan.append(["a", rng.choice([0.0, 0.0, 0.1, 0.5, 2.0])])
            elif kind == "f":
                plan.append(["f", rng.choice([0.0, 0.2])])
            else:
                plan.append(["s", rng.choice([0.2, 1.0, 3.0])])
        return plan

    def _args(self, kind: str) -> tuple[Any, ...]:
        rng = self.rng
        if kind == "steps":
            return (f"x{rng.randint(0, 9)}", self._plan())
        if kind == "collector":
            return ([], 0, 0, rng.choice([0.5, 2.0, 5.0]))
        if kind == "parent":
            policy = rng.choice(["terminate", "cancel", "abandon"])
            return (policy, [self._plan() for _ in range(rng.randint(1, 2))], rng.choice([-1.0, 0.3, 2.0]))
        if kind == "racer":
            return ([rng.choice([0.0, 0.2, 1.0, 4.0]) for _ in range(rng.randint(1, 3))], rng.choice([0.5, 3.0]))
        if kind == "relay":
            return (rng.randint(0, 3), [["a", rng.choice([0.0, 0.0, 0.1, 0.3])]])
        return (rng.randint(0, 3), rng.choice([0.1, 0.5, 1.0]))

    def _wid(self) -> str:
        kinds = [kind for kind in TYPES if kind in self.features or kind == "steps"]
        kind = self.rng.choice(kinds)
        return f"{kind}-{self.rng.randint(0, 4)}"

    def _known(self, prefix: str | None = None) -> str | None:
        known = sorted(wid for wid in self.ledger.types if prefix is None or wid.startswith(prefix))
        return self.rng.choice(known) if known else None

    def next_call(self) -> tuple[str, Any]:
        """A description (for the trace) and a coroutine function taking the engine."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.28 or not self.ledger.types:
            return self._start()
        if roll < 0.50:
            return self._signal()
        if roll < 0.64 and "update" in self.features:
            return self._update()
        if roll < 0.72:
            wid = self._known()
            name = rng.choice(["count", "done", "nope"])
            return f"query {wid} {name}", lambda engine: engine.query(wid, name)
        if roll < 0.82:
            return self._result()
        if roll < 0.89 and "cancel" in self.features:
            wid = self._known()
            return f"cancel {wid}", lambda engine: engine.cancel(wid)
        if roll < 0.95 and "terminate" in self.features:
            return self._terminate()
        if roll < 0.97 and "bad-input" in self.features:
            return self._bad_input()
        return self._signal_with_start()

    def _start(self) -> tuple[str, Any]:
        rng = self.rng
        wid = self._wid()
        kind = wid.split("-")[0]
        choices = ["error", "return", "start_new"]
        if kind == "collector" and "start-new-collector" not in self.features:
            choices.remove("start_new")
        if_exists = rng.choice(choices)
        options: dict[str, Any] = {"id": wid, "if_exists": if_exists}
        if "delayed" in self.features and rng.random() < 0.15:
            options["start_delay"] = rng.uniform(0, 3.0)
        if "timeout" in self.features and rng.random() < 0.1 and kind != "collector":
            options["execution_timeout"] = rng.uniform(1.0, 8.0)
        args = self._args(kind)
        self.ledger.types.setdefault(wid, kind)

        async def call(engine: Any) -> Any:
            handle = await engine.start(TYPES[kind], *args, **options)
            self.ledger.started.add(wid)
            return handle.run_id is not None

        return f"start {wid} {if_exists} {sorted(options)}", call

    def _terminate(self) -> tuple[str, Any]:
        wid = self._known()

        async def call(engine: Any) -> None:
            issued = engine.clock.now()
            await engine.terminate(wid, "sim")
            record = self.world.observer.get_workflow(wid)  # the engine's store may be closed by now
            if record["status"] == "terminated":
                self.ledger.terminated.append((wid, record["run_id"]))
            elif record["created"] < issued:  # not a ``start_new`` run made since
                self.ledger.terminated.append((wid, record["run_id"]))
                self.world.violation(f"terminate of {wid} acknowledged, but it is {record['status']}")

        return f"terminate {wid}", call

    def _bad_input(self) -> tuple[str, Any]:
        """Calls that must be refused alone, at the edge (``InvalidRequest``), whatever else
        is in their group commit."""
        which = self.rng.choice(["signal", "update", "cancel", "start_at"])
        if which == "signal":
            return "bad signal to ''", lambda engine: engine.signal("", "s", "x")
        if which == "update":
            return "bad update to ''", lambda engine: engine.update("", "bump", 1, request_id="bad")
        if which == "cancel":
            return "bad cancel of ''", lambda engine: engine.cancel("")
        return "bad start_at 1e300", lambda engine: engine.start(steps, "bad", [], id="bad-start", start_at=1e300)

    def _token(self, wid: str) -> str:
        self.ledger.tokens += 1
        token = f"t{self.ledger.tokens}"
        self.ledger.sent.setdefault(wid, set()).add(token)
        return token

    def run_of(self, wid: str) -> str | None:
        """The workflow's current run, as the store has it (the engine's store may be closed)."""
        record = self.world.observer.get_workflow(wid)
        return None if record is None else record["run_id"]

    def _acked(self, wid: str, token: str, before: str | None) -> None:
        """Note the run the acknowledged signal went to: a later ``start_new`` run does not
        inherit what an earlier one left. The run current before the call and after it: if
        they differ, a new run came in between and the signal's run is not known
        (``AMBIGUOUS``: neither lost nor misdelivered can be told for it)."""
        after = self.run_of(wid)
        self.ledger.acked.setdefault(wid, {})[token] = after if after == before else AMBIGUOUS

    def _signal(self) -> tuple[str, Any]:
        roll = self.rng.random()
        wid = self._known("collector") if roll < 0.6 else self._known("relay") if roll < 0.85 else self._known()
        if wid is None:
            return self._start()
        token = "stop" if self.rng.random() < 0.05 else self._token(wid)

        async def call(engine: Any) -> None:
            before = self.run_of(wid)
            await engine.signal(wid, "s", token)
            if token != "stop":
                self._acked(wid, token, before)

        return f"signal {wid} {token}", call

    def _update(self) -> tuple[str, Any]:
        rng = self.rng
        wid = self._known("collector")
        if wid is None:
            return self._start()
        mine = sorted(rid for (target, rid) in self.ledger.updates if target == wid)
        if mine and rng.random() < 0.35:
            rid = rng.choice(mine)
        else:
            rid = f"u{len(self.ledger.updates)}"
            self.ledger.updates[(wid, rid)] = {"by": rng.choice([0, 1, 1, 2, 3]), "outcomes": [], "runs": []}
        entry = self.ledger.updates[(wid, rid)]

        async def call(engine: Any) -> Any:
            return await engine.update(wid, "bump", entry["by"], request_id=rid)

        return f"update {wid} {rid} by {entry['by']}", call

    def _result(self) -> tuple[str, Any]:
        wid = self._known()

        async def call(engine: Any) -> Any:
            return await engine.result(wid)

        return f"result {wid}", call

    def _signal_with_start(self) -> tuple[str, Any]:
        wid = f"collector-{self.rng.randint(0, 4)}"
        self.ledger.types.setdefault(wid, "collector")
        token = self._token(wid)
        args = self._args("collector")

        async def call(engine: Any) -> None:
            before = self.run_of(wid)
            await engine.signal_with_start(collector, *args, signal="s", payload=token, id=wid, if_exists="return")
            self._acked(wid, token, before)
            self.ledger.started.add(wid)

        return f"signal_with_start {wid} {token}", call

    # -- running --------------------------------------------------------------------------

    def issue(self, node: Any, description: str, call: Any) -> Any:
        """Run ``call(engine)`` as a task on ``node``'s loop; its outcome goes to the trace."""
        world = self.world
        ledger = self.ledger

        async def client() -> Any:
            try:
                value = await call(node.engine)
            except Exception as exc:
                outcome = outcome_of(exc)
            else:
                outcome = f"ok {value!r}"
            world.note(f"{node.name} <- {description}: {outcome}")
            if outcome.startswith("UNEXPECTED"):
                world.violation(f"{description} on {node.name}: {outcome}")
            if description.startswith("update "):
                _, wid, rid = description.split()[:3]
                entry = ledger.updates[(wid, rid)]
                entry["outcomes"].append(outcome)
                # A call during which a new run was made (a start_new) was answered by one of
                # the two, which the caller cannot tell: it is judged against neither.
                run = _current_run(node.engine, wid)
                entry["runs"].append(run if run == issued_run else None)
            return outcome

        world.note(f"{node.name} -> {description}")
        issued_run = None
        if description.startswith("update "):
            _, wid, rid = description.split()[:3]
            entry = ledger.updates[(wid, rid)]
            entry["issued"] = entry.get("issued", 0) + 1
            issued_run = _current_run(node.engine, wid)
        task = node.loop.create_task(client())
        if description.startswith("result "):
            ledger.waiters.append((node, description.split()[1], task))
        return task
