"""``AsyncClient``: the asyncio client, many requests pipelined on one DEALER socket.

The socket is a plain (non-asyncio) zmq socket whose file descriptor the event loop watches:
when it turns readable every queued reply is taken in one go (zmq's descriptor is
edge-triggered, so until ``EVENTS`` shows no input), and each resolves the future registered
under its request id. Measured here, that is about 2.5x ``zmq.asyncio``'s rate. Any number
of coroutines can have requests in flight at once and replies may come back in any order; a
reply whose id is no longer registered (its request timed out or was cancelled) is dropped.

Given several endpoints the client fails over between them as ``Client`` does (``_calls``
holds the policy): each connection is a ``_Link``, one socket and the monitor that watches
it, and requests go on the current one. A link given up on (a request on it got no answer)
stays open for the requests still in flight on it, and closes once they are answered or time
out; a lost connection fails those at once. With one endpoint there are no links: the one
socket and its requests are what they always were.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import Any, Sequence

import zmq

from .._schedule_handle import SCHEDULE_TYPE, ScheduleHandle, new_schedule
from ..errors import ServerUnavailable
from . import _calls
from ._calls import Call
from ._client import DEFAULT_ENDPOINT, ConnectionWatch
from ._curve import CurveKeys, connect_client, resolve_curve
from ._frames import readable, recv_frames
from ._protocol import decode_reply

__all__ = ["AsyncClient", "AsyncClientHandle"]

log = logging.getLogger("weft_actors.bus")

_NOBLOCK = int(zmq.NOBLOCK)
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


class AsyncClient:
    """The asyncio twin of ``Client``: same calls, awaitable, except ``get_handle``.

    The socket is made on first use, in the running event loop, and belongs to that loop.
    ``close()`` (or leaving ``async with``) fails every request still pending with
    ``ServerUnavailable``; none is left hanging. ``endpoint`` may name several supervisors,
    with ``Client``'s failover.
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
        self._link: _Link | None = None
        self._retired: set[_Link] = set()
        self.timeout = float(timeout)
        self._curve: CurveKeys | None = resolve_curve(curve_server_key, curve_public_key, curve_secret_key)
        self._context: zmq.Context | None = None
        self._socket: zmq.Socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_scheduled = False
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._closed = False

    def __repr__(self) -> str:
        shown = self.endpoint if not self._failover else ",".join(self.endpoints)
        return f"<AsyncClient {shown!r}{' closed' if self._closed else ''}>"

    async def __aenter__(self) -> AsyncClient:
        if self._failover:
            self._current_link()
        else:
            self._open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Fail what is pending, close the socket and the context. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._fail_pending(ServerUnavailable(f"the client was closed ({self.endpoint})", endpoint=self.endpoint))
        self._drop_socket()
        for link in [self._link, *self._retired]:
            if link is not None:
                self._close_link(link)
        self._link = None
        if self._context is not None:
            self._context.term()
            self._context = None

    def _fail_pending(self, error: ServerUnavailable) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    def _open(self) -> zmq.Socket:
        if self._closed:
            raise ServerUnavailable(f"the client is closed ({self.endpoint})", endpoint=self.endpoint)
        if self._socket is None:
            if self._context is None:
                self._context = zmq.Context()
            socket = self._context.socket(zmq.DEALER)
            socket.linger = 0
            connect_client(socket, self.endpoint, self._curve)
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(socket.fileno(), self._drain)
            self._socket = socket
        return self._socket

    def _drop_socket(self) -> None:
        socket, self._socket = self._socket, None
        if socket is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.remove_reader(socket.fileno())
            except Exception:  # the socket may already be unusable
                pass
        socket.close(linger=0)

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
        try:
            _answer_pending(socket, self._pending, self.endpoint)
        except zmq.ZMQError as exc:  # the socket is gone: nothing more will be answered
            if not self._closed:
                log.warning("client socket for %s failed: %s", self.endpoint, exc)
            self._drop_socket()  # the next request makes a fresh one
            self._fail_pending(ServerUnavailable(f"connection lost: {exc} ({self.endpoint})", endpoint=self.endpoint))

    def _try_send(self, socket: zmq.Socket, frame: bytes, call: Call) -> bool:
        """Send at once; False if the socket's queue is full."""
        try:
            socket.send(frame, _NOBLOCK)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            raise ServerUnavailable(f"{call.op}: socket error: {exc} ({self.endpoint})", endpoint=self.endpoint, op=call.op) from None
        self._schedule_drain()
        return True

    async def _send_when_room(self, socket: zmq.Socket, frame: bytes, call: Call, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        while not self._try_send(socket, frame, call):
            if loop.time() >= deadline:
                raise ServerUnavailable(f"{call.op}: could not send within the timeout ({self.endpoint})", endpoint=self.endpoint, op=call.op)
            await asyncio.sleep(_SEND_RETRY)
            if self._closed or socket is not self._socket:
                raise ServerUnavailable(f"{call.op}: the client was closed ({self.endpoint})", endpoint=self.endpoint, op=call.op)

    async def _request(self, call: Call) -> Any:
        if self._failover:
            return await self._request_failover(call)
        socket = self._open()
        loop = asyncio.get_running_loop()
        request_id = str(next(self._ids))
        frame = _calls.frame(request_id, call)
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[request_id] = future
        budget = self.timeout + call.wait
        timer = loop.call_later(budget, _expire, future)
        try:
            if not self._try_send(socket, frame, call):  # its queue is full: rare
                await self._send_when_room(socket, frame, call, loop.time() + budget)
            reply = await future
        except asyncio.TimeoutError:
            raise ServerUnavailable(
                f"{call.op}: no reply within {budget:.3g}s ({self.endpoint})", endpoint=self.endpoint, op=call.op
            ) from None
        finally:
            timer.cancel()
            if self._pending.get(request_id) is future:
                del self._pending[request_id]
        return _calls.unwrap(call, reply)

    # -- several endpoints ----------------------------------------------------------------

    async def _request_failover(self, call: Call) -> Any:
        """``_request`` with several endpoints: the current one first, then each other once,
        as long as ``_calls`` says the request may go on (else ``OutcomeUnknown``)."""
        failures: list[str] = []
        for _ in self.endpoints:
            link = self._current_link()
            endpoint = self.endpoints[link.index]
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
        raise _calls.unavailable_everywhere(call, self.endpoints, failures)

    def _current_link(self) -> _Link:
        if self._closed:
            raise ServerUnavailable(f"the client is closed ({self.endpoint})", endpoint=self.endpoint)
        link = self._link
        if link is None:
            link = self._link = self._open_link(self._index)
        return link

    def _open_link(self, index: int) -> _Link:
        """Connect to endpoint ``index``; ``IMMEDIATE``: no connection up, no send."""
        if self._context is None:
            self._context = zmq.Context()
        endpoint = self.endpoints[index]
        socket = self._context.socket(zmq.DEALER)
        socket.linger = 0
        socket.immediate = 1
        connect_client(socket, endpoint, self._curve)
        link = _Link(index, socket)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(socket.fileno(), self._drain_link, link)
        self._loop.add_reader(link.watch.monitor.fileno(), self._watch_link, link)
        return link

    def _close_link(self, link: _Link) -> None:
        self._retired.discard(link)
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
        if link is not self._link:
            return
        self._link = None
        self._index = (link.index + 1) % len(self.endpoints)
        self.endpoint = self.endpoints[self._index]
        log.warning("supervisor %s: %s; failing over to %s", self.endpoints[link.index], why, self.endpoint)
        link.retired = True
        if link.sent:
            self._retired.add(link)
        else:
            self._close_link(link)

    def _settled(self, link: _Link, request_id: str) -> None:
        """A request on ``link`` has its answer (or no longer waits for one)."""
        link.sent.pop(request_id, None)
        if link.retired and not link.sent and link in self._retired:
            self._close_link(link)

    async def _attempt(self, link: _Link, call: Call) -> dict[str, Any]:
        """Send ``call`` on ``link`` and wait for its reply; ``Unanswered`` if none comes."""
        loop = asyncio.get_running_loop()
        request_id = str(next(self._ids))
        frame = _calls.frame(request_id, call)
        budget = self.timeout + call.wait
        deadline = loop.time() + budget
        await self._send_when_connected(link, frame, loop.time() + self.timeout)
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending[request_id] = future
        link.sent[request_id] = future
        timer = loop.call_later(max(0.0, deadline - loop.time()), _expire, future)
        try:
            return await future
        except asyncio.TimeoutError:
            raise _calls.Unanswered(f"no reply within {budget:.3g}s", delivered=True) from None
        finally:
            timer.cancel()
            if self._pending.get(request_id) is future:
                del self._pending[request_id]
            self._settled(link, request_id)

    async def _send_when_connected(self, link: _Link, frame: bytes, deadline: float) -> None:
        """Send ``frame`` once ``link``'s connection is up; ``Unanswered``, not delivered, if
        it is refused or down, or none is up by the deadline."""
        loop = asyncio.get_running_loop()
        watch = link.watch
        while True:
            if self._closed:
                raise ServerUnavailable(f"the client was closed ({self.endpoint})", endpoint=self.endpoint)
            if link.retired:  # another request failed over meanwhile: this one goes on there
                raise _calls.Unanswered("the client failed over from it", delivered=False)
            self._watch_link(link)
            try:
                link.socket.send(frame, _NOBLOCK)
                self._schedule_link_drain(link)
                return
            except zmq.Again:
                pass
            except zmq.ZMQError as exc:
                raise _calls.Unanswered(f"socket error: {exc}", delivered=False) from None
            if watch.down is not None:
                raise _calls.Unanswered(watch.down, delivered=False)
            if loop.time() >= deadline:
                raise _calls.Unanswered(f"no connection within {self.timeout:.3g}s", delivered=False)
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
            _answer_pending(link.socket, self._pending, self.endpoints[link.index])
        except zmq.ZMQError as exc:  # the socket is gone: nothing more will be answered on it
            self._lose(link, f"socket error: {exc}")

    def _watch_link(self, link: _Link) -> None:
        """Take in the monitor's news (its reader, and before each send): a lost connection
        fails what was sent on it, at once."""
        if link.socket.closed:
            return
        lost = link.watch.lost
        try:
            link.watch.read()
        except zmq.ZMQError:
            return
        if link.watch.lost != lost:
            self._lose(link, "the connection was lost before the reply")

    def _lose(self, link: _Link, why: str) -> None:
        """Every request sent on ``link`` will never be answered: each may have arrived."""
        sent, link.sent = link.sent, {}
        for request_id, future in sent.items():
            self._pending.pop(request_id, None)
            if not future.done():
                future.set_exception(_calls.Unanswered(why, delivered=True))

    # -- client calls ---------------------------------------------------------------------

    async def start(
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
    ) -> AsyncClientHandle:
        """Start ``workflow(*args)`` (a name or a ``@workflow`` function); returns once the
        server has committed the start. ``start_at`` is epoch seconds or a datetime; ``priority``
        (-128 to 127) orders the queue of a type with ``concurrency``: higher first."""
        call = _calls.start_call(
            workflow, args, id=id, if_exists=if_exists, start_delay=start_delay, start_at=start_at,
            execution_timeout=execution_timeout, memo=memo, priority=priority,
        )
        wid, run_id = await self._request(call)
        return AsyncClientHandle._make(self, wid, run_id)

    async def execute(self, workflow: Any, *args: Any, timeout: float | None = None, **start_options: Any) -> Any:
        """Start ``workflow(*args)`` and return its result, in one round trip for a workflow
        that ends within 30 s (longer ones go on polling like ``result``). ``start_options``
        are ``start``'s. Raises like ``result``, and ``TimeoutError`` if it does not end
        within ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        wait = _calls.MAX_RESULT_WAIT if timeout is None else timeout
        call = _calls.execute_call(workflow, args, wait, **start_options)
        ok = await self._request(call)
        done, value = _calls.result_value(ok)
        if done:
            return value
        remaining = None if deadline is None else max(0.0, deadline - loop.time())
        return await AsyncClientHandle._make(self, ok["id"], ok.get("run_id")).result(remaining)

    async def signal_with_start(
        self, workflow: Any, *args: Any, signal: str, payload: Any = None, **start_options: Any
    ) -> AsyncClientHandle:
        """Signal the workflow with ``start_options["id"]``, starting it first if it does not
        exist, in one atomic step on the server."""
        call = _calls.start_call(workflow, args, signal=signal, payload=payload, **start_options)
        wid, run_id = await self._request(call)
        return AsyncClientHandle._make(self, wid, run_id)

    def get_handle(self, id: str) -> AsyncClientHandle:
        """A handle on workflow ``id``; no I/O happens until one of its methods is awaited."""
        return AsyncClientHandle._make(self, id, None)

    async def create_schedule(self, id: str, workflow: Any, *args: Any, spec: Any = None, **options: Any) -> ScheduleHandle:
        """Create schedule ``id`` (as ``Engine.create_schedule``); returns once it is durable."""
        return ScheduleHandle(await self.start(SCHEDULE_TYPE, new_schedule(workflow, args, spec, options), id=id))

    def get_schedule(self, id: str) -> ScheduleHandle:
        """A handle on schedule ``id``; no I/O happens until one of its methods is awaited."""
        return ScheduleHandle(self.get_handle(id))

    async def list(self, status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        """One page of workflows, ``{"items": [...], "cursor": next_or_None}``."""
        return await self._request(_calls.list_call(status, type, limit, cursor))

    async def stats(self) -> dict[str, Any]:
        return await self._request(_calls.stats_call())

    async def ping(self) -> str:
        """``"pong"`` if the server answers; ``ServerUnavailable`` if not."""
        return await self._request(_calls.ping_call())


class AsyncClientHandle:
    """An ``AsyncClient``'s handle on one workflow id, with the methods of ``WorkflowHandle``.
    Made by ``AsyncClient.start``/``AsyncClient.get_handle``; no public constructor."""

    __slots__ = ("_client", "id", "run_id")

    _client: AsyncClient
    id: str
    run_id: str | None

    @classmethod
    def _make(cls, client: AsyncClient, workflow_id: str, run_id: str | None) -> AsyncClientHandle:
        handle = cls.__new__(cls)
        handle._client = client
        handle.id = workflow_id
        handle.run_id = run_id
        return handle

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("AsyncClientHandle has no public constructor; use AsyncClient.get_handle(id)")

    def __repr__(self) -> str:
        return f"<AsyncClientHandle {self.id!r}>"

    async def signal(self, name: str, payload: Any = None, *, request_id: str | None = None) -> None:
        """Returns once the signal is committed to the workflow's durable inbox. The same
        ``request_id`` sent twice is delivered once (one is made if not given, so a failover
        that sends it again cannot deliver it twice)."""
        await self._client._request(_calls.signal_call(self.id, name, payload, request_id))

    async def query(self, name: str, *args: Any) -> Any:
        return await self._client._request(_calls.query_call(self.id, name, args))

    async def update(self, name: str, *args: Any, request_id: str | None = None) -> Any:
        """Run update handler ``name`` and return its result; the same ``request_id`` applied
        twice runs the handler once (one is generated when not given)."""
        return await self._client._request(_calls.update_call(self.id, name, args, request_id))

    async def result(self, timeout: float | None = None) -> Any:
        """The workflow's result; raises ``WorkflowFailed`` & co. for other endings and the
        builtin ``TimeoutError`` if it does not end within ``timeout`` seconds (``None``:
        wait for ever). Long-polls the server in steps of at most 30 s."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            remaining = _calls.MAX_RESULT_WAIT if deadline is None else deadline - loop.time()
            done, value = _calls.result_value(await self._client._request(_calls.result_call(self.id, remaining)))
            if done:
                return value
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"workflow {self.id!r} did not finish within {timeout}s")

    async def cancel(self) -> None:
        """Request cancellation; the workflow sees it at its next await point."""
        await self._client._request(_calls.cancel_call(self.id))

    async def terminate(self, reason: str | None = None) -> None:
        """End the workflow at once, without running any more of its code."""
        await self._client._request(_calls.terminate_call(self.id, reason))

    async def lift_quarantine(self) -> None:
        """Let a quarantined workflow run again: it goes back to ``running`` and a live shard
        takes it over (``InvalidRequest`` if it is not quarantined)."""
        await self._client._request(_calls.lift_quarantine_call(self.id))

    async def describe(self) -> dict[str, Any]:
        return await self._client._request(_calls.describe_call(self.id))


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(asyncio.TimeoutError())


def _answer_pending(socket: zmq.Socket, pending: dict[Any, asyncio.Future[Any]], endpoint: str) -> None:
    """Hand every reply queued on ``socket`` to the future of its request in ``pending``;
    malformed replies and replies to nothing pending are dropped (and logged)."""
    while readable(socket):
        frames = recv_frames(socket)
        try:
            reply = decode_reply(frames[-1])
        except Exception:
            log.warning("discarding a malformed reply from %s", endpoint)
            continue
        future = pending.pop(reply.get("id"), None)
        if future is None:
            log.debug("discarding a reply to no pending request (%r)", reply.get("id"))
        elif not future.done():
            future.set_result(reply)
