"""The steps of opening and stopping an engine that are not wiring: registering on its store,
warning about peers that run other workflow types, tuning the collector, and taking the
runtime down (its actors first, then its services, failing every caller still waiting).

``Engine.open`` calls the first three; ``Engine.close`` and ``depose`` are ``close_runtime``
and ``depose_runtime``, which know the runtime only by ``StopHost``.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import TYPE_CHECKING, Protocol

from ..errors import EngineDeposed, EngineStopped, WeftError
from ..store import describe_type_mismatch, type_mismatches

if TYPE_CHECKING:
    from ..store import LmdbStore
    from ._activities import ActivityRunner
    from ._actor import Actor
    from ._commit_retry import CommitRetry
    from ._committer import GroupCommitter
    from ._driving import Driver
    from ._eviction import Evictor
    from ._options import EngineOptions
    from ._reuse import RefusedOutcomes
    from ._timers import TimerService
    from ._waiters import Waiters
    from ._watchdog import LoopWatchdog

__all__ = ["GEN0_THRESHOLD", "StopHost", "register", "warn_on_type_mismatch", "tune_gc", "close_runtime", "depose_runtime", "stop_actors", "shut_down"]

log = logging.getLogger("weft_actors.shard")

GEN0_THRESHOLD = 500_000
"""Generation-0 threshold of a ``tune_gc`` engine (CPython's default is 700)."""


class _Stops(Protocol):
    async def stop(self) -> None: ...

    def cancel(self) -> None: ...


class StopHost(Protocol):
    """What stopping takes down: the actor table and the parts that keep claims in memory,
    then the watchdog, the committer, the timers, the activities and the store, and last the
    callers still waiting."""

    state: str
    actors: dict[str, Actor]
    orphans: set[str]
    watchdog: LoopWatchdog | None

    @property
    def eviction(self) -> Evictor: ...

    @property
    def driver(self) -> Driver: ...

    @property
    def commit_retry(self) -> CommitRetry: ...

    @property
    def refused(self) -> RefusedOutcomes: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def timers(self) -> TimerService: ...

    @property
    def activities(self) -> ActivityRunner: ...

    @property
    def store(self) -> LmdbStore: ...

    @property
    def waiters(self) -> Waiters: ...

    @property
    def maintenance(self) -> _Stops: ...


def register(store: LmdbStore, options: EngineOptions, engine_id: str, slot: int | None, types: list[str]) -> None:
    """Register this engine on the store it just opened (refused, writing nothing, on an
    ownership-mode mismatch or a second live engine in ``single`` mode); the store is closed
    again if that fails, and the error raised."""
    try:
        store.register_engine(engine_id, heartbeat=options.heartbeat, ttl=options.ttl, mode=options.ownership, slot=slot, pid=os.getpid(), types=types)
    except BaseException:
        store.close()
        raise


def warn_on_type_mismatch(store: LmdbStore, engine_id: str, mine: list[str]) -> None:
    """One WARNING if live engines on this store register other workflow types than this
    one: each runs and takes over only its own, which is rarely what two deployments of
    "the same" service on one store mean (a different ``--app``)."""
    peers = {peer: record for peer, record in store.live_engines().items() if peer != engine_id}
    groups = type_mismatches(mine, peers)
    if groups:
        log.warning(
            "%s",
            describe_type_mismatch(f"engine {engine_id}", mine, groups),
            extra={"event": "workflow_types_differ", "engine_id": engine_id, "engines": [peer for _, ids in groups for peer in ids]},
        )


def tune_gc() -> None:
    """Freeze what exists now and collect generation 0 rarely (``tune_gc``)."""
    gc.collect()
    gc.freeze()
    # Generation 0 is collected after GEN0_THRESHOLD net allocations. The engine frees
    # its objects by reference counting, but CPython's net count never drops below
    # zero, so bursts of frees (an eviction pass) are forgotten while the allocations
    # of revivals count in full: at 100k a wake of 100k evicted workflows spent 0.7 s
    # (15%) in collections that found nothing. Cycles only wait longer to be freed.
    gc.set_threshold(GEN0_THRESHOLD, 50, 100)


def stop_actors(host: StopHost) -> None:
    """Stop every actor without committing anything, and forget every claim held in memory."""
    for actor in list(host.actors.values()):
        actor.close()
    host.actors.clear()
    host.eviction.clear()
    host.driver.clear()
    host.orphans.clear()
    host.commit_retry.clear()
    host.refused.clear()


def shut_down(host: StopHost, error: WeftError) -> None:
    """Close the runtime's services and store, and fail every caller still waiting with
    ``error``; the state ends ``stopped`` unless the engine was deposed."""
    if host.watchdog is not None:
        host.watchdog.stop()
    host.committer.close(error)
    host.timers.close()
    host.activities.close()
    host.store.close()
    host.waiters.fail_all(error)
    if host.state != "deposed":
        host.state = "stopped"


async def close_runtime(host: StopHost, engine_id: str) -> bool:
    """``Engine.close``: commit what is pending, stop every actor, release the claims (so a
    peer takes them at once), and fail every call still waiting with ``EngineStopped``. True
    once stopped here (False: not running, or deposed by that last commit, which stopped it)."""
    if host.state != "running":
        return False
    host.state = "stopping"
    await host.maintenance.stop()
    await host.committer.drain()
    if host.state == "deposed":  # that last commit found this engine deposed
        return False
    stop_actors(host)
    if host.watchdog is not None:
        host.watchdog.released()  # its claims are released: nobody is lost, nobody blamed
    try:
        host.store.release_engine(engine_id)
    except WeftError as exc:
        log.warning("could not release claims of engine %s: %s", engine_id, exc)
    shut_down(host, EngineStopped("engine stopped"))
    return True


def depose_runtime(host: StopHost, engine_id: str, reason: str) -> bool:
    """``Engine.depose``: stop every actor and shut down without committing anything more,
    claims included. True once stopped here (False: it was not running or stopping)."""
    if host.state not in ("running", "stopping"):
        return False
    log.error("engine %s deposed: %s", engine_id, reason)
    host.state = "deposed"
    error = EngineDeposed(f"engine {engine_id} was deposed: {reason}", engine_id=engine_id)
    host.committer.close(error)
    host.maintenance.cancel()
    stop_actors(host)
    shut_down(host, error)
    return True
