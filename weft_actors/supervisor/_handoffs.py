"""The supervisor's side of a shard's graceful handoff (``Engine.hand_off``).

``SIGUSR1`` asks for one handoff: the next shard in turn (slot 0 first, then 1, ...) is taken
out of the routing for new work (the front door sends new requests to the other shards,
which serve any workflow through the store) and, once the front door holds no write of it
unanswered (``_quiet``, as a roll waits: a start it was sent and had not read when it
stopped reading would be lost, ``OutcomeUnknown``), is told ``("hand-off", successor engine,
grace)`` on its control pipe, the successor being the next ready shard. The draining shard
lets its running activity attempts finish, hands its claims to the successor in fenced
batches, and tells the supervisor which workflows moved (``("handed", successor, ids)``); the
supervisor relays them to the successor's control pipe (``("adopt", ids)``), which drives
them at once. The control pipes are reliable, unlike the hint bus: a lost wake would leave a
workflow held by a live engine that does not drive it. The drained shard then exits and is
started again, fresh, as after any exit: the primitive a rolling restart repeats per shard.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Protocol, Sequence

from ._quiet import QuietWait

__all__ = ["Handoffs", "DEFAULT_GRACE"]

log = logging.getLogger("weft_actors.supervisor")

DEFAULT_GRACE = 30.0
"""Seconds a handing-off shard lets its running activity attempts finish."""


class _Slot(Protocol):
    index: int
    ready: bool
    engine_id: str | None
    control: Any


class _Routing(Protocol):
    def set_draining(self, slot: int) -> None: ...

    def set_live(self, slot: int, engine_id: str) -> None: ...


class Handoffs:
    """Handoff requests (from a signal handler) and the relay of their wakes."""

    def __init__(self, wake_fd: int, grace: float = DEFAULT_GRACE) -> None:
        self._wake_fd = wake_fd
        self.grace = grace
        self.requested = 0
        """Handoffs asked for and not dispatched yet."""
        self.draining: set[int] = set()
        """Slots told to hand off whose process has not ended yet."""
        self._next = 0
        self._quiet: QuietWait | None = None
        """The shard picked for the next handoff while its writes are answered."""

    def request(self) -> None:
        """Ask for one handoff (async-signal-safe: a counter and a byte on the wake pipe)."""
        self.requested += 1
        try:
            os.write(self._wake_fd, b"h")
        except OSError:
            pass

    def dispatch(self, slots: Sequence[_Slot], routing: _Routing, held: Callable[[int], int]) -> None:
        """Send the handoffs asked for (called every supervisor turn): each to the next ready
        slot once it is quiet (``held``: the front door's unanswered writes to a slot), naming
        the next ready slot after it as its successor. None while fewer than two shards are
        ready (kept)."""
        while self.requested:
            if self._quiet is None:
                ready = self._ready(slots, self._next)
                if len(ready) < 2:
                    return
                log.info("shard %d hands off once the front door's writes to it are answered", ready[0].index)
                self._quiet = QuietWait(ready[0], routing, held)
            if not self._quiet.quiet():
                return
            quiet, self._quiet = self._quiet, None
            ready = self._ready(slots, quiet.slot.index)
            if len(ready) < 2 or ready[0] is not quiet.slot:  # it or every successor went meanwhile: pick again
                quiet.cancel()
                continue
            draining, successor = ready[0], ready[1]
            self.requested -= 1
            self._next = (draining.index + 1) % len(slots)
            self.hand_over(draining, successor, routing)

    @staticmethod
    def _ready(slots: Sequence[_Slot], first: int) -> list[_Slot]:
        """The ready slots in turn from slot ``first``."""
        ready = [slot for slot in slots if slot.ready and slot.engine_id is not None and slot.control is not None]
        return sorted(ready, key=lambda slot: (slot.index - first) % len(slots))

    def ended(self, index: int, exitcode: int | None) -> bool:
        """Whether slot ``index``'s process ended as its handoff meant it to (exit 0): it is
        started again at once, with no warning and no count toward the restart intensity."""
        if index not in self.draining:
            return False
        self.draining.discard(index)
        return exitcode == 0

    @staticmethod
    def relay(slots: Sequence[_Slot], message: tuple[Any, ...]) -> None:
        """``("handed", successor engine, ids)`` from a draining shard: on to the successor."""
        _, successor, wids = message
        for slot in slots:
            if slot.engine_id == successor and slot.control is not None:
                try:
                    slot.control.send(("adopt", wids))
                except OSError as exc:
                    log.warning("could not wake shard %d for %d handed workflows: %s", slot.index, len(wids), exc)
                return
        log.warning("successor engine %s is gone; its %d handed workflows wait for a reclaim", successor, len(wids))

    def hand_over(self, draining: _Slot, successor: _Slot, routing: _Routing) -> bool:
        """One handoff of the named slot to the named successor (a rolling restart's step,
        ``_roll``, and ``dispatch``'s pick). False if the shard could not be told."""
        routing.set_draining(draining.index)  # no new work for it: the others take new requests
        self.draining.add(draining.index)
        draining.ready = False
        log.info("shard %d hands off to shard %d (engine %s), grace %.1fs", draining.index, successor.index, successor.engine_id, self.grace)
        try:
            draining.control.send(("hand-off", successor.engine_id, self.grace))
        except OSError as exc:
            log.warning("could not ask shard %d to hand off: %s", draining.index, exc)
            self.draining.discard(draining.index)
            return False
        return True
