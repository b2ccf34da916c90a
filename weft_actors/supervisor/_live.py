"""Which engines are live, as the front door's routing asks it on every routed request.

Read from the store's engine records and kept for half a heartbeat: a routing decision is an
optimisation only (any shard answers any request correctly), so a slightly old answer costs
nothing, while a store read per request would cost the front door its throughput.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

__all__ = ["LiveEngines", "live_ids"]


class EngineRecords(Protocol):
    """What ``LiveEngines`` reads of the store (either backend)."""

    def engines(self) -> dict[str, dict[str, Any]]: ...

    def get_holder(self, wid: str) -> Any: ...

    @property
    def clock(self) -> Any: ...


def live_ids(records: dict[str, dict[str, Any]], wall: float) -> frozenset[str]:
    """The engines of ``records`` that are live at lease time ``wall``."""
    return frozenset(
        engine_id
        for engine_id, record in records.items()
        if record["state"] == "live" and record["expires_at"] + 2 * record["heartbeat"] >= wall
    )


class LiveEngines:
    """The live engines (cached for half a heartbeat) and the live owner of a workflow."""

    def __init__(self, store: EngineRecords, heartbeat: float) -> None:
        self._store = store
        self._heartbeat = heartbeat
        self._cache: tuple[float, frozenset[str]] | None = None

    def __call__(self) -> frozenset[str]:
        now = time.monotonic()
        cached = self._cache
        if cached is not None and now - cached[0] < self._heartbeat / 2:
            return cached[1]
        live = live_ids(self._store.engines(), self._store.clock.lease_now())
        self._cache = (now, live)
        return live

    def owner_of(self, wid: str) -> str | None:
        """The holder's engine, if that engine is still live (a stalled owner is routed around)."""
        holder = self._store.get_holder(wid)
        if holder is None:
            return None
        return holder[0] if holder[0] in self() else None
