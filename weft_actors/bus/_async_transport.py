"""How ``AsyncClient`` moves a request: many pipelined on one DEALER socket.

The socket is a plain (non-asyncio) zmq socket whose file descriptor the event loop watches:
when it turns readable every queued reply is taken in one go (zmq's descriptor is
edge-triggered, so until ``EVENTS`` shows no input), and each resolves the future registered
under its request id. Measured here, that is about 2.5x ``zmq.asyncio``'s rate. The requests
made in one turn of the loop leave together, as one message (``_wire``). Any number
of coroutines can have requests in flight at once and replies may come back in any order; a
reply whose id is no longer registered (its request timed out or was cancelled) is dropped.

Given several endpoints the client fails over between them as ``Client`` does (``_calls``
holds the policy): each connection is a ``_Link``, one socket and the monitor that watches
it, and requests go on the current one. A link given up on (a request on it got no answer)
stays open for the requests in flight on it, and closes once they are answered or time out;
a lost connection fails those at once. With one endpoint there are no links.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import zmq
import zmq.backend

from ..errors import ServerUnavailable
from . import _calls
from ._calls import Call
from ._curve import connect_client
from ._request_core import ConnectionWatch, Target, answer_pending, expire
from ._wire import grouped

__all__ = ["LoopTransport"]

log = logging.getLogger("weft_actors.bus")

_NOBLOCK = int(zmq.NOBLOCK)
_send = getattr(zmq.backend.Socket, "send", zmq.Socket.send)
"""The compiled send under pyzmq's wrapper, as ``_frames`` uses it (measured here: 0.3 µs a
request instead of 0.6)."""
_SEND_RETRY = 0.001
"""Seconds between send attempts while the socket's queue is full (rare: its high-water mark
is far above any sane number of requests in flight)."""


class _Link:
    """One connection of a client with several endpoints: endpoint ``index``'s socket, its
    watch, and the requests sent on it not answered yet (request id -> future)."""

    __slots__ = ("index", "socket", "watch", "sent", "retired", "drain_scheduled")

    def __init__(self, index: int, socket: zmq.Socket) -> None:
        self.index = index
        self.socket = socket
        self.watch = ConnectionWatch(socket)
        self.sent: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.retired = False
        self.drain_scheduled = False


class LoopTransport:
    """``AsyncClient``'s sockets and its request path, bound to the event loop that first
    uses them. ``request`` returns the caller's value or raises as ``AsyncClient`` documents."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self.link: _Link | None = None
        self.retired: set[_Link] = set()
        self._context: zmq.Context | None = None
        self._socket: zmq.Socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_scheduled = False
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._outbox: list[tuple[str, bytes]] = []
        """Requests of this turn of the loop not sent yet (``_flush``)."""
        self._retrying = False
        self._ids = itertools.count(1)
        self.closed = False

    def connect(self) -> None:
        """Make the socket (or the first link) now, in the running loop."""
        if self._target.failover:
            self._current_link()
        else:
            self._open()

    def close(self) -> None:
        """Fail what is pending, close the socket and the context. Idempotent."""
        if self.closed:
            return
        self.closed = True
        endpoint = self._target.endpoint
        self._fail_pending(ServerUnavailable(f"the client was closed ({endpoint})", endpoint=endpoint))
        self._drop_socket()
        for link in [self.link, *self.retired]:
            if link is not None:
                self._close_link(link)
        self.link = None
        if self._context is not None:
            self._context.term()
            self._context = None

    def _fail_pending(self, error: ServerUnavailable) -> None:
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    def _open(self) -> zmq.Socket:
        if self.closed:
            endpoint = self._target.endpoint
            raise ServerUnavailable(f"the client is closed ({endpoint})", endpoint=endpoint)
        if self._socket is None:
            if self._context is None:
                self._context = zmq.Context()
            socket = self._context.socket(zmq.DEALER)
            socket.linger = 0
            connect_client(socket, self._target.endpoint, self._target.curve)
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(socket.fileno(), self._drain)
            self._socket = socket
        return self._socket

    def _drop_socket(self) -> None:
        self._outbox = []  # their requests fail with the socket
        socket, self._socket = self._socket, None
        if socket is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.remove_reader(socket.fileno())
            except Exception:  # the socket may already be unusable
                pass
        socket.close(linger=0)

    # -- what a batch (``_async_many``) sends with ---------------------------------------------

    def batch_socket(self) -> zmq.Socket:
        """The socket single calls go on (made now if there is none); ``ServerUnavailable``
        once the client is closed."""
        return self._open()

    def next_id(self) -> str:
        """A request id no other request of this client has."""
        return str(next(self._ids))

    def sent(self) -> None:
        """Frames went out on ``batch_socket``: look for replies on the next turn."""
        self._schedule_drain()

    def _schedule_drain(self) -> None:
        """After a send: it may have swallowed the edge that announces a reply."""
        if not self._drain_scheduled and self._loop is not None:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        socket = self._socket
        if socket is None:
            return
        endpoint = self._target.endpoint
        try:
            answer_pending(socket, self.pending, endpoint)
        except zmq.ZMQError as exc:  # the socket is gone: nothing more will be answered
            if not self.closed:
                log.warning("client socket for %s failed: %s", endpoint, exc)
            self._drop_socket()  # the next request makes a fresh one
            self._fail_pending(ServerUnavailable(f"connection lost: {exc} ({endpoint})", endpoint=endpoint))

    def _queue(self, request_id: str, frame: bytes) -> None:
        """Send ``frame`` with the others queued in this turn of the loop, as one message."""
        outbox = self._outbox
        outbox.append((request_id, frame))
        if len(outbox) == 1 and self._loop is not None:
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Send the requests queued this turn (``_wire.grouped``: one message, or a few when
        they are large). A full socket queue (rare) keeps them for a moment later; a failed
        socket fails them. A request that gave up waiting meanwhile is not sent."""
        outbox, self._outbox = self._outbox, []
        socket = self._socket
        pending = self.pending
        if socket is None or not outbox:
            return  # dropped: its requests were failed with it
        if self._retrying:
            self._retrying = False
            outbox = [entry for entry in outbox if entry[0] in pending]
        frames = [frame for _, frame in outbox]
        sent = 0
        for message, count in grouped(frames):
            try:
                _send(socket, message, _NOBLOCK)
            except zmq.Again:  # its queue is full: rare
                self._outbox[:0] = outbox[sent:]
                self._retrying = True
                assert self._loop is not None
                self._loop.call_later(_SEND_RETRY, self._flush)
                break
            except zmq.ZMQError as exc:
                endpoint = self._target.endpoint
                for request_id, _ in outbox[sent:]:
                    future = pending.pop(request_id, None)
                    if future is not None and not future.done():
                        future.set_exception(ServerUnavailable(f"socket error: {exc} ({endpoint})", endpoint=endpoint))
                break
            sent += count
        self._schedule_drain()

    async def request(self, call: Call) -> Any:
        target = self._target
        if target.failover:
            return await self._request_failover(call)
        self._open()
        loop = asyncio.get_running_loop()
        request_id = str(next(self._ids))
        frame = _calls.frame(request_id, call)
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.pending[request_id] = future
        budget = target.timeout + call.wait
        timer = loop.call_later(budget, expire, future)
        try:
            self._queue(request_id, frame)
            reply = await future
        except asyncio.TimeoutError:
            raise ServerUnavailable(
                f"{call.op}: no reply within {budget:.3g}s ({target.endpoint})", endpoint=target.endpoint, op=call.op
            ) from None
        finally:
            timer.cancel()
            if self.pending.get(request_id) is future:
                del self.pending[request_id]
        return _calls.unwrap(call, reply)

    # -- several endpoints ----------------------------------------------------------------

    async def _request_failover(self, call: Call) -> Any:
        """``request`` with several endpoints: the current one first, then each other once,
        as long as ``_calls`` says the request may go on (else ``OutcomeUnknown``)."""
        endpoints = self._target.endpoints
        failures: list[str] = []
        for _ in endpoints:
            link = self._current_link()
            endpoint = endpoints[link.index]
            try:
                reply = await self._attempt(link, call)
            except _calls.Unanswered as failure:
                self._fail_over(link, failure.why)
                _calls.give_up_or_go_on(call, endpoint, failure, failures)
                continue
            why = _calls.unserved(reply)
            if why is None:
                return _calls.unwrap(call, reply)
            self._fail_over(link, why)
            failures.append(f"{endpoint}: {why}")
        raise _calls.unavailable_everywhere(call, endpoints, failures)

    def _current_link(self) -> _Link:
        if self.closed:
            endpoint = self._target.endpoint
            raise ServerUnavailable(f"the client is closed ({endpoint})", endpoint=endpoint)
        link = self.link
        if link is None:
            link = self.link = self._open_link(self._target.index)
        return link

    def _open_link(self, index: int) -> _Link:
        """Connect to endpoint ``index``, its monitor made first (``_send_when_connected``)."""
        if self._context is None:
            self._context = zmq.Context()
        endpoint = self._target.endpoints[index]
        socket = self._context.socket(zmq.DEALER)
        socket.linger = 0
        link = _Link(index, socket)
        connect_client(socket, endpoint, self._target.curve)  # after its monitor is made: no handshake missed
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(socket.fileno(), self._drain_link, link)
        self._loop.add_reader(link.watch.monitor.fileno(), self._watch_link, link)
        return link

    def _close_link(self, link: _Link) -> None:
        self.retired.discard(link)
        if self._loop is not None and not self._loop.is_closed():
            for sock in (link.socket, link.watch.monitor):
                try:
                    self._loop.remove_reader(sock.fileno())
                except Exception:  # the socket may already be unusable
                    pass
        link.watch.close()
        link.socket.close(linger=0)

    def _fail_over(self, link: _Link, why: str) -> None:
        """Give up on ``link`` (unless that was done already): the next request connects to
        the next endpoint; ``link`` closes once nothing sent on it is pending."""
        if link is not self.link:
            return
        self.link = None
        self._target.advance(link.index, why)
        link.retired = True
        if link.sent:
            self.retired.add(link)
        else:
            self._close_link(link)

    def _settled(self, link: _Link, request_id: str) -> None:
        """A request on ``link`` has its answer (or no longer waits for one)."""
        link.sent.pop(request_id, None)
        if link.retired and not link.sent and link in self.retired:
            self._close_link(link)

    async def _attempt(self, link: _Link, call: Call) -> dict[str, Any]:
        """Send ``call`` on ``link`` and wait for its reply; ``Unanswered`` if none comes."""
        loop = asyncio.get_running_loop()
        request_id = str(next(self._ids))
        frame = _calls.frame(request_id, call)
        timeout = self._target.timeout
        budget = timeout + call.wait
        deadline = loop.time() + budget
        await self._send_when_connected(link, frame, loop.time() + timeout)
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.pending[request_id] = future
        link.sent[request_id] = future
        timer = loop.call_later(max(0.0, deadline - loop.time()), expire, future)
        try:
            return await future
        except asyncio.TimeoutError:
            raise _calls.Unanswered(f"no reply within {budget:.3g}s", delivered=True) from None
        finally:
            timer.cancel()
            if self.pending.get(request_id) is future:
                del self.pending[request_id]
            self._settled(link, request_id)

    async def _send_when_connected(self, link: _Link, frame: bytes, deadline: float) -> None:
        """Send ``frame`` once ``link``'s monitor saw the handshake (not ``IMMEDIATE``: zmq drops
        the unread replies of a connection that ended with it); ``Unanswered``, not delivered,
        if it is refused or down, or none is up by the deadline."""
        loop = asyncio.get_running_loop()
        watch = link.watch
        while True:
            if self.closed:
                endpoint = self._target.endpoint
                raise ServerUnavailable(f"the client was closed ({endpoint})", endpoint=endpoint)
            if link.retired:  # another request failed over meanwhile: this one goes on there
                raise _calls.Unanswered("the client failed over from it", delivered=False)
            self._watch_link(link)
            if watch.up:
                try:
                    link.socket.send(frame, _NOBLOCK)
                    self._schedule_link_drain(link)
                    return
                except zmq.Again:  # its queue is full: rare
                    pass
                except zmq.ZMQError as exc:
                    raise _calls.Unanswered(f"socket error: {exc}", delivered=False) from None
            if watch.down is not None:
                raise _calls.Unanswered(watch.down, delivered=False)
            if loop.time() >= deadline:
                raise _calls.Unanswered(f"no connection within {self._target.timeout:.3g}s", delivered=False)
            await asyncio.sleep(_SEND_RETRY)

    def _schedule_link_drain(self, link: _Link) -> None:
        """After a send: it may have swallowed the edge that announces a reply."""
        if not link.drain_scheduled and self._loop is not None:
            link.drain_scheduled = True
            self._loop.call_soon(self._drain_link, link)

    def _drain_link(self, link: _Link) -> None:
        link.drain_scheduled = False
        if link.socket.closed:
            return
        try:
            answer_pending(link.socket, self.pending, self._target.endpoints[link.index])
        except zmq.ZMQError as exc:  # the socket is gone: nothing more will be answered on it
            self._lose(link, f"socket error: {exc}")

    def _watch_link(self, link: _Link) -> None:
        """Take in the monitor's news (its reader, and before each send): a lost connection
        fails what was sent on it and not answered before it went, at once."""
        if link.socket.closed:
            return
        lost = link.watch.lost
        try:
            link.watch.read()
        except zmq.ZMQError:
            return
        if link.watch.lost != lost:
            self._drain_link(link)
            self._lose(link, "the connection was lost before the reply")

    def _lose(self, link: _Link, why: str) -> None:
        """Every request sent on ``link`` will never be answered: each may have arrived."""
        sent, link.sent = link.sent, {}
        for request_id, future in sent.items():
            self.pending.pop(request_id, None)
            if not future.done():
                future.set_exception(_calls.Unanswered(why, delivered=True))
