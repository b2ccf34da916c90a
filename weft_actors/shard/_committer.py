"""Group commit: every write intent produced during one turn of the event loop is applied in
one transaction and committed once (one fsync); then each submitter is called back in one pass.

On LMDB the commit runs on the loop thread. A writer thread was measured slower there: py-lmdb
releases the GIL on every put and get, so a writer beside a busy loop stalls in a GIL convoy.
A store with ``apply_async`` (PostgreSQL, whose commit is network round trips) commits off the
loop: one batch in flight while the next accumulates, each resumed once its commit is done.

Replies before user code: where answers leave the process (a shard: ``before_wake`` is its
reply flush), a batch that answers a caller (``submit_answer``: a start, a signal, any client
call) resumes in two steps. Its answers are given in the commit's own pass; whatever would run
user code (an actor going on, a new run's first turn, a call's follow-up) waits one loop turn,
behind the answered callers' own steps, and ``before_wake`` sends their replies first. So a
first turn that blocks the loop can never turn a committed start into ``OutcomeUnknown``. A
batch of actor steps alone resumes at once, and so does everything in an embedded engine,
whose callers share its loop (nothing to send: they run once the loop is free anyway).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ..errors import EngineDeposed, OutcomeUnknown, WeftError
from ..store import LmdbStore
from ._failpoints import failpoint_from_env

__all__ = ["GroupCommitter"]

log = logging.getLogger("weft_actors.shard")

Callback = Callable[[Any], None]

ASYNC_BATCH_LIMIT = 2000
"""Intents at most in one batch of an ``apply_async`` store: the applying of a batch happens
inside the store's transaction, which the server ends if it idles too long (PostgreSQL's
``LOCK_HOLD_LIMIT``); the rest goes in the next batch."""


class _Answer:
    """A caller's callback (``submit_answer``): called in the commit's own pass, before any
    callback that may run user code."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callback) -> None:
        self.callback = callback

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
        "_answers", "_wakes", "before_wake", "on_unknown",
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
        self._answers = 0
        """Callers' intents (``submit_answer``) among those pending: their batch answers first."""
        self._wakes: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None
        """While a batch's answers wait to leave: what runs after them (``_wake``), in order."""
        self.before_wake: Callable[[], None] | None = None
        """Sends the replies the answered callers queued (the shard's reply flush); None (an
        embedded engine): answers and wakes run in one pass."""
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
        commit's pass and must not run user code itself (it defers that: ``after_replies``)."""
        self._answers += 1
        self.submit(intent, _Answer(callback))

    def submit_and_wait(self, intent: Any) -> asyncio.Future[Any]:
        """A future for one intent's result (for client-facing calls, not the hot path)."""
        future = self.loop.create_future()

        def done(result: Any) -> None:
            if not future.done():
                future.set_result(result)

        self.submit_answer(intent, done)
        return future

    def after_replies(self, function: Callable[..., Any], *args: Any) -> None:
        """Call ``function(*args)`` once the replies of the answers just given have left (in
        this loop turn's wake pass), or now if no answer waits to leave. For what may run user
        code after an answer: a new run's first turn, a committed call's follow-up."""
        wakes = self._wakes
        if wakes is None:
            function(*args)
        else:
            wakes.append((function, args))

    def flush(self) -> None:
        self._scheduled = False
        if self._in_flight:
            return  # its end flushes what came meanwhile
        intents, callbacks = self._intents, self._callbacks
        if not intents:
            return
        answering = self._answers > 0
        if self._apply_async is not None and len(intents) > ASYNC_BATCH_LIMIT:
            self._intents, self._callbacks = intents[ASYNC_BATCH_LIMIT:], callbacks[ASYNC_BATCH_LIMIT:]
            intents, callbacks = intents[:ASYNC_BATCH_LIMIT], callbacks[:ASYNC_BATCH_LIMIT]
            # Both parts count as answering (an answer may be in either): at worst a batch
            # of steps alone waits one loop turn.
        else:
            self._intents, self._callbacks = [], []
            self._answers = 0
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
        if self.before_wake is not None and (answering or self._wakes is not None):
            self._answer(callbacks, results)  # nothing runs user code before the replies leave
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

    def _answer(self, callbacks: list[Callback], results: list[Any]) -> None:
        """Give this batch's answers now; queue every other callback, in order, for ``_wake``,
        which runs one loop turn later: after the steps of the callers just answered (their
        futures' wake-ups were queued first), so their replies are queued by then."""
        wakes: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._wakes = wakes  # a wake pass still pending keeps its own list
        for callback, result in zip(callbacks, results):
            if callback.__class__ is _Answer:
                try:
                    callback(result)
                except Exception:
                    log.exception("commit callback failed")
            else:
                wakes.append((callback, (result,)))
        self.loop.call_soon(self._wake, wakes)  # after the wake-ups of the futures just resolved

    def _wake(self, wakes: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> None:
        """Send the replies the answered callers queued, then run what waited for them (every
        callback is still called, as ever; what would start user code checks that the engine
        still runs)."""
        if self._wakes is wakes:
            self._wakes = None
        if self.before_wake is not None:
            try:
                self.before_wake()
            except Exception:
                log.exception("sending replies before a wake failed")
        for function, args in wakes:
            try:
                function(*args)
            except Exception:
                log.exception("commit callback failed")
        if self._intents:
            self.flush()  # what they submitted commits in this turn, as after a one-pass resume

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
