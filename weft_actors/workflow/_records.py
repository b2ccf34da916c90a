"""What the driver hands the engine (``Command``) and how failures become records and back."""

from __future__ import annotations

import asyncio
import traceback
from typing import Any, Final, NamedTuple

from ..errors import ActivityError, ChildWorkflowError, UserCodeExit, WeftError, error_class
from ._ops import Op

__all__ = ["Command", "error_record", "error_from_record", "cancelled_record", "contained", "op_label", "CANCEL_REQUESTED"]

CANCEL_REQUESTED: Final = "workflow cancelled"
"""Message of the cancelled outcome recorded for the ops a workflow awaits when it is cancelled."""


class Command(NamedTuple):
    """What the engine must do next for a run.

    ``kind`` is
    ``"op"`` (execute ``op`` at ``seq``; ``record`` is its started state, if any),
    ``"cancel"`` (stop executing ``op`` at ``seq``: it lost a race, a sibling failed, or the
    workflow no longer awaits it; record its cancelled outcome; ``record`` as for ``"op"``),
    ``"resolve"`` (record ``seq``'s outcome now: ``payload``, or ``error``; a satisfied condition),
    ``"complete"`` (``payload`` is the encoded result), ``"fail"`` (``error``),
    ``"continue"`` (``payload`` is the encoded arguments of the next run), or ``"stuck"``
    (non-determinism: ``error`` says where; the run stays running until fixed code replays it).
    """

    kind: str
    seq: int = -1
    op: Op | None = None
    record: dict[str, Any] | None = None
    payload: bytes | None = None
    error: dict[str, Any] | None = None


def error_record(exc: BaseException, kind: str = "exception") -> dict[str, Any]:
    """A serialisable description of ``exc``: type name, message, traceback text."""
    exc_type = type(exc)
    name = exc_type.__qualname__
    if exc_type.__module__ not in ("builtins", "asyncio.exceptions"):
        name = f"{exc_type.__module__}.{name}"
    record = {
        "kind": kind,
        "type": name,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
    }
    if isinstance(exc, WeftError):
        record["code"] = exc.code
    return record


def contained(exc: BaseException, where: str) -> BaseException:
    """What user code's ``exc`` becomes inside the engine: ``SystemExit`` and
    ``KeyboardInterrupt`` (which would stop the process hosting every other workflow) become a
    ``UserCodeExit`` naming them; anything else stays itself, and fails only what raised it."""
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        error = UserCodeExit(
            f"{where} raised {type(exc).__name__}({exc!s}); user code cannot stop the process that hosts it",
            raised=type(exc).__name__,
            where=where,
        )
        error.__cause__ = exc
        return error
    return exc


def cancelled_record(message: str) -> dict[str, Any]:
    return {"kind": "cancelled", "type": "CancelledError", "message": message}


def error_from_record(record: dict[str, Any]) -> BaseException:
    """The exception a workflow sees for a recorded failure."""
    kind = record.get("kind")
    if kind == "timeout":
        return TimeoutError(record.get("message", "timed out"))
    if kind == "cancelled":
        return asyncio.CancelledError(record.get("message", ""))
    if kind == "activity":
        return ActivityError(
            f"activity {record.get('activity')!r} failed: {record['type']}: {record['message']}",
            activity=record.get("activity"),
            type=record["type"],
            cause_message=record["message"],
            traceback=record.get("traceback", ""),
            attempts=record.get("attempts"),
        )
    if kind == "child":
        return ChildWorkflowError(
            record.get("message", "child workflow failed"),
            workflow_id=record.get("child_id"),
            status=record.get("status"),
            type=record.get("type"),
            cause_message=record.get("cause_message"),
            traceback=record.get("traceback", ""),
        )
    if "code" in record:
        return error_class(record["code"])(record["message"])
    return WeftError(f"{record.get('type')}: {record.get('message')}")


def op_label(kind: Any, name: Any) -> str:
    """How a divergence message names an op: ``activity 'charge'``, or ``sleep`` alone for
    the kinds without a name."""
    return f"{kind} {name!r}" if name else f"{kind}"
