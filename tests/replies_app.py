"""The app of the replies-before-user-code process tests (imported by path: tests/ is on
PYTHONPATH): work that blocks the shard's loop right after a commit that answers a client."""

from __future__ import annotations

import time

from weft_actors import activity, workflow


@activity
async def blocks(seconds: float) -> str:
    """A blocking call in an ``async def`` activity: it holds the shard's loop."""
    time.sleep(seconds)
    return "slept"


@workflow
async def blocks_after_signal(ctx, seconds: float) -> str:
    await ctx.wait_signal("go")
    return await ctx.run(blocks, seconds)
