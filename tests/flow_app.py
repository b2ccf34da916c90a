"""Workflows under flow control, for supervisor tests: each records when its one activity ran."""

from __future__ import annotations

import asyncio
import time

from weft_actors import activity, workflow


@activity
async def busy(seconds: float) -> list:
    started = time.time()
    await asyncio.sleep(seconds)
    return [started, time.time()]


@workflow(concurrency=2, concurrency_key=lambda customer, n, seconds: customer)
async def order(ctx, customer: str, n: int, seconds: float) -> list:
    span = await ctx.run(busy, seconds)
    return [n, *span]
