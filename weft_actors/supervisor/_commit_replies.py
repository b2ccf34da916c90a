"""Replies given in their commit's own pass.

A client call whose answer is its own commit's (a start, a signal, a terminate...) hands the
engine's committer its reply (``answer_reply``): the commit's answer pass builds and queues
it, and the committer sends it (the shard's reply flush) before that pass runs any user code.
So a new workflow's first turn, or a signalled workflow's next step, that blocks the loop
cannot hold back the reply to a call that is already committed. The request's coroutine
still runs to its end (its follow-ups), and sends nothing more.

A ``result`` (and an ``execute``, once its start is committed) waits for the run's ending,
and an ``update`` for its handler's answer: its reply waits in the committer's
``waiting_replies``, and the commit that ends the run here (stores the answer) gives it in
its pass, as above.

Each op's reply is built here from the commit's intent and result, exactly as the engine's
call would return it: a ``WeftError`` result is the error the call raises.
"""

from __future__ import annotations

from typing import Any, Callable

from ..bus import encode_error, encode_reply
from ..codec import encode
from ..errors import WeftError
from ..shard import answer_reply, raise_for_outcome, update_answer

__all__ = ["CommitReply", "commit_reply"]

Send = Callable[[bytes, bytes, Any, "str | None"], None]
Waiting = dict[Any, list[Callable[[dict[str, Any]], bool]]]


def _handle(intent: Any, result: Any) -> dict[str, Any]:
    """``start``: the new (or existing) run's handle (``CreateWorkflow``, ``Created``)."""
    return {"id": intent.wid, "run_id": result.run_id}


def _signalled_handle(intent: Any, result: Any) -> dict[str, Any]:
    """``signal_with_start``: the handle of the run signalled (``SignalWithStart``)."""
    return {"id": intent.create.wid, "run_id": result[0].run_id}


def _nothing(intent: Any, result: Any) -> None:
    return None


def _ending(intent: Any, result: Any) -> None:
    """``execute``: its start's commit answers nothing yet; the run's ending will."""
    return None


SHAPES: dict[str, Callable[[Any, Any], Any]] = {
    "start": _handle,
    "signal_with_start": _signalled_handle,
    "signal": _nothing,
    "cancel": _nothing,
    "terminate": _nothing,
    "lift_quarantine": _nothing,
    "execute": _ending,
}
"""The ops answered by their own commit, and how each one's reply value is made from it
(``execute``: its start's error, or else a wait for the run's ending). ``result`` and
``update`` wait for a later commit from the start (``commit_reply``)."""


class CommitReply:
    """One request's reply, sent from its commit's answer pass (``sent`` then); called by the
    committer with the commit's intent and result."""

    __slots__ = ("send", "client", "request_id", "shape", "sent", "waiting", "key", "waiter", "started", "name", "holder")

    def __init__(self, send: Send, client: bytes, request_id: Any, shape: Callable[[Any, Any], Any], waiting: Waiting) -> None:
        self.send = send
        self.client = client
        self.request_id = request_id
        self.shape = shape
        self.sent = False
        self.waiting = waiting
        self.key: Any = None
        """What it waits for in ``waiting`` (a workflow id, or one and an update's request id)."""
        self.waiter: Callable[[dict[str, Any]], bool] | None = None
        self.started: dict[str, Any] = {}
        """What its reply holds besides the outcome (``execute``: the run started)."""
        self.name = ""
        """The update's name (``update``)."""
        self.holder: list[Any] = []
        """What ``answer_reply`` holds for it until a commit takes it."""

    def __call__(self, intent: Any, result: Any) -> bool:
        if isinstance(result, WeftError):
            return self._error(result)
        if self.shape is _ending:
            self.started = {"id": intent.wid, "run_id": result.run_id}
            self.wait(intent.wid, self.ended)
            return False
        return self._reply(self.shape(intent, result))

    def wait(self, key: Any, waiter: Callable[[dict[str, Any]], bool]) -> None:
        self.key, self.waiter = key, waiter
        self.waiting.setdefault(key, []).append(waiter)

    def ended(self, outcome: dict[str, Any]) -> bool:
        """The run ended here, with ``outcome``: reply as ``result`` would."""
        if self.sent:
            return False
        try:
            value = raise_for_outcome(self.key, outcome)
        except WeftError as error:
            return self._error(error)
        return self._reply({**self.started, "status": "completed", "result": encode(value, "workflow result")})

    def update_answered(self, answer: dict[str, Any]) -> bool:
        """The update's answer was stored here: reply as ``update`` would."""
        if self.sent:
            return False
        wid, _ = self.key
        try:
            value = update_answer(wid, self.name, answer)
        except WeftError as error:
            return self._error(error)
        return self._reply(encode(value, "update result"))

    def done(self) -> None:
        """The request is over: wait for nothing any more (nor let a commit take it)."""
        self.holder.clear()
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            waiters = self.waiting.get(self.key)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    del self.waiting[self.key]

    def _reply(self, value: Any) -> bool:
        reply = encode_reply(self.request_id, value)
        self.sent = True
        self.send(self.client, reply, self.request_id, None)
        return True

    def _error(self, error: WeftError) -> bool:
        reply = encode_error(self.request_id, error)
        self.sent = True
        self.send(self.client, reply, self.request_id, error.code)
        return True


def commit_reply(send: Send, client: bytes, request: dict[str, Any], waiting: Waiting) -> CommitReply | None:
    """Hand the committer ``request``'s reply if a commit answers its op (sets
    ``answer_reply`` in the calling task's context: call it from the request's own task; a
    ``result`` or an ``update`` waits in ``waiting``). ``done()`` it once the request is over."""
    op = request["op"]
    wid = request.get("wid")
    if op == "result":
        if not isinstance(wid, str):
            return None  # refused by the op itself
        reply = CommitReply(send, client, request["id"], _ending, waiting)
        reply.wait(wid, reply.ended)
        return reply
    if op == "update":
        name, request_id = request.get("name"), request.get("request_id")
        if not (isinstance(wid, str) and isinstance(name, str) and isinstance(request_id, str)):
            return None  # refused by the op itself
        reply = CommitReply(send, client, request["id"], _nothing, waiting)
        reply.name = name
        reply.wait((wid, request_id), reply.update_answered)
        return reply
    shape = SHAPES.get(op)
    if shape is None:
        return None
    reply = CommitReply(send, client, request["id"], shape, waiting)
    reply.holder.append(reply)
    answer_reply.set(reply.holder)
    return reply
