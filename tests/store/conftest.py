"""Fixtures of the store conformance suite.

Every test in ``tests/store`` talks to a store through its public methods only. The store
comes from ``store_factory``, parametrised over backends: a new backend (PostgreSQL, ...)
joins the suite by adding a class with the same methods as ``LmdbBackend`` and a name in
``BACKENDS``. Backend-specific hooks (``open_small``, ``set_schema_version``, ``get_schema_version``,
``child_store_source``, ``hold_write_lock``) may be left out; the tests that need them skip.

All time comes from one ``FakeClock`` per test. Its timestamps are ~1.7e9, so compare them
with ``pytest.approx(x, abs=1e-3)``: approx's default relative tolerance is ~1700 s there.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import lmdb
import psycopg
import pytest

from _support import hold_write_lock
from weft_actors.codec import encode, encode_args
from weft_actors.store import Created, CreateWorkflow, Finish, LmdbStore, StepCommit
from weft_actors.testing import FakeClock

HEARTBEAT = 0.5
TTL = 3.0


class LmdbBackend:
    """The embedded LMDB store, in a fresh temporary directory per test."""

    name = "lmdb"

    def __init__(self, root: Path, clock: FakeClock) -> None:
        self.root = root
        self.clock = clock
        self.location = str(root / "db")
        self._opened: list[LmdbStore] = []

    def __call__(self, **options: Any) -> LmdbStore:
        """Open (creating if needed) the test's store. py-lmdb refuses a second open of one
        environment in one process: close the previous instance before reopening."""
        store = LmdbStore(self.location, clock=self.clock, **options)
        self._opened.append(store)
        return store

    def open_small(self) -> LmdbStore:
        """A separate store with room for only a handful of workflows with ~2 KiB arguments."""
        store = LmdbStore(str(self.root / "small"), clock=self.clock, map_size=256 * 1024)
        self._opened.append(store)
        return store

    def set_schema_version(self, version: int) -> None:
        """Write ``meta/schema`` behind the store's back (every instance must be closed)."""
        env = lmdb.open(self.location, max_dbs=32)
        try:
            meta = env.open_db(b"meta")
            with env.begin(write=True) as txn:
                txn.put(b"schema", str(version).encode(), db=meta)
        finally:
            env.close()

    def get_schema_version(self) -> int:
        env = lmdb.open(self.location, max_dbs=32, readonly=True)
        try:
            meta = env.open_db(b"meta", create=False)
            with env.begin() as txn:
                return int(txn.get(b"schema", db=meta))
        finally:
            env.close()

    def child_store_source(self) -> str:
        """Python source that binds ``store`` to this test's store in another process."""
        return (
            "from weft_actors.store import LmdbStore\n"
            "from weft_actors.testing import FakeClock\n"
            f"store = LmdbStore({self.location!r}, clock=FakeClock())\n"
        )

    def hold_write_lock(self, store: LmdbStore) -> Any:
        """Hold ``store``'s write lock from another thread for the block (``_support``)."""
        return hold_write_lock(store.env)

    def publish_wait(self, engine_id: str, since: float) -> None:
        """Write ``engine_id``'s wait slot as its process would just before it waits for the
        write lock (the first 8 bytes of its lock file), without waiting."""
        fd = os.open(os.path.join(self.location, "engines", engine_id + ".lock"), os.O_WRONLY)
        try:
            os.pwrite(fd, struct.pack("d", since), 0)
        finally:
            os.close(fd)

    def close_all(self) -> None:
        for store in self._opened:
            try:
                store.close()
            except Exception:  # already closed, or closed by the test
                pass


class PostgresBackend:
    """The PostgreSQL store, in a fresh schema of the session's throwaway server per test
    (``postgres_url``): the URL's ``options`` set the connection's ``search_path``."""

    name = "postgresql"

    def __init__(self, root: Path, clock: FakeClock, server_url: str) -> None:
        self.root = root
        self.clock = clock
        self.schema = "t_" + uuid.uuid4().hex[:12]
        self.server_url = server_url
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {self.schema}")
        self.location = f"{server_url}?options=-csearch_path%3D{self.schema}"
        self._opened: list[Any] = []

    def __call__(self, **options: Any) -> Any:
        from weft_actors.store._pg import PgStore

        options.pop("map_size", None)
        options.pop("sync", None)
        store = PgStore(self.location, clock=self.clock, **options)
        self._opened.append(store)
        return store

    def set_schema_version(self, version: int) -> None:
        with psycopg.connect(self.location, autocommit=True) as conn:
            conn.execute("DELETE FROM weft_migrations")
            conn.execute("INSERT INTO weft_migrations (version) SELECT generate_series(1, %s)", (version,))

    def get_schema_version(self) -> int:
        with psycopg.connect(self.location, autocommit=True) as conn:
            row = conn.execute("SELECT max(version) FROM weft_migrations").fetchone()
            return int(row[0])

    def child_store_source(self) -> str:
        return (
            "from weft_actors.store._pg import PgStore\n"
            "from weft_actors.testing import FakeClock\n"
            f"store = PgStore({self.location!r}, clock=FakeClock())\n"
        )

    @contextlib.contextmanager
    def hold_write_lock(self, store: Any) -> Iterator[Any]:
        """Hold ``store``'s write lock (its advisory lock) from a connection of the test's
        own for the block, as a session stopped inside a transaction would. Yields
        ``wait_blocked(thread)``, which returns once the server has one more session queued
        for that lock than before (the ``thread``'s writer). Keep the block under the store's
        ``LOCK_HOLD_LIMIT`` (2 s) of real time: a waiter then ends a holder that sent nothing."""
        holder = psycopg.connect(self.location, autocommit=True)
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (store.env.lock_key,))
        queued = [0]

        def waiting() -> int:
            row = holder.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = 0 "
                "AND objid = %s::oid AND objsubid = 1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (store.env.lock_key,),
            ).fetchone()
            return int(row[0])

        def wait_blocked(thread: Any, timeout: float = 10.0) -> None:
            queued[0] += 1
            deadline = time.monotonic() + timeout
            while waiting() < queued[0]:
                assert thread.is_alive(), f"{thread.name} ended instead of waiting for the lock"
                assert time.monotonic() < deadline, f"{thread.name} never waited for the write lock"
                time.sleep(0.005)

        try:
            yield wait_blocked
        finally:
            try:
                holder.execute("ROLLBACK")
            finally:
                holder.close()

    def close_all(self) -> None:
        for store in self._opened:
            try:
                store.close()
            except Exception:
                pass
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {self.schema} CASCADE")


