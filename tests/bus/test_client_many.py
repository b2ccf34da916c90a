"""``start_many``/``execute_many`` of both clients against the fake server (a real ROUTER):
replies matched by id whatever their order, a silent request timing out alone, an execute's
long poll and its timeout per item, and a client closed under a batch."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_client_fakes import NO_REPLY, FakeServer, canned  # noqa: E402

from weft_actors import AsyncClient, Client  # noqa: E402
from weft_actors.codec import encode  # noqa: E402
from weft_actors.errors import InvalidRequest, ServerUnavailable  # noqa: E402


def _run(client_kind: str, endpoint: str, method: str, items: list[Any], client_timeout: float = 10.0, **options: Any) -> list[Any]:
    if client_kind == "sync":
        with Client(endpoint, timeout=client_timeout) as client:
            return list(getattr(client, method)(items, **options))

    async def run() -> list[Any]:
        async with AsyncClient(endpoint, timeout=client_timeout) as client:
            return [landed async for landed in getattr(client, method)(items, **options)]

    return asyncio.run(run())


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_replies_in_any_order_land_on_their_own_items(client_kind: str) -> None:
    items = [("order", (i,), {"id": f"wf-{i}"}) for i in range(49)]
    with FakeServer(reorder=7) as fake:
        landed = _run(client_kind, fake.endpoint, "start_many", items)
    assert sorted(item.position for item in landed) == list(range(49))
    assert all(item.value.id == f"wf-{item.position}" for item in landed)
    assert [item.position for item in landed] != list(range(49))  # they did land out of order
    assert len({request["id"] for request in fake.requests}) == 49  # one request id each


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_a_silent_request_times_out_alone_and_the_window_bounds_what_is_out(client_kind: str) -> None:
    arrivals: list[float] = []

    def handler(request: dict[str, Any]) -> Any:
        arrivals.append(time.monotonic())
        return NO_REPLY if request["wid"].startswith("silent") else canned(request)

    items = [("order", (i,), {"id": ("silent-" if i in (0, 1, 3, 7) else "wf-") + str(i)}) for i in range(20)]
    started = time.monotonic()
    with FakeServer(handler) as fake:
        landed = sorted(_run(client_kind, fake.endpoint, "start_many", items, client_timeout=0.5, window=4), key=lambda item: item.position)
    assert time.monotonic() - started < 5
    assert [item.position for item in landed if isinstance(item.error, ServerUnavailable)] == [0, 1, 3, 7]
    assert all(item.value.id == f"wf-{item.position}" for item in landed if item.position not in (0, 1, 3, 7))
    # Once 0, 1, 3 and 7 are out unanswered, a window of 4 holds item 8 back until one times out.
    assert arrivals[8] - arrivals[7] >= 0.3 and arrivals[7] - arrivals[0] < 0.3
    assert "no reply within 0.5s" in str(landed[3].error)


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_an_execute_still_running_long_polls_its_result_and_times_out_alone(client_kind: str) -> None:
    def handler(request: dict[str, Any]) -> Any:
        if request["op"] == "execute":
            return {"status": "running", "id": request["wid"], "run_id": "r"}
        if request["wid"].startswith("never"):
            return {"status": "running"}
        return {"status": "completed", "result": encode(request["wid"])}

    items = [("order", (), {"id": f"wf-{i}"}) for i in range(5)] + [("order", (), {"id": "never-1"})]
    with FakeServer(handler) as fake:
        landed = sorted(_run(client_kind, fake.endpoint, "execute_many", items, timeout=0.3), key=lambda item: item.position)
    assert [item.value for item in landed[:5]] == [f"wf-{i}" for i in range(5)]
    assert isinstance(landed[5].error, TimeoutError)
    assert fake.ops().count("execute") == 6 and fake.ops().count("result") >= 6


def test_bad_batch_arguments_are_the_call_s_own_error() -> None:
    with FakeServer() as fake, Client(fake.endpoint) as client:
        with pytest.raises(InvalidRequest):
            client.start_many([("order", ())], window=0)
        with pytest.raises(InvalidRequest):
            client.execute_many([("order", ())], timeout=-1)
    assert fake.requests == []


def test_closing_the_sync_client_under_a_batch_lands_the_rest_unavailable() -> None:
    items = [("order", (), {"id": ("wf-" if i == 0 else "silent-") + str(i)}) for i in range(10)]
    with FakeServer(lambda request: NO_REPLY if request["wid"].startswith("silent") else canned(request)) as fake:
        client = Client(fake.endpoint, timeout=30)
        batch = client.start_many(items, window=4)
        first = next(batch)
        assert first.position == 0 and first.value.id == "wf-0"
        closer = threading.Thread(target=client.close)
        closer.start()
        closer.join(5)
        assert not closer.is_alive()  # the batch's socket, idle at its yield, did not hold close() up
        rest = list(batch)
    assert sorted(item.position for item in rest) == list(range(1, 10))
    assert all(isinstance(item.error, ServerUnavailable) for item in rest)


def test_closing_the_async_client_under_a_batch_lands_the_rest_unavailable() -> None:
    async def run(endpoint: str) -> list[Any]:
        client = AsyncClient(endpoint, timeout=30)
        landed: list[Any] = []

        async def consume() -> None:
            async for item in client.start_many([("order", (), {"id": f"silent-{i}"}) for i in range(10)], window=4):
                landed.append(item)

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.2)
        await client.close()
        await asyncio.wait_for(task, 5)
        return landed

    with FakeServer(lambda request: NO_REPLY) as fake:
        landed = asyncio.run(run(fake.endpoint))
    assert sorted(item.position for item in landed) == list(range(10))
    assert all(isinstance(item.error, ServerUnavailable) for item in landed)


def test_an_async_batch_leaves_nothing_pending_behind_it() -> None:
    """Items timed out, answered and malformed alike: the client waits for none of them after."""

    async def run(endpoint: str) -> tuple[list[Any], int]:
        async with AsyncClient(endpoint, timeout=0.3) as client:
            items = [("order", (), {"id": f"silent-{i}" if i % 2 else f"wf-{i}"}) for i in range(6)] + [("order",)]
            landed = [item async for item in client.start_many(items)]
            return landed, len(client._pending)

    with FakeServer(lambda request: NO_REPLY if request["wid"].startswith("silent") else canned(request)) as fake:
        landed, pending = asyncio.run(run(fake.endpoint))
    assert sorted(item.position for item in landed) == list(range(7)) and pending == 0
    assert [item.position for item in landed if isinstance(item.error, ServerUnavailable)] == [1, 3, 5]


def _refused() -> str:
    """An endpoint nothing listens on: connections to it are refused at once."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_with_several_endpoints_each_item_fails_over_as_its_single_call(client_kind: str) -> None:
    """The first supervisor refuses connections: every item goes on to the second, as a start
    alone would, and a bad item still lands its own error."""
    items: list[Any] = [("order", (i,), {"id": f"wf-{i}"}) for i in range(8)] + [("order", 1)]
    with FakeServer() as fake:
        endpoints = [_refused(), fake.endpoint]
        if client_kind == "sync":
            with Client(endpoints, timeout=2) as client:
                landed = list(client.start_many(items, window=3))
        else:

            async def run() -> list[Any]:
                async with AsyncClient(endpoints, timeout=2) as client:
                    return [item async for item in client.start_many(items, window=3)]

            landed = asyncio.run(run())
    landed.sort(key=lambda item: item.position)
    assert [item.value.id for item in landed[:8]] == [f"wf-{i}" for i in range(8)]
    assert isinstance(landed[8].error, InvalidRequest)
    assert len(fake.requests) == 8


