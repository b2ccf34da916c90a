"""The app of the poison-workflow process tests (imported by path: tests/ is on PYTHONPATH)."""

from __future__ import annotations

import os
import sys
import time

from weft_actors import activity, workflow


@activity
async def blocks_unless_fixed(flag: str, seconds: float) -> str:
    """The poison: a blocking call in an ``async def`` activity stalls its shard's loop, unless
    the file ``flag`` exists (the deployed fix)."""
    if os.path.exists(flag):
        return "fixed"
    time.sleep(seconds)
    return "slept"


@workflow
async def poisoned(ctx, flag: str, seconds: float) -> str:
    return await ctx.run(blocks_unless_fixed, flag, seconds)


@activity
async def tick(i: int) -> int:
    return i


@workflow
async def steady(ctx, steps: int) -> int:
    total = 0
    for i in range(steps):
        await ctx.sleep(0.05)
        total += await ctx.run(tick, i)
    return total


@workflow
async def exits(ctx, code: int) -> None:
    await ctx.sleep(0.01)
    sys.exit(code)
