"""A workflow actor: one run in memory, driven by commands; nothing it does is seen before
its commits.

An actor has at most one commit in flight. Everything that wakes it (an activity's outcome,
a timer, an inbox message) is noted and handled by ``poll()`` once no commit is in flight,
so outcomes are always recorded, committed and delivered one at a time and in order. The
commands one delivery produces (ops to start, ops to cancel, conditions to resolve) are
folded into one commit. Several ops may be pending at once (``all``/``race``); each has its
own timer and activity attempt, keyed by seq.

The common step (the only op awaited finished) lets the run go ahead of the outcome's commit
(``_commit_ahead``): the coroutine runs on to its next op at once, but that op starts, and
queries are answered, only once the commit lands (a waiting query is answered right then,
before the run goes on); a run that ends there ends in that same
commit. Going ahead is invisible outside the actor, and saves a commit per workflow.
"""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Final, Iterable

from ..codec import encode
from ..errors import PayloadTooLarge, SerializationError, WeftError
from ..store import CancelOther, Finish, StepCommit, TerminateOther, TimerRef
from ..workflow import ActivityInfo, ActivityOp, Command, WorkflowRun, cancelled_record, error_record
from . import _events as events
from ._activities import DecidedFailure, Finished, timed_out
from ._ending import EndingMixin, finish_of as _finish_of
from ._inbox import InboxMixin
from ._on_loop import turn
from ._writes import Writes

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["Actor"]


_ENCODED_NONE = encode(None)
_ENCODED_TRUE = encode(True)
_ENCODED_NONE = encode(None)
_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)
_DONE = 0
_FIRED = 1


def _answer_all(answers: list[Callable[[bool], None]], committed: bool) -> None:
    for answer in answers:
        answer(committed)


