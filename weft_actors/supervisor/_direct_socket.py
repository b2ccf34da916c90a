"""A shard's own client-facing socket: clients that hold the directory send here directly.

The front door's hop costs a workflow a receive and a send in the supervisor and one more
in each direction on the wire; a client that knows which shard a workflow is placed on
(the ``directory`` op) skips it. What arrives here is served by the same path as the front
door's batches (``ShardServer``), a request to a shard that is not the placed one included:
placement is an optimisation, any shard answers any request correctly.

Messages are those a client sends the front door (``bus/_wire``): one envelope, or a batch of
them; the replies one client gets in a loop turn leave as one message (``reply_batch``). A
client of this socket is a ``DirectPeer``: its ROUTER identity, typed so that the shard's
reply path tells it from a front door client by its type alone.

No CURVE here: a deployment with CURVE keeps its clients on the front door (the directory it
answers then lists no shard). A client that stops being connected loses its replies (it has
given the requests up: ``bus/_direct``).

A draining shard (a handoff, a stop) takes no new request, but its direct clients may not
know yet: a client polls the directory only while it has requests out, so one that was idle
sends on the directory it had. Left unread, such a request would wait until the shard exits,
and its client could then only answer ``OutcomeUnknown`` for a start never applied. So from
the drain on each one is read and answered ``server_unavailable`` at once (``turn_away``):
nothing was applied, and the client sends it through the front door.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Iterator

import zmq

from ..bus._frames import readable
from ..bus._intake import part_cap
from ..bus._protocol import decode_request, encode_error
from ..bus._wire import open_message, reply_batch
from ..errors import InvalidRequest, ServerUnavailable, WeftError

__all__ = ["DirectPeer", "DirectSocket", "direct_bind", "turn_away_new"]

log = logging.getLogger("weft_actors.supervisor")

_SNDHWM = 100_000
"""Messages queued per client: a client's replies are bounded by what it sent, which the
shard bounds (``max_queued_requests``)."""


class DirectPeer(bytes):
    """The ROUTER identity of a client of a shard's own socket."""

    __slots__ = ()


def direct_bind(bind: str, curve: bool) -> str | None:
    """Where a shard binds its client socket: the front door's TCP host, any free port; None
    (no direct path) with CURVE or a front door that is not on TCP."""
    if curve or not bind.startswith("tcp://"):
        return None
    host = bind[len("tcp://") :].rsplit(":", 1)[0]
    return f"tcp://{host}:*"


def is_batch(frame: bytes) -> bool:
    """Whether ``frame`` is a batch ``["b", ...]`` (read from its first bytes, not decoded)."""
    if not frame:
        return False
    head = frame[0]
    at = 1 if 0x90 <= head <= 0x9F else 3 if head == 0xDC else 5 if head == 0xDD else -1
    return at > 0 and frame[at : at + 2] == b"\xa1b"


class DirectSocket:
    """The shard's ROUTER socket for clients, and the replies it owes them this turn."""

    def __init__(self, context: zmq.Context, bind: str, max_frame: int) -> None:
        socket = context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SNDHWM, _SNDHWM)
        socket.setsockopt(zmq.RCVHWM, _SNDHWM)
        socket.setsockopt(zmq.MAXMSGSIZE, part_cap(max_frame))
        socket.bind(bind)
        self.socket = socket
        self.endpoint: str = socket.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._max_frame = max_frame
        self.waiting: dict[DirectPeer, list[bytes]] = {}
        """Replies not sent yet, per client."""

    def take(self) -> Iterator[tuple[DirectPeer, bytes]]:
        """The requests of one queued message (none if there is none), each (client, frame);
        a malformed message or item is answered its error here."""
        socket = self.socket
        if not readable(socket):
            return
        frames = socket.recv_multipart(zmq.NOBLOCK, copy=True)
        if len(frames) != 2:
            if frames:
                self.queue(DirectPeer(frames[0]), encode_error(None, InvalidRequest("a request is exactly one frame")))
            return
        peer, frame = DirectPeer(frames[0]), frames[1]
        if not is_batch(frame):
            yield peer, frame
            return
        try:
            items = open_message(frame, self._max_frame)
        except WeftError as error:
            self.queue(peer, encode_error(getattr(error, "request_id", None), error))
            return
        if len(items) == 1:
            self.queue(peer, encode_error(None, InvalidRequest("an empty batch")))
        for item in items[1:]:
            if type(item) is not bytes:
                self.queue(peer, encode_error(None, InvalidRequest("a batch carries each request as bytes")))
                continue
            yield peer, item

    def queue(self, peer: DirectPeer, reply: bytes) -> None:
        replies = self.waiting.get(peer)
        if replies is None:
            self.waiting[peer] = [reply]
        else:
            replies.append(reply)

    def flush(self) -> None:
        """Send each client its replies, one message each."""
        waiting, self.waiting = self.waiting, {}
        socket = self.socket
        if socket.closed:
            return
        for peer, replies in waiting.items():
            try:
                socket.send_multipart([peer, replies[0] if len(replies) == 1 else reply_batch(replies)], zmq.NOBLOCK)
            except zmq.ZMQError as exc:  # gone, or its queue full: it gave these up
                log.debug("dropped %d replies to a direct client: %s", len(replies), exc)

    def turn_away(self) -> None:
        """Answer each request queued here ``server_unavailable``, unapplied (a draining
        shard's reader): its client sends it through the front door instead."""
        socket = self.socket
        while not socket.closed and readable(socket):  # a send can swallow the input's edge: look again
            for peer, frame in self.take():
                try:
                    request_id = decode_request(frame, self._max_frame)["id"]
                except WeftError as error:
                    self.queue(peer, encode_error(getattr(error, "request_id", None), error))
                    continue
                self.queue(peer, encode_error(request_id, ServerUnavailable("this shard is draining and took no new request: ask the front door")))
            self.flush()
        self.flush()  # replies ``take`` queued for a malformed message


def turn_away_new(direct: DirectSocket | None, loop: asyncio.AbstractEventLoop) -> None:
    """From now on, ``direct``'s new requests are turned away (``DirectSocket.turn_away``)."""
    if direct is None or direct.socket.closed:
        return
    loop.remove_reader(direct.socket.fileno())
    loop.add_reader(direct.socket.fileno(), direct.turn_away)
    direct.turn_away()
