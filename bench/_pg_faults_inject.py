"""The database faults of ``pg_faults.py``, each on a dedicated server (``tests/_postgres.py``)
that the bench made for the scenario: a restart with the server down for a while, backends
terminated at a steady rate, the whole server read-only, the server down while a shard is
SIGKILLed, and one backend SIGSTOPped (the one holding the store's write lock, if caught).

The bench's own connections carry ``application_name`` ``BENCH_APP``: a drop never picks
them, and they are never stopped. Each fault returns a dict of what it did, for the report.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any, Callable

__all__ = ["BENCH_APP", "Faults"]

BENCH_APP = "weft-pg-faults"

_WRITE_LOCK_HOLDER = (
    "SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1"
    " AND l.classid = 0 AND l.objid = (hashtext(current_schema() || '/weft_actors/write') & 2147483647)::oid"
)
"""The backend holding the transaction-scoped advisory lock every write transaction takes
first (``pg_advisory_xact_lock(hashtext(schema || '/weft_actors/write') & 2147483647)``)."""


class Faults:
    """``server`` is a started ``PostgresServer``; ``kill_shard`` SIGKILLs a shard of one
    supervisor (for the fault that needs it); ``stop`` ends a fault early (the bench gives up)."""

    def __init__(self, server: Any, url: str, rng: random.Random, kill_shard: Callable[[], int | None], stop: threading.Event) -> None:
        self.server = server
        self.url = f"{url}{'&' if '?' in url else '?'}application_name={BENCH_APP}"
        self.rng = rng
        self.kill_shard = kill_shard
        self.stop = stop

    def _connect(self) -> Any:
        import psycopg

        # Session-level: the read-only fault's server default does not bind the bench.
        return psycopg.connect(self.url, autocommit=True, connect_timeout=5, options="-c default_transaction_read_only=off")

    def _wait(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def _client_backends(self, conn: Any) -> list[int]:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend' AND application_name <> %s ORDER BY pid",
            (BENCH_APP,),
        ).fetchall()
        return [row[0] for row in rows]

    # -- the faults ---------------------------------------------------------------------------

    def restart(self, down: float) -> dict[str, Any]:
        """``pg_ctl stop -m fast``, down ``down`` s, ``pg_ctl start``."""
        began = time.monotonic()
        self.server.stop("fast")
        try:
            self._wait(down)
        finally:
            self.server.start()
        return {"down_s": round(time.monotonic() - began, 1)}

    def drops(self, per_minute: float, seconds: float) -> dict[str, Any]:
        """``pg_terminate_backend`` of one client session every ``60 / per_minute`` s."""
        gap, ended, tries = 60.0 / per_minute, 0, 0
        deadline = time.monotonic() + seconds
        next_at = time.monotonic() + gap
        while time.monotonic() < deadline and not self.stop.is_set():
            self._wait(max(0.0, next_at - time.monotonic()))
            next_at += gap
            tries += 1
            with self._connect() as conn:
                backends = self._client_backends(conn)
                if backends:
                    victim = self.rng.choice(backends)
                    ended += bool(conn.execute("SELECT pg_terminate_backend(%s)", (victim,)).fetchone()[0])
        return {"drops": ended, "attempts": tries}

    def read_only(self, seconds: float) -> dict[str, Any]:
        """The server refuses writes (``default_transaction_read_only``, as a demoted
        primary) for ``seconds``; every session's next transaction sees it."""
        with self._connect() as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")
        try:
            self._wait(seconds)
        finally:
            with self._connect() as conn:
                conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
                conn.execute("SELECT pg_reload_conf()")
        return {"read_only_s": seconds}

    def down_with_kill(self, down: float, kill_after: float) -> dict[str, Any]:
        """The server down ``down`` s; ``kill_after`` s into it, a shard is SIGKILLed (its
        restart finds no database)."""
        began = time.monotonic()
        self.server.stop("fast")
        killed = None
        try:
            self._wait(kill_after)
            killed = self.kill_shard()
            self._wait(max(0.0, down - (time.monotonic() - began)))
        finally:
            self.server.start()
        return {"down_s": round(time.monotonic() - began, 1), "shard_killed_pid": killed}

    def stop_backend(self, seconds: float) -> dict[str, Any]:
        """SIGSTOP one client backend for ``seconds``, then SIGCONT: the one holding the
        store's write lock when one is caught holding it (tried for 10 s), else any."""
        victim, holding, seen = None, False, None
        with self._connect() as conn:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not holding:
                row = conn.execute(_WRITE_LOCK_HOLDER).fetchone()
                if row is None:
                    time.sleep(0.005)
                    continue
                os.kill(row[0], signal.SIGSTOP)
                if conn.execute(_WRITE_LOCK_HOLDER).fetchone() == row:
                    victim, holding = row[0], True
                    seen = conn.execute("SELECT state, left(query, 80) FROM pg_stat_activity WHERE pid = %s", (victim,)).fetchone()
                else:
                    os.kill(row[0], signal.SIGCONT)  # it let go in between: try again
            if victim is None:
                backends = self._client_backends(conn)
                if not backends:
                    return {"stopped_pid": None}
                victim = self.rng.choice(backends)
                os.kill(victim, signal.SIGSTOP)
        try:
            self._wait(seconds)
        finally:
            os.kill(victim, signal.SIGCONT)
        return {"stopped_pid": victim, "held_write_lock": holding, "backend_state": list(seen) if seen else None, "stopped_s": seconds}
