"""Per-activity limits that hold across engines: ``@activity(rate_limit=..., burst=...,
concurrency=...)``. Checked at decoration; permits taken in the group commit
(``store/_permits``) and waited for in the permit gate (``shard/_permits``)."""

from __future__ import annotations

import asyncio
import math
import time
import uuid

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import InvalidRequest, WorkflowCancelled
from weft_actors.store import HoldPermits, LmdbStore, TakePermits
from weft_actors.store._permits import read_permits
from weft_actors.testing import FakeClock, TimeSkippingEnvironment
from weft_actors.workflow import activity_definition

HB, TTL = 0.5, 3.0


# -- decoration ---------------------------------------------------------------------------


@pytest.mark.timeout(10)
def test_limits_are_parsed_onto_the_definition():
    @activity(rate_limit="50/s")
    async def a() -> None: ...

    @activity(rate_limit="100/m", burst=5, concurrency=3)
    def b() -> None: ...

    @activity(rate_limit=" 2.5 / s ")
    async def c() -> None: ...

    @activity(concurrency=1)
    async def d() -> None: ...

    @activity
    async def e() -> None: ...

    da, db, dc, dd, de = (activity_definition(f) for f in (a, b, c, d, e))
    assert (da.rate_interval, da.burst, da.concurrency, da.limited) == (pytest.approx(0.02), 1, None, True)
    assert (db.rate_interval, db.burst, db.concurrency) == (pytest.approx(0.6), 5, 3)
    assert dc.rate_interval == pytest.approx(0.4)
    assert activity_definition(activity(rate_limit="10/h")(lambda: None)).rate_interval == pytest.approx(360.0)
    assert (dd.rate_interval, dd.concurrency, dd.limited) == (None, 1, True)
    assert (de.rate_interval, de.burst, de.concurrency, de.limited) == (None, 1, None, False)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "options, error",
    [
        ({"rate_limit": "0/s"}, ValueError),
        ({"rate_limit": "-1/s"}, ValueError),
        ({"rate_limit": "abc"}, ValueError),
        ({"rate_limit": "10/d"}, ValueError),
        ({"rate_limit": "10"}, ValueError),
        ({"rate_limit": "inf/s"}, ValueError),
        ({"rate_limit": "nan/s"}, ValueError),
        ({"rate_limit": "1e400/s"}, ValueError),
        ({"rate_limit": 50}, TypeError),
        ({"rate_limit": True}, TypeError),
        ({"concurrency": 0}, ValueError),
        ({"concurrency": -2}, ValueError),
        ({"concurrency": True}, TypeError),
        ({"concurrency": 2.0}, TypeError),
        ({"concurrency": math.inf}, TypeError),
        ({"rate_limit": "1/s", "burst": 0}, ValueError),
        ({"rate_limit": "1/s", "burst": False}, TypeError),
        ({"rate_limit": "1/s", "burst": 1.5}, TypeError),
        ({"burst": 3}, ValueError),  # a burst of no rate
    ],
)
def test_bad_limits_are_refused_at_decoration(options, error):
    with pytest.raises(error) as info:
        activity(**options)(lambda: None)
    assert str(info.value)  # says what is wrong


# -- the store's appliers -----------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock):
    store = LmdbStore(str(tmp_path / "db"), clock=clock)
    yield store
    store.close()


def _engine(store: LmdbStore) -> str:
    engine_id = uuid.uuid4().hex
    store.register_engine(engine_id, heartbeat=HB, ttl=TTL)
    return engine_id


def _take(store, engine_id, name, held=0, wanted=1, interval=None, burst=1, concurrency=None):
    (result,) = store.apply(engine_id, [TakePermits(name, held, wanted, interval, burst, concurrency)])
    return result


