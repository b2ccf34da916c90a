"""Clients that send workflow ops straight to the shard a workflow is placed on: the
``directory`` the front door answers, the shards' own sockets, and what a client holding
requests on a shard sees when that shard dies (as through the front door: ``OutcomeUnknown``
only where a write may have landed, the rest sent again) or is started again."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import msgpack
import pytest
import zmq
import zmq.auth

from _processes import RunningSupervisor, wait_until
from weft_actors import AsyncClient, Client
from weft_actors.bus._calls import Call
from weft_actors.bus._direct import REFRESH
from weft_actors.bus._direct_answers import reachable
from weft_actors.supervisor._direct_socket import direct_bind, is_batch
from weft_actors.errors import OutcomeUnknown, Overloaded

pytestmark = pytest.mark.timeout(60)

TIMING = ("--heartbeat", "0.3", "--ttl", "2")


def envelope(request_id: Any, op: str, wid: Any = None, /, **body: Any) -> bytes:
    return msgpack.packb([1, request_id, op, wid, msgpack.packb(body, use_bin_type=True)], use_bin_type=True)


def ask(context: zmq.Context, endpoint: str, frame: bytes, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Send ``frame`` on a fresh DEALER; the next ``count`` replies (a batch of them split)."""
    sock = context.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(endpoint)
    replies: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        sock.send(frame)
        while len(replies) < count:
            assert sock.poll(int(max(0.0, deadline - time.monotonic()) * 1000)), f"only {replies}"
            decoded = msgpack.unpackb(sock.recv(), raw=False)
            replies += decoded if isinstance(decoded, list) else [decoded]
        return replies
    finally:
        sock.close(0)


def directory(context: zmq.Context, endpoint: str) -> dict[str, Any]:
    (reply,) = ask(context, endpoint, envelope(1, "directory"))
    assert "ok" in reply, reply
    return reply["ok"]


def front_door_requests(endpoint: str) -> int:
    with Client(endpoint, timeout=10) as client:
        return int(client.stats()["supervisor"]["frontdoor_requests"])


@pytest.fixture()
def context():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def test_the_directory_lists_each_live_shard_and_any_shard_serves_any_request(tmp_path, context) -> None:
    with RunningSupervisor(tmp_path / "data") as sup:
        found = directory(context, sup.endpoint)
        assert found["placement"] == "rendezvous" and isinstance(found["version"], int)
        assert sorted(shard[0] for shard in found["shards"]) == [0, 1]
        assert all(shard[2].startswith("tcp://127.0.0.1:") for shard in found["shards"])
        first, second = (shard[2] for shard in found["shards"])
        (started,) = ask(context, first, envelope("a", "start", "dir-1", workflow="hello", args=msgpack.packb(["x"])))
        assert started["ok"]["id"] == "dir-1", started
        # The other shard answers it too (placement is an optimisation), from one batch.
        replies = ask(context, second, msgpack.packb(["b", envelope("r", "result", "dir-1", wait=10.0), envelope("bad", "nope")]), 2)
        by_id = {reply["id"]: reply for reply in replies}
        assert by_id["r"]["ok"]["status"] == "completed" and by_id["r"]["ok"]["result"] is not None
        assert by_id["bad"]["error"]["code"] == "invalid_request"


def test_direct_execute_start_signal_and_result_skip_the_front_door(tmp_path) -> None:
    with RunningSupervisor(tmp_path / "data") as sup:
        before = front_door_requests(sup.endpoint)

        async def run() -> tuple[list[Any], Any, int]:
            began = time.monotonic()
            async with AsyncClient(sup.endpoint, timeout=20, direct=True) as client:
                values = await asyncio.gather(*(client.execute("hello", f"n{i}", id=f"ex-{i}") for i in range(20)))
                handle = await client.start("order", "o-1", 250, id="order-1")
                await handle.signal("approve", True)
                outcome = await handle.result(timeout=20)
                listed = len((await client.list(type="hello"))["items"])  # fan-out: the front door
                polls.append(int((time.monotonic() - began) / REFRESH) + 1)
                return values, outcome, listed

        polls: list[int] = []
        values, outcome, listed = asyncio.run(run())
        assert values == [f"Hello, n{i}!" for i in range(20)]
        assert outcome["approved"] is True and listed == 20
        # The directories (the first, and one a poll while requests were out), the list and this
        # stats call went through the front door; none of the 23 workflow ops did.
        assert front_door_requests(sup.endpoint) - before <= 3 + polls[0] < 23


