"""``AsyncClient``: the asyncio client, many requests pipelined on one DEALER socket.

The socket is a plain (non-asyncio) zmq socket whose file descriptor the event loop watches:
when it turns readable every queued reply is taken in one go (zmq's descriptor is
edge-triggered, so until ``EVENTS`` shows no input), and each resolves the future registered
under its request id. Measured here, that is about 2.5x ``zmq.asyncio``'s rate. Any number
of coroutines can have requests in flight at once and replies may come back in any order; a
reply whose id is no longer registered (its request timed out or was cancelled) is dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import Any

import zmq

from .._schedule_handle import SCHEDULE_TYPE, ScheduleHandle, new_schedule
from ..errors import ServerUnavailable
from . import _calls
from ._calls import Call
from ._client import DEFAULT_ENDPOINT
from ._curve import CurveKeys, apply_curve, resolve_curve
from ._frames import readable, recv_frames
from ._protocol import decode_reply

__all__ = ["AsyncClient", "AsyncClientHandle"]

log = logging.getLogger("weft_actors.bus")

_NOBLOCK = int(zmq.NOBLOCK)
_SEND_RETRY = 0.001
"""Seconds between send attempts while the socket's queue is full (rare: its high-water mark
is far above any sane number of requests in flight)."""


class AsyncClient:
    """The asyncio twin of ``Client``: same calls, awaitable, except ``get_handle``.

    The socket is made on first use, in the running event loop, and belongs to that loop.
    ``close()`` (or leaving ``async with``) fails every request still pending with
    ``ServerUnavailable``; none is left hanging.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        timeout: float = 10.0,
        curve_server_key: bytes | str | os.PathLike[str] | None = None,
        curve_public_key: bytes | str | os.PathLike[str] | None = None,
        curve_secret_key: bytes | str | os.PathLike[str] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        self.endpoint = endpoint
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
        return f"<AsyncClient {self.endpoint!r}{' closed' if self._closed else ''}>"

    async def __aenter__(self) -> AsyncClient:
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
            apply_curve(socket, self._curve)
            try:
                socket.connect(self.endpoint)
            except zmq.ZMQError as exc:
                socket.close(linger=0)
                raise ValueError(f"cannot connect to {self.endpoint!r}: {exc}") from None
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
        pending = self._pending
        try:
            while readable(socket):
                frames = recv_frames(socket)
                try:
                    reply = decode_reply(frames[-1])
                except Exception:
                    log.warning("discarding a malformed reply from %s", self.endpoint)
                    continue
                future = pending.pop(reply.get("id"), None)  # type: ignore[arg-type]
                if future is None:
                    log.debug("discarding a reply to no pending request (%r)", reply.get("id"))
                elif not future.done():
                    future.set_result(reply)
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

    async def signal(self, name: str, payload: Any = None) -> None:
        """Returns once the signal is committed to the workflow's durable inbox."""
        await self._client._request(_calls.signal_call(self.id, name, payload))

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
