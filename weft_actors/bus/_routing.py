"""Which shard should serve a request: the workflow's owner, else its preferred live shard.

Routing is an optimisation only: any shard answers any request correctly. The same table is
the directory the front door gives clients that send to shards directly (``directory``).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable

from .._placement import preferred

__all__ = ["RoutingTable", "preferred"]


class RoutingTable:
    """Live shards by slot and engine id; updated by the supervisor, read by the front door."""

    def __init__(
        self,
        owner_of: Callable[[str], str | None],
        *,
        live: Callable[[], frozenset[str]] | None = None,
        by_owner: bool = True,
    ) -> None:
        self._owner_of = owner_of
        self._live = live
        self._by_owner = by_owner
        self._lock = threading.Lock()
        self._slots: dict[int, str] = {}
        self._engines: dict[str, int] = {}
        self._round_robin = itertools.count()
        self._endpoints: dict[int, str] = {}
        self._draining: dict[int, tuple[str, str]] = {}
        """slot -> (engine id, endpoint) of a shard handing its workflows off: no new work,
        but alive, and what it holds is still answered (by it, or moved on)."""
        self.version = 0
        """Grows with every change of the live shards: a client's directory is current while
        its version is this one."""

    def set_live(self, slot: int, engine_id: str, endpoint: str = "") -> None:
        """``endpoint``: where clients reach that shard directly ("": they cannot)."""
        with self._lock:
            slots = dict(self._slots)
            slots[slot] = engine_id
            self._endpoints[slot] = endpoint
            self._publish(slots)

    def set_dead(self, slot: int) -> None:
        with self._lock:
            slots = dict(self._slots)
            slots.pop(slot, None)
            self._endpoints.pop(slot, None)
            self._draining.pop(slot, None)
            self._publish(slots)

    def set_draining(self, slot: int) -> None:
        """No new work for ``slot`` (it hands its workflows off), though it lives: a direct
        client stops sending to it but keeps waiting for what it sent (``set_dead`` ends it)."""
        with self._lock:
            slots = dict(self._slots)
            engine_id = slots.pop(slot, None)
            endpoint = self._endpoints.pop(slot, "")
            if engine_id is not None:
                self._draining[slot] = (engine_id, endpoint)
            self._publish(slots)

    def directory(self, direct: bool = True) -> dict[str, Any]:
        """The ``directory`` op's answer: the version, the live shards as ``[slot, engine id,
        endpoint]`` (none unless ``direct``, nor those without an endpoint), and how a client
        places a workflow id on them (``_placement.preferred`` over their engine ids)."""
        with self._lock:
            shards = [[slot, engine_id, self._endpoints.get(slot, "")] for slot, engine_id in sorted(self._slots.items())]
            draining = [[slot, engine_id, endpoint] for slot, (engine_id, endpoint) in sorted(self._draining.items())]
            version = self.version
        return {
            "version": version,
            "placement": "rendezvous",
            "shards": [shard for shard in shards if direct and shard[2]],
            "draining": [shard for shard in draining if direct and shard[2]],
        }

    def _publish(self, slots: dict[int, str]) -> None:
        # Readers see either the old or the new mapping, never a half-updated one.
        self._slots = slots
        self._engines = {engine_id: slot for slot, engine_id in slots.items()}
        self.version += 1

    @property
    def live_slots(self) -> list[int]:
        return sorted(self._slots)

    def route(self, wid: str | None) -> list[int]:
        """Slots to try, best first: the owner's, the preferred one, then the rest."""
        slots, engines = self._slots, self._engines
        if not slots:
            return []
        if self._live is not None:
            try:
                live = self._live()
            except Exception:
                live = frozenset(engines)
            healthy = {engine_id: slot for engine_id, slot in engines.items() if engine_id in live}
            if healthy and len(healthy) < len(engines):
                # A stalled shard is still connected but must not be chosen while others live.
                slots = {slot: engine_id for engine_id, slot in healthy.items()}
                engines = healthy
        order: list[int] = []
        if wid is None or not self._by_owner:
            ring = sorted(slots)
            start = next(self._round_robin) % len(ring)
            return ring[start:] + ring[:start]
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