class _NoTable(dict):  # type: ignore[type-arg]
    """The empty ``timers``/``attempts`` table shared by every actor that has none, so a parked
    actor keeps no empty dict of its own. Reading, popping and clearing it are fine; a first
    entry goes into a new table of the actor's own, and an emptied one is dropped again."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("the shared empty table takes no entries")


_NO_TABLE: Final = _NoTable()


class Actor(InboxMixin, EndingMixin):
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
        "ops",
        "timers",
        "attempts",
        "wakes",
        "token",
        "children",
        "writes",
        "after",
        "stuck",
        "finish",
        "next_run",
        "held",
        "ahead",
    )

    def __init__(self, engine: Engine, wid: str, run_id: str, epoch: int, run: WorkflowRun) -> None:
        self.engine = engine
        self.wid = wid
        self.run_id = run_id
        self.epoch = epoch
        self.run = run
        self.busy = False
        self.closed = False
        self.inbox: list[tuple[int, dict[str, Any]]] | tuple[()] = ()
        """Messages seen and not consumed yet, oldest first (the empty tuple when none)."""
        self.inbox_seen = 0
        self.ops: dict[int, Command] = {}
        """The op commands being executed, by seq."""
        self.timers: dict[int, tuple[TimerRef, list[Any] | None]] = _NO_TABLE
        """seq -> (durable timer, in-memory heap entry or None once fired)."""
        self.attempts: dict[int, list[Any]] = _NO_TABLE
        """seq -> [token, cancel function, start time] of the activity attempt in flight."""
        self.wakes: list[tuple[Any, ...]] = []
        """Activity outcomes (``_DONE, seq, value, error, attempt start``: None for an attempt
        that ended inline) and timer fires (``_FIRED, seq``) not handled yet, in arrival order."""
        self.token = 0
        self.children: dict[str, int] | None = None
        self.writes: Writes | None = None
        self.after: Callable[[], None] | None = None
        self.stuck = False
        self.finish: Finish | None = None
        self.next_run: tuple[str, bytes] | None = None
        self.held: list[Command] | None = None
        """Commands of a run that went ahead of its commit, held until that commit lands."""
        self.ahead: list[Callable[[bool], None]] | None = None
        """While the run is ahead of its commit: the queries waiting for it, each answered
        (``answer(True)``) as the commit lands, before the run goes on, or told to look again
        (``answer(False)``) if it failed or the actor closed."""

    @property
    def cmd(self) -> Command | None:
        """The pending op command of lowest seq (what a single-op workflow waits on)."""
        ops = self.ops
        return ops[min(ops)] if ops else None

    # -- wakes ----------------------------------------------------------------------------

    def add_messages(self, messages: Iterable[tuple[int, dict[str, Any]]]) -> bool:
        """Note inbox messages not seen before; True if any was new."""
        new = False
        for seq, message in messages:
            if seq > self.inbox_seen:
                if self.inbox:
                    self.inbox.append((seq, message))  # type: ignore[union-attr]
                else:
                    self.inbox = [(seq, message)]
                self.inbox_seen = seq
                new = True
        return new

    def on_timer(self, seq: int) -> None:
        timer = self.timers.get(seq)
        if self.closed or timer is None or seq not in self.ops:
            return
        if not self.engine.wake_guard(self, "timer"):
            return
        self.timers[seq] = (timer[0], None)
        self.wakes.append((_FIRED, seq))
        self.poll()

    def on_activity_done(self, token: int, seq: int, value: Any, error: BaseException | None) -> None:
        attempt = self.attempts.get(seq)
        if self.closed or attempt is None or attempt[0] != token:
            return
        attempts = self.attempts
        del attempts[seq]
        if not attempts:
            self.attempts = _NO_TABLE
        self.wakes.append((_DONE, seq, value, error, attempt[2]))
        if not self.busy:  # else the commit's callback (or the end of handle) polls
            self.poll()

    # -- driving --------------------------------------------------------------------------

    def handle(self, commands: list[Command]) -> None:
        """Act on the driver's commands, then on whatever else woke the actor. Writes the
        commands need go out in one commit; wakes meanwhile (an activity that finished
        inline) wait for ``poll``."""
        self.busy = True
        for cmd in commands:
            kind = cmd.kind
            if kind == "op":
                self._start_op(cmd)
            elif kind == "cancel":
                self._cancel_op(cmd.seq, cmd.op.kind, cmd.record, cmd.error)  # type: ignore[union-attr]
            elif kind == "resolve":
                self.ops.pop(cmd.seq, None)
                writes = self._writes()
                writes.timers_del.extend(self._clear_timer(cmd.seq, cmd.record))
                writes.ops.append((cmd.seq, self.run.record_outcome(cmd.seq, ok=cmd.payload, err=cmd.error, at1=self.engine.clock.now())))
            else:
                self.busy = False
                self._end(cmd)
                return
        self.busy = False
        pending = self.writes
        if pending is not None:
            self.writes = None
            self._commit_writes(pending)
        self.poll()

    def poll(self) -> None:
        """Act on whatever woke the actor, one commit at a time."""
        if self.busy or self.closed or self.stuck:
            return
        wakes = self.wakes
        while wakes:
            wake = wakes.pop(0)
            cmd = self.ops.get(wake[1])
            if cmd is None:
                continue  # the op was cancelled or resolved meanwhile
            if wake[0] == _DONE:
                self._activity_outcome(cmd, wake[2], wake[3], wake[4])
            else:
                self._timer_outcome(cmd)
            if self.busy:
                return
        if self.inbox:
            self._consume_inbox()

    def _writes(self) -> Writes:
        writes = self.writes
        if writes is None:
            writes = self.writes = Writes()
        return writes

    def _commit(self, ops: tuple[tuple[int, bytes], ...] = (), consume: tuple[int, ...] = (), timers_put: tuple[TimerRef, ...] = (), timers_del: tuple[TimerRef, ...] = (), finish: Finish | None = None, fields: dict[str, Any] | None = None, effects: tuple[Any, ...] = ()) -> None:
        self.busy = True
        intent = _new_tuple(StepCommit, (self.wid, self.epoch, self.run_id, ops, consume, timers_put, timers_del, finish, fields, effects))
        self.engine.committer.submit(intent, self._committed) if finish is None else self._submit_ending(intent)

    def _commit_writes(self, w: Writes, finish: Finish | None = None) -> None:
        self._commit(tuple(w.ops), tuple(w.consume), tuple(w.timers_put), tuple(w.timers_del), finish, w.fields, tuple(w.effects))

    def _committed(self, result: Any) -> None:
        self.busy = False
        ahead = self.ahead
        if ahead is not None:
            self.ahead = None
            if ahead:  # the run's state now is what the commit made durable: answer from it
                _answer_all(ahead, not isinstance(result, WeftError))
        if self.closed:
            return
        if isinstance(result, WeftError):
            self.engine.commit_failed(self, result)
            return
        after = self.after
        if after is not None:
            self.after = None
            after()
        if result is not None:
            self.engine.after_step(self, result)
        if self.stuck:
            return
        held = self.held
        if held is not None:
            self.held = None
            self.handle(held)
            return
        outcome = self.run.outcome
        if outcome is not None:
            if self.next_run is not None:
                self.engine.continue_run(self, result.epoch)
            else:
                self.engine.actor_finished(self)
            return
        self.handle(turn(self))

    # -- starting and stopping ops ----------------------------------------------------------

    def _start_op(self, cmd: Command) -> None:
        seq = cmd.seq
        self.ops[seq] = cmd
        op = cmd.op
        kind = op.kind  # type: ignore[union-attr]
        record = cmd.record
        if kind == "activity":
            retry_at = record.get("retry_at") if record is not None else None
            if retry_at is not None:
                self._schedule_timer(TimerRef(retry_at, seq, "retry"))
            else:
                finished = self._run_attempt(cmd, (record.get("attempts", 0) if record is not None else 0) + 1)
                if finished is not None:  # handled by the poll at the end of ``handle``
                    self.wakes.append((_DONE, seq, finished[0], finished[1], None))
        elif kind == "signal" or kind == "condition":
            if op.timeout is not None:  # type: ignore[union-attr]
                self._start_timer(cmd, op.timeout)  # type: ignore[union-attr]
        elif kind == "sleep":
            self._start_timer(cmd, op.seconds)  # type: ignore[union-attr]
        elif kind == "child" or kind == "start_child":
            self._start_child(cmd)
        elif kind == "close_child":
            self._close_child(cmd)
        else:
            self._value_outcome(cmd)

    def _start_timer(self, cmd: Command, delay: float) -> None:
        seq, kind = cmd.seq, cmd.op.kind  # type: ignore[union-attr]
        fire_at = cmd.record.get("fire_at") if cmd.record is not None else None
        if fire_at is None:
            now = self.engine.clock.now()
            ref = TimerRef(now + delay, seq, kind)
            self._schedule_timer(ref)
            writes = self._writes()
            writes.ops.append((seq, self.run.record_started(seq, fire_at=ref.fire_at, at0=now)))
            writes.timers_put.append(ref)
        else:
            self._schedule_timer(TimerRef(fire_at, seq, kind))

    def _schedule_timer(self, ref: TimerRef) -> None:
        timers = self.timers
        old = timers.get(ref.seq)
        if old is not None:
            self.engine.timers.cancel(old[1])
        elif timers is _NO_TABLE:
            timers = self.timers = {}
        # The plain function, not a bound method: the heap entry keeps no extra object.
        timers[ref.seq] = (ref, self.engine.timers.add(ref.fire_at, Actor.on_timer, self, ref.seq))

    def _clear_timer(self, seq: int, record: dict[str, Any] | None = None) -> tuple[TimerRef, ...]:
        """Drop ``seq``'s timer; the durable one to delete (from ``record`` if not in memory)."""
        timers = self.timers
        timer = timers.pop(seq, None)
        if timer is not None:
            if not timers:
                self.timers = _NO_TABLE
            self.engine.timers.cancel(timer[1])
            return (timer[0],)
        if record is not None:
            at = record.get("fire_at") or record.get("retry_at")
            if at is not None and "t" not in record:
                return (TimerRef(at, seq, record.get("kind", "")),)
        return ()

    def _cancel_op(self, seq: int, kind: str, record: dict[str, Any] | None, error: dict[str, Any] | None, inbox_seq: int | None = None) -> None:
        """Stop op ``seq`` (its attempt, timer, child) and record its cancelled outcome."""
        self.ops.pop(seq, None)
        attempt = self.attempts.pop(seq, None)
        if attempt is not None:
            if not self.attempts:
                self.attempts = _NO_TABLE
            if attempt[1] is not None:
                attempt[1]()
        writes = self._writes()
        writes.timers_del.extend(self._clear_timer(seq, record))
        if kind == "child":  # a start_child op never waits: it is never cancelled
            child_id = (record or self.run.history.get(seq) or {}).get("child_id")
            if child_id is not None:
                if self.children:
                    self.children.pop(child_id, None)
                writes.effects.append(CancelOther(child_id))
        error = error or cancelled_record("cancelled")
        now = self.engine.clock.now()
        if inbox_seq is None:
            packed = self.run.record_outcome(seq, err=error, at1=now)
        else:  # the cancel request's message is consumed by (recorded on) one op only
            packed = self.run.record_outcome(seq, err=error, inbox=inbox_seq, at1=now)
        writes.ops.append((seq, packed))

    # -- outcomes -------------------------------------------------------------------------

    def _close_child(self, cmd: Command) -> None:
        op = cmd.op
        writes = self._writes()
        target = op.name  # type: ignore[union-attr]
        writes.effects.append(CancelOther(target) if op.how == "cancel" else TerminateOther(target, op.reason))  # type: ignore[union-attr]
        seq = cmd.seq
        del self.ops[seq]
        writes.ops.append((seq, self.run.record_outcome(seq, ok=_ENCODED_NONE, at1=self.engine.clock.now())))

    def _value_outcome(self, cmd: Command) -> None:
        kind = cmd.op.kind  # type: ignore[union-attr]
        now = self.engine.clock.now()
        if kind == "now":
            payload = encode(datetime.fromtimestamp(now, timezone.utc))
        elif kind == "random":
            payload = encode(random.random())
        elif kind == "patch":
            payload = _ENCODED_TRUE
        else:
            payload = encode(uuid.uuid4())
        seq = cmd.seq
        del self.ops[seq]
        self._writes().ops.append((seq, self.run.record_outcome(seq, ok=payload, at1=now)))

    def _run_attempt(self, cmd: Command, attempt: int) -> Finished | None:
        """Start an attempt of ``cmd``'s activity; its ``Finished`` outcome if it ended inline,
        else None (``on_activity_done`` gets the outcome later, and the attempt's start time,
        read once it is under way: an attempt that ends inline takes no time to stamp)."""
        op: ActivityOp = cmd.op  # type: ignore[assignment]
        self.token += 1
        token = self.token
        seq = cmd.seq
        info = _new_tuple(ActivityInfo, (f"{self.wid}/{self.run_id}/{seq}", self.wid, self.run_id, seq, attempt, op.name))
        self.engine.activities_started += 1

        def done(value: Any, error: BaseException | None) -> None:
            self.on_activity_done(token, seq, value, error)

        started = self.engine.activities.run(op.definition, op.args, info, op.start_to_close, done)
        if started.__class__ is Finished:  # ended inline: no attempt to track
            return started  # type: ignore[return-value]
        if self.attempts is _NO_TABLE:
            self.attempts = {}
        self.attempts[seq] = [token, started, self.engine.clock.now()]
        return None

    def _activity_outcome(self, cmd: Command, value: Any, error: BaseException | None, at0: float | None) -> None:
        """Record the outcome of an attempt that started at ``at0`` (None: it ended inline,
        in the turn it started): the op's result, its failure, or a retry. The op's ``at0`` is
        its first attempt's start (kept on its record across retries), ``at1`` the time its
        outcome is recorded: wall-clock stamps for ``describe``, never read by replay. An op
        whose only attempt ended inline records ``at1`` alone: it took no time."""
        seq = cmd.seq
        op: ActivityOp = cmd.op  # type: ignore[assignment]
        previous = self.run.history.get(seq)
        if previous is not None:
            attempts = previous.get("attempts", 0) + 1
            at0 = previous.get("at0") or at0
        else:
            attempts = 1
        now = self.engine.clock.now()
        if error is None:
            try:
                payload = encode(value, "activity result")
                if len(payload) > self.engine.payload_limit:
                    limit = self.engine.payload_limit
                    raise PayloadTooLarge(f"result of activity {op.name!r} is {len(payload)} bytes; the limit is {limit}", size=len(payload), limit=limit)
            except (SerializationError, PayloadTooLarge) as exc:
                error = exc
                payload = None  # not kept while the failure commits
            else:
                del self.ops[seq]
                if at0 is None:
                    packed = self.run.record_outcome(seq, ok=payload, attempts=attempts, at1=now)
                else:
                    packed = self.run.record_outcome(seq, ok=payload, attempts=attempts, at0=at0, at1=now)
                if self.timers:
                    timers = self._clear_timer(seq)
                elif not self.ops and not self.wakes and not self.inbox and self.run.waiting_seq == seq:
                    self._commit_ahead(((seq, packed),))
                    return
                else:
                    timers = ()
                self._commit(ops=((seq, packed),), timers_del=timers)
                return
        previous = previous or {}
        if error.__class__ is DecidedFailure:  # this attempt's failure, its commit refused before
            failure, retry_at, first_at = error.failure, error.retry_at, error.first_at  # type: ignore[attr-defined]
        else:
            first_at = previous.get("first_at", now)
            retry = op.retry
            delay = retry.delay(attempts)
            retryable = (
                attempts < retry.max_attempts
                and retry.retryable(error)
                and not isinstance(error, (SerializationError, PayloadTooLarge))
                and (op.schedule_to_close is None or now + delay < first_at + op.schedule_to_close)
            )
            failure = error_record(error, "activity")
            failure["activity"] = op.name
            failure["attempts"] = attempts
            retry_at = now + delay if retryable else None
            self._log_failed_attempt(seq, op.name, attempts, error, None if retry_at is None else delay)
        if retry_at is not None:
            ref = TimerRef(retry_at, seq, "retry")
            started = self.run.record_started(seq, attempts=attempts, retry_at=ref.fire_at, first_at=first_at, last_error=failure["message"], at0=now if at0 is None else at0)
            stale = self._clear_timer(seq)
            self._schedule_timer(ref)
            self._commit(ops=((seq, started),), timers_put=(ref,), timers_del=stale)
            return
        del self.ops[seq]
        if at0 is None:
            packed = self.run.record_outcome(seq, err=failure, attempts=attempts, at1=now)
        else:
            packed = self.run.record_outcome(seq, err=failure, attempts=attempts, at0=at0, at1=now)
        self._commit(ops=((seq, packed),), timers_del=self._clear_timer(seq))

    def _log_failed_attempt(self, seq: int, activity: str, attempt: int, error: BaseException, retry_in: float | None) -> None:
        """Once per attempt that failed, when it is decided (not again for the decision a
        refused commit kept): the failure, and the retry if one follows."""
        engine_id, wf_type = self.engine.engine_id, self.run.workflow_type
        events.activity_attempt_failed(engine_id, self.wid, wf_type, self.run_id, seq, activity, attempt, error, timed_out=timed_out(error), final=retry_in is None)
        if retry_in is not None:
            events.activity_retry_scheduled(engine_id, self.wid, wf_type, self.run_id, seq, activity, attempt + 1, retry_in)

    def _commit_ahead(self, ops: tuple[tuple[int, bytes], ...]) -> None:
        """Commit ``ops`` (the outcome of the only op awaited) with the run already moved past
        it: the coroutine runs on to its next op now, and what that produces waits for the
        commit (``held``): no op starts, no query is answered, nobody learns of an ending
        before it. A run that ends right there ends in this same commit, one commit sooner.
        A failed commit drops the actor, and with it everything the run did ahead."""
        run = self.run
        commands = turn(self)
        self.ahead = []
        outcome = run.outcome
        if outcome is not None and (outcome.kind == "complete" or outcome.kind == "fail") and len(commands) == 1 and not self.ops and not self.attempts:
            self.finish = finish = _finish_of(outcome, self.engine.payload_limit)
            self._commit(ops=ops, finish=finish)
            return
        self.held = commands
        self._commit(ops=ops)

    def _timer_outcome(self, cmd: Command) -> None:
        seq = cmd.seq
        op = cmd.op
        kind = op.kind  # type: ignore[union-attr]
        now = self.engine.clock.now()
        if kind == "activity":
            # The retry timer stays recorded until the attempt's outcome commit deletes it;
            # a crash before then re-runs the attempt at once on recovery.
            finished = self._run_attempt(cmd, self.run.history[seq].get("attempts", 0) + 1)
            if finished is not None:  # after the wakes that came first: the poll goes on
                self.wakes.append((_DONE, seq, finished[0], finished[1], now))
            return
        timers = self._clear_timer(seq)
        del self.ops[seq]
        if kind == "sleep":
            record = self.run.record_outcome(seq, ok=_ENCODED_NONE, at1=now)
        else:
            what = f"no signal {op.name!r}" if kind == "signal" else "condition not met"  # type: ignore[union-attr]
            record = self.run.record_outcome(seq, err={"kind": "timeout", "type": "TimeoutError", "message": f"{what} in time"}, at1=now)
        self._commit(ops=((seq, record),), timers_del=timers)

    def close(self) -> None:
        """Stop without committing anything more (deposed, evicted or engine stopping)."""
        self.closed = True
        self.held = None
        ahead, self.ahead = self.ahead, None
        if ahead:
            _answer_all(ahead, False)
        self._stop_work(None)
        self.run.discard()
