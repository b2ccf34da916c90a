"""How both clients send a ``start_many``/``execute_many`` batch's ready requests: as few
messages as ``_wire`` allows, instead of one message per request."""

from __future__ import annotations

from typing import Any, Callable

import zmq
import zmq.backend

from ._many import Batch
from ._wire import BATCH_BYTES, encode_batch

__all__ = ["send_burst"]

_NOBLOCK = int(zmq.NOBLOCK)
_send = getattr(zmq.backend.Socket, "send", zmq.Socket.send)
"""The compiled send under pyzmq's wrapper, as ``_frames`` uses it: about 1 µs a frame less."""


def send_burst(socket: zmq.Socket, batch: Batch, next_id: Callable[[], str], pending: dict[str, Any] | None) -> bool:
    """Send the requests a ``start_many``/``execute_many`` batch has ready, as messages of up
    to ``BATCH_BYTES`` (``_wire``), each sent once full rather than after the whole burst was
    built (the batch's very first request alone, at once, so the server starts while the rest
    is encoded); each id goes in ``pending`` (if given) once its message left. True if the
    socket's queue was full (what did not leave goes first next time). A failed socket raises
    its ``zmq.ZMQError``."""
    chunk: list[tuple[str, bytes]] = []
    size = 0
    for request_id, frame in batch.frames(next_id):
        if chunk and size + len(frame) > BATCH_BYTES:
            if not _send_chunk(socket, batch, chunk, pending, request_id):
                return True
            chunk, size = [], 0
        chunk.append((request_id, frame))
        size += len(frame)
        if not batch.sent_any:
            batch.sent_any = True
            if not _send_chunk(socket, batch, chunk, pending):
                return True
            chunk, size = [], 0
    return bool(chunk) and not _send_chunk(socket, batch, chunk, pending)


def _send_chunk(socket: zmq.Socket, batch: Batch, chunk: list[tuple[str, bytes]], pending: dict[str, Any] | None, after: str | None = None) -> bool:
    """One message of ``chunk``'s requests; False if the queue is full: then each of them,
    and the request ``after`` them, is unsent (in order)."""
    try:
        _send(socket, chunk[0][1] if len(chunk) == 1 else encode_batch([frame for _, frame in chunk]), _NOBLOCK)
    except zmq.Again:
        if after is not None:
            batch.unsent(after)
        for request_id, _ in reversed(chunk):
            batch.unsent(request_id)
        return False
    if pending is not None:
        for request_id, _ in chunk:
            pending[request_id] = batch
    return True
