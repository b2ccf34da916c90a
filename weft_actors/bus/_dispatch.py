"""The front door's routing: which shard holds which request, and what happens when one is lost.

Requests go to a shard in batches (``_frames``): each drain of the client socket routes its
requests into one outbox per shard, flushed as one message each. A shard that dies or stops
answering has what it held sent on to another shard when that is safe (``resendable``), and
answered ``OutcomeUnknown`` otherwise: a write is never applied twice. A request that finds
no shard ready waits (``ready_timeout``) for one instead of failing at once.

Bounds: a shard holding ``max_requests`` requests, or ``max_starts`` starts not answered yet,
gets no more (of them); a new one goes to the next shard in line, or is refused at once with
``Overloaded``. The second bound keeps the latency of accepted starts short: starts queue no
deeper than that per shard.

``Dispatcher`` knows no client socket: it answers through the ``reply`` callback it is given.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable

import zmq

from ..errors import OutcomeUnknown, Overloaded, ServerUnavailable, WeftError
from ._frames import decode_batch, drain, encode_batch, send_frames
from ._moves import MOVED, Moves
from ._protocol import decode_request, encode_error
from ._routing import RoutingTable

__all__ = ["Dispatcher", "START_OPS", "RETRYABLE_OPS", "resendable", "shard_identity"]

log = logging.getLogger("weft_actors.bus")

RETRYABLE_OPS = frozenset({"result", "query", "describe", "list", "ping"})
"""Reads that another shard may answer after the first one died holding them."""
START_OPS = frozenset({"start", "signal_with_start", "execute"})
"""The ops that make a workflow: bounded per shard here, refused by a full shard."""
STOPPING = _STOPPING = frozenset({"engine_stopped", "engine_deposed"})
"""Error codes of a shard going away: a resendable request answered so goes to another."""
_WAITS = frozenset({"result", "execute"})
LATENCY_SAMPLE = 16
LATENCY_WINDOW = 2048


def shard_identity(slot: int) -> bytes:
    return b"shard-%d" % slot


def _slot_of(identity: bytes) -> int:
    return int(identity[6:])


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


class Dispatcher:
    """Requests on their way to shards and back, for the front door's one thread (only
    ``refused``, ``latency`` and the settings are read from others, a moment stale at worst).

    ``reply(client, reply)`` answers a client; the front door hands its ``ClientReplies``.
    """

    def __init__(
        self,
        routing: RoutingTable,
        reply: Callable[[bytes, bytes], None],
        *,
        ready_timeout: float,
        max_requests: int,
        max_starts: int,
    ) -> None:
        self.routing = routing
        self._reply = reply
        self.ready_timeout = ready_timeout
        self.max_requests = max_requests
        self.max_starts = max_starts
        self.refused = 0
        """Requests refused ``Overloaded`` by the bounds."""
        self._inflight: dict[int, dict[tuple[bytes, Any], tuple[bytes, str, str | None]]] = {}
        self.outbox: dict[int, list[tuple[bytes, bytes, Any, str, str | None]]] = {}
        """slot -> requests routed to it and not sent yet: (client, frame, id, op, wid). The
        request is in ``_inflight`` too, but under its (client, id) alone: a client that reuses
        an id must not make a re-route lose the other request's op and wid."""
        self._abandoned: dict[int, set[tuple[bytes, Any]]] = {}
        """slot -> requests taken from a stalled shard that is still alive: a late reply of
        its to one of them is dropped (the request was answered or sent on meanwhile)."""
        self.parked: collections.deque[tuple[float, bytes, bytes, Any, str, str | None]] = collections.deque()
        """Requests that found no shard ready: (deadline, client, frame, id, op, wid)."""
        self._parked_retry = 0.0
        self.deadlines: dict[tuple[bytes, Any], float] = {}
        """Requests ``unpark`` just routed -> their deadline, kept should they park again;
        the front door clears it after each turn of its loop."""
        self._starts: dict[int, int] = {}
        """slot -> the starts it holds (in ``_inflight``) not answered yet."""
        self._start_count = 0
        self._timed: dict[tuple[bytes, Any], float] = {}
        """One start in ``LATENCY_SAMPLE`` (client, id) -> when it came in, until its answer."""
        self._start_latency: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        """Seconds from arrival to the reply, of the last accepted starts timed."""
        self.moves = Moves()
        """Waits resent to a workflow's new owner (``WorkflowMoved``)."""

    def latency(self) -> dict[str, float]:
        """The service's own latency of accepted starts (arrival here to the reply leaving),
        which a client's clock blurs with its own loop's delays."""
        window = sorted(self._start_latency)
        if not window:
            return {}
        return {
            "frontdoor_start_latency_p50_ms": round(window[len(window) // 2] * 1000, 1),
            "frontdoor_start_latency_p99_ms": round(window[min(len(window) - 1, len(window) * 99 // 100)] * 1000, 1),
        }

    def forward(self, client: bytes, frame: bytes, request_id: Any, op: str, wid: str | None, exclude: frozenset[int] | set[int] = frozenset(), fresh: bool = False) -> None:
        """Route one request to the first shard that should take it (``exclude``: shards that
        just failed it or could not be reached); it leaves with that shard's next batch. With
        none to take it, it waits for one (``unpark``). A ``fresh`` request (not one sent on
        from a lost shard, which may have applied it) skips shards holding
        ``max_requests``, and with every ready shard that full is refused ``Overloaded``."""
        full = False
        start = op in START_OPS
        for slot in self.routing.route(wid):
            if slot in exclude:
                continue
            held = self._inflight.get(slot)
            if held is None:
                held = self._inflight[slot] = {}
            elif fresh and (len(held) >= self.max_requests or (start and self._starts.get(slot, 0) >= self.max_starts)):
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
            self.outbox.setdefault(slot, []).append((client, frame, request_id, op, wid))
            return
        if full:
            self.refused += 1
            limit, value = ("max_queued_starts", self.max_starts) if start else ("max_queued_requests", self.max_requests)
            error = Overloaded(f"every ready shard holds {value} {'starts' if start else 'requests'} ({limit}): retry later, with backoff", limit=limit, value=value)
            self._reply(client, encode_error(request_id, error))
            return
        deadline = self.deadlines.get((client, request_id)) or time.monotonic() + self.ready_timeout
        self.parked.append((deadline, client, frame, request_id, op, wid))

    def unpark(self) -> None:
        """Route the requests waiting for a shard, once one is ready (a few times a second at
        most while none is); fail those that waited ``ready_timeout``."""
        now = time.monotonic()
        if now < self._parked_retry and self.parked[0][0] > now:
            return
        self._parked_retry = now + 0.02
        parked, self.parked = self.parked, collections.deque()
        ready = bool(self.routing.live_slots)
        for entry in parked:
            deadline, client, frame, request_id, op, wid = entry
            if deadline <= now:
                error = ServerUnavailable(f"no shard became ready within {self.ready_timeout:g}s", op=op)
                self.moves.dropped(client, request_id)
                self._reply(client, encode_error(request_id, error))
            elif ready:
                self.deadlines[(client, request_id)] = deadline  # until the flush that follows
                self.forward(client, frame, request_id, op, wid)
            else:
                self.parked.append(entry)

    def flush(self, backend: zmq.Socket) -> None:
        """Send each shard its batch. A shard that cannot take one (not connected yet or any
        more, or its queue full) has its requests routed on to the next shard in line."""
        unreachable: set[int] = set()
        while self.outbox:
            outbox, self.outbox = self.outbox, {}
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
                        self.forward(client, frame, request_id, op, wid, exclude=unreachable)

    def orphaned(self, slot: int, dead: bool) -> None:
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
                self.forward(client, frame, request_id, op, wid, exclude={slot})
            else:
                what = "died" if dead else "stopped answering"
                error = OutcomeUnknown(
                    f"the shard serving this {op} {what}; it may or may not have been applied",
                    op=op,
                )
                self._reply(client, encode_error(request_id, error))

    def drain_backend(self, backend: zmq.Socket) -> None:
        """Shards' batches of replies: ``client, reply, request id, error code`` each."""
        reply = self._reply
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
                client, answer, request_id, code = items[index : index + 4]
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
                if request is not None and code is not None:
                    if code == MOVED and request[1] in _WAITS:  # the wait goes on at the new owner
                        resent = self.moves.resend(client, request_id, request[1], answer)
                        if resent is not None:
                            self.forward(client, resent[0], request_id, "result", resent[1], exclude={slot})
                            continue
                    if code in _STOPPING and resendable(request[1], request[0]):
                        # The shard is going away (drain or deposition): another one answers.
                        frame, op, wid = request
                        self.forward(client, frame, request_id, op, wid, exclude={slot})
                        continue
                if request is not None and self.moves.handles:
                    answer = self.moves.reply(client, request_id, answer, code)
                reply(client, answer)
