"""Workflows for the crash tests, importable by path in the test and in a child process.

Run as a script it starts an Engine on argv[1], starts the workflows and waits to be killed.
"""

from __future__ import annotations

import asyncio
import os
import sys

from weft_actors import Engine, RetryPolicy, activity, workflow

LOG = os.environ.get("WEFT_TEST_LOG", "")


def note(line: str) -> None:
    with open(LOG, "a") as log:
        log.write(line + "\n")
        log.flush()
        os.fsync(log.fileno())


@activity
async def step(index: int) -> int:
    note(f"start {index}")
    if index == 1 and os.environ.get("WEFT_CRASH_BLOCK"):
        await asyncio.sleep(3600)  # killed here, mid-activity
    note(f"done {index}")
    return index


@activity(retry=RetryPolicy(max_attempts=10, initial_interval=0.3, backoff=1.0))
async def flaky() -> str:
    attempt = activity.info().attempt
    note(f"flaky attempt {attempt}")
    if attempt < 4:
        raise ConnectionError("not yet")
    return f"flaky ok at {attempt}"


@workflow
async def three_logged(ctx) -> list:
    return [await ctx.run(step, i) for i in range(3)]


@workflow
async def sleeper(ctx, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"


@workflow
async def retrier(ctx) -> str:
    return await ctx.run(flaky)


APP = [three_logged, sleeper, retrier]


async def _serve(data_dir: str, which: str) -> None:
    async with Engine(data_dir, app=APP) as engine:
        if which == "three":
            await engine.start(three_logged, id="crash")
        elif which == "sleep":
            await engine.start(sleeper, 0.5, id="sleepy")
        elif which == "retry":
            await engine.start(retrier, id="retry")
        note("ready")
        await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], sys.argv[2]))
