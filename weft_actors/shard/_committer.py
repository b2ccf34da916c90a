"""Group commit: every write intent produced during one turn of the event loop is applied in
one transaction and committed once (one fsync); then each submitter is called back in one pass.

On LMDB the commit runs on the loop thread. A writer thread was measured slower there: py-lmdb
releases the GIL on every put and get, so a writer beside a busy loop stalls in a GIL convoy.
A store with ``apply_async`` (PostgreSQL, whose commit is network round trips) commits off the
loop: one batch in flight while the next accumulates, each resumed once its commit is done.

Replies before user code: a client call answered by its own commit (a start, a signal, a
terminate...) may carry a reply (``answer_reply``: a shard's request sets it) that its answer
callback gives in the commit's own pass. A batch that answers such a call runs its answers
first, then ``after_answers`` (the shard's reply flush) once, then every other callback, all
in that one pass: no loop turn and no commit pass are added, and a first turn that blocks the
loop can never turn a committed start into ``OutcomeUnknown``. A commit that settles a call
later (a run's ending, an update's answer: ``_call_replies``) takes the same pass through
``reply_with_last``. Other batches, and everything in an embedded engine (whose callers share
its loop), resume in one plain pass.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
from typing import Any, Callable

from ..errors import EngineDeposed, OutcomeUnknown, WeftError
from ..store import LmdbStore
from ._failpoints import failpoint_from_env

__all__ = ["GroupCommitter", "answer_reply"]

log = logging.getLogger("weft_actors.shard")

Callback = Callable[[Any], None]

ASYNC_BATCH_LIMIT = 2000
"""Intents at most in one batch of an ``apply_async`` store: the applying of a batch happens
inside the store's transaction, which the server ends if it idles too long (PostgreSQL's
``LOCK_HOLD_LIMIT``); the rest goes in the next batch."""


Reply = Callable[[Any, Any], None]
"""``reply(intent, result)``: sends a caller's reply, built from its commit's result."""

answer_reply: contextvars.ContextVar[list[Reply] | None] = contextvars.ContextVar("weft_answer_reply", default=None)
"""Set by a request whose reply is its own commit's answer, to a one-item list holding its
``Reply``: the first ``submit_answer`` in that request's context takes it (and empties the
list, so nothing the request started later can take it again)."""


class _Answer:
    """A caller's callback (``submit_answer``) and the reply it carries, if any: called in
    the commit's own pass, before any callback that may run user code. Or, ``in_pass`` False
    (``reply_with_last``), a callback that may run user code, whose commit gives a reply in
    the pass: the callback runs after the replies, in order with the rest."""

    __slots__ = ("callback", "reply", "in_pass")

    def __init__(self, callback: Callback, reply: Reply | None, in_pass: bool = True) -> None:
        self.callback = callback
        self.reply = reply
        self.in_pass = in_pass

    def __call__(self, result: Any) -> None:
        self.callback(result)


class GroupCommitter:
    """Batches intents; ``callback(result)`` runs after the commit, with the intent's result or
    the ``WeftError`` that rejected it. Nothing is called back before its commit.

    ``batches``/``intents`` count committed transactions and the intents they carried.
    Once ``close(error)`` is called nothing more reaches the store: every intent, pending or
    later, fails with ``error`` (a deposed or stopped engine commits nothing).

    ``failpoint`` is armed only by ``WEFT_FAILPOINT`` (``_failpoints``), read here once.
    """

    __slots__ = (
        "_store", "_engine_id", "loop", "_intents", "_callbacks", "_scheduled", "_closed", "on_deposed", "on_promoted",
        "batches", "intents", "failpoint", "_apply_async", "_in_flight", "_drained", "_submitted", "_answered",
        "_replies", "_wakes", "after_answers", "on_unknown", "before_flush",
    )

    def __init__(
        self, store: LmdbStore, engine_id: str, loop: asyncio.AbstractEventLoop,
        on_unknown: Callable[[list[Any], WeftError], None] | None = None,
    ) -> None:
        self._store = store
        self._engine_id = engine_id
        self.loop = loop
        self._intents: list[Any] = []
        self._callbacks: list[Callback] = []
        self._scheduled = False
        self._closed: WeftError | None = None
        self.on_deposed: Callable[[EngineDeposed], None] | None = None
        self.on_promoted: Callable[[list[tuple[str, str, str]]], None] | None = None
        """Called after a commit that gave queued workflows a slot (``store.promoted``)."""
        self.on_unknown = on_unknown
        """Called with a batch's intents after it was answered ``OutcomeUnknown`` (its commit
        may yet land): what it would have started is driven again if it did (``_commit_retry``)."""
        self.batches = 0
        self.intents = 0
        self._apply_async: Callable[..., None] | None = getattr(store, "apply_async", None)
        self._in_flight = 0
        """Intents of the batch whose commit is under way (``apply_async`` stores only)."""
        self._drained: list[asyncio.Future[None]] = []
        self._submitted = 0
        self._answered = 0
        """Intents submitted and answered so far, counted for ``drain`` (``apply_async`` only)."""
        self._replies = 0
        """Callers' intents carrying a reply (``answer_reply``) among those pending: their
        batch answers first."""
        self._wakes: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None
        """While a batch gives its answers: what runs once their replies have left, in order."""
        self.after_answers: Callable[[], None] | None = None
        """Sends the replies a batch's answers queued (the shard's reply flush); None (an
        embedded engine): no reply to send, so every callback runs in order."""
        self.before_flush: Callable[[], None] | None = None
        """Takes the requests queued for the engine (the shard's drain) just before a batch is
        made, so those that came during the last pass ride in this commit instead of waiting a
        whole commit more; None (an embedded engine, whose callers share its loop): nothing to
        take."""
        self.failpoint = failpoint_from_env()
        if self.failpoint is not None:
            store.before_commit = lambda: self.failpoint.hit("after-apply")  # type: ignore[union-attr]

    def submit(self, intent: Any, callback: Callback) -> None:
        self._submitted += 1
        self._intents.append(intent)
        self._callbacks.append(callback)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self.flush)

    def submit_answer(self, intent: Any, callback: Callback) -> None:
        """``submit`` for an intent whose result answers a caller: ``callback`` runs in the
        commit's pass and must not run user code itself (it defers that: ``after_replies``).
        The caller's reply (``answer_reply``), if it set one, is sent in that pass too.

        Without ``after_answers`` (an embedded engine) no batch takes the answering pass and
        no reply is sent, so the callback goes in bare, as ``submit``'s: no ``_Answer`` to make
        and call through, no context read: three Python calls fewer per start, 2.4k of the
        engine's 624k instructions per workflow in ``bench/engine_throughput.py``."""
        if self.after_answers is None:
            self.submit(intent, callback)
            return
        holder = answer_reply.get()
        reply = None
        if holder:
            reply = holder.pop()
            self._replies += 1
        self.submit(intent, _Answer(callback, reply))

    def reply_with_last(self, reply: Reply) -> None:
        """The intent just submitted gives ``reply(intent, result)`` in its commit's pass
        (a run's ending, an update's answer: ``_call_replies``); its own callback runs after
        the replies have left, in order with the rest. A no-op in an embedded engine, which
        sends no reply."""
        if self.after_answers is None or not self._callbacks:
            return
        callback = self._callbacks[-1]
        if callback.__class__ is _Answer:  # already answering: a second reply rides along
            previous = callback.reply  # type: ignore[attr-defined]
            callback.reply = reply if previous is None else _both(previous, reply)  # type: ignore[attr-defined]
        else:
            self._callbacks[-1] = _Answer(callback, reply, False)
        self._replies += 1

    def submit_and_wait(self, intent: Any) -> asyncio.Future[Any]:
        """A future for one intent's result (for client-facing calls, not the hot path)."""
        future = self.loop.create_future()

        def done(result: Any) -> None:
            if not future.done():
                future.set_result(result)

        self.submit_answer(intent, done)
        return future

    def after_replies(self, function: Callable[..., Any], *args: Any) -> None:
        """Call ``function(*args)`` once the replies of the answers just given have left (later
        in this commit's pass), or now if no answer is being given. For what may run user code
        after an answer: a new run's first turn, a committed call's follow-up."""
        wakes = self._wakes
        if wakes is None:
            function(*args)
        else:
            wakes.append((function, args))

    def flush(self) -> None:
        if self._in_flight:
            self._scheduled = False
            return  # its end flushes what came meanwhile
        if self.before_flush is not None:
            try:  # still ``_scheduled``: what it submits joins this batch, no second flush
                self.before_flush()
            except Exception:
                log.exception("taking the requests before a commit failed")
        self._scheduled = False
        intents, callbacks = self._intents, self._callbacks
        if not intents:
            return
        answering = self._replies > 0
        if self._apply_async is not None and len(intents) > ASYNC_BATCH_LIMIT:
            self._intents, self._callbacks = intents[ASYNC_BATCH_LIMIT:], callbacks[ASYNC_BATCH_LIMIT:]
            intents, callbacks = intents[:ASYNC_BATCH_LIMIT], callbacks[:ASYNC_BATCH_LIMIT]
            # Both parts count as answering (a reply may be in either): at worst a batch of
            # steps alone takes the answering pass.
        else:
            self._intents, self._callbacks = [], []
            self._replies = 0
        store = self._store
        if self._closed is not None:
            self._resume(intents, callbacks, [self._closed] * len(intents), False, answering)
            self._answered += len(intents)
            self._wake_drained()
            return
        failpoint = self.failpoint
        if failpoint is not None:
            failpoint.batch()
            failpoint.hit("before")
        if self._apply_async is not None:
            self._in_flight = len(intents)
            self._apply_async(self._engine_id, intents, lambda results, committed: self._committed(intents, callbacks, results, committed, answering), self.loop)
            return
        before = store.commits
        results = store.apply(self._engine_id, intents)
        self._resume(intents, callbacks, results, store.commits != before, answering)

    def _committed(self, intents: list[Any], callbacks: list[Callback], results: list[Any], committed: bool, answering: bool) -> None:
        self._in_flight = 0
        try:
            self._resume(intents, callbacks, results, committed, answering)
        finally:
            self._answered += len(intents)
            self._wake_drained()
            if self._intents and not self._scheduled:
                self._scheduled = True
                self.loop.call_soon(self.flush)

    def _resume(self, intents: list[Any], callbacks: list[Callback], results: list[Any], committed: bool, answering: bool) -> None:
        """Call back each submitter once its batch has committed (or failed): callers first
        if it answers any (``_answer``), and everyone at once otherwise."""
        store = self._store
        if committed:
            self.batches += 1
            self.intents += len(intents)
            if self.failpoint is not None:
                self.failpoint.hit("after-commit")
        elif len(results) > 1 and isinstance(results[0], WeftError) and results[-1] is results[0]:
            results = _each_its_own(results)
        if answering and self.after_answers is not None:
            self._answer(intents, callbacks, results)  # nothing runs user code before the replies leave
        else:
            for callback, result in zip(callbacks, results):
                try:
                    callback(result)
                except Exception:
                    log.exception("commit callback failed")
        if store.promoted:
            promoted, store.promoted = store.promoted, []
            if self.on_promoted is not None:
                self.after_replies(self.on_promoted, promoted)
        first = results[0]
        if first.__class__ is EngineDeposed and self.on_deposed is not None and self._closed is None:
            self.on_deposed(first)
        elif first.__class__ is OutcomeUnknown and self.on_unknown is not None:
            self.on_unknown(intents, first)  # the failure path only: one class test per batch

    def _answer(self, intents: list[Any], callbacks: list[Callback], results: list[Any]) -> None:
        """Give this batch's answers and queue their replies, send those (``after_answers``),
        then run every other callback, in order, and what the answers deferred: all in this
        one pass, so nothing is delayed but the user code, by one reply flush."""
        wakes: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        outer, self._wakes = self._wakes, wakes  # a callback's own flush may nest a pass
        try:
            for intent, callback, result in zip(intents, callbacks, results):
                if callback.__class__ is _Answer:
                    if callback.in_pass:  # type: ignore[attr-defined]
                        try:
                            callback(result)
                        except Exception:
                            log.exception("commit callback failed")
                    else:  # it may run user code: after the replies
                        wakes.append((callback.callback, (result,)))  # type: ignore[attr-defined]
                    reply = callback.reply  # type: ignore[attr-defined]
                    if reply is not None:
                        try:
                            reply(intent, result)
                        except Exception:
                            log.exception("a reply could not be built")
                else:
                    wakes.append((callback, (result,)))
        finally:
            self._wakes = outer
        try:
            self.after_answers()  # type: ignore[misc]
        except Exception:
            log.exception("sending the replies of a commit failed")
        for function, args in wakes:
            try:
                function(*args)
            except Exception:
                log.exception("commit callback failed")

    async def drain(self) -> None:
        """Return once every intent submitted before the call has its answer (those that
        callbacks submit meanwhile may still be pending). Without ``apply_async``: one ``flush``."""
        if self._apply_async is None:
            self.flush()
            return
        target = self._submitted
        self.flush()
        while self._answered < target:
            waiter = self.loop.create_future()
            self._drained.append(waiter)
            await waiter

    def _wake_drained(self) -> None:
        waiters, self._drained = self._drained, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self, error: WeftError) -> None:
        """Fail everything from now on with ``error``; pending intents fail at the next flush."""
        if self._closed is None:
            self._closed = error

    @property
    def pending(self) -> int:
        """Intents submitted and not yet answered (in flight included)."""
        return len(self._intents) + self._in_flight


def _both(first: Reply, second: Reply) -> Reply:
    def both(intent: Any, result: Any) -> None:
        try:
            first(intent, result)
        finally:
            second(intent, result)

    return both


def _each_its_own(results: list[Any]) -> list[Any]:
    """A batch failed whole gives each caller its own copy of the one error: raised by every
    caller, a shared instance would gather every raise's frames in its traceback (600 callers
    made each traceback 900 frames long, and formatting them all took seconds)."""
    return [copy.copy(error) if isinstance(error, WeftError) else error for error in results]
