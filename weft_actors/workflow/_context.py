"""``Context``: what a workflow body sees as ``ctx``."""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping, Protocol

from .._checks import check_seconds, validate_id, validate_name
from ..codec import encode_args
from ..errors import InvalidRequest
from ._schedule_id import ScheduledFire, scheduled_fire
from ._api import RetryPolicy, WorkflowDefinition, activity_definition, workflow_definition
from ._ops import (
    CHILD_DONE_SIGNAL,
    PARENT_CLOSE,
    ActivityOp,
    ChildOp,
    CloseChildOp,
    Combinator,
    ConditionOp,
    ContinueAsNew,
    Op,
    PatchOp,
    SignalOp,
    SleepOp,
    ValueOp,
)

__all__ = ["Context", "RunView"]


class RunView(Protocol):
    """What a ``Context`` needs of the run it serves: its names, whether it replays, its
    definition, and its handler tables to fill. Declared here so the context never imports the
    driver that builds it (the driver imports the context, one direction)."""

    workflow_id: str
    run_id: str
    workflow_type: str
    replaying: bool
    definition: WorkflowDefinition
    query_handlers: Mapping[str, Any]
    signal_handlers: Mapping[str, Any]
    update_handlers: Mapping[str, tuple[Any, Any]]


class _ReplaySilentLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    def __init__(self, run: RunView) -> None:
        super().__init__(logging.getLogger("weft_actors.workflow.user"), {})
        self._run = run

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging's name
        return not self._run.replaying and super().isEnabledFor(level)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self._run.workflow_id}] {msg}", kwargs


