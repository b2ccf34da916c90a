"""Schedules on a virtual clock (``TimeSkippingEnvironment``): each fire time starts one
workflow ``<schedule id>/<fire time ISO>``; intervals, cron strings in a timezone, bounds and
jitter; every overlap policy; catch-up after downtime and backfill; pause, unpause, trigger,
update and delete. No real waiting: hours pass in milliseconds."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from weft_actors import workflow
from weft_actors._isotime import iso_utc
from weft_actors._schedule_spec import fires_between, make_spec, next_fire
from weft_actors.errors import InvalidRequest, UpdateRejected, WorkflowAlreadyExists
from weft_actors.testing import TimeSkippingEnvironment

pytestmark = pytest.mark.timeout(60)

HOUR = 3600.0
START = 1_700_000_000.0  # 2023-11-14T22:13:20Z: the environment's first instant


@workflow
async def tick(ctx, label: str) -> dict:
    fire = ctx.scheduled
    return {"label": label, "schedule": fire.schedule_id, "at": fire.fire_time.timestamp()}


@workflow
async def job(ctx, minutes: float) -> float:
    await ctx.sleep(minutes * 60)
    return minutes


APP = [tick, job]


def run(main: Any) -> None:
    asyncio.run(main())


async def _fired(env: TimeSkippingEnvironment, schedule_id: str) -> list[dict[str, Any]]:
    """The workflows the schedule started, oldest fire first, each described."""
    page = await env.engine.list(limit=1000)
    ids = sorted(item["id"] for item in page["items"] if item["id"].startswith(schedule_id + "/"))
    return [await env.engine.get_handle(wid).describe() for wid in ids]


def _hours_after(at: float, *hours: float) -> list[float]:
    """Whole hours (UTC) after ``at``: the first is the next hour boundary."""
    first = (at // HOUR + 1) * HOUR
    return [first + h * HOUR for h in hours]


def test_an_interval_schedule_starts_one_workflow_per_fire_time_which_knows_its_schedule():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            schedule = await env.engine.create_schedule("hourly", tick, "sales", spec=HOUR)
            await env.sleep(3 * HOUR)
            expected = _hours_after(START, 0, 1, 2)
            fired = await _fired(env, "hourly")
            assert [run["id"] for run in fired] == [f"hourly/{iso_utc(t)}" for t in expected]
            for run_, nominal in zip(fired, expected):
                result = await env.engine.get_handle(run_["id"]).result(timeout=5)
                assert result == {"label": "sales", "schedule": "hourly", "at": nominal}
            described = await schedule.describe()
            assert described["fired"] == 3 and described["missed"] == 0 and described["skipped"] == 0
            assert described["next"][:2] == _hours_after(START, 3, 4)
            assert [entry["status"] for entry in described["recent"]] == ["completed"] * 3
            with pytest.raises(WorkflowAlreadyExists):
                await env.engine.create_schedule("hourly", tick, "again", spec=HOUR)

    run(main)


def test_cron_strings_are_read_in_their_timezone_with_seconds_bounds_and_jitter():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            engine = env.engine
            # 09:30 in Berlin is 08:30 UTC in November (CET, UTC+1).
            await engine.create_schedule("berlin", tick, "b", spec={"cron": "30 9 * * *", "timezone": "Europe/Berlin"})
            seconds_schedule = await engine.create_schedule("seconds", tick, "s", spec="*/20 * * * * *")  # seconds first
            window_start = (START // 60 + 5) * 60
            await engine.create_schedule("bounded", tick, "w", spec={"every": 60, "start": window_start, "end": window_start + 120})
            await engine.create_schedule("spread", tick, "j", spec={"every": HOUR, "jitter": 600})
            await env.sleep(60)
            seconds = [run["id"] for run in await _fired(env, "seconds")]
            assert len(seconds) == 3 and all(wid[-7:-5] in ("00", "20", "40") for wid in seconds), seconds
            await seconds_schedule.delete()  # (two days of it would be 8,640 runs)
            await env.sleep(2 * 86_400)
            berlin = [run["id"] for run in await _fired(env, "berlin")]
            assert berlin == ["berlin/2023-11-15T08:30:00.000Z", "berlin/2023-11-16T08:30:00.000Z"]
            bounded = [run["id"] for run in await _fired(env, "bounded")]
            assert bounded == [f"bounded/{iso_utc(window_start + k * 60)}" for k in range(3)]
            spread = await _fired(env, "spread")
            delays = [run["created"] - fire for run, fire in zip(spread, _hours_after(START, *range(len(spread))))]
            assert len(spread) >= 40 and all(0 <= delay < 600 + 1 for delay in delays)
            assert len({round(delay, 3) for delay in delays}) > len(delays) // 2  # spread, not one fixed delay

    run(main)


# The runs last 100 minutes and fire hourly, from 23:00 UTC: F1 23:00, F2 00:00, F3 01:00,
# F4 02:00. What each policy has started by 02:30, and how each run ended:
OVERLAP_CASES = {
    "allow_all": (["F1", "F2", "F3", "F4"], {"skipped": 0, "buffered": 0}, ["completed", "completed", "running", "running"]),
    "skip": (["F1", "F3"], {"skipped": 2, "buffered": 0}, ["completed", "running"]),
    "buffer_one": (["F1", "F2", "F3"], {"skipped": 1, "buffered": 0}, ["completed", "completed", "running"]),
    "buffer_all": (["F1", "F2", "F3"], {"skipped": 0, "buffered": 1}, ["completed", "completed", "running"]),
    "cancel_other": (["F1", "F2", "F3", "F4"], {"skipped": 0, "buffered": 0}, ["cancelled", "cancelled", "cancelled", "running"]),
    "terminate_other": (["F1", "F2", "F3", "F4"], {"skipped": 0, "buffered": 0}, ["terminated", "terminated", "terminated", "running"]),
}


@pytest.mark.parametrize("overlap", sorted(OVERLAP_CASES))
def test_each_overlap_policy_decides_what_starts_while_the_previous_run_goes_on(overlap):
    names, counts, statuses = OVERLAP_CASES[overlap]
    fires = dict(zip(("F1", "F2", "F3", "F4"), _hours_after(START, 0, 1, 2, 3)))

    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            schedule = await env.engine.create_schedule("s", job, 100, spec=HOUR, overlap=overlap)
            await env.sleep(fires["F4"] + 30 * 60 - START)
            fired = await _fired(env, "s")
            assert [run["id"] for run in fired] == [f"s/{iso_utc(fires[name])}" for name in names]
            assert [run["status"] for run in fired] == statuses
            described = await schedule.describe()
            assert {key: described[key] for key in counts} == counts
            assert described["fired"] == len(names)
            if overlap.startswith("buffer"):
                # F2 waited for F1 (23:00 + 100 min), F3 for F2: a buffered fire starts late.
                assert fired[1]["created"] == pytest.approx(fires["F1"] + 100 * 60, abs=1)
                assert fired[2]["created"] == pytest.approx(fires["F1"] + 200 * 60, abs=1)
            elif overlap != "skip":
                assert all(run["created"] == pytest.approx(fires[name], abs=1) for run, name in zip(fired, names))

    run(main)


def test_after_downtime_fires_within_the_catchup_window_start_and_older_ones_are_counted_missed():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            spec = make_spec(every=60)
            schedule = await env.engine.create_schedule("m", tick, "x", spec=60, catchup_window=150)
            await env.sleep(130)
            before = [run["id"] for run in await _fired(env, "m")]
            assert len(before) == 2
            await env.restart(downtime=600)  # ten fire times fall due while nothing runs
            await env.sleep(1)
            schedule = env.engine.get_schedule("m")  # through the new engine
            described = await schedule.describe()
            now = env.now()
            last_before = next_fire(spec, START + 130 - 60)
            late, _ = fires_between(spec, now - 1 - 150, now - 1)
            due, _ = fires_between(spec, last_before, now - 1)
            assert described["missed"] == due - late
            fired = [run["id"] for run in await _fired(env, "m")]
            assert len(fired) == len(before) + late and fired[: len(before)] == before
            # Backfill the gap: the missed fire times start now, the ones that ran are left.
            await schedule.backfill(START, now)
            await env.sleep(1)
            filled = [run["id"] for run in await _fired(env, "m")]
            count, _ = fires_between(spec, START, now)
            assert len(filled) == count and set(fired) <= set(filled)
            assert (await schedule.describe())["skipped"] == len(fired)  # those already ran
            every = [dt.datetime.strptime(wid.split("/", 1)[1], "%Y-%m-%dT%H:%M:%S.%fZ") for wid in filled]
            assert all((b - a).total_seconds() == 60 for a, b in zip(every, every[1:]))

    run(main)


def test_pause_unpause_trigger_update_and_delete():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            engine = env.engine
            schedule = await engine.create_schedule("ops", tick, "o", spec=HOUR, paused=True, note="until launch")
            await env.sleep(3 * HOUR)
            described = await schedule.describe()
            assert described["fired"] == 0 and described["paused"] and described["note"] == "until launch"
            assert described["next"] == []
            await schedule.unpause()
            await env.sleep(HOUR)
            assert len(await _fired(env, "ops")) == 1  # the paused hours are not caught up
            await schedule.trigger()
            await env.sleep(0.5)
            fired = [run["id"] for run in await _fired(env, "ops")]
            assert len(fired) == 2 and f"ops/{iso_utc(START + 4 * HOUR)}" in fired  # fired now
            await schedule.update(spec=HOUR / 2, args=["changed"])
            await env.sleep(HOUR)
            latest = await _fired(env, "ops")
            assert len(latest) == 4
            assert await engine.get_handle(latest[-1]["id"]).result(timeout=5) == {
                "label": "changed", "schedule": "ops", "at": pytest.approx(START + 5 * HOUR, abs=HOUR / 2)
            }
            with pytest.raises(InvalidRequest, match="overlap"):  # refused before it is sent
                await schedule.update(overlap="sometimes")
            with pytest.raises(InvalidRequest, match="before its start"):
                await schedule.backfill(START + HOUR, START)
            with pytest.raises(UpdateRejected, match="overlap"):  # and by the owner, the authority
                await schedule.workflow_handle.update("update", {"overlap": "sometimes"})
            await schedule.delete()
            summary = await schedule.workflow_handle.result(timeout=5)
            assert summary["deleted"] and summary["fired"] == 4
            await env.sleep(3 * HOUR)
            assert len(await _fired(env, "ops")) == 4  # deleted: it fires no more
            assert (await schedule.describe())["deleted"]  # and still answers

    run(main)


def test_bad_schedules_are_refused_before_anything_is_written():
    async def main() -> None:
        async with TimeSkippingEnvironment(app=APP) as env:
            engine = env.engine
            for spec, words in (
                ("61 * * * *", "bad cron"),
                ({"every": 0}, "every= must be from 1 second"),
                ({"every": float("nan")}, "finite"),
                ({"cron": "* * * * *", "every": 60}, "exactly one"),
                ({"every": 60, "timezone": "Mars/Olympus"}, "unknown timezone"),
                ({"every": 60, "start": 10, "end": 5}, "before start"),
                ({"every": 60, "often": True}, "unknown schedule spec"),
                (None, "needs spec"),
                ([60], "cron string"),
            ):
                with pytest.raises(InvalidRequest, match=words):
                    await engine.create_schedule("bad", tick, "x", spec=spec)
            with pytest.raises(InvalidRequest, match="overlap"):
                await engine.create_schedule("bad", tick, "x", spec=60, overlap="sometimes")
            with pytest.raises(InvalidRequest, match="unknown option"):
                await engine.create_schedule("bad", tick, "x", spec=60, retries=3)
            with pytest.raises(InvalidRequest, match="not a @workflow"):
                await engine.create_schedule("bad", print, spec=60)
            assert (await engine.list())["items"] == []

    run(main)


def _walk(spec: dict, after: float, until: float) -> tuple[int, float | None]:
    count, last, at = 0, None, after
    while (fire := next_fire(spec, at)) is not None and fire <= until:
        count, last, at = count + 1, fire, fire
    return count, last


@pytest.mark.parametrize("seed", range(5))
def test_counting_the_fire_times_of_a_gap_is_the_walk_for_intervals_and_bounded_for_cron(seed):
    import random

    rng = random.Random(seed)
    for _ in range(200):
        spec = make_spec(
            every=rng.choice([1, 1.5, 7.5, 60, 3600]), offset=rng.uniform(-100, 100),
            start=rng.choice([None, START + rng.uniform(0, 1e4)]), end=rng.choice([None, START + rng.uniform(1e4, 2e4)]),
        )
        after = START + rng.uniform(-1e3, 2e4)
        until = after + rng.uniform(0, 3e4)
        count, last = fires_between(spec, after, until)
        walked, walked_last = _walk(spec, after, until)
        assert count == walked and (last == walked_last or abs(last - walked_last) < 1e-6)
    # A per-second cron over a day of downtime: the count stops at the bound, and the last
    # is the end of the gap, so the schedule moves past it at once instead of walking it.
    every_second = make_spec(cron="* * * * * *")
    assert fires_between(every_second, START, START + 86_400, limit=500) == (500, START + 86_400)
    assert fires_between(every_second, START, START + 10) == (10, START + 10)
