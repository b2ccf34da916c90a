"""A shard that cannot reach its store at start waits for it, instead of exiting.

A database that is down for a minute (a restart, a failover) is no fault of the shard that
happens to start meanwhile: exiting at once turned each start into a crash, and a few of
them, doubling from 50 ms, exceeded the supervisor's restart intensity and ended the
service. So the engine's opening is retried with backoff while the store is unreachable,
with one clear log line per try (rate-limited), and the shard reports ready once it is
back; a drain asked for meanwhile ends the wait.
"""

from __future__ import annotations

import asyncio
import logging
from multiprocessing.connection import Connection
from typing import Final

from .._ratelimit import RateLimitedLog
from ..errors import StorageError
from ..shard import Engine
from ..store import is_unreachable

__all__ = ["open_when_reachable", "FIRST_RETRY", "MAX_RETRY"]

log = logging.getLogger("weft_actors.supervisor")
_WAIT_LOG = RateLimitedLog(log, interval=10.0)

FIRST_RETRY: Final = 0.2
MAX_RETRY: Final = 2.0
"""Seconds between tries, doubling from ``FIRST_RETRY``: the service is back within about
``MAX_RETRY`` of its store."""


async def open_when_reachable(engine: Engine, control: Connection, slot: int) -> bool:
    """``engine.open()``, tried again while it fails for an unreachable store (any other
    failure is raised). False if a drain came meanwhile (nothing is open then)."""
    delay = FIRST_RETRY
    while True:
        try:
            await engine.open()
            return True
        except StorageError as exc:
            if not is_unreachable(exc) or engine.state != "new":
                raise
            _WAIT_LOG.warning("unreachable", "shard %d cannot reach its store, waiting for it (next try in %.1f s): %s", slot, delay, exc)
        if await _drain_asked(control, delay):
            return False
        delay = min(delay * 2, MAX_RETRY)


async def _drain_asked(control: Connection, seconds: float) -> bool:
    """Wait ``seconds``; True as soon as the supervisor asks to drain (or is gone)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        try:
            if control.poll():
                return control.recv()[0] == "drain"
        except (EOFError, OSError):
            return True
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(0.1, remaining))
