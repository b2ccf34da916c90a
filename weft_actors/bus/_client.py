"""``Client``: the synchronous, thread-safe ZeroMQ client of a weft_actors supervisor.

This module is the shell: the calls and the handle. Each call becomes a ``Call``
(``_calls``) and goes through the client's transport (``_sync_transport``: one socket per
thread, failover between several endpoints); where requests go is its ``Target``
(``_request_core``), which ``AsyncClient`` shares.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any, Iterable, Iterator, Sequence

from .. import _tracing
from .._schedule_handle import SCHEDULE_TYPE, ScheduleHandle, new_schedule
from ..workflow import stack_answer
from .._checks import check_seconds
from . import _calls
from ._many import DEFAULT_WINDOW, Batch, Landed, check_window
from ._request_core import DEFAULT_ENDPOINT, Target, TargetShell
from ._sync_many import one_by_one, pipeline
from ._sync_transport import ThreadTransport

__all__ = ["Client", "ClientHandle", "DEFAULT_ENDPOINT"]


class Client(TargetShell):
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
        self._target = Target(endpoint, timeout, curve_server_key, curve_public_key, curve_secret_key)
        self._transport = ThreadTransport(self._target)
        # The transport's own method, bound once: a call costs no extra frame for the shell.
        self._request = self._transport.request

    @property
    def _channels(self) -> list[Any]:
        """The threads' sockets now (for introspection)."""
        return self._transport.channels

    def __repr__(self) -> str:
        return f"<Client {self._target.shown()}{' closed' if self._transport.closed else ''}>"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close every thread's socket and terminate the context. Idempotent."""
        self._transport.close()

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
        wid, run_id = self._request(call) if _tracing.tracer() is None else _tracing.client_call(self._request, call)
        return ClientHandle._make(self, wid, run_id, call.fields.get("traceparent"))

    def execute(self, workflow: Any, *args: Any, timeout: float | None = None, **start_options: Any) -> Any:
        """Start ``workflow(*args)`` and return its result, in one round trip for a workflow
        that ends within 30 s (longer ones go on polling like ``result``). ``start_options``
        are ``start``'s. Raises like ``result``, and ``TimeoutError`` if it does not end
        within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = _calls.MAX_RESULT_WAIT if timeout is None else timeout
        call = _calls.execute_call(workflow, args, wait, **start_options)
        ok = self._request(call) if _tracing.tracer() is None else _tracing.client_call(self._request, call)
        done, value = _calls.result_value(ok)
        if done:
            return value
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        return ClientHandle._make(self, ok["id"], ok.get("run_id")).result(remaining)

    def start_many(self, starts: Iterable[Any], *, window: int = DEFAULT_WINDOW) -> Iterator[Landed]:
        """Start each ``(workflow, args)`` or ``(workflow, args, options)`` of ``starts``
        (``options``: ``start``'s keywords), pipelined on one socket with at most ``window``
        requests out. Yields a ``Landed(position, value, error)`` per item as its reply lands, in
        any order: ``value`` the item's handle, or ``error`` what its ``start`` would have
        raised (``landed.result()`` returns one or raises the other). An item's error is its
        own: the others go on."""
        return self._many(starts, None, window, execute=False)

    def execute_many(self, executions: Iterable[Any], *, timeout: float | None = None, window: int = DEFAULT_WINDOW) -> Iterator[Landed]:
        """``execute`` for each ``(workflow, args)`` or ``(workflow, args, options)``,
        pipelined as ``start_many``: yields a ``Landed`` per item as its workflow ends (its
        result as ``value``), or with what its ``execute`` would have raised; ``timeout``
        counts for each item from when it is sent."""
        return self._many(executions, timeout, window, execute=True)

    def _many(self, starts: Iterable[Any], timeout: float | None, window: int, *, execute: bool) -> Iterator[Landed]:
        if self._target.failover or _tracing.tracer() is not None:  # each item as its single call
            check_window(window)
            single = functools.partial(self.execute, timeout=None if timeout is None else check_seconds(timeout, "timeout")) if execute else self.start
            return one_by_one(starts, single)
        handle = functools.partial(ClientHandle._make, self)
        return pipeline(self._transport, Batch(starts, execute, timeout, window, self._target.timeout, self._target.endpoint, handle))

    def signal_with_start(
        self, workflow: Any, *args: Any, signal: str, payload: Any = None, **start_options: Any
    ) -> ClientHandle:
        """Signal the workflow with ``start_options["id"]``, starting it first if it does not
        exist, in one atomic step on the server."""
        call = _calls.start_call(workflow, args, signal=signal, payload=payload, **start_options)
        wid, run_id = self._request(call) if _tracing.tracer() is None else _tracing.client_call(self._request, call)
        return ClientHandle._make(self, wid, run_id, call.fields.get("traceparent"))

    def get_handle(self, id: str) -> ClientHandle:
        """A handle on workflow ``id``; no I/O happens until one of its methods is called."""
        return ClientHandle._make(self, id, None)

    def create_schedule(self, id: str, workflow: Any, *args: Any, spec: Any = None, **options: Any) -> ScheduleHandle:
        """Create schedule ``id`` (as ``Engine.create_schedule``); returns once it is durable."""
        return ScheduleHandle(self.start(SCHEDULE_TYPE, new_schedule(workflow, args, spec, options), id=id))

    def get_schedule(self, id: str) -> ScheduleHandle:
        """A handle on schedule ``id``; no I/O happens until one of its methods is called."""
        return ScheduleHandle(self.get_handle(id))

    def list(
        self, status: str | None = None, type: str | None = None, limit: int = 100, cursor: str | None = None, memo: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One page of workflows, ``{"items": [...], "cursor": next_or_None}``; ``memo`` keeps those whose
        memo has each of its top-level fields (``{"customer": "acme"}``), read from the memo index."""
        return self._request(_calls.list_call(status, type, limit, cursor, memo))

    def stats(self) -> dict[str, Any]:
        return self._request(_calls.stats_call())

    def shards(self, action: str = "list", count: int | None = None) -> Any:
        """The supervisor's shards: ``list`` them, ``restart`` them one at a time (a rolling
        restart), or ``set`` their number to ``count``."""
        return self._request(_calls.shards_call(action, count))

    def ping(self) -> str:
        """``"pong"`` if the server answers; ``ServerUnavailable`` if not."""
        return self._request(_calls.ping_call())


class ClientHandle:
    """A ``Client``'s handle on one workflow id, the synchronous twin of ``WorkflowHandle``.
    Made by ``Client.start``/``Client.get_handle``; no public constructor."""

    __slots__ = ("_client", "id", "run_id", "_trace")

    _client: Client
    id: str
    run_id: str | None
    _trace: str | None

    @classmethod
    def _make(cls, client: Client, workflow_id: str, run_id: str | None, trace: str | None = None) -> ClientHandle:
        handle = cls.__new__(cls)
        handle._client = client
        handle.id = workflow_id
        handle.run_id = run_id
        handle._trace = trace  # the traced start's context: its signals and updates join it
        return handle

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("ClientHandle has no public constructor; use Client.get_handle(id)")

    def __repr__(self) -> str:
        return f"<ClientHandle {self.id!r}>"

    def signal(self, name: str, payload: Any = None, *, request_id: str | None = None) -> None:
        """Returns once the signal is committed to the workflow's durable inbox. The same
        ``request_id`` sent twice is delivered once (one is made if not given, so a failover
        that sends it again cannot deliver it twice)."""
        call = _calls.signal_call(self.id, name, payload, request_id)
        if _tracing.tracer() is None:
            self._client._request(call)
        else:
            _tracing.client_call(self._client._request, call, self._trace)

    def query(self, name: str, *args: Any) -> Any:
        return self._client._request(_calls.query_call(self.id, name, args))

    def update(self, name: str, *args: Any, request_id: str | None = None) -> Any:
        """Run update handler ``name`` and return its result; the same ``request_id`` applied
        twice runs the handler once (one is generated when not given)."""
        call = _calls.update_call(self.id, name, args, request_id)
        return self._client._request(call) if _tracing.tracer() is None else _tracing.client_call(self._client._request, call, self._trace)

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

    def lift_quarantine(self, reason: str | None = None, *, by: str | None = None) -> None:
        """Let a quarantined workflow run again: it goes back to ``running`` and a live shard
        takes it over (``InvalidRequest`` if it is not quarantined). Its record keeps the lift:
        when, ``by`` whom (default: this client's user and host) and ``reason``."""
        self._client._request(_calls.lift_quarantine_call(self.id, reason, by))

    def describe(self) -> dict[str, Any]:
        return self._client._request(_calls.describe_call(self.id))

    def stack(self) -> list[dict[str, Any]]:
        """Where the running workflow waits: ``describe()["stack"]`` (its coroutines' frames,
        the innermost with the ops it awaits); ``WorkflowClosed`` once it has ended,
        ``InvalidRequest`` while none of its code runs (``pending``, ``quarantined``, ``stuck``)."""
        return stack_answer(self.describe())
