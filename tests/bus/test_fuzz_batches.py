"""Fuzzing batches of requests (``["b", envelope, ...]``) against a real supervisor: every item
of a readable batch is answered exactly once, with a value or a typed error; an unreadable
batch gets one typed error; the supervisor and its shards stay up throughout."""

from __future__ import annotations

import os
import time
from typing import Any

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _processes import RunningSupervisor

pytestmark = pytest.mark.timeout(120)

CODES = {
    "invalid_request", "payload_too_large", "serialization_error", "unknown_workflow_type", "workflow_not_found",
    "workflow_already_exists", "workflow_closed", "unknown_query", "server_unavailable", "limit_exceeded",
    "update_rejected", "overloaded",
}
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False),
    st.text(max_size=20), st.binary(max_size=40),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
OPS = ["signal_with_start", "signal", "query", "update", "result", "cancel", "terminate", "describe", "list", "stats", "ping", "execute", "explode", ""]
FIELDS = ["workflow", "args", "name", "payload", "signal", "if_exists", "memo", "wait", "limit", "cursor", "status", "type", "request_id", "reason", "start_delay", "op", "id", "v"]


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory):
    with RunningSupervisor(tmp_path_factory.mktemp("fuzzb") / "data", shards=2, app="supervisor_app") as sup:
        yield sup


@pytest.fixture(scope="module")
def sock(supervisor):
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(supervisor.endpoint)
    yield socket
    socket.close(0)
    context.term()


def _replies(sock: zmq.Socket, until: Any, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Every reply that arrives up to and including the one whose id is ``until``."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0 and sock.poll(int(remaining * 1000)), f"no reply {until!r} (got {got})"
        decoded = msgpack.unpackb(sock.recv(), raw=False)
        for reply in decoded if isinstance(decoded, list) else [decoded]:
            assert isinstance(reply, dict) and reply.get("v") == 1 and ("ok" in reply) != ("error" in reply), reply
            if "error" in reply:
                assert reply["error"]["code"] in CODES and reply["error"]["message"], reply
            if reply["id"] == until:
                return got
            got.append(reply)


@st.composite
def envelopes(draw) -> bytes:
    op = draw(st.sampled_from(OPS))
    body = {name: draw(values) for name in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True))}
    if op in ("result", "execute"):
        body["wait"] = 0  # never hold the fuzzer for long
    request_id = draw(st.one_of(st.integers(0, 2**32), st.text(max_size=6), values))
    wid = draw(st.one_of(st.none(), st.text(max_size=10), values))
    version = draw(st.sampled_from([1, 1, 1, 2, "1", None]))
    return msgpack.packb([version, request_id, op, wid, msgpack.packb(body, use_bin_type=True)], use_bin_type=True)


items = st.one_of(envelopes(), envelopes(), st.binary(max_size=40), values)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(items, min_size=1, max_size=12), marker=st.integers(0, 2**31))
def test_every_item_of_a_batch_is_answered_once_with_a_typed_reply(sock, batch, marker):
    sock.send(msgpack.packb(["b", *batch], use_bin_type=True))
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 20
    while len(got) < len(batch):  # the replies, in any number of messages
        assert time.monotonic() < deadline and sock.poll(20_000), (batch, got)
        decoded = msgpack.unpackb(sock.recv(), raw=False)
        got += decoded if isinstance(decoded, list) else [decoded]
    sentinel = f"sentinel-{marker}"
    sock.send(msgpack.packb([1, sentinel, "ping", None, msgpack.packb({})], use_bin_type=True))
    assert _replies(sock, sentinel) == []  # nothing more than one reply per item
    for reply in got:
        assert ("ok" in reply) != ("error" in reply) and ("error" not in reply or reply["error"]["code"] in CODES), reply


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200), head=st.sampled_from([b"\x90", b"\x91", b"\x95", b"\x9f", b"\xdc\x00\x02", b"\x92\xa1b", b"\xdd\xff\xff\xff\xff"]))
def test_unreadable_batches_get_one_typed_error(sock, data, head):
    sock.send(head + data)
    marker = f"after-{len(data)}"
    sock.send(msgpack.packb([1, marker, "ping", None, msgpack.packb({})], use_bin_type=True))
    assert all("error" in reply or reply["id"] is not None for reply in _replies(sock, marker))


def test_the_supervisor_and_shards_survive_the_batches(sock, supervisor):
    sock.send(msgpack.packb(["b", msgpack.packb([1, "z", "stats", None, msgpack.packb({})])], use_bin_type=True))
    assert sock.poll(10_000)
    decoded = msgpack.unpackb(sock.recv(), raw=False)
    (reply,) = decoded if isinstance(decoded, list) else [decoded]
    assert reply["id"] == "z" and reply["ok"]["supervisor"]["restarts"] == 0
    assert supervisor.process.poll() is None
    for pid in supervisor.shard_pids:
        os.kill(pid, 0)
