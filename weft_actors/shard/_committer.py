"""Group commit: every write intent produced during one turn of the event loop is applied in
one transaction and committed once (one fsync); then each submitter is called back in one pass.

The commit runs on the loop thread. A writer thread was measured slower here: py-lmdb releases
the GIL on every put and get, so a writer beside a busy loop stalls in a GIL convoy.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ..store import LmdbStore

__all__ = ["GroupCommitter"]

log = logging.getLogger("weft_actors.shard")

Callback = Callable[[Any], None]


class GroupCommitter:
    """Batches intents; ``callback(result)`` runs after the commit, with the intent's result or
    the ``WeftError`` that rejected it. Nothing is called back before its commit."""

    __slots__ = ("_store", "_engine_id", "loop", "_intents", "_callbacks", "_scheduled", "batches", "intents")

    def __init__(self, store: LmdbStore, engine_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._engine_id = engine_id
        self.loop = loop
        self._intents: list[Any] = []
        self._callbacks: list[Callback] = []
        self._scheduled = False
        self.batches = 0
        self.intents = 0

    def submit(self, intent: Any, callback: Callback) -> None:
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
        intents, callbacks = self._intents, self._callbacks
        if not intents:
            return
        self._intents, self._callbacks = [], []
        results = self._store.apply(self._engine_id, intents)
        self.batches += 1
        self.intents += len(intents)
        for callback, result in zip(callbacks, results):
            try:
                callback(result)
            except Exception:
                log.exception("commit callback failed")

    @property
    def pending(self) -> int:
        return len(self._intents)
