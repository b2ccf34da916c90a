"""Eviction: at most ``max_live_actors`` workflow actors stay in memory; parked ones beyond that
are dropped least-recently-used first and replayed from the store on their next wake.

An evicted workflow keeps its claim: the holder in the store still names this engine at the same
epoch, so heartbeats keep it ours and no peer reclaims it. The engine remembers only its id, its
epoch and, if it waits on a timer, one timer-heap entry for the earliest of its durable timers.
Any wake (an inbox message seen by a local send or by the feed poll, or that timer) *revives* it:
``drive`` checks that this engine still holds it at that epoch and that it still runs (the wake
guard), replays its op log and reads its whole inbox, so the message that woke it is delivered
by the replay itself and its timers are re-armed from their records. If the claim moved (a peer
took it over after this engine was judged dead, or it was closed) the wake is discarded and
counted, and nothing resumes here. Queries need no revival: they replay read-only (``_reads``).

Recency is the order of the engine's ``actors`` dict: spawning or waking an actor (re)inserts it
at the end, and an eviction pass moves the busy actors it meets to the end, so parked actors
gather at the front, least recently used first. That costs no memory per actor.

Evicting discards the run (``WorkflowRun.discard``), which cuts the reference cycle between a
run and its context, so reference counting frees it at once. Workflow code may still leave cycles
of its own (objects of its state that refer to each other, say), and a parked actor has usually
been promoted to the oldest generation, which a tuned engine (``tune_gc``) collects rarely. So
after evicting ``max(GC_EVERY, max_live_actors)`` actors the evictor runs a full collection:
memory stays bounded by the cap instead of growing with every workflow ever parked.
"""

from __future__ import annotations

import gc
import logging
import time
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from ._actor import Actor
    from ._committer import GroupCommitter
    from ._driving import Driver
    from ._metrics import EngineMetrics
    from ._timers import TimerService

__all__ = ["Evictor", "is_parked"]

log = logging.getLogger("weft_actors.shard")

SCAN_SLACK: Final = 1_000
"""An eviction pass looks at most at ``2 * excess + SCAN_SLACK`` actors, so a table full of
busy actors costs a bounded pass (the busy ones it saw move to the back for the next one)."""

GC_EVERY: Final = 10_000
"""Fewest evictions between two forced full collections (a full collection costs about 8 µs
per live actor, so it is amortised over at least as many evictions as there are live actors)."""


class Evicted:
    """What an evicted workflow leaves in memory."""

    __slots__ = ("epoch", "timer")

    def __init__(self, epoch: int, timer: list[Any] | None) -> None:
        self.epoch = epoch
        self.timer = timer


def is_parked(actor: Actor) -> bool:
    """True when dropping ``actor`` loses nothing that replay would not rebuild at once: it
    awaits something (ops pending), no commit is in flight or being gathered, no activity
    attempt runs, and no wake (an attempt's outcome, a timer fire) waits to be handled. Stuck
    (non-deterministic) actors count as parked: replaying them parks them stuck again.

    Were it ever wrong, nothing would be lost, only work redone: everything an actor has
    acknowledged is committed, and a replay re-runs an unrecorded attempt (at least once)."""
    return (
        not actor.busy
        and not actor.closed
        and not actor.attempts
        and not actor.wakes
        and actor.writes is None
        and actor.after is None
        and (bool(actor.ops) or actor.stuck)
    )


def earliest_timer(actor: Actor) -> float | None:
    """When the earliest durable timer of a parked run fires: the ones armed in memory, and
    the ones recorded on its pending ops (``fire_at`` of a sleep or a wait's timeout,
    ``retry_at`` of an activity's backoff)."""
    times = [ref.fire_at for ref, _ in actor.timers.values()]
    for record in actor.run.history.values():
        if "t" not in record:
            for field in ("fire_at", "retry_at"):
                at = record.get(field)
                if at is not None:
                    times.append(at)
    return min(times, default=None)


class EvictionHost(Protocol):
    """What eviction needs of its engine: the table of live actors (in recency order), whether
    it runs, its loop (through the committer), the timers that wake an evicted workflow, the
    driver that queues revivals, a drive, the waiters to wake when a wake is discarded, and
    the counters."""

    @property
    def actors(self) -> dict[str, Actor]: ...

    @property
    def state(self) -> str: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def timers(self) -> TimerService: ...

    @property
    def driver(self) -> Driver: ...

    @property
    def metrics(self) -> EngineMetrics: ...

    def drive_or_orphan(self, wid: str, epoch: int) -> bool | None: ...

    def wake_waiters(self, wid: str) -> None: ...


