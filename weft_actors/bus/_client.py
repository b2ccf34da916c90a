"""``Client``: the synchronous, thread-safe ZeroMQ client of a weft_actors supervisor.

ZeroMQ sockets must not be shared between threads, so each thread gets its own DEALER
socket from the client's one context. A thread has at most one request in flight on its
socket; when a request times out that socket is thrown away (linger 0) and a fresh one is
made, so a late reply can never be taken for the answer to the next request.

Given several endpoints (supervisors sharing one store, each able to serve any workflow) the
client asks one at a time, the first until it fails, and fails over to the next when a
request gets no answer (``_calls``: which requests are sent again). Those sockets are made
with ``IMMEDIATE`` (a request waits for a live connection instead of queueing for a dead
peer) and watched by a socket monitor (``ConnectionWatch``), so a refused connection or one
lost under a request is noticed at once rather than at the timeout. With one endpoint none of
this exists: its requests and sockets are what they always were.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from typing import Any, Sequence

import zmq

from .._schedule_handle import SCHEDULE_TYPE, ScheduleHandle, new_schedule
from ..errors import ServerUnavailable
from . import _calls
from ._calls import Call
from ._curve import CurveKeys, connect_client, resolve_curve
from ._frames import readable
from ._protocol import decode_reply

__all__ = ["Client", "ClientHandle", "DEFAULT_ENDPOINT"]

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


class ConnectionWatch:
    """A failover socket's one connection as its monitor reports it (used by both clients):
    ``down`` says why it is not up (lost, refused, a failed handshake) until a handshake
    succeeds again, None while it is up or still connecting; ``lost`` counts connections
    lost, so a request knows whether the one it went out on broke."""

    __slots__ = ("socket", "monitor", "down", "lost")

    def __init__(self, socket: zmq.Socket) -> None:
        self.socket = socket
        self.monitor = socket.get_monitor_socket(_UP_EVENTS | _DOWN_EVENTS)
        self.monitor.linger = 0
        self.down: str | None = None
        self.lost = 0

    def read(self) -> None:
        """Take in every event the monitor has queued, without blocking."""
        monitor = self.monitor
        while readable(monitor):
            event = struct.unpack_from("=H", monitor.recv_multipart(_NOBLOCK)[0])[0]
            if event & _UP_EVENTS:
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


def _unavailable(endpoint: str, op: str, why: str) -> ServerUnavailable:
    return ServerUnavailable(f"{op}: {why} ({endpoint})", endpoint=endpoint, op=op)


class Client:
    """Talks to the supervisor at ``endpoint``; safe to share between threads.

    ``timeout`` bounds every request (a ``result`` request gets the time the server may hold
    it on top); a request without a reply in that time raises ``ServerUnavailable``. With
    ``curve_server_key`` the connection uses CURVE (see ``resolve_curve`` for key forms).
    Use it as a context manager or call ``close()``; calls still in flight on other threads
    when it closes fail with ``ServerUnavailable``.

    ``endpoint`` may name several supervisors of one shared store (a list or tuple, or one
    string joined by commas). They are asked one at a time, in order, the first for as long as
    it answers; ``endpoint`` is the one asked now. A request that gets no answer (no reply
    within ``timeout``, a refused or lost connection, a supervisor with no shard ready) moves
    the client on to the next and is tried there: any request that surely never arrived,
    else only reads, updates and starts with an id and ``if_exists="return"`` (``_calls.
    resendable``); another write raises ``OutcomeUnknown`` instead of being applied twice.
    An error answer (``WorkflowNotFound``, ...) is the answer. ``timeout`` then bounds each
    attempt, and each endpoint is tried once per call before ``ServerUnavailable``.
    """

    def __init__(
        self,
        endpoint: str | Sequence[str] = DEFAULT_ENDPOINT,
        *,
        timeout: float = 10.0,
        curve_server_key: bytes | str | os.PathLike[str] | None = None,
        curve_public_key: bytes | str | os.PathLike[str] | None = None,
        curve_secret_key: bytes | str | os.PathLike[str] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        self.endpoints = _calls.endpoint_list(endpoint)
        self.endpoint = self.endpoints[0]
        self._failover = len(self.endpoints) > 1
        self._index = 0
        """Which of ``endpoints`` requests go to now (always 0 with one)."""
        self.timeout = float(timeout)
        self._curve: CurveKeys | None = resolve_curve(curve_server_key, curve_public_key, curve_secret_key)
        self._context = zmq.Context()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._channels: list[_Channel] = []
        self._closed = False

    def __repr__(self) -> str:
        shown = self.endpoint if not self._failover else ",".join(self.endpoints)
        return f"<Client {shown!r}{' closed' if self._closed else ''}>"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close every thread's socket and terminate the context. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for channel in self._channels:
                if not channel.busy:
                    channel.close()
            self._channels = [channel for channel in self._channels if channel.busy]
        # Threads still waiting on a reply get ContextTerminated, close their socket and
        # raise ServerUnavailable; term() returns once they have.
        self._context.term()

    # -- the request path -----------------------------------------------------------------

    def _new_socket(self, endpoint: str) -> zmq.Socket:
        socket = self._context.socket(zmq.DEALER)
        socket.linger = 0
        if self._failover:
            socket.immediate = 1  # no connection up: the send fails, so the request surely never left
        else:
            socket.sndtimeo = int(self.timeout * 1000)
        connect_client(socket, endpoint, self._curve)
        return socket

    def _new_channel(self) -> _Channel:
        index = self._index
        socket = self._new_socket(self.endpoints[index])
        watch = ConnectionWatch(socket) if self._failover else None
        return _Channel(socket, threading.current_thread(), index, watch)

    def _acquire(self, op: str) -> _Channel:
        channel: _Channel | None = getattr(self._local, "channel", None)
        with self._lock:
            if self._closed:
                raise _unavailable(self.endpoint, op, "the client is closed")
            if channel is not None and channel.index != self._index:  # the client failed over since
                self._forget(channel)
                channel = None
            if channel is None:
                self._reap_dead_threads()
                channel = self._new_channel()
                self._channels.append(channel)
                self._local.channel = channel
            channel.busy = True
        return channel

    def _forget(self, channel: _Channel) -> None:
        """Close this thread's ``channel`` and drop it (the lock held)."""
        channel.close()
        self._channels = [c for c in self._channels if c is not channel]
        if getattr(self._local, "channel", None) is channel:
            del self._local.channel

    def _reap_dead_threads(self) -> None:
        # Sockets of threads that have exited would otherwise live as long as the client.
        alive = []
        for channel in self._channels:
            if channel.thread.is_alive() or channel.busy:
                alive.append(channel)
            else:
                channel.close()
        self._channels = alive

    def _release(self, channel: _Channel, *, discard: bool) -> None:
        with self._lock:
            channel.busy = False
            if discard or self._closed:
                self._forget(channel)

    def _request(self, call: Call) -> Any:
        if self._failover:
            return self._request_failover(call)
        channel = self._acquire(call.op)
        discard = True
        try:
            channel.next_id += 1
            request_id = str(channel.next_id)
            frame = _calls.frame(request_id, call)
            budget = self.timeout + call.wait
            deadline = time.monotonic() + budget
            socket = channel.socket
            try:
                socket.send(frame)
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not socket.poll(max(1, int(remaining * 1000)), zmq.POLLIN):
                        raise _unavailable(self.endpoint, call.op, f"no reply within {budget:.3g}s")
                    reply = self._matching_reply(socket, request_id)
                    if reply is not None:
                        break
            except zmq.Again:
                raise _unavailable(self.endpoint, call.op, f"could not send within {self.timeout:.3g}s") from None
            except zmq.ContextTerminated:
                raise _unavailable(self.endpoint, call.op, "the client was closed") from None
            except zmq.ZMQError as exc:
                raise _unavailable(self.endpoint, call.op, f"socket error: {exc}") from None
            discard = False
        finally:
            self._release(channel, discard=discard)
        return _calls.unwrap(call, reply)

    # -- several endpoints ----------------------------------------------------------------

    def _request_failover(self, call: Call) -> Any:
        """``_request`` with several endpoints: the current one first, then each other once,
        as long as ``_calls`` says the request may go on (else ``OutcomeUnknown``)."""
        failures: list[str] = []
        for _ in self.endpoints:
            channel = self._acquire(call.op)
            endpoint = self.endpoints[channel.index]
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
        raise _calls.unavailable_everywhere(call, self.endpoints, failures)

    def _fail_over(self, index: int, why: str) -> None:
        """Move on from endpoint ``index``, unless another thread already has."""
        with self._lock:
            if self._index != index or self._closed:
                return
            self._index = (index + 1) % len(self.endpoints)
            self.endpoint = self.endpoints[self._index]
        log.warning("supervisor %s: %s; failing over to %s", self.endpoints[index], why, self.endpoint)

    def _attempt(self, channel: _Channel, call: Call) -> dict[str, Any]:
        """Send ``call`` on ``channel`` and wait for its reply; ``Unanswered`` if none comes."""
        watch = channel.watch
        assert watch is not None
        channel.next_id += 1
        request_id = str(channel.next_id)
        frame = _calls.frame(request_id, call)
        started = time.monotonic()
        try:
            lost = self._send_when_connected(channel.socket, watch, frame, started + self.timeout)
        except zmq.ContextTerminated:
            raise _unavailable(self.endpoint, call.op, "the client was closed") from None
        except zmq.ZMQError as exc:
            raise _calls.Unanswered(f"socket error: {exc}", delivered=False) from None
        try:
            return self._await_reply(channel.socket, watch, lost, request_id, self.timeout + call.wait, started)
        except zmq.ContextTerminated:
            raise _unavailable(self.endpoint, call.op, "the client was closed") from None
        except zmq.ZMQError as exc:
            raise _calls.Unanswered(f"socket error: {exc}", delivered=True) from None

    def _send_when_connected(self, socket: zmq.Socket, watch: ConnectionWatch, frame: bytes, deadline: float) -> int:
        """Send ``frame`` once a connection is up (``IMMEDIATE``: until then a send fails);
        ``Unanswered``, not delivered, if the connection is refused or none is up by the
        deadline. Returns the watch's ``lost`` count just before the send."""
        poller: zmq.Poller | None = None
        while True:
            watch.read()
            lost = watch.lost
            try:
                socket.send(frame, _NOBLOCK)
                return lost
            except zmq.Again:
                pass
            if watch.down is not None:
                raise _calls.Unanswered(watch.down, delivered=False)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _calls.Unanswered(f"no connection within {self.timeout:.3g}s", delivered=False)
            if poller is None:
                poller = zmq.Poller()
                poller.register(socket, zmq.POLLOUT)
                poller.register(watch.monitor, zmq.POLLIN)
            poller.poll(max(1, int(remaining * 1000)))

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
                reply = self._matching_reply(socket, request_id)
                if reply is not None:
                    return reply
            if watch.monitor in events:
                watch.read()
                if watch.lost != lost:
                    raise _calls.Unanswered("the connection was lost before the reply", delivered=True)

    def _matching_reply(self, socket: zmq.Socket, request_id: str) -> dict[str, Any] | None:
        """The reply to ``request_id`` among those queued on ``socket``, if one is."""
        while readable(socket):
            frames = socket.recv_multipart(_NOBLOCK)
            try:
                reply = decode_reply(frames[-1])
            except Exception:
                log.warning("discarding a malformed reply from %s", self.endpoint)
                continue
            if reply.get("id") == request_id or (reply.get("id") is None and "error" in reply):
                return reply
            log.debug("discarding stale reply %r (waiting for %s)", reply.get("id"), request_id)
        return None

    # -- client calls ---------------------------------------------------------------------

    def start(
        self,
        workflow: Any,
        *args: Any,
        id: str | None = None,
        if_exists: str = "error",
        start_delay: float | None = None,
        start_at: Any = None,
        execution_timeout: float | None = None,
        memo: Any = None,
        priority: int | None = None,
    ) -> ClientHandle:
        """Start ``workflow(*args)`` (a name or a ``@workflow`` function); returns once the
        server has committed the start. ``start_at`` is epoch seconds or a datetime; ``priority``
        (-128 to 127) orders the queue of a type with ``concurrency``: higher first."""
        call = _calls.start_call(
            workflow, args, id=id, if_exists=if_exists, start_delay=start_delay, start_at=start_at,
            execution_timeout=execution_timeout, memo=memo, priority=priority,
        )
        wid, run_id = self._request(call)
        return ClientHandle._make(self, wid, run_id)

    def execute(self, workflow: Any, *args: Any, timeout: float | None = None, **start_options: Any) -> Any:
        """Start ``workflow(*args)`` and return its result, in one round trip for a workflow
        that ends within 30 s (longer ones go on polling like ``result``). ``start_options``
        are ``start``'s. Raises like ``result``, and ``TimeoutError`` if it does not end
        within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = _calls.MAX_RESULT_WAIT if timeout is None else timeout
        call = _calls.execute_call(workflow, args, wait, **start_options)
        ok = self._request(call)
        done, value = _calls.result_value(ok)
        if done:
            return value
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        return ClientHandle._make(self, ok["id"], ok.get("run_id")).result(remaining)

    def signal_with_start(
        self, workflow: Any, *args: Any, signal: str, payload: Any = None, **start_options: Any
    ) -> ClientHandle:
        """Signal the workflow with ``start_options["id"]``, starting it first if it does not
        exist, in one atomic step on the server."""
        call = _calls.start_call(workflow, args, signal=signal, payload=payload, **start_options)
        wid, run_id = self._request(call)
        return ClientHandle._make(self, wid, run_id)

    def get_handle(self, id: str) -> ClientHandle:
        """A handle on workflow ``id``; no I/O happens until one of its methods is called."""
        return ClientHandle._make(self, id, None)

    def create_schedule(self, id: str, workflow: Any, *args: Any, spec: Any = None, **options: Any) -> ScheduleHandle:
        """Create schedule ``id`` (as ``Engine.create_schedule``); returns once it is durable."""
        return ScheduleHandle(self.start(SCHEDULE_TYPE, new_schedule(workflow, args, spec, options), id=id))

    def get_schedule(self, id: str) -> ScheduleHandle:
        """A handle on schedule ``id``; no I/O happens until one of its methods is called."""
        return ScheduleHandle(self.get_handle(id))

    def list(self, status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        """One page of workflows, ``{"items": [...], "cursor": next_or_None}``."""
        return self._request(_calls.list_call(status, type, limit, cursor))

    def stats(self) -> dict[str, Any]:
        return self._request(_calls.stats_call())

    def ping(self) -> str:
        """``"pong"`` if the server answers; ``ServerUnavailable`` if not."""
        return self._request(_calls.ping_call())


class ClientHandle:
    """A ``Client``'s handle on one workflow id, the synchronous twin of ``WorkflowHandle``.
    Made by ``Client.start``/``Client.get_handle``; no public constructor."""

    __slots__ = ("_client", "id", "run_id")

    _client: Client
    id: str
    run_id: str | None

    @classmethod
    def _make(cls, client: Client, workflow_id: str, run_id: str | None) -> ClientHandle:
        handle = cls.__new__(cls)
        handle._client = client
        handle.id = workflow_id
        handle.run_id = run_id
        return handle

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("ClientHandle has no public constructor; use Client.get_handle(id)")

    def __repr__(self) -> str:
        return f"<ClientHandle {self.id!r}>"

    def signal(self, name: str, payload: Any = None, *, request_id: str | None = None) -> None:
        """Returns once the signal is committed to the workflow's durable inbox. The same
        ``request_id`` sent twice is delivered once (one is made if not given, so a failover
        that sends it again cannot deliver it twice)."""
        self._client._request(_calls.signal_call(self.id, name, payload, request_id))

    def query(self, name: str, *args: Any) -> Any:
        return self._client._request(_calls.query_call(self.id, name, args))

    def update(self, name: str, *args: Any, request_id: str | None = None) -> Any:
        """Run update handler ``name`` and return its result; the same ``request_id`` applied
        twice runs the handler once (one is generated when not given)."""
        return self._client._request(_calls.update_call(self.id, name, args, request_id))

    def result(self, timeout: float | None = None) -> Any:
        """The workflow's result; raises ``WorkflowFailed`` & co. for other endings and the
        builtin ``TimeoutError`` if it does not end within ``timeout`` seconds (``None``:
        wait for ever). Long-polls the server in steps of at most 30 s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = _calls.MAX_RESULT_WAIT if deadline is None else deadline - time.monotonic()
            done, value = _calls.result_value(self._client._request(_calls.result_call(self.id, remaining)))
            if done:
                return value
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"workflow {self.id!r} did not finish within {timeout}s")

    def cancel(self) -> None:
        """Request cancellation; the workflow sees it at its next await point."""
        self._client._request(_calls.cancel_call(self.id))

    def terminate(self, reason: str | None = None) -> None:
        """End the workflow at once, without running any more of its code."""
        self._client._request(_calls.terminate_call(self.id, reason))

    def lift_quarantine(self) -> None:
        """Let a quarantined workflow run again: it goes back to ``running`` and a live shard
        takes it over (``InvalidRequest`` if it is not quarantined)."""
        self._client._request(_calls.lift_quarantine_call(self.id))

    def describe(self) -> dict[str, Any]:
        return self._client._request(_calls.describe_call(self.id))
