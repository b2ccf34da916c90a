"""One shard slot of the supervisor: the process in it now, and what the supervisor knows of it.

A slot outlives its processes: a restart puts a new process in the same slot (same index,
same routing slot), and its backoff counts the slot's restarts, not the process's.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["ShardSlot"]


class ShardSlot:
    __slots__ = ("index", "process", "control", "engine_id", "pid", "restarts", "next_start", "stats", "ready", "started_at", "killed", "ready_at", "unwritable")

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: Any = None
        self.control: Connection | None = None
        self.engine_id: str | None = None
        self.pid: int | None = None
        self.restarts = 0
        self.next_start = 0.0
        self.stats: dict[str, Any] = {}
        self.ready = False
        self.started_at = 0.0
        """Shared with the process: when it began to wait for the store's write lock."""
        self.killed = False
        """Killed as hung, not reaped yet."""
        self.ready_at = 0.0
        self.unwritable = False
        """Its last start failed because the store was not writable."""

    def take_stats(self, stats: dict[str, Any]) -> None:
        """Keep the shard's latest ``stats``, with its commit rate since the previous ones of
        the same engine (0 for a new engine: a restart's counters start again)."""
        now = time.monotonic()
        previous = self.stats
        if "_at" in previous and previous.get("engine_id") == stats.get("engine_id"):
            elapsed = max(1e-6, now - previous["_at"])
            stats["commits_per_s"] = round((stats.get("commits_total", 0) - previous.get("commits_total", 0)) / elapsed, 1)
        else:
            stats["commits_per_s"] = 0.0
        stats["_at"] = now
        self.stats = stats

    def report(self) -> dict[str, Any]:
        """This slot's entry of the supervisor's ``stats()["shards"]``."""
        entry: dict[str, Any] = {"slot": self.index, "pid": self.pid, "alive": self.process is not None and self.ready, "restarts": self.restarts}
        entry.update((key, value) for key, value in self.stats.items() if not key.startswith("_"))
        entry["engine_id"] = self.engine_id
        if self.unwritable:
            entry["waiting_for"] = "a writable store"
        return entry
