"""The shard's hot requests served without a task of their own.

A ``start``, an ``execute``, a ``signal``, a ``result`` on a run held here or ended need no
coroutine: the intent goes to the committer at once (``Starts.submit_start``,
``WorkflowMessages.submit_signal``), its reply is given in its commit's pass
(``answer_reply``), and an ``execute``'s or a ``result``'s ending is a reply registered on the
waiters (``waiters.endings``), given in the ending commit's pass, with a timer for the call's
``wait``. A task per request cost a shard a context copy, a coroutine
chain and two task steps per workflow; callbacks cost a future and a timer handle.

Everything else takes the task path (``ShardServer._handle``): other ops, a delayed start, a
run not held here, a run dropped while waited for, a stopping engine, tracing on. The
semantics are the task path's: the same checks and errors (an error refused before the
commit is the reply), the same replies, the same ``wait`` budget.

``held`` counts the requests served here not answered yet: with the server's tasks, what
``max_queued_requests`` limits.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from .. import _tracing
from .._checks import validate_id
from ..bus import encode_error, encode_reply
from ..codec import decode, decode_args
from ..errors import WeftError
from ..shard import answer_reply, call_reply
from ..store import TERMINAL
from ._commit_replies import SHAPES, CommitReply, LaterReply, OnSent, Send
from ._moved import moved
from ._shard_ops import MAX_RESULT_WAIT
from ._wait_deadlines import WaitDeadlines

if TYPE_CHECKING:
    from ..shard import Engine
    from ._shard_ops import ShardOps

__all__ = ["InlineRequests"]

log = logging.getLogger("weft_actors.supervisor")

Spawn = Callable[[Coroutine[Any, Any, None]], None]

_START_SHAPE = SHAPES["start"]
_NO_VALUE = SHAPES["signal"]


def _ignore(result: Any) -> None:
    """A signal's commit result: its reply (``answer_reply``) says all of it."""


def _wait_of(request: dict[str, Any]) -> float:
    """``result``'s ``wait``, bounded as ``ShardOps.result`` bounds it."""
    wait = request.get("wait")
    return MAX_RESULT_WAIT if wait is None else max(0.0, min(float(wait), MAX_RESULT_WAIT))


def _internal(exc: Exception) -> WeftError:
    return WeftError(f"internal error: {type(exc).__name__}: {exc}")


