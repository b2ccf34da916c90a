"""``Engine.list`` while workflows change between pages, and ``describe`` with its history and
pending inbox, end to end on one engine."""

from __future__ import annotations

import random

import pytest

from _support import eventually, run
from weft_actors import Engine, activity, workflow
from weft_actors.errors import InvalidRequest


@activity
async def charge(cents: int) -> str:
    return f"ch-{cents}"


@workflow
async def order(ctx, cents: int) -> dict:
    charge_id = await ctx.run(charge, cents)
    approved = await ctx.wait_signal("approve")
    return {"charge": charge_id, "approved": approved}


@workflow
async def refund(ctx) -> str:
    return await ctx.wait_signal("go")


APP = [order, refund]


@pytest.mark.parametrize("seed", range(3))
def test_listing_pages_while_workflows_finish_and_start_lists_each_once(tmp_path, seed):
    async def main():
        rng = random.Random(seed)
        async with Engine(str(tmp_path), app=APP) as engine:
            ids = [f"o-{rng.randrange(10**6):06d}-{i}" for i in range(30)]
            for wid in ids:
                await engine.start(order, 100, id=wid)
            seen: list[str] = []
            statuses: dict[str, set[str]] = {}
            cursor = None
            created = 0
            while True:
                page = await engine.list(limit=4, cursor=cursor)
                for item in page["items"]:
                    seen.append(item["id"])
                    statuses.setdefault(item["id"], set()).add(item["status"])
                cursor = page["cursor"]
                if cursor is None:
                    break
                for wid in rng.sample(ids, 3):  # finish some (perhaps listed, perhaps not yet)
                    if (await engine.get_handle(wid).describe())["status"] == "running":
                        await engine.signal(wid, "approve", True)
                        await engine.get_handle(wid).result(timeout=5)
                await engine.start(refund, id=f"r-{created}")
                created += 1

            assert len(seen) == len(set(seen))
            assert set(ids) <= set(seen)
            assert seen == sorted(seen, key=str.encode)
            running = (await engine.list(status="running", limit=1000))["items"]
            assert all(item["status"] == "running" for item in running)
            refunds = (await engine.list(type="refund", limit=1000))["items"]
            assert {item["id"] for item in refunds} == {f"r-{i}" for i in range(created)}

    run(main())


def test_describe_shows_the_history_and_the_pending_inbox(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            handle = await engine.start(order, 250, id="o-1")
            await engine.signal("o-1", "note", "not awaited")
            await engine.signal("o-1", "note", "nor this")
            await eventually(lambda: engine.store.load_ops("o-1", handle.run_id))  # the activity's outcome
            described = await handle.describe()

            assert described["status"] == "running"
            assert [(op["kind"], op["name"], op["outcome"]) for op in described["history"]] == [("activity", "charge", "ok")]
            assert [(m["kind"], m["name"]) for m in described["inbox"]] == [("signal", "note")] * 2
            assert described["owner"] == engine.engine_id

            await engine.signal("o-1", "approve", "yes")
            assert await handle.result(timeout=5) == {"charge": "ch-250", "approved": "yes"}
            final = await handle.describe()
            assert [op["name"] for op in final["history"]] == ["charge", "approve"]
            assert [m["name"] for m in final["inbox"]] == ["note", "note"]  # never awaited, never consumed

    run(main())


def test_listing_rejects_an_unknown_status_and_a_foreign_cursor(tmp_path):
    async def main():
        async with Engine(str(tmp_path), app=APP) as engine:
            for i in range(3):
                await engine.start(refund, id=f"r{i}")
            with pytest.raises(InvalidRequest):
                await engine.list(status="sleeping")
            cursor = (await engine.list(status="running", limit=1))["cursor"]
            with pytest.raises(InvalidRequest):
                await engine.list(type="refund", cursor=cursor)

    run(main())