@pytest.mark.timeout(10)
def test_gcra_grants_a_burst_then_one_per_interval_with_its_retry_time(store, clock):
    e = _engine(store)
    now = clock.now()
    assert _take(store, e, "api", wanted=5, interval=0.1, burst=3) == (3, pytest.approx(now + 0.1, abs=1e-6))
    assert _take(store, e, "api", wanted=1, interval=0.1, burst=3) == (0, pytest.approx(now + 0.1, abs=1e-6))
    clock.advance(0.1)
    assert _take(store, e, "api", wanted=2, interval=0.1, burst=3) == (1, pytest.approx(now + 0.2, abs=1e-6))
    clock.advance(0.25)  # 2.5 intervals: two more are due, the third not yet
    assert _take(store, e, "api", wanted=3, interval=0.1, burst=3) == (2, pytest.approx(now + 0.4, abs=1e-6))
    assert _take(store, e, "other", wanted=1, interval=0.1, burst=3) == (1, None)  # per name
    clock.jump(10.0)  # a quiet spell (wall time alone: the lease would lapse) refills one burst, never more
    assert _take(store, e, "api", wanted=9, interval=0.1, burst=3)[0] == 3
    assert read_permits(store, "api")["held"] == {}  # no concurrency, no entries


@pytest.mark.timeout(10)
def test_gcra_at_exactly_the_promised_time_grants(store, clock):
    e = _engine(store)
    granted, retry_at = _take(store, e, "exact", wanted=2, interval=1 / 3, burst=1)
    assert granted == 1
    clock.advance(retry_at - clock.now())
    assert _take(store, e, "exact", wanted=1, interval=1 / 3, burst=1) == (1, None)


@pytest.mark.timeout(10)
def test_a_backwards_clock_jump_delays_permits_by_one_burst_at_most(store, clock):
    e = _engine(store)
    assert _take(store, e, "jump", wanted=2, interval=1.0, burst=2)[0] == 2
    clock.jump(-3600.0)  # the wall clock goes back an hour: the stored TAT is far ahead
    granted, retry_at = _take(store, e, "jump", wanted=1, interval=1.0, burst=2)
    assert granted == 0 and retry_at - clock.now() <= 2.0 + 1e-6
    assert read_permits(store, "jump")["tat"] - clock.now() <= 2.0 + 1e-6
    clock.advance(retry_at - clock.now())
    assert _take(store, e, "jump", wanted=1, interval=1.0, burst=2)[0] == 1


@pytest.mark.timeout(10)
def test_concurrency_is_shared_by_engines_and_each_engine_writes_its_own_count(store):
    a, b = _engine(store), _engine(store)
    assert _take(store, a, "db", held=0, wanted=2, concurrency=3) == (2, None)
    assert _take(store, b, "db", held=0, wanted=5, concurrency=3) == (1, None)
    assert _take(store, b, "db", held=1, wanted=1, concurrency=3) == (0, None)
    assert read_permits(store, "db")["held"] == {a: 2, b: 1}
    (done,) = store.apply(a, [HoldPermits("db", 1)])  # one of a's attempts ended
    assert done is None
    assert _take(store, b, "db", held=1, wanted=2, concurrency=3) == (1, None)
    assert read_permits(store, "db")["held"] == {a: 1, b: 2}
    # The engine is the authority on its own entry: a repeated write changes nothing.
    assert _take(store, b, "db", held=2, wanted=1, concurrency=3) == (0, None)
    store.apply(b, [HoldPermits("db", 0)])
    assert read_permits(store, "db")["held"] == {a: 1}  # an entry at 0 is deleted
    assert _take(store, b, "dbx", wanted=3, concurrency=3) == (3, None)  # another name: its own


@pytest.mark.timeout(10)
def test_entries_of_engines_that_are_not_live_are_ignored_and_deleted(store):
    a, b, c = _engine(store), _engine(store), _engine(store)
    assert _take(store, a, "db", wanted=2, concurrency=4) == (2, None)
    assert _take(store, b, "db", wanted=2, concurrency=4) == (2, None)
    assert _take(store, c, "db", wanted=1, concurrency=4) == (0, None)
    store.mark_engine_dead(a)
    store.release_engine(b)  # stopped
    assert _take(store, c, "db", wanted=9, concurrency=4) == (4, None)
    assert read_permits(store, "db")["held"] == {c: 4}


@pytest.mark.timeout(10)
def test_rate_and_concurrency_together_take_only_what_both_allow(store, clock):
    e = _engine(store)
    assert _take(store, e, "both", wanted=5, interval=1.0, burst=5, concurrency=2) == (2, None)
    assert read_permits(store, "both")["tat"] == pytest.approx(clock.now() + 2.0, abs=1e-6)  # 2 taken, not 5
    assert _take(store, e, "both", held=0, wanted=5, interval=1.0, burst=5, concurrency=5) == (3, pytest.approx(clock.now() + 1.0, abs=1e-6))


