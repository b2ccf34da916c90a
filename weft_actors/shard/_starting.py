"""Starting workflows: ``start``, ``execute`` and ``signal_with_start``, the checks that make
a refused start write nothing, and admission (``max_running``, ``max_active_workflows``).

The engine holds one ``Starts`` and delegates to it (wrapping what it returns in handles); it
knows the engine's runtime only by ``StartHost``. A start is one create intent through the
group committer; a run it created and claimed here gets its actor once the start's reply has
left (``GroupCommitter.after_replies``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from .._tracing import check_traceparent
from ..codec import encode, encode_args
from ..errors import InvalidRequest, LimitExceeded, Overloaded, WeftError
from ..store import CreateWorkflow, SignalWithStart
from ._flow import flow_of
from ._outcome import raise_for_outcome
from ._validate import check_instant, check_payload, check_seconds, new_id, validate_id, validate_name
from ._waiters import resolve

if TYPE_CHECKING:
    from .._clock import Clock
    from ..workflow import WorkflowDefinition
    from ._activities import ActivityRunner
    from ._committer import GroupCommitter
    from ._metrics import EngineMetrics
    from ._waiters import Waiters

__all__ = ["StartHost", "Starts"]

_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)


class _Evicts(Protocol):
    def run(self) -> object: ...


class StartHost(Protocol):
    """What starting needs of the engine: its state check and id, the registered types, the
    clock (a delayed start's time), the payload limit, the committer, the counters, the live
    actors and the evictor (room for a new one), the activities and the committer's backlog
    (what is in flight), the admission limits, the waiters of ``execute``, and the calls that
    make a started run's actor or send a signal on."""

    @property
    def engine_id(self) -> str: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def payload_limit(self) -> int: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def metrics(self) -> EngineMetrics: ...

    @property
    def actors(self) -> Mapping[str, object]: ...

    @property
    def eviction(self) -> _Evicts: ...

    @property
    def activities(self) -> ActivityRunner: ...

    @property
    def waiters(self) -> Waiters: ...

    @property
    def max_running(self) -> int | None: ...

    @property
    def max_active_workflows(self) -> int: ...

    def check_running(self) -> None: ...

    def definition(self, workflow: Any) -> WorkflowDefinition: ...

    def spawn_started(self, definition: WorkflowDefinition, wid: str, run_id: str, epoch: int, args: tuple[Any, ...], with_inbox: bool = False) -> None: ...

    def after_committed_call(self, follow_up: Callable[..., None], *args: Any) -> None: ...

    def message_sent(self, wid: str, kind: str) -> None: ...


class Starts:
    """The starts of one engine; ``starts_overloaded`` counts those refused by ``max_running``."""

    __slots__ = ("_host", "starts_overloaded", "handing_off")

    def __init__(self, host: StartHost) -> None:
        self._host = host
        self.starts_overloaded = 0
        self.handing_off = False
        """Set by ``Engine.hand_off``: new workflows are refused (``Overloaded``, retryable) so
        that nothing new lands on an engine whose claims are about to move."""

    def refuse_if_handing_off(self) -> None:
        if self.handing_off:
            raise Overloaded(f"engine {self._host.engine_id} is handing its workflows off: start elsewhere, or retry", reason="handing_off")

    async def start(self, workflow: Any, args: tuple[Any, ...], options: dict[str, Any]) -> tuple[str, str]:
        """``Engine.start``: the id and run id once the start is committed."""
        future = self._host.committer.loop.create_future()
        wid = self.submit_start(future, False, workflow, args, options)
        result = await future
        if isinstance(result, WeftError):
            raise result
        return wid, result.run_id

    async def execute(self, workflow: Any, args: tuple[Any, ...], timeout: float | None, start_options: dict[str, Any], result: Callable[[str, float | None], Any]) -> Any:
        """``Engine.execute``; ``result`` is the engine's, for a run that did not end here."""
        host = self._host
        loop = host.committer.loop
        deadline = None if timeout is None else loop.time() + timeout
        future = loop.create_future()
        wid = self.submit_start(future, True, workflow, args, start_options)
        timer = None if timeout is None else loop.call_later(timeout, resolve, future, None)
        try:
            outcome = await future
        finally:
            if timer is not None:
                timer.cancel()
            host.waiters.remove(wid, future)
        if outcome.__class__ is dict:  # it ran here, and ended
            return raise_for_outcome(wid, outcome)
        if isinstance(outcome, WeftError):
            raise outcome
        # Started but not run here (a delayed start, an existing run), dropped, or timed out.
        return await result(wid, None if deadline is None else max(0.0, deadline - loop.time()))

    def submit_start(
        self, future: asyncio.Future[Any] | None, until_end: bool, workflow: Any, args: tuple[Any, ...], options: dict[str, Any],
        callback: Callable[[Any], None] | None = None,
    ) -> str:
        """Submit the start of ``workflow(*args)`` with ``start``'s ``options``; ``future`` gets
        the commit's result (or the ``WeftError`` that refused it). With ``until_end``, a run
        started here makes ``future`` a waiter on its ending instead (``result``'s waiter: the
        ending's record, or None to look again). A server's request served without a task of
        its own gives ``callback`` instead of a future: it is called with the result in the
        commit's pass, after a new run's first turn was queued (``after_replies``); a start
        answered by its commit's reply (``answer_reply``) needs neither."""
        host = self._host
        host.check_running()
        if self.handing_off:
            self.refuse_if_handing_off()
        definition = host.definition(workflow)
        if options.get("start_delay") is None and options.get("start_at") is None:
            self.admit()  # a delayed start makes no actor now (and its firing is never refused)
        intent = self.create_intent(definition, args, **options)
        wid = intent.wid

        def created(result: Any) -> None:
            # Runs in the commit's answer pass: the new actor takes its first step once the
            # start's reply has left. Its inbox is empty: a run replacing a finished one
            # (``start_new``) inherits no message of it, and a later one comes by the feed.
            if not isinstance(result, WeftError) and result.created and result.status == "running":
                host.metrics.claim("acquired")
                host.committer.after_replies(host.spawn_started, definition, wid, result.run_id, result.epoch, args)
                if until_end:
                    host.waiters.add(wid, future)  # type: ignore[arg-type]  # its run cannot end before a later commit
                    return
            if callback is not None:
                callback(result)
            elif future is not None:
                resolve(future, result)

        host.committer.submit_answer(intent, created)
        return wid

    async def signal_with_start(self, workflow: Any, args: tuple[Any, ...], signal: str, payload: Any, options: dict[str, Any]) -> tuple[str, str]:
        """``Engine.signal_with_start``: the id and run id once committed."""
        host = self._host
        host.check_running()
        self.refuse_if_handing_off()
        validate_name(signal, "a signal")
        definition = host.definition(workflow)
        self.admit()  # refused like a start at the actor cap, even if it only signals
        create = self.create_intent(definition, args, **options)
        data = check_payload(encode(payload, "signal payload"), "signal payload", host.payload_limit)
        future = host.committer.loop.create_future()
        wid = create.wid

        def committed(result: Any) -> None:
            # In the commit's answer pass, as for start: a new run takes its first step, or the
            # signalled one goes on, once the reply has left.
            if not isinstance(result, WeftError):
                created = result[0]
                if created.created and created.status == "running":
                    host.metrics.claim("acquired")
                    host.committer.after_replies(host.spawn_started, definition, wid, created.run_id, created.epoch, args, True)
                elif not created.created:
                    host.committer.after_replies(host.after_committed_call, host.message_sent, wid, "signal")
            resolve(future, result)

        host.committer.submit_answer(SignalWithStart(create, signal, data), committed)
        result = await future
        if isinstance(result, WeftError):
            raise result
        return wid, result[0].run_id

    def create_intent(
        self,
        definition: WorkflowDefinition,
        args: tuple[Any, ...],
        id: str | None = None,
        if_exists: str = "error",
        memo: Any = None,
        start_delay: float | None = None,
        start_at: float | None = None,
        execution_timeout: float | None = None,
        priority: int | None = None,
        traceparent: str | None = None,
    ) -> CreateWorkflow:
        """The create intent of a start, every part checked first (``InvalidRequest``,
        ``PayloadTooLarge``), so that a refused start writes nothing: arguments that do not
        fit the workflow's signature too, which the run would otherwise meet only once driven."""
        limit = self._host.payload_limit
        wid = new_id() if id is None else validate_id(id)
        if if_exists not in ("error", "return", "start_new"):
            raise InvalidRequest(f"if_exists must be 'error', 'return' or 'start_new', not {if_exists!r}")
        if start_delay is not None and start_at is not None:
            raise InvalidRequest("give start_delay or start_at, not both")
        if execution_timeout is not None:
            execution_timeout = check_seconds(execution_timeout, "execution_timeout")
        if start_delay is not None:
            start_at = self._host.clock.now() + check_seconds(start_delay, "start_delay")
        elif start_at is not None:
            start_at = check_instant(start_at, "start_at")
        data = check_payload(encode_args(args, "workflow argument"), "workflow arguments", limit)
        memo_bytes = None if memo is None else check_payload(encode(memo, "memo"), "memo", limit)
        refused = definition.parameters.refusal(len(args))
        if refused is not None:
            raise refused
        flow = flow_of(definition, args, priority)
        trace = None if traceparent is None else check_traceparent(traceparent)
        return _new_tuple(CreateWorkflow, (wid, definition.name, data, new_id(), if_exists, memo_bytes, None, start_at, execution_timeout, flow, trace))

    def in_flight(self) -> int:
        """The workflows running now, not parked: each of them waits for an activity attempt
        (running or queued) or for this turn's commit. Cheap: three lengths."""
        host = self._host
        activities = host.activities
        return activities.inflight + activities.queued + host.committer.pending

    def admit(self) -> None:
        """Refuse a new workflow: ``Overloaded`` when ``max_running`` workflows are in flight,
        ``LimitExceeded`` when ``max_active_workflows`` actors are in memory and an eviction
        pass frees no room (all of them are busy)."""
        host = self._host
        max_running = host.max_running
        if max_running is not None and (running := self.in_flight()) >= max_running:
            self.starts_overloaded += 1
            raise Overloaded(
                f"engine {host.engine_id} has {running} workflows in flight, its limit "
                f"(max_running={max_running}): retry later, with backoff",
                limit="max_running",
                value=max_running,
            )
        if len(host.actors) >= host.max_active_workflows:
            host.eviction.run()
            if len(host.actors) >= host.max_active_workflows:
                raise LimitExceeded(
                    f"engine {host.engine_id} runs {len(host.actors)} workflows, its limit "
                    f"(max_active_workflows={host.max_active_workflows}), and none is parked to "
                    "evict: retry later, or start it elsewhere",
                    limit="max_active_workflows",
                    value=host.max_active_workflows,
                )
