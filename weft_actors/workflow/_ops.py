"""The awaitable operations a workflow issues through ``ctx``.

Awaiting an op yields it to the driver, which answers with the recorded or live outcome.
An op does nothing by itself: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from typing import Any, Generator

from ._api import ActivityDefinition, RetryPolicy

__all__ = ["Op", "ActivityOp", "SleepOp", "SignalOp", "ValueOp", "HANDLER"]

HANDLER = "handler"
"""Kind of the op recorded when a signal handler was applied at an await point."""


class Op:
    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name

    def __await__(self) -> Generator[Op, Any, Any]:
        return (yield self)

    def __repr__(self) -> str:
        return f"<{self.kind} op {self.name!r}>"


class ActivityOp(Op):
    __slots__ = ("definition", "args", "retry", "start_to_close", "schedule_to_close")

    def __init__(
        self,
        definition: ActivityDefinition,
        args: bytes,
        retry: RetryPolicy,
        start_to_close: float | None,
        schedule_to_close: float | None,
    ) -> None:
        super().__init__("activity", definition.name)
        self.definition = definition
        self.args = args
        self.retry = retry
        self.start_to_close = start_to_close
        self.schedule_to_close = schedule_to_close


class SleepOp(Op):
    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        super().__init__("sleep", "")
        self.seconds = seconds


class SignalOp(Op):
    """``wait_signal(name, timeout)``: consumes the oldest buffered signal of that name."""

    __slots__ = ("timeout",)

    def __init__(self, name: str, timeout: float | None) -> None:
        super().__init__("signal", name)
        self.timeout = timeout


class ValueOp(Op):
    """``now``, ``random`` and ``uuid4``: a value the engine draws once and records."""

    __slots__ = ()

    def __init__(self, kind: str) -> None:
        super().__init__(kind, "")
