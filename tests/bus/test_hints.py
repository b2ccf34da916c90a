"""The hint bus: hint frames, and zmq prefix subscriptions through the real proxy deciding
which hints reach a subscriber."""

from __future__ import annotations

import time

import pytest
import zmq

from weft_actors.bus import HintProxy, decode_hint, encode_hint, hint_topic, publisher, subscriber


@pytest.mark.parametrize("kind", ["workflow-touched", "workflow-done", "engine-dead"])
def test_a_hint_round_trips(kind):
    assert decode_hint(encode_hint(kind, "order-7/é")) == (kind, "order-7/é")


@pytest.mark.parametrize("frame", [b"", b"T", b"Tw", b"Qw\0", b"T\xff\xfe\0", b"\x00\x00"])
def test_a_frame_that_is_not_a_hint_decodes_to_none(frame):
    assert decode_hint(frame) is None


def test_a_done_topic_matches_only_its_own_workflow():
    topic = hint_topic("workflow-done", "a")
    assert encode_hint("workflow-done", "a").startswith(topic)
    assert not encode_hint("workflow-done", "ab").startswith(topic)
    assert encode_hint("workflow-done", "ab").startswith(hint_topic("workflow-done"))


def _received(sock: zmq.Socket, wait: float) -> list[tuple[str, str]]:
    got = []
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if sock.poll(20):
            got.append(decode_hint(sock.recv()))
    return got


def _send_until_seen(pub: zmq.Socket, sub: zmq.Socket, marker: str) -> None:
    """PUB loses what it sends before the subscription reached it: send a touched hint until
    one arrives, so the path is up."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pub.send(encode_hint("workflow-touched", marker))
        if sub.poll(50):
            while sub.poll(50):
                sub.recv()
            return
    raise AssertionError("the hint path never came up")


@pytest.mark.timeout(30)
def test_the_proxy_delivers_done_hints_only_to_subscribers_of_that_workflow():
    context = zmq.Context()
    proxy = HintProxy(context)
    proxy.start()
    pub = publisher(context, proxy.publish_endpoint)
    sub = subscriber(context, proxy.subscribe_endpoint)
    try:
        _send_until_seen(pub, sub, "warm")
        pub.send(encode_hint("workflow-done", "w1"))
        pub.send(encode_hint("engine-dead", "e1"))
        pub.send(encode_hint("workflow-touched", "w2"))
        assert _received(sub, 0.3) == [("engine-dead", "e1"), ("workflow-touched", "w2")]

        sub.setsockopt(zmq.SUBSCRIBE, hint_topic("workflow-done", "w1"))
        deadline = time.monotonic() + 10
        got: list = []
        while not got and time.monotonic() < deadline:  # until the subscription travelled up
            pub.send(encode_hint("workflow-done", "w1"))
            got = [hint for hint in _received(sub, 0.05) if hint == ("workflow-done", "w1")]
        assert got
        _received(sub, 0.2)  # drain the repeats
        pub.send(encode_hint("workflow-done", "w10"))
        pub.send(encode_hint("workflow-done", "w1"))
        assert _received(sub, 0.3) == [("workflow-done", "w1")]
    finally:
        for sock in (pub, sub):
            sock.close(0)
        proxy.stop()
        context.term()


def test_internal_sockets_bind_ipc_when_they_can_and_loopback_tcp_otherwise(tmp_path):
    from weft_actors.bus._frames import bind_internal

    context = zmq.Context()
    sockets = [context.socket(zmq.ROUTER) for _ in range(3)]
    try:
        assert bind_internal(sockets[0], f"ipc://{tmp_path}/s") == f"ipc://{tmp_path}/s"
        too_long = f"ipc://{tmp_path}/{'x' * 200}"  # beyond a unix socket path's limit
        assert bind_internal(sockets[1], too_long).startswith("tcp://127.0.0.1:")
        assert bind_internal(sockets[2], None).startswith("tcp://127.0.0.1:")
    finally:
        for sock in sockets:
            sock.close(0)
        context.term()
