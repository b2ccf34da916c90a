"""Activities: inline async, thread pool, retries with committed backoff, timeouts, info()."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from _support import run
from weft_actors import Engine, RetryPolicy, activity, workflow
from weft_actors.errors import ActivityError, WorkflowFailed

ATTEMPTS: dict[str, list] = {}


@activity(retry=RetryPolicy(max_attempts=4, initial_interval=0.02, backoff=2.0))
async def flaky(key: str, fail_times: int) -> str:
    info = activity.info()
    ATTEMPTS.setdefault(key, []).append((info.key, info.attempt))
    if len(ATTEMPTS[key]) <= fail_times:
        raise ConnectionError(f"attempt {info.attempt} failed")
    return f"ok after {info.attempt}"


class Fatal(Exception):
    pass


@activity(retry=RetryPolicy(max_attempts=5, initial_interval=0.01, non_retryable=(Fatal,)))
async def fatal(key: str) -> None:
    ATTEMPTS.setdefault(key, []).append(activity.info().attempt)
    raise Fatal("do not retry me")


@activity(retry=RetryPolicy(max_attempts=2, initial_interval=0.01), start_to_close=0.05)
async def too_slow(key: str) -> None:
    ATTEMPTS.setdefault(key, []).append(activity.info().attempt)
    await asyncio.sleep(5)


@activity(retry=RetryPolicy(max_attempts=100, initial_interval=0.05, backoff=1.0), schedule_to_close=0.2)
async def never_works(key: str) -> None:
    ATTEMPTS.setdefault(key, []).append(activity.info().attempt)
    raise RuntimeError("still broken")


@activity
def blocking_in_thread(x: int) -> dict:
    return {"thread": threading.current_thread().name, "x": x, "key": activity.info().key}


@activity
async def suspends(x: int) -> int:
    await asyncio.sleep(0.01)
    return x * 2


@workflow
async def call(ctx, which: str, *args):
    target = {"flaky": flaky, "fatal": fatal, "too_slow": too_slow, "never_works": never_works,
              "thread": blocking_in_thread, "suspends": suspends}[which]
    return await ctx.run(target, *args)


@workflow
async def catches(ctx, key: str):
    try:
        await ctx.run(fatal, key)
    except ActivityError as error:
        return [error.type, error.cause_message, "Fatal" in error.traceback]


APP = [call, catches]


def test_retries_until_success_with_a_stable_key(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(call, "flaky", "k1", 2, id="r1")
            assert await handle.result(timeout=5) == "ok after 3"
            keys = {key for key, _ in ATTEMPTS["k1"]}
            assert keys == {f"r1/{handle.run_id}/0"}
            assert [attempt for _, attempt in ATTEMPTS["k1"]] == [1, 2, 3]
            history = (await handle.describe())["history"]
            assert history[0]["attempts"] == 3

    run(main())


def test_failed_attempt_is_committed_with_its_retry_time(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            before = time.time()
            handle = await engine.start(call, "flaky", "k2", 100)  # fails until max_attempts
            await asyncio.sleep(0.01)
            record = engine.store.load_ops(handle.id, handle.run_id)[0]
            assert record["attempts"] >= 1
            assert record["retry_at"] >= before
            assert engine.store.count("timers") == 1
            with pytest.raises(WorkflowFailed) as info:
                await handle.result(timeout=5)
            assert "ConnectionError" in str(info.value)
            assert len(ATTEMPTS["k2"]) == 4
            assert engine.store.count("timers") == 0

    run(main())


def test_non_retryable_error_fails_at_once_and_is_catchable(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(catches, "k3")
            kind, message, has_traceback = await handle.result(timeout=5)
            assert kind.endswith("test_activities.Fatal")
            assert (message, has_traceback) == ("do not retry me", True)
            assert ATTEMPTS["k3"] == [1]

    run(main())


def test_start_to_close_times_out_each_attempt(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(call, "too_slow", "k4")
            with pytest.raises(WorkflowFailed) as info:
                await handle.result(timeout=5)
            assert "TimeoutError" in str(info.value)
            assert ATTEMPTS["k4"] == [1, 2]

    run(main())


def test_schedule_to_close_bounds_all_attempts(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            started = time.monotonic()
            handle = await engine.start(call, "never_works", "k5")
            with pytest.raises(WorkflowFailed):
                await handle.result(timeout=5)
            assert time.monotonic() - started < 2
            assert 2 <= len(ATTEMPTS["k5"]) <= 5

    run(main())


def test_plain_functions_run_in_the_thread_pool(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(call, "thread", 7, id="t")
            result = await handle.result(timeout=5)
            assert result["thread"].startswith("weft-activity")
            assert result["key"] == f"t/{handle.run_id}/0"

    run(main())


def test_async_activity_that_suspends_runs_as_a_task(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handles = await asyncio.gather(*(engine.start(call, "suspends", i) for i in range(50)))
            assert await asyncio.gather(*(h.result(timeout=5) for h in handles)) == [i * 2 for i in range(50)]

    run(main())
