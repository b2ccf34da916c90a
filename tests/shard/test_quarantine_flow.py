"""A quarantined workflow of a type under flow control gives its slot up: the next workflow
waiting in its queue runs at once, with no operator action; once lifted, the quarantined one
takes the next free slot, ahead of starts that queued meanwhile. Owners are "lost" here by
letting their leases expire on a fake clock after their watchdog's stall note named the
poison (the evidence a quarantine needs), as in test_quarantine.py."""

from __future__ import annotations

import asyncio

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.store import check_store, stall_note_path, write_stall_note
from weft_actors.testing import FakeClock

GATE: dict[str, asyncio.Event] = {}
RAN: list[str] = []
"""The keys whose activity returned, in that order."""
HEARTBEAT, TTL = 0.5, 1.5


@activity
async def gated(key: str) -> str:
    """Never returns while its gate is shut: its owner is lost (by the test) while it runs."""
    await GATE[key].wait()
    RAN.append(key)
    return f"{key} done"


@workflow(concurrency=1)
async def one_at_a_time(ctx, key: str) -> str:
    return await ctx.run(gated, key)


def _stalled_on(engine: Engine, wid: str) -> None:
    """Leave the stall note ``engine``'s watchdog leaves when ``wid``'s activity blocks its loop."""
    run_id = engine.store.get_workflow(wid)["run_id"]
    write_stall_note(stall_note_path(engine.store.path, engine.engine_id), {"wid": wid, "run_id": run_id, "kind": "activity", "name": "gated", "seq": 0})


def _engine(path, clock: FakeClock) -> Engine:
    return Engine(str(path), app=[one_at_a_time], clock=clock, heartbeat=HEARTBEAT, ttl=TTL, background=False, quarantine_after=2)


@pytest.mark.timeout(60)
def test_a_quarantined_workflow_frees_its_concurrency_slot_and_goes_first_once_lifted(tmp_path):
    async def main():
        clock = FakeClock()
        RAN.clear()
        for key in ("poison", "next", "later", "late"):
            GATE[key] = asyncio.Event()
        GATE["next"].set()
        engines = [_engine(tmp_path, clock)]
        await engines[0].open()
        await engines[0].start(one_at_a_time, "poison", id="poison")
        waiting = await engines[0].start(one_at_a_time, "next", id="next")
        await asyncio.sleep(0.05)
        assert (await waiting.describe())["status"] == "pending"
        for _ in range(2):  # its owners are lost while it blocks them, twice: quarantined
            _stalled_on(engines[-1], "poison")
            clock.advance(TTL + 3 * HEARTBEAT)
            for old in engines:
                old.tick()
            engines.append(_engine(tmp_path, clock))
            await engines[-1].open()
            await asyncio.sleep(0.05)
        last = engines[-1]
        assert (await last.describe("poison"))["status"] == "quarantined"
        assert await last.result("next", timeout=5) == "next done"  # its slot went on, no operator needed

        later = await last.start(one_at_a_time, "later", id="later")  # holds the slot, waits at its gate
        await eventually(lambda: "later" in last.actors)
        await last.lift_quarantine("poison")
        described = await last.describe("poison")
        assert described["status"] == "pending" and described["flow"]["position"] == 1
        late = await last.start(one_at_a_time, "late", id="late")  # queued behind the lifted one
        assert (await late.describe())["flow"]["position"] == 2
        GATE["poison"].set()  # the fix is deployed
        GATE["late"].set()
        GATE["later"].set()
        assert await later.result(timeout=5) == "later done"
        assert await last.result("poison", timeout=5) == "poison done"
        assert await late.result(timeout=5) == "late done"
        assert RAN == ["next", "later", "poison", "late"]
        for engine in engines:
            await engine.close()
        assert check_store(str(tmp_path), clock.now()) == []

    run(main())
