"""Protocol fuzzing against a real supervisor: every frame gets a typed error or a valid
answer, and the supervisor and its shards stay up."""

from __future__ import annotations

import os

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _processes import RunningSupervisor

KNOWN_CODES = {
    "invalid_request",
    "payload_too_large",
    "serialization_error",
    "unknown_workflow_type",
    "workflow_not_found",
    "workflow_already_exists",
    "workflow_closed",
    "unknown_query",
    "server_unavailable",
    "limit_exceeded",
    "update_rejected",
}


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory):
    with RunningSupervisor(tmp_path_factory.mktemp("fuzz") / "data", shards=1, app="supervisor_app") as sup:
        yield sup


@pytest.fixture(scope="module")
def ask(supervisor):
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    sock.connect(supervisor.endpoint)

    def send(frame: bytes) -> dict:
        sock.send(frame)
        reply = msgpack.unpackb(sock.recv(), raw=False)
        assert isinstance(reply, dict) and reply.get("v") == 1
        assert ("ok" in reply) != ("error" in reply)
        if "error" in reply:
            assert reply["error"]["code"] in KNOWN_CODES, reply
            assert reply["error"]["message"]
        return reply

    yield send
    sock.close(0)
    context.term()


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False),
    st.text(max_size=20), st.binary(max_size=40),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)
OPS = ["start", "signal_with_start", "signal", "query", "update", "result", "cancel", "terminate", "describe", "list", "stats", "ping", "explode", ""]
FIELDS = ["wid", "workflow", "args", "name", "payload", "signal", "if_exists", "memo", "wait", "limit", "cursor", "status", "type", "request_id", "reason", "start_delay"]


@st.composite
def requests(draw) -> bytes:
    request = {
        "v": draw(st.sampled_from([1, 1, 1, 0, 2, "1", None])),
        "id": draw(st.one_of(st.text(max_size=8), st.integers(0, 2**32), st.none(), values)),
        "op": draw(st.sampled_from(OPS)),
    }
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=6, unique=True)):
        request[name] = draw(values)
    if request["op"] == "result":
        request["wait"] = 0  # never hold the fuzzer for long
    return msgpack.packb(request, use_bin_type=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=requests())
def test_random_requests_get_typed_answers(ask, frame):
    ask(frame)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200), cut=st.integers(0, 60))
def test_random_and_truncated_bytes_get_invalid_request(ask, data, cut):
    valid = msgpack.packb({"v": 1, "id": "t", "op": "signal", "wid": "w", "name": "n", "payload": b"\xc0"}, use_bin_type=True)
    for frame in (data, valid[:cut]):
        reply = ask(frame)
        assert "error" in reply or frame == valid


def test_deep_nesting_and_huge_numbers_are_refused_cleanly(ask, supervisor):
    deep = b"\x91" * 100_000 + b"\xc0"
    assert ask(deep)["error"]["code"] == "invalid_request"
    huge_id = msgpack.packb({"v": 1, "id": 2**64 - 1, "op": "ping"})
    assert ask(huge_id)["ok"] == "pong"
    wrong = msgpack.packb({"v": 1, "id": "x", "op": "result", "wid": "w", "wait": "soon"})
    assert ask(wrong)["error"]["code"] == "invalid_request"
    big_limit = msgpack.packb({"v": 1, "id": "y", "op": "list", "limit": 2**62})
    assert "ok" in ask(big_limit) or ask(big_limit)["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("size", [257, 511, 512, 600, 4000])
def test_oversized_workflow_ids_get_typed_errors_on_every_op(ask, size):
    # Beyond the id limit, and around and beyond LMDB's 511-byte key limit: a key the store
    # cannot even look up must still be a clean refusal, never a failed commit batch.
    for wid in ("w" * size, "é" * (size // 2 + 1)):
        for op, fields in (
            ("start", {"workflow": "echo", "args": msgpack.packb([1])}),
            ("signal_with_start", {"workflow": "echo", "args": msgpack.packb([1]), "signal": "s", "payload": b"\xc0"}),
            ("signal", {"name": "n", "payload": b"\xc0"}),
            ("update", {"name": "n", "args": msgpack.packb([]), "request_id": "r"}),
            ("query", {"name": "n", "args": msgpack.packb([])}),
            ("result", {"wait": 0}),
            ("describe", {}),
            ("cancel", {}),
            ("terminate", {"reason": "r"}),
        ):
            reply = ask(msgpack.packb({"v": 1, "id": f"{op}-{size}", "op": op, "wid": wid, **fields}, use_bin_type=True))
            assert reply["error"]["code"] in ("invalid_request", "workflow_not_found"), (op, size, reply)
    ok = ask(msgpack.packb({"v": 1, "id": "after", "op": "start", "workflow": "echo", "args": msgpack.packb([7])}, use_bin_type=True))
    assert "ok" in ok, ok  # and a good request right after is served


def test_the_supervisor_and_shards_survive_the_fuzzing(ask, supervisor):
    # Runs last in this module: everything above has been thrown at the same processes.
    assert ask(msgpack.packb({"v": 1, "id": "z", "op": "ping"}))["ok"] == "pong"
    assert supervisor.process.poll() is None
    for pid in supervisor.shard_pids:
        os.kill(pid, 0)
    stats = ask(msgpack.packb({"v": 1, "id": "s", "op": "stats"}))["ok"]
    assert stats["supervisor"]["restarts"] == 0