# -- engines ------------------------------------------------------------------------------

RUNNING = {"now": 0, "peak": 0}
STARTS: list[float] = []
HOLD: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RUNNING.update(now=0, peak=0)
    STARTS.clear()
    HOLD.clear()


@activity(concurrency=2)
async def two_at_a_time(i: int) -> int:
    RUNNING["now"] += 1
    RUNNING["peak"] = max(RUNNING["peak"], RUNNING["now"])
    try:
        await asyncio.sleep(0.05)
    finally:
        RUNNING["now"] -= 1
    return i


@activity(concurrency=2)
def two_threads_at_a_time(i: int) -> int:  # plain functions wait for permits the same way
    return i + 1


@activity(concurrency=1)
async def inline_one(i: int) -> int:  # ends without suspending: reported from the gate's start
    return i


@activity(rate_limit="20/s")
async def twenty_per_second(i: int) -> int:
    STARTS.append(time.time())
    return i


@activity(concurrency=1)
async def one_at_a_time(tag: str) -> str:
    event = HOLD.get(tag)
    if event is not None:
        await event.wait()
    return tag


@activity(rate_limit="1/h")
async def hourly(i: int) -> int:
    return i


@workflow
async def limited(ctx, i: int) -> int:
    return await ctx.run(two_at_a_time, i)


@workflow
async def limited_twice(ctx, i: int) -> int:
    a = await ctx.run(two_at_a_time, i)
    return await ctx.run(two_threads_at_a_time, a)


@workflow
async def inline_then_limited(ctx, i: int) -> int:
    a = await ctx.run(inline_one, i)
    return await ctx.run(two_at_a_time, a)


@workflow
async def rated(ctx, i: int) -> int:
    return await ctx.run(twenty_per_second, i)


@workflow
async def single(ctx, tag: str) -> str:
    return await ctx.run(one_at_a_time, tag)


@workflow
async def three_hourly(ctx) -> list:
    return [await ctx.run(hourly, i) for i in range(3)]


APP = [limited, limited_twice, inline_then_limited, rated, single, three_hourly]


def _permits_held(engine: Engine, name: str) -> dict:
    return read_permits(engine.store, name)["held"]


