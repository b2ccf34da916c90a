"""How an actor's run ends: complete, fail (``cancelled`` if it re-raised a cancellation),
continue as new, or park stuck on non-determinism.

Mixed into ``Actor``. Whatever the run no longer awaits is stopped on the way out (attempts
cancelled, timers deleted in the same commit), so nothing of a finished run fires later.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import PayloadTooLarge
from ..store import ContinueRun, Finish, TimerRef
from ..workflow import Command, error_record
from ._validate import new_id
from ._writes import Writes

if TYPE_CHECKING:
    from ..workflow import WorkflowRun
    from ._timers import TimerService

__all__ = ["EndingHost", "EndingMixin", "finish_of"]

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
    """What ending a run needs of the engine: the result size limit and the timers to drop."""

    @property
    def payload_limit(self) -> int: ...

    @property
    def timers(self) -> TimerService: ...


class EndingMixin:
    if not TYPE_CHECKING:  # slots for the runtime; type checkers would flag every attribute
        __slots__ = ()  # the concrete class declares them

    engine: EndingHost
    wid: str
    run: WorkflowRun
    ops: dict[int, Command]
    timers: dict[int, tuple[TimerRef, list[Any] | None]]
    attempts: dict[int, list[Any]]
    wakes: list[tuple[Any, ...]]
    writes: Writes | None
    stuck: bool
    finish: Finish | None
    next_run: tuple[str, bytes] | None

    # provided by Actor
    def _commit(self, ops: Any = (), consume: Any = (), timers_put: Any = (), timers_del: Any = (), finish: Any = None, fields: Any = None, effects: Any = ()) -> None:
        raise NotImplementedError

    def _commit_writes(self, w: Writes, finish: Any = None) -> None:
        raise NotImplementedError

    def _end(self, cmd: Command) -> None:
        """Commit the run's ending with whatever the last delivery gathered (the cancelled
        outcomes of race losers, say). Continue-as-new ends the run without a ``Finish``: its
        ``ContinueRun`` effect turns the record into the next run's in the same transaction."""
        kind = cmd.kind
        if kind == "stuck":
            self._park_stuck(cmd.error or {})
            return
        writes = self.writes
        self.writes = None
        if self.ops or self.timers or self.attempts or self.wakes:  # what it no longer awaits
            if writes is None:
                writes = Writes()
            self._stop_work(writes)
        if kind == "complete" or kind == "fail":
            finish: Finish | None = finish_of(cmd, self.engine.payload_limit)
        else:  # continue as new
            finish = None
            next_run = new_id()
            self.next_run = (next_run, cmd.payload)  # type: ignore[assignment]
            if writes is None:
                writes = Writes()
            writes.effects.append(ContinueRun(next_run, cmd.payload))  # type: ignore[arg-type]
        self.finish = finish
        if writes is None:
            self._commit(finish=finish)
        else:
            self._commit_writes(writes, finish)

    def _stop_work(self, writes: Writes | None) -> None:
        """Cancel attempts in flight and drop timers (deleting the durable ones if ``writes``)."""
        for attempt in self.attempts.values():
            if attempt[1] is not None:
                attempt[1]()
        self.attempts.clear()
        for ref, entry in self.timers.values():
            self.engine.timers.cancel(entry)
            if writes is not None:
                writes.timers_del.append(ref)
        self.timers.clear()
        self.ops.clear()
        self.wakes.clear()

    def _park_stuck(self, error: dict[str, Any]) -> None:
        self.stuck = True
        self.writes = None
        self._stop_work(None)
        log.error("workflow %s is stuck: %s", self.wid, error.get("message"))
        self._commit(fields={"nondeterminism": error.get("message")})

    def outcome_record(self) -> dict[str, Any]:
        """The finished run's ending, shaped like the stored workflow record's fields."""
        finish = self.finish
        return {"status": finish.status, "result": finish.result, "error": finish.error}  # type: ignore[union-attr]
