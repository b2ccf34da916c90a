"""``Engine``: one engine process's worth of workflow actors on one store.

Embedded (``async with Engine(dir, app=...)``) it serves its caller directly; under the
supervisor each shard process runs one. Every write goes through the group committer, is
fenced on the workflow's claim, and is acknowledged only after its commit. Several engines,
in one process or many, may share a data directory: each owns disjoint workflows, and the
workflows of a dead or stalled engine move to live ones (``_reclaim``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import uuid
from typing import TYPE_CHECKING, Any, Callable, cast

from .._clock import Clock, SystemClock
from ..codec import encode
from ..errors import (
    EngineDeposed,
    EngineStopped,
    InvalidRequest,
    LimitExceeded,
    Overloaded,
    PayloadTooLarge,
    UnknownWorkflowType,
    WeftError,
)
from ..store import AppendInbox, CloseWorkflow, LiftQuarantine, LmdbStore, PurgeWorkflow, describe_type_mismatch, open_store, stall_notes, type_mismatches
from .._schedule_handle import SCHEDULE_TYPE, ScheduleHandle, new_schedule
from ..workflow import SYSTEM_TYPES, Op, WorkflowDefinition, collect_workflows, with_system_workflows, workflow_definition
from ._activities import ActivityRunner
from ._actor import Actor
from ._commit_retry import CommitRetry
from ._reuse import RefusedOutcomes
from ._committer import GroupCommitter
from ._driving import Driver
from ._eviction import Evictor
from ._handle import WorkflowHandle
from ._hosting import ActorHost, resolve
from ._maintenance import Maintenance
from ._messages import WorkflowMessages
from ._metrics import EngineMetrics
from ._options import EngineOptions, EngineSettings
from ._outcome import raise_for_outcome
from ._reads import WorkflowReads
from ._timers import TimerService
from ._validate import validate_id, validate_name
from ._watchdog import LoopWatchdog, open_slot

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Engine"]

log = logging.getLogger("weft_actors.shard")

CommitHint = Callable[[str, str], None]
DoneInterest = Callable[[str, bool], None]


GEN0_THRESHOLD = 500_000
"""Generation-0 threshold of a ``tune_gc`` engine (CPython's default is 700)."""


class Engine(ActorHost, WorkflowReads, WorkflowMessages):
    """Runs workflows of ``app`` (a module, or a list of ``@workflow`` functions) on the store
    at ``data_dir`` (an LMDB directory), or at ``store`` (that, or a ``postgresql://`` URL that
    engines on several hosts share). A later engine on the same store takes over whatever this
    one leaves running, after a crash too.

    Options (``EngineOptions``: timing and ownership, limits, admission, retention,
    quarantine; validated when the engine is made) are given as keywords, or as one record,
    ``options=``. The callbacks: ``on_commit_hint(kind, workflow_id)`` is called after an
    inbox append commits (``"workflow-touched"``) and after a workflow ends
    (``"workflow-done"``), so a hint publisher can be plugged in; ``on_done_interest(
    workflow_id, True/False)`` when callers here start (and stop) waiting for the end of a
    workflow this engine does not hold, so a hint subscriber can take that workflow's done
    hints only.
    """

    def __init__(
        self,
        data_dir: str | None = None,
        app: Any = None,
        *,
        store: str | None = None,
        clock: Clock | None = None,
        engine_id: str | None = None,
        slot: int | None = None,
        on_commit_hint: CommitHint | None = None,
        on_done_interest: DoneInterest | None = None,
        options: EngineOptions | None = None,
        **settings: Unpack[EngineSettings],
    ) -> None:
        if options is None:
            options = EngineOptions(**settings)
        elif settings:
            options = dataclasses.replace(options, **settings)
        location = store if store is not None else data_dir
        if location is None or (store is not None and data_dir is not None and store != data_dir):
            raise ValueError("give the store once: a data directory (LMDB) or store='postgresql://...'")
        self.options = options
        self.data_dir = location
        """Where the store is: an LMDB directory or a PostgreSQL URL (``store.open_store``)."""
        self.workflows: dict[str, WorkflowDefinition] = with_system_workflows(collect_workflows(app))
        self.clock: Clock = clock or SystemClock()
        self.engine_id = engine_id or uuid.uuid4().hex
        self.slot = slot
        # The settings its collaborators read, as plain attributes (read on hot paths).
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
        self.warn_type_mismatch = options.warn_type_mismatch
        self._on_commit_hint = on_commit_hint
        self._on_done_interest = on_done_interest
        self._watched: set[str] = set()
        self.actors: dict[str, Actor] = {}
        self.orphans: set[str] = set()
        self.eviction = Evictor(self, options.max_live_actors)
        self.commit_retry = CommitRetry(self)
        self.refused = RefusedOutcomes(self)
        self.starts_overloaded = 0
        self.watchdog: LoopWatchdog | None = None
        self.metrics = EngineMetrics()
        self.activities_started = 0
        self._waiters: dict[str, list[asyncio.Future[Any]]] = {}
        self._update_waiters: dict[tuple[str, str], list[asyncio.Future[Any]]] = {}
        self._stopped = asyncio.Event()
        self.state = "new"
        self.store: LmdbStore
        self.committer: GroupCommitter
        self.timers: TimerService
        self.activities: ActivityRunner
        self.driver: Driver
        self.maintenance: Maintenance

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def open(self) -> None:
        """Register this engine (refused, writing nothing, on an ownership-mode mismatch or a
        second live engine in ``single`` mode), then reclaim what nobody live drives: with
        background tasks the replay of what it takes goes on after ``open`` returns, in
        bounded slices of loop time (``_driving``); without, it is done before."""
        loop = asyncio.get_running_loop()
        options = self.options
        kwargs: dict[str, Any] = {} if options.map_size is None else {"map_size": options.map_size}
        # A PgStore has LmdbStore's methods (the conformance suite holds both to them).
        self.store = cast(LmdbStore, open_store(self.data_dir, clock=self.clock, sync=options.sync, max_inbox=self.max_inbox, **kwargs))
        self.clock = self.store.clock  # on PostgreSQL, leases go by the server's clock
        listen = getattr(self.store, "listen", None)  # PostgreSQL: hints from other hosts' engines
        try:
            self.store.register_engine(
                self.engine_id, heartbeat=self.heartbeat, ttl=self.ttl, mode=self.ownership, slot=self.slot, pid=os.getpid(),
                types=self.app_types,
            )
        except BaseException:
            self.store.close()
            raise
        if listen is not None:
            listen(self.hint_many)
        if self.warn_type_mismatch:
            self._warn_on_type_mismatch()
        self.committer = GroupCommitter(self.store, self.engine_id, loop, on_unknown=self.commit_retry.may_have_landed)
        self.committer.on_deposed = lambda error: self.depose(str(error))
        self.timers = TimerService(loop, self.clock)
        self.activities = ActivityRunner(loop, options.max_activity_threads, self.max_inflight_activities)
        self.activities.use_permits(self.committer, self.timers, self.clock)  # activity rate and concurrency limits
        self.driver = Driver(self, options.background)
        self.maintenance = Maintenance(self)
        self.committer.on_promoted = self.maintenance.reclaimer.fire_promoted
        self.state = "running"
        if options.tune_gc:
            gc.collect()
            gc.freeze()
            # Generation 0 is collected after GEN0_THRESHOLD net allocations. The engine frees
            # its objects by reference counting, but CPython's net count never drops below
            # zero, so bursts of frees (an eviction pass) are forgotten while the allocations
            # of revivals count in full: at 100k a wake of 100k evicted workflows spent 0.7 s
            # (15%) in collections that found nothing. Cycles only wait longer to be freed.
            gc.set_threshold(GEN0_THRESHOLD, 50, 100)
        self.maintenance.run_pass(heartbeat=False)
        if options.background:
            self.maintenance.start(loop)
            self.activities.on_loop = slot = open_slot(self.store.path, self.engine_id, self.stall_threshold)
            self.watchdog = LoopWatchdog(loop, self.stall_threshold, name=self.engine_id[:8], slot=slot, notes=stall_notes(self.store, self.engine_id), waiting=self.store.waiting_on_store)
            self.watchdog.start()

    @property
    def app_types(self) -> list[str]:
        """The workflow types of this engine's app (``workflows`` less the built-in ones)."""
        return [name for name in self.workflows if name not in SYSTEM_TYPES]

    def _warn_on_type_mismatch(self) -> None:
        """One WARNING if live engines on this store register other workflow types than this
        one: each runs and takes over only its own, which is rarely what two deployments of
        "the same" service on one store mean (a different ``--app``)."""
        peers = {engine_id: record for engine_id, record in self.store.live_engines().items() if engine_id != self.engine_id}
        mine = self.app_types
        groups = type_mismatches(mine, peers)
        if groups:
            log.warning(
                "%s",
                describe_type_mismatch(f"engine {self.engine_id}", mine, groups),
                extra={"event": "workflow_types_differ", "engine_id": self.engine_id, "engines": [engine_id for _, ids in groups for engine_id in ids]},
            )

    async def close(self) -> None:
        """Stop: commit what is pending, stop every actor, release the claims (so a peer takes
        them at once), and fail every call still waiting with ``EngineStopped``."""
        if self.state != "running":
            return
        self.state = "stopping"
        await self.maintenance.stop()
        await self.committer.drain()
        if self.state == "deposed":  # that last commit found this engine deposed
            return
        self._stop_actors()
        if self.watchdog is not None:
            self.watchdog.released()  # its claims are released: nobody is lost, nobody blamed
        try:
            self.store.release_engine(self.engine_id)
        except WeftError as exc:
            log.warning("could not release claims of engine %s: %s", self.engine_id, exc)
        self._shutdown(EngineStopped("engine stopped"))

    def depose(self, reason: str) -> None:
        """This engine lost its own liveness (its record is dead, expired or replaced): stop
        every actor and shut down without committing anything more, claims included."""
        if self.state not in ("running", "stopping"):
            return
        log.error("engine %s deposed: %s", self.engine_id, reason)
        self.state = "deposed"
        error = EngineDeposed(f"engine {self.engine_id} was deposed: {reason}", engine_id=self.engine_id)
        self.committer.close(error)
        self.maintenance.cancel()
        self._stop_actors()
        self._shutdown(error)

    async def wait_stopped(self) -> str:
        """Wait until the engine has stopped (closed or deposed); returns the final state."""
        await self._stopped.wait()
        return self.state

    def _stop_actors(self) -> None:
        for actor in list(self.actors.values()):
            actor.close()
        self.actors.clear()
        self.eviction.clear()
        self.driver.clear()
        self.orphans.clear()
        self.commit_retry.clear()
        self.refused.clear()

    def _shutdown(self, error: WeftError) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        self.committer.close(error)
        self.timers.close()
        self.activities.close()
        self.store.close()
        for futures in self._waiters.values():
            for future in futures:
                if not future.done():
                    future.set_exception(error)
        self._waiters.clear()
        if self.state != "deposed":
            self.state = "stopped"
        self._stopped.set()

    def _check_running(self) -> None:
        if self.state != "running":
            if self.state == "deposed":
                raise EngineDeposed(f"engine {self.engine_id} was deposed", engine_id=self.engine_id)
            raise EngineStopped(f"engine is {self.state}", engine_id=self.engine_id)

    def hint(self, workflow_id: str | None = None, kind: str = "workflow-touched") -> None:
        """Look at the store now instead of at the next heartbeat. A hint about a workflow
        touches only it: its actor here (live or evicted) takes its inbox at once, and callers
        waiting here for its result (``"workflow-done"``) or an update re-read the store. A
        hint without one (a peer died) runs the maintenance pass (feed poll and reclaim). Hints
        only make things sooner; without any, the pass still runs every ``heartbeat``.
        Callable from any thread."""
        if self.state != "running":
            return
        if workflow_id is None:
            self.maintenance.hint()
            return
        loop = self.committer.loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._hinted(workflow_id, kind)
        else:
            loop.call_soon_threadsafe(self._hinted, workflow_id, kind)

    def hint_many(self, hints: list[tuple[str | None, str]]) -> None:
        """``hint`` for each ``(workflow id, kind)``, handed to the loop once (from any thread):
        a store's hints from other hosts come in bursts, mostly of workflows held elsewhere."""
        if self.state == "running":
            try:
                self.committer.loop.call_soon_threadsafe(self._hinted_many, hints)
            except RuntimeError:  # the loop closed under us: nobody here to hint
                pass

    def _hinted_many(self, hints: list[tuple[str | None, str]]) -> None:
        if self.state != "running":
            return
        for workflow_id, kind in hints:
            if workflow_id is None:
                self.maintenance.hint()
            elif kind == "workflow-done":
                if workflow_id in self._waiters or self._update_waiters:
                    self._hinted(workflow_id, kind)
            else:
                self._hinted(workflow_id, kind)

    def _hinted(self, workflow_id: str, kind: str) -> None:
        if self.state != "running":
            return
        if kind == "workflow-done":
            for future in tuple(self._waiters.get(workflow_id, ())):
                resolve(future, None)  # result() reads the store again
        else:
            self.look_at(workflow_id)
        if self._update_waiters:  # an owner elsewhere may have answered
            self.update_hinted(workflow_id)

    def tick(self) -> None:
        """Fire due timers and run one maintenance pass now (for tests on a fake clock)."""
        self.timers.poke()
        if self.state == "running":
            self.maintenance.run_pass()

    # -- client calls ---------------------------------------------------------------------

    def _definition(self, workflow: Any) -> WorkflowDefinition:
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

    def _check_payload(self, data: bytes, what: str) -> bytes:
        if len(data) > self.payload_limit:
            raise PayloadTooLarge(f"{what} is {len(data)} bytes; the limit is {self.payload_limit}", size=len(data), limit=self.payload_limit)
        return data

    async def start(
        self,
        workflow: Any,
        *args: Any,
        id: str | None = None,
        if_exists: str = "error",
        memo: Any = None,
        start_delay: float | None = None,
        start_at: float | None = None,
        execution_timeout: float | None = None,
        priority: int | None = None,
    ) -> WorkflowHandle:
        """Start ``workflow(*args)``; returns once the start is committed (and, unless it is a
        delayed start or waits in its type's queue, claimed here in the same transaction).
        ``priority`` (-128 to 127, default 0) orders that queue: higher starts first."""
        future = self.committer.loop.create_future()
        options = {"id": id, "if_exists": if_exists, "memo": memo, "start_delay": start_delay, "start_at": start_at, "execution_timeout": execution_timeout, "priority": priority}
        wid = self._submit_start(future, False, workflow, args, options)
        result = await future
        if isinstance(result, WeftError):
            raise result
        return WorkflowHandle(self, wid, result.run_id)

    async def execute(self, workflow: Any, *args: Any, timeout: float | None = None, **start_options: Any) -> Any:
        """Start ``workflow(*args)`` and return its result: ``start`` and ``result`` in one call,
        as ``AsyncClient.execute``. ``start_options`` are ``start``'s. Raises like ``start`` and
        like ``result``, and ``TimeoutError`` if it does not end within ``timeout`` seconds."""
        loop = self.committer.loop
        deadline = None if timeout is None else loop.time() + timeout
        future = loop.create_future()
        wid = self._submit_start(future, True, workflow, args, start_options)
        timer = None if timeout is None else loop.call_later(timeout, resolve, future, None)
        try:
            outcome = await future
        finally:
            if timer is not None:
                timer.cancel()
            self.remove_waiter(wid, future)
        if outcome.__class__ is dict:  # it ran here, and ended
            return raise_for_outcome(wid, outcome)
        if isinstance(outcome, WeftError):
            raise outcome
        # Started but not run here (a delayed start, an existing run), dropped, or timed out.
        return await self.result(wid, None if deadline is None else max(0.0, deadline - loop.time()))

    def _submit_start(self, future: asyncio.Future[Any], until_end: bool, workflow: Any, args: tuple[Any, ...], options: dict[str, Any]) -> str:
        """Submit the start of ``workflow(*args)`` with ``start``'s ``options``; ``future`` gets
        the commit's result (or the ``WeftError`` that refused it). With ``until_end``, a run
        started here makes ``future`` a waiter on its ending instead (``result``'s waiter: the
        ending's record, or None to look again)."""
        self._check_running()
        definition = self._definition(workflow)
        if options.get("start_delay") is None and options.get("start_at") is None:
            self.admit()  # a delayed start makes no actor now (and its firing is never refused)
        intent = self._create_intent(definition, args, **options)
        wid = intent.wid

        def created(result: Any) -> None:
            # Runs in the commit's answer pass: the new actor takes its first step once the
            # start's reply has left. Its inbox is empty: a run replacing a finished one
            # (``start_new``) inherits no message of it, and a later one comes by the feed.
            if not isinstance(result, WeftError) and result.created and result.status == "running":
                self.metrics.claim("acquired")
                self.committer.after_replies(self.spawn_started, definition, wid, result.run_id, result.epoch, args)
                if until_end:
                    self.add_waiter(wid, future)  # its run cannot end before a later commit
                    return
            resolve(future, result)

        self.committer.submit_answer(intent, created)
        return wid

    def in_flight(self) -> int:
        """The workflows running now, not parked: each of them waits for an activity attempt
        (running or queued) or for this turn's commit. Cheap: three lengths."""
        activities = self.activities
        return activities.inflight + activities.queued + self.committer.pending

    def admit(self) -> None:
        """Refuse a new workflow: ``Overloaded`` when ``max_running`` workflows are in flight,
        ``LimitExceeded`` when ``max_active_workflows`` actors are in memory and an eviction
        pass frees no room (all of them are busy)."""
        if self.max_running is not None and (running := self.in_flight()) >= self.max_running:
            self.starts_overloaded += 1
            raise Overloaded(
                f"engine {self.engine_id} has {running} workflows in flight, its limit "
                f"(max_running={self.max_running}): retry later, with backoff",
                limit="max_running",
                value=self.max_running,
            )
        if len(self.actors) >= self.max_active_workflows:
            self.eviction.run()
            if len(self.actors) >= self.max_active_workflows:
                raise LimitExceeded(
                    f"engine {self.engine_id} runs {len(self.actors)} workflows, its limit "
                    f"(max_active_workflows={self.max_active_workflows}), and none is parked to "
                    "evict: retry later, or start it elsewhere",
                    limit="max_active_workflows",
                    value=self.max_active_workflows,
                )

    def get_handle(self, workflow_id: str) -> WorkflowHandle:
        """A handle on ``workflow_id``; no I/O happens until a method is awaited."""
        return WorkflowHandle(self, workflow_id)

    # -- schedules (``workflow._schedule``: a schedule is a workflow) -------------------------

    async def create_schedule(self, id: str, workflow: Any, *args: Any, spec: Any = None, **options: Any) -> ScheduleHandle:
        """Start workflow ``workflow(*args)`` at each fire time of ``spec`` (a cron string, an
        interval in seconds, or a dict: ``cron``/``every``, ``offset``, ``timezone``, ``start``,
        ``end``, ``jitter``). ``options``: ``overlap`` (``skip``, ``buffer_one``,
        ``buffer_all``, ``cancel_other``, ``terminate_other``, ``allow_all``),
        ``catchup_window`` (seconds, default 60), ``paused``, ``note``. Each fire starts
        ``<id>/<fire time ISO>``, once. ``WorkflowAlreadyExists`` if ``id`` is taken."""
        handle = await self.start(SCHEDULE_TYPE, new_schedule(workflow, args, spec, options), id=id)
        return ScheduleHandle(handle)

    def get_schedule(self, schedule_id: str) -> ScheduleHandle:
        """A handle on schedule ``schedule_id``; no I/O happens until a method is awaited."""
        return ScheduleHandle(self.get_handle(schedule_id))

    async def signal(self, workflow_id: str, name: str, payload: Any = None, *, request_id: str | None = None) -> None:
        """Append a signal to the durable inbox (and the feed); returns once committed. The
        owner, wherever it runs, picks it up by its feed poll; a local owner at once. With a
        ``request_id``, a repeat of it (a client's resend after a failover) appends nothing."""
        self._check_running()
        validate_id(workflow_id)
        validate_name(name, "a signal")
        if request_id is not None:
            validate_id(request_id, "a request id")
        data = self._check_payload(encode(payload, "signal payload"), "signal payload")
        append = AppendInbox(workflow_id, "signal", name, data, request_id)
        if workflow_id in self.eviction.evicted:
            self.eviction.revive(workflow_id, "signal")  # parked again at once, it may take it directly
        actor = self.actors.get(workflow_id)
        direct = actor.consume_with_append(append) if actor is not None else None
        if direct is None:
            result = await self.committer.submit_and_wait(append)
        else:
            future = self.committer.loop.create_future()

            def committed(result: Any) -> None:
                self.committer.after_replies(actor.consumed_with_append, direct, result)  # type: ignore[union-attr]
                resolve(future, result)

            self.committer.submit_answer(direct, committed)
            result = await future
        if isinstance(result, WeftError):
            raise result
        if direct is None or not result[1]:
            self.committer.after_replies(self.after_committed_call, self._message_sent, workflow_id, "signal")

    async def terminate(self, workflow_id: str, reason: str | None = None) -> None:
        """End a workflow at once, whoever owns it: one transaction sets it ``terminated``,
        drops its claim and timers and rotates its epoch, so its owner's next write is fenced
        out. ``WorkflowClosed`` if it has already finished."""
        self._check_running()
        validate_id(workflow_id)
        if reason is not None and not isinstance(reason, str):
            raise InvalidRequest(f"a terminate reason must be a string, not {reason!r}")
        error = {"type": "WorkflowTerminated", "message": reason or "terminated", "kind": "terminated"}
        result = await self.committer.submit_and_wait(CloseWorkflow(workflow_id, "terminated", error))
        if isinstance(result, WeftError):
            raise result
        self.after_committed_call(self.closed_externally, workflow_id, result)

    async def lift_quarantine(self, workflow_id: str) -> None:
        """Put a quarantined workflow back to work (after a fix is deployed): ``running`` with no
        owner and its lost-owner count reset, taken over at a live engine's next reclaim pass
        (this one's at once); under flow control, ``pending`` at the head of its queue. Raises
        ``InvalidRequest`` if it is not quarantined (``WorkflowClosed`` if it has finished)."""
        self._check_running()
        validate_id(workflow_id)
        result = await self.committer.submit_and_wait(LiftQuarantine(workflow_id))
        if isinstance(result, WeftError):
            raise result
        log.warning("workflow %s: quarantine lifted (it had lost %s owners); it is %s again", workflow_id, result["lost"].get("count"), result["status"])
        self.maintenance.hint()
        if self._on_commit_hint is not None:
            self.publish_hint("workflow-touched", workflow_id)

    async def purge(self, workflow_id: str) -> None:
        """Delete a finished workflow's record, history, inbox and listing entry; its epoch is
        kept (and grows), so the id can be reused safely."""
        self._check_running()
        validate_id(workflow_id)
        result = await self.committer.submit_and_wait(PurgeWorkflow(workflow_id))
        if isinstance(result, WeftError):
            raise result

    def closed_externally(self, workflow_id: str, result: dict[str, Any]) -> None:
        """After this engine committed an external close: drop a local actor (its claim is
        gone), answer local waiters, and hint the owner elsewhere."""
        actor = self.actors.get(workflow_id)
        if actor is not None:
            self.drop_actor(actor)
        self.eviction.forget(workflow_id)
        self.driver.discard(workflow_id)
        outcome = {"status": result["status"], "result": None, "error": result.get("error")}
        for future in self._waiters.pop(workflow_id, ()):
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

    def stats(self) -> dict[str, Any]:
        """Counters of this engine (once opened), readable in-process; workflow ids are never
        labels. ``commits_total``/``writes_total`` count committed transactions and intents."""
        parked = sum(1 for actor in self.actors.values() if not actor.busy and actor.cmd is not None and cast(Op, actor.cmd.op).kind != "activity")
        return {
            "engine_id": self.engine_id,
            "pid": os.getpid(),
            "state": self.state,
            "ownership": self.ownership,
            "live_actors": len(self.actors),
            "parked_actors": parked,
            "claims_active": len(self.actors) + len(self.eviction.evicted) + len(self.driver) + len(self.orphans) + self.commit_retry.waiting,
            "drives_queued": len(self.driver),
            "commits_total": self.committer.batches,
            "writes_total": self.committer.intents,
            "timers": len(self.timers),
            "timer_entries": self.timers.heap_size,
            "activities_started": self.activities_started,
            "activities_inflight": self.activities.inflight,
            "activities_queued": self.activities.queued,
            "workflows_in_flight": self.in_flight(),
            "starts_overloaded_total": self.starts_overloaded,
            "quarantined_workflows": self.store.count_quarantined() if self.state == "running" else 0,  # a stopped engine's store is closed
            "loop_stalls_total": 0 if self.watchdog is None else self.watchdog.stalls,
            "loop_lag_ms": None if self.watchdog is None else round(self.watchdog.lag * 1000.0, 1),
            "feed_cursor": self.maintenance.feed_cursor,
            "storage": self.store.write_state(),  # ok, disk_full, read_only, ...: reads go on
            **self.eviction.snapshot(),
            **self.metrics.snapshot(),
        }
