"""A real full disk: clients get ``StorageFull`` (code ``storage_full``), the log stays quiet.

The store lives on a 24 MiB ext4 filesystem in a loop-mounted image, with a map (1 GiB) far
larger than the disk, so the disk fills before the map does. A filling disk makes LMDB's
commit fail with ``EIO`` (a short write), sometimes ``ENOSPC``: the original code passed
either on as ``storage_error`` and logged a line per refused step. (A tmpfs is not used: a
process with a store mapped from a full tmpfs can get SIGBUS.) Needs root for the mount;
skipped where it is not permitted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from _support import loop_mounted_disk, run
from weft_actors import Engine, workflow
from weft_actors._ratelimit import RateLimitedLog
from weft_actors.errors import StorageError, StorageFull

pytestmark = pytest.mark.timeout(90)


@workflow
async def blob(ctx, data: str) -> int:
    return len(data)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with loop_mounted_disk(tmp_path, 24) as mountpoint:
        yield mountpoint


def test_a_full_disk_is_storage_full_with_back_off_and_a_quiet_log(small_disk, caplog):
    async def main() -> None:
        engine = Engine(str(small_disk / "db"), app=[blob], heartbeat=0.2, ttl=1.0, map_size=1 << 30)
        await engine.open()
        errors: list[Exception] = []
        states: set[str] = set()
        try:
            for i in range(400):
                try:
                    await engine.start(blob, "x" * 100_000, id=f"w{i}")
                except (StorageError, StorageFull) as exc:
                    errors.append(exc)
                    states.add(engine.stats()["storage"])
                    if len(errors) >= 40:
                        break
            assert errors, "the disk never filled"
            assert all(isinstance(exc, StorageFull) and exc.code == "storage_full" for exc in errors), {
                f"{type(exc).__name__}: {exc}" for exc in errors
            }
            assert "disk" in str(errors[0]) and "full" in str(errors[0])
            assert "disk_full" in states  # small writes (heartbeats) may still fit: "ok" then
            assert engine.store.last_refusal() is not None  # a takeover will not blame workflows
            assert engine.state == "running"
            await asyncio.sleep(1.0)  # refused steps and maintenance passes go on failing
            # Reads still work.
            assert engine.store.get_workflow("w0")["status"] == "completed"
        finally:
            await engine.close()

    with caplog.at_level(logging.WARNING):
        run(main())
    lines = [record for record in caplog.records if record.levelno >= logging.WARNING]
    # One line per kind and interval (store writes, refused steps, passes), not one per failure.
    assert len(lines) < 15, [record.getMessage() for record in lines]


def test_the_rate_limited_log_writes_one_line_per_interval_with_a_count(caplog):
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("weft_actors.test"), interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        for _ in range(3500):
            limited.warning("disk", "write failed: %s", "No space left on device")
        now[0] = 10.5
        limited.warning("disk", "write failed: %s", "No space left on device")
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "write failed: No space left on device",
        "write failed: No space left on device (3499 similar lines suppressed in the last 10 s)",
    ]


def test_the_disk_errors_are_classified(tmp_path):
    import lmdb

    from weft_actors.store._disk import is_read_only, storage_failure

    path = str(tmp_path)
    assert isinstance(storage_failure(lmdb.Error("mdb_txn_commit: " + os.strerror(28)), path, "commit failed"), StorageFull)
    assert isinstance(storage_failure(lmdb.Error("mdb_txn_commit: Disk quota exceeded"), path, "commit failed"), StorageFull)
    assert isinstance(storage_failure(lmdb.MapFullError("mdb_put: MDB_MAP_FULL"), path, "commit failed"), StorageFull)
    read_only = storage_failure(lmdb.Error("mdb_txn_commit: Read-only file system"), path, "commit failed")
    assert is_read_only(read_only) and not isinstance(read_only, StorageFull)
    # An EIO on a disk with room is a real I/O error, not a full disk.
    if shutil.disk_usage(path).free > 1 << 30:
        eio = storage_failure(lmdb.Error("mdb_txn_commit: Input/output error"), path, "commit failed")
        assert type(eio) is StorageError and not is_read_only(eio)
