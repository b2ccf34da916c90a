"""A live resize: ``python -m weft_actors shards set N`` grows or shrinks a running supervisor.

Growth appends new slots; the supervisor's loop starts their processes as it starts any slot
with none, and once they are ready the routing places new workflows over every live engine
(rendezvous, ``_placement``), so the new shards take their share of the new work. The
workflows already parked on the old shards stay with their owners (they are not moved).
Shrinking removes the highest slots one at a time: each hands its workflows off to a
remaining ready shard (``_handoffs``, as a rolling restart does: its running activity attempts
finish first) and, once its process has exited, the slot goes. ``_roll`` runs this in its
place: a resize and a rolling restart never run at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ._slot import ShardSlot

__all__ = ["Resize", "MAX_SHARDS"]

log = logging.getLogger("weft_actors.supervisor")

MAX_SHARDS = 256
"""The most shards ``shards set`` asks for (a typo of N must not fork thousands of processes)."""


class Resize:
    """One resize to ``target`` shards; ``step`` is None while it runs, then (outcome, message)."""

    def __init__(self, target: int, slots: list[Any], timeout: float) -> None:
        self.target = target
        self.first = len(slots)
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._handing: int | None = None
        self._removed = 0
        for index in range(len(slots), target):
            slots.append(ShardSlot(index))  # started by the supervisor's loop, as any empty slot
        if target > self.first:
            log.info("resize: %d -> %d shards, starting shards %d..%d", self.first, target, self.first, target - 1)
        elif target < self.first:
            log.info("resize: %d -> %d shards, handing off shards %d..%d one at a time", self.first, target, target, self.first - 1)

    def step(self, slots: list[Any], handoffs: Any, routing: Any) -> tuple[str, str] | None:
        if self.target >= self.first:
            added = slots[self.first : self.target]
            if all(slot.ready for slot in added):
                return "completed", f"{self.first} -> {self.target} shards" + (f" ({len(added)} added)" if added else "")
            if time.monotonic() > self._deadline:
                return "failed", f"the added shards were not all ready within {self._timeout:.0f}s"
            return None
        while len(slots) > self.target:
            last = slots[-1]
            if last.process is None:  # exited after its handoff (or died): its slot goes
                del slots[-1]
                self._handing = None
                self._removed += 1
                self._deadline = time.monotonic() + handoffs.grace + self._timeout
                log.info("resize: shard %d removed", last.index)
                continue
            if self._handing is None:
                successor = next((slot for slot in slots[: self.target] if slot.ready and slot.engine_id is not None and slot.control is not None), None)
                if last.ready and successor is not None and handoffs.hand_over(last, successor, routing):
                    self._handing = last.index
                    self._deadline = time.monotonic() + handoffs.grace + self._timeout
                    return None
            if time.monotonic() > self._deadline:
                return "failed", f"shard {last.index} did not hand off and exit in time ({self._removed} removed)"
            return None
        return "completed", f"{self.first} -> {self.target} shards ({self._removed} removed)"
