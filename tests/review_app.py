"""The app of the hostile-input tests (imported by path: tests/ is on PYTHONPATH): a workflow
with queries of any answer, ones that hold many ops pending at once, and one whose code
changes with ``WEFT_REVIEW_VARIANT`` (2: the deploy whose replay diverges)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from weft_actors import RetryPolicy, activity, workflow

VARIANT = os.environ.get("WEFT_REVIEW_VARIANT", "1")


@activity
async def step(tag: str) -> str:
    return tag


@activity(start_to_close=700)
async def long_call(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@activity(retry=RetryPolicy(max_attempts=10, initial_interval=600.0, backoff=1.0))
async def loud_failure(n: int) -> str:
    raise RuntimeError("x" * 20_000 + f" failure {n}")


def _boom() -> None:
    raise RuntimeError("<b>the handler's own bug</b>")


@workflow
async def sink(ctx) -> int:
    """Waits for ``s`` signals until one says ``stop``; ``big`` answers ``n`` characters."""
    got: list[Any] = []
    ctx.on_query("got", lambda: list(got))
    ctx.on_query("count", lambda: len(got))
    ctx.on_query("big", lambda n: "y" * n)
    ctx.on_query("boom", _boom)
    while True:
        value = await ctx.wait_signal("s")
        if value == "stop":
            return len(got)
        got.append(value)


@workflow
async def many_activities(ctx, n: int) -> Any:
    return await ctx.all([ctx.run(long_call, 600.0) for _ in range(n)])


@workflow
async def many_failing(ctx, n: int) -> Any:
    return await ctx.all([ctx.run(loud_failure, i) for i in range(n)])


@workflow
async def many_timers(ctx, n: int) -> Any:
    return await ctx.all([ctx.sleep(3600) for _ in range(n)])


@workflow
async def diverging(ctx) -> str:
    progress: list[str] = []
    ctx.on_query("progress", lambda: list(progress))
    if VARIANT == "2":
        await ctx.sleep(1)  # where the first deploy ran an activity: replay diverges
    else:
        progress.append(await ctx.run(step, "a"))
    await ctx.wait_signal("go")
    return "done"
