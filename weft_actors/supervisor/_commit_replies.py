"""Replies given in their commit's own pass.

A client call whose answer is its own commit's (a start, a signal, a terminate...) hands the
engine's committer its reply (``answer_reply``): the commit's answer pass builds and queues
it, and the committer sends it (the shard's reply flush) before that pass runs any user code.
So a new workflow's first turn, or a signalled workflow's next step, that blocks the loop
cannot hold back the reply to a call that is already committed. The request's coroutine
still runs to its end (its follow-ups), and sends nothing more.

A ``result``, an ``execute`` (once its start is committed) and an ``update`` are answered by
a later commit: the run's ending, the commit storing the handler's answer. Their request
hands the engine a ``LaterReply`` (``call_reply``), which that commit's pass gives as above,
when the engine waits on a run it holds. The ending's result travels as stored, never decoded
and encoded again here.

Each op's reply is built here from the commit's intent and result, exactly as the engine's
call would return it: a ``WeftError`` result is the error the call raises.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from ..bus import encode_error, encode_reply
from ..errors import WeftError
from ..codec import encode
from ..shard import answer_reply, call_reply, raise_for_outcome, update_outcome

__all__ = ["CommitReply", "LaterReply", "commit_reply"]

Send = Callable[[bytes, bytes, Any, "str | None"], None]
OnSent = Callable[["asyncio.Task[Any] | None"], None]


def _handle(intent: Any, result: Any) -> dict[str, Any]:
    """``start``: the new (or existing) run's handle (``CreateWorkflow``, ``Created``)."""
    return {"id": intent.wid, "run_id": result.run_id}


def _signalled_handle(intent: Any, result: Any) -> dict[str, Any]:
    """``signal_with_start``: the handle of the run signalled (``SignalWithStart``)."""
    return {"id": intent.create.wid, "run_id": result[0].run_id}


def _nothing(intent: Any, result: Any) -> None:
    return None


SHAPES: dict[str, Callable[[Any, Any], Any]] = {
    "start": _handle,
    "signal_with_start": _signalled_handle,
    "signal": _nothing,
    "cancel": _nothing,
    "terminate": _nothing,
    "lift_quarantine": _nothing,
}
"""The ops answered by their own commit, and how each one's reply value is made from it.
Not ``execute``, ``update`` or ``result``: a later commit (a run's ending, the update's
handler) gives their answers."""


class CommitReply:
    """One request's reply, sent from its commit's answer pass (``sent`` then); called by the
    committer with the commit's intent and result."""

    __slots__ = ("send", "client", "request_id", "shape", "sent", "on_sent", "task")

    def __init__(self, send: Send, client: bytes, request_id: Any, shape: Callable[[Any, Any], Any], on_sent: OnSent | None = None, in_task: bool = True) -> None:
        self.send = send
        self.client = client
        self.request_id = request_id
        self.shape = shape
        self.sent = False
        self.on_sent = on_sent
        """Called with the request's task once its reply has left: it is answered, though its
        coroutine still runs to its end."""
        self.task = asyncio.current_task() if on_sent is not None and in_task else None
        """None without ``on_sent``, or served without a task (``in_task`` False)."""

    def __call__(self, intent: Any, result: Any) -> None:
        request_id = self.request_id
        if isinstance(result, WeftError):
            reply, code = encode_error(request_id, result), result.code
        else:
            reply, code = encode_reply(request_id, self.shape(intent, result)), None
        self.sent = True
        self.send(self.client, reply, request_id, code)
        if self.on_sent is not None:
            self.on_sent(self.task)


_ENCODED_NONE = encode(None)


class LaterReply:
    """The reply of a call a later commit answers (``result``, ``execute``, ``update``), given
    in that commit's pass (``shard.CallReply``); ``started`` is what an ``execute``'s reply
    holds besides the outcome (its run's handle)."""

    __slots__ = ("send", "client", "request_id", "sent", "on_sent", "task", "started")

    def __init__(self, send: Send, client: bytes, request_id: Any, on_sent: OnSent | None, in_task: bool = True) -> None:
        """``in_task`` False: the call is served without a task of its own (``_inline_requests``),
        so none is looked up for ``on_sent``: it is given None."""
        self.send = send
        self.client = client
        self.request_id = request_id
        self.sent = False
        self.on_sent = on_sent
        self.task = asyncio.current_task() if on_sent is not None and in_task else None
        self.started: dict[str, Any] | None = None

    def ended(self, wid: str, outcome: dict[str, Any]) -> None:
        if outcome["status"] == "completed":
            value = {"status": "completed", "result": outcome["result"]}
            self._reply(value if self.started is None else {**self.started, **value})
            return
        try:
            raise_for_outcome(wid, outcome)
        except WeftError as error:
            self._error(error)

    def answered(self, wid: str, name: str, answer: dict[str, Any]) -> None:
        if "ok" in answer:
            self._reply(_ENCODED_NONE if answer["ok"] is None else answer["ok"])
            return
        try:
            update_outcome(wid, name, answer)
        except WeftError as error:
            self._error(error)

    def running(self) -> None:
        """The call's ``wait`` ran out before the run ended: it says so, as ``result`` does."""
        value = {"status": "running"}
        self._reply(value if self.started is None else {**self.started, **value})

    def failed(self, error: WeftError) -> None:
        self._error(error)

    def _reply(self, value: Any) -> None:
        self._sent(encode_reply(self.request_id, value), None)

    def _error(self, error: WeftError) -> None:
        self._sent(encode_error(self.request_id, error), error.code)

    def _sent(self, reply: bytes, code: str | None) -> None:
        self.sent = True
        self.send(self.client, reply, self.request_id, code)
        if self.on_sent is not None:
            self.on_sent(self.task)


LATER = frozenset(("result", "execute", "update"))
"""The ops a later commit answers."""


def commit_reply(send: Send, client: bytes, request: dict[str, Any], on_sent: OnSent | None = None) -> CommitReply | LaterReply | None:
    """Hand the engine ``request``'s reply if a commit answers its op: its own
    (``answer_reply``) or a later one (``call_reply``). Both are set in the calling task's
    context: call it from the request's own task, which ``on_sent`` is given once the reply
    has left."""
    op = request["op"]
    shape = SHAPES.get(op)
    if shape is not None:
        reply = CommitReply(send, client, request["id"], shape, on_sent)
        answer_reply.set([reply])
        return reply
    if op in LATER:
        later = LaterReply(send, client, request["id"], on_sent)
        call_reply.set(later)
        return later
    return None
