"""The reclaim pass: take over the workflows nobody live drives, and drive them.

Candidates are the running workflows of dead or expired engines (a ``by_engine`` scan) and
running workflows with no holder. Each live engine takes the candidates whose
rendezvous-preferred engine, among the live ones that run its type (their registry records
say which), is itself, and any candidate still stranded one heartbeat later (its preferred
engine may be busy). A takeover is a CAS on the exact holder bytes read; a candidate that
loses is re-read and retried, at most ``MAX_TAKEOVER_TRIES`` times per pass. Only workflow
types this engine registers are taken: one it lacks stays where it is, for an engine that
has it, and is never failed for it.

Claims are taken in chunks of ``TAKE_CHUNK`` (one transaction each), and a workflow taken is
queued for the driver (``_driving``), which replays in bounded slices of loop time: a pass
takes one chunk when the driver has nothing queued, and the driver takes the next one
(``take_more``) when its queue runs dry. So a large backlog never blocks the loop, and what
this engine cannot drive yet stays a candidate that other live engines may take. A drive
that throws is retried on later passes, never released.

The same pass fires the timers that have no owner: delayed starts (acquired in the
pending -> running transaction) and execution deadlines (closed by whichever engine sees
them first, which rotates the epoch and deposes the owner).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, Mapping, Protocol

from .._placement import preferred
from ..errors import WeftError
from ..store import CloseWorkflow, FireStart, expiry_time, offered_types
from ..workflow import SYSTEM_TYPES
from . import _events as events
from ._handed import adopt_marked
from ._takeover_source import takeover_sources

if TYPE_CHECKING:
    from .._clock import Clock
    from ..store import LmdbStore
    from ._committer import GroupCommitter
    from ._driving import Driver
    from ._metrics import EngineMetrics
    from ._reuse import RefusedOutcomes

__all__ = ["Reclaimer", "MAX_TAKEOVER_TRIES", "TAKE_CHUNK"]

log = logging.getLogger("weft_actors.shard")

MAX_TAKEOVER_TRIES: Final = 5
TAKE_CHUNK: Final = 500
"""Candidates one takeover transaction CASes at most."""
TAKEOVER_LINES: Final = 20
"""Workflows of one takeover transaction logged one line each; the rest in one line per lost
engine, with their count (a dead engine's 100,000 workflows would be 100,000 lines)."""
SCAN_LIMIT: Final = 4 * TAKE_CHUNK
"""Candidates one read of the backlog returns at most (the read costs ~4 µs a candidate)."""


class ReclaimHost(Protocol):
    """What the reclaim pass needs of its engine: who it is and what it runs, its lease
    timing, the store, the committer (delayed starts, deadlines), the driver that drives what
    it takes, the orphans it retries, the outcomes kept for them, and the call that follows
    up a close it committed."""

    @property
    def engine_id(self) -> str: ...

    @property
    def workflows(self) -> Mapping[str, object]: ...

    @property
    def heartbeat(self) -> float: ...

    @property
    def probe_peers(self) -> bool: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def store(self) -> LmdbStore: ...

    @property
    def committer(self) -> GroupCommitter: ...

    @property
    def metrics(self) -> EngineMetrics: ...

    @property
    def driver(self) -> Driver: ...

    @property
    def actors(self) -> Mapping[str, object]: ...

    @property
    def orphans(self) -> set[str]: ...

    @property
    def refused(self) -> RefusedOutcomes: ...

    def closed_externally(self, workflow_id: str, result: dict[str, Any]) -> None: ...


class Reclaimer:
    def __init__(self, engine: ReclaimHost) -> None:
        self.engine = engine
        self._first_seen: dict[str, float] = {}
        """Candidates preferred by another engine -> when this engine first saw them."""
        self._firing: set[str] = set()
        self._untaken: list[tuple[str, bytes | None]] = []
        """Candidates this engine wants and has not tried yet, as the last read saw them."""
        self._more = False
        self._live: list[str] = []
        self._types: dict[str, str] = {}
        """The type of each candidate of the last read this engine wants (for the log line)."""
        self._offers: dict[str, frozenset[str] | None] = {}
        """Live engine -> the types it runs (None: it did not say), as of the last pass."""
        self._takers: dict[str, list[str]] = {}
        """Workflow type -> the live engines that run it, made as needed in one pass."""
        self.next_expiry: float | None = None
        """When the first live peer's lease runs out unless it renews (lease clock), as of
        the last pass: the maintenance loop runs a pass then, not at its next heartbeat."""

    # -- liveness -------------------------------------------------------------------------

    def live_engines(self) -> list[str]:
        """Ids of the live engines, this one included. With ``probe_peers``, a peer whose
        process is confirmed gone (its lock file is free) is marked dead on the way. Also
        notes which types each runs, for ``takers``."""
        engine = self.engine
        store = engine.store
        live = [engine.engine_id]
        offers: dict[str, frozenset[str] | None] = {engine.engine_id: frozenset(engine.workflows)}
        now = engine.clock.lease_now()
        next_expiry = None
        for engine_id, record in store.live_engines().items():
            if engine_id == engine.engine_id:
                continue
            if engine.probe_peers and store.process_gone(engine_id):
                log.info("engine %s: its process is gone; marking it dead", engine_id)
                store.mark_engine_dead(engine_id)
                continue
            live.append(engine_id)
            offers[engine_id] = offered_types(record)
            expiry = expiry_time(record)
            if expiry > now and (next_expiry is None or expiry < next_expiry):
                next_expiry = expiry
        self.next_expiry = next_expiry
        self._offers = offers
        self._takers = {}
        return live

    @property
    def offers(self) -> Mapping[str, frozenset[str] | None]:
        """Live engine (this one included) -> the types it runs, as of the last pass."""
        return self._offers

    def takers(self, wf_type: str, live: list[str]) -> list[str]:
        """The engines of ``live`` that run ``wf_type`` (a peer that did not say counts as
        one): among them the rendezvous hash picks the one to take a workflow of that type
        first, so one whose hash-preferred engine lacks its type is not left waiting for a
        heartbeat. Every engine reads the same records, so they agree on it."""
        found = self._takers.get(wf_type)
        if found is None:
            offers = self._offers
            system = wf_type in SYSTEM_TYPES  # every engine runs those: records do not list them
            found = [engine_id for engine_id in live if system or (types := offers.get(engine_id)) is None or wf_type in types]
            self._takers[wf_type] = found
        return found

    # -- takeover -------------------------------------------------------------------------

    def run(self) -> int:
        """One reclaim pass; returns how many workflows were taken over in it."""
        engine = self.engine
        live = self.live_engines()
        self._scan(live, engine.clock.lease_now())
        adopt_marked(engine)  # handed here by a peer: driven below even if its wake was lost
        self._retry_orphans()  # before taking more: a drive that failed in this pass waits
        taken = 0
        driver = engine.driver
        if not driver.background:
            while self.untaken:
                taken += self.take_more()
        elif not driver.queue:
            taken = self.take_more()
            if self._untaken or self._more:
                driver.schedule()  # the driver takes the rest as it goes
        self._fire_system_timers(live, engine.clock.now())
        return taken

    def _scan(self, live: list[str], now: float) -> None:
        """Read up to ``SCAN_LIMIT`` candidates and keep those this engine wants (preferred to
        it, or stranded for a heartbeat) as ``_untaken``; ``_more`` if the read was cut off."""
        engine = self.engine
        me = engine.engine_id
        self._live = live
        wanted: list[tuple[str, bytes | None]] = []
        types: dict[str, str] = {}
        first_seen: dict[str, float] = {}
        candidates = engine.store.reclaim_candidates(me, SCAN_LIMIT)
        for wid, holder, wf_type in candidates:
            if wf_type not in engine.workflows:
                continue
            seen = self._first_seen.get(wid, now)
            if preferred(wid, self.takers(wf_type, live)) == me or now - seen >= engine.heartbeat:
                wanted.append((wid, holder))
                types[wid] = wf_type
            else:
                first_seen[wid] = seen
        self._first_seen = first_seen
        self._types = types
        self._untaken = wanted
        self._more = len(candidates) >= SCAN_LIMIT and bool(wanted)

    def take_more(self) -> int:
        """Take the next chunk of the candidates this engine wants (``untaken``; the next
        ``SCAN_LIMIT`` are read once those are tried) and queue the winners for the driver;
        how many were taken."""
        if not self._untaken and self._more:
            self._scan(self._live, self.engine.clock.lease_now())
        wanted = self._untaken
        if not wanted:
            return 0
        chunk, self._untaken = wanted[:TAKE_CHUNK], wanted[TAKE_CHUNK:]
        taken = self._take(chunk)
        if not taken:
            self._more = False  # a whole chunk lost: the next pass reads afresh
        return taken

    @property
    def untaken(self) -> bool:
        """Whether ``take_more`` has anything left to try."""
        return bool(self._untaken) or self._more

    def _take(self, wanted: list[tuple[str, bytes | None]]) -> int:
        engine = self.engine
        store = engine.store
        metrics = engine.metrics
        taken = 0
        unlogged: dict[str | None, int] = {}
        described: dict[str | None, str] = {}
        for attempt in range(1, MAX_TAKEOVER_TRIES + 1):
            sources = takeover_sources(store, wanted)  # read before the claims move
            won = store.takeover(engine.engine_id, wanted)
            lost = []
            for wid, holder in wanted:
                epoch = won.get(wid)
                if epoch is None:
                    metrics.claim("lost_race")
                    lost.append(wid)
                    continue
                metrics.claim("takeover")
                taken += 1
                from_engine, source = sources[wid]
                described[from_engine] = source
                if taken <= TAKEOVER_LINES:
                    events.workflow_taken_over(engine.engine_id, wid, self._types.get(wid), from_engine, epoch, source)
                else:
                    unlogged[from_engine] = unlogged.get(from_engine, 0) + 1
                self.drive(wid, epoch)
            if not lost or attempt == MAX_TAKEOVER_TRIES:
                break
            # Re-read: a candidate another live engine won is no longer listed.
            fresh = {wid: holder for wid, holder, _ in store.reclaim_candidates(engine.engine_id, SCAN_LIMIT)}
            wanted = [(wid, fresh[wid]) for wid in lost if wid in fresh]
            if not wanted:
                break
        for from_engine, count in unlogged.items():
            events.workflows_taken_over(engine.engine_id, count, from_engine, described[from_engine])
        return taken

    def drive(self, wid: str, epoch: int) -> None:
        self.engine.driver.submit(wid, epoch)

    def _retry_orphans(self) -> None:
        engine = self.engine
        for wid in list(engine.orphans):
            holder = engine.store.get_holder(wid)  # a read the store refuses keeps it an orphan
            engine.orphans.discard(wid)
            if holder is not None and holder[0] == engine.engine_id and wid not in engine.actors:
                self.drive(wid, holder[1])
            elif engine.refused.kept and wid not in engine.actors:
                engine.refused.forget(wid)  # its claim moved: what was kept for it is never used here

    # -- timers without an owner ----------------------------------------------------------

    def _fire_system_timers(self, live: list[str], now: float) -> None:
        engine = self.engine
        for fire_at, wid, kind, run_id in engine.store.due_system_timers():
            key = f"{kind}/{wid}/{run_id}"
            if key in self._firing:
                continue
            if kind == "start":
                record = engine.store.get_workflow(wid)
                if record is None or record["type"] not in engine.workflows:
                    continue  # never claimed by an engine that cannot run it
                if preferred(wid, self.takers(record["type"], live)) != engine.engine_id and now - fire_at < engine.heartbeat:
                    continue  # its preferred engine fires it; anyone that can does once it is overdue
                self._firing.add(key)
                engine.committer.submit(FireStart(wid, run_id), self._started(key, wid))
            elif kind == "deadline":
                if preferred(wid, live) != engine.engine_id and now - fire_at < engine.heartbeat:
                    continue  # any engine may close it: its preferred one does, or anyone once overdue
                self._firing.add(key)
                error = {"type": "WorkflowTimedOut", "message": "execution timeout", "kind": "timed_out"}
                engine.committer.submit(CloseWorkflow(wid, "timed_out", error, run_id), self._closed(key, wid))

    def fire_promoted(self, promoted: list[tuple[str, str, str]]) -> None:
        """Start at once the queued workflows a commit of this engine gave a slot (``_flow``),
        those whose type it runs: each is a due delayed start, which the maintenance pass of
        an engine that runs it would otherwise fire."""
        engine = self.engine
        for wid, run_id, wf_type in promoted:
            key = f"start/{wid}/{run_id}"
            if wf_type in engine.workflows and key not in self._firing:
                self._firing.add(key)
                engine.committer.submit(FireStart(wid, run_id), self._started(key, wid))

    def _started(self, key: str, wid: str) -> Any:
        def done(epoch: Any) -> None:
            self._firing.discard(key)
            if isinstance(epoch, int):
                self.engine.metrics.claim("acquired")
                self.drive(wid, epoch)

        return done

    def _closed(self, key: str, wid: str) -> Any:
        def done(result: Any) -> None:
            self._firing.discard(key)
            if not isinstance(result, WeftError):
                self.engine.closed_externally(wid, result)

        return done
