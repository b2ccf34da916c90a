"""``start_many`` and ``execute_many`` on both clients, against a real supervisor and shards.

Each item lands once, under its own position, with its own value or error: a bad workflow
name or a malformed item fails only itself. A shard killed while a batch of executes waits
on it answers ``OutcomeUnknown`` exactly for the items it held whose repeat is not safe (their
start had landed: each exists afterwards); the items it held with a fixed id and
``if_exists="return"`` are sent on and end normally, and the other shard's items are untouched.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from typing import Any

import pytest

from _processes import RunningSupervisor, wait_until
from weft_actors import AsyncClient, Client
from weft_actors.errors import InvalidRequest, OutcomeUnknown, UnknownWorkflowType

TIMING = ("--heartbeat", "0.3", "--ttl", "2")


def _collect(client_kind: str, endpoint: str, method: str, items: list[Any], **options: Any) -> list[Any]:
    """Every ``Landed`` of one batch, in the order they landed."""
    if client_kind == "sync":
        with Client(endpoint, timeout=20) as client:
            return list(getattr(client, method)(items, **options))

    async def run() -> list[Any]:
        async with AsyncClient(endpoint, timeout=20) as client:
            return [landed async for landed in getattr(client, method)(items, **options)]

    return asyncio.run(run())


def _by_position(landed: list[Any], count: int) -> list[Any]:
    positions = [item.position for item in landed]
    assert sorted(positions) == list(range(count)), positions  # each item once, none lost
    return sorted(landed, key=lambda item: item.position)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_start_many_and_execute_many_land_each_item_with_its_own_value_or_error(tmp_path, client_kind: str) -> None:
    good = [("three_steps", (i,), {"id": f"many-{client_kind}-{i}"}) for i in range(60)]
    items: list[Any] = good[:30] + [("no_such_workflow", (1,))] + good[30:] + [("three_steps",), ("three_steps", (1,), {"if_exists": "never"})]
    with RunningSupervisor(tmp_path / "data") as sup:
        started = _by_position(_collect(client_kind, sup.endpoint, "start_many", items, window=16), len(items))
        assert isinstance(started[30].error, UnknownWorkflowType) and started[30].value is None
        assert isinstance(started[61].error, InvalidRequest) and isinstance(started[62].error, InvalidRequest)
        with pytest.raises(UnknownWorkflowType):
            started[30].result()
        handles = [landed.result() for position, landed in enumerate(started) if position not in (30, 61, 62)]
        assert [handle.id for handle in handles] == [f"many-{client_kind}-{i}" for i in range(60)]  # each reply found its own item
        with Client(sup.endpoint) as client:
            assert [client.get_handle(handle.id).result(timeout=20) for handle in handles] == [i + 3 for i in range(60)]

        # The same ids again: each item's own error (already exists), the bad name's its own.
        executed = _by_position(_collect(client_kind, sup.endpoint, "execute_many", items, timeout=30), len(items))
        assert all(landed.error is not None and landed.error.code == "workflow_already_exists" for landed in executed[:30])
        assert isinstance(executed[30].error, UnknownWorkflowType)

        fresh = [("three_steps", (i,)) for i in range(100)] + [("no_such_workflow", ())]
        executed = _by_position(_collect(client_kind, sup.endpoint, "execute_many", fresh, timeout=30), len(fresh))
        assert [landed.result() for landed in executed[:100]] == [i + 3 for i in range(100)]
        assert isinstance(executed[100].error, UnknownWorkflowType)


def _owners(endpoint: str, ids: list[str]) -> dict[str, int]:
    with Client(endpoint) as client:
        return {wid: client.get_handle(wid).describe()["owner_shard"]["pid"] for wid in ids}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_a_shard_killed_mid_batch_fails_only_the_items_it_held_that_cannot_be_sent_again(either_store: str, client_kind: str) -> None:
    count = 40
    # Even positions: a fixed id and if_exists="return" (safe to send again); odd: a fixed id alone.
    # Each waits for an "approve" signal the test sends only after the kill: none can end before
    # it, however slow the machine (a timer of a few seconds could run out first under load).
    items = [("order", (f"o{i}", 100), {"id": f"held-{client_kind}-{i}", **({"if_exists": "return"} if i % 2 == 0 else {})}) for i in range(count)]
    ids = [f"held-{client_kind}-{i}" for i in range(count)]
    landed: list[Any] = []
    failure: list[BaseException] = []

    def batch() -> None:
        try:
            landed.extend(_collect(client_kind, sup.endpoint, "execute_many", items, timeout=60))
        except BaseException as exc:  # reported by the assertion below
            failure.append(exc)

    with RunningSupervisor(either_store, args=TIMING) as sup:
        runner = threading.Thread(target=batch, daemon=True)
        runner.start()
        with Client(sup.endpoint) as client:
            wait_until(lambda: len(client.list(type="order", limit=1000)["items"]) == count, 20, "every start committed")
        owners = _owners(sup.endpoint, ids)
        # The owner of an item that cannot be sent again (placement spreads them over both
        # shards, unless a loaded machine made one look stalled as they arrived).
        victim = owners[ids[1]]
        os.kill(victim, signal.SIGKILL)
        with Client(sup.endpoint, timeout=20) as client:
            for wid in ids:
                client.get_handle(wid).signal("approve", True)
        runner.join(60)
        assert not runner.is_alive() and not failure, failure
        results = _by_position(landed, count)
        unknown = {position for position, item in enumerate(results) if isinstance(item.error, OutcomeUnknown)}
        assert unknown and unknown == {i for i in range(count) if i % 2 == 1 and owners[ids[i]] == victim}
        assert all(results[i].result()["approved"] is True for i in range(count) if i not in unknown)
        with Client(sup.endpoint) as client:  # what was answered OutcomeUnknown had landed: it exists and ends
            assert all(client.get_handle(ids[i]).result(timeout=30)["approved"] is True for i in unknown)
