"""A schedule's spec, changes and backfills are checked before anything is written: every
field finite and within the range the engine's timers take, a backfill spanning at most
``MAX_BACKFILL`` fire times, an interval of a second at least. ``InvalidRequest`` names the
field on the caller's side; the owner refuses the same with ``UpdateRejected``; a healthy
schedule stays as it was. And the catch-up window applies to downtime only: a fire late by
a timer's or the loop's lateness starts, even with ``catchup_window=0``."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from weft_actors import Engine, workflow
from weft_actors._schedule_spec import fires_between, make_spec, next_fire
from weft_actors.errors import InvalidRequest, UpdateRejected
from weft_actors.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.timeout(60)

HOUR = 3600.0
START = 1_700_000_000.0


@workflow
async def tick(ctx, label: str) -> str:
    return label


def run(main: Any) -> None:
    asyncio.run(main())


async def _fired(engine: Any, schedule_id: str) -> list[str]:
    page = await engine.list(limit=1000)
    return sorted(item["id"] for item in page["items"] if item["id"].startswith(schedule_id + "/"))


BAD_SPECS = [
    ({"every": 1e300}, "every="),
    ({"every": 1e-9}, "every="),
    ({"every": 0.001}, "every="),
    ({"every": 60, "start": 1e300}, "start="),
    ({"every": 60, "end": math.inf}, "end="),
    ({"every": 60, "jitter": 1e300}, "jitter="),
    ({"every": 60, "offset": 1e300}, "offset="),
    ({"cron": "* * * * *", "start": -1e15}, "start="),  # once a bare ValueError
    ({"cron": "* * * * *", "end": float("nan")}, "end="),
]


@pytest.mark.parametrize(("spec", "field"), BAD_SPECS)
def test_a_spec_field_out_of_range_is_refused_naming_it(spec, field):
    with pytest.raises(InvalidRequest, match=field):
        make_spec(**{("timezone_name" if k == "timezone" else k): v for k, v in spec.items()})

    async def main() -> None:
        async with TimeSkippingEnvironment(app=[tick]) as env:
            with pytest.raises(InvalidRequest, match=field):
                await env.engine.create_schedule("bad", tick, "x", spec=spec)
            with pytest.raises(InvalidRequest, match="catchup_window"):
                await env.engine.create_schedule("bad", tick, "x", spec=60, catchup_window=1e300)
            assert (await env.engine.list())["items"] == []

    run(main)


def test_a_bad_change_or_backfill_leaves_a_healthy_schedule_as_it_was():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=[tick]) as env:
            schedule = await env.engine.create_schedule("hourly", tick, "h", spec=HOUR)
            before = await schedule.describe()
            nan, inf = float("nan"), math.inf
            for start, end, words in ((nan, nan, "backfill start"), (-inf, inf, "backfill start"), (START, 1e300, "backfill end")):
                with pytest.raises(InvalidRequest, match=words):
                    await schedule.backfill(start, end)
            for changes, field in (
                ({"spec": {"every": 1e300}}, "every="),
                ({"spec": {"every": 60, "start": 1e300}}, "start="),
                ({"spec": {"every": 60, "jitter": 1e300}}, "jitter="),
                ({"catchup_window": 1e300}, "catchup_window"),
                ({"overlap": "allow_all", "catchup_window": -1}, "catchup_window"),  # none of it applies
            ):
                with pytest.raises(InvalidRequest, match=field):
                    await schedule.update(**changes)
                with pytest.raises(UpdateRejected, match=field):  # the owner refuses it too
                    await schedule.workflow_handle.update("update", changes)
            with pytest.raises(UpdateRejected, match="backfill start"):
                await schedule.workflow_handle.update("backfill", nan, nan)
            with pytest.raises(UpdateRejected, match="more than 1000 fire times"):
                await schedule.backfill(START - 2000 * HOUR, START)  # counted against the spec
            await env.sleep(3 * HOUR)
            described = await schedule.describe()
            assert (await schedule.workflow_handle.describe())["status"] == "running"
            assert {k: described[k] for k in ("spec", "overlap", "catchup_window")} == {k: before[k] for k in ("spec", "overlap", "catchup_window")}
            assert described["fired"] == 3 and described["missed"] == 0
            await schedule.backfill(START - 10 * HOUR, START)  # a bounded span is fine
            await env.sleep(5)
            assert len(await _fired(env.engine, "hourly")) == 3 + 10

    run(main)


@pytest.mark.timeout(10)
def test_counting_fire_times_is_bounded_for_any_stored_interval():
    # A spec stored before intervals had a minimum: the count is arithmetic, never a walk
    # that a step below the float grid would never end.
    spec = {"cron": None, "every": 1e-9, "offset": 0.0, "timezone": "UTC", "start": None, "end": None, "jitter": 0.0}
    after, until = 1700000065.1592972, 1700000144.0316324  # once: last -= every never moved
    count, last = fires_between(spec, after, until)
    assert count > 0 and last is not None and last <= until
    assert next_fire(spec, after) > after  # the next fire time is always later


def test_with_catchup_window_0_an_engine_that_is_up_fires_every_fire_time(tmp_path):
    async def main() -> None:
        async with Engine(str(tmp_path), app=[tick]) as engine:
            schedule = await engine.create_schedule("zero", tick, "z", spec=1, catchup_window=0, overlap="allow_all")
            deadline = time.monotonic() + 20
            while (described := await schedule.describe())["fired"] + described["missed"] < 3:
                assert time.monotonic() < deadline, described
                await asyncio.sleep(0.05)
            assert described["missed"] == 0, described  # each was late only by its timer
            await schedule.delete()

    run(main)


def test_with_catchup_window_0_fires_due_during_downtime_are_missed():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=[tick]) as env:
            spec = make_spec(every=60)
            await env.engine.create_schedule("m", tick, "x", spec=60, catchup_window=0)
            await env.sleep(130)
            assert len(await _fired(env.engine, "m")) == 2
            await env.restart(downtime=600)  # ten fire times fall due while nothing runs
            await env.sleep(1)
            recovered = env.now() - 1
            described = await env.engine.get_schedule("m").describe()
            due, _ = fires_between(spec, START + 120, recovered)
            assert due == 10 and described["missed"] == due  # none within a timer's lateness of it
            assert described["fired"] == 2
            await env.restart()  # a replay of that verdict takes the same branch, and goes on
            await env.sleep(120)
            again = await env.engine.get_schedule("m").describe()
            assert again["missed"] == due and again["fired"] == 4

    run(main)


def test_a_catch_up_burst_is_paced_and_a_pause_sent_during_it_is_taken_at_once():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=[tick]) as env:
            await env.engine.create_schedule("burst", tick, "b", spec=1, catchup_window=3600, overlap="allow_all")
            await env.sleep(2.5)
            before = (await env.engine.get_schedule("burst").describe())["fired"]
            await env.restart(downtime=600)  # 600 fire times within the window: all due at once
            await env.sleep(0.35)  # the burst under way: one fire per breath of 0.1 s
            schedule = env.engine.get_schedule("burst")
            under_way = (await schedule.describe())["fired"] - before
            assert 1 <= under_way <= 10, under_way  # once: all 600 back to back, the inbox unread
            await schedule.pause("enough")
            paused = (await schedule.describe())["fired"]
            await env.sleep(60)
            described = await schedule.describe()
            assert described["paused"] and described["fired"] == paused and paused - before < 20

    run(main)


def test_an_engine_that_stalls_longer_than_the_window_still_fires_each_time_and_replays_alike():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=[tick]) as env:
            schedule = await env.engine.create_schedule("stall", tick, "s", spec=1, catchup_window=0, overlap="allow_all")
            await env.sleep(2.5)
            env.clock.jump(30)  # the loop stalls 30 s: its timers fire that late, the engine up
            env.engine.tick()
            await env.sleep(5)
            described = await schedule.describe()
            assert described["missed"] == 0 and described["fired"] == 2 + 30 + 5, described
            # Its verdicts are recorded: a new engine replays the same history to the same state.
            await env.restart()
            await env.sleep(3)
            handle = env.engine.get_handle("stall")
            assert (await handle.describe())["status"] == "running"
            replayed = await env.engine.get_schedule("stall").describe()
            assert replayed["missed"] == 0 and replayed["fired"] == described["fired"] + 3
            fired = await _fired(env.engine, "stall")
            assert len(fired) == replayed["fired"]

    run(main)


def _walk(spec: dict, after: float, until: float) -> tuple[int, float | None]:
    count, last, at = 0, None, after
    while (fire := next_fire(spec, at)) is not None and fire <= until:
        count, last, at = count + 1, fire, fire
    return count, last


@pytest.mark.parametrize("cron", ["*/7 * * * *", "30 2 * * *", "0 */3 * * mon-fri", "15 * * * * *"])
def test_counting_cron_fire_times_walks_one_iterator_to_the_same_times_across_dst(cron):
    march_change = 1_711_846_800.0  # 2024-03-31T01:00:00Z: Berlin springs forward
    for zone in ("UTC", "Europe/Berlin", "America/New_York"):
        spec = make_spec(cron=cron, timezone_name=zone)
        after, until = march_change - 3 * 86_400, march_change + 3 * 86_400
        assert fires_between(spec, after, until, limit=10**6) == _walk(spec, after, until)


@pytest.mark.timeout(10)
def test_a_month_of_a_per_second_cron_is_counted_without_holding_the_loop():
    spec = make_spec(cron="* * * * * *", timezone_name="Europe/Berlin")
    began = time.perf_counter()
    count, last = fires_between(spec, START, START + 30 * 86_400)
    took = time.perf_counter() - began
    assert count == 1000 and last == START + 30 * 86_400  # a lower bound; the rest skipped at once
    assert took < 1.0, took  # once: 10,000 fresh croniters, 5 to 15 s of a shard's loop
