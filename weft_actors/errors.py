"""Errors raised by weft_actors, one base class with stable string codes.

    WeftError                      code
    ├── WorkflowNotFound           workflow_not_found
    ├── WorkflowAlreadyExists      workflow_already_exists
    ├── WorkflowFailed             workflow_failed
    ├── WorkflowCancelled          workflow_cancelled
    ├── WorkflowTerminated         workflow_terminated
    ├── WorkflowTimedOut           workflow_timed_out
    ├── WorkflowClosed             workflow_closed        (signal/update to a finished workflow)
    ├── UnknownWorkflowType        unknown_workflow_type
    ├── UnknownActivity            unknown_activity
    ├── UnknownQuery               unknown_query
    ├── QueryFailed                query_failed           (the query handler raised)
    ├── UpdateRejected             update_rejected        (a validator refused the update)
    ├── UpdateFailed               update_failed          (the update handler raised)
    ├── NonDeterminismError        non_determinism
    ├── InvalidAwait               invalid_await          (a workflow awaited a non-ctx awaitable)
    ├── UserCodeExit               user_code_exit         (user code raised SystemExit/KeyboardInterrupt)
    ├── ActivityError              activity_failed        (raised inside the workflow)
    ├── ChildWorkflowError         child_workflow_failed  (raised inside the workflow)
    ├── PayloadTooLarge            payload_too_large
    ├── SerializationError         serialization_error
    ├── InvalidRequest             invalid_request
    ├── ServerUnavailable          server_unavailable
    │   └── OutcomeUnknown         outcome_unknown        (a write's shard was lost mid-request)
    ├── OwnershipModeMismatch      ownership_mode_mismatch
    ├── SchemaVersionError         schema_version
    ├── StorageFull                storage_full
    ├── StorageError               storage_error
    ├── FencedOut                  fenced_out             (a write lost its claim)
    ├── EngineDeposed              engine_deposed         (the engine's own record is dead)
    ├── EngineStopped              engine_stopped         (pending calls when an engine stops)
    ├── WorkflowMoved              workflow_moved         (a wait whose engine stopped: ask the new owner)
    ├── LimitExceeded              limit_exceeded
    ├── Overloaded                 overloaded             (refused at once: too much in flight; retry later)
    └── PermissionDenied           permission_denied      (a read-only or revoked client key)

Every class carries its context as attributes and builds ``str()`` from them.
``to_wire``/``from_wire`` convert through one code -> class registry so that a
client raises the same class an embedded engine raises.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "WeftError",
    "WorkflowNotFound",
    "WorkflowAlreadyExists",
    "WorkflowFailed",
    "WorkflowCancelled",
    "WorkflowTerminated",
    "WorkflowTimedOut",
    "WorkflowClosed",
    "UnknownWorkflowType",
    "UnknownActivity",
    "UnknownQuery",
    "QueryFailed",
    "UpdateRejected",
    "UpdateFailed",
    "NonDeterminismError",
    "InvalidAwait",
    "UserCodeExit",
    "ActivityError",
    "ChildWorkflowError",
    "PayloadTooLarge",
    "SerializationError",
    "InvalidRequest",
    "ServerUnavailable",
    "OutcomeUnknown",
    "OwnershipModeMismatch",
    "SchemaVersionError",
    "StorageFull",
    "StorageError",
    "FencedOut",
    "EngineDeposed",
    "EngineStopped",
    "WorkflowMoved",
    "LimitExceeded",
    "Overloaded",
    "PermissionDenied",
    "error_class",
    "to_wire",
    "from_wire",
]

_REGISTRY: dict[str, type[WeftError]] = {}


class WeftError(Exception):
    """Base of every weft_actors error; ``code`` is stable across versions."""

    code: ClassVar[str] = "weft_error"

    def __init__(self, message: str = "", **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        for key, value in context.items():
            setattr(self, key, value)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.code in _REGISTRY:
            raise TypeError(f"duplicate error code {cls.code!r}")
        _REGISTRY[cls.code] = cls

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.code, self.message, self.context))


def _rebuild(code: str, message: str, context: dict[str, Any]) -> WeftError:
    return error_class(code)(message, **context)


_REGISTRY[WeftError.code] = WeftError


class WorkflowNotFound(WeftError):
    code = "workflow_not_found"


class WorkflowAlreadyExists(WeftError):
    code = "workflow_already_exists"


class WorkflowFailed(WeftError):
    """The workflow raised; ``type``, ``message`` and ``traceback`` describe the remote error."""

    code = "workflow_failed"


class WorkflowCancelled(WeftError):
    code = "workflow_cancelled"


class WorkflowTerminated(WeftError):
    code = "workflow_terminated"


class WorkflowTimedOut(WeftError):
    code = "workflow_timed_out"


class WorkflowClosed(WeftError):
    """A message was sent to a workflow that has already finished."""

    code = "workflow_closed"


class UnknownWorkflowType(WeftError):
    code = "unknown_workflow_type"


class UnknownActivity(WeftError):
    code = "unknown_activity"


class UnknownQuery(WeftError):
    code = "unknown_query"


class QueryFailed(WeftError):
    """The query handler raised (a bug in it, or arguments it does not take); ``type``,
    ``cause_message`` and ``traceback`` describe it. Nothing changed: the workflow carries on."""

    code = "query_failed"


class UpdateRejected(WeftError):
    """The update was refused before anything was recorded: its validator raised (or returned
    False), or the workflow has no handler of that name."""

    code = "update_rejected"


class UpdateFailed(WeftError):
    """The update handler raised; ``type``, ``cause_message`` and ``traceback`` describe it.
    The workflow carries on."""

    code = "update_failed"


class NonDeterminismError(WeftError):
    """Replayed code issued an operation that differs from the recorded one."""

    code = "non_determinism"


class InvalidAwait(WeftError):
    """A workflow awaited something that is not a ctx operation (e.g. ``asyncio.sleep``)."""

    code = "invalid_await"


class UserCodeExit(WeftError):
    """Workflow, handler or activity code raised ``SystemExit`` or ``KeyboardInterrupt``
    (``raised`` names which, ``where`` what ran it). User code never stops the process that
    hosts it: this fails that workflow (or that activity attempt, or that update) instead."""

    code = "user_code_exit"


class ActivityError(WeftError):
    """An activity failed for good; ``type``, ``message`` and ``traceback`` are the original's."""

    code = "activity_failed"


