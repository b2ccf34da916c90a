"""A workflow actor: one run in memory, driven by commands, resumed only after its commits.

An actor has at most one commit in flight. Everything that wakes it (an activity's outcome,
a timer, an inbox message) is noted and handled by ``poll()`` once no commit is in flight,
so outcomes are always recorded, committed and delivered one at a time and in order.
"""

from __future__ import annotations

import logging
import random
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..codec import encode
from ..errors import SerializationError, WeftError
from ..store import Finish, StepCommit, TimerRef
from ..workflow import ActivityInfo, ActivityOp, Command, WorkflowRun, error_record

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["Actor"]

log = logging.getLogger("weft_actors.shard")

_ENCODED_NONE = encode(None)
_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)


class Actor:
    """Owns one run of workflow ``wid`` at claim ``epoch``; built by the engine only."""

    __slots__ = (
        "engine",
        "wid",
        "run_id",
        "epoch",
        "run",
        "busy",
        "closed",
        "inbox",
        "inbox_seen",
        "cmd",
        "timer",
        "timer_entry",
        "timer_fired",
        "result",
        "cancel_attempt",
        "attempt_token",
        "stuck",
        "finish",
    )

    def __init__(self, engine: Engine, wid: str, run_id: str, epoch: int, run: WorkflowRun) -> None:
        self.engine = engine
        self.wid = wid
        self.run_id = run_id
        self.epoch = epoch
        self.run = run
        self.busy = False
        self.closed = False
        self.inbox: list[tuple[int, dict[str, Any]]] = []
        self.inbox_seen = 0
        self.cmd: Command | None = None
        self.timer: TimerRef | None = None
        self.timer_entry: list[Any] | None = None
        self.timer_fired = False
        self.result: tuple[int, int, Any, BaseException | None] | None = None
        self.cancel_attempt: Any = None
        self.attempt_token = 0
        self.stuck = False
        self.finish: Finish | None = None

    # -- wakes ----------------------------------------------------------------------------

    def add_messages(self, messages: list[tuple[int, dict[str, Any]]]) -> bool:
        """Note inbox messages not seen before; True if any was new."""
        new = False
        for seq, message in messages:
            if seq > self.inbox_seen:
                self.inbox.append((seq, message))
                self.inbox_seen = seq
                new = True
        return new

    def on_timer(self, seq: int) -> None:
        if self.closed or self.cmd is None or self.cmd.seq != seq:
            return
        if not self.engine.wake_guard(self, "timer"):
            return
        self.timer_entry = None
        self.timer_fired = True
        self.poll()

    def on_activity_done(self, token: int, seq: int, value: Any, error: BaseException | None) -> None:
        if self.closed or token != self.attempt_token:
            return
        self.cancel_attempt = None
        self.result = (token, seq, value, error)
        self.poll()

    # -- driving --------------------------------------------------------------------------

    def handle(self, commands: list[Command]) -> None:
        for cmd in commands:
            kind = cmd.kind
            if kind == "op":
                self._start_op(cmd)
            elif kind == "complete":
                self._finish(Finish("completed", cmd.payload, None))
            elif kind == "fail":
                self._finish(Finish("failed", None, cmd.error))
            else:
                self._park_stuck(cmd.error or {})

    def poll(self) -> None:
        """Act on whatever woke the actor, one commit at a time."""
        if self.busy or self.closed or self.stuck or self.cmd is None:
            return
        if self.result is not None:
            _, seq, value, error = self.result
            self.result = None
            if seq == self.cmd.seq:
                self._activity_outcome(value, error)
                return
        if self.timer_fired:
            self.timer_fired = False
            self._timer_outcome()
            return
        if self.inbox:
            self._consume_inbox()

    def _commit(self, ops: tuple[tuple[int, bytes], ...] = (), consume: tuple[int, ...] = (), timers_put: tuple[TimerRef, ...] = (), timers_del: tuple[TimerRef, ...] = (), finish: Finish | None = None, fields: dict[str, Any] | None = None) -> None:
        self.busy = True
        intent = _new_tuple(StepCommit, (self.wid, self.epoch, self.run_id, ops, consume, timers_put, timers_del, finish, fields))
        self.engine.committer.submit(intent, self._committed)

    def _committed(self, result: Any) -> None:
        self.busy = False
        if self.closed:
            return
        if isinstance(result, WeftError):
            self.engine.commit_failed(self, result)
            return
        if self.stuck:
            return
        if self.run.outcome is not None:
            self.engine.actor_finished(self)
            return
        self.handle(self.run.deliver())
        self.poll()

    def _start_op(self, cmd: Command) -> None:
        self.cmd = cmd
        op = cmd.op
        kind = op.kind  # type: ignore[union-attr]
        record = cmd.record or {}
        if kind == "activity":
            retry_at = record.get("retry_at")
            if retry_at is not None:
                self._schedule_timer(TimerRef(retry_at, cmd.seq, "retry"))
            else:
                self._run_attempt(record.get("attempts", 0) + 1)
        elif kind == "sleep" or (kind == "signal" and op.timeout is not None):  # type: ignore[union-attr]
            fire_at = record.get("fire_at")
            if fire_at is None:
                delay = op.seconds if kind == "sleep" else op.timeout  # type: ignore[union-attr]
                ref = TimerRef(self.engine.clock.now() + delay, cmd.seq, kind)
                self._schedule_timer(ref)
                self._commit(ops=((cmd.seq, self.run.record_started(cmd.seq, fire_at=ref.fire_at)),), timers_put=(ref,))
            else:
                self._schedule_timer(TimerRef(fire_at, cmd.seq, kind))
            self.poll()
        elif kind == "signal":
            self.poll()
        else:
            self._value_outcome(kind)

    def _schedule_timer(self, ref: TimerRef) -> None:
        self.timer = ref
        self.timer_entry = self.engine.timers.add(ref.fire_at, self.on_timer, ref.seq)

    def _clear_timer(self) -> tuple[TimerRef, ...]:
        ref = self.timer
        if ref is None:
            return ()
        self.engine.timers.cancel(self.timer_entry)
        self.timer = None
        self.timer_entry = None
        self.timer_fired = False
        return (ref,)

    # -- outcomes -------------------------------------------------------------------------

    def _value_outcome(self, kind: str) -> None:
        if kind == "now":
            value: Any = datetime.fromtimestamp(self.engine.clock.now(), timezone.utc)
        elif kind == "random":
            value = random.random()
        else:
            value = uuid.uuid4()
        seq = self.cmd.seq  # type: ignore[union-attr]
        self._commit(ops=((seq, self.run.record_outcome(seq, ok=encode(value))),))

    def _run_attempt(self, attempt: int) -> None:
        cmd = self.cmd
        op: ActivityOp = cmd.op  # type: ignore[assignment]
        self.attempt_token += 1
        token = self.attempt_token
        seq = cmd.seq  # type: ignore[union-attr]
        info = _new_tuple(ActivityInfo, (f"{self.wid}/{self.run_id}/{seq}", self.wid, self.run_id, seq, attempt, op.name))
        self.engine.activities_started += 1

        def done(value: Any, error: BaseException | None) -> None:
            self.on_activity_done(token, seq, value, error)

        self.cancel_attempt = self.engine.activities.run(op.definition, op.args, info, op.start_to_close, done)

    def _activity_outcome(self, value: Any, error: BaseException | None) -> None:
        cmd = self.cmd
        seq = cmd.seq  # type: ignore[union-attr]
        op: ActivityOp = cmd.op  # type: ignore[assignment]
        previous = self.run.history.get(seq) or {}
        attempts = previous.get("attempts", 0) + 1
        if error is None:
            try:
                payload = encode(value, "activity result")
            except SerializationError as exc:
                error = exc
            else:
                self._commit(ops=((seq, self.run.record_outcome(seq, ok=payload, attempts=attempts)),), timers_del=self._clear_timer())
                return
        now = self.engine.clock.now()
        first_at = previous.get("first_at", now)
        retry = op.retry
        delay = retry.delay(attempts)
        retryable = (
            attempts < retry.max_attempts
            and retry.retryable(error)
            and not isinstance(error, SerializationError)
            and (op.schedule_to_close is None or now + delay < first_at + op.schedule_to_close)
        )
        failure = error_record(error, "activity")
        failure["activity"] = op.name
        failure["attempts"] = attempts
        if retryable:
            ref = TimerRef(now + delay, seq, "retry")
            started = self.run.record_started(seq, attempts=attempts, retry_at=ref.fire_at, first_at=first_at, last_error=failure["message"])
            stale = self._clear_timer()
            self._schedule_timer(ref)
            self._commit(ops=((seq, started),), timers_put=(ref,), timers_del=stale)
            return
        self._commit(ops=((seq, self.run.record_outcome(seq, err=failure, attempts=attempts)),), timers_del=self._clear_timer())

    def _timer_outcome(self) -> None:
        cmd = self.cmd
        seq = cmd.seq  # type: ignore[union-attr]
        kind = cmd.op.kind  # type: ignore[union-attr]
        if kind == "activity":
            # The retry timer stays recorded until the attempt's outcome commit deletes it;
            # a crash before then re-runs the attempt at once on recovery.
            self._run_attempt(self.run.history[seq].get("attempts", 0) + 1)
            return
        timers = self._clear_timer()
        if kind == "sleep":
            record = self.run.record_outcome(seq, ok=_ENCODED_NONE)
        else:
            error = {"kind": "timeout", "type": "TimeoutError", "message": f"no signal {cmd.op.name!r} in time"}  # type: ignore[union-attr]
            record = self.run.record_outcome(seq, err=error)
        self._commit(ops=((seq, record),), timers_del=timers)

    def _consume_inbox(self) -> None:
        waiting = self.run.waiting_signal()
        handlers = self.run.signal_handlers
        for index, (inbox_seq, message) in enumerate(self.inbox):
            if message["kind"] != "signal":
                continue
            name = message["name"]
            if name == waiting:
                del self.inbox[index]
                seq = self.cmd.seq  # type: ignore[union-attr]
                record = self.run.record_outcome(seq, ok=message["payload"], inbox=inbox_seq)
                self._commit(ops=((seq, record),), consume=(inbox_seq,), timers_del=self._clear_timer())
                return
            if name in handlers:
                del self.inbox[index]
                seq, record = self.run.record_handler(name, message["payload"], inbox_seq)
                self._commit(ops=((seq, record),), consume=(inbox_seq,))
                return

    def _finish(self, finish: Finish) -> None:
        if self.cancel_attempt is not None:
            self.cancel_attempt()
            self.cancel_attempt = None
        self.finish = finish
        self._commit(finish=finish, timers_del=self._clear_timer())

    def _park_stuck(self, error: dict[str, Any]) -> None:
        self.stuck = True
        log.error("workflow %s is stuck: %s", self.wid, error.get("message"))
        self._commit(fields={"nondeterminism": error.get("message")})

    def outcome_record(self) -> dict[str, Any]:
        """The finished run's ending, shaped like the stored workflow record's fields."""
        finish = self.finish
        return {"status": finish.status, "result": finish.result, "error": finish.error}

    def close(self) -> None:
        """Stop without committing anything more (deposed, evicted or engine stopping)."""
        self.closed = True
        self.engine.timers.cancel(self.timer_entry)
        if self.cancel_attempt is not None:
            self.cancel_attempt()
            self.cancel_attempt = None
        self.run.close()

