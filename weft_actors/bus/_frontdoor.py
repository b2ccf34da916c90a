"""The front door: clients' ROUTER socket in, shards' ROUTER socket out, in one thread.

Blocking sockets in a dedicated thread measured fastest here (zmq releases the GIL while it
waits). It never dies on a request: anything malformed gets a typed error reply and the next
request is served. Requests go to a shard in batches (``_frames``): each drain of the client
socket routes its requests into one outbox per shard, flushed as one message each.

A shard that dies or stops answering (``shard_died``, ``shard_stalled``) has what it held sent
on to another shard when that is safe (reads, and writes that are idempotent by their ids),
and answered ``OutcomeUnknown`` otherwise: a write is never applied twice. A request that
finds no shard ready waits (``ready_timeout``) for one instead of failing at once.

Clients use DEALER sockets (one frame per request); a REQ socket's envelope (an empty
delimiter frame before the request) is accepted too and its reply gets the delimiter back.
With a ``KeyRing`` (CURVE) each request is checked against the client's key (``_access``).

Bounds (``bounds()`` counts what they refused): a shard holding ``max_shard_requests``
requests, or ``max_shard_starts`` starts not answered yet, gets no more (of them); a new one
goes to the next shard in line, or is refused at once with ``Overloaded``. The second bound
keeps the latency of accepted starts short: starts queue no deeper than that per shard. A client's replies queue in zmq up to ``CLIENT_HWM`` messages, then here
up to ``client_budget`` bytes, and beyond that are dropped: a client that never reads cannot
grow the supervisor. A part over twice the largest request is dropped by libzmq before it
is assembled (``part_cap``); a message of more parts than a request has is cut on arrival;
while libzmq still assembles one (it holds every part until the last), ``IntakeGuard`` bounds it.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from typing import Any, Callable

import zmq

from ..errors import InvalidRequest, OutcomeUnknown, Overloaded, ServerUnavailable, WeftError
from ._access import KeyRing, drain_with_users
from ._intake import DEFAULT_INTAKE_BUDGET, IntakeGuard, part_cap
from ._frames import bind_internal, decode_batch, drain, encode_batch, send_frames
from ._protocol import DEFAULT_MAX_FRAME, decode_request, encode_error, encode_reply
from ._routing import RoutingTable

__all__ = ["FrontDoor", "START_OPS", "shard_identity"]

log = logging.getLogger("weft_actors.bus")


def shard_identity(slot: int) -> bytes:
    return b"shard-%d" % slot


def _slot_of(identity: bytes) -> int:
    return int(identity[6:])


RETRYABLE_OPS = frozenset({"result", "query", "describe", "list", "ping"})
"""Reads that another shard may answer after the first one died holding them."""
_STOPPING = frozenset({"engine_stopped", "engine_deposed"})
DEFAULT_READY_TIMEOUT = 5.0
DEFAULT_MAX_SHARD_REQUESTS = 20_000
DEFAULT_MAX_SHARD_STARTS = 1000
START_OPS = frozenset({"start", "signal_with_start", "execute"})
"""The ops that make a workflow: bounded per shard here, refused by a full shard."""
DEFAULT_CLIENT_BUDGET = 16 << 20
"""Bytes of replies held here for one client whose zmq queue is full."""
LATENCY_SAMPLE = 16
LATENCY_WINDOW = 2048
CLIENT_HWM = 64
"""Messages zmq queues per client, each way (a reply is at most a payload and its envelope)."""
_REQUEST_PARTS = 3
"""The most parts a client message has: identity, a REQ socket's delimiter, the request."""
"""Seconds a request waits for a shard to be ready (at start-up, or while every shard
restarts) before it fails with ``ServerUnavailable``."""