class InlineRequests:
    """The shard's requests served by callbacks; ``serve`` says whether it took one."""

    __slots__ = ("engine", "ops", "send", "spawn", "on_task_sent", "held", "served", "_starts", "_messages", "_idle", "actors", "waiters", "loop", "deadlines")

    def __init__(self, engine: Engine, ops: ShardOps, send: Send, spawn: Spawn, on_task_sent: OnSent) -> None:
        self.engine = engine
        self.ops = ops
        self.send = send
        self.spawn = spawn
        """Gives a request's rest a task of the server's (held as its tasks are)."""
        self.on_task_sent = on_task_sent
        self.held = 0
        self.served = 0
        """Requests served here so far (``requests_inline_total`` in the shard's stats)."""
        # The engine's parts: this is its server, in its process, on its loop.
        self._starts = engine.starts
        self._messages = engine.messages
        # Read once, not through the facade per request: an open engine keeps these.
        self.actors = engine.actors
        self.waiters = engine.waiters
        self.loop = engine.committer.loop
        self.deadlines = WaitDeadlines(self.loop)
        self._idle: asyncio.Future[None] | None = None

    def serve(self, client: bytes, request: dict[str, Any]) -> bool:
        """Serve ``request`` here if its op and state allow; False: it needs a task."""
        op = request["op"]
        if op == "execute" or op == "start":
            if _tracing.ACTIVE is not None or request.get("start_delay") is not None or request.get("start_at") is not None:
                return False
            self.served += 1
            if op == "start":
                self._start(client, request)
            else:
                self._execute(client, request)
            return True
        if op == "signal":
            self.served += 1
            self._signal(client, request)
            return True
        if op == "result":
            wid = request.get("wid")
            if wid.__class__ is not str or self.engine.state != "running":
                return False
            if wid not in self.actors:
                return self._ended_before(client, request["id"], wid)
            try:
                wait = _wait_of(request)
            except (TypeError, ValueError):
                return False  # the task path says what is wrong with it
            self.held += 1
            self.served += 1
            _Waiting(self, LaterReply(self.send, client, request["id"], self._answered, False), wid, wait).follow()
            return True
        return False

    def _start(self, client: bytes, request: dict[str, Any]) -> None:
        def submit() -> None:
            self._starts.submit_start(None, False, request["workflow"], decode_args(request["args"]), self.ops.start_options(request))

        self._answered_by_commit(client, request["id"], _START_SHAPE, submit)

    def _signal(self, client: bytes, request: dict[str, Any]) -> None:
        def submit() -> None:
            payload = decode(request["payload"], "signal payload")
            self._messages.submit_signal(request["wid"], request["name"], payload, request.get("request_id"), _ignore)

        self._answered_by_commit(client, request["id"], _NO_VALUE, submit)

    def _answered_by_commit(self, client: bytes, request_id: Any, shape: Callable[[Any, Any], Any], submit: Callable[[], None]) -> None:
        """``submit()`` a call its own commit answers, its reply (``shape``) handed over for
        that commit's pass; an error raised before anything was submitted is the reply."""
        token = answer_reply.set([CommitReply(self.send, client, request_id, shape, self._answered, False)])
        try:
            submit()
        except Exception as exc:
            self._refused(client, request_id, exc)
            return
        finally:
            answer_reply.reset(token)
        self.held += 1

    def _execute(self, client: bytes, request: dict[str, Any]) -> None:
        request_id = request["id"]
        try:
            waiting = _Waiting(self, LaterReply(self.send, client, request_id, self._answered, False), "", _wait_of(request))
            waiting.wid = self._starts.submit_start(
                None, False, request["workflow"], decode_args(request["args"]), self.ops.start_options(request), waiting.committed
            )
        except Exception as exc:
            self._refused(client, request_id, exc)
            return
        self.held += 1

    def _ended_before(self, client: bytes, request_id: Any, wid: str) -> bool:
        """A ``result`` of a run not held here that has ended: its stored ending is the reply
        (as ``Engine.result`` reads it). Anything else (no such workflow, a run going on
        elsewhere, a bad id) goes to the task path, which says what it is or waits."""
        try:
            record = self.engine.store.get_workflow(validate_id(wid))
        except Exception:
            return False
        if record is None or record["status"] not in TERMINAL:
            return False
        self.served += 1
        self.held += 1
        LaterReply(self.send, client, request_id, self._answered, False).ended(wid, record)
        return True

    def _refused(self, client: bytes, request_id: Any, exc: Exception) -> None:
        """Refused before its commit: the reply is the error (as the task path's)."""
        if not isinstance(exc, WeftError):
            log.error("request failed", exc_info=exc)
            exc = _internal(exc)
        self.send(client, encode_error(request_id, exc), request_id, exc.code)

    def _answered(self, task: asyncio.Task[Any] | None) -> None:
        """A request served here has its reply: it is no longer held."""
        self.held -= 1
        if self.held == 0 and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    def handed_over(self) -> None:
        """A request served here goes on in a task (counted with the server's tasks)."""
        self._answered(None)

    async def settled(self, timeout: float) -> None:
        """Return once nothing served here is held, or after ``timeout`` seconds (a stop)."""
        if self.held == 0:
            return
        self._idle = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait([self._idle], timeout=timeout)
        finally:
            self._idle = None

    async def rest_of_result(self, client: bytes, request_id: Any, wid: str, started: dict[str, Any] | None, wait: float) -> None:
        """The task path for a waiting ``result`` or ``execute`` this module could not follow
        (a run not held here, dropped, or woken to look again): ``ShardOps.result``, with the
        remaining ``wait``; an ``execute``'s reply holds its run's handle."""
        later = LaterReply(self.send, client, request_id, self.on_task_sent)
        later.started = started
        call_reply.set(later)
        code = None
        try:
            outcome = await self.ops.result({"wid": wid, "wait": wait}, started)
            if later.sent:
                return
            reply = encode_reply(request_id, outcome if started is None else {**started, **outcome})  # type: ignore[dict-item]
        except WeftError as error:
            reply, code = encode_error(request_id, error), error.code
        except Exception as exc:
            log.exception("request result failed")
            internal = _internal(exc)
            reply, code = encode_error(request_id, internal), internal.code
        if not later.sent:
            self.send(client, reply, request_id, code)


