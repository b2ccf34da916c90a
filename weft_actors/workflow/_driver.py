"""The deterministic driver: (op log, outcomes) -> commands. No I/O, no asyncio.

A run's coroutine is driven with ``send``/``throw``; each ctx op it awaits becomes a command
for the engine. Every op has a sequence number in issue order; every outcome and every
handler application has a delivery ordinal ``t``. Replay delivers recorded events in ``t``
order, so a restarted run sees exactly what the first one saw; the first op without a
recorded outcome is handed to the engine to execute for real.
"""

from __future__ import annotations

import asyncio
import traceback
from collections import deque
from typing import Any, NamedTuple

from ..codec import decode, encode, pack_record
from ..errors import (
    ActivityError,
    InvalidAwait,
    NonDeterminismError,
    SerializationError,
    UnknownQuery,
    WeftError,
    error_class,
)
from ._api import WorkflowDefinition
from ._context import Context
from ._ops import HANDLER, Op

__all__ = ["Command", "WorkflowRun", "error_record", "error_from_record"]


_CLOSE_TRIES = 100  # close() re-throws GeneratorExit at most this often (awaits in finally blocks)
_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)


class Command(NamedTuple):
    """What the engine must do next for a run.

    ``kind`` is ``"op"`` (execute ``op`` at ``seq``; ``record`` is its started state, if any),
    ``"complete"`` (``payload`` is the encoded result), ``"fail"`` (``error``), or ``"stuck"``
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
    if "code" in record:
        return error_class(record["code"])(record["message"])
    return WeftError(f"{record.get('type')}: {record.get('message')}")


class WorkflowRun:
    """One run of a workflow, replayed from ``history`` (seq -> op record) and then live."""

    def __init__(
        self,
        definition: WorkflowDefinition,
        workflow_id: str,
        run_id: str,
        args: tuple[Any, ...],
        history: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.workflow_type = definition.name
        self.history: dict[int, dict[str, Any]] = history or {}
        self.query_handlers: dict[str, Any] = {}
        self.signal_handlers: dict[str, Any] = {}
        recorded = sorted((rec["t"], seq) for seq, rec in self.history.items() if "t" in rec)
        self._events: deque[tuple[int, int]] = deque(recorded)
        self._live_t = (recorded[-1][0] + 1) if recorded else 1
        self._next_t = self._live_t
        self.replaying = bool(recorded)
        self.next_seq = 0
        self.waiting: Op | None = None
        self.waiting_seq = -1
        self._emitted_seq = -1
        self.outcome: Command | None = None
        self.ctx = Context(self)
        self._definition = definition
        self._args = args
        self._coro: Any = None

    # -- engine-facing --------------------------------------------------------------------

    def start(self) -> list[Command]:
        """Run the body to its first blocking op, replaying whatever is recorded."""
        try:
            self._coro = self._definition.fn(self.ctx, *self._args)
        except Exception as exc:  # e.g. arguments that do not fit the signature
            self._fail(exc)
            return [self.outcome]  # type: ignore[list-item]
        self._advance(None, None)
        return self._pump()

    def deliver(self) -> list[Command]:
        """Deliver outcomes recorded (and committed) since the last call, in ``t`` order."""
        return self._pump()

    def record_outcome(self, seq: int, ok: bytes | None = None, err: dict[str, Any] | None = None, **extra: Any) -> bytes:
        """The packed op record for ``seq``'s outcome; delivered by the next ``deliver()``."""
        op = self.waiting if seq == self.waiting_seq else None
        record = self.history.get(seq)
        record = dict(record) if record else {}
        if op is not None:
            record["kind"] = op.kind
            record["name"] = op.name
        record["t"] = self._next_t
        if err is None:
            record["ok"] = ok
        else:
            record["err"] = err
        record.update(extra)
        self._next_t += 1
        self.history[seq] = record
        self._events.append((record["t"], seq))
        return pack_record(record)

    def record_started(self, seq: int, **fields: Any) -> bytes:
        """The packed record of an op that has started but not finished (timer, retry)."""
        op = self.waiting
        record = {"kind": op.kind, "name": op.name} if op is not None and seq == self.waiting_seq else {}
        record.update(self.history.get(seq) or {})
        record.update(fields)
        self.history[seq] = record
        return pack_record(record)

    def record_handler(self, name: str, payload: bytes, inbox_seq: int) -> tuple[int, bytes]:
        """Record that signal handler ``name`` applies now, at the current await point."""
        seq = self.next_seq
        self.next_seq += 1
        record = {"kind": HANDLER, "name": name, "t": self._next_t, "ok": payload, "inbox": inbox_seq}
        self._next_t += 1
        self.history[seq] = record
        self._events.append((record["t"], seq))
        return seq, pack_record(record)

    def waiting_signal(self) -> str | None:
        """The name of the signal the run is blocked on, if any."""
        op = self.waiting
        if op is not None and op.kind == "signal" and "t" not in self.history.get(self.waiting_seq, ()):
            return op.name
        return None

    def query(self, name: str, args: tuple[Any, ...]) -> Any:
        handler = self.query_handlers.get(name)
        if handler is None:
            raise UnknownQuery(
                f"workflow {self.workflow_id!r} has no query handler {name!r}",
                workflow_id=self.workflow_id,
                query=name,
            )
        return handler(*args)

    def close(self) -> None:
        """Abandon the coroutine, running its ``finally`` blocks; never raises. An await in a
        ``finally`` (say a compensating ``ctx.run``) makes ``coro.close()`` raise RuntimeError and
        leaves the coroutine suspended at that await, so close again until it has finished."""
        coro = self._coro
        if coro is None:
            return
        for _ in range(_CLOSE_TRIES):
            try:
                coro.close()
                return
            except Exception:  # the run is being abandoned: nothing to report the error to
                continue

    # -- internals ------------------------------------------------------------------------

    def _pump(self) -> list[Command]:
        events, history = self._events, self.history
        while events and self.outcome is None:
            t, seq = events.popleft()
            self.replaying = t < self._live_t
            record = history[seq]
            if record["kind"] == HANDLER:
                if self.replaying:
                    if seq != self.next_seq:
                        self._stuck(f"recorded signal handler at #{seq} but the code is at #{self.next_seq}")
                        break
                    self.next_seq += 1
                self._apply_handler(record)
                continue
            if seq != self.waiting_seq:
                self._stuck(f"op #{seq} ({record['kind']} {record['name']!r}) is recorded but the code is not awaiting it")
                break
            err = record.get("err")
            if err is None:
                try:
                    value = decode(record["ok"], "recorded outcome") if record["ok"] is not None else None
                except SerializationError as exc:
                    self._advance(None, exc)
                    continue
                self._advance(value, None)
            else:
                self._advance(None, error_from_record(err))
        self.replaying = False
        if self.outcome is not None:
            return [self.outcome]
        if self.waiting is not None and self.waiting_seq != self._emitted_seq:
            self._emitted_seq = self.waiting_seq
            return [_new_tuple(Command, ("op", self.waiting_seq, self.waiting, self.history.get(self.waiting_seq), None, None))]
        return []

    def _advance(self, value: Any, error: BaseException | None) -> None:
        """Run the coroutine until it blocks on an op or ends."""
        coro = self._coro
        self.waiting = None
        while True:
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as stop:
                self._complete(stop.value)
                return
            except (Exception, asyncio.CancelledError) as exc:
                self._fail(exc)
                return
            if isinstance(yielded, Op):
                self._issue(yielded)
                return
            value, error = None, InvalidAwait(
                f"workflow {self.workflow_type!r} awaited {yielded!r}; only ctx operations may "
                "be awaited in a workflow (use ctx.sleep, ctx.run, ...)",
                workflow_id=self.workflow_id,
                awaited=repr(yielded),
            )

    def _issue(self, op: Op) -> None:
        seq = self.next_seq
        self.next_seq += 1
        record = self.history.get(seq)
        if record is not None and (record.get("kind") != op.kind or record.get("name") != op.name):
            self._stuck(
                f"replay issued {op.kind} {op.name!r} at #{seq} but the history has "
                f"{record.get('kind')} {record.get('name')!r}"
            )
            return
        self.waiting = op
        self.waiting_seq = seq

    def _apply_handler(self, record: dict[str, Any]) -> None:
        handler = self.signal_handlers.get(record["name"])
        if handler is None:
            self._stuck(f"signal handler {record['name']!r} is recorded but not registered")
            return
        try:
            payload = decode(record["ok"], "signal payload") if record["ok"] is not None else None
            handler(payload)
        except Exception as exc:
            self.close()
            self._fail(exc)

    def _complete(self, value: Any) -> None:
        if self._events:
            self._stuck("the workflow returned but its history has more recorded events")
            return
        try:
            payload = encode(value, "workflow result")
        except SerializationError as exc:
            self._fail(exc)
            return
        self.outcome = Command("complete", payload=payload)

    def _fail(self, exc: BaseException) -> None:
        if self._events and self._events[0][0] < self._live_t:
            # The history went further than this code does: changed code, not a real failure.
            self._stuck(f"the workflow raised {type(exc).__name__}: {exc} but its history has more recorded events")
            return
        kind = "cancelled" if isinstance(exc, asyncio.CancelledError) else "exception"
        self.outcome = Command("fail", error=error_record(exc, kind))

    def _stuck(self, message: str) -> None:
        self.close()
        error = NonDeterminismError(
            f"workflow {self.workflow_id!r} ({self.workflow_type}): {message}",
            workflow_id=self.workflow_id,
        )
        self.outcome = Command("stuck", error=error_record(error, "non_determinism"))
