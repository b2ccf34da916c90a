"""The engine's runtime: its actor table, the parts around it, and every call an actor makes
up into it (spawning and driving the runs it holds, guarding wakes, dropping an actor whose
claim moved, following up a step, a close or a sent message).

The engine builds one ``ActorHost`` and wires its parts into it; the actors and the parts know
it only by the ``typing.Protocol`` each declares (``StepHost``, ``EvictionHost``, ...), and
news for the engine (it was deposed) goes up through the ``on_deposed`` callback. Its
attributes are plain, for the per-step path. An actor is only ever built for a claim this
engine holds at a known epoch, and dropped, never released, when that claim is gone.
``actors`` is in least-recently-used order (``_eviction``): iterate over a copy.
"""

from __future__ import annotations

import logging
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable, cast

from ..codec import decode_args
from ..errors import EngineDeposed, EngineStopped, FencedOut, UnknownWorkflowType, WeftError
from ..store import QuarantineWorkflow
from ..workflow import WorkflowDefinition, WorkflowRun, workflow_definition
from . import _events as events
from ._actor import Actor
from ._on_loop import start
from ._reuse import ReusingActor
from ._waiters import resolve

if TYPE_CHECKING:
    from .._clock import Clock
    from ..store import LmdbStore, StepResult
    from ._activities import ActivityRunner
    from ._commit_retry import CommitRetry
    from ._committer import GroupCommitter
    from ._driving import Driver
    from ._eviction import Evictor
    from ._maintenance import Maintenance
    from ._metrics import EngineMetrics
    from ._options import EngineOptions
    from ._reuse import RefusedOutcomes
    from ._timers import TimerService
    from ._waiters import Waiters
    from ._watchdog import LoopWatchdog

__all__ = ["ActorHost"]

log = logging.getLogger("weft_actors.shard")


