"""The maintenance pass: heartbeat, reclaim, feed poll, eviction and pruning, every
``heartbeat`` seconds and at once on a hint.

Liveness is per engine: one heartbeat write per interval, whatever the number of claims (a
hinted pass in between writes none). The feed poll is the correctness path for messages to
this engine's workflows; hints only make it sooner.

On a store that commits off the loop (``apply_async``: PostgreSQL) the heartbeat is written
from a thread of its own too. Its write waits for the store's write lock, and on the loop a
wait behind a stalled holder (a backend stopped mid-transaction, a server that stalls) stopped
the loop for seconds: the supervisor, which tells a hung shard by a loop that does not turn,
killed a shard that was only kept from its store. LMDB beats on the loop (a writer thread
beside a busy loop convoys on the GIL; its write lock is local and never stalls that way).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Final, Mapping, Protocol

from .. import _tracing
from .._ratelimit import RateLimitedLog
from ..errors import EngineDeposed, StorageError, StorageFull, WeftError
from ._membership import Membership
from ._reclaim import ReclaimHost, Reclaimer

if TYPE_CHECKING:
    from ._actor import Actor
    from ._eviction import Evictor
    from ._watchdog import LoopWatchdog

__all__ = ["Maintenance"]

log = logging.getLogger("weft_actors.shard")
_FAILURES = RateLimitedLog(log)
"""A full or read-only disk fails every pass the same way: one line per interval and kind."""

FEED_BATCH = 10_000
HISTORY_BATCH = 2_000
"""Keys one retention transaction deletes at most. In a full store a delete needs free pages
too (copy-on-write, and the freelist itself): a batch refused with ``StorageFull`` is retried
at half the size, down to one key, so retention can still free room in a full store."""
HISTORY_BUDGET = 0.025
"""Seconds of one pass spent on retention at most: a backlog is worked off over the following
heartbeat passes (not only every ``prune_interval``) without starving the loop."""


EXPIRY_MARGIN: Final = 0.01
"""Seconds past a peer's lease expiry that the pass which may take its workflows runs: a lease
is expired strictly after its time, and the pass reads the lease clock again."""


class MaintenanceHost(ReclaimHost, Protocol):
    """What the maintenance pass needs of its engine, besides what its reclaimer does: whether
    it runs, its ownership mode and retention settings, the watchdog whose stall note a live
    heartbeat clears, the evictor, the live actors the feed poll delivers to, and the call that
    deposes the engine when its lease is lost."""

    @property
    def state(self) -> str: ...

    @property
    def ownership(self) -> str: ...

    @property
    def prune_interval(self) -> float: ...

    @property
    def retention(self) -> float: ...

    @property
    def feed_retention(self) -> float: ...

    @property
    def engine_retention(self) -> float: ...

    @property
    def watchdog(self) -> LoopWatchdog | None: ...

    @property
    def eviction(self) -> Evictor: ...

    @property
    def actors(self) -> Mapping[str, Actor]: ...

    def deliver_messages(self, actor: Actor, messages: list[tuple[int, dict[str, Any]]]) -> None: ...

    def depose(self, reason: str) -> None: ...


class Maintenance:
    def __init__(self, engine: MaintenanceHost) -> None:
        self.engine = engine
        self.reclaimer = Reclaimer(engine)
        self.feed_cursor = engine.store.feed_head()
        self._next_prune = engine.clock.monotonic() + engine.prune_interval
        self._history_backlog = False
        self._history_batch = HISTORY_BATCH
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        self._beater: concurrent.futures.ThreadPoolExecutor | None = None
        """The heartbeat's own thread, on a store that commits off the loop (None: on the loop)."""
        self.membership = Membership(engine, enabled=getattr(engine.store, "apply_async", None) is not None)
        """Rebalancing across hosts, on a store that several supervisors share (PostgreSQL)."""
        if getattr(engine.store, "apply_async", None) is not None:
            self._beater = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="weft-heartbeat")

    # -- scheduling -----------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._task = loop.create_task(self._run())

    def hint(self) -> None:
        """Run a pass now (the store changed). Callable from any thread; hints coalesce."""
        if threading.get_ident() == self._loop_thread:
            self._wake.set()
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._stop_beater()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._stop_beater()

    def _stop_beater(self) -> None:
        self.membership.cancel()
        beater, self._beater = self._beater, None
        if beater is not None:
            beater.shutdown(wait=False)  # a beat under way ends with its bounded wait

    async def _run(self) -> None:
        engine = self.engine
        loop = asyncio.get_running_loop()
        next_beat = loop.time() + engine.heartbeat
        while engine.state == "running":
            wait = next_beat - loop.time()
            expiry = self.reclaimer.next_expiry
            if expiry is not None:  # a peer that stopped renewing is taken over when it expires
                until = expiry - engine.clock.lease_now() + EXPIRY_MARGIN
                if until > 0.0:  # past: its pass ran, and a pass that failed (the store down)
                    wait = min(wait, until)  # is retried at the heartbeat, never in a spin
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, wait))
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if engine.state != "running":
                return
            beat = loop.time() >= next_beat
            if beat:
                next_beat = loop.time() + engine.heartbeat
                beater = self._beater
                if beater is not None:
                    try:
                        await loop.run_in_executor(beater, self._beat)
                    except EngineDeposed as exc:
                        engine.depose(str(exc))
                        return
                    except RuntimeError:  # shut down as the engine stops
                        return
                    if engine.state != "running":
                        return
            try:
                self.run_pass(heartbeat=beat, beaten=self._beater is not None)
            except Exception:
                _FAILURES.log(logging.ERROR, "pass", "maintenance pass failed", exc_info=True)

    # -- the pass -------------------------------------------------------------------------

    def run_pass(self, heartbeat: bool = True, beaten: bool = False) -> None:
        """One pass; ``heartbeat``: an interval's pass (it renews the lease, unless ``beaten``:
        its heartbeat was written already, off the loop)."""
        engine = self.engine
        started = time.perf_counter()
        try:
            engine.store.verify_lock_file()
        except StorageError as exc:  # lock.mdb deleted or replaced: writing on would corrupt
            engine.depose(str(exc))
            return
        engine.store.restore_lock_files()
        _tracing.tracer(configure=True)  # a tracer provider set since the last pass turns spans on
        try:
            if heartbeat and not beaten:
                self._beat()
            self.reclaimer.run()
        except EngineDeposed as exc:
            engine.depose(str(exc))
            return
        if engine.state != "running":
            return
        self.membership.check(self.reclaimer.offers)
        self.poll_feed()
        engine.eviction.run()
        self._maybe_prune(heartbeat)
        engine.metrics.reclaim_pass(time.perf_counter() - started)

    def _beat(self) -> None:
        """One write that keeps this engine's lease (none in ``single`` mode, which only
        checks that its record is still live); deposes the engine if it is not."""
        engine = self.engine
        try:
            if engine.ownership == "single":
                engine.store.check_engine(engine.engine_id)
            else:
                engine.store.heartbeat(engine.engine_id, self.feed_cursor)
            watchdog = engine.watchdog
            if watchdog is not None and watchdog.noted:
                watchdog.clear_note()  # still live after a stall: it blames nobody
        except EngineDeposed:
            raise
        except WeftError as exc:
            engine.metrics.heartbeat_failures += 1
            _FAILURES.warning("heartbeat", "heartbeat failed: %s", exc)

    # -- feed -----------------------------------------------------------------------------

    def poll_feed(self) -> None:
        """Wake this engine's workflows that got inbox messages (or were closed by another
        engine) since the cursor: O(new entries), not O(parked workflows)."""
        engine = self.engine
        store = engine.store
        while True:
            entries = store.read_feed(self.feed_cursor, FEED_BATCH)
            if not entries:
                break
            newest: dict[str, int] = {}
            for seq, wid in entries:
                newest[wid] = seq
            for wid, seq in newest.items():
                actor = engine.actors.get(wid)
                if actor is not None:
                    if seq > actor.inbox_seen:
                        engine.deliver_messages(actor, store.load_inbox(wid))
                elif wid in engine.eviction.evicted:
                    engine.eviction.revive_soon(wid, "signal")  # its replay reads the whole inbox
            self.feed_cursor = entries[-1][0]
            if len(entries) < FEED_BATCH:
                break
        engine.metrics.feed_lag = store.feed_head() - self.feed_cursor

    # -- pruning --------------------------------------------------------------------------

    def _maybe_prune(self, heartbeat: bool) -> None:
        engine = self.engine
        now = engine.clock.monotonic()  # an interval: a wall-clock jump must not move it
        if now < self._next_prune:
            if self._history_backlog and heartbeat:  # not on hinted passes, however many
                self.prune_history()
            return
        self._next_prune = now + engine.prune_interval
        self.prune()

    def prune(self) -> None:
        """Delete feed entries every live engine has passed (older than the retention),
        registry records of engines long gone that hold nothing, and the history of workflows
        that finished longer ago than ``retention``."""
        engine = self.engine
        try:
            engine.metrics.feed_pruned += engine.store.prune_feed(engine.engine_id, self.feed_cursor, engine.feed_retention)
            engine.metrics.engines_pruned += len(engine.store.prune_engines(engine.engine_retention))
        except WeftError as exc:
            _FAILURES.warning("prune", "pruning failed: %s", exc)
        self.prune_history()

    def prune_history(self) -> None:
        """Bounded transactions of the retention prune, for at most ``HISTORY_BUDGET`` seconds;
        what is left is marked as a backlog for the next pass."""
        engine = self.engine
        deadline = time.perf_counter() + HISTORY_BUDGET
        try:
            while True:
                try:
                    result = engine.store.prune_history(engine.retention, engine.engine_id, self._history_batch)
                except StorageFull:
                    if self._history_batch == 1:
                        raise
                    self._history_batch = max(1, self._history_batch // 2)
                    continue
                self._history_batch = min(HISTORY_BATCH, self._history_batch * 2)
                engine.metrics.histories_pruned += result.workflows
                self._history_backlog = result.more
                if not result.more or time.perf_counter() >= deadline or engine.state != "running":
                    return
        except WeftError as exc:
            self._history_backlog = False
            _FAILURES.warning("retention", "retention prune failed: %s", exc)
