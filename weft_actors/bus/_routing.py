"""Which shard should serve a request: the workflow's owner, else its preferred live shard.

Routing is an optimisation only: any shard answers any request correctly.
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable

from .._placement import preferred

__all__ = ["RoutingTable", "preferred"]


class RoutingTable:
    """Live shards by slot and engine id; updated by the supervisor, read by the front door."""

    def __init__(self, owner_of: Callable[[str], str | None]) -> None:
        self._owner_of = owner_of
        self._lock = threading.Lock()
        self._slots: dict[int, str] = {}
        self._engines: dict[str, int] = {}
        self._round_robin = itertools.count()

    def set_live(self, slot: int, engine_id: str) -> None:
        with self._lock:
            slots = dict(self._slots)
            slots[slot] = engine_id
            self._publish(slots)

    def set_dead(self, slot: int) -> None:
        with self._lock:
            slots = dict(self._slots)
            slots.pop(slot, None)
            self._publish(slots)

    def _publish(self, slots: dict[int, str]) -> None:
        # Readers see either the old or the new mapping, never a half-updated one.
        self._slots = slots
        self._engines = {engine_id: slot for slot, engine_id in slots.items()}

    @property
    def live_slots(self) -> list[int]:
        return sorted(self._slots)

    def route(self, wid: str | None) -> list[int]:
        """Slots to try, best first: the owner's, the preferred one, then the rest."""
        slots, engines = self._slots, self._engines
        if not slots:
            return []
        order: list[int] = []
        if wid is None:
            live = sorted(slots)
            start = next(self._round_robin) % len(live)
            return live[start:] + live[:start]
        try:
            owner = self._owner_of(wid)
        except Exception:
            owner = None
        if owner is not None and owner in engines:
            order.append(engines[owner])
        best = preferred(wid, list(engines))
        if best is not None and engines[best] not in order:
            order.append(engines[best])
        order.extend(slot for slot in sorted(slots) if slot not in order)
        return order
