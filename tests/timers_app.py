"""The app of the timer-gauge metrics test (imported by path: tests/ is on PYTHONPATH): one
workflow whose timer is cancelled or fires, one that keeps a timer armed."""

from __future__ import annotations

from weft_actors import workflow


@workflow
async def timed_wait(ctx, timeout: float) -> str:
    """Waits for ``go`` with a timeout: its timer is cancelled by the signal, or fires."""
    try:
        return await ctx.wait_signal("go", timeout=timeout)
    except TimeoutError:
        return "timed out"


@workflow
async def napper(ctx, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"