class ActorHost:
    """The actor table of an engine, the parts around it, and every callback an actor makes
    into it. Built and wired by the engine only."""

    store: LmdbStore
    committer: GroupCommitter
    timers: TimerService
    activities: ActivityRunner
    driver: Driver
    maintenance: Maintenance
    eviction: Evictor
    commit_retry: CommitRetry
    refused: RefusedOutcomes
    waiters: Waiters

    def __init__(
        self,
        engine_id: str,
        workflows: dict[str, WorkflowDefinition],
        clock: Clock,
        metrics: EngineMetrics,
        options: EngineOptions,
        on_deposed: Callable[[str], None],
        on_commit_hint: Callable[[str, str], None] | None,
    ) -> None:
        self.engine_id = engine_id
        self.workflows = workflows
        self.clock = clock
        self.metrics = metrics
        self.state = "new"
        """``new``, ``running``, ``stopping``, ``stopped`` or ``deposed`` (set by the engine)."""
        # The settings the parts read, as plain attributes (read on hot paths).
        self.heartbeat = options.heartbeat
        self.ttl = options.ttl
        self.ownership = options.ownership
        self.payload_limit = options.payload_limit
        self.probe_peers = options.probe_peers
        self.feed_retention = options.feed_retention
        self.engine_retention = options.engine_retention
        self.prune_interval = options.prune_interval
        self.retention = options.retention
        self.max_active_workflows: int = cast(int, options.max_active_workflows)
        self.max_running = options.max_running
        self.max_inbox = options.max_inbox
        self.max_inflight_activities = options.max_inflight_activities
        self.quarantine_after = options.quarantine_after
        self.stall_threshold: float = cast(float, options.stall_threshold)
        self.actors: dict[str, Actor] = {}
        self.orphans: set[str] = set()
        self.activities_started = 0
        self.watchdog: LoopWatchdog | None = None
        self._on_deposed = on_deposed
        self._on_commit_hint = on_commit_hint

    def depose(self, reason: str) -> None:
        """This engine lost its own liveness: tell the engine, which stops everything."""
        self._on_deposed(reason)

    def check_running(self) -> None:
        """Refuse a client call unless the engine runs (``EngineStopped``, ``EngineDeposed``)."""
        if self.state != "running":
            if self.state == "deposed":
                raise EngineDeposed(f"engine {self.engine_id} was deposed", engine_id=self.engine_id)
            raise EngineStopped(f"engine is {self.state}", engine_id=self.engine_id)

    def definition(self, workflow: Any) -> WorkflowDefinition:
        """The registered definition of ``workflow`` (a ``@workflow`` function or its name)."""
        if isinstance(workflow, str):
            name = workflow
        else:
            definition = workflow_definition(workflow)
            if definition is None:
                raise UnknownWorkflowType(f"{workflow!r} is not a @workflow", workflow_type=repr(workflow))
            name = definition.name
        found = self.workflows.get(name)
        if found is None:
            raise UnknownWorkflowType(f"no workflow named {name!r} is registered", workflow_type=name)
        return found

    def _spawn(
        self,
        definition: WorkflowDefinition,
        wid: str,
        run_id: str,
        epoch: int,
        args: tuple[Any, ...],
        history: dict[int, dict[str, Any]],
        inbox: Iterable[tuple[int, dict[str, Any]]],
    ) -> Actor:
        actors = self.actors
        stale = actors.pop(wid, None)
        if stale is not None:
            stale.close()
        eviction = self.eviction
        if eviction.evicted:
            eviction.forget(wid)
        run = WorkflowRun(definition, wid, run_id, args, history)
        refused = self.refused
        if refused.kept and refused.keeps(wid, run_id):  # attempts whose commit was refused
            actor: Actor = ReusingActor(self, wid, run_id, epoch, run)
        else:
            actor = Actor(self, wid, run_id, epoch, run)
        actor.add_messages(inbox)
        actors[wid] = actor
        if len(actors) > eviction.max_live:
            eviction.schedule()
        actor.handle(start(self, run))  # which polls: the inbox is taken from here on
        return actor

    def spawn_started(self, definition: WorkflowDefinition, wid: str, run_id: str, epoch: int, args: tuple[Any, ...], with_inbox: bool = False) -> None:
        """Make the actor of a run a start just created and claimed here, and take its first
        step: called once the start's reply has left (``GroupCommitter.after_replies``), so a
        first turn that blocks the loop cannot hold that reply back. Not once the engine has
        stopped meanwhile: its claims are released, and whoever takes the run over runs it."""
        if self.state not in ("running", "stopping"):
            return
        self._spawn(definition, wid, run_id, epoch, args, {}, self.store.load_inbox(wid) if with_inbox else ())

    def drive(self, wid: str, epoch: int) -> bool:
        """Replay and resume ``wid``, which this engine holds at ``epoch``: the whole inbox is
        read with the history, so nothing depends on a previous owner's feed cursor."""
        rows = self.driver.read_ahead.pop(wid, None)
        record, holder, ops, inbox = self.store.load_for_replay(wid) if rows is None else rows
        if record is None or record["status"] != "running" or not self._holds(holder, epoch):
            if self.refused.kept:
                self.refused.forget(wid)  # ended, closed or taken elsewhere: never used here
            return False
        lost = record.get("lost")  # losses charged to it (``store._quarantine``), by evidence only
        if lost is not None and lost.get("mark", (None,))[0] == record["run_id"] and lost["count"] >= self.quarantine_after:
            self._quarantine(wid, epoch, record)
            return True
        self._spawn(self.definition(record["type"]), wid, record["run_id"], epoch, decode_args(record["args"]), ops, inbox)
        return True

    def _quarantine(self, wid: str, epoch: int, record: dict[str, Any]) -> None:
        """Park ``wid`` instead of driving it: its last ``quarantine_after`` owners were lost
        while running it, and none committed any progress."""
        lost = record["lost"]

        def committed(result: Any) -> None:
            if isinstance(result, WeftError):
                log.warning("workflow %s: could not quarantine it: %s", wid, result)
                if isinstance(result, EngineDeposed):
                    self.depose(str(result))
                return
            self.metrics.workflows_quarantined += 1
            events.workflow_quarantined(self.engine_id, wid, record["type"], record["run_id"], lost["count"], lost.get("reason"))
            self.wake_waiters(wid)

        self.committer.submit(QuarantineWorkflow(wid, epoch, record["run_id"]), committed)

    def drive_or_orphan(self, wid: str, epoch: int) -> bool | None:
        """``drive``, and if the replay itself fails, log and count it, drop what it built and
        keep ``wid`` as an orphan for a later pass to retry: None then."""
        try:
            return self.drive(wid, epoch)
        except Exception:
            log.exception("workflow %s: replay failed; retrying on a later pass", wid)
            self.metrics.drive_failures += 1
            actor = self.actors.pop(wid, None)
            if actor is not None:
                actor.close()
                self.wake_waiters(wid)
            self.orphans.add(wid)
            return None

    def deliver_messages(self, actor: Actor, messages: list[tuple[int, dict[str, Any]]]) -> None:
        kind = messages[-1][1]["kind"] if messages else "feed"
        if not self.wake_guard(actor, kind):
            return
        if actor.add_messages(messages):
            actor.poll()

    def wake_guard(self, actor: Actor, kind: str) -> bool:
        """Before a wake resumes an actor, confirm this engine still holds it at its epoch.
        On a mismatch the wake is discarded (and counted) and the actor dropped. If the read
        itself fails, proceed: the fenced write is the backstop.

        An actor with a commit in flight is not judged by the holder: that commit may rotate
        the epoch itself (continue-as-new, seen by a relative's callback in the same resume
        pass before the actor's own), and its result, the new epoch or ``FencedOut``, is the
        verdict. The wake waits for it anyway (``poll`` does nothing while busy)."""
        if not actor.busy:
            try:
                holder = self.store.get_holder_bytes(actor.wid)
            except Exception:
                return True
            if not self._holds(holder, actor.epoch):
                self.metrics.wake_discarded(kind)
                self.drop_actor(actor, deposed=True)
                return False
        self.eviction.touch(actor)
        return True

    @cached_property
    def _engine_raw(self) -> bytes:
        return bytes.fromhex(self.engine_id)

    def _holds(self, holder: bytes | None, epoch: int) -> bool:
        """Whether the claim-holder bytes ``holder`` name this engine at ``epoch``."""
        return holder is not None and holder[:16] == self._engine_raw and int.from_bytes(holder[16:24], "big") == epoch

    def drop_actor(self, actor: Actor, *, deposed: bool = False) -> None:
        """Stop ``actor`` without committing anything; callers waiting on its result look at
        the store again at once (someone else may own or have ended it now)."""
        actor.close()
        if self.actors.get(actor.wid) is actor:
            del self.actors[actor.wid]
        if deposed:
            self.metrics.claim("deposed")
            if self.refused.kept:
                self.refused.forget(actor.wid)
        self.wake_waiters(actor.wid)

    def wake_waiters(self, wid: str) -> None:
        """Callers waiting on ``wid``'s result look again (``result`` sets no timer of its own
        while ``wid`` has an actor here, so every way an actor leaves that does not end the run
        or hand it on to another actor here calls this)."""
        self.waiters.wake(wid)

    def commit_failed(self, actor: Actor, error: WeftError) -> None:
        if isinstance(error, FencedOut):
            log.info("workflow %s: %s", actor.wid, error)
            self.drop_actor(actor, deposed=True)
        elif isinstance(error, EngineDeposed):
            self.depose(str(error))
        else:
            # Driven again after a backoff (``_commit_retry``), not at the next pass; the
            # attempt outcomes it would have recorded are kept for that drive (``_reuse``).
            self.refused.capture(actor)
            self.drop_actor(actor)
            self.commit_retry.refused(actor.wid, error)

    def actor_finished(self, actor: Actor) -> None:
        actor.closed, actor.attempter = True, None  # the attempts part points back: a cycle for the collector's rare full pass
        finish = actor.finish
        if finish is not None and finish.status == "failed":  # committed: it did fail
            events.workflow_failed(self.engine_id, actor.wid, actor.run.workflow_type, actor.run_id, finish.error)
        actor.run.discard()
        if self.actors.get(actor.wid) is actor:
            del self.actors[actor.wid]
        self.metrics.workflows_completed += 1
        if self.refused.kept:
            self.refused.forget(actor.wid)
        waiters = self.waiters.by_wid.pop(actor.wid, None)
        if waiters:
            outcome = actor.outcome_record()
            for future in waiters:
                resolve(future, outcome)
        if self._on_commit_hint is not None:
            self.publish_hint("workflow-done", actor.wid)

    def publish_hint(self, kind: str, wid: str) -> None:
        hook = self._on_commit_hint
        if hook is None:
            return
        try:
            hook(kind, wid)
        except Exception:
            log.exception("commit hint %s for %s failed", kind, wid)

    def update_answered(self, wid: str, request_id: str) -> None:
        """This engine, the owner, committed the answer to ``request_id``: wake whoever waits
        for it here, and hint the engines that may wait for it elsewhere."""
        self.waiters.update_answered(wid, request_id)
        if self._on_commit_hint is not None:
            self.publish_hint("workflow-touched", wid)

    # -- after a commit -------------------------------------------------------------------

    def message_sent(self, wid: str, kind: str) -> None:
        """After an inbox append committed: a local owner takes it at once, a remote one by
        its feed poll (sooner with the hint). The local owner reads the whole inbox: a message
        another engine appended just before must not be skipped."""
        if self._on_commit_hint is not None:
            self.publish_hint("workflow-touched", wid)
        actor = self.actors.get(wid)
        if actor is not None:
            self.deliver_messages(actor, self.store.load_inbox(wid))
        elif wid in self.eviction.evicted:
            self.eviction.revive(wid, kind)  # its replay reads the inbox, this message included

    def after_step(self, actor: Actor, result: StepResult) -> None:
        """An owner's step created children here (drive them at once) or changed other
        workflows (a parent's inbox, a child closed or asked to cancel): wake those."""
        for wid, wf_type, args, created in result.created:
            definition = self.workflows.get(wf_type)
            if created.epoch and definition is not None:
                self.metrics.claim("acquired")
                self._spawn(definition, wid, created.run_id, created.epoch, decode_args(args), {}, self.store.load_inbox(wid))
        for wid in result.touched:
            self.wake(wid)

    def wake(self, wid: str) -> None:
        """Something changed for ``wid`` in the store: a local actor re-reads its inbox (the
        wake guard drops it if it was closed); a remote owner hears a hint."""
        if not self.look_at(wid) and self._on_commit_hint is not None:
            self.publish_hint("workflow-touched", wid)

    def look_at(self, wid: str) -> bool:
        """If ``wid`` is this engine's (live, evicted or queued for the driver), hand its
        actor the inbox now (or drive it); False if it is not held here."""
        actor = self.actors.get(wid)
        if actor is not None:
            self.deliver_messages(actor, self.store.load_inbox(wid))
            return True
        if wid in self.eviction.evicted:
            self.eviction.revive(wid, "signal")
            return True
        return self.driver.drive_now(wid)  # held here, queued for its replay: now

    def continue_run(self, actor: Actor, epoch: int) -> None:
        """The run continued as new (committed, claim kept at ``epoch``): drive the next run
        here, with the whole inbox, which carried over."""
        actor.closed = True
        if self.actors.get(actor.wid) is actor:
            del self.actors[actor.wid]
        run_id, payload = actor.next_run  # type: ignore[misc]
        definition = self.definition(actor.run.workflow_type)
        actor.run.discard()
        self._spawn(definition, actor.wid, run_id, epoch, decode_args(payload), {}, self.store.load_inbox(actor.wid))

    def closed_externally(self, workflow_id: str, result: dict[str, Any]) -> None:
        """After this engine committed an external close: drop a local actor (its claim is
        gone), answer local waiters, and hint the owner elsewhere."""
        actor = self.actors.get(workflow_id)
        if actor is not None:
            self.drop_actor(actor)
        self.eviction.forget(workflow_id)
        self.driver.discard(workflow_id)
        outcome = {"status": result["status"], "result": None, "error": result.get("error")}
        for future in self.waiters.by_wid.pop(workflow_id, ()):
            resolve(future, outcome)
        for wid in result.get("touched", ()):  # its children, closed or asked to cancel
            self.committer.after_replies(self.wake, wid)  # after the close's reply has left
        if self._on_commit_hint is not None:
            self.publish_hint("workflow-touched", workflow_id)
            self.publish_hint("workflow-done", workflow_id)

    def after_committed_call(self, follow_up: Callable[..., None], *args: Any) -> None:
        """Run a client call's local follow-up (drop an actor, wake waiters, hint peers) once
        its commit landed. The call has taken effect, so nothing here may turn it into a
        failure: an engine that stopped or was deposed meanwhile has nothing left to follow
        up (its actors and waiters are gone, its store closed), and any other error is
        logged, not raised."""
        if self.state != "running":
            return
        try:
            follow_up(*args)
        except Exception:
            log.exception("engine %s: follow-up of a committed call failed (the call itself took effect)", self.engine_id)
