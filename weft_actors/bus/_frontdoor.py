"""The front door: clients' ROUTER socket in, shards' ROUTER socket out, in one thread.

Blocking sockets in a dedicated thread measured fastest here (zmq releases the GIL while it
waits). It never dies on a request: anything malformed gets a typed error reply and the next
request is served. This module is the socket loop and the requests it answers itself
(``ping``, ``stats``, malformed ones, denied ones); what goes to shards, in batches, and what
happens when one is lost or full is ``_dispatch``; replies to clients go through
``_replies``, which holds them for slow readers.

Clients use DEALER sockets (one frame per request, or per batch of requests: ``_wire``); a
REQ socket's envelope (an empty delimiter frame before the request) is accepted too and its
reply gets the delimiter back. A request in its envelope form is routed by its id, op and wid
alone; one in its map form (older clients) is decoded whole, as before.
With a ``KeyRing`` (CURVE) each request is checked against the client's key (``_access``).

Bounds (``bounds()`` counts what they refused): per shard, ``max_shard_requests`` requests
and ``max_shard_starts`` starts not answered yet (``_dispatch``). A client's replies queue in
zmq up to ``CLIENT_HWM`` messages, then up to ``client_budget`` bytes (``_replies``). A part
over twice the largest request is dropped by libzmq before it is assembled (``part_cap``); a
message of more parts than a request has is cut on arrival; while libzmq still assembles one
(it holds every part until the last), ``IntakeGuard`` bounds it.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

import zmq

from ..errors import InvalidRequest, WeftError
from ._access import KeyRing, drain_with_users
from ._calls import RESENDABLE_READS
from ._dispatch import Dispatcher
from ._intake import DEFAULT_INTAKE_BUDGET, IntakeGuard, part_cap
from ._frames import bind_internal, drain
from ._protocol import DEFAULT_MAX_FRAME, check_envelope, decode_request, encode_error, encode_reply, is_envelope
from ._replies import ClientReplies
from ._routing import RoutingTable
from ._wire import open_item, open_message

__all__ = ["FrontDoor"]

log = logging.getLogger("weft_actors.bus")

DEFAULT_READY_TIMEOUT = 5.0
"""Seconds a request waits for a shard to be ready (at start-up, or while every shard
restarts) before it fails with ``ServerUnavailable``."""
DEFAULT_MAX_SHARD_REQUESTS = 20_000
DEFAULT_MAX_SHARD_STARTS = 1000
DEFAULT_CLIENT_BUDGET = 16 << 20
"""Bytes of replies held here for one client whose zmq queue is full."""
CLIENT_HWM = 64
"""Messages zmq queues per client, each way (a reply is at most a payload and its envelope)."""
_REQUEST_PARTS = 3
"""The most parts a client message has: identity, a REQ socket's delimiter, the request."""