@pytest.mark.timeout(120)
def test_a_shard_killed_under_direct_requests_then_restarted(either_store: str) -> None:
    """Executes on both shards, sent directly; one shard is killed: its executes with a fixed
    id and ``if_exists="return"`` and its reads are sent again and answered, its other executes
    are answered ``OutcomeUnknown``, nothing of the other shard's is touched; and new requests
    reach the shard started in its slot, directly."""
    _lost_under_direct_requests(either_store, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_a_shard_stalled_under_direct_requests(tmp_path) -> None:
    """As a killed shard, for one that stops answering (SIGSTOP) until the supervisor judges it
    hung: what it held is answered within the stall bound, as through the front door."""
    _lost_under_direct_requests(str(tmp_path / "data"), signal.SIGSTOP)


def test_a_direct_shard_bind_follows_the_front_door_and_a_client_reaches_it() -> None:
    assert direct_bind("tcp://127.0.0.1:5555", curve=False) == "tcp://127.0.0.1:*"
    assert direct_bind("tcp://*:5555", curve=False) == "tcp://*:*"
    assert direct_bind("tcp://127.0.0.1:5555", curve=True) is None  # CURVE: the front door only
    assert direct_bind("ipc:///tmp/weft", curve=False) is None
    assert reachable("tcp://0.0.0.0:4000", "tcp://10.1.2.3:5555") == "tcp://10.1.2.3:4000"
    assert reachable("tcp://127.0.0.1:4000", "tcp://10.1.2.3:5555") == "tcp://127.0.0.1:4000"
    assert is_batch(msgpack.packb(["b", b"x"])) and is_batch(msgpack.packb(["b", *[b"x"] * 20]))
    assert not is_batch(envelope(1, "start", "b")) and not is_batch(b"") and not is_batch(msgpack.packb({"v": 1}))


def _lost_under_direct_requests(store: str, how: signal.Signals) -> None:
    count = 24
    ids = [f"kill-{i}" for i in range(count)]
    with RunningSupervisor(store, args=TIMING) as sup:

        async def run() -> tuple[dict[int, Any], dict[str, int], dict[int, Any], list[int]]:
            async with AsyncClient(sup.endpoint, timeout=60, direct=True) as client:
                answered_at: list[float] = []

                async def one(i: int) -> Any:
                    try:
                        options = {"if_exists": "return"} if i % 2 == 0 else {}
                        return await client.execute("order", f"o{i}", 100, id=ids[i], **options)
                    except OutcomeUnknown as error:
                        answered_at.append(time.monotonic())
                        return error

                async def read(i: int) -> Any:
                    await asyncio.sleep(0.5)
                    return await client.get_handle(ids[i]).result(timeout=30)

                tasks = [asyncio.ensure_future(one(i)) for i in range(count)]
                reads = [asyncio.ensure_future(read(i)) for i in range(count)]
                deadline = time.monotonic() + 20
                while len((await client.list(type="order", limit=1000))["items"]) < count:
                    assert time.monotonic() < deadline, "every start committed"
                    await asyncio.sleep(0.05)
                owners = {wid: (await client.get_handle(wid).describe())["owner_shard"]["pid"] for wid in ids}
                # The owner of an item that cannot be sent again (placement spreads them over
                # both shards, unless a loaded machine made one look stalled as they arrived).
                victim = owners[ids[1]]
                before = set(client._direct.engines)
                assert len(before) == 2
                killed_at = time.monotonic()
                os.kill(victim, how)
                # Each waits for this signal, sent only now: none ended before the kill.
                await asyncio.gather(*(client.get_handle(wid).signal("approve", True) for wid in ids))
                done = dict(enumerate(await asyncio.gather(*tasks)))
                read_back = dict(enumerate(await asyncio.gather(*reads, return_exceptions=True)))
                learnt = max(answered_at) - killed_at
                # The slot's new shard is a new engine with a new endpoint: new requests reach it.
                routes = client._direct
                deadline = time.monotonic() + 30
                while len(routes.engines) < 2 or len(set(routes.engines) & before) != 1:
                    assert time.monotonic() < deadline, routes.engines
                    await routes.refresh()
                    await asyncio.sleep(0.2)
                sent, began = front_door_requests(sup.endpoint), time.monotonic()
                assert await asyncio.gather(*(client.execute("hello", "again", id=f"after-{i}") for i in range(16))) == ["Hello, again!"] * 16
                assert set(routes.shards) == set(routes.engines)  # the new shard and the survivor were sent to
                polls = int((time.monotonic() - began) / REFRESH) + 1
                assert front_door_requests(sup.endpoint) - sent <= 1 + polls < 16  # this stats call, directory polls
                return done, {wid: owners[wid] == victim for wid in ids}, read_back, [learnt]

        done, on_victim, read_back, (learnt,) = asyncio.run(run())
        unknown = {i for i, value in done.items() if isinstance(value, OutcomeUnknown)}
        assert unknown == {i for i in range(count) if i % 2 == 1 and on_victim[ids[i]]}
        assert all(done[i]["approved"] is True for i in range(count) if i not in unknown)
        # Reads held by the dead shard were sent again, not failed.
        assert all(read_back[i]["approved"] is True for i in range(count) if not on_victim[ids[i]] or i % 2 == 0), read_back
        # Promptly: a killed shard's connection drops at once; a stalled one is judged hung
        # within the stall bound (ttl + 2 heartbeats + 0.5 s), then killed.
        assert learnt < (1.5 if how == signal.SIGKILL else 2 + 2 * 0.3 + 0.5 + 1.0), learnt


def test_a_direct_shard_refuses_past_max_queued_requests(tmp_path, context) -> None:
    args = ("--max-queued-requests", "5")
    with RunningSupervisor(tmp_path / "data", shards=1, args=args) as sup:
        ((_, _, endpoint),) = directory(context, sup.endpoint)["shards"]
        frames = [envelope(i, "execute", f"full-{i}", workflow="sleeper", args=msgpack.packb([2.0]), wait=10.0) for i in range(12)]
        replies = ask(context, endpoint, msgpack.packb(["b", *frames]), 12)
        refused = [reply for reply in replies if "error" in reply]
        assert len(refused) == 7 and {reply["error"]["code"] for reply in refused} == {Overloaded.code}
        assert all(reply["ok"]["status"] == "completed" for reply in replies if "ok" in reply)


def test_curve_deployments_offer_no_shard_and_direct_clients_use_the_front_door(tmp_path) -> None:
    certs, full = tmp_path / "certs", tmp_path / "full"
    certs.mkdir()
    full.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(certs), "server")
    client_public, client_secret = zmq.auth.create_certificates(str(certs), "client")
    os.replace(client_public, full / "client.key")
    args = ("--curve-secret-key", server_secret, "--curve-authorized-keys", str(full))
    with RunningSupervisor(tmp_path / "data", shards=1, args=args) as sup:

        async def run() -> tuple[Any, Any]:
            async with AsyncClient(sup.endpoint, timeout=20, direct=True, curve_server_key=server_public, curve_secret_key=client_secret) as client:
                answer = await client._request(Call("directory", {}))
                return answer, await client.execute("hello", "curve")

        answer, value = asyncio.run(run())
        assert answer["shards"] == [] and value == "Hello, curve!"
