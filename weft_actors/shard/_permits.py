"""The permit gate: attempts of a rate- or concurrency-limited activity wait here for a permit.

A permit comes from the store (``store/_permits``), which every engine of the store shares, by
a ``TakePermits`` intent in the normal group commit: no thread, no transaction of its own. Per
activity name the gate keeps a FIFO of waiting attempts and at most one ``TakePermits`` in
flight, asking for as many permits as it has waiters (capped by what it could be granted);
granted attempts start through the ``start`` function the runner hands the gate (its
``max_inflight`` FIFO still holds), and their ``start_to_close`` starts then. An attempt waits,
never fails: denied by the rate, the gate asks again when the store says the next permit is due
(``retry_at``, on the engine's timer service, so a virtual clock skips to it); denied because
other engines hold the concurrency, it polls with a short backoff, and asks at once when an
attempt of its own ends. A cancelled waiter is just dropped (its ``cancelled`` is set); a
permit granted for one is used by the next waiter or given back.

The engine is the authority on its own count of concurrency permits (``held``): every intent
carries it and the store writes it as is, so a lost or failed write is mended by the next one
(``stored`` is what the store was last told; a difference is written back once nothing is in
flight).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Callable, Generic, Protocol, TypeVar

from .._clock import Clock
from ..errors import EngineDeposed, EngineStopped, WeftError
from ..store import HoldPermits, TakePermits
from ..workflow import ActivityDefinition
from ._committer import GroupCommitter
from ._timers import TimerService

__all__ = ["PermitGate", "Waiter"]

log = logging.getLogger("weft_actors.shard")

BACKOFF_MIN = 0.02
BACKOFF_MAX = 0.2
"""Seconds between asks while other engines hold the concurrency (doubling), or after a failed commit."""
BACKSTOP = 1.0
"""Real seconds past a rate wait's due time after which the gate asks anyway: a wall clock
that jumped back would hold the timer service's entry back by the jump (the store clamps its
side to one burst)."""


class Waiter(Protocol):
    """What the gate needs of a waiting attempt: its activity, whether it was cancelled while
    it waited, and its report and release hooks, which the gate wraps so that a concurrency
    permit is given back once. Declared here so the gate never imports the runner above it."""

    definition: ActivityDefinition
    cancelled: bool
    done: Callable[[Any, BaseException | None], None]
    release: Callable[[], None] | None


W = TypeVar("W", bound=Waiter)


class _Limit(Generic[W]):
    """One activity name's waiters and permits on this engine."""

    __slots__ = ("name", "definition", "waiting", "held", "stored", "asking", "again", "timer", "handle", "backoff")

    def __init__(self, definition: ActivityDefinition) -> None:
        self.name = definition.name
        self.definition = definition
        self.waiting: collections.deque[W] = collections.deque()
        self.held = 0
        """Concurrency permits held by this engine's attempts (started, queued for a slot, or granted)."""
        self.stored: int | None = 0
        """``held`` as the store was last told (None: unknown, a write failed)."""
        self.asking = False
        """A ``TakePermits`` (or ``HoldPermits``) is in flight: one at a time per name."""
        self.again = False
        """An attempt ended while asking: ask again once the answer is in."""
        self.timer: list[Any] | None = None
        """The timer service's entry of a rate wait."""
        self.handle: asyncio.Handle | None = None
        """The loop timer of a poll (or of a rate wait's backstop)."""
        self.backoff = BACKOFF_MIN


