"""The app of the rolling restart tests: activities that count their runs in files (one per
run, under ``$WEFT_TEST_RUNS``), so a test tells how many times each ran across processes."""

from __future__ import annotations

import asyncio
import os
import uuid

from weft_actors import activity, workflow


def _mark(tag: str, what: str) -> None:
    open(os.path.join(os.environ["WEFT_TEST_RUNS"], f"{tag}.{what}.{uuid.uuid4().hex}"), "w").close()


@activity
async def charge(tag: str, seconds: float) -> str:
    _mark(tag, "start")
    await asyncio.sleep(seconds)
    _mark(tag, "end")
    return f"charged {tag}"


@workflow
async def charge_then_wait(ctx, tag: str, seconds: float) -> list:
    charged = await ctx.run(charge, tag, seconds)
    return [charged, await ctx.wait_signal("go")]


@workflow
async def two_charges(ctx, tag: str, seconds: float) -> list:
    return [await ctx.run(charge, f"{tag}-a", seconds), await ctx.run(charge, f"{tag}-b", seconds)]
