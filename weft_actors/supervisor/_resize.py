"""A live resize: ``python -m weft_actors shards set N`` grows or shrinks a running supervisor.

Growth appends new slots; the supervisor's loop starts their processes as it starts any slot
with none, and once they are ready the routing places new workflows over every live engine
(rendezvous, ``_placement``), so the new shards take their share of the new work; and each
old shard hands the parked workflows that a new shard now prefers to it, in batches at a
bounded rate (``shard._rebalance``, fenced as any handoff).
Shrinking removes the highest slots one at a time: each hands its workflows off to a
remaining ready shard (``_handoffs``, as a rolling restart does: its running activity attempts
finish first) and, once its process has exited, the slot goes. ``_roll`` runs this in its
place: a resize and a rolling restart never run at once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ._quiet import QuietWait
from ._slot import ShardSlot

__all__ = ["Resize", "MAX_SHARDS"]

log = logging.getLogger("weft_actors.supervisor")

MAX_SHARDS = 256
"""The most shards ``shards set`` asks for (a typo of N must not fork thousands of processes)."""
REBALANCE_BATCH = 200
REBALANCE_INTERVAL = 0.1
"""After a growth each old shard moves at most ``REBALANCE_BATCH`` parked workflows per
``REBALANCE_INTERVAL`` seconds (2,000/s): the new shards' replays never swamp them."""


class Resize:
    """One resize to ``target`` shards; ``step`` is None while it runs, then (outcome, message)."""

    def __init__(self, target: int, slots: list[Any], timeout: float) -> None:
        self.target = target
        self.first = len(slots)
        self._timeout = timeout
        self._deadline = time.monotonic() + timeout
        self._handing: int | None = None
        self._quiet: QuietWait | None = None
        self._removed = 0
        for index in range(len(slots), target):
            slots.append(ShardSlot(index))  # started by the supervisor's loop, as any empty slot
        if target > self.first:
            log.info("resize: %d -> %d shards, starting shards %d..%d", self.first, target, self.first, target - 1)
        elif target < self.first:
            log.info("resize: %d -> %d shards, handing off shards %d..%d one at a time", self.first, target, target, self.first - 1)

    def _rebalance(self, slots: list[Any]) -> None:
        """Tell each old shard the live engines: it hands its parked workflows that one of
        the new shards now prefers to that shard (``shard._rebalance``), the ids relayed on as
        after any handoff (``("handed", engine, ids)``)."""
        engines = [slot.engine_id for slot in slots if slot.ready and slot.engine_id is not None]
        for slot in slots[: self.first]:
            if slot.control is not None and slot.ready:
                try:
                    slot.control.send(("rebalance", engines, REBALANCE_BATCH, REBALANCE_INTERVAL))
                except OSError as exc:
                    log.warning("could not ask shard %d to rebalance: %s", slot.index, exc)

    def step(self, slots: list[Any], handoffs: Any, routing: Any, held: Any) -> tuple[str, str] | None:
        if self.target >= self.first:
            added = slots[self.first : self.target]
            if all(slot.ready for slot in added):
                if added:
                    self._rebalance(slots)
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
                able = last.ready and successor is not None
                if self._quiet is None and able:  # first out of the routing, its writes answered
                    self._quiet = QuietWait(last, routing, held)
                    return None
                if self._quiet is not None and not self._quiet.quiet():
                    return None
                quiet, self._quiet = self._quiet, None
                if able and handoffs.hand_over(last, successor, routing):
                    self._handing = last.index
                    self._deadline = time.monotonic() + handoffs.grace + self._timeout
                    return None
                if quiet is not None:
                    quiet.cancel()
            if time.monotonic() > self._deadline:
                return "failed", f"shard {last.index} did not hand off and exit in time ({self._removed} removed)"
            return None
        return "completed", f"{self.first} -> {self.target} shards ({self._removed} removed)"
