"""A shard process: one Engine on a uvloop loop, serving requests from the front door.

The zmq sockets are read by registering their file descriptors with the loop and draining
while ``EVENTS & POLLIN`` (measured ~2.5x zmq.asyncio here). The process opens its own LMDB
environment and zmq context: nothing crosses the spawn boundary but the config and a pipe.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from multiprocessing.connection import Connection
from typing import Any, Coroutine

import zmq

from ..bus import START_OPS, decode_hint, decode_request, encode_error, encode_hint, encode_reply, hint_topic, publisher, shard_identity, subscriber
from ..bus._frames import decode_batch, encode_batch, readable, recv_frames, send_frames
from ..errors import Overloaded, WeftError
from ..shard import Engine
from ..shard._rebalance import rebalance
from ._commit_replies import commit_reply
from ._config import ShardConfig
from ._direct_socket import DirectPeer, DirectSocket, turn_away_new
from ._inline_requests import InlineRequests
from ._leaving import successor_of
from ._shard_ops import ShardOps
from ._store_wait import open_when_reachable

__all__ = ["EXIT_DEPOSED", "ShardServer"]

log = logging.getLogger("weft_actors.supervisor")

EXIT_DEPOSED = 4
DRAIN_REQUESTS = 2000
"""Requests taken from the front door per loop turn; the rest wait for the next turn, so a
backlog never makes one turn long enough to miss a heartbeat."""
REPLY_LINGER_MS = 1000
"""How long a stopping shard's last replies may take to leave its sockets."""
REPLY_BATCH_BYTES = 4 << 20
"""A batch of replies leaves once it holds this much, not only at the end of the turn: the
front door then never holds one huge message of large results at once."""


def load_app(name: str) -> Any:
    return importlib.import_module(name)


