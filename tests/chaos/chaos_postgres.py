"""The PostgreSQL mode of the chaos harness (``--postgres``): the store is a dedicated server
(``tests/_postgres.py``) that the supervisor reaches through a pausable TCP proxy
(``tests/_pausable_proxy.py``), and the database itself becomes a fault:

- ``pg_terminate``: ``pg_terminate_backend`` of one or two of the shards' connections (a
  connection drop, as a server restart or a network device does to one session);
- ``pg_restart``: ``pg_ctl stop -m fast``, down for a moment, ``pg_ctl start``;
- ``net_cut``: the proxy paused for a few seconds (a network cut: nothing passes, no
  connection is closed, so only the client's own bounds end a wait).

Each runs alone (the run's ``exclusive`` lock: no poison, lock stall or large takeover
meanwhile), and the supervisor must stay up throughout. The harness's own reads (engine
records, claim epochs, the checker) go straight to the server, not through the proxy, so a
cut never blinds them; its connections carry an ``application_name`` of their own, so a
drop never picks them.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

TESTS = Path(__file__).resolve().parent.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from _pausable_proxy import PausableProxy  # noqa: E402
from _postgres import PostgresServer, find_bindir  # noqa: E402
from chaos_faults_store import hold_watching  # noqa: E402

__all__ = ["PgChaosStore", "PG_KINDS", "PG_WEIGHTS", "HARNESS_APP", "claim_epochs", "postgres_available", "psycopg_errors"]

PG_KINDS = ("pg_terminate", "pg_restart", "net_cut")
PG_WEIGHTS = (12, 3, 4)
SETTLE = 1.0
"""Seconds after a database fault still counted as its own: the service finds the server again."""
SILENT_KILL = "is hung: it has not heartbeated"
"""The supervisor's line for a shard it kills as silent."""
HARNESS_APP = "weft-chaos-harness"
"""``application_name`` of the harness's own connections: never a drop's victim."""


def postgres_available() -> bool:
    """Whether ``initdb`` and ``pg_ctl`` are installed (the PostgreSQL mode needs them)."""
    return find_bindir() is not None


def psycopg_errors() -> type[Exception]:
    """psycopg's base error (a read of the harness's own that a fault broke), or an error
    nothing raises where psycopg is not installed (the LMDB mode needs none)."""
    try:
        import psycopg
    except ImportError:
        return _NeverRaised
    return psycopg.Error


class _NeverRaised(Exception):
    pass


def _with_app(url: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={HARNESS_APP}"


class PgChaosStore:
    """A fresh server and a proxy in front of it, for one run. ``url`` (through the proxy)
    is the supervisor's store; ``direct_url`` the harness's. Use as a context manager, or
    call ``close`` once the run's processes are gone. Also the run's ``store_faults``: it
    has their ``available``, ``kinds``, ``weights``, ``exclusive`` and ``run``."""

    kinds = PG_KINDS
    weights = PG_WEIGHTS
    forced = ("pg_terminate", "net_cut", "pg_restart")
    """Each once early (after the fault-isolation faults): even the CI budget has them."""
    takeover_sizes = (100, 600)
    """The large takeover's backlog, first and at most: each start is a round trip to the
    server, so a backlog builds many times slower than on LMDB (300 took 15 s)."""
    exclusive = True
    """Drawn faults run holding the run's exclusive lock (alone with the load)."""

    def __init__(self) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError("the PostgreSQL mode needs initdb and pg_ctl (pg_config --bindir)")
        self.server = PostgresServer(bindir)
        self.server.__enter__()
        self.proxy = PausableProxy(self.server.port)
        self.available = True
        self.url = f"postgresql://weft@127.0.0.1:{self.proxy.port}/weft"
        self.direct_url = _with_app(self.server.url)
        self.done: dict[str, int] = {kind: 0 for kind in PG_KINDS}

    def __enter__(self) -> PgChaosStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if not self.available:
            return
        self.available = False
        self.proxy.resume()
        self.proxy.close()
        self.server.__exit__()

    def keep_evidence(self, directory: Path) -> None:
        """The server's log beside the supervisor's, for a run with violations."""
        import shutil

        shutil.copyfile(self.server.log, directory / "postgres.log")

    # -- faults ----------------------------------------------------------------------------

    def run(self, kind: str, rng: random.Random, pids: list[int], supervisor: Any, count: Callable[[str], None], violation: Callable[[str], None]) -> None:
        mark = len(supervisor.stderr_lines)
        if kind == "pg_terminate":
            if self.terminate_backends(rng, rng.randint(1, 2)):
                hold_watching(0.5, supervisor, violation, "connection drop")
            else:
                return
        elif kind == "pg_restart":
            self.restart(rng.uniform(0.5, 3.0), supervisor, violation)
        elif kind == "net_cut":
            self.cut(rng.uniform(1.0, 4.0), supervisor, violation)
        self.done[kind] += 1
        count(kind)
        # The fault runs alone: a shard killed as hung during it, or while the service finds
        # the server again, was silent for the database's sake, not hung. Counted (the summary's
        # ``fault:silent_kill``), not yet a violation: a cut of about 4 s still gets shards
        # killed as it ends, now and then (LONG_RUNS.md); nothing is lost or run twice for it.
        hold_watching(SETTLE, supervisor, violation, f"settling after a {kind}")
        for line in supervisor.stderr_lines[mark:]:
            if SILENT_KILL in line:
                count("silent_kill")

    def terminate_backends(self, rng: random.Random, n: int) -> int:
        """``pg_terminate_backend`` of ``n`` of the clients' sessions; how many were ended."""
        import psycopg

        with psycopg.connect(self.direct_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend' AND application_name <> %s ORDER BY pid",
                (HARNESS_APP,),
            ).fetchall()
            victims = rng.sample([row[0] for row in rows], min(n, len(rows)))
            ended = 0
            for pid in victims:
                row = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
                ended += bool(row and row[0])
        return ended

    def restart(self, down: float, supervisor: Any, violation: Callable[[str], None]) -> None:
        """The server stopped (fast: every session ends), down ``down`` s, started again."""
        self.server.stop("fast")
        try:
            hold_watching(down, supervisor, violation, f"database restart ({down:.1f} s down)")
        finally:
            self.server.start()

    def cut(self, seconds: float, supervisor: Any, violation: Callable[[str], None]) -> None:
        """Nothing passes the proxy for ``seconds``; every connection stays open."""
        self.proxy.pause()
        try:
            hold_watching(seconds, supervisor, violation, f"network cut ({seconds:.1f} s)")
        finally:
            self.proxy.resume()

    # -- the harness's reads ----------------------------------------------------------------

    @contextlib.contextmanager
    def reader(self) -> Iterator[Any]:
        """A read-only ``PgStore`` on the server (not through the proxy) for the block."""
        from weft_actors.store import open_store

        store = open_store(self.direct_url, readonly=True)
        try:
            yield store
        finally:
            store.close()


def claim_epochs(direct_url: str) -> dict[bytes, int]:
    """Every claim epoch of the store, read in one transaction."""
    import psycopg

    from weft_actors.store._keys import unpack_u64

    with psycopg.connect(direct_url, connect_timeout=5) as conn:
        return {bytes(k): unpack_u64(bytes(v))[0] for k, v in conn.execute("SELECT k, v FROM weft_claim_epoch")}
