"""A shard whose loop waits in a round trip to its PostgreSQL server is not hung.

The PostgreSQL store reads on the engine's loop, so a network cut to the server (or a stalled
server) holds the loop in a round trip until it ends, bounded by ``READ_LIMIT``. The loop did not
turn, so its slot's stamp went stale, and the supervisor killed shards as hung at the end of
each cut in the PostgreSQL chaos runs: all three at once after a 3 s cut (and a watchdog that
left a stall note for the workflow on the loop wrote it through the cut, and stopped stamping).
The watchdog now stamps the loop as turning while its thread waits on the server
(``PgEnvironment.waiting_on_server``) and blames no workflow for that wait; a loop blocked by
anything else still goes stale."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from _pausable_proxy import PausableProxy
from weft_actors.shard._watchdog import LoopWatchdog
from weft_actors.store import LoopSlot, loop_slot_path, loop_turning, read_loop_slot
from weft_actors.store._pg import PgStore
from weft_actors.store._stallnotes import FileStallNotes
from weft_actors.workflow import ActivityInfo

pytestmark = pytest.mark.timeout(60)

THRESHOLD = 0.3
CUT = 1.5


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}"))


def _sampled_while(block: object, root: Path, engine_id: str, loop: asyncio.AbstractEventLoop) -> list[bool]:
    """``loop_turning`` sampled every 50 ms from another thread while ``block()`` holds the loop,
    from ``THRESHOLD`` + 0.2 s in (before that, the stamp of the last turn is still fresh)."""
    samples: list[bool] = []
    done = threading.Event()

    def sample() -> None:
        began = time.monotonic()
        while not done.wait(0.05):
            if time.monotonic() - began > THRESHOLD + 0.2:
                samples.append(loop_turning(str(root), engine_id))

    async def hold() -> None:
        await asyncio.sleep(0.3)  # a few ticks: the stamp is fresh when the hold begins
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            block()  # type: ignore[operator]
        finally:
            done.set()
            sampler.join(5)

    loop.run_until_complete(hold())
    return samples


def test_a_loop_held_in_a_round_trip_by_a_cut_still_shows_it_turns_and_one_held_by_other_code_does_not(schema_url, tmp_path):
    (tmp_path / "engines").mkdir()
    engine_id = uuid.uuid4().hex
    with PausableProxy(urlsplit(schema_url).port or 5432) as proxy:
        store = PgStore(_through(schema_url, proxy.port))  # this thread's: the loop's
        loop = asyncio.new_event_loop()
        slot = LoopSlot(loop_slot_path(str(tmp_path), engine_id), THRESHOLD)
        notes = FileStallNotes(str(tmp_path / "engines" / f"{engine_id}.stall"))
        watchdog = LoopWatchdog(loop, THRESHOLD, slot=slot, notes=notes, waiting=store.env.waiting_on_server)
        try:
            loop.run_until_complete(asyncio.sleep(0))
            watchdog.start()

            named: list[object] = []

            def cut_read() -> None:
                # Inside an activity's step, as a store read on the loop can be.
                slot.current = ActivityInfo("k", "wf-1", "run-1", 3, 1, "charge")
                proxy.pause()
                ends = threading.Timer(CUT, proxy.resume)
                ends.start()
                threading.Timer(CUT / 2, lambda: named.append(read_loop_slot(slot.path))).start()
                try:
                    store.feed_head()
                finally:
                    slot.current = None
                ends.join()

            during_cut = _sampled_while(cut_read, tmp_path, engine_id, loop)
            assert during_cut and all(during_cut), f"judged not turning while it waited on its server: {during_cut}"
            assert named == [None], f"a wait on the server was blamed on the code around it: {named}"
            assert not os.path.exists(notes.path), "a stall note blamed a workflow for a wait on the server"
            blocked = _sampled_while(lambda: time.sleep(CUT), tmp_path, engine_id, loop)
            assert blocked and not any(blocked[-5:]), f"a loop blocked in its own code looked as if it turned: {blocked}"
        finally:
            proxy.resume()
            watchdog.stop()
            slot.close()
            loop.close()
            store.close()
            if os.path.exists(slot.path):
                os.unlink(slot.path)
