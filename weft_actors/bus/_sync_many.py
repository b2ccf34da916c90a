"""How ``Client`` moves a batch (``start_many``, ``execute_many``): pipelined on one socket.

A batch gets a DEALER socket of its own, not the thread's: the caller may well make other
calls on the same thread between two items it is handed (``handle.result()`` on a start just
landed), and those must not read the batch's replies as stale. The socket is one of the
transport's channels, busy while the batch runs and idle while it waits at a ``yield``, so
``close()`` closes it either way and the rest of the batch lands ``ServerUnavailable``.

With several endpoints, or with tracing on, a batch is its single calls one after another:
each then fails over, or gets its span, exactly as a single call does.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator

import zmq

from ._burst import send_burst
from ._many import Batch, Landed, specs
from ._request_core import queued_replies, unavailable
from ._sync_transport import ThreadTransport

__all__ = ["one_by_one", "pipeline"]


_POLLIN = int(zmq.POLLIN)
_POLLOUT = int(zmq.POLLOUT)


def pipeline(transport: ThreadTransport, batch: Batch) -> Iterator[Landed]:
    """Send ``batch`` on a socket of its own and yield each item as it lands."""
    endpoint = batch.endpoint
    channel = transport.batch_channel()
    if channel is None:
        batch.fail_all(unavailable(endpoint, batch.op, "the client is closed"))
        yield from _landed(batch)
        return
    socket = channel.socket
    counter = 0

    def next_id() -> str:
        nonlocal counter
        counter += 1
        return str(counter)

    try:
        while True:
            full = False
            channel.busy = True
            try:
                full = send_burst(socket, batch, next_id, None)  # full: the rest goes once replies drain it
                if batch.out or full:
                    deadline = batch.next_deadline()
                    wait = 0.0 if batch.landed else 0.001 if deadline is None else max(0.0, deadline - time.monotonic())
                    if socket.poll(int(wait * 1000), _POLLIN | (_POLLOUT if full else 0)) & _POLLIN:
                        _read(socket, batch, endpoint)
                    batch.expire()
            except (zmq.ContextTerminated, zmq.ZMQError) as exc:
                why = "the client was closed" if transport.closed or isinstance(exc, zmq.ContextTerminated) else f"socket error: {exc}"
                transport.drop(channel)  # at once: a closing client's term() waits for it
                batch.fail_all(unavailable(endpoint, batch.op, why))
            finally:
                channel.busy = False
            if batch.landed:
                yield from _landed(batch)
            elif not batch.unfinished():
                return
    finally:
        transport.drop(channel)


def _landed(batch: Batch) -> Iterator[Landed]:
    landed = batch.landed
    while landed:
        yield landed.popleft()


def _read(socket: zmq.Socket, batch: Batch, endpoint: str) -> None:
    """Every reply queued on ``socket``, handed to its item."""
    for reply in queued_replies(socket, endpoint):
        batch.answer(reply.get("id"), reply)


def one_by_one(starts: Iterable[Any], single: Callable[..., Any]) -> Iterator[Landed]:
    """The batch as single calls in turn (several endpoints, or tracing on):
    ``single(workflow, *args, **options)`` per item."""
    for spec in specs(starts):
        if isinstance(spec, Landed):
            yield spec
            continue
        index, workflow, args, options = spec
        try:
            yield Landed(index, single(workflow, *args, **options))
        except Exception as exc:  # the item's own error, as its single call raised it
            yield Landed(index, error=exc)
