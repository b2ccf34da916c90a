"""Before a shard is told to hand off: out of the routing, and its unanswered writes answered.

A shard that hands off stops reading requests at once, so a request the front door had
already sent it and it had not read yet would be lost with it: a read is sent on to another
shard, but a start (or a cancel, a terminate) cannot be, and its client would get
``OutcomeUnknown`` for a request the shard never applied. So the roll and the resize first
take the shard out of the routing (no new request reaches it) and wait until the front door
says it holds no write unanswered (``FrontDoor.held_writes``, at least ``QUIET_MIN``: a
request being routed at that moment reaches it), at most ``QUIET_MAX``; then hand off.
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
