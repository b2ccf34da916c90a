"""Injected time: the store and the engine never read the clock ambiently."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """``now()`` is wall time in seconds for records and claims; ``monotonic()`` for timeouts."""

    def now(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The real clock."""

    __slots__ = ()

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()
