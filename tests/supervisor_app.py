"""The app served by the supervisor integration tests (imported by path: tests/ is on PYTHONPATH)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time

from weft_actors import activity, workflow

if os.environ.get("WEFT_TEST_CRASH_SHARDS") and multiprocessing.current_process().name.startswith("shard"):
    os._exit(17)  # every shard dies at start-up: exercises the restart intensity
if os.environ.get("WEFT_TEST_SLOW_SHARDS") and multiprocessing.current_process().name.startswith("shard"):
    time.sleep(float(os.environ["WEFT_TEST_SLOW_SHARDS"]))  # shards are ready only this much later


@activity
async def pause(seconds: float, index: int) -> int:
    await asyncio.sleep(seconds)
    return index


@workflow
async def slow_steps(ctx, steps: int, seconds: float) -> list:
    return [await ctx.run(pause, seconds, i) for i in range(steps)]


@workflow
async def waiter(ctx, tag: str) -> list:
    received = []
    ctx.on_query("received", lambda: list(received))
    while True:
        value = await ctx.wait_signal("item")
        if value is None:
            return [tag, received]
        received.append(value)


@workflow
async def echo(ctx, value):
    return value


@activity
async def refuse(reason: str) -> None:
    raise ValueError(reason)


@workflow
async def failing(ctx, reason: str) -> None:
    await ctx.run(refuse, reason)
