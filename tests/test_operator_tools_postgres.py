"""The operator tools on a ``postgresql://`` URL: the checker, the admin commands, the console.

Each test runs a few workflows on a PgStore in a schema of its own on the session's throwaway
server (``postgres_url``), then drives the tool as an operator would: ``python -m
weft_actors.check`` and ``python -m weft_actors <command>`` as processes. A corruption is
written behind the store's back (SQL on its tables, LMDB's own API on a directory) and must
be reported exactly as on LMDB.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import lmdb
import psycopg
import pytest

import weft_actors.examples as examples
from weft_actors import Engine
from weft_actors.errors import StorageError
from weft_actors.store import open_store
from weft_actors.store._admin import backup
from weft_actors.store._keys import count_key, visibility_group, visibility_key

STEPS = ("steps-0", "steps-1", "steps-2")
PARKED = "order-1"
SECRET = "not-a-real-password"
"""Put in the URL (the test server trusts loopback, so ignores it): no output may show it."""


@contextlib.contextmanager
def _schema_url(server_url: str) -> Iterator[str]:
    """A fresh schema's URL (``search_path`` in its ``options``), dropped afterwards."""
    schema = "ops_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{server_url}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def url(postgres_url: str) -> Iterator[str]:
    """A schema with three finished workflows and one running (parked on a signal), written by
    an engine that has since stopped; the URL carries a password the tools must not print."""
    with_password = postgres_url.replace("postgresql://weft@", f"postgresql://weft:{SECRET}@", 1)
    assert SECRET in with_password
    with _schema_url(with_password) as location:
        _run_workflows(location)
        yield location


@pytest.fixture
def lmdb_dir(tmp_path: Path) -> str:
    """The same workflows on LMDB: what the PostgreSQL results are compared with."""
    location = str(tmp_path / "data")
    _run_workflows(location)
    return location


def _run_workflows(location: str) -> None:
    async def main() -> None:
        async with Engine(store=location, app=examples) as engine:
            for i, wid in enumerate(STEPS):
                handle = await engine.start(examples.three_steps, i, id=wid)
                assert await handle.result(timeout=20) == i + 3
            parked = await engine.start(examples.order, "o-1", 250, id=PARKED)
            await _until(lambda: parked.query("status"), "awaiting approval")

    asyncio.run(main())


