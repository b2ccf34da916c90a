"""Batches on the wire between clients and a real supervisor: both clients send the requests
they have ready as one message, the front door answers a client that speaks batches with
one message per turn, each request of a batch is routed by its envelope alone, and a bad item
(or a bad batch) is answered its own error while the rest is served.

The frames here are built with msgpack directly (not the package's encoders), as a client in
another language would: a request envelope is ``[1, id, op, wid, body]`` (``body`` the other
fields' map, as bytes), a batch ``["b", envelope, ...]``; a reply batch is an array of maps.
"""

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
from weft_actors.codec import encode_args

pytestmark = pytest.mark.timeout(60)

TIMING = ("--heartbeat", "0.3", "--ttl", "2")


def envelope(request_id: Any, op: str, wid: Any = None, /, **body: Any) -> bytes:
    return msgpack.packb([1, request_id, op, wid, msgpack.packb(body, use_bin_type=True)], use_bin_type=True)


def batch(*requests: Any) -> bytes:
    return msgpack.packb(["b", *requests], use_bin_type=True)


def dealer(context: zmq.Context, endpoint: str, **curve: bytes) -> zmq.Socket:
    sock = context.socket(zmq.DEALER)
    sock.linger = 0
    if curve:
        sock.curve_serverkey, sock.curve_secretkey = curve["server"], curve["secret"]
        sock.curve_publickey = zmq.curve_public(curve["secret"])
    sock.connect(endpoint)
    return sock


def replies(sock: zmq.Socket, count: int, timeout: float = 15.0) -> list[list[dict[str, Any]]]:
    """The messages that carry the next ``count`` replies, each as its list of replies."""
    messages: list[list[dict[str, Any]]] = []
    deadline = time.monotonic() + timeout
    while sum(len(message) for message in messages) < count:
        remaining = deadline - time.monotonic()
        assert remaining > 0 and sock.poll(int(remaining * 1000)), f"only {messages} of {count} replies"
        frame = sock.recv_multipart()[-1]
        decoded = msgpack.unpackb(frame, raw=False)
        messages.append(decoded if isinstance(decoded, list) else [decoded])
    return messages


def by_id(messages: list[list[dict[str, Any]]]) -> dict[Any, dict[str, Any]]:
    """Each reply under its request id (those without an id, to unreadable items, under None)."""
    found: dict[Any, dict[str, Any]] = {}
    for message in messages:
        for reply in message:
            assert reply["id"] is None or reply["id"] not in found, reply  # one reply per request
            found[reply["id"]] = reply
    return found


def code(reply: dict[str, Any]) -> str:
    return reply["error"]["code"]


@pytest.fixture(scope="module")
def sup(tmp_path_factory):
    with RunningSupervisor(tmp_path_factory.mktemp("wire") / "data") as running:
        yield running


@pytest.fixture()
def context():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def _messages(endpoint: str) -> int:
    with Client(endpoint, timeout=10) as client:
        return int(client.stats()["supervisor"]["frontdoor_messages"])


def test_async_client_sends_the_requests_of_one_loop_turn_as_one_message(sup) -> None:
    before = _messages(sup.endpoint)

    async def run() -> list[Any]:
        async with AsyncClient(sup.endpoint, timeout=20) as client:
            return await asyncio.gather(*(client.execute("three_steps", i, id=f"turn-{i}") for i in range(300)))

    assert asyncio.run(run()) == [i + 3 for i in range(300)]  # each reply (most in batches) found its request
    sent = _messages(sup.endpoint) - before - 1  # the stats call of the second look
    assert 1 <= sent <= 10, sent


def test_sync_execute_many_sends_its_window_as_batches(sup) -> None:
    before = _messages(sup.endpoint)
    with Client(sup.endpoint, timeout=20) as client:
        landed = list(client.execute_many([("three_steps", (i,)) for i in range(300)], window=300))
    assert sorted(item.result() for item in landed) == [i + 3 for i in range(300)]
    sent = _messages(sup.endpoint) - before - 1
    assert sent <= 30, sent  # 300 requests, nearly all in batches (results asked again go in bursts too)


def test_replies_to_a_batch_come_back_in_batches(sup, context) -> None:
    sock = dealer(context, sup.endpoint)
    sock.send(batch(*(envelope(i, "ping") for i in range(20))))
    (message,) = replies(sock, 20)  # answered by the front door in one turn: one message
    assert sorted(reply["id"] for reply in message) == list(range(20)) and all(reply["ok"] == "pong" for reply in message)
    sock.send(batch(*(envelope(100 + i, "describe", f"absent-{i}") for i in range(40))))
    messages = replies(sock, 40)
    assert len(messages) < 40 and set(by_id(messages)) == set(range(100, 140))
    assert all(code(reply) == "workflow_not_found" for reply in by_id(messages).values())