def test_the_sync_loop_body_may_call_the_same_client_between_items() -> None:
    """The batch's replies do not go to the thread's socket, so a call made in the loop body
    neither takes one of them for a stale reply nor loses its own."""
    items = [("order", (), {"id": f"wf-{i}"}) for i in range(20)]
    results = {}
    with FakeServer() as fake, Client(fake.endpoint, timeout=5) as client:
        for landed in client.start_many(items, window=4):
            results[landed.position] = landed.value.result(timeout=5)
    assert results == {i: ("done", f"wf-{i}") for i in range(20)}


SCRIPT = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_client_fakes import FakeServer
from weft_actors import AsyncClient, Client

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
items = [("order", (i,), {"id": f"wf-{i}"}) for i in range(5)]
with FakeServer() as fake:
    with Client(fake.endpoint) as client:
        sync = sorted(landed.value.id for landed in client.start_many(items))

    async def run():
        async with AsyncClient(fake.endpoint) as client:
            return sorted([landed.value.id async for landed in client.start_many(items)])

    asynced = asyncio.run(run())
traced = sum(1 for request in fake.requests if request.get("traceparent"))
names = [span.name for span in exporter.get_finished_spans()]
print(json.dumps([sync, asynced, traced, names.count("weft start order")]))
"""


def test_with_tracing_on_each_item_is_its_own_traced_start() -> None:
    """A process with a tracer provider (a child: the provider is global): every item of a
    batch gets its client span, and its start carries that span's context, as alone."""
    pytest.importorskip("opentelemetry.sdk")
    import json
    import subprocess

    here = str(Path(__file__).resolve().parent)
    done = subprocess.run([sys.executable, "-c", SCRIPT, here], capture_output=True, text=True, timeout=60, check=True)
    sync, asynced, traced, spans = json.loads(done.stdout.strip().splitlines()[-1])
    ids = [f"wf-{i}" for i in range(5)]
    assert sync == ids and asynced == ids and traced == 10 and spans == 10


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_items_go_out_as_they_are_taken_not_after_the_whole_batch_is_built(client_kind: str) -> None:
    """The first request leaves before the second item is even asked for: a large batch does
    not keep the server idle while the client encodes all of it."""
    seen_before_second: list[int] = []

    def items(fake: FakeServer) -> Any:
        yield ("order", (), {"id": "wf-0"})
        deadline = time.monotonic() + 5
        while not fake.requests and time.monotonic() < deadline:
            time.sleep(0.005)
        seen_before_second.append(len(fake.requests))
        yield ("order", (), {"id": "wf-1"})

    with FakeServer() as fake:
        landed = _run(client_kind, fake.endpoint, "start_many", items(fake))  # type: ignore[arg-type]
    assert sorted(item.value.id for item in landed) == ["wf-0", "wf-1"]
    assert seen_before_second == [1]
