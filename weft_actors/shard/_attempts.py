"""An actor's activity attempts: starting one, and recording what it came to (its result,
its failure, or a retry on a durable timer).

``Attempts`` is a part its actor holds, made the first time the run starts an activity (an
actor that never does has none). It keeps the attempt counter (each attempt's token) and
knows its actor only by ``AttemptOwner``; the table of attempts in flight stays on the actor,
which the engine reads. ``ReusingAttempts`` (``_reuse``) overrides ``run`` to take an outcome
kept from a refused commit instead of running the attempt again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from .. import _tracing
from ..codec import encode
from ..errors import PayloadTooLarge, SerializationError
from ..store import TimerRef
from ..workflow import ActivityInfo, ActivityOp, Command, error_record
from . import _events as events
from ._activities import DecidedFailure, Finished, timed_out

if TYPE_CHECKING:
    from .._clock import Clock
    from ..workflow import WorkflowRun
    from ._activities import ActivityRunner

__all__ = ["AttemptHost", "AttemptOwner", "Attempts", "NO_TABLE"]

_new_tuple = tuple.__new__  # NamedTuple construction without its Python-level __new__ (hot path)


class _NoTable(dict):  # type: ignore[type-arg]
    """The empty ``timers``/``attempts`` table shared by every actor that has none, so a parked
    actor keeps no empty dict of its own. Reading, popping and clearing it are fine; a first
    entry goes into a new table of the actor's own, and an emptied one is dropped again."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("the shared empty table takes no entries")


NO_TABLE: Final = _NoTable()


class AttemptHost(Protocol):
    """What attempts need of the engine: the runner that runs them (and its loop slot), the
    count of attempts started, the clock for records, the result size limit, and its id for
    the event log lines."""

    @property
    def activities(self) -> ActivityRunner: ...

    activities_started: int

    @property
    def clock(self) -> Clock: ...

    @property
    def payload_limit(self) -> int: ...

    @property
    def engine_id(self) -> str: ...