def resendable(op: str, frame: bytes) -> bool:
    """Whether another shard may be sent this request after the first one was lost holding
    it, whatever that one did: reads, an update or a signal with a ``request_id`` (the store
    drops a repeat; an update's returns the recorded answer), and a start or execute with a
    fixed id and ``if_exists="return"``. Everything else (cancel, terminate, another start)
    could be applied twice.
    Decodes the frame again: called only when a shard is lost, never per request."""
    if op in RETRYABLE_OPS:
        return True
    if op not in ("update", "signal", "start", "execute"):
        return False
    try:
        request = decode_request(frame, len(frame))  # it passed the size check on arrival
    except WeftError:
        return False
    if op in ("update", "signal"):
        return isinstance(request.get("request_id"), str) and bool(request["request_id"])
    return isinstance(request.get("wid"), str) and request.get("if_exists") == "return"


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
        self.errors = 0
        self._inflight: dict[int, dict[tuple[bytes, Any], tuple[bytes, str, str | None]]] = {}
        self._outbox: dict[int, list[tuple[bytes, bytes, Any, str, str | None]]] = {}
        """slot -> requests routed to it and not sent yet: (client, frame, id, op, wid). The
        request is in ``_inflight`` too, but under its (client, id) alone: a client that reuses
        an id must not make a re-route lose the other request's op and wid."""
        self._deaths: queue.SimpleQueue[tuple[int, bool]] = queue.SimpleQueue()
        self._abandoned: dict[int, set[tuple[bytes, Any]]] = {}
        """slot -> requests taken from a stalled shard that is still alive: a late reply of
        its to one of them is dropped (the request was answered or sent on meanwhile)."""
        self.ready_timeout = ready_timeout
        self._parked: collections.deque[tuple[float, bytes, bytes, Any, str, str | None]] = collections.deque()
        """Requests that found no shard ready: (deadline, client, frame, id, op, wid)."""
        self._parked_retry = 0.0
        self._deadlines: dict[tuple[bytes, Any], float] = {}
        """Requests ``_unpark`` just routed -> their deadline, kept should they park again."""
        self._keys = keys if self._curve is not None else None
        self._enveloped: dict[bytes, int] = {}
        """REQ clients -> their requests awaiting a reply, which must carry the delimiter."""
        self.max_shard_requests = max_shard_requests
        self.max_shard_starts = max_shard_starts
        self._starts: dict[int, int] = {}
        """slot -> the starts it holds (in ``_inflight``) not answered yet."""
        self.client_budget = client_budget
        self._held: dict[bytes, collections.deque[list[bytes]]] = {}
        """Clients whose zmq queue was full -> their replies waiting here, in order."""
        self._held_bytes: dict[bytes, int] = {}
        self.refused_overloaded = 0
        self.replies_dropped = 0
        self.messages_cut = 0
        self._start_count = 0
        self._timed: dict[tuple[bytes, Any], float] = {}
        """One start in ``LATENCY_SAMPLE`` (client, id) -> when it came in, until its answer."""
        self._start_latency: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        """Seconds from arrival to the reply, of the last accepted starts timed."""
        self.intake_budget = intake_budget
        self._guard: IntakeGuard | None = None

    def bounds(self) -> dict[str, float]:
        """What the bounds refused so far, and the replies held for slow clients now (read
        from another thread: plain ints, a moment stale at worst)."""
        return {
            "frontdoor_overloaded_total": self.refused_overloaded,
            "frontdoor_replies_dropped_total": self.replies_dropped,
            "frontdoor_messages_cut_total": self.messages_cut,
            "frontdoor_connections_cut_total": self._guard.cuts if self._guard is not None else 0,
            "frontdoor_replies_held_bytes": sum(self._held_bytes.values()),
            **self._latency(),
        }

    def _latency(self) -> dict[str, float]:
        """The service's own latency of accepted starts (arrival here to the reply leaving),
        which a client's clock blurs with its own loop's delays."""
        window = sorted(self._start_latency)
        if not window:
            return {}
        return {
            "frontdoor_start_latency_p50_ms": round(window[len(window) // 2] * 1000, 1),
            "frontdoor_start_latency_p99_ms": round(window[min(len(window) - 1, len(window) * 99 // 100)] * 1000, 1),
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
        guard = self._guard = IntakeGuard(frontend, self.intake_budget) if self.intake_budget else None
        self._ready.set()
        poller = zmq.Poller()
        poller.register(frontend, zmq.POLLIN)
        poller.register(backend, zmq.POLLIN)
        if guard is not None:
            poller.register(guard.monitor, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                events = dict(poller.poll(20 if self._parked or self._held else 50))
                if guard is not None:
                    if guard.monitor in events:
                        guard.on_events()
                    guard.check()
                if self._keys is not None:
                    self._keys.poll()
                while not self._deaths.empty():
                    self._orphaned(frontend, backend, *self._deaths.get())
                if backend in events:
                    self._drain_backend(frontend, backend)
                if frontend in events:
                    self._drain_frontend(frontend, backend)
                if self._parked:
                    self._unpark(frontend, backend)
                if self._outbox:
                    self._flush(frontend, backend)
                if self._held:
                    self._send_held(frontend)
                if self._deadlines:
                    self._deadlines.clear()
        finally:
            if guard is not None:
                guard.close()
            frontend.close(0)
            backend.close(0)

    def _drain_frontend(self, frontend: zmq.Socket, backend: zmq.Socket) -> None:
        if self._keys is None:
            messages: Any = ((frames, None) for frames in drain(frontend, max_parts=_REQUEST_PARTS))
        else:
            messages = drain_with_users(frontend, max_parts=_REQUEST_PARTS)
        for frames, user in messages:
            self.requests += 1
            if len(frames) > _REQUEST_PARTS:
                self.messages_cut += 1
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
        self._forward(frontend, backend, client, frame, request["id"], op, request.get("wid"), fresh=True)

    def _forward(self, frontend: zmq.Socket, backend: zmq.Socket, client: bytes, frame: bytes, request_id: Any, op: str, wid: str | None, exclude: frozenset[int] | set[int] = frozenset(), fresh: bool = False) -> None:
        """Route one request to the first shard that should take it (``exclude``: shards that
        just failed it or could not be reached); it leaves with that shard's next batch. With
        none to take it, it waits for one (``_unpark``). A ``fresh`` request (not one sent on
        from a lost shard, which may have applied it) skips shards holding
        ``max_shard_requests``, and with every ready shard that full is refused ``Overloaded``."""
        full = False
        start = op in START_OPS
        for slot in self.routing.route(wid):
            if slot in exclude:
                continue
            held = self._inflight.get(slot)
            if held is None:
                held = self._inflight[slot] = {}
            elif fresh and (len(held) >= self.max_shard_requests or (start and self._starts.get(slot, 0) >= self.max_shard_starts)):
                full = True
                continue
            if start:
                self._starts[slot] = self._starts.get(slot, 0) + 1
                if fresh:
                    self._start_count += 1
                    if self._start_count % LATENCY_SAMPLE == 0:
                        if len(self._timed) > LATENCY_WINDOW:
                            self._timed.clear()  # starts answered OutcomeUnknown are never timed out
                        self._timed[(client, request_id)] = time.monotonic()
            held[(client, request_id)] = (frame, op, wid)
            self._outbox.setdefault(slot, []).append((client, frame, request_id, op, wid))
            return
        if full:
            self.refused_overloaded += 1
            limit, value = ("max_queued_starts", self.max_shard_starts) if start else ("max_queued_requests", self.max_shard_requests)
            error = Overloaded(f"every ready shard holds {value} {'starts' if start else 'requests'} ({limit}): retry later, with backoff", limit=limit, value=value)
            self._reply(frontend, client, encode_error(request_id, error))
            return
        deadline = self._deadlines.get((client, request_id)) or time.monotonic() + self.ready_timeout
        self._parked.append((deadline, client, frame, request_id, op, wid))

    def _unpark(self, frontend: zmq.Socket, backend: zmq.Socket) -> None:
        """Route the requests waiting for a shard, once one is ready (a few times a second at
        most while none is); fail those that waited ``ready_timeout``."""
        now = time.monotonic()
        if now < self._parked_retry and self._parked[0][0] > now:
            return
        self._parked_retry = now + 0.02
        parked, self._parked = self._parked, collections.deque()
        ready = bool(self.routing.live_slots)
        for entry in parked:
            deadline, client, frame, request_id, op, wid = entry
            if deadline <= now:
                error = ServerUnavailable(f"no shard became ready within {self.ready_timeout:g}s", op=op)
                self._reply(frontend, client, encode_error(request_id, error))
            elif ready:
                self._deadlines[(client, request_id)] = deadline  # until the flush that follows
                self._forward(frontend, backend, client, frame, request_id, op, wid)
            else:
                self._parked.append(entry)

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
                        if held.pop((client, request_id), None) is not None and op in START_OPS:
                            self._starts[slot] -= 1
                        self._forward(frontend, backend, client, frame, request_id, op, wid, exclude=unreachable)

    def _orphaned(self, frontend: zmq.Socket, backend: zmq.Socket, slot: int, dead: bool) -> None:
        """The shard at ``slot`` died (``dead``) or stopped answering: what it held is sent on
        when that is safe, else answered ``OutcomeUnknown``."""
        held = self._inflight.pop(slot, {})
        self._starts.pop(slot, None)
        if dead:
            self._abandoned.pop(slot, None)  # its process is gone: no late replies
        elif held:
            self._abandoned.setdefault(slot, set()).update(held)
        for (client, request_id), (frame, op, wid) in held.items():
            if resendable(op, frame):
                self._forward(frontend, backend, client, frame, request_id, op, wid, exclude={slot})
            else:
                what = "died" if dead else "stopped answering"
                error = OutcomeUnknown(
                    f"the shard serving this {op} {what}; it may or may not have been applied",
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
            abandoned = self._abandoned.get(slot)
            for index in range(0, len(items) - 3, 4):
                client, reply, request_id, code = items[index : index + 4]
                request = held.pop((client, request_id), None) if held else None
                if request is not None and request[1] in START_OPS:
                    self._starts[slot] -= 1
                    if self._timed:
                        arrived = self._timed.pop((client, request_id), None)
                        if arrived is not None and code is None:
                            self._start_latency.append(time.monotonic() - arrived)
                if request is None and abandoned and (client, request_id) in abandoned:
                    abandoned.discard((client, request_id))  # answered or sent on already
                    continue
                if request is not None and code in _STOPPING and resendable(request[1], request[0]):
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
        if self._held and client in self._held:  # behind the replies it has not taken yet
            self._hold(client, parts)
            return
        try:
            send_frames(frontend, parts)
        except zmq.Again:  # its zmq queue is full: it reads slower than it asks
            self._hold(client, parts)
        except zmq.ZMQError:
            log.debug("client went away before its reply")

    def _hold(self, client: bytes, parts: list[bytes]) -> None:
        size = len(parts[-1])
        used = self._held_bytes.get(client, 0)
        if used + size > self.client_budget:
            self.replies_dropped += 1
            if self.replies_dropped & (self.replies_dropped - 1) == 0:  # 1st, 2nd, 4th, ...: a bounded log
                log.warning("front door: dropped a reply to a client that does not read its replies (%d so far)", self.replies_dropped)
            return
        self._held_bytes[client] = used + size
        self._held.setdefault(client, collections.deque()).append(parts)

    def _send_held(self, frontend: zmq.Socket) -> None:
        """Send what waits for slow clients, as far as their zmq queues take it."""
        for client in list(self._held):
            queue_ = self._held[client]
            try:
                while queue_:
                    send_frames(frontend, queue_[0])
                    self._held_bytes[client] -= len(queue_.popleft()[-1])
            except zmq.Again:
                continue
            except zmq.ZMQError:  # gone: what it had waiting is dropped
                self.replies_dropped += len(queue_)
            del self._held[client]
            del self._held_bytes[client]
