"""The app of the "what is it doing now" process tests (imported by path: tests/ is on
PYTHONPATH): a 600 s activity, an activity that keeps failing and is retried, a workflow that
waits in a helper coroutine, and one whose code changes with ``WEFT_OPS_APP_VARIANT`` (2:
the deploy whose replay diverges)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from weft_actors import RetryPolicy, activity, workflow

VARIANT = os.environ.get("WEFT_OPS_APP_VARIANT", "1")


@activity(start_to_close=700)
async def long_call(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@activity(retry=RetryPolicy(max_attempts=10, initial_interval=60.0, backoff=1.0))
async def flaky(n: int) -> str:
    raise RuntimeError(f"downstream said no for {n}")


@activity
async def step(tag: str) -> str:
    return tag


@workflow
async def in_a_long_activity(ctx) -> str:
    return await ctx.run(long_call, 600.0)


@workflow
async def retrying(ctx, n: int) -> str:
    return await ctx.run(flaky, n)


async def _approval(ctx) -> Any:
    return await ctx.wait_signal("approve")


@workflow
async def approval(ctx) -> Any:
    return await _approval(ctx)


@workflow
async def shifting(ctx) -> str:
    if VARIANT == "2":
        await ctx.sleep(1)  # where the first deploy ran an activity: replay diverges
    else:
        await ctx.run(step, "a")
    await ctx.wait_signal("go")
    return "done"
