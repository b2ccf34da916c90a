"""A user's app, type-checked with ``mypy --strict`` by ``test_typing.py`` (not run by pytest):
what a user writes against the public API must type-check without ignores or casts."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from weft_actors import AsyncClient, Client, Context, Engine, RetryPolicy, WeftError, activity, workflow
from weft_actors.errors import Overloaded, WorkflowAlreadyExists


@activity
async def reserve(sku: str, quantity: int) -> str:
    return f"{sku}:{quantity}"


@activity(retry=RetryPolicy(max_attempts=5, initial_interval=0.1), start_to_close=10.0)
def charge(order_id: str, cents: int) -> int:
    return cents


@workflow
async def shipment(ctx: Context, order_id: str) -> str:
    await ctx.sleep(timedelta(hours=1).total_seconds())
    return f"shipped {order_id}"


@workflow(name="order")
async def order(ctx: Context, order_id: str, cents: int) -> dict[str, Any]:
    state: dict[str, Any] = {"approved": None, "notes": []}

    def note(text: str) -> int:
        state["notes"].append(text)
        return len(state["notes"])

    ctx.on_signal("approve", lambda approved: state.__setitem__("approved", approved))
    ctx.on_update("note", note)
    ctx.on_query("status", lambda: "approved" if state["approved"] else "waiting")
    reservation = await ctx.run(reserve, "book", 1)
    await ctx.wait_condition(lambda: state["approved"] is not None)
    if not state["approved"]:
        return {"order": order_id, "status": "rejected"}
    charged = await ctx.run(charge, order_id, cents)
    shipped = await ctx.child(shipment, order_id)
    now = await ctx.now()
    return {"order": order_id, "reservation": reservation, "charged": charged, "shipped": shipped, "at": now.isoformat()}


async def embedded(data_dir: str) -> dict[str, Any]:
    async with Engine(data_dir, app=[order, shipment]) as engine:
        handle = await engine.start(order, "o-1", 1299, id="order-o-1", if_exists="return")
        await handle.signal("approve", True)
        result: dict[str, Any] = await handle.result(timeout=30)
        return result


def with_client(endpoint: str) -> None:
    with Client(endpoint, timeout=10) as client:
        try:
            handle = client.start("order", "o-2", 500, id="order-o-2")
        except WorkflowAlreadyExists:
            handle = client.get_handle("order-o-2")
        except Overloaded:
            return
        print(handle.query("status"), handle.update("note", "gift wrap"))
        handle.signal("approve", True)
        print(handle.result(timeout=30), handle.describe()["status"])
        print(client.list(status="completed", limit=10)["items"])


async def with_async_client(endpoint: str) -> None:
    async with AsyncClient(endpoint, timeout=10) as client:
        try:
            value = await client.execute("order", "o-3", 100, id="order-o-3", timeout=30)
            print(value)
        except WeftError as error:
            print(error.code)
        handle = client.get_handle("order-o-3")
        await handle.cancel()


if __name__ == "__main__":
    asyncio.run(embedded("./weft-data"))
