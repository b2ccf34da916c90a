"""Authoring API: ``@workflow``, ``@activity``, ``RetryPolicy`` and ``activity.info()``."""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import math
import sys
import typing
from typing import Any, Callable, NamedTuple, TypeVar, overload

from .._checks import MAX_SECONDS, check_seconds
from ..codec import register_type
from ..errors import InvalidRequest
from ._limits import check_limits
from ._parameters import Parameters, parameters_of

__all__ = [
    "RetryPolicy",
    "WorkflowDefinition",
    "ActivityDefinition",
    "ActivityInfo",
    "workflow",
    "activity",
    "workflow_definition",
    "activity_definition",
    "collect_workflows",
    "current_activity",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed activity is retried: attempt ``n`` waits
    ``min(initial_interval * backoff ** (n - 1), max_interval)`` seconds before attempt ``n + 1``."""

    max_attempts: int = 3
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 100.0
    non_retryable: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not (0 <= self.initial_interval <= MAX_SECONDS and 0 <= self.max_interval <= MAX_SECONDS and 1 <= self.backoff < math.inf):
            raise ValueError(f"intervals must be between 0 and {MAX_SECONDS:.0f} seconds and backoff finite and >= 1")
        object.__setattr__(self, "non_retryable", tuple(self.non_retryable))

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        try:
            return min(self.initial_interval * self.backoff ** (attempt - 1), self.max_interval)
        except OverflowError:  # a huge attempt count: the cap
            return self.max_interval

    def retryable(self, error: BaseException) -> bool:
        return not isinstance(error, self.non_retryable)


DEFAULT_RETRY = RetryPolicy()


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """A ``@workflow``: its type name, its function, and the arguments a start may pass it
    (read from the signature once, here, so that checking a start costs two comparisons)."""

    name: str
    fn: Callable[..., Any]
    parameters: Parameters = dataclasses.field(default=None, compare=False, repr=False)  # type: ignore[assignment]
    concurrency: int | None = None
    """At most this many running at once across every engine of the store (per key, with
    ``concurrency_key``); further starts wait in a durable queue."""
    concurrency_key: Callable[..., Any] | None = dataclasses.field(default=None, compare=False)
    """Called with a start's arguments; its ``str`` result names the group ``concurrency``
    counts in."""

    def __post_init__(self) -> None:
        if self.parameters is None:
            object.__setattr__(self, "parameters", parameters_of(self.name, self.fn))


@dataclasses.dataclass(frozen=True, slots=True)
class ActivityDefinition:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    retry: RetryPolicy
    start_to_close: float | None
    schedule_to_close: float | None
    rate_interval: float | None = None
    """Seconds between two permits of the cluster-wide rate limit (``rate_limit="50/s"``: 0.02)."""
    burst: int = 1
    """Permits of the rate limit that may be taken at once after a quiet spell."""
    concurrency: int | None = None
    """Attempts running at once at most, across every engine sharing the store."""

    limited: bool = dataclasses.field(default=False, init=False, compare=False)
    """Whether an attempt must hold a permit (``shard/_permits``) before it starts: a field,
    not a property, as every attempt reads it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "limited", self.rate_interval is not None or self.concurrency is not None)


class ActivityInfo(NamedTuple):
    """What an activity knows about its call. ``key`` is stable across retries and takeovers:
    use it to make external effects idempotent."""

    key: str
    workflow_id: str
    run_id: str
    seq: int
    attempt: int
    activity: str


current_activity: contextvars.ContextVar[ActivityInfo] = contextvars.ContextVar("weft_activity")


def workflow_definition(obj: Any) -> WorkflowDefinition | None:
    return getattr(obj, "__weft_workflow__", None)


def activity_definition(obj: Any) -> ActivityDefinition | None:
    return getattr(obj, "__weft_activity__", None)


@overload
def workflow(fn: F) -> F: ...
@overload
def workflow(
    *, name: str | None = None, concurrency: int | None = None, concurrency_key: Callable[..., Any] | None = None
) -> Callable[[F], F]: ...


def workflow(
    fn: Any = None, *, name: str | None = None, concurrency: int | None = None, concurrency_key: Callable[..., Any] | None = None
) -> Any:
    """Mark ``async def f(ctx, *args)`` as a workflow, named ``f.__name__`` unless ``name`` is given.

    ``concurrency``: at most that many of this type run at once, across every engine that
    shares the store; a start past it is accepted and waits, ``pending``, in a durable FIFO
    queue (``priority`` first) until a running one ends. With ``concurrency_key`` (called
    with the start's arguments, returning a ``str``) the limit holds per key instead."""
    if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
        raise ValueError(f"concurrency must be an int >= 1, not {concurrency!r}")
    if concurrency_key is not None and (concurrency is None or not callable(concurrency_key)):
        raise ValueError("concurrency_key needs concurrency, and must be callable")

    def mark(fn: F) -> F:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@workflow needs an async def function, got {fn!r}")
        fn.__weft_workflow__ = WorkflowDefinition(name or fn.__name__, fn, concurrency=concurrency, concurrency_key=concurrency_key)  # type: ignore[attr-defined]
        return fn

    return mark(fn) if fn is not None else mark


