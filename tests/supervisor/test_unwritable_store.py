"""A read-only data directory, with a real supervisor and real shards.

At start the supervisor refuses it (exit 1, saying why) before it spawns a shard. While it
runs, a shard restarting finds it unwritable: it exits saying so, and the supervisor tries
it again every few seconds without counting a crash, so the restart intensity is never
exceeded (the original code crash-looped it and exited 3, taking the healthy shard along);
the healthy shard keeps serving, and the shard starts once the directory is writable again.

How the directory is made read-only here: the tests run as root, so ``chmod`` stops nothing.
A read-only *bind mount of the directory onto itself* (``mount --bind D D`` then
``mount -o remount,bind,ro D``) does: files opened from then on through ``D`` are on a
read-only mount (``EROFS``), while the descriptors the running processes opened before go on
working, as they would after a ``chmod`` by a non-root owner. (A plain ``remount,ro`` of a
filesystem is refused with ``EBUSY`` while any file on it is open for writing.) ``umount D``
makes it writable again. Skipped where mounting is not permitted.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from _processes import RunningSupervisor, wait_until
from _support import loop_mounted_disk
from weft_actors import Client

APP = "supervisor_app"
TIMING = ("--heartbeat", "0.5", "--ttl", "1.5", "--restart-limit", "3", "--restart-window", "30")


class ReadOnly:
    """Makes ``path`` read-only (``on``) and writable again (``off``); always undone."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.mounted = False

    def on(self) -> None:
        subprocess.run(["mount", "--bind", self.path, self.path], check=True, capture_output=True)
        self.mounted = True
        subprocess.run(["mount", "-o", "remount,bind,ro", self.path], check=True, capture_output=True)

    def off(self) -> None:
        if self.mounted:
            subprocess.run(["umount", self.path], check=True, capture_output=True)
            self.mounted = False


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[ReadOnly]:
    data = tmp_path / "data"
    data.mkdir()
    switch = ReadOnly(data)
    try:
        switch.on()
        probe = data / "probe"
        try:
            probe.touch()
        except OSError:
            pass
        else:
            pytest.skip("a read-only bind mount does not stop writes here")
    except (OSError, subprocess.CalledProcessError) as exc:
        switch.off() if switch.mounted else None
        pytest.skip(f"cannot mount here: {exc}")
    switch.off()
    try:
        yield switch
    finally:
        switch.off()


@pytest.mark.timeout(60)
def test_the_supervisor_refuses_a_read_only_store_before_it_spawns_a_shard(tmp_path, read_only):
    with RunningSupervisor(tmp_path / "data", shards=2, app=APP, args=TIMING) as sup:
        sup.terminate()  # a store to open: created once, while writable
    read_only.on()
    sup = RunningSupervisor(tmp_path / "data", shards=2, app=APP, args=TIMING)
    try:
        sup.start(wait_ready=False)
        assert sup.wait(30) == 1
        time.sleep(0.1)  # the stderr reader thread drains the pipe
        text = sup.log_text()
        assert "not writable" in text and "Read-only file system" in text, text
        assert "shard 0" not in text and "Traceback" not in text, text
    finally:
        sup.kill()


@pytest.mark.timeout(90)
def test_a_shard_restarting_on_a_read_only_store_waits_for_it_and_the_others_serve(tmp_path, read_only):
    with RunningSupervisor(tmp_path / "data", shards=2, app=APP, args=TIMING) as sup, Client(sup.endpoint, timeout=15) as client:
        healthy, victim = sup.shard_pids
        first = client.start("slow_steps", 1, 0.0, id="before")
        assert first.result(timeout=15) is not None

        read_only.on()
        os.kill(victim, signal.SIGKILL)
        refused = lambda: sup.log_text().count("cannot start: the store at") >= 2  # noqa: E731
        wait_until(lambda: refused() or sup.process.poll() is not None, 30, "two refused starts")
        deadline = time.monotonic() + 8.0  # the original code exceeded the restart intensity here
        while time.monotonic() < deadline:
            assert sup.process.poll() is None, sup.log_text()[-3000:]
            time.sleep(0.2)
        assert "restart intensity exceeded" not in sup.log_text()
        assert sup.log_text().count("Traceback") == 0, sup.log_text()[-3000:]
        stats = client.stats()
        waiting = [shard for shard in stats["shards"] if not shard["alive"]]
        assert len(waiting) == 1 and waiting[0].get("waiting_for") == "a writable store", stats
        assert first.describe()["status"] == "completed"  # reads are served

        read_only.off()
        wait_until(lambda: all(shard["alive"] for shard in client.stats()["shards"]), 30, "both shards ready again")
        later = [client.start("slow_steps", 1, 0.0, id=f"after-{i}") for i in range(6)]
        for handle in later:
            assert handle.result(timeout=15) is not None
        assert first.describe()["status"] == "completed"
        assert sup.terminate() == 0


