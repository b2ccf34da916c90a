"""The front door when a shard is lost or none is ready, with real zmq sockets playing the
shards: what a stalled or dead shard held is sent on when that is safe and answered
``outcome_unknown`` when not; a late reply of the stalled shard is dropped; a request that
finds no shard ready waits for one, for a bounded time."""

from __future__ import annotations

import time

import pytest
import zmq

from weft_actors.bus import FrontDoor, shard_identity
from weft_actors.bus._frames import decode_batch, encode_batch
from weft_actors.bus._protocol import decode_reply, encode_reply, encode_request

pytestmark = pytest.mark.timeout(30)


def _socket(context: zmq.Context, endpoint: str, identity: bytes | None = None) -> zmq.Socket:
    sock = context.socket(zmq.DEALER)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    return sock


class _Owners:
    """``owner_of`` for the routing table: every workflow is owned by engine ``owner``."""

    owner: str | None = None

    def __call__(self, wid: str) -> str | None:
        return self.owner


@pytest.fixture()
def door(tmp_path):
    from weft_actors.bus._routing import RoutingTable

    context = zmq.Context()
    owners = _Owners()
    routing = RoutingTable(owners)
    front = FrontDoor(context, f"ipc://{tmp_path}/front", routing, lambda: {}, backend_bind=f"ipc://{tmp_path}/back", ready_timeout=1.0)
    front.start()
    try:
        yield context, front, routing, owners
    finally:
        front.stop()
        context.destroy(linger=0)


def _requests(shard: zmq.Socket, count: int) -> list[tuple[bytes, dict]]:
    received: list[tuple[bytes, dict]] = []
    while len(received) < count:
        (frame,) = shard.recv_multipart()
        items = decode_batch(frame)
        received += [(items[i], decode_reply(items[i + 1])) for i in range(0, len(items), 2)]
    return received


def _two_shards(door):
    context, front, routing, owners = door
    first = _socket(context, front.backend_endpoint, shard_identity(0))
    second = _socket(context, front.backend_endpoint, shard_identity(1))
    routing.set_live(0, "a" * 32)
    routing.set_live(1, "b" * 32)
    owners.owner = "a" * 32  # everything goes to shard 0 first
    # Both connections are up before the first batch: a probe through each.
    client = _socket(context, front.endpoint)
    client.send(encode_request("probe", "describe", wid="w"))
    [(probe_client, probe)] = _requests(first, 1)
    first.send(encode_batch([probe_client, encode_reply(probe["id"], "ok"), probe["id"], None]))
    assert decode_reply(client.recv())["ok"] == "ok"
    return first, second, client


def test_a_stalled_shards_reads_and_idempotent_writes_go_on_and_the_rest_get_outcome_unknown(door):
    context, front, routing, owners = door
    first, second, client = _two_shards(door)
    sent = {
        "result": dict(wid="w", wait=10.0),
        "query": dict(wid="w", name="q", args=b""),
        "update": dict(wid="w", name="u", args=b"", request_id="r-1"),
        "start-return": dict(workflow="t", args=b"", wid="w", if_exists="return"),
        "start-error": dict(workflow="t", args=b"", wid="w", if_exists="error"),
        "start-no-id": dict(workflow="t", args=b""),
        "signal": dict(wid="w", name="s", payload=b""),
        "cancel": dict(wid="w"),
        "terminate": dict(wid="w"),
    }
    for request_id, fields in sent.items():
        client.send(encode_request(request_id, request_id.split("-")[0], **fields))
    held = _requests(first, len(sent))
    assert sorted(request["id"] for _, request in held) == sorted(sent)

    routing.set_dead(0)
    front.shard_stalled(0)

    resent = _requests(second, 4)
    assert sorted(request["id"] for _, request in resent) == ["query", "result", "start-return", "update"]
    errors = {}
    for _ in range(5):
        reply = decode_reply(client.recv())
        errors[reply["id"]] = reply["error"]["code"]
    assert errors == dict.fromkeys(["start-error", "start-no-id", "signal", "cancel", "terminate"], "outcome_unknown")

    # The stalled shard wakes up and answers late: dropped. The live one's answers arrive.
    late: list = []
    for shard_client, request in held:
        late += (shard_client, encode_reply(request["id"], "late"), request["id"], None)
    first.send(encode_batch(late))
    answers: list = []
    for shard_client, request in resent:
        answers += (shard_client, encode_reply(request["id"], "fresh"), request["id"], None)
    second.send(encode_batch(answers))
    got = {}
    for _ in range(4):
        reply = decode_reply(client.recv())
        got[reply["id"]] = reply["ok"]
    assert got == dict.fromkeys(["query", "result", "start-return", "update"], "fresh")
    client.setsockopt(zmq.RCVTIMEO, 300)
    with pytest.raises(zmq.Again):
        client.recv()  # and nothing else: no late answer, no second reply


def test_a_dead_shards_writes_get_outcome_unknown_and_its_reads_go_on(door):
    context, front, routing, owners = door
    first, second, client = _two_shards(door)
    client.send(encode_request(1, "describe", wid="w"))
    client.send(encode_request(2, "signal", wid="w", name="s", payload=b""))
    _requests(first, 2)
    routing.set_dead(0)
    front.shard_died(0)
    [(shard_client, request)] = _requests(second, 1)
    assert request["id"] == 1
    reply = decode_reply(client.recv())
    assert reply["id"] == 2 and reply["error"]["code"] == "outcome_unknown"
    assert "may or may not have been applied" in reply["error"]["message"]


def test_a_request_that_finds_no_shard_ready_waits_for_one(door):
    context, front, routing, owners = door
    client = _socket(context, front.endpoint)
    client.send(encode_request(1, "start", workflow="t", args=b"", wid="w"))
    shard = _socket(context, front.backend_endpoint, shard_identity(0))
    assert shard.poll(300) == 0  # held meanwhile, neither sent nor failed (ready_timeout 1 s)
    assert client.poll(0) == 0
    routing.set_live(0, "a" * 32)
    [(shard_client, request)] = _requests(shard, 1)
    assert request["id"] == 1 and request["op"] == "start"
    shard.send(encode_batch([shard_client, encode_reply(1, "started"), 1, None]))
    assert decode_reply(client.recv())["ok"] == "started"


def test_a_request_that_finds_no_shard_ready_in_time_is_server_unavailable(door):
    context, front, routing, owners = door
    client = _socket(context, front.endpoint)
    began = time.monotonic()
    client.send(encode_request(1, "describe", wid="w"))
    reply = decode_reply(client.recv())
    waited = time.monotonic() - began
    assert reply["error"]["code"] == "server_unavailable"
    assert "no shard became ready within 1s" in reply["error"]["message"]
    assert 0.9 <= waited < 3.0
