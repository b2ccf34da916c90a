"""Store faults for the chaos harness: a full disk and a read-only data directory.

``StoreFaults(data_dir)`` puts the run's data directory on a small loop-mounted ext4
filesystem of its own (root only; ``available`` is False elsewhere, and the faults are then
never drawn), so that:

- ``disk_full`` fills that filesystem with a ballast file for a few seconds, then deletes it.
  Clients see ``StorageFull`` (retried, as a client must) and nothing committed is lost.
- ``read_only`` bind-mounts the directory read-only onto itself for a few seconds and kills a
  shard meanwhile: its restart finds the store unwritable and must wait without the
  supervisor exceeding its restart intensity. (Root ignores ``chmod``; a plain ``remount,ro``
  is refused while files are open for writing; the self-bind affects every file opened after
  it, as a ``chmod`` would for a non-root owner.)

Clock jumps are in ``chaos_faults_clock`` (``--clock-faults``): they step the machine's clock.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["StoreFaults", "STORE_KINDS", "STORE_WEIGHTS", "hold_watching", "open_reader"]

STORE_KINDS = ("disk_full", "read_only")
STORE_WEIGHTS = (6, 6)
DISK_MB = 512
"""The data directory's filesystem: ample for a run, small enough to fill in a moment."""


READERS = threading.Lock()
"""Held while the data directory is mounted read-only. The harness's own readers open the
store only under it: LMDB opened read-only on a read-only filesystem cannot register in the
reader table, so the shards (still writing through their earlier handles) may reuse the pages
it reads, and it reads torn trees (seen: epochs "vanishing", an LMDB assertion)."""


@contextlib.contextmanager
def open_reader(data_dir: Path | str) -> Iterator[Any]:
    """A read-only ``LmdbStore`` on ``data_dir`` for the block, which holds ``READERS``
    throughout: no harness read is open while the directory is mounted read-only (an open
    before the remount read after it tore a tree: ``MDB_PAGE_NOTFOUND``). A
    ``postgresql://`` URL (the ``--postgres`` mode) opens a read-only ``PgStore`` instead."""
    from weft_actors.store import LmdbStore, is_store_url, open_store

    if is_store_url(str(data_dir)):
        pg = open_store(str(data_dir), readonly=True)
        try:
            yield pg
        finally:
            pg.close()
        return
    with READERS:
        store = LmdbStore(str(data_dir), readonly=True)
        try:
            yield store
        finally:
            store.close()


def _run(*command: str) -> bool:
    return subprocess.run(list(command), capture_output=True).returncode == 0


class StoreFaults:
    kinds = STORE_KINDS
    weights = STORE_WEIGHTS
    forced: tuple[str, ...] = ()
    exclusive = False
    """Drawn among the other faults, not alone (``chaos_postgres`` runs its own alone)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.available = False
        self._image: str | None = None
        self._bound = False
        if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd, self._image = tempfile.mkstemp(prefix="weft-chaos-disk-", suffix=".img")
        os.ftruncate(fd, DISK_MB << 20)
        os.close(fd)
        if _run("mkfs.ext4", "-q", "-F", "-m", "0", self._image) and _run("mount", "-o", "loop", self._image, str(self.data_dir)):
            self.available = True
        else:
            os.unlink(self._image)
            self._image = None

    def close(self) -> None:
        """Undo every mount (call once the run's processes are gone)."""
        self._unbind()
        if self._image is not None:
            _run("umount", str(self.data_dir))
            os.unlink(self._image)
            self._image = None
        self.available = False

    def run(self, kind: str, rng: random.Random, pids: list[int], supervisor: Any, count: Callable[[str], None], violation: Callable[[str], None]) -> None:
        if kind == "disk_full":
            self._disk_full(rng.uniform(1.0, 4.0), supervisor, violation)
            count("disk_fulls")
        elif kind == "read_only":
            self._read_only(rng.uniform(2.0, 5.0), rng, pids, supervisor, violation)
            count("read_onlys")

    def _disk_full(self, seconds: float, supervisor: Any, violation: Callable[[str], None]) -> None:
        ballast = self.data_dir / "ballast"
        free = shutil.disk_usage(self.data_dir).free
        try:
            with open(ballast, "wb") as file:
                try:
                    os.posix_fallocate(file.fileno(), 0, max(free - (64 << 10), 1))
                except OSError:
                    pass  # as full as it gets
            self._hold(seconds, supervisor, violation, "disk full")
        finally:
            ballast.unlink(missing_ok=True)

    def _read_only(self, seconds: float, rng: random.Random, pids: list[int], supervisor: Any, violation: Callable[[str], None]) -> None:
        path = str(self.data_dir)
        if not _run("mount", "--bind", path, path):
            return
        self._bound = True
        READERS.acquire()
        try:
            if not _run("mount", "-o", "remount,bind,ro", path):
                return
            if len(pids) >= 2:
                os.kill(rng.choice(pids), signal.SIGKILL)  # its restart finds the store read-only
            self._hold(seconds, supervisor, violation, "read-only store")
        finally:
            self._unbind()
            READERS.release()

    def _unbind(self) -> None:
        if self._bound:
            # A process that opened a file through the read-only bind keeps it busy for a
            # moment (a shard restarted into it is on its way out): retry, then detach it
            # lazily, so that nothing opened from now on sees it read-only.
            path = str(self.data_dir)
            for _ in range(30):
                if _run("umount", path):
                    break
                time.sleep(0.1)
            else:
                _run("umount", "-l", path)
            self._bound = False

    def _hold(self, seconds: float, supervisor: Any, violation: Callable[[str], None], what: str) -> None:
        hold_watching(seconds, supervisor, violation, what)


def hold_watching(seconds: float, supervisor: Any, violation: Callable[[str], None], what: str) -> bool:
    """Wait ``seconds`` while a fault holds; False (and a violation) if the supervisor exits."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        process = supervisor.process
        if process is not None and process.poll() is not None:
            violation(f"the supervisor exited {process.returncode} during a {what}")
            return False
        time.sleep(0.1)
    return True
