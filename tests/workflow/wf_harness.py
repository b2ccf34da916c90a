"""A tiny deterministic engine for driving ``WorkflowRun`` in unit tests.

``FakeEngine`` plays the shard's part without a loop, a store or threads: it executes each
``Command`` at once (sync activities by calling them, async ones by ``send(None)``), resolves
timers immediately on a fake clock, feeds signals from lists, draws ``now``/``random``/``uuid4``
from fixed functions of the op's seq, and keeps the op log exactly as a store would hold it
(every record goes through ``pack_record``/``unpack_record``). A run's log can then be replayed
by a fresh ``FakeEngine`` built with ``history=``.
"""

from __future__ import annotations

import base64
import copy
import uuid
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from weft_actors.codec import decode, decode_args, encode, unpack_record
from weft_actors.errors import SerializationError
from weft_actors.workflow import (
    ActivityInfo,
    Command,
    WorkflowDefinition,
    WorkflowRun,
    current_activity,
    error_record,
    workflow_definition,
)

__all__ = [
    "ActivitySuspended",
    "FakeEngine",
    "fixed_now",
    "fixed_random",
    "fixed_uuid",
    "prefix_by_t",
    "prefix_by_seq",
    "events_in_t_order",
    "to_json",
    "from_json",
    "history_from_json",
]

EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)
CLOCK_START = 1_700_000_000.0


def fixed_now(seq: int) -> datetime:
    return EPOCH + timedelta(seconds=seq)


def fixed_random(seq: int) -> float:
    return ((seq * 7919) % 1000) / 1000


def fixed_uuid(seq: int) -> uuid.UUID:
    return uuid.UUID(int=0xABC000 + seq)


class ActivitySuspended(BaseException):
    """An async activity really suspended: the fake engine only runs activities that finish inline."""


def _definition(fn: Any) -> WorkflowDefinition:
    if isinstance(fn, WorkflowDefinition):
        return fn
    definition = workflow_definition(fn)
    if definition is None:
        raise TypeError(f"{fn!r} is not a @workflow")
    return definition


