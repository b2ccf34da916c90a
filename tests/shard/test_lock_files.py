"""The files beside ``data.mdb`` deleted under running engines: ``lock.mdb`` (LMDB's write
lock: a process opening the store after its deletion would write beside the running ones)
and ``engines/*.lock`` (a missing one must never make a live engine look dead).

Engines run in one process on a fake clock with ``background=False``; each test drives the
maintenance passes itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from typing import Any, AsyncIterator

import pytest

from _support import run
from weft_actors import Engine, workflow
from weft_actors.errors import EngineDeposed, StorageError
from weft_actors.store import LmdbStore
from weft_actors.testing import FakeClock

pytestmark = pytest.mark.timeout(30)


@workflow
async def parked(ctx) -> Any:
    return await ctx.wait_signal("go")


APP = [parked]


@contextlib.asynccontextmanager
async def engines(path: Any, count: int, clock: FakeClock) -> AsyncIterator[list[Engine]]:
    opened: list[Engine] = []
    try:
        for _ in range(count):
            engine = Engine(str(path), app=APP, clock=clock, heartbeat=0.5, ttl=3.0, background=False)
            await engine.open()
            opened.append(engine)
        yield opened
    finally:
        for engine in reversed(opened):
            await engine.close()


def lock_path(engine: Engine) -> str:
    return os.path.join(engine.store.path, "engines", engine.engine_id + ".lock")


async def settle(turns: int = 10) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


# -- engines/*.lock -----------------------------------------------------------------------


def test_a_deleted_engine_lock_file_does_not_make_a_live_engine_look_dead(tmp_path):
    async def main() -> None:
        clock = FakeClock(1000.0)
        async with engines(tmp_path, 2, clock) as (a, b):
            handle = await a.start(parked, id="w")
            await settle()
            assert a.store.get_holder("w")[0] == a.engine_id

            os.unlink(lock_path(a))
            b.maintenance.run_pass()

            assert b.store.engines()[a.engine_id]["state"] == "live"
            assert a.store.get_holder("w")[0] == a.engine_id  # not taken over
            assert a.state == "running"
            await handle.signal("go", 1)
            a.maintenance.run_pass()
            assert await asyncio.wait_for(handle.result(), 5) == 1

    run(main())


def test_an_engine_recreates_its_deleted_lock_file_so_its_death_can_be_confirmed_again(tmp_path):
    async def main() -> None:
        clock = FakeClock(1000.0)
        async with engines(tmp_path, 2, clock) as (a, b):
            os.unlink(lock_path(a))
            a.maintenance.run_pass()
            assert os.path.exists(lock_path(a))
            assert b.store.process_gone(a.engine_id) is False  # held again

            a.depose("simulated kill -9")  # closes its store: the lock is let go
            b.maintenance.run_pass()
            assert b.store.engines()[a.engine_id]["state"] == "dead"

    run(main())


# -- lock.mdb -------------------------------------------------------------------------------


def test_an_engine_whose_lock_mdb_was_deleted_stops_committing_and_names_the_file(tmp_path, caplog):
    async def main() -> None:
        clock = FakeClock(1000.0)
        async with engines(tmp_path, 1, clock) as (a,):
            await a.start(parked, id="before")
            await settle()
            os.unlink(tmp_path / "lock.mdb")

            a.maintenance.run_pass()

            assert a.state == "deposed"
            assert "lock.mdb" in caplog.text
            with pytest.raises((EngineDeposed, StorageError)):
                await a.start(parked, id="after")
            with pytest.raises(StorageError, match="lock.mdb"):
                a.store.heartbeat(a.engine_id)
            assert a.store.apply(a.engine_id, [object()])[0].code == "storage_error"

    run(main())


def test_a_store_whose_lock_mdb_was_recreated_by_another_process_writes_nothing(tmp_path):
    store = LmdbStore(str(tmp_path), clock=FakeClock(1000.0))
    try:
        store.register_engine("ab" * 8, heartbeat=0.5, ttl=3.0)
        store.verify_lock_file()  # untouched: fine
        os.unlink(tmp_path / "lock.mdb")
        # Another process opens the store: LMDB creates a new lock.mdb with its own mutex.
        subprocess.run(
            [sys.executable, "-c", "import lmdb, sys; lmdb.open(sys.argv[1], max_dbs=20).close()", str(tmp_path)],
            check=True,
            timeout=20,
        )
        assert (tmp_path / "lock.mdb").exists()

        with pytest.raises(StorageError, match="replaced") as caught:
            store.heartbeat("ab" * 8)
        assert caught.value.path == str(tmp_path / "lock.mdb")
        with pytest.raises(StorageError):
            store.mark_engine_dead("ab" * 8)
        assert store.engines()["ab" * 8]["state"] == "live"  # reads still work; nothing written
    finally:
        store.close()