class FrontDoor:
    """Routes client requests to shards and shard replies back to clients.

    ``stats()`` answers the ``stats`` op without bothering a shard, and ``admin`` (set by the
    supervisor) the ``shards`` op. Start with ``start()``, stop with ``stop()``; the sockets
    live and die in the front door's own thread.
    """

    admin: Callable[[dict[str, Any]], Any] | None = None

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
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
        keys: KeyRing | None = None,
        max_shard_requests: int = DEFAULT_MAX_SHARD_REQUESTS,
        max_shard_starts: int = DEFAULT_MAX_SHARD_STARTS,
        client_budget: int = DEFAULT_CLIENT_BUDGET,
        intake_budget: int = DEFAULT_INTAKE_BUDGET,
    ) -> None:
        """``backend_bind``: where the shards connect (an ``ipc://`` path is cheapest; by
        default a free loopback TCP port). ``ready_timeout``: how long a request that finds
        no shard ready waits for one. ``keys``: the authorised CURVE keys, checked on every
        request (with CURVE only). ``intake_budget``: how far unfinished client messages may
        grow this process before the connection sending one is cut (``IntakeGuard``; 0: off)."""
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
        self.messages = 0
        """Client messages received: a batch of requests is one, and counts its requests in
        ``requests``."""
        self.errors = 0
        self.messages_cut = 0
        self._deaths: queue.SimpleQueue[tuple[int, bool]] = queue.SimpleQueue()
        self._keys = keys if self._curve is not None else None
        self._replies = ClientReplies(client_budget)
        self._dispatch = Dispatcher(
            routing, self._replies.send, ready_timeout=ready_timeout, max_requests=max_shard_requests, max_starts=max_shard_starts
        )
        # Bound once: the per-request path calls them as it called its own methods.
        self._reply = self._replies.send
        self._forward = self._dispatch.forward
        self.intake_budget = intake_budget
        self._guard: IntakeGuard | None = None

    @property
    def curve(self) -> bool:
        """Whether clients must use CURVE: then none is offered a shard's own socket."""
        return self._curve is not None

    @property
    def ready_timeout(self) -> float:
        return self._dispatch.ready_timeout

    @property
    def max_shard_requests(self) -> int:
        return self._dispatch.max_requests

    @property
    def max_shard_starts(self) -> int:
        return self._dispatch.max_starts

    @property
    def client_budget(self) -> int:
        return self._replies.budget

    @property
    def refused_overloaded(self) -> int:
        return self._dispatch.refused

    @property
    def replies_dropped(self) -> int:
        return self._replies.dropped

    def leaving(self) -> None:
        """Thread-safe: this supervisor stops. A request that finds no shard is answered
        ``server_unavailable`` at once, not parked for a shard that will not come: a client
        with more endpoints sends it to the next supervisor."""
        self._dispatch.ready_timeout = 0.0

    def held_writes(self, slot: int) -> int:
        """Requests other than reads that the shard at ``slot`` holds unanswered (read from
        another thread: a copy of a dict the front door thread writes, a moment stale at
        worst). A shard about to hand off waits for 0: a start it never read would be lost
        with it (``OutcomeUnknown``), while a read is sent on to another shard."""
        held = self._dispatch._inflight.get(slot)
        return 0 if not held else sum(1 for _, op, _ in list(held.values()) if op not in RESENDABLE_READS)

    def bounds(self) -> dict[str, float]:
        """What the bounds refused so far, and the replies held for slow clients now (read
        from another thread: plain ints, a moment stale at worst)."""
        return {
            "frontdoor_overloaded_total": self._dispatch.refused,
            "frontdoor_replies_dropped_total": self._replies.dropped,
            "frontdoor_messages_cut_total": self.messages_cut,
            "frontdoor_connections_cut_total": self._guard.cuts if self._guard is not None else 0,
            "frontdoor_replies_held_bytes": self._replies.held_bytes(),
            **self._dispatch.latency(),
        }

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def shard_died(self, slot: int) -> None:
        """Thread-safe: the requests that shard held are sent on (``resendable``) or answered
        ``OutcomeUnknown``."""
        self._deaths.put((slot, True))

    def shard_stalled(self, slot: int) -> None:
        """Thread-safe: as ``shard_died``, for a shard that stopped answering but may still
        wake up; whatever it answers late to the requests taken from it is dropped. Take it
        out of the routing table first, or new requests still go to it."""
        self._deaths.put((slot, False))

    def _sockets(self) -> tuple[zmq.Socket, zmq.Socket]:
        frontend = self._context.socket(zmq.ROUTER)
        frontend.setsockopt(zmq.ROUTER_MANDATORY, 1)
        frontend.setsockopt(zmq.LINGER, 0)
        frontend.setsockopt(zmq.SNDHWM, CLIENT_HWM)
        frontend.setsockopt(zmq.RCVHWM, CLIENT_HWM)
        frontend.setsockopt(zmq.MAXMSGSIZE, part_cap(self._max_frame))  # per part: see ``part_cap``
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
        self._replies.frontend = frontend
        dispatch, replies = self._dispatch, self._replies
        guard = self._guard = IntakeGuard(frontend, self.intake_budget) if self.intake_budget else None
        self._ready.set()
        poller = zmq.Poller()
        poller.register(frontend, zmq.POLLIN)
        poller.register(backend, zmq.POLLIN)
        if guard is not None:
            poller.register(guard.monitor, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                events = dict(poller.poll(20 if dispatch.parked or replies.holding() else 50))
                if guard is not None:
                    if guard.monitor in events:
                        guard.on_events()
                    guard.check()
                if self._keys is not None:
                    self._keys.poll()
                while not self._deaths.empty():
                    dispatch.orphaned(*self._deaths.get())
                if backend in events:
                    dispatch.drain_backend(backend)
                if frontend in events:
                    self._drain_frontend(frontend)
                if dispatch.parked:
                    dispatch.unpark()
                if dispatch.outbox:
                    dispatch.flush(backend)
                if replies.gathered:
                    replies.flush()
                if replies.holding():
                    replies.send_held()
                if dispatch.deadlines:
                    dispatch.deadlines.clear()
        finally:
            if guard is not None:
                guard.close()
            frontend.close(0)
            backend.close(0)

    def _drain_frontend(self, frontend: zmq.Socket) -> None:
        if self._keys is None:
            messages: Any = ((frames, None) for frames in drain(frontend, max_parts=_REQUEST_PARTS))
        else:
            messages = drain_with_users(frontend, max_parts=_REQUEST_PARTS)
        for frames, user in messages:
            self.messages += 1
            self.requests += 1
            if len(frames) > _REQUEST_PARTS:
                self.messages_cut += 1
            req = len(frames) == 3 and not frames[1]
            if req:  # a REQ socket's envelope
                self._replies.enveloped(frames[0])
                frames = [frames[0], frames[2]]
            if len(frames) != 2:
                self._reply(frames[0], encode_error(None, InvalidRequest("a request is exactly one frame")))
                continue
            client, frame = frames
            try:
                if is_envelope(frame):
                    self._route_message(client, frame, user, req)
                else:
                    self._route(client, frame, user)
            except Exception:
                log.exception("front door failed on a request")
                self._reply(client, encode_error(None, WeftError("internal front door error")))

    def _route_message(self, client: bytes, frame: bytes, user: str | None, req: bool) -> None:
        """A message in the envelope form: one request, or a batch of them (``_wire``), each
        routed by its envelope alone and handed on as the bytes it came as. One bad item is
        answered its own error; the others are served."""
        try:
            items = open_message(frame, self._max_frame)
        except WeftError as error:
            self.errors += 1
            self._reply(client, encode_error(getattr(error, "request_id", None), error))
            return
        if type(items[0]) is not str:  # a lone envelope, unpacked already
            if not req:
                self._replies.speaks_batches(client)
            self._route_envelope(client, frame, items, user)
            return
        if req:  # a REQ socket takes one reply per request
            self.errors += 1
            self._reply(client, encode_error(None, InvalidRequest("a REQ socket sends one request per message, not a batch")))
            return
        if len(items) == 1:
            self.errors += 1
            self._reply(client, encode_error(None, InvalidRequest("an empty batch")))
            return
        self._replies.speaks_batches(client)
        self.requests += len(items) - 2
        for item in items[1:]:
            try:
                envelope = open_item(item)
            except WeftError as error:
                self.errors += 1
                self._reply(client, encode_error(getattr(error, "request_id", None), error))
                continue
            self._route_envelope(client, item, envelope, user)

    def _route_envelope(self, client: bytes, frame: bytes, envelope: list[Any], user: str | None) -> None:
        try:
            request_id, op, wid = check_envelope(envelope)
        except WeftError as error:
            self.errors += 1
            self._reply(client, encode_error(getattr(error, "request_id", None), error))
            return
        if self._keys is not None:
            denied = self._keys.denied(user, op)
            if denied is not None:
                self.errors += 1
                self._reply(client, encode_error(request_id, denied))
                return
        if op == "ping":
            self._reply(client, encode_reply(request_id, "pong"))
            return
        if op == "stats":
            self._reply(client, encode_reply(request_id, self._stats()))
            return
        if op == "directory":
            self._reply(client, encode_reply(request_id, self.routing.directory(self._curve is None)))
            return
        if op == "shards":  # rare: the body is opened here, and checked as a shard would
            try:
                request = decode_request(frame, self._max_frame)
            except WeftError as error:
                self.errors += 1
                self._reply(client, encode_error(request_id, error))
                return
            self._admin_reply(client, request)
            return
        self._forward(client, frame, request_id, op, wid, fresh=True)

    def _route(self, client: bytes, frame: bytes, user: str | None = None) -> None:
        """Answer what the front door answers itself; send the rest on to a shard."""
        try:
            request = decode_request(frame, self._max_frame)
        except WeftError as error:
            self.errors += 1
            self._reply(client, encode_error(getattr(error, "request_id", None), error))
            return
        op = request["op"]
        if self._keys is not None:
            denied = self._keys.denied(user, op)
            if denied is not None:
                self.errors += 1
                self._reply(client, encode_error(request["id"], denied))
                return
        if op == "ping":
            self._reply(client, encode_reply(request["id"], "pong"))
            return
        if op == "stats":
            self._reply(client, encode_reply(request["id"], self._stats()))
            return
        if op == "directory":
            self._reply(client, encode_reply(request["id"], self.routing.directory(self._curve is None)))
            return
        if op == "shards":
            self._admin_reply(client, request)
            return
        self._forward(client, frame, request["id"], op, request.get("wid"), fresh=True)

    def _admin_reply(self, client: bytes, request: dict[str, Any]) -> None:
        """``shards`` (list, restart, set): the supervisor's to answer (``admin``), never a shard's."""
        try:
            if self.admin is None:
                raise InvalidRequest("this server has no shards to administer")
            reply = encode_reply(request["id"], self.admin(request))
        except WeftError as error:
            self.errors += 1
            reply = encode_error(request["id"], error)
        self._reply(client, reply)