BACKENDS = {"lmdb": LmdbBackend, "postgresql": PostgresBackend}


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=sorted(BACKENDS))
def store_factory(request: pytest.FixtureRequest, tmp_path: Path, fake_clock: FakeClock) -> Any:
    if request.param == "postgresql":
        backend: Any = PostgresBackend(tmp_path, fake_clock, request.getfixturevalue("postgres_url"))
    else:
        backend = LmdbBackend(tmp_path, fake_clock)
    yield backend
    backend.close_all()


@pytest.fixture
def backend_hook(store_factory: Any) -> Any:
    """``backend_hook(name)``: the backend's hook of that name, or skip the test."""

    def get(name: str) -> Any:
        hook = getattr(store_factory, name, None)
        if hook is None:
            pytest.skip(f"backend {store_factory.name} has no {name}()")
        return hook

    return get


@pytest.fixture
def store(store_factory: Any) -> Any:
    return store_factory()


def new_run_id() -> str:
    return os.urandom(16).hex()


class Kit:
    """Small builders over the public store API, so each test states only what it checks."""

    HEARTBEAT = HEARTBEAT
    TTL = TTL

    def __init__(self, store: Any, clock: FakeClock) -> None:
        self.store = store
        self.clock = clock
        self._n = 0

    def wid(self, prefix: str = "wf") -> str:
        self._n += 1
        return f"{prefix}-{self._n}-{uuid.uuid4().hex[:8]}"

    def engine(self, store: Any = None, *, mode: str = "workflow-lease") -> str:
        engine_id = uuid.uuid4().hex
        (store or self.store).register_engine(engine_id, heartbeat=HEARTBEAT, ttl=TTL, mode=mode)
        return engine_id

    def create_intent(
        self, wid: str | None = None, *, wf_type: str = "Order", args: tuple = (1, "a"), if_exists: str = "error"
    ) -> CreateWorkflow:
        return CreateWorkflow(wid or self.wid(), wf_type, encode_args(args), new_run_id(), if_exists=if_exists)

    def start(self, engine_id: str, wid: str | None = None, *, wf_type: str = "Order", store: Any = None) -> tuple[str, str, int]:
        """Create a running workflow claimed by ``engine_id``; ``(wid, run_id, epoch)``."""
        intent = self.create_intent(wid, wf_type=wf_type)
        (result,) = (store or self.store).apply(engine_id, [intent])
        assert isinstance(result, Created) and result.created and result.status == "running", result
        return intent.wid, intent.run_id, result.epoch

    def finish(
        self, engine_id: str, wid: str, epoch: int, run_id: str, status: str = "completed", value: Any = "done"
    ) -> Any:
        finish = Finish(status, encode(value)) if status == "completed" else Finish(status, None, {"type": "X", "message": value})
        (result,) = self.store.apply(engine_id, [StepCommit(wid, epoch, run_id, finish=finish)])
        return result

    @staticmethod
    def op(seq: int, name: str = "charge") -> tuple[int, bytes]:
        """An op-log entry ``(seq, packed record)`` as the engine records it."""
        return seq, encode({"kind": "activity", "name": name, "outcome": {"ok": seq}, "attempts": 1})

    def listed_ids(self, **filters: Any) -> list[str]:
        """Every id the listing returns, following cursors to the end."""
        ids: list[str] = []
        cursor = None
        while True:
            page = self.store.list_workflows(cursor=cursor, limit=1000, **filters)
            ids.extend(item["id"] for item in page["items"])
            cursor = page["cursor"]
            if cursor is None:
                return ids


@pytest.fixture
def kit(store: Any, fake_clock: FakeClock) -> Kit:
    return Kit(store, fake_clock)
