"""The counters ``Engine.stats()`` returns, read from the engine's runtime and its starts."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping, Protocol, cast

if TYPE_CHECKING:
    from ..store import LmdbStore
    from ..workflow import Op
    from ._activities import ActivityRunner
    from ._actor import Actor
    from ._commit_retry import CommitRetry
    from ._committer import GroupCommitter
    from ._driving import Driver
    from ._eviction import Evictor
    from ._maintenance import Maintenance
    from ._metrics import EngineMetrics
    from ._timers import TimerService
    from ._watchdog import LoopWatchdog

__all__ = ["StatsSource", "engine_stats"]


class StatsSource(Protocol):
    """What the counters are read from: the runtime's parts, each asked for its own."""

    engine_id: str
    state: str
    ownership: str
    orphans: set[str]
    activities_started: int
    watchdog: LoopWatchdog | None

    @property
    def actors(self) -> Mapping[str, Actor]: ...

    @property
    def eviction(self) -> Evictor: ...

    @property
    def driver(self) -> Driver: ...

    @property
    def commit_retry(self) -> CommitRetry: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def timers(self) -> TimerService: ...

    @property
    def activities(self) -> ActivityRunner: ...

    @property
    def store(self) -> LmdbStore: ...

    @property
    def maintenance(self) -> Maintenance: ...

    @property
    def metrics(self) -> EngineMetrics: ...


def engine_stats(host: StatsSource, in_flight: int, starts_overloaded: int) -> dict[str, Any]:
    """``Engine.stats()``: workflow ids are never labels. ``commits_total``/``writes_total``
    count committed transactions and intents."""
    parked = sum(1 for actor in host.actors.values() if not actor.busy and actor.cmd is not None and cast("Op", actor.cmd.op).kind != "activity")
    watchdog = host.watchdog
    return {
        "engine_id": host.engine_id,
        "pid": os.getpid(),
        "state": host.state,
        "ownership": host.ownership,
        "live_actors": len(host.actors),
        "parked_actors": parked,
        "claims_active": len(host.actors) + len(host.eviction.evicted) + len(host.driver) + len(host.orphans) + host.commit_retry.waiting,
        "drives_queued": len(host.driver),
        "commits_total": host.committer.batches,
        "writes_total": host.committer.intents,
        "timers": len(host.timers),
        "timer_entries": host.timers.heap_size,
        "activities_started": host.activities_started,
        "activities_inflight": host.activities.inflight,
        "activities_queued": host.activities.queued,
        "workflows_in_flight": in_flight,
        "starts_overloaded_total": starts_overloaded,
        "quarantined_workflows": host.store.count_quarantined() if host.state == "running" else 0,  # a stopped engine's store is closed
        "stuck_workflows": host.store.count_stuck() if host.state == "running" else 0,
        "loop_stalls_total": 0 if watchdog is None else watchdog.stalls,
        "loop_lag_ms": None if watchdog is None else round(watchdog.lag * 1000.0, 1),
        "feed_cursor": host.maintenance.feed_cursor,
        "storage": host.store.write_state(),  # ok, disk_full, read_only, ...: reads go on
        **host.eviction.snapshot(),
        **host.metrics.snapshot(),
    }
