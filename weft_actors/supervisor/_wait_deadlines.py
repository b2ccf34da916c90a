"""The ``wait`` of the calls a shard serves inline: one loop timer per distinct wait, not one
per call.

An ``execute`` or a ``result`` served without a task (``_inline_requests``) waits at most its
``wait`` for its run to end. Clients send the same wait again and again (``execute``'s
default), and calls of one wait expire in the order they began: so they queue in a deque per
wait value, and one timer, set for its oldest live call, serves the whole queue. A call that
ends before its wait leaves a mark (``done``) and is dropped when it reaches the head, or
when the marks outnumber the live calls (a long call at the head must not keep every ended
one behind it for a whole wait). ``call_later`` and ``cancel`` per call cost a shard ~2.5 µs
of ~110 per workflow.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Protocol

__all__ = ["Expiring", "WaitDeadlines"]

log = logging.getLogger("weft_actors.supervisor")

COMPACT_SLACK = 256
"""Ended calls a queue may hold besides twice its live ones before it is swept."""


class Expiring(Protocol):
    """A waiting call: ``expired()`` once its ``deadline`` (loop time) passes unless it ended."""

    deadline: float

    def expired(self) -> None: ...


class _Queue:
    """The calls of one ``wait``, oldest first, and the timer of the oldest live one."""

    __slots__ = ("wait", "calls", "live", "timer")

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.calls: deque[_Entry] = deque()
        self.live = 0
        self.timer: asyncio.TimerHandle | None = None


class _Entry:
    """One call's place in its queue. Its ``call`` is let go once it has ended or expired: the
    call holds its token (this entry), and that cycle would otherwise outlive every workflow
    until the collector's rare full pass, which then stalls the shard for the lot."""

    __slots__ = ("call", "queue", "done")

    def __init__(self, call: Expiring, queue: _Queue) -> None:
        self.call: Expiring | None = call
        self.queue = queue
        self.done = False


class WaitDeadlines:
    """``add`` a waiting call with its ``wait``; ``ended`` the token it returned once the call
    has its answer. ``expired()`` is called on each call whose wait ran out first, on the loop,
    in the order the calls began."""

    __slots__ = ("_loop", "_queues")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queues: dict[float, _Queue] = {}

    def add(self, call: Expiring, wait: float) -> object:
        """Start ``call``'s wait now: its ``deadline`` is set here; returns its token."""
        loop = self._loop
        call.deadline = loop.time() + wait
        queue = self._queues.get(wait)
        if queue is None:
            queue = self._queues[wait] = _Queue(wait)
        entry = _Entry(call, queue)
        queue.calls.append(entry)
        queue.live += 1
        if queue.timer is None:
            queue.timer = loop.call_at(call.deadline, self._fire, queue)
        return entry

    def ended(self, token: object) -> None:
        """The call of ``token`` has its answer: it will not expire."""
        entry: _Entry = token  # type: ignore[assignment]
        if entry.done:
            return
        entry.done = True
        entry.call = None
        queue = entry.queue
        queue.live -= 1
        calls = queue.calls
        while calls and calls[0].done:
            calls.popleft()
        if not calls:
            self._idle(queue)
        elif len(calls) > 2 * queue.live + COMPACT_SLACK:
            queue.calls = deque(entry for entry in calls if not entry.done)

    def _fire(self, queue: _Queue) -> None:
        queue.timer = None
        now = self._loop.time()
        while queue.calls and (queue.calls[0].done or queue.calls[0].call.deadline <= now):  # type: ignore[union-attr]
            entry = queue.calls.popleft()
            if entry.done:
                continue
            call, entry.call = entry.call, None
            entry.done = True
            queue.live -= 1
            try:
                call.expired()  # type: ignore[union-attr]
            except Exception:
                log.exception("a call's wait could not run out")
        if not queue.calls:
            self._idle(queue)
        elif queue.timer is None:
            queue.timer = self._loop.call_at(queue.calls[0].call.deadline, self._fire, queue)  # type: ignore[union-attr]

    def _idle(self, queue: _Queue) -> None:
        """An empty queue goes, its timer cancelled: waits come in any number of values."""
        if queue.timer is not None:
            queue.timer.cancel()
            queue.timer = None
        if self._queues.get(queue.wait) is queue:
            del self._queues[queue.wait]

    def __len__(self) -> int:
        """Calls still waiting."""
        return sum(queue.live for queue in self._queues.values())

    def backlog(self) -> int:
        """Entries held, ended calls not swept yet included: at most about twice the calls
        still waiting (``COMPACT_SLACK`` more), however long the oldest one waits."""
        return sum(len(queue.calls) for queue in self._queues.values())

    def timers(self) -> int:
        """Loop timers set: one per wait value that has calls waiting."""
        return sum(queue.timer is not None for queue in self._queues.values())
