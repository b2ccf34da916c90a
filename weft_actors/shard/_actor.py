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
before the run goes on); a run that ends there ends in that same commit. Going ahead is
invisible outside the actor, and saves a commit per workflow.

An actor holds its parts as objects, each made only once needed and knowing the actor by a
small protocol of its own module: its ``Inbox`` (messages and children; most actors never get
one), its ``Attempts`` (activity attempts), its ``OpControl`` (timers, ops resolved at once,
cancellation) and its ``Ending``. The common step stays on the actor itself: ``handle``,
``poll``, ``commit_outcome``, ``_commit_ahead`` and the commit's callback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Protocol

from .. import _tracing
from ..errors import WeftError
from ..store import Finish, StepCommit, TimerRef
from ..workflow import Command, WorkflowRun
from ._attempts import NO_TABLE as _NO_TABLE, AttemptHost, Attempts
from ._call_replies import reply_at_ending
from ._ending import Ending, EndingHost, finish_of as _finish_of
from ._inbox import Inbox, InboxHost
from ._op_control import OpControl
from ._on_loop import turn
from ._writes import Writes

if TYPE_CHECKING:
    from ..store import AppendAndConsume, AppendInbox, StepResult

__all__ = ["Actor", "StepHost"]


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
    below the engine, which satisfies it; an actor never imports the engine. (The committer
    their steps go through is the ending's and the inbox's too.)"""

    def wake_guard(self, actor: Actor, kind: str) -> bool: ...

    def commit_failed(self, actor: Actor, error: WeftError) -> None: ...

    def after_step(self, actor: Actor, result: StepResult) -> None: ...

    def continue_run(self, actor: Actor, epoch: int) -> None: ...

    def actor_finished(self, actor: Actor) -> None: ...


class Actor:
    """Owns one run of workflow ``wid`` at claim ``epoch``; built by the engine only."""

    new_attempts: ClassVar[type[Attempts]] = Attempts
    """Makes the actor's attempts part (``ReusingActor`` makes one that reuses outcomes)."""

    __slots__ = (
        "engine", "wid", "run_id", "epoch", "run", "busy", "closed", "inbox", "attempter", "ending",
        "control", "ops", "timers", "attempts", "wakes", "writes", "after", "stuck", "finish",
        "next_run", "held", "ahead"
    )

    def __init__(self, engine: StepHost, wid: str, run_id: str, epoch: int, run: WorkflowRun) -> None:
        self.engine = engine
        self.wid = wid
        self.run_id = run_id
        self.epoch = epoch
        self.run = run
        self.busy = False
        self.closed = False
        self.inbox: Inbox | None = None
        """Made when the first message comes (or the first child starts)."""
        self.attempter: Attempts | None = None
        """Made when the first activity attempt starts."""
        self.ending: Ending | None = None
        """Made when the run ends or the actor closes."""
        self.control: OpControl | None = None
        """Made when the run first starts or cancels an op other than an activity attempt."""
        self.ops: dict[int, Command] = {}
        """The op commands being executed, by seq."""
        self.timers: dict[int, tuple[TimerRef, list[Any] | None]] = _NO_TABLE
        """seq -> (durable timer, in-memory heap entry or None once fired)."""
        self.attempts: dict[int, list[Any]] = _NO_TABLE
        """seq -> [token, cancel function, start time] of the activity attempt in flight."""
        self.wakes: list[tuple[Any, ...]] = []
        """Activity outcomes (``_DONE, seq, value, error, attempt start``: None for an attempt
        that ended inline) and timer fires (``_FIRED, seq``) not handled yet, in arrival order."""
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
        if _tracing.ACTIVE is not None: _tracing.run_opened(self)  # its run span; off: this check only

    @property
    def cmd(self) -> Command | None:
        """The pending op command of lowest seq (what a single-op workflow waits on)."""
        ops = self.ops
        return ops[min(ops)] if ops else None

    @property
    def inbox_seen(self) -> int:
        """The newest inbox seq this actor has seen (0: none)."""
        inbox = self.inbox
        return 0 if inbox is None else inbox.seen

    def _inbox(self) -> Inbox:
        inbox = self.inbox
        if inbox is None:
            inbox = self.inbox = Inbox(self)
        return inbox

    def _ending(self) -> Ending:
        ending = self.ending
        if ending is None:
            ending = self.ending = Ending(self)
        return ending

    def _control(self) -> OpControl:
        control = self.control
        if control is None:
            control = self.control = OpControl(self)
        return control

    def _attempter(self) -> Attempts:
        attempter = self.attempter
        if attempter is None:
            attempter = self.attempter = self.new_attempts(self)
        return attempter

    # -- wakes ----------------------------------------------------------------------------

    def add_messages(self, messages: Iterable[tuple[int, dict[str, Any]]]) -> bool:
        """Note inbox messages not seen before; True if any was new. A spawn with none (an
        empty list or tuple) makes no inbox."""
        inbox = self.inbox
        if inbox is None:
            if not messages:
                return False
            inbox = self.inbox = Inbox(self)
        return inbox.add(messages)

    def consume_with_append(self, append: AppendInbox) -> AppendAndConsume | None:
        """See ``Inbox.consume_with_append``: a signal is coming, so the inbox is made."""
        return self._inbox().consume_with_append(append)

    def consumed_with_append(self, intent: AppendAndConsume, result: Any) -> None:
        self._inbox().consumed_with_append(intent, result)

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
                self.cancel_op(cmd.seq, cmd.op.kind, cmd.record, cmd.error)  # type: ignore[union-attr]
            elif kind == "resolve":
                self.ops.pop(cmd.seq, None)
                writes = self.pending_writes()
                writes.timers_del.extend(self.clear_timer(cmd.seq, cmd.record))
                writes.ops.append((cmd.seq, self.run.record_outcome(cmd.seq, ok=cmd.payload, err=cmd.error, at1=self.engine.clock.now())))
            else:
                self.busy = False
                self._ending().end(cmd)
                return
        self.busy = False
        pending = self.writes
        if pending is not None:
            self.writes = None
            self.commit_writes(pending)
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
                # An attempt's outcome: the attempts part that ran it is there.
                self.attempter.outcome(cmd, wake[2], wake[3], wake[4])  # type: ignore[union-attr]
            else:
                self._timer_outcome(cmd)
            if self.busy:
                return
        inbox = self.inbox
        if inbox is not None and inbox.messages:
            inbox.consume()

    def pending_writes(self) -> Writes:
        """The writes this delivery gathers so far (made at the first)."""
        writes = self.writes
        if writes is None:
            writes = self.writes = Writes()
        return writes

    def commit(self, ops: tuple[tuple[int, bytes], ...] = (), consume: tuple[int, ...] = (), timers_put: tuple[TimerRef, ...] = (), timers_del: tuple[TimerRef, ...] = (), finish: Finish | None = None, fields: dict[str, Any] | None = None, effects: tuple[Any, ...] = ()) -> None:
        self.busy = True
        intent = _new_tuple(StepCommit, (self.wid, self.epoch, self.run_id, ops, consume, timers_put, timers_del, finish, fields, effects))
        self.engine.committer.submit(intent, self._committed)

    def commit_writes(self, w: Writes, finish: Finish | None = None) -> None:
        self.commit(tuple(w.ops), tuple(w.consume), tuple(w.timers_put), tuple(w.timers_del), finish, w.fields, tuple(w.effects))

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
            if _tracing.ACTIVE is not None: _tracing.run_ended(self)  # the ending is committed
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
                self.schedule_timer(TimerRef(retry_at, seq, "retry"))
            else:
                finished = self._attempter().run(cmd, (record.get("attempts", 0) if record is not None else 0) + 1)
                if finished is not None:  # handled by the poll at the end of ``handle``
                    self.wakes.append((_DONE, seq, finished[0], finished[1], None))
        elif kind == "signal" or kind == "condition":
            if op.timeout is not None:  # type: ignore[union-attr]
                self._control().start_timer(cmd, op.timeout)  # type: ignore[union-attr]
        elif kind == "sleep":
            self._control().start_timer(cmd, op.seconds)  # type: ignore[union-attr]
        elif kind == "child" or kind == "start_child":
            self._inbox().start_child(cmd)
        elif kind == "close_child":
            self._inbox().close_child(cmd)
        else:
            self._control().value_outcome(cmd)

    def schedule_timer(self, ref: TimerRef) -> None:
        self._control().schedule_timer(ref)

    def clear_timer(self, seq: int, record: dict[str, Any] | None = None) -> tuple[TimerRef, ...]:
        """Drop ``seq``'s timer; the durable one to delete (from ``record`` if not in memory)."""
        return self._control().clear_timer(seq, record)

    def cancel_op(self, seq: int, kind: str, record: dict[str, Any] | None, error: dict[str, Any] | None, inbox_seq: int | None = None) -> None:
        """Stop op ``seq`` (its attempt, timer, child) and record its cancelled outcome."""
        self._control().cancel_op(seq, kind, record, error, inbox_seq)

    # -- outcomes -------------------------------------------------------------------------

    def commit_outcome(self, seq: int, packed: bytes) -> None:
        """Commit an activity's result ``packed`` (its op ``seq`` resolved). When that op was
        the only thing awaited (``_commit_ahead``), the run goes ahead of the commit."""
        if self.timers:
            self.commit(ops=((seq, packed),), timers_del=self.clear_timer(seq))
            return
        inbox = self.inbox
        if not self.ops and not self.wakes and (inbox is None or not inbox.messages) and self.run.waiting_seq == seq:
            self._commit_ahead(((seq, packed),))
            return
        self.commit(ops=((seq, packed),))

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
            self.commit(ops=ops, finish=finish)
            reply_at_ending(self.engine.committer, self.engine.waiters, self.wid)
            return
        self.held = commands
        self.commit(ops=ops)

    def _timer_outcome(self, cmd: Command) -> None:
        if cmd.op.kind != "activity":  # type: ignore[union-attr]
            self._control().fired(cmd)
            return
        # A retry's wait is over. Its timer stays recorded until the attempt's outcome commit
        # deletes it; a crash before then re-runs the attempt at once on recovery.
        seq = cmd.seq
        now = self.engine.clock.now()
        finished = self._attempter().run(cmd, self.run.history[seq].get("attempts", 0) + 1)
        if finished is not None:  # after the wakes that came first: the poll goes on
            self.wakes.append((_DONE, seq, finished[0], finished[1], now))

    def outcome_record(self) -> dict[str, Any]:
        """The finished run's ending, shaped like the stored workflow record's fields."""
        finish = self.finish
        return {"status": finish.status, "result": finish.result, "error": finish.error}  # type: ignore[union-attr]

    def close(self) -> None:
        """Stop without committing anything more (deposed, evicted or engine stopping)."""
        self.closed = True
        self.held = None
        ahead, self.ahead = self.ahead, None
        self.attempter = None  # it points back here (a cycle); an attempt still running reports through its own reference
        if ahead:
            _answer_all(ahead, False)
        self._ending().stop_work(None)
        self.run.discard()
        if _tracing.ACTIVE is not None: _tracing.run_left(self)  # the next owner opens another
