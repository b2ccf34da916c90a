"""What one client can make the supervisor hold is bounded: the replies of a client that
never reads them (zmq's queue per client, then a byte budget in the front door, then they are
dropped and counted), and a message of many large parts (cut on arrival). Measured on a real
supervisor process by its resident set size."""

from __future__ import annotations

import time

import pytest
import zmq

from _processes import RunningSupervisor, wait_until
from weft_actors import Client, workflow
from weft_actors.bus import decode_reply, encode_request

RESULT_SIZE = 1_000_000


@workflow
async def big(ctx, size: int) -> bytes:
    return b"r" * size


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _deaf_client(context: zmq.Context, endpoint: str) -> zmq.Socket:
    """A DEALER that takes almost nothing off the wire: what it does not read stays upstream."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.RCVHWM, 1)
    sock.setsockopt(zmq.RCVBUF, 64 * 1024)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


@pytest.mark.timeout(90)
def test_unread_replies_do_not_grow_the_supervisor_without_bound(tmp_path):
    with RunningSupervisor(tmp_path / "data", shards=1, app="supervisor.test_slow_clients") as sup, Client(sup.endpoint, timeout=20) as client:
        assert len(client.execute("big", RESULT_SIZE)) == RESULT_SIZE
        wid = client.start("big", RESULT_SIZE, id="the-big-one").id
        assert len(client.get_handle(wid).result(timeout=10)) == RESULT_SIZE
        before = _rss(sup.process.pid)
        base = client.stats()["supervisor"]["frontdoor_requests"]
        context = zmq.Context()
        sock = _deaf_client(context, sup.endpoint)
        try:
            count = 400
            for i in range(count):
                sock.send(encode_request(i, "result", wid=wid, wait=0))
            wait_until(lambda: client.stats()["supervisor"]["frontdoor_requests"] >= base + count + 1, timeout=20, what="all requests in")
            # The shard answers in order: once this reply is back, the front door has sent,
            # held or dropped every one of the 400 before it.
            assert len(client.get_handle(wid).result(timeout=30)) == RESULT_SIZE
            time.sleep(0.5)
            grown = _rss(sup.process.pid) - before
            assert grown < 160 << 20, f"the supervisor grew {grown >> 20} MiB for {count} unread 1 MB replies"
            supervisor = client.stats()["supervisor"]
            assert supervisor["frontdoor_replies_dropped_total"] >= count // 2
            assert supervisor["frontdoor_replies_held_bytes"] <= 16 << 20
            assert client.ping() == "pong" and len(client.get_handle(wid).result(timeout=10)) == RESULT_SIZE
        finally:
            sock.close(0)
            context.term()


@pytest.mark.timeout(60)
def test_a_message_of_many_large_parts_is_cut_on_arrival_and_answered(tmp_path):
    with RunningSupervisor(tmp_path / "data", shards=1, app="supervisor.test_slow_clients") as sup, Client(sup.endpoint, timeout=20) as client:
        before = _rss(sup.process.pid)
        context = zmq.Context()
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(sup.endpoint)
        try:
            part = b"p" * (2 << 20)
            sock.send_multipart([encode_request(7, "ping")] + [part] * 30)
            assert sock.poll(10_000), "no reply to a message of 31 parts"
            reply = decode_reply(sock.recv())
            assert reply["error"]["code"] == "invalid_request"
            supervisor = client.stats()["supervisor"]
            assert supervisor["frontdoor_messages_cut_total"] == 1
            assert _rss(sup.process.pid) - before < 100 << 20
            assert client.ping() == "pong"
        finally:
            sock.close(0)
            context.term()
