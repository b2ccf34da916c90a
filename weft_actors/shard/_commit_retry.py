"""When a workflow's step could not be committed: back off before driving it again.

A refused step drops its actor, and driving the workflow again replays it from the store and
redoes whatever the refused commit would have recorded (an activity's outcome it carried is
kept and taken, not run again: ``_reuse``). Re-driven on
every reclaim pass (as it once was), a store within its reserve ran one activity 31 times in
3 s. So each workflow waits before it is driven again -- one heartbeat after its first
refusal, doubling per refusal in a row up to ``MAX_BACKOFF`` -- and a step refused for lack
of room (``StorageFull``) is not driven again at all while the store is still within its
reserve: it waits, probing the store once per heartbeat (a few microseconds), and goes the
moment room is back.

A batch answered ``OutcomeUnknown`` (its commit may yet land: ``store._pg._outcome``) is
the same case for every workflow it would have started and claimed here (``may_have_landed``):
a start, a signal-with-start, a delayed start firing, a child started by a step. Its caller was
told it failed and no actor was made, so if it landed nothing else would ever drive it (it is
held by a live engine: no reclaim takes it). Each is driven again the same way; the reclaim
pass reads the store first, which waits for that outcome, and finds the workflow held here
(driven from the store) or not there at all (nothing happens).

In memory only: a restart or a takeover drives the workflow at once, as any recovery does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._ratelimit import RateLimitedLog
from ..errors import StorageFull, WeftError
from ..store import CreateChild, CreateWorkflow, FireStart, SignalWithStart, StepCommit

if TYPE_CHECKING:
    from ..store import LmdbStore
    from ._committer import GroupCommitter

__all__ = ["CommitRetry", "MAX_BACKOFF", "started_by"]

log = logging.getLogger("weft_actors.shard")
_REFUSALS = RateLimitedLog(log)
"""A full disk refuses every workflow's step: one line per interval, with a count."""

MAX_BACKOFF: Final = 30.0
"""Seconds between two drives of a workflow whose steps keep being refused, at most."""


class RetryHost(Protocol):
    """What the retries need of their engine: its loop (through the committer), its heartbeat
    (the unit of backoff), whether it runs, the orphan set the reclaim pass drives, and the
    store to probe for room."""

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def heartbeat(self) -> float: ...

    @property
    def state(self) -> str: ...

    @property
    def orphans(self) -> set[str]: ...

    @property
    def store(self) -> LmdbStore: ...


class CommitRetry:
    """Per workflow: refusals in a row and the timer of its next drive."""

    __slots__ = ("_engine", "_failures", "_last", "_handles", "_probe")

    def __init__(self, engine: RetryHost) -> None:
        self._engine = engine
        self._failures: dict[str, int] = {}
        self._last: dict[str, float] = {}
        self._handles: dict[str, asyncio.TimerHandle] = {}
        self._probe: tuple[float, bool] = (-1.0, False)

    def refused(self, wid: str, error: WeftError) -> None:
        """``wid``'s step was refused with ``error`` (its actor is dropped): drive it again
        after its backoff, and for ``StorageFull`` only once the store has room."""
        engine = self._engine
        loop = engine.committer.loop
        now = loop.time()
        if len(self._last) > 4096:  # forget workflows whose last refusal is long past
            for stale in [w for w, at in self._last.items() if now - at > 2 * MAX_BACKOFF and w not in self._handles]:
                del self._last[stale]
                self._failures.pop(stale, None)
        last = self._last.get(wid)
        failures = 1 if last is None or now - last > 2 * MAX_BACKOFF else self._failures.get(wid, 0) + 1
        self._failures[wid] = failures
        self._last[wid] = now
        delay = min(engine.heartbeat * 2 ** min(failures - 1, 30), MAX_BACKOFF)
        _REFUSALS.warning("refused", "workflow %s: step refused (%s), %d in a row; driven again in %.2fs", wid, error, failures, delay)
        self._schedule(wid, delay, isinstance(error, StorageFull))

    def may_have_landed(self, intents: list[Any], error: WeftError) -> None:
        """A batch of ``intents`` was answered ``error`` (``OutcomeUnknown``), and may yet be
        committed: drive each workflow it would have started here again after one heartbeat,
        as a refused step is. Its steps' own actors go by ``refused`` already."""
        wids = started_by(intents)
        if not wids:
            return
        log.warning(
            "%d workflows started by a batch of unknown outcome (%s) are driven again here if it landed: %s",
            len(wids), error, ", ".join(wids[:5]) + (", ..." if len(wids) > 5 else ""),
        )
        delay = self._engine.heartbeat
        for wid in wids:
            self._schedule(wid, delay, False)

    def _schedule(self, wid: str, delay: float, needs_room: bool) -> None:
        old = self._handles.pop(wid, None)
        if old is not None:
            old.cancel()
        self._handles[wid] = self._engine.committer.loop.call_later(delay, self._due, wid, needs_room)

    def _due(self, wid: str, needs_room: bool) -> None:
        self._handles.pop(wid, None)
        engine = self._engine
        if engine.state != "running":
            return
        if needs_room and not self._has_room():
            self._schedule(wid, engine.heartbeat, True)  # wait for room: nothing is re-run
            return
        engine.orphans.add(wid)  # the next reclaim pass drives it (checking it is still ours)

    def _has_room(self) -> bool:
        """Whether the store is out of its reserve; one probe per loop tick at most."""
        loop = self._engine.committer.loop
        at, room = self._probe
        now = loop.time()
        if now - at > 0.01:
            try:
                room = not self._engine.store.within_reserve()
            except Exception:
                room = True  # the drive's own commit is the backstop
            self._probe = (now, room)
        return room

    @property
    def waiting(self) -> int:
        return len(self._handles)

    def clear(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        self._failures.clear()
        self._last.clear()


def started_by(intents: list[Any]) -> list[str]:
    """The workflows ``intents`` would create or start claimed by the committing engine: a
    start or a signal-with-start (a delayed one is only pending: nothing is claimed, and the
    drive finds no holder), a delayed start firing, a child whose type this engine runs."""
    wids: list[str] = []
    for intent in intents:
        kind = intent.__class__
        if kind is CreateWorkflow or kind is FireStart:
            wids.append(intent.wid)
        elif kind is SignalWithStart:
            wids.append(intent.create.wid)
        elif kind is StepCommit:
            wids.extend(effect.create.wid for effect in intent.effects if effect.__class__ is CreateChild and effect.claim)
    return list(dict.fromkeys(wids))
