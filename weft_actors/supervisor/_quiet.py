"""Before a shard is told to hand off: out of the routing, and its unanswered writes answered.

A shard that hands off stops reading requests at once, so a request the front door had
already sent it and it had not read yet would be lost with it: a read is sent on to another
shard, but a start (or a cancel, a terminate) cannot be, and its client would get
``OutcomeUnknown`` for a request the shard never applied. So a handoff (``SIGUSR1``, the
roll, the resize) first takes the shard out of the routing (no new request reaches it) and
waits until the front door says it holds no write unanswered (``FrontDoor.held_writes``, at
least ``QUIET_MIN``: a request being routed at that moment reaches it), at most
``QUIET_MAX``; then hands off.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

__all__ = ["QuietWait", "QUIET_MIN", "QUIET_MAX"]

log = logging.getLogger("weft_actors.supervisor")

QUIET_MIN = 1.0
"""Seconds at least: a few front door turns (20-50 ms each) after the routing changed, and two
directory polls of a direct client (``bus._direct.REFRESH``, 0.5 s) that has requests out:
it stops sending to the shard before the shard stops reading."""
QUIET_MAX = 3.0
"""Seconds at most: a shard that keeps writes unanswered this long hands off all the same."""


class QuietWait:
    def __init__(self, slot: Any, routing: Any, held: Callable[[int], int]) -> None:
        self.slot = slot
        self._routing = routing
        self._held = held
        self._since = time.monotonic()
        routing.set_draining(slot.index)  # no new request for it; the others take them

    def quiet(self) -> bool:
        """Whether the shard may be told to hand off now."""
        elapsed = time.monotonic() - self._since
        if elapsed < QUIET_MIN:
            return False
        held = self._held(self.slot.index)
        if held and elapsed < QUIET_MAX:
            return False
        if held:
            log.warning("shard %d still holds %d writes after %.1fs; handing it off all the same", self.slot.index, held, elapsed)
        return True

    def cancel(self) -> None:
        """Not handed off after all: back in the routing, if it still serves."""
        if self.slot.ready and self.slot.engine_id is not None:
            self._routing.set_live(self.slot.index, self.slot.engine_id)


STOP_QUIET_MIN = 0.05
"""Seconds at least before a stopping supervisor's shards drain: a front door turn or two."""


def quiet_before_stop(slots: list[Any], routing: Any, frontdoor: Any) -> None:
    """A supervisor told to stop, before its shards drain: its front door takes no new request
    (each is answered ``server_unavailable`` at once, which a client with other supervisors'
    endpoints sends on to the next: nothing was applied), and the shards answer the writes
    they were sent before they stop reading (a start never read would be lost with them,
    ``OutcomeUnknown``). Bounded by ``QUIET_MAX``; blocks the supervisor's thread, which
    only joins its shards after this."""
    for slot in slots:
        routing.set_draining(slot.index)
    frontdoor.leaving()
    started = time.monotonic()
    time.sleep(STOP_QUIET_MIN)
    while time.monotonic() - started < QUIET_MAX:
        held = sum(frontdoor.held_writes(slot.index) for slot in slots)
        if not held:
            return
        time.sleep(0.02)
    log.warning("the shards still hold %d writes after %.1fs; stopping all the same", held, QUIET_MAX)
