"""A direct client sends a start without an id to the shard holding the fewest of its requests
unanswered (``bus/_spread``): a shard still busy with what it holds does not get half of the
new starts while the other waits idle; equal shards still share them in turn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from _processes import RunningSupervisor
from weft_actors import AsyncClient
from weft_actors.bus._spread import least_held

pytestmark = pytest.mark.timeout(60)


class _Socket:
    def __init__(self, queued: int, sent: int) -> None:
        self.outbox = [None] * queued
        self.sent = dict.fromkeys(range(sent))


def test_least_held_picks_the_emptiest_shard_and_takes_equals_in_turn() -> None:
    shards: dict[str, Any] = {"a": _Socket(1, 5), "b": _Socket(0, 2), "c": _Socket(3, 3)}
    assert [least_held(["a", "b", "c"], shards, turn) for turn in range(3)] == ["b", "b", "b"]
    shards = {"a": _Socket(0, 2), "b": _Socket(2, 0)}
    assert [least_held(["a", "b"], shards, turn) for turn in range(4)] == ["a", "b", "a", "b"]
    assert least_held(["a", "b"], {"b": _Socket(0, 1)}, 1) == "a"  # no socket yet: holds none
    assert least_held(["only"], {}, 7) == "only"


def test_starts_without_an_id_go_to_the_shard_that_holds_fewer_requests(tmp_path) -> None:
    with RunningSupervisor(tmp_path / "data") as sup:

        async def run() -> tuple[int, int, list[str]]:
            async with AsyncClient(sup.endpoint, timeout=20, direct=True) as client:
                await client.execute("hello", "warm")  # the directory, the shard connections
                routes = client._direct
                assert routes is not None and len(routes.engines) == 2
                busy_id = next(f"busy-{i}" for i in range(100) if routes.pick(f"busy-{i}") is routes.shards[routes.engines[0]])
                busy, idle = routes.shards[routes.engines[0]], routes.shards[routes.engines[1]]
                handle = await client.start("sleeper", 60, id=busy_id)
                waits = [asyncio.ensure_future(handle.result(timeout=20)) for _ in range(6)]
                while len(busy.sent) < 6:  # the six waits are out on the busy shard
                    await asyncio.sleep(0.01)
                starts = [asyncio.ensure_future(client.start("hello", f"s{i}")) for i in range(4)]
                await asyncio.sleep(0)  # each start picked its shard and queued its request
                queued = (len(busy.outbox), len(idle.outbox))
                handles = await asyncio.gather(*starts)
                for wait in waits:
                    wait.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
                return queued[0], queued[1], [h.id for h in handles]

        on_busy, on_idle, ids = asyncio.run(run())
        assert (on_busy, on_idle) == (0, 4)  # in turn, it was (2, 2)
        assert len(set(ids)) == 4
