"""``AsyncClient(direct=True)``'s ``start_many``/``execute_many``: each item to its shard.

A batch is what it is through the front door (``_many``: the window, one ``Landed`` per item,
an item's error what its single call raises); only where its requests go differs. Each
request goes to the shard its workflow is placed on, queued with that shard's other requests
of this loop turn (``DirectRoutes._queue``: one message per shard per turn, ``_wire``), and
waits in the transport's pending map under the batch, as a front-door batch does. A request
with no shard to go to (no directory, no connection up) goes through the front door.

A shard lost holding requests of the batch treats each as it treats a single call's
(``DirectRoutes.orphan``): one that is safe to send again goes through the front door, the
rest land ``OutcomeUnknown`` one by one (``fail_one``), never touching the other items. A
shard that answers it is going away has a safe request sent again through the front door.
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator

from ..errors import ServerUnavailable
from ._async_many import LoopBatch, _forget, _wake, landing
from ._direct import DirectRoutes, _Shard
from ._direct_answers import moved_to, stopping, turned_away
from ._dispatch import resendable
from ._many import Landed
from ._protocol import encode_envelope

__all__ = ["DirectBatch", "direct_pipeline"]


class DirectBatch(LoopBatch):
    """A ``LoopBatch`` whose requests may be out on shards: ``where`` is request id -> the
    shard it was queued for, so its answer (or its expiry) frees that shard's record of it."""

    def __init__(self, routes: DirectRoutes, *args: Any) -> None:
        super().__init__(*args)
        self.routes = routes
        self.where: dict[str, _Shard] = {}
        self.moved: dict[str, dict[str, Any]] = {}
        """request id -> the run handle of an execute whose wait moved on (``WorkflowMoved``),
        merged into the reply of the ``result`` it goes on as."""

    def set_result(self, reply: dict[str, Any], /) -> None:
        request_id = reply.get("id")
        shard = self.where.pop(request_id, None) if isinstance(request_id, str) else None
        entry = None if shard is None else shard.sent.pop(request_id, None)  # type: ignore[arg-type]
        if entry is not None and "error" in reply:
            transport = self.routes._transport
            if turned_away(reply) or stopping(reply) and resendable(entry[1], entry[0]):
                # The shard is going away (drain or deposition; a draining one took no new request): the front door finds another.
                transport.pending[request_id] = self  # type: ignore[index, assignment]
                transport._queue(request_id, entry[0])  # type: ignore[arg-type]
                return
            moved = moved_to(reply)
            if moved is not None:
                # Its workflow was handed to another shard: the wait goes on there, as a
                # ``result`` through the front door (a read: nothing is applied twice).
                wid, wait, run_id = moved
                if entry[1] == "execute":
                    self.moved[request_id] = {"id": wid, "run_id": run_id}  # type: ignore[index]
                transport.pending[request_id] = self  # type: ignore[index, assignment]
                transport._queue(request_id, encode_envelope(request_id, "result", {"wid": wid, "wait": wait}))  # type: ignore[arg-type]
                return
        handle = self.moved.pop(request_id, None) if self.moved and isinstance(request_id, str) else None
        if handle is not None and isinstance(reply.get("ok"), dict):
            reply = {**reply, "ok": {**handle, **reply["ok"]}}
        super().set_result(reply)

    def fail_one(self, request_id: str, error: BaseException) -> None:
        """Only ``request_id``'s item lands ``error`` (its shard was lost holding it)."""
        self.where.pop(request_id, None)
        item = self.out.pop(request_id, None)
        if item is not None:
            self.landed.append(Landed(item.index, error=error))
            if self.wake is not None:
                _wake(self.wake)

    def release(self, request_ids: list[str]) -> None:
        """``request_ids`` are no longer waited for (expired, or the batch ended)."""
        for request_id in request_ids:
            shard = self.where.pop(request_id, None)
            if shard is not None:
                shard.sent.pop(request_id, None)


def _send(routes: DirectRoutes, batch: DirectBatch) -> None:
    """Queue the requests ``batch`` has ready, each for its shard (or the front door)."""
    transport = routes._transport
    pending: dict[str, Any] = transport.pending
    for request_id, frame in batch.frames(transport.next_id):
        pending[request_id] = batch
        call = batch.out[request_id].call
        shard = routes.pick(call.fields.get("wid")) if routes.enabled else None
        if shard is None:
            transport._queue(request_id, frame)
        else:
            batch.where[request_id] = shard
            routes._queue(shard, request_id, frame, call.op)


async def direct_pipeline(routes: DirectRoutes, batch: DirectBatch, endpoint: str) -> AsyncIterator[Landed]:
    """``_async_many.pipeline`` for a direct client: send ``batch`` to the shards and yield
    each item as it lands."""
    transport = routes._transport
    pending: dict[str, Any] = transport.pending
    try:
        try:
            transport.batch_socket()  # the front door's socket, for what falls back to it
        except ServerUnavailable as exc:
            batch.fail_all(exc)
        else:
            await routes.ready()
        while True:
            if not transport.closed:
                _send(routes, batch)
            elif batch.unfinished():
                batch.fail_all(ServerUnavailable(f"the client is closed ({endpoint})", endpoint=endpoint))
            landed = batch.landed
            while landed:
                yield landed.popleft()
            if not batch.unfinished():
                return
            deadline = batch.next_deadline()
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            await landing(batch, wait)
            expired = batch.expire()
            batch.release(expired)
            _forget(pending, batch, expired)
    finally:
        out = list(batch.out)
        batch.release(out)
        _forget(pending, batch, out)
