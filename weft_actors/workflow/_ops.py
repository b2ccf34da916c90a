"""The awaitable operations a workflow issues through ``ctx``.

Awaiting an op yields it to the driver, which answers with the recorded or live outcome.
An op does nothing by itself: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from typing import Any, Callable, Final, Generator

from ._api import ActivityDefinition, RetryPolicy

__all__ = [
    "CHILD_DONE_SIGNAL",
    "CloseChildOp",
    "Op",
    "ActivityOp",
    "SleepOp",
    "SignalOp",
    "ValueOp",
    "ConditionOp",
    "ChildOp",
    "PatchOp",
    "Combinator",
    "ContinueAsNew",
    "HANDLER",
    "UPDATE",
    "PARENT_CLOSE",
]

HANDLER = "handler"
"""Kind of the op recorded when a signal handler was applied at an await point."""
UPDATE = "update"
"""Kind of the op recorded when an update handler was applied at an await point."""
PARENT_CLOSE = ("terminate", "cancel", "abandon")
"""What happens to a running child when its parent closes."""


class Op:
    """Awaiting an op yields it to the driver once; what the driver sends back is the result.

    The op is its own awaitable iterator: a generator-based ``__await__`` would keep a suspended
    generator (about 180 bytes) alive for every parked workflow. The coroutine resumes it with
    ``__next__`` when the result is None and with ``send`` otherwise; an error thrown into the
    coroutine is raised at the ``await`` (there is no ``throw`` to forward it to).
    """

    __slots__ = ("kind", "name", "_yielded")

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name

    def __await__(self) -> Generator[Op, Any, Any]:
        self._yielded = False
        return self  # type: ignore[return-value]

    def __next__(self) -> Op:
        if self._yielded:
            raise StopIteration  # resumed with None: that is the result
        self._yielded = True
        return self

    def send(self, value: Any) -> Op:
        raise StopIteration(value)

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


class ConditionOp(Op):
    """``wait_condition(predicate, timeout)``: the driver re-checks ``predicate`` where the
    workflow's state can change (at issue and after each handler); the engine records the
    moment it held, so replay resumes at the same point."""

    __slots__ = ("predicate", "timeout")

    def __init__(self, predicate: Callable[[], Any], timeout: float | None) -> None:
        super().__init__("condition", "")
        self.predicate = predicate
        self.timeout = timeout


CHILD_DONE_SIGNAL: Final = "weft.child-done"
"""The signal handler name ``on_child_done`` registers: its payload is ``(child id, status)``."""


class ChildOp(Op):
    """``child(workflow, *args)``: start a child workflow and wait for its ending. ``name`` is
    the child's workflow type; ``id`` its workflow id (derived from the parent's when None).
    Of kind ``start_child`` (``start_child``): resolved once the child is started, with its
    run id; its ending goes to the ``on_child_done`` handler, if any."""

    __slots__ = ("args", "id", "parent_close")

    def __init__(self, wf_type: str, args: bytes, id: str | None, parent_close: str, kind: str = "child") -> None:
        super().__init__(kind, wf_type)
        self.args = args
        self.id = id
        self.parent_close = parent_close


class CloseChildOp(Op):
    """``cancel_child``/``terminate_child``: ``name`` is the workflow's id; done in the commit
    of this step (a cancel request, or a terminate), resolved at once with None."""

    __slots__ = ("how", "reason")

    def __init__(self, workflow_id: str, how: str, reason: str) -> None:
        super().__init__("close_child", workflow_id)
        self.how = how
        self.reason = reason


class PatchOp(Op):
    """``patched(change_id)``: True for runs that reach this point live (a marker is recorded),
    False for runs that passed it before the change (nothing is recorded or consumed)."""

    __slots__ = ()

    def __init__(self, change_id: str) -> None:
        super().__init__("patch", change_id)


class Combinator(Op):
    """``all``/``race`` over unawaited ops (combinators may nest). It has no seq of its own:
    each leaf op gets one, in list order, when the combinator is awaited, and the driver
    resolves the combinator from its leaves' outcomes in delivery order."""

    __slots__ = ("ops",)

    def __init__(self, kind: str, ops: tuple[Op, ...]) -> None:
        super().__init__(kind, "")
        self.ops = ops

    def __repr__(self) -> str:
        return f"<{self.kind} of {len(self.ops)} ops>"


class ContinueAsNew(BaseException):
    """Returned or raised by a workflow (build it with ``ctx.continue_as_new(*args)``): the run
    ends with status ``continued`` and a fresh run of the same workflow id starts with ``args``.

    A ``BaseException``, so that ``except Exception`` in workflow code does not swallow it.
    """

    def __init__(self, args: bytes) -> None:
        super().__init__("continue as new")
        self.payload = args