class AttemptOwner(Protocol):
    """What attempts need of their actor: its run and op table, its table of attempts in
    flight (kept on the actor, which the engine reads), its timers, and the calls an outcome
    goes on through (a wake, a commit, a retry timer)."""

    @property
    def engine(self) -> AttemptHost: ...

    @property
    def wid(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def run(self) -> WorkflowRun: ...

    @property
    def ops(self) -> dict[int, Command]: ...

    attempts: dict[int, list[Any]]

    def on_activity_done(self, token: int, seq: int, value: Any, error: BaseException | None) -> None: ...

    def commit(self, ops: tuple[tuple[int, bytes], ...] = (), consume: tuple[int, ...] = (), timers_put: tuple[TimerRef, ...] = (), timers_del: tuple[TimerRef, ...] = ()) -> None: ...

    def commit_outcome(self, seq: int, packed: bytes) -> None: ...

    def clear_timer(self, seq: int, record: dict[str, Any] | None = None) -> tuple[TimerRef, ...]: ...

    def schedule_timer(self, ref: TimerRef) -> None: ...


class Attempts:
    """The activity attempts of one actor: starts them, and records what each came to."""

    __slots__ = ("actor", "token")

    def __init__(self, actor: AttemptOwner) -> None:
        self.actor = actor
        self.token = 0
        """Counts the attempts started: a late outcome of an attempt given up is told apart."""

    def run(self, cmd: Command, attempt: int) -> Finished | None:
        """Start an attempt of ``cmd``'s activity; its ``Finished`` outcome if it ended inline,
        else None (``on_activity_done`` gets the outcome later, and the attempt's start time,
        read once it is under way: an attempt that ends inline takes no time to stamp)."""
        actor = self.actor
        op: ActivityOp = cmd.op  # type: ignore[assignment]
        self.token += 1
        token = self.token
        seq = cmd.seq
        wid, run_id = actor.wid, actor.run_id
        info = _new_tuple(ActivityInfo, (f"{wid}/{run_id}/{seq}", wid, run_id, seq, attempt, op.name))
        engine = actor.engine
        engine.activities_started += 1

        def done(value: Any, error: BaseException | None) -> None:
            actor.on_activity_done(token, seq, value, error)

        if _tracing.ACTIVE is None:
            started = engine.activities.run(op.definition, op.args, info, op.start_to_close, done)
        else:  # its span, current while the activity starts (its task or thread copies that)
            started = _tracing.run_attempt(actor, info, engine.activities.run, op.definition, op.args, info, op.start_to_close, done)
        if started.__class__ is Finished:  # ended inline: no attempt to track
            return started  # type: ignore[return-value]
        if actor.attempts is NO_TABLE:
            actor.attempts = {}
        actor.attempts[seq] = [token, started, engine.clock.now()]
        return None

    def outcome(self, cmd: Command, value: Any, error: BaseException | None, at0: float | None) -> None:
        """Record the outcome of an attempt that started at ``at0`` (None: it ended inline,
        in the turn it started): the op's result, its failure, or a retry. The op's ``at0`` is
        its first attempt's start (kept on its record across retries), ``at1`` the time its
        outcome is recorded: wall-clock stamps for ``describe``, never read by replay. An op
        whose only attempt ended inline records ``at1`` alone: it took no time."""
        actor = self.actor
        run, engine = actor.run, actor.engine
        seq = cmd.seq
        op: ActivityOp = cmd.op  # type: ignore[assignment]
        previous = run.history.get(seq)
        if previous is not None:
            attempts = previous.get("attempts", 0) + 1
            at0 = previous.get("at0") or at0
        else:
            attempts = 1
        now = engine.clock.now()
        if error is None:
            try:
                payload = encode(value, "activity result")
                if len(payload) > engine.payload_limit:
                    limit = engine.payload_limit
                    raise PayloadTooLarge(f"result of activity {op.name!r} is {len(payload)} bytes; the limit is {limit}", size=len(payload), limit=limit)
            except (SerializationError, PayloadTooLarge) as exc:
                error = exc
                payload = None  # not kept while the failure commits
            else:
                if _tracing.ACTIVE is not None:
                    _tracing.attempt_ended(actor, seq, None, "completed")
                del actor.ops[seq]
                if at0 is None:
                    packed = run.record_outcome(seq, ok=payload, attempts=attempts, at1=now)
                else:
                    packed = run.record_outcome(seq, ok=payload, attempts=attempts, at0=at0, at1=now)
                actor.commit_outcome(seq, packed)
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
        if _tracing.ACTIVE is not None:
            _tracing.attempt_ended(actor, seq, error, "failed" if retry_at is None else "retrying")
        if retry_at is not None:
            ref = TimerRef(retry_at, seq, "retry")
            last_failure = {"type": failure.get("type"), "message": failure.get("message"), "traceback": failure.get("traceback")}
            started = run.record_started(
                seq, attempts=attempts, retry_at=ref.fire_at, first_at=first_at, last_error=failure["message"], last_failure=last_failure, at0=now if at0 is None else at0
            )  # ``last_failure``: for ``describe`` (``_pending``), written on the retry path only
            stale = actor.clear_timer(seq)
            actor.schedule_timer(ref)
            actor.commit(ops=((seq, started),), timers_put=(ref,), timers_del=stale)
            return
        del actor.ops[seq]
        if at0 is None:
            packed = run.record_outcome(seq, err=failure, attempts=attempts, at1=now)
        else:
            packed = run.record_outcome(seq, err=failure, attempts=attempts, at0=at0, at1=now)
        actor.commit(ops=((seq, packed),), timers_del=actor.clear_timer(seq))

    def _log_failed_attempt(self, seq: int, activity: str, attempt: int, error: BaseException, retry_in: float | None) -> None:
        """Once per attempt that failed, when it is decided (not again for the decision a
        refused commit kept): the failure, and the retry if one follows."""
        actor = self.actor
        engine_id, wf_type, wid, run_id = actor.engine.engine_id, actor.run.workflow_type, actor.wid, actor.run_id
        events.activity_attempt_failed(engine_id, wid, wf_type, run_id, seq, activity, attempt, error, timed_out=timed_out(error), final=retry_in is None)
        if retry_in is not None:
            events.activity_retry_scheduled(engine_id, wid, wf_type, run_id, seq, activity, attempt + 1, retry_in)
