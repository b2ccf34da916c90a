"""The app of the web console tests (imported by path: tests/ is on PYTHONPATH)."""

from __future__ import annotations

import dataclasses

from weft_actors import activity, register_type, workflow


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


@workflow
async def timed(ctx, tag: str) -> str:
    """Two steps, then a wait for ``go`` of up to an hour: a pending timer with a fire time."""
    shouted = await ctx.run(shout, tag)
    await ctx.sleep(0.05)
    return shouted + str(await ctx.wait_signal("go", timeout=3600))


@workflow
async def chain(ctx, n: int) -> int:
    """Continues as new ``n`` times (so it has previous runs), then returns 0."""
    if n > 0:
        return ctx.continue_as_new(n - 1)
    return n


@dataclasses.dataclass
class Parcel:
    label: str
    grams: int


register_type(Parcel)


@workflow
async def ship(ctx, parcel: Parcel | None = None) -> str:
    """Continues as new with a ``Parcel``: an input of a type only the app's processes know
    (the console's and the tests' processes never import this module)."""
    if parcel is None:
        return ctx.continue_as_new(Parcel("fragile", 750))
    return f"{parcel.label}: " + await ctx.wait_signal("go")


@workflow
async def ledger(ctx, owner: str) -> int:
    """Payloads for the history (a waited signal, a signal handler, an update's arguments and
    result), a query with arguments, and a timer that loses a race (to ``close``); then
    waits for ``finish``."""
    state = {"total": 0, "notes": []}

    def add(amount: int) -> int:
        state["total"] += amount
        return state["total"]

    ctx.on_signal("note", lambda text: state["notes"].append(text))
    ctx.on_update("add", add)
    ctx.on_query("balance", lambda scale=1: {"owner": owner, "total": state["total"] * scale, "notes": state["notes"]})
    first = await ctx.wait_signal("item")
    await ctx.race([ctx.wait_signal("close"), ctx.sleep(3600)])
    await ctx.wait_signal("finish")
    return state["total"] + len(first)
