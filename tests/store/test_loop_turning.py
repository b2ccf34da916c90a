"""The loop slot's "loop turned" stamp, the supervisor's proof that a silent shard's loop still
turns (``store.loop_turning``): written by the watchdog thread while the loop turns, it goes
stale within the stall threshold once the loop stops (a SIGSTOP, a blocking call), and a
shard with no slot or no stamp yet is judged by its heartbeat alone."""

from __future__ import annotations

import asyncio
import time

import pytest

from weft_actors.shard._watchdog import LoopWatchdog
from weft_actors.store import LoopSlot, loop_slot_path, loop_turning
from weft_actors.supervisor._liveness import hung_reason

pytestmark = pytest.mark.timeout(30)

THRESHOLD = 0.4


def test_the_stamp_moves_while_the_loop_turns_and_goes_stale_when_it_stops(tmp_path):
    (tmp_path / "engines").mkdir()
    store_path, engine = str(tmp_path), "e" * 32
    assert not loop_turning(store_path, engine)  # no slot: nothing to spare by
    slot = LoopSlot(loop_slot_path(store_path, engine), THRESHOLD)
    assert not loop_turning(store_path, engine)  # no stamp yet
    loop = asyncio.new_event_loop()
    dog = LoopWatchdog(loop, THRESHOLD, name="t", slot=slot)
    seen: list[bool] = []

    async def turning() -> None:
        dog.start()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            seen.append(loop_turning(store_path, engine))

    try:
        loop.run_until_complete(turning())
        assert seen and seen[-1] and sum(seen) >= len(seen) // 2, seen  # stamped from the first ticks on
        time.sleep(THRESHOLD * 2)  # the loop does not turn now (nothing runs it): the stamp stands still
        assert not loop_turning(store_path, engine)
    finally:
        dog.stop()
        loop.close()
        slot.close()


def test_a_silent_shard_whose_loop_turns_is_spared_and_one_whose_loop_stopped_is_not():
    record = {"state": "live", "expires_at": 10.0, "ttl": 3.0}  # renewed at 7.0
    assert hung_reason(record, 0.0, 20.0, 3.0, turning=True) is None
    assert "has not heartbeated" in (hung_reason(record, 0.0, 20.0, 3.0, turning=False) or "")
    assert hung_reason(record, -8.0, 20.0, 3.0, turning=True) is None  # holding the lock long, loop turning
    assert hung_reason({**record, "state": "dead"}, 0.0, 20.0, 3.0, turning=True) == "its engine is marked dead"
