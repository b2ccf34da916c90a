"""The front door's hop to the shards, with real zmq sockets playing the shards: requests leave
in one batch per shard, replies come back in batches, and a request whose shard cannot take it
goes on to the next one."""

from __future__ import annotations

import time

import pytest
import zmq

from weft_actors.bus import FrontDoor, shard_identity
from weft_actors.bus._frames import decode_batch, encode_batch
from weft_actors.bus._protocol import decode_reply, encode_error, encode_reply, encode_request
from weft_actors.bus._routing import RoutingTable
from weft_actors.errors import EngineStopped

pytestmark = pytest.mark.timeout(30)


def _shard(context: zmq.Context, endpoint: str, slot: int) -> zmq.Socket:
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, shard_identity(slot))
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    return sock


def _client(context: zmq.Context, endpoint: str) -> zmq.Socket:
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint)
    return sock


@pytest.fixture()
def door(tmp_path):
    context = zmq.Context()
    routing = RoutingTable(lambda wid: None, by_owner=False)
    front = FrontDoor(context, f"ipc://{tmp_path}/front", routing, lambda: {}, backend_bind=f"ipc://{tmp_path}/back")
    front.start()
    try:
        yield context, front, routing
    finally:
        front.stop()
        context.destroy(linger=0)


def _batch_of_requests(shard: zmq.Socket) -> list[tuple[bytes, dict]]:
    (frame,) = shard.recv_multipart()
    items = decode_batch(frame)
    return [(items[i], decode_reply(items[i + 1])) for i in range(0, len(items), 2)]


def test_requests_go_in_a_batch_and_replies_come_back_to_each_client(door):
    context, front, routing = door
    shard = _shard(context, front.backend_endpoint, 0)
    routing.set_live(0, "a" * 32)
    time.sleep(0.2)  # the shard's connection is up before the first batch
    clients = [_client(context, front.endpoint) for _ in range(3)]
    for number, client in enumerate(clients):
        client.send(encode_request(number, "describe", wid=f"w{number}"))
    received: list[tuple[bytes, dict]] = []
    while len(received) < 3:
        received += _batch_of_requests(shard)
    assert sorted(request["id"] for _, request in received) == [0, 1, 2]
    replies: list = []
    for client_id, request in received:
        replies += (client_id, encode_reply(request["id"], f"answer {request['id']}"), request["id"], None)
    shard.send(encode_batch(replies))  # all three in one message
    for number, client in enumerate(clients):
        assert decode_reply(client.recv())["ok"] == f"answer {number}"


def test_a_request_for_an_unreachable_shard_goes_to_the_next(door):
    context, front, routing = door
    routing.set_live(0, "a" * 32)  # listed as live, never connected
    shard = _shard(context, front.backend_endpoint, 1)
    routing.set_live(1, "b" * 32)
    time.sleep(0.2)
    client = _client(context, front.endpoint)
    for number in range(4):  # round robin starts on each slot in turn
        client.send(encode_request(number, "describe", wid="w"))
    received: list[tuple[bytes, dict]] = []
    while len(received) < 4:
        received += _batch_of_requests(shard)
    assert sorted(request["id"] for _, request in received) == [0, 1, 2, 3]


def test_a_stopping_shard_hands_a_read_on_to_another(door):
    context, front, routing = door
    first, second = _shard(context, front.backend_endpoint, 0), _shard(context, front.backend_endpoint, 1)
    routing.set_live(0, "a" * 32)
    routing.set_live(1, "b" * 32)
    time.sleep(0.2)
    client = _client(context, front.endpoint)
    client.send(encode_request(7, "describe", wid="w"))
    poller = zmq.Poller()
    poller.register(first, zmq.POLLIN)
    poller.register(second, zmq.POLLIN)
    ready = dict(poller.poll(5000))
    took, other = (first, second) if first in ready else (second, first)
    [(client_id, request)] = _batch_of_requests(took)
    error = EngineStopped("engine stopped")
    took.send(encode_batch([client_id, encode_error(7, error), 7, error.code]))
    [(again_client, again)] = _batch_of_requests(other)
    assert again_client == client_id and again["id"] == 7
    other.send(encode_batch([again_client, encode_reply(7, "from the other"), 7, None]))
    assert decode_reply(client.recv())["ok"] == "from the other"