async def _until(read: Callable[[], Any], expected: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while (value := await read()) != expected:
        assert time.monotonic() < deadline, f"still {value!r}, not {expected!r}"
        await asyncio.sleep(0.02)


def _tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` to its end (killed and reaped by ``run`` on its timeout)."""
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=90)


def _check(location: str) -> subprocess.CompletedProcess[str]:
    return _tool("weft_actors.check", "--data", location)


def _admin(*args: str) -> subprocess.CompletedProcess[str]:
    return _tool("weft_actors", *args)


def _problems(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The problem lines of a checker's output (its last line is the summary)."""
    return sorted(done.stdout.splitlines()[:-1])


def _assert_quiet(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert SECRET not in done.stdout + done.stderr


# -- the checker ------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_the_checker_passes_a_postgres_store_the_engine_wrote(url):
    done = _check(url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("0 problem(s) found in postgresql://weft@127.0.0.1:")
    _assert_quiet(done)


def _corrupt_lmdb(path: str) -> None:
    env = lmdb.open(path, max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            _apply_corruption(
                put=lambda db, key, value: txn.put(key, value, db=env.open_db(db, txn=txn)),
                delete=lambda db, key: txn.delete(key, db=env.open_db(db, txn=txn)),
            )
    finally:
        env.close()


def _corrupt_postgres(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        _apply_corruption(
            put=lambda db, key, value: conn.execute(
                f"INSERT INTO weft_{db.decode()} (k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v", (key, value)
            ),
            delete=lambda db, key: conn.execute(f"DELETE FROM weft_{db.decode()} WHERE k = %s", (key,)),
        )


def _apply_corruption(put: Callable[[bytes, bytes, bytes], Any], delete: Callable[[bytes, bytes], Any]) -> None:
    """The same damage on either backend: a workflow count that lies, a finished workflow
    gone from the visibility index, an epoch of 0."""
    put(b"meta", count_key(visibility_group("completed", "three_steps")), (99).to_bytes(8, "big"))
    delete(b"visibility", visibility_key("completed", "three_steps", STEPS[0]))
    put(b"claim_epoch", STEPS[1].encode(), (0).to_bytes(8, "big"))


@pytest.mark.timeout(180)
def test_a_corruption_is_reported_on_postgres_exactly_as_on_lmdb(url, lmdb_dir):
    _corrupt_postgres(url)
    _corrupt_lmdb(lmdb_dir)
    on_postgres, on_lmdb = _check(url), _check(lmdb_dir)
    assert on_lmdb.returncode == 1, on_lmdb.stdout + on_lmdb.stderr
    assert on_postgres.returncode == 1, on_postgres.stdout + on_postgres.stderr
    assert _problems(on_postgres) == _problems(on_lmdb) == [
        "counts_mismatch: completed 'three_steps': counted 99, the visibility index holds 2",
        f"epoch_not_positive [{STEPS[1]}]: claim_epoch is 0",
        f"visibility_missing [{STEPS[0]}]: no completed entry at its updated time",
    ]
    assert on_postgres.stdout.splitlines()[-1].startswith("3 problem(s) found in postgresql://")
    _assert_quiet(on_postgres)


@pytest.mark.timeout(120)
def test_a_table_the_checker_cannot_read_is_a_problem_not_a_crash(url):
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE weft_timers")  # the parked order's timeout timer went with it
    done = _check(url)
    assert done.returncode == 1, done.stdout + done.stderr
    unreadable = [line for line in done.stdout.splitlines() if line.startswith("unreadable_keyspace")]
    assert unreadable, done.stdout
    assert unreadable[0].startswith('unreadable_keyspace: timers: PostgreSQL failed while reading it (relation "weft_timers" does not exist)')
    _assert_quiet(done)


# -- the admin commands ---------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_export_and_replay_read_a_workflow_from_a_url(url):
    exported = _admin("export", STEPS[1], "--data", url)
    assert exported.returncode == 0, exported.stderr
    document = json.loads(exported.stdout)
    assert (document["workflow_id"], document["record"]["status"], len(document["ops"])) == (STEPS[1], "completed", 3)
    replayed = _admin("--data", url, "replay", STEPS[1], "--app", "weft_actors.examples")  # --data before the command too
    assert replayed.returncode == 0, replayed.stderr
    report = json.loads(replayed.stdout)
    assert (report["ok"], report["recorded_outcomes"], report["next"]) == (True, 3, "complete")
    missing = _admin("export", "no-such-workflow", "--data", url)
    assert missing.returncode == 1 and "workflow_not_found" in missing.stderr
    for done in (exported, replayed, missing):
        _assert_quiet(done)


@contextlib.contextmanager
def _read_only_role(location: str) -> Iterator[str]:
    """``location`` as a role that may only read the store's schema (``SELECT`` on its tables,
    nothing else), as an operator's reporting account would; dropped afterwards."""
    role = "ro_" + uuid.uuid4().hex[:10]
    schema = location.rpartition("%3D")[2]
    with psycopg.connect(location, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
    try:
        yield location.replace(f"postgresql://weft:{SECRET}@", f"postgresql://{role}@", 1)
    finally:
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}")
            conn.execute(f"REVOKE USAGE ON SCHEMA {schema} FROM {role}")
            conn.execute(f"DROP ROLE {role}")


@pytest.mark.timeout(120)
def test_a_read_only_role_can_check_and_export_a_store_and_write_nothing(url):
    with _read_only_role(url) as read_only:
        checked = _check(read_only)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        exported = _admin("export", STEPS[0], "--data", read_only)
        assert exported.returncode == 0, exported.stderr
        assert json.loads(exported.stdout)["record"]["status"] == "completed"
        store = open_store(read_only, readonly=True)
        try:
            assert store.get_workflow(PARKED)["status"] == "running"
            with pytest.raises(StorageError, match="read-only"):
                store.mark_engine_dead("00" * 16)
        finally:
            store.close()
        store = open_store(read_only)  # read-write: a current schema is only read, so it opens
        try:
            with pytest.raises(StorageError):  # and its first write is refused
                store.register_engine("00" * 16, heartbeat=0.5, ttl=3.0)
        finally:
            store.close()


@pytest.mark.timeout(180)
def test_purge_on_a_url_removes_finished_workflows_and_leaves_the_store_clean(url):
    dry = _admin("purge", "--status", "completed", "--data", url)
    assert dry.returncode == 0, dry.stderr
    assert sorted(line for line in dry.stdout.splitlines() if line.startswith("would purge")) == [f"would purge {wid}" for wid in STEPS]
    refused = _admin("purge", "--id", PARKED, "--yes", "--data", url)
    assert refused.returncode == 1 and f"not purged {PARKED}: invalid_request" in refused.stdout
    purged = _admin("purge", "--status", "completed", "--older-than", "0s", "--yes", "--data", url)
    assert purged.returncode == 0, purged.stderr
    assert "3 workflow(s) purged" in purged.stdout
    checked = _check(url)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    store = open_store(url)
    try:
        assert [store.get_workflow(wid) for wid in STEPS] == [None] * 3
        assert store.get_workflow(PARKED)["status"] == "running"
    finally:
        store.close()
    for done in (dry, refused, purged, checked):
        _assert_quiet(done)


@pytest.mark.timeout(120)
def test_backup_of_a_url_refuses_and_names_pg_dump(url, tmp_path):
    destination = tmp_path / "copy"
    done = _admin("backup", str(destination), "--data", url)
    assert done.returncode == 2
    assert done.stderr.startswith("error: usage: backup copies an LMDB data directory; back up a PostgreSQL store with pg_dump")
    assert not destination.exists()
    _assert_quiet(done)
    store = open_store(url)
    try:
        with pytest.raises(StorageError, match="pg_dump"):
            backup(store, str(destination))  # type: ignore[arg-type]  # the function, called with a PgStore
    finally:
        store.close()
    assert not destination.exists()


# -- the console ------------------------------------------------------------------------------


_CONSOLE_BESIDE_ITS_OWNER = textwrap.dedent(
    """
    import sys, threading
    from weft_actors.console._data import workflows
    from weft_actors.console._listing import ListQuery
    from weft_actors.store import open_store

    store = open_store(sys.argv[1])
    pages, failures = [], []

    def request_threads():
        try:
            for _ in range(25):
                pages.append([item["id"] for item in workflows(store, ListQuery(limit=10))["items"]])
        except Exception as exc:
            failures.append(repr(exc))

    def owner():  # the supervisor's own reads, on the store's connection
        for _ in range(100):
            store.workflow_counts()
            store.engines()

    threads = [threading.Thread(target=request_threads) for _ in range(3)] + [threading.Thread(target=owner)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    print(len(pages), len({tuple(page) for page in pages}), failures)
    """
)


@pytest.mark.timeout(120)
def test_the_console_lists_a_postgres_store_from_request_threads_beside_its_owner(url):
    store = open_store(url)
    try:
        from weft_actors.console._data import workflows
        from weft_actors.console._listing import ListQuery

        page = workflows(store, ListQuery(limit=10))  # type: ignore[arg-type]
    finally:
        store.close()
    assert sorted(item["id"] for item in page["items"]) == sorted((*STEPS, PARKED))
    assert (page["counts"]["completed"], page["counts"]["running"], page["total"]) == (3, 1, 4)
    assert page["items"][0]["id"] == PARKED  # newest first: the order started last
    # Request threads and the store's owner at once: two threads on one connection deadlock.
    done = subprocess.run(
        [sys.executable, "-c", _CONSOLE_BESIDE_ITS_OWNER, url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "75 1 []"
