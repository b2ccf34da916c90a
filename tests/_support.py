"""Shared test helpers (importable as `_support`: pyproject puts tests/ on the path)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator


def run(coro: Awaitable[Any]) -> Any:
    """Run one coroutine on a fresh event loop (no pytest-asyncio dependency)."""
    return asyncio.run(coro)  # type: ignore[arg-type]


async def eventually(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Wait until ``predicate()`` is truthy, failing after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@contextlib.contextmanager
def hold_write_lock(env: Any) -> Iterator[Callable[..., None]]:
    """Hold LMDB ``env``'s write lock from another thread for the block, as a process stalled
    inside a transaction would. Yields ``wait_blocked(thread)``, which returns once ``thread``
    waits for that lock (its innermost frame is at one of ``LmdbStore``'s
    ``begin(write=True)`` calls)."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        txn = env.begin(write=True)
        taken.set()
        release.wait(30)
        txn.abort()

    holder = threading.Thread(target=hold, name="write-lock-holder", daemon=True)
    holder.start()
    assert taken.wait(10), "could not take the write lock"
    try:
        yield wait_blocked_on_lock
    finally:
        release.set()
        holder.join(10)


def _begin_lines() -> tuple[str, set[tuple[str, int]]]:
    """The store module's file, and (function, line) of each of its ``begin(write=True)``."""
    from weft_actors.store import _store

    lines, _ = inspect.getsourcelines(_store)
    found = set()
    function = ""
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("def "):
            function = stripped[4:].split("(")[0]
        if "self.env.begin(write=True)" in line:
            found.add((function, number))
    return _store.__file__, found


def asleep_on_lock(thread: threading.Thread, timeout: float = 10.0) -> None:
    """Return once ``thread`` sleeps in the kernel on a futex (a lock it waits for), not
    merely on its way to it: waiters of one futex are woken in the order they slept."""
    path = f"/proc/self/task/{thread.native_id}/wchan"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                if "futex" in f.read():
                    return
        except OSError:
            pass
        time.sleep(0.001)
    raise AssertionError(f"{thread.name} never slept on a lock")


def wait_blocked_on_lock(thread: threading.Thread, timeout: float = 10.0) -> None:
    filename, where = _begin_lines()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)  # type: ignore[arg-type]
        if frame is not None and frame.f_code.co_filename == filename and (frame.f_code.co_name, frame.f_lineno) in where:
            return
        time.sleep(0.005)
    raise AssertionError(f"{thread.name} never blocked on the write lock")


@contextlib.contextmanager
def loop_mounted_disk(root: Path, megabytes: int) -> Iterator[Path]:
    """A small ext4 filesystem of its own, mounted at ``root / "disk"`` (root only; the test
    is skipped where mounting is not permitted): a disk that can really fill up."""
    import pytest

    image, mountpoint = root / "disk.img", root / "disk"
    mountpoint.mkdir()
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("no mkfs.ext4")
    with open(image, "wb") as file:
        file.truncate(megabytes << 20)
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot loop-mount a filesystem here: {exc}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
