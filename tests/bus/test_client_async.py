"""``AsyncClient`` against a fake server on real loopback sockets."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_client_fakes import NO_REPLY, FakeServer, canned, not_found  # noqa: E402

from _support import run  # noqa: E402
from weft_actors.bus._async_client import AsyncClient, AsyncClientHandle  # noqa: E402
from weft_actors.codec import decode, decode_args, encode  # noqa: E402
from weft_actors.errors import SerializationError, ServerUnavailable, WorkflowCancelled, WorkflowNotFound  # noqa: E402


def test_every_call_round_trips() -> None:
    async def main(fake: FakeServer) -> None:
        async with AsyncClient(fake.endpoint, timeout=5) as c:
            handle = await c.start("order", "o-1", 1299, id="order-o-1", start_at=1700000000, memo=[1])
            assert isinstance(handle, AsyncClientHandle) and (handle.id, handle.run_id) == ("order-o-1", "run-1")
            assert decode_args(fake.requests[-1]["args"]) == ("o-1", 1299) and fake.requests[-1]["start_at"] == 1700000000.0
            sws = await c.signal_with_start("order", signal="go", payload=3, id="w-3")
            assert sws.id == "w-3" and decode(fake.requests[-1]["payload"]) == 3
            h = c.get_handle("w-3")
            assert await h.signal("go", {"x": 1}) is None
            assert await h.query("status", "a") == {"name": "status", "args": ("a",)}
            assert (await h.update("inc", 2, request_id="r-9"))["request_id"] == "r-9"
            assert await h.result() == ("done", "w-3")
            assert await h.cancel() is None
            assert await h.terminate() is None and "reason" not in fake.requests[-1]
            assert (await h.describe())["status"] == "running"
            assert len((await c.list(limit=1))["items"]) == 1
            assert (await c.stats())["shards"] == {"0": {"live_actors": 1}}
            assert await c.ping() == "pong"

    with FakeServer() as fake:
        run(main(fake))
    assert fake.ops() == [
        "start", "signal_with_start", "signal", "query", "update", "result", "cancel", "terminate", "describe", "list", "stats", "ping",
    ]


def test_errors_and_long_poll() -> None:
    replies = iter([{"status": "running"}] * 2)

    def handler(request: dict[str, Any]) -> Any:
        if request["op"] == "result" and request["wid"] == "poll":
            return next(replies, {"status": "completed", "result": encode(b"\x00bytes")})
        if request["op"] == "result" and request["wid"] == "gone":
            raise WorkflowCancelled("cancelled", workflow_id="gone")
        return not_found(request)

    async def main(fake: FakeServer) -> None:
        async with AsyncClient(fake.endpoint, timeout=5) as c:
            assert await c.get_handle("poll").result(timeout=5) == b"\x00bytes"
            with pytest.raises(WorkflowCancelled) as info:
                await c.get_handle("gone").result()
            assert info.value.code == "workflow_cancelled" and info.value.workflow_id == "gone"
            with pytest.raises(WorkflowNotFound):
                await c.get_handle("x").describe()

    with FakeServer(handler) as fake:
        run(main(fake))
    assert [r["wid"] for r in fake.requests if r["op"] == "result"] == ["poll"] * 3 + ["gone"]


def test_result_timeout_raises_builtin_timeout_error() -> None:
    async def main(fake: FakeServer) -> None:
        async with AsyncClient(fake.endpoint, timeout=5) as c:
            with pytest.raises(TimeoutError):
                await c.get_handle("w").result(timeout=0.2)

    with FakeServer(lambda request: {"status": "running"}) as fake:
        run(main(fake))
    assert fake.requests and all(r["wait"] <= 0.2 for r in fake.requests)


def test_pipelined_requests_answered_out_of_order() -> None:
    async def main(fake: FakeServer) -> None:
        async with AsyncClient(fake.endpoint, timeout=10) as c:
            results = await asyncio.gather(*(c.get_handle(f"w{i}").query("q", i) for i in range(500)))
        assert results == [{"name": "q", "args": (i,)} for i in range(500)]

    with FakeServer(reorder=500) as fake:
        run(main(fake))
    order = [decode_args(r["args"])[0] for r in fake.requests]
    assert sorted(order) == list(range(500))


def test_timeout_then_next_request_works() -> None:
    def handler(request: dict[str, Any]) -> Any:
        return NO_REPLY if request["op"] == "query" else canned(request)

    async def main(fake: FakeServer) -> None:
        async with AsyncClient(fake.endpoint, timeout=0.3) as c:
            with pytest.raises(ServerUnavailable) as info:
                await c.get_handle("w").query("hang")
            assert info.value.op == "query"
            assert await c.ping() == "pong"
            assert c._pending == {}

    with FakeServer(handler) as fake:
        run(main(fake))


def test_close_fails_pending_requests() -> None:
    async def main(fake: FakeServer) -> None:
        c = AsyncClient(fake.endpoint, timeout=30)
        tasks = [asyncio.ensure_future(c.get_handle("w").query("hang", i)) for i in range(5)]
        while len(fake.requests) < 5:
            await asyncio.sleep(0.01)
        await c.close()
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        assert all(isinstance(o, ServerUnavailable) for o in outcomes), outcomes
        with pytest.raises(ServerUnavailable):
            await c.ping()
        await c.close()

    with FakeServer(lambda request: NO_REPLY) as fake:
        run(main(fake))


def test_serialization_error_before_sending() -> None:
    async def main(fake: FakeServer) -> None:
        async with AsyncClient(fake.endpoint, timeout=5) as c:
            with pytest.raises(SerializationError):
                await c.start("order", lambda: None)
            with pytest.raises(SerializationError):
                await c.get_handle("w").update("u", object())
            assert await c.ping() == "pong"

    with FakeServer() as fake:
        run(main(fake))
    assert fake.ops() == ["ping"]
