"""Taking an engine's liveness lock again after its connection failed.

The server frees a session's advisory locks when its connection ends, and a live engine's
connection can end under it (a network blip, a restarted server, ``pg_terminate_backend``).
The engine then reconnects and must hold its lock again before peers' probes stop finding
it free: a probe (``process_gone``) holds the lock itself for one round trip, so a single
``pg_try_advisory_lock`` can lose to it. A few short tries ride that out; the maintenance
pass asks again for whatever is still missing.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

import psycopg

from ...errors import StorageError

if TYPE_CHECKING:
    from ._env import PgEnvironment

__all__ = ["relock_engine"]

log = logging.getLogger("weft_actors.store")

RELOCK_TRIES: Final = 10
RELOCK_PAUSE: Final = 0.02
"""Seconds between two tries: a peer's probe holds the lock for one round trip."""


def relock_engine(env: PgEnvironment, key: tuple[int, int]) -> bool:
    """Take the session lock ``key`` on ``env``'s owner connection; False if another session
    kept it through every try, or the connection failed (the next pass asks again)."""
    for attempt in range(RELOCK_TRIES):
        if attempt:
            time.sleep(RELOCK_PAUSE)
        try:
            row = env.conn.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()
        except (psycopg.Error, StorageError) as exc:
            log.warning("store: could not take an engine's liveness lock again: %s", exc)
            return False
        if row and row[0]:
            return True
    log.warning("store: an engine's liveness lock %s is held by another session; asking again at the next pass", key)
    return False
