"""Helpers for testing code that uses weft_actors."""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that moves only when told to; pass it as ``Engine(..., clock=FakeClock())``.

    ``advance`` moves every kind of time together; ``jump`` moves the wall clock alone, either
    way, as NTP or an operator would (leases, judged by ``lease_now()``, do not see it)."""

    lease_clock = "fake"

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._mono = 1000.0
        self._lease = start
        """Starts at the wall time: until a jump, a lease reading equals the wall reading."""

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def lease_now(self) -> float:
        return self._lease

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._now += seconds
        self._mono += seconds
        self._lease += seconds

    def jump(self, seconds: float) -> None:
        """Move the wall clock alone by ``seconds`` (negative: back)."""
        self._now += seconds
