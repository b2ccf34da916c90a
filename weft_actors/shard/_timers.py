"""In-memory timer heap on the injected clock; one loop handle armed for the earliest entry."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Any, Callable

from .._clock import Clock

__all__ = ["TimerService"]


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
        self.closed = False

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, fire_at: float, callback: Callable[..., None], *args: Any) -> list[Any]:
        entry = [fire_at, next(self._counter), callback, args]
        heapq.heappush(self._heap, entry)
        if self._armed_at is None or fire_at < self._armed_at:
            self._arm()
        return entry

    @staticmethod
    def cancel(entry: list[Any] | None) -> None:
        if entry is not None:
            entry[2] = None

    def poke(self) -> None:
        self._fire()

    def close(self) -> None:
        self.closed = True
        if self._handle is not None:
            self._handle.cancel()
        self._heap.clear()

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
            _, _, callback, args = heapq.heappop(heap)
            if callback is not None:
                callback(*args)
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
        self._arm()
