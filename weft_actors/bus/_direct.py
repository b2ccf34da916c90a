"""``AsyncClient``'s direct path: workflow ops go straight to the shard they are placed on.

The front door answers ``directory``: its version, the live shards (slot, engine id, the
endpoint of the shard's own socket) and how a workflow id is placed on them (rendezvous over
their engine ids, ``_placement.preferred``, as the front door routes). A client with
``direct=True`` sends each workflow op (``DIRECT_OPS``) to its placed shard's socket, a start
without an id to the shard holding fewest requests (``_spread``; a ``start_many`` batch's too), and
everything else (``list``, ``stats``) to the front door as before. Placement is an optimisation: any shard serves any request, so a stale directory costs nothing but a hop inside the store.

A request goes to the front door instead when there is no directory (an older server, CURVE,
a front door not on TCP), or when its shard's socket has no connection up (its monitor has
seen no handshake since the last loss: nothing was delivered).

Death and stall, as through the front door (``_dispatch``): when a shard's connection drops
(its monitor says so at once) or a newer directory no longer lists it (polled every
``REFRESH`` seconds while requests are out on a shard, which is how a stall, judged by the
supervisor, is learnt), every request sent to it and not answered (the replies that came
before it went are read first: a graceful exit's ``workflow_moved`` is an answer) is sent
again through the front door if that is safe (``resendable``: reads, an update or signal
with a request id, a start with a fixed id and ``if_exists="return"``), else answered
``OutcomeUnknown``: nothing is applied twice. Its socket is closed, so a late reply of a
stalled shard is never taken. A shard restarted in the same slot is a new engine at a new
endpoint: the next directory has it. Requests queued here and not sent yet simply go to the
front door.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Final

import zmq
import zmq.backend

from .._placement import preferred
from ..errors import InvalidRequest, OutcomeUnknown, ServerUnavailable, WeftError
from . import _calls
from ._calls import Call
from ._dispatch import resendable
from ._direct_answers import moved_to, reachable, stopping, turned_away
from ._direct_shard import Transport, _Shard
from ._protocol import encode_envelope
from ._request_core import Target, answer_pending, expire
from ._spread import least_held
from ._wire import grouped

__all__ = ["DIRECT_OPS", "DirectRoutes", "reachable"]

log = logging.getLogger("weft_actors.bus")

DIRECT_OPS: Final = frozenset(
    {"start", "execute", "signal_with_start", "signal", "query", "update", "result", "cancel", "terminate", "describe"}
)
"""The ops about one workflow, sent to its shard; the rest go to the front door."""
REFRESH: Final = 0.5
"""Seconds between directory polls while requests are out on a shard; also how soon a client
with no directory asks again."""
CONNECT_WAIT: Final = 0.5
"""Seconds a client's first workflow op waits for the shards' connections to come up."""
_NOBLOCK = int(zmq.NOBLOCK)
_send = getattr(zmq.backend.Socket, "send", zmq.Socket.send)


class DirectRoutes:
    """The directory and the shard sockets of one ``AsyncClient`` (its loop's thread only):
    ``request`` sends a workflow op to its shard and anything else through ``transport`` (the
    front door). The shard sockets have a zmq context of their own (an I/O thread more)."""

    def __init__(self, transport: Transport, target: Target) -> None:
        self._transport = transport
        self._target = target
        self._context: zmq.Context | None = None
        self.version = -1
        """The directory's version; -1 while there is none."""
        self.engines: list[str] = []
        self._endpoints: dict[str, str] = {}
        self._draining: set[str] = set()
        """Engines the last directory said hand their workflows off: they end by exiting."""
        self.shards: dict[str, _Shard] = {}
        """engine id -> its open socket."""
        self.enabled = True
        """False once the server says it has no ``directory`` (an older one)."""
        self._first: asyncio.Future[None] | None = None
        self._refreshing = False
        self._next_refresh = 0.0
        self._ticking = False
        self._flush_scheduled = False
        self._turn = itertools.count()

    # -- the directory ----------------------------------------------------------------------

    async def refresh(self) -> None:
        """Ask the front door for the directory; apply it if it is newer."""
        if self._refreshing:
            return
        self._refreshing = True
        loop = asyncio.get_running_loop()
        self._next_refresh = loop.time() + REFRESH
        try:
            answer = await self._transport.request(Call("directory", {}))
        except InvalidRequest:
            self.enabled = False  # a server without the op: the front door for good
            return
        except WeftError as exc:
            log.debug("no directory: %s", exc)
            return
        finally:
            self._refreshing = False
        self.apply(answer)

    def apply(self, answer: Any) -> None:
        """Take a directory: shards no longer in it lose what they hold (``orphan``)."""
        if not isinstance(answer, dict) or not isinstance(answer.get("version"), int) or answer["version"] == self.version:
            return
        front_door = self._target.endpoint
        endpoints = {
            str(shard[1]): reachable(str(shard[2]), front_door)
            for shard in answer.get("shards") or []
            if isinstance(shard, list) and len(shard) == 3 and str(shard[2]).startswith("tcp://")
        }
        # A draining shard takes no new request but still answers (or moves on) what it holds.
        draining = {str(shard[1]) for shard in answer.get("draining") or [] if isinstance(shard, list) and len(shard) == 3}
        # One that was draining and is now gone exited after its last replies: its connection's
        # end (``_watch``) comes after them, so it is left to that, not judged here first.
        graceful, self._draining = self._draining, draining
        self.version = answer["version"]
        self._endpoints = endpoints
        self.engines = list(endpoints)
        for engine_id in [engine_id for engine_id in self.shards if engine_id not in endpoints and engine_id not in draining]:
            shard = self.shards[engine_id]
            if engine_id in graceful:
                try:
                    shard.watch.read()
                except zmq.ZMQError:
                    pass
                if shard.watch.down is None:
                    continue  # still connected: its end comes through ``_watch``
            self._drain(shard)  # replies that came before it went are answers
            self.orphan(shard, "is no longer live (it died or stopped answering)")
        if self.enabled and not self._transport.closed:
            for engine_id in self.engines:  # connect now: a send finds the connection up
                if engine_id not in self.shards:
                    self._open(engine_id)

    async def _first_directory(self) -> None:
        if self._first is None:
            self._first = asyncio.ensure_future(self._connect())
        await asyncio.shield(self._first)

    async def _connect(self) -> None:
        """The first directory, and its shards' connections up (``CONNECT_WAIT`` at most):
        until a connection is up its shard's requests go to the front door."""
        await self.refresh()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONNECT_WAIT
        while loop.time() < deadline and not all([self._watch(shard) for shard in list(self.shards.values())]):
            await asyncio.sleep(0.002)

    async def ready(self) -> None:
        """Before a batch's first send: the first directory, or a new try at one if none came."""
        if self.version < 0:
            if self._first is None or not self._first.done():
                await self._first_directory()
            elif asyncio.get_running_loop().time() >= self._next_refresh:
                asyncio.ensure_future(self.refresh())

    def _tick(self) -> None:
        """Poll the directory while requests are out on a shard: how a stall is learnt."""
        self._ticking = False
        if self._transport.closed:
            return
        if any(shard.sent for shard in self.shards.values()):
            asyncio.ensure_future(self.refresh())
            self._start_ticking()

    def _start_ticking(self) -> None:
        if not self._ticking:
            self._ticking = True
            asyncio.get_running_loop().call_later(REFRESH, self._tick)

    # -- requests ---------------------------------------------------------------------------

    async def request(self, call: Call) -> Any:
        """``LoopTransport.request``, a workflow op sent to its shard (else the front door)."""
        transport = self._transport
        if call.op not in DIRECT_OPS:
            return await transport.request(call)
        transport.batch_socket()  # the front door's socket, for what falls back to it
        loop = asyncio.get_running_loop()
        if self.version < 0:
            if self._first is None or not self._first.done():
                await self._first_directory()
            elif loop.time() >= self._next_refresh:
                asyncio.ensure_future(self.refresh())
        shard = self.pick(call.fields.get("wid")) if self.enabled else None
        target = self._target
        request_id = transport.next_id()
        frame = _calls.frame(request_id, call)
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        transport.pending[request_id] = future
        budget = target.timeout + call.wait
        timer = loop.call_later(budget, expire, future)
        try:
            if shard is None:
                transport._queue(request_id, frame)
            else:
                self._queue(shard, request_id, frame, call.op)
            reply = await future
            if shard is not None and "error" in reply and (turned_away(reply) or stopping(reply) and resendable(call.op, frame)):
                # The shard is going away (drain or deposition; a draining one took no new request): the front door finds another.
                # It is no longer the shard's to answer (or to lose: ``orphan``).
                shard.sent.pop(request_id, None)
                future = transport.pending[request_id] = loop.create_future()
                timer.cancel()
                timer = loop.call_later(budget, expire, future)
                transport._queue(request_id, frame)
                reply = await future
            moved = moved_to(reply) if shard is not None and "error" in reply else None
            if shard is not None and moved is not None:
                # Its workflow was handed to another shard: the wait goes on there, as a
                # ``result`` through the front door (a read: nothing is applied twice).
                wid, wait, run_id = moved
                shard.sent.pop(request_id, None)  # the front door's now, not the shard's to lose
                future = transport.pending[request_id] = loop.create_future()
                timer.cancel()
                timer = loop.call_later(budget, expire, future)
                transport._queue(request_id, encode_envelope(request_id, "result", {"wid": wid, "wait": wait}))
                reply = await future
                if call.op == "execute" and isinstance(reply.get("ok"), dict):  # its handle, as an execute's reply has
                    reply = {**reply, "ok": {"id": wid, "run_id": run_id, **reply["ok"]}}
        except asyncio.TimeoutError:
            raise ServerUnavailable(f"{call.op}: no reply within {budget:.3g}s ({target.endpoint})", endpoint=target.endpoint, op=call.op) from None
        finally:
            timer.cancel()
            if transport.pending.get(request_id) is future:
                del transport.pending[request_id]
            if shard is not None:
                shard.sent.pop(request_id, None)
        return _calls.unwrap(call, reply)

    def pick(self, wid: Any) -> _Shard | None:
        """The shard ``wid`` is placed on (a start without an id: the one holding fewest)."""
        engines = self.engines
        if not engines:
            return None
        engine_id = preferred(wid, engines) if isinstance(wid, str) else least_held(engines, self.shards, next(self._turn))
        if engine_id is None:
            return None
        shard = self.shards.get(engine_id)
        if shard is None:
            shard = self._open(engine_id)
        return shard

    def _open(self, engine_id: str) -> _Shard:
        if self._context is None:
            self._context = zmq.Context()
        socket = self._context.socket(zmq.DEALER)
        socket.linger = 0
        # Not ``IMMEDIATE``: with it zmq drops the replies not read yet when the connection ends (a
        # draining shard's last ``workflow_moved``); ``_flush`` sends only while one is up instead.
        endpoint = self._endpoints[engine_id]
        shard = self.shards[engine_id] = _Shard(engine_id, endpoint, socket)
        socket.connect(endpoint)  # after its monitor is made: the handshake's event is never missed
        loop = asyncio.get_running_loop()
        loop.add_reader(socket.fileno(), self._drain, shard)
        loop.add_reader(shard.watch.monitor.fileno(), self._watch, shard)
        return shard

    def _queue(self, shard: _Shard, request_id: str, frame: bytes, op: str) -> None:
        shard.outbox.append((request_id, frame, op))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Send each shard this turn's requests (``_wire.grouped``); what a shard's socket
        refuses (no connection up, or its queue full) goes to the front door instead."""
        self._flush_scheduled = False
        transport = self._transport
        pending = transport.pending
        for shard in list(self.shards.values()):
            up = bool(shard.outbox) and self._watch(shard)  # the monitor's news first: a lost connection takes none
            outbox, shard.outbox = shard.outbox, []
            if not outbox:
                continue
            outbox = [entry for entry in outbox if entry[0] in pending]  # gave up meanwhile
            sent = 0
            for message, count in grouped([frame for _, frame, _ in outbox]) if up else ():
                try:
                    _send(shard.socket, message, _NOBLOCK)
                except zmq.ZMQError:
                    break  # its queue is full: the front door takes these
                for request_id, frame, op in outbox[sent : sent + count]:
                    shard.sent[request_id] = (frame, op)
                sent += count
            for request_id, frame, _ in outbox[sent:]:
                transport._queue(request_id, frame)
            self._schedule_drain(shard)
        if any(shard.sent for shard in self.shards.values()):
            self._start_ticking()

    def _schedule_drain(self, shard: _Shard) -> None:
        if not shard.drain_scheduled:
            shard.drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain, shard)

    def _drain(self, shard: _Shard) -> None:
        shard.drain_scheduled = False
        if shard.socket.closed:
            return
        try:
            answer_pending(shard.socket, self._transport.pending, shard.endpoint)
        except zmq.ZMQError as exc:
            self.orphan(shard, f"could not be read ({exc})")

    def _watch(self, shard: _Shard) -> bool:
        """The shard's monitor (its reader, and read before a send): a lost connection loses
        what was sent on it, at once. Whether a connection is up."""
        if shard.socket.closed:
            return False
        lost = shard.watch.lost
        try:
            shard.watch.read()
        except zmq.ZMQError:
            return False
        if shard.watch.lost != lost:
            self._drain(shard)  # replies that came before the loss are answers
            self.orphan(shard, "lost its connection")
            asyncio.ensure_future(self.refresh())
        return shard.watch.up and not shard.socket.closed

    def orphan(self, shard: _Shard, why: str) -> None:
        """``shard`` is gone or stalled: each request it holds goes to the front door when that
        is safe, else is answered ``OutcomeUnknown``; its socket closes."""
        if self.shards.get(shard.engine_id) is shard:
            del self.shards[shard.engine_id]
        transport = self._transport
        pending = transport.pending
        for request_id, frame, _ in shard.outbox:  # never sent
            if request_id in pending:
                transport._queue(request_id, frame)
        shard.outbox = []
        sent, shard.sent = shard.sent, {}
        for request_id, (frame, op) in sent.items():
            future = pending.get(request_id)
            if future is None or future.done():
                continue
            if resendable(op, frame):
                transport._queue(request_id, frame)
            else:
                del pending[request_id]
                error = OutcomeUnknown(f"the shard serving this {op} {why}; it may or may not have been applied", op=op)
                fail_one = getattr(future, "fail_one", None)  # a batch (``_direct_many``): that item only
                if fail_one is not None:
                    fail_one(request_id, error)
                else:
                    future.set_exception(error)
        self._close(shard)

    def _close(self, shard: _Shard) -> None:
        loop = asyncio.get_event_loop()
        if not loop.is_closed():
            for sock in (shard.socket, shard.watch.monitor):
                try:
                    loop.remove_reader(sock.fileno())
                except Exception:  # the socket may already be unusable
                    pass
        shard.watch.close()
        shard.socket.close(linger=0)

    def close(self) -> None:
        """Close every shard socket (the transport fails what is pending)."""
        for shard in list(self.shards.values()):
            self._close(shard)
        self.shards.clear()
        if self._context is not None:
            self._context.term()
            self._context = None
