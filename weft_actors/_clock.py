"""Injected time: the store and the engine never read the clock ambiently.

Two kinds of time. ``now()`` is wall time: what users see (timers, ``ctx.now()``, record
timestamps), and it may jump (NTP, an operator, a resumed VM). ``lease_now()`` judges engine
leases: a clock that only moves forward and that every process on the machine shares, so a
jump of the wall clock cannot expire every engine at once. On Linux it is ``CLOCK_BOOTTIME``
(``CLOCK_MONOTONIC`` plus time suspended: a machine that slept past a ttl has lost its
leases); its readings mean nothing on another boot, so each lease record names its clock
(``lease_clock``) with the boot id, and a record of another boot is of a process long gone.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "system_lease_clock"]


class Clock(Protocol):
    """``now()``: wall time in seconds, for records, timers and claims; ``monotonic()``: for
    timeouts in this process; ``lease_now()``: for engine leases, shared by the processes on
    one machine and blind to wall-clock jumps; ``lease_clock`` names that clock (records keep
    it, so a reading of another clock is never compared with this one)."""

    lease_clock: str

    def now(self) -> float: ...

    def monotonic(self) -> float: ...

    def lease_now(self) -> float: ...


_LEASE_CLOCK_ID: int = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return "unknown"


def system_lease_clock() -> str:
    """The name of the real lease clock: its kind and this boot (``boottime:<boot id>``)."""
    kind = "boottime" if _LEASE_CLOCK_ID == getattr(time, "CLOCK_BOOTTIME", None) else "monotonic"
    return f"{kind}:{_BOOT_ID}"


_BOOT_ID = _boot_id()


class SystemClock:
    """The real clock."""

    __slots__ = ()

    lease_clock = system_lease_clock()

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def lease_now(self) -> float:
        return time.clock_gettime(_LEASE_CLOCK_ID)
