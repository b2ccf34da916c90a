"""Helpers for testing code that uses weft_actors."""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that moves only when told to; pass it as ``Engine(..., clock=FakeClock())``."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = 1000.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._now += seconds
        self._mono += seconds