class FakeEngine:
    """Runs one ``WorkflowRun`` to the end (or until it blocks) with deterministic outcomes.

    ``inbox``: signals (name, payload) buffered before the run starts.
    ``arrivals``: seq -> signals that arrive while the op at that seq is pending; they are added
    to the inbox when that op's command is executed. Signals whose name has a registered handler
    (and is not the signal being waited for) are applied as handler records first, each followed
    by ``deliver()``, as the shard applies them at an await point.
    """

    def __init__(
        self,
        fn: Any,
        *args: Any,
        history: dict[int, dict[str, Any]] | None = None,
        inbox: Iterable[tuple[str, Any]] = (),
        arrivals: dict[int, list[tuple[str, Any]]] | None = None,
        workflow_id: str = "wf-1",
        run_id: str = "run-1",
    ) -> None:
        self.definition = _definition(fn)
        self.workflow_id = workflow_id
        self.run_id = run_id
        #: the op log as the store would hold it (unpacked records)
        self.log: dict[int, dict[str, Any]] = copy.deepcopy(history) if history else {}
        self.run = WorkflowRun(self.definition, workflow_id, run_id, args, copy.deepcopy(history) if history else None)
        self.inbox: deque[tuple[str, Any]] = deque(inbox)
        self.arrivals = {seq: list(msgs) for seq, msgs in (arrivals or {}).items()}
        # the fake clock resumes where the recorded timers had brought it
        timers = [rec.get(k) for rec in self.log.values() for k in ("fire_at", "retry_at")]
        self.clock = max([CLOCK_START] + [at for at in timers if at is not None])
        self.commands: list[Command] = []
        self.activity_calls: list[tuple[str, tuple[Any, ...]]] = []
        self.final: Command | None = None
        self.blocked_on: Command | None = None
        self._pending: list[Command] | None = None

    # -- driving ----------------------------------------------------------------------------

    def start(self) -> list[Command]:
        """Only ``run.start()``: what replay hands back before anything executes."""
        assert self._pending is None, "already started"
        commands = self.run.start()
        self.commands.extend(commands)
        self._pending = commands
        return commands

    def run_to_end(self, max_steps: int = 10_000) -> Command | None:
        """Drive (starting first if needed) until complete/fail/stuck (returned) or blocked on a
        signal nobody sends (None)."""
        commands = self.start() if self._pending is None else self._pending
        for _ in range(max_steps):
            if not commands:
                return None
            assert len(commands) == 1, commands
            (cmd,) = commands
            if cmd.kind != "op":
                self.final = cmd
                return cmd
            commands = self.execute(cmd)
            if commands is None:
                self.blocked_on = cmd
                self._pending = [cmd]
                return None
            self.commands.extend(commands)
            self._pending = commands
        raise AssertionError("workflow did not finish within max_steps")

    def result(self) -> Any:
        """The decoded result of a completed run."""
        assert self.final is not None and self.final.kind == "complete", self.final
        return decode(self.final.payload)

    # -- executing one command --------------------------------------------------------------

    def execute(self, cmd: Command) -> list[Command] | None:
        op = cmd.op
        assert op is not None
        self.inbox.extend(self.arrivals.pop(cmd.seq, ()))
        waited = op.name if op.kind == "signal" else None
        commands = self._apply_handlers(waited)
        if commands:
            return commands
        kind = op.kind
        record = cmd.record or {}
        if kind == "activity":
            return self._activity(cmd, record)
        if kind == "sleep":
            fire_at = record.get("fire_at")
            if fire_at is None:
                fire_at = self.clock + op.seconds  # type: ignore[attr-defined]
                self._started(cmd.seq, fire_at=fire_at)
            self.clock = max(self.clock, fire_at)
            return self._outcome(cmd.seq, ok=encode(None))
        if kind == "signal":
            for index, (name, payload) in enumerate(self.inbox):
                if name == op.name:
                    del self.inbox[index]
                    return self._outcome(cmd.seq, ok=encode(payload), inbox=index)
            timeout = op.timeout  # type: ignore[attr-defined]
            if timeout is None:
                return None
            fire_at = record.get("fire_at")
            if fire_at is None:
                fire_at = self.clock + timeout
                self._started(cmd.seq, fire_at=fire_at)
            self.clock = max(self.clock, fire_at)
            error = {"kind": "timeout", "type": "TimeoutError", "message": f"no signal {op.name!r} in time"}
            return self._outcome(cmd.seq, err=error)
        if kind == "now":
            return self._outcome(cmd.seq, ok=encode(fixed_now(cmd.seq)))
        if kind == "random":
            return self._outcome(cmd.seq, ok=encode(fixed_random(cmd.seq)))
        if kind == "uuid4":
            return self._outcome(cmd.seq, ok=encode(fixed_uuid(cmd.seq)))
        if kind == "patch":  # reached live: the marker says the run took the new path
            return self._outcome(cmd.seq, ok=encode(True))
        raise AssertionError(f"the fake engine cannot run {op!r}")

    def _apply_handlers(self, waited: str | None) -> list[Command]:
        handlers = self.run.signal_handlers
        index = 0
        while index < len(self.inbox):
            name, payload = self.inbox[index]
            if name != waited and name in handlers:
                del self.inbox[index]
                seq, packed = self.run.record_handler(name, encode(payload), 1000 + len(self.log))
                self.log[seq] = unpack_record(packed)
                commands = self.run.deliver()
                if commands:
                    return commands
                continue
            index += 1
        return []

    def _activity(self, cmd: Command, record: dict[str, Any]) -> list[Command]:
        op: Any = cmd.op
        seq = cmd.seq
        attempts = record.get("attempts", 0)
        retry_at = record.get("retry_at")
        if retry_at is not None:
            self.clock = max(self.clock, retry_at)
        first_at = record.get("first_at", self.clock)
        args = decode_args(op.args, "activity argument")
        while True:
            attempts += 1
            value, error = self._call(op, seq, attempts, args)
            if error is None:
                try:
                    payload = encode(value, "activity result")
                except SerializationError as exc:
                    error = exc
                else:
                    return self._outcome(seq, ok=payload, attempts=attempts)
            failure = error_record(error, "activity")
            failure["activity"] = op.name
            failure["attempts"] = attempts
            retry = op.retry
            if attempts < retry.max_attempts and retry.retryable(error) and not isinstance(error, SerializationError):
                fire_at = self.clock + retry.delay(attempts)
                self._started(seq, attempts=attempts, retry_at=fire_at, first_at=first_at, last_error=failure["message"])
                self.clock = fire_at
                continue
            return self._outcome(seq, err=failure, attempts=attempts)

    def _call(self, op: Any, seq: int, attempt: int, args: tuple[Any, ...]) -> tuple[Any, BaseException | None]:
        info = ActivityInfo(f"{self.workflow_id}/{self.run_id}/{seq}", self.workflow_id, self.run_id, seq, attempt, op.name)
        self.activity_calls.append((op.name, args))
        token = current_activity.set(info)
        try:
            result = op.definition.fn(*args)
            if op.definition.is_async:
                try:
                    result.send(None)
                except StopIteration as stop:
                    return stop.value, None
                result.close()
                raise ActivitySuspended(op.name)
            return result, None
        except Exception as exc:
            return None, exc
        finally:
            current_activity.reset(token)

    def _started(self, seq: int, **fields: Any) -> None:
        self.log[seq] = unpack_record(self.run.record_started(seq, **fields))

    def _outcome(self, seq: int, **kwargs: Any) -> list[Command]:
        packed = self.run.record_outcome(seq, **kwargs)
        self.log[seq] = unpack_record(packed)
        return self.run.deliver()


# -- history helpers --------------------------------------------------------------------------


def events_in_t_order(log: dict[int, dict[str, Any]]) -> list[tuple[int, int, dict[str, Any]]]:
    """(t, seq, record) for every finished record, in delivery order."""
    return sorted(((rec["t"], seq, rec) for seq, rec in log.items() if "t" in rec), key=lambda e: e[:2])


def prefix_by_t(log: dict[int, dict[str, Any]], last_t: int) -> dict[int, dict[str, Any]]:
    """The log as it stood right after the event with ordinal ``last_t`` committed (finished
    records only; started-but-unfinished records are dropped)."""
    return {seq: copy.deepcopy(rec) for seq, rec in log.items() if rec.get("t", last_t + 1) <= last_t}


def prefix_by_seq(log: dict[int, dict[str, Any]], k: int) -> dict[int, dict[str, Any]]:
    """Only the records of ops ``0 .. k-1``."""
    return {seq: copy.deepcopy(rec) for seq, rec in log.items() if seq < k}


# -- JSON form of op logs (golden histories) --------------------------------------------------

_BYTES = "$bytes"


def to_json(value: Any) -> Any:
    """``value`` with every ``bytes`` as ``{"$bytes": base64}`` and int dict keys as strings."""
    if isinstance(value, bytes):
        return {_BYTES: base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """The inverse of ``to_json`` (dict keys stay strings; see ``history_from_json``)."""
    if isinstance(value, dict):
        if set(value) == {_BYTES}:
            return base64.b64decode(value[_BYTES])
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


def history_from_json(data: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(seq): from_json(rec) for seq, rec in data.items()}