class ChildWorkflowError(WeftError):
    """Raised in a parent workflow when its child did not complete; ``workflow_id`` is the
    child's, ``status`` its ending, ``type``/``cause_message`` its error if it failed."""

    code = "child_workflow_failed"


class PayloadTooLarge(WeftError):
    code = "payload_too_large"


class SerializationError(WeftError):
    """A value could not be encoded; ``type_name`` and ``where`` say which and from where."""

    code = "serialization_error"


class InvalidRequest(WeftError):
    code = "invalid_request"


class ServerUnavailable(WeftError):
    code = "server_unavailable"


class OutcomeUnknown(ServerUnavailable):
    """The shard serving this write (``op``) stopped answering or died before it replied: the
    write may or may not have been applied, and it was not sent again, because applying it
    twice would be wrong. Find out (``describe``) or retry it idempotently (a fixed ``id`` with
    ``if_exists="return"``, the same update ``request_id``)."""

    code = "outcome_unknown"


class OwnershipModeMismatch(WeftError):
    code = "ownership_mode_mismatch"


class SchemaVersionError(WeftError):
    code = "schema_version"


class StorageFull(WeftError):
    code = "storage_full"


class StorageError(WeftError):
    code = "storage_error"


class FencedOut(WeftError):
    """A write for a workflow was rejected because this engine no longer holds its claim."""

    code = "fenced_out"


class EngineDeposed(WeftError):
    code = "engine_deposed"


class EngineStopped(WeftError):
    code = "engine_stopped"


class WorkflowMoved(WeftError):
    """A ``result`` or an ``execute`` (its start committed) was waiting on an engine that
    stopped or handed its workflows off: nothing is lost, the wait goes on elsewhere. Its
    context names what to ask the new owner: ``wid``, the ``wait`` left in seconds and, for
    an ``execute``, the ``run_id`` it started. The front door resends it as a ``result`` to
    another shard; a client that sees it may do the same (a read: never a write again)."""

    code = "workflow_moved"


class LimitExceeded(WeftError):
    code = "limit_exceeded"


class Overloaded(WeftError):
    """Refused at once, with nothing written, because the service has as much in flight as
    it may take (``limit`` names the bound, ``value`` its size): the workflows a shard runs,
    the requests a shard or the front door holds. Retry later, with backoff and jitter: a
    retry of a start refused this way cannot start it twice."""

    code = "overloaded"


class PermissionDenied(WeftError):
    """The client's CURVE key may not make this call: it is in the read-only key set and the
    call changes something, or it was removed from the authorised keys since it connected."""

    code = "permission_denied"


class RollInProgress(WeftError):
    """A rolling restart or a resize of the supervisor's shards is running already: one at a
    time, so the request is refused (not queued); ask again once ``shards list`` shows it ended."""

    code = "roll_in_progress"


class RollFailed(WeftError):
    """A rolling restart stopped before it replaced every shard (``message`` says why: the new
    code does not replay a running workflow, or a shard did not come back); the shards not
    replaced yet keep serving on the code they run."""

    code = "roll_failed"


def error_class(code: str) -> type[WeftError]:
    """The class registered for ``code``; unknown codes map to ``WeftError``."""
    return _REGISTRY.get(code, WeftError)


def to_wire(error: WeftError) -> dict[str, Any]:
    """A msgpack-friendly description of ``error``."""
    return {"code": error.code, "message": error.message, "context": dict(error.context)}


def from_wire(data: dict[str, Any]) -> WeftError:
    """Rebuild the error that ``to_wire`` described."""
    cls = error_class(str(data.get("code", "")))
    context = data.get("context") or {}
    return cls(str(data.get("message", "")), **context)