class Evictor:
    """The evicted workflows of one engine, and the passes that evict and revive them."""

    def __init__(self, engine: EvictionHost, max_live: int) -> None:
        if max_live < 1:
            raise ValueError("max_live_actors must be >= 1")
        self.engine = engine
        self.max_live = max_live
        self.evicted: dict[str, Evicted] = {}
        self.evictions = 0
        self.revivals = 0
        self.collections = 0
        self._since_collect = 0
        self._scheduled = False
        self._fire = self._timer_fired  # one bound method shared by every timer entry

    # -- evicting -------------------------------------------------------------------------

    def schedule(self) -> None:
        """Run a pass soon (once per loop turn however many spawns asked)."""
        if not self._scheduled:
            self._scheduled = True
            self.engine.committer.loop.call_soon(self.run)

    def run(self) -> int:
        """Evict parked actors, least recently used first, until at most ``max_live`` are live
        (or the bounded scan found no more). Returns how many were evicted."""
        self._scheduled = False
        engine = self.engine
        actors = engine.actors
        excess = len(actors) - self.max_live
        if excess <= 0 or engine.state != "running":
            return 0
        victims: list[Actor] = []
        busy: list[Actor] = []
        budget = 2 * excess + SCAN_SLACK
        for actor in actors.values():
            if is_parked(actor):
                victims.append(actor)
                if len(victims) >= excess:
                    break
            else:
                busy.append(actor)
            budget -= 1
            if budget <= 0:
                break
        for actor in busy:  # seen in use: most recently used now
            self.touch(actor)
        for actor in victims:
            self.evict(actor)
        self._since_collect += len(victims)
        if self._since_collect >= max(GC_EVERY, self.max_live):
            self._since_collect = 0
            engine.committer.loop.call_soon(self._collect)  # once this pass holds no victim
        return len(victims)

    def _collect(self) -> None:
        self.collections += 1
        started = time.perf_counter()
        freed = gc.collect()
        log.debug("full collection after evictions: %s objects freed in %.3f s", freed, time.perf_counter() - started)

    def touch(self, actor: Actor) -> None:
        """Mark ``actor`` most recently used (move it to the end of the table)."""
        actors = self.engine.actors
        wid = actor.wid
        if actors.get(wid) is actor:
            del actors[wid]
            actors[wid] = actor

    def evict(self, actor: Actor) -> None:
        """Drop a parked actor from memory, keeping its claim and a wake-up for its timer."""
        engine = self.engine
        wid = actor.wid
        fire_at = earliest_timer(actor)
        actor.close()
        if engine.actors.get(wid) is actor:
            del engine.actors[wid]
        entry = None if fire_at is None else engine.timers.add(fire_at, self._fire, wid)
        self.evicted[wid] = Evicted(actor.epoch, entry)
        self.evictions += 1

    # -- reviving -------------------------------------------------------------------------

    def _timer_fired(self, wid: str) -> None:
        self.revive_soon(wid, "timer")

    def revive(self, wid: str, kind: str) -> Actor | None:
        """Replay an evicted workflow from the store, which also delivers whatever woke it;
        the live actor, or ``None`` if it is not evicted here or the wake was discarded."""
        ref = self._unevict(wid)
        return None if ref is None else self.revived(wid, ref.epoch, kind)

    def revive_soon(self, wid: str, kind: str) -> None:
        """``revive`` by the driver's queue (``_driving``): for wakes that come in bulk (the
        feed poll, timers), so that many revivals never block the loop in one go."""
        ref = self._unevict(wid)
        if ref is not None:
            self.engine.driver.submit(wid, ref.epoch, kind)

    def _unevict(self, wid: str) -> Evicted | None:
        if self.engine.state != "running":
            return None  # stopping: its claim is released (or left to expire) with the others
        ref = self.evicted.pop(wid, None)
        if ref is not None:
            self.engine.timers.cancel(ref.timer)
        return ref

    def revived(self, wid: str, epoch: int, kind: str) -> Actor | None:
        """Drive ``wid``, unevicted at ``epoch``: ``revive``'s second half."""
        engine = self.engine
        driven = engine.drive_or_orphan(wid, epoch)
        if driven is None:
            return None
        if not driven:  # the wake guard: the claim moved, or the workflow ended elsewhere
            engine.metrics.wake_discarded(kind)
            engine.metrics.claim("deposed")
            engine.wake_waiters(wid)
            return None
        self.revivals += 1
        return engine.actors.get(wid)

    def forget(self, wid: str) -> None:
        """``wid`` is no longer this engine's to wake (driven anew, or closed)."""
        ref = self.evicted.pop(wid, None)
        if ref is not None:
            self.engine.timers.cancel(ref.timer)

    def clear(self) -> None:
        for ref in self.evicted.values():
            self.engine.timers.cancel(ref.timer)
        self.evicted.clear()

    def snapshot(self) -> dict[str, int]:
        return {
            "evicted_actors": len(self.evicted),
            "max_live_actors": self.max_live,
            "evictions_total": self.evictions,
            "revivals_total": self.revivals,
            "eviction_collections_total": self.collections,
        }
