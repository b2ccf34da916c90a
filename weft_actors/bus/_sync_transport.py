"""How ``Client`` moves a request: one DEALER socket per thread, one request out on each.

ZeroMQ sockets must not be shared between threads, so each thread gets its own socket
(``_Channel``) from the client's one context. When a request times out that socket is thrown
away (linger 0) and a fresh one is made, so a late reply can never be taken for the answer to
the next request.

With several endpoints the sockets are watched by a ``ConnectionWatch``: a request is sent
only once its monitor saw the handshake (not queued for a dead peer; not ``IMMEDIATE``,
with which zmq drops the replies not read yet when a connection ends: a stopping
supervisor's last answers), and a refused connection or one lost under a request is noticed
at once rather than at the timeout (a reply that came before the loss still counts);
``_calls`` says which requests may then go on to the next endpoint. With one endpoint none
of this exists: its requests and sockets are what they always were.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import zmq

from . import _calls
from ._calls import Call
from ._curve import connect_client
from ._request_core import ConnectionWatch, Target, matching_reply, unavailable

__all__ = ["ThreadTransport"]

_NOBLOCK = int(zmq.NOBLOCK)
_SEND_RETRY = 0.01
"""Seconds between send attempts while the one connection is up but its queue is full."""


class _Channel:
    """One thread's DEALER socket and its request counter; with several endpoints, which one
    it is connected to (``index``) and the watch on its connection."""

    __slots__ = ("socket", "thread", "busy", "next_id", "index", "watch")

    def __init__(self, socket: zmq.Socket, thread: threading.Thread, index: int = 0, watch: ConnectionWatch | None = None) -> None:
        self.socket = socket
        self.thread = thread
        self.busy = False
        self.next_id = 0
        self.index = index
        self.watch = watch

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
        self.socket.close(linger=0)


class ThreadTransport:
    """``Client``'s sockets and its request path; safe to share between threads. ``request``
    returns the caller's value or raises as ``Client`` documents."""

    def __init__(self, target: Target) -> None:
        self._target = target
        self._context = zmq.Context()
        self._local = threading.local()
        self._lock = threading.Lock()
        self.channels: list[_Channel] = []
        self.closed = False

    def close(self) -> None:
        """Close every thread's socket and terminate the context. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            for channel in self.channels:
                if not channel.busy:
                    channel.close()
            self.channels = [channel for channel in self.channels if channel.busy]
        # Threads still waiting on a reply get ContextTerminated, close their socket and
        # raise ServerUnavailable; term() returns once they have.
        self._context.term()

    def _new_socket(self, endpoint: str) -> zmq.Socket:
        socket = self._context.socket(zmq.DEALER)
        socket.linger = 0
        if not self._target.failover:
            socket.sndtimeo = int(self._target.timeout * 1000)
            connect_client(socket, endpoint, self._target.curve)
        return socket

    def _new_channel(self) -> _Channel:
        index = self._target.index
        endpoint = self._target.endpoints[index]
        socket = self._new_socket(endpoint)
        if not self._target.failover:
            return _Channel(socket, threading.current_thread(), index)
        watch = ConnectionWatch(socket)
        connect_client(socket, endpoint, self._target.curve)  # after its monitor is made: no handshake missed
        return _Channel(socket, threading.current_thread(), index, watch)

    def _acquire(self, op: str) -> _Channel:
        channel: _Channel | None = getattr(self._local, "channel", None)
        with self._lock:
            if self.closed:
                raise unavailable(self._target.endpoint, op, "the client is closed")
            if channel is not None and channel.index != self._target.index:  # the client failed over since
                self._forget(channel)
                channel = None
            if channel is None:
                self._reap_dead_threads()
                channel = self._new_channel()
                self.channels.append(channel)
                self._local.channel = channel
            channel.busy = True
        return channel

    def _forget(self, channel: _Channel) -> None:
        """Close this thread's ``channel`` and drop it (the lock held)."""
        channel.close()
        self.channels = [c for c in self.channels if c is not channel]
        if getattr(self._local, "channel", None) is channel:
            del self._local.channel

    def batch_channel(self) -> _Channel | None:
        """A channel of a batch's own (``_sync_many``), not the thread's: the caller may make
        other calls between two of its items. None once the client is closed; ``close()``
        closes it like any other while it is not busy."""
        with self._lock:
            if self.closed:
                return None
            channel = _Channel(self._new_socket(self._target.endpoint), threading.current_thread())
            self.channels.append(channel)
        return channel

    def drop(self, channel: _Channel) -> None:
        """Close a batch's ``channel`` and forget it."""
        with self._lock:
            channel.close()
            self.channels = [c for c in self.channels if c is not channel]

    def _reap_dead_threads(self) -> None:
        # Sockets of threads that have exited would otherwise live as long as the client.
        alive = []
        for channel in self.channels:
            if channel.thread.is_alive() or channel.busy:
                alive.append(channel)
            else:
                channel.close()
        self.channels = alive

    def _release(self, channel: _Channel, *, discard: bool) -> None:
        with self._lock:
            channel.busy = False
            if discard or self.closed:
                self._forget(channel)

    def request(self, call: Call) -> Any:
        target = self._target
        if target.failover:
            return self._request_failover(call)
        channel = self._acquire(call.op)
        discard = True
        try:
            channel.next_id += 1
            request_id = str(channel.next_id)
            frame = _calls.frame(request_id, call)
            budget = target.timeout + call.wait
            deadline = time.monotonic() + budget
            socket = channel.socket
            try:
                socket.send(frame)
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not socket.poll(max(1, int(remaining * 1000)), zmq.POLLIN):
                        raise unavailable(target.endpoint, call.op, f"no reply within {budget:.3g}s")
                    reply = matching_reply(socket, request_id, target.endpoint)
                    if reply is not None:
                        break
            except zmq.Again:
                raise unavailable(target.endpoint, call.op, f"could not send within {target.timeout:.3g}s") from None
            except zmq.ContextTerminated:
                raise unavailable(target.endpoint, call.op, "the client was closed") from None
            except zmq.ZMQError as exc:
                raise unavailable(target.endpoint, call.op, f"socket error: {exc}") from None
            discard = False
        finally:
            self._release(channel, discard=discard)
        return _calls.unwrap(call, reply)

    # -- several endpoints ----------------------------------------------------------------

    def _request_failover(self, call: Call) -> Any:
        """``request`` with several endpoints: the current one first, then each other once,
        as long as ``_calls`` says the request may go on (else ``OutcomeUnknown``)."""
        endpoints = self._target.endpoints
        failures: list[str] = []
        for _ in endpoints:
            channel = self._acquire(call.op)
            endpoint = endpoints[channel.index]
            discard = True
            try:
                reply = self._attempt(channel, call)
                discard = False
            except _calls.Unanswered as failure:
                self._fail_over(channel.index, failure.why)
                _calls.give_up_or_go_on(call, endpoint, failure, failures)
                continue
            finally:
                self._release(channel, discard=discard)
            why = _calls.unserved(reply)
            if why is None:
                return _calls.unwrap(call, reply)
            self._fail_over(channel.index, why)
            failures.append(f"{endpoint}: {why}")
        raise _calls.unavailable_everywhere(call, endpoints, failures)

    def _fail_over(self, index: int, why: str) -> None:
        """Move on from endpoint ``index``, unless another thread already has."""
        with self._lock:
            if self._target.index != index or self.closed:
                return
            self._target.advance(index, why)

    def _attempt(self, channel: _Channel, call: Call) -> dict[str, Any]:
        """Send ``call`` on ``channel`` and wait for its reply; ``Unanswered`` if none comes."""
        watch = channel.watch
        assert watch is not None
        timeout = self._target.timeout
        channel.next_id += 1
        request_id = str(channel.next_id)
        frame = _calls.frame(request_id, call)
        started = time.monotonic()
        try:
            lost = self._send_when_connected(channel.socket, watch, frame, started + timeout)
        except zmq.ContextTerminated:
            raise unavailable(self._target.endpoint, call.op, "the client was closed") from None
        except zmq.ZMQError as exc:
            raise _calls.Unanswered(f"socket error: {exc}", delivered=False) from None
        try:
            return self._await_reply(channel.socket, watch, lost, request_id, timeout + call.wait, started)
        except zmq.ContextTerminated:
            raise unavailable(self._target.endpoint, call.op, "the client was closed") from None
        except zmq.ZMQError as exc:
            raise _calls.Unanswered(f"socket error: {exc}", delivered=True) from None

    def _send_when_connected(self, socket: zmq.Socket, watch: ConnectionWatch, frame: bytes, deadline: float) -> int:
        """Send ``frame`` once a connection is up (the monitor saw its handshake); ``Unanswered``,
        not delivered, if the connection is refused or none is up by the deadline. Returns the
        watch's ``lost`` count just before the send."""
        while True:
            watch.read()
            lost = watch.lost
            if watch.up:
                try:
                    socket.send(frame, _NOBLOCK)
                    return lost
                except zmq.Again:  # its queue is full: rare
                    pass
            if watch.down is not None:
                raise _calls.Unanswered(watch.down, delivered=False)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _calls.Unanswered(f"no connection within {self._target.timeout:.3g}s", delivered=False)
            watch.monitor.poll(max(1, int(min(remaining, _SEND_RETRY) * 1000)), zmq.POLLIN)

    def _await_reply(
        self, socket: zmq.Socket, watch: ConnectionWatch, lost: int, request_id: str, budget: float, started: float
    ) -> dict[str, Any]:
        """The reply to ``request_id``; ``Unanswered``, maybe delivered, if the connection it
        went out on is lost first (its reply can never come) or ``budget`` seconds pass."""
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        poller.register(watch.monitor, zmq.POLLIN)
        deadline = started + budget
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _calls.Unanswered(f"no reply within {budget:.3g}s", delivered=True)
            events = dict(poller.poll(max(1, int(remaining * 1000))))
            if socket in events:
                reply = matching_reply(socket, request_id, self._target.endpoint)
                if reply is not None:
                    return reply
            if watch.monitor in events:
                watch.read()
                if watch.lost != lost:
                    reply = matching_reply(socket, request_id, self._target.endpoint)  # it came before the loss
                    if reply is not None:
                        return reply
                    raise _calls.Unanswered("the connection was lost before the reply", delivered=True)
