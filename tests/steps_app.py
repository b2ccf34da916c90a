"""The three-step workflow most engine tests run (the same shape as ``bench_app.three_steps``)."""

from __future__ import annotations

from weft_actors import activity, workflow


@activity
async def add_one(x: int) -> int:
    return x + 1


@workflow
async def three_steps(ctx, x: int) -> int:
    a = await ctx.run(add_one, x)
    b = await ctx.run(add_one, a)
    return await ctx.run(add_one, b)
