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
from typing import Final

from ..._clock import Clock, SystemClock

__all__ = ["ServerClock", "SHARP"]

SHARP: Final = 0.05
"""Seconds of round trip within which a reading of the server's clock is taken as it is (its
midpoint at most 25 ms off): a loopback or LAN round trip is a millisecond or less."""


class ServerClock:
    """``lease_clock`` names the database cluster (its system identifier), so a record from
    another cluster (a restored copy) is never judged by this one's readings."""

    __slots__ = ("lease_clock", "_offset", "_host")

    def __init__(self, cluster: str, server_now: float, sent_at: float, received_at: float, host: Clock | None = None) -> None:
        self.lease_clock = f"postgresql:{cluster}"
        self._offset = server_now - (sent_at + received_at) / 2
        self._host: Clock = host or SystemClock()
        """Wall and monotonic time come from here: the host's (the engine's clock)."""

    def observe(self, server_now: float, sent_at: float, received_at: float) -> None:
        """A server reading taken between the local monotonic times ``sent_at`` and ``received_at``.

        A round trip within ``SHARP`` is taken at its midpoint. A slower one (held by a network
        cut, a queue, a stalled server) says only that the reading was taken somewhere in it:
        the offset lies between ``server_now - received_at`` and ``server_now - sent_at``. Its
        midpoint would be off by up to half the delay -- after a 2 s cut, a lease clock a second
        ahead, which judges this engine's own lease and its peers' lapsed early -- so the current
        estimate is kept if it fits that range, else moved to its nearest end."""
        if received_at - sent_at <= SHARP:
            self._offset = server_now - (sent_at + received_at) / 2
        else:
            self._offset = min(max(self._offset, server_now - received_at), server_now - sent_at)

    def now(self) -> float:
        return self._host.now()

    def monotonic(self) -> float:
        return self._host.monotonic()

    def lease_now(self) -> float:
        return time.monotonic() + self._offset