@pytest.mark.timeout(30)
def test_concurrency_limit_holds_on_one_engine_and_every_workflow_completes(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handles = [await engine.start(limited_twice, i) for i in range(12)]
            assert [await h.result(timeout=20) for h in handles] == [i + 1 for i in range(12)]
            assert 1 <= RUNNING["peak"] <= 2
            await eventually(lambda: _permits_held(engine, "two_at_a_time") == {}, timeout=5)
            await eventually(lambda: _permits_held(engine, "two_threads_at_a_time") == {}, timeout=5)
            assert engine.activities.queued == 0

    run(main())


@pytest.mark.timeout(30)
def test_granted_attempts_still_wait_for_a_local_slot_and_inline_ones_report(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP, max_inflight_activities=1) as engine:
            handles = [await engine.start(inline_then_limited, i) for i in range(10)]
            assert [await h.result(timeout=20) for h in handles] == list(range(10))
            assert RUNNING["peak"] == 1  # two permits, one slot
            await eventually(lambda: _permits_held(engine, "two_at_a_time") == {} and _permits_held(engine, "inline_one") == {}, timeout=5)
            assert engine.activities.queued == 0 and engine.activities.inflight == 0

    run(main())


@pytest.mark.timeout(40)
def test_concurrency_limit_holds_across_two_engines_on_one_store(tmp_path):
    async def main():
        options = {"heartbeat": HB, "ttl": TTL}
        async with Engine(str(tmp_path), app=APP, **options) as a, Engine(str(tmp_path), app=APP, **options) as b:
            handles = []
            for i in range(16):
                handles.append(await (a if i % 2 else b).start(limited, i))
            assert sorted([await h.result(timeout=30) for h in handles]) == list(range(16))
            assert RUNNING["peak"] <= 2
            assert a.activities_started > 0 and b.activities_started > 0  # both engines ran some
            await eventually(lambda: _permits_held(a, "two_at_a_time") == {}, timeout=5)

    run(main())


@pytest.mark.timeout(40)
def test_rate_limit_holds_across_two_engines(tmp_path):
    async def main():
        options = {"heartbeat": HB, "ttl": TTL}
        async with Engine(str(tmp_path), app=APP, **options) as a, Engine(str(tmp_path), app=APP, **options) as b:
            handles = []
            for i in range(50):
                handles.append(await (a if i % 2 else b).start(rated, i))
            assert sorted([await h.result(timeout=30) for h in handles]) == list(range(50))
        starts = sorted(STARTS)
        assert len(starts) == 50
        burst = 1
        most = max(sum(1 for t in starts[i:] if t <= start + 1.0) for i, start in enumerate(starts))
        assert most <= 20 + burst, most

    run(main())


@pytest.mark.timeout(30)
def test_a_cancelled_workflow_waiting_for_a_permit_ends_and_leaks_no_permit(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            HOLD["first"] = asyncio.Event()
            first = await engine.start(single, "first")
            await eventually(lambda: _permits_held(engine, "one_at_a_time") == {engine.engine_id: 1})
            waiting = await engine.start(single, "waiting")
            await eventually(lambda: engine.activities.permits.snapshot().get("one_at_a_time") == 1)
            await waiting.cancel()
            with pytest.raises(WorkflowCancelled):
                await waiting.result(timeout=10)
            HOLD["first"].set()
            assert await first.result(timeout=10) == "first"
            assert await (await engine.start(single, "later")).result(timeout=10) == "later"
            # A workflow cancelled while its attempt runs gives its permit back too.
            HOLD["running"] = asyncio.Event()
            running = await engine.start(single, "running")
            await eventually(lambda: _permits_held(engine, "one_at_a_time") == {engine.engine_id: 1})
            await running.cancel()
            with pytest.raises(WorkflowCancelled):
                await running.result(timeout=10)
            assert await (await engine.start(single, "after")).result(timeout=10) == "after"
            await eventually(lambda: _permits_held(engine, "one_at_a_time") == {}, timeout=5)
            assert engine.activities.queued == 0 and engine.activities.permits.snapshot() == {}

    run(main())


def handle_done(engine: Engine, wid: str) -> bool:
    record = engine.store.get_workflow(wid)
    return record is not None and record["status"] != "running"


@pytest.mark.timeout(30)
def test_a_dead_engines_permits_are_taken_over(tmp_path):
    async def main():
        options = {"heartbeat": HB, "ttl": TTL}
        async with Engine(str(tmp_path), app=APP, **options) as a:
            store = a.store
            ghost = uuid.uuid4().hex
            store.register_engine(ghost, heartbeat=HB, ttl=TTL)
            assert store.apply(ghost, [TakePermits("one_at_a_time", 0, 1, None, 1, 1)]) == [(1, None)]
            handle = await a.start(single, "blocked")
            # It waits (polling): the ghost holds the only permit.
            await eventually(lambda: a.activities.permits.snapshot() == {"one_at_a_time": 1}, timeout=5)
            assert a.activities.permits.snapshot() == {"one_at_a_time": 1} and not handle_done(a, handle.id)
            store.mark_engine_dead(ghost)
            assert await handle.result(timeout=10) == "blocked"
            assert ghost not in _permits_held(a, "one_at_a_time")

    run(main())


@pytest.mark.timeout(30)
def test_a_rate_limit_waits_in_virtual_time_under_the_time_skipping_environment():
    async def main():
        async with TimeSkippingEnvironment(app=APP) as env:
            assert await env.execute(three_hourly, timeout=20) == [0, 1, 2]
            assert env.skipped >= 2 * 3600.0

    run(main())


@pytest.mark.timeout(10)
def test_bad_permit_intents_are_refused_and_write_nothing(store):
    e = _engine(store)
    (result,) = store.apply(e, [TakePermits("x", 0, 0, None, 1, 1)])
    assert isinstance(result, InvalidRequest)
    assert read_permits(store, "x") == {"tat": None, "held": {}}