class _ActivityDecorator:
    """``@activity`` / ``@activity(retry=..., start_to_close=..., schedule_to_close=...,
    rate_limit="50/s", burst=..., concurrency=...)``; ``activity.info()`` inside a running
    activity.

    ``rate_limit`` (``"N/s"``, ``"N/m"``, ``"N/h"``; ``burst`` permits at once, default 1) and
    ``concurrency`` (attempts running at once) hold for the activity's name across every
    engine sharing the store: an attempt waits for a permit, never fails for want of one, and
    its ``start_to_close`` counts from when it starts. Checked here (``TypeError``,
    ``ValueError``)."""

    @overload
    def __call__(self, fn: F) -> F: ...
    @overload
    def __call__(
        self,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        start_to_close: float | None = None,
        schedule_to_close: float | None = None,
        rate_limit: str | None = None,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> Callable[[F], F]: ...

    def __call__(
        self,
        fn: Any = None,
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        start_to_close: float | None = None,
        schedule_to_close: float | None = None,
        rate_limit: str | None = None,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> Any:
        rate_interval, burst_permits, most = check_limits(rate_limit, burst, concurrency)

        def mark(fn: F) -> F:
            if not callable(fn):
                raise TypeError(f"@activity needs a function, got {fn!r}")
            for what, value in (("start_to_close", start_to_close), ("schedule_to_close", schedule_to_close)):
                if value is not None:
                    check_seconds(value, what)
            fn.__weft_activity__ = ActivityDefinition(  # type: ignore[attr-defined]
                name or fn.__name__,
                fn,
                inspect.iscoroutinefunction(fn),
                retry or DEFAULT_RETRY,
                start_to_close,
                schedule_to_close,
                rate_interval,
                burst_permits,
                most,
            )
            return fn

        return mark(fn) if fn is not None else mark

    @staticmethod
    def info() -> ActivityInfo:
        """The running activity's info; ``LookupError`` outside an activity."""
        try:
            return current_activity.get()
        except LookupError:
            raise LookupError("activity.info() called outside a running activity") from None


activity = _ActivityDecorator()


def collect_workflows(app: Any) -> dict[str, WorkflowDefinition]:
    """Workflows of ``app``: a module (every ``@workflow`` in it) or an iterable of workflows."""
    if app is None:
        return {}
    if inspect.ismodule(app):
        candidates = list(vars(app).values())
    elif callable(app) and workflow_definition(app) is not None:
        candidates = [app]
    else:
        candidates = list(app)
    found: dict[str, WorkflowDefinition] = {}
    for obj in candidates:
        definition = workflow_definition(obj)
        if definition is None:
            if not inspect.ismodule(app):
                raise InvalidRequest(f"{obj!r} is not a @workflow")
            continue
        previous = found.get(definition.name)
        if previous is not None and previous.fn is not definition.fn:
            raise InvalidRequest(f"two workflows are named {definition.name!r}")
        found[definition.name] = definition
    register_app_types(app, found.values())
    return found


def register_app_types(app: Any, definitions: Any) -> None:
    """Register with the codec the classes an app's payloads may carry, so that a process
    that only decodes them (a shard reading a client's arguments and signals, or replaying a
    history another shard wrote) can: every codec class in the app module, in each workflow's
    module and in the module of each activity those modules name (imported names included),
    and the classes named in those workflows' and activities' annotations. Anything else
    needs ``register_type``."""
    modules = [app] if inspect.ismodule(app) else []
    functions = [definition.fn for definition in definitions]
    for fn in functions:
        module = sys.modules.get(getattr(fn, "__module__", None) or "")
        if module is not None and module not in modules:
            modules.append(module)
    for module in list(modules):
        for value in list(vars(module).values()):
            if activity_definition(value) is not None and value not in functions:
                functions.append(value)
                owner = sys.modules.get(getattr(value, "__module__", None) or "")
                if owner is not None and owner not in modules:
                    modules.append(owner)
    for fn in functions:
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # an unresolvable forward reference: its module scan covers most
            hints = {}
        for hint in hints.values():
            _register_hint(hint)
    for module in modules:
        register_type(module)


def _register_hint(hint: Any, depth: int = 0) -> None:
    if depth > 8:
        return
    if isinstance(hint, type) and hint.__module__ != "builtins":
        try:
            register_type(hint)
        except TypeError:  # not a class the codec tags (str, datetime, a plain class)
            pass
    for arg in typing.get_args(hint):
        _register_hint(arg, depth + 1)
