"""``EngineOptions``: every knob of an engine in one frozen record, validated in one place.

``Engine(data, app, heartbeat=..., ttl=...)`` builds one from its keywords; a caller that
runs many engines alike (the supervisor's shards, a test harness) may build one and pass it
as ``options=``. The engine and its collaborators read the record; nothing changes it after
the engine is made.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

from ._validate import OWNERSHIP_MODES, validate_timing

__all__ = ["EngineOptions", "EngineSettings"]


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """The settings of one engine.

    Ownership: ``heartbeat``/``ttl`` time the engine's lease (both > 0, ``heartbeat < ttl``,
    ``ttl >= 3 * heartbeat``); ``ownership`` is ``"workflow-lease"`` (many engines) or
    ``"single"`` (one engine, no heartbeats); ``probe_peers`` lets the reclaim pass confirm a
    dead peer process on this machine by its lock file instead of waiting for its lease to
    expire. ``feed_retention`` and ``engine_retention`` (seconds) bound the change feed and
    the registry of ended engines.

    ``retention`` (seconds, default 7 days): a finished workflow keeps its record and result
    for good, but its op log and leftover inbox are pruned once it ended that long ago
    (checked every ``prune_interval``). ``max_live_actors`` caps the actors kept in memory:
    parked ones beyond it are evicted least recently used first, keeping their claims, and
    replayed from the store on their next wake (``_eviction``).

    Limits (each refusal is a ``LimitExceeded`` naming the limit, and writes nothing):
    ``max_active_workflows`` (default ``max(200_000, 2 * max_live_actors)``) is a hard cap on
    the actors in memory: when a client start finds that many and an eviction pass cannot
    make room (none is parked), it is refused. Reclaims, child starts, continue-as-new and
    delayed starts (accepted, and when they fire) are never refused: those workflows exist
    or make no actor yet, and must run somewhere. ``max_inbox`` (default 10,000) caps the
    signals and updates pending in one workflow's inbox; a retried update (a known request
    id), a cancel request and a child's completion are always taken.
    ``max_inflight_activities`` (default 1,000) caps the activity attempts running at once:
    beyond it attempts wait in a FIFO queue (backpressure, never a failure).
    ``max_activity_threads`` bounds the threads of plain ``def`` activities; ``payload_limit``
    (bytes) the encoded arguments, signals and results a call may carry.

    Admission: ``max_running`` (default None: no bound, an embedding caller paces its own
    calls; the supervisor's shards use 10,000) bounds the workflows in flight, that is
    running rather than parked, measured as the activity attempts running and queued plus
    the writes waiting for this turn's commit. A client start (or signal-with-start) that
    finds that many is refused at once with ``Overloaded``, writing nothing. The same starts
    as for ``max_active_workflows`` are never refused.

    Poison workflows: a workflow charged with ``quarantine_after`` (default 1) lost owners
    without progress (only the workflow whose code held a lost owner's loop is charged:
    ``store._blame``) is parked as ``quarantined``. With ``background``, a watchdog thread
    logs a WARNING naming the workflow and activity that keeps the loop from turning for more
    than ``stall_threshold`` seconds (default the lesser of 1 s and ttl / 3: it must name the
    culprit, and leave its stall note, well before the lease runs out and the supervisor
    kills the stalled shard).

    The store: ``sync`` (LMDB: fsync each commit), ``map_size`` (LMDB: bytes). ``tune_gc``
    freezes the heap after start and raises the collector's first threshold (a shard
    process's choice). ``background`` runs the maintenance pass and the watchdog (without
    it, a test drives them with ``Engine.tick``). With ``warn_type_mismatch`` (a supervisor's
    shards leave it to the supervisor) ``open`` logs a WARNING naming the live engines on
    the store that register other workflow types.
    """

    heartbeat: float = 0.5
    ttl: float = 3.0
    ownership: str = "workflow-lease"
    max_activity_threads: int = 32
    payload_limit: int = 1 << 20
    sync: bool = True
    map_size: int | None = None
    tune_gc: bool = False
    background: bool = True
    probe_peers: bool = True
    feed_retention: float = 3600.0
    engine_retention: float = 3600.0
    prune_interval: float = 60.0
    retention: float = 7 * 86400.0
    max_live_actors: int = 100_000
    max_active_workflows: int | None = None
    """None: ``max(200_000, 2 * max_live_actors)`` (resolved when the record is made)."""
    max_inbox: int = 10_000
    max_inflight_activities: int = 1000
    max_running: int | None = None
    quarantine_after: int = 1
    stall_threshold: float | None = None
    """None: the lesser of 1 s and ttl / 3 (resolved when the record is made)."""
    warn_type_mismatch: bool = True

    def __post_init__(self) -> None:
        validate_timing(self.heartbeat, self.ttl)
        if self.ownership not in OWNERSHIP_MODES:
            raise ValueError(f"ownership must be one of {OWNERSHIP_MODES}, not {self.ownership!r}")
        if self.feed_retention < 0 or self.engine_retention < 0 or self.prune_interval <= 0:
            raise ValueError("feed_retention and engine_retention must be >= 0, prune_interval > 0")
        if not self.retention >= 0:
            raise ValueError("retention must be >= 0")
        if self.max_live_actors < 1:
            raise ValueError("max_live_actors must be >= 1")
        if self.max_active_workflows is None:
            self._resolve("max_active_workflows", max(200_000, 2 * self.max_live_actors))
        assert self.max_active_workflows is not None
        if self.max_active_workflows <= self.max_live_actors:
            raise ValueError(
                f"max_active_workflows ({self.max_active_workflows}) must exceed max_live_actors "
                f"({self.max_live_actors}): parked actors are evicted down to the latter to admit starts"
            )
        if self.max_inbox < 1 or self.max_inflight_activities < 1 or (self.max_running is not None and self.max_running < 1):
            raise ValueError("max_inbox, max_inflight_activities and max_running must be >= 1")
        if isinstance(self.quarantine_after, bool) or not isinstance(self.quarantine_after, int) or self.quarantine_after < 1:
            raise ValueError("quarantine_after must be an integer >= 1")
        if self.stall_threshold is None:
            self._resolve("stall_threshold", min(1.0, self.ttl / 3))
        elif not self.stall_threshold > 0:
            raise ValueError("stall_threshold must be > 0")

    def _resolve(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # a default that depends on another field


class EngineSettings(TypedDict, total=False):
    """``EngineOptions``' fields as ``Engine``'s keywords, for type checkers (a test holds the
    two to the same names)."""

    heartbeat: float
    ttl: float
    ownership: str
    max_activity_threads: int
    payload_limit: int
    sync: bool
    map_size: int | None
    tune_gc: bool
    background: bool
    probe_peers: bool
    feed_retention: float
    engine_retention: float
    prune_interval: float
    retention: float
    max_live_actors: int
    max_active_workflows: int | None
    max_inbox: int
    max_inflight_activities: int
    max_running: int | None
    quarantine_after: int
    stall_threshold: float | None
    warn_type_mismatch: bool