def test_each_bad_item_of_a_batch_gets_its_own_error_and_the_others_are_served(sup, context) -> None:
    sock = dealer(context, sup.endpoint)
    sock.send(batch(
        envelope(1, "ping"),
        b"\xc1 not msgpack",                                  # unreadable: answered without an id
        envelope(3, "no_such_op", "w"),                       # unknown op
        envelope(4, "signal", None, name="go", payload=b""),  # a workflow op without its wid
        msgpack.packb([1, 5, "describe", 7, b""]),            # a wid that is not text
        envelope(6, "describe", "w-6", op="cancel"),           # a body naming the op again
        envelope(7, "start", None, workflow="three_steps"),   # args missing: the shard says so
        envelope(8, "execute", "good-8", workflow="three_steps", args=encode_args((5,)), wait=10.0),
        42,                                                   # not a request at all
    ))
    found = by_id(replies(sock, 9))
    assert found[1]["ok"] == "pong"
    assert found[8]["ok"]["status"] == "completed"
    assert {request_id: code(found[request_id]) for request_id in (3, 4, 5, 6, 7)} == dict.fromkeys((3, 4, 5, 6, 7), "invalid_request")
    assert "unknown op" in found[3]["error"]["message"]
    assert "may not name" in found[6]["error"]["message"]  # the envelope's op is the one run: no second claim
    assert code(found[None]) == "invalid_request"  # the two items without a readable id share the key


def test_a_malformed_or_oversized_batch_is_refused_and_the_front_door_serves_on(sup, context) -> None:
    sock = dealer(context, sup.endpoint)
    for frame, expected in [
        (msgpack.packb(["x", envelope(1, "ping")]), "invalid_request"),   # not a batch
        (msgpack.packb(["b"]), "invalid_request"),                         # an empty batch
        (msgpack.packb([]), "invalid_request"),
        (b"\x92\xa1b", "invalid_request"),                                 # cut short
        (batch(*[envelope(i, "ping", pad=b"x" * 60_000) for i in range(20)]), "payload_too_large"),
    ]:
        sock.send(frame)
        ((reply,),) = replies(sock, 1)
        assert code(reply) == expected and reply["id"] is None, (frame[:20], reply)
    for frame in (msgpack.packb(["x" * 100_000, envelope(1, "ping")]), batch(envelope("long", "o" * 100_000))):
        sock.send(frame)  # a client's long value is named by its start, never echoed whole
        ((reply,),) = replies(sock, 1)
        assert code(reply) == "invalid_request" and len(reply["error"]["message"]) < 200, reply["error"]["message"][:300]
    sock.send(batch(envelope("after", "ping")))
    ((reply,),) = replies(sock, 1)
    assert reply == {"v": 1, "id": "after", "ok": "pong"}


def test_old_map_requests_and_req_sockets_are_served_as_before(sup, context) -> None:
    old = dealer(context, sup.endpoint)
    old.send(msgpack.packb({"v": 1, "id": 1, "op": "ping"}))
    old.send(msgpack.packb({"v": 1, "id": 2, "op": "ping"}))
    assert [message for message in replies(old, 2)] == [[{"v": 1, "id": 1, "ok": "pong"}], [{"v": 1, "id": 2, "ok": "pong"}]]  # one message each
    req = context.socket(zmq.REQ)
    req.linger = 0
    req.connect(sup.endpoint)
    for frame in (msgpack.packb({"v": 1, "id": 3, "op": "ping"}), envelope(4, "ping")):
        req.send(frame)
        assert req.poll(10_000)
        assert msgpack.unpackb(req.recv(), raw=False)["ok"] == "pong"
    req.send(batch(envelope(5, "ping"), envelope(6, "ping")))  # a REQ socket takes one reply: no batch
    assert req.poll(10_000)
    reply = msgpack.unpackb(req.recv(), raw=False)
    assert code(reply) == "invalid_request" and "REQ" in reply["error"]["message"]


def test_a_read_only_key_is_denied_only_the_writes_of_its_batch(tmp_path, context) -> None:
    certs, full, readonly = tmp_path / "certs", tmp_path / "full", tmp_path / "readonly"
    for directory in (certs, full, readonly):
        directory.mkdir()
    server_public, server_secret = zmq.auth.create_certificates(str(certs), "server")
    viewer_public, viewer_secret = zmq.auth.create_certificates(str(certs), "viewer")
    os.replace(viewer_public, readonly / "viewer.key")
    args = ("--curve-secret-key", server_secret, "--curve-authorized-keys", str(full), "--curve-readonly-keys", str(readonly))
    _, secret = zmq.auth.load_certificate(viewer_secret)
    with RunningSupervisor(tmp_path / "data", shards=1, app="supervisor_app", args=args) as running:
        server_public_key, _ = zmq.auth.load_certificate(server_public)
        sock = dealer(context, running.endpoint, server=server_public_key, secret=secret)
        sock.send(batch(
            envelope(1, "ping"),
            envelope(2, "start", "ro-1", workflow="echo", args=encode_args(("no",))),
            envelope(3, "describe", "ro-1"),
            envelope(4, "cancel", "ro-1"),
        ))
        found = by_id(replies(sock, 4))
        assert found[1]["ok"] == "pong"
        assert code(found[2]) == "permission_denied" and code(found[4]) == "permission_denied"
        assert code(found[3]) == "workflow_not_found"  # a read, served: the start was never made


