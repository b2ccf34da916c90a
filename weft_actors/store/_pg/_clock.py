"""Leases on the database's clock: hosts with skewed clocks never depose each other early.

``ServerClock.lease_now()`` is the server's ``clock_timestamp()`` carried forward on this
host's monotonic clock from the latest reading. Every write transaction reads the server's
clock in the statement that takes the store's write lock (no extra round trip) and hands it to
``observe``, so the lease judgments made holding the lock use a reading at most one round trip
old; between transactions the estimate drifts only as fast as two oscillators disagree.
Wall time (``now()``: records, timers) stays the host's, as on LMDB.
"""

from __future__ import annotations

import time

from ..._clock import Clock, SystemClock

__all__ = ["ServerClock"]


class ServerClock:
    """``lease_clock`` names the database cluster (its system identifier), so a record from
    another cluster (a restored copy) is never judged by this one's readings."""

    __slots__ = ("lease_clock", "_offset", "_host")

    def __init__(self, cluster: str, server_now: float, sent_at: float, received_at: float, host: Clock | None = None) -> None:
        self.lease_clock = f"postgresql:{cluster}"
        self._offset = 0.0
        self._host: Clock = host or SystemClock()
        """Wall and monotonic time come from here: the host's (the engine's clock)."""
        self.observe(server_now, sent_at, received_at)

    def observe(self, server_now: float, sent_at: float, received_at: float) -> None:
        """A server reading taken between the local monotonic times ``sent_at`` and ``received_at``."""
        self._offset = server_now - (sent_at + received_at) / 2

    def now(self) -> float:
        return self._host.now()

    def monotonic(self) -> float:
        return self._host.monotonic()

    def lease_now(self) -> float:
        return time.monotonic() + self._offset
