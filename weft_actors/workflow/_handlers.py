"""Signal and update handlers, and queries: what runs at an await point, outside the body.

Mixed into ``WorkflowRun``. A signal handler's application is recorded first and applied when
delivered. An update is validated (nothing recorded if refused), then applied at once, live, so
its result can be committed with its record; replay re-applies it at its ``t`` for its effect on
state, and the recorded result stands. Handlers and validators must be plain functions.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Mapping

from ..codec import decode, decode_args, encode, pack_record
from ..errors import InvalidRequest, PayloadTooLarge, QueryFailed, UnknownQuery, UpdateRejected, WeftError
from ._ops import HANDLER, UPDATE
from ._records import Command, contained, error_record

__all__ = ["HandlersMixin"]


class HandlersMixin:
    if not TYPE_CHECKING:  # slots for the runtime; type checkers would flag every attribute
        __slots__ = ()  # the concrete class declares (a mixin's own __slots__ names none)

    workflow_id: str
    history: Mapping[int, dict[str, Any]]
    query_handlers: Mapping[str, Any]
    signal_handlers: Mapping[str, Any]
    update_handlers: Mapping[str, tuple[Any, Any]]
    next_seq: int
    outcome: Command | None
    _next_t: int
    _applied: set[int] | None

    def close(self) -> None:  # provided by WorkflowRun
        raise NotImplementedError

    def _keep_outcome(self, seq: int, record: dict[str, Any]) -> None:  # provided by WorkflowRun
        raise NotImplementedError

    def _fail(self, exc: BaseException) -> None:  # provided by WorkflowRun
        raise NotImplementedError

    def _stuck(self, message: str) -> None:  # provided by WorkflowRun
        raise NotImplementedError

    def record_handler(self, name: str, payload: bytes, inbox_seq: int, **extra: Any) -> tuple[int, bytes]:
        """Record that signal handler ``name`` applies now, at the current await point.
        ``extra`` fields (the engine's wall-clock stamp) ride on the record; replay ignores them."""
        seq = self.next_seq
        self.next_seq += 1
        t = self._next_t
        record = {"kind": HANDLER, "name": name, "t": t, "ok": payload, "inbox": inbox_seq, **extra}
        self._next_t = t + 1
        self._keep_outcome(seq, record)
        return seq, pack_record(record)

    def validate_update(self, name: str, args: tuple[Any, ...]) -> None:
        """``UpdateRejected`` unless update ``name`` has a handler and its validator accepts
        ``args``. Runs before anything is recorded: a rejected update leaves no trace here."""
        entry = self.update_handlers.get(name)
        if entry is None:
            raise UpdateRejected(
                f"workflow {self.workflow_id!r} has no update handler {name!r}", workflow_id=self.workflow_id, update=name
            )
        validator = entry[1]
        if validator is None:
            return
        try:
            verdict = validator(*args)
        except BaseException as exc:  # even SystemExit: it refuses this update, nothing more
            exc = contained(exc, f"validator of update {name!r}")
            raise UpdateRejected(
                f"update {name!r} rejected: {type(exc).__name__}: {exc}",
                workflow_id=self.workflow_id,
                update=name,
                type=type(exc).__name__,
                cause_message=str(exc),
            ) from exc
        if verdict is False:
            raise UpdateRejected(f"update {name!r} rejected by its validator", workflow_id=self.workflow_id, update=name)

    def record_update(
        self, name: str, args: tuple[Any, ...], payload: bytes, inbox_seq: int, request_id: str | None, limit: int, **extra: Any
    ) -> tuple[int, bytes, dict[str, Any]]:
        """Apply update handler ``name`` now, at the current await point, and record it with
        its result (failed with ``PayloadTooLarge`` if that is over ``limit`` bytes). Call only
        with every earlier outcome delivered (the engine's poll does): applying it here,
        before the commit, is then the same as applying it at delivery. ``extra`` fields (the
        engine's wall-clock stamp) ride on the record; replay ignores them."""
        seq = self.next_seq
        self.next_seq += 1
        record: dict[str, Any] = {"kind": UPDATE, "name": name, "t": self._next_t, "args": payload, "inbox": inbox_seq, "request_id": request_id, **extra}
        self._next_t += 1
        try:
            value = _call_plain(self.update_handlers[name][0], args, name)
            ok = encode(value, "update result")
            if len(ok) > limit:
                raise PayloadTooLarge(f"result of update {name!r} is {len(ok)} bytes; the limit is {limit}", size=len(ok), limit=limit)
            record["ok"] = ok
        except BaseException as exc:  # the caller gets it; the workflow carries on
            record["err"] = error_record(contained(exc, f"update handler {name!r}"), "update")
        self._keep_outcome(seq, record)
        if self._applied is None:
            self._applied = set()
        self._applied.add(seq)
        return seq, pack_record(record), record

    def query(self, name: str, args: tuple[Any, ...]) -> Any:
        handler = self.query_handlers.get(name)
        if handler is None:
            raise UnknownQuery(
                f"workflow {self.workflow_id!r} has no query handler {name!r}",
                workflow_id=self.workflow_id,
                query=name,
            )
        try:
            return handler(*args)
        except (SystemExit, KeyboardInterrupt) as exc:  # the caller's error, not the host's end
            raise contained(exc, f"query handler {name!r}") from exc
        except WeftError:
            raise
        except Exception as exc:  # the handler's failure, not the engine's: a stable code
            failure = error_record(exc)
            raise QueryFailed(
                f"query handler {name!r} of workflow {self.workflow_id!r} raised {failure['type']}: {exc}",
                workflow_id=self.workflow_id,
                query=name,
                type=failure["type"],
                cause_message=failure["message"],
                traceback=failure["traceback"],
            ) from exc

    def _apply_handler(self, record: dict[str, Any]) -> None:
        handler = self.signal_handlers.get(record["name"])
        if handler is None:
            self._stuck(f"signal handler {record['name']!r} is recorded but not registered")
            return
        try:
            payload = decode(record["ok"], "signal payload") if record["ok"] is not None else None
            handler(payload)
        except BaseException as exc:
            self.close()
            self._fail(contained(exc, f"signal handler {record['name']!r}"))

    def _replay_update(self, record: dict[str, Any]) -> None:
        """Re-apply a recorded update for its effect on workflow state; its recorded result
        (already answered to the caller) stands, whatever the handler returns now."""
        entry = self.update_handlers.get(record["name"])
        if entry is None:
            self._stuck(f"update handler {record['name']!r} is recorded but not registered")
            return
        try:
            _call_plain(entry[0], decode_args(record["args"], "update argument"), record["name"])
        except BaseException:  # the recorded error stands, as the recorded result does
            pass


def _call_plain(fn: Any, args: tuple[Any, ...], name: str) -> Any:
    value = fn(*args)
    if inspect.isawaitable(value):
        if hasattr(value, "close"):
            value.close()
        raise InvalidRequest(f"update handler {name!r} must be a plain function, not async")
    return value
