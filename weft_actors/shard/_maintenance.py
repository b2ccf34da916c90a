"""The maintenance pass: heartbeat, reclaim of dead engines' workflows, feed poll.

Runs every ``heartbeat`` seconds (and at once when hinted). Liveness is per engine: one
heartbeat write per pass, whatever the number of claims.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING

from ..errors import EngineDeposed, WeftError
from ._placement import preferred

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["Maintenance"]

log = logging.getLogger("weft_actors.shard")

MAX_TAKEOVER_TRIES = 5


class Maintenance:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.feed_cursor = engine.store.feed_head()
        self.feed_lag = 0
        self.last_pass_seconds = 0.0
        self._stranded: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = loop.create_task(self._run())

    def hint(self) -> None:
        """Run a pass now (a hint said the store changed)."""
        self._wake.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while self.engine.state == "running":
            try:
                await asyncio.wait_for(self._wake.wait(), self.engine.heartbeat)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            if self.engine.state != "running":
                return
            try:
                self.run_pass()
            except Exception:
                log.exception("maintenance pass failed")

    def run_pass(self) -> None:
        engine = self.engine
        started = time.perf_counter()
        try:
            engine.store.heartbeat(engine.engine_id, self.feed_cursor)
        except EngineDeposed as exc:
            engine.depose(str(exc))
            return
        except WeftError as exc:
            engine.metrics["heartbeat_failures"] += 1
            log.warning("heartbeat failed: %s", exc)
        self.reclaim_pass()
        self.poll_feed()
        self.last_pass_seconds = time.perf_counter() - started

    # -- reclaim --------------------------------------------------------------------------

    def reclaim_pass(self) -> int:
        """Take over the workflows of dead or expired engines that prefer this engine (or that
        stayed stranded a whole interval), then drive them. Returns how many were taken."""
        engine = self.engine
        store = engine.store
        now = engine.clock.now()
        live = []
        for engine_id, record in store.engines().items():
            if engine_id == engine.engine_id:
                live.append(engine_id)
                continue
            if record["state"] != "live":
                continue
            if store.process_gone(engine_id):
                log.info("engine %s: its process is gone; marking it dead", engine_id)
                store.mark_engine_dead(engine_id)
                continue
            if record["expires_at"] + 2 * record["heartbeat"] >= now:
                live.append(engine_id)
        taken = 0
        candidates = [c for c in store.reclaim_candidates(engine.engine_id) if c[2] in engine.workflows]
        wanted = [
            (wid, holder)
            for wid, holder, _ in candidates
            if wid in self._stranded or preferred(wid, live) == engine.engine_id
        ]
        self._stranded = {wid for wid, _, _ in candidates} - {wid for wid, _ in wanted}
        for attempt in range(MAX_TAKEOVER_TRIES):
            if not wanted:
                break
            won = store.takeover(engine.engine_id, wanted)
            retry = []
            for wid, holder in wanted:
                epoch = won.get(wid)
                if epoch is None:
                    engine.metrics["claims_lost_race"] += 1
                    retry.append(wid)
                    continue
                engine.metrics["claims_takeover"] += 1
                taken += 1
                self._drive(wid, epoch)
            if not retry or attempt == MAX_TAKEOVER_TRIES - 1:
                break
            fresh = {wid: holder for wid, holder, _ in store.reclaim_candidates(engine.engine_id)}
            wanted = [(wid, fresh[wid]) for wid in retry if wid in fresh]
        for wid in list(engine.orphans):
            holder = store.get_holder(wid)
            engine.orphans.discard(wid)
            if holder is not None and holder[0] == engine.engine_id and wid not in engine.actors:
                self._drive(wid, holder[1])
        return taken

    def _drive(self, wid: str, epoch: int) -> None:
        engine = self.engine
        try:
            engine.drive(wid, epoch)
        except Exception:
            log.exception("workflow %s: drive failed; retrying on a later pass", wid)
            actor = engine.actors.pop(wid, None)
            if actor is not None:
                actor.close()
            engine.orphans.add(wid)

    # -- feed -----------------------------------------------------------------------------

    def poll_feed(self) -> None:
        """Wake this engine's workflows that got inbox messages since the cursor."""
        engine = self.engine
        store = engine.store
        entries = store.read_feed(self.feed_cursor)
        if not entries:
            self.feed_lag = 0
            return
        newest: dict[str, int] = defaultdict(int)
        for seq, wid in entries:
            newest[wid] = max(newest[wid], seq)
        for wid, seq in newest.items():
            actor = engine.actors.get(wid)
            if actor is not None and seq > actor.inbox_seen:
                engine.deliver_messages(actor, store.load_inbox(wid))
        self.feed_cursor = entries[-1][0]
        self.feed_lag = store.feed_head() - self.feed_cursor
