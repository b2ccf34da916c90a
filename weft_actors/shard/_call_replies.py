"""Replies a later commit gives, sent in that commit's pass.

A server's ``result`` or ``execute`` waits for a run's ending, and its ``update`` for the
handler's answer: both are settled by a commit other than the call's own. A server that hands
the engine a ``CallReply`` for such a call (``call_reply``, set in the request's context) gets
it called in the settling commit's own pass, before that pass runs any user code: the ending
or answering commit is tagged (``GroupCommitter.reply_with_last``) so that its batch takes
the answering pass. Without a ``CallReply`` (an embedded engine, whose callers share its
loop) nothing changes: the caller's coroutine reads the outcome as ever.

The reply is built from the commit's intent (the ``Finish``, the stored answer), not from the
actor, and only if the commit landed; the caller's coroutine still runs to its end, and sends
nothing more once its reply has left.
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

from ..errors import WeftError
from ._waiters import CallReply

if TYPE_CHECKING:
    from ._committer import GroupCommitter
    from ._waiters import Waiters

__all__ = ["CallReply", "call_reply", "reply_at_ending", "reply_at_answer", "reply_at_close"]


call_reply: contextvars.ContextVar[CallReply | None] = contextvars.ContextVar("weft_call_reply", default=None)
"""Set by a server's request whose answer a later commit gives (``result``, ``execute``,
``update``); read where the engine starts waiting on a local run."""


def reply_at_ending(committer: GroupCommitter, waiters: Waiters, wid: str) -> None:
    """The commit just submitted ends ``wid``'s run: the calls waiting here for that ending with
    a reply when it lands (some may begin to wait while it is under way) get it in its pass.
    A no-op in an embedded engine."""
    if committer.after_answers is not None:
        committer.reply_with_last(_Ending(waiters, wid))


def reply_at_answer(committer: GroupCommitter, waiters: Waiters, wid: str, request_id: str, name: str, answer: dict[str, Any]) -> None:
    """The commit just submitted stores the answer to update ``request_id``: the calls waiting
    here for it with a reply when it lands get it in its pass. The update's own call begins to
    wait only once this commit is under way (it appended the message that made it)."""
    if committer.after_answers is not None:
        committer.reply_with_last(_Answered(waiters, wid, request_id, name, answer))


def reply_at_close(waiters: Waiters, wid: str, outcome: dict[str, Any]) -> None:
    """An external close of ``wid`` (a terminate, the cancel of a run not yet started) has
    committed: called in its commit's answer pass, it gives the waiting calls their replies."""
    for reply in tuple(waiters.endings.get(wid, ())):
        if not reply.sent:
            reply.ended(wid, outcome)


class _Ending:
    """Gives the replies waiting for ``wid``'s ending, from the ending commit's ``Finish``."""

    __slots__ = ("waiters", "wid")

    def __init__(self, waiters: Waiters, wid: str) -> None:
        self.waiters = waiters
        self.wid = wid

    def __call__(self, intent: Any, result: Any) -> None:
        if isinstance(result, WeftError):
            return  # not committed: the callers learn the outcome as ever
        finish = intent.finish
        outcome = {"status": finish.status, "result": finish.result, "error": finish.error}
        for reply in tuple(self.waiters.endings.get(self.wid, ())):
            if not reply.sent:
                reply.ended(self.wid, outcome)


class _Answered:
    """Gives the replies waiting for an update's answer, once its commit has landed."""

    __slots__ = ("waiters", "wid", "request_id", "name", "answer")

    def __init__(self, waiters: Waiters, wid: str, request_id: str, name: str, answer: dict[str, Any]) -> None:
        self.waiters = waiters
        self.wid = wid
        self.request_id = request_id
        self.name = name
        self.answer = answer

    def __call__(self, intent: Any, result: Any) -> None:
        if isinstance(result, WeftError):
            return
        for reply in tuple(self.waiters.answers.get((self.wid, self.request_id), ())):
            if not reply.sent:
                reply.answered(self.wid, self.name, self.answer)

