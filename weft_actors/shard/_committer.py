"""Group commit: every write intent produced during one turn of the event loop is applied in
one transaction and committed once (one fsync); then each submitter is called back in one pass.

On LMDB the commit runs on the loop thread. A writer thread was measured slower there: py-lmdb
releases the GIL on every put and get, so a writer beside a busy loop stalls in a GIL convoy.
A store with ``apply_async`` (PostgreSQL, whose commit is network round trips) commits off the
loop: one batch in flight while the next accumulates, each resumed once its commit is done.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ..errors import EngineDeposed, WeftError
from ..store import LmdbStore
from ._failpoints import failpoint_from_env

__all__ = ["GroupCommitter"]

log = logging.getLogger("weft_actors.shard")

Callback = Callable[[Any], None]

ASYNC_BATCH_LIMIT = 2000
"""Intents at most in one batch of an ``apply_async`` store: the applying of a batch happens
inside the store's transaction, which the server ends if it idles too long (PostgreSQL's
``LOCK_HOLD_LIMIT``); the rest goes in the next batch."""


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
    )

    def __init__(self, store: LmdbStore, engine_id: str, loop: asyncio.AbstractEventLoop) -> None:
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
        self.batches = 0
        self.intents = 0
        self._apply_async: Callable[..., None] | None = getattr(store, "apply_async", None)
        self._in_flight = 0
        """Intents of the batch whose commit is under way (``apply_async`` stores only)."""
        self._drained: list[asyncio.Future[None]] = []
        self._submitted = 0
        self._answered = 0
        """Intents submitted and answered so far, counted for ``drain`` (``apply_async`` only)."""
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

    def submit_and_wait(self, intent: Any) -> asyncio.Future[Any]:
        """A future for one intent's result (for client-facing calls, not the hot path)."""
        future = self.loop.create_future()

        def done(result: Any) -> None:
            if not future.done():
                future.set_result(result)

        self.submit(intent, done)
        return future

    def flush(self) -> None:
        self._scheduled = False
        if self._in_flight:
            return  # its end flushes what came meanwhile
        intents, callbacks = self._intents, self._callbacks
        if not intents:
            return
        if self._apply_async is not None and len(intents) > ASYNC_BATCH_LIMIT:
            self._intents, self._callbacks = intents[ASYNC_BATCH_LIMIT:], callbacks[ASYNC_BATCH_LIMIT:]
            intents, callbacks = intents[:ASYNC_BATCH_LIMIT], callbacks[:ASYNC_BATCH_LIMIT]
        else:
            self._intents, self._callbacks = [], []
        store = self._store
        if self._closed is not None:
            self._resume(intents, callbacks, [self._closed] * len(intents), False)
            self._answered += len(intents)
            self._wake_drained()
            return
        failpoint = self.failpoint
        if failpoint is not None:
            failpoint.batch()
            failpoint.hit("before")
        if self._apply_async is not None:
            self._in_flight = len(intents)
            self._apply_async(self._engine_id, intents, lambda results, committed: self._committed(intents, callbacks, results, committed), self.loop)
            return
        before = store.commits
        results = store.apply(self._engine_id, intents)
        self._resume(intents, callbacks, results, store.commits != before)

    def _committed(self, intents: list[Any], callbacks: list[Callback], results: list[Any], committed: bool) -> None:
        self._in_flight = 0
        try:
            self._resume(intents, callbacks, results, committed)
        finally:
            self._answered += len(intents)
            self._wake_drained()
            if self._intents and not self._scheduled:
                self._scheduled = True
                self.loop.call_soon(self.flush)

    def _resume(self, intents: list[Any], callbacks: list[Callback], results: list[Any], committed: bool) -> None:
        """Call back each submitter once its batch has committed (or failed)."""
        store = self._store
        if committed:
            self.batches += 1
            self.intents += len(intents)
            if self.failpoint is not None:
                self.failpoint.hit("after-commit")
        for callback, result in zip(callbacks, results):
            try:
                callback(result)
            except Exception:
                log.exception("commit callback failed")
        if store.promoted:
            promoted, store.promoted = store.promoted, []
            if self.on_promoted is not None:
                self.on_promoted(promoted)
        first = results[0]
        if first.__class__ is EngineDeposed and self.on_deposed is not None and self._closed is None:
            self.on_deposed(first)

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