def _fill(disk: Path) -> Path:
    """Leave ``disk`` with no free inode and no free block (so even creating an empty file
    fails with ENOSPC); the returned directory holds the ballast. Inodes go first, while there
    are blocks for their directory entries: filling the blocks alone would leave inodes, and
    whether the store's own file still has free pages inside depends on its history, so the
    store's next growth cannot be relied on to show the full disk."""
    ballast = disk / "ballast"
    ballast.mkdir()
    with open(ballast / "blocks", "wb", buffering=0) as blocks:
        for d in range(100_000):
            folder = ballast / f"inodes-{d}"
            try:
                folder.mkdir()
                for i in range(256):
                    (folder / f"{i}").touch()
            except OSError:
                break
        try:
            os.posix_fallocate(blocks.fileno(), 0, shutil.disk_usage(disk).free)
        except OSError:
            pass
        for _ in range(1_000_000):
            try:
                blocks.write(b"x" * 4096)
                os.fsync(blocks.fileno())
            except OSError:
                break
    return ballast


@pytest.mark.timeout(120)
def test_shards_restarting_on_a_full_disk_wait_for_room_without_crashing(tmp_path):
    """Seen in a chaos run: a shard restarting while the disk was full could not create its
    engine's lock file (``StorageFull``) and crashed (exit 1), counted against the restart
    intensity, and so did the healthy one once its own lease ran out. A full disk is waited
    for like a read-only store, and every shard is back once there is room."""
    with loop_mounted_disk(tmp_path, 32) as disk, RunningSupervisor(disk / "data", shards=2, app=APP, args=TIMING) as sup, Client(sup.endpoint, timeout=15) as client:
        victim = sup.shard_pids[1]
        first = client.start("slow_steps", 1, 0.0, id="before")
        assert first.result(timeout=15) is not None

        ballast = _fill(disk)
        os.kill(victim, signal.SIGKILL)
        refused = lambda: sup.log_text().count("cannot start: the disk holding the store") >= 2  # noqa: E731
        wait_until(lambda: refused() or sup.process.poll() is not None, 40, "two refused starts")
        deadline = time.monotonic() + 8.0  # the original code exceeded the restart intensity here
        while time.monotonic() < deadline:
            assert sup.process.poll() is None, sup.log_text()[-3000:]
            time.sleep(0.2)
        assert "restart intensity exceeded" not in sup.log_text()
        assert "crashed" not in sup.log_text(), sup.log_text()[-3000:]
        # The healthy shard's engine cannot renew its lease either: past its ttl it stands
        # down (it may no longer act as owner) and waits with the other one.
        stats = client.stats()
        assert any(shard.get("waiting_for") == "a writable store" for shard in stats["shards"]), stats

        shutil.rmtree(ballast)
        wait_until(lambda: all(shard["alive"] for shard in client.stats()["shards"]), 40, "both shards ready again")
        later = [client.start("slow_steps", 1, 0.0, id=f"after-{i}") for i in range(6)]
        for handle in later:
            assert handle.result(timeout=15) is not None
        assert first.describe()["status"] == "completed"
        assert sup.terminate() == 0


@pytest.mark.timeout(60)
def test_probing_peers_on_a_read_only_directory_neither_raises_nor_judges_a_live_one_dead(read_only, tmp_path):
    """The reclaim pass probes each peer's lock file; on a read-only directory that open must
    not fail the whole maintenance pass (it raised EROFS from ``O_RDWR``): a held lock is
    still alive, a free one still proves its process gone."""
    import sys

    from weft_actors.store import LmdbStore

    data = tmp_path / "data"
    live_id, gone_id = "a" * 32, "b" * 32
    live = LmdbStore(str(data))
    live.register_engine(live_id, heartbeat=0.5, ttl=1.5)
    subprocess.run(  # a real process that registers and exits: its lock file is left free
        [sys.executable, "-c", f"from weft_actors.store import LmdbStore; LmdbStore({str(data)!r}).register_engine({gone_id!r}, heartbeat=0.5, ttl=1.5)"],
        check=True, timeout=30,
    )
    prober = LmdbStore(str(data))
    read_only.on()
    try:
        assert prober.process_gone(live_id) is False
        assert prober.process_gone(gone_id) is True
        assert prober.process_gone("c" * 32) is False  # no lock file: unknown, never dead
    finally:
        read_only.off()
        prober.close()
        live.close()
