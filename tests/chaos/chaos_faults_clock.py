"""Clock faults for the chaos harness: the machine's wall clock jumps, forward or back.

``ClockFaults()`` steps ``CLOCK_REALTIME`` itself (root only, as an NTP step or an operator's
``date -s`` would; ``available`` is False elsewhere and the fault is then never drawn). A
fault steps the clock back by 30-120 s, holds it there for longer than a lease, and then steps
it forward by the same amount, so the machine's clock ends where it would have been. Both
directions are exercised: leases renewed during the hold would all look expired after the
forward step if they were judged on wall time. (Forward first would be no harder a test, but a
timer set during a forward hold rightly waits the whole jump longer once the clock is back,
which would stretch the run by minutes.) Meanwhile it must hold that:

- no shard is removed or deposed: leases run on the lease clock (``CLOCK_BOOTTIME``), which a
  step of the wall clock does not move;
- the supervisor keeps serving (the load runs on throughout);
- no timer fires early: the ``napper`` workflows of the load sleep across the jumps, and each
  must wake no earlier on the wall clock than it asked (checked on its result, which carries
  ``ctx.now()`` before and after the sleep; a nap with a backward step between its first
  reading and its sleep, or near its due time, is not judged: a timer set after the step is
  due on the stepped clock, and a step after the wake makes the second reading early). The forward
  step may wake it early in elapsed time: timers keep wall time, as users see it.

The step is undone in a ``finally`` and again by ``close()``, so an interrupted run leaves the
clock as it found it (apart from the time a step takes, microseconds).
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any, Callable

from chaos_faults_store import hold_watching

__all__ = ["ClockFaults"]

JUMP_SECONDS = (30.0, 120.0)


def _step(seconds: float) -> None:
    time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME) + seconds)


class ClockFaults:
    def __init__(self) -> None:
        self.available = False
        self._applied = 0.0
        self._lock = threading.Lock()
        self.steps: list[tuple[float, float]] = []
        """(monotonic time, seconds) of every step taken, back (negative) and forward."""
        if os.geteuid() != 0:
            return
        try:
            _step(0.0)
        except (OSError, AttributeError):
            return  # no CAP_SYS_TIME (a container): the fault is never drawn
        self.available = True

    def close(self) -> None:
        """Undo any step still applied (an interrupted fault)."""
        with self._lock:
            if self._applied:
                _step(-self._applied)
                self.steps.append((time.monotonic(), -self._applied))
                self._applied = 0.0

    def run(
        self,
        rng: random.Random,
        hold: float,
        shard_pids: Callable[[], list[int]],
        live_engine_pids: Callable[[], set[int]],
        supervisor: Any,
        count: Callable[[str], None],
        violation: Callable[[str], None],
    ) -> None:
        jump = -rng.uniform(*JUMP_SECONDS)
        time.sleep(1.0)  # a shard killed by the fault before this one is gone; the naps set their timers
        live_before = live_engine_pids() & set(shard_pids())
        before = live_before
        with self._lock:
            _step(jump)
            self.steps.append((time.monotonic(), jump))
            self._applied = jump
        try:
            if not hold_watching(hold, supervisor, violation, f"{jump:+.0f}s clock jump"):
                return
        finally:
            self.close()
        count("clock_jumps")
        after = set(shard_pids())
        gone = before - after
        if gone:
            violation(f"a {jump:+.0f}s wall-clock jump (and back) removed shard(s) {sorted(gone)} (leases must not see it)")
        still_live = live_engine_pids()
        deposed = live_before - still_live - gone
        if deposed:
            violation(f"a {jump:+.0f}s wall-clock jump (and back) left shard(s) {sorted(deposed)} not live")
