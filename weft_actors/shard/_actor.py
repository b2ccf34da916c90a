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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol

from ..codec import encode
from ..errors import WeftError
from ..store import CancelOther, Finish, StepCommit, TerminateOther, TimerRef
from ..workflow import Command, WorkflowRun, cancelled_record
from ._attempts import NO_TABLE as _NO_TABLE, AttemptHost, AttemptsMixin
from ._ending import EndingHost, EndingMixin, finish_of as _finish_of
from ._inbox import InboxHost, InboxMixin
from ._on_loop import turn
from ._writes import Writes

if TYPE_CHECKING:
    from ..store import StepResult
    from ._committer import GroupCommitter

__all__ = ["Actor", "StepHost"]


_ENCODED_NONE = encode(None)
_ENCODED_TRUE = encode(True)
_ENCODED_NONE = encode(None)
_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)
_DONE = 0
_FIRED = 1


def _answer_all(answers: list[Callable[[bool], None]], committed: bool) -> None:
    for answer in answers:
        answer(committed)


class StepHost(InboxHost, EndingHost, AttemptHost, Protocol):
    """The engine as its actors see it: what the inbox, ending and attempt parts need, plus
    the committer their steps go through, the guard a wake passes, and the calls that carry
    news up (a commit failed, a step committed, the run continued or ended). Declared here,
    below the engine, which satisfies it; an actor never imports the engine."""

    @property
    def committer(self) -> GroupCommitter: ...

    def wake_guard(self, actor: Actor, kind: str) -> bool: ...

    def commit_failed(self, actor: Actor, error: WeftError) -> None: ...

    def after_step(self, actor: Actor, result: StepResult) -> None: ...

    def continue_run(self, actor: Actor, epoch: int) -> None: ...

    def actor_finished(self, actor: Actor) -> None: ...


class Actor(InboxMixin, EndingMixin, AttemptsMixin):
    """Owns one run of workflow ``wid`` at claim ``epoch``; built by the engine only."""

    if TYPE_CHECKING:  # one host for its three parts (each declares the part of it it uses)
        engine: StepHost

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

    def __init__(self, engine: StepHost, wid: str, run_id: str, epoch: int, run: WorkflowRun) -> None:
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
        self.engine.committer.submit(intent, self._committed)

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
