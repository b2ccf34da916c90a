"""``Context``: what a workflow body sees as ``ctx``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from ..codec import encode_args
from ..errors import InvalidRequest
from ._api import RetryPolicy, activity_definition
from ._ops import ActivityOp, SignalOp, SleepOp, ValueOp

if TYPE_CHECKING:
    from ._driver import WorkflowRun

__all__ = ["Context"]


class _ReplaySilentLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    def __init__(self, run: WorkflowRun) -> None:
        super().__init__(logging.getLogger("weft_actors.workflow.user"), {})
        self._run = run

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging's name
        return not self._run.replaying and super().isEnabledFor(level)

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        return f"[{self._run.workflow_id}] {msg}", kwargs


class Context:
    """The workflow's handle on the engine. Built by the driver; there is no public constructor.

    Every operation returns an op to ``await`` (or, later, to pass to ``all``/``race``); the
    outcome is recorded before the workflow moves past it, and replayed from the record after
    a restart.
    """

    __slots__ = ("_run", "_logger")

    def __init__(self, run: WorkflowRun) -> None:
        self._run = run
        self._logger: _ReplaySilentLogger | None = None

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
        return ActivityOp(
            definition,
            encode_args(args, "activity argument"),
            retry or definition.retry,
            start_to_close if start_to_close is not None else definition.start_to_close,
            schedule_to_close if schedule_to_close is not None else definition.schedule_to_close,
        )

    def sleep(self, seconds: float) -> SleepOp:
        """A durable timer: survives restarts; fires at once on recovery if already due."""
        if seconds < 0:
            raise InvalidRequest("sleep needs seconds >= 0")
        return SleepOp(float(seconds))

    def wait_signal(self, name: str, timeout: float | None = None) -> SignalOp:
        """The payload of the oldest buffered signal ``name`` (FIFO); ``TimeoutError`` on timeout."""
        if timeout is not None and timeout < 0:
            raise InvalidRequest("timeout must be >= 0")
        return SignalOp(name, timeout)

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
        self._run.query_handlers[name] = fn

    def on_signal(self, name: str, fn: Callable[..., Any]) -> None:
        """Apply ``fn(payload)`` for each signal ``name`` at an await point; the application is
        itself recorded, so replay applies it at the same point. A pending ``wait_signal`` of the
        same name takes precedence."""
        self._run.signal_handlers[name] = fn
