"""Real supervisor, real shard, on both stores: the hot requests (``start``, ``execute``,
``signal``, ``result`` on a run held there) are served without a task of their own, with the
task path's replies: a wait that runs out says ``running`` (with the run's handle for
``execute``), an error refused before the commit is the reply, and each request served so
counts as held (``max_queued_requests``) until its reply has left, and no longer; a stop
answers what it holds."""

from __future__ import annotations

from typing import Any

import pytest
import zmq

from _processes import RunningSupervisor, wait_until
from weft_actors import Client
from weft_actors.bus import decode_reply, encode_request
from weft_actors.bus._calls import execute_call
from weft_actors.codec import decode, encode
from weft_actors.errors import Overloaded, WorkflowFailed

APP = "supervisor_app"


def _dealer(endpoint: str) -> tuple[zmq.Context[Any], zmq.Socket[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return context, sock


def _execute(sock: zmq.Socket[Any], request_id: int, workflow: str, args: tuple[Any, ...], wait: float, **options: Any) -> None:
    call = execute_call(workflow, args, wait, **options)
    sock.send(encode_request(request_id, call.op, **call.fields))


def _replies(sock: zmq.Socket[Any], count: int, timeout: float = 10.0) -> dict[Any, dict[str, Any]]:
    replies: dict[Any, dict[str, Any]] = {}
    while len(replies) < count:
        assert sock.poll(int(timeout * 1000)), f"{len(replies)} of {count} replies: {replies}"
        reply = decode_reply(sock.recv())
        replies[reply["id"]] = reply
    return replies


def _shard(client: Client) -> dict[str, Any]:
    return client.stats()["shards"][0]


@pytest.mark.timeout(60)
def test_start_execute_and_result_are_served_without_a_task_with_the_same_replies(either_store):
    with RunningSupervisor(either_store, shards=1, app=APP) as sup, Client(sup.endpoint, timeout=20) as client:
        assert client.execute("echo", {"a": 1}) == {"a": 1}
        with pytest.raises(WorkflowFailed):
            client.execute("failing", "no thanks", id="failed")
        handle = client.start("waiter", "w", id="held")
        context, sock = _dealer(sup.endpoint)
        try:
            _execute(sock, 1, "waiter", ("x",), 0.3, id="waits")
            sock.send(encode_request(2, "result", wid="held", wait=0.3))
            _execute(sock, 3, "waiter", ("y",), 5.0, id="held")  # already exists: refused
            _execute(sock, 4, "echo", ("z",), 5.0, id="returned", if_exists="return")
            _execute(sock, 5, "waiter", ("x",), 0.3, id="held", if_exists="return")  # its run, not started here
            replies = _replies(sock, 5)
        finally:
            sock.close(0)
            context.term()
        running = replies[1]["ok"]
        assert running["status"] == "running" and running["id"] == "waits" and running["run_id"]
        assert replies[2]["ok"] == {"status": "running"}
        assert replies[3]["error"]["code"] == "workflow_already_exists", replies[3]
        echoed = replies[4]["ok"]
        assert echoed["status"] == "completed" and decode(echoed["result"]) == "z" and echoed["id"] == "returned"
        assert replies[5]["ok"] == {"id": "held", "run_id": handle.run_id, "status": "running"}
        context, sock = _dealer(sup.endpoint)
        try:
            sock.send(encode_request(6, "signal", wid="held", name="item", payload=encode("one"), request_id="r-1"))
            sock.send(encode_request(7, "signal", wid="held", name="item", payload=encode("one"), request_id="r-1"))  # a resend
            sock.send(encode_request(8, "signal", wid="nobody", name="item", payload=encode(1)))
            sock.send(encode_request(9, "signal", wid="held", name="item", payload=b"\xc1"))  # not the codec's
            sock.send(encode_request(10, "result", wid="returned", wait=5.0))  # ended: read from the store
            sock.send(encode_request(11, "result", wid="failed", wait=5.0))
            sock.send(encode_request(12, "result", wid="nobody", wait=5.0))
            replies = _replies(sock, 7)
        finally:
            sock.close(0)
            context.term()
        assert replies[6] == {"v": 1, "id": 6, "ok": None} and replies[7] == {"v": 1, "id": 7, "ok": None}
        assert replies[8]["error"]["code"] == "workflow_not_found", replies[8]
        assert replies[9]["error"]["code"] == "serialization_error", replies[9]
        assert replies[10]["ok"]["status"] == "completed" and decode(replies[10]["ok"]["result"]) == "z"
        assert replies[11]["error"]["code"] == "workflow_failed" and "no thanks" in replies[11]["error"]["message"], replies[11]
        assert replies[12]["error"]["code"] == "workflow_not_found", replies[12]
        handle.signal("item", None)
        assert handle.result(timeout=10) == ["w", ["one"]]
        # Served by callbacks, not tasks: the shard counts them.
        stats = wait_until(lambda: (s := _shard(client)).get("requests_inline_total", 0) >= 13 and s, timeout=5)
        assert stats["requests_held"] == 0


@pytest.mark.timeout(60)
def test_executes_served_inline_are_held_until_their_reply_leaves(tmp_path):
    args = ("--max-queued-requests", "3")
    with RunningSupervisor(tmp_path / "data", shards=1, app=APP, args=args) as sup, Client(sup.endpoint, timeout=20) as client:
        context, sock = _dealer(sup.endpoint)
        try:
            for i in range(3):
                _execute(sock, i, "waiter", (str(i),), 2.0, id=f"w{i}")
            wait_until(lambda: _shard(client).get("requests_held") == 3, timeout=5, what="three executes held")
            with pytest.raises(Overloaded, match="max_queued_requests"):
                client.get_handle("w0").describe()
            replies = _replies(sock, 3)
            assert all(reply["ok"]["status"] == "running" for reply in replies.values()), replies
            wait_until(lambda: _shard(client).get("requests_held") == 0, timeout=5, what="nothing held")
            # Each reply released its place: three more fit again, and run to their end.
            for i in range(3):
                _execute(sock, 10 + i, "echo", (i,), 5.0)
            replies = _replies(sock, 3)
            assert sorted(decode(reply["ok"]["result"]) for reply in replies.values()) == [0, 1, 2]
        finally:
            sock.close(0)
            context.term()
        for i in range(3):
            client.get_handle(f"w{i}").signal("item", None)
            assert client.get_handle(f"w{i}").result(timeout=10) == [str(i), []]


@pytest.mark.timeout(60)
def test_a_stop_answers_every_execute_served_inline_with_engine_stopped(either_store):
    # Executes only: a ``result`` answered ``engine_stopped`` is sent on to another shard by the front door.
    with RunningSupervisor(either_store, shards=1, app=APP) as sup, Client(sup.endpoint, timeout=20) as client:
        context, sock = _dealer(sup.endpoint)
        try:
            _execute(sock, 1, "waiter", ("a",), 30.0, id="a")
            _execute(sock, 2, "waiter", ("b",), 30.0, id="b")
            wait_until(lambda: _shard(client).get("requests_held") == 2, timeout=5, what="two executes held")
            assert sup.terminate() == 0
            replies = _replies(sock, 2)
        finally:
            sock.close(0)
            context.term()
        assert sorted(reply["error"]["code"] for reply in replies.values()) == ["engine_stopped"] * 2, replies