class _Waiting:
    """A call waiting for a run held here to end, its reply on the waiters: given by the
    ending commit's pass, or here if the run ends otherwise (a close, a stop) or the ``wait``
    runs out; a run dropped meanwhile is looked for again by the task path. An ``execute``
    is one from its start's commit on (``committed``)."""

    __slots__ = ("requests", "later", "wid", "wait", "future", "token", "deadline")

    deadline: float
    """When the ``wait`` runs out, in loop time (set by ``WaitDeadlines.add``)."""

    def __init__(self, requests: InlineRequests, later: LaterReply, wid: str, wait: float) -> None:
        self.requests = requests
        self.later = later
        self.wid = wid
        self.wait = wait

    def committed(self, result: Any) -> None:
        """An ``execute``'s start, in its commit's pass: a run created here waits for its
        ending from now on, as ``Engine.execute`` does (its actor is made later in this pass,
        and the run cannot end before a later commit); any other waits in a task."""
        later = self.later
        if isinstance(result, WeftError):
            later.failed(result)
            return
        later.started = {"id": self.wid, "run_id": result.run_id}
        if result.created and result.status == "running":
            self._wait_for_ending(self.requests.waiters.add_held)
        else:
            self.hand_over(self.wait)  # an existing run, or one waiting in its type's queue

    def follow(self) -> None:
        """A ``result`` on a run held here (or gone meanwhile: the task path looks for it)."""
        requests = self.requests
        if self.wid not in requests.actors or requests.engine.state != "running":
            self.hand_over(self.wait)
            return
        self._wait_for_ending(requests.waiters.add)

    def _wait_for_ending(self, add: Callable[[str, asyncio.Future[Any]], None]) -> None:
        requests = self.requests
        wid = self.wid
        self.future = future = requests.loop.create_future()
        add(wid, future)
        waiters = requests.waiters
        waiters.add_reply(waiters.endings, wid, self.later)
        self.token = requests.deadlines.add(self, self.wait)  # sets ``deadline``
        future.add_done_callback(self._ended)

    def _forget(self) -> None:
        waiters = self.requests.waiters
        waiters.remove(self.wid, self.future)
        waiters.remove_reply(waiters.endings, self.wid, self.later)

    def expired(self) -> None:
        """The ``wait`` ran out first (``WaitDeadlines``)."""
        self._forget()
        self.future.remove_done_callback(self._ended)
        if not self.later.sent:
            self.later.running()

    def _ended(self, future: asyncio.Future[Any]) -> None:
        self.requests.deadlines.ended(self.token)
        self._forget()
        later = self.later
        if later.sent:
            return  # the ending commit's pass replied
        error = future.exception()
        if error is not None:
            error = moved(self.requests.ops, error, self.wid, self.deadline - self.requests.loop.time(), later.started)
            later.failed(error if isinstance(error, WeftError) else _internal(error))  # type: ignore[arg-type]
            return
        outcome = future.result()
        if outcome is None:  # dropped, or a hint: look again, for what is left of the wait
            self.hand_over(max(0.0, self.deadline - self.requests.loop.time()))
            return
        later.ended(self.wid, outcome)

    def hand_over(self, wait: float) -> None:
        requests = self.requests
        later = self.later
        requests.spawn(requests.rest_of_result(later.client, later.request_id, self.wid, later.started, wait))
        requests.handed_over()