class PermitGate(Generic[W]):
    """Holds limited attempts until the store grants them a permit, then starts them with
    ``start`` (the runner's: it never calls it from within an actor's step)."""

    def __init__(self, start: Callable[[W], None], committer: GroupCommitter, timers: TimerService, clock: Clock) -> None:
        self._start_granted = start
        self._committer = committer
        self._timers = timers
        self._clock = clock
        self._loop = committer.loop
        self._limits: dict[str, _Limit[W]] = {}
        self.closed = False

    @property
    def waiting(self) -> int:
        """Attempts waiting for a permit (cancelled ones not yet dropped included). Read by
        every start's admission check: an app without limited activities pays one test."""
        limits = self._limits
        return sum(len(limit.waiting) for limit in limits.values()) if limits else 0

    @property
    def timed(self) -> int:
        """Of ``waiting``, those whose next ask waits for a rate permit's due time: all that a
        time-skipping clock may skip to (``testing``)."""
        return sum(len(limit.waiting) for limit in self._limits.values() if limit.timer is not None)

    def snapshot(self) -> dict[str, int]:
        """Waiting attempts by activity name (the names that have any)."""
        return {name: len(limit.waiting) for name, limit in self._limits.items() if limit.waiting}

    def admit(self, entry: W) -> None:
        """Queue ``entry`` (never started from here: see ``ActivityRunner.run``)."""
        definition = entry.definition
        limit = self._limits.get(definition.name)
        if limit is None:
            limit = self._limits[definition.name] = _Limit(definition)
        limit.definition = definition  # the latest one's limits, if two differ
        limit.waiting.append(entry)
        if not self._ask(limit):
            self._sync(limit)

    def close(self) -> None:
        """Drop every waiter and timer; ask and write nothing more (the engine stops: its
        entries in the store count for nothing once it is not live)."""
        self.closed = True
        for limit in self._limits.values():
            self._unwait(limit)
            limit.waiting.clear()
        self._limits.clear()

    # -- asking -------------------------------------------------------------------------------

    def _ask(self, limit: _Limit[W]) -> bool:
        """Send one ``TakePermits`` for ``limit``'s waiters, unless one is in flight, a wait is
        armed, or nothing could be granted. True if it was sent."""
        if self.closed or limit.asking or limit.timer is not None or limit.handle is not None:
            return False
        waiting = limit.waiting
        while waiting and waiting[0].cancelled:
            waiting.popleft()
        if not waiting:
            return False
        definition = limit.definition
        wanted = len(waiting)
        if definition.concurrency is not None:
            wanted = min(wanted, definition.concurrency - limit.held)
            if wanted <= 0:
                return False  # its own attempts hold them all: a release asks again
        # Not capped by the burst: asking for more than the rate allows brings back when the
        # next permit is due in the same commit, instead of in a second one.
        limit.asking = True
        held = limit.held
        intent = TakePermits(limit.name, held, wanted, definition.rate_interval, definition.burst, definition.concurrency)
        self._committer.submit(intent, lambda result: self._answered(limit, held, wanted, result))
        return True

    def _answered(self, limit: _Limit[W], held: int, wanted: int, result: Any) -> None:
        """``TakePermits`` committed (or failed): start the granted waiters, then decide when
        to ask next. ``asking`` stays set while they start: an attempt that ends at once gives
        its permit back by setting ``again``, not by asking from inside this loop."""
        if self.closed:
            return
        if isinstance(result, WeftError):
            limit.asking = limit.again = False
            limit.stored = None
            self._failed(limit, result)
            return
        granted, retry_at = result
        concurrency = limit.definition.concurrency
        if concurrency is not None:
            limit.stored = held + granted
            limit.held += granted
        if granted:
            limit.backoff = BACKOFF_MIN
        spare = granted
        waiting = limit.waiting
        while spare and waiting:
            entry = waiting.popleft()
            if not entry.cancelled:
                spare -= 1
                self._start(limit, entry)
        if spare and concurrency is not None:
            limit.held -= spare  # granted for waiters cancelled meanwhile: given back
        limit.asking = False
        again, limit.again = limit.again, False
        while waiting and waiting[0].cancelled:
            waiting.popleft()
        if waiting and not self.closed:
            if retry_at is not None:  # the rate held it back: nothing is due before retry_at
                self._wait_until(limit, retry_at)
                return
            if granted < wanted and not again:  # other engines hold the concurrency
                self._poll(limit)
                return
        if not self._ask(limit):
            self._sync(limit)

    def _failed(self, limit: _Limit[W], error: WeftError) -> None:
        if isinstance(error, (EngineDeposed, EngineStopped)):
            return  # the engine stops: nothing more to ask or write
        log.warning("permits of activity %r: commit failed, retrying: %s", limit.name, error)
        self._poll(limit)

    def _sync(self, limit: _Limit[W]) -> None:
        """Tell the store this engine's count if it differs from what it was last told."""
        if self.closed or limit.asking or limit.definition.concurrency is None or limit.stored == limit.held:
            return
        limit.stored = limit.held
        limit.asking = True

        def written(result: Any) -> None:
            limit.asking = False
            limit.again = False
            if isinstance(result, WeftError):
                limit.stored = None
                if not self.closed:
                    self._failed(limit, result)
            elif not self._ask(limit):
                self._sync(limit)

        self._committer.submit(HoldPermits(limit.name, limit.held), written)

    # -- waiting ------------------------------------------------------------------------------

    def _wait_until(self, limit: _Limit[W], at: float) -> None:
        """Ask again at ``at`` (wall time of the engine's clock), or ``BACKSTOP`` real seconds
        after it is due by the clock now, whichever comes first."""
        limit.timer = self._timers.add(at, self._wake, limit)
        limit.handle = self._loop.call_later(max(0.0, at - self._clock.now()) + BACKSTOP, self._wake, limit)

    def _poll(self, limit: _Limit[W]) -> None:
        delay = limit.backoff
        limit.backoff = min(2 * delay, BACKOFF_MAX)
        limit.handle = self._loop.call_later(delay, self._wake, limit)

    def _unwait(self, limit: _Limit[W]) -> None:
        self._timers.cancel(limit.timer)
        limit.timer = None
        if limit.handle is not None:
            limit.handle.cancel()
            limit.handle = None

    def _wake(self, limit: _Limit[W]) -> None:
        self._unwait(limit)
        if not self._ask(limit):
            self._sync(limit)

    # -- running ------------------------------------------------------------------------------

    def _start(self, limit: _Limit[W], entry: W) -> None:
        """Start a waiter that was granted a permit. A concurrency permit is given back once,
        when the attempt reports or is cancelled, wherever it is by then."""
        if limit.definition.concurrency is not None:
            entry.release = self._releaser(limit)
            report = entry.done

            def done(value: Any, error: BaseException | None) -> None:
                try:
                    report(value, error)
                finally:
                    release = entry.release
                    if release is not None:
                        entry.release = None
                        release()

            entry.done = done
        self._start_granted(entry)

    def _releaser(self, limit: _Limit[W]) -> Callable[[], None]:
        def release() -> None:
            limit.held -= 1
            if self.closed:
                return
            if limit.asking:
                limit.again = True
                return
            if limit.handle is not None and limit.timer is None:  # a poll: no need to wait for it
                self._unwait(limit)
            if not self._ask(limit):
                self._sync(limit)

        return release