class Context:
    """The workflow's handle on the engine. Built by the driver; there is no public constructor.

    Every operation returns an op to ``await`` (or to pass, unawaited, to ``all``/``race``); the
    outcome is recorded before the workflow moves past it, and replayed from the record after
    a restart.
    """

    __slots__ = ("_run", "_logger")

    def __init__(self, run: RunView) -> None:
        self._run = run
        self._logger: _ReplaySilentLogger | None = None

    def _detach(self) -> None:
        """The engine is done with the run: drop the references back to it (this one and the
        logger's), so user code that keeps ``ctx`` (a handler closing over it) ties nothing to
        the run, and reference counting alone frees it."""
        self._run = None  # type: ignore[assignment]
        self._logger = None

    @property
    def workflow_id(self) -> str:
        return self._run.workflow_id

    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def workflow_type(self) -> str:
        return self._run.workflow_type

    @property
    def scheduled(self) -> ScheduledFire | None:
        """``(schedule_id, fire_time)`` if a schedule started this workflow (its id is
        ``<schedule id>/<fire time ISO>``, the nominal time before jitter), else None."""
        return scheduled_fire(self._run.workflow_id)

    @property
    def attempt(self) -> int:
        return 1

    @property
    def is_replaying(self) -> bool:
        return self._run.replaying

    @property
    def logger(self) -> logging.LoggerAdapter:  # type: ignore[type-arg]
        """A logger that stays silent while the workflow replays."""
        if self._logger is None:
            self._logger = _ReplaySilentLogger(self._run)
        return self._logger

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        start_to_close: float | None = None,
        schedule_to_close: float | None = None,
    ) -> ActivityOp:
        """Run activity ``fn(*args)``; at-least-once, retried per its policy."""
        definition = activity_definition(fn)
        if definition is None:
            raise InvalidRequest(f"{fn!r} is not an @activity")
        if start_to_close is not None:
            start_to_close = check_seconds(start_to_close, "start_to_close")
        if schedule_to_close is not None:
            schedule_to_close = check_seconds(schedule_to_close, "schedule_to_close")
        return ActivityOp(
            definition,
            encode_args(args, "activity argument"),
            retry or definition.retry,
            start_to_close if start_to_close is not None else definition.start_to_close,
            schedule_to_close if schedule_to_close is not None else definition.schedule_to_close,
        )

    def sleep(self, seconds: float) -> SleepOp:
        """A durable timer: survives restarts; fires at once on recovery if already due."""
        return SleepOp(check_seconds(seconds, "sleep"))

    def wait_signal(self, name: str, timeout: float | None = None) -> SignalOp:
        """The payload of the oldest buffered signal ``name`` (FIFO); ``TimeoutError`` on timeout."""
        validate_name(name, "wait_signal")
        if timeout is not None:
            timeout = check_seconds(timeout, "wait_signal timeout")
        return SignalOp(name, timeout)

    def wait_condition(self, predicate: Callable[[], Any], timeout: float | None = None) -> ConditionOp:
        """Wait until ``predicate()`` is true; re-checked after every signal or update handler.
        ``TimeoutError`` on timeout. The predicate must only read workflow state."""
        if not callable(predicate):
            raise InvalidRequest("wait_condition needs a callable predicate")
        if timeout is not None:
            timeout = check_seconds(timeout, "wait_condition timeout")
        return ConditionOp(predicate, timeout)

    def all(self, ops: Iterable[Op]) -> Combinator:
        """Run ``ops`` concurrently; the list of their results, in order. The first error
        propagates (like ``asyncio.gather``) and cancels the ops still running, whose
        results nobody could observe any more."""
        return Combinator("all", _ops_of(ops, "all"))

    def race(self, ops: Iterable[Op]) -> Combinator:
        """Run ``ops`` concurrently; ``(index, result)`` of the first to finish (its error, if
        it failed). The losers are cancelled; a losing ``wait_signal`` consumes nothing."""
        found = _ops_of(ops, "race")
        if not found:
            raise InvalidRequest("race needs at least one op")
        return Combinator("race", found)

    def child(self, workflow: Any, *args: Any, id: str | None = None, parent_close: str = "terminate") -> ChildOp:
        """Start child workflow ``workflow(*args)`` and wait for its result; its failure raises
        ``ChildWorkflowError``. ``parent_close`` says what happens to it if this workflow
        closes first: ``terminate``, ``cancel`` (a cancel request) or ``abandon``."""
        if isinstance(workflow, str):
            name = workflow
        else:
            definition = workflow_definition(workflow)
            if definition is None:
                raise InvalidRequest(f"{workflow!r} is not a @workflow")
            name = definition.name
            _check_arguments(definition, args)  # by name, the engine checks it if it knows the type
        if parent_close not in PARENT_CLOSE:
            raise InvalidRequest(f"parent_close must be one of {PARENT_CLOSE}, not {parent_close!r}")
        if id is not None:
            validate_id(id, "a child workflow id")
        return ChildOp(name, encode_args(args, "child workflow argument"), id, parent_close)

    def start_child(self, workflow: Any, *args: Any, id: str | None = None, parent_close: str = "abandon") -> ChildOp:
        """Start child workflow ``workflow(*args)`` without waiting for it: ``await`` returns
        its run id once the start is recorded (in the same commit as this step: exactly one
        start, whatever crashes). An ``id`` that exists already, running or finished, raises
        ``WorkflowAlreadyExists``. Its ending calls the ``on_child_done`` handler, in whichever
        run of this workflow is current then. ``parent_close`` defaults to ``abandon``."""
        op = self.child(workflow, *args, id=id, parent_close=parent_close)
        return ChildOp(op.name, op.args, op.id, op.parent_close, kind="start_child")

    def on_child_done(self, fn: Callable[[str, str], Any]) -> None:
        """Call ``fn(child_id, status)`` when a child started by ``start_child`` ends
        (``status``: completed, failed, cancelled, terminated or timed_out); recorded like a
        signal, so a replay calls it at the same point."""
        self.on_signal(CHILD_DONE_SIGNAL, lambda done: fn(done[0], done[1]))

    def cancel_child(self, workflow_id: str) -> CloseChildOp:
        """Ask workflow ``workflow_id`` (a child this one started) to cancel, in the commit of
        this step; nothing if it has ended. ``await`` it."""
        validate_id(workflow_id, "a child workflow id")
        return CloseChildOp(workflow_id, "cancel", "")

    def terminate_child(self, workflow_id: str, reason: str | None = None) -> CloseChildOp:
        """Terminate workflow ``workflow_id`` (a child this one started) in the commit of this
        step: it runs no more code; nothing if it has ended. ``await`` it."""
        validate_id(workflow_id, "a child workflow id")
        return CloseChildOp(workflow_id, "terminate", reason or f"terminated by {self.workflow_id!r}")

    def continue_as_new(self, *args: Any) -> ContinueAsNew:
        """End this run with status ``continued`` and start a fresh one (new run id, empty
        history, same inbox) with ``args``: return it or raise it. ``InvalidRequest`` at once
        if ``args`` do not fit the workflow's signature (the next run would fail on them)."""
        _check_arguments(self._run.definition, args)
        return ContinueAsNew(encode_args(args, "workflow argument"))

    def patched(self, change_id: str) -> PatchOp:
        """``await ctx.patched("id")``: True in runs that reach this point after the change was
        deployed, False in runs that had already passed it; keep the old branch until no run
        from before the change is left."""
        if not isinstance(change_id, str) or not change_id:
            raise InvalidRequest("patched needs a non-empty change id")
        return PatchOp(change_id)

    def now(self) -> ValueOp:
        """The current time (aware UTC datetime), recorded once."""
        return ValueOp("now")

    def random(self) -> ValueOp:
        """A float in [0, 1), recorded once."""
        return ValueOp("random")

    def uuid4(self) -> ValueOp:
        """A random UUID, recorded once."""
        return ValueOp("uuid4")

    def on_query(self, name: str, fn: Callable[..., Any]) -> None:
        """Answer queries ``name`` with ``fn(*args)``; it must not change workflow state."""
        run = self._run
        run.query_handlers = _with(run.query_handlers, name, fn)

    def on_signal(self, name: str, fn: Callable[..., Any]) -> None:
        """Apply ``fn(payload)`` for each signal ``name`` at an await point; the application is
        itself recorded, so replay applies it at the same point. A pending ``wait_signal`` of the
        same name takes precedence."""
        run = self._run
        run.signal_handlers = _with(run.signal_handlers, name, fn)

    def on_update(self, name: str, fn: Callable[..., Any], validator: Callable[..., Any] | None = None) -> None:
        """Apply ``fn(*args)`` for each update ``name`` at an await point and answer the caller
        with its return value (or its error). ``validator(*args)`` runs first, on the owner,
        before anything is recorded: raising (or returning False) rejects the update with
        ``UpdateRejected``. Both must be plain (not ``async``) functions; the validator must
        not change workflow state."""
        run = self._run
        run.update_handlers = _with(run.update_handlers, name, (fn, validator))


def _check_arguments(definition: WorkflowDefinition, args: tuple[Any, ...]) -> None:
    refused = definition.parameters.refusal(len(args))
    if refused is not None:
        raise refused


def _with(table: Mapping[str, Any], name: str, entry: Any) -> dict[str, Any]:
    """``table`` with ``name`` set to ``entry``: the run's own dict, made on its first entry
    (until then a run shares one empty, read-only table)."""
    if not isinstance(table, dict):
        table = {}
    table[name] = entry
    return table


def _ops_of(ops: Iterable[Op], what: str) -> tuple[Op, ...]:
    found = tuple(ops)
    for op in found:
        if not isinstance(op, Op):
            if hasattr(op, "close") and hasattr(op, "send"):
                op.close()  # an un-awaited coroutine: close it so Python does not warn
            raise InvalidRequest(f"ctx.{what} takes unawaited ctx operations, not {op!r}")
        if op.kind == "patch":
            raise InvalidRequest(f"ctx.patched cannot run inside ctx.{what}")
    return found
