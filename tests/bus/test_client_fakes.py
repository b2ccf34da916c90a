"""A fake supervisor for the client tests (no tests here; shared by ``test_client_*.py``).

It is a test double of the server, not of the bus: a real ROUTER socket bound on a loopback
port, in a background thread, decoding requests with the real protocol module and answering
with canned replies. Handlers return the reply's ``ok`` value, raise a ``WeftError`` for an
error reply, or return ``NO_REPLY`` to stay silent.
"""

from __future__ import annotations

import datetime as _dt
import random
import threading
import time
from typing import Any, Callable

import zmq

from weft_actors.bus._protocol import decode_request, encode_error, encode_reply
from weft_actors.bus._wire import BATCH, open_message
from weft_actors.codec import decode, decode_args, encode
from weft_actors.errors import WeftError, WorkflowNotFound

NO_REPLY = object()

Handler = Callable[[dict[str, Any]], Any]


def canned(request: dict[str, Any]) -> Any:
    """Plausible replies for every op; values echo the request so callers can be matched."""
    op = request["op"]
    if op in ("start", "signal_with_start"):
        return {"id": request.get("wid") or "generated-1", "run_id": "run-1"}
    if op in ("signal", "cancel", "terminate"):
        return None
    if op == "query":
        return encode({"name": request["name"], "args": decode_args(request["args"])})
    if op == "update":
        return encode({"name": request["name"], "args": decode_args(request["args"]), "request_id": request["request_id"]})
    if op == "result":
        return {"status": "completed", "result": encode(("done", request["wid"]))}
    if op == "describe":
        when = _dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=_dt.timezone.utc)
        return encode({"id": request["wid"], "type": "order", "status": "running", "created": when, "tags": {"a"}})
    if op == "list":
        items = [{"id": f"wf-{i}", "type": "order", "status": request.get("status") or "running", "updated": 1.5} for i in range(3)]
        return {"items": items[: request.get("limit", 100)], "cursor": "next-page"}
    if op == "stats":
        return {"supervisor": {"shards": 2}, "shards": {"0": {"live_actors": 1}}}
    if op == "ping":
        return "pong"
    raise AssertionError(f"unexpected op {op}")


def _requests_of(frame: bytes) -> list[bytes]:
    """The requests one client message carries: itself, or the items of a batch (``_wire``)."""
    try:
        items = open_message(frame, len(frame))
    except WeftError:
        return [frame]
    return list(items[1:]) if items[0] == BATCH else [frame]


class FakeServer:
    """ROUTER on ``tcp://127.0.0.1:<random>``; ``requests`` logs every decoded request.

    ``reorder=n`` holds replies until ``n`` are ready and sends them shuffled, to prove that
    clients match replies by id rather than by order.
    """

    def __init__(
        self,
        handler: Handler = canned,
        *,
        reorder: int = 0,
        curve_secret_key: bytes | None = None,
        context: zmq.Context | None = None,
    ) -> None:
        self.handler = handler
        self.reorder = reorder
        self.requests: list[dict[str, Any]] = []
        self.unroutable = 0
        self._own_context = context is None
        self._context = context or zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._socket.linger = 0
        if curve_secret_key is not None:
            self._socket.curve_secretkey = curve_secret_key
            self._socket.curve_publickey = zmq.curve_public(curve_secret_key)
            self._socket.curve_server = True
        port = self._socket.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self._stop = threading.Event()
        self._held: list[tuple[bytes, bytes]] = []
        self._thread = threading.Thread(target=self._run, name="fake-server", daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._socket.close(linger=0)
        if self._own_context:
            self._context.term()

    def ops(self) -> list[str]:
        return [request["op"] for request in self.requests]

    def _run(self) -> None:
        socket = self._socket
        while not self._stop.is_set():
            if not socket.poll(20, zmq.POLLIN):
                continue
            while True:
                try:
                    frames = socket.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                identity, frame = frames[0], frames[-1]
                for request in _requests_of(frame):  # a client's batch: each request answered alone
                    reply = self._answer(request)
                    if reply is not None:
                        self._send(identity, reply)

    def _answer(self, frame: bytes) -> bytes | None:
        try:
            request = decode_request(frame)
        except WeftError as error:
            return encode_error(getattr(error, "request_id", None), error)
        self.requests.append(request)
        try:
            value = self.handler(request)
        except WeftError as error:
            return encode_error(request["id"], error)
        if value is NO_REPLY:
            return None
        return encode_reply(request["id"], value)

    def _send(self, identity: bytes, reply: bytes) -> None:
        if self.reorder:
            self._held.append((identity, reply))
            if len(self._held) < self.reorder:
                return
            batch, self._held = self._held, []
            random.Random(7).shuffle(batch)
        else:
            batch = [(identity, reply)]
        for peer, frame in batch:
            try:
                self._socket.send_multipart([peer, frame])
            except zmq.ZMQError:  # EHOSTUNREACH: that client socket is gone (timed out)
                self.unroutable += 1


def not_found(request: dict[str, Any]) -> Any:
    if request["op"] in ("ping", "stats", "list", "start"):
        return canned(request)
    raise WorkflowNotFound(f"workflow {request['wid']!r} not found", workflow_id=request["wid"])


def sleep_then(seconds: float, handler: Handler = canned) -> Handler:
    """A handler that answers late (it blocks the fake server's only thread meanwhile)."""

    def slow(request: dict[str, Any]) -> Any:
        time.sleep(seconds)
        return handler(request)

    return slow
