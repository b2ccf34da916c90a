"""The app of the web console tests (imported by path: tests/ is on PYTHONPATH)."""

from __future__ import annotations

from weft_actors import activity, workflow


@activity
async def shout(text: str) -> str:
    return text.upper()


@activity
async def refuse(reason: str) -> None:
    raise ValueError(reason)


@workflow
async def echo(ctx, value):
    return await ctx.run(shout, value)


@workflow
async def failing(ctx, reason: str) -> None:
    await ctx.run(refuse, reason)


@workflow
async def waiter(ctx, tag: str) -> list:
    """Waits for ``item`` signals until one carries None."""
    received = []
    ctx.on_query("received", lambda: list(received))
    while True:
        value = await ctx.wait_signal("item")
        if value is None:
            return [tag, received]
        received.append(value)


@workflow
async def parent(ctx, child_id: str) -> str:
    return "parent of " + await ctx.child(echo, "kid", id=child_id)
