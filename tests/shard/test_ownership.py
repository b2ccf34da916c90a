"""Fenced per-workflow ownership among several engines on one store, in one process, on a fake
clock: claims, takeover, expiry, deposition, wake guards, the feed, external closes, pruning.

Engines run with ``background=False``: a test drives every maintenance pass with ``tick()``
(timers and pass) or ``maintenance.run_pass()`` (pass only), so each step is deterministic.
Two engines in one process share the LMDB environment; each holds its own lock file, so
``crash()`` (which closes an engine's store without releasing anything) looks to its peers
exactly like a kill -9.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import os
from typing import Any, AsyncIterator

import pytest

from _support import eventually, run
from weft_actors import Engine, WorkflowHandle, activity, workflow
from weft_actors.codec import decode
from weft_actors._placement import preferred
from weft_actors.errors import (
    EngineDeposed,
    OwnershipModeMismatch,
    StorageError,
    WorkflowAlreadyExists,
    WorkflowClosed,
    WorkflowTerminated,
    WorkflowTimedOut,
)
from weft_actors.store import LmdbStore
from weft_actors.store._env import DATABASES
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(20)

HB, TTL = 0.5, 3.0
NO_ENGINE = bytes(16)

CALLS: collections.Counter[str] = collections.Counter()
HOLD: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh_activity_state() -> None:
    CALLS.clear()
    HOLD.clear()


@activity
async def note(tag: str) -> str:
    CALLS[tag] += 1
    return tag


@activity
async def held(tag: str) -> int:
    """The first call waits for ``HOLD[tag]`` (if the test made one); every call returns its
    call number, so a result tells which attempt's outcome was committed."""
    CALLS[tag] += 1
    number = CALLS[tag]
    gate = HOLD.get(tag)
    if gate is not None and number == 1:
        await gate.wait()
    return number


@workflow
async def run_once(ctx, tag: str) -> str:
    return await ctx.run(note, tag)


@workflow
async def parked(ctx) -> Any:
    return await ctx.wait_signal("go")


@workflow
async def held_step(ctx, tag: str) -> int:
    return await ctx.run(held, tag)


@workflow
async def note_then_held(ctx, tag: str) -> list:
    first = await ctx.run(note, tag)
    second = await ctx.run(held, tag + "/held")
    return [first, second]


@workflow
async def three_signals(ctx) -> list:
    return [await ctx.wait_signal("go") for _ in range(3)]


