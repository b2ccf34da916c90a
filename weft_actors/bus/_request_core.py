"""What both clients share below their calls: where requests go, and how replies are read.

``Client`` (threads, one socket each) and ``AsyncClient`` (one pipelined socket) differ only
in how they wait; building requests and reading answers is ``_calls``, and this module holds
the rest they have in common, once: the endpoints and which one is asked now (``Target``),
the watch on a failover connection (``ConnectionWatch``), and the two ways a reply finds its
request (``matching_reply`` for a socket with one request out, ``answer_pending`` for one
with many).
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from typing import Any, Iterator, Sequence

import zmq

from ..errors import ServerUnavailable
from . import _calls
from ._curve import CurveKeys, resolve_curve
from ._frames import readable, recv_frames
from ._wire import decode_replies

__all__ = ["DEFAULT_ENDPOINT", "ConnectionWatch", "Target", "TargetShell", "answer_pending", "expire", "matching_reply", "queued_replies", "unavailable"]

log = logging.getLogger("weft_actors.bus")

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5555"

_NOBLOCK = int(zmq.NOBLOCK)
_UP_EVENTS = int(zmq.EVENT_HANDSHAKE_SUCCEEDED)
_DOWN_EVENTS = int(
    zmq.EVENT_DISCONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
_DOWN_REASONS = {int(zmq.EVENT_DISCONNECTED): "the connection was lost", int(zmq.EVENT_CONNECT_RETRIED): "the connection was refused"}


class Target:
    """A client's settings and the endpoint it asks now: validated once, when the client is
    made, and read by its transport on every request. ``index`` moves only by ``advance``,
    which the transport calls when it gives up on an endpoint (with one, never)."""

    __slots__ = ("endpoints", "endpoint", "index", "failover", "timeout", "curve")

    def __init__(
        self,
        endpoint: str | Sequence[str],
        timeout: float,
        curve_server_key: bytes | str | os.PathLike[str] | None,
        curve_public_key: bytes | str | os.PathLike[str] | None,
        curve_secret_key: bytes | str | os.PathLike[str] | None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        self.endpoints = _calls.endpoint_list(endpoint)
        self.endpoint = self.endpoints[0]
        self.failover = len(self.endpoints) > 1
        self.index = 0
        """Which of ``endpoints`` requests go to now (always 0 with one)."""
        self.timeout = float(timeout)
        self.curve: CurveKeys | None = resolve_curve(curve_server_key, curve_public_key, curve_secret_key)

    def shown(self) -> str:
        """The endpoints as a ``repr`` shows them."""
        return repr(self.endpoint if not self.failover else ",".join(self.endpoints))

    def advance(self, index: int, why: str) -> None:
        """Move on from endpoint ``index`` to the next; the caller checked it is the current one."""
        self.index = (index + 1) % len(self.endpoints)
        self.endpoint = self.endpoints[self.index]
        log.warning("supervisor %s: %s; failing over to %s", self.endpoints[index], why, self.endpoint)


def unavailable(endpoint: str, op: str, why: str) -> ServerUnavailable:
    return ServerUnavailable(f"{op}: {why} ({endpoint})", endpoint=endpoint, op=op)


class TargetShell:
    """What the sync and async clients say of their ``Target`` alike: where they ask, and
    for how long."""

    _target: Target

    @property
    def endpoint(self) -> str:
        """The endpoint asked now (with several, it moves on when one fails)."""
        return self._target.endpoint

    @property
    def endpoints(self) -> tuple[str, ...]:
        return self._target.endpoints

    @property
    def timeout(self) -> float:
        return self._target.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._target.timeout = value

    @property
    def _failover(self) -> bool:
        return self._target.failover


class ConnectionWatch:
    """A failover socket's one connection as its monitor reports it (used by both clients):
    ``down`` says why it is not up (lost, refused, a failed handshake) until a handshake
    succeeds again, None while it is up or still connecting; ``lost`` counts connections
    lost, so a request knows whether the one it went out on broke."""

    __slots__ = ("socket", "monitor", "down", "lost", "up")

    def __init__(self, socket: zmq.Socket) -> None:
        self.socket = socket
        self.monitor = socket.get_monitor_socket(_UP_EVENTS | _DOWN_EVENTS)
        self.monitor.linger = 0
        self.down: str | None = None
        self.lost = 0
        self.up = False
        """Whether a handshake succeeded since the connection last went down: for a socket
        without ``IMMEDIATE``, whose sends queue while no connection is up."""

    def read(self) -> None:
        """Take in every event the monitor has queued, without blocking."""
        monitor = self.monitor
        while readable(monitor):
            event = struct.unpack_from("=H", monitor.recv_multipart(_NOBLOCK)[0])[0]
            self.up = bool(event & _UP_EVENTS)
            if self.up:
                self.down = None
            else:
                self.down = _DOWN_REASONS.get(event, "the handshake failed")
                if event == zmq.EVENT_DISCONNECTED:
                    self.lost += 1

    def close(self) -> None:
        try:
            self.socket.disable_monitor()
        except zmq.ZMQError:  # the socket or the context is gone already
            pass
        self.monitor.close(linger=0)


def matching_reply(socket: zmq.Socket, request_id: str, endpoint: str) -> dict[str, Any] | None:
    """The reply to ``request_id`` among those queued on ``socket``, if one is: a socket with
    one request out, whose earlier requests' late replies are stale."""
    while readable(socket):
        frames = socket.recv_multipart(_NOBLOCK)
        try:
            replies = decode_replies(frames[-1])
        except Exception:
            log.warning("discarding a malformed reply from %s", endpoint)
            continue
        for reply in replies:
            if reply.get("id") == request_id or (reply.get("id") is None and "error" in reply):
                return reply
            log.debug("discarding stale reply %r (waiting for %s)", reply.get("id"), request_id)
    return None


def queued_replies(socket: zmq.Socket, endpoint: str) -> Iterator[dict[str, Any]]:
    """Every reply queued on ``socket``, decoded (a batch of them split: ``_wire``); a
    malformed message is dropped (and logged)."""
    while readable(socket):
        frames = recv_frames(socket)
        try:
            replies = decode_replies(frames[-1])
        except Exception:
            log.warning("discarding a malformed reply from %s", endpoint)
            continue
        yield from replies


def answer_pending(socket: zmq.Socket, pending: dict[Any, asyncio.Future[Any]], endpoint: str) -> None:
    """Hand every reply queued on ``socket`` to the future of its request in ``pending``;
    malformed replies and replies to nothing pending are dropped (and logged)."""
    for reply in queued_replies(socket, endpoint):
        future = pending.pop(reply.get("id"), None)
        if future is None:
            log.debug("discarding a reply to no pending request (%r)", reply.get("id"))
        elif not future.done():
            future.set_result(reply)


def expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(asyncio.TimeoutError())
