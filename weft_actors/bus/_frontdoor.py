"""The front door: clients' ROUTER socket in, shards' ROUTER socket out, in one thread.

Blocking sockets in a dedicated thread measured fastest here (zmq releases the GIL while it
waits). It never dies on a request: anything malformed gets a typed error reply and the next
request is served. Requests go to a shard in batches (``_frames``): each drain of the client
socket routes its requests into one outbox per shard, flushed as one message each.

Clients use DEALER sockets (one frame per request); a REQ socket's envelope (an empty
delimiter frame before the request) is accepted too and its reply gets the delimiter back.
With a ``KeyRing`` (CURVE) each request is checked against the client's key (``_access``).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

import zmq

from ..errors import InvalidRequest, ServerUnavailable, WeftError
from ._access import KeyRing, drain_with_users
from ._frames import bind_internal, decode_batch, drain, encode_batch, send_frames
from ._protocol import DEFAULT_MAX_FRAME, decode_request, encode_error, encode_reply
from ._routing import RoutingTable

__all__ = ["FrontDoor", "shard_identity"]

log = logging.getLogger("weft_actors.bus")


def shard_identity(slot: int) -> bytes:
    return b"shard-%d" % slot


def _slot_of(identity: bytes) -> int:
    return int(identity[6:])


RETRYABLE_OPS = frozenset({"result", "query", "describe", "list", "ping"})
_STOPPING = frozenset({"engine_stopped", "engine_deposed"})
"""Reads that another shard may answer after the first one died holding them."""


class FrontDoor:
    """Routes client requests to shards and shard replies back to clients.

    ``stats()`` answers the ``stats`` op without bothering a shard. Start with ``start()``,
    stop with ``stop()``; the sockets live and die in the front door's own thread.
    """

    def __init__(
        self,
        context: zmq.Context,
        endpoint: str,
        routing: RoutingTable,
        stats: Callable[[], dict[str, Any]],
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        curve_secret_key: bytes | None = None,
        curve_public_key: bytes | None = None,
        backend_bind: str | None = None,
        keys: KeyRing | None = None,
    ) -> None:
        """``backend_bind``: where the shards connect (an ``ipc://`` path is cheapest; by
        default a free loopback TCP port). ``keys``: the authorised CURVE keys, checked on
        every request (with CURVE only)."""
        self._context = context
        self._backend_bind = backend_bind
        self.endpoint = endpoint
        self.routing = routing
        self._stats = stats
        self._max_frame = max_frame
        self._curve = (curve_secret_key, curve_public_key) if curve_secret_key else None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="weft-frontdoor", daemon=True)
        self.backend_endpoint = ""
        self.requests = 0
        self.errors = 0
        self._inflight: dict[int, dict[tuple[bytes, Any], tuple[bytes, str, str | None]]] = {}
        self._outbox: dict[int, list[tuple[bytes, bytes, Any, str, str | None]]] = {}
        """slot -> requests routed to it and not sent yet: (client, frame, id, op, wid). The
        request is in ``_inflight`` too, but under its (client, id) alone: a client that reuses
        an id must not make a re-route lose the other request's op and wid."""
        self._deaths: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._keys = keys if self._curve is not None else None
        self._enveloped: dict[bytes, int] = {}
        """REQ clients -> their requests awaiting a reply, which must carry the delimiter."""

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def shard_died(self, slot: int) -> None:
        """Thread-safe: the requests that shard held are re-sent (reads) or failed (writes)."""
        self._deaths.put(slot)

    def _sockets(self) -> tuple[zmq.Socket, zmq.Socket]:
        frontend = self._context.socket(zmq.ROUTER)
        frontend.setsockopt(zmq.ROUTER_MANDATORY, 1)
        frontend.setsockopt(zmq.LINGER, 0)
        frontend.setsockopt(zmq.SNDHWM, 100_000)
        frontend.setsockopt(zmq.RCVHWM, 100_000)
        # Far above the frame limit, so an oversized request still gets its PayloadTooLarge
        # reply; only absurd frames (a memory attack) drop the connection.
        frontend.setsockopt(zmq.MAXMSGSIZE, max(64 << 20, 4 * self._max_frame))
        if self._curve is not None:
            frontend.curve_secretkey, frontend.curve_publickey = self._curve
            frontend.curve_server = True
        frontend.bind(self.endpoint)
        backend = self._context.socket(zmq.ROUTER)
        backend.setsockopt(zmq.ROUTER_MANDATORY, 1)
        backend.setsockopt(zmq.LINGER, 0)
        backend.setsockopt(zmq.SNDHWM, 100_000)
        backend.setsockopt(zmq.RCVHWM, 100_000)
        self.backend_endpoint = bind_internal(backend, self._backend_bind)
        return frontend, backend

    def _run(self) -> None:
        try:
            frontend, backend = self._sockets()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        poller = zmq.Poller()
        poller.register(frontend, zmq.POLLIN)
        poller.register(backend, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                events = dict(poller.poll(100))
                if self._keys is not None:
                    self._keys.poll()
                while not self._deaths.empty():
                    self._orphaned(frontend, backend, self._deaths.get())
                if backend in events:
                    self._drain_backend(frontend, backend)
                if frontend in events:
                    self._drain_frontend(frontend, backend)
                if self._outbox:
                    self._flush(frontend, backend)
        finally:
            frontend.close(0)
            backend.close(0)

    def _drain_frontend(self, frontend: zmq.Socket, backend: zmq.Socket) -> None:
        messages = ((frames, None) for frames in drain(frontend)) if self._keys is None else drain_with_users(frontend)
        for frames, user in messages:
            self.requests += 1
            if len(frames) == 3 and not frames[1]:  # a REQ socket's envelope
                self._enveloped[frames[0]] = self._enveloped.get(frames[0], 0) + 1
                frames = [frames[0], frames[2]]
            if len(frames) != 2:
                self._reply(frontend, frames[0], encode_error(None, InvalidRequest("a request is exactly one frame")))
                continue
            client, frame = frames
            try:
                self._route(frontend, backend, client, frame, user)
            except Exception:
                log.exception("front door failed on a request")
                self._reply(frontend, client, encode_error(None, WeftError("internal front door error")))

    def _route(self, frontend: zmq.Socket, backend: zmq.Socket, client: bytes, frame: bytes, user: str | None = None) -> None:
        try:
            request = decode_request(frame, self._max_frame)
        except WeftError as error:
            self.errors += 1
            self._reply(frontend, client, encode_error(getattr(error, "request_id", None), error))
            return
        op = request["op"]
        if self._keys is not None:
            denied = self._keys.denied(user, op)
            if denied is not None:
                self.errors += 1
                self._reply(frontend, client, encode_error(request["id"], denied))
                return
        if op == "ping":
            self._reply(frontend, client, encode_reply(request["id"], "pong"))
            return
        if op == "stats":
            self._reply(frontend, client, encode_reply(request["id"], self._stats()))
            return
        self._forward(frontend, backend, client, frame, request["id"], op, request.get("wid"))

    def _forward(self, frontend: zmq.Socket, backend: zmq.Socket, client: bytes, frame: bytes, request_id: Any, op: str, wid: str | None, exclude: frozenset[int] | set[int] = frozenset()) -> None:
        """Route one request to the first shard that should take it (``exclude``: shards that
        just failed it or could not be reached); it leaves with that shard's next batch."""
        for slot in self.routing.route(wid):
            if slot in exclude:
                continue
            self._inflight.setdefault(slot, {})[(client, request_id)] = (frame, op, wid)
            self._outbox.setdefault(slot, []).append((client, frame, request_id, op, wid))
            return
        self._reply(frontend, client, encode_error(request_id, ServerUnavailable("no shard is available")))

    def _flush(self, frontend: zmq.Socket, backend: zmq.Socket) -> None:
        """Send each shard its batch. A shard that cannot take one (not connected yet or any
        more, or its queue full) has its requests routed on to the next shard in line."""
        unreachable: set[int] = set()
        while self._outbox:
            outbox, self._outbox = self._outbox, {}
            for slot, entries in outbox.items():
                items: list[Any] = []
                for client, frame, _, _, _ in entries:
                    items += (client, frame)
                try:
                    send_frames(backend, [shard_identity(slot), encode_batch(items)])
                except zmq.ZMQError:
                    unreachable.add(slot)
                    held = self._inflight.get(slot, {})
                    for client, frame, request_id, op, wid in entries:
                        held.pop((client, request_id), None)
                        self._forward(frontend, backend, client, frame, request_id, op, wid, exclude=unreachable)

    def _orphaned(self, frontend: zmq.Socket, backend: zmq.Socket, slot: int) -> None:
        held = self._inflight.pop(slot, {})
        for (client, request_id), (frame, op, wid) in held.items():
            if op in RETRYABLE_OPS:
                self._forward(frontend, backend, client, frame, request_id, op, wid, exclude={slot})
            else:
                error = ServerUnavailable(
                    f"the shard serving this {op} died; it may or may not have been applied",
                    op=op,
                )
                self._reply(frontend, client, encode_error(request_id, error))

    def _drain_backend(self, frontend: zmq.Socket, backend: zmq.Socket) -> None:
        """Shards' batches of replies: ``client, reply, request id, error code`` each."""
        for frames in drain(backend):
            if len(frames) != 2:
                log.warning("front door: dropped a shard message of %d frames", len(frames))
                continue
            identity, batch = frames
            try:
                items = decode_batch(batch)
            except ValueError as exc:
                log.warning("front door: %s from %r", exc, identity)
                continue
            slot = _slot_of(identity)
            held = self._inflight.get(slot)
            for index in range(0, len(items) - 3, 4):
                client, reply, request_id, code = items[index : index + 4]
                if held:
                    request = held.pop((client, request_id), None)
                    if request is not None and code in _STOPPING and request[1] in RETRYABLE_OPS:
                        # The shard is going away (drain or deposition): another one answers.
                        frame, op, wid = request
                        self._forward(frontend, backend, client, frame, request_id, op, wid, exclude={slot})
                        continue
                self._reply(frontend, client, reply)

    def _reply(self, frontend: zmq.Socket, client: bytes, reply: bytes) -> None:
        enveloped = self._enveloped
        if enveloped and client in enveloped:
            if enveloped[client] == 1:
                del enveloped[client]
            else:
                enveloped[client] -= 1
            parts = [client, b"", reply]
        else:
            parts = [client, reply]
        try:
            send_frames(frontend, parts)
        except zmq.ZMQError:
            log.debug("client went away before its reply")