@workflow
async def sleeper(ctx, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


@workflow
async def rare(ctx) -> Any:
    return await ctx.wait_signal("go")


COMMON = [run_once, parked, held_step, note_then_held, three_signals, sleeper]
APP = [*COMMON, rare]


# -- helpers ----------------------------------------------------------------------------------


def new_engine(path: Any, app: list, clock: FakeClock, **options: Any) -> Engine:
    options.setdefault("heartbeat", HB)
    options.setdefault("ttl", TTL)
    return Engine(str(path), app=app, clock=clock, background=False, **options)


@contextlib.asynccontextmanager
async def engines(path: Any, *apps: list, clock: FakeClock, **options: Any) -> AsyncIterator[list[Engine]]:
    opened: list[Engine] = []
    try:
        for app in apps:
            engine = new_engine(path, app, clock, **options)
            await engine.open()
            opened.append(engine)
        yield opened
    finally:
        for engine in reversed(opened):
            await engine.close()


async def settle(turns: int = 10) -> None:
    """Let committed callbacks, inline activities and group commits run."""
    for _ in range(turns):
        await asyncio.sleep(0)


def crash(engine: Engine) -> None:
    """As kill -9 does: the engine stops, releases nothing, and its lock file is let go."""
    engine.depose("simulated kill -9")


def expire(clock: FakeClock, store: LmdbStore, engine_id: str) -> None:
    """Advance the clock 1 ms past ``engine_id``'s expiry boundary."""
    record = store.engine(engine_id)
    clock.advance(record["expires_at"] + 2 * record["heartbeat"] - clock.now() + 0.001)


def outlive(clock: FakeClock, stalled: Engine, *alive: Engine) -> None:
    """``stalled`` stops heartbeating while ``alive`` go on, until ``stalled`` is 1 ms past
    its expiry boundary."""
    record = alive[0].store.engine(stalled.engine_id)
    boundary = record["expires_at"] + 2 * record["heartbeat"]
    while True:
        step = min(HB, boundary - clock.now() + 0.001)
        clock.advance(step)
        for engine in alive:
            engine.store.heartbeat(engine.engine_id)
        if clock.now() > boundary:
            return


def holder(store: LmdbStore, wid: str) -> tuple[str, int] | None:
    found = store.get_holder(wid)
    return None if found is None else found[:2]


def snapshot(store: LmdbStore) -> dict[str, dict[bytes, bytes]]:
    """Every key and value of every keyspace."""
    with store.read() as txn:
        return {name: dict(txn.cursor(db=getattr(store.dbs, name))) for name in DATABASES}


def assert_claims_in_step(store: LmdbStore) -> None:
    """Holders and the ``by_engine`` index agree; running workflows are held or ownerless,
    finished ones are neither."""
    with store.read() as txn:
        holders = {key.decode(): value[:16] for key, value in txn.cursor(db=store.dbs.claim_holder)}
        index = {(key[:16], key[16:].decode()) for key in txn.cursor(db=store.dbs.by_engine).iternext(values=False)}
    for wid, engine_raw in holders.items():
        assert (engine_raw, wid) in index, wid
    for engine_raw, wid in index:
        assert holders.get(wid, NO_ENGINE) == engine_raw, wid
    for item in store.list_workflows(limit=10_000)["items"]:
        claimed = holders.get(item["id"]) is not None or (NO_ENGINE, item["id"]) in index
        assert claimed == (item["status"] == "running"), item


def op_outcomes(store: LmdbStore, wid: str) -> dict[int, Any]:
    record = store.get_workflow(wid)
    return {seq: op.get("ok", op.get("err")) for seq, op in store.load_ops(wid, record["run_id"]).items() if "t" in op}


# -- claims and takeover ----------------------------------------------------------------------


def test_two_engines_starting_the_same_id_exactly_one_wins_and_the_activity_runs_once(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            outcomes = await asyncio.gather(
                a.start(run_once, "x", id="same"), b.start(run_once, "x", id="same"), return_exceptions=True
            )
            assert sum(isinstance(o, WorkflowAlreadyExists) for o in outcomes) == 1
            assert sum(isinstance(o, WorkflowHandle) for o in outcomes) == 1
            assert await a.get_handle("same").result(timeout=5) == "x"
            assert await b.get_handle("same").result(timeout=5) == "x"
            assert CALLS["x"] == 1
            assert a.store.get_epoch("same") == 1
            acquired = sorted(e.stats()["claim_attempts_total"]["acquired"] for e in (a, b))
            assert acquired == [0, 1]
            assert_claims_in_step(a.store)

    run(main())


def test_engines_recovering_parked_workflows_take_disjoint_sets_that_cover_all(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, APP, clock=clock) as (a, b, c):
            ids = [f"parked-{i}" for i in range(40)]
            for wid in ids:
                await a.start(parked, id=wid)
            crash(a)
            b.tick()
            c.tick()
            took_b, took_c = set(b.actors), set(c.actors)
            assert took_b and took_c, "rendezvous preference should split 40 workflows"
            assert took_b.isdisjoint(took_c)
            assert took_b | took_c == set(ids)
            for wid in ids:
                owner = b if wid in took_b else c
                assert holder(b.store, wid) == (owner.engine_id, 2)
            assert b.store.engine(a.engine_id)["state"] == "dead"  # confirmed by its free lock
            assert_claims_in_step(b.store)
            for wid in ids:
                await b.signal(wid, "go", wid)
            c.tick()  # c's feed poll: signals appended by b for c's workflows
            await settle()
            for wid in ids:
                assert await b.get_handle(wid).result(timeout=5) == wid
            assert b.stats()["claim_attempts_total"]["takeover"] == len(took_b)
            assert c.stats()["claim_attempts_total"]["takeover"] == len(took_c)

    run(main())


def test_zombie_engine_after_takeover_loses_its_next_commit_and_the_successor_state_is_intact(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            HOLD["z"] = asyncio.Event()
            await a.start(held_step, "z", id="z")
            await settle()
            assert CALLS["z"] == 1  # a's attempt hangs
            outlive(clock, a, b)  # a stalls past its lease; its lock is still held
            b.tick()
            assert await b.get_handle("z").result(timeout=5) == 2
            after_successor = snapshot(b.store)

            HOLD["z"].set()  # the zombie's attempt returns and it tries to commit
            await eventually(lambda: a.state == "deposed")

            assert snapshot(b.store) == after_successor
            assert op_outcomes(b.store, "z") == {0: b"\x02"}
            assert b.store.get_epoch("z") == 2
            assert a.actors == {}

    run(main())


def test_taking_over_one_workflow_deposes_only_that_one(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            HOLD["t"] = asyncio.Event()
            await a.start(held_step, "t", id="taken")
            await a.start(parked, id="kept")
            await settle()
            won = b.store.takeover(b.engine_id, [("taken", b.store.get_holder_bytes("taken"))])
            assert won == {"taken": 2}
            assert b.drive("taken", 2)
            assert await b.get_handle("taken").result(timeout=5) == 2

            HOLD["t"].set()  # a's stale attempt finishes: its commit is fenced out
            await eventually(lambda: "taken" not in a.actors)

            assert a.state == "running"
            assert a.stats()["claim_attempts_total"]["deposed"] == 1
            assert op_outcomes(a.store, "taken") == {0: b"\x02"}
            await a.signal("kept", "go", "fine")
            assert await a.get_handle("kept").result(timeout=5) == "fine"

    run(main())


def test_expiry_boundary_is_exact_live_at_expires_at_plus_two_heartbeats_expired_1ms_later(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(parked, id="w")
            record = a.store.engine(a.engine_id)
            boundary = record["expires_at"] + 2 * record["heartbeat"]
            clock.advance(boundary - clock.now())
            assert clock.now() == boundary

            b.tick()
            assert "w" not in b.actors
            assert holder(b.store, "w") == (a.engine_id, 1)
            assert a.engine_id in b.store.live_engines()

            clock.advance(0.001)
            b.tick()
            assert "w" in b.actors
            assert holder(b.store, "w") == (b.engine_id, 2)
            assert a.engine_id not in b.store.live_engines()

    run(main())


def test_epochs_never_reset_across_release_purge_terminate_and_start_new(tmp_path):
    async def main():
        clock = FakeClock()
        epochs = []
        async with engines(tmp_path, APP, clock=clock) as (a,):
            await a.start(parked, id="e")
            epochs.append(a.store.get_epoch("e"))
        async with engines(tmp_path, APP, clock=clock) as (b,):  # took the released claim
            epochs.append(b.store.get_epoch("e"))
            await b.signal("e", "go", 1)
            assert await b.get_handle("e").result(timeout=5) == 1
            epochs.append(b.store.get_epoch("e"))  # finishing keeps the epoch
            await b.purge("e")
            assert b.store.get_workflow("e") is None
            epochs.append(b.store.get_epoch("e"))
            await b.start(parked, id="e")
            epochs.append(b.store.get_epoch("e"))
            await b.terminate("e", "reuse")
            epochs.append(b.store.get_epoch("e"))
            await b.start(parked, id="e", if_exists="start_new")
            epochs.append(b.store.get_epoch("e"))
            assert holder(b.store, "e") == (b.engine_id, epochs[-1])
        assert epochs == [1, 2, 2, 3, 4, 5, 6]

    run(main())


def test_reclaim_drives_the_workflow_not_just_the_keys(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            HOLD["d/held"] = asyncio.Event()
            await a.start(note_then_held, "d", id="d")
            await settle()
            assert CALLS == {"d": 1, "d/held": 1}
            crash(a)

            b.tick()  # nothing else nudges the workflow
            await settle()

            assert b.store.get_workflow("d")["status"] == "completed"
            assert await b.get_handle("d").result(timeout=1) == ["d", 2]
            assert CALLS == {"d": 1, "d/held": 2}  # the recorded step was replayed, not re-run

    run(main())


def test_ownerless_running_workflows_are_reclaimed(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, clock=clock) as (b,):
            a = new_engine(tmp_path, APP, clock)
            await a.open()
            await a.start(parked, id="o")
            await a.close()  # graceful: the holder goes, the workflow keeps running
            assert holder(b.store, "o") is None
            assert b.store.get_workflow("o")["status"] == "running"
            assert_claims_in_step(b.store)

            b.tick()

            assert holder(b.store, "o") == (b.engine_id, 2)
            await b.signal("o", "go", "mine")
            assert await b.get_handle("o").result(timeout=5) == "mine"

    run(main())


def test_takeover_is_tried_at_most_five_times_per_candidate_per_pass(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(parked, id="r")
            crash(a)
            tries: list[list[str]] = []
            real_takeover = b.store.takeover

            def always_lose(engine_id, candidates):
                tries.append([wid for wid, _ in candidates])
                return {wid: None for wid, _ in candidates}

            b.store.takeover = always_lose  # type: ignore[method-assign]
            b.tick()
            assert tries == [["r"]] * 5
            assert b.stats()["claim_attempts_total"]["lost_race"] == 5
            b.tick()
            assert len(tries) == 10  # a later pass tries again, five times at most

            b.store.takeover = real_takeover  # type: ignore[method-assign]
            b.tick()
            assert holder(b.store, "r") == (b.engine_id, 2)

    run(main())


def test_unregistered_types_are_never_taken(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, COMMON, clock=clock) as (a, b):
            await a.start(rare, id="rare")
            await a.start(parked, id="common")
            crash(a)
            for _ in range(4):  # long past the stranded interval
                b.tick()
                clock.advance(HB)
            assert set(b.actors) == {"common"}
            assert holder(b.store, "rare") == (a.engine_id, 1)

            c = new_engine(tmp_path, APP, clock)
            await c.open()
            try:
                clock.advance(HB)
                c.tick()
                assert "rare" in c.actors
                assert holder(c.store, "rare") == (c.engine_id, 2)
            finally:
                await c.close()

    run(main())


def test_candidate_stranded_for_one_interval_is_taken_by_a_non_preferred_engine(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, APP, clock=clock) as (a, b, c):
            ids = [f"s-{i}" for i in range(30)]
            for wid in ids:
                await a.start(parked, id=wid)
            crash(a)
            b.tick()  # c is live but does not run a pass: its share stays stranded
            mine = set(b.actors)
            assert 0 < len(mine) < len(ids)
            b.tick()  # not one interval yet
            assert set(b.actors) == mine
            clock.advance(HB)
            c.store.heartbeat(c.engine_id)  # c stays live, but is too busy to reclaim ...
            b.tick()  # ... and a whole interval has passed since b first saw its share
            assert set(b.actors) == set(ids)
            assert_claims_in_step(b.store)

    run(main())


def test_drive_that_throws_is_retried_on_later_passes_and_never_released(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(parked, id="f")
            crash(a)
            real_drive = b.drive
            failures = []

            def broken_once(wid, epoch):
                if not failures:
                    failures.append(wid)
                    raise RuntimeError("replay blew up")
                return real_drive(wid, epoch)

            b.drive = broken_once  # type: ignore[method-assign]
            b.tick()
            assert failures == ["f"] and "f" not in b.actors
            assert holder(b.store, "f") == (b.engine_id, 2)  # kept, not released
            assert b.stats()["claims_active"] == 1
            b.tick()
            assert "f" in b.actors
            assert holder(b.store, "f") == (b.engine_id, 2)  # same claim, no second takeover

    run(main())


# -- confirmed death, expiry and self-deposition -----------------------------------------------


def test_mark_engine_dead_makes_its_workflows_reclaimable_at_the_next_pass(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock, probe_peers=False) as (a, b):
            await a.start(parked, id="m")
            b.tick()
            assert "m" not in b.actors  # a is live

            assert b.store.mark_engine_dead(a.engine_id)
            b.tick()  # no clock movement: no expiry involved

            assert holder(b.store, "m") == (b.engine_id, 2)
            a.tick()  # a's heartbeat finds its record dead
            assert a.state == "deposed"
            await b.signal("m", "go", "after death")
            assert await b.get_handle("m").result(timeout=5) == "after death"

    run(main())


@pytest.mark.parametrize("how", ["dead", "expired", "replaced"])
def test_engine_whose_record_is_dead_expired_or_replaced_deposes_itself_and_commits_nothing(tmp_path, how):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, clock=clock) as (a,):
            HOLD["q"] = asyncio.Event()
            await a.start(held_step, "q", id="q")
            await a.start(parked, id="p")
            await settle()
            other = LmdbStore(str(tmp_path), clock=clock)
            try:
                if how == "dead":
                    other.mark_engine_dead(a.engine_id)
                elif how == "expired":
                    expire(clock, other, a.engine_id)
                else:
                    other.register_engine(a.engine_id, heartbeat=HB, ttl=TTL)
                before = snapshot(other)

                a.tick()
                assert a.state == "deposed"
                assert a.actors == {}
                HOLD["q"].set()  # an attempt that finishes afterwards commits nothing
                await settle()
                with pytest.raises(EngineDeposed):
                    await a.signal("p", "go", 1)

                assert snapshot(other) == before
            finally:
                other.close()

    run(main())


def test_expired_engine_cannot_append_a_signal_and_deposes_itself(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(parked, id="x")
            outlive(clock, a, b)
            b.tick()
            assert holder(b.store, "x") == (b.engine_id, 2)

            with pytest.raises(EngineDeposed):
                await a.signal("x", "go", "from the zombie")
            assert a.state == "deposed"
            assert b.store.load_inbox("x") == []

            await b.signal("x", "go", "from the live one")
            assert await b.get_handle("x").result(timeout=5) == "from the live one"

    run(main())


# -- wakes, signals and the feed --------------------------------------------------------------


def test_signal_via_a_non_owner_is_delivered_by_the_owners_next_pass_without_hints(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (owner, other):
            await owner.start(parked, id="s")
            await other.signal("s", "go", 42)
            await settle()
            assert owner.store.get_workflow("s")["status"] == "running"  # nothing pushed it

            clock.advance(HB)  # one heartbeat later the owner's pass runs
            owner.tick()
            await settle()

            assert owner.store.get_workflow("s")["status"] == "completed"
            assert await other.get_handle("s").result(timeout=1) == 42
            assert owner.stats()["feed_lag"] == 0

    run(main())


@workflow
async def tally(ctx) -> Any:
    total = {"n": 0}

    def add(by: int) -> int:
        total["n"] += by
        return total["n"]

    ctx.on_update("add", add)
    await ctx.wait_signal("go")
    return total["n"]


@workflow
async def two_ways(ctx) -> Any:
    index, value = await ctx.race([ctx.wait_signal("left"), ctx.wait_signal("right")])
    later = await ctx.wait_signal("left")
    return [index, value, later]


def test_update_via_a_non_owner_is_delivered_within_one_heartbeat_without_hints(tmp_path):
    async def main():
        clock = FakeClock()
        app = [*APP, tally]
        async with engines(tmp_path, app, app, clock=clock) as (owner, other):
            await owner.start(tally, id="u")
            call = asyncio.ensure_future(other.update("u", "add", 5, request_id="r-1"))
            await settle()
            assert not call.done()  # appended to the durable inbox, nothing pushed it
            assert [m["kind"] for _, m in owner.store.load_inbox("u")] == ["update"]

            clock.advance(HB)  # one heartbeat later the owner's pass runs
            owner.tick()
            await settle()

            assert owner.store.load_inbox("u") == []
            assert await asyncio.wait_for(call, 2 * HB + 1) == 5  # the caller reads the answer
            # A retry of that request, through either engine, is answered and applied once.
            assert await owner.update("u", "add", 5, request_id="r-1") == 5
            assert await other.update("u", "add", 5, request_id="r-1") == 5
            kinds = [op["kind"] for op in owner.store.load_ops("u", owner.store.get_workflow("u")["run_id"]).values()]
            assert kinds.count("update") == 1
            await other.signal("u", "go")
            clock.advance(HB)
            owner.tick()
            assert await other.get_handle("u").result(timeout=5) == 5
            assert holder(owner.store, "u") is None and owner.store.get_epoch("u") == 1

    run(main())


def test_race_over_two_signal_branches_with_one_signal_buffered_wins_only_that_branch(tmp_path):
    async def main():
        clock = FakeClock()
        app = [*APP, two_ways]
        async with engines(tmp_path, app, app, clock=clock) as (a, b):
            # "right" is buffered in the same transaction that creates the workflow.
            await a.signal_with_start(two_ways, signal="right", payload="R", id="w")
            await settle()
            run_id = a.store.get_workflow("w")["run_id"]
            ops = a.store.load_ops("w", run_id)
            assert ops[1]["name"] == "right" and "ok" in ops[1]  # the buffered branch won
            assert ops[0]["name"] == "left" and ops[0]["err"]["kind"] == "cancelled" and "inbox" not in ops[0]
            assert a.store.load_inbox("w") == []
            assert a.actors["w"].run.waiting_signal() == "left"  # the wait after the race

            await b.signal("w", "left", "L")  # via the non-owner: the loser never took it
            clock.advance(HB)
            a.tick()
            await settle()
            assert await b.get_handle("w").result(timeout=5) == [1, "R", "L"]
            assert op_outcomes(a.store, "w")[2] is not None

    run(main())


def test_deposed_owner_that_gets_a_signal_never_drives_the_workflow(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(three_signals, id="d")
            won = b.store.takeover(b.engine_id, [("d", b.store.get_holder_bytes("d"))])
            assert b.drive("d", won["d"])

            await a.signal("d", "go", 1)  # a still has the stale actor: the wake is discarded

            assert "d" not in a.actors
            assert a.stats()["wakes_discarded_total"]["signal"] == 1
            assert op_outcomes(a.store, "d") == {}
            b.tick()
            await settle()
            assert op_outcomes(b.store, "d") == {0: b"\x01"}
            assert holder(b.store, "d") == (b.engine_id, 2)

    run(main())


def test_timer_fire_on_a_non_owner_does_not_resume_the_workflow(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(sleeper, 1.0, id="t")
            await settle()
            won = b.store.takeover(b.engine_id, [("t", b.store.get_holder_bytes("t"))])
            assert b.drive("t", won["t"])
            clock.advance(1.0)

            a.timers.poke()  # a's copy of the timer fires first

            assert "t" not in a.actors
            assert a.stats()["wakes_discarded_total"]["timer"] == 1
            assert op_outcomes(a.store, "t") == {}
            b.timers.poke()
            await settle()
            assert await b.get_handle("t").result(timeout=1) == "woke"
            assert b.store.count("timers") == 0

    run(main())


def test_signals_never_change_the_epoch(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(three_signals, id="e")
            claim = a.store.get_holder_bytes("e")
            for sender in (a, b, a):
                await sender.signal("e", "go", sender.engine_id[:4])
                clock.advance(HB)
                a.tick()
                b.tick()
                await settle()
                if a.store.get_workflow("e")["status"] == "running":
                    assert a.store.get_holder_bytes("e") == claim
            assert a.store.get_epoch("e") == 1
            assert await a.get_handle("e").result(timeout=5) == [a.engine_id[:4], b.engine_id[:4], a.engine_id[:4]]

    run(main())


def test_parked_workflows_keep_their_holder_across_heartbeats(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(parked, id="p")
            claim = a.store.get_holder_bytes("p")
            for _ in range(20):  # ten seconds: more than three leases
                clock.advance(HB)
                a.tick()
                b.tick()
            assert a.store.get_holder_bytes("p") == claim
            assert "p" in a.actors and "p" not in b.actors
            assert_claims_in_step(a.store)

    run(main())


# -- external terminal transitions ------------------------------------------------------------


def test_terminate_committed_by_a_non_owner_rotates_the_epoch_and_fences_out_the_owner(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (owner, other):
            HOLD["k"] = asyncio.Event()
            await owner.start(held_step, "k", id="busy")
            await owner.start(sleeper, 60.0, id="parked")
            await settle()
            assert other.store.count("timers") == 1

            await other.terminate("busy", "stop now")
            await other.get_handle("parked").terminate("and you")

            for wid in ("busy", "parked"):
                assert other.store.get_workflow(wid)["status"] == "terminated"
                assert other.store.get_epoch(wid) == 2
                assert holder(other.store, wid) is None
            assert other.store.count("timers") == 0
            assert_claims_in_step(other.store)
            HOLD["k"].set()  # the owner's next write is fenced out
            await eventually(lambda: "busy" not in owner.actors)
            owner.tick()  # the feed tells the owner about the parked one
            assert owner.actors == {}
            assert op_outcomes(owner.store, "busy") == {}
            assert owner.state == "running"
            for engine in (owner, other):
                with pytest.raises(WorkflowTerminated) as caught:
                    await engine.get_handle("busy").result(timeout=1)
                assert caught.value.reason == "stop now"
            with pytest.raises(WorkflowClosed):
                await other.terminate("busy")

    run(main())


def test_execution_timeout_times_the_workflow_out_and_deposes_its_owner(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(parked, id="late", execution_timeout=2.0)
            for _ in range(6):
                clock.advance(HB)
                a.maintenance.run_pass()
                b.maintenance.run_pass()
                await settle()
            assert a.store.get_workflow("late")["status"] == "timed_out"
            assert a.store.get_epoch("late") == 2
            a.tick()
            assert a.actors == {}
            assert a.store.count("timers") == 0
            with pytest.raises(WorkflowTimedOut):
                await b.get_handle("late").result(timeout=1)

    run(main())


def test_delayed_start_fires_once_and_is_claimed_in_the_same_transaction(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(parked, id="later", start_delay=2.0)
            assert a.store.get_workflow("later")["status"] == "pending"
            assert holder(a.store, "later") is None and a.store.get_epoch("later") == 0
            clock.advance(2.0)
            first = preferred("later", [a.engine_id, b.engine_id])
            fires, waits = (a, b) if first == a.engine_id else (b, a)
            waits.tick()  # not its turn: the preferred engine fires a due start
            await settle()
            assert holder(a.store, "later") is None
            for _ in range(3):
                fires.tick()
                waits.tick()
                await settle()
                clock.advance(HB)
            assert "later" in fires.actors and "later" not in waits.actors
            assert holder(a.store, "later") == (fires.engine_id, 1)
            assert a.store.get_workflow("later")["status"] == "running"
            assert a.store.count("timers") == 0
            assert_claims_in_step(a.store)

    run(main())


# -- modes and configuration ------------------------------------------------------------------


@pytest.mark.parametrize("first, second", [("workflow-lease", "single"), ("single", "workflow-lease")])
def test_ownership_mode_mismatch_refuses_start_without_writing(tmp_path, first, second):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, clock=clock, ownership=first) as (a,):
            await a.start(parked, id="w")
            before = snapshot(a.store)
            refused = new_engine(tmp_path, APP, clock, ownership=second)
            with pytest.raises(OwnershipModeMismatch):
                await refused.open()
            assert refused.state == "new"
            assert snapshot(a.store) == before
            assert not os.path.exists(os.path.join(str(tmp_path), "engines", refused.engine_id + ".lock"))

    run(main())


@pytest.mark.parametrize(
    "heartbeat, ttl, ok",
    [(0.5, 3.0, True), (1.0, 3.0, True), (0.2, 0.6, True), (0.1, 0.3, True), (0.2, 0.599, False), (1.0, 2.999, False), (1.0, 1.0, False), (2.0, 1.0, False), (0, 3.0, False), (0.5, 0, False), (-0.5, 3.0, False), (math.nan, 3.0, False)],
)
def test_incoherent_heartbeat_and_ttl_are_rejected_at_construction(tmp_path, heartbeat, ttl, ok):
    if ok:
        Engine(str(tmp_path), app=APP, heartbeat=heartbeat, ttl=ttl)
    else:
        with pytest.raises(ValueError, match="heartbeat|ttl"):
            Engine(str(tmp_path), app=APP, heartbeat=heartbeat, ttl=ttl)


def test_single_mode_writes_no_heartbeats_and_refuses_a_second_live_engine(tmp_path):
    async def main():
        clock = FakeClock()
        first = new_engine(tmp_path, APP, clock, ownership="single")
        await first.open()
        try:
            await first.start(parked, id="solo")
            record = first.store.engine(first.engine_id)
            assert record["expires_at"] == math.inf
            with first.store.read() as txn:
                raw = txn.get(bytes.fromhex(first.engine_id), db=first.store.dbs.engines)
            for _ in range(10):
                clock.advance(10 * TTL)
                first.tick()
            with first.store.read() as txn:
                assert txn.get(bytes.fromhex(first.engine_id), db=first.store.dbs.engines) == raw
            await first.signal("solo", "go", "still mine")
            assert await first.get_handle("solo").result(timeout=5) == "still mine"
            await first.start(parked, id="left running")

            second = new_engine(tmp_path, APP, clock, ownership="single")
            with pytest.raises(OwnershipModeMismatch, match="one live engine"):
                await second.open()
        finally:
            await first.close()
        third = new_engine(tmp_path, APP, clock, ownership="single")
        await third.open()
        try:
            assert "left running" in third.actors  # recovered at start
        finally:
            await third.close()

    run(main())


# -- maintenance: pruning, hints, metrics ------------------------------------------------------


def test_feed_is_pruned_once_every_live_cursor_passed_it_and_the_retention_ran_out(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock, feed_retention=5.0, prune_interval=1.0) as (a, b):
            await a.start(three_signals, id="f")
            for n in range(3):
                await b.signal("f", "go", n)
            assert a.store.count("feed") == 3
            a.tick()
            b.tick()
            clock.advance(2.0)
            a.tick()
            b.tick()
            assert a.store.count("feed") == 3  # every cursor passed them, but they are young
            for _ in range(8):
                clock.advance(HB)
                a.tick()
                b.tick()
            assert a.store.count("feed") == 0
            assert a.stats()["feed_pruned_total"] + b.stats()["feed_pruned_total"] == 3
            assert await a.get_handle("f").result(timeout=1) == [0, 1, 2]

    run(main())


def test_ended_engines_that_hold_nothing_are_pruned_from_the_registry(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, COMMON, clock=clock, engine_retention=5.0, prune_interval=1.0) as (a, b):
            stopped = new_engine(tmp_path, APP, clock)
            await stopped.open()
            await stopped.close()
            await a.start(rare, id="rare")  # b cannot take it
            crash(a)
            for _ in range(16):
                clock.advance(HB)
                b.tick()
            registry = b.store.engines()
            assert stopped.engine_id not in registry
            assert not os.path.exists(os.path.join(str(tmp_path), "engines", stopped.engine_id + ".lock"))
            assert registry[a.engine_id]["state"] == "dead"  # still holds a claim
            assert b.stats()["engines_pruned_total"] == 1

    run(main())


def test_hint_runs_the_pass_at_once(tmp_path):
    async def main():
        options = {"heartbeat": 2.0, "ttl": 6.0}
        async with Engine(str(tmp_path), app=APP, **options) as owner, Engine(str(tmp_path), app=APP, **options) as other:
            await owner.start(parked, id="h")
            await asyncio.sleep(0.1)
            await other.signal("h", "go", "hinted")
            started = asyncio.get_running_loop().time()
            owner.hint("h")
            assert await owner.get_handle("h").result(timeout=1.5) == "hinted"
            assert asyncio.get_running_loop().time() - started < 0.5

    run(main())


def test_a_done_hint_answers_result_waiters_on_another_engine_at_once(tmp_path):
    async def main():
        options = {"heartbeat": 2.0, "ttl": 6.0}
        async with Engine(str(tmp_path), app=APP, **options) as owner, Engine(str(tmp_path), app=APP, **options) as other:
            await owner.start(parked, id="d")
            waiting = asyncio.ensure_future(other.get_handle("d").result(timeout=5))
            await asyncio.sleep(0.05)  # other's result() is parked until its next poll
            await owner.signal("d", "go", "done")
            await owner.get_handle("d").result(timeout=1)
            started = asyncio.get_running_loop().time()
            other.hint("d", "workflow-done")
            assert await waiting == "done"
            assert asyncio.get_running_loop().time() - started < 0.5  # not the 2 s poll

    run(main())


def test_commit_hints_are_published_for_inbox_appends_and_endings(tmp_path):
    async def main():
        clock = FakeClock()
        hints: list[tuple[str, str]] = []
        async with engines(tmp_path, APP, clock=clock, on_commit_hint=lambda kind, wid: hints.append((kind, wid))) as (a,):
            await a.start(parked, id="one")
            await a.start(parked, id="two")
            await a.signal("one", "go", 1)  # taken by its parked owner here, in the append's commit
            await a.get_handle("one").result(timeout=5)
            await a.signal("two", "later", 2)  # nobody waits for it: it stays in the inbox
            await a.terminate("two")
        assert hints == [
            ("workflow-done", "one"),
            ("workflow-touched", "two"),  # the signal
            ("workflow-touched", "two"),  # the terminate
            ("workflow-done", "two"),
        ]

    run(main())


def test_stats_expose_the_ownership_metrics_without_workflow_ids(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, APP, clock=clock) as (a, b):
            await a.start(parked, id="metric-workflow-id")
            crash(a)
            b.tick()
            stats = b.stats()
            for key in ("claims_active", "heartbeat_failures_total", "reclaim_pass_seconds", "feed_lag", "commits_total", "writes_total", "live_actors", "parked_actors"):
                assert key in stats, key
            assert set(stats["claim_attempts_total"]) == {"acquired", "takeover", "lost_race", "deposed"}
            assert stats["claim_attempts_total"]["takeover"] == 1
            assert {"timer", "signal"} <= set(stats["wakes_discarded_total"])
            assert stats["claims_active"] == 1
            assert stats["reclaim_pass_seconds"]["count"] >= 1
            assert "metric-workflow-id" not in repr(stats)

    run(main())


def test_heartbeat_that_fails_to_commit_is_counted_and_the_engine_carries_on(tmp_path):
    async def main():
        clock = FakeClock()
        async with engines(tmp_path, APP, clock=clock) as (a,):
            await a.start(parked, id="hb")

            def broken(engine_id, feed_cursor=None):
                raise StorageError("disk went away")

            a.store.heartbeat = broken  # type: ignore[method-assign]
            a.tick()
            a.tick()
            assert a.state == "running"
            assert a.stats()["heartbeat_failures_total"] == 2
            await a.signal("hb", "go", "still here")
            assert await a.get_handle("hb").result(timeout=5) == "still here"

    run(main())


def test_a_signal_its_parked_local_owner_waits_for_is_consumed_in_the_appending_commit(tmp_path):
    async def main():
        async with engines(tmp_path, APP, clock=FakeClock()) as (a,):
            handle = await a.start(three_signals, id="direct")
            commits = a.stats()["commits_total"]
            await a.signal("direct", "go", "one")
            # One commit holds the append and the op that took it: no inbox entry was left.
            assert a.stats()["commits_total"] == commits + 1
            assert a.store.load_inbox("direct") == []
            (record,) = a.store.load_ops("direct", handle.run_id).values()
            assert record["kind"] == "signal" and decode(record["ok"]) == "one" and record["inbox"] > 0
            await a.signal("direct", "go", "two")
            await a.signal("direct", "go", "three")
            assert await handle.result(timeout=5) == ["one", "two", "three"]

    run(main())


def test_a_local_signal_does_not_overtake_one_another_engine_appended_first(tmp_path):
    async def main():
        async with engines(tmp_path, APP, COMMON, clock=FakeClock()) as (a, b):
            await a.start(three_signals, id="fifo")
            await b.signal("fifo", "go", "first")  # a has not polled its feed: it has not seen it
            await a.signal("fifo", "go", "second")
            await a.signal("fifo", "go", "third")
            assert await a.get_handle("fifo").result(timeout=5) == ["first", "second", "third"]

    run(main())


def test_waiting_on_a_workflow_held_elsewhere_declares_interest_in_its_done_hints(tmp_path):
    async def main():
        interest: list[tuple[str, bool]] = []
        options = {"heartbeat": 2.0, "ttl": 6.0}
        async with Engine(str(tmp_path), app=APP, **options) as owner, Engine(
            str(tmp_path), app=APP, on_done_interest=lambda wid, on: interest.append((wid, on)), **options
        ) as other:
            await owner.start(parked, id="far")
            await other.start(parked, id="near")
            far = asyncio.ensure_future(other.get_handle("far").result(timeout=5))
            near = asyncio.ensure_future(other.get_handle("near").result(timeout=5))
            await eventually(lambda: ("far", True) in interest)
            await owner.signal("far", "go", 1)
            await other.signal("near", "go", 2)
            other.hint("far", "workflow-done")
            assert await far == 1 and await near == 2
            assert interest == [("far", True), ("far", False)]  # "near" is held here: no hint needed

    run(main())