class ShardServer:
    def __init__(self, config: ShardConfig, control: Connection) -> None:
        self.config = config
        self.control = control
        self.engine: Engine
        self.ops: ShardOps
        self._stopping = False
        self._done: asyncio.Future[int]
        self._drain_scheduled = False
        self._tasks: set[asyncio.Task[Any]] = set()
        """The requests held: taken and not answered yet (``max_queued_requests`` counts them)."""
        self._following: set[asyncio.Task[Any]] = set()
        """Requests answered in their commit's pass whose coroutines still run to their end:
        no longer held (the front door has their reply), waited for by a drain all the same."""
        self._replies: list[Any] = []
        """Replies of this loop turn not sent yet, flat: client, reply, request id, error code."""
        self.requests_overloaded = 0
        self._reply_bytes = 0
        self.direct: DirectSocket | None = None
        """The shard's own socket for clients that hold the directory (``_direct_socket``)."""

    async def serve(self) -> int:
        config = self.config
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        self.context = zmq.Context()
        self.hints_out = publisher(self.context, config.hints_publish) if config.hints else None
        self.engine = Engine(
            config.data_dir,
            app=load_app(config.app),
            heartbeat=config.heartbeat,
            ttl=config.ttl,
            slot=config.slot,
            payload_limit=config.payload_limit,
            retention=config.retention,
            max_live_actors=config.max_live_actors,
            max_active_workflows=config.max_active_workflows,
            max_inbox=config.max_inbox,
            max_inflight_activities=config.max_inflight_activities,
            max_running=config.max_running,
            quarantine_after=config.quarantine_after,
            stall_threshold=config.stall_threshold,
            tune_gc=True,
            on_commit_hint=self._publish_hint if self.hints_out is not None else None,
            on_done_interest=self._done_interest if config.hints else None,
            warn_type_mismatch=False,  # the supervisor says it, once for all its shards
        )
        if not await open_when_reachable(self.engine, self.control, config.slot):
            self.context.destroy(linger=0)
            return 0  # drained while it waited for its store
        # A commit's pass sends its replies before any user code (``_commit_replies``); the
        # requests queued meanwhile are taken just before the next commit, to ride in it.
        self.engine.committer.after_answers, self.engine.committer.before_flush = self._flush_replies, self._drain_requests
        self.ops = ShardOps(self.engine)
        self.inline = InlineRequests(self.engine, self.ops, self._send, self._spawn, self._answered_early)
        self.dealer = self.context.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.IDENTITY, shard_identity(config.slot))
        self.dealer.setsockopt(zmq.LINGER, 0)
        self.dealer.setsockopt(zmq.SNDHWM, 100_000)
        self.dealer.setsockopt(zmq.RCVHWM, 100_000)
        self.dealer.connect(config.backend)
        loop.add_reader(self.dealer.fileno(), self._schedule_drain)
        if config.direct_bind is not None:
            self.direct = DirectSocket(self.context, config.direct_bind, config.payload_limit + 64 * 1024)
            loop.add_reader(self.direct.socket.fileno(), self._schedule_drain)
        if config.hints:
            self.hints_in = subscriber(self.context, config.hints_subscribe)
            loop.add_reader(self.hints_in.fileno(), self._drain_hints)
        loop.add_reader(self.control.fileno(), self._on_control)
        self.control.send(("ready", self.engine.engine_id, os.getpid(), self.direct.endpoint if self.direct is not None else ""))
        watcher = loop.create_task(self._watch())
        self._schedule_drain()
        try:
            return await self._done
        finally:
            watcher.cancel()
            self._close_sockets(loop)

    # -- requests -------------------------------------------------------------------------

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain_requests)

    def _drain_requests(self) -> None:
        """Take the queued requests, at most ``DRAIN_REQUESTS`` a turn; zmq's FD is edge-triggered, so drain until EVENTS is clear."""
        self._drain_scheduled = False
        dealer = self.dealer
        if dealer.closed:
            return  # a drain queued just before the sockets closed
        create_task = asyncio.get_running_loop().create_task
        limit = self.config.payload_limit + 64 * 1024
        most = self.config.max_queued_requests
        taken = 0
        while not self._stopping and readable(dealer):
            if taken >= DRAIN_REQUESTS:
                self._schedule_drain()  # after the tasks this turn made have run
                return
            frames = recv_frames(dealer)
            try:
                if len(frames) != 1:
                    raise ValueError(f"a message of {len(frames)} frames")
                items = decode_batch(frames[0])
            except ValueError as exc:
                log.warning("dropped a front door message: %s", exc)
                continue
            taken += len(items) // 2
            for index in range(0, len(items) - 1, 2):
                self._take(items[index], items[index + 1], create_task, limit, most)
        direct = self.direct
        if direct is not None and not direct.socket.closed:
            while not self._stopping and readable(direct.socket):
                if taken >= DRAIN_REQUESTS:
                    self._schedule_drain()
                    return
                for client, frame in direct.take():
                    taken += 1
                    self._take(client, frame, create_task, limit, most)
            if direct.waiting and not self._replies:
                self._flush_replies()  # errors answered by ``take`` itself

    def _take(self, client: bytes, frame: bytes, create_task: Any, limit: int, most: int) -> None:
        """Serve one request, from the front door or a direct client alike."""
        try:
            request = decode_request(frame, limit)
        except WeftError as error:
            request_id = getattr(error, "request_id", None)
            self._send(client, encode_error(request_id, error), request_id, error.code)
            return
        if len(self._tasks) + self.inline.held >= most:
            self._refuse(client, request["id"], most)
            return
        if self.inline.serve(client, request) or self._refused_start(client, request):
            return  # a start served inline is admitted (or refused) by ``submit_start``
        task = create_task(self._handle(client, request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn(self, call: Coroutine[Any, Any, None]) -> None:
        """A held request's rest in a task of its own (``InlineRequests``' fallback)."""
        task = asyncio.get_running_loop().create_task(call)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _refused_start(self, client: bytes, request: dict[str, Any]) -> bool:
        """Refuse a start the engine would refuse (``Engine.admit``) before any work for it: a
        refusal must cost a saturated shard almost nothing (no task, no dispatch), or refusing
        takes the time serving needs. A delayed start is never refused (it makes no actor)."""
        if request.get("op") not in START_OPS or request.get("start_delay") is not None or request.get("start_at") is not None:
            return False
        try:
            self.engine.admit()
        except WeftError as error:
            self._send(client, encode_error(request["id"], error), request["id"], error.code)
            return True
        return False

    def _refuse(self, client: bytes, request_id: Any, most: int) -> None:
        self.requests_overloaded += 1
        error = Overloaded(
            f"shard {self.config.slot} holds {len(self._tasks) + self.inline.held} requests, its limit "
            f"(max_queued_requests={most}): retry later, with backoff",
            limit="max_queued_requests",
            value=most,
        )
        self._send(client, encode_error(request_id, error), request_id, error.code)

    async def _handle(self, client: bytes, request: dict[str, Any]) -> None:
        request_id = request["id"]
        answered = commit_reply(self._send, client, request, self._answered_early)
        code = None
        try:
            value = await self.ops.dispatch(request)
            if answered is not None and answered.sent:
                return  # its commit's pass replied
            reply = encode_reply(request_id, value)
        except WeftError as error:
            reply = encode_error(request_id, error)
            code = error.code
        except Exception as exc:
            log.exception("request %s failed", request.get("op"))
            reply = encode_error(request_id, WeftError(f"internal error: {type(exc).__name__}: {exc}"))
            code = WeftError.code
        if answered is None or not answered.sent:  # else its commit's pass replied
            self._send(client, reply, request_id, code)

    def _answered_early(self, task: asyncio.Task[Any] | None) -> None:
        """``task``'s request was answered from its commit's pass: from then on it no longer
        counts as held (a shard stopped before the coroutine ended refused one request too
        many once it went on, the front door having counted that one answered)."""
        if task is not None and task in self._tasks:
            self._tasks.discard(task)
            self._following.add(task)
            task.add_done_callback(self._following.discard)

    def _send(self, client: bytes, reply: bytes, request_id: Any, code: str | None) -> None:
        """Queue a reply; the turn's replies leave together, as one batch."""
        replies = self._replies
        if type(client) is DirectPeer:
            direct = self.direct
            assert direct is not None
            if not direct.waiting and not replies:
                asyncio.get_running_loop().call_soon(self._flush_replies)
            direct.queue(client, reply)  # type: ignore[arg-type]
            return
        if not replies:
            asyncio.get_running_loop().call_soon(self._flush_replies)
        replies += (client, reply, request_id, code)
        self._reply_bytes += len(reply)
        if self._reply_bytes >= REPLY_BATCH_BYTES:
            self._flush_replies()

    def _flush_replies(self) -> None:
        if self.direct is not None and self.direct.waiting:
            self.direct.flush()
            self._schedule_drain()
        replies, self._replies = self._replies, []
        self._reply_bytes = 0
        if not replies or self.dealer.closed:
            return
        try:
            send_frames(self.dealer, [encode_batch(replies)])
        except zmq.ZMQError as exc:
            log.warning("could not send %d replies: %s", len(replies) // 4, exc)
        # A send can swallow the edge that announces new input: look again.
        self._schedule_drain()

    # -- hints ----------------------------------------------------------------------------

    def _publish_hint(self, kind: str, subject: str) -> None:
        try:
            self.hints_out.send(encode_hint(kind, subject), zmq.NOBLOCK)  # type: ignore[union-attr]
        except zmq.ZMQError:
            pass  # a lost hint costs latency, never correctness

    def _done_interest(self, wid: str, interested: bool) -> None:
        """Take ``wid``'s done hints while a caller here waits for it to end elsewhere."""
        sock = getattr(self, "hints_in", None)
        if sock is not None and not sock.closed:
            sock.setsockopt(zmq.SUBSCRIBE if interested else zmq.UNSUBSCRIBE, hint_topic("workflow-done", wid))
            asyncio.get_running_loop().call_soon(self._drain_hints)  # the call may swallow an input edge

    def _drain_hints(self) -> None:
        sock = self.hints_in
        while not sock.closed and readable(sock):
            hint = decode_hint(sock.recv(zmq.NOBLOCK))
            if hint is None or self.engine.state != "running":
                continue
            kind, subject = hint
            self.engine.hint(None if kind == "engine-dead" else subject, kind)

    # -- control --------------------------------------------------------------------------

    def _on_control(self) -> None:
        try:
            message = self.control.recv()
        except (EOFError, OSError):
            message = ("drain",)  # the supervisor is gone: stop cleanly
        if message[0] == "drain" and not self._stopping:
            # ``("drain", siblings, grace)``: the supervisor stops; a live peer outside it takes over
            asyncio.ensure_future(self._leave(*message[1:]) if len(message) == 3 else self._drain())
        elif message[0] == "hand-off" and not self._stopping:  # ``supervisor._handoffs``
            asyncio.ensure_future(self._drain(message[1], message[2]))
        elif message[0] == "adopt":
            self.engine.adopt(message[1])
        elif message[0] == "rebalance" and not self._stopping:  # ``supervisor._resize``: after a growth
            asyncio.ensure_future(rebalance(self.engine, message[1], message[2], message[3], lambda to, wids: self.control.send(("handed", to, wids))))

    async def _leave(self, siblings: list[str], grace: float) -> None:
        """The supervisor stops: hand off to a live peer outside it if one runs this app's
        types (``_leaving``), else release as at any stop. Calls waiting here end with
        ``EngineStopped``: no shard of this front door is left to answer them."""
        self.ops.moves_waits = False
        successor = successor_of(self.engine, siblings) if self.engine.state == "running" else None
        await self._drain(successor, grace, wake=None)

    async def _drain(self, successor: str | None = None, grace: float = 0.0, wake: Any = "pipe") -> None:
        """Stop taking requests (a direct client's are turned away), let what runs finish or
        park, release the claims (or hand them to ``successor``: ``Engine.hand_off``), exit 0."""
        self._stopping = True
        turn_away_new(self.direct, asyncio.get_running_loop())
        log.info("shard %d draining%s", self.config.slot, "" if successor is None else f" to engine {successor}")
        if successor is None:
            await self.engine.close()
        else:
            if wake == "pipe":  # a successor of this supervisor: woken through it
                wake = lambda wids: self.control.send(("handed", successor, wids))  # noqa: E731
            await self.engine.hand_off(successor, grace, wake=wake)
        deadline = asyncio.get_running_loop().time() + 2
        await self.inline.settled(2)  # a stopped engine answers each of them (EngineStopped)
        if self._tasks or self._following:  # some may have gone on in a task meanwhile
            await asyncio.wait(list(self._tasks | self._following), timeout=max(0.0, deadline - asyncio.get_running_loop().time()))
        if not self._done.done():
            self._done.set_result(0)

    async def _watch(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(0.1)
            ticks += 1
            if self.engine.state == "deposed" and not self._done.done():
                log.error("shard %d was deposed; exiting", self.config.slot)
                self._done.set_result(EXIT_DEPOSED)
                return
            if ticks % 10 == 0 and self.engine.state == "running":
                try:
                    self.control.send(("stats", {
                        **self.engine.stats(), "requests_held": len(self._tasks) + self.inline.held, "requests_overloaded_total": self.requests_overloaded,
                        "requests_inline_total": self.inline.served,
                    }))
                except (OSError, ValueError):
                    pass

    def _close_sockets(self, loop: asyncio.AbstractEventLoop) -> None:
        self._flush_replies()  # the last turn's replies, if its flush has not run yet
        for sock in (self.dealer, getattr(self, "hints_in", None), self.direct.socket if self.direct is not None else None):
            if sock is not None:
                try:
                    loop.remove_reader(sock.fileno())
                except Exception:
                    pass
        try:
            loop.remove_reader(self.control.fileno())
        except Exception:
            pass
        # The last replies (a handoff's ``WorkflowMoved`` among them) may still sit in zmq's
        # queues: they get a moment to leave; everything else is dropped at once.
        for sock in (self.dealer, self.direct.socket if self.direct is not None else None):
            if sock is not None and not sock.closed:
                sock.close(linger=REPLY_LINGER_MS)
        self.context.destroy(linger=0)
