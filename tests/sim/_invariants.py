"""The simulation's invariants: after every commit (the store checker, epochs only grow) and at
the end of a run (every workflow ended, every waiting caller answered, signals and updates
exactly once).

The commit-time check that a deposed engine commits nothing is in ``World.run_node``: a step
of an engine whose record was not live must not advance the store's transaction id.
"""

from __future__ import annotations

import ast
import gc
import os
import sys
from typing import Any

from weft_actors.codec import decode, decode_args, unpack_record
from weft_actors.shard._actor import Actor
from weft_actors.store import TERMINAL
from weft_actors.store._check import check_counts, check_environment, check_flow

from _extras import TRAP_MODULE
from _mirror import StoreMirror
from _workload import AMBIGUOUS, TRANSIENT, Ledger

__all__ = ["Checker"]

FEED_RETENTION = 3600.0
CROSS_CHECK = os.environ.get("SIM_CROSS_CHECK") == "1"


class Checker:
    def __init__(self, world: Any) -> None:
        self.world = world
        self.epochs: dict[bytes, int] = {}
        self.reported: set[str] = set()
        self.finished: dict[tuple[bytes, str], tuple[Any, ...]] = {}
        """(workflow, run) -> how it ended: a finished run never changes."""
        self.mirror = StoreMirror(world.observer.dbs)

    def _report(self, what: str) -> None:
        if what not in self.reported:  # a broken state is reported once, not on every commit
            self.reported.add(what)
            self.world.violation(what)

    def after_commit(self) -> None:
        """The store checker over what the commit changed (``_mirror``), epochs only grow,
        a finished run never changes."""
        world = self.world
        observer = world.observer
        mirror = self.mirror
        now = world.clock.now()
        with observer.env.begin() as txn:
            changes = mirror.update(txn, world.recording.take())
            if CROSS_CHECK:
                for difference in mirror.differences(txn):
                    world.violation(f"a write the mirror did not see: {difference}")
        epochs = self.epochs
        for key, (_, after) in sorted(changes.get("claim_epoch", {}).items()):
            if after is None:
                self._report("a claim epoch was deleted")
                continue
            epoch = int.from_bytes(after, "big")
            if epoch < epochs.get(key, 0):
                self._report(f"epoch of {key.decode()} went back from {epochs[key]} to {epoch}")
            epochs[key] = epoch
        finished = self.finished
        for key, (_, after) in sorted(changes.get("workflows", {}).items()):
            if after is None:
                continue
            record = unpack_record(after)
            if record["status"] in TERMINAL:
                ending = (record["status"], record.get("result"), record.get("error"))
                before = finished.setdefault((key, record["run_id"]), ending)
                if before != ending:
                    self._report(f"finished run {record['run_id'][-8:]} of {key.decode()} changed from {before[0]} to {ending[0]}")
        # Nothing to check if nothing the checker reads changed but lease renewals.
        lease_now = world.clock.lease_now()
        problems = [] if mirror.only_renewals(changes, lease_now) else mirror.check(mirror.touched(changes), now, FEED_RETENTION, lease_now)
        for problem in problems:
            self._report(f"store: {problem}")
        if CROSS_CHECK:
            self._cross_check(problems)

    def _cross_check(self, problems: list[Any]) -> None:
        """``SIM_CROSS_CHECK=1``: the whole-store check must find nothing the incremental one
        did not find now or before (a test of ``_mirror``, not of the engine)."""
        observer = self.world.observer
        with observer.env.begin() as txn:
            full = check_environment(txn, observer.dbs, self.world.clock.now(), FEED_RETENTION, self.world.clock.lease_now())
        missed = [str(problem) for problem in full if f"store: {problem}" not in self.reported]
        if missed:
            self.world.violation(f"incremental store check missed {missed}")

    # -- at the end -----------------------------------------------------------------------

    def records(self) -> dict[str, dict[str, Any]]:
        observer = self.world.observer
        with observer.env.begin() as txn:
            return {key.decode(): unpack_record(value) for key, value in txn.cursor(db=observer.dbs.workflows)}

    def unfinished(self) -> list[str]:
        return sorted(wid for wid, record in self.records().items() if record["status"] not in TERMINAL)

    def final(self, ledger: Ledger) -> None:
        world = self.world
        observer = world.observer
        self.after_commit()
        with observer.env.begin() as txn:  # and once over the whole store
            problems = check_environment(txn, observer.dbs, world.clock.now(), FEED_RETENTION, world.clock.lease_now())
            for problem in problems + check_counts(txn, observer.dbs) + check_flow(txn, observer.dbs):
                self._report(f"store: {problem}")
        records = self.records()
        with observer.env.begin() as txn:
            for key, value in txn.cursor(db=observer.dbs.ops):
                op = unpack_record(value)
                if "ok" in op and "err" in op:
                    wid = key[2 : 2 + int.from_bytes(key[:2], "big")].decode()
                    self._report(f"an op of {wid} has two outcomes: ok and {op['err'].get('kind')} (t={op.get('t')})")
        for wid, record in sorted(records.items()):
            if record["status"] not in TERMINAL:
                holder = observer.get_holder(wid)
                where = "no holder"
                if holder is not None:
                    owner = next((node for node in world.nodes if node.engine_id == holder[0]), None)
                    state = "unknown engine" if owner is None else f"{owner.name} {owner.status}/{owner.engine.state}"
                    hosted = owner is not None and (wid in owner.engine.actors or wid in owner.engine.eviction.evicted or wid in owner.engine.orphans)
                    where = f"held by {state} at epoch {holder[1]}, {'with' if hosted else 'WITHOUT'} an actor there"
                self._report(f"workflow {wid} never ended: {record['status']}, {where}")
        for wid in sorted(ledger.started):
            if wid not in records:
                self._report(f"acknowledged start of {wid} is not durable")
        for wid, run_id in ledger.terminated:
            record = records.get(wid)
            if record is not None and record["run_id"] == run_id and record["status"] != "terminated":
                self._report(f"acknowledged terminate of {wid} is not durable: it is {record['status']}")
        self._check_waiters(ledger, records)
        self._check_signals(ledger, records)
        self._check_updates(ledger, records)

    def after_collect(self) -> None:
        """Once the run's garbage is collected: no live engine keeps an actor it dropped,
        and no client payload made an engine import a module."""
        self.check_leaks(None)
        if sys.modules.pop(TRAP_MODULE, None) is not None:
            self._report(f"a client payload made an engine import {TRAP_MODULE}")

    def check_leaks(self, min_age: float | None) -> None:
        """No running engine keeps an actor it dropped (a cancelled timer, a waiter or a
        callback holding a finished run and its history). At the end (``min_age`` None) any
        dropped actor counts; during the run (garbage collected first) only the actor of a
        run that finished ``min_age`` seconds ago or more: until its last callbacks ran, a
        dropped actor may still be referenced."""
        # An actor knows its engine by the runtime it is handed (``Engine._host``), not the facade.
        engines = {id(node.engine._host): node for node in self.world.nodes if node.status == "up" and node.engine.state == "running"}
        now = self.world.clock.now()
        workflows = self.mirror.raw["workflows"]
        leaked: dict[str, list[str]] = {}
        for obj in gc.get_objects():
            if type(obj) is not Actor or id(obj.engine) not in engines or obj.engine.actors.get(obj.wid) is obj:
                continue
            if min_age is not None:
                raw = workflows.get(obj.wid.encode())
                record = None if raw is None else self.mirror.decode(raw)
                if record is None or record["run_id"] != obj.run_id or record["status"] not in TERMINAL or record["updated"] > now - min_age:
                    continue
            leaked.setdefault(engines[id(obj.engine)].name, []).append(f"{obj.wid} ({'closed' if obj.closed else 'open'})")
        for name, actors in sorted(leaked.items()):
            self._report(f"{name} keeps {len(actors)} actors it dropped: {sorted(actors)[:5]}")

    def _check_waiters(self, ledger: Ledger, records: dict[str, Any]) -> None:
        for node, wid, task in ledger.waiters:
            if node.status != "up" or node.engine.state != "running":
                continue
            record = records.get(wid)
            if record is not None and record["status"] in TERMINAL and not task.done():
                self._report(f"a result() caller of {wid} on {node.name} never got it ({record['status']})")

    def _check_signals(self, ledger: Ledger, records: dict[str, Any]) -> None:
        observer = self.world.observer
        for wid, sent in sorted(ledger.sent.items()):
            record = records.get(wid)
            if record is None or record["status"] != "completed" or record.get("type") != "collector":
                continue
            result = decode(record["result"], "result")
            got = [token if isinstance(token, str) else repr(token) for token in result["got"]]
            if len(got) != len(set(got)):
                self._report(f"{wid} consumed a signal twice: {sorted(got)}")
            invented = set(got) - sent
            if invented:
                self._report(f"{wid} consumed signals nobody sent: {sorted(invented)}")
            pending = set()
            for _, message in observer.load_inbox(wid):
                if message.get("kind") == "signal" and message.get("payload") is not None:
                    pending.add(decode(message["payload"], "signal"))
            chain = {record["run_id"]}
            for previous in reversed(record.get("previous_runs") or ()):
                if previous.get("status") != "continued":
                    break
                chain.add(previous["run_id"])
            acked = {token for token, run_id in ledger.acked.get(wid, {}).items() if run_id in chain}
            # The run read after the acknowledgement is the one the signal went to or a later
            # one: a token acknowledged while a run outside this chain was current was that
            # run's, and must not reach this one (messages belong to one run).
            older = {token for token in got if ledger.acked.get(wid, {}).get(token, None) not in (None, AMBIGUOUS, *chain)}
            if older:
                self._report(f"{wid} consumed signals sent to an earlier run: {sorted(older)}")
            lost = acked - set(got) - pending
            if lost:
                self._report(f"{wid} lost acknowledged signals {sorted(lost)} (got {sorted(got)}, pending {sorted(pending)})")

    def _check_updates(self, ledger: Ledger, records: dict[str, Any]) -> None:
        """A request id belongs to one run: its answer is kept through the run after the one
        that applied it (continue-as-new), then dropped, and a ``start_new`` run inherits
        none. So every call answered within that window gets the one answer; a call after it
        is a new request and may be applied again. Within a run every applied update moved
        the count (an answer seen twice means one was applied twice); a completed collector's
        count covers every answer of its run and no more than was asked for."""
        answered: dict[tuple[str, str], dict[int, str]] = {}
        attempted: dict[str, int] = {}
        for (wid, rid), entry in sorted(ledger.updates.items()):
            chain = _chain(records.get(wid))
            # "not found": the request was never recorded, so a retry after the start may apply it.
            calls = [(outcome, run) for outcome, run in zip(entry["outcomes"], entry["runs"]) if outcome not in TRANSIENT and outcome != "workflow_not_found"]
            applied: dict[str, int] = {}
            for outcome, run in calls:
                if outcome.startswith("ok "):
                    run_id, value = ast.literal_eval(outcome[3:])
                    applied.setdefault(outcome, 0)
                    for other, other_run in calls:
                        if other != outcome and _within_window(chain, run_id, other_run, other):
                            self._report(f"update {rid} of {wid} answered more than one way: {sorted({outcome, other})}")
                    seen = answered.setdefault((wid, run_id), {})
                    if seen.get(value, rid) != rid:
                        self._report(f"updates {seen[value]} and {rid} of {wid} both answered {value}: one applied twice")
                    seen[value] = rid
                else:
                    for other, other_run in calls:
                        if other != outcome and not other.startswith("ok ") and run is not None and other_run == run:
                            self._report(f"update {rid} of {wid} answered more than one way in one run: {sorted({outcome, other})}")
            if entry["by"] >= 1:
                # Each distinct answer is one application; a call with no answer (a transient
                # outcome, or its caller gone with its engine) may have made one nobody saw.
                unseen = entry.get("issued", 0) - sum(1 for outcome in entry["outcomes"] if outcome not in TRANSIENT)
                attempted[wid] = attempted.get(wid, 0) + entry["by"] * max(1, len(applied) + unseen)
        for (wid, run_id), values in sorted(answered.items()):
            record = records.get(wid)
            if record is None or record["status"] != "completed" or record["run_id"] != run_id:
                continue
            count = decode(record["result"], "result")["count"]
            if count < max(values) or count > attempted.get(wid, 0):
                self._report(f"{wid} ended with count {count}; answers {sorted(values)}, at most {attempted.get(wid, 0)} applied")


def _chain(record: dict[str, Any] | None) -> dict[str, int]:
    """The runs of the workflow's last chain of continue-as-new, by position (a ``start_new``
    run begins a new chain and keeps no earlier run)."""
    if record is None:
        return {}
    runs = [previous["run_id"] for previous in record.get("previous_runs") or ()] + [record["run_id"]]
    return {run: index for index, run in enumerate(runs)}


def _within_window(chain: dict[str, int], applied_run: str, answer_run: str | None, outcome: str) -> bool:
    """Whether a call answered ``outcome`` while ``answer_run`` was current had to get the
    answer recorded in ``applied_run``: in that run or the next one of its chain."""
    if outcome.startswith("ok "):
        answer_run = ast.literal_eval(outcome[3:])[0]  # applied there, so current there
        if answer_run == applied_run:
            return True
    if answer_run is None:
        return False
    if answer_run == applied_run:
        return True
    applied_at, answered_at = chain.get(applied_run), chain.get(answer_run)
    return applied_at is not None and answered_at is not None and answered_at - applied_at in (0, 1)

def args_of(record: dict[str, Any]) -> tuple[Any, ...]:
    return decode_args(record["args"])