@pytest.mark.timeout(120)
def test_a_shard_killed_while_it_holds_part_of_a_batch(either_store: str, context) -> None:
    """Starts of one batch on both shards, then one shard is killed: the ones it held with a
    fixed id and ``if_exists="return"`` are sent on and answered; its others are answered
    ``OutcomeUnknown``; the other shard's are untouched. Each waits for a signal sent only
    after the kill, so none can end before it however slow the machine."""
    count = 30
    ids = [f"kill-{i}" for i in range(count)]
    requests = [
        envelope(i, "execute", ids[i], workflow="order", args=encode_args((f"o{i}", 100)), wait=30.0, **({"if_exists": "return"} if i % 2 == 0 else {}))
        for i in range(count)
    ]
    with RunningSupervisor(either_store, args=TIMING) as running:
        sock = dealer(context, running.endpoint)
        sock.send(batch(*requests))
        with Client(running.endpoint, timeout=10) as client:
            wait_until(lambda: len(client.list(type="order", limit=1000)["items"]) == count, 20, "every start committed")
            owners = {wid: client.get_handle(wid).describe()["owner_shard"]["pid"] for wid in ids}
        # The owner of an item that cannot be sent again: some answer must be OutcomeUnknown.
        # (Placement spreads the batch over both shards, unless a loaded machine made one
        # look stalled as it arrived: then the one shard holds them all, which proves the same.)
        victim = owners[ids[1]]
        os.kill(victim, signal.SIGKILL)
        with Client(running.endpoint, timeout=20) as client:
            for wid in ids:
                client.get_handle(wid).signal("approve", True)
        found = by_id(replies(sock, count, timeout=60))
        unknown = {i for i in range(count) if "error" in found[i]}
        assert {code(found[i]) for i in unknown} == {"outcome_unknown"}
        assert unknown == {i for i in range(count) if i % 2 == 1 and owners[ids[i]] == victim}
        assert all(found[i]["ok"]["status"] == "completed" for i in range(count) if i not in unknown)


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.timeout(90)
def test_reply_batches_to_a_client_that_does_not_read_stay_bounded(tmp_path, context) -> None:
    """A client speaking batches and never reading: its reply batches queue in zmq up to the
    high-water mark, then in the front door up to its byte budget, then are dropped."""
    size, count = 1_000_000, 400
    with RunningSupervisor(tmp_path / "data", shards=1, app="supervisor.test_slow_clients") as running, Client(running.endpoint, timeout=20) as client:
        wid = client.start("big", size, id="the-big-one").id
        assert len(client.get_handle(wid).result(timeout=10)) == size
        before = _rss(running.process.pid)
        base = client.stats()["supervisor"]["frontdoor_requests"]
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.RCVHWM, 1)
        sock.setsockopt(zmq.RCVBUF, 64 * 1024)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(running.endpoint)
        for first in range(0, count, 20):
            sock.send(batch(*(envelope(i, "result", wid, wait=0) for i in range(first, first + 20))))
        wait_until(lambda: client.stats()["supervisor"]["frontdoor_requests"] >= base + count + 1, 20, "all requests in")
        assert len(client.get_handle(wid).result(timeout=30)) == size  # the shard answers in order: all 400 are out
        time.sleep(0.5)
        grown = _rss(running.process.pid) - before
        assert grown < 160 << 20, f"the supervisor grew {grown >> 20} MiB for {count} unread 1 MB replies"
        supervisor = client.stats()["supervisor"]
        assert supervisor["frontdoor_replies_dropped_total"] >= count // 2  # each 1 MB reply fills a message of its own
        assert supervisor["frontdoor_replies_held_bytes"] <= 16 << 20
        assert client.ping() == "pong"


@pytest.mark.timeout(90)
def test_async_requests_that_find_the_socket_full_go_out_once_it_drains(sup) -> None:
    """The connection stops taking bytes (a paused proxy) until the client's zmq queue is
    full: the requests queued behind it wait in the client, leave once it drains, and each
    is answered (``_retrying``: the turn's batch found the queue full and waits for room)."""
    from _pausable_proxy import PausableProxy

    port = int(sup.endpoint.rsplit(":", 1)[1])
    args = ("x" * 40_000,)  # each request larger than a batch: one message each

    async def run(proxy: PausableProxy) -> list[Any]:
        async with AsyncClient(f"tcp://127.0.0.1:{proxy.port}", timeout=60) as client:
            assert await client.ping() == "pong"
            proxy.pause()
            tasks = [asyncio.ensure_future(client.get_handle(f"absent-{i}").query("q", *args)) for i in range(1500)]
            transport = client._transport
            deadline = time.monotonic() + 30
            while not transport._retrying:  # the socket's queue was full: requests wait in the client
                assert time.monotonic() < deadline, "the socket's queue never filled"
                await asyncio.sleep(0.05)
            proxy.resume()
            return await asyncio.gather(*tasks, return_exceptions=True)

    with PausableProxy(port) as proxy:
        outcomes = asyncio.run(run(proxy))
    assert len(outcomes) == 1500 and all(type(outcome).__name__ == "WorkflowNotFound" for outcome in outcomes), {type(o).__name__ for o in outcomes}
