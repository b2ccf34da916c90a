"""The deterministic driver: (op log, outcomes) -> commands. No I/O, no asyncio.

A run's coroutine is driven with ``send``/``throw``; each ctx op it awaits becomes a command
for the engine. Every op has a sequence number in issue order; every outcome and every
handler application has a delivery ordinal ``t``. Replay delivers recorded events in ``t``
order, so a restarted run sees exactly what the first one saw; the first op without a
recorded outcome is handed to the engine to execute for real.

The common case (one op awaited at a time) keeps its own fast path: ``waiting``/``waiting_seq``
name the op and no container is touched. ``all``/``race`` and ``wait_condition`` go through
``CombinatorMixin``; signal and update handlers through ``HandlersMixin``; the records the engine
commits are built by ``RecordingMixin``. A workflow ends with
``complete``, ``fail`` (a re-raised ``CancelledError`` is a cancellation) or ``continue``
(``ctx.continue_as_new``). ``patched`` consumes a seq only where the run reaches it live.
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Any, Final, Mapping

from ..codec import decode, encode
from ..errors import InvalidAwait, NonDeterminismError, SerializationError
from ._api import WorkflowDefinition
from ._combinators import CombinatorMixin
from ._handlers import HandlersMixin
from ._recording import RecordingMixin
from ._context import Context
from ._ops import HANDLER, UPDATE, ContinueAsNew, Op
from ._records import Command, contained, error_from_record, error_record, op_label

__all__ = ["Command", "WorkflowRun", "error_record", "error_from_record"]


_CLOSE_TRIES: Final = 100  # close() re-throws GeneratorExit at most this often (awaits in finally blocks)
_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)
_HANDLER_KINDS: Final = frozenset((HANDLER, UPDATE))
_SPECIAL_KINDS: Final = frozenset(("all", "race", "patch"))
_NOTHING: Final[Mapping[Any, Any]] = MappingProxyType({})
"""The history and handler tables of a run that has none yet, shared (and read-only): a parked
run pays for no empty dict. The first record (``_keep``) or handler (``Context``) makes its own."""


def _under(path: str | None) -> str:
    return "" if path is None else f" under {path}"


class WorkflowRun(CombinatorMixin, HandlersMixin, RecordingMixin):
    """One run of a workflow, replayed from ``history`` (seq -> op record) and then live."""

    __slots__ = (
        "workflow_id",
        "run_id",
        "workflow_type",
        "history",
        "query_handlers",
        "signal_handlers",
        "update_handlers",
        "_events",
        "_next_event",
        "_live_t",
        "_next_t",
        "replaying",
        "next_seq",
        "waiting",
        "waiting_seq",
        "_emitted_seq",
        "outcome",
        "cancel_requested",
        "ctx",
        "definition",
        "_args",
        "_coro",
        "_slots",
        "_dead",
        "_paths",
        "_conditions",
        "_resolving",
        "_applied",
        "_out",
        "_settled_now",
        "_building",
    )

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
        self.history: Mapping[int, dict[str, Any]] = history or _NOTHING
        self.query_handlers: Mapping[str, Any] = _NOTHING
        self.signal_handlers: Mapping[str, Any] = _NOTHING
        self.update_handlers: Mapping[str, tuple[Any, Any]] = _NOTHING
        recorded = sorted((rec["t"], seq) for seq, rec in history.items() if "t" in rec) if history else []
        # Recorded, undelivered events are ``_events[_next_event:]``: a list while any is left,
        # else the shared empty tuple (a parked run keeps no empty container).
        self._events: list[tuple[int, int]] | tuple[()] = recorded or ()
        self._next_event = 0
        self._live_t = (recorded[-1][0] + 1) if recorded else 1
        self._next_t = self._live_t
        self.replaying = bool(recorded)
        self.next_seq = 0
        self.waiting: Op | None = None
        self.waiting_seq = -1
        self._emitted_seq = -1
        self.outcome: Command | None = None
        self.cancel_requested = False
        self.ctx = Context(self)
        self.definition = definition
        self._args = args
        self._coro: Any = None
        self._slots = None
        self._dead = None
        self._paths = None
        self._conditions = None
        self._resolving = None
        self._applied: set[int] | None = None
        self._out = None
        self._settled_now = None
        self._building = False

    # -- engine-facing --------------------------------------------------------------------

    def start(self) -> list[Command]:
        """Run the body to its first blocking op, replaying whatever is recorded."""
        try:
            self._coro = self.definition.fn(self.ctx, *self._args)
        except BaseException as exc:  # e.g. arguments that do not fit the signature
            self._fail(contained(exc, f"workflow {self.workflow_type!r}"))
            return [self.outcome]  # type: ignore[list-item]
        self._advance(None, None)
        return self.deliver()

    def waiting_signal(self) -> str | None:
        """The name of a signal the run is blocked on (the lowest seq), if any."""
        op = self.waiting
        if op is None:
            return None
        if self.waiting_seq >= 0:
            if op.kind == "signal" and "t" not in self.history.get(self.waiting_seq, ()):
                return op.name
            return None
        history = self.history
        for seq in sorted(self._slots or ()):
            op = self._slots[seq].op  # type: ignore[index]
            if op.kind == "signal" and "t" not in history.get(seq, ()):
                return op.name
        return None

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
            except BaseException:  # abandoned (even a sys.exit in a finally): nobody to report to
                continue

    def discard(self) -> None:
        """Let go of the run for good (its actor ended or is dropped): ``close`` it and cut the
        run <-> context cycle, so it is freed at once by reference counting instead of waiting
        for the cyclic collector, which a tuned engine runs rarely. Nothing may use it after."""
        self.close()
        self.ctx._detach()

    # -- internals ------------------------------------------------------------------------

    def _keep(self, seq: int, record: dict[str, Any]) -> None:
        """Make ``record`` op ``seq``'s record."""
        history = self.history
        if isinstance(history, dict):
            history[seq] = record
        else:  # the shared empty history: this is the run's first record
            self.history = {seq: record}

    def _keep_outcome(self, seq: int, record: dict[str, Any]) -> None:
        """Make ``record`` (an outcome, at its ``t``) op ``seq``'s; the next pump delivers it."""
        self._keep(seq, record)
        events = self._events
        if events:
            events.append((record["t"], seq))  # type: ignore[union-attr]
        else:
            self._events = [(record["t"], seq)]

    def deliver(self) -> list[Command]:
        """Deliver outcomes recorded (and committed) since the last call, in ``t`` order; the
        commands for the engine that follow from them."""
        events, history = self._events, self.history
        index, end = self._next_event, len(events)  # nothing is recorded while the pump runs
        while index < end and self.outcome is None:
            t, seq = events[index]
            index += 1
            self._next_event = index
            self.replaying = t < self._live_t
            record = history[seq]
            if record["kind"] in _HANDLER_KINDS:
                if self.replaying:
                    if seq != self.next_seq:
                        self._stuck(f"recorded {record['kind']} {record['name']!r} at #{seq} but the code is at #{self.next_seq}")
                        break
                    self.next_seq += 1
                if record["kind"] == HANDLER:
                    self._apply_handler(record)
                elif self._applied and seq in self._applied:
                    self._applied.discard(seq)  # applied live, when it was recorded
                else:
                    self._replay_update(record)
                if self._conditions and self.outcome is None:
                    self._check_conditions()
                continue
            if seq == self.waiting_seq:
                if self._conditions:
                    self._conditions.pop(seq, None)
                    self._resolving.discard(seq)  # type: ignore[union-attr]
                err = record.get("err")
                if err is None:
                    try:
                        value = decode(record["ok"], "recorded outcome") if record["ok"] is not None else None
                    except SerializationError as exc:
                        self._advance(None, exc)
                        continue
                    self._advance(value, None)
                else:
                    if err.get("kind") == "cancelled":
                        self.cancel_requested = True
                    self._advance(None, error_from_record(err))
            elif self._slots and seq in self._slots:
                self._deliver_slot(seq, record)
            elif self._dead and seq in self._dead:
                del self._dead[seq]  # a cancelled op's record: nobody awaits it
            else:
                self._stuck(f"op #{seq} ({record['kind']} {record['name']!r}) is recorded but the code is not awaiting it")
                break
        self.replaying = False
        if index >= end and end:
            self._events = ()
            self._next_event = 0
        out = self._out
        if out is not None:
            self._out = None
        if self.outcome is not None:
            if out is None:
                return [self.outcome]
            out.append(self.outcome)
            return out
        waiting = self.waiting
        if waiting is not None:
            seq = self.waiting_seq
            if seq < 0:
                out = self._emit_slots(out)
            elif seq != self._emitted_seq:
                self._emitted_seq = seq
                cmd = _new_tuple(Command, ("op", seq, waiting, history.get(seq), None, None))
                if out is None:
                    return [cmd]
                out.append(cmd)
        return out if out is not None else []

    def _advance(self, value: Any, error: BaseException | None) -> None:
        """Run the coroutine until it blocks on an op or ends."""
        coro = self._coro
        self.waiting = None
        self.waiting_seq = -1
        while True:
            try:
                yielded = coro.throw(error) if error is not None else coro.send(value)
            except StopIteration as stop:
                if isinstance(stop.value, ContinueAsNew):
                    self._continue(stop.value)
                else:
                    self._complete(stop.value)
                return
            except ContinueAsNew as exc:
                self._continue(exc)
                return
            except BaseException as exc:  # anything at all: user code never stops its host
                self._fail(contained(exc, f"workflow {self.workflow_type!r}"))
                return
            if isinstance(yielded, Op):
                settled = self._issue(yielded)
                if settled is None:
                    return
                value, error = settled
                continue
            value, error = None, InvalidAwait(
                f"workflow {self.workflow_type!r} awaited {yielded!r}; only ctx operations may "
                "be awaited in a workflow (use ctx.sleep, ctx.run, ...)",
                workflow_id=self.workflow_id,
                awaited=repr(yielded),
            )

    def _issue(self, op: Op) -> tuple[Any, BaseException | None] | None:
        """Give ``op`` its seq and wait for it; ``(value, error)`` instead if it is settled at
        once without a seq (``patched`` on an old path, an empty ``all``)."""
        kind = op.kind
        if kind in _SPECIAL_KINDS:
            if kind == "patch":
                return self._issue_patch(op)
            return self._issue_group(op)  # type: ignore[arg-type]
        seq = self.next_seq
        self.next_seq = seq + 1
        record = self.history.get(seq)
        if record is not None and (record.get("kind") != kind or record.get("name") != op.name or "in" in record):
            self._stuck(
                f"replay issued {op_label(kind, op.name)} at #{seq} but the history has "
                f"{op_label(record.get('kind'), record.get('name'))}{_under(record.get('in'))}"
            )
            return None
        self.waiting = op
        self.waiting_seq = seq
        if kind == "condition" and self._watch(seq, op):  # type: ignore[arg-type]
            self._emitted_seq = seq  # already holds: resolved, nothing for the engine to run
        return None

    def _issue_patch(self, op: Op) -> tuple[Any, BaseException | None] | None:
        """A marker at this seq says the run took the new path here; history that goes on
        past this point without one says it took the old path (and keeps its seqs)."""
        seq = self.next_seq
        record = self.history.get(seq)
        if record is not None:
            if record.get("kind") != "patch" or record.get("name") != op.name:
                return False, None
        elif self._events_left(replayed_only=True):
            return False, None
        self.next_seq = seq + 1
        self.waiting = op
        self.waiting_seq = seq
        return None

    def _complete(self, value: Any) -> None:
        if self._next_event < len(self._events) and self._events_left(replayed_only=False):
            self._stuck("the workflow returned but its history has more recorded events")
            return
        try:
            payload = encode(value, "workflow result")
        except SerializationError as exc:
            self._fail(exc)
            return
        self.outcome = _new_tuple(Command, ("complete", -1, None, None, payload, None))

    def _continue(self, request: ContinueAsNew) -> None:
        if self._next_event < len(self._events) and self._events_left(replayed_only=False):
            self._stuck("the workflow continued as new but its history has more recorded events")
            return
        self.outcome = Command("continue", payload=request.payload)

    def _fail(self, exc: BaseException) -> None:
        if self._next_event < len(self._events) and self._events_left(replayed_only=True):
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
