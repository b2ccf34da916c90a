"""The bundled example app: what ``python -m weft_actors.supervisor`` serves without ``--app``.

    python -m weft_actors start hello '["world"]' --id hello-1
    python -m weft_actors result hello-1
"""

from __future__ import annotations

from . import RetryPolicy, activity, workflow


@activity
async def greet(name: str) -> str:
    return f"Hello, {name}!"


@activity(retry=RetryPolicy(max_attempts=5, initial_interval=0.2))
async def charge(order_id: str, cents: int) -> str:
    return f"charge-{order_id}-{cents}"


@workflow
async def hello(ctx, name: str) -> str:
    return await ctx.run(greet, name)


@workflow
async def three_steps(ctx, x: int) -> int:
    """Three activities in a row: the benchmark's workflow."""
    for _ in range(3):
        x = await ctx.run(add_one, x)
    return x


@activity
async def add_one(x: int) -> int:
    return x + 1


@workflow
async def order(ctx, order_id: str, cents: int) -> dict:
    """Charge, wait for approval (a signal), then confirm."""
    state = {"step": "charging"}
    ctx.on_query("status", lambda: state["step"])
    charge_id = await ctx.run(charge, order_id, cents)
    state["step"] = "awaiting approval"
    approved = await ctx.wait_signal("approve", timeout=3600)
    state["step"] = "done"
    return {"charge": charge_id, "approved": approved}


@workflow
async def sleeper(ctx, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "woke"
