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


@activity
async def quick() -> str:
    return "quick"


@workflow
async def ends_beside_a_blocker(ctx, seconds: float, hold: float, stall: float) -> str:
    """Ends ``seconds`` in, and its ending commits in the very batch after which its child
    ``-b`` goes on to block the loop for ``stall`` seconds: both wake on timers that another
    child, ``-c``, makes fire in one pass by holding the loop for ``hold`` seconds around
    then, and both then finish an activity inline, going ahead of its commit."""
    wid = ctx.workflow_id
    await ctx.all([
        ctx.start_child(goes_on_to_block, seconds, stall, id=f"{wid}-b"),
        ctx.start_child(holds_the_loop, seconds - hold / 2, hold, id=f"{wid}-c"),
    ])
    await ctx.sleep(seconds)
    return await ctx.run(quick)


@workflow
async def goes_on_to_block(ctx, seconds: float, stall: float) -> str:
    await ctx.sleep(seconds)
    await ctx.run(quick)
    return await ctx.run(blocks, stall)


@workflow
async def holds_the_loop(ctx, seconds: float, hold: float) -> str:
    """Then waits on: its ending would put a message in its parent's inbox."""
    await ctx.sleep(seconds)
    await ctx.run(blocks, hold)
    return await ctx.wait_signal("never")


@workflow
async def slow_condition_after_update(ctx, stall: float) -> str:
    """Update ``go`` makes its condition true; the condition's check that sees it (user
    code, run as the update's commit lands) holds the loop for ``stall`` seconds."""
    state = {"go": False}

    def go() -> str:
        state["go"] = True
        return "went"

    def ready() -> bool:
        if state["go"]:
            time.sleep(stall)
        return state["go"]

    ctx.on_update("go", go)
    await ctx.wait_condition(ready)
    return "done"


@workflow
async def answers_then_fails(ctx) -> str:
    """Update ``add`` answers its argument plus one, refuses a negative one (its validator),
    and fails for zero (its handler); signal ``fail`` makes the run fail."""

    def add(n: int) -> int:
        if n == 0:
            raise ValueError("zero")
        return n + 1

    def positive(n: int) -> bool:
        return n >= 0

    ctx.on_update("add", add, positive)
    await ctx.wait_signal("fail")
    raise RuntimeError("as asked")


@workflow
async def returns(ctx, value):
    return await ctx.run(echoes, value)


@activity
async def echoes(value):
    return value


@workflow
async def fails_at_once(ctx, message: str) -> None:
    raise RuntimeError(message)
