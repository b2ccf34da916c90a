"""The app of the blame process tests (imported by path: tests/ is on PYTHONPATH): one
workflow whose ``async def`` activity blocks its shard's loop, and long-running neighbours
whose activity notes each of its runs in a file of its own."""

from __future__ import annotations

import asyncio
import os
import time

from weft_actors import activity, workflow


@activity
async def blocks(seconds: float) -> str:
    """The poison: a blocking call in an ``async def`` activity stalls its shard's loop."""
    time.sleep(seconds)
    return "slept"


@workflow
async def blocker(ctx, seconds: float) -> str:
    return await ctx.run(blocks, seconds)


@activity
async def long_step(runs: str, seconds: float) -> str:
    """One line in the file ``runs`` per run of this activity, then a long wait (awaited:
    it never holds the loop)."""
    with open(runs, "a") as out:
        out.write(f"{os.getpid()}\n")
    await asyncio.sleep(seconds)
    return "done"


@workflow
async def long_running(ctx, runs: str, seconds: float) -> str:
    return await ctx.run(long_step, runs, seconds)
