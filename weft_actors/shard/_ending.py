"""How an actor's run ends: complete, fail (``cancelled`` if it re-raised a cancellation),
continue as new, or park stuck on non-determinism.

``Ending`` is a part its actor holds, made when the run ends or the actor closes, and knows
its actor only by ``EndingOwner``. Whatever the run no longer awaits is stopped on the way
out (attempts cancelled, timers deleted in the same commit), so nothing of a finished run
fires later.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import PayloadTooLarge
from ..store import STUCK, ContinueRun, Finish, TimerRef
from ..workflow import Command, error_record
from ._call_replies import reply_at_ending
from ._validate import new_id
from ._writes import Writes

if TYPE_CHECKING:
    from ._committer import GroupCommitter
    from ._timers import TimerService
    from ._waiters import Waiters

__all__ = ["EndingHost", "EndingOwner", "Ending", "finish_of"]

log = logging.getLogger("weft_actors.shard")


def finish_of(cmd: Command, limit: int) -> Finish:
    """The terminal transition of a ``complete`` or ``fail`` command (``cancelled`` when the
    run re-raised a cancellation). A result over ``limit`` bytes fails the run with
    ``PayloadTooLarge`` instead: stored, it would be served whole to every caller."""
    if cmd.kind == "complete":
        payload = cmd.payload
        if payload is not None and len(payload) > limit:
            too_large = PayloadTooLarge(f"workflow result is {len(payload)} bytes; the limit is {limit}", size=len(payload), limit=limit)
            return Finish("failed", None, error_record(too_large))
        return Finish("completed", payload, None)
    error = cmd.error or {}
    return Finish("cancelled" if error.get("kind") == "cancelled" else "failed", None, error)


class EndingHost(Protocol):
    """What ending a run needs of the engine: the result size limit, the timers to drop, and
    the calls waiting for the ending with a reply (given in the ending commit's pass)."""

    @property
    def payload_limit(self) -> int: ...

    @property
    def timers(self) -> TimerService: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def waiters(self) -> Waiters: ...


class EndingOwner(Protocol):
    """What ending needs of its actor: the tables of its work in flight (to stop it), the
    writes gathered so far, where the ending is noted (``finish``, ``next_run``, ``stuck``,
    which the engine reads) and the commit it goes out in."""

    @property
    def engine(self) -> EndingHost: ...

    @property
    def wid(self) -> str: ...

    @property
    def ops(self) -> dict[int, Command]: ...

    @property
    def timers(self) -> dict[int, tuple[TimerRef, list[Any] | None]]: ...

    @property
    def attempts(self) -> dict[int, list[Any]]: ...

    @property
    def wakes(self) -> list[tuple[Any, ...]]: ...

    writes: Writes | None
    stuck: bool
    finish: Finish | None
    next_run: tuple[str, bytes] | None

    def commit(self, *, finish: Finish | None = None, fields: dict[str, Any] | None = None) -> None: ...

    def commit_writes(self, w: Writes, finish: Finish | None = None) -> None: ...


class Ending:
    """How one actor's run ends, and how its work in flight is stopped."""

    __slots__ = ("actor",)

    def __init__(self, actor: EndingOwner) -> None:
        self.actor = actor

    def end(self, cmd: Command) -> None:
        """Commit the run's ending with whatever the last delivery gathered (the cancelled
        outcomes of race losers, say). Continue-as-new ends the run without a ``Finish``: its
        ``ContinueRun`` effect turns the record into the next run's in the same transaction."""
        kind = cmd.kind
        if kind == "stuck":
            self._park_stuck(cmd.error or {})
            return
        actor = self.actor
        writes = actor.writes
        actor.writes = None
        if actor.ops or actor.timers or actor.attempts or actor.wakes:  # what it no longer awaits
            if writes is None:
                writes = Writes()
            self.stop_work(writes)
        if kind == "complete" or kind == "fail":
            finish: Finish | None = finish_of(cmd, actor.engine.payload_limit)
        else:  # continue as new
            finish = None
            next_run = new_id()
            actor.next_run = (next_run, cmd.payload)  # type: ignore[assignment]
            if writes is None:
                writes = Writes()
            writes.effects.append(ContinueRun(next_run, cmd.payload))  # type: ignore[arg-type]
        actor.finish = finish
        if writes is None:
            actor.commit(finish=finish)
        else:
            actor.commit_writes(writes, finish)
        if finish is not None:
            engine = actor.engine
            reply_at_ending(engine.committer, engine.waiters, actor.wid)

    def stop_work(self, writes: Writes | None) -> None:
        """Cancel attempts in flight and drop timers (deleting the durable ones if ``writes``)."""
        actor = self.actor
        attempts = actor.attempts
        for attempt in attempts.values():
            if attempt[1] is not None:
                attempt[1]()
        attempts.clear()
        timers = actor.timers
        for ref, entry in timers.values():
            actor.engine.timers.cancel(entry)
            if writes is not None:
                writes.timers_del.append(ref)
        timers.clear()
        actor.ops.clear()
        actor.wakes.clear()

    def _park_stuck(self, error: dict[str, Any]) -> None:
        actor = self.actor
        actor.stuck = True
        actor.writes = None
        self.stop_work(None)
        log.error("workflow %s is stuck: %s", actor.wid, error.get("message"))
        actor.commit(fields={"nondeterminism": error.get("message"), "status": STUCK})
