"""``Engine``: one engine process's worth of workflow actors on one store.

Embedded (``async with Engine(dir, app=...)``) it serves its caller directly; under the
supervisor each shard process runs one. Every write goes through the group committer, is
fenced on the workflow's claim, and is acknowledged only after its commit. Several engines,
in one process or many, may share a data directory: each owns disjoint workflows, and the
workflows of a dead or stalled engine move to live ones (``_reclaim``).

``Engine`` is a facade and the composition root: it builds the runtime (``_hosting.ActorHost``:
the actor table and what actors call) and the parts around it, wires each to the narrow
``typing.Protocol`` it declares, and delegates its public calls to them (``_starting``,
``_messages``, ``_reads``, ``_hints``, ``_stats``; its server submits through ``starts`` and
``messages`` too; ``open`` adds the parts that need the store and the loop: ``_opening``).
None of them imports it; the only news that comes back up, a lost lease, arrives through the
``on_deposed`` callback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable, cast

from .. import _tracing
from .._clock import Clock, SystemClock
from ..errors import WeftError
from ..store import LmdbStore, open_store
from .._schedule_handle import SCHEDULE_TYPE, ScheduleHandle, new_schedule
from ..workflow import SYSTEM_TYPES, WorkflowDefinition, collect_workflows, with_system_workflows
from ._activities import ActivityRunner
from ._commit_retry import CommitRetry
from ._committer import GroupCommitter
from ._driving import Driver
from ._eviction import Evictor
from ._handle import WorkflowHandle
from ._handoff import Wake, hand_off_runtime
from ._hints import HANDED_OFF, Hints
from ._hosting import ActorHost
from ._lifecycle import close_runtime, depose_runtime
from ._maintenance import Maintenance
from ._messages import WorkflowMessages
from ._metrics import EngineMetrics
from ._opening import open_runtime
from ._options import EngineOptions, EngineSettings
from ._reads import WorkflowReads
from ._reuse import RefusedOutcomes
from ._runtime_attr import RuntimeAttr
from ._starting import Starts
from ._stats import engine_stats
from ._timers import TimerService
from ._waiters import Waiters
from ._watchdog import LoopWatchdog

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._actor import Actor

__all__ = ["Engine"]

log = logging.getLogger("weft_actors.shard")

CommitHint = Callable[[str, str], None]
DoneInterest = Callable[[str, bool], None]


class Engine:
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

    state: RuntimeAttr[str] = RuntimeAttr()
    store: RuntimeAttr[LmdbStore] = RuntimeAttr()
    committer: RuntimeAttr[GroupCommitter] = RuntimeAttr()
    timers: RuntimeAttr[TimerService] = RuntimeAttr()
    activities: RuntimeAttr[ActivityRunner] = RuntimeAttr()
    driver: RuntimeAttr[Driver] = RuntimeAttr()
    maintenance: RuntimeAttr[Maintenance] = RuntimeAttr()
    watchdog: RuntimeAttr[LoopWatchdog | None] = RuntimeAttr()
    clock: RuntimeAttr[Clock] = RuntimeAttr()
    actors: RuntimeAttr[dict[str, Actor]] = RuntimeAttr()
    waiters: RuntimeAttr[Waiters] = RuntimeAttr()  # the calls waiting for an ending or an answer
    orphans: RuntimeAttr[set[str]] = RuntimeAttr()
    eviction: RuntimeAttr[Evictor] = RuntimeAttr()
    commit_retry: RuntimeAttr[CommitRetry] = RuntimeAttr()
    refused: RuntimeAttr[RefusedOutcomes] = RuntimeAttr()
    activities_started: RuntimeAttr[int] = RuntimeAttr()
    drive: RuntimeAttr[Callable[[str, int], bool]] = RuntimeAttr()  # replay and resume a workflow held here
    commit_failed: RuntimeAttr[Callable[[Actor, WeftError], None]] = RuntimeAttr()
    # The settings, as the runtime's parts read them (a test may set one).
    heartbeat: RuntimeAttr[float] = RuntimeAttr()
    ttl: RuntimeAttr[float] = RuntimeAttr()
    payload_limit: RuntimeAttr[int] = RuntimeAttr()
    retention: RuntimeAttr[float] = RuntimeAttr()
    quarantine_after: RuntimeAttr[int] = RuntimeAttr()
    ownership: RuntimeAttr[str] = RuntimeAttr()
    probe_peers: RuntimeAttr[bool] = RuntimeAttr()
    feed_retention: RuntimeAttr[float] = RuntimeAttr()
    engine_retention: RuntimeAttr[float] = RuntimeAttr()
    prune_interval: RuntimeAttr[float] = RuntimeAttr()
    max_active_workflows: RuntimeAttr[int] = RuntimeAttr()
    max_running: RuntimeAttr[int | None] = RuntimeAttr()
    max_inbox: RuntimeAttr[int] = RuntimeAttr()
    max_inflight_activities: RuntimeAttr[int] = RuntimeAttr()
    stall_threshold: RuntimeAttr[float] = RuntimeAttr()

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
        self.engine_id = engine_id or uuid.uuid4().hex
        self.slot = slot
        self.metrics = EngineMetrics()
        self.warn_type_mismatch = options.warn_type_mismatch
        self._stopped = asyncio.Event()
        # The composition root: the runtime, then each part wired to it by its own Protocol
        # (the parts that need the store and the loop are added by ``open``).
        host = self._host = ActorHost(self.engine_id, self.workflows, clock or SystemClock(), self.metrics, options, self.depose, on_commit_hint)
        host.eviction = Evictor(host, options.max_live_actors)
        host.commit_retry = CommitRetry(host)
        host.refused = RefusedOutcomes(host)
        host.waiters = Waiters(host.actors, host.eviction, on_done_interest)
        self.starts = Starts(host)
        self.messages = WorkflowMessages(host)
        self._reads = WorkflowReads(host)
        self._hints = Hints(host)

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
        options = self.options
        host = self._host
        kwargs: dict[str, Any] = {} if options.map_size is None else {"map_size": options.map_size}
        # A PgStore has LmdbStore's methods (the conformance suite holds both to them).
        store = host.store = cast(LmdbStore, open_store(self.data_dir, clock=host.clock, sync=options.sync, max_inbox=host.max_inbox, **kwargs))
        open_runtime(host, store, options, self.engine_id, self.slot, self.app_types, self.warn_type_mismatch, self.depose, self.hint_many)

    @property
    def app_types(self) -> list[str]:
        """The workflow types of this engine's app (``workflows`` less the built-in ones)."""
        return [name for name in self.workflows if name not in SYSTEM_TYPES]

    async def close(self) -> None:
        """Stop: commit what is pending, stop every actor, release the claims (so a peer takes
        them at once), and fail every call still waiting with ``EngineStopped``."""
        if await close_runtime(self._host, self.engine_id):
            self._stopped.set()

    async def hand_off(self, successor: Engine | str, grace: float = 30.0, wake: Wake | None = None) -> int | None:
        """Drain to ``successor`` (a live engine on this store, or its id; ``wake`` tells it what
        moved, ``adopt`` for an Engine): see ``_handoff``. How many moved; None if not running."""
        target, wake = (successor.engine_id, wake or successor.adopt) if isinstance(successor, Engine) else (successor, wake)
        moved = await hand_off_runtime(self._host, self.starts, self.engine_id, target, grace, wake)
        if self._host.state in ("stopped", "deposed"):
            self._stopped.set()
        return moved

    def adopt(self, workflow_ids: list[str]) -> None:
        """Drive at once these workflows a peer handed to this engine (from any thread)."""
        self.hint_many([(wid, HANDED_OFF) for wid in workflow_ids])

    def depose(self, reason: str) -> None:
        """This engine lost its own liveness (its record is dead, expired or replaced): stop
        every actor and shut down without committing anything more, claims included."""
        if depose_runtime(self._host, self.engine_id, reason):
            self._stopped.set()

    async def wait_stopped(self) -> str:
        """Wait until the engine has stopped (closed or deposed); returns the final state."""
        await self._stopped.wait()
        return self._host.state

    def hint(self, workflow_id: str | None = None, kind: str = "workflow-touched") -> None:
        """Look at the store now instead of at the next heartbeat. A hint about a workflow
        touches only it: its actor here (live or evicted) takes its inbox at once, and callers
        waiting here for its result (``"workflow-done"``) or an update re-read the store. A
        hint without one (a peer died) runs the maintenance pass (feed poll and reclaim). Hints
        only make things sooner; without any, the pass still runs every ``heartbeat``.
        Callable from any thread."""
        self._hints.hint(workflow_id, kind)

    def hint_many(self, hints: list[tuple[str | None, str]]) -> None:
        """``hint`` for each ``(workflow id, kind)``, handed to the loop once (from any thread):
        a store's hints from other hosts come in bursts, mostly of workflows held elsewhere."""
        self._hints.hint_many(hints)

    def tick(self) -> None:
        """Fire due timers and run one maintenance pass now (for tests on a fake clock)."""
        self._host.timers.poke()
        if self._host.state == "running":
            self._host.maintenance.run_pass()

    # -- client calls (each delegates to the part that serves it) ---------------------------

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
        traceparent: str | None = None,
    ) -> WorkflowHandle:
        """Start ``workflow(*args)``; returns once the start is committed (and, unless it is a
        delayed start or waits in its type's queue, claimed here in the same transaction).
        ``priority`` (-128 to 127, default 0) orders that queue: higher starts first.
        ``traceparent`` (W3C) is the trace the run's spans join (``_tracing``)."""
        options = {"id": id, "if_exists": if_exists, "memo": memo, "start_delay": start_delay, "start_at": start_at, "execution_timeout": execution_timeout, "priority": priority, "traceparent": traceparent}
        call = self.starts.start(workflow, args, options)
        wid, run_id = await (call if _tracing.ACTIVE is None else _tracing.traced_start(workflow, options, call))
        return WorkflowHandle(self, wid, run_id)

    async def execute(self, workflow: Any, *args: Any, timeout: float | None = None, **start_options: Any) -> Any:
        """Start ``workflow(*args)`` and return its result: ``start`` and ``result`` in one call,
        as ``AsyncClient.execute``. ``start_options`` are ``start``'s. Raises like ``start`` and
        like ``result``, and ``TimeoutError`` if it does not end within ``timeout`` seconds."""
        call = self.starts.execute(workflow, args, timeout, start_options, self._reads.result)
        return await (call if _tracing.ACTIVE is None else _tracing.traced_start(workflow, start_options, call))

    async def signal_with_start(
        self,
        workflow: Any,
        *args: Any,
        signal: str,
        payload: Any = None,
        id: str | None = None,
        if_exists: str = "error",
        memo: Any = None,
        start_delay: float | None = None,
        start_at: float | None = None,
        execution_timeout: float | None = None,
        priority: int | None = None,
        traceparent: str | None = None,
    ) -> WorkflowHandle:
        """Signal workflow ``id``, starting ``workflow(*args)`` under that id first if it does not
        exist, in one transaction. A running (or pending) workflow is just signalled; a finished
        one is replaced if ``if_exists="start_new"``, else ``WorkflowAlreadyExists``
        (``"error"``) or ``WorkflowClosed`` (``"return"``)."""
        options = {"id": id, "if_exists": if_exists, "memo": memo, "start_delay": start_delay, "start_at": start_at, "execution_timeout": execution_timeout, "priority": priority, "traceparent": traceparent}
        call = self.starts.signal_with_start(workflow, args, signal, payload, options)
        wid, run_id = await (call if _tracing.ACTIVE is None else _tracing.traced_start(workflow, options, call))
        return WorkflowHandle(self, wid, run_id)

    def in_flight(self) -> int:
        """The workflows running now, not parked: each of them waits for an activity attempt
        (running or queued) or for this turn's commit. Cheap: three lengths."""
        return self.starts.in_flight()

    def admit(self) -> None:
        """Refuse a new workflow: ``Overloaded`` when ``max_running`` workflows are in flight,
        ``LimitExceeded`` when ``max_active_workflows`` actors are in memory and an eviction
        pass frees no room (all of them are busy)."""
        self.starts.admit()

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
        await self.messages.signal(workflow_id, name, payload, request_id=request_id)

    async def update(self, workflow_id: str, name: str, *args: Any, request_id: str | None = None) -> Any:
        """Apply update ``name(*args)`` in the workflow and return the handler's result.

        Idempotent per ``request_id`` (one is made if not given): a retry with the same id gets
        the same answer and the handler runs once. ``UpdateRejected`` if the validator refused
        it (or there is no such handler), ``UpdateFailed`` if the handler raised,
        ``WorkflowClosed`` if the workflow finished before applying it.
        """
        return await self.messages.update(workflow_id, name, *args, request_id=request_id)

    async def cancel(self, workflow_id: str) -> None:
        """Request cancellation: the workflow gets ``asyncio.CancelledError`` at its current
        await (its running activity is cancelled), may clean up, and ends ``cancelled`` unless
        it returns normally. A workflow that has not started yet is closed ``cancelled`` at once.
        ``WorkflowClosed`` if it has already finished."""
        await self.messages.cancel(workflow_id)

    async def terminate(self, workflow_id: str, reason: str | None = None) -> None:
        """End a workflow at once, whoever owns it: one transaction sets it ``terminated``,
        drops its claim and timers and rotates its epoch, so its owner's next write is fenced
        out. ``WorkflowClosed`` if it has already finished."""
        await self.messages.terminate(workflow_id, reason)

    async def lift_quarantine(self, workflow_id: str, reason: str | None = None, by: str | None = None) -> None:
        """Put a quarantined workflow back to work (after a fix is deployed): ``running`` with no
        owner and its lost-owner count reset, taken over at a live engine's next reclaim pass
        (this one's at once); under flow control, ``pending`` at the head of its queue. Raises
        ``InvalidRequest`` if it is not quarantined (``WorkflowClosed`` if it has finished)."""
        await self.messages.lift_quarantine(workflow_id, reason, by)

    async def purge(self, workflow_id: str) -> None:
        """Delete a finished workflow's record, history, inbox and listing entry; its epoch is
        kept (and grows), so the id can be reused safely."""
        await self.messages.purge(workflow_id)

    async def query(self, workflow_id: str, name: str, *args: Any) -> Any:
        return await self._reads.query(workflow_id, name, *args)

    async def result(self, workflow_id: str, timeout: float | None = None) -> Any:
        return await self._reads.result(workflow_id, timeout)

    async def describe(self, workflow_id: str, *, input_encoded: bool = False) -> dict[str, Any]:
        """The workflow's record, history, timers and inbox as people read them
        (``_describe``); ``input_encoded`` keeps its input as codec bytes (for a reply)."""
        return await self._reads.describe(workflow_id, input_encoded=input_encoded)

    async def list(self, status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None, memo: dict[str, Any] | None = None) -> dict[str, Any]:
        """One page, ``{"items": [{"id", "type", "status", "updated", "updated_iso"}...],
        "cursor": next or None}``, in workflow-id order. Following the cursors never lists a workflow twice, and
        lists every workflow that matches throughout, even one whose status changes meanwhile
        (the exact guarantee: ``store._listing.list_workflows``). ``memo={"customer": "acme"}``:
        those whose memo has each of these top-level fields (read from an index, not a scan)."""
        return await self._reads.list(status, type, limit, cursor, memo)

    def stats(self) -> dict[str, Any]:
        """Counters of this engine (once opened), readable in-process; workflow ids are never
        labels. ``commits_total``/``writes_total`` count committed transactions and intents."""
        return engine_stats(self._host, self.starts.in_flight(), self.starts.starts_overloaded)
