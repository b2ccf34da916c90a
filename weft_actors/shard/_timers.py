"""In-memory timer heap on the injected clock; one loop handle armed for the earliest entry.

A cancelled entry stays in the heap until its time comes (removing it from the middle of a
heap costs a scan), but drops what it refers to at once: the callback and its arguments (an
actor, with its run and history) are freed when the timer is cancelled, not when it would
have fired. When cancelled entries are most of the heap it is rebuilt without them, so a
heap of far-off timeouts that are nearly always cancelled stays the size of the live ones.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any, Callable

from .._clock import Clock

__all__ = ["TimerService"]

COMPACT_MIN = 64
"""Cancelled entries tolerated in the heap before it may be rebuilt without them."""


class TimerService:
    """Fires callbacks when ``clock.now()`` reaches their time. With a fake clock call
    ``poke()`` after advancing it; with the real clock the loop's timer suffices."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        self._loop = loop
        self._clock = clock
        self._heap: list[list[Any]] = []
        self._counter = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._armed_at: float | None = None
        self._cancelled = 0
        """Entries in the heap that were cancelled (and hold nothing any more)."""
        self.closed = False

    def __len__(self) -> int:
        """The timers armed and not cancelled."""
        return len(self._heap) - self._cancelled

    @property
    def heap_size(self) -> int:
        """Entries in the heap, cancelled ones included."""
        return len(self._heap)

    def add(self, fire_at: float, callback: Callable[..., None], *args: Any) -> list[Any]:
        entry = [fire_at, next(self._counter), callback, args]
        heapq.heappush(self._heap, entry)
        if self._armed_at is None or fire_at < self._armed_at:
            self._arm()
        return entry

    def cancel(self, entry: list[Any] | None) -> None:
        """Cancel ``entry`` (None, fired or cancelled already: nothing to do)."""
        if entry is None or entry[2] is None:
            return
        entry[2] = None
        entry[3] = ()
        self._cancelled += 1
        if self._cancelled > COMPACT_MIN and 2 * self._cancelled > len(self._heap):
            self._heap = [live for live in self._heap if live[2] is not None]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def poke(self) -> None:
        self._fire()

    def next_fire(self) -> float | None:
        """The time of the earliest timer still armed, or None (a time-skipping clock's next
        stop). Cancelled entries at the top are dropped on the way."""
        heap = self._heap
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
            self._cancelled -= 1
        return heap[0][0] if heap else None

    def close(self) -> None:
        self.closed = True
        if self._handle is not None:
            self._handle.cancel()
        self._heap.clear()
        self._cancelled = 0

    def _arm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._armed_at = None
        if not self._heap or self.closed:
            return
        fire_at = self._heap[0][0]
        delay = max(0.0, fire_at - self._clock.now())
        self._armed_at = fire_at
        self._handle = self._loop.call_later(min(delay, 3600.0), self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed_at = None
        now = self._clock.now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            callback = entry[2]
            if callback is None:
                self._cancelled -= 1
                continue
            args = entry[3]
            entry[2] = None  # fired: a later cancel of it does nothing
            entry[3] = ()
            callback(*args)
            heap = self._heap  # a callback's cancel may have rebuilt it
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
            self._cancelled -= 1
        self._arm()
