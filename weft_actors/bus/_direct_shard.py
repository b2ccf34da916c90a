"""The two things the direct path holds: one shard's socket here (``_Shard``) and the
front door's transport, as far as the direct path uses it (``Transport``).

Their own piece because they are plain state and a seam, with no logic of the routing in
them: ``_direct.DirectRoutes`` decides where each request goes and when a shard is lost, and
``_direct_many`` sends batches over the same shards.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import zmq

from ._calls import Call
from ._request_core import ConnectionWatch

__all__ = ["Transport", "_Shard"]


class Transport(Protocol):
    """What of ``LoopTransport`` (the front door's socket) the direct path uses: ``_queue``
    sends a request with the others of this loop turn."""

    pending: dict[str, asyncio.Future[dict[str, Any]]]
    closed: bool
    async def request(self, call: Call) -> Any: ...

    def _queue(self, request_id: str, frame: bytes) -> None: ...

    def next_id(self) -> str: ...

    def batch_socket(self) -> zmq.Socket: ...


class _Shard:
    """One shard's socket here: its requests not sent yet (``outbox``) and sent, not answered
    (``sent``: request id -> (frame, op))."""

    __slots__ = ("engine_id", "endpoint", "socket", "watch", "outbox", "sent", "drain_scheduled")

    def __init__(self, engine_id: str, endpoint: str, socket: zmq.Socket) -> None:
        self.engine_id = engine_id
        self.endpoint = endpoint
        self.socket = socket
        self.watch = ConnectionWatch(socket)
        self.outbox: list[tuple[str, bytes, str]] = []
        self.sent: dict[str, tuple[bytes, str]] = {}
        self.drain_scheduled = False
