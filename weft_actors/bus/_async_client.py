"""``AsyncClient``: the asyncio client, many requests pipelined on one DEALER socket.

This module is the shell: the calls, awaitable, and the handle. Each call becomes a ``Call``
(``_calls``) and goes through the client's transport (``_async_transport``: one pipelined
socket, failover between several endpoints as ``Client`` does); where requests go is its
``Target`` (``_request_core``), which ``Client`` shares.
"""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any, AsyncIterator, Iterable, Sequence

from .. import _tracing
from .._schedule_handle import SCHEDULE_TYPE, ScheduleHandle, new_schedule
from ..workflow import stack_answer
from .._checks import check_seconds
from . import _calls
from ._async_many import LoopBatch, concurrently, pipeline
from ._async_transport import LoopTransport
from ._direct import DirectRoutes
from ._direct_many import DirectBatch, direct_pipeline
from ._many import DEFAULT_WINDOW, Landed, check_window
from ._request_core import DEFAULT_ENDPOINT, Target, TargetShell

__all__ = ["AsyncClient", "AsyncClientHandle"]


class AsyncClient(TargetShell):
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
        direct: bool = False,
    ) -> None:
        """``direct``: send each workflow op straight to the shard it is placed on when the
        server offers a directory (one endpoint, no CURVE), the front door otherwise
        (``_direct``). Off by default: a client must be able to reach the shards' ports."""
        self._target = Target(endpoint, timeout, curve_server_key, curve_public_key, curve_secret_key)
        self._transport = LoopTransport(self._target)
        # The transport's own coroutine function, bound once: no extra frame per call.
        self._request = self._transport.request
        self._direct = None if not direct or self._target.failover or self._target.curve is not None else DirectRoutes(self._transport, self._target)
        if self._direct is not None:
            self._request = self._direct.request

    @property
    def _link(self) -> Any:
        """The connection requests go on now, with several endpoints (for introspection)."""
        return self._transport.link

    @property
    def _retired(self) -> set[Any]:
        """Connections given up on, open for the requests still in flight on them."""
        return self._transport.retired

    @property
    def _pending(self) -> dict[str, asyncio.Future[dict[str, Any]]]:
        """Requests awaiting their reply, by request id."""
        return self._transport.pending

    def __repr__(self) -> str:
        return f"<AsyncClient {self._target.shown()}{' closed' if self._transport.closed else ''}>"

    async def __aenter__(self) -> AsyncClient:
        self._transport.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Fail what is pending, close the socket and the context. Idempotent."""
        self._transport.close()
        if self._direct is not None:
            self._direct.close()

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
        wid, run_id = await (self._request(call) if _tracing.tracer() is None else _tracing.client_acall(self._request, call))
        return AsyncClientHandle._make(self, wid, run_id, call.fields.get("traceparent"))

    async def execute(self, workflow: Any, *args: Any, timeout: float | None = None, **start_options: Any) -> Any:
        """Start ``workflow(*args)`` and return its result, in one round trip for a workflow
        that ends within 30 s (longer ones go on polling like ``result``). ``start_options``
        are ``start``'s. Raises like ``result``, and ``TimeoutError`` if it does not end
        within ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        wait = _calls.MAX_RESULT_WAIT if timeout is None else timeout
        call = _calls.execute_call(workflow, args, wait, **start_options)
        ok = await (self._request(call) if _tracing.tracer() is None else _tracing.client_acall(self._request, call))
        done, value = _calls.result_value(ok)
        if done:
            return value
        remaining = None if deadline is None else max(0.0, deadline - loop.time())
        return await AsyncClientHandle._make(self, ok["id"], ok.get("run_id")).result(remaining)

    def start_many(self, starts: Iterable[Any], *, window: int = DEFAULT_WINDOW) -> AsyncIterator[Landed]:
        """``Client.start_many``, for ``async for``: each item's ``Landed`` as its reply
        lands, the requests pipelined on the client's socket beside its other calls."""
        return self._many(starts, None, window, execute=False)

    def execute_many(self, executions: Iterable[Any], *, timeout: float | None = None, window: int = DEFAULT_WINDOW) -> AsyncIterator[Landed]:
        """``Client.execute_many``, for ``async for``."""
        return self._many(executions, timeout, window, execute=True)

    def _many(self, starts: Iterable[Any], timeout: float | None, window: int, *, execute: bool) -> AsyncIterator[Landed]:
        if self._target.failover or _tracing.tracer() is not None:  # each item as its single call
            check_window(window)
            single = functools.partial(self.execute, timeout=None if timeout is None else check_seconds(timeout, "timeout")) if execute else self.start
            return concurrently(starts, single, window)
        handle = functools.partial(AsyncClientHandle._make, self)
        if self._direct is not None:  # each item to its shard
            batch = DirectBatch(self._direct, starts, execute, timeout, window, self._target.timeout, self._target.endpoint, handle)
            return direct_pipeline(self._direct, batch, self._target.endpoint)
        return pipeline(self._transport, LoopBatch(starts, execute, timeout, window, self._target.timeout, self._target.endpoint, handle), self._target.endpoint)

    async def signal_with_start(
        self, workflow: Any, *args: Any, signal: str, payload: Any = None, **start_options: Any
    ) -> AsyncClientHandle:
        """Signal the workflow with ``start_options["id"]``, starting it first if it does not
        exist, in one atomic step on the server."""
        call = _calls.start_call(workflow, args, signal=signal, payload=payload, **start_options)
        wid, run_id = await (self._request(call) if _tracing.tracer() is None else _tracing.client_acall(self._request, call))
        return AsyncClientHandle._make(self, wid, run_id, call.fields.get("traceparent"))

    def get_handle(self, id: str) -> AsyncClientHandle:
        """A handle on workflow ``id``; no I/O happens until one of its methods is awaited."""
        return AsyncClientHandle._make(self, id, None)

    async def create_schedule(self, id: str, workflow: Any, *args: Any, spec: Any = None, **options: Any) -> ScheduleHandle:
        """Create schedule ``id`` (as ``Engine.create_schedule``); returns once it is durable."""
        return ScheduleHandle(await self.start(SCHEDULE_TYPE, new_schedule(workflow, args, spec, options), id=id))

    def get_schedule(self, id: str) -> ScheduleHandle:
        """A handle on schedule ``id``; no I/O happens until one of its methods is awaited."""
        return ScheduleHandle(self.get_handle(id))

    async def list(
        self, status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None, memo: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One page of workflows, ``{"items": [...], "cursor": next_or_None}``; ``memo`` keeps those whose
        memo has each of its top-level fields (``{"customer": "acme"}``), read from the memo index."""
        return await self._request(_calls.list_call(status, type, limit, cursor, memo))

    async def stats(self) -> dict[str, Any]:
        return await self._request(_calls.stats_call())

    async def ping(self) -> str:
        """``"pong"`` if the server answers; ``ServerUnavailable`` if not."""
        return await self._request(_calls.ping_call())


class AsyncClientHandle:
    """An ``AsyncClient``'s handle on one workflow id, with the methods of ``WorkflowHandle``.
    Made by ``AsyncClient.start``/``AsyncClient.get_handle``; no public constructor."""

    __slots__ = ("_client", "id", "run_id", "_trace")

    _client: AsyncClient
    id: str
    run_id: str | None
    _trace: str | None

    @classmethod
    def _make(cls, client: AsyncClient, workflow_id: str, run_id: str | None, trace: str | None = None) -> AsyncClientHandle:
        handle = cls.__new__(cls)
        handle._client = client
        handle.id = workflow_id
        handle.run_id = run_id
        handle._trace = trace  # the traced start's context: its signals and updates join it
        return handle

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("AsyncClientHandle has no public constructor; use AsyncClient.get_handle(id)")

    def __repr__(self) -> str:
        return f"<AsyncClientHandle {self.id!r}>"

    async def signal(self, name: str, payload: Any = None, *, request_id: str | None = None) -> None:
        """Returns once the signal is committed to the workflow's durable inbox. The same
        ``request_id`` sent twice is delivered once (one is made if not given, so a failover
        that sends it again cannot deliver it twice)."""
        call = _calls.signal_call(self.id, name, payload, request_id)
        await (self._client._request(call) if _tracing.tracer() is None else _tracing.client_acall(self._client._request, call, self._trace))

    async def query(self, name: str, *args: Any) -> Any:
        return await self._client._request(_calls.query_call(self.id, name, args))

    async def update(self, name: str, *args: Any, request_id: str | None = None) -> Any:
        """Run update handler ``name`` and return its result; the same ``request_id`` applied
        twice runs the handler once (one is generated when not given)."""
        call = _calls.update_call(self.id, name, args, request_id)
        return await (self._client._request(call) if _tracing.tracer() is None else _tracing.client_acall(self._client._request, call, self._trace))

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

    async def lift_quarantine(self, reason: str | None = None, *, by: str | None = None) -> None:
        """Let a quarantined workflow run again: it goes back to ``running`` and a live shard
        takes it over (``InvalidRequest`` if it is not quarantined). Its record keeps the lift:
        when, ``by`` whom (default: this client's user and host) and ``reason``."""
        await self._client._request(_calls.lift_quarantine_call(self.id, reason, by))

    async def describe(self) -> dict[str, Any]:
        return await self._client._request(_calls.describe_call(self.id))

    async def stack(self) -> list[dict[str, Any]]:
        """Where the running workflow waits (see ``Client``'s ``stack``)."""
        return stack_answer(await self.describe())
