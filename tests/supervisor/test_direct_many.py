"""``start_many``/``execute_many`` of ``AsyncClient(direct=True)``: each item goes to the shard
its workflow is placed on, not through the front door, with the same per-item semantics as
there (each item lands once, with its own value or error) and the direct path's death
semantics per item: a shard killed holding items of a batch answers ``OutcomeUnknown`` exactly
for those it held that cannot be sent again; the rest are sent on and end normally."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from _processes import RunningSupervisor
from weft_actors import AsyncClient, Client
from weft_actors.bus._direct import REFRESH
from weft_actors.errors import InvalidRequest, OutcomeUnknown, UnknownWorkflowType

TIMING = ("--heartbeat", "0.3", "--ttl", "2")


def front_door_requests(endpoint: str) -> int:
    with Client(endpoint, timeout=10) as client:
        return int(client.stats()["supervisor"]["frontdoor_requests"])


def _by_position(landed: list[Any], count: int) -> list[Any]:
    positions = [item.position for item in landed]
    assert sorted(positions) == list(range(count)), positions  # each item once, none lost
    return sorted(landed, key=lambda item: item.position)


@pytest.mark.timeout(60)
def test_a_direct_batch_goes_to_the_shards_and_lands_each_item_with_its_own_value_or_error(tmp_path) -> None:
    good = [("three_steps", (i,), {"id": f"dmany-{i}"}) for i in range(60)]
    items: list[Any] = good[:30] + [("no_such_workflow", (1,))] + good[30:] + [("three_steps",), ("three_steps", (1,), {"if_exists": "never"})]
    fresh = [("three_steps", (i,)) for i in range(100)] + [("no_such_workflow", ())]
    with RunningSupervisor(tmp_path / "data") as sup:
        before = front_door_requests(sup.endpoint)

        async def run() -> tuple[list[Any], list[Any], list[Any], set[str], int]:
            began = time.monotonic()
            async with AsyncClient(sup.endpoint, timeout=20, direct=True) as client:
                started = [landed async for landed in client.start_many(items, window=16)]
                again = [landed async for landed in client.execute_many(items, timeout=30)]
                executed = [landed async for landed in client.execute_many(fresh, timeout=30)]
                used = {engine for engine, shard in client._direct.shards.items() if not shard.socket.closed}
                assert len(client._direct.engines) == 2
                return started, again, executed, used, int((time.monotonic() - began) / REFRESH) + 1

        started, again, executed, used, polls = asyncio.run(run())
        started = _by_position(started, len(items))
        assert isinstance(started[30].error, UnknownWorkflowType) and started[30].value is None
        assert isinstance(started[61].error, InvalidRequest) and isinstance(started[62].error, InvalidRequest)
        handles = [landed.result() for position, landed in enumerate(started) if position not in (30, 61, 62)]
        assert [handle.id for handle in handles] == [f"dmany-{i}" for i in range(60)]  # each reply found its own item
        again = _by_position(again, len(items))
        assert all(landed.error is not None and landed.error.code == "workflow_already_exists" for landed in again[:30])
        assert isinstance(again[30].error, UnknownWorkflowType)
        executed = _by_position(executed, len(fresh))
        assert [landed.result() for landed in executed[:100]] == [i + 3 for i in range(100)]
        assert isinstance(executed[100].error, UnknownWorkflowType)
        # Both shards served the batches' items (placed by id, ids-less starts in turn); the
        # front door saw only directories (the first, and polls while requests were out) and
        # this stats call: none of the ~380 requests of the batches.
        assert len(used) == 2
        assert front_door_requests(sup.endpoint) - before <= 2 + polls < 100
        with Client(sup.endpoint) as client:
            assert [client.get_handle(handle.id).result(timeout=20) for handle in handles] == [i + 3 for i in range(60)]


@pytest.mark.timeout(120)
def test_a_shard_killed_under_a_direct_batch_fails_only_the_items_it_held_that_cannot_be_sent_again(either_store: str) -> None:
    count = 40
    # Even positions: a fixed id and if_exists="return" (safe to send again); odd: a fixed id alone.
    # Each waits for an "approve" signal sent only after the kill: none can end before it.
    ids = [f"dheld-{i}" for i in range(count)]
    items = [("order", (f"o{i}", 100), {"id": ids[i], **({"if_exists": "return"} if i % 2 == 0 else {})}) for i in range(count)]
    with RunningSupervisor(either_store, args=TIMING) as sup:

        async def run() -> tuple[list[Any], dict[str, int], int]:
            async with AsyncClient(sup.endpoint, timeout=60, direct=True) as client:

                async def collect() -> list[Any]:
                    return [landed async for landed in client.execute_many(items, timeout=60)]

                batch = asyncio.ensure_future(collect())
                routes = client._direct
                deadline = time.monotonic() + 20
                # Every item is out on a shard's own socket (not the front door's), each started.
                while sum(len(shard.sent) for shard in routes.shards.values()) < count or len((await client.list(type="order", limit=1000))["items"]) < count:
                    assert time.monotonic() < deadline, {engine: len(shard.sent) for engine, shard in routes.shards.items()}
                    assert not batch.done()
                    await asyncio.sleep(0.05)
                owners = {wid: (await client.get_handle(wid).describe())["owner_shard"]["pid"] for wid in ids}
                # The owner of an item that cannot be sent again (placement spreads them over
                # both shards, unless a loaded machine made one look stalled as they arrived).
                victim = owners[ids[1]]
                os.kill(victim, signal.SIGKILL)
                await asyncio.gather(*(client.get_handle(wid).signal("approve", True) for wid in ids))
                return await asyncio.wait_for(batch, 60), owners, victim

        landed, owners, victim = asyncio.run(run())
        results = _by_position(landed, count)
        unknown = {position for position, item in enumerate(results) if isinstance(item.error, OutcomeUnknown)}
        assert unknown and unknown == {i for i in range(count) if i % 2 == 1 and owners[ids[i]] == victim}
        assert all(results[i].result()["approved"] is True for i in range(count) if i not in unknown)
        with Client(sup.endpoint) as client:  # what was answered OutcomeUnknown had landed: it exists and ends
            assert all(client.get_handle(ids[i]).result(timeout=30)["approved"] is True for i in unknown)
