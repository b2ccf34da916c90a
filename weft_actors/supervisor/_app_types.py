"""Warn when engines that are not this supervisor's shards share its store with another app.

Two supervisors started on one data directory with different ``--app`` modules work side by
side, each shard taking over and starting only the types its app registers: nothing fails,
so nothing used to be said. Each engine's registry record names its types (``store._offers``);
the supervisor, which reads the records every few heartbeats anyway (``_kill_hung``), compares
the live engines' types with its own shards' whenever the set of live engines changes, and
logs one WARNING per app that differs (the shards themselves stay quiet about it, or a
supervisor of N shards would say it N times). A differing app that goes away and comes back
is warned about again.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from ..store import describe_type_mismatch, offered_types, type_mismatches

__all__ = ["TypeMismatchWatch"]

log = logging.getLogger("weft_actors.supervisor")


class TypeMismatchWatch:
    def __init__(self, app: str) -> None:
        self.app = app
        self._live: frozenset[str] = frozenset()
        self._warned: set[frozenset[str]] = set()
        """The type sets of other engines already warned about (while they stay live)."""

    def check(self, records: Mapping[str, Mapping[str, Any]], live: Iterable[str], own: Iterable[str | None]) -> None:
        """``records``: the engine registry; ``live``: the ids of the live engines among them;
        ``own``: this supervisor's shards' engine ids (None for a shard not ready yet)."""
        live_ids = frozenset(engine_id for engine_id in live if engine_id in records)
        if live_ids == self._live:
            return
        own_ids = {engine_id for engine_id in own if engine_id is not None and engine_id in live_ids}
        mine = next((types for engine_id in sorted(own_ids) if (types := offered_types(records[engine_id])) is not None), None)
        if mine is None:
            return  # no shard of ours has registered yet: look again when one has
        self._live = live_ids
        peers = {engine_id: records[engine_id] for engine_id in live_ids - own_ids}
        groups = type_mismatches(mine, peers)
        present = {types for types, _ in groups}
        self._warned &= present
        new = [(types, ids) for types, ids in groups if types not in self._warned]
        if not new:
            return
        self._warned |= {types for types, _ in new}
        log.warning(
            "%s",
            describe_type_mismatch(f"this supervisor (--app {self.app})", mine, new),
            extra={"event": "workflow_types_differ", "engines": [engine_id for _, ids in new for engine_id in ids]},
        )
