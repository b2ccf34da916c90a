"""The thread that commits a PostgreSQL store's group commits, so the loop never waits on one.

A batch's transaction is a few round trips and a WAL flush: milliseconds the engine's loop
spends running actors instead, while the next batch accumulates. The thread has a connection
of its own; it runs one batch at a time, in submission order.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from typing import Any, Callable

from ..._clock import Clock
from ._env import PgEnvironment
from ._outcome import Outcomes

__all__ = ["BatchWriter"]

log = logging.getLogger("weft_actors.store")

_STOP: Any = object()


class BatchWriter:
    def __init__(
        self,
        url: str,
        clock: Clock,
        outcomes: Outcomes | None = None,
        on_server_start: Callable[[float], None] | None = None,
        on_stall: Callable[[], None] | None = None,
    ) -> None:
        self._url = url
        self._on_server_start = on_server_start
        self._on_stall = on_stall
        self._clock = clock
        self._outcomes = outcomes
        """The store's commits of unknown outcome, shared with its other connections."""
        self.env: PgEnvironment | None = None
        """Made by the thread itself, so that its connection is the environment's owner's."""
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="weft-pg-writer", daemon=True)
        self._thread.start()

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, fn: Callable[[], tuple[list[Any], bool]], done: Callable[[list[Any], bool], None], loop: asyncio.AbstractEventLoop) -> None:
        self._jobs.put((fn, done, loop))

    def _run(self) -> None:
        env = PgEnvironment(self._url, connect_now=False)
        observe = getattr(self._clock, "observe", None)
        if observe is not None:
            env.on_clock = observe
        if self._outcomes is not None:
            env.outcomes = self._outcomes
        env.on_server_start = self._on_server_start
        env.on_stall = self._on_stall
        self.env = env
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            fn, done, loop = job
            results, committed = fn()  # never raises (``PgStore.apply_async``)
            try:
                loop.call_soon_threadsafe(done, results, committed)
            except RuntimeError:  # the loop is closed: nobody waits for the answer any more
                pass

    def close(self, timeout: float = 10.0) -> None:
        """Finish the batch in flight (bounded), then let go of the connection."""
        self._jobs.put(_STOP)
        self._thread.join(timeout)
        if self.env is not None:
            self.env.close()

