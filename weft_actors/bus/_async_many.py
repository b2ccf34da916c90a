"""How ``AsyncClient`` moves a batch (``start_many``, ``execute_many``): pipelined on its socket.

The batch's requests go on the client's one socket beside its single calls, with ids from
the same counter, and the batch itself waits for their replies in the transport's pending
map: the reader hands it each reply as it would a future (``done``, ``set_result``,
``set_exception``), and it wakes the caller's ``async for``. So a request of a batch costs
no future, no timer and no task of its own: one wake per turn of the loop, one timer for
the batch's earliest deadline. The requests ready at once leave as one message (``_wire``).

With several endpoints, or with tracing on, a batch is its single calls run concurrently
(at most ``window`` at a time): each then fails over, or gets its span, exactly as a single
call does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Protocol

import zmq

from ..errors import ServerUnavailable
from ._burst import send_burst
from ._many import Batch, Landed, specs

__all__ = ["LoopBatch", "Sender", "concurrently", "pipeline"]

_SEND_RETRY = 0.001
"""Seconds before sending again while the socket's queue is full."""


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class LoopBatch(Batch):
    """A ``Batch`` that waits in ``LoopTransport.pending`` under each of its request ids."""

    wake: asyncio.Future[None] | None = None

    def done(self) -> bool:
        return False

    def set_result(self, reply: dict[str, Any], /) -> None:
        self.answer(reply.get("id"), reply)
        if self.wake is not None:
            _wake(self.wake)

    def set_exception(self, error: BaseException, /) -> None:
        self.fail_out(error)
        if self.wake is not None:
            _wake(self.wake)


class Sender(Protocol):
    """What a batch needs of ``LoopTransport``: its socket, its request ids, the map its
    reader answers from, and a nudge to read after sending."""

    pending: dict[str, Any]

    def batch_socket(self) -> zmq.Socket: ...

    def next_id(self) -> str: ...

    def sent(self) -> None: ...


async def pipeline(transport: Sender, batch: LoopBatch, endpoint: str) -> AsyncIterator[Landed]:
    """Send ``batch`` on ``transport``'s socket and yield each item as it lands."""
    pending = transport.pending
    next_id = transport.next_id

    try:
        while True:
            full = False
            try:
                socket = transport.batch_socket()  # the same socket, or a fresh one after a lost one
                try:
                    full = send_burst(socket, batch, next_id, pending)
                except zmq.ZMQError as exc:
                    raise ServerUnavailable(f"{batch.op}: socket error: {exc} ({endpoint})", endpoint=endpoint, op=batch.op) from None
                transport.sent()  # once per burst: a send may swallow the reply's edge
            except ServerUnavailable as exc:  # closed, or the socket failed: nothing more goes out
                _forget(pending, batch, list(batch.out))
                batch.fail_all(exc)
            landed = batch.landed
            while landed:
                yield landed.popleft()
            if not batch.unfinished():
                return
            deadline = batch.next_deadline()
            wait = _SEND_RETRY if full else None if deadline is None else max(0.0, deadline - time.monotonic())
            await landing(batch, wait)
            _forget(pending, batch, batch.expire())
    finally:
        _forget(pending, batch, list(batch.out))


async def landing(batch: LoopBatch, wait: float | None) -> None:
    """Until an item of ``batch`` lands, or ``wait`` seconds pass (None: however long)."""
    if batch.landed:
        return
    batch.wake = wake = asyncio.get_running_loop().create_future()
    timer = None if wait is None else wake.get_loop().call_later(wait, _wake, wake)
    try:
        await wake
    finally:
        batch.wake = None
        if timer is not None:
            timer.cancel()


def _forget(pending: dict[str, Any], batch: LoopBatch, request_ids: list[str]) -> None:
    """Stop waiting for the replies to ``request_ids`` (a late one is dropped)."""
    for request_id in request_ids:
        if pending.get(request_id) is batch:
            del pending[request_id]


async def concurrently(starts: Iterable[Any], single: Callable[..., Awaitable[Any]], window: int) -> AsyncIterator[Landed]:
    """The batch as single calls, at most ``window`` at a time (several endpoints, or tracing
    on): ``single(workflow, *args, **options)`` per item."""
    landed: asyncio.Queue[Landed] = asyncio.Queue()
    room = asyncio.Semaphore(window)

    async def one(index: int, workflow: Any, args: tuple[Any, ...], options: dict[str, Any]) -> None:
        async with room:
            try:
                landed.put_nowait(Landed(index, await single(workflow, *args, **options)))
            except Exception as exc:  # the item's own error, as its single call raised it
                landed.put_nowait(Landed(index, error=exc))

    tasks = []
    count = 0
    for spec in specs(starts):
        count += 1
        if isinstance(spec, Landed):
            landed.put_nowait(spec)
        else:
            tasks.append(asyncio.ensure_future(one(*spec)))
    try:
        for _ in range(count):
            yield await landed.get()
    finally:
        for task in tasks:
            task.cancel()
