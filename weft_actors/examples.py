"""The bundled example app: what ``python -m weft_actors.supervisor`` serves without ``--app``.

Enough workflows to try every client command against the default supervisor:

    python -m weft_actors start hello '["world"]' --id hello-1
    python -m weft_actors result hello-1
    python -m weft_actors start cart '[[]]' --id cart-1            # update: add items
    python -m weft_actors update cart-1 add '"tea"'
    python -m weft_actors start greet_all '[["ada", "alan"]]'      # child workflows

``order`` waits for a signal (``approve``) and answers a query (``status``); ``sleeper``
waits on a durable timer, long enough to ``cancel`` or ``terminate`` it.
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


@workflow
async def cart(ctx, items: list) -> list:
    """Fills up through the ``add`` update (the README's example): ends with three items, or
    starts afresh (continue-as-new) after an hour without them."""

    def add(item: str) -> int:
        items.append(item)
        return len(items)

    def only_strings(item: object) -> None:  # runs before anything is recorded
        if not isinstance(item, str):
            raise ValueError("items are names")

    ctx.on_update("add", add, validator=only_strings)
    index, _ = await ctx.race([ctx.wait_condition(lambda: len(items) >= 3), ctx.sleep(3600)])
    if index == 1:
        return ctx.continue_as_new(items)
    return items


@workflow
async def greet_all(ctx, names: list) -> list:
    """One child ``hello`` workflow per name, run side by side: ``describe`` lists them as
    children, and each child names this workflow as its parent."""
    return await ctx.all([ctx.child(hello, name) for name in names])
