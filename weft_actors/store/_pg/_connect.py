"""Connections that notice a lost server within seconds, and what a failure means.

A host cut off from the database must not block its shard's loop on a read for the quarter
of an hour TCP takes to give up on a peer that stopped answering. So every connection asks
the kernel for keepalives and a user timeout (``KEEPALIVE``: a silent peer is noticed
within about ``READ_LIMIT`` seconds), and every round trip is bounded in the client itself
(``BoundedConnection``): a server that acknowledges our bytes yet never answers -- a hung
proxy or load balancer, a frozen server -- fails the read as surely as a lost route. The
failed connection is closed; the next transaction makes a new one.

A failure is also named (``classify``): ``read_only`` when the server refuses writes (a
demoted primary, ``default_transaction_read_only``), ``unreachable`` when it cannot be
reached. Neither says anything about the engine that met it: it waits, and is not hung.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Final

import psycopg
from psycopg import errors

from .._disk import READ_ONLY, UNREACHABLE

__all__ = ["READ_LIMIT", "CONNECT_LIMIT", "KEEPALIVE", "STALLED", "UNREACHABLE", "BoundedConnection", "NoAnswer", "Reachability", "classify", "open_connection"]

log = logging.getLogger("weft_actors.store")

READ_LIMIT: Final = 5.0
"""Seconds one round trip may take before its connection counts as lost. Every statement of
the store is a keyed read or write, and a write waits for the store's lock at most
``_env.LOCK_HOLD_LIMIT`` (2 s), so a healthy server answers well within it."""

CONNECT_LIMIT: Final = 3.0
"""Seconds a connection attempt may take (libpq's ``connect_timeout``, whole seconds)."""

KEEPALIVE: Final[dict[str, int]] = {"keepalives": 1, "keepalives_idle": 2, "keepalives_interval": 1, "keepalives_count": 3, "tcp_user_timeout": int(READ_LIMIT * 1000)}
"""libpq's TCP settings: probe an idle connection after 2 s, give up after 3 missed probes,
and drop one whose sent bytes stay unacknowledged for ``READ_LIMIT`` (ignored on a Unix
socket, where a lost peer is seen at once)."""

_READ_ONLY_STATES: Final = ("25006",)  # read_only_sql_transaction
_UNREACHABLE_STATES: Final = ("57P01", "57P02", "57P03", "08000", "08001", "08003", "08004", "08006")
"""admin/crash shutdown, cannot connect now (starting or recovering), connection exceptions."""


class NoAnswer(psycopg.OperationalError):
    """A round trip that got no answer within its bound: the server, or the way to it, is lost."""


STALLED: Final = 0.25
"""Seconds past which a round trip counts as a stall of the server or of the way to it."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose every round trip gives up after ``read_limit`` seconds
    (``psycopg`` funnels each one through ``wait``): the connection is then closed, as its
    protocol state is unknown, and the caller gets an ``OperationalError``.

    A round trip that waited past ``STALLED`` (answered or not) calls ``on_stall``: the server
    or the way to it kept this process waiting, a network cut that ended, say, and every other
    engine's renewals may have waited as long, so their leases are not judged by that time
    (``Refusals.floor_now``). A loopback or LAN round trip takes a millisecond or less."""

    read_limit: float = READ_LIMIT
    on_stall: Callable[[], None] | None = None
    waiting_since: float = 0.0
    """When the round trip under way began (``time.monotonic``; 0.0: none), for another thread
    to see that this connection's thread waits on the server (``PgEnvironment.waiting_on_server``)."""

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        bounded = timeout is None
        began = self.waiting_since = time.monotonic()
        try:
            return super().wait(gen, interval, self.read_limit if bounded else timeout)
        except errors._WaitTimeout:
            if not bounded:
                raise  # the caller's own timeout (``notifies``): not a lost server
            self.pgconn.finish()
            raise NoAnswer(f"no answer from the server in {self.read_limit:g} s (connection dropped)") from None
        finally:
            self.waiting_since = 0.0
            if bounded and self.on_stall is not None and time.monotonic() - began > STALLED:
                self.on_stall()


def open_connection(url: str, connect_timeout: float, **kwargs: Any) -> BoundedConnection:
    """A bounded connection to ``url`` with ``KEEPALIVE`` (settings in ``url`` win)."""
    given = psycopg.conninfo.conninfo_to_dict(url)
    options: dict[str, Any] = {name: value for name, value in KEEPALIVE.items() if name not in given}
    return BoundedConnection.connect(url, connect_timeout=max(1, int(connect_timeout)), **options, **kwargs)


def classify(exc: BaseException) -> str | None:
    """``read_only``, ``unreachable``, or None for a failure of ``exc``'s own statement."""
    state = getattr(exc, "sqlstate", None)
    if isinstance(exc, errors.ReadOnlySqlTransaction) or state in _READ_ONLY_STATES:
        return READ_ONLY
    if state in _UNREACHABLE_STATES or (isinstance(exc, psycopg.OperationalError) and state is None):
        return UNREACHABLE
    return None


HOLD_OFF_FIRST: Final = 0.25
HOLD_OFF_MAX: Final = 4.0
"""Seconds a silent server is not asked again, doubling from ``HOLD_OFF_FIRST`` while it stays
silent: while cut off, each read then fails at once instead of waiting out a connection
attempt on the caller's loop, and the server is found again within ``HOLD_OFF_MAX``. A server
that refuses at once (down, restarting) costs nothing to ask: it is asked again at once."""

SILENT_AFTER: Final = 0.5
"""Seconds after which a failed connection attempt counts as met with silence."""


class Reachability:
    """Whether to try connecting now: not within the hold-off after the server was lost (a
    failed connection attempt, or a connection dropped for want of an answer)."""

    __slots__ = ("_until", "_delay")

    def __init__(self) -> None:
        self._until = 0.0
        self._delay = 0.0

    def held_off(self) -> float:
        """Seconds until the next attempt may be made (0.0: now)."""
        return max(0.0, self._until - time.monotonic())

    def lost(self, silent: bool = True) -> None:
        """The server was lost; ``silent``: it did not answer (a cut), not a prompt refusal."""
        if not silent:
            return
        self._delay = min(max(self._delay * 2, HOLD_OFF_FIRST), HOLD_OFF_MAX)
        self._until = time.monotonic() + self._delay

    def reached(self) -> None:
        self._delay = 0.0
        self._until = 0.0
