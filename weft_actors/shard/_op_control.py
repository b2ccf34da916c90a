"""How an actor starts and stops its ops other than activity attempts (``Attempts`` runs
those): the durable timers of a sleep, a timed wait and a retry's wait, and what a timer's
firing records; the ops resolved at once (``now``, ``random``, ``uuid4``, ``patch``); and
cancelling any op.

``OpControl`` is a part its actor holds, made the first time the run needs one of these (a
run of activities alone never does), and knows its actor only by ``ControlOwner``. It keeps
nothing of its own: the timer table stays on the actor, which the engine reads.
"""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from ..codec import encode
from ..store import CancelOther, TimerRef
from ..workflow import Command, cancelled_record
from ._attempts import NO_TABLE

if TYPE_CHECKING:
    from .._clock import Clock
    from ..workflow import WorkflowRun
    from ._inbox import Inbox
    from ._timers import TimerService
    from ._writes import Writes

__all__ = ["ControlHost", "ControlOwner", "OpControl"]

_ENCODED_NONE = encode(None)
_ENCODED_TRUE = encode(True)


class ControlHost(Protocol):
    """What starting and stopping ops needs of the engine: the clock for records, and the
    timers."""

    @property
    def clock(self) -> Clock: ...

    @property
    def timers(self) -> TimerService: ...


class ControlOwner(Protocol):
    """What it needs of its actor: its run, its ops, timers and attempts in flight, its
    inbox (a cancelled child is awaited no more), the writes of the delivery under way, and
    ``on_timer`` (called as a plain function with the actor: a heap entry keeps no bound
    method)."""

    @property
    def engine(self) -> ControlHost: ...

    @property
    def run(self) -> WorkflowRun: ...

    @property
    def ops(self) -> dict[int, Command]: ...

    @property
    def inbox(self) -> Inbox | None: ...

    timers: dict[int, tuple[TimerRef, list[Any] | None]]
    attempts: dict[int, list[Any]]

    def on_timer(self, seq: int) -> None: ...

    def pending_writes(self) -> Writes: ...

    def commit(self, ops: tuple[tuple[int, bytes], ...] = (), consume: tuple[int, ...] = (), timers_put: tuple[TimerRef, ...] = (), timers_del: tuple[TimerRef, ...] = ()) -> None: ...


class OpControl:
    """Starts, times and stops one actor's ops other than activity attempts."""

    __slots__ = ("actor",)

    def __init__(self, actor: ControlOwner) -> None:
        self.actor = actor

    def start_timer(self, cmd: Command, delay: float) -> None:
        """The timer of a sleep or a timed wait: recorded and put in this delivery's writes
        when new, else scheduled again from its record (replay)."""
        actor = self.actor
        seq, kind = cmd.seq, cmd.op.kind  # type: ignore[union-attr]
        fire_at = cmd.record.get("fire_at") if cmd.record is not None else None
        if fire_at is None:
            now = actor.engine.clock.now()
            ref = TimerRef(now + delay, seq, kind)
            self.schedule_timer(ref)
            writes = actor.pending_writes()
            writes.ops.append((seq, actor.run.record_started(seq, fire_at=ref.fire_at, at0=now)))
            writes.timers_put.append(ref)
        else:
            self.schedule_timer(TimerRef(fire_at, seq, kind))

    def schedule_timer(self, ref: TimerRef) -> None:
        actor = self.actor
        timers = actor.timers
        old = timers.get(ref.seq)
        if old is not None:
            actor.engine.timers.cancel(old[1])
        elif timers is NO_TABLE:
            timers = actor.timers = {}
        # The plain function, not a bound method: the heap entry keeps no extra object.
        timers[ref.seq] = (ref, actor.engine.timers.add(ref.fire_at, type(actor).on_timer, actor, ref.seq))

    def clear_timer(self, seq: int, record: dict[str, Any] | None = None) -> tuple[TimerRef, ...]:
        """Drop ``seq``'s timer; the durable one to delete (from ``record`` if not in memory)."""
        actor = self.actor
        timers = actor.timers
        timer = timers.pop(seq, None)
        if timer is not None:
            if not timers:
                actor.timers = NO_TABLE
            actor.engine.timers.cancel(timer[1])
            return (timer[0],)
        if record is not None:
            at = record.get("fire_at") or record.get("retry_at")
            if at is not None and "t" not in record:
                return (TimerRef(at, seq, record.get("kind", "")),)
        return ()

    def fired(self, cmd: Command) -> None:
        """Record what the timer of ``cmd`` (a sleep or a timed wait) came to, in a commit."""
        actor = self.actor
        seq = cmd.seq
        op = cmd.op
        kind = op.kind  # type: ignore[union-attr]
        now = actor.engine.clock.now()
        timers = self.clear_timer(seq)
        del actor.ops[seq]
        if kind == "sleep":
            record = actor.run.record_outcome(seq, ok=_ENCODED_NONE, at1=now)
        else:
            what = f"no signal {op.name!r}" if kind == "signal" else "condition not met"  # type: ignore[union-attr]
            record = actor.run.record_outcome(seq, err={"kind": "timeout", "type": "TimeoutError", "message": f"{what} in time"}, at1=now)
        actor.commit(ops=((seq, record),), timers_del=timers)

    def cancel_op(self, seq: int, kind: str, record: dict[str, Any] | None, error: dict[str, Any] | None, inbox_seq: int | None = None) -> None:
        """Stop op ``seq`` (its attempt, timer, child) and record its cancelled outcome."""
        actor = self.actor
        actor.ops.pop(seq, None)
        attempt = actor.attempts.pop(seq, None)
        if attempt is not None:
            if not actor.attempts:
                actor.attempts = NO_TABLE
            if attempt[1] is not None:
                attempt[1]()
        writes = actor.pending_writes()
        writes.timers_del.extend(self.clear_timer(seq, record))
        run = actor.run
        if kind == "child":  # a start_child op never waits: it is never cancelled
            child_id = (record or run.history.get(seq) or {}).get("child_id")
            if child_id is not None:
                inbox = actor.inbox
                if inbox is not None and inbox.children:
                    inbox.children.pop(child_id, None)
                writes.effects.append(CancelOther(child_id))
        error = error or cancelled_record("cancelled")
        now = actor.engine.clock.now()
        if inbox_seq is None:
            packed = run.record_outcome(seq, err=error, at1=now)
        else:  # the cancel request's message is consumed by (recorded on) one op only
            packed = run.record_outcome(seq, err=error, inbox=inbox_seq, at1=now)
        writes.ops.append((seq, packed))

    def value_outcome(self, cmd: Command) -> None:
        """An op resolved at once (``now``, ``random``, ``uuid4``, ``patch``): its outcome goes
        into this delivery's writes."""
        actor = self.actor
        kind = cmd.op.kind  # type: ignore[union-attr]
        now = actor.engine.clock.now()
        if kind == "now":
            payload = encode(datetime.fromtimestamp(now, timezone.utc))
        elif kind == "random":
            payload = encode(random.random())
        elif kind == "patch":
            payload = _ENCODED_TRUE
        else:
            payload = encode(uuid.uuid4())
        seq = cmd.seq
        del actor.ops[seq]
        actor.pending_writes().ops.append((seq, actor.run.record_outcome(seq, ok=payload, at1=now)))
