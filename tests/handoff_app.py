"""The app of the supervisor handoff test: an activity that counts its runs in files (one per
run, under ``$WEFT_TEST_RUNS``), so a test tells how many times it ran across processes."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from weft_actors import activity, workflow


@activity
async def charge(tag: str, seconds: float) -> str:
    runs = os.environ["WEFT_TEST_RUNS"]
    open(os.path.join(runs, f"{tag}.start.{uuid.uuid4().hex}"), "w").close()
    await asyncio.sleep(seconds)
    open(os.path.join(runs, f"{tag}.end.{uuid.uuid4().hex}"), "w").close()
    return f"charged {tag}"


@workflow
async def charge_then_wait(ctx, tag: str, seconds: float) -> list:
    charged = await ctx.run(charge, tag, seconds)
    return [charged, await ctx.wait_signal("go")]


@workflow
async def charge_then_nap(ctx, tag: str, seconds: float, nap: float) -> str:
    charged = await ctx.run(charge, tag, seconds)
    await ctx.sleep(nap)
    return charged


@workflow
async def quick(ctx, value: int) -> int:
    return value


@activity
async def hog(tag: str) -> str:
    """Waits until the test names this process (a ``block.<pid>`` file), then blocks its
    loop for a minute: a shard hung in the middle of whatever it is doing. Elsewhere it
    returns once a ``go`` file exists (at once in a process started after it)."""
    runs = os.environ["WEFT_TEST_RUNS"]
    open(os.path.join(runs, f"{tag}.hog.{os.getpid()}"), "w").close()
    block = os.path.join(runs, f"block.{os.getpid()}")
    for _ in range(600):
        if os.path.exists(block):
            time.sleep(60)
            break
        if os.path.exists(os.path.join(runs, "go")):
            break
        await asyncio.sleep(0.05)
    return f"hogged {tag}"


@workflow
async def hog_once(ctx, tag: str) -> str:
    return await ctx.run(hog, tag)
