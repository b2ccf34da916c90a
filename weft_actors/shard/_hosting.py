"""How an engine hosts its actors: spawning and driving runs it holds, guarding wakes, and
dropping an actor whose claim moved.

Mixed into ``Engine``. An actor is only ever built for a claim this engine holds at a known
epoch; it is dropped, never released, when that claim turns out to be gone. ``actors`` is kept
in least-recently-used order for eviction (``_eviction``): iterate over a copy.
"""

from __future__ import annotations

import asyncio
import logging
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ..codec import decode_args
from ..errors import EngineDeposed, FencedOut, WeftError
from ..store import QuarantineWorkflow
from ..workflow import WorkflowDefinition, WorkflowRun
from . import _events as events
from ._actor import Actor
from ._on_loop import start
from ._reuse import ReusingActor

if TYPE_CHECKING:
    from .._clock import Clock
    from ._activities import ActivityRunner
    from ._committer import GroupCommitter
    from ._driving import Driver
    from ..store import LmdbStore
    from ._commit_retry import CommitRetry
    from ._reuse import RefusedOutcomes
    from ._eviction import Evictor
    from ._metrics import EngineMetrics

__all__ = ["ActorHost", "resolve"]

log = logging.getLogger("weft_actors.shard")


def resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


class ActorHost:
    """The actor table of an engine and every callback an actor makes into it."""

    engine_id: str
    state: str
    store: LmdbStore
    committer: GroupCommitter
    clock: Clock
    metrics: EngineMetrics
    actors: dict[str, Actor]
    orphans: set[str]
    eviction: Evictor
    driver: Driver
    quarantine_after: int
    activities: ActivityRunner
    commit_retry: CommitRetry
    refused: RefusedOutcomes
    _waiters: dict[str, list[asyncio.Future[Any]]]
    _on_commit_hint: Callable[[str, str], None] | None
    _on_done_interest: Callable[[str, bool], None] | None
    _watched: set[str]

    def add_waiter(self, wid: str, future: asyncio.Future[Any]) -> None:
        """``future`` waits for ``wid`` to end (or for news of it): resolved by a local finish,
        drop or stop, or by a done hint. Waiting on a workflow held elsewhere declares interest
        in its done hints (``on_done_interest``) until the last such waiter goes."""
        self._waiters.setdefault(wid, []).append(future)
        hook = self._on_done_interest
        if hook is not None and wid not in self._watched and wid not in self.actors and wid not in self.eviction.evicted:
            self._watched.add(wid)
            hook(wid, True)

    def remove_waiter(self, wid: str, future: asyncio.Future[Any]) -> None:
        waiters = self._waiters.get(wid)
        if waiters is not None and future in waiters:
            waiters.remove(future)
            if not waiters:
                del self._waiters[wid]
        if wid in self._watched and wid not in self._waiters:
            self._watched.discard(wid)
            self._on_done_interest(wid, False)  # type: ignore[misc]

    def _definition(self, workflow: Any) -> WorkflowDefinition:  # provided by Engine
        raise NotImplementedError

    def depose(self, reason: str) -> None:  # provided by Engine
        raise NotImplementedError

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
            actor: Actor = ReusingActor(self, wid, run_id, epoch, run)  # type: ignore[arg-type]
        else:
            actor = Actor(self, wid, run_id, epoch, run)  # type: ignore[arg-type]
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
        self._spawn(self._definition(record["type"]), wid, record["run_id"], epoch, decode_args(record["args"]), ops, inbox)
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
        for future in self._waiters.get(wid, ()):
            resolve(future, None)

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
        actor.closed = True
        finish = actor.finish
        if finish is not None and finish.status == "failed":  # committed: it did fail
            events.workflow_failed(self.engine_id, actor.wid, actor.run.workflow_type, actor.run_id, finish.error)
        actor.run.discard()
        if self.actors.get(actor.wid) is actor:
            del self.actors[actor.wid]
        self.metrics.workflows_completed += 1
        if self.refused.kept:
            self.refused.forget(actor.wid)
        waiters = self._waiters.pop(actor.wid, None)
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
